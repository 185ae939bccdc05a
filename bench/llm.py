"""The LLM path, gateway versus direct to the scripted provider, in one run.

    bench/llm.py [--requests N] [--seconds S] [--stream-runs N] [--long-calls N] [--long-events N]
                 [--bin-dir DIR] [--out FILE] [--compare-gateway BIN [--compare-label NAME]]

Builds the release gateway and scripted provider (cargo, into $CARGO_TARGET_DIR or the cache;
with --bin-dir the binaries there are used and nothing is built), starts both on loopback, and
measures, directly to the provider and through the gateway, alternating:

- pass-through calls (a model with no gateway tools), in both wire formats (`POST /v1/messages`
  and `POST /v1/chat/completions`):
  - added latency one call at a time (oha -c 1 -n N): p50 and p99 of each, the difference and
    the ratio;
  - throughput at 16 connections for S seconds, and the gateway's CPU per call
    (/proc/<pid>/stat);
  - time to the first streamed byte and to the first text delta of `"stream": true` calls
    (httpx on kept-alive connections, N runs per side, alternating call by call): p50 and p99;
- long streamed answers (one text delta per 3 words, --long-events deltas per answer), each
  format three ways, alternating call by call: direct; through the gateway to a model without
  gateway tools (pass-through: the provider's bytes are relayed as they come); through the
  gateway to a model with a gateway tool (the tool loop: the gateway parses every event and
  writes it again with its own block indices). For each: the gateway's and the provider's CPU
  per event the client received (each process's threads' run time, /proc/<pid>/task/*/schedstat,
  summed around each call, in ns), the client-observed events/s, and p50/p99 of the whole call;
  With --compare-gateway, a second gateway binary (same configuration) gets the two gateway
  paths too, in the same alternation: a before/after in one run;
- for scale, one hidden-gateway-tool round (two model calls and one tools/call through the
  gateway) against one direct model call.

Prints a table (and writes it to --out, if given). Loopback only; every run is bounded by a
count or a duration.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
LONG_PROMPT = "Write a long answer."
# The first text of each format's stream (OpenAI's opening chunk has `"content":""`).
FIRST_TEXT = {"anthropic": re.compile(rb"text_delta"), "openai": re.compile(rb'"content":"[^"]')}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def cpu_ns(pid: int) -> int:
    """Run time of the process's live threads, in ns (schedstat is exact where stat counts
    ticks of 10 ms, too coarse around one call)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended between the listing and the read
    return total


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


def ttfb(client: httpx.Client, url: str, headers: dict, body: dict, first_text: re.Pattern) -> tuple[float, float]:
    """Milliseconds to the first body byte and to the first text delta of one streamed call
    (on a kept-alive connection: a new httpx client costs more than the call)."""
    started = time.perf_counter()
    first_byte = first_txt = None
    seen = b""
    with client.stream("POST", url, json=body, headers=headers, timeout=30) as r:
        assert r.status_code == 200, r.read()[:500]
        for chunk in r.iter_raw():
            now = time.perf_counter()
            if first_byte is None:
                first_byte = now
            if first_txt is None:
                seen += chunk
                if first_text.search(seen):
                    first_txt = now
    assert first_byte and first_txt, seen[:500]
    return (first_byte - started) * 1000, (first_txt - started) * 1000


def long_call(client: httpx.Client, url: str, headers: dict, body: dict, pids: dict) -> dict:
    """One long streamed call: its events (blank-line-ended SSE events the client got), its
    time, and each process's CPU around it."""
    before = {name: cpu_ns(pid) for name, pid in pids.items()}
    started = time.perf_counter()
    events = 0
    tail = b""
    size = 0
    with client.stream("POST", url, json=body, headers=headers, timeout=60) as r:
        assert r.status_code == 200, r.read()[:500]
        for chunk in r.iter_raw():
            events += (tail + chunk[:1]).count(b"\n\n") + chunk.count(b"\n\n")
            tail = chunk[-1:]
            size += len(chunk)
    took = time.perf_counter() - started
    after = {name: cpu_ns(pid) for name, pid in pids.items()}
    return {"events": events, "bytes": size, "s": took, **{f"{n}_ns": after[n] - before[n] for n in pids}}


def quantile(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--stream-runs", type=int, default=300)
    ap.add_argument("--long-calls", type=int, default=100, help="long streamed calls per path")
    ap.add_argument("--long-events", type=int, default=1000, help="text deltas per long answer")
    ap.add_argument("--bin-dir", help="use the release binaries in DIR (nothing is built)")
    ap.add_argument("--out", help="also write the printout to FILE")
    ap.add_argument("--compare-gateway", metavar="BIN", help="a second gateway binary, measured beside the first in the long streams (a before/after)")
    ap.add_argument("--compare-label", default="compare", help="its name in the table")
    ap.add_argument("--oha", default=str(Path(os.environ.get("SWITCHBOARD_CACHE", Path.home() / ".cache/switchboard")) / "tools/bin/oha"))
    args = ap.parse_args()
    if args.bin_dir:
        rel = Path(args.bin_dir)
    else:
        target = Path(os.environ.get("CARGO_TARGET_DIR", Path(os.environ.get("SWITCHBOARD_CACHE", Path.home() / ".cache/switchboard")) / "target"))
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "switchboard-gateway", "-p", "switchboard-scripted-provider",
                        "-p", "switchboard-example-upstream"], cwd=REPO, check=True, env={**os.environ, "CARGO_TARGET_DIR": str(target)})
        rel = target / "release"
    work = Path(tempfile.mkdtemp(prefix="bench-llm-"))
    procs = []
    long_text = " ".join(f"word{i}" for i in range(3 * args.long_events))
    try:
        provider, paddr = start([str(rel / "switchboard-scripted-provider"), "--listen", "127.0.0.1:0", "--api-key", PROVIDER_KEY, "--record", "0"], work / "provider.log")
        upstream, uaddr = start([str(rel / "switchboard-example-upstream"), "--listen", "127.0.0.1:0"], work / "upstream.log")
        procs += [provider, upstream]
        rules = {"rules": [
            {"when": {"last_user_text_contains": LONG_PROMPT}, "respond": {"content": [{"type": "text", "text": long_text}], "usage": {"input_tokens": 12, "output_tokens": 3 * args.long_events}}},
            {"when": {"last_tool_result_for": "tools__add"}, "respond": {"content": [{"type": "text", "text": "sum {{tool_result:tools__add}}"}]}},
            {"when": {"last_user_text_contains": "add"}, "respond": {"content": [{"type": "tool_use", "name": "tools__add", "input": {"a": 1, "b": 2}}]}},
            {"respond": {"content": [{"type": "text", "text": "A short answer of a few words, streamed in pieces."}], "usage": {"input_tokens": 12, "output_tokens": 12}}},
        ]}
        httpx.post(f"http://{paddr}/_script", json=rules).raise_for_status()
        tools = [{"server": "tools", "tools": {"allow": ["add"]}}]
        anthropic = {"provider": "anthropic", "baseUrl": f"http://{paddr}", "apiKey": PROVIDER_KEY, "accessGroups": ["g"]}
        openai = {"provider": "openai", "baseUrl": f"http://{paddr}/v1", "apiKey": PROVIDER_KEY, "accessGroups": ["g"]}
        config = {
            "gateway": {"sessionKey": "bench-llm-session-key-0123456789"},
            "servers": [{"name": "tools", "url": f"http://{uaddr}/mcp", "accessGroups": ["g"]}],
            "keys": [{"name": "bench", "secret": KEY, "accessGroups": ["g"]}],
            "models": [
                {"name": "plain", **anthropic},
                {"name": "tooled", **anthropic, "tools": tools},
                {"name": "oplain", **openai},
                {"name": "otooled", **openai, "tools": tools},
            ],
        }
        (work / "gateway.yaml").write_text(json.dumps(config))
        gateway, gaddr = start([str(rel / "switchboard-gateway"), "--config", str(work / "gateway.yaml"), "--listen", "127.0.0.1:0"], work / "gateway.log")
        procs.append(gateway)
        if args.compare_gateway:
            other, oaddr = start([args.compare_gateway, "--config", str(work / "gateway.yaml"), "--listen", "127.0.0.1:0"], work / "gateway-compare.log")
            procs.append(other)

        # Each API: (direct URL, headers), (gateway URL, headers), the pass-through model, the
        # model with a gateway tool. `model` is rewritten per call; the provider ignores it.
        apis = {
            "anthropic": {
                "path": "/v1/messages",
                "direct": (f"http://{paddr}/v1/messages", {"x-api-key": PROVIDER_KEY, "anthropic-version": VERSION}),
                "gateway": (f"http://{gaddr}/v1/messages", {"x-api-key": KEY, "anthropic-version": VERSION}),
                "plain": "plain", "tooled": "tooled",
            },
            "openai": {
                "path": "/v1/chat/completions",
                "direct": (f"http://{paddr}/v1/chat/completions", {"authorization": f"Bearer {PROVIDER_KEY}"}),
                "gateway": (f"http://{gaddr}/v1/chat/completions", {"authorization": f"Bearer {KEY}"}),
                "plain": "oplain", "tooled": "otooled",
            },
        }
        short = {"max_tokens": 64, "messages": [{"role": "user", "content": "Say something short."}]}
        rows: dict = {api: {"direct": {}, "gateway": {}} for api in apis}
        for api, a in apis.items():
            body = {"model": a["plain"], **short}
            for side in ("direct", "gateway"):  # warm up
                oha(args.oha, *a[side], body, n=200)
            for side in ("direct", "gateway"):
                rows[api][side]["c1"] = oha(args.oha, *a[side], body, n=args.requests)
            for side in ("direct", "gateway"):
                c0 = cpu_seconds(gateway.pid)
                res = oha(args.oha, *a[side], body, seconds=args.seconds, conc=16)
                res["gateway_cpu_ms_per_call"] = (cpu_seconds(gateway.pid) - c0) * 1000 / max(res["ok"], 1)
                rows[api][side]["c16"] = res
        with httpx.Client() as client:
            for api in apis:
                for side in ("direct", "gateway"):
                    rows[api][side]["stream"] = []
            for _ in range(args.stream_runs):
                for api, a in apis.items():
                    body = {"model": a["plain"], **short, "stream": True}
                    for side in ("direct", "gateway"):
                        rows[api][side]["stream"].append(ttfb(client, *a[side], body, FIRST_TEXT[api]))

            # Long streams: three paths per format, alternating call by call.
            long_paths = {}
            for api, a in apis.items():
                body = {"max_tokens": 8 * args.long_events, "messages": [{"role": "user", "content": LONG_PROMPT}], "stream": True}
                long_paths[(api, "direct")] = (*a["direct"], dict(body, model=a["plain"]), gateway.pid)
                long_paths[(api, "pass-through")] = (*a["gateway"], dict(body, model=a["plain"]), gateway.pid)
                long_paths[(api, "tool loop")] = (*a["gateway"], dict(body, model=a["tooled"]), gateway.pid)
                if args.compare_gateway:
                    ourl = a["gateway"][0].replace(gaddr, oaddr)
                    long_paths[(api, f"pass-through [{args.compare_label}]")] = (ourl, a["gateway"][1], dict(body, model=a["plain"]), other.pid)
                    long_paths[(api, f"tool loop [{args.compare_label}]")] = (ourl, a["gateway"][1], dict(body, model=a["tooled"]), other.pid)
            for url, h, body, gpid in long_paths.values():  # warm up, and the event counts agree
                first = long_call(client, url, h, body, {"gateway": gpid, "provider": provider.pid})
                assert first["events"] >= args.long_events, (url, body["model"], first)
            longs: dict = {k: [] for k in long_paths}
            g0 = cpu_seconds(gateway.pid)
            for _ in range(args.long_calls):
                for k, (url, h, body, gpid) in long_paths.items():
                    longs[k].append(long_call(client, url, h, body, {"gateway": gpid, "provider": provider.pid}))
            gateway_stat_s = cpu_seconds(gateway.pid) - g0
        loop_body = {"model": "tooled", **short, "messages": [{"role": "user", "content": "please add"}]}
        loop = oha(args.oha, *apis["anthropic"]["gateway"], loop_body, n=max(args.requests // 4, 100))
    finally:
        for p in procs:
            p.kill()

    lines: list[str] = []
    out = lines.append
    out(f"\nLLM path (scripted provider, loopback; {args.requests} calls one at a time, {args.seconds:.0f} s at 16 connections, "
        f"{args.stream_runs} streamed calls per side, {args.long_calls} long streamed calls of {args.long_events} text deltas per path)\n")
    out("| | direct | gateway | added | gateway/direct |")
    out("|---|---|---|---|---|")
    for api, a in apis.items():
        d, g = rows[api]["direct"], rows[api]["gateway"]
        p = f"`{a['path']}`"
        for q in ("p50", "p99"):
            out(f"| {p} {q}, one at a time | {d['c1'][q]:.3f} ms | {g['c1'][q]:.3f} ms | {g['c1'][q] - d['c1'][q]:+.3f} ms | {g['c1'][q] / d['c1'][q]:.2f} |")
        out(f"| {p} req/s at 16 connections | {d['c16']['rps']:,.0f} | {g['c16']['rps']:,.0f} | | {g['c16']['rps'] / d['c16']['rps']:.2f} |")
        out(f"| {p} gateway CPU per call (16 connections) | | {g['c16']['gateway_cpu_ms_per_call']:.3f} ms | | |")
        for i, what in ((0, "first byte"), (1, "first text delta")):
            ds = [x[i] for x in d["stream"]]
            gs = [x[i] for x in g["stream"]]
            for q in (50, 99):
                dq, gq = quantile(ds, q), quantile(gs, q)
                out(f"| {p} stream: {what}, p{q} | {dq:.3f} ms | {gq:.3f} ms | {gq - dq:+.3f} ms | {gq / dq:.2f} |")
    dc1 = rows["anthropic"]["direct"]["c1"]
    out(f"| hidden-tool round (2 model calls + 1 tools/call), p50 | {dc1['p50']:.3f} ms (1 call) | {loop['p50']:.3f} ms | | {loop['p50'] / dc1['p50']:.2f} |")
    out(f"| hidden-tool round, p99 | {dc1['p99']:.3f} ms (1 call) | {loop['p99']:.3f} ms | | {loop['p99'] / dc1['p99']:.2f} |")

    out(f"\nLong streamed answers ({args.long_events} text deltas each, {args.long_calls} calls per path, alternating call by call; "
        "CPU = the process's run time around the calls ÷ the SSE events the client received)\n")
    out("| | events per call | gateway CPU per event | provider CPU per event | client events/s | call p50 | call p99 | p50 / direct |")
    out("|---|---|---|---|---|---|---|---|")
    total_gateway_ns = 0
    for api in apis:
        direct_p50 = None
        for path in [p for (a, p) in longs if a == api]:
            calls = longs[(api, path)]
            events = sum(c["events"] for c in calls)
            gns = sum(c["gateway_ns"] for c in calls)
            if "[" not in path:
                total_gateway_ns += gns
            pns = sum(c["provider_ns"] for c in calls)
            secs = [c["s"] * 1000 for c in calls]
            p50, p99 = quantile(secs, 50), quantile(secs, 99)
            direct_p50 = direct_p50 or p50
            gcell = "—" if path == "direct" else f"{gns / events / 1000:.2f} µs"
            out(f"| `{apis[api]['path']}` {path} | {events / len(calls):,.0f} | {gcell} | {pns / events / 1000:.2f} µs | "
                f"{events / sum(c['s'] for c in calls):,.0f} | {p50:.2f} ms | {p99:.2f} ms | {p50 / direct_p50:.2f} |")
    out(f"\n(check: the gateway's /proc/<pid>/stat CPU over the long calls {gateway_stat_s * 1000:.0f} ms, its threads' schedstat sum {total_gateway_ns / 1e6:.0f} ms)")
    out(f"logs: {work}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
