"""Issue 37, acceptance 2: people bring their own accounts (`userOAuth`).

Two gateway replicas behind a per-request balancer share a Redis; people sign in through the
gateway (brokered mode, the real Keycloak) with the official Python SDK; "Example Accounts" (the
example upstream's third-party authorization server: authorization code + PKCE, 8 s access
tokens, rotating refresh tokens) fronts an MCP server whose `whoami` answers with the account
its token belongs to. A real browser (headless Chromium) does what a person does:

- alice (2025-11-25) lists the tools: github, which she has not connected, lists one tool,
  `connect_account`; she calls it: a URL elicitation (-32042) with the connect URL; her browser
  opens it, signs in at Keycloak as alice (the link is hers), says yes, signs in at Example
  Accounts as `alice-ex`, comes back to the gateway (any replica); her call answers as
  `alice-ex`, and the listing shows github's own tools;
- bob (2026-07-28) gets his own elicitation (the revision's input-required URL elicitation,
  through the SDK's elicitation callback, which drives his own browser) and his own account;
  his link opened in alice's browser connects nothing; on REST, a caller without an account
  gets 403 with the connect URL;
- a token connected through one replica is refreshed through either: exactly one refresh under
  20 concurrent calls spread over both replicas;
- `invalid_grant` (the grant ended at Example Accounts) deletes the account: one new elicitation;
- disconnecting on the connections page revokes at Example Accounts; the next call elicits again;
- signing out there (a browser that has not shown who it is is sent to Keycloak first) ends every
  gateway token of alice's logins on both replicas, her refresh token too; a new login works;
- no token reaches a log, and Redis holds only sealed values.
A key's holder connects the key's own account (the page asks for the key); with Redis stopped,
a call that needs an account not held in memory is refused naming the store, while a server
with its own credential keeps answering.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time

import httpx
import pytest
from browser import Browser
from connect_flow import connect_in_browser, elicited_url
from harness import (
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
    start_rust_upstream_with,
    wait_until,
    write_config,
)
from keycloak import GATEWAY_AUDIENCE

REDIRECT_URI = "http://127.0.0.1:33421/callback"  # never listened on: the test reads the redirect
USER_OAUTH = {"type": "userOAuth", "clientId": "switchboard", "clientSecret": "secret-switchboard", "scopes": ["whoami"]}


@pytest.fixture
def world(procs, gateways, keycloak, redis, tmp_path):
    """Replicas A and B behind one balancer (the public URL), a Redis store, Example Accounts
    (8 s access tokens) as the `github` server everyone reaches, alpha with its own credential."""
    # A refresh takes 400 ms to answer: two replicas refreshing at once would overlap (and the
    # second would present a spent refresh token, which ends the grant).
    accounts = start_rust_upstream_with(procs, "accounts", "--account-token-ttl", "8", "--account-refresh-delay-ms", "400")
    alpha = start_rust_upstream(procs, "alpha")
    lb = RoundRobinBalancer([]).start()
    bot = new_secret("bot")
    config = gateway_config(
        [
            # No authorizationServer: found through the upstream's protected-resource metadata.
            server("github", f"{accounts.base}/accounts/mcp", auth=USER_OAUTH),
            server("alpha", alpha.mcp_url),
        ],
        [
            key("team-a", new_secret("team-a"), ["github", "alpha"], people=[{"provider": "corp", "groups": ["team-a"]}]),
            key("team-b", new_secret("team-b"), ["github"], people=[{"provider": "corp", "groups": ["team-b"]}]),
            key("bot", bot, ["github", "alpha"]),
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
    path = gateways.config_path("accounts")
    write_config(path, config)
    a = gateways.start(config_path=path, name="replica-a")
    b = gateways.start(config_path=path, name="replica-b")
    for gw in (a, b):
        wait_until(lambda gw=gw: "identity provider keys loaded provider=default/corp" in gw.logs(), 30,
                   what=f"{gw.proc.name} to load the identity provider's discovery document")  # fmt: skip
    lb.set_backends([a.url, b.url])
    browsers: list[Browser] = []

    def browser(name: str) -> Browser:
        opened = Browser(tmp_path / f"browser-{name}")
        browsers.append(opened)
        return opened

    yield {"lb": lb, "a": a, "b": b, "accounts": accounts, "alpha": alpha, "bot": bot, "browser": browser, "redis": redis}
    for opened in browsers:
        opened.close()
    lb.stop()


def sign_in(keycloak, lb, person: str):
    """The SDK's OAuth client signed in as `person` through the gateway (any replica)."""
    return sdk_oauth(f"{lb.url}/mcp", f"switchboard-e2e-{person}", REDIRECT_URI, lambda u: keycloak.log_in_through(u, person, lambda x: x))


def stats(accounts) -> dict:
    return httpx.get(f"{accounts.base}/accounts/_stats", timeout=10).json()


def call_whoami(lb, provider, era: str = "legacy", tool: str = "github__whoami", **options):
    async def go():
        async with sdk_client(f"{lb.url}/mcp", None, era, auth=provider, **options) as client:
            return await client.call_tool(tool, {})

    return run_async(go, timeout=120)


def tool_names_as(lb, provider) -> set[str]:
    async def go():
        async with sdk_client(f"{lb.url}/mcp", None, "legacy", auth=provider) as client:
            return {t.name for t in (await client.list_tools()).tools}

    return run_async(go, timeout=120)


def expect_elicitation(lb, provider, tool: str = "github__whoami") -> str:
    try:
        result = call_whoami(lb, provider, tool=tool)
    except Exception as e:  # the SDK raises the JSON-RPC error
        return elicited_url(e)
    raise AssertionError(f"no elicitation: {sdk_text(result)!r}")


async def list_tools_as(lb, provider):
    async with sdk_client(f"{lb.url}/mcp", None, "2026-07-28", auth=provider) as client:
        return await client.list_tools()


def rest_whoami(url: str, token: str) -> httpx.Response:
    return httpx.post(f"{url}/mcp-rest/tools/call", headers={"Authorization": f"Bearer {token}"},
                      json={"name": "github__whoami", "arguments": {}}, timeout=30)  # fmt: skip


def test_people_connect_their_own_accounts_across_replicas(world, keycloak):
    lb, a, b, accounts = world["lb"], world["a"], world["b"], world["accounts"]

    # alice, 2025-11-25: the listing shows github's one tool for people not connected yet;
    # calling it (or any github tool) elicits; she connects in her browser, the retry acts as
    # her account, and the listing shows github's own tools.
    alice, alice_storage, _ = sign_in(keycloak, lb, "alice")
    before = tool_names_as(lb, alice)
    assert "github__connect_account" in before and "github__whoami" not in before and "alpha__add" in before, before
    url = expect_elicitation(lb, alice, "github__connect_account")
    assert url.startswith(f"{lb.url}/connect?ticket=sbx."), url
    alice_browser = world["browser"]("alice")
    connect_in_browser(alice_browser, url, keycloak, "alice", "alice-ex")
    assert sdk_text(call_whoami(lb, alice)) == "account: alice-ex"
    assert stats(accounts)["codes_redeemed"] == 1
    after = tool_names_as(lb, alice)
    assert "github__whoami" in after and "github__connect_account" not in after, after
    assert "is connected" in sdk_text(call_whoami(lb, alice, tool="github__connect_account"))

    # bob, REST first: 403 with the connect URL; then 2026-07-28 through the SDK's elicitation
    # callback, which drives bob's own browser; his link in alice's browser connects nothing.
    bob, bob_storage, _ = sign_in(keycloak, lb, "bob")

    async def list_tools():
        async with sdk_client(f"{lb.url}/mcp", None, "2026-07-28", auth=bob) as client:
            return await client.list_tools()

    run_async(list_tools, timeout=120)  # bob signs in (the SDK's OAuth flow)
    refused = rest_whoami(lb.url, bob_storage.tokens.access_token)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "account_not_connected", refused.text
    bobs_link = refused.json()["error"]["connectUrl"]
    alice_browser.open(bobs_link)
    alice_browser.wait_for(lambda: "kc-form-login" in alice_browser.driver.page_source or "someone else" in alice_browser.text(),
                           "Keycloak's sign-in for bob's link")  # fmt: skip
    if "kc-form-login" in alice_browser.driver.page_source:
        # Keycloak still knows alice in this browser or asks again: alice signs in as herself.
        alice_browser.fill(username="alice", password=keycloak.passwords["alice"])
        alice_browser.driver.find_element("id", "kc-login").click()
    alice_browser.wait_for(lambda: "someone else" in alice_browser.text(), "the refusal of another's link")
    assert "Nothing was connected" in alice_browser.text()
    bob_browser = world["browser"]("bob")
    elicited: list[dict] = []

    async def elicitation(context, params):
        from mcp_types import ElicitResult

        elicited.append(params.model_dump(by_alias=True, exclude_none=True))
        await asyncio.to_thread(connect_in_browser, bob_browser, params.url, keycloak, "bob", "bob-ex")
        return ElicitResult(action="accept")

    result = call_whoami(lb, bob, "2026-07-28", elicitation_callback=elicitation)
    assert sdk_text(result) == "account: bob-ex"
    assert len(elicited) == 1 and elicited[0]["mode"] == "url" and "elicitationId" not in elicited[0], elicited
    assert sdk_text(call_whoami(lb, alice)) == "account: alice-ex", "alice still acts as her own account"

    # Refreshed on read, once across both replicas: 20 calls at once, 10 on each, after alice's
    # 8 s token is past its refresh margin (a quarter of its life).
    token = alice_storage.tokens.access_token
    before = stats(accounts)["refreshes"]
    time.sleep(7)
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda i: rest_whoami((a, b)[i % 2].url, token), range(20)))
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers if r.status_code != 200][:2]
    assert {r.json()["structuredContent"]["account"] for r in answers} == {"alice-ex"}
    assert stats(accounts)["refreshes"] == before + 1, stats(accounts)

    # invalid_grant: the grant ended at Example Accounts; the next refresh deletes the account,
    # and alice is asked once to connect again (then the call asks nothing more of her).
    assert httpx.post(f"{accounts.base}/accounts/_forget", timeout=10).status_code == 204
    time.sleep(7)
    url = expect_elicitation(lb, alice)
    connect_in_browser(alice_browser, url, keycloak, "alice", "alice-ex")
    assert sdk_text(call_whoami(lb, alice)) == "account: alice-ex"

    # Disconnect on the connections page: revoked at Example Accounts; asked again after.
    revocations = stats(accounts)["revocations"]
    alice_browser.open(f"{lb.url}/connections")
    alice_browser.wait_for(lambda: "github" in alice_browser.text(), "the connections page")
    assert "alice-ex" not in alice_browser.driver.page_source and token not in alice_browser.driver.page_source
    alice_browser.click("Disconnect")
    alice_browser.wait_for(lambda: "disconnected" in alice_browser.text(), "the disconnected page")
    assert "revoked" in alice_browser.text(), alice_browser.text()
    assert stats(accounts)["revocations"] == revocations + 1
    # The revoked token is refused upstream, so no replica uses what it held: asked again.
    for gw in (a, b):
        again = rest_whoami(gw.url, alice_storage.tokens.access_token)
        assert again.status_code == 403 and again.json()["error"]["code"] == "account_not_connected", again.text

    # Sign-out, from a browser that has not shown who it is yet: the connections page sends it to
    # Keycloak first. Every gateway token of alice's logins ends, on both replicas (within the
    # 5 s a replica that did not take it may cache), refresh tokens too; a new login works.
    fresh = world["browser"]("alice-again")
    fresh.open(f"{lb.url}/connections")
    fresh.wait_for(lambda: "kc-form-login" in fresh.driver.page_source, "Keycloak's sign-in for the connections page")
    fresh.fill(username="alice", password=keycloak.passwords["alice"])
    fresh.driver.find_element("id", "kc-login").click()
    fresh.wait_for(lambda: "Sign out everywhere" in fresh.text(), "the connections page with its sign-out")
    assert "has no account connected" in fresh.text(), fresh.text()
    access, refresh = alice_storage.tokens.access_token, alice_storage.tokens.refresh_token
    assert all(rest_whoami(gw.url, access).status_code == 403 for gw in (a, b)), "signed in (no account yet)"
    fresh.click("Sign out everywhere")
    fresh.wait_for(lambda: "Signed out" in fresh.text(), "the signed-out page")
    t0 = time.monotonic()
    wait_until(lambda: all(rest_whoami(gw.url, access).status_code == 401 for gw in (a, b)), 10,
               what="alice's access token refused on both replicas")  # fmt: skip
    print(f"\nsigned out: refused on both replicas after {time.monotonic() - t0:.1f}s")
    renewed = httpx.post(f"{lb.url}/oauth/token", data={"grant_type": "refresh_token", "refresh_token": refresh,
                         "client_id": alice_storage.client.client_id}, timeout=30)  # fmt: skip
    assert renewed.status_code == 400 and "signed out" in renewed.json()["error_description"], renewed.text
    again, again_storage, _ = sign_in(keycloak, lb, "alice")
    run_async(lambda: list_tools_as(lb, again), timeout=120)
    assert rest_whoami(a.url, again_storage.tokens.access_token).status_code == 403, "a new login: signed in again"

    # Example Accounts' MCP endpoint saw its own tokens only: never the gateway's, never Keycloak's.
    seen = json.dumps(accounts.recent_requests())
    assert "/accounts/mcp" in seen and "sbt." not in seen and "eyJ" not in seen, "a person's gateway or IdP token reached the upstream"
    # Nothing of a token in the logs; Redis holds sealed values under hashed names.
    for gw in (a, b):
        logs = gw.logs() + gw.proc.log_text()
        assert "sbx." not in gw.logs() and token not in logs and "alice-ex" not in logs
    redis = world["redis"]
    names = redis.cli("KEYS", "sb:*").split()
    assert names and all(":" in n and "alice" not in n for n in names), names
    for name in names:
        assert b"alice-ex" not in redis.cli("GET", name).encode()


def test_a_key_holder_connects_the_keys_own_account_and_the_store_down_is_named(world, keycloak):
    lb, a, b, accounts, bot = world["lb"], world["a"], world["b"], world["accounts"], world["bot"]
    refused = rest_whoami(lb.url, bot)
    assert refused.status_code == 403, refused.text
    url = refused.json()["error"]["connectUrl"]
    browser = world["browser"]("bot-owner")
    browser.open(url)
    browser.wait_for(lambda: "Type the key" in browser.text(), "the key page")
    # The key form is bound to the browser it was shown in: posted from elsewhere (no cookie),
    # even with the right key, it is refused (no login CSRF into someone else's key).
    import html
    import re

    proof = html.unescape(re.search(r'name="proof" value="([^"]+)"', browser.driver.page_source).group(1))
    elsewhere = httpx.post(f"{lb.url}/connect/key", data={"proof": proof, "key": bot}, timeout=10)
    assert elsewhere.status_code == 400 and "Not this browser" in elsewhere.text, elsewhere.text
    browser.fill(key="not-the-key")
    browser.click("Continue")
    browser.wait_for(lambda: "Not this key" in browser.text(), "the wrong key refused")
    browser.open(url)
    browser.fill(key=bot)
    browser.click("Continue")
    browser.wait_for(lambda: "Connect an account" in browser.text(), "the consent page")
    browser.click("Connect")
    browser.wait_for(lambda: "Example Accounts" in browser.text(), "Example Accounts' sign-in page")
    browser.fill(username="ci-bot", password="demo")
    browser.click("Sign in and allow")
    browser.wait_for(lambda: "is connected" in browser.text(), "connected")
    answer = rest_whoami(a.url, bot)
    assert answer.status_code == 200 and answer.json()["structuredContent"]["account"] == "ci-bot", answer.text

    # Redis down: replica B never read the account, so it must ask the store: refused, naming
    # it; alpha (its own credential) answers on both.
    world["redis"].stop()
    down = rest_whoami(b.url, bot)
    assert down.status_code == 503 and down.json()["error"]["code"] == "store_unavailable", down.text
    assert "state store" in down.json()["error"]["message"]
    for gw in (a, b):
        alpha = httpx.post(f"{gw.url}/mcp-rest/tools/call", headers={"Authorization": f"Bearer {bot}"},
                           json={"name": "alpha__add", "arguments": {"a": 1, "b": 2}}, timeout=30)  # fmt: skip
        assert alpha.status_code == 200, alpha.text
    metrics = httpx.get(f"{b.internal_url}/metrics", timeout=10).text
    assert 'switchboard_gateway_user_accounts_total{server="github",event="store_unavailable"}' in metrics
    assert json.dumps(stats(accounts))  # Example Accounts still up: only the store was down
