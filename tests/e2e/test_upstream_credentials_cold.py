"""Issue 4, acceptance items 1 and 7: caller-credential servers on cold replicas.

Item 1 (the seed scenario): two fresh gateway processes behind a round-robin balancer; a
`passthrough` server (and, as controls, every other way a credential can reach an upstream:
`oauthDelegate`, `tokenExchange`, `oauth2ClientCredentials`, plain `bearer`); fresh client
sessions send a prefixed `tools/call` six times with no listing anywhere: 6/6 succeed with the
right credential upstream; a tool the upstream lacks: 4/4 "not found" (-32602); the REST call
with `server_id` on a cold replica: 200 with the result.

Item 7: two callers whose upstream catalogs differ (the upstream's tools depend on the caller's
token) use the same `passthrough` server on cold replicas with unprefixed names on `/mcp`: each
sees and calls its own tools and never the other's; a caller with an empty catalog gets "not
found" and the gateway does not re-list on every call; a server outside the scope is never
listed.
"""

from __future__ import annotations

import json

import httpx
import pytest
from harness import (
    read_asgi_request,
    INVALID_PARAMS,
    KEY_HEADER,
    MODERN_VERSION,
    RawMcp,
    asgi_server,
    balancer,
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
    token_exchange_auth,
    tool_names,
    write_config,
)

COLD_MODES = ["passthrough", "oauthDelegate", "tokenExchange", "oauth2ClientCredentials", "bearer"]


def _cold_case(mode: str, up, client_key: str) -> tuple[dict, dict[str, str], str]:
    """(server entry, caller headers, the Authorization prefix the upstream insists on)."""
    uid = new_secret("u").split("-")[-1][:10]
    if mode == "passthrough":
        user = new_secret("user")  # sbx-user-<hex>: the caller's own token
        required = "Bearer sbx-user-"
        auth: dict = {"type": "passthrough"}
        headers = {KEY_HEADER: client_key, "Authorization": f"Bearer {user}"}
    elif mode == "oauthDelegate":
        delegated = new_secret("deleg")
        required = f"Bearer {delegated}"
        auth = {"type": "oauthDelegate"}
        headers = {"Authorization": f"Bearer {client_key}", "X-MCP-cold-Authorization": delegated}
    elif mode == "tokenExchange":
        user = new_secret("user")
        required = f"Bearer xt-{user}-"
        auth = token_exchange_auth(up, f"tx{uid}")
        headers = {KEY_HEADER: client_key, "Authorization": f"Bearer {user}"}
    elif mode == "oauth2ClientCredentials":
        required = f"Bearer at-cc{uid}-"
        auth = oauth_server(up, f"cc{uid}")
        headers = {"Authorization": f"Bearer {client_key}"}
    else:
        token = f"plain-{uid}"
        required = f"Bearer {token}"
        auth = {"type": "bearer", "secret": token}
        headers = {"Authorization": f"Bearer {client_key}"}
    url = up.variant_url(f"require-prefix=authorization:{pct(required)}")
    return server("cold", url, auth=auth), headers, required


@pytest.mark.parametrize("mode", COLD_MODES)
def test_cold_replicas_serve_prefixed_calls_for_every_credential_mode(gateways, procs, mode):
    up = start_rust_upstream(procs, f"cold-{mode}")
    client_key = new_secret("client-key")
    entry, caller_headers, required = _cold_case(mode, up, client_key)
    config = gateway_config([entry], [key("client", client_key, ["cold"])])
    path = gateways.config_path("shared")
    write_config(path, config)
    gw1 = gateways.start(config_path=path, name=f"{mode}-replica1")
    gw2 = gateways.start(config_path=path, name=f"{mode}-replica2")

    failures: list[str] = []
    with balancer([gw1.url, gw2.url]) as lb:
        # 6 prefixed calls, each from a fresh client session, eras alternating, no listing.
        for i in range(6):
            era = MODERN_VERSION if i % 2 == 0 else "legacy"
            with RawMcp(f"{lb.url}/mcp", None, era, headers=caller_headers) as mcp:
                try:
                    if i % 3 == 2:
                        reply = mcp.call_tool("cold__add", {"a": i, "b": 100})
                        assert reply.status == 200, f"HTTP {reply.status}: {reply.raw[:400]!r}"
                        assert call_result_value(reply.result) == i + 100
                    else:
                        reply = mcp.call_tool("cold__request_headers")
                        assert reply.status == 200, f"HTTP {reply.status}: {reply.raw[:400]!r}"
                        seen = headers_seen(reply.result)
                        assert seen.get("authorization", "").startswith(required), seen.get("authorization")
                        assert client_key not in json.dumps(seen), "the gateway key went upstream"
                except AssertionError as exc:
                    failures.append(f"call {i} ({era}): {exc}")
        assert failures == [], f"{len(failures)}/6 prefixed calls failed:\n" + "\n".join(failures)

        # 4 calls for a tool the upstream does not have: "not found", named as sent.
        for i in range(4):
            era = MODERN_VERSION if i % 2 == 0 else "legacy"
            with RawMcp(f"{lb.url}/mcp", None, era, headers=caller_headers) as mcp:
                reply = mcp.call_tool("cold__no_such_tool")
                error = reply.error
                assert error["code"] == INVALID_PARAMS, error
                assert "no_such_tool" in error["message"], error

        served_calls = {i for i, _, _, _, rpc in lb.served if rpc == "tools/call"}
        assert served_calls == {0, 1}, f"both replicas must have answered tools/call: {lb.served}"
        assert not any(rpc == "tools/list" for *_, rpc in lb.served), "a client sent tools/list"
    assert method_count(up, "tools/list") == 0, f"the gateway listed the upstream: {up.stats()}"
    assert method_count(up, "tools/call") >= 10

    # REST with server_id on a replica that has never served anything.
    gw3 = gateways.start(config_path=path, name=f"{mode}-replica3")
    r = httpx.post(
        f"{gw3.url}/mcp-rest/tools/call",
        json={"name": "add", "server_id": "cold", "arguments": {"a": 40, "b": 2}},
        headers=caller_headers,
        timeout=15,
    )
    assert r.status_code == 200, f"HTTP {r.status_code}: {r.text[:500]}"
    assert call_result_value(r.json()) == 42, r.text
    r = httpx.post(
        f"{gw3.url}/mcp-rest/tools/call",
        json={"name": "no_such_tool", "server_id": "cold", "arguments": {}},
        headers=caller_headers,
        timeout=15,
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == "tool_not_found", r.text
    assert method_count(up, "tools/list") == 0, f"the gateway listed the upstream: {up.stats()}"


# --------------------------------------------------------------------------------------------
# Item 7: a catalog that depends on the caller's token


class CatalogByToken:
    """A minimal stateless (2026-07-28) MCP upstream whose tools depend on the caller's
    `Authorization`. An unknown or missing token gets 401 with a challenge. `seen` records
    (path, JSON-RPC method, tool, Authorization) for every POST."""

    def __init__(self, catalogs: dict[str, list[str]]):
        self.catalogs = catalogs
        self.seen: list[tuple[str, str | None, str | None, str | None]] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        request = await read_asgi_request(scope, receive)
        if request is None:
            return
        body, headers = request
        auth = headers.get("authorization")
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            req = {}
        method = req.get("method")
        params = req.get("params") or {}
        tool = params.get("name") if method == "tools/call" else None
        self.seen.append((scope["path"], method, tool, auth))
        if scope["method"] != "POST":
            return await self._reply(send, 405, {"error": "POST only"})
        token = (auth or "").removeprefix("Bearer ").strip()
        if token not in self.catalogs:
            host = headers.get("host", "127.0.0.1")
            challenge = f'Bearer resource_metadata="http://{host}/.well-known/oauth-protected-resource"'
            if auth:
                challenge += ', error="invalid_token"'
            return await self._reply(send, 401, {"error": "unauthorized"}, [(b"www-authenticate", challenge.encode())])
        if "id" not in req:
            return await self._reply(send, 202, None)
        mine = self.catalogs[token]
        if method == "tools/list":
            tools = [
                {"name": n, "description": f"{n} for this caller", "inputSchema": {"type": "object"}} for n in mine
            ]
            result = {"tools": tools, "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
            return await self._reply(send, 200, {"jsonrpc": "2.0", "id": req["id"], "result": result})
        if method == "tools/call":
            if tool not in mine:
                error = {"code": -32602, "message": f"Unknown tool: {tool}"}
                return await self._reply(send, 200, {"jsonrpc": "2.0", "id": req["id"], "error": error})
            result = {
                "content": [{"type": "text", "text": f"{tool} ran for {token}"}],
                "structuredContent": {"tool": tool, "caller": token},
                "resultType": "complete",
            }
            return await self._reply(send, 200, {"jsonrpc": "2.0", "id": req["id"], "result": result})
        error = {"code": -32601, "message": f"Method not found: {method}"}
        return await self._reply(send, 200, {"jsonrpc": "2.0", "id": req.get("id"), "error": error})

    @staticmethod
    async def _reply(send, status: int, payload, extra_headers=()):
        data = b"" if payload is None else json.dumps(payload).encode()
        headers = [(b"content-type", b"application/json"), *extra_headers]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    def lists_by(self, token: str, path: str = "/mcp") -> int:
        return sum(1 for p, m, _, a in self.seen if p == path and m == "tools/list" and a == f"Bearer {token}")

    def calls(self) -> list[tuple[str | None, str | None]]:
        return [(t, a) for _, m, t, a in self.seen if m == "tools/call"]


def test_two_callers_with_different_catalogs_on_cold_replicas(gateways):
    client_key = new_secret("client-key")
    alice, bob, carol = new_secret("alice"), new_secret("bob"), new_secret("carol")
    app = CatalogByToken({alice: ["alice_report", "alice_notes"], bob: ["bob_audit"], carol: []})
    with asgi_server(app) as upstream:
        config = gateway_config(
            [
                server("pt", f"{upstream.url}/mcp", auth={"type": "passthrough"}),
                # Same upstream, never in the key's scope: it must never be listed.
                server("hidden", f"{upstream.url}/hidden/mcp", auth={"type": "passthrough"}),
            ],
            [key("client", client_key, ["pt"])],
        )
        path = gateways.config_path("shared")
        write_config(path, config)

        def as_caller(token: str) -> dict[str, str]:
            return {KEY_HEADER: client_key, "Authorization": f"Bearer {token}"}

        own = {alice: "alice_report", bob: "bob_audit"}
        other = {alice: "bob_audit", bob: "alice_report"}
        for rnd, era in enumerate([MODERN_VERSION, "legacy"]):
            gw1 = gateways.start(config_path=path, name=f"catalog{rnd}a")
            gw2 = gateways.start(config_path=path, name=f"catalog{rnd}b")
            with balancer([gw1.url, gw2.url]) as lb:
                # Modern requests alternate replicas one by one; this order makes each caller
                # land on a replica where the other caller's listing is already cached.
                order = [alice, bob, bob, alice, alice, bob, bob, alice]
                for token in order:
                    with RawMcp(f"{lb.url}/mcp", None, era, headers=as_caller(token)) as mcp:
                        reply = mcp.call_tool(own[token])
                        assert reply.status == 200, f"HTTP {reply.status}: {reply.raw[:400]!r}"
                        assert call_result_value(reply.result) == {"tool": own[token], "caller": token}
                        stolen = mcp.call_tool(other[token])
                        err = stolen.error
                        assert err["code"] == INVALID_PARAMS and other[token] in err["message"], err
                        listed = tool_names(mcp.list_all_tools()[0])
                        mine = {alice: {"pt__alice_report", "pt__alice_notes"}, bob: {"pt__bob_audit"}}[token]
                        assert set(listed) == mine, listed
            gw1.stop()
            gw2.stop()

        # Every call that reached the upstream carried the token of the caller it belongs to.
        for tool, auth in app.calls():
            owner = alice if tool.startswith("alice") else bob
            assert auth == f"Bearer {owner}", (tool, auth)
        assert not any(p.startswith("/hidden") for p, *_ in app.seen), "an out-of-scope server was listed"

        # An empty catalog is a cached answer too: carol's unknown names are "not found", and
        # her listing is fetched once, not on every call.
        gw = gateways.start(config_path=path, name="catalog-empty")
        before = app.lists_by(carol)
        for _ in range(3):
            with RawMcp(gw.mcp_url(), None, MODERN_VERSION, headers=as_caller(carol)) as mcp:
                err = mcp.call_tool("alice_report").error
                assert err["code"] == INVALID_PARAMS, err
        assert app.lists_by(carol) - before == 1, f"carol's empty listing was fetched {app.lists_by(carol) - before}x"
        # And alice on the same replica is not masked by carol's empty listing.
        with RawMcp(gw.mcp_url(), None, MODERN_VERSION, headers=as_caller(alice)) as mcp:
            assert call_result_value(mcp.call_tool("alice_notes").result) == {"tool": "alice_notes", "caller": alice}


def test_legacy_upstream_sessions_are_per_caller_credential(gateways, procs):
    """A legacy upstream that binds each session to the Authorization that opened it (as the
    reference SDK does per user): callers of a passthrough server never share an upstream
    session, so neither is refused nor makes the other re-initialize. 2026-07-28 callers share
    one upstream session per credential; a legacy client session gets one of its own (it carries
    that client's capabilities and ends with it)."""
    up = start_rust_upstream(procs, "session-auth")
    client_key = new_secret("client-key")
    alice, bob = new_secret("alice"), new_secret("bob")
    config = gateway_config(
        [server("pt", up.variant_url("era=legacy,session-auth"), auth={"type": "passthrough"})],
        [key("client", client_key, ["pt"])],
    )
    gw = gateways.start(config)
    for i, user in enumerate([alice, bob] * 4):
        era = MODERN_VERSION if i % 3 else "legacy"
        with RawMcp(
            gw.mcp_url(), None, era, headers={KEY_HEADER: client_key, "Authorization": f"Bearer {user}"}
        ) as mcp:
            reply = mcp.call_tool("pt__request_headers")
            assert reply.status == 200, f"call {i}: HTTP {reply.status} {reply.raw[:300]!r}"
            assert headers_seen(reply.result)["authorization"] == f"Bearer {user}"
    sessions: dict[str, set[str]] = {}
    for r in up.recent_requests():
        if r.get("session"):
            sessions.setdefault(r["session"], set()).add(r["headers"].get("authorization"))
    assert sessions and all(len(v) == 1 for v in sessions.values()), f"a session carried two credentials: {sessions}"
    legacy_client_sessions = sum(1 for i in range(8) if i % 3 == 0)
    assert method_count(up, "initialize") == 2 + legacy_client_sessions, (
        f"expected one upstream session per caller credential and one per legacy client session: {up.stats()}"
    )
