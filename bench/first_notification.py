"""Time to the first relayed notification, direct and through the gateway, in the same run.

    bench/first_notification.py [--bin-dir DIR] [--runs N]

Uses the release binaries `bench/run.sh` copied aside (the newest `$SWITCHBOARD_CACHE/bench/bin/*/`
unless --bin-dir). The Rust example upstream's `sse` variant answers `slow(ms)` with a progress
event and a log line before it sleeps, then the result: the time to the first event is the time
to a notification the upstream sent at once. Each run posts the same 2026-07-28 `tools/call`
directly and through the gateway's `/mcp/{prefix}` and `/mcp` (alternating), over fresh
connections, and reads the SSE response as it arrives. Prints medians and p90s, and the added
time. Loopback only; bounded by --runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from procs import start

import httpx

KEY = "sk-bench-first-notification"
WORK_MS = 20


def first_event_ms(client: httpx.Client, url: str, tool: str, auth: bool) -> float:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "progressToken": "p",
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": {"ms": WORK_MS}, "_meta": meta}}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
               "Mcp-Method": "tools/call", "Mcp-Name": tool, "Connection": "close"}
    if auth:
        headers["Authorization"] = f"Bearer {KEY}"
    t0 = time.perf_counter()
    first = None
    with client.stream("POST", url, content=json.dumps(body), headers=headers) as r:
        if r.status_code != 200:
            raise SystemExit(f"{url}: HTTP {r.status_code} {r.read()[:300]!r}")
        for line in r.iter_lines():
            if line.startswith("data:") and first is None:
                first = (time.perf_counter() - t0) * 1000
    if first is None:
        raise SystemExit(f"{url}: no event")
    return first


def p90(values: list[float]) -> float:
    return sorted(values)[int(0.9 * (len(values) - 1))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cache = Path(os.environ.get("SWITCHBOARD_CACHE", Path.home() / ".cache/switchboard"))
    ap.add_argument("--bin-dir", type=Path)
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    bin_dir = args.bin_dir or max((cache / "bench/bin").glob("*/"), key=lambda p: p.stat().st_mtime, default=None)
    if bin_dir is None or not (bin_dir / "switchboard-gateway").exists():
        raise SystemExit("no release binaries: run bench/run.sh first (it builds and copies them)")
    work = Path(tempfile.mkdtemp(prefix="sb-first-note-"))
    up, up_addr = start([str(bin_dir / "switchboard-example-upstream"), "--listen", "127.0.0.1:0"], work / "upstream.log")
    upstream_url = f"http://{up_addr}/v/sse/mcp"
    config = {"gateway": {"sessionKey": "bench-session-key-0123456789"},
              "servers": [{"name": "ex", "url": upstream_url, "timeout": "10s"}],
              "keys": [{"name": "bench", "secret": KEY, "servers": ["ex"]}]}
    (work / "gw.yaml").write_text(json.dumps(config))
    gw, gw_addr = start([str(bin_dir / "switchboard-gateway"), "--config", str(work / "gw.yaml"),
                         "--listen", "127.0.0.1:0"], work / "gateway.log")
    paths = {
        "direct": (upstream_url, "slow", False),
        "gateway /mcp/{prefix}": (f"http://{gw_addr}/mcp/ex", "slow", True),
        "gateway /mcp": (f"http://{gw_addr}/mcp", "ex__slow", True),
    }
    times: dict[str, list[float]] = {k: [] for k in paths}
    try:
        with httpx.Client(timeout=10) as client:
            for name, (url, tool, auth) in paths.items():  # warm up
                for _ in range(5):
                    first_event_ms(client, url, tool, auth)
            for _ in range(args.runs):
                for name, (url, tool, auth) in paths.items():
                    times[name].append(first_event_ms(client, url, tool, auth))
    finally:
        for p in (gw, up):
            p.terminate()
            p.wait(5)
    direct = statistics.median(times["direct"])
    print(f"time to the first notification, {args.runs} runs each, new connection per request "
          f"(bench/first_notification.py --runs {args.runs}; binaries {bin_dir}):")
    print("| path | median ms | p90 ms | added to direct (median) |")
    print("|---|---|---|---|")
    for name, values in times.items():
        med = statistics.median(values)
        added = "—" if name == "direct" else f"+{med - direct:.3f} ms"
        print(f"| {name} | {med:.3f} | {p90(values):.3f} | {added} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
