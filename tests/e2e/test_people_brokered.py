"""Issue 21, acceptance 4: brokered mode against a real Keycloak whose anonymous dynamic
registration is refused (the realm as imported, with Keycloak's default registration policies):

- the Python SDK's OAuth client, given the gateway's URL, registers at the gateway, the person
  logs in at Keycloak, the client gets a token of the gateway's own and calls tools with the
  scope of the person's groups (alice: alpha only; bob: beta only);
- two replicas behind one public URL share the session key and a Redis (the shared store, for
  single use alone): the login starts on replica A (its authorization endpoint) and completes on
  replica B (the callback), and a refresh on B gives a token A accepts;
- single use across the replicas (issue 37, acceptance 4): a code redeemed on B is refused on A;
  a refresh token spent on B and presented again on A is refused and ends its grant (the token
  the refresh on B gave is refused after);
- every login asks the person first (a consent page naming the client and where the sign-in
  goes): approved it goes on, denied the client hears access_denied, and an answer posted
  without the cookie of the browser that was asked is refused; the provider's answer arriving
  in another browser than the one that started the login (an approved link sent to a victim)
  is refused;
- refusals: a redirect URI that was not registered (answered at the gateway, never redirected
  to), a registration with an http redirect URI off loopback, a client_id another gateway
  sealed, a code redeemed without its PKCE verifier, a refresh by another client;
- upstreams never see the gateway's token or Keycloak's;
- token exchange from the provider's token the gateway holds; a Client ID Metadata Document in
  place of registration.
"""

from __future__ import annotations

import json
import secrets as pysecrets

import httpx
import pytest
import yaml
from harness import RoundRobinBalancer, gateway_config, key, new_secret, run_async, sdk_client, sdk_list_all_tools, sdk_oauth, sdk_text, server, start_rust_upstream, wait_until, write_config
from keycloak import GATEWAY_AUDIENCE

REDIRECT_URI = "http://127.0.0.1:33419/callback"  # never listened on: the test reads the redirect


@pytest.fixture
def replicas(procs, gateways, keycloak, redis):
    """Replicas A and B of one gateway behind a round-robin balancer whose URL is the public
    URL, sharing a Redis; alpha is team-a's, beta team-b's."""
    alpha = start_rust_upstream(procs, "alpha")
    beta = start_rust_upstream(procs, "beta")
    lb = RoundRobinBalancer([]).start()
    config = gateway_config(
        [server("alpha", alpha.mcp_url), server("beta", beta.mcp_url)],
        [
            key("team-a", new_secret("team-a"), ["alpha"], people=[{"provider": "corp", "groups": ["team-a"]}]),
            key("team-b", new_secret("team-b"), ["beta"], people=[{"provider": "corp", "groups": ["team-b"]}]),
        ],
        publicUrl=lb.url,
        store=redis.store_settings(),
    )
    config["identityProviders"] = [
        {
            "name": "corp",
            "issuer": keycloak.issuer,
            "audiences": [GATEWAY_AUDIENCE],
            "brokered": {"clientId": "switchboard-gateway", "clientSecret": keycloak.client_secrets["switchboard-gateway"]},
        }
    ]
    path = gateways.config_path("brokered")
    write_config(path, config)
    a = gateways.start(config_path=path, name="replica-a")
    b = gateways.start(config_path=path, name="replica-b")
    # A replica reads the provider's discovery document after it starts serving; until then its
    # /oauth/authorize answers `temporarily_unavailable` (as it should). Wait for both.
    for gw in (a, b):
        wait_until(lambda gw=gw: "identity provider keys loaded provider=default/corp" in gw.logs(), 30,
                   what=f"{gw.proc.name} to load the identity provider's discovery document")  # fmt: skip
    lb.set_backends([a.url, b.url])
    yield lb, a, b, alpha, beta
    lb.stop()


def sign_in(keycloak, lb, a, b, person: str):
    """The SDK's OAuth client for the public URL; the browser's authorization request lands on
    replica A and Keycloak's redirect back on replica B."""
    def route(url: str) -> str:
        if url.startswith((f"{lb.url}/oauth/authorize", f"{lb.url}/oauth/consent")):
            return a.url + url[len(lb.url):]
        if url.startswith(f"{lb.url}/oauth/callback"):
            return b.url + url[len(lb.url):]
        raise AssertionError(f"the browser was sent somewhere unexpected: {url[:120]}")

    return sdk_oauth(f"{lb.url}/mcp", "switchboard-e2e-brokered", REDIRECT_URI, lambda u: keycloak.log_in_through(u, person, route))


def test_keycloak_refuses_anonymous_registration(keycloak):
    """The precondition brokered mode is for: this Keycloak does not let MCP clients register."""
    reply = httpx.post(
        f"{keycloak.issuer}/clients-registrations/openid-connect",
        json={"redirect_uris": [REDIRECT_URI], "client_name": "x"},
        timeout=15,
    )
    assert reply.status_code in (401, 403), reply.text


def test_the_sdk_signs_people_in_through_the_gateway_across_replicas(replicas, keycloak):
    lb, a, b, alpha, beta = replicas
    presented = []
    for person, (own, other) in {"alice": ("alpha", "beta"), "bob": ("beta", "alpha")}.items():
        provider, storage, seen = sign_in(keycloak, lb, a, b, person)
        record: list = []

        async def session():
            async with sdk_client(f"{lb.url}/mcp", None, "2026-07-28", auth=provider, record=record) as client:
                names = sorted(t.name for t in await sdk_list_all_tools(client))
                result = await client.call_tool(f"{own}__add", {"a": 2, "b": 3})
                try:
                    await client.call_tool(f"{other}__add", {"a": 2, "b": 3})
                except Exception as refused:
                    return names, result, str(refused)
                return names, result, None

        names, result, denied = run_async(session, timeout=120)
        assert names and all(n.startswith(f"{own}__") for n in names), (person, names)
        assert sdk_text(result) == "5"
        assert denied is not None and f"{other}__add" in denied, denied
        urls = [u for _, u, _, _ in record]
        assert f"{lb.url}/.well-known/oauth-authorization-server" in urls, urls
        assert f"{lb.url}/oauth/register" in urls and f"{lb.url}/oauth/token" in urls, urls
        assert not any(u.startswith(keycloak.base) for u in urls), "the client talked to Keycloak itself"
        assert seen["authorization_url"].startswith(f"{lb.url}/oauth/authorize?") and "code_challenge_method=S256" in seen["authorization_url"]
        assert seen["iss"] == lb.url
        access = storage.tokens.access_token
        assert access.startswith("sbt.") and storage.tokens.refresh_token.startswith("sbr."), "the gateway's own tokens"
        presented.append(access)
    # The login started on A and completed on B.
    assert a.logs().count("brokered login started") == 2 and "brokered login completed" not in a.logs()
    assert b.logs().count("brokered login completed") == 2 and "brokered login started" not in b.logs()
    for upstream in (alpha, beta):
        for request in upstream.recent_requests():
            seen_by_upstream = json.dumps(request)
            assert "sbt." not in seen_by_upstream and "eyJ" not in seen_by_upstream, "a person's token reached an upstream"


def _tools(url: str, token: str) -> httpx.Response:
    return httpx.get(f"{url}/mcp-rest/tools/list", headers={"Authorization": f"Bearer {token}"}, timeout=15)


def test_a_refresh_on_replica_b_gives_a_token_replica_a_takes(replicas, keycloak):
    lb, a, b, *_ = replicas
    provider, storage, _ = sign_in(keycloak, lb, a, b, "alice")

    async def session():
        async with sdk_client(f"{lb.url}/mcp", None, "2026-07-28", auth=provider) as client:
            await client.list_tools()

    run_async(session, timeout=120)
    client_id = storage.client.client_id
    refreshed = httpx.post(
        f"{b.url}/oauth/token",
        data={"grant_type": "refresh_token", "refresh_token": storage.tokens.refresh_token, "client_id": client_id},
        timeout=30,
    )
    assert refreshed.status_code == 200, refreshed.text
    assert refreshed.headers["cache-control"] == "no-store"
    fresh = refreshed.json()
    assert fresh["access_token"] != storage.tokens.access_token and fresh["refresh_token"].startswith("sbr.")
    listed = _tools(a.url, fresh["access_token"])
    assert listed.status_code == 200 and all(t["name"].startswith("alpha__") for t in listed.json()["tools"]), listed.text
    # The same refresh token presented by another client is refused.
    stolen = httpx.post(
        f"{a.url}/oauth/token",
        data={"grant_type": "refresh_token", "refresh_token": storage.tokens.refresh_token, "client_id": "sbc.another"},
        timeout=30,
    )
    assert stolen.status_code == 400 and stolen.json()["error"] == "invalid_grant", stolen.text
    # Spent on B, presented again on A by its own client: refused, and the grant ends with it.
    again = httpx.post(
        f"{a.url}/oauth/token",
        data={"grant_type": "refresh_token", "refresh_token": storage.tokens.refresh_token, "client_id": client_id},
        timeout=30,
    )
    assert again.status_code == 400 and "already used" in again.json()["error_description"], again.text
    after = httpx.post(
        f"{a.url}/oauth/token",
        data={"grant_type": "refresh_token", "refresh_token": fresh["refresh_token"], "client_id": client_id},
        timeout=30,
    )
    assert after.status_code == 400 and "revoked" in after.json()["error_description"], after.text


def test_refusals_at_the_gateways_authorization_server(replicas, keycloak, gateways):
    lb, a, b, *_ = replicas
    registered = httpx.post(f"{a.url}/oauth/register", json={"redirect_uris": [REDIRECT_URI], "client_name": "t"}, timeout=15)
    assert registered.status_code == 201, registered.text
    client_id = registered.json()["client_id"]
    verifier = pysecrets.token_urlsafe(48)
    import base64
    import hashlib

    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    authorize = {
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT_URI, "state": "s1",
        "code_challenge": challenge, "code_challenge_method": "S256",
    }
    # Control: the registered redirect URI gets the consent page, which names the client and
    # where the sign-in goes; approved from this browser, it goes on to Keycloak.
    ok = httpx.get(f"{b.url}/oauth/authorize", params=authorize, timeout=15)
    assert ok.status_code == 200 and "<strong>t</strong>" in ok.text and "<strong>127.0.0.1</strong>" in ok.text, ok.text
    assert ok.headers["x-frame-options"] == "DENY" and "frame-ancestors 'none'" in ok.headers["content-security-policy"]
    same = lambda u: u.replace(lb.url, b.url)  # noqa: E731

    async def answer(page, how, cookies=True):
        async with httpx.AsyncClient(timeout=15) as browser:
            if not cookies:
                # The same page and answer, from a browser without the cookie it was shown with.
                page = httpx.Response(200, text=page.text, headers={"set-cookie": "switchboard_login=forged"})
            return await keycloak.consent(browser, page, same, how)

    approved = run_async(lambda: answer(ok, "approve"), timeout=30)
    assert approved.status_code == 302 and approved.headers["location"].startswith(keycloak.issuer), approved.text
    # A page elsewhere that posts the same answer without this browser's cookie is refused.
    forged = run_async(lambda: answer(ok, "approve", cookies=False), timeout=30)
    assert forged.status_code == 400 and "another" not in forged.headers.get("location", ""), forged.text
    assert "did not come from the browser" in forged.json()["error_description"]
    # Approved in one browser, the provider's answer arriving in another (a victim sent the
    # approved link): refused at the callback, which wants the browser that started the login.
    async def elsewhere():
        async with httpx.AsyncClient(timeout=30, follow_redirects=False) as victim:
            back = await keycloak._login_form(victim, approved.headers["location"], "bob")
            return await victim.get(same(back))

    hijacked = run_async(elsewhere, timeout=60)
    assert hijacked.status_code == 400 and "location" not in hijacked.headers, hijacked.text
    assert "did not come back to the browser that started it" in hijacked.json()["error_description"]
    # Denied: the client hears access_denied with its state.
    denied = run_async(lambda: answer(ok, "deny"), timeout=30)
    assert denied.status_code == 302 and denied.headers["location"].startswith(REDIRECT_URI + "?error=access_denied"), denied.headers
    assert "state=s1" in denied.headers["location"]
    # A redirect URI that was not registered: answered here, never redirected to.
    evil = httpx.get(f"{b.url}/oauth/authorize", params={**authorize, "redirect_uri": "https://evil.example/cb"}, timeout=15)
    assert evil.status_code == 400 and "location" not in evil.headers, evil.text
    assert "not registered" in evil.json()["error_description"]
    # The registered loopback URI on another port is the same redirect (RFC 8252 7.3).
    other_port = httpx.get(f"{b.url}/oauth/authorize", params={**authorize, "redirect_uri": "http://127.0.0.1:40000/callback"}, timeout=15)
    assert other_port.status_code == 200 and "consent" in other_port.text, other_port.text
    # No PKCE: back to the client with the error.
    no_pkce = httpx.get(f"{b.url}/oauth/authorize", params={k: v for k, v in authorize.items() if not k.startswith("code_")}, timeout=15)
    assert no_pkce.status_code == 302 and no_pkce.headers["location"].startswith(REDIRECT_URI + "?error=invalid_request"), no_pkce.headers
    # Registration of an http redirect URI off loopback.
    bad = httpx.post(f"{a.url}/oauth/register", json={"redirect_uris": ["http://app.example/cb"]}, timeout=15)
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_redirect_uri", bad.text
    # A client another gateway (another session key) registered.
    other = gateways.start(
        {**yaml.safe_load(a.config_path.read_text()), "gateway": {"sessionKey": new_secret("other-session"), "publicUrl": lb.url}},
        name="other-gateway",
    )
    foreign = httpx.post(f"{other.url}/oauth/register", json={"redirect_uris": [REDIRECT_URI]}, timeout=15).json()["client_id"]
    refused = httpx.get(f"{a.url}/oauth/authorize", params={**authorize, "client_id": foreign}, timeout=15)
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_client", refused.text
    # A code without its verifier, and a made-up code.
    provider_flow = run_async(lambda: _code_only(keycloak, lb, a, b, client_id, challenge), timeout=60)
    no_verifier = httpx.post(
        f"{a.url}/oauth/token",
        data={"grant_type": "authorization_code", "code": provider_flow, "redirect_uri": REDIRECT_URI, "client_id": client_id, "code_verifier": pysecrets.token_urlsafe(48)},
        timeout=15,
    )
    assert no_verifier.status_code == 400 and "code_verifier" in no_verifier.json()["error_description"], no_verifier.text
    redeemed = httpx.post(
        f"{b.url}/oauth/token",
        data={"grant_type": "authorization_code", "code": provider_flow, "redirect_uri": REDIRECT_URI, "client_id": client_id, "code_verifier": verifier},
        timeout=15,
    )
    assert redeemed.status_code == 200 and redeemed.json()["access_token"].startswith("sbt."), redeemed.text
    # Once, across replicas: the same code on A is refused.
    twice = httpx.post(
        f"{a.url}/oauth/token",
        data={"grant_type": "authorization_code", "code": provider_flow, "redirect_uri": REDIRECT_URI, "client_id": client_id, "code_verifier": verifier},
        timeout=15,
    )
    assert twice.status_code == 400 and "already redeemed" in twice.json()["error_description"], twice.text
    made_up = httpx.post(
        f"{a.url}/oauth/token",
        data={"grant_type": "authorization_code", "code": "sbk.made-up", "redirect_uri": REDIRECT_URI, "client_id": client_id, "code_verifier": verifier},
        timeout=15,
    )
    assert made_up.status_code == 400 and made_up.json()["error"] == "invalid_grant", made_up.text
    # The gateway's token from another gateway is refused here.
    assert _tools(a.url, "sbt.AAAA").status_code == 401


async def _code_only(keycloak, lb, a, b, client_id: str, challenge: str) -> str:
    """A login by hand (not the SDK): the gateway's code for `client_id` and `challenge`."""
    from urllib.parse import urlencode

    params = {
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT_URI, "state": "s2",
        "code_challenge": challenge, "code_challenge_method": "S256",
    }
    url = f"{lb.url}/oauth/authorize?{urlencode(params)}"
    query = await keycloak.log_in_through(url, "alice", lambda u: (b.url if "/oauth/callback" in u else a.url) + u[len(lb.url):])
    assert query.get("state") == "s2" and "code" in query, query
    return query["code"]


def test_token_exchange_on_behalf_of_a_brokered_person_uses_the_token_the_gateway_holds(procs, gateways, keycloak):
    """Brokered mode exchanges the identity provider's token it holds for the person (the
    client only ever has the gateway's token): the API that takes only Keycloak tokens for its
    own audience answers alice, and never sees the gateway's token."""
    from harness import asgi_server
    from test_people_sign_in import WeatherApi

    api = WeatherApi(keycloak)
    with asgi_server(api) as upstream:
        lb = RoundRobinBalancer([]).start()
        exchange = {
            "type": "tokenExchange",
            "tokenUrl": f"{keycloak.issuer}/protocol/openid-connect/token",
            "clientId": "switchboard-gateway",
            "clientSecret": keycloak.client_secrets["switchboard-gateway"],
            "audience": "weather-api",
        }
        config = gateway_config(
            [server("weather", f"{upstream.url}/mcp", auth=exchange)],
            [key("team-a", new_secret("team-a"), ["weather"], people=[{"provider": "corp", "groups": ["team-a"]}])],
            publicUrl=lb.url,
        )
        config["identityProviders"] = [
            {
                "name": "corp", "issuer": keycloak.issuer, "audiences": [GATEWAY_AUDIENCE],
                "brokered": {"clientId": "switchboard-gateway", "clientSecret": keycloak.client_secrets["switchboard-gateway"]},
            }
        ]
        gw = gateways.start(config)
        lb.set_backends([gw.url])
        try:
            provider, storage, _ = sign_in(keycloak, lb, gw, gw, "alice")

            async def session():
                async with sdk_client(f"{lb.url}/mcp", None, "2026-07-28", auth=provider) as client:
                    return await client.call_tool("weather__forecast", {})

            result = run_async(session, timeout=120)
            assert sdk_text(result) == "alice", result
            assert api.bearers and not any("sbt." in b for b in api.bearers), "the gateway's token reached the API"
            assert set(api.subjects.values()) == {"alice"}
        finally:
            lb.stop()


def test_a_client_id_metadata_document_replaces_registration(procs, gateways, keycloak, tmp_path):
    """A client whose client_id is an https URL (a Client ID Metadata Document): the gateway
    reads the document there (a private CA it trusts) and the SDK signs the person in without
    registering. Control: a document whose client_id is not its own URL is refused."""
    from harness import AsgiServer
    from private_ca import PrivateCa

    ca = PrivateCa("cimd")
    cert, key_file = ca.issue("client-docs", ips=("127.0.0.1",)).write(tmp_path, "docs")
    documents: dict[str, dict] = {}

    async def app(scope, receive, send):
        document = documents.get(scope["path"])
        status = 200 if document else 404
        body = json.dumps(document or {}).encode()
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    docs = AsgiServer(app, name="client-docs")
    docs.ssl = {"ssl_certfile": str(cert), "ssl_keyfile": str(key_file)}
    docs.start()
    try:
        alpha = start_rust_upstream(procs, "alpha")
        lb = RoundRobinBalancer([]).start()
        config = gateway_config(
            [server("alpha", alpha.mcp_url)],
            [key("team-a", new_secret("team-a"), ["alpha"], people=[{"provider": "corp", "groups": ["team-a"]}])],
            publicUrl=lb.url,
            upstreamTls={"caBundle": {"file": str(ca.write(tmp_path))}},
        )
        config["identityProviders"] = [
            {
                "name": "corp", "issuer": keycloak.issuer, "audiences": [GATEWAY_AUDIENCE],
                "brokered": {"clientId": "switchboard-gateway", "clientSecret": keycloak.client_secrets["switchboard-gateway"]},
            }
        ]
        gw = gateways.start(config)
        lb.set_backends([gw.url])
        client_url = f"{docs.url}/client.json"
        documents["/client.json"] = {
            "client_id": client_url, "client_name": "cimd client", "redirect_uris": [REDIRECT_URI],
            "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
        provider, storage, seen = sign_in(keycloak, lb, gw, gw, "alice")
        provider.context.client_metadata_url = client_url
        record: list = []

        async def session():
            async with sdk_client(f"{lb.url}/mcp", None, "2026-07-28", auth=provider, record=record) as client:
                return sorted(t.name for t in await sdk_list_all_tools(client))

        names = run_async(session, timeout=120)
        assert names and all(n.startswith("alpha__") for n in names), names
        urls = [u for _, u, _, _ in record]
        assert f"{lb.url}/oauth/register" not in urls, "the client registered although it has a metadata document"
        assert storage.client.client_id == client_url
        assert f"client_id={client_url.replace(':', '%3A').replace('/', '%2F')}" in seen["authorization_url"]
        # Control: a document that names another client_id.
        documents["/liar.json"] = {**documents["/client.json"], "client_id": "https://elsewhere.example/client.json"}
        liar = httpx.get(
            f"{gw.url}/oauth/authorize",
            params={"response_type": "code", "client_id": f"{docs.url}/liar.json", "redirect_uri": REDIRECT_URI,
                    "code_challenge": "x" * 43, "code_challenge_method": "S256"},
            timeout=15,
        )
        assert liar.status_code == 400 and "not the URL it was read from" in liar.json()["error_description"], liar.text
        lb.stop()
    finally:
        docs.stop()
