"""Issue 21, first part: people sign in with the company identity provider (a real Keycloak,
tests/e2e/keycloak.py) and act with the scope of the keys that name them or their groups.

- alice (group team-a) reaches server alpha only, bob (team-b) beta only, in both eras and on
  REST; the upstreams never see the person's token;
- the gateway's 401 without a token points at its protected-resource metadata (RFC 9728), and
  that document names Keycloak as the authorization server: where an MCP client starts;
- refusals: a token for another audience, a tampered one, one from an unknown issuer and an
  expired one are 401 with the reason logged (never the token); carol, signed in but in no granted group, 403
  `insufficient_scope`; a token from an issuer the gateway does not know is refused naming that
  issuer (in the answer, its challenge, the log and the audit record), on a gateway with
  identity providers and on one without;
- a signing key Keycloak has just published (a realm key added through its admin API) works on
  its first use: the gateway fetches the keys again while the call waits;
- a gateway key keeps working beside it.

- token exchange on the person's behalf (RFC 8693): an API that takes only Keycloak tokens for
  its own audience gets one exchanged from the person's token, never the token they presented;
  two people get two tokens, each kept per person.

The SDK clients' OAuth flow is in test_people_oauth_clients.py.
"""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from keycloak import KEYS_REALM
from harness import (
    MODERN_VERSION,
    RawMcp,
    asgi_server,
    call_result_value,
    gateway_config,
    key,
    new_secret,
    read_asgi_request,
    rest_list,
    rest_tool_names,
    server,
    start_rust_upstream,
    wait_until,
)

AUDIENCE = "switchboard-gateway"


@pytest.fixture
def signed_in(procs, gateways, keycloak):
    return _signed_in(procs, gateways, keycloak)


def _signed_in(procs, gateways, keycloak):
    alpha = start_rust_upstream(procs, "alpha")
    beta = start_rust_upstream(procs, "beta")
    plain_key = new_secret("plain")
    config = gateway_config(
        [server("alpha", alpha.mcp_url), server("beta", beta.mcp_url)],
        [
            key("team-a", new_secret("team-a"), ["alpha"], people=[{"provider": "corp", "groups": ["team-a"]}]),
            key("team-b", new_secret("team-b"), ["beta"], people=[{"provider": "corp", "groups": ["team-b"]}]),
            key("robot", plain_key, ["alpha", "beta"]),
        ],
    )
    config["identityProviders"] = [
        # A small clock skew, so that a 2-second token expires within the expired-token test.
        {"name": "corp", "issuer": keycloak.issuer, "audiences": [AUDIENCE], "scopes": ["openid", "profile"], "clockSkew": "1s"}
    ]
    gw = gateways.start(config)
    return gw, alpha, beta, plain_key


def _names(gw, token: str, era: str) -> list[str]:
    with RawMcp(gw.mcp_url(), token, era) as mcp:
        tools, _ = mcp.list_all_tools()
        return sorted(t["name"] for t in tools)


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_people_reach_what_their_groups_keys_reach_and_upstreams_never_see_their_token(signed_in, keycloak, era):
    gw, alpha, beta, _ = signed_in
    alice = keycloak.token("alice")["access_token"]
    bob = keycloak.token("bob")["access_token"]
    alice_tools, bob_tools = _names(gw, alice, era), _names(gw, bob, era)
    assert alice_tools and all(n.startswith("alpha__") for n in alice_tools), alice_tools
    assert bob_tools and all(n.startswith("beta__") for n in bob_tools), bob_tools
    alpha.reset()
    with RawMcp(gw.mcp_url(), alice, era) as mcp:
        reply = mcp.call_tool("alpha__add", {"a": 2, "b": 3})
        assert reply.status == 200, reply.raw
        assert call_result_value(reply.result) == 5
        # Outside her scope, a server does not exist for her (the same answer as a typo).
        denied = mcp.call_tool("beta__add", {"a": 2, "b": 3})
        assert denied.error is not None, denied.raw
    assert alpha.stats()["requests"] >= 1, "the call reached alpha"
    for request in alpha.recent_requests() + beta.recent_requests():
        seen = json.dumps(request)
        assert alice not in seen and bob not in seen, "a person's token reached an upstream"
    # REST, same scope.
    assert all(n.startswith("alpha__") for n in rest_tool_names(rest_list(gw, alice)))


def test_the_401_points_at_the_metadata_and_the_metadata_at_keycloak(signed_in, keycloak):
    gw, *_ = signed_in
    reply = httpx.post(gw.mcp_url(), json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=15)
    assert reply.status_code == 401, reply.text
    challenge = reply.headers["www-authenticate"]
    metadata_url = f"{gw.url}/.well-known/oauth-protected-resource/mcp"
    assert challenge == f'Bearer resource_metadata="{metadata_url}"', challenge
    document = httpx.get(metadata_url, timeout=15).json()
    assert document["resource"] == f"{gw.url}/mcp"
    assert document["authorization_servers"] == [keycloak.issuer]
    assert document["scopes_supported"] == ["openid", "profile"]
    # The single-server endpoint has its own resource.
    single = httpx.get(f"{gw.url}/.well-known/oauth-protected-resource/mcp/alpha", timeout=15).json()
    assert single["resource"] == f"{gw.url}/mcp/alpha"
    # And the authorization server it names is one a client can discover (OIDC discovery;
    # Keycloak serves no RFC 8414 document of its own at the root).
    discovery = httpx.get(f"{keycloak.issuer}/.well-known/openid-configuration", timeout=15).json()
    assert discovery["issuer"] == keycloak.issuer and "S256" in discovery["code_challenge_methods_supported"]


def _list_tools(url: str, token: str) -> httpx.Response:
    """A 2026-07-28 `tools/list` with `token` as the bearer, answered as it comes (refusals too)."""
    return httpx.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {token}", "MCP-Protocol-Version": MODERN_VERSION, "Mcp-Method": "tools/list"},
        timeout=15,
    )


def _tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["groups"] = ["team-a", "team-b"]  # a person widening their own groups
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


def _self_signed(issuer: str) -> str:
    """A well-formed JWT from an issuer the gateway does not know (signature irrelevant)."""
    enc = lambda v: base64.urlsafe_b64encode(json.dumps(v).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc({'alg': 'RS256', 'kid': 'x'})}.{enc({'iss': issuer, 'sub': 'mallory', 'aud': AUDIENCE})}.{enc('sig')}"


def test_refusals_say_why_in_the_log_and_never_log_the_token(signed_in, keycloak):
    gw, *_ = signed_in
    bob = keycloak.token("bob")["access_token"]
    cases = {
        "other audience": (keycloak.token("bob", client_id="other-app")["access_token"], 401, "not for this gateway"),
        "tampered": (_tampered(bob), 401, "signature does not verify"),
        "unknown issuer": (
            _self_signed("https://login.evil.example/realms/x"),
            401,
            "token issuer https://login.evil.example/realms/x is not an identity provider of this gateway",
        ),
        "no grant": (keycloak.token("carol")["access_token"], 403, "granted no scope"),
    }
    for name, (token, status, reason) in cases.items():
        reply = _list_tools(gw.mcp_url(), token)
        assert reply.status_code == status, f"{name}: {reply.status_code} {reply.text}"
        assert reason in reply.text, f"{name}: {reply.text}"
        challenge = reply.headers.get("www-authenticate", "")
        assert "resource_metadata=" in challenge, f"{name}: {challenge!r}"
        if status == 403:
            assert 'error="insufficient_scope"' in challenge, challenge
        else:
            assert 'error="invalid_token"' in challenge, challenge
    # Expired: a token of 2 seconds (client short-lived) serves, then is refused once past its
    # exp and the 1 s clock skew (polled, bounded).
    short = keycloak.token("alice", client_id="short-lived")["access_token"]
    cases["expired"] = (short, 401, "has expired")
    assert _names(gw, short, MODERN_VERSION), "the short-lived token serves while valid"
    refused = wait_until(
        lambda: (r := _list_tools(gw.mcp_url(), short)).status_code == 401 and r, 20, interval=0.5,
        what="the short-lived token to expire",
    )
    assert "has expired" in refused.text and 'error="invalid_token"' in refused.headers["www-authenticate"], refused.text
    metrics = httpx.get(f"{gw.internal_url}/metrics", timeout=15).text
    for outcome in ("wrong_audience", "bad_signature", "no_grant", "expired"):
        line = f'switchboard_gateway_sign_ins_total{{issuer="{keycloak.issuer}",outcome="{outcome}"}} 1'
        assert line in metrics, f"{line} missing in:\n" + "\n".join(m for m in metrics.splitlines() if "sign_ins" in m)
    logs = gw.logs()
    assert "the access token is not for this gateway" in logs and "signature does not verify" in logs
    assert "the access token has expired" in logs
    for token, _, _ in cases.values():
        assert token not in logs, "a token reached the log"


def _audit_record(gw, request_id: str) -> dict:
    def found():
        for line in gw.proc.stdout_path.read_text("utf-8", "replace").splitlines():
            if line.startswith("{") and request_id in line:
                rec = json.loads(line)
                if rec.get("request_id") == request_id:
                    return rec
        return None

    return wait_until(found, 10, what=f"the audit record of {request_id}")


def test_a_token_from_an_unknown_issuer_is_refused_naming_the_issuer(signed_in, keycloak, gateways):
    """Issue 35: a JWT whose `iss` is no identity provider of the gateway is not an "unknown
    gateway key": 401 `invalid_token` naming the issuer, logged at info (never the token), and
    recorded as what it is; a key-only gateway says the same (realm challenge); an opaque
    string stays an unknown key."""
    gw, alpha, _, plain_key = signed_in
    issuer = "https://login.evil.example/realms/x"
    reason = f"token issuer {issuer} is not an identity provider of this gateway"
    token = _self_signed(issuer)
    keys_only = gateways.start(gateway_config([server("alpha", alpha.mcp_url)], [key("robot", plain_key, ["alpha"])]))
    for gateway, challenge in (
        (gw, f'Bearer resource_metadata="{gw.url}/.well-known/oauth-protected-resource/mcp", error="invalid_token", error_description="{reason}"'),
        (keys_only, f'Bearer realm="switchboard", error="invalid_token", error_description="{reason}"'),
    ):
        reply = _list_tools(gateway.mcp_url(), token)
        assert reply.status_code == 401, reply.text
        assert reply.json()["error"]["message"] == reason, reply.text
        assert reply.headers["www-authenticate"] == challenge, reply.headers["www-authenticate"]
        rec = _audit_record(gateway, reply.headers["x-request-id"])
        assert rec["status"] == 401 and rec["outcome"] == "unknown_issuer" and rec["token_issuer"] == issuer, rec
        assert "caller" not in rec, rec
        rest = rest_list(gateway, token)
        assert rest.status_code == 401 and rest.json()["error"] == {"code": "unauthenticated", "message": reason}, rest.text
        logs = gateway.logs()
        assert f"issuer={issuer}" in logs and "is not an identity provider of this gateway" in logs, logs[-2000:]
        assert token not in logs, "a token reached the log"
        # Not a JWT: an unknown key, as before.
        opaque = _list_tools(gateway.mcp_url(), "sk-not-a-key-at-all")
        assert opaque.status_code == 401 and "unknown gateway key" in opaque.text, opaque.text
        assert _audit_record(gateway, opaque.headers["x-request-id"])["outcome"] == "unauthenticated"


def _kid(token: str) -> str:
    header = token.split(".")[0]
    return json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))["kid"]


def test_a_key_keycloak_has_just_published_works_on_its_first_use(procs, gateways, keycloak):
    """Issue 35: the realm gets a new signing key (an `rsa-generated` key provider of a higher
    priority, through Keycloak's admin API, as an administrator rotates keys); Keycloak signs
    the next token with it. The gateway holds only the keys it fetched before: the first call
    with the new token waits for the refetch its unknown key id asks for and succeeds, in both
    eras and on REST. In a realm of its own (KEYS_REALM): every later token of the realm is
    signed with the new key, and other tests share the run's Keycloak."""
    keycloak = keycloak.in_realm(KEYS_REALM)
    gw, *_ = _signed_in(procs, gateways, keycloak)
    before = keycloak.token("alice")["access_token"]
    assert _names(gw, before, MODERN_VERSION), "the gateway serves alice with the keys it holds"
    realm = keycloak.admin("GET", "").json()
    keycloak.admin(
        "POST",
        "/components",
        json={
            "name": "rotated-rs256",
            "providerId": "rsa-generated",
            "providerType": "org.keycloak.keys.KeyProvider",
            "parentId": realm["id"],
            "config": {"priority": ["1000"], "keySize": ["2048"], "active": ["true"], "enabled": ["true"], "algorithm": ["RS256"]},
        },
    )
    published = {k["kid"] for k in httpx.get(f"{keycloak.issuer}/protocol/openid-connect/certs", timeout=15).json()["keys"]}
    tokens = {era: keycloak.token("alice")["access_token"] for era in ("legacy", MODERN_VERSION, "rest")}
    for token in tokens.values():
        assert _kid(token) != _kid(before) and _kid(token) in published, "Keycloak signs with the new key"
    for era in ("legacy", MODERN_VERSION):
        with RawMcp(gw.mcp_url(), tokens[era], era) as mcp:
            reply = mcp.call_tool("alpha__add", {"a": 2, "b": 3})
            assert reply.status == 200, f"{era}: HTTP {reply.status} {reply.raw[:500]!r}"
            assert call_result_value(reply.result) == 5
    assert all(n.startswith("alpha__") for n in rest_tool_names(rest_list(gw, tokens["rest"])))
    assert "identity provider keys loaded" in gw.logs()
    # The old key still verifies what it signed (Keycloak still publishes it).
    assert _names(gw, before, MODERN_VERSION)


def test_a_gateway_key_keeps_working_beside_people(signed_in):
    gw, _, _, plain_key = signed_in
    names = _names(gw, plain_key, MODERN_VERSION)
    assert any(n.startswith("alpha__") for n in names) and any(n.startswith("beta__") for n in names)


def test_the_llm_endpoints_take_a_persons_token_and_say_where_to_get_one(procs, gateways, keycloak):
    """/v1/messages where people sign in: no credential is a 401 pointing at the LLM endpoints'
    metadata; alice's token as the API key reaches the model her group's key grants (the
    Anthropic SDK); carol, granted nothing, gets 403 insufficient_scope in Anthropic's shape;
    the provider sees the gateway's provider key, never a person's token."""
    import anthropic
    from llm_harness import ANTHROPIC_VERSION, model, start_provider

    provider = start_provider(procs)
    config = gateway_config(
        [],
        [key("team-a", new_secret("team-a"), models=["claude"], people=[{"provider": "corp", "groups": ["team-a"]}])],
    )
    config["models"] = [model("claude", "anthropic", provider.url, provider.api_key, modelNames=["claude-test"])]
    config["identityProviders"] = [{"name": "corp", "issuer": keycloak.issuer, "audiences": [AUDIENCE]}]
    gw = gateways.start(config)
    body = {"model": "claude-test", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
    bare = httpx.post(f"{gw.url}/v1/messages", json=body, headers={"anthropic-version": ANTHROPIC_VERSION}, timeout=15)
    assert bare.status_code == 401 and bare.json()["error"]["type"] == "authentication_error", bare.text
    metadata_url = f"{gw.url}/.well-known/oauth-protected-resource/v1"
    assert bare.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url}"'
    document = httpx.get(metadata_url, timeout=15).json()
    assert document["resource"] == f"{gw.url}/v1" and document["authorization_servers"] == [keycloak.issuer]
    provider.script({"respond": {"content": [{"type": "text", "text": "hello alice"}]}})
    alice = keycloak.token("alice")["access_token"]
    answer = anthropic.Anthropic(base_url=gw.url, api_key=alice, max_retries=0).messages.create(**body)
    assert answer.content[0].text == "hello alice"
    carol = keycloak.token("carol")["access_token"]
    refused = httpx.post(f"{gw.url}/v1/messages", json=body, headers={"x-api-key": carol, "anthropic-version": ANTHROPIC_VERSION}, timeout=15)
    assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error", refused.text
    assert 'error="insufficient_scope"' in refused.headers["www-authenticate"]
    calls = provider.model_calls()
    assert len(calls) == 1 and alice not in json.dumps(calls) and carol not in json.dumps(calls)


class WeatherApi:
    """An upstream that accepts only Keycloak's tokens for its own audience (`weather-api`):
    every bearer is introspected at Keycloak with the API's own client credentials, and one that
    is not active or not for this audience gets 401. Its one tool answers who the token names.
    `bearers` records every Authorization it was sent."""

    def __init__(self, keycloak):
        self.keycloak = keycloak
        self.bearers: list[str] = []
        self.subjects: dict[str, str] = {}  # accepted token -> preferred_username

    async def _introspect(self, token: str) -> dict:
        async with httpx.AsyncClient(timeout=15) as http:
            reply = await http.post(
                f"{self.keycloak.issuer}/protocol/openid-connect/token/introspect",
                data={"token": token},
                auth=("weather-api", self.keycloak.client_secrets["weather-api"]),
            )
        return reply.json() if reply.status_code == 200 else {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        request = await read_asgi_request(scope, receive)
        if request is None:
            return
        body, headers = request
        auth = headers.get("authorization", "")
        self.bearers.append(auth)
        token = auth.removeprefix("Bearer ").strip()
        claims = await self._introspect(token) if token else {}
        audience = claims.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if not claims.get("active") or "weather-api" not in audiences:
            return await _reply(send, 401, {"error": "invalid_token"}, [(b"www-authenticate", b'Bearer error="invalid_token"')])
        self.subjects[token] = claims.get("username") or claims.get("preferred_username")
        req = json.loads(body or b"{}")
        if "id" not in req:
            return await _reply(send, 202, None)
        if req.get("method") == "tools/list":
            tool = {"name": "forecast", "description": "who asked", "inputSchema": {"type": "object"}}
            result = {"tools": [tool], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
        elif req.get("method") == "tools/call":
            who = self.subjects[token]
            result = {"content": [{"type": "text", "text": who}], "structuredContent": {"for": who}, "resultType": "complete"}
        else:
            return await _reply(send, 200, {"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32601, "message": "no"}})
        return await _reply(send, 200, {"jsonrpc": "2.0", "id": req["id"], "result": result})


async def _reply(send, status: int, payload, extra_headers=()):
    data = b"" if payload is None else json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json"), *extra_headers]})
    await send({"type": "http.response.body", "body": data})


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_token_exchange_on_the_persons_behalf_reaches_an_api_that_takes_only_its_own_tokens(gateways, keycloak, era):
    api = WeatherApi(keycloak)
    with asgi_server(api) as upstream:
        exchange = {
            "type": "tokenExchange",
            "tokenUrl": f"{keycloak.issuer}/protocol/openid-connect/token",
            "clientId": "switchboard-gateway",
            "clientSecret": keycloak.client_secrets["switchboard-gateway"],
            "audience": "weather-api",
        }
        config = gateway_config(
            [server("weather", f"{upstream.url}/mcp", auth=exchange)],
            [
                key("team-a", new_secret("team-a"), ["weather"], people=[{"provider": "corp", "groups": ["team-a"]}]),
                key("team-b", new_secret("team-b"), ["weather"], people=[{"provider": "corp", "groups": ["team-b"]}]),
            ],
        )
        config["identityProviders"] = [{"name": "corp", "issuer": keycloak.issuer, "audiences": [AUDIENCE]}]
        gw = gateways.start(config)
        presented = {}
        for person in ("alice", "bob", "alice"):
            # A fresh token each time: alice's second one is a refreshed token of hers.
            token = keycloak.token(person)["access_token"]
            presented.setdefault(person, []).append(token)
            with RawMcp(gw.mcp_url(), token, era) as mcp:
                reply = mcp.call_tool("weather__forecast", {})
                assert reply.status == 200, reply.raw
                assert call_result_value(reply.result) == {"for": person}, reply.result
        # The API got tokens for itself only, never one a person presented to the gateway.
        sent = [b.removeprefix("Bearer ") for b in api.bearers]
        assert sent, "nothing reached the API"
        for tokens in presented.values():
            assert not set(tokens) & set(sent), "a token the person presented reached the upstream"
        by_person = {}
        for token, who in api.subjects.items():
            by_person.setdefault(who, set()).add(token)
        counts = {who: len(tokens) for who, tokens in by_person.items()}  # never the tokens
        assert set(by_person) == {"alice", "bob"}, counts
        assert not by_person["alice"] & by_person["bob"], "two people shared an upstream token"
        # Exchanged once per person and kept: alice's refreshed token did not start over.
        assert counts == {"alice": 1, "bob": 1}, counts
        # Control: the same API refuses the token alice presents to the gateway.
        refused = httpx.post(
            f"{upstream.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": f"Bearer {presented['alice'][0]}"}, timeout=15,
        )
        assert refused.status_code == 401, refused.text


def test_keycloak_down_keeps_held_keys_working_and_keys_never_depend_on_it(procs, gateways, private_keycloak):
    """It stops its Keycloak: one of its own, not the run's."""
    keycloak = private_keycloak
    gw, _, _, plain_key = _signed_in(procs, gateways, keycloak)
    assert _names(gw, keycloak.token("alice")["access_token"], MODERN_VERSION), "the gateway holds Keycloak's keys"
    unused = keycloak.token("bob")["access_token"]  # never shown to the gateway before Keycloak stops
    keycloak.stop()
    # A token naming a key id the gateway does not hold makes it fetch Keycloak's keys again,
    # which fails now: the keys it holds must stay.
    _, payload, signature = unused.split(".")
    rotated = base64.urlsafe_b64encode(json.dumps({"alg": "RS256", "kid": "rotated-away"}).encode()).rstrip(b"=").decode()
    refused = _list_tools(gw.mcp_url(), f"{rotated}.{payload}.{signature}")
    assert refused.status_code == 401 and "does not publish" in refused.text, refused.text
    wait_until(lambda: "fetching identity provider keys failed" in gw.logs(), 30, what="the failed refetch")
    assert "keeping_previous_keys=true" in gw.logs()
    # The running gateway verifies a token it has never seen with the keys it holds.
    assert all(n.startswith("beta__") for n in _names(gw, unused, MODERN_VERSION))
    # A gateway that starts while Keycloak is down cannot verify people yet, and says so; its
    # keys work all the same.
    fresh = gateways.start(config_path=gw.config_path)
    reply = _list_tools(fresh.mcp_url(), unused)
    assert reply.status_code == 401 and "signing keys could not be fetched yet" in reply.text, reply.text
    assert _names(fresh, plain_key, MODERN_VERSION), "a key does not depend on the identity provider"

