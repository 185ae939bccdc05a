#!/usr/bin/env python3
"""Switchboard benchmark harness: the scenarios of issue 3, run by bench/run.sh.

Starts the upstreams, gateways and (for scenario 8) the LiteLLM proxy itself, on loopback only,
drives them with oha for bounded durations, and writes bench/results/latest.{json,md}. Python
standard library only. See BENCHMARKS.md for what each figure means.

Every load run records, besides oha's latency and rate figures: CPU seconds of the gateway (or
peer) process and of the upstream from /proc/<pid>/stat (utime+stime), the load generator's own
CPU (rusage of the oha child), the machine's busy CPU from /proc/stat, and the rest as "other"
CPU: someone else's work on this shared 2-core machine. A run whose "other" CPU exceeds
OTHER_MAX_FRAC of the machine is repeated once and flagged `contended` if it still is.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

# Every gateway started here picks a free port for its internal listener (the default is fixed).
os.environ.setdefault("SWITCHBOARD_INTERNAL_LISTEN", "127.0.0.1:0")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
HZ = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count() or 1
OTHER_MAX_FRAC = 0.15  # of total machine CPU during a run
SESSION_KEY = "bench-session-key-0123456789abcdef"
GW_KEY = "sk-bench-0123456789"
LITELLM_KEY = "sk-1234"

# --------------------------------------------------------------------------------------------
# small helpers


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def proc_ticks(pid: int) -> int:
    """utime+stime of one process (all its threads), in clock ticks."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


def tree_pids(pid: int) -> list[int]:
    out = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                for child in f.read().split():
                    out.extend(tree_pids(int(child)))
    except OSError:
        pass
    return out


def drop_from_page_cache(path: str) -> None:
    """Asks the kernel to forget the file's cached pages (those no process maps).

    The executable's file-backed RSS at start depends on how its pages sit in the page cache,
    not only on the code the process runs: a fault maps the cached pages around the touched
    one, on kernels with large page-cache folios (6.x) by our reading a whole folio, and the
    folios' sizes come from how the file was last read or written (the linker's writes, a
    `cat`, another process's faults). The same binary measured 26.5 MiB idle after one history
    and 33 MiB after another (BENCHMARKS.md, 2026-12-07). Dropping the file's pages first gives
    every binary the same start: the process reads its own pages.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def status_kb(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def machine_busy_ticks() -> int:
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in parts[:8])
    return user + nice + system + irq + softirq + steal


def wait_idle(max_wait: float, threshold_pct: float = 20.0) -> float:
    """Waits (bounded) until the machine is mostly idle; returns the busy % last seen."""
    deadline = time.monotonic() + max_wait
    announced = False
    while True:
        b0 = machine_busy_ticks()
        time.sleep(1.0)
        pct = (machine_busy_ticks() - b0) * 100.0 / (HZ * NCPU)
        if pct < threshold_pct or time.monotonic() >= deadline:
            if pct >= threshold_pct:
                log(f"    (machine still {pct:.0f}% busy; running anyway)")
            return pct
        if not announced:
            log(f"    waiting for an idle machine ({pct:.0f}% busy)...")
            announced = True


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def r(x, n=3):
    return None if x is None else round(x, n)


# --------------------------------------------------------------------------------------------
# processes


class Proc:
    """A process this harness started; stopped by its own pid only."""

    def __init__(self, name: str, argv: list[str], logdir: Path, env: dict | None = None,
                 ready_line: str | None = "listening on http://", ready_timeout: float = 30.0):
        self.name = name
        self.argv = argv
        self.log_path = logdir / f"{name}.log"
        self.logf = open(self.log_path, "ab")
        self.started = time.time()
        self.popen = subprocess.Popen(
            argv, stdout=subprocess.PIPE if ready_line else self.logf, stderr=self.logf,
            stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})}, start_new_session=True)
        self.pid = self.popen.pid
        self.addr = None
        if ready_line:
            self._wait_line(ready_line, ready_timeout)

    def _wait_line(self, marker: str, timeout: float) -> None:
        found: dict = {}

        def reader():
            assert self.popen.stdout is not None
            for raw in self.popen.stdout:
                line = raw.decode(errors="replace")
                self.logf.write(b"[stdout] " + raw)
                self.logf.flush()
                if marker in line and "addr" not in found:
                    found["addr"] = line.split("http://", 1)[1].split()[0].rstrip("/")
                    found["at"] = time.time()

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        deadline = time.monotonic() + timeout
        while "addr" not in found:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode}; log {self.log_path}:\n"
                                   + self.log_path.read_text(errors="replace")[-3000:])
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} not ready after {timeout}s; log {self.log_path}")
            time.sleep(0.01)
        self.addr = found["addr"]
        self.ready_at = found["at"]

    @property
    def url(self) -> str:
        return f"http://{self.addr}"

    def ticks(self, tree: bool = False) -> int:
        return sum(proc_ticks(p) for p in (tree_pids(self.pid) if tree else [self.pid]))

    def rss_kb(self, tree: bool = False) -> int:
        return sum(status_kb(p, "VmRSS") for p in (tree_pids(self.pid) if tree else [self.pid]))

    def hwm_kb(self) -> int:
        return status_kb(self.pid, "VmHWM")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def stop(self, grace: float = 5.0) -> None:
        if self.alive():
            kids = tree_pids(self.pid)[1:]
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.popen.wait(5)
            for k in kids:
                try:
                    os.kill(k, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.logf.close()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


class Procs:
    def __init__(self, logdir: Path):
        self.logdir = logdir
        self.all: list[Proc] = []

    def start(self, *a, **kw) -> Proc:
        p = Proc(*a, logdir=self.logdir, **kw)
        self.all.append(p)
        return p

    def stop(self, p: Proc) -> None:
        p.stop()
        if p in self.all:
            self.all.remove(p)

    def stop_all(self) -> None:
        for p in reversed(self.all):
            try:
                p.stop()
            except Exception as e:  # noqa: BLE001
                log(f"stopping {p.name}: {e}")
        self.all.clear()


# --------------------------------------------------------------------------------------------
# HTTP / MCP requests (setup and checks; load comes from oha)


def http_req(url: str, body: bytes | None = None, headers: dict | None = None, method: str | None = None,
             timeout: float = 30.0) -> tuple[int, dict, bytes, float]:
    from urllib.parse import urlsplit
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    path = u.path + (f"?{u.query}" if u.query else "")
    t0 = time.perf_counter()
    conn.request(method or ("POST" if body is not None else "GET"), path, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    elapsed = time.perf_counter() - t0
    hdrs = {k.lower(): v for k, v in resp.getheaders()}
    conn.close()
    return resp.status, hdrs, data, elapsed


def rpc_json(content_type: str, data: bytes) -> dict:
    text = data.decode(errors="replace")
    if content_type.startswith("text/event-stream"):
        for line in text.splitlines():
            if line.startswith("data:"):
                msg = json.loads(line[5:])
                if "result" in msg or "error" in msg:
                    return msg
        return {}
    return json.loads(text) if text.strip() else {}


def modern_request(method: str, params: dict, name: str | None = None, rid: int = 1) -> tuple[bytes, dict]:
    params = dict(params)
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "switchboard-bench", "version": "1"},
    }
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params},
                      separators=(",", ":")).encode()
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if name is not None:
        headers["Mcp-Name"] = name
    return body, headers


BASE_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def legacy_session(url: str, extra: dict) -> str:
    body = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {},
        "clientInfo": {"name": "switchboard-bench", "version": "1"}}}).encode()
    st, h, data, _ = http_req(url, body, {**BASE_HEADERS, **extra})
    sid = h.get("mcp-session-id")
    if st != 200 or not sid:
        raise RuntimeError(f"initialize at {url}: HTTP {st} {data[:300]!r}")
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    http_req(url, note, {**BASE_HEADERS, **extra, "Mcp-Session-Id": sid, "MCP-Protocol-Version": LEGACY})
    return sid


class Path_:
    """One way of making the same tools/call: URL, body and headers (what oha sends)."""

    def __init__(self, label: str, url: str, body: bytes, headers: dict, via: str):
        self.label, self.url, self.body, self.headers, self.via = label, url, body, headers, via

    def check(self) -> tuple[bool, str]:
        st, h, data, _ = http_req(self.url, self.body, self.headers)
        try:
            msg = rpc_json(h.get("content-type", ""), data)
        except ValueError:
            msg = {}
        res = msg.get("result", msg)  # REST answers the result itself
        ok = st == 200 and isinstance(res, dict) and (
            res.get("structuredContent", {}).get("result") == 3
            or any(c.get("text") == "3" for c in res.get("content", []) if isinstance(c, dict)))
        return ok, f"HTTP {st} {data[:240]!r}"

    def curl(self) -> str:
        hs = " ".join(f"-H '{k}: {v}'" for k, v in self.headers.items())
        return f"curl -s {self.url} {hs} -d '{self.body.decode()}'"


def direct_path(upstream: Proc, kind: str) -> Path_:
    body, h = modern_request("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, "add")
    return Path_(f"direct ({kind})", f"{upstream.url}/mcp", body, {**BASE_HEADERS, **h}, "direct")


def floor_path(floor: Proc, kind: str) -> Path_:
    """The direct call, through the bare pass-through proxy (bench/floor) in front of the same upstream."""
    body, h = modern_request("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, "add")
    return Path_(f"floor: bare pass-through proxy ({kind})", f"{floor.url}/mcp", body, {**BASE_HEADERS, **h}, "floor")


# Which tracked process is the proxy of a path: the floor's own process for the floor, the
# gateway for the gateway's paths, none for direct (LiteLLM's rows name "litellm").
def proxy_of(x: dict) -> str | None:
    if x["path"] == "direct":
        return None
    if x["path"] == "floor":
        return "floor"
    return "gateway" if "gateway" in x["cpu_ms_per_call"] else "litellm"


def gateway_paths(gw: Proc, prefix: str, kind: str, single: bool = False) -> list[Path_]:
    auth = {"Authorization": f"Bearer {GW_KEY}"}
    name = f"{prefix}__add"
    out = []
    body, h = modern_request("tools/call", {"name": name, "arguments": {"a": 1, "b": 2}}, name)
    out.append(Path_(f"gateway 2026 stateless ({kind})", f"{gw.url}/mcp", body, {**BASE_HEADERS, **auth, **h}, "gw-2026"))
    sid = legacy_session(f"{gw.url}/mcp", auth)
    lbody = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                        "params": {"name": name, "arguments": {"a": 1, "b": 2}}}, separators=(",", ":")).encode()
    out.append(Path_(f"gateway legacy session ({kind})", f"{gw.url}/mcp", lbody,
                     {**BASE_HEADERS, **auth, "Mcp-Session-Id": sid, "MCP-Protocol-Version": LEGACY}, "gw-legacy"))
    rbody = json.dumps({"name": name, "arguments": {"a": 1, "b": 2}}, separators=(",", ":")).encode()
    out.append(Path_(f"gateway REST ({kind})", f"{gw.url}/mcp-rest/tools/call", rbody,
                     {"Content-Type": "application/json", **auth}, "gw-rest"))
    if single:
        sbody, sh = modern_request("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, "add")
        out.append(Path_(f"gateway 2026 single-server /mcp/{prefix} ({kind})", f"{gw.url}/mcp/{prefix}", sbody,
                         {**BASE_HEADERS, **auth, **sh}, "gw-2026-single"))
    return out


def litellm_paths(ll: Proc, server: str, kind: str) -> list[Path_]:
    key = {"x-litellm-api-key": f"Bearer {LITELLM_KEY}"}
    sid = legacy_session(f"{ll.url}/mcp", {**key, "MCP-Protocol-Version": "2025-06-18"})
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": f"{server}-add", "arguments": {"a": 1, "b": 2}}}, separators=(",", ":")).encode()
    out = [Path_(f"LiteLLM /mcp session ({kind})", f"{ll.url}/mcp", body,
                 {**BASE_HEADERS, **key, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-06-18"}, "litellm-mcp")]
    rbody = json.dumps({"server_id": server, "name": "add", "arguments": {"a": 1, "b": 2}}).encode()
    out.append(Path_(f"LiteLLM REST ({kind})", f"{ll.url}/mcp-rest/tools/call", rbody,
                     {"Content-Type": "application/json", "Authorization": f"Bearer {LITELLM_KEY}"}, "litellm-rest"))
    return out


# --------------------------------------------------------------------------------------------
# load runs


class Bench:
    def __init__(self, args, oha: str, rundir: Path):
        self.args = args
        self.oha = oha
        self.rundir = rundir
        self.commands: list[str] = []
        self.max_wait = 15.0 if args.quick else 90.0

    def oha_argv(self, path: Path_, *, n: int | None = None, seconds: float | None = None,
                 conc: int = 1, rate: float | None = None) -> list[str]:
        argv = [self.oha, "--no-tui", "--output-format", "json", "-m", "POST", "-c", str(conc),
                "-t", "30s"]
        if n is not None:
            argv += ["-n", str(n)]
        else:
            argv += ["-z", f"{seconds}s", "-w"]
        if rate:
            argv += ["-q", str(rate)]
        for k, v in path.headers.items():
            argv += ["-H", f"{k}: {v}"]
        argv += ["-d", path.body.decode(), path.url]
        return argv

    def run_load(self, path: Path_, tracked: dict[str, Proc], *, tree: set[str] = frozenset(), **kw) -> dict:
        """One oha run with CPU/RSS accounting; repeated once when the machine was contended."""
        for attempt in range(2):
            res = self._run_load_once(path, tracked, tree, **kw)
            if not res["contended"] or attempt == 1:
                return res
            log(f"    contended (other CPU {res['other_cpu_s']} s); repeating once")
        return res

    def _run_load_once(self, path, tracked, tree, **kw) -> dict:
        wait_idle(self.max_wait)
        argv = self.oha_argv(path, **kw)
        cmd = " ".join(a if (" " not in a and "{" not in a) else f"'{a}'" for a in argv)
        if cmd not in self.commands:
            self.commands.append(cmd)
        t0 = {k: p.ticks(k in tree) for k, p in tracked.items()}
        m0 = machine_busy_ticks()
        peak = {k: 0 for k in tracked}
        stop = threading.Event()

        def sampler():
            while not stop.is_set():
                for k, p in tracked.items():
                    peak[k] = max(peak[k], p.rss_kb(k in tree))
                stop.wait(0.2)

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        w0 = time.monotonic()
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err_text = b"", b""
        out = child.stdout.read()  # type: ignore[union-attr]
        err_text = child.stderr.read()  # type: ignore[union-attr]
        _, status, ru = os.wait4(child.pid, 0)
        wall = time.monotonic() - w0
        stop.set()
        th.join()
        m1 = machine_busy_ticks()
        t1 = {k: p.ticks(k in tree) for k, p in tracked.items()}
        try:
            o = json.loads(out)
        except ValueError:
            raise RuntimeError(f"oha failed ({status}): {err_text[-2000:]!r} {out[-500:]!r}")
        summ = o.get("summary", {})
        lp = o.get("latencyPercentiles", {})
        codes = {str(k): int(v) for k, v in (o.get("statusCodeDistribution") or {}).items()}
        errors = {str(k): int(v) for k, v in (o.get("errorDistribution") or {}).items()}
        ok = codes.get("200", 0)
        cpu = {k: (t1[k] - t0[k]) / HZ for k in tracked}
        oha_cpu = ru.ru_utime + ru.ru_stime
        busy = (m1 - m0) / HZ
        other = busy - sum(cpu.values()) - oha_cpu
        res = {
            "path": path.via,
            "label": path.label,
            "requests": sum(codes.values()) + sum(errors.values()),
            "ok": ok,
            "non_200": sum(v for k, v in codes.items() if k != "200"),
            "errors": errors,
            "req_per_s": r(summ.get("requestsPerSec"), 1),
            "p50_ms": r((lp.get("p50") or 0) * 1000),
            "p90_ms": r((lp.get("p90") or 0) * 1000),
            "p99_ms": r((lp.get("p99") or 0) * 1000),
            "mean_ms": r((summ.get("average") or 0) * 1000),
            "wall_s": r(wall, 2),
            "cpu_s": {k: r(v, 2) for k, v in cpu.items()},
            "cpu_ms_per_call": {k: (r(v * 1000 / ok, 4) if ok else None) for k, v in cpu.items()},
            "peak_rss_mib": {k: r(v / 1024, 1) for k, v in peak.items()},
            "oha_cpu_s": r(oha_cpu, 2),
            "machine_busy_s": r(busy, 2),
            "other_cpu_s": r(other, 2),
            "contended": other > max(OTHER_MAX_FRAC * wall * NCPU, 0.25),
        }
        if res["non_200"] or errors:
            log(f"    WARNING: {path.label}: non-200 {res['non_200']} errors {errors}")
        return res


def median_of(runs: list[dict], key: str):
    vals = [x[key] for x in runs if x.get(key) is not None]
    return r(statistics.median(vals)) if vals else None


def merge_rounds(runs: list[dict]) -> dict:
    """Median over rounds of each figure; keeps the rounds themselves."""
    first = runs[0]
    out = {k: first[k] for k in ("path", "label")}
    for key in ("req_per_s", "p50_ms", "p90_ms", "p99_ms", "mean_ms"):
        out[key] = median_of(runs, key)
    out["requests"] = sum(x["requests"] for x in runs)
    out["non_200"] = sum(x["non_200"] for x in runs)
    out["contended_rounds"] = sum(1 for x in runs if x["contended"])
    for agg in ("cpu_ms_per_call", "peak_rss_mib"):
        out[agg] = {k: median_of([{"v": x[agg][k]} for x in runs], "v") for k in first[agg]}
    out["rounds"] = runs
    return out


# --------------------------------------------------------------------------------------------
# configs


def yaml_scalar(v) -> str:
    return json.dumps(v)


def to_yaml(cfg: dict) -> str:
    """JSON is YAML; one server per line keeps big generated configs readable."""
    lines = []
    for k, v in cfg.items():
        if isinstance(v, list):
            lines.append(f"{k}:")
            lines.extend(f"  - {json.dumps(item)}" for item in v)
        else:
            lines.append(f"{k}: {json.dumps(v)}")
    return "\n".join(lines) + "\n"


def gateway_config(servers: list[dict], keys: list[dict] | None = None, **gateway) -> dict:
    return {
        "gateway": {"sessionKey": SESSION_KEY, **gateway},
        "servers": servers,
        "keys": keys if keys is not None else [{"name": "bench", "secret": GW_KEY, "accessGroups": ["bench"]}],
    }


def server(name: str, url: str, **extra) -> dict:
    return {"name": name, "url": url, "accessGroups": ["bench"], "timeout": "10s", **extra}


class World:
    """Binaries and the processes of one run."""

    def __init__(self, args, bins: dict, rundir: Path):
        self.args = args
        self.bins = bins
        self.rundir = rundir
        self.procs = Procs(rundir)
        self.cfg_n = 0

    def upstream(self, name: str, record: int = 0) -> Proc:
        return self.procs.start(name, [self.bins["upstream"], "--listen", "127.0.0.1:0", "--record", str(record)])

    def python_upstream(self, name: str) -> Proc:
        py = self.bins.get("python")
        if not py:
            raise RuntimeError("no Python venv for the SDK upstream")
        # bench/python_upstream.py: the e2e upstream's app, bound with TCP_NODELAY (see its docstring)
        return self.procs.start(name, [py, str(HERE / "python_upstream.py"), "--port", "0",
                                       "--name", name, "--json", "--stateless"],
                                env={"PYTHONUNBUFFERED": "1"}, ready_timeout=60)

    def write_config(self, name: str, cfg: dict) -> Path:
        path = self.rundir / f"{name}.yaml"
        path.write_text(to_yaml(cfg))
        return path

    def floor(self, name: str, upstream: Proc) -> Proc:
        """bench/floor in front of `upstream`: what any proxy on the gateway's stack costs."""
        if not self.bins.get("floor"):
            raise RuntimeError("no floor binary (bench/run.sh builds bench/floor)")
        return self.procs.start(name, [self.bins["floor"], "--listen", "127.0.0.1:0", "--upstream", upstream.url])

    def gateway(self, name: str, cfg: dict | Path, env: dict | None = None, cold_text: bool = False) -> Proc:
        """`cold_text`: the executable's pages dropped from the page cache first (for RSS at start)."""
        path = cfg if isinstance(cfg, Path) else self.write_config(name, cfg)
        if cold_text:
            drop_from_page_cache(self.bins["gateway"])
        return self.procs.start(name, [self.bins["gateway"], "--config", str(path), "--listen", "127.0.0.1:0"],
                                env={"RUST_LOG": "info", **(env or {})})


# --------------------------------------------------------------------------------------------
# scenarios


def s1_s2_for(world: World, bench: Bench, up: Proc, kind: str, prefix: str, gw: Proc, single: bool,
              q: bool) -> dict:
    floor = world.floor(f"floor-{kind}", up)
    paths = [direct_path(up, kind), floor_path(floor, kind)] + gateway_paths(gw, prefix, kind, single=single)
    checks = {}
    for p in paths:
        ok, detail = p.check()
        checks[p.via] = ok
        if not ok:
            log(f"  CHECK FAILED {p.label}: {detail}")
    # a client lists tools first; the gateway then has the tool's schema (Mcp-Param derivation)
    body, h = modern_request("tools/list", {})
    http_req(f"{gw.url}/mcp", body, {**BASE_HEADERS, "Authorization": f"Bearer {GW_KEY}", **h})
    live = [p for p in paths if checks[p.via]]
    python = kind == "python"
    c1_n = (300 if python else 1000) if q else (1500 if python else 5000)
    rate = bench.args.rate
    rate_s = 3 if q else 8
    thr_s = 4 if q else 10
    rounds = 1 if q else 2
    tracked = {"gateway": gw, "upstream": up, "floor": floor}
    for p in live:  # warm-up: connections, caches, branch predictors
        bench.run_load(p, tracked, n=200 if not python else 100, conc=4)
    out: dict = {"checks": checks, "one_at_a_time": [], "fixed_rate": [], "throughput": []}
    log(f"  [{kind}] one request at a time (n={c1_n}), fixed rate {rate}/s ({rate_s}s), throughput c={bench.args.conc} ({thr_s}s), {rounds} round(s)")
    c1 = {p.via: [] for p in live}
    fr = {p.via: [] for p in live}
    tp = {p.via: [] for p in live}
    for _ in range(rounds):
        for p in live:
            c1[p.via].append(bench.run_load(p, tracked, n=c1_n, conc=1))
            log(f"    c1   {p.label:48s} p50 {c1[p.via][-1]['p50_ms']:.3f} p99 {c1[p.via][-1]['p99_ms']:.3f} ms")
        for p in live:
            fr[p.via].append(bench.run_load(p, tracked, seconds=rate_s, conc=8, rate=rate))
            log(f"    rate {p.label:48s} p50 {fr[p.via][-1]['p50_ms']:.3f} p99 {fr[p.via][-1]['p99_ms']:.3f} ms")
        for p in live:
            tp[p.via].append(bench.run_load(p, tracked, seconds=thr_s, conc=bench.args.conc))
            x = tp[p.via][-1]
            proxy = proxy_of(x)
            log(f"    thr  {p.label:48s} {x['req_per_s']:.0f} req/s, proxy CPU {x['cpu_ms_per_call'].get(proxy) if proxy else '-'} ms/call")
    for p in live:
        out["one_at_a_time"].append(merge_rounds(c1[p.via]))
        out["fixed_rate"].append(merge_rounds(fr[p.via]))
        out["throughput"].append(merge_rounds(tp[p.via]))
    # differences against direct
    for table in ("one_at_a_time", "fixed_rate"):
        direct = next((x for x in out[table] if x["path"] == "direct"), None)
        for x in out[table]:
            if direct and x is not direct:
                for k in ("p50", "p90", "p99"):
                    x[f"added_{k}_ms"] = r(x[f"{k}_ms"] - direct[f"{k}_ms"])
    direct = next((x for x in out["throughput"] if x["path"] == "direct"), None)
    for x in out["throughput"]:
        if direct and direct["req_per_s"]:
            x["ratio_vs_direct"] = r(x["req_per_s"] / direct["req_per_s"])
    against_floor(out)
    out["curl"] = {p.via: p.curl() for p in paths}
    world.procs.stop(floor)
    return out


def against_floor(out: dict) -> None:
    """Each path's figures as ratios to the floor's in the same run (issue 12's yardstick)."""
    floors = {t: next((x for x in out[t] if x["path"] == "floor"), None)
              for t in ("one_at_a_time", "fixed_rate", "throughput")}
    for table, fl in floors.items():
        for x in out[table]:
            proxy = proxy_of(x)
            x["proxy_cpu_ms_per_call"] = x["cpu_ms_per_call"].get(proxy) if proxy else None
            if not fl or x is fl:
                continue
            fl_cpu = fl["cpu_ms_per_call"].get("floor")
            if x["proxy_cpu_ms_per_call"] and fl_cpu:
                x["cpu_vs_floor"] = r(x["proxy_cpu_ms_per_call"] / fl_cpu, 2)
            if table == "throughput" and fl["req_per_s"]:
                x["ratio_vs_floor"] = r(x["req_per_s"] / fl["req_per_s"], 2)
            if table == "one_at_a_time" and x.get("added_p50_ms") is not None and fl.get("added_p50_ms"):
                x["added_p50_vs_floor"] = r(x["added_p50_ms"] / fl["added_p50_ms"], 2)


def scenario_overhead_throughput(world: World, bench: Bench, q: bool) -> dict:
    res = {}
    up = world.upstream("upstream-rust")
    py = None
    try:
        py = world.python_upstream("upstream-python")
    except Exception as e:  # noqa: BLE001
        res["python_error"] = str(e)
        log(f"  Python SDK upstream not available: {e}")
    servers = [server("ex", f"{up.url}/mcp")]
    if py:
        servers.append(server("py", f"{py.url}/mcp"))
    gw = world.gateway("gateway-main", gateway_config(servers), cold_text=True)
    time.sleep(1.0)
    res["idle_rss_mib"] = r(gw.rss_kb() / 1024, 1)
    res["idle_rss_anon_mib"] = r(status_kb(gw.pid, "RssAnon") / 1024, 1)
    res["idle_rss_file_mib"] = r(status_kb(gw.pid, "RssFile") / 1024, 1)
    res["idle_rss_note"] = ("fresh process, config with 2 servers and 1 key, 1 s after ready, no request served yet; "
                            "the executable dropped from the page cache before the start (see drop_from_page_cache)")
    res["rust"] = s1_s2_for(world, bench, up, "rust", "ex", gw, single=True, q=q)
    if py:
        res["python"] = s1_s2_for(world, bench, py, "python", "py", gw, single=False, q=q)
    time.sleep(1.0)
    res["rss_after_load_mib"] = r(gw.rss_kb() / 1024, 1)
    res["hwm_after_load_mib"] = r(gw.hwm_kb() / 1024, 1)
    world.procs.stop(gw)
    return res, up, py


def list_all(gw_url: str, headers: dict | None = None, max_pages: int = 500) -> tuple[int, int, float, list]:
    """Walks the aggregate tools/list; returns (tools, pages, seconds, listing errors)."""
    auth = {"Authorization": f"Bearer {GW_KEY}", **(headers or {})}
    cursor = None
    tools = pages = 0
    errors: list = []
    t0 = time.perf_counter()
    for _ in range(max_pages):
        params = {"cursor": cursor} if cursor else {}
        body, h = modern_request("tools/list", params)
        st, hh, data, _ = http_req(f"{gw_url}/mcp", body, {**BASE_HEADERS, **auth, **h}, timeout=120)
        if st != 200:
            raise RuntimeError(f"tools/list HTTP {st}: {data[:300]!r}")
        res = rpc_json(hh.get("content-type", ""), data).get("result", {})
        tools += len(res.get("tools", []))
        pages += 1
        meta = res.get("_meta") or {}
        errors.extend(meta.get("switchboard.dev/listingErrors") or [])
        cursor = res.get("nextCursor")
        if not cursor:
            break
    return tools, pages, time.perf_counter() - t0, errors


def scenario_memory(world: World, up: Proc, q: bool, s12: dict) -> dict:
    n_servers, n_tools = (1000, 50)
    servers = [server(f"s{i}", f"{up.url}/v/tools={n_tools},name=s{i}/mcp") for i in range(n_servers)]
    cfg = gateway_config(servers)
    gw = world.gateway("gateway-1000x50", cfg, cold_text=True)
    time.sleep(1.0)
    idle_big = gw.rss_kb()
    tools, pages, secs, errs = list_all(gw.url)
    time.sleep(0.5)
    after = gw.rss_kb()
    hwm = gw.hwm_kb()
    tools2, pages2, secs2, _ = list_all(gw.url)
    after2 = gw.rss_kb()
    world.procs.stop(gw)
    out = {
        "idle_rss_mib": s12.get("idle_rss_mib"),
        "idle_rss_anon_mib": s12.get("idle_rss_anon_mib"),
        "idle_rss_file_mib": s12.get("idle_rss_file_mib"),
        "under_load_peak_rss_mib": max((x["peak_rss_mib"].get("gateway") or 0)
                                       for k in ("rust", "python") if k in s12
                                       for x in s12[k]["throughput"]),
        "after_load_rss_mib": s12.get("rss_after_load_mib"),
        "servers": n_servers,
        "tools_listed": tools,
        "pages": pages,
        "listing_errors": len(errs),
        "rss_1000_servers_loaded_mib": r(idle_big / 1024, 1),
        "rss_after_listing_mib": r(after / 1024, 1),
        "hwm_after_listing_mib": r(hwm / 1024, 1),
        "rss_after_second_listing_mib": r(after2 / 1024, 1),
        "first_full_listing_s": r(secs, 3),
        "second_full_listing_s": r(secs2, 3),
        "second_listing_tools": tools2,
    }
    log(f"  1000 servers x {n_tools} tools: {tools} tools in {pages} pages, first walk {secs:.2f} s, second {secs2:.2f} s; "
        f"RSS loaded {out['rss_1000_servers_loaded_mib']} MiB, after listing {out['rss_after_listing_mib']} MiB (peak {out['hwm_after_listing_mib']})")
    return out


LOG_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z")


def log_times(text: str, needle: str) -> list[float]:
    out = []
    for line in text.splitlines():
        if needle in line:
            m = LOG_TS.match(line)
            if m:
                t = dt.datetime.fromisoformat(m.group(1)).replace(tzinfo=dt.timezone.utc)
                out.append(t.timestamp())
    return out


def scenario_config_scale(world: World, q: bool) -> dict:
    out: dict = {}
    scale = world.bins.get("scale")
    if scale:
        argv = [scale, "--servers", "1000", "--keys", "10000", "--repeat", "3" if q else "7",
                "--route-sizes", "1,10,100,1000,10000", "--route-ms", "150" if q else "600"]
        world_cmd = " ".join(argv)
        log(f"  {world_cmd}")
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        (world.rundir / "scale.stderr").write_text(p.stderr)
        if p.returncode == 0:
            out["in_process"] = json.loads(p.stdout)
            out["command"] = world_cmd
        else:
            out["in_process_error"] = p.stderr[-2000:]
    else:
        out["in_process_error"] = "bench/scale binary not built"
    # the real process: start with a 1000-server / 10000-key file, then SIGHUP reloads
    import hashlib
    servers = [server(f"s{i}", f"http://127.0.0.1:9/v/name=s{i}/mcp",
                      accessGroups=["all", f"team-{i % 20}"],
                      **({"auth": {"type": "bearer", "secret": f"upstream-token-{i}"}} if i % 2 == 0 else {}))
               for i in range(1000)]
    keys = [{"name": f"k{j}", "hash": "sha256:" + hashlib.sha256(f"sk-bench-{j}".encode()).hexdigest(),
             "accessGroups": [f"team-{j % 20}"]} for j in range(10000)]
    keys.append({"name": "bench", "secret": GW_KEY, "accessGroups": ["all"]})
    path = world.write_config("config-1000x10000", gateway_config(servers, keys))
    t_spawn = time.time()
    gw = world.gateway("gateway-1000x10000", path)
    ready = gw.ready_at - t_spawn
    time.sleep(0.5)
    rss = gw.rss_kb()
    reloads = []
    for _ in range(3 if q else 7):
        n_before = len(log_times(gw.log_text(), "config applied"))
        gw.signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(log_times(gw.log_text(), "config applied")) <= n_before:
            time.sleep(0.05)
        text = gw.log_text()
        hup = log_times(text, "SIGHUP: reloading config")
        applied = log_times(text, "config applied")
        if hup and len(applied) > n_before:
            reloads.append((applied[-1] - hup[-1]) * 1000)
        time.sleep(0.3)
    # a prefixed call still routes (nothing listens on :9, so this is the error path: 502)
    world.procs.stop(gw)
    out["process"] = {
        "file_bytes": path.stat().st_size,
        "spawn_to_listening_ms": r(ready * 1000, 1),
        "sighup_reload_ms": {"median": r(statistics.median(reloads), 1) if reloads else None,
                             "min": r(min(reloads), 1) if reloads else None,
                             "max": r(max(reloads), 1) if reloads else None, "runs": len(reloads)},
        "rss_mib": r(rss / 1024, 1),
        "note": "reload = gateway log timestamp of 'SIGHUP: reloading config' to 'config applied' (read + parse + validate + build; the swap follows the log line)",
    }
    ip = out.get("in_process", {})
    log(f"  1000 servers/10000 keys: operator frame {ip.get('operator_stream_frame', {}).get('apply_frame', {}).get('median_ms')} ms; "
        f"file load+apply {ip.get('snapshot_file_json', {}).get('load_and_apply', {}).get('median_ms')} ms (JSON), "
        f"{ip.get('snapshot_file_yaml_inline_secrets', {}).get('load_and_apply', {}).get('median_ms')} ms (file YAML); "
        f"process SIGHUP reload median {out['process']['sighup_reload_ms']['median']} ms; spawn->listening {out['process']['spawn_to_listening_ms']} ms")
    return out


def upstream_stats(up: Proc) -> dict:
    st, _, data, _ = http_req(f"{up.url}/_stats")
    return json.loads(data)


def upstream_reset(up: Proc) -> None:
    http_req(f"{up.url}/_reset", b"", method="POST")


def scenario_fanout(world: World, aux: Proc, q: bool) -> dict:
    out = {}
    fast_delay, slow_delay, slow_budget = 100, 1500, 2.0
    cases = {
        "slow_within_budget": (f"/v/delay={slow_delay},name=slow/mcp", f"{int(slow_budget)}s",
                               f"49 servers answer after {fast_delay} ms, one after {slow_delay} ms (timeout {slow_budget:.0f} s)"),
        "hung_beyond_budget": ("/v/hang=list,name=hung/mcp", "1s",
                               f"49 servers answer after {fast_delay} ms, one never answers tools/list (timeout 1 s)"),
    }
    for case, (slow_path, timeout, what) in cases.items():
        servers = [server(f"f{i}", f"{aux.url}/v/delay={fast_delay},name=f{i}/mcp") for i in range(49)]
        servers.append(server("slow", f"{aux.url}{slow_path}", timeout=timeout))
        gw = world.gateway(f"gateway-fanout-{case}", gateway_config(servers))
        upstream_reset(aux)
        tools1, _, t1, errs1 = list_all(gw.url)
        s1 = upstream_stats(aux)
        upstream_reset(aux)
        tools2, _, t2, errs2 = list_all(gw.url)
        s2 = upstream_stats(aux)
        world.procs.stop(gw)
        slow_ms = slow_delay if case == "slow_within_budget" else 1000
        out[case] = {
            "what": what,
            "first_listing_s": r(t1), "first_tools": tools1, "first_errors": [e.get("server") for e in errs1],
            "first_upstream_requests": s1.get("requests"),
            "second_listing_s": r(t2), "second_tools": tools2, "second_errors": [e.get("server") for e in errs2],
            "second_upstream_requests": s2.get("requests"),
            "sum_of_delays_s": r((49 * fast_delay + slow_ms) / 1000),
            "bound_s": r(slow_ms / 1000),
        }
        log(f"  fan-out {case}: first {t1:.3f} s ({tools1} tools, errors {out[case]['first_errors']}, {s1.get('requests')} upstream requests), "
            f"second {t2:.3f} s ({s2.get('requests')} upstream requests); sum of delays would be {out[case]['sum_of_delays_s']} s")
    return out


def scenario_cold(world: World, aux: Proc, q: bool) -> dict:
    runs = 3 if q else 7
    out = {}
    auth = {"Authorization": f"Bearer {GW_KEY}"}
    for era in ("2026", "legacy", "rest"):
        rows = []
        for _ in range(runs):
            gw = world.gateway("gateway-cold", gateway_config([server("cold", f"{aux.url}/v/name=cold/mcp")]))
            upstream_reset(aux)
            name = "cold__add"
            if era == "2026":
                body, h = modern_request("tools/call", {"name": name, "arguments": {"a": 1, "b": 2}}, name)
                url, headers = f"{gw.url}/mcp", {**BASE_HEADERS, **auth, **h}
            elif era == "legacy":
                sid = legacy_session(f"{gw.url}/mcp", auth)
                body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                   "params": {"name": name, "arguments": {"a": 1, "b": 2}}}).encode()
                url, headers = f"{gw.url}/mcp", {**BASE_HEADERS, **auth, "Mcp-Session-Id": sid, "MCP-Protocol-Version": LEGACY}
            else:
                body = json.dumps({"name": name, "arguments": {"a": 1, "b": 2}}).encode()
                url, headers = f"{gw.url}/mcp-rest/tools/call", {"Content-Type": "application/json", **auth}
            st, h, data, first = http_req(url, body, headers)
            ok = st == 200 and b'"result":3' in data.replace(b" ", b"")
            stats1 = upstream_stats(aux)
            st2, _, _, second = http_req(url, body, headers)
            world.procs.stop(gw)
            rows.append({"ok": ok, "status": st, "first_ms": first * 1000, "second_ms": second * 1000,
                         "upstream_requests": stats1.get("requests"), "by_method": stats1.get("by_method")})
        out[era] = {
            "runs": runs,
            "all_ok": all(x["ok"] for x in rows),
            "upstream_requests_per_first_call": sorted({x["upstream_requests"] for x in rows}),
            "by_method_example": rows[0]["by_method"],
            "first_call_ms": {"median": r(statistics.median(x["first_ms"] for x in rows)),
                              "max": r(max(x["first_ms"] for x in rows))},
            "second_call_ms": {"median": r(statistics.median(x["second_ms"] for x in rows))},
        }
        log(f"  cold {era}: upstream requests for the first call {out[era]['upstream_requests_per_first_call']} "
            f"({rows[0]['by_method']}), first call median {out[era]['first_call_ms']['median']} ms "
            f"(max {out[era]['first_call_ms']['max']}), second {out[era]['second_call_ms']['median']} ms, all ok {out[era]['all_ok']}")
    return out


def scenario_propagation(world: World, q: bool) -> dict:
    """Time from `kubectl apply` to every gateway replica serving the change: run by
    tests/k8s_e2e/propagation.py (its own loopback kube-apiserver, operator and two gateways;
    debug binaries, see bench/run.sh). Reports "not measured" with the reason when its
    prerequisites are missing."""
    script = REPO / "tests/k8s_e2e/propagation.py"
    py = world.bins.get("python")
    if not script.is_file():
        log("  not yet supported: tests/k8s_e2e/propagation.py is missing (operator not landed)")
        return {"status": "not yet supported", "why": "tests/k8s_e2e/propagation.py is missing"}
    bindir = subprocess.run(["bash", str(REPO / "tests/k8s/build-binaries.sh"), "--bin-dir"],
                            capture_output=True, text=True).stdout.strip()
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "debug"
    missing = [str(p) for p in [Path(bindir) / "kube-apiserver", Path(bindir) / "kubectl", Path(bindir) / "etcd",
                                target / "switchboard-operator", target / "switchboard-gateway"] if not p.exists()]
    if missing or not py:
        why = f"missing {', '.join(missing) or 'the test venv'} (run tests/k8s/build-binaries.sh and cargo build --workspace --bins)"
        log(f"  not measured: {why}")
        return {"status": "not measured", "why": why}
    runs = 4 if q else 12
    argv = [py, str(script), "--runs", str(runs)]
    log(f"  {' '.join(argv)}")
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=1200, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"status": "timed out", "why": "propagation.py ran over 1200 s"}
    (world.rundir / "propagation.stderr").write_text(p.stderr)
    if p.returncode != 0:
        return {"status": "failed", "why": p.stderr[-1500:]}
    try:
        text = p.stdout
        res = json.loads(text[text.index("{"):])  # one (pretty-printed) JSON object
    except ValueError:
        return {"status": "failed", "why": f"unexpected output: {p.stdout[-500:]}"}
    out = {"status": "measured", "command": " ".join(argv[1:]), "median_s": res.get("median_s"), "max_s": res.get("max_s"),
           "runs": res.get("runs"), "propagated": res.get("propagated"), "api": {k: v for k, v in (res.get("api") or {}).items() if k != "samples"},
           "note": "kubectl apply -> both gateway replicas serve the change (operator + gateways are debug builds)"}
    log(f"  propagation: median {out['median_s']} s, max {out['max_s']} s over {out['runs']} runs ({out['propagated']} propagated)")
    return out


LITELLM_ENV = {
    "LITELLM_MODE": "PRODUCTION", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOCAL_BLOG_POSTS": "True",
    "LITELLM_LOCAL_POLICY_TEMPLATES": "True", "LITELLM_LOCAL_AUTOROUTER_PRESETS": "True",
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True", "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
    "NO_PROXY": "127.0.0.1,localhost", "HTTP_PROXY": "", "HTTPS_PROXY": "", "http_proxy": "", "https_proxy": "",
}


def reserve_port() -> int:
    """A port reserved for this process the way the tests reserve theirs (tests/e2e/harness.py
    reserve_port: a lock no other reservation on the machine takes while this process lives),
    for servers that must be told their port before they start."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
    import harness

    return harness.reserve_port()


def scenario_litellm(world: World, bench: Bench, up: Proc, py: Proc | None, q: bool, s12: dict) -> dict:
    setup = HERE / "peers/litellm/setup.sh"
    p = subprocess.run(["bash", str(setup)], capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        log(f"  LiteLLM not installed: {p.stderr[-800:]}")
        return {"status": "not installed", "error": p.stderr[-2000:]}
    venv = Path(p.stdout.strip().splitlines()[-1])
    ver = subprocess.run([str(venv / "bin/python"), "-c", "import importlib.metadata as m; print(m.version('litellm'), m.version('mcp'))"],
                         capture_output=True, text=True).stdout.split()
    port = reserve_port()
    cfg = (HERE / "peers/litellm/config.yaml").read_text()
    cfg = cfg.replace("RUST_UPSTREAM_URL", f"{up.url}/mcp").replace(
        "PYTHON_UPSTREAM_URL", f"{py.url}/mcp" if py else f"{up.url}/mcp")
    cfg_path = world.rundir / "litellm-config.yaml"
    cfg_path.write_text(cfg)
    argv = [str(venv / "bin/litellm"), "--config", str(cfg_path), "--host", "127.0.0.1", "--port", str(port),
            "--num_workers", "1"]
    t0 = time.time()
    ll = world.procs.start("litellm", argv, env=LITELLM_ENV, ready_line=None)
    ll.addr = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    ready = False
    while time.monotonic() < deadline and ll.alive():
        try:
            st, _, data, _ = http_req(f"{ll.url}/mcp-rest/tools/list", headers={"x-litellm-api-key": f"Bearer {LITELLM_KEY}"}, timeout=5)
            if st == 200 and len(json.loads(data).get("tools", [])) > 0:
                ready = True
                break
        except (OSError, ValueError):
            pass
        time.sleep(1.0)
    if not ready:
        world.procs.stop(ll)
        return {"status": "did not start", "log_tail": ll.log_text()[-2000:]}
    startup_s = time.time() - t0
    time.sleep(2.0)
    idle_rss = ll.rss_kb(tree=True)
    out = {"status": "measured", "litellm_version": ver[0] if ver else None, "mcp_version": ver[1] if len(ver) > 1 else None,
           "startup_s": r(startup_s, 1), "idle_rss_mib": r(idle_rss / 1024, 1), "workers": 1,
           "command": " ".join(argv)}
    tracked = {"litellm": ll, "upstream": up}
    c1_n = 100 if q else 300
    rate = 20
    rate_s = 4 if q else 10
    thr_s = 5 if q else 12
    for kind, u, srv in (("rust", up, "ex"), ("python", py, "py")):
        if u is None:
            continue
        tracked = {"litellm": ll, "upstream": u}
        paths = litellm_paths(ll, srv, kind)
        checks = {}
        for pth in paths:
            ok, detail = pth.check()
            checks[pth.via] = ok
            if not ok:
                log(f"  CHECK FAILED {pth.label}: {detail}")
        live = [pth for pth in paths if checks[pth.via]]
        res = {"checks": checks, "one_at_a_time": [], "fixed_rate": [], "throughput": []}
        for pth in live:
            bench.run_load(pth, tracked, tree={"litellm"}, n=20, conc=2)
            a = bench.run_load(pth, tracked, tree={"litellm"}, n=c1_n, conc=1)
            b = bench.run_load(pth, tracked, tree={"litellm"}, seconds=rate_s, conc=8, rate=rate)
            c = bench.run_load(pth, tracked, tree={"litellm"}, seconds=thr_s, conc=bench.args.conc)
            res["one_at_a_time"].append(merge_rounds([a]))
            res["fixed_rate"].append(merge_rounds([b]))
            res["throughput"].append(merge_rounds([c]))
            log(f"    {pth.label:40s} c1 p50 {a['p50_ms']:.2f} ms; {rate}/s p50 {b['p50_ms']:.2f} ms; "
                f"c={bench.args.conc} {c['req_per_s']:.1f} req/s, CPU {c['cpu_ms_per_call']['litellm']} ms/call")
        # ratios against the same upstream's direct and gateway figures of scenarios 1-2
        base = s12.get(kind, {})
        def find(table, via):
            return next((x for x in base.get(table, []) if x["path"] == via), None)
        for x in res["one_at_a_time"]:
            d = find("one_at_a_time", "direct")
            if d:
                for k in ("p50", "p90", "p99"):
                    x[f"added_{k}_ms"] = r(x[f"{k}_ms"] - d[f"{k}_ms"])
        for x in res["throughput"]:
            d = find("throughput", "direct")
            g = find("throughput", "gw-2026")
            if d and d["req_per_s"]:
                x["ratio_vs_direct"] = r(x["req_per_s"] / d["req_per_s"])
            if g and x["req_per_s"]:
                x["switchboard_2026_throughput_multiple"] = r(g["req_per_s"] / x["req_per_s"], 1)
        out[kind] = res
    world.procs.stop(ll)
    return out


# --------------------------------------------------------------------------------------------
# report


def fmt(x, nd=3):
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def targets(res: dict) -> list[dict]:
    t = []
    s12 = res.get("scenarios", {}).get("1-2", {})
    rust = s12.get("rust", {})

    def row(name, target, value, ok, note=""):
        t.append({"target": name, "goal": target, "measured": value, "holds": ok, "note": note})

    thr = {x["path"]: x for x in rust.get("throughput", [])}
    fr = {x["path"]: x for x in rust.get("fixed_rate", [])}
    c1 = {x["path"]: x for x in rust.get("one_at_a_time", [])}
    if "gw-2026" in thr:
        cpu_thr = thr["gw-2026"]["cpu_ms_per_call"]["gateway"]
        cpu_rate = fr.get("gw-2026", {}).get("cpu_ms_per_call", {}).get("gateway")
        row("gateway CPU per proxied tools/call (2026, Rust upstream)", "≤ 0.06 ms",
            f"{fmt(cpu_thr, 4)} ms at c={res['params']['conc']}; {fmt(cpu_rate, 4)} ms at {res['params']['rate']}/s",
            cpu_thr is not None and cpu_thr <= 0.06,
            "judged at saturation (throughput run); the fixed-rate figure includes idle wake-ups")
        for via in ("gw-legacy", "gw-rest"):
            if via in thr:
                v = thr[via]["cpu_ms_per_call"]["gateway"]
                row(f"gateway CPU per call ({via})", "≤ 0.06 ms", f"{fmt(v, 4)} ms", v is not None and v <= 0.06)
    for via in ("gw-2026", "gw-legacy", "gw-rest"):
        if via in c1:
            a50, a99 = c1[via].get("added_p50_ms"), c1[via].get("added_p99_ms")
            row(f"added latency, one at a time ({via}, Rust upstream)", "p50 ≤ 0.15 ms, p99 ≤ 1 ms",
                f"p50 +{fmt(a50)} ms, p99 +{fmt(a99)} ms",
                a50 is not None and a99 is not None and a50 <= 0.15 and a99 <= 1.0)
    for via in ("gw-2026", "gw-legacy", "gw-rest"):
        if via in thr and thr[via].get("ratio_vs_direct") is not None:
            v = thr[via]["ratio_vs_direct"]
            row(f"throughput vs direct ({via}, Rust upstream)", "≥ 0.50", fmt(v, 2), v >= 0.5)
    for via in ("gw-2026-single", "gw-2026", "gw-legacy"):
        x = thr.get(via)
        if x and x.get("cpu_vs_floor") is not None:
            row(f"gateway CPU per call vs the floor ({via}, issue 12)", "≤ 1.5× floor",
                f"{fmt(x['cpu_vs_floor'], 2)}× ({fmt(x['proxy_cpu_ms_per_call'], 4)} vs {fmt(thr['floor']['cpu_ms_per_call']['floor'], 4)} ms)",
                x["cpu_vs_floor"] <= 1.5)
        if x and x.get("ratio_vs_floor") is not None:
            row(f"throughput vs the floor ({via}, issue 12)", "≥ 0.70× floor",
                f"{fmt(x['ratio_vs_floor'], 2)}× ({fmt(x['req_per_s'], 0)} vs {fmt(thr['floor']['req_per_s'], 0)} req/s)",
                x["ratio_vs_floor"] >= 0.70)
    mem = res.get("scenarios", {}).get("3", {})
    if mem and mem.get("status") != "failed":
        row("idle RSS", "< 30 MiB", f"{fmt(mem.get('idle_rss_mib'), 1)} MiB",
            mem.get("idle_rss_mib") is not None and mem["idle_rss_mib"] < 30)
        v = max(mem.get("hwm_after_listing_mib") or 0, mem.get("rss_after_second_listing_mib") or 0)
        row("RSS with 1,000 servers / 50,000 tools listed", "< 200 MiB",
            f"{fmt(mem.get('rss_after_listing_mib'), 1)} MiB (peak {fmt(mem.get('hwm_after_listing_mib'), 1)}), {mem.get('tools_listed')} tools",
            v < 200 and mem.get("tools_listed") == 50000)
    sc = res.get("scenarios", {}).get("4", {})
    ip = sc.get("in_process", {}) if isinstance(sc, dict) else {}
    if ip:
        v = ip["operator_stream_frame"]["apply_frame"]["median_ms"]
        vj = ip["snapshot_file_json"]["load_and_apply"]["median_ms"]
        vf = ip["snapshot_file_yaml_inline_secrets"]["load_and_apply"]["median_ms"]
        hup = sc.get("process", {}).get("sighup_reload_ms", {}).get("median")
        row("1,000-server / 10,000-key snapshot applied (operator stream frame)", "< 100 ms",
            f"{fmt(v, 1)} ms median (max {fmt(ip['operator_stream_frame']['apply_frame']['max_ms'], 1)})", v < 100)
        row("same snapshot from a config file", "< 100 ms (same target, file path)",
            f"{fmt(vj, 1)} ms (JSON file), {fmt(vf, 1)} ms (YAML file), {fmt(hup, 1)} ms (process, SIGHUP reload of the YAML file)",
            max(vj, vf) < 100)
        rows = ip.get("routing", [])
        if rows:
            small = next((x for x in rows if x["servers"] == 10), rows[0])
            big = next((x for x in rows if x["servers"] == 1000), rows[-1])
            largest = rows[-1]
            g = big["aggregate_route_last_ns"] / small["aggregate_route_last_ns"]
            row("per-call routing cost flat in servers (aggregate route, 10 → 1,000 servers)", "flat (≤ 1.5×)",
                f"{small['aggregate_route_last_ns']:.0f} ns → {big['aggregate_route_last_ns']:.0f} ns ({g:.1f}×); "
                f"{largest['servers']} servers: {largest['aggregate_route_last_ns']:.0f} ns; single-server route "
                f"{small['single_route_ns']:.0f} → {big['single_route_ns']:.0f} ns", g <= 1.5)
    cold = res.get("scenarios", {}).get("6", {})
    for era, v in (cold.items() if isinstance(cold, dict) else []):
        if isinstance(v, dict) and "upstream_requests_per_first_call" in v:
            row(f"cold replica, first prefixed tools/call ({era})", "exactly 1 upstream request",
                f"{v['upstream_requests_per_first_call']} request(s), {fmt(v['first_call_ms']['median'], 2)} ms median",
                v["upstream_requests_per_first_call"] == [1] and v["all_ok"])
    fan = res.get("scenarios", {}).get("5", {})
    w = fan.get("slow_within_budget")
    if w:
        row("fan-out over 50 servers bounded by the slow one", "≈ slow server's time, not the sum",
            f"{fmt(w['first_listing_s'])} s (slow {w['bound_s']} s, sum {w['sum_of_delays_s']} s); second {fmt(w['second_listing_s'])} s with {w['second_upstream_requests']} upstream requests",
            w["first_listing_s"] < w["bound_s"] + 0.5 and w["second_upstream_requests"] == 0)
    h = fan.get("hung_beyond_budget")
    if h:
        row("fan-out with a hung server bounded by its timeout", "≈ 1 s timeout",
            f"{fmt(h['first_listing_s'])} s, second {fmt(h['second_listing_s'])} s ({h['second_upstream_requests']} upstream requests)",
            h["first_listing_s"] < 1.5)
    prop = res.get("scenarios", {}).get("7", {})
    if prop.get("status") == "measured":
        row("propagation (kubectl apply → every replica serves it)", "median < 1 s",
            f"median {fmt(prop['median_s'])} s, max {fmt(prop['max_s'])} s ({prop['propagated']}/{prop['runs']} runs)",
            prop["median_s"] is not None and prop["median_s"] < 1.0)
    else:
        row("propagation median", "< 1 s", prop.get("status", "–") + (f": {prop.get('why')}" if prop.get("why") else ""), None)
    return t


def floor_table(d: dict, conc: int) -> list[str]:
    """Issue 12's summary: floor, direct and each gateway path side by side, with the ratios."""
    thr = {x["path"]: x for x in d["throughput"]}
    c1 = {x["path"]: x for x in d["one_at_a_time"]}
    if "floor" not in thr:
        return []
    L = ["Against the floor (bench/floor: a bare hyper pass-through proxy on the gateway's stack, same upstream, same run). "
         f"CPU per call and req/s at {conc} connections; p50/p99 one at a time; ratios to the floor and to direct:\n",
         "| path | CPU ms/call | CPU ÷ floor | req/s | ÷ floor | ÷ direct | p50 ms | p99 ms | +p50 vs direct | +p50 ÷ floor's |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for via, x in thr.items():
        y = c1.get(via, {})
        L.append(f"| {x['label']} | {fmt(x.get('proxy_cpu_ms_per_call'), 4)} | {fmt(x.get('cpu_vs_floor'), 2)} | "
                 f"{fmt(x['req_per_s'], 0)} | {fmt(x.get('ratio_vs_floor'), 2)} | {fmt(x.get('ratio_vs_direct'), 2)} | "
                 f"{fmt(y.get('p50_ms'))} | {fmt(y.get('p99_ms'))} | {fmt(y.get('added_p50_ms'))} | {fmt(y.get('added_p50_vs_floor'), 2)} |")
    L.append("")
    return L


def render_md(res: dict) -> str:
    L = []
    L.append(f"# Switchboard benchmark results ({res['mode']})\n")
    L.append(f"- date: {res['date']}")
    for k, v in res["versions"].items():
        L.append(f"- {k}: {v}")
    L.append(f"- command: `{res['command']}`")
    L.append(f"- parameters: {json.dumps(res['params'])}")
    for m in res.get("merged_runs", []):
        L.append(f"- scenarios {', '.join(m['scenarios'])} re-run {m['date']} with `{m['command']}` "
                 f"(gateway {m['versions'].get('gateway git rev')})")
    L.append("")
    failed = {k: v for k, v in res["scenarios"].items() if isinstance(v, dict) and v.get("status") == "failed"}
    sc = {k: v for k, v in res["scenarios"].items() if k not in failed}
    for k, v in failed.items():
        L.append(f"**Scenario {k} failed**: {v.get('why')} (traceback in the run dir)\n")
    L.append("## Targets (issues 3 and 12)\n")
    L.append("| target | goal | measured | holds |")
    L.append("|---|---|---|---|")
    for t in res["targets"]:
        holds = {True: "yes", False: "**no**", None: "–"}[t["holds"]]
        L.append(f"| {t['target']} | {t['goal']} | {t['measured']} | {holds} |")
    L.append("")
    s12 = sc.get("1-2", {})
    for kind, title in (("rust", "Rust example upstream"), ("python", "Python SDK upstream")):
        if kind not in s12:
            continue
        d = s12[kind]
        ll = sc.get("8", {}).get(kind, {}) if isinstance(sc.get("8"), dict) else {}
        L.append(f"## Scenarios 1–2 ({title})\n")
        L.append(f"One request at a time (oha -c 1) and at a fixed rate of {res['params']['rate']} req/s "
                 "(LiteLLM: 20 req/s, below its capacity); latency in ms; \"+\" is the difference to direct at the same percentile.\n")
        L.append("| path | c1 p50 | c1 p90 | c1 p99 | c1 +p50 | c1 +p99 | rate p50 | rate p99 | rate +p50 | rate +p99 |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        rate_by = {x["path"]: x for x in d["fixed_rate"] + ll.get("fixed_rate", [])}
        for x in d["one_at_a_time"] + ll.get("one_at_a_time", []):
            y = rate_by.get(x["path"], {})
            L.append(f"| {x['label']} | {fmt(x['p50_ms'])} | {fmt(x['p90_ms'])} | {fmt(x['p99_ms'])} | "
                     f"{fmt(x.get('added_p50_ms'))} | {fmt(x.get('added_p99_ms'))} | {fmt(y.get('p50_ms'))} | "
                     f"{fmt(y.get('p99_ms'))} | {fmt(y.get('added_p50_ms'))} | {fmt(y.get('added_p99_ms'))} |")
        L.append("")
        L.append(f"Throughput at {res['params']['conc']} connections (proxy, upstream and oha share the 2 cores):\n")
        L.append("| path | req/s | vs direct | vs floor | p50 ms | p99 ms | proxy CPU ms/call | vs floor | proxy CPU ms/call at fixed rate | upstream CPU ms/call | proxy peak RSS MiB | contended rounds |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for x in d["throughput"] + ll.get("throughput", []):
            proxy = proxy_of(x)
            pc = x["cpu_ms_per_call"].get(proxy) if proxy else None
            y = rate_by.get(x["path"], {})
            pcr = y.get("cpu_ms_per_call", {}).get(proxy) if proxy else None
            rss = x["peak_rss_mib"].get(proxy) if proxy else None
            L.append(f"| {x['label']} | {fmt(x['req_per_s'], 0)} | {fmt(x.get('ratio_vs_direct'), 2 if (x.get('ratio_vs_direct') or 1) >= 0.1 else 4)} | "
                     f"{fmt(x.get('ratio_vs_floor'), 2)} | {fmt(x['p50_ms'])} | "
                     f"{fmt(x['p99_ms'])} | {fmt(pc, 4)} | {fmt(x.get('cpu_vs_floor'), 2)} | {fmt(pcr, 4)} | {fmt(x['cpu_ms_per_call'].get('upstream'), 4)} | {fmt(rss, 1)} | {x['contended_rounds']} |")
        L.append("")
        L.extend(floor_table(d, res["params"]["conc"]))
    mem = sc.get("3")
    if mem:
        L.append("## Scenario 3: memory (gateway RSS)\n")
        L.append("| state | RSS MiB |")
        L.append("|---|---|")
        L.append(f"| idle (2 servers, 1 key, nothing served yet) | {fmt(mem['idle_rss_mib'], 1)} "
                 f"(private {fmt(mem.get('idle_rss_anon_mib'), 1)}, file-backed {fmt(mem.get('idle_rss_file_mib'), 1)}) |")
        L.append(f"| peak under load (throughput runs) | {fmt(mem['under_load_peak_rss_mib'], 1)} |")
        L.append(f"| after the load runs | {fmt(mem['after_load_rss_mib'], 1)} |")
        L.append(f"| 1,000 servers loaded, nothing listed | {fmt(mem['rss_1000_servers_loaded_mib'], 1)} |")
        L.append(f"| 1,000 servers / {mem['tools_listed']} tools listed (aggregate tools/list, {mem['pages']} pages, {fmt(mem['first_full_listing_s'], 2)} s) | {fmt(mem['rss_after_listing_mib'], 1)} (peak {fmt(mem['hwm_after_listing_mib'], 1)}) |")
        L.append(f"| after a second listing (from cache, {fmt(mem['second_full_listing_s'], 2)} s) | {fmt(mem['rss_after_second_listing_mib'], 1)} |")
        L.append("")
    s4 = sc.get("4")
    if s4:
        L.append("## Scenario 4: config scale\n")
        ip = s4.get("in_process")
        if ip:
            L.append(f"In-process (`{s4.get('command')}`), {ip['servers']} servers / {ip['keys']} keys, median (min–max) ms:\n")
            cell = lambda s: f"{fmt(s['median_ms'], 2)} ({fmt(s['min_ms'], 2)}–{fmt(s['max_ms'], 2)})"  # noqa: E731
            of = ip["operator_stream_frame"]
            L.append(f"- operator stream frame (`operator_source::apply_frame`: serde_json parse, validate, build, swap), "
                     f"{of['bytes']} bytes: **{cell(of['apply_frame'])}**\n")
            L.append("| config file | bytes | load_table | apply | load + apply |")
            L.append("|---|---|---|---|---|")
            for k, label in (("snapshot_file_json", "JSON (key hashes)"),
                             ("snapshot_file_yaml_inline_secrets", "YAML (inline key secrets)")):
                v = ip[k]
                L.append(f"| {label} | {v['bytes']} | {cell(v['load_table'])} | {cell(v['apply'])} | {cell(v['load_and_apply'])} |")
            L.append("")
            L.append("Where `load_table` goes (median ms):\n")
            L.append("| config file | parse | of which YAML → tree | resolve secrets | validate | build table | for comparison: serde_json → Snapshot |")
            L.append("|---|---|---|---|---|---|---|")
            for k, label in (("snapshot_file_json", "JSON"), ("snapshot_file_yaml_inline_secrets", "YAML")):
                ph = ip[k].get("phases", {})
                if ph:
                    g = lambda n: fmt(ph[n]["median_ms"], 2)  # noqa: E731
                    L.append(f"| {label} | {g('parse')} | {g('parse_of_which_yaml_to_tree')} | {g('resolve_secrets')} | {g('validate')} | "
                             f"{g('routing_table_build')} | {g('for_comparison_serde_json_from_str_snapshot') if k == 'snapshot_file_json' else '–'} |")
            L.append("")
            L.append("Per-call routing cost (ns per call, before any upstream I/O; includes SHA-256 of the key):\n")
            L.append("| servers | table lookups | aggregate route, first server | aggregate route, last server | single-server route |")
            L.append("|---|---|---|---|---|")
            for x in ip["routing"]:
                L.append(f"| {x['servers']} | {x['lookup_ns']:.0f} | {x['aggregate_route_first_ns']:.0f} | {x['aggregate_route_last_ns']:.0f} | {x['single_route_ns']:.0f} |")
            L.append("")
        pr = s4.get("process")
        if pr:
            L.append(f"Real process with that snapshot as a {pr['file_bytes']}-byte file: spawn → listening {fmt(pr['spawn_to_listening_ms'], 1)} ms; "
                     f"SIGHUP reload (log timestamps) median {fmt(pr['sighup_reload_ms']['median'], 1)} ms "
                     f"(min {fmt(pr['sighup_reload_ms']['min'], 1)}, max {fmt(pr['sighup_reload_ms']['max'], 1)}); RSS {fmt(pr['rss_mib'], 1)} MiB.\n")
    fan = sc.get("5")
    if fan:
        L.append("## Scenario 5: fan-out (aggregate tools/list over 50 servers)\n")
        L.append("| case | first listing s | upstream requests | errors | second listing s | upstream requests | sum of delays s |")
        L.append("|---|---|---|---|---|---|---|")
        for k, v in fan.items():
            L.append(f"| {v['what']} | {fmt(v['first_listing_s'])} | {v['first_upstream_requests']} | {', '.join(v['first_errors']) or '–'} | "
                     f"{fmt(v['second_listing_s'])} | {v['second_upstream_requests']} | {v['sum_of_delays_s']} |")
        L.append("")
    cold = sc.get("6")
    if cold:
        L.append("## Scenario 6: cold replica (fresh process, first prefixed tools/call)\n")
        L.append("| era | runs | upstream requests made by the first call | first call ms (median / max) | second call ms | all answered 3 |")
        L.append("|---|---|---|---|---|---|")
        for era, v in cold.items():
            L.append(f"| {era} | {v['runs']} | {v['upstream_requests_per_first_call']} {json.dumps(v['by_method_example'])} | "
                     f"{fmt(v['first_call_ms']['median'], 2)} / {fmt(v['first_call_ms']['max'], 2)} | {fmt(v['second_call_ms']['median'], 2)} | {v['all_ok']} |")
        L.append("")
    prop = sc.get("7")
    if prop:
        if prop.get("status") == "measured":
            L.append(f"## Scenario 7: propagation\n\n`{prop['command']}`: kubectl apply → both gateway replicas serve the change: "
                     f"median {fmt(prop['median_s'])} s, max {fmt(prop['max_s'])} s over {prop['runs']} runs "
                     f"({prop['propagated']} propagated); API write without kubectl: {json.dumps(prop.get('api'))}. {prop['note']}.\n")
        else:
            L.append(f"## Scenario 7: propagation\n\n{prop.get('status')}: {prop.get('why', '')}\n")
    ll = sc.get("8")
    if ll:
        L.append("## Scenario 8: LiteLLM peer\n")
        if ll.get("status") != "measured":
            L.append(f"{ll.get('status')}: ```{ll.get('error', ll.get('log_tail', ''))[-1500:]}```\n")
        else:
            L.append(f"litellm {ll['litellm_version']} (mcp {ll['mcp_version']}), {ll['workers']} worker, started in {ll['startup_s']} s, "
                     f"idle RSS {ll['idle_rss_mib']} MiB (process tree). Rows are in the scenario 1–2 tables above. "
                     f"Command: `{ll['command']}`\n")
            L.append("| upstream | path | c1 +p50 ms | req/s | vs direct | Switchboard 2026 req/s multiple | LiteLLM CPU ms/call |")
            L.append("|---|---|---|---|---|---|---|")
            for kind in ("rust", "python"):
                v = ll.get(kind)
                if not v:
                    continue
                c1 = {x["path"]: x for x in v["one_at_a_time"]}
                for x in v["throughput"]:
                    L.append(f"| {kind} | {x['label']} | {fmt(c1.get(x['path'], {}).get('added_p50_ms'), 2)} | {fmt(x['req_per_s'], 1)} | "
                             f"{fmt(x.get('ratio_vs_direct'), 3)} | {fmt(x.get('switchboard_2026_throughput_multiple'), 1)}× | {fmt(x['cpu_ms_per_call'].get('litellm'), 2)} |")
            L.append("")
    L.append("## Load commands (oha)\n")
    L.append("```")
    L.extend(res.get("commands", [])[:40])
    L.append("```")
    return "\n".join(L) + "\n"


def rerender(json_path: Path) -> int:
    """`bench.py --render results/latest.json`: recompute the targets and rewrite the .md."""
    res = json.loads(json_path.read_text())
    res["targets"] = targets(res)
    json_path.write_text(json.dumps(res, indent=1) + "\n")
    md = render_md(res)
    json_path.with_suffix(".md").write_text(md)
    print(md)
    return 0


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--render":
        return rerender(Path(sys.argv[2]))
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--scenarios", default="1,2,3,4,5,6,7,8")
    ap.add_argument("--rate", type=int, default=200)
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--oha", required=True)
    ap.add_argument("--gateway", required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--scale", default="")
    ap.add_argument("--floor", default="", help="bench/floor's binary (the bare pass-through proxy)")
    ap.add_argument("--python", default="")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--versions", default="{}")
    ap.add_argument("--command", default="bench/run.sh")
    ap.add_argument("--merge", action="store_true",
                    help="update the selected scenarios in the existing latest(-quick).json instead of replacing it")
    args = ap.parse_args()
    want = {s.strip() for s in args.scenarios.split(",") if s.strip()}
    q = args.quick
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    cache = Path(os.environ.get("SWITCHBOARD_CACHE", Path.home() / ".cache/switchboard"))
    rundir = cache / "bench/runs" / stamp
    rundir.mkdir(parents=True, exist_ok=True)
    log(f"bench: run dir {rundir} (process logs, configs)")
    bins = {"gateway": args.gateway, "upstream": args.upstream, "scale": args.scale, "python": args.python,
            "floor": args.floor}
    world = World(args, bins, rundir)
    bench = Bench(args, args.oha, rundir)
    res: dict = {"mode": "quick" if q else "full", "date": now_iso(), "command": args.command,
                 "versions": json.loads(args.versions), "params": {"rate": args.rate, "conc": args.conc,
                 "scenarios": sorted(want)}, "scenarios": {}, "rundir": str(rundir)}
    res["versions"]["machine"] = f"{platform.machine()}, nproc {NCPU}, {platform.release()}"
    t_start = time.monotonic()
    def attempt(key: str, fn):
        try:
            res["scenarios"][key] = fn()
        except Exception as e:  # noqa: BLE001  (one broken scenario must not lose the others)
            import traceback
            log(f"  scenario {key} FAILED: {e}")
            (rundir / f"scenario-{key}.traceback").write_text(traceback.format_exc())
            res["scenarios"][key] = {"status": "failed", "why": str(e)[:2000]}

    try:
        up = py = None
        s12: dict = {}
        if want & {"1", "2", "3", "8"}:
            log("== scenarios 1-2: overhead and throughput (direct vs gateway 2026 / legacy / REST)")
            s12, up, py = scenario_overhead_throughput(world, bench, q)
            res["scenarios"]["1-2"] = s12
        if "3" in want:
            log("== scenario 3: memory")
            attempt("3", lambda: scenario_memory(world, up, q, s12))
        if "8" in want:
            log("== scenario 8: LiteLLM peer (scenarios 1-2)")
            attempt("8", lambda: scenario_litellm(world, bench, up, py, q, s12))
        if py:
            world.procs.stop(py)
        if "4" in want:
            log("== scenario 4: config scale")
            attempt("4", lambda: scenario_config_scale(world, q))
        if want & {"5", "6"}:
            aux = world.upstream("upstream-aux", record=200)
            if "5" in want:
                log("== scenario 5: fan-out")
                attempt("5", lambda: scenario_fanout(world, aux, q))
            if "6" in want:
                log("== scenario 6: cold replica")
                attempt("6", lambda: scenario_cold(world, aux, q))
        if "7" in want:
            log("== scenario 7: propagation")
            attempt("7", lambda: scenario_propagation(world, q))
    finally:
        world.procs.stop_all()
    res["duration_s"] = round(time.monotonic() - t_start, 1)
    res["commands"] = bench.commands
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "" if not q else "-quick"
    prev_path = out / f"latest{suffix}.json"
    if args.merge and prev_path.is_file():
        prev = json.loads(prev_path.read_text())
        merged_from = prev.get("merged_runs", [])
        merged_from.append({"date": res["date"], "command": res["command"], "scenarios": sorted(res["scenarios"]),
                            "versions": res["versions"]})
        prev["scenarios"].update(res["scenarios"])
        prev["commands"] = prev.get("commands", []) + [c for c in res["commands"] if c not in prev.get("commands", [])]
        prev["merged_runs"] = merged_from
        res = prev
    res["targets"] = targets(res)
    (out / f"latest{suffix}.json").write_text(json.dumps(res, indent=1) + "\n")
    md = render_md(res)
    (out / f"latest{suffix}.md").write_text(md)
    print(md)
    log(f"bench: wrote {out}/latest{suffix}.json and latest{suffix}.md in {res['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
