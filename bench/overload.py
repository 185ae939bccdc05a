#!/usr/bin/env python3
"""Overload behaviour (issue 12 item 5): what one gateway replica does when offered twice the
throughput it can serve, with its admission bound off and on.

    bench/overload.py [--bin-dir DIR] [--seconds 15] [--rounds 2] [--replica-cpus 0.3]

The replica is one gateway process held to --replica-cpus of CPU time (a cgroup CPU quota, as a
Kubernetes CPU limit does, with a 10 ms period so the quota acts like a slower CPU rather than as
long pauses) on a CPU of its own, with one worker thread per whole CPU (at least 1); the upstream
and the load generator run on the other CPUs. The quota makes the replica what saturates: without
it, on this 2-core machine shared with the upstream, the load generator and other people's
builds, the machine saturates first and the queue forms in the upstream and the client instead.

1. Capacity: closed loop (N connections, each sending its next request when the last is
   answered; N = 16, 64, 256, the best counts) of 2026-07-28 `tools/call add` on
   `/mcp/{prefix}`, the call of bench/bench.py's throughput table, with the bound off.
2. Overload: the same call offered open loop by bench/loadgen (requests due on a fixed
   schedule whatever the answers do, latency measured from the time each was due, so no
   coordinated omission) at 2x that capacity for --seconds, on --conns connections opened (and
   used once) beforehand, through a fresh replica per configuration: bound off, the default
   (--max-queue-delay 10ms), and a fixed --max-in-flight; and at 1x, bound off and default
   (requests arriving on their own cost the replica more than back-to-back ones on a few
   connections, so 1x the closed-loop capacity is already past what it serves open loop). A
   row at 0.5x with the default checks that a replica that keeps up sheds nothing. A call
   unanswered 5 s after it was due is a timeout.

Absolute figures move between runs on this shared machine; compare rows of one round. Loopback
only; every run is bounded in time; the cgroup is removed at the end (it needs root and a cgroup
`cpu` controller; --replica-cpus 0 runs without one).

Binaries: --bin-dir, else $CARGO_TARGET_DIR/release (build them first:
`cargo build --release -p switchboard-gateway -p switchboard-example-upstream`); they are copied
aside for the run. The load generator is built from bench/loadgen with `go build`. Prints the
table and writes bench/results/overload-latest.{json,md}; logs stay in
$SWITCHBOARD_CACHE/bench/overload/<time>/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench as b  # noqa: E402  (the harness's helpers: processes, CPU accounting, requests)

CACHE = Path(os.environ.get("SWITCHBOARD_CACHE", Path.home() / ".cache" / "switchboard"))
PREFIX = "ex"
CAPACITY_CONNS = (16, 64, 256)
TIMEOUT_S = 5.0
QUOTA_PERIOD_US = 10_000


def log(msg: str) -> None:
    b.log(msg)


class CpuQuota:
    """A cgroup that holds the replica to `cpus` of CPU time (cgroup v1 `cpu` controller, or v2)."""

    def __init__(self, cpus: float):
        self.cpus = cpus
        name = f"switchboard-overload-{os.getpid()}"
        v1 = Path("/sys/fs/cgroup/cpu")
        v2 = Path("/sys/fs/cgroup")
        quota = max(1000, int(cpus * QUOTA_PERIOD_US))
        if (v1 / "cpu.cfs_quota_us").exists():
            self.path = v1 / name
            self.path.mkdir()
            (self.path / "cpu.cfs_period_us").write_text(str(QUOTA_PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))
        elif "cpu" in (v2 / "cgroup.subtree_control").read_text().split():
            self.path = v2 / name
            self.path.mkdir()
            (self.path / "cpu.max").write_text(f"{quota} {QUOTA_PERIOD_US}")
        else:
            raise OSError("no cgroup cpu controller to set a quota with")

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` started inside the cgroup (before it has any thread), on one CPU: the kernel
        hands out quota in 5 ms slices per CPU, so threads spread over CPUs get throttled with
        quota left over."""
        cpu = str((os.cpu_count() or 1) - 1)
        return ["taskset", "-c", cpu, "sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "sh", *argv]

    def throttled(self) -> int:
        """Periods in which the replica used up its quota so far."""
        for line in (self.path / "cpu.stat").read_text().splitlines():
            if line.startswith("nr_throttled"):
                return int(line.split()[1])
        return 0

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)  # the last process is still exiting
        log(f"could not remove {self.path}")


def build_loadgen(out_dir: Path) -> Path:
    out = out_dir / "loadgen"
    subprocess.run(["go", "build", "-o", str(out), "."], cwd=HERE / "loadgen", check=True,
                   env={**os.environ, "CGO_ENABLED": "0"})
    return out


class Run:
    def __init__(self, args, bins: dict, rundir: Path, quota: CpuQuota | None):
        self.args = args
        self.bins = bins
        self.rundir = rundir
        self.quota = quota
        self.procs = b.Procs(rundir)
        self.upstream = self.procs.start(
            "upstream", self.elsewhere([bins["upstream"], "--listen", "127.0.0.1:0", "--record", "0"]))
        cfg = b.gateway_config([b.server(PREFIX, f"{self.upstream.url}/mcp")])
        self.config = rundir / "gateway.yaml"
        self.config.write_text(b.to_yaml(cfg))
        self.n = 0

    def elsewhere(self, argv: list[str]) -> list[str]:
        """`argv` kept off the replica's CPU (when the replica has one of its own)."""
        n = os.cpu_count() or 1
        if not self.quota or n < 2:
            return argv
        return ["taskset", "-c", f"0-{n - 2}", *argv]

    def gateway(self, env: dict) -> b.Proc:
        self.n += 1
        threads = self.args.worker_threads or max(1, math.floor(self.args.replica_cpus))
        argv = [self.bins["gateway"], "--config", str(self.config), "--listen", "127.0.0.1:0",
                "--worker-threads", str(threads)]
        if self.quota:
            argv = self.quota.wrap(argv)
        return self.procs.start(f"gateway-{self.n}", argv, env={"RUST_LOG": "warn", **env})

    def loadgen(self, gw: b.Proc, *, seconds: float, conns: int, rate: float = 0) -> dict:
        body, h = b.modern_request("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, "add")
        headers = {**b.BASE_HEADERS, "Authorization": f"Bearer {b.GW_KEY}", **h}
        argv = [self.bins["loadgen"], "-url", f"{gw.url}/mcp/{PREFIX}", "-d", body.decode(),
                "-duration", f"{seconds}s", "-conns", str(conns), "-rate", str(rate),
                "-timeout", f"{TIMEOUT_S}s"]
        for k, v in headers.items():
            argv += ["-H", f"{k}: {v}"]
        errlog = self.rundir / "loadgen.err"
        with open(errlog, "ab") as errf:
            child = subprocess.Popen(self.elsewhere(argv), stdout=subprocess.PIPE, stderr=errf)
            # Counted from here: the connections are open once the loadgen says so on stderr.
            out = child.stdout.read()  # type: ignore[union-attr]  (it runs for a bounded time)
            _, status, ru = os.wait4(child.pid, 0)
        if status != 0:
            raise RuntimeError(f"loadgen failed ({status}); see {errlog}")
        res = json.loads(out)
        res["loadgen_cpu_s"] = ru.ru_utime + ru.ru_stime
        res["gateway_alive"] = gw.alive()
        return res

    def measured(self, gw: b.Proc, **kw) -> dict:
        """A load run with the replica's CPU and throttling over it."""
        g0, m0, t0 = gw.ticks(), b.machine_busy_ticks(), self.quota.throttled() if self.quota else 0
        w0 = time.monotonic()
        res = self.loadgen(gw, **kw)
        wall = time.monotonic() - w0
        res["gateway_cpu_s"] = (gw.ticks() - g0) / b.HZ
        res["machine_busy_cores"] = (b.machine_busy_ticks() - m0) / b.HZ / wall
        res["throttled_periods"] = (self.quota.throttled() - t0) if self.quota else None
        res["measured_wall_s"] = wall
        return res

    def shed_metric(self, gw: b.Proc) -> dict:
        _, _, data, _ = b.http_req(f"{gw.url}/metrics", timeout=10)
        out = {}
        for line in data.decode().splitlines():
            if line.startswith("switchboard_gateway_shed_requests_total{"):
                reason = line.split('reason="', 1)[1].split('"', 1)[0]
                out[reason] = int(float(line.split()[-1]))
        return out


def row(label: str, offered: float | None, res: dict, shed_metric: dict | None = None) -> dict:
    st = res["statuses"]
    ok = st.get("200", {"count": 0})
    shed = {k: v for k, v in st.items() if k in ("503", "429")}
    # one of 503 and 429 is always absent here: the percentiles of the one present
    shed_stats = max(shed.values(), key=lambda v: v["count"]) if shed else {"count": 0}
    other = {k: v["count"] for k, v in st.items() if k not in ("200", "503", "429")}
    secs = res["duration_s"]
    return {
        "label": label,
        "mode": res["mode"],
        "conns": res["conns"],
        "offered_per_s": round(offered) if offered else None,
        # 200s answered within the offered window, per second of it
        "ok_per_s": round(res["ok_in_window"] / secs),
        "ok": ok["count"],
        "ok_p50_ms": ok.get("p50_ms"),
        "ok_p99_ms": ok.get("p99_ms"),
        "ok_max_ms": ok.get("max_ms"),
        "shed": sum(v["count"] for v in shed.values()),
        "shed_p50_ms": shed_stats.get("p50_ms"),
        "shed_p99_ms": shed_stats.get("p99_ms"),
        "timeouts": other.pop("timeout", 0),
        "errors": other.pop("error", 0),
        "other_statuses": other,
        "client_wait_p99_ms": res["client_wait"]["p99_ms"],
        # over the offered window and the answers still owed after it (at most the timeout)
        "gateway_cpu_cores": round(res["gateway_cpu_s"] / res["measured_wall_s"], 2),
        "gateway_cpu_ms_per_ok": round(res["gateway_cpu_s"] * 1000 / ok["count"], 3) if ok["count"] else None,
        "loadgen_cpu_cores": round(res["loadgen_cpu_s"] / res["measured_wall_s"], 2),
        "machine_busy_cores": round(res["machine_busy_cores"], 2),
        "throttled_periods": res["throttled_periods"],
        "shed_metric": shed_metric,
        "per_second": [{k: s[k] for k in ("second", "due", "ok", "shed", "failed", "ok_p99_ms")}
                       for s in res["per_second"]],
    }


def fmt(x, nd=1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return f"{x:,}"


def table(rows: list[dict]) -> str:
    cols = ["round", "replica", "load", "offered req/s", "answered 200 req/s", "200 p50 / p99 ms",
            "503/429", "503/429 p50 / p99 ms", "timeouts / errors", "gateway CPU (cores)",
            "client wait p99 ms"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        load = (f"closed, {r['conns']} conns" if r["mode"] == "closed"
                else f"open, {r['offered_ratio']}x, {r['conns']} conns")
        lines.append(
            f"| {r['round']} | {r['label']} | {load} | {fmt(r['offered_per_s'])} | {fmt(r['ok_per_s'])} | "
            f"{fmt(r['ok_p50_ms'])} / {fmt(r['ok_p99_ms'])} | {fmt(r['shed'])} | "
            f"{fmt(r['shed_p50_ms'])} / {fmt(r['shed_p99_ms'])} | {r['timeouts']} / {r['errors']} | "
            f"{fmt(r['gateway_cpu_cores'], 2)} | {fmt(r['client_wait_p99_ms'])} |")
    return "\n".join(lines)


OFF = {"SWITCHBOARD_MAX_QUEUE_DELAY": "0", "SWITCHBOARD_MAX_IN_FLIGHT": "0"}
DEFAULT = "default (--max-queue-delay 10ms)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", help="where switchboard-gateway and switchboard-example-upstream are")
    ap.add_argument("--seconds", type=float, default=15.0, help="length of each open-loop run")
    ap.add_argument("--capacity-seconds", type=float, default=5.0, help="length of each closed-loop run")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--replica-cpus", type=float, default=0.3,
                    help="the replica's CPU quota (0: none, the replica shares the whole machine)")
    ap.add_argument("--worker-threads", type=int, default=0,
                    help="the replica's worker threads (default: its whole CPUs, at least 1)")
    ap.add_argument("--conns", type=int, default=500, help="connections of the open-loop runs")
    ap.add_argument("--in-flight", type=int, default=64, help="the tuned --max-in-flight row (0: no such row)")
    ap.add_argument("--queue-delay", action="append", default=[],
                    help="a row with this --max-queue-delay besides the default (repeatable)")
    ap.add_argument("--quick", action="store_true", help="5 s runs, 1 round")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.capacity_seconds, args.rounds = 5.0, 3.0, 1
    target = Path(os.environ.get("CARGO_TARGET_DIR", CACHE / "target"))
    src = Path(args.bin_dir) if args.bin_dir else target / "release"
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    rundir = CACHE / "bench" / "overload" / stamp
    rundir.mkdir(parents=True, exist_ok=True)
    bins = {}
    for key, name in (("gateway", "switchboard-gateway"), ("upstream", "switchboard-example-upstream")):
        shutil.copy2(src / name, rundir / name)
        bins[key] = str(rundir / name)
    bins["loadgen"] = str(build_loadgen(rundir))
    configs = {"bound off": OFF, DEFAULT: {}}
    for delay in args.queue_delay:
        configs[f"--max-queue-delay {delay}"] = {"SWITCHBOARD_MAX_QUEUE_DELAY": delay}
    if args.in_flight:
        configs[f"--max-in-flight {args.in_flight}"] = {**OFF, "SWITCHBOARD_MAX_IN_FLIGHT": str(args.in_flight)}
    quota = CpuQuota(args.replica_cpus) if args.replica_cpus > 0 else None
    rows: list[dict] = []
    started = time.monotonic()
    run = None
    try:
        run = Run(args, bins, rundir, quota)
        for rnd in range(1, args.rounds + 1):
            b.wait_idle(20.0)
            gw = run.gateway(OFF)
            run.loadgen(gw, seconds=2, conns=8)  # warm-up
            best = None
            for conns in CAPACITY_CONNS:
                res = run.measured(gw, seconds=args.capacity_seconds, conns=conns)
                r = row("bound off", None, res)
                r.update(round=rnd, offered_ratio=None)
                log(f"round {rnd}: closed loop, {conns} connections: {r['ok_per_s']} calls/s, "
                    f"p50 {r['ok_p50_ms']} p99 {r['ok_p99_ms']} ms, gateway {r['gateway_cpu_cores']} cores")
                if best is None or r["ok_per_s"] > best["ok_per_s"]:
                    best = r
            run.procs.stop(gw)
            assert best is not None
            rows.append(best)
            capacity = best["ok_per_s"]
            log(f"round {rnd}: capacity {capacity} calls/s (closed loop, {best['conns']} connections)")
            plan = [(DEFAULT, 0.5), ("bound off", 1.0), (DEFAULT, 1.0)] + [(label, 2.0) for label in configs]
            for label, ratio in plan:
                b.wait_idle(20.0)
                gw = run.gateway(configs[label])
                run.loadgen(gw, seconds=2, conns=8)  # warm-up
                offered = capacity * ratio
                res = run.measured(gw, seconds=args.seconds, conns=args.conns, rate=offered)
                r = row(label, offered, res, run.shed_metric(gw) if gw.alive() else None)
                r.update(round=rnd, offered_ratio=ratio)
                rows.append(r)
                run.procs.stop(gw)
                log(f"  {label:34s} {ratio}x: {r['ok_per_s']} ok/s p50 {r['ok_p50_ms']} p99 {r['ok_p99_ms']} ms, "
                    f"shed {r['shed']} (p50 {r['shed_p50_ms']} p99 {r['shed_p99_ms']} ms), timeouts {r['timeouts']}, "
                    f"errors {r['errors']}, gateway {r['gateway_cpu_cores']} cores, client wait p99 "
                    f"{r['client_wait_p99_ms']} ms, loadgen {r['loadgen_cpu_cores']} cores")
    finally:
        if run:
            run.procs.stop_all()
        if quota:
            quota.remove()
    md = table(rows)
    rev = subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(HERE.parent), "status", "--porcelain", "--", "gateway"],
                           capture_output=True, text=True).stdout.strip()
    result = {
        "date": b.now_iso(),
        "versions": {
            "gateway": subprocess.run([bins["gateway"], "--version"], capture_output=True, text=True).stdout.strip(),
            "git rev": rev + ("+dirty" if dirty else ""),
            "go": subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip(),
        },
        "command": "bench/overload.py " + " ".join(sys.argv[1:]),
        "replica_cpus": args.replica_cpus,
        "quota_period_us": QUOTA_PERIOD_US if quota else None,
        "seconds": args.seconds,
        "open_loop_connections": args.conns,
        "timeout_s": TIMEOUT_S,
        "rows": rows,
        "duration_s": round(time.monotonic() - started),
        "rundir": str(rundir),
    }
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "overload-latest.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "overload-latest.md").write_text(md + "\n")
    print(md)
    log(f"overload: wrote {out}/overload-latest.json and .md in {result['duration_s']} s (logs {rundir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
