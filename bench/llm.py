"""The LLM path, gateway versus direct to the scripted provider, in one run.

    bench/llm.py [--requests N] [--seconds S] [--stream-runs N]

Builds the release gateway and scripted provider (cargo, into $CARGO_TARGET_DIR or the cache),
starts both on loopback, and measures a pass-through `POST /v1/messages` (a model with no gateway
tools) sent directly to the provider and through the gateway, alternating:

- added latency one call at a time (oha -c 1 -n N): p50 and p99 of each, and the difference;
- throughput at 16 connections for S seconds, and the gateway's CPU per call (/proc/<pid>/stat);
- time to the first streamed byte and to the first text delta of `"stream": true` calls (httpx
  on kept-alive connections, N runs per side, alternating);
- for scale, one hidden-gateway-tool round (two model calls and one tools/call through the
  gateway) against one direct model call.

Prints a table. Loopback only; every run is bounded by a count or a duration.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from first_notification import start  # the same way of starting a binary and reading its address

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-bench-llm"
PROVIDER_KEY = "pk-bench-llm"
VERSION = "2023-06-01"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def oha(oha_bin: str, url: str, headers: dict, body: dict, *, n: int | None = None, seconds: float | None = None, conc: int = 1) -> dict:
    argv = [oha_bin, "--no-tui", "--output-format", "json", "-m", "POST", "-c", str(conc), "-t", "30s"]
    argv += ["-n", str(n)] if n else ["-z", f"{seconds}s", "-w"]
    for k, v in headers.items():
        argv += ["-H", f"{k}: {v}"]
    argv += ["-d", json.dumps(body), url]
    done = subprocess.run(argv, capture_output=True, check=True)
    res = json.loads(done.stdout)
    codes = res.get("statusCodeDistribution", {})
    assert set(codes) <= {"200"}, f"non-200 answers: {codes}"
    pct = res["latencyPercentiles"]
    return {
        "rps": res["summary"]["requestsPerSec"],
        "p50": pct["p50"] * 1000,
        "p99": pct["p99"] * 1000,
        "ok": int(codes.get("200", 0)),
    }


def ttfb(client: httpx.Client, url: str, headers: dict, body: dict) -> tuple[float, float]:
    """Milliseconds to the first body byte and to the first text delta of one streamed call
    (on a kept-alive connection: a new httpx client costs more than the call)."""
    started = time.perf_counter()
    first_byte = first_text = None
    seen = b""
    with client.stream("POST", url, json=body, headers=headers, timeout=30) as r:
        for chunk in r.iter_raw():
            now = time.perf_counter()
            if first_byte is None:
                first_byte = now
            seen += chunk
            if first_text is None and b"text_delta" in seen:
                first_text = now
    assert first_byte and first_text, seen[:500]
    return (first_byte - started) * 1000, (first_text - started) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--stream-runs", type=int, default=300)
    ap.add_argument("--oha", default=str(Path(os.environ.get("SWITCHBOARD_CACHE", Path.home() / ".cache/switchboard")) / "tools/bin/oha"))
    args = ap.parse_args()
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path(os.environ.get("SWITCHBOARD_CACHE", Path.home() / ".cache/switchboard")) / "target"))
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "switchboard-gateway", "-p", "switchboard-scripted-provider",
                    "-p", "switchboard-example-upstream"], cwd=REPO, check=True, env={**os.environ, "CARGO_TARGET_DIR": str(target)})
    work = Path(tempfile.mkdtemp(prefix="bench-llm-"))
    rel = target / "release"
    procs = []
    try:
        provider, paddr = start([str(rel / "switchboard-scripted-provider"), "--listen", "127.0.0.1:0", "--api-key", PROVIDER_KEY, "--record", "0"], work / "provider.log")
        upstream, uaddr = start([str(rel / "switchboard-example-upstream"), "--listen", "127.0.0.1:0"], work / "upstream.log")
        procs += [provider, upstream]
        rules = {"rules": [
            {"when": {"last_tool_result_for": "tools__add"}, "respond": {"content": [{"type": "text", "text": "sum {{tool_result:tools__add}}"}]}},
            {"when": {"last_user_text_contains": "add"}, "respond": {"content": [{"type": "tool_use", "name": "tools__add", "input": {"a": 1, "b": 2}}]}},
            {"respond": {"content": [{"type": "text", "text": "A short answer of a few words, streamed in pieces."}], "usage": {"input_tokens": 12, "output_tokens": 12}}},
        ]}
        httpx.post(f"http://{paddr}/_script", json=rules).raise_for_status()
        config = {
            "gateway": {"sessionKey": "bench-llm-session-key-0123456789"},
            "servers": [{"name": "tools", "url": f"http://{uaddr}/mcp", "accessGroups": ["g"]}],
            "keys": [{"name": "bench", "secret": KEY, "accessGroups": ["g"]}],
            "models": [
                {"name": "plain", "provider": "anthropic", "baseUrl": f"http://{paddr}", "apiKey": PROVIDER_KEY, "accessGroups": ["g"]},
                {"name": "tooled", "provider": "anthropic", "baseUrl": f"http://{paddr}", "apiKey": PROVIDER_KEY, "accessGroups": ["g"],
                 "tools": [{"server": "tools", "tools": {"allow": ["add"]}}]},
            ],
        }
        (work / "gateway.yaml").write_text(json.dumps(config))
        gateway, gaddr = start([str(rel / "switchboard-gateway"), "--config", str(work / "gateway.yaml"), "--listen", "127.0.0.1:0"], work / "gateway.log")
        procs.append(gateway)
        body = {"model": "plain", "max_tokens": 64, "messages": [{"role": "user", "content": "Say something short."}]}
        direct = (f"http://{paddr}/v1/messages", {"x-api-key": PROVIDER_KEY, "anthropic-version": VERSION})
        via = (f"http://{gaddr}/v1/messages", {"x-api-key": KEY, "anthropic-version": VERSION})
        for url, h in (direct, via):  # warm up
            oha(args.oha, url, h, body, n=200)
        rows = {}
        for name, (url, h) in (("direct", direct), ("gateway", via)):
            rows[name] = {"c1": oha(args.oha, url, h, body, n=args.requests)}
        for name, (url, h) in (("direct", direct), ("gateway", via)):
            c0 = cpu_seconds(gateway.pid)
            res = oha(args.oha, url, h, body, seconds=args.seconds, conc=16)
            used = cpu_seconds(gateway.pid) - c0
            res["gateway_cpu_ms_per_call"] = used * 1000 / max(res["ok"], 1) if name == "gateway" else None
            rows[name]["c16"] = res
        stream_body = dict(body, stream=True)
        for name, (url, h) in (("direct", direct), ("gateway", via)):
            rows[name]["stream"] = []
        with httpx.Client() as client:
            for _ in range(args.stream_runs):
                for name, (url, h) in (("direct", direct), ("gateway", via)):
                    rows[name]["stream"].append(ttfb(client, url, h, stream_body))
        loop_body = {"model": "tooled", "max_tokens": 64, "messages": [{"role": "user", "content": "please add"}]}
        loop = oha(args.oha, via[0], via[1], loop_body, n=max(args.requests // 4, 100))
    finally:
        for p in procs:
            p.kill()

    def med(xs):
        return statistics.median(xs)

    def p90(xs):
        return statistics.quantiles(xs, n=10)[-1]

    d, g = rows["direct"], rows["gateway"]
    print(f"\nLLM path (scripted provider, loopback; {args.requests} calls one at a time, {args.seconds:.0f} s at 16 connections, {args.stream_runs} streamed calls per side)\n")
    print("| | direct | gateway | added |")
    print("|---|---|---|---|")
    print(f"| /v1/messages p50, one at a time | {d['c1']['p50']:.3f} ms | {g['c1']['p50']:.3f} ms | +{g['c1']['p50'] - d['c1']['p50']:.3f} ms |")
    print(f"| /v1/messages p99, one at a time | {d['c1']['p99']:.3f} ms | {g['c1']['p99']:.3f} ms | +{g['c1']['p99'] - d['c1']['p99']:.3f} ms |")
    print(f"| req/s at 16 connections | {d['c16']['rps']:,.0f} | {g['c16']['rps']:,.0f} | {g['c16']['rps'] / d['c16']['rps']:.2f}x |")
    print(f"| gateway CPU per call | | {g['c16']['gateway_cpu_ms_per_call']:.3f} ms | |")
    db = [x[0] for x in d["stream"]]
    gb = [x[0] for x in g["stream"]]
    dt = [x[1] for x in d["stream"]]
    gt = [x[1] for x in g["stream"]]
    print(f"| stream: first byte, median (p90) | {med(db):.3f} ({p90(db):.3f}) ms | {med(gb):.3f} ({p90(gb):.3f}) ms | +{med(gb) - med(db):.3f} ms |")
    print(f"| stream: first text delta, median (p90) | {med(dt):.3f} ({p90(dt):.3f}) ms | {med(gt):.3f} ({p90(gt):.3f}) ms | +{med(gt) - med(dt):.3f} ms |")
    print(f"| hidden-tool round (2 model calls + 1 tools/call), p50 | {d['c1']['p50']:.3f} ms (1 call) | {loop['p50']:.3f} ms | |")
    print(f"\nlogs: {work}")


if __name__ == "__main__":
    sys.exit(main())
