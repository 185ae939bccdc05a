"""Self-tests of the harness pieces that need no gateway: the Python SDK upstream in each mode,
the raw JSON-RPC client, and the round-robin balancer. If these fail, the gateway tests cannot
be trusted."""

from __future__ import annotations

import secrets
import ssl

import httpx
import httpx2
import pytest
from harness import (
    MODERN_VERSION,
    RawMcp,
    balancer,
    call_result_value,
    client_tls,
    headers_seen,
    run_async,
    sdk_client,
    sse_data,
    start_python_upstream,
    tool_names,
)

def _context(client) -> ssl.SSLContext:
    # (httpx's and httpx2's transports keep the context in their httpcore pool)
    return client._transport._pool._ssl_context


def test_default_tls_clients_share_one_context_and_others_keep_theirs():
    """harness.share_client_tls (the conftest turns it on): every client built with the default
    TLS settings, of httpx and of the SDK's httpx2, sync and async, uses the process's one
    context; a client given a context of its own, or no verification, keeps what it was given."""
    shared = [httpx.Client(), httpx.AsyncClient(), httpx2.Client(), httpx2.AsyncClient()]
    assert _context(shared[0]) is client_tls() and _context(shared[1]) is client_tls()
    assert _context(shared[2]) is _context(shared[3])
    assert isinstance(_context(shared[2]), ssl.SSLContext) and _context(shared[2]).verify_mode == ssl.CERT_REQUIRED
    own = ssl.create_default_context()
    assert _context(httpx.Client(verify=own)) is own and _context(httpx2.Client(verify=own)) is own
    unverified = _context(httpx.Client(verify=False))
    assert unverified is not client_tls() and unverified.verify_mode == ssl.CERT_NONE
    for client in shared[0], shared[2]:
        client.close()


PY_TOOLS = {"add", "echo", "request_headers", "progress", "whoami", "sample", "ask", "roots", "touch", "slow_stream"}


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION, "auto"])
@pytest.mark.parametrize("flavour", ["python", "python-stateless"])
def test_python_upstream_answers_the_sdk_client(request, flavour, era):
    upstream = request.getfixturevalue(
        {"python": "python_upstream", "python-stateless": "python_upstream_stateless"}[flavour]
    )
    record: list = []

    async def scenario():
        async with sdk_client(upstream.mcp_url, "client-token", era, record=record) as client:
            listed = await client.list_tools()
            added = await client.call_tool("add", {"a": 2, "b": 3})
            echoed = await client.call_tool("echo", {"text": "héllo"})
            seen = await client.call_tool("request_headers", {})
            return client.protocol_version, listed, added, echoed, seen

    version, listed, added, echoed, seen = run_async(scenario)
    assert version == (MODERN_VERSION if era != "legacy" else "2025-11-25")
    assert {t.name for t in listed.tools} == PY_TOOLS
    assert added.structured_content == {"result": 5}
    assert echoed.structured_content == {"result": "héllo"}
    assert seen.structured_content["authorization"] == "Bearer client-token"
    session_ids = {h.get("mcp-session-id") for _, _, _, h in record} - {None}
    if era == "legacy" and flavour == "python":
        assert len(session_ids) == 1, record
    else:
        assert session_ids == set(), record


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_raw_client_speaks_both_eras(python_upstream, era):
    with RawMcp(python_upstream.mcp_url, "raw-token", era) as mcp:
        listed = mcp.list_tools()
        assert listed.status == 200
        assert set(tool_names(listed.result["tools"])) == PY_TOOLS
        reply = mcp.call_tool("add", {"a": 40, "b": 2})
        assert reply.status == 200
        assert call_result_value(reply.result) == 42
        seen = headers_seen(mcp.call_tool("request_headers").result)
        assert seen["authorization"] == "Bearer raw-token"
        if era == MODERN_VERSION:
            assert seen["mcp-method"] == "tools/call"
            assert seen["mcp-name"] == "request_headers"
            assert "mcp-session-id" not in seen
            assert reply.result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "py"
        else:
            assert seen["mcp-session-id"] == mcp.session_id
        # A mismatched Mcp-Name is the spec's HeaderMismatch (-32020, HTTP 400) on the modern wire.
        if era == MODERN_VERSION:
            bad = mcp.call_tool("add", {"a": 1, "b": 1}, headers={"Mcp-Name": "echo"})
            assert bad.status == 400
            assert bad.error["code"] == -32020


def test_python_upstream_counts_requests(procs):
    upstream = start_python_upstream(procs, "counted")
    with RawMcp(upstream.mcp_url, None, MODERN_VERSION) as mcp:
        mcp.call_tool("add", {"a": 1, "b": 2})
        mcp.call_tool("add", {"a": 1, "b": 2})
        mcp.list_tools()
    stats = upstream.stats()
    assert stats["by_method"] == {"tools/call": 2, "tools/list": 1}
    assert stats["by_path"] == {"/mcp": 3}
    assert stats["tools"] == {"add": 2}
    httpx.post(f"{upstream.base}/_reset", timeout=5).raise_for_status()
    assert upstream.stats()["requests"] == 0


def test_balancer_alternates_per_request_on_one_connection(procs):
    a = start_python_upstream(procs, "a", stateless=True, json_response=True)
    b = start_python_upstream(procs, "b", stateless=True, json_response=True)
    with balancer([a.base, b.base]) as lb, httpx.Client(timeout=10) as http:
        with RawMcp(f"{lb.url}/mcp", None, MODERN_VERSION, client=http) as mcp:
            answers = [call_result_value(mcp.call_tool("whoami").result) for _ in range(6)]
    assert answers == ["a", "b", "a", "b", "a", "b"]
    assert [i for i, *_ in lb.served] == [0, 1, 0, 1, 0, 1]
    assert a.stats()["tools"] == {"whoami": 3}
    assert b.stats()["tools"] == {"whoami": 3}


def test_balancer_streams_sse_event_by_event(python_upstream):
    """progress(steps=3, gate=G) emits 3 notifications, then holds its result until G is opened;
    through the balancer all three must arrive while the result is held (the test opens the
    gate only then), not all together at the end."""
    gate = f"lb-{secrets.token_hex(4)}"
    with balancer([python_upstream.base]) as lb:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "progress",
                "arguments": {"steps": 3, "delay": 0.05, "gate": gate},
                "_meta": {
                    "progressToken": "p1",
                    "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN_VERSION,
            "Mcp-Method": "tools/call",
            "Mcp-Name": "progress",
        }
        arrivals: list[str] = []
        held: list[str] = []
        with httpx.stream("POST", f"{lb.url}/mcp", json=body, headers=headers, timeout=15) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            buf = ""
            for chunk in r.iter_text():
                buf = (buf + chunk).replace("\r\n", "\n")
                while "\n\n" in buf:
                    event, buf = buf.split("\n\n", 1)
                    arrivals.extend(sse_data(event + "\n\n"))
                if not held and sum('"notifications/progress"' in d for d in arrivals) == 3:
                    held = list(arrivals)
                    python_upstream.release(gate)
    kinds = ["progress" if '"notifications/progress"' in d else "result" if '"result"' in d else "other" for d in arrivals]
    assert kinds.count("progress") == 3 and kinds[-1] == "result", arrivals
    assert held and not any('"result"' in d for d in held), f"the three notifications did not arrive before the answer: {held}"
    assert '"done"' in arrivals[-1], f"the upstream was not released by the notifications: {arrivals[-1]}"
