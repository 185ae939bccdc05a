"""Issue 4, acceptance item 6: tokens the gateway obtains are cached, shared and renewed once.

- `oauth2ClientCredentials`: 100 calls (20 of them concurrent on a cold gateway, then over
  every path: `/mcp`, `/mcp/{prefix}`, REST) make exactly one token request; the request
  carries the configured client authentication (post or basic), scopes and audience.
- An upstream 401 on the gateway's token causes exactly one refresh and one retry (token
  requests == 2, the upstream saw exactly 2 `tools/call`); concurrent callers share that one
  refresh; a credential the upstream keeps refusing ends, after that one refresh, in a clear
  upstream-auth error (never relayed to the caller as its own 401).
- A token is renewed shortly before it expires, without a refused request first.
- `tokenExchange`: one exchange per caller token (cached per caller token and server), renewed
  once on a 401.

Counts come from the example upstream's `/_stats` (`oauth/token:<grant>`, `tools/call`) and
`/_requests` (the token requests' forms; `client_secret` redacted).
"""

from __future__ import annotations

import base64
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from harness import (
    KEY_HEADER,
    MODERN_VERSION,
    SECRETS_USED,
    TOKEN_GRANT_CLIENT_CREDENTIALS,
    TOKEN_GRANT_EXCHANGE,
    RawMcp,
    call_result_value,
    gateway_config,
    headers_seen,
    key,
    method_count,
    new_secret,
    oauth_server,
    pct,
    server,
    start_rust_upstream,
    start_rust_upstream_with,
    token_exchange_auth,
    token_requests,
)


def _cid(label: str) -> str:
    return label + new_secret("u").split("-")[-1][:10]


def _token_forms(up, grant: str) -> list[dict]:
    return [
        {"form": r.get("form") or {}, "headers": r["headers"]}
        for r in up.recent_requests()
        if r["path"] == "/oauth/token" and (r.get("form") or {}).get("grant_type") == grant
    ]


def _call_add(url: str, client_key: str | None, tool: str, a: int, era: str = MODERN_VERSION, headers=None):
    with RawMcp(url, client_key, era, headers=headers) as mcp:
        reply = mcp.call_tool(tool, {"a": a, "b": 1})
        assert reply.status == 200, f"HTTP {reply.status}: {reply.raw[:400]!r}"
        return call_result_value(reply.result)


def test_hundred_calls_make_one_token_request(gateways, procs):
    up = start_rust_upstream(procs, "cc-cache")
    client_key = new_secret("client-key")
    cid = _cid("cc")
    auth = oauth_server(up, cid, scopes=["mcp", "files:read"], audience="https://api.example/mcp")
    url = up.variant_url(f"require-prefix=authorization:{pct(f'Bearer at-{cid}-')}")
    gw = gateways.start(gateway_config([server("cc", url, auth=auth)], [key("client", client_key, ["cc"])]))

    # 20 concurrent calls on a gateway that holds no token yet: they share one token request.
    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(lambda i: _call_add(gw.mcp_url(), client_key, "cc__add", i), range(20)))
    assert results == [i + 1 for i in range(20)]
    # 80 more over every path and both eras.
    for i in range(20, 100):
        path = i % 4
        if path == 0:
            assert _call_add(gw.mcp_url(), client_key, "cc__add", i, "legacy") == i + 1
        elif path == 1:
            assert _call_add(gw.mcp_url("cc"), client_key, "add", i) == i + 1
        elif path == 2:
            assert _call_add(gw.mcp_url(), client_key, "cc__add", i) == i + 1
        else:
            r = httpx.post(
                f"{gw.url}/mcp-rest/tools/call",
                json={"name": "add", "server_id": "cc", "arguments": {"a": i, "b": 1}},
                headers={"Authorization": f"Bearer {client_key}"},
                timeout=15,
            )
            assert r.status_code == 200 and call_result_value(r.json()) == i + 1, r.text
    assert method_count(up, "tools/call") == 100
    assert token_requests(up, TOKEN_GRANT_CLIENT_CREDENTIALS) == 1, up.stats()
    assert token_requests(up) == 1
    (req,) = _token_forms(up, TOKEN_GRANT_CLIENT_CREDENTIALS)
    form = req["form"]
    assert form.get("client_id") == cid, form
    assert form.get("client_secret") == "<redacted>", "client_secret_post: the secret goes in the form"
    assert form.get("scope") == "mcp files:read", form
    assert form.get("audience") == "https://api.example/mcp", form


def test_client_secret_basic(gateways, procs):
    up = start_rust_upstream(procs, "cc-basic")
    client_key = new_secret("client-key")
    cid = _cid("cb")
    auth = oauth_server(up, cid, clientAuth="clientSecretBasic")
    gw = gateways.start(gateway_config([server("cb", up.mcp_url, auth=auth)], [key("client", client_key, ["cb"])]))
    with RawMcp(gw.mcp_url(), client_key, MODERN_VERSION) as mcp:
        seen = headers_seen(mcp.call_tool("cb__request_headers").result)
    assert seen.get("authorization") == f"Bearer at-{cid}-1", seen
    (req,) = _token_forms(up, TOKEN_GRANT_CLIENT_CREDENTIALS)
    expected = "Basic " + base64.b64encode(f"{cid}:secret-{cid}".encode()).decode()
    SECRETS_USED.add(expected.split(" ")[1])
    assert req["headers"].get("authorization") == expected, req["headers"].get("authorization")
    assert "client_secret" not in req["form"], f"client_secret_basic also posted the secret: {req['form']}"


def test_upstream_401_refreshes_once_and_retries_once(gateways, procs):
    up = start_rust_upstream(procs, "cc-refresh")
    client_key = new_secret("client-key")
    cid = _cid("cr")
    # Only the second token minted for this client is accepted: the first call is refused once.
    url = up.variant_url(f"require=authorization:{pct(f'Bearer at-{cid}-2')}")
    gw = gateways.start(
        gateway_config([server("cr", url, auth=oauth_server(up, cid))], [key("client", client_key, ["cr"])])
    )

    assert _call_add(gw.mcp_url(), client_key, "cr__add", 1) == 2
    assert token_requests(up, TOKEN_GRANT_CLIENT_CREDENTIALS) == 2, up.stats()
    assert method_count(up, "tools/call") == 2, up.stats()
    # The renewed token is kept: no more token requests, one upstream request per call.
    for i in range(10):
        assert _call_add(gw.mcp_url(), client_key, "cr__add", i, "legacy" if i % 2 else MODERN_VERSION) == i + 1
    assert token_requests(up, TOKEN_GRANT_CLIENT_CREDENTIALS) == 2, up.stats()
    assert method_count(up, "tools/call") == 12, up.stats()


def test_concurrent_callers_share_one_refresh(gateways, procs):
    up = start_rust_upstream(procs, "cc-shared-refresh")
    client_key = new_secret("client-key")
    cid = _cid("cs")
    url = up.variant_url(f"require=authorization:{pct(f'Bearer at-{cid}-2')}")
    gw = gateways.start(
        gateway_config([server("cs", url, auth=oauth_server(up, cid))], [key("client", client_key, ["cs"])])
    )
    with ThreadPoolExecutor(max_workers=10) as pool:
        results = list(pool.map(lambda i: _call_add(gw.mcp_url(), client_key, "cs__add", i), range(10)))
    assert results == [i + 1 for i in range(10)]
    assert token_requests(up, TOKEN_GRANT_CLIENT_CREDENTIALS) == 2, f"one token, one shared refresh: {up.stats()}"
    # Each call was refused at most once and retried at most once.
    assert 10 < method_count(up, "tools/call") <= 20, up.stats()


def test_persistent_401_ends_in_a_clear_upstream_auth_error(gateways, procs):
    up = start_rust_upstream(procs, "cc-refused")
    client_key = new_secret("client-key")
    cid = _cid("cn")
    url = up.variant_url(f"require=authorization:{pct('Bearer never-issued')}")
    gw = gateways.start(
        gateway_config([server("cn", url, auth=oauth_server(up, cid))], [key("client", client_key, ["cn"])])
    )

    with RawMcp(gw.mcp_url(), client_key, MODERN_VERSION) as mcp:
        reply = mcp.call_tool("cn__add", {"a": 1, "b": 1})
    error = reply.error
    assert error["code"] == -32003, error
    assert "cn" in error["message"] and "401" in error["message"], error
    assert reply.status != 401 and "www-authenticate" not in reply.headers, (
        "the gateway's own credential failing is not the caller's to answer"
    )
    assert token_requests(up, TOKEN_GRANT_CLIENT_CREDENTIALS) == 2, f"exactly one refresh: {up.stats()}"
    assert method_count(up, "tools/call") == 2, f"exactly one retry: {up.stats()}"

    r = httpx.post(
        f"{gw.url}/mcp-rest/tools/call",
        json={"name": "add", "server_id": "cn", "arguments": {"a": 1, "b": 1}},
        headers={"Authorization": f"Bearer {client_key}"},
        timeout=15,
    )
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_auth_failed", r.text
    assert "www-authenticate" not in r.headers
    assert token_requests(up, TOKEN_GRANT_CLIENT_CREDENTIALS) == 3, up.stats()
    assert method_count(up, "tools/call") == 4, up.stats()


def test_token_is_renewed_shortly_before_it_expires(gateways, procs):
    up = start_rust_upstream_with(procs, "cc-expiry", "--token-ttl", "2")
    client_key = new_secret("client-key")
    cid = _cid("ce")
    gw = gateways.start(
        gateway_config([server("ce", up.mcp_url, auth=oauth_server(up, cid))], [key("client", client_key, ["ce"])])
    )

    def token_used() -> str:
        with RawMcp(gw.mcp_url(), client_key, MODERN_VERSION) as mcp:
            return headers_seen(mcp.call_tool("ce__request_headers").result)["authorization"]

    assert token_used() == f"Bearer at-{cid}-1"
    assert token_used() == f"Bearer at-{cid}-1", "a fresh token was not reused"
    # expires_in 2 s: the gateway renews ahead of expiry (its margin is at most half the
    # lifetime), so 1.3 s later the still-valid token is already replaced.
    time.sleep(1.3)
    assert token_used() == f"Bearer at-{cid}-2"
    assert token_requests(up, TOKEN_GRANT_CLIENT_CREDENTIALS) == 2
    assert method_count(up, "tools/call") == 3, "a call was refused and retried"


def test_token_exchange_is_cached_per_caller_token(gateways, procs):
    up = start_rust_upstream(procs, "tx-cache")
    client_key = new_secret("client-key")
    alice, bob = new_secret("alice"), new_secret("bob")
    SECRETS_USED.update({alice, bob})
    auth = token_exchange_auth(up, _cid("tx"), audience="https://api.example/mcp", scopes=["mcp"])
    gw = gateways.start(gateway_config([server("tx", up.mcp_url, auth=auth)], [key("client", client_key, ["tx"])]))

    def upstream_saw(user: str, era: str = MODERN_VERSION) -> str:
        with RawMcp(
            gw.mcp_url(), None, era, headers={KEY_HEADER: client_key, "Authorization": f"Bearer {user}"}
        ) as mcp:
            return headers_seen(mcp.call_tool("tx__request_headers").result)["authorization"]

    for user in [alice] * 10 + [bob] * 10 + [alice] * 5:
        assert upstream_saw(user) == f"Bearer xt-{user}-1"
    assert token_requests(up, TOKEN_GRANT_EXCHANGE) == 2, up.stats()
    forms = [r["form"] for r in _token_forms(up, TOKEN_GRANT_EXCHANGE)]
    assert [f["subject_token"] for f in forms] == [alice, bob], forms
    for f in forms:
        assert f.get("subject_token_type") == "urn:ietf:params:oauth:token-type:access_token", f
        assert f.get("audience") == "https://api.example/mcp" and f.get("scope") == "mcp", f


def test_token_exchange_401_renews_once(gateways, procs):
    up = start_rust_upstream(procs, "tx-refresh")
    client_key = new_secret("client-key")
    user = new_secret("carol")
    SECRETS_USED.add(user)
    url = up.variant_url(f"require=authorization:{pct(f'Bearer xt-{user}-2')}")
    gw = gateways.start(
        gateway_config(
            [server("tx", url, auth=token_exchange_auth(up, _cid("tr")))], [key("client", client_key, ["tx"])]
        )
    )
    caller = {KEY_HEADER: client_key, "Authorization": f"Bearer {user}"}
    assert _call_add(gw.mcp_url(), None, "tx__add", 1, headers=caller) == 2
    assert token_requests(up, TOKEN_GRANT_EXCHANGE) == 2, up.stats()
    assert method_count(up, "tools/call") == 2, up.stats()
    for i in range(5):
        assert _call_add(gw.mcp_url(), None, "tx__add", i, headers=caller) == i + 1
    assert token_requests(up, TOKEN_GRANT_EXCHANGE) == 2, up.stats()
    assert method_count(up, "tools/call") == 7, up.stats()
