"""Malformed JSON-RPC bodies get a JSON-RPC error with the right code (and HTTP 400), never a
202 that tells the client its message was taken, and never reach an upstream."""

from __future__ import annotations

import httpx
import pytest
from harness import MODERN_VERSION, gateway_config, key, method_count, new_secret, server

PARSE_ERROR, INVALID_REQUEST = -32700, -32600

CASES = [
    ("only jsonrpc and id", b'{"jsonrpc":"2.0","id":7}', INVALID_REQUEST),
    ("id null and a result", b'{"jsonrpc":"2.0","id":null,"result":{}}', INVALID_REQUEST),
    ("result and error both", b'{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1}}', INVALID_REQUEST),
    ("jsonrpc 1.0", b'{"jsonrpc":"1.0","id":1,"method":"tools/list"}', INVALID_REQUEST),
    ("no jsonrpc", b'{"id":1,"method":"tools/list"}', INVALID_REQUEST),
    ("method a number", b'{"jsonrpc":"2.0","id":1,"method":5}', INVALID_REQUEST),
    ("params an array", b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[1]}', INVALID_REQUEST),
    ("a batch", b'[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]', INVALID_REQUEST),
    ("a string", b'"tools/list"', INVALID_REQUEST),
    ("not JSON", b'{"jsonrpc":"2.0","id":1,', PARSE_ERROR),
    ("empty body", b"", PARSE_ERROR),
]


@pytest.mark.parametrize("path", ["/mcp", "/mcp/alpha"])
@pytest.mark.parametrize(("case", "body", "code"), CASES, ids=[c[0] for c in CASES])
def test_malformed_message_is_refused_with_its_code(gateways, rust_upstream, path, case, body, code):
    k = new_secret("key")
    gw = gateways.start(gateway_config([server("alpha", rust_upstream.mcp_url)], [key("one", k, ["alpha"])]))
    before = method_count(rust_upstream, "tools/list")
    reply = httpx.post(
        f"{gw.url}{path}",
        content=body,
        headers={
            "Authorization": f"Bearer {k}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN_VERSION,
        },
        timeout=10,
    )
    assert reply.status_code == 400, f"{case}: {reply.status_code} {reply.text!r}"
    error = reply.json().get("error") or {}
    assert error.get("code") == code, f"{case}: {reply.text}"
    assert error.get("message"), f"{case}: an error says what is wrong: {reply.text}"
    assert method_count(rust_upstream, "tools/list") == before, f"{case} reached the upstream"
