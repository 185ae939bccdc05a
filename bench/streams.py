#!/usr/bin/env python3
"""What an open, idle stream costs the gateway: N concurrent relayed `tools/call` streams and N
`subscriptions/listen` streams, memory per stream and wake-ups while they are idle (issue 12,
item 3).

    bench/streams.py [--bin-dir DIR] [--streams N] [--window S] [--kinds call,listen,direct,floor,notify]
                     [--notify-runs R] [--json FILE]

Uses release binaries (`switchboard-gateway`, `switchboard-example-upstream`): --bin-dir, else
the newest `$SWITCHBOARD_CACHE/bench/bin/*/` that `bench/run.sh` copied aside; it builds nothing.
Each kind gets a fresh upstream and gateway on 127.0.0.1 (so every figure starts from the same
warmed, idle process):

- `call`: 2026-07-28 stateless `tools/call slow(600000)` with a progress token on
  `/mcp/{prefix}`, upstream variant `sse`: the upstream sends a progress event, then sleeps.
  Each client reads that event (the stream is open end to end), then holds the stream idle.
- `listen`: `subscriptions/listen` on the aggregate `/mcp` (one server in scope): each client
  reads the acknowledgement, then holds the stream idle.
- `direct`: the same N of both kinds straight to the upstream, for comparison (no gateway).
- `floor`: the same N of both kinds through `switchboard-bench-floor` (bench/floor: a bare
  hyper pass-through proxy on the gateway's stack, no logic), if the binary is in --bin-dir:
  what any proxy on this stack holds per stream, so the rest is the gateway's own.
- `notify`: latency, not memory: time from the upstream's `POST /_notify` to the
  `notifications/tools/list_changed` on a listen stream direct, through `/mcp/{prefix}` and
  through the fan-in on `/mcp` (one stream each, notified in turn, --notify-runs rounds). The
  time to the first notification of a relayed `tools/call` is bench/first_notification.py.

Per kind: the gateway's RSS (`VmRSS`) and runtime tasks (`switchboard_gateway_runtime_tasks` on
`/metrics`) before opening and with all N open, the upstream's RSS as context; then, with nothing
sent for --window seconds, CPU ticks (utime+stime) and context switches (voluntary + involuntary,
summed over /proc/PID/task/*) of each process, against the same window measured before opening
(the idle process's own timers); then all clients close and the script waits (at most 30 s) for
the tasks to come back down, and reads RSS idle and again after 2 s of small requests (mimalloc
returns freed pages only when a thread allocates again). A voluntary context switch is a thread going to sleep, so one per
wake-up: wake-ups per stream per second = (voluntary switches/s with N open - before) / N.
(Involuntary switches are preemptions, which follow the machine's load; they are in --json.)

The clients are one asyncio loop on raw sockets (HTTP/1.1, one connection per stream), opening
at most 128 at once. A relayed stream costs the gateway two file descriptors (client and upstream
connection); when the file limit (RLIMIT_NOFILE, raised to its hard limit) cannot hold 2 N, N is
lowered to fit and the table says so. Loopback only; every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import start  # noqa: E402

KEY = "sk-bench-streams"
MODERN = "2026-07-28"
SLOW_MS = 600_000
URI = "example://readme"
OPEN_AT_ONCE = 128
HZ = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
TARGET_KIB = 16
# What the gateway holds besides streams (listener, epoll, config watch, logs, a /metrics scrape).
GATEWAY_FD_SLACK = 64


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# /proc


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches, summed over every thread of `pid`."""
    vol = invol = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        invol += int(line.split()[1])
        except FileNotFoundError:  # a thread that just ended
            pass
    return vol, invol


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def runtime_tasks(addr: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    m = re.search(r"^switchboard_gateway_runtime_tasks(?:\{[^}]*\})? (\d+)", text, re.M)
    return int(m.group(1)) if m else None


def upstream_listening(addr: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://{addr}/_stats", timeout=5) as r:
            return json.loads(r.read()).get("listening")
    except OSError:
        return None


class Window:
    """CPU ticks and context switches of some processes over `seconds` of doing nothing.

    A voluntary switch is a thread going to sleep, so it counts one wake-up; involuntary ones
    are preemptions (they grow with the machine's load, not with the process's work)."""

    def __init__(self, pids: dict[str, int], seconds: float):
        self.seconds = seconds
        t0 = time.monotonic()
        c0 = {k: cpu_ticks(p) for k, p in pids.items()}
        s0 = {k: switches(p) for k, p in pids.items()}
        time.sleep(seconds)
        self.elapsed = time.monotonic() - t0
        s1 = {k: switches(p) for k, p in pids.items()}
        self.cpu_ms_per_s = {k: (cpu_ticks(p) - c0[k]) * 1000 / HZ / self.elapsed for k, p in pids.items()}
        self.wakeups_per_s = {k: (s1[k][0] - s0[k][0]) / self.elapsed for k in pids}
        self.preempted_per_s = {k: (s1[k][1] - s0[k][1]) / self.elapsed for k in pids}


# --------------------------------------------------------------------------------------------
# clients


def modern_meta(progress: bool) -> dict:
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    if progress:
        meta["progressToken"] = "p"
    return meta


def request_bytes(addr: str, path: str, kind: str, i: int, auth: bool, uri: str, key: str = KEY) -> bytes:
    if kind == "call":
        method, name = "tools/call", "slow"
        params = {"name": "slow", "arguments": {"ms": SLOW_MS}, "_meta": modern_meta(True)}
    else:
        method, name = "subscriptions/listen", None
        params = {"notifications": {"toolsListChanged": True, "resourceSubscriptions": [uri]},
                  "_meta": modern_meta(False)}
    body = json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).encode()
    head = [f"POST {path} HTTP/1.1", f"Host: {addr}", "Content-Type: application/json",
            "Accept: application/json, text/event-stream", f"MCP-Protocol-Version: {MODERN}",
            f"Mcp-Method: {method}", f"Content-Length: {len(body)}"]
    if name:
        head.append(f"Mcp-Name: {name}")
    if auth:
        head.append(f"Authorization: Bearer {key}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Stream:
    def __init__(self) -> None:
        self.writer: asyncio.StreamWriter | None = None
        self.reader_task: asyncio.Task | None = None
        self.late_bytes = 0  # arrived after the first event
        self.ended = False
        self.list_changed: list[float] = []  # arrival times of tools/list_changed events


async def open_stream(addr: str, path: str, kind: str, i: int, auth: bool, uri: str, expect: bytes,
                      key: str = KEY) -> Stream:
    """Opens one stream and reads up to its first event; retries a 503/429 a few times."""
    host, port = addr.rsplit(":", 1)
    for attempt in range(6):
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 30)
        writer.write(request_bytes(addr, path, kind, i, auth, uri, key))
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = await asyncio.wait_for(reader.read(65536), 30)
            if not chunk:
                raise RuntimeError(f"stream {i}: closed before the response head")
            buf += chunk
        status = int(buf.split(b" ", 2)[1])
        if status in (429, 503) and attempt < 5:
            writer.close()
            await asyncio.sleep(0.5 * (attempt + 1))
            continue
        if status != 200:
            raise RuntimeError(f"stream {i}: HTTP {status}: {buf[:400]!r}")
        body = buf.split(b"\r\n\r\n", 1)[1]
        while not (b"data:" in body and b"\n\n" in body[body.index(b"data:"):]):
            chunk = await asyncio.wait_for(reader.read(65536), 30)
            if not chunk:
                raise RuntimeError(f"stream {i}: ended before its first event: {body[:400]!r}")
            body += chunk
        if expect not in body:
            raise RuntimeError(f"stream {i}: first event is not {expect!r}: {body[:400]!r}")
        s = Stream()
        s.writer = writer

        async def hold() -> None:
            try:
                while True:
                    chunk = await reader.read(65536)
                    if not chunk:
                        s.ended = True
                        return
                    s.late_bytes += len(chunk)
                    now = time.perf_counter()
                    s.list_changed.extend([now] * chunk.count(b"notifications/tools/list_changed"))
            except (ConnectionError, OSError):
                s.ended = True

        s.reader_task = asyncio.create_task(hold())
        return s
    raise RuntimeError(f"stream {i}: refused 6 times")


async def open_all(n: int, addr: str, path: str, kind: str, auth: bool, uri: str, expect: bytes) -> list[Stream]:
    gate = asyncio.Semaphore(OPEN_AT_ONCE)
    failures: list[str] = []

    async def one(i: int) -> Stream | None:
        async with gate:
            try:
                return await open_stream(addr, path, kind, i, auth, uri, expect)
            except (OSError, RuntimeError, asyncio.TimeoutError) as e:
                failures.append(f"{type(e).__name__}: {e}")
                return None

    opened = await asyncio.gather(*(one(i) for i in range(n)))
    if failures:
        log(f"  {len(failures)} of {n} streams failed to open, e.g. {failures[0]}")
    return [s for s in opened if s is not None]


async def close_all(streams: list[Stream]) -> None:
    for s in streams:
        if s.reader_task:
            s.reader_task.cancel()
        if s.writer:
            s.writer.close()
    await asyncio.wait_for(asyncio.gather(*(s.writer.wait_closed() for s in streams if s.writer),
                                          return_exceptions=True), 30)


async def notify(addr: str, path: str) -> None:
    """`POST /_notify {"list": "tools"}` to the upstream: one tools/list_changed per listen stream."""
    host, port = addr.rsplit(":", 1)
    body = json.dumps({"list": "tools", "path": path}).encode()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 5)
    writer.write(f"POST /_notify HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    await asyncio.wait_for(reader.read(), 5)
    writer.close()


def stop_all(procs: list) -> None:
    """Stops the processes a run started: all asked at once, then each given 10 s."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def run_notify(bin_dir: Path, work: Path, runs: int) -> dict:
    """Time from `POST /_notify` to a listen stream's notification: one stream direct to the
    upstream, one through `/mcp/{prefix}` and one through the fan-in on `/mcp`, open at once, each
    on its own upstream path, so each round notifies exactly one of them (in turn)."""
    run = work / "notify"
    run.mkdir()
    up, up_addr = start([str(bin_dir / "switchboard-example-upstream"), "--listen", "127.0.0.1:0", "--record", "0"],
                        run / "upstream.log")
    procs = [up]
    try:
        agg_key = KEY + "-aggregate"
        config = {"gateway": {"sessionKey": "bench-session-key-0123456789abcdef"},
                  "servers": [{"name": "ex", "url": f"http://{up_addr}/v/name=ex/mcp", "timeout": "15m"},
                              {"name": "ag", "url": f"http://{up_addr}/v/name=ag/mcp", "timeout": "15m"}],
                  "keys": [{"name": "bench", "secret": KEY, "servers": ["ex"]},
                           {"name": "aggregate", "secret": agg_key, "servers": ["ag"]}]}
        (run / "gw.yaml").write_text(json.dumps(config))
        gw, gw_addr = start([str(bin_dir / "switchboard-gateway"), "--config", str(run / "gw.yaml"),
                             "--listen", "127.0.0.1:0"], run / "gateway.log")
        procs.append(gw)
        ack = b"notifications/subscriptions/acknowledged"
        # name: (address, path, key or None, listen URI, the upstream path its events come from)
        paths = {"direct": (up_addr, "/v/name=direct/mcp", None, URI, "/v/name=direct/mcp"),
                 "gateway /mcp/{prefix}": (gw_addr, "/mcp/ex", KEY, URI, "/v/name=ex/mcp"),
                 "gateway /mcp": (gw_addr, "/mcp", agg_key, f"ag__{URI}", "/v/name=ag/mcp")}

        async def body() -> dict:
            streams = {name: await open_stream(a, p, "listen", i, key is not None, uri, ack, key or KEY)
                       for i, (name, (a, p, key, uri, _)) in enumerate(paths.items())}
            times: dict[str, list[float]] = {name: [] for name in streams}
            for r in range(runs + 10):  # the first 10 rounds warm up
                for name, s in streams.items():
                    seen = len(s.list_changed)
                    t0 = time.perf_counter()
                    await notify(up_addr, paths[name][4])
                    deadline = time.monotonic() + 5
                    while len(s.list_changed) <= seen:
                        if time.monotonic() > deadline:
                            raise SystemExit(f"notify round {r}: nothing on {name} within 5 s")
                        await asyncio.sleep(0.0002)
                    if r >= 10:
                        times[name].append((s.list_changed[seen] - t0) * 1000)
                    await asyncio.sleep(0.002)
            await close_all(list(streams.values()))
            return times

        return asyncio.run(body())
    finally:
        stop_all(procs)


def notify_report(times: dict[str, list[float]], runs: int) -> str:
    med = statistics.median
    out = [f"time from `POST /_notify` (new connection) to the listen stream's notification, {runs} rounds "
           "(bench/streams.py --kinds notify):", "",
           "| path | median ms | p90 ms | added to direct (median) |", "|---|---|---|---|"]
    direct = med(times["direct"])
    for name, values in times.items():
        p90 = sorted(values)[int(0.9 * (len(values) - 1))]
        added = "—" if name == "direct" else f"{med(values) - direct:+.3f} ms"
        out.append(f"| {name} | {med(values):.3f} | {p90:.3f} | {added} |")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# one kind


def wait_for(what: str, check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    log(f"  {what}: not within {timeout:.0f} s")
    return False


def run_kind(kind: str, n: int, bin_dir: Path, work: Path, window: float) -> dict:
    """`call` or `listen` through the gateway, or `direct-` / `floor-` the same."""
    direct = kind.startswith("direct-")
    floor = kind.startswith("floor-")
    wire = kind.split("-", 1)[-1]
    run = work / kind
    run.mkdir()
    up, up_addr = start([str(bin_dir / "switchboard-example-upstream"), "--listen", "127.0.0.1:0", "--record", "0"],
                        run / "upstream.log")
    procs = [up]
    try:
        pids = {"upstream": up.pid}
        gw_addr = None
        if direct:
            addr, path, auth, uri = up_addr, "/v/sse/mcp", False, URI
        elif floor:
            fl, addr = start([str(bin_dir / "switchboard-bench-floor"), "--listen", "127.0.0.1:0",
                              "--upstream", f"http://{up_addr}"], run / "floor.log")
            procs.append(fl)
            pids["floor"] = fl.pid
            path, auth, uri = "/v/sse/mcp", False, URI
        else:
            config = {"gateway": {"sessionKey": "bench-session-key-0123456789abcdef"},
                      "servers": [{"name": "ex", "url": f"http://{up_addr}/v/sse/mcp", "timeout": "15m"}],
                      "keys": [{"name": "bench", "secret": KEY, "servers": ["ex"]}]}
            (run / "gw.yaml").write_text(json.dumps(config))
            gw, gw_addr = start([str(bin_dir / "switchboard-gateway"), "--config", str(run / "gw.yaml"),
                                 "--listen", "127.0.0.1:0", "--max-connections", str(n + 1000)], run / "gateway.log")
            procs.append(gw)
            pids["gateway"] = gw.pid
            addr, auth = gw_addr, True
            path, uri = ("/mcp/ex", URI) if wire == "call" else ("/mcp", f"ex__{URI}")
        expect = b"notifications/progress" if wire == "call" else b"notifications/subscriptions/acknowledged"
        measured = "upstream" if direct else "floor" if floor else "gateway"
        mpid = pids[measured]

        async def warm() -> None:  # era detection, pools, lazy statics: not per stream
            streams = await open_all(20, addr, path, wire, auth, uri, expect)
            await close_all(streams)

        asyncio.run(warm())
        time.sleep(2)
        r: dict = {"kind": kind, "streams_asked": n}
        r["rss0"] = {k: rss_kib(p) for k, p in pids.items()}
        r["tasks0"] = runtime_tasks(gw_addr) if gw_addr else None
        r["threads"] = threads(mpid)
        log(f"  idle window before opening ({window:.0f} s)")
        base = Window(pids, window)

        async def body() -> None:
            t0 = time.monotonic()
            streams = await open_all(n, addr, path, wire, auth, uri, expect)
            r["open_s"] = time.monotonic() - t0
            r["streams"] = len(streams)
            log(f"  {len(streams)} streams open in {r['open_s']:.1f} s; settling 3 s")
            await asyncio.sleep(3)
            late0 = sum(s.late_bytes for s in streams)
            r["rss1"] = {k: rss_kib(p) for k, p in pids.items()}
            r["fds1"] = fds(mpid)
            r["tasks1"] = runtime_tasks(gw_addr) if gw_addr else None
            log(f"  idle window with {len(streams)} open ({window:.0f} s)")
            # Nothing runs on this loop during the window: the clients only wait in epoll.
            idle = await asyncio.to_thread(Window, pids, window)
            r["late_bytes"] = sum(s.late_bytes for s in streams) - late0
            r["ended_in_window"] = sum(s.ended for s in streams)
            r["rss1b"] = {k: rss_kib(p) for k, p in pids.items()}
            r["tasks1b"] = runtime_tasks(gw_addr) if gw_addr else None
            r["base"], r["idle"] = base, idle
            t1 = time.monotonic()
            await close_all(streams)
            r["close_s"] = time.monotonic() - t1

        asyncio.run(body())
        if gw_addr:
            settled = wait_for("gateway tasks back down", lambda: (runtime_tasks(gw_addr) or 0) <= (r["tasks0"] or 0) + 5,
                               30)
            r["tasks2"] = runtime_tasks(gw_addr)
            r["tasks_settled"] = settled
        if wire == "listen":
            wait_for("upstream listen streams closed", lambda: upstream_listening(up_addr) == 0, 30)
            r["upstream_listening2"] = upstream_listening(up_addr)
        time.sleep(2)
        r["rss2_idle"] = {k: rss_kib(p) for k, p in pids.items()}
        # mimalloc returns freed pages to the system only when a thread allocates again, so an
        # idle gateway keeps them: a few small requests (2 s) let it.
        nudge = {"upstream": f"http://{up_addr}/_stats"}
        if gw_addr:
            nudge["gateway"] = f"http://{gw_addr}/metrics"
        if floor:
            nudge["floor"] = f"http://{addr}/_stats"
        for _ in range(20):
            for url in nudge.values():
                try:
                    with urllib.request.urlopen(url, timeout=5) as resp:
                        resp.read()
                except OSError:
                    pass
            time.sleep(0.1)
        time.sleep(1)
        r["rss2"] = {k: rss_kib(p) for k, p in pids.items()}
        r["fds2"] = fds(mpid)
        return r
    finally:
        stop_all(procs)


# --------------------------------------------------------------------------------------------
# report


def fmt_kib(kib: float) -> str:
    return f"{kib / 1024:,.1f} MiB" if kib >= 10240 else f"{kib:,.0f} KiB"


def report(results: list[dict], window: float, note: str, bin_dir: Path) -> str:
    out = [f"open idle streams, {window:.0f} s idle windows (bench/streams.py; binaries {bin_dir}){note}:", ""]
    out.append("| kind | streams | process | RSS before → N open → all closed (idle → after 2 s of requests) | KiB per stream "
               "| runtime tasks before → open → closed (per stream) | wake-ups/s before → open "
               "| wake-ups per stream per s | CPU ms/s before → open |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        n = r["streams"]
        front = [p for p in ("gateway", "floor") if p in r["rss0"]]
        for proc in front + ["upstream"]:
            kib = (r["rss1"][proc] - r["rss0"][proc]) / n if n else 0
            rss = (f"{fmt_kib(r['rss0'][proc])} → {fmt_kib(r['rss1'][proc])} → "
                   f"{fmt_kib(r['rss2_idle'][proc])} → {fmt_kib(r['rss2'][proc])}")
            wb, wo = r["base"].wakeups_per_s[proc], r["idle"].wakeups_per_s[proc]
            cb, co = r["base"].cpu_ms_per_s[proc], r["idle"].cpu_ms_per_s[proc]
            per = (wo - wb) / n if n else 0
            tasks = "—"
            if proc == "gateway" and r.get("tasks1") is not None:
                tasks = (f"{r['tasks0']:,} → {r['tasks1']:,} → {r['tasks2']:,} "
                         f"({(r['tasks1'] - r['tasks0']) / n:.2f})")
            out.append(f"| {r['kind']} | {n:,} | {proc} | {rss} | {kib:.1f} | {tasks} | {wb:.1f} → {wo:.1f} "
                       f"| {per:.5f} | {cb:.1f} → {co:.1f} |")
    out.append("")
    out.append(f"targets: ≤ {TARGET_KIB} KiB of gateway RSS per idle stream; no per-stream wake-ups while idle "
               "(wake-ups per stream per s ≈ 0).")
    for r in results:
        extra = [f"opened in {r['open_s']:.1f} s", f"closed in {r['close_s']:.1f} s",
                 f"{r['fds1']:,} fds open in the measured process"]
        if r["late_bytes"] or r["ended_in_window"]:
            extra.append(f"during the idle window {r['late_bytes']:,} bytes arrived and {r['ended_in_window']} "
                         "streams ended (expected 0 and 0)")
        if r.get("tasks_settled") is False:
            extra.append("gateway tasks did NOT come back down within 30 s")
        if "upstream_listening2" in r:
            extra.append(f"upstream listen streams after closing: {r['upstream_listening2']}")
        if r["streams"] < r["streams_asked"]:
            extra.append(f"only {r['streams']:,} of {r['streams_asked']:,} opened")
        out.append(f"- {r['kind']}: " + "; ".join(extra))
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cache = Path(os.environ.get("SWITCHBOARD_CACHE", Path.home() / ".cache/switchboard"))
    ap.add_argument("--bin-dir", type=Path)
    ap.add_argument("--streams", type=int, default=10_000)
    ap.add_argument("--window", type=float, default=10.0, help="idle measuring window, seconds")
    ap.add_argument("--kinds", default="call,listen,direct,floor,notify",
                    help="comma-separated: call, listen, direct, floor, notify")
    ap.add_argument("--notify-runs", type=int, default=200, help="rounds of the notify latency measurement")
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()
    bin_dir = args.bin_dir or max((cache / "bench/bin").glob("*/"), key=lambda p: p.stat().st_mtime, default=None)
    if bin_dir is None or not (bin_dir / "switchboard-gateway").exists():
        raise SystemExit("no release binaries: pass --bin-dir, or run bench/run.sh first (it builds and copies them)")
    if not 1 <= args.streams <= 100_000 or not 1 <= args.window <= 120:
        raise SystemExit("--streams 1..100000, --window 1..120")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = hard if hard != resource.RLIM_INFINITY else 1 << 20
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, 1 << 20), hard))
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    n = args.streams
    note = ""
    fit = (limit - GATEWAY_FD_SLACK) // 2
    if n > fit:
        note = (f"; N lowered from {n:,} to {fit:,}: the open-file limit here is {limit:,} (hard) and the "
                "gateway holds 2 per relayed stream")
        log(f"note{note}")
        n = fit
    kinds = []
    want_notify = False
    for k in args.kinds.split(","):
        k = k.strip()
        if k == "notify":
            want_notify = True
        elif k in ("call", "listen"):
            kinds.append(k)
        elif k in ("direct", "floor"):
            if k == "floor" and not (bin_dir / "switchboard-bench-floor").exists():
                log(f"no {bin_dir / 'switchboard-bench-floor'}: floor skipped")
                continue
            kinds += [f"{k}-call", f"{k}-listen"]
        elif k:
            raise SystemExit(f"unknown kind {k!r}")
    work = Path(tempfile.mkdtemp(prefix="sb-streams-"))
    results = []
    for kind in kinds:
        log(f"{kind}: {n:,} streams (logs in {work / kind})")
        results.append(run_kind(kind, n, bin_dir, work, args.window))
    text = report(results, args.window, note, bin_dir) if results else ""
    if want_notify:
        if not 1 <= args.notify_runs <= 10_000:
            raise SystemExit("--notify-runs 1..10000")
        log(f"notify: {args.notify_runs} rounds (logs in {work / 'notify'})")
        times = run_notify(bin_dir, work, args.notify_runs)
        text += ("\n\n" if text else "") + notify_report(times, args.notify_runs)
        results.append({"kind": "notify", "times_ms": times})
    print(text)
    if args.json:
        def plain(o):
            return o.__dict__ if isinstance(o, Window) else str(o)
        args.json.write_text(json.dumps(results, default=plain, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
