#!/usr/bin/env python3
"""Memory under many distinct callers (issue 20 item 5): N distinct caller tokens each list the
tools of a server that uses the caller's own credential (`passthrough`: one listing partition
per caller token) and call a `tokenExchange` server (one exchanged token per caller token).
Before the caches were bounded, both grew by one entry per token for as long as the server's
spec did not change.

Prints, at checkpoints, the gateway's RSS and the entries each cache holds (its
`switchboard_gateway_cache_entries` gauge), and the RSS slope between the last checkpoints: flat
means bounded. Loopback only; bounded in count (N) and time (each request has a timeout).

    bench/caches.py                           # 100,000 callers, the release gateway
    bench/caches.py --callers 20000 --bin-dir ~/.cache/switchboard/target/debug
    bench/caches.py --gateway OTHER_BINARY    # the same run against another build (A/B)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import procs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cache_entries(metrics: str) -> dict[str, int]:
    return {m[0]: int(float(m[1])) for m in re.findall(r'^switchboard_gateway_cache_entries\{cache="(\w+)"\} (\S+)', metrics, re.M)}


async def drive(base: str, key: str, start: int, count: int, concurrency: int) -> dict[str, int]:
    failures: dict[str, int] = {}
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=15, limits=httpx.Limits(max_connections=concurrency)) as client:

        async def one(i: int) -> None:
            nonlocal failures
            user = f"user-token-{i:08d}-{os.getpid()}"
            headers = {"X-Switchboard-Key": key, "Authorization": f"Bearer {user}"}
            async with sem:
                listed = await client.get(f"{base}/mcp-rest/tools/list", params={"server_id": "pt"}, headers=headers)
                called = await client.post(
                    f"{base}/mcp-rest/tools/call",
                    json={"name": "tx__add", "arguments": {"a": 1, "b": 2}},
                    headers=headers,
                )
                for what, r in (("list", listed), ("call", called)):
                    if r.status_code != 200:
                        label = f"{what} {r.status_code} {r.json().get('error', {}).get('code', '') if r.headers.get('content-type', '').startswith('application/json') else ''}"
                        failures[label] = failures.get(label, 0) + 1

        await asyncio.gather(*(one(i) for i in range(start, start + count)))
    return failures


def run(gateway_bin: Path, upstream_bin: Path, callers: int, concurrency: int, workdir: Path) -> dict:
    upstream, up_addr = procs.start([str(upstream_bin), "--listen", "127.0.0.1:0"], workdir / "upstream.log")
    key = "bench-caches-key-" + os.urandom(6).hex()
    base_up = f"http://{up_addr}"
    config = {
        "gateway": {"sessionKey": "bench-caches-session"},
        "servers": [
            {"name": "pt", "url": f"{base_up}/mcp", "auth": {"type": "passthrough"}},
            {
                "name": "tx",
                "url": f"{base_up}/mcp",
                "auth": {
                    "type": "tokenExchange",
                    "tokenUrl": f"{base_up}/oauth/token",
                    "clientId": "bench",
                    "clientSecret": "secret-bench",
                    # Bounded below the callers so the bound shows in the run (default 10,000).
                    "cacheSize": 2000,
                },
            },
        ],
        "keys": [{"name": "bench", "secret": key, "servers": ["pt", "tx"]}],
    }
    path = workdir / "caches.yaml"
    path.write_text(json.dumps(config))
    gateway, gw_addr = procs.start([str(gateway_bin), "--config", str(path), "--listen", "127.0.0.1:0"], workdir / "gateway.log")
    base = f"http://{gw_addr}"
    rows = []
    try:
        done = 0
        checkpoints = sorted({callers // 10, callers // 4, callers // 2, (3 * callers) // 4, callers})
        started = time.monotonic()
        for point in checkpoints:
            failures = asyncio.run(drive(base, key, done, point - done, concurrency))
            done = point
            metrics = httpx.get(f"{base}/metrics", timeout=10).text
            row = {"callers": done, "rss_kib": rss_kib(gateway.pid), "failures": failures, **cache_entries(metrics)}
            rows.append(row)
            print(f"  {row}", flush=True)
        elapsed = time.monotonic() - started
    finally:
        for p in (gateway, upstream):
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(10)
    half = rows[len(rows) // 2]
    last = rows[-1]
    slope = (last["rss_kib"] - half["rss_kib"]) / max(1, last["callers"] - half["callers"])
    return {"gateway": str(gateway_bin), "rows": rows, "rss_kib_per_1000_callers_second_half": round(slope * 1000, 1), "seconds": round(elapsed, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache/switchboard/target"))
    ap.add_argument("--bin-dir", type=Path, default=target / "release")
    ap.add_argument("--gateway", type=Path, action="append", help="gateway binaries to compare (default: BIN_DIR's)")
    ap.add_argument("--callers", type=int, default=100_000)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args()
    upstream = args.bin_dir / "switchboard-example-upstream"
    gateways = args.gateway or [args.bin_dir / "switchboard-gateway"]
    for b in [upstream, *gateways]:
        if not b.exists():
            sys.exit(f"{b} is missing: cargo build --release --workspace --bins (or give --bin-dir)")
    print(f"command: {' '.join(sys.argv)}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for g in gateways:
            print(f"gateway {g}: {args.callers} distinct caller tokens, {args.concurrency} at a time")
            results.append(run(g, upstream, args.callers, args.concurrency, Path(tmp)))
    for r in results:
        print(
            f"{r['gateway']}: RSS {r['rows'][0]['rss_kib']} -> {r['rows'][-1]['rss_kib']} KiB over "
            f"{r['rows'][-1]['callers']} callers; second half {r['rss_kib_per_1000_callers_second_half']} KiB per 1,000 "
            f"callers; caches at the end: { {k: v for k, v in r['rows'][-1].items() if k.startswith(('listings', 'tokens'))} }; "
            f"{r['seconds']} s"
        )
    out = ROOT / "bench/results/caches.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
