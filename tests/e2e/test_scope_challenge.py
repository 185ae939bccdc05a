"""Issue 40, item 2: per-tool required scopes and SEP-2350 scope challenges, against the real
Keycloak (tests/e2e/keycloak.py) and the official Python SDK's OAuth client (mcp 2.3.0).

`servers[].tools.requiredScopes` names the OAuth scopes a person's token must hold to call a
tool. A token without them gets HTTP 403 with `WWW-Authenticate: Bearer
error="insufficient_scope", scope="<every scope the call needs>", resource_metadata="<the
endpoint's metadata>"`; the SDK asks Keycloak again for the union of what it had and what the
challenge names, and retries: the call succeeds with no step by the test beyond the person's
second login. The realm's client scope `switchboard-add` (an optional scope every registered
client may ask for, listed in the token's `scope`) is the one the tool requires.

The MCP client is registered in the realm by its admin: Keycloak's dynamic registration gives a
client only the scopes it named when it registered, so a self-registered client could not step up
to a scope named later (README, "Scopes per tool"). The same step-up through the gateway's own
authorization server (brokered mode), where clients register with the gateway, which grants the
scopes it knows.

The controls: the first token (without the scope) calls a tool that requires none, and is
refused the one that does, with the exact challenge; the challenge names the metadata of the
endpoint called (`/mcp/alpha`, REST); a key (no token) is not asked for scopes.
"""

from __future__ import annotations

import json

import httpx
import pytest
from harness import (
    MODERN_VERSION,
    RawMcp,
    RoundRobinBalancer,
    gateway_config,
    key,
    new_secret,
    run_async,
    sdk_client,
    sdk_oauth,
    sdk_text,
    server,
    start_rust_upstream,
)
from keycloak import GATEWAY_AUDIENCE, GATEWAY_SCOPE

REDIRECT_URI = "http://127.0.0.1:33419/callback"  # never listened on: the test reads the redirect
# The scope the tool `add` requires: a Keycloak client scope whose name the token's `scope` lists.
ADD_SCOPE = "switchboard-add"
# The MCP client, registered in the realm ahead of time (see the `keycloak` fixture).
CLIENT_ID = "switchboard-step-up"


@pytest.fixture(scope="module")
def keycloak(keycloak):
    """The run's Keycloak, in its realm whose registration is open, with the client scope the
    tool requires (created once, idempotently: the realm is shared by the run)."""
    kc = keycloak.open_realm()

    def unless_done(method: str, path: str, **kwargs) -> None:
        try:
            kc.admin(method, path, **kwargs)
        except AssertionError as done:  # 409: another worker did it meanwhile
            assert ": 409 " in str(done), done

    scope = {
        "name": ADD_SCOPE,
        "protocol": "openid-connect",
        "attributes": {"include.in.token.scope": "true", "display.on.consent.screen": "false"},
    }
    if not any(c["name"] == ADD_SCOPE for c in kc.admin("GET", "/client-scopes").json()):
        unless_done("POST", "/client-scopes", json=scope)
    scope_id = next(c["id"] for c in kc.admin("GET", "/client-scopes").json() if c["name"] == ADD_SCOPE)
    unless_done("PUT", f"/default-optional-client-scopes/{scope_id}")
    # A client registered by the realm's admin (a new client gets the realm's optional scopes,
    # the one above among them). A client that registers itself gets only the scopes it names
    # then (Keycloak's dynamic registration), so it could not step up to one named later.
    client = {"clientId": CLIENT_ID, "publicClient": True, "standardFlowEnabled": True, "directAccessGrantsEnabled": False,
              "redirectUris": [REDIRECT_URI], "attributes": {"pkce.code.challenge.method": "S256"}}  # fmt: skip
    if not kc.admin("GET", "/clients", params={"clientId": CLIENT_ID}).json():
        unless_done("POST", "/clients", json=client)
    return kc


@pytest.fixture
def gateway(procs, gateways, keycloak):
    alpha = start_rust_upstream(procs, "alpha")
    secret = new_secret("team-a")
    config = gateway_config(
        [server("alpha", alpha.mcp_url, tools={"requiredScopes": {"add": [ADD_SCOPE]}})],
        [key("team-a", secret, ["alpha"], people=[{"provider": "corp", "groups": ["team-a"]}])],
    )
    config["identityProviders"] = [
        {"name": "corp", "issuer": keycloak.issuer, "audiences": [GATEWAY_AUDIENCE], "scopes": [GATEWAY_SCOPE]}
    ]
    gw = gateways.start(config)
    gw.key_secret = secret
    return gw


def challenge_params(value: str) -> dict[str, str]:
    """The parameters of a `Bearer` challenge (quoted values, as the gateway writes them)."""
    import re

    assert value.startswith("Bearer "), value
    return {k: v.replace('\\"', '"') for k, v in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', value)}


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_the_python_sdk_steps_up_after_a_scope_challenge(gateway, keycloak, era):
    url = gateway.mcp_url()
    logins: list[str] = []

    async def log_in(authorization_url: str) -> dict[str, str]:
        logins.append(authorization_url)
        return await keycloak.log_in(authorization_url, "alice")

    from mcp.shared.auth import OAuthClientInformationFull

    provider, storage, _ = sdk_oauth(url, "switchboard-e2e-step-up", REDIRECT_URI, log_in)
    storage.client = OAuthClientInformationFull(
        client_id=CLIENT_ID, redirect_uris=[REDIRECT_URI], token_endpoint_auth_method="none",
        grant_types=["authorization_code", "refresh_token"], response_types=["code"],
    )  # fmt: skip
    record: list = []
    first_token: list[str] = []

    async def session():
        async with sdk_client(url, None, era, auth=provider, record=record) as client:
            # `echo` requires no scope: the first token calls it.
            echoed = await client.call_tool("alpha__echo", {"text": "hi"})
            first_token.append(storage.tokens.access_token)
            # `add` requires the scope the first token lacks: 403, a second login, the retry.
            added = await client.call_tool("alpha__add", {"a": 2, "b": 3})
            return echoed, added

    echoed, added = run_async(session, timeout=180)
    assert sdk_text(echoed) == "hi", echoed
    assert sdk_text(added) == "5", added
    # The challenge the SDK acted on, as the gateway sent it.
    refusals = [(u, h) for _, u, status, h in record if status == 403]
    assert len(refusals) == 1, [(m, u, s) for m, u, s, _ in record]
    params = challenge_params(refusals[0][1]["www-authenticate"])
    assert params["error"] == "insufficient_scope", params
    assert params["scope"].split() == [GATEWAY_SCOPE, ADD_SCOPE], params
    assert params["resource_metadata"] == f"{gateway.url}/.well-known/oauth-protected-resource/mcp", params
    # Two logins: the second asked for the union of the first's scopes and the challenge's.
    assert len(logins) == 2, logins
    asked = [set(httpx.URL(u).params.get("scope", "").split()) for u in logins]
    assert ADD_SCOPE not in asked[0] and {GATEWAY_SCOPE, ADD_SCOPE} <= asked[1], asked
    assert ADD_SCOPE in _claims(storage.tokens.access_token)["scope"].split()
    # The control: the first token, again, by hand: the exact challenge, and `echo` still works.
    raw = RawMcp(url, first_token[0], MODERN_VERSION)
    refused = raw.call_tool("alpha__add", {"a": 1, "b": 1})
    assert refused.status == 403, refused.raw[:300]
    assert refused.headers["www-authenticate"] == (
        f'Bearer error="insufficient_scope", scope="{GATEWAY_SCOPE} {ADD_SCOPE}", '
        f'resource_metadata="{gateway.url}/.well-known/oauth-protected-resource/mcp", '
        f'error_description="tool add needs scope {ADD_SCOPE}"'
    )
    assert refused.error["data"]["scope"] == f"{GATEWAY_SCOPE} {ADD_SCOPE}", refused.raw[:300]
    ok = raw.call_tool("alpha__echo", {"text": "x"})
    assert ok.status == 200 and not ok.result.get("isError"), ok.raw[:300]


def test_a_step_up_through_the_gateways_own_authorization_server(procs, gateways, keycloak):
    """Brokered mode: the gateway is the authorization server (clients register with it), and
    grants the scopes it knows (the provider's `scopes` and those tools require); the person logs
    in at Keycloak behind it each time. The same SDK steps up through it."""
    alpha = start_rust_upstream(procs, "alpha")
    lb = RoundRobinBalancer([]).start()
    try:
        gw = keycloak.brokered_gateway(
            gateways, lb,
            [server("alpha", alpha.mcp_url, tools={"requiredScopes": {"add": [ADD_SCOPE]}})],
            [key("team-a", new_secret("team-a"), ["alpha"], people=[{"provider": "corp", "groups": ["team-a"]}])],
            scopes=["mcp-tools"],
        )  # fmt: skip
        logins: list[str] = []

        async def log_in(authorization_url: str) -> dict[str, str]:
            logins.append(authorization_url)
            return await keycloak.log_in_through(authorization_url, "alice", lambda u: gw.url + u[len(lb.url):])

        provider, storage, _ = sdk_oauth(f"{lb.url}/mcp", "switchboard-e2e-brokered-step-up", REDIRECT_URI, log_in)
        record: list = []

        async def session():
            async with sdk_client(f"{lb.url}/mcp", None, MODERN_VERSION, auth=provider, record=record) as client:
                return await client.call_tool("alpha__echo", {"text": "hi"}), await client.call_tool("alpha__add", {"a": 2, "b": 3})

        echoed, added = run_async(session, timeout=180)
        assert (sdk_text(echoed), sdk_text(added)) == ("hi", "5")
        refusals = [h for _, _, status, h in record if status == 403]
        assert len(refusals) == 1, [(m, u, st) for m, u, st, _ in record]
        assert challenge_params(refusals[0]["www-authenticate"])["scope"].split() == ["mcp-tools", ADD_SCOPE]
        assert len(logins) == 2, logins
        asked = [set(httpx.URL(u).params.get("scope", "").split()) for u in logins]
        assert ADD_SCOPE not in asked[0] and {"mcp-tools", ADD_SCOPE} <= asked[1], asked
        # What the gateway granted: what it knows of what was asked (no `offline_access`).
        assert set(storage.tokens.scope.split()) == {"mcp-tools", ADD_SCOPE}, storage.tokens.scope
    finally:
        lb.stop()


def test_the_challenge_points_at_the_endpoint_called_and_keys_are_not_asked(procs, gateways, keycloak, gateway):
    token = keycloak.token("alice")["access_token"]
    # Keycloak's password grant here asks for `openid` only: no scope the tool requires.
    refused = RawMcp(gateway.mcp_url("alpha"), token, MODERN_VERSION).call_tool("add", {"a": 1, "b": 1})
    assert refused.status == 403, refused.raw[:300]
    params = challenge_params(refused.headers["www-authenticate"])
    assert params["resource_metadata"] == f"{gateway.url}/.well-known/oauth-protected-resource/mcp/alpha", params
    # REST: the same refusal, its code and scope in the body.
    rest = httpx.post(
        f"{gateway.url}/mcp-rest/tools/call",
        headers={"Authorization": f"Bearer {token}"},
        json={"name": "alpha__add", "arguments": {"a": 1, "b": 1}},
        timeout=30,
    )
    assert rest.status_code == 403, rest.text
    assert rest.json()["error"]["code"] == "insufficient_scope", rest.text
    assert challenge_params(rest.headers["www-authenticate"])["resource_metadata"].endswith(
        "/.well-known/oauth-protected-resource/mcp-rest"
    )
    # A key reaches the same tool without any scope: its reach is the key's.
    keyed = RawMcp(gateway.mcp_url(), gateway.key_secret, MODERN_VERSION).call_tool(
        "alpha__add", {"a": 1, "b": 1}
    )
    assert keyed.status == 200 and not keyed.result.get("isError"), keyed.raw[:300]


def _claims(token: str) -> dict:
    import base64

    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
