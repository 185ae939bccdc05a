"""Issue 4, acceptance item 5: upstream auth failures are relayed, not masked (docs/architecture.md,
invariant 6).

For servers that use the caller's own credential (`passthrough`, `oauthDelegate`,
`tokenExchange`), an upstream 401 becomes an HTTP 401 to the caller on every MCP path
(`/mcp` tools/call, `/mcp/{prefix}` tools/call and tools/list) and on REST, with
`WWW-Authenticate: Bearer resource_metadata="<gateway>/.well-known/oauth-protected-resource/mcp/<prefix>"`
plus the upstream's `error`/`scope`/`error_description`; the aggregate listing reports that
server in `_meta["switchboard.dev/listingErrors"]` and lists the others. The gateway serves that
metadata document with the upstream's authorization servers. The official Python SDK client sees
the 401, and its OAuth support completes a real flow against the upstream's authorization
server through the gateway. A 403 `insufficient_scope` on the caller's credential is relayed
like a 401 (SEP-2350), as a 403; on the gateway's credential a 403 stays a tool result with
`isError: true`. An expected relayed 401 logs at info, without tokens or the upstream URL's query string.
"""

from __future__ import annotations

import json

import httpx
import pytest
from harness import (
    read_asgi_request,
    KEY_HEADER,
    LISTING_ERRORS_META,
    MODERN_VERSION,
    SECRETS_USED,
    RawMcp,
    asgi_server,
    call_result_value,
    gateway_config,
    headers_seen,
    key,
    listing_meta,
    new_secret,
    pct,
    run_async,
    sdk_client,
    server,
    start_rust_upstream,
    token_exchange_auth,
    tool_names,
    unwrap_exception,
)

MODES = ["passthrough", "oauthDelegate", "tokenExchange"]


def parse_challenge(value: str | None) -> tuple[str, dict[str, str]]:
    """(scheme, {param: value}) of one `WWW-Authenticate` challenge."""
    assert value, "no WWW-Authenticate header"
    scheme, _, rest = value.strip().partition(" ")
    params: dict[str, str] = {}
    i = 0
    while i < len(rest):
        while i < len(rest) and rest[i] in " ,":
            i += 1
        eq = rest.find("=", i)
        if eq < 0:
            break
        name = rest[i:eq].strip().lower()
        i = eq + 1
        if i < len(rest) and rest[i] == '"':
            end = rest.index('"', i + 1)
            params[name] = rest[i + 1 : end]
            i = end + 1
        else:
            end = rest.find(",", i)
            end = len(rest) if end < 0 else end
            params[name] = rest[i:end].strip()
            i = end
    return scheme, params


def metadata_url(gw, prefix: str) -> str:
    return f"{gw.url}/.well-known/oauth-protected-resource/mcp/{prefix}"


def assert_relayed(status: int, headers, gw, prefix: str, what: str, error: str | None = "invalid_token") -> dict:
    assert status == 401, f"{what}: expected HTTP 401, got {status}"
    scheme, params = parse_challenge(headers.get("www-authenticate"))
    assert scheme.lower() == "bearer", f"{what}: {headers.get('www-authenticate')}"
    assert params.get("resource_metadata") == metadata_url(gw, prefix), f"{what}: {params}"
    assert params.get("error") == error, f"{what}: {params}"
    return params


def _caller(mode: str, client_key: str, token: str | None) -> dict[str, str]:
    """Headers of a caller presenting `token` as its own credential for server `pt`."""
    if mode == "oauthDelegate":
        h = {"Authorization": f"Bearer {client_key}"}
        if token is not None:
            h["X-MCP-pt-Authorization"] = token
        return h
    if token is None:  # the key in Authorization: the caller has no credential of its own
        return {"Authorization": f"Bearer {client_key}"}
    return {KEY_HEADER: client_key, "Authorization": f"Bearer {token}"}


@pytest.fixture
def relay_setup(gateways, procs, request):
    mode = request.param
    up = start_rust_upstream(procs, f"relay-{mode}")
    client_key = new_secret("client-key")
    good, bad = new_secret("good"), new_secret("bad")
    SECRETS_USED.update({good, bad})
    if mode == "tokenExchange":
        auth = token_exchange_auth(up, "tx" + new_secret("u").split("-")[-1][:8])
        required = "Bearer xt-sbx-good-"
    else:
        auth = {"type": mode}
        required = "Bearer sbx-good-"
    config = gateway_config(
        [
            server("pt", up.variant_url(f"require-prefix=authorization:{pct(required)}"), auth=auth),
            server("plain", up.mcp_url),
        ],
        [key("client", client_key, ["pt", "plain"])],
    )
    gw = gateways.start(config)
    return mode, up, gw, client_key, good, bad


@pytest.mark.parametrize("relay_setup", MODES, indirect=True)
@pytest.mark.parametrize("era", [MODERN_VERSION, "legacy"])
def test_upstream_401_is_relayed_on_mcp(relay_setup, era):
    mode, up, gw, client_key, good, bad = relay_setup
    refused = _caller(mode, client_key, bad)

    with RawMcp(gw.mcp_url(), None, era, headers=refused) as mcp:
        r = mcp.call_tool("pt__add", {"a": 1, "b": 2})
        assert_relayed(r.status, r.headers, gw, "pt", "/mcp tools/call")
        # The aggregate listing still lists the others and names the failing server.
        tools, metas = mcp.list_all_tools()
        assert "plain__add" in tool_names(tools)
        assert not any(n.startswith("pt__") for n in tool_names(tools)), tool_names(tools)
        errors = listing_meta(metas, LISTING_ERRORS_META)
        assert [(e["server"], e["kind"]) for e in errors] == [("pt", "upstream_auth_required")], errors
    with RawMcp(gw.mcp_url("pt"), None, era, headers=refused) as one:
        r = one.call_tool("add", {"a": 1, "b": 2})
        assert_relayed(r.status, r.headers, gw, "pt", "/mcp/pt tools/call")
        r = one.list_tools()
        assert_relayed(r.status, r.headers, gw, "pt", "/mcp/pt tools/list")

    # No credential of the caller's own at all: still a 401 to the caller (no error code,
    # as the upstream gave none).
    with RawMcp(gw.mcp_url(), None, era, headers=_caller(mode, client_key, None)) as mcp:
        r = mcp.call_tool("pt__add", {"a": 1, "b": 2})
        assert_relayed(r.status, r.headers, gw, "pt", "/mcp tools/call without a credential", error=None)

    # The same calls with an accepted credential go through: the 401 was about the credential.
    with RawMcp(gw.mcp_url(), None, era, headers=_caller(mode, client_key, good)) as mcp:
        r = mcp.call_tool("pt__add", {"a": 1, "b": 2})
        assert r.status == 200 and call_result_value(r.result) == 3, r.raw[:500]


@pytest.mark.parametrize("relay_setup", MODES, indirect=True)
def test_upstream_401_is_relayed_on_rest(relay_setup):
    mode, up, gw, client_key, good, bad = relay_setup
    refused = _caller(mode, client_key, bad)
    call = f"{gw.url}/mcp-rest/tools/call"
    for body in (
        {"name": "add", "server_id": "pt", "arguments": {"a": 1, "b": 2}},
        {"name": "pt__add", "arguments": {"a": 1, "b": 2}},
    ):
        r = httpx.post(call, json=body, headers=refused, timeout=15)
        assert_relayed(r.status_code, r.headers, gw, "pt", f"REST tools/call {body['name']}")
        assert r.json()["error"]["code"] == "upstream_auth_required", r.text
    r = httpx.get(f"{gw.url}/mcp-rest/tools/list", params={"server_id": "pt"}, headers=refused, timeout=15)
    assert_relayed(r.status_code, r.headers, gw, "pt", "REST tools/list?server_id=pt")
    # Unfiltered REST listing: the others are listed, the failure is reported.
    r = httpx.get(f"{gw.url}/mcp-rest/tools/list", headers=refused, timeout=15)
    assert r.status_code == 200, r.text
    assert "plain__add" in [t if isinstance(t, str) else t["name"] for t in r.json()["tools"]]
    assert [(e["server"], e["kind"]) for e in r.json()["errors"]] == [("pt", "upstream_auth_required")], r.text
    r = httpx.post(
        call,
        json={"name": "add", "server_id": "pt", "arguments": {"a": 2, "b": 2}},
        headers=_caller(mode, client_key, good),
        timeout=15,
    )
    assert r.status_code == 200 and call_result_value(r.json()) == 4, r.text


@pytest.mark.parametrize("relay_setup", ["passthrough"], indirect=True)
def test_protected_resource_metadata_names_the_upstreams_authorization_servers(relay_setup):
    mode, up, gw, client_key, good, bad = relay_setup
    # Served without any key: clients fetch it before they hold a credential.
    r = httpx.get(metadata_url(gw, "pt"), timeout=15)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["resource"] == f"{gw.url}/mcp/pt", doc
    assert doc["authorization_servers"] == [f"{up.base}/oauth"], doc
    assert "header" in doc.get("bearer_methods_supported", []), doc
    assert doc.get("scopes_supported") == ["mcp"], doc
    # The challenge of a relayed 401 points exactly there.
    r = httpx.post(
        f"{gw.url}/mcp-rest/tools/call",
        json={"name": "pt__add", "arguments": {}},
        headers=_caller(mode, client_key, bad),
        timeout=15,
    )
    _, params = parse_challenge(r.headers.get("www-authenticate"))
    assert httpx.get(params["resource_metadata"], timeout=15).json() == doc


class RichChallenge:
    """An upstream that refuses everything with a detailed challenge, and serves its
    protected-resource metadata at a non-default path named by that challenge (on its own
    origin, or on `metadata_origin`, another server running this app)."""

    def __init__(self, metadata_origin: str | None = None):
        self.metadata_fetches = 0
        self.metadata_origin = metadata_origin

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        host = dict(scope["headers"]).get(b"host", b"127.0.0.1").decode()
        if scope["method"] == "GET" and scope["path"] == "/meta/prm.json":
            self.metadata_fetches += 1
            doc = {
                "resource": f"http://{host}/mcp",
                "authorization_servers": ["https://idp.example/tenant-7"],
                "scopes_supported": ["files:read", "files:write"],
            }
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": json.dumps(doc).encode()})
            return
        origin = self.metadata_origin or f"http://{host}"
        challenge = (
            f'Bearer resource_metadata="{origin}/meta/prm.json", error="insufficient_scope", '
            'scope="files:read files:write", error_description="token lacks files:write"'
        )
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"www-authenticate", challenge.encode())],
            }
        )
        await send({"type": "http.response.body", "body": b'{"error":"unauthorized"}'})


def call_files(gw, client_key: str) -> httpx.Response:
    """A REST call to the `files` server with a user token its upstream refuses."""
    return httpx.post(
        f"{gw.url}/mcp-rest/tools/call",
        json={"name": "read", "server_id": "files", "arguments": {"path": "/x"}},
        headers={KEY_HEADER: client_key, "Authorization": "Bearer some-user-token"},
        timeout=15,
    )


def test_challenge_fields_are_copied_and_metadata_comes_from_where_the_upstream_said(gateways):
    client_key = new_secret("client-key")
    app = RichChallenge()
    with asgi_server(app) as upstream:
        config = gateway_config(
            [server("files", f"{upstream.url}/mcp", auth={"type": "passthrough"})],
            [key("client", client_key, ["files"])],
        )
        gw = gateways.start(config)
        # (REST here; the MCP status is test_upstream_401_is_relayed_on_mcp's subject.)
        r = call_files(gw, client_key)
        params = assert_relayed(r.status_code, r.headers, gw, "files", "REST tools/call", error="insufficient_scope")
        assert params.get("scope") == "files:read files:write", params
        assert params.get("error_description") == "token lacks files:write", params
        doc = httpx.get(metadata_url(gw, "files"), timeout=15).json()
        assert doc["authorization_servers"] == ["https://idp.example/tenant-7"], doc
        assert doc["scopes_supported"] == ["files:read", "files:write"], doc
        assert doc["resource"] == f"{gw.url}/mcp/files", doc
        assert app.metadata_fetches >= 1


@pytest.mark.parametrize("denied", [False, True], ids=["control", "denied"])
def test_metadata_the_challenge_names_is_fetched_only_from_an_allowed_address(gateways, denied):
    """The challenge is the upstream's to write: the metadata URL it names passes the address
    policy before the gateway fetches it (a literal address never meets the resolver)."""
    client_key = new_secret("client-key")
    elsewhere = RichChallenge()
    with asgi_server(elsewhere, host="127.0.0.2") as metadata_host:
        app = RichChallenge(metadata_origin=metadata_host.url)
        with asgi_server(app) as upstream:
            networks = {"upstreamNetworks": {"deny": ["127.0.0.2/32"]}} if denied else {}
            config = gateway_config(
                [server("files", f"{upstream.url}/mcp", auth={"type": "passthrough"})],
                [key("client", client_key, ["files"])],
                **networks,
            )
            gw = gateways.start(config)
            r = call_files(gw, client_key)
            assert r.status_code == 401, r.text
            doc = httpx.get(metadata_url(gw, "files"), timeout=15)
            if denied:
                assert doc.status_code == 502, doc.text
                assert elsewhere.metadata_fetches == 0, "fetched metadata from a denied address"
                assert "protected-resource metadata not fetched" in gw.logs()
            else:
                assert doc.status_code == 200 and doc.json()["authorization_servers"] == ["https://idp.example/tenant-7"]
                assert elsewhere.metadata_fetches >= 1


# --------------------------------------------------------------------------------------------
# The official Python SDK client


@pytest.mark.parametrize("relay_setup", ["passthrough"], indirect=True)
@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_sdk_client_sees_the_relayed_401(relay_setup, era):
    from mcp.shared.exceptions import MCPError

    mode, up, gw, client_key, good, bad = relay_setup
    record: list = []

    async def scenario():
        async with sdk_client(gw.mcp_url("pt"), None, era, headers=_caller(mode, client_key, bad), record=record) as c:
            try:
                await c.call_tool("add", {"a": 1, "b": 2})
            except Exception as exc:  # noqa: BLE001 - inspected below
                return exc
            return None

    outcome = run_async(scenario)
    refusals = [(m, u, s, h) for m, u, s, h in record if s == 401]
    assert refusals, f"the SDK saw no HTTP 401: {[(m, u, s) for m, u, s, _ in record]}"
    _, url, _, headers = refusals[0]
    assert url == gw.mcp_url("pt")
    _, params = parse_challenge(headers.get("www-authenticate"))
    assert params.get("resource_metadata") == metadata_url(gw, "pt"), headers
    error = unwrap_exception(outcome, MCPError) if outcome is not None else None
    assert error is not None, f"the call did not fail as an MCP error: {outcome!r}"


class MemoryTokens:
    """TokenStorage for the SDK's OAuth provider."""

    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


class OAuthProtectedUpstream:
    """A small OAuth-protected MCP server (2026-07-28, stateless) with its own authorization
    server, complete enough for the SDK's OAuth client: RFC 9728 metadata at
    `/.well-known/oauth-protected-resource`, RFC 8414 metadata (with an `authorization_endpoint`,
    which the SDK requires and the example upstream does not serve) at
    `/.well-known/oauth-authorization-server/oauth`, a client-credentials token endpoint at
    `/oauth/token` (client `ID` authenticates with `secret-ID`; tokens `tok-ID-N`), and tools
    `add` and `request_headers` for callers with a token it issued."""

    def __init__(self):
        self.issued: set[str] = set()
        self.token_requests = 0
        self.mcp_requests: list[tuple[str | None, dict[str, str]]] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        request = await read_asgi_request(scope, receive)
        if request is None:
            return
        body, headers = request
        base = f"http://{headers.get('host', '127.0.0.1')}"
        path, method = scope["path"], scope["method"]
        if method == "GET" and path.startswith("/.well-known/oauth-protected-resource"):
            return await self._json(send, 200, {"resource": f"{base}/mcp", "authorization_servers": [f"{base}/oauth"]})
        if method == "GET" and path == "/.well-known/oauth-authorization-server/oauth":
            return await self._json(
                send,
                200,
                {
                    "issuer": f"{base}/oauth",
                    "authorization_endpoint": f"{base}/oauth/authorize",
                    "token_endpoint": f"{base}/oauth/token",
                    "grant_types_supported": ["client_credentials"],
                    "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
                    "response_types_supported": ["code"],
                },
            )
        if method == "POST" and path == "/oauth/token":
            from urllib.parse import parse_qs

            self.token_requests += 1
            form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
            client = form.get("client_id", "")
            if form.get("grant_type") != "client_credentials" or form.get("client_secret") != f"secret-{client}":
                return await self._json(send, 401, {"error": "invalid_client"})
            token = f"tok-{client}-{len(self.issued) + 1}"
            self.issued.add(token)
            return await self._json(send, 200, {"access_token": token, "token_type": "Bearer", "expires_in": 3600})
        if method == "POST" and path == "/mcp":
            req = json.loads(body or b"{}")
            self.mcp_requests.append((req.get("method"), headers))
            token = headers.get("authorization", "").removeprefix("Bearer ")
            if token not in self.issued:
                challenge = f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource"'
                if "authorization" in headers:
                    challenge += ', error="invalid_token"'
                return await self._json(
                    send, 401, {"error": "unauthorized"}, [(b"www-authenticate", challenge.encode())]
                )
            if "id" not in req:
                return await self._json(send, 202, None)
            params = req.get("params") or {}
            if req.get("method") == "tools/list":
                tools = [
                    {
                        "name": "add",
                        "inputSchema": {
                            "type": "object",
                            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                        },
                    },
                    {"name": "request_headers", "inputSchema": {"type": "object"}},
                ]
                result = {"tools": tools, "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
            elif req.get("method") == "tools/call" and params.get("name") == "add":
                total = params["arguments"]["a"] + params["arguments"]["b"]
                result = {"content": [{"type": "text", "text": str(total)}], "structuredContent": {"result": total}}
            elif req.get("method") == "tools/call" and params.get("name") == "request_headers":
                result = {"content": [{"type": "text", "text": json.dumps(headers)}], "structuredContent": headers}
            else:
                error = {"code": -32601, "message": "Method not found"}
                return await self._json(send, 200, {"jsonrpc": "2.0", "id": req["id"], "error": error})
            result["resultType"] = "complete"
            return await self._json(send, 200, {"jsonrpc": "2.0", "id": req["id"], "result": result})
        return await self._json(send, 404, {"error": "not found"})

    @staticmethod
    async def _json(send, status: int, payload, extra=()):
        data = b"" if payload is None else json.dumps(payload).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), *extra],
            }
        )
        await send({"type": "http.response.body", "body": data})


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_sdk_oauth_client_completes_its_flow_through_the_gateway(gateways, era):
    """A standard MCP client with OAuth support, pointed at the gateway URL of a passthrough
    server: the relayed 401 sends it to the gateway's metadata, from there to the upstream's
    authorization server; it obtains a token and its retry succeeds."""
    import httpx2
    from mcp import Client, Implementation
    from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
    from mcp.client.streamable_http import streamable_http_client

    client_key = new_secret("client-key")
    client_id = "sdk" + new_secret("u").split("-")[-1][:8]
    app = OAuthProtectedUpstream()
    record: list = []

    async def on_response(response):
        record.append((response.request.method, str(response.request.url), response.status_code))

    with asgi_server(app) as up:
        config = gateway_config(
            [server("pt", f"{up.url}/mcp", auth={"type": "passthrough"})], [key("client", client_key, ["pt"])]
        )
        gw = gateways.start(config)

        async def scenario():
            provider = ClientCredentialsOAuthProvider(
                server_url=gw.mcp_url("pt"),
                storage=MemoryTokens(),
                client_id=client_id,
                client_secret=f"secret-{client_id}",
                token_endpoint_auth_method="client_secret_post",
                issuer=f"{up.url}/oauth",
            )
            async with httpx2.AsyncClient(
                headers={KEY_HEADER: client_key},
                auth=provider,
                timeout=httpx2.Timeout(30, read=60),
                event_hooks={"response": [on_response]},
            ) as http:
                async with Client(
                    streamable_http_client(gw.mcp_url("pt"), http_client=http),
                    mode=era,
                    client_info=Implementation(name="switchboard-e2e-oauth", version="0"),
                    cache=None,
                ) as c:
                    names = [t.name for t in (await c.list_tools()).tools]
                    added = await c.call_tool("add", {"a": 20, "b": 22})
                    seen = await c.call_tool("request_headers", {})
                    return names, added, seen

        names, added, seen = run_async(scenario)
        assert sorted(names) == ["add", "request_headers"]
        assert added.structured_content == {"result": 42}
        upstream_saw = seen.structured_content
        assert isinstance(upstream_saw, dict), seen
        assert upstream_saw.get("authorization") == f"Bearer tok-{client_id}-1", upstream_saw
        assert client_key not in json.dumps(upstream_saw)
        assert app.token_requests == 1, f"the client needed {app.token_requests} tokens"
        statuses = [(m, u.split("?")[0], s) for m, u, s in record]
        assert any(s == 401 and u == gw.mcp_url("pt") for _, u, s in statuses), statuses
        assert ("GET", metadata_url(gw, "pt"), 200) in statuses, statuses
        assert ("POST", f"{up.url}/oauth/token", 200) in statuses, statuses


# --------------------------------------------------------------------------------------------
# 403 and logs


@pytest.mark.parametrize("auth_type", ["passthrough", "oauthDelegate", "bearer"])
def test_an_upstream_scope_challenge_is_the_callers_on_their_credential_else_a_tool_error(gateways, rust_upstream, auth_type):
    """The example upstream's `status=403` answers 403 `insufficient_scope`, `scope="mcp:admin"`,
    with its own `resource_metadata`. On the caller's own credential (SEP-2350) that is the
    caller's 403, its scope kept and `resource_metadata` the gateway's for the server; on the
    gateway's credential (`bearer`) it stays the tool's error result."""
    client_key = new_secret("client-key")
    auth = {"type": auth_type, "secret": new_secret("cred")} if auth_type == "bearer" else {"type": auth_type}
    config = gateway_config(
        [server("locked", rust_upstream.variant_url("status=403"), auth=auth)], [key("client", client_key, ["locked"])]
    )
    gw = gateways.start(config)
    caller = {KEY_HEADER: client_key, "Authorization": "Bearer someone", "X-MCP-locked-Authorization": "someone"}
    relayed = auth_type != "bearer"
    metadata = f'resource_metadata="{gw.url}/.well-known/oauth-protected-resource/mcp/locked"'
    for url, tool in ((gw.mcp_url(), "locked__add"), (gw.mcp_url("locked"), "add")):
        for era in (MODERN_VERSION, "legacy"):
            with RawMcp(url, None, era, headers=caller) as mcp:
                r = mcp.call_tool(tool, {"a": 1, "b": 2})
                if relayed:
                    assert r.status == 403, f"{url} {era}: HTTP {r.status} {r.raw[:300]!r}"
                    challenge = r.headers["www-authenticate"]
                    assert 'error="insufficient_scope"' in challenge and 'scope="mcp:admin"' in challenge, challenge
                    assert metadata in challenge, challenge
                    assert r.error["data"]["scope"] == "mcp:admin", r.raw[:300]
                else:
                    assert r.status == 200, f"{url} {era}: HTTP {r.status} {r.raw[:300]!r}"
                    assert r.result.get("isError") is True, r.result
                    assert "www-authenticate" not in r.headers
    r = httpx.post(
        f"{gw.url}/mcp-rest/tools/call",
        json={"name": "add", "server_id": "locked", "arguments": {}},
        headers=caller,
        timeout=15,
    )
    if relayed:
        assert r.status_code == 403 and r.json()["error"]["code"] == "insufficient_scope", r.text
        assert metadata in r.headers["www-authenticate"], r.headers
    else:
        assert r.status_code == 200 and r.json().get("isError") is True, r.text

    async def scenario():
        async with sdk_client(gw.mcp_url("locked"), None, MODERN_VERSION, headers=caller) as c:
            return await c.call_tool("add", {"a": 1, "b": 2})

    if relayed:
        # The SDK (no OAuth provider here) surfaces the 403 as a failure, not a result.
        with pytest.raises(BaseException):
            run_async(scenario)
    else:
        assert run_async(scenario).is_error is True


def test_relayed_401_logs_at_info_without_tokens_or_query(gateways, procs):
    up = start_rust_upstream(procs, "relay-logs")
    client_key = new_secret("client-key")
    sig, bad = new_secret("query-sig"), new_secret("bad-token")
    SECRETS_USED.update({sig, bad})
    url = up.variant_url(f"require-prefix=authorization:{pct('Bearer sbx-good-')}") + f"?tenant=t1&sig={sig}"
    config = gateway_config([server("pt", url, auth={"type": "passthrough"})], [key("client", client_key, ["pt"])])
    gw = gateways.start(config)
    offset = len(gw.logs())
    caller = {KEY_HEADER: client_key, "Authorization": f"Bearer {bad}"}
    with RawMcp(gw.mcp_url(), None, MODERN_VERSION, headers=caller) as mcp:
        for _ in range(3):
            r = mcp.call_tool("pt__add", {"a": 1, "b": 2})
            assert r.message["error"]["code"] == -32003, r.raw[:300]
        mcp.list_all_tools()
    r = httpx.post(
        f"{gw.url}/mcp-rest/tools/call", json={"name": "pt__add", "arguments": {}}, headers=caller, timeout=15
    )
    assert r.status_code == 401, r.text
    logs = gw.logs()[offset:]  # the log only: the audit records carry the 401 by design
    relay_lines = [line for line in logs.splitlines() if "pt" in line and ("401" in line or "authenticate" in line)]
    assert relay_lines, f"the relayed 401 was not logged at all:\n{logs[-3000:]}"
    for line in relay_lines:
        assert " INFO " in line, f"a relayed 401 logged above info: {line}"
    assert not [line for line in logs.splitlines() if " ERROR " in line or " WARN " in line], logs[-3000:]
    assert "stack backtrace" not in logs.lower()
    for secret in (sig, bad, client_key):
        assert secret not in logs, "a token or the URL's query string reached the log"


# --------------------------------------------------------------------------------------------
# Unprefixed names on /mcp


@pytest.mark.parametrize("relay_setup", ["passthrough"], indirect=True)
def test_unprefixed_call_whose_only_candidate_needs_auth_is_a_401(relay_setup):
    """An unprefixed `tools/call` on `/mcp` makes the gateway list the caller-credential
    server with the caller's credential; when that listing is refused (401), the caller must
    learn that it has to authenticate, not that the tool does not exist (issue 4: a 401 on
    "tools/list or any other request" is relayed on the MCP and REST paths)."""
    mode, up, gw, client_key, good, bad = relay_setup
    # Only the passthrough server in view, so there is exactly one possible owner.
    refused = {**_caller(mode, client_key, bad), "X-MCP-Servers": "pt"}
    with RawMcp(gw.mcp_url(), None, MODERN_VERSION, headers=refused) as mcp:
        r = mcp.call_tool("request_headers")
        got = r.messages[-1] if r.messages else {}
        assert r.status == 401, f"expected HTTP 401, got {r.status}: {json.dumps(got)[:400]}"
        assert_relayed(r.status, r.headers, gw, "pt", "unprefixed /mcp tools/call")
    # Control: with the accepted credential the same unprefixed name resolves and runs.
    with RawMcp(
        gw.mcp_url(), None, MODERN_VERSION, headers={**_caller(mode, client_key, good), "X-MCP-Servers": "pt"}
    ) as mcp:
        r = mcp.call_tool("request_headers")
        assert r.status == 200 and headers_seen(r.result).get("authorization", "").startswith("Bearer sbx-good-"), (
            r.raw[:400]
        )
