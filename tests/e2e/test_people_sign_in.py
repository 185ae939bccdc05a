"""Issue 21, first part: people sign in with the company identity provider (a real Keycloak,
tests/e2e/keycloak.py) and act with the scope of the keys that name them or their groups.

- alice (group team-a) reaches server alpha only, bob (team-b) beta only, in both eras and on
  REST; the upstreams never see the person's token;
- the gateway's 401 without a token points at its protected-resource metadata (RFC 9728), and
  that document names Keycloak as the authorization server: where an MCP client starts;
- refusals: a token for another audience, a tampered one and one from an unknown issuer are
  401 with the reason logged (never the token); carol, signed in but in no granted group, 403
  `insufficient_scope`;
- a gateway key keeps working beside it.

The OAuth authorization-code flow of the SDK clients, brokered mode and token exchange are the
next parts of the issue (not here yet).
"""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from harness import MODERN_VERSION, RawMcp, wait_until, call_result_value, gateway_config, key, new_secret, rest_list, rest_tool_names, server, start_rust_upstream
from keycloak import start as start_keycloak

AUDIENCE = "switchboard-gateway"


@pytest.fixture(scope="module")
def keycloak(tmp_path_factory):
    kc = start_keycloak(tmp_path_factory.mktemp("keycloak"))
    yield kc
    kc.stop()


@pytest.fixture
def signed_in(procs, gateways, keycloak):
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
        {"name": "corp", "issuer": keycloak.issuer, "audiences": [AUDIENCE], "scopes": ["openid", "profile"]}
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
        "unknown issuer": (_self_signed("https://login.evil.example/realms/x"), 401, "unknown gateway key"),
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
    metrics = httpx.get(f"{gw.url}/metrics", timeout=15).text
    for outcome in ("wrong_audience", "bad_signature", "no_grant"):
        line = f'switchboard_gateway_sign_ins_total{{issuer="{keycloak.issuer}",outcome="{outcome}"}} 1'
        assert line in metrics, f"{line} missing in:\n" + "\n".join(m for m in metrics.splitlines() if "sign_ins" in m)
    logs = gw.logs()
    assert "the access token is not for this gateway" in logs and "signature does not verify" in logs
    for token, _, _ in cases.values():
        assert token not in logs, "a token reached the log"


def test_a_gateway_key_keeps_working_beside_people(signed_in):
    gw, _, _, plain_key = signed_in
    names = _names(gw, plain_key, MODERN_VERSION)
    assert any(n.startswith("alpha__") for n in names) and any(n.startswith("beta__") for n in names)


def test_zz_keycloak_down_keeps_held_keys_working_and_keys_never_depend_on_it(signed_in, keycloak, gateways):
    """Last in this module: it stops the module's Keycloak."""
    gw, _, _, plain_key = signed_in
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

