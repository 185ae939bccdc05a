"""Progress and log notifications from the Rust example upstream (variant `sse`: a progress event
and a log line before `slow` does its work) reach the official Python SDK client through the
gateway in order, before the result: `/mcp/{prefix}` and `/mcp`, a legacy and a 2026-07-28
client, a dual-era and a legacy-only upstream. "Before" is shown by ordering, not timing: when
the log line reaches the client the test freezes the upstream (SIGSTOP) and thaws it a moment
later, so a result the upstream had not produced yet can only arrive after the thaw.

It also prints the time to the first notification through the gateway next to the time directly
from the upstream, measured in the same run (a figure, not an assertion: timing asserts do not
belong in tests on shared machines; `bench/first_notification.py` measures it on release builds).
"""

from __future__ import annotations

import os
import signal
import statistics
import time

import httpx
import pytest

from harness import (
    LEGACY_VERSION,
    MODERN_VERSION,
    gateway_config,
    key,
    new_secret,
    run_async,
    sdk_client,
    server,
    start_rust_upstream,
)

# The upstream's work after its notifications: the log line must reach the client within this,
# i.e. while the upstream is still at work (a wide margin for a busy machine).
SLOW_MS = 2000
# How long the upstream stays frozen once the client has the log line: a result that was already
# on its way (a relay that held the notifications back) arrives within it, before the thaw.
FROZEN_S = 0.5


@pytest.mark.parametrize("upstream_era", ["dual", "legacy"])
@pytest.mark.parametrize("endpoint", ["single", "aggregate"])
@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_progress_and_log_arrive_in_order_before_the_result(gateways, procs, era, endpoint, upstream_era):
    up = start_rust_upstream(procs, "notes")
    variant = "sse" if upstream_era == "dual" else "era=legacy,sse"
    secret = new_secret("notes-client")
    gw = gateways.start(gateway_config([server("ex", up.variant_url(variant))], [key("c", secret, ["ex"])]))
    url = gw.mcp_url("ex") if endpoint == "single" else gw.mcp_url()
    tool = "slow" if endpoint == "single" else "ex__slow"

    pid = up.proc.popen.pid

    async def scenario():
        import asyncio

        seen: list[tuple[str, object]] = []
        loop = asyncio.get_running_loop()

        def thaw() -> None:
            os.kill(pid, signal.SIGCONT)
            seen.append(("thawed", None))

        async def on_progress(progress, total, message):
            seen.append(("progress", message))

        async def on_log(params):
            seen.append(("log", params.data))
            os.kill(pid, signal.SIGSTOP)
            seen.append(("frozen", None))
            loop.call_later(FROZEN_S, thaw)

        options = {"logging_callback": on_log}
        if era == MODERN_VERSION:
            options["log_level"] = "info"
        async with sdk_client(url, secret, era, **options) as c:
            assert c.protocol_version == (LEGACY_VERSION if era == "legacy" else MODERN_VERSION)
            result = await c.call_tool(tool, {"ms": SLOW_MS}, progress_callback=on_progress)
            seen.append(("result", result))
        return seen

    try:
        seen = run_async(scenario, timeout=30)
    finally:
        os.kill(pid, signal.SIGCONT)  # (whatever happened)
    kinds = [k for k, _ in seen]
    # Both notifications came while the upstream was still at work, not with the answer.
    assert kinds == ["progress", "log", "frozen", "thawed", "result"], (
        f"expected progress, log, then the result after the frozen upstream thawed: {kinds}"
    )
    assert seen[1][1] == "working", seen
    result = seen[-1][1]
    assert not result.is_error, result


def event_times_ms(url: str, headers: dict, body: dict) -> tuple[float, float]:
    """Milliseconds to the first SSE event and to the last (the answer)."""
    t0 = time.perf_counter()
    times = []
    with httpx.stream("POST", url, json=body, headers=headers, timeout=10) as r:
        assert r.status_code == 200, r.read()[:300]
        for line in r.iter_lines():
            if line.startswith("data:"):
                times.append((time.perf_counter() - t0) * 1000)
    assert len(times) >= 2, f"expected a notification and the answer, got {len(times)} events"
    return times[0], times[-1]


def test_time_to_first_notification_direct_and_through_the_gateway(gateways, procs):
    up = start_rust_upstream(procs, "first-note")
    secret = new_secret("first-note")
    gw = gateways.start(gateway_config([server("ex", up.variant_url("sse"))], [key("c", secret, ["ex"])]))
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "progressToken": "p",
    }
    work_ms = 100
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "slow", "arguments": {"ms": work_ms}, "_meta": meta}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "slow",
    }
    via = {**headers, "Authorization": f"Bearer {secret}"}
    for _ in range(3):  # warm both paths
        event_times_ms(up.variant_url("sse"), headers, body)
        event_times_ms(gw.mcp_url("ex"), via, body)
    direct, gateway = [], []
    for _ in range(10):
        direct.append(event_times_ms(up.variant_url("sse"), headers, body))
        # (relayed as it came is shown above by ordering; here only the figures)
        gateway.append(event_times_ms(gw.mcp_url("ex"), via, body))
    d = statistics.median(f for f, _ in direct)
    g = statistics.median(f for f, _ in gateway)
    gap = statistics.median(a - f for f, a in gateway)
    print(f"time to the first notification (median of 10, debug build): direct {d:.2f} ms, via gateway {g:.2f} ms, added {g - d:.2f} ms;"
          f" via gateway, the answer {gap:.1f} ms after it ({work_ms} ms of work)")
