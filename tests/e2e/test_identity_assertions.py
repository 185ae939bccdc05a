"""Issue 40, item 4: enterprise-managed authorization (the MCP extension
`io.modelcontextprotocol/enterprise-managed-authorization`, the ID-JAG grant of
draft-ietf-oauth-identity-assertion-authz-grant) at the gateway's own authorization server
(brokered mode), with no browser round trip.

The company signs people in with a real Keycloak (the brokered provider `corp`, whose browser
login is the comparison). Keycloak cannot issue ID-JAGs, so the enterprise IdP's assertion leg
is `upstreams/enterprise_idp.py` (the provider `org`, `brokered.identityAssertions.provider:
org`): it exchanges a person's Keycloak ID token for an ID-JAG addressed to the gateway. The MCP
client is the official Python SDK's `IdentityAssertionOAuthProvider` (mcp 2.3.0), a confidential
client registered at the gateway (`client_secret_post`, the JWT bearer grant), which fetches the
gateway's metadata from the issuer it is configured with and presents the ID-JAG there.

- the person gets the grants a browser login gives them (alice: alpha only, the same tool list
  as her browser login; bob: beta only), in both eras;
- two replicas behind one public URL share a Redis: an ID-JAG taken on replica A is refused on
  replica B (single use, its `jti`), and the token replica A gave works on B;
- scope: the token carries the scopes asked within the ID-JAG's `scope`, which a tool's
  `requiredScopes` then asks for (without it: a SEP-2350 challenge);
- refusals, each with its reason: another client's ID-JAG, another audience, another resource,
  an ID token in place of an ID-JAG, a wrong client secret, a public client; each counted in
  `switchboard_gateway_brokered_tokens_total`;
- nothing of the provider's is held for a person signed in so: a `tokenExchange` server (an API
  that takes only Keycloak's tokens for its audience) refuses them as such, and the API is never
  called.
"""

from __future__ import annotations

import json
import sys

import httpx
import pytest
from harness import (
    E2E_DIR,
    MODERN_VERSION,
    OAuthStorage,
    RawMcp,
    RoundRobinBalancer,
    asgi_server,
    gateway_config,
    key,
    new_secret,
    run_async,
    sdk_client,
    sdk_list_all_tools,
    sdk_oauth,
    sdk_text,
    server,
    start_rust_upstream,
    wait_until,
    write_config,
)
from keycloak import GATEWAY_AUDIENCE
from test_people_sign_in import WeatherApi

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
REDIRECT_URI = "http://127.0.0.1:33419/callback"  # never listened on: the test reads the redirect
# The scope the tool `add` requires (the gateway knows it from `requiredScopes`).
ADD_SCOPE = "switchboard-add"
# The client at the enterprise IdP (its own credentials there).
IDP_CLIENT, IDP_SECRET = "agent", "agent-secret-at-the-idp"


class Enterprise:
    """The gateway's two replicas behind `lb`, the IdP, and the agent registered at the
    gateway."""

    def __init__(self, lb, a, b, idp_url: str, client_id: str, client_secret: str, keycloak, weather):
        self.lb, self.a, self.b = lb, a, b
        self.weather = weather
        self.idp_url = idp_url
        self.client_id, self.client_secret = client_id, client_secret
        self.keycloak = keycloak

    def id_jag(self, person: str, audience: str | None = None, resource: str | None = None, scope: str | None = None) -> str:
        """What the client does at the enterprise IdP: the person's ID token for an ID-JAG."""
        form = {
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
            "subject_token": self.keycloak.token(person)["id_token"],
            "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
            "audience": audience or self.lb.url,
            "resource": resource or f"{self.lb.url}/mcp",
        }
        if scope is not None:
            form["scope"] = scope
        r = httpx.post(f"{self.idp_url}/token", data=form, auth=(IDP_CLIENT, IDP_SECRET), timeout=30)
        assert r.status_code == 200, f"the IdP refused the exchange: {r.status_code} {r.text}"
        assert r.json()["issued_token_type"] == "urn:ietf:params:oauth:token-type:id-jag", r.text
        return r.json()["access_token"]

    def present(self, assertion: str, at: str | None = None, client: tuple[str, str | None] | None = None, **form) -> httpx.Response:
        """The JWT bearer grant at the gateway's token endpoint (client_secret_post)."""
        client_id, secret = client or (self.client_id, self.client_secret)
        data = {"grant_type": JWT_BEARER, "assertion": assertion, "client_id": client_id, **form}
        if secret is not None:
            data["client_secret"] = secret
        return httpx.post(f"{at or self.lb.url}/oauth/token", data=data, timeout=30)


def register(url: str, method: str, grants: list[str], redirects: list[str] | None = None) -> dict:
    r = httpx.post(f"{url}/oauth/register", json={
        "client_name": "switchboard-e2e-agent", "token_endpoint_auth_method": method,
        "grant_types": grants, "redirect_uris": redirects or [],
    }, timeout=30)  # fmt: skip
    assert r.status_code == 201, f"registration refused: {r.status_code} {r.text}"
    return r.json()


@pytest.fixture
def weather(keycloak):
    """An API that takes only Keycloak's tokens for its own audience: the gateway exchanges
    the provider's token it holds for a person (`tokenExchange`)."""
    api = WeatherApi(keycloak)
    with asgi_server(api) as upstream:
        api.url = f"{upstream.url}/mcp"
        yield api


@pytest.fixture
def enterprise(procs, gateways, keycloak, redis, weather):
    alpha = start_rust_upstream(procs, "alpha")
    beta = start_rust_upstream(procs, "beta")
    lb = RoundRobinBalancer([]).start()
    exchange = {
        "type": "tokenExchange", "tokenUrl": f"{keycloak.issuer}/protocol/openid-connect/token",
        "clientId": "switchboard-gateway", "clientSecret": keycloak.client_secrets["switchboard-gateway"], "audience": "weather-api",
    }  # fmt: skip
    config = gateway_config(
        [
            server("alpha", alpha.mcp_url, tools={"requiredScopes": {"add": [ADD_SCOPE]}}),
            server("beta", beta.mcp_url),
            server("weather", weather.url, auth=exchange),
        ],
        [
            key("team-a", new_secret("team-a"), ["alpha", "weather"], people=[{"provider": "corp", "groups": ["team-a"]}]),
            key("team-b", new_secret("team-b"), ["beta"], people=[{"provider": "corp", "groups": ["team-b"]}]),
        ],
        publicUrl=lb.url,
        store=redis.store_settings(),
    )
    # The IdP learns the agent's id at the gateway once it registered (`POST /_clients`): an
    # enterprise IdP's admin configures it so.
    idp = procs.start("enterprise-idp", [
        sys.executable, str(E2E_DIR / "upstreams" / "enterprise_idp.py"), "--trust", keycloak.issuer,
        "--subject-audience", "mcp-cli", "--client", f"{IDP_CLIENT}:{IDP_SECRET}",
    ])  # fmt: skip
    try:
        config["identityProviders"] = [
            {
                "name": "corp", "issuer": keycloak.issuer, "audiences": [GATEWAY_AUDIENCE],
                "brokered": {"clientId": "switchboard-gateway", "clientSecret": keycloak.client_secrets["switchboard-gateway"],
                             "identityAssertions": {"provider": "org"}},
            },
            # The enterprise IdP's assertions only: its audience is no one's, so none of its
            # tokens is taken as a person's access token.
            {"name": "org", "issuer": idp.url, "audiences": ["no-access-tokens-from-here"], "algorithms": ["ES256"]},
        ]  # fmt: skip
        path = gateways.config_path("enterprise")
        write_config(path, config)
        a = gateways.start(config_path=path, name="replica-a")
        b = gateways.start(config_path=path, name="replica-b")
        for gw in (a, b):
            for provider in ("corp", "org"):
                wait_until(lambda gw=gw, p=provider: f"identity provider keys loaded provider=default/{p}" in gw.logs(), 30,
                           what=f"{gw.proc.name} to load {provider}'s keys")  # fmt: skip
        lb.set_backends([a.url, b.url])
        agent = register(lb.url, "client_secret_post", [JWT_BEARER])
        r = httpx.post(f"{idp.url}/_clients", json={IDP_CLIENT: agent["client_id"]}, timeout=10)
        assert r.status_code == 200, r.text
        yield Enterprise(lb, a, b, idp.url, agent["client_id"], agent["client_secret"], keycloak, weather)
    finally:
        lb.stop()


def browser_tools(enterprise, person: str) -> list[str]:
    """The tools a person's browser login (the SDK's OAuth client, Keycloak's login page, the
    gateway's consent) lists."""
    lb, a = enterprise.lb, enterprise.a
    provider, _, _ = sdk_oauth(f"{lb.url}/mcp", "switchboard-e2e-browser", REDIRECT_URI,
                               lambda u: enterprise.keycloak.log_in_through(u, person, lambda url: a.url + url[len(lb.url):]))  # fmt: skip

    async def session():
        async with sdk_client(f"{lb.url}/mcp", None, MODERN_VERSION, auth=provider) as client:
            return sorted(t.name for t in await sdk_list_all_tools(client))

    return run_async(session, timeout=120)


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_the_sdk_trades_an_id_jag_for_a_browser_logins_grants(enterprise, era):
    from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider

    lb = enterprise.lb
    asked: list[tuple[str, str]] = []

    def agent_for(person: str):
        async def fetch_id_jag(audience: str, resource: str) -> str:
            asked.append((audience, resource))
            return enterprise.id_jag(person, audience=audience, resource=resource)

        return IdentityAssertionOAuthProvider(
            server_url=f"{lb.url}/mcp", storage=OAuthStorage(), client_id=enterprise.client_id,
            client_secret=enterprise.client_secret, issuer=lb.url, assertion_provider=fetch_id_jag,
        )  # fmt: skip

    async def session(person: str):
        async with sdk_client(f"{lb.url}/mcp", None, era, auth=agent_for(person)) as client:
            names = sorted(t.name for t in await sdk_list_all_tools(client))
            echoed = None
            if "alpha__echo" in names:
                echoed = sdk_text(await client.call_tool("alpha__echo", {"text": "from an ID-JAG"}))
            return names, echoed

    alice, echoed = run_async(lambda: session("alice"), timeout=120)
    assert alice and all(n.startswith("alpha__") for n in alice), alice
    assert echoed == "from an ID-JAG"
    # The SDK asked for an ID-JAG for the gateway's issuer and its MCP endpoint.
    assert asked and asked[0] == (lb.url, f"{lb.url}/mcp"), asked
    bob, _ = run_async(lambda: session("bob"), timeout=120)
    assert bob and all(n.startswith("beta__") for n in bob), bob
    # The grants a browser login gives the same person: the same servers, but for the one
    # that exchanges the provider's token, which only a browser login leaves with the gateway.
    browser = browser_tools(enterprise, "alice")
    assert [n for n in browser if not n.startswith("weather__")] == alice, (browser, alice)
    assert "weather__forecast" in browser, browser


def test_an_id_jag_is_taken_once_across_replicas_and_carries_its_scope(enterprise):
    lb, a, b = enterprise.lb, enterprise.a, enterprise.b
    meta = httpx.get(f"{lb.url}/.well-known/oauth-authorization-server", timeout=10).json()
    assert JWT_BEARER in meta["grant_types_supported"], meta
    assert meta["authorization_grant_profiles_supported"] == ["urn:ietf:params:oauth:grant-profile:id-jag"], meta
    assert "client_secret_post" in meta["token_endpoint_auth_methods_supported"], meta

    assertion = enterprise.id_jag("alice")
    taken = enterprise.present(assertion, at=a.url)
    assert taken.status_code == 200, taken.text
    assert "no-store" in taken.headers.get("cache-control", "")
    token = taken.json()
    assert token["token_type"] == "Bearer" and token["expires_in"] > 0, token
    assert "refresh_token" not in token, "an ID-JAG grant gives no refresh token: the client presents a new one"
    # Replica B takes the token replica A gave, and refuses the ID-JAG A took.
    with RawMcp(f"{b.url}/mcp", token["access_token"], MODERN_VERSION) as mcp:
        listed = mcp.list_tools()
        assert listed.status == 200, listed.raw
        assert {t["name"] for t in listed.result["tools"]} >= {"alpha__echo", "alpha__add"}
    again = enterprise.present(assertion, at=b.url)
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant", again.text
    assert "already used" in again.json()["error_description"], again.text

    # Scope: asked within the ID-JAG's; `add` requires ADD_SCOPE.
    narrow = enterprise.present(enterprise.id_jag("alice", scope="openid"), scope=ADD_SCOPE)
    assert narrow.status_code == 200, narrow.text
    assert "scope" not in narrow.json(), f"a scope the ID-JAG does not allow is not granted: {narrow.json()}"
    with RawMcp(f"{lb.url}/mcp", narrow.json()["access_token"], MODERN_VERSION) as mcp:
        refused = mcp.call_tool("alpha__add", {"a": 2, "b": 3})
        assert refused.status == 403, refused.raw
        assert f'scope="{ADD_SCOPE}"' in refused.headers.get("www-authenticate", ""), refused.headers
    wide = enterprise.present(enterprise.id_jag("alice", scope=f"openid {ADD_SCOPE}"))
    assert wide.status_code == 200 and wide.json().get("scope") == ADD_SCOPE, wide.text
    with RawMcp(f"{lb.url}/mcp", wide.json()["access_token"], MODERN_VERSION) as mcp:
        added = mcp.call_tool("alpha__add", {"a": 2, "b": 3})
        assert added.status == 200 and "5" in str(added.result), added.raw


def test_id_jags_are_refused_with_their_reason(enterprise):
    lb = enterprise.lb

    def refused(response: httpx.Response, status: int, error: str, why: str) -> None:
        assert response.status_code == status, response.text
        assert response.json()["error"] == error, response.text
        assert why in response.json()["error_description"], response.text

    # Issued for this client, presented by another confidential client of the gateway.
    other = register(lb.url, "client_secret_basic", [JWT_BEARER])
    refused(enterprise.present(enterprise.id_jag("alice"), client=(other["client_id"], other["client_secret"])),
            400, "invalid_grant", "another client")  # fmt: skip
    # For another authorization server.
    refused(enterprise.present(enterprise.id_jag("alice", audience="https://elsewhere.example")),
            400, "invalid_grant", "not for this gateway")  # fmt: skip
    # For one resource, asked for another.
    refused(enterprise.present(enterprise.id_jag("alice"), resource=f"{lb.url}/mcp/alpha"),
            400, "invalid_grant", "not for the resource asked")  # fmt: skip
    # For another gateway's resource.
    refused(enterprise.present(enterprise.id_jag("alice", resource="https://elsewhere.example/mcp")),
            400, "invalid_grant", "another resource")  # fmt: skip
    # The person's ID token itself is not an ID-JAG (another issuer's, another type).
    refused(enterprise.present(enterprise.keycloak.token("alice")["id_token"]), 400, "invalid_grant", "not an identity assertion")
    # The client does not authenticate as itself.
    refused(enterprise.present(enterprise.id_jag("alice"), client=(enterprise.client_id, "guess")), 401, "invalid_client", "secret is wrong")
    refused(enterprise.present(enterprise.id_jag("alice"), client=(enterprise.client_id, None)), 401, "invalid_client", "authenticates")
    # A public client (PKCE, a browser) does not present assertions.
    public = register(lb.url, "none", ["authorization_code"], [REDIRECT_URI])
    refused(enterprise.present(enterprise.id_jag("alice"), client=(public["client_id"], None)), 401, "invalid_client", "confidential")
    # None of these used up an ID-JAG that was not taken: a fresh one is.
    assert enterprise.present(enterprise.id_jag("alice")).status_code == 200
    # Each refusal counted (by grant and the error answered) on the replica that answered it.
    def counted(outcome: str) -> int:
        total = 0
        for gw in (enterprise.a, enterprise.b):
            for line in httpx.get(f"{gw.internal_url}/metrics", timeout=15).text.splitlines():
                if line.startswith(f'switchboard_gateway_brokered_tokens_total{{grant="identity_assertion",outcome="{outcome}"}} '):
                    total += int(float(line.rsplit(" ", 1)[1]))
        return total

    assert counted("invalid_grant") == 5, "another client, audience, resource asked, resource, an ID token"
    assert counted("invalid_client") == 3
    assert counted("ok") == 1


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_a_server_that_exchanges_the_providers_token_refuses_an_id_jag_sign_in_as_such(enterprise, era):
    """A sign-in with an identity assertion leaves the gateway none of the provider's tokens:
    a `tokenExchange` server answers that (a JSON-RPC error naming the server and the browser
    sign-in it needs; 403 on REST), its listing says why its tools are missing, and nothing reaches the API."""
    taken = enterprise.present(enterprise.id_jag("alice"))
    assert taken.status_code == 200, taken.text
    with RawMcp(f"{enterprise.lb.url}/mcp", taken.json()["access_token"], era) as mcp:
        refused = mcp.call_tool("weather__forecast", {})
        # A refusal of the call (invalid params, as a policy's denial is), with the era's status
        # for it, not of the sign-in: a 401 or 403 would send the client to sign in again with
        # another ID-JAG, to the same end.
        assert refused.status == (200 if era == "legacy" else 400), refused.raw
        error = refused.error
        assert error["data"] == {"server": "weather", "signIn": "browser"}, error
        assert "sign in through the browser" in error["message"], error
        listed = mcp.list_tools()
        assert listed.status == 200, listed.raw
        assert not any(t["name"].startswith("weather__") for t in listed.result["tools"]), listed.result
        assert "provider_token_not_held" in json.dumps(listed.result), listed.result
    assert enterprise.weather.bearers == [], "the API was called without a person's token"
