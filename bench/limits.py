"""Per-key limits side by side: a well-behaved key's latency alone, while another key floods
the same replica far over its limits, and (the control) while an unlimited key floods it.

    bench/limits.py [--bin-dir DIR] [--oha PATH] [--seconds S] [--rate R]

Uses the release binaries `bench/run.sh` copied aside (the newest `$SWITCHBOARD_CACHE/bench/bin/*/`
unless --bin-dir) and its oha. One gateway, one Rust example upstream, three keys: `calm`
(unlimited) calls `tools/call add` at a fixed rate; `hammer` (limits: 50/s, 4 concurrent) and
`unlimited` flood with 16 connections as fast as they can. Prints, per phase, the calm key's
p50/p99, its failures, the flood's answers by status and the gateway's CPU. Loopback only; every
load run is bounded by --seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from procs import start

HZ = os.sysconf("SC_CLK_TCK")
KEYS = {"calm": "sk-bench-calm-0123456789", "hammer": "sk-bench-hammer-0123456789",
        "unlimited": "sk-bench-unlimited-0123456789"}


def ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def oha(bin_: str, url: str, key: str, seconds: float, conc: int, rate: float | None) -> list[str]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "ex__add", "arguments": {"a": 1, "b": 2},
                                  "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                            "io.modelcontextprotocol/clientCapabilities": {}}}})
    argv = [bin_, "--no-tui", "--output-format", "json", "-m", "POST", "-c", str(conc), "-z", f"{seconds}s", "-w",
            "-t", "10s", "-H", "Content-Type: application/json", "-H", "Accept: application/json, text/event-stream",
            "-H", "MCP-Protocol-Version: 2026-07-28", "-H", "Mcp-Method: tools/call", "-H", "Mcp-Name: ex__add",
            "-H", f"Authorization: Bearer {key}", "-d", body, url]
    if rate:
        argv[argv.index("-c"):argv.index("-c")] = ["-q", str(rate)]
    return argv


def run(argv: list[str]) -> dict:
    out = subprocess.run(argv, capture_output=True, check=True, timeout=120).stdout
    o = json.loads(out)
    lp = o.get("latencyPercentiles", {})
    codes = {str(k): int(v) for k, v in (o.get("statusCodeDistribution") or {}).items()}
    errors = sum(int(v) for v in (o.get("errorDistribution") or {}).values())
    return {"p50_ms": round((lp.get("p50") or 0) * 1000, 3), "p99_ms": round((lp.get("p99") or 0) * 1000, 3),
            "codes": codes, "errors": errors, "rps": round(o.get("summary", {}).get("requestsPerSec") or 0)}


def phase(args, url: str, gw_pid: int, flood_key: str | None) -> dict:
    calm_argv = oha(args.oha, url, KEYS["calm"], args.seconds, 4, args.rate)
    flood: dict = {}
    thread = None
    if flood_key:
        flood_argv = oha(args.oha, url, KEYS[flood_key], args.seconds + 1, 16, None)
        thread = threading.Thread(target=lambda: flood.update(run(flood_argv)), daemon=True)
        thread.start()
        time.sleep(0.5)  # the flood is on before the calm key starts
    t0 = ticks(gw_pid)
    calm = run(calm_argv)
    cpu_s = (ticks(gw_pid) - t0) / HZ
    if thread:
        thread.join(timeout=args.seconds + 30)
    return {"calm": calm, "flood": flood, "gateway_cpu_percent": round(100 * cpu_s / args.seconds)}


def main() -> int:
    cache = Path(os.environ.get("SWITCHBOARD_CACHE", Path.home() / ".cache/switchboard"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", type=Path)
    ap.add_argument("--oha", default=str(cache / "tools/bin/oha"))
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rate", type=float, default=200.0, help="the calm key's requests per second")
    args = ap.parse_args()
    bins = args.bin_dir or max((cache / "bench/bin").glob("*/"), key=lambda p: p.stat().st_mtime, default=None)
    if not bins or not (bins / "switchboard-gateway").exists():
        raise SystemExit("no release binaries: run bench/run.sh once (it builds and copies them aside)")
    if not Path(args.oha).exists():
        raise SystemExit(f"oha not found at {args.oha}: bench/run.sh installs it")
    work = Path(tempfile.mkdtemp(prefix="switchboard-limits-"))
    up, up_addr = start([str(bins / "switchboard-example-upstream"), "--listen", "127.0.0.1:0"], work / "upstream.log")
    config = {
        "gateway": {"sessionKey": "bench-session-key-0123456789"},
        "servers": [{"name": "ex", "url": f"http://{up_addr}/mcp", "accessGroups": ["b"]}],
        "keys": [
            {"name": "calm", "secret": KEYS["calm"], "accessGroups": ["b"]},
            {"name": "hammer", "secret": KEYS["hammer"], "accessGroups": ["b"],
             "limits": {"rate": "50/s", "concurrentRequests": 4}},
            {"name": "unlimited", "secret": KEYS["unlimited"], "accessGroups": ["b"]},
        ],
    }
    (work / "gateway.yaml").write_text(json.dumps(config))
    gw, gw_addr = start([str(bins / "switchboard-gateway"), "--config", str(work / "gateway.yaml"),
                         "--listen", "127.0.0.1:0"], work / "gateway.log")
    url = f"http://{gw_addr}/mcp"
    try:
        subprocess.run(oha(args.oha, url, KEYS["calm"], 2, 4, None), capture_output=True, check=True)  # warm-up
        results = {}
        for name, flood in (("alone", None), ("limited key flooding", "hammer"), ("unlimited key flooding", "unlimited"),
                            ("alone, again", None)):
            results[name] = phase(args, url, gw.pid, flood)
            c, f = results[name]["calm"], results[name]["flood"]
            print(f"{name:24s} calm p50 {c['p50_ms']:.3f} ms p99 {c['p99_ms']:.3f} ms, codes {c['codes']} errors "
                  f"{c['errors']}; flood {f.get('codes', '-')} at {f.get('rps', '-')} req/s; gateway CPU "
                  f"{results[name]['gateway_cpu_percent']}%", flush=True)
        base = results["alone"]["calm"]
        print("\n| phase | calm p50 | calm p99 | calm failed | flood answers | gateway CPU |")
        print("|---|---|---|---|---|---|")
        for name, res in results.items():
            c, f = res["calm"], res["flood"]
            failed = sum(v for k, v in c["codes"].items() if k != "200") + c["errors"]
            flood = ", ".join(f"{v} × {k}" for k, v in sorted(f.get("codes", {}).items())) or "—"
            print(f"| {name} | {c['p50_ms']:.3f} ms (×{c['p50_ms'] / base['p50_ms']:.2f}) | {c['p99_ms']:.3f} ms "
                  f"(×{c['p99_ms'] / base['p99_ms']:.2f}) | {failed} | {flood} | {res['gateway_cpu_percent']}% |")
        (work / "results.json").write_text(json.dumps(results, indent=2))
        print(f"\nlogs and results in {work}")
    finally:
        for p in (gw, up):
            p.terminate()
            p.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
