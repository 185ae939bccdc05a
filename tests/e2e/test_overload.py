"""Replica-wide admission (`--max-in-flight`, `--max-queue-delay`; docs/architecture.md, "Limits"):
past its bound a replica sheds new requests at once with 503 + `Retry-After`, before reading
their body or calling an upstream, in each endpoint's own error shape, while the requests it
admitted finish normally; health, readiness and metrics still answer; every shed request is
counted; and a relayed stream gives its slot back once its response head is out.

The in-flight bound is the one exercised here: it is exact, so the test is deterministic. The
queueing-delay bound (on by default) needs a saturated CPU; bench/overload.py measures it."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from harness import (
    MODERN_VERSION,
    RawMcp,
    call_result_value,
    gateway_config,
    key,
    method_count,
    new_secret,
    server,
    wait_until,
)

INTERNAL_ERROR = -32603
# The admitted calls' work upstream. A refusal is answered without waiting for a slot: the test
# checks that every refusal came back while all of them were still in flight (an ordering).
SLOW_MS = 2500


def _metric(gw, name: str, labels: str) -> float:
    text = httpx.get(f"{gw.internal_url}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and labels in line:
            return float(line.split()[-1])
    return 0.0


def _gateway(gateways, upstream, max_in_flight: int):
    secret = new_secret("overload")
    gw = gateways.start(
        gateway_config(
            [
                server("alpha", upstream.mcp_url),
                server("streamy", upstream.variant_url("sse")),
            ],
            [key("k", secret, ["alpha", "streamy"])],
        ),
        # Only the exact bound: the delay bound depends on how busy this shared machine is.
        env={"SWITCHBOARD_MAX_IN_FLIGHT": str(max_in_flight), "SWITCHBOARD_MAX_QUEUE_DELAY": "0"},
    )
    return gw, secret


def _assert_shed_mcp(reply) -> None:
    assert reply.status == 503, f"HTTP {reply.status} {reply.raw[:300]!r}"
    assert int(reply.headers["retry-after"]) >= 1, reply.headers
    message = reply.messages[-1]
    assert message["id"] is None, message  # the body was never read
    assert message["error"]["code"] == INTERNAL_ERROR, message
    assert "--max-in-flight" in message["error"]["message"], message


def test_calls_beyond_the_bound_are_shed_fast_and_the_admitted_ones_succeed(gateways, rust_upstream):
    bound = 3
    gw, secret = _gateway(gateways, rust_upstream, bound)
    auth = {"Authorization": f"Bearer {secret}"}
    with RawMcp(gw.mcp_url("alpha"), secret, MODERN_VERSION) as mcp:
        assert mcp.call_tool("add", {"a": 1, "b": 2}).status == 200, "warm-up"

    def slow():
        with RawMcp(gw.mcp_url("alpha"), secret, MODERN_VERSION, timeout=30) as mcp:
            return mcp.call_tool("slow", {"ms": SLOW_MS})

    slow_before = method_count(rust_upstream, "tools/call")
    with ThreadPoolExecutor(bound) as pool:
        admitted = [pool.submit(slow) for _ in range(bound)]
        wait_until(
            lambda: method_count(rust_upstream, "tools/call") - slow_before >= bound,
            10.0,
            what="the slow calls to reach the upstream",
        )
        calls_before = method_count(rust_upstream, "tools/call")

        # Every kind of endpoint, each refused in its own shape, at once.
        shed_mcp = []
        for url in (gw.mcp_url("alpha"), gw.mcp_url()):
            name = "add" if url.endswith("/alpha") else "alpha__add"
            with RawMcp(url, secret, MODERN_VERSION) as mcp:
                shed_mcp.append(mcp.call_tool(name, {"a": 2, "b": 3}))
        with RawMcp(gw.mcp_url(), secret, "legacy") as legacy:
            body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "e2e", "version": "0"}}}
            shed_mcp.append(legacy.post(body))
        for reply in shed_mcp:
            _assert_shed_mcp(reply)

        started = time.monotonic()
        rest = httpx.post(
            f"{gw.url}/mcp-rest/tools/call", json={"name": "alpha__add", "arguments": {"a": 1, "b": 1}},
            headers=auth, timeout=10,
        )
        anthropic = httpx.post(
            f"{gw.url}/v1/messages", json={"model": "m", "max_tokens": 8, "messages": []},
            headers={"x-api-key": secret, "anthropic-version": "2023-06-01"}, timeout=10,
        )
        openai = httpx.post(f"{gw.url}/v1/chat/completions", json={"model": "m", "messages": []},
                            headers=auth, timeout=10)
        refused_in = (time.monotonic() - started) / 3
        # Shed at once, not queued for a slot: every refusal came back before any admitted call
        # ended.
        assert not any(f.done() for f in admitted), "an admitted call ended before the refusals were answered"
        for r in (rest, anthropic, openai):
            assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1, (r.status_code, r.text)
        assert rest.json()["error"]["code"] == "overloaded", rest.text
        assert anthropic.json()["type"] == "error", anthropic.text
        assert anthropic.json()["error"]["type"] == "overloaded_error", anthropic.text
        assert openai.json()["error"]["code"] == "overloaded", openai.text

        # A saturated replica is still alive, ready and observable.
        for path in ("/healthz", "/readyz", "/metrics"):
            r = httpx.get(f"{gw.internal_url}{path}", timeout=5)
            assert r.status_code == 200, (path, r.status_code, r.text[:200])

        assert method_count(rust_upstream, "tools/call") == calls_before, "a shed call reached the upstream"
        for f in admitted:
            reply = f.result(timeout=30)
            assert reply.status == 200, f"an admitted call failed: {reply.status} {reply.raw[:300]!r}"
            assert not reply.result.get("isError"), reply.result

    shed = len(shed_mcp) + 3
    counted = _metric(gw, "switchboard_gateway_shed_requests_total", 'reason="in_flight"')
    assert counted == shed, f"{counted} shed requests counted, {shed} shed"
    slowest = max(r.elapsed for r in shed_mcp)
    print(f"\nwith {bound} slow calls in flight (bound {bound}): {len(shed_mcp)} MCP calls refused in at most "
          f"{slowest * 1000:.1f} ms, REST/LLM in {refused_in * 1000:.1f} ms on average; {counted:.0f} counted")

    # The slots came back.
    with RawMcp(gw.mcp_url("alpha"), secret, MODERN_VERSION) as mcp:
        reply = mcp.call_tool("add", {"a": 2, "b": 3})
        assert reply.status == 200 and call_result_value(reply.result) == 5, reply.raw[:300]


def test_an_idle_relayed_stream_holds_no_slot(gateways, rust_upstream):
    """With a bound of 1, a relayed SSE stream that is open and idle (its progress event out,
    its result minutes away) leaves the slot free: calls go through one after another. A plain
    call in flight (no head yet) does hold it, the control."""
    gw, secret = _gateway(gateways, rust_upstream, 1)
    headers = {
        "Authorization": f"Bearer {secret}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "slow",
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "slow", "arguments": {"ms": 60_000},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "switchboard-e2e", "version": "0"},
            "progressToken": "idle-stream",
        },
    }}
    with httpx.Client(timeout=httpx.Timeout(15.0)) as client:
        with client.stream("POST", gw.mcp_url("streamy"), content=json.dumps(body).encode(),
                           headers=headers) as stream:
            assert stream.status_code == 200, stream.read()[:300]
            assert stream.headers["content-type"].startswith("text/event-stream"), stream.headers
            lines = stream.iter_lines()
            progress = None
            for line in lines:
                if line.startswith("data:"):
                    progress = json.loads(line[5:])
                    break
            assert progress and progress.get("method") == "notifications/progress", progress

            # The stream is open and idle; the slot is free.
            with RawMcp(gw.mcp_url("alpha"), secret, MODERN_VERSION) as mcp:
                for i in range(3):
                    reply = mcp.call_tool("add", {"a": i, "b": 1})
                    assert reply.status == 200, f"call {i} beside an idle stream: {reply.status} {reply.raw[:300]!r}"
                    assert call_result_value(reply.result) == i + 1

            # Control: a call without a head yet holds the one slot.
            def slow():
                with RawMcp(gw.mcp_url("alpha"), secret, MODERN_VERSION, timeout=30) as mcp:
                    return mcp.call_tool("slow", {"ms": 1500})

            before = method_count(rust_upstream, "tools/call")
            with ThreadPoolExecutor(1) as pool:
                running = pool.submit(slow)
                wait_until(lambda: method_count(rust_upstream, "tools/call") > before, 10.0,
                           what="the slow call to reach the upstream")
                with RawMcp(gw.mcp_url("alpha"), secret, MODERN_VERSION) as mcp:
                    _assert_shed_mcp(mcp.call_tool("add", {"a": 1, "b": 1}))
                assert running.result(timeout=30).status == 200
    assert _metric(gw, "switchboard_gateway_shed_requests_total", 'reason="in_flight"') == 1
