#!/usr/bin/env python3
"""The stdio bridge against the same server spoken to over HTTP, in one run (issue 23).

    python3 bench/stdio_bridge.py --bridge target/release/switchboard-stdio-bridge [--calls 2000] [--conc 16] [--seconds 10]

The server is @modelcontextprotocol/server-everything (tests/setup-stdio-servers.sh), which
speaks both transports itself: `streamableHttp` (its own HTTP server, sessions) and `stdio`
(behind the bridge). The tool is `get-sum`. Measured, each with the same Python client:

- added latency: p50/p99 of one call at a time over a legacy session, direct vs bridge (the
  bridge's session has a process of its own), and 2026-07-28 stateless calls through the
  bridge's pool;
- calls per second with `--conc` clients at once for `--seconds`: direct (one session per
  client), bridge legacy (one session, so one process, per client), bridge 2026-07-28 (the pool);
- memory: RSS of the direct server, of one idle stdio process, and of the bridge itself.

Prints a table and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
MODERN = "2026-07-28"
LEGACY = "2025-11-25"


def reserve_port() -> int:
    """A port reserved for this process the way the tests reserve theirs (tests/e2e/harness.py
    reserve_port: a lock no other reservation on the machine takes while this process lives),
    for servers that must be told their port before they start."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
    import harness

    return harness.reserve_port()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def body(n: int, modern: bool) -> dict:
    params: dict = {"name": "get-sum", "arguments": {"a": n, "b": 1}}
    if modern:
        params["_meta"] = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


async def open_session(client: httpx.AsyncClient, url: str) -> str:
    r = await client.post(url, headers=HEADERS, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}})
    sid = r.headers.get("mcp-session-id")
    assert r.status_code == 200 and sid, (r.status_code, r.text[:200])
    await client.post(url, headers={**HEADERS, "mcp-session-id": sid, "mcp-protocol-version": LEGACY},
                      json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return sid


async def call(client: httpx.AsyncClient, url: str, n: int, sid: str | None) -> None:
    headers = dict(HEADERS)
    if sid:
        headers.update({"mcp-session-id": sid, "mcp-protocol-version": LEGACY})
    r = await client.post(url, headers=headers, json=body(n, sid is None))
    assert r.status_code == 200 and f"{n + 1}" in r.text, (r.status_code, r.text[:200])


async def latency(url: str, calls: int, legacy: bool) -> tuple[float, float]:
    async with httpx.AsyncClient(timeout=30) as client:
        sid = await open_session(client, url) if legacy else None
        for n in range(50):  # warm-up
            await call(client, url, n, sid)
        took = []
        for n in range(calls):
            t0 = time.perf_counter()
            await call(client, url, n, sid)
            took.append((time.perf_counter() - t0) * 1000)
    took.sort()
    return statistics.median(took), took[int(len(took) * 0.99)]


async def throughput(url: str, conc: int, seconds: float, legacy: bool) -> float:
    done = 0
    stop = time.monotonic() + seconds

    async def worker(i: int) -> None:
        nonlocal done
        async with httpx.AsyncClient(timeout=30) as client:
            sid = await open_session(client, url) if legacy else None
            n = 0
            while time.monotonic() < stop:
                await call(client, url, i * 1_000_000 + n, sid)
                n += 1
                done += 1

    t0 = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(conc)))
    return done / (time.monotonic() - t0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bridge", required=True)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10)
    args = ap.parse_args()
    servers = dict(line.split("\t", 1) for line in subprocess.run(
        [str(ROOT / "tests" / "setup-stdio-servers.sh")], check=True, capture_output=True, text=True).stdout.split("\n") if line)
    everything = servers["everything"]
    direct_port, bridge_port = reserve_port(), reserve_port()
    direct = subprocess.Popen([everything, "streamableHttp"], env={**os.environ, "PORT": str(direct_port)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    bridge = subprocess.Popen([args.bridge, "--listen", f"127.0.0.1:{bridge_port}", "--pool-size", str(args.conc),
                               "--max-processes", str(3 * args.conc + 4), "--", everything, "stdio"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        direct_url, bridge_url = f"http://127.0.0.1:{direct_port}/mcp", f"http://127.0.0.1:{bridge_port}/mcp"
        wait_http(direct_url)
        deadline = time.monotonic() + 60
        while httpx.get(f"http://127.0.0.1:{bridge_port}/readyz", timeout=2).status_code != 200:
            assert time.monotonic() < deadline, "the bridge did not get ready"
            time.sleep(0.2)
        # Idle memory before any load: the bridge, and its pooled processes (all alike).
        while len(children(bridge.pid)) < args.conc:
            time.sleep(0.2)
        time.sleep(1)
        idle_procs = [rss_kib(p) for p in children(bridge.pid)]
        mem = {"direct_server_kib": rss_kib(direct.pid), "stdio_process_idle_kib": int(statistics.median(idle_procs)),
               "bridge_kib": rss_kib(bridge.pid)}
        lat = {
            "direct_legacy": asyncio.run(latency(direct_url, args.calls, True)),
            "bridge_legacy": asyncio.run(latency(bridge_url, args.calls, True)),
            "bridge_modern": asyncio.run(latency(bridge_url, args.calls, False)),
        }
        rate = {
            "direct_legacy": asyncio.run(throughput(direct_url, args.conc, args.seconds, True)),
            "bridge_legacy": asyncio.run(throughput(bridge_url, args.conc, args.seconds, True)),
            "bridge_modern": asyncio.run(throughput(bridge_url, args.conc, args.seconds, False)),
        }
        mem["bridge_kib_after_load"] = rss_kib(bridge.pid)
    finally:
        for p in (direct, bridge):
            os.killpg(p.pid, 15)
            p.wait(10)
    base = lat["direct_legacy"][0]
    print(f"{'path':16} {'p50 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} {'calls/s':>9} {'x direct':>9}")
    for k in lat:
        print(f"{k:16} {lat[k][0]:8.3f} {lat[k][1]:8.3f} {lat[k][0] - base:8.3f} {rate[k]:9.0f} {rate[k] / rate['direct_legacy']:9.2f}")
    print("memory (KiB RSS):", mem)
    print(json.dumps({"latency_ms": lat, "calls_per_s": rate, "memory_kib": mem, "conc": args.conc}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
