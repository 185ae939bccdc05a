"""`Mcp-Param-*` headers (2026-07-28): a 2026-07-28 client's own pass through untouched and are
never made up, so a request the upstream must refuse (header missing or not mirroring the
argument) is refused through the gateway exactly as directly (HTTP 400, -32020); a legacy
client, which knows nothing of them, gets them derived from the tool's schema.

Upstream: the Rust example upstream, whose `echo(text, tag?)` marks `tag` with
`"x-mcp-header": "Tag"`.
"""

from __future__ import annotations

import json

import httpx
import pytest

from harness import (
    MODERN_VERSION,
    RawMcp,
    gateway_config,
    key,
    new_secret,
    parse_body,
    server,
    start_rust_upstream,
)

CASES = {
    # name: (Mcp-Param-Tag header or None, expected (status, code or None))
    "missing": (None, (400, -32020)),
    "mismatched": ("red", (400, -32020)),
    "mirrored": ("blue", (200, None)),
}


def call(url: str, tool: str, header: str | None, auth: str | None) -> tuple[int, int | None, str]:
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION, "io.modelcontextprotocol/clientCapabilities": {}}
    body = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {"text": "hi", "tag": "blue"}, "_meta": meta},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    if header is not None:
        headers["Mcp-Param-Tag"] = header
    if auth is not None:
        headers["Authorization"] = f"Bearer {auth}"
    r = httpx.post(url, content=json.dumps(body), headers=headers, timeout=15)
    messages = parse_body(r.headers.get("content-type", ""), r.content) if r.content.strip() else []
    error = next((m["error"] for m in messages if isinstance(m, dict) and "error" in m), None)
    return r.status_code, (error or {}).get("code"), r.text[:500]


@pytest.fixture
def world(gateways, procs):
    up = start_rust_upstream(procs, "params")
    secret = new_secret("params-client")
    gw = gateways.start(gateway_config([server("ex", up.mcp_url)], [key("c", secret, ["ex"])]))
    return up, gw, secret


@pytest.mark.parametrize("endpoint", ["single", "aggregate"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_2026_clients_param_headers_are_its_own(world, case, endpoint):
    up, gw, secret = world
    header, expected = CASES[case]
    direct = call(up.mcp_url, "echo", header, None)
    assert direct[:2] == expected, f"the upstream directly: {direct}"
    url, tool = (gw.mcp_url("ex"), "echo") if endpoint == "single" else (gw.mcp_url(), "ex__echo")
    through = call(url, tool, header, secret)
    assert through[:2] == direct[:2], f"through the gateway {through}, directly {direct}"


@pytest.mark.parametrize("endpoint", ["single", "aggregate"])
def test_a_legacy_client_gets_them_derived(world, endpoint):
    _, gw, secret = world
    url, tool = (gw.mcp_url("ex"), "echo") if endpoint == "single" else (gw.mcp_url(), "ex__echo")
    with RawMcp(url, secret, "legacy") as mcp:
        reply = mcp.call_tool(tool, {"text": "hi", "tag": "blue"})
    assert reply.status == 200 and "error" not in reply.message, reply.raw[:500]
    assert not reply.result.get("isError"), reply.result
