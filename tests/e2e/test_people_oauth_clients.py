"""Issue 21, acceptance 2: the official MCP SDKs' OAuth clients sign a person in given nothing but
the gateway's URL, against a real Keycloak (tests/e2e/keycloak.py):

401 with `resource_metadata` → the gateway's protected-resource metadata (RFC 9728) → Keycloak's
metadata → dynamic client registration (RFC 7591) → authorization code with PKCE S256 (the test
fills in Keycloak's login form over HTTP, as the person would in the browser the client opens) →
`tools/list` and `tools/call` with the scope of the person's groups: alice (team-a) reaches alpha
only, bob (team-b) beta only. The Python SDK in both eras, the TypeScript SDK in both eras.

The realm is set up the way README tells an admin to: anonymous registration from loopback
clients and a client scope `switchboard` that names the gateway as audience
(`Keycloak.open_registration`), which the gateway's metadata lists in `scopes_supported`.
Control: a gateway whose metadata lists another scope gets, through the same flow, Keycloak
tokens that are not for it, and refuses them.
"""

from __future__ import annotations

import json

import pytest
from harness import MODERN_VERSION, gateway_config, key, new_secret, run_async, sdk_client, sdk_list_all_tools, sdk_oauth, sdk_text, server, start_rust_upstream
from keycloak import GATEWAY_AUDIENCE, GATEWAY_SCOPE, PEOPLE
from ts_client import describe, ts_client, ts_ok

REDIRECT_URI = "http://127.0.0.1:33418/callback"  # never listened on: the test reads the redirect


@pytest.fixture(scope="module")
def keycloak(keycloak):
    """The run's Keycloak, in its realm whose registration is open (keycloak.py, OPEN_REALM)."""
    return keycloak.open_realm()


@pytest.fixture
def gateway(procs, gateways, keycloak):
    return _gateway(procs, gateways, keycloak, [GATEWAY_SCOPE])


def _gateway(procs, gateways, keycloak, scopes: list[str]):
    alpha = start_rust_upstream(procs, "alpha")
    beta = start_rust_upstream(procs, "beta")
    config = gateway_config(
        [server("alpha", alpha.mcp_url), server("beta", beta.mcp_url)],
        [
            key("team-a", new_secret("team-a"), ["alpha"], people=[{"provider": "corp", "groups": ["team-a"]}]),
            key("team-b", new_secret("team-b"), ["beta"], people=[{"provider": "corp", "groups": ["team-b"]}]),
        ],
    )
    config["identityProviders"] = [
        {"name": "corp", "issuer": keycloak.issuer, "audiences": [GATEWAY_AUDIENCE], "scopes": scopes}
    ]
    return gateways.start(config)


def python_sign_in(keycloak, url: str, person: str):
    """The Python SDK's OAuthClientProvider for `url`, logging `person` in at Keycloak."""
    return sdk_oauth(url, "switchboard-e2e-python", REDIRECT_URI, lambda u: keycloak.log_in(u, person))


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_the_python_sdk_signs_people_in_with_nothing_but_the_url(gateway, keycloak, era):
    url = gateway.mcp_url()
    reached = {}
    for person, (own, other) in {"alice": ("alpha", "beta"), "bob": ("beta", "alpha")}.items():
        provider, storage, seen = python_sign_in(keycloak, url, person)
        record: list = []

        async def session():
            async with sdk_client(url, None, era, auth=provider, record=record) as client:
                names = sorted(t.name for t in await sdk_list_all_tools(client))
                result = await client.call_tool(f"{own}__add", {"a": 2, "b": 3})
                try:
                    await client.call_tool(f"{other}__add", {"a": 2, "b": 3})
                except Exception as refused:  # the SDK raises a JSON-RPC error
                    return names, result, str(refused)
                return names, result, None

        names, result, denied = run_async(session, timeout=120)
        reached[person] = names
        assert names and all(n.startswith(f"{own}__") for n in names), (person, names)
        assert sdk_text(result) == "5", result
        # Outside their grant, the other team's tool does not exist for them.
        assert denied is not None and f"{other}__add" in denied, f"{person} reached {other}: {denied}"
        # The flow the SDK went through, as the specification lays it out.
        statuses = [(method, status) for method, _, status, _ in record]
        assert statuses[0][1] == 401, statuses
        urls = [u for _, u, _, _ in record]
        assert f"{gateway.url}/.well-known/oauth-protected-resource/mcp" in urls, urls
        assert any(u.startswith(f"{keycloak.issuer}/clients-registrations/") for u in urls), "registered dynamically"
        assert any(u == f"{keycloak.issuer}/protocol/openid-connect/token" for u in urls), urls
        assert "code_challenge_method=S256" in seen["authorization_url"]
        assert storage.client is not None and storage.tokens is not None
        claims = _claims(storage.tokens.access_token)
        assert GATEWAY_AUDIENCE in _audiences(claims) and claims["groups"] == PEOPLE[person], claims.get("groups")
    assert set(reached["alice"]).isdisjoint(reached["bob"])


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_the_typescript_sdk_signs_people_in_with_nothing_but_the_url(gateway, keycloak, era):
    for person, (own, other) in {"alice": ("alpha", "beta"), "bob": ("beta", "alpha")}.items():
        sign_in = (person, keycloak.passwords[person], REDIRECT_URI)
        out = ts_client(gateway.mcp_url(), None, era, f"{own}__add", {"a": 2, "b": 3}, list_tools=True, oauth=sign_in)
        result = ts_ok(out)
        assert out["oauth"] == {"registered": True, "signedIn": person}, out["oauth"]
        assert out["tools"] and all(n.startswith(f"{own}__") for n in out["tools"]), out["tools"]
        assert result["content"][0]["text"] == "5", result
        assert out["http"][0]["status"] == 401, describe(out)
        assert out["era"] == ("legacy" if era == "legacy" else "modern"), out["era"]
        denied = ts_client(gateway.mcp_url(), None, era, f"{other}__add", {"a": 2, "b": 3}, oauth=sign_in)
        # Signed in all the same, and told the other team's tool does not exist for them.
        assert denied.get("oauth", {}).get("signedIn") == person, describe(denied)
        assert "error" in denied and f"{other}__add" in denied["error"]["message"], describe(denied)


def test_a_token_for_another_audience_from_the_same_flow_is_refused(procs, gateways, keycloak):
    """The control: a gateway whose metadata lists `profile` instead of the scope that carries
    its audience. The same SDK flow gets a Keycloak token that is not for this gateway, and the
    gateway refuses it (so the tests above pass because of the audience check, not in spite of
    it)."""
    gateway = _gateway(procs, gateways, keycloak, ["profile"])
    provider, storage, _ = python_sign_in(keycloak, gateway.mcp_url(), "alice")

    async def session():
        async with sdk_client(gateway.mcp_url(), None, MODERN_VERSION, auth=provider) as client:
            await client.list_tools()

    with pytest.raises(BaseException) as failed:
        run_async(session, timeout=120)
    assert storage.tokens is not None, f"the flow ended before a token: {failed.value!r}"
    assert GATEWAY_AUDIENCE not in _audiences(_claims(storage.tokens.access_token))
    assert "the access token is not for this gateway" in gateway.logs()


def _claims(token: str) -> dict:
    import base64

    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def _audiences(claims: dict) -> list[str]:
    aud = claims.get("aud", [])
    return aud if isinstance(aud, list) else [aud]


