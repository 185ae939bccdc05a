"""Relayed streams are streamed, not buffered: a 100 MiB SSE answer passes through the gateway
with its memory flat, and a client that closes its stream early cancels the upstream request.

The upstream here is a purpose-built ASGI app speaking just enough of the 2026-07-28 revision: every
`tools/call` is answered with SSE, `big` with 100 MiB of log notifications and then the result,
`endless` with one notification every 50 ms until the connection closes (it records when).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx

from harness import (
    MODERN_VERSION,
    AsgiServer,
    RawMcp,
    gateway_config,
    key,
    new_secret,
    read_asgi_request,
    server,
    wait_until,
)

EVENT_PAYLOAD = 64 * 1024
STREAM_BYTES = 100 * 1024 * 1024


class StreamingUpstream:
    """A 2026-07-28 upstream whose tool calls answer with long SSE streams."""

    def __init__(self) -> None:
        self.disconnects = 0
        self.endless_started = threading.Event()
        text = "x" * EVENT_PAYLOAD
        note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": text}}
        self.event = f"event: message\ndata: {json.dumps(note)}\n\n".encode()

    async def app(self, scope, receive, send):
        if scope["type"] != "http":
            return
        request = await read_asgi_request(scope, receive)
        if request is None:
            return
        body, _ = request
        msg = json.loads(body)
        if "id" not in msg:
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        start = {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
        }
        tool = (msg.get("params") or {}).get("name")
        await send(start)
        if tool == "endless":
            self.endless_started.set()
            # The body was read whole: the next message `receive` gives is the disconnect.
            disconnected = asyncio.ensure_future(receive())
            try:
                for _ in range(1200):  # at most a minute
                    if disconnected.done():
                        self.disconnects += 1
                        return
                    small = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "tick"}}
                    frame = f"data: {json.dumps(small)}\n\n".encode()
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
                    await asyncio.sleep(0.05)
            except Exception:  # noqa: BLE001 - a send after the disconnect may raise
                self.disconnects += 1
                return
            finally:
                disconnected.cancel()
            return
        sent = 0
        while sent < STREAM_BYTES:
            await send({"type": "http.response.body", "body": self.event, "more_body": True})
            sent += len(self.event)
        result = {"jsonrpc": "2.0", "id": msg["id"], "result": {"content": [{"type": "text", "text": f"sent {sent}"}]}}
        await send({"type": "http.response.body", "body": f"data: {json.dumps(result)}\n\n".encode()})


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def start(gateways, upstream: StreamingUpstream, timeout: str = "120s"):
    asgi = AsgiServer(upstream.app, name="streaming-upstream").start()
    client_key = new_secret("relay-client")
    config = gateway_config([server("big", f"{asgi.url}/mcp", timeout=timeout)], [key("c", client_key, ["big"])])
    return asgi, gateways.start(config), client_key


def modern_call_headers(client_key: str, tool: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {client_key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }


def modern_call_body(tool: str) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }


def test_a_100_mib_stream_keeps_the_gateway_memory_flat(gateways):
    upstream = StreamingUpstream()
    asgi, gw, client_key = start(gateways, upstream)
    try:
        pid = gw.proc.popen.pid
        # Warm the gateway up (first connection, era detection) before the baseline.
        with RawMcp(gw.mcp_url("big"), client_key, MODERN_VERSION) as mcp:
            mcp.request("tools/list")
        before = rss_kib(pid)
        peak = before
        received = 0
        events = 0
        last = None
        with httpx.Client(timeout=httpx.Timeout(120)) as http:
            with http.stream(
                "POST", gw.mcp_url("big"), json=modern_call_body("big"), headers=modern_call_headers(client_key, "big")
            ) as response:
                assert response.status_code == 200, response.read()[:300]
                assert response.headers["content-type"].startswith("text/event-stream")
                for line in response.iter_lines():
                    received += len(line) + 1
                    if line.startswith("data:"):
                        events += 1
                        last = line
                        if events % 100 == 0:
                            peak = max(peak, rss_kib(pid))
        peak = max(peak, rss_kib(pid))
        assert received >= STREAM_BYTES, f"only {received} bytes arrived"
        final = json.loads(last[len("data:") :])
        assert final["id"] == 1 and final["result"]["content"][0]["text"].startswith("sent "), final
        growth_mib = (peak - before) / 1024
        print(f"relayed {received / 2**20:.0f} MiB in {events} events; gateway RSS {before} KiB -> peak {peak} KiB")
        assert growth_mib < 24, f"gateway RSS grew by {growth_mib:.1f} MiB while relaying 100 MiB: it buffers"
    finally:
        asgi.stop()


def test_closing_the_client_stream_cancels_the_upstream_request(gateways):
    upstream = StreamingUpstream()
    asgi, gw, client_key = start(gateways, upstream, timeout="60s")
    try:
        with httpx.Client(timeout=httpx.Timeout(30)) as http:
            with http.stream(
                "POST",
                gw.mcp_url("big"),
                json=modern_call_body("endless"),
                headers=modern_call_headers(client_key, "endless"),
            ) as response:
                assert response.status_code == 200
                seen = 0
                for line in response.iter_lines():
                    if line.startswith("data:"):
                        seen += 1
                        if seen == 3:
                            break
        closed_at = time.monotonic()
        assert upstream.endless_started.is_set()
        wait_until(lambda: upstream.disconnects >= 1, timeout=10, what="the upstream to see the request cancelled")
        print(f"upstream saw the cancellation {time.monotonic() - closed_at:.2f}s after the client closed")
    finally:
        asgi.stop()
