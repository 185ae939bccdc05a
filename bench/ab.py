#!/usr/bin/env python3
"""A/B: two gateway binaries, same upstream, same run, alternating rounds.

    python3 bench/ab.py --oha OHA --upstream UPSTREAM_BIN A_GATEWAY_BIN B_GATEWAY_BIN \
        [--rounds 5] [--seconds 8] [--conc 16] [--c1 3000] [--labels base,patched] [--env-b K=V]

For a before/after of a gateway change: build both binaries (e.g. with CARGO_TARGET_DIR set
apart from the project's), then run this. Each round runs, for A then B (and B then A on odd
rounds, so drift cancels): one request at a time (-n C1 -c 1) and throughput (-z SECONDS
-c CONC) of the 2026-07-28 stateless `tools/call` through the aggregate endpoint, with the same
CPU accounting as bench.py. Prints medians over rounds and writes JSON to stdout's last line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as B  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--oha", required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--labels", default="A,B")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--c1", type=int, default=3000)
    ap.add_argument("--path", default="gw-2026", choices=["gw-2026", "gw-legacy", "gw-rest"])
    ap.add_argument("--env-a", default="", help="KEY=VAL[,KEY=VAL] for gateway A (e.g. TOKIO_WORKER_THREADS=1)")
    ap.add_argument("--env-b", default="", help="the same for gateway B")
    args = ap.parse_args()
    labels = args.labels.split(",")
    # Process logs and the config stay with bench.py's runs (in the cache), not in /tmp.
    cache = Path(os.environ.get("SWITCHBOARD_CACHE", Path.home() / ".cache/switchboard"))
    rundir = cache / "bench/runs" / time.strftime("ab-%Y%m%d-%H%M%S")
    rundir.mkdir(parents=True, exist_ok=True)
    procs = B.Procs(rundir)
    bench = B.Bench(argparse.Namespace(quick=False), args.oha, rundir)
    bench.max_wait = 60
    out: dict = {lab: {"c1_p50_ms": [], "c1_p99_ms": [], "req_per_s": [], "cpu_ms_per_call": []} for lab in labels}
    try:
        up = procs.start("upstream", [args.upstream, "--listen", "127.0.0.1:0", "--record", "0"])
        direct = B.direct_path(up, "rust")
        cfg = B.gateway_config([B.server("ex", f"{up.url}/mcp")])
        cfg_path = rundir / "ab.yaml"
        cfg_path.write_text(B.to_yaml(cfg))
        gws = {}
        for lab, binary, env in zip(labels, (args.a, args.b), (args.env_a, args.env_b)):
            env_map = dict(kv.split("=", 1) for kv in env.split(",") if kv)
            gws[lab] = procs.start(f"gateway-{lab}", [binary, "--config", str(cfg_path), "--listen", "127.0.0.1:0"],
                                   env=env_map)
        paths = {lab: next(p for p in B.gateway_paths(gw, "ex", "rust") if p.via == args.path) for lab, gw in gws.items()}
        for lab, p in paths.items():
            ok, detail = p.check()
            if not ok:
                raise SystemExit(f"{lab}: check failed: {detail}")
            bench.run_load(p, {"gateway": gws[lab], "upstream": up}, n=500, conc=4)
        d1 = []
        for rnd in range(args.rounds):
            order = labels if rnd % 2 == 0 else list(reversed(labels))
            d1.append(bench.run_load(direct, {"upstream": up}, n=args.c1, conc=1)["p50_ms"])
            for lab in order:
                tracked = {"gateway": gws[lab], "upstream": up}
                c1 = bench.run_load(paths[lab], tracked, n=args.c1, conc=1)
                thr = bench.run_load(paths[lab], tracked, seconds=args.seconds, conc=args.conc)
                o = out[lab]
                o["c1_p50_ms"].append(c1["p50_ms"])
                o["c1_p99_ms"].append(c1["p99_ms"])
                o["req_per_s"].append(thr["req_per_s"])
                o["cpu_ms_per_call"].append(thr["cpu_ms_per_call"]["gateway"])
                print(f"round {rnd + 1} {lab:10s} c1 p50 {c1['p50_ms']:.3f} p99 {c1['p99_ms']:.3f} ms | "
                      f"{thr['req_per_s']:.0f} req/s, gateway CPU {thr['cpu_ms_per_call']['gateway']:.4f} ms/call"
                      f"{' (contended)' if thr['contended'] or c1['contended'] else ''}", flush=True)
        summary = {"direct_c1_p50_ms": round(statistics.median(d1), 3)}
        for lab in labels:
            summary[lab] = {k: round(statistics.median(v), 4) for k, v in out[lab].items()}
            summary[lab]["rounds"] = out[lab]
        print("median over rounds:")
        for lab in labels:
            s = summary[lab]
            print(f"  {lab:10s} c1 p50 {s['c1_p50_ms']:.3f} ms (+{s['c1_p50_ms'] - summary['direct_c1_p50_ms']:.3f} vs direct), "
                  f"p99 {s['c1_p99_ms']:.3f} ms | {s['req_per_s']:.0f} req/s | gateway CPU {s['cpu_ms_per_call']:.4f} ms/call")
        print(json.dumps(summary))
    finally:
        procs.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
