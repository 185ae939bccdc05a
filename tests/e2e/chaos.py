"""Chaos soak: two gateway replicas behind a round-robin balancer, seven upstream servers on three
upstream processes (six with a static credential each, one with tokens the gateway obtains from an
OAuth token endpoint, a fourth process), a mixed client load with an oracle, and faults injected
at random while it runs. Every answer is classified:

- correct: the answer the oracle expects (the right sum, the server's own credential seen by the
  upstream, exactly the key's servers in a listing, a refusal where the key has no access);
- documented: an error the fault in force explains (a 502/504 or JSON-RPC upstream error while
  that server's upstream or token endpoint is down, hung or misbehaving, or its stream breaks
  off; a connection error while a gateway is killed) — "in force" means at any time from
  `SETTLE_S` before the call started to its end, since a replica applies a config change within
  about half a second. A listing may leave a server out for longer: the gateway remembers a
  failed listing for `LISTING_FAILURE_MEMORY_S` (so a hung upstream costs listings its timeout
  once, not on every request), and the walk that failed may have taken the server timeout;
- wrong: anything else (another server's data or credential, a tool outside the key's scope, a
  5xx or a refusal no fault explains, a call past its budget).

Run the long profile by hand (after `cargo build --workspace --bins`; CARGO_TARGET_DIR as for the
tests):  ~/.cache/switchboard/venv/bin/python tests/e2e/chaos.py --duration 1800
The short profile runs in the test command (tests/e2e/test_chaos_short.py).

Operator kill and failover are the cluster profile's (tests/k8s_e2e/test_chaos_operator.py, the
same load and oracle through soak()): here the gateways run on a config file.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402
    EXAMPLE_UPSTREAM_BIN,
    GATEWAY_BIN,
    LEGACY_VERSION,
    MODERN_VERSION,
    Proc,
    RawMcp,
    binary,
    new_secret,
    wait_until,
    write_config,
)

SERVERS = 7
UPSTREAMS = 3
# The server whose credential the gateway obtains (OAuth 2.0 client credentials) from the token
# endpoint process "idp"; the others carry a static bearer token each.
OAUTH_SERVER = "s6"
OAUTH_CLIENT = "chaos-s6"
# Tokens live this long, so the gateway renews them every couple of seconds (half their life)
# and a token endpoint outage is felt.
TOKEN_TTL_S = 4
SERVER_TIMEOUT_S = 2.0
# The client's budget: the server timeout plus a generous margin for a loaded machine.
CALL_BUDGET_S = SERVER_TIMEOUT_S + 6.0
SETTLE_S = 1.5
# gateway/src/catalog.rs FAILURE_TTL, plus the walk that failed (up to the server timeout).
LISTING_FAILURE_MEMORY_S = 5.0 + SERVER_TIMEOUT_S
# Servers that answer with an SSE stream (a progress event, then the result): the relay must
# pass the progress event through before the result, in both eras.
SSE_SERVERS = {"s2", "s5"}
FAULT_KINDS = (
    "upstream_crash",
    "upstream_hang",
    "slow",
    "status_5xx",
    "garbage",
    "stream_cut",
    "token_endpoint_down",
    "gateway_kill",
    "invalid_config",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------
# The round-robin balancer: every new connection goes to the next replica (clients here open a
# new connection per call, so consecutive calls, legacy sessions included, hop replicas).


class Balancer:
    def __init__(self, backends: list[int]):
        self.backends = backends
        self.turn = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.5)
        while not self.stopped.is_set():
            try:
                client, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            port = self.backends[self.turn % len(self.backends)]
            self.turn += 1
            threading.Thread(target=self._relay, args=(client, port), daemon=True).start()

    def _relay(self, client: socket.socket, port: int) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=2)
        except OSError:
            client.close()  # like a dead endpoint: the client sees its connection closed
            return
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            # (the other direction may have closed both sockets already)
            src.settimeout(CALL_BUDGET_S + 5)
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def stop(self) -> None:
        self.stopped.set()
        self.sock.close()


# --------------------------------------------------------------------------------------------
# The world: upstream processes, gateways, the config


@dataclasses.dataclass
class FaultWindow:
    kind: str
    target: str  # "upstream-1", "s3", "idp", "gw-b"
    start: float
    end: float = float("inf")


class FaultWindows:
    """The faults a world has had, with their times, and which one explains a call."""

    def __init__(self) -> None:
        self.faults: list[FaultWindow] = []
        self.lock = threading.Lock()

    def fault_in_force(self, targets: set[str], t0: float, t1: float, after: float = SETTLE_S) -> str | None:
        """A fault on one of `targets` that overlaps the call or ended less than `after` before
        it started; of several, the one that overlaps the call and started last (the report
        names it)."""
        with self.lock:
            found = [f for f in self.faults if f.target in targets and f.start <= t1 and f.end >= t0 - after]
        if not found:
            return None
        return max(found, key=lambda f: (f.end >= t0, f.start)).kind


class World(FaultWindows):
    def __init__(self, workdir: Path, seed: int, sabotage: bool = False):
        self.workdir = workdir
        # The oracle's own check: s0 is configured with s1's credential.
        self.sabotage = sabotage
        self.logdir = workdir / "logs"
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(seed)
        self.tokens = {f"s{i}": new_secret(f"chaos-s{i}") for i in range(SERVERS) if f"s{i}" != OAUTH_SERVER}
        self.keys = {"all": new_secret("chaos-key-all"), "even": new_secret("chaos-key-even")}
        self.scope = {
            "all": {f"s{i}" for i in range(SERVERS)},
            "even": {f"s{i}" for i in range(0, SERVERS, 2)},
        }
        self.session_key = new_secret("chaos-session-key")
        self.upstream_ports = [free_port() for _ in range(UPSTREAMS)]
        self.upstreams: list[Proc | None] = [None] * UPSTREAMS
        self.idp_port = free_port()
        self.idp: Proc | None = None
        self.gateway_ports = {"gw-a": free_port(), "gw-b": free_port()}
        self.gateways: dict[str, Proc] = {}
        self.config_path = workdir / "gateway.yaml"
        self.variants: dict[str, str] = {}  # server -> extra variant options in force
        super().__init__()
        self.write_lock = threading.Lock()
        self.write_config()
        self.balancer = Balancer(list(self.gateway_ports.values()))
        try:
            for i in range(UPSTREAMS):
                self.start_upstream(i)
            self.start_idp()
            for name in self.gateway_ports:
                self.start_gateway(name)
        except BaseException:
            self.stop()
            raise

    def upstream_of(self, server: str) -> int:
        return int(server[1:]) % UPSTREAMS

    def credential(self, server: str) -> str:
        """What the upstream of `server` must see in Authorization (a prefix for minted tokens)."""
        return f"Bearer at-{OAUTH_CLIENT}-" if server == OAUTH_SERVER else f"Bearer {self.tokens[server]}"

    def server_url(self, server: str) -> str:
        check = "require-prefix" if server == OAUTH_SERVER else "require"
        options = f"name={server},{check}=authorization:{self.credential(server).replace(' ', '%20')}"
        if server in SSE_SERVERS:
            options += ",sse"
        if extra := self.variants.get(server):
            options += "," + extra
        return f"http://127.0.0.1:{self.upstream_ports[self.upstream_of(server)]}/v/{options}/mcp"

    def auth(self, server: str) -> dict:
        if server == OAUTH_SERVER:
            return {
                "type": "oauth2ClientCredentials",
                "tokenUrl": f"http://127.0.0.1:{self.idp_port}/oauth/token",
                "clientId": OAUTH_CLIENT,
                "clientSecret": f"secret-{OAUTH_CLIENT}",
            }
        return {"type": "bearer", "secret": self.tokens["s1" if self.sabotage and server == "s0" else server]}

    def config(self) -> dict:
        return {
            "gateway": {"sessionKey": self.session_key},
            "servers": [
                {
                    "name": s,
                    "url": self.server_url(s),
                    "timeout": f"{SERVER_TIMEOUT_S:.0f}s",
                    "auth": self.auth(s),
                }
                for s in sorted(self.scope["all"])
            ],
            "keys": [
                {"name": "all", "secret": self.keys["all"], "servers": sorted(self.scope["all"])},
                {"name": "even", "secret": self.keys["even"], "servers": sorted(self.scope["even"])},
            ],
        }

    def write_config(self, *, in_place: bool = False, text: str | None = None) -> None:
        """Atomic by default; `in_place` truncates and writes like `generate > config.yaml`;
        `text` writes that instead of the current config. One writer at a time (two
        interleaved writers would make a file no user makes)."""
        with self.write_lock:
            if text is not None:
                self.config_path.write_text(text)
            else:
                write_config(self.config_path, self.config(), atomic=not in_place)

    def start_upstream(self, i: int) -> None:
        argv = [binary(EXAMPLE_UPSTREAM_BIN), "--listen", f"127.0.0.1:{self.upstream_ports[i]}"]
        proc = Proc(f"upstream-{i}", argv, self.logdir)
        proc.wait_ready(20)
        self.upstreams[i] = proc

    def start_idp(self) -> None:
        """The token endpoint: an example-upstream process used only for /oauth/token."""
        argv = [binary(EXAMPLE_UPSTREAM_BIN), "--listen", f"127.0.0.1:{self.idp_port}", "--token-ttl", str(TOKEN_TTL_S)]
        proc = Proc("idp", argv, self.logdir)
        proc.wait_ready(20)
        self.idp = proc

    def start_gateway(self, name: str) -> None:
        argv = [binary(GATEWAY_BIN), "--config", self.config_path, "--listen", f"127.0.0.1:{self.gateway_ports[name]}"]
        proc = Proc(name, argv, self.logdir)
        proc.wait_ready(20)
        self.gateways[name] = proc

    def stop(self) -> None:
        self.balancer.stop()
        for proc in [*self.gateways.values(), *[u for u in [*self.upstreams, self.idp] if u]]:
            with contextlib.suppress(Exception):
                os.kill(proc.popen.pid, signal.SIGCONT)
            proc.stop()


# --------------------------------------------------------------------------------------------
# Faults


class Injector(threading.Thread):
    """Injects faults one at a time: every kind once early on (in a random order, so that a
    short run sees each), then at random; a pause of `PAUSE_S` between them, each held
    `HOLD_S`."""

    KINDS: tuple[str, ...] = FAULT_KINDS
    PAUSE_S = (0.5, 2.0)
    HOLD_S = (1.0, 4.0)

    def __init__(self, world: World, stop: threading.Event, log: list[str]):
        super().__init__(daemon=True)
        self.world, self.stop_event, self.log = world, stop, log
        self.rng = random.Random(world.rng.random())
        self.counts: Counter[str] = Counter()
        # A fault the harness could not carry out or end (e.g. a replica that did not restart):
        # reported, and the run fails, rather than a thread dying quietly.
        self.errors: list[str] = []

    def note(self, text: str) -> None:
        self.log.append(f"{time.strftime('%H:%M:%S')} {text}")

    def open(self, kind: str, target: str) -> FaultWindow:
        window = FaultWindow(kind, target, time.monotonic())
        with self.world.lock:
            self.world.faults.append(window)
        self.counts[kind] += 1
        self.note(f"start {kind} on {target}")
        return window

    def close(self, window: FaultWindow) -> None:
        window.end = time.monotonic()
        self.note(f"end   {window.kind} on {window.target} ({window.end - window.start:.1f}s)")

    def run(self) -> None:
        first = self.rng.sample(self.KINDS, len(self.KINDS))
        while not self.stop_event.wait(self.rng.uniform(*self.PAUSE_S)):
            kind = first.pop() if first else self.rng.choice(self.KINDS)
            try:
                self.inject(kind, self.rng.uniform(*self.HOLD_S))
            except Exception as exc:  # noqa: BLE001 - reported in the run's result
                self.errors.append(f"{kind}: {str(exc)[:500]}")
                self.note(f"HARNESS ERROR in {kind}: {str(exc)[:200]}")
                return

    def inject(self, kind: str, hold: float) -> None:
        w = self.world
        if kind in ("upstream_crash", "upstream_hang"):
            i = self.rng.randrange(UPSTREAMS)
            window = self.open(kind, f"upstream-{i}")
            proc = w.upstreams[i]
            assert proc is not None
            if kind == "upstream_crash":
                os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait(10)
                proc.stop()
                time.sleep(hold)
                w.start_upstream(i)
            else:
                os.kill(proc.popen.pid, signal.SIGSTOP)
                time.sleep(hold)
                os.kill(proc.popen.pid, signal.SIGCONT)
            self.close(window)
        elif kind == "token_endpoint_down":
            window = self.open(kind, "idp")
            assert w.idp is not None
            os.killpg(w.idp.popen.pid, signal.SIGKILL)
            w.idp.popen.wait(10)
            w.idp.stop()
            time.sleep(hold)
            w.start_idp()
            self.close(window)
        elif kind in ("slow", "status_5xx", "garbage", "stream_cut"):
            # (a stream can only break off where there is one)
            pool = sorted(SSE_SERVERS) if kind == "stream_cut" else sorted(w.scope["all"])
            server = self.rng.choice(pool)
            variant = {"slow": "delay=1200", "status_5xx": "status=503", "garbage": "garbage", "stream_cut": "cut"}[kind]
            window = self.open(kind, server)
            w.variants[server] = variant
            w.write_config(in_place=self.rng.random() < 0.5)
            time.sleep(hold)
            w.variants.pop(server, None)
            w.write_config(in_place=self.rng.random() < 0.5)
            # The fault lasts until every replica has applied the repaired config.
            time.sleep(SETTLE_S)
            self.close(window)
        elif kind == "gateway_kill":
            window = self.open(kind, "gw-b")
            proc = w.gateways["gw-b"]
            os.killpg(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait(10)
            proc.stop()
            time.sleep(hold)
            w.start_gateway("gw-b")
            self.close(window)
        else:  # invalid_config: a broken file must change nothing (not a fault for clients)
            self.counts[kind] += 1
            self.note("write an invalid config (a server named A_B), then the valid one again")
            bad = w.config()
            bad["servers"][0]["name"] = "A_B"
            w.write_config(text=json.dumps(bad))
            time.sleep(hold)
            w.write_config()


class Churn(threading.Thread):
    """Rewrites the (unchanged) config in place every second: reloads must never lose a key."""

    def __init__(self, world: World, stop: threading.Event):
        super().__init__(daemon=True)
        self.world, self.stop_event = world, stop
        self.rewrites = 0

    def run(self) -> None:
        while not self.stop_event.wait(1.0):
            self.world.write_config(in_place=True)
            self.rewrites += 1


# --------------------------------------------------------------------------------------------
# Clients and the oracle


@dataclasses.dataclass
class Outcome:
    kind: str  # "rest_call", "mcp_modern", "mcp_legacy", "listing"
    verdict: str  # "correct", "documented", "wrong"
    detail: str
    latency: float


class Client(threading.Thread):
    def __init__(self, world: World, stop: threading.Event, out: list[Outcome], seed: int):
        super().__init__(daemon=True)
        self.world, self.stop_event, self.out = world, stop, out
        self.rng = random.Random(seed)
        self.progress_tokens = 0
        self.url = f"http://127.0.0.1:{world.balancer.port}"
        # No kept-alive connections: each call is a new connection, which the balancer sends to
        # the next replica.
        self.http = httpx.Client(timeout=CALL_BUDGET_S, limits=httpx.Limits(max_keepalive_connections=0))

    def run(self) -> None:
        while not self.stop_event.is_set():
            kind = self.rng.choice(("rest_call", "mcp_modern", "mcp_legacy", "listing"))
            key = self.rng.choice(("all", "even"))
            server = self.rng.choice(sorted(self.world.scope["all"]))
            t0 = time.monotonic()
            try:
                verdict, detail = getattr(self, kind)(key, server)
            except (httpx.TransportError, OSError) as exc:
                verdict, detail = self.explain_transport(exc, server, t0)
            except Exception as exc:  # noqa: BLE001 - e.g. an initialize the harness found wrong
                verdict, detail = "wrong", f"{type(exc).__name__}: {str(exc)[:200]}"
            t1 = time.monotonic()
            if t1 - t0 > CALL_BUDGET_S + 1:
                verdict, detail = "wrong", f"took {t1 - t0:.1f}s (budget {CALL_BUDGET_S:.0f}s): {detail}"
            # The wall-clock time lines a wrong answer up with the fault log.
            at = time.strftime("%H:%M:%S")
            self.out.append(Outcome(kind, verdict, f"{at} {kind} key={key} server={server}: {detail}", t1 - t0))

    # -- explanations

    def targets(self, server: str) -> set[str]:
        own = {server, f"upstream-{self.world.upstream_of(server)}"}
        return own | {"idp"} if server == OAUTH_SERVER else own

    def fault_on(self, server: str | None, t0: float, after: float = SETTLE_S) -> str | None:
        """The fault that explains an error of a call to `server` (any server: None)."""
        targets = self.targets(server) if server else set().union(*(self.targets(s) for s in self.world.scope["all"]))
        return self.world.fault_in_force(targets, t0, time.monotonic(), after)

    def explain_error(self, server: str | None, t0: float, what: str) -> tuple[str, str]:
        fault = self.fault_on(server, t0)
        return ("documented", f"{what} ({fault})") if fault else ("wrong", f"{what} with no fault in force")

    def explain_transport(self, exc: Exception, server: str, t0: float) -> tuple[str, str]:
        what = f"transport error {type(exc).__name__}"
        if isinstance(exc, httpx.TimeoutException):
            return self.explain_error(server, t0, what)
        fault = self.world.fault_in_force({"gw-b"}, t0, time.monotonic())
        return ("documented", f"{what} (gateway_kill)") if fault else ("wrong", f"{what} with no gateway down")

    # -- calls

    def rest_call(self, key: str, server: str) -> tuple[str, str]:
        t0 = time.monotonic()
        a, b = self.rng.randrange(1000), self.rng.randrange(1000)
        r = self.http.post(
            f"{self.url}/mcp-rest/tools/call",
            json={"name": f"{server}__add", "arguments": {"a": a, "b": b}},
            headers={"Authorization": f"Bearer {self.world.keys[key]}"},
        )
        if server not in self.world.scope[key]:
            return ("correct", "refused") if r.status_code in (403, 404) else ("wrong", f"out of scope, HTTP {r.status_code}")
        if r.status_code == 200:
            body = r.json()
            value = (body.get("structuredContent") or {}).get("result")
            return ("correct", "sum") if value == a + b and not body.get("isError") else ("wrong", f"answer {str(body)[:200]}")
        if r.status_code in (502, 504):
            return self.explain_error(server, t0, f"HTTP {r.status_code}")
        return "wrong", f"HTTP {r.status_code} {r.text[:200]}"

    def mcp(self, era: str, key: str, server: str) -> tuple[str, str]:
        t0 = time.monotonic()
        with RawMcp(f"{self.url}/mcp", self.world.keys[key], era, client=self.http) as mcp:
            if era == "legacy":
                init = mcp.initialize(LEGACY_VERSION)
                if init.status != 200:
                    return "wrong", f"initialize HTTP {init.status}"
            self.progress_tokens += 1
            params = {"name": f"{server}__request_headers", "arguments": {}, "_meta": {"progressToken": f"p{self.progress_tokens}"}}
            reply = mcp.request("tools/call", params)
        message = next(
            (m for m in reversed(reply.messages) if isinstance(m, dict) and ("result" in m or "error" in m)), None
        )
        if server not in self.world.scope[key]:
            # A JSON-RPC error (the 2026-07-28 era carries "unknown tool" on HTTP 400) or a 403/404.
            refused = reply.status in (403, 404) or (message is not None and "error" in message)
            return ("correct", "refused") if refused else ("wrong", f"out of scope answered: {reply.raw[:200]!r}")
        if reply.status != 200 or message is None:
            return self.explain_error(server, t0, f"HTTP {reply.status}")
        if "error" in message:
            return self.explain_error(server, t0, f"JSON-RPC {message['error'].get('code')}")
        result = message.get("result") or {}
        if result.get("isError"):
            return self.explain_error(server, t0, "tool error")
        seen = json.dumps(result)
        others = [s for s in self.world.scope["all"] if s != server and self.world.credential(s) in seen]
        if others:
            return "wrong", f"the upstream of {server} saw the credential of {others}"
        if self.world.credential(server) not in seen:
            return "wrong", f"the upstream of {server} did not see its own credential"
        if server in SSE_SERVERS:
            progress = [m for m in reply.messages if isinstance(m, dict) and m.get("method") == "notifications/progress"]
            if not progress:
                return "wrong", "the streamed answer lost its progress event"
            if progress[0].get("params", {}).get("progressToken") != params["_meta"]["progressToken"]:
                return "wrong", f"progress for another request: {progress[0]}"
            return "correct", "own credential, streamed with progress"
        return "correct", "own credential"

    def mcp_modern(self, key: str, server: str) -> tuple[str, str]:
        return self.mcp(MODERN_VERSION, key, server)

    def mcp_legacy(self, key: str, server: str) -> tuple[str, str]:
        return self.mcp("legacy", key, server)

    def listing(self, key: str, _server: str) -> tuple[str, str]:
        t0 = time.monotonic()
        r = self.http.get(f"{self.url}/mcp-rest/tools/list", headers={"Authorization": f"Bearer {self.world.keys[key]}"})
        if r.status_code != 200:
            return self.explain_error(None, t0, f"listing HTTP {r.status_code}")
        names = [t if isinstance(t, str) else t["name"] for t in r.json().get("tools", [])]
        servers = {n.split("__", 1)[0] for n in names}
        if outside := servers - self.world.scope[key]:
            return "wrong", f"listing holds tools of {sorted(outside)} outside the key's scope"
        missing = self.world.scope[key] - servers
        if not missing:
            return "correct", "listing"
        faults = set()
        for server in sorted(missing):
            fault = self.fault_on(server, t0, after=LISTING_FAILURE_MEMORY_S)
            if fault is None:
                return "wrong", f"listing without {server} with no fault in force"
            faults.add(fault)
        return "documented", f"listing without {sorted(missing)} ({'+'.join(sorted(faults))})"


# --------------------------------------------------------------------------------------------
# Process figures


def proc_figures(pid: int, url: str) -> dict[str, int]:
    """RSS, open fds and threads of the process, and the tasks alive in its runtime (its
    /metrics, `switchboard_gateway_runtime_tasks`)."""
    figures = {"fds": len(os.listdir(f"/proc/{pid}/fd"))}
    metrics = httpx.get(f"{url}/metrics", timeout=5).text
    for line in metrics.splitlines():
        if line.startswith("switchboard_gateway_runtime_tasks "):
            figures["tasks"] = int(float(line.split()[1]))
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            figures["rss_kib"] = int(line.split()[1])
        elif line.startswith("Threads:"):
            figures["threads"] = int(line.split()[1])
    return figures


@dataclasses.dataclass
class Report:
    duration_s: float
    calls: int
    classes: dict[str, int]
    by_kind: dict[str, dict[str, int]]
    p50_ms: float
    p99_ms: float
    wrong: list[str]
    panics: int
    faults: dict[str, int]
    fault_log: list[str]
    rewrites: int
    gw_a_start: dict[str, int]
    gw_a_warm: dict[str, int]
    gw_a_end: dict[str, int]
    documented_examples: list[str]
    # fault kind -> what clients saw (symptom -> count)
    seen_per_fault: dict[str, dict[str, int]]
    streamed: int
    harness_errors: list[str]

    def text(self) -> str:
        lines = [
            f"chaos soak: {self.duration_s:.0f}s, {self.calls} calls, "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.classes.items())),
            f"  per kind: {json.dumps(self.by_kind, sort_keys=True)}",
            f"  streamed answers (SSE servers, progress event relayed before the result): {self.streamed}",
            f"  latency p50 {self.p50_ms:.1f} ms, p99 {self.p99_ms:.1f} ms (budget {CALL_BUDGET_S:.0f} s)",
            f"  faults injected: {json.dumps(dict(sorted(self.faults.items())))}"
            + (f"; in-place config rewrites: {self.rewrites}" if self.rewrites else ""),
            f"  replica never killed: start {self.gw_a_start}, after warm-up {self.gw_a_warm}, end {self.gw_a_end}",
            f"  panics in gateway logs: {self.panics}",
        ]
        lines += ["  what clients saw, per fault:"]
        lines += [
            f"    {fault}: " + ", ".join(f"{symptom} {n}" for symptom, n in sorted(seen.items(), key=lambda kv: -kv[1]))
            for fault, seen in sorted(self.seen_per_fault.items())
        ]
        lines += [f"  HARNESS ERROR: {e}" for e in self.harness_errors]
        lines += [f"  WRONG: {w}" for w in self.wrong[:20]]
        lines += [f"  documented, e.g.: {d}" for d in self.documented_examples]
        return "\n".join(lines)


def documented_symptom(detail: str) -> tuple[str, str]:
    """(fault, symptom) of a documented outcome's detail, "<time> <call>: <symptom> (<fault>)"."""
    what = detail.split(": ", 1)[-1]
    symptom, fault = what[:-1].rsplit(" (", 1)
    if symptom.startswith("listing without"):
        symptom = "listing without the server"
    return fault, symptom


def run(duration: float, seed: int, workdir: Path, clients: int = 4, sabotage: bool = False) -> Report:
    """The soak on config files: the world above, its faults, and in-place rewrites every second."""
    world = World(workdir, seed, sabotage)
    try:
        stop = threading.Event()
        churn = Churn(world, stop)
        report = soak(
            world,
            lambda log: Injector(world, stop, log),
            stop,
            duration,
            seed,
            clients,
            measured=(world.gateways["gw-a"].popen.pid, f"http://127.0.0.1:{world.gateway_ports['gw-a']}"),
            background=[churn],
        )
        report.rewrites = churn.rewrites
    finally:
        world.stop()
    report.panics = count_panics(world.logdir.glob("gw-*.log"))
    return report


def count_panics(logs) -> int:
    return sum(p.read_text(errors="replace").count("panicked") for p in logs)


def soak(
    world: Any,
    make_injector: Any,
    stop: threading.Event,
    duration: float,
    seed: int,
    clients: int,
    measured: tuple[int, str],
    background: list[Any] = (),  # type: ignore[assignment]
) -> Report:
    """Runs the load, the injector (`make_injector(fault_log)`, a thread with `counts` and
    `errors`) and `background` threads on `world` for `duration`, then sets `stop` (which the
    injector and the background threads watch), and classifies every answer. `world` has
    `World`'s interface (balancer, keys, scope, credential, upstream_of, fault_in_force).
    Resources are figures of `measured` (pid, URL), a replica never killed.
    The caller stops the world, then counts panics and rewrites."""
    outcomes: list[Outcome] = []
    fault_log: list[str] = []
    start_figures = proc_figures(*measured)
    workers = [Client(world, stop, outcomes, seed + i) for i in range(clients)]
    injector = make_injector(fault_log)
    try:
        for c in workers:
            c.start()
        warmup = min(10.0, duration / 4)
        time.sleep(warmup)
        warm_figures = proc_figures(*measured)
        injector.start()
        for t in background:
            t.start()
        time.sleep(max(0.0, duration - warmup))
    finally:
        stop.set()
        for t in [*workers, injector, *background]:
            if t.ident is not None:  # (started)
                t.join(CALL_BUDGET_S + 30)
    # (the figures once the last fault is over and settled)
    time.sleep(SETTLE_S)
    end_figures = proc_figures(*measured)
    classes = Counter(o.verdict for o in outcomes)
    by_kind: dict[str, Counter[str]] = {}
    for o in outcomes:
        by_kind.setdefault(o.kind, Counter())[o.verdict] += 1
    latencies = sorted(o.latency for o in outcomes) or [0.0]
    documented = [o.detail for o in outcomes if o.verdict == "documented"]
    seen_per_fault: dict[str, Counter[str]] = {}
    for detail in documented:
        fault, symptom = documented_symptom(detail)
        seen_per_fault.setdefault(fault, Counter())[symptom] += 1
    return Report(
        duration_s=duration,
        calls=len(outcomes),
        classes=dict(classes),
        by_kind={k: dict(v) for k, v in by_kind.items()},
        p50_ms=latencies[len(latencies) // 2] * 1000,
        p99_ms=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        wrong=[o.detail for o in outcomes if o.verdict == "wrong"],
        panics=0,
        faults=dict(injector.counts),
        fault_log=fault_log,
        rewrites=0,
        gw_a_start=start_figures,
        gw_a_warm=warm_figures,
        gw_a_end=end_figures,
        documented_examples=random.Random(seed).sample(documented, min(5, len(documented))),
        seen_per_fault={k: dict(v) for k, v in seen_per_fault.items()},
        streamed=sum(1 for o in outcomes if o.detail.endswith("streamed with progress")),
        harness_errors=injector.errors,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=60)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--fault-log", type=Path, help="write every injected fault with its time here")
    parser.add_argument(
        "--sabotage", action="store_true", help="configure s0 with s1's credential: the oracle must report wrong answers"
    )
    args = parser.parse_args()
    # A SIGTERM (e.g. `timeout`) unwinds through run()'s cleanup instead of leaving the
    # upstreams and gateways running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="switchboard-chaos-") as tmp:
        report = run(args.duration, args.seed, Path(tmp), args.clients, args.sabotage)
    print(f"seed {args.seed}")
    print(report.text())
    if args.fault_log:
        args.fault_log.write_text("\n".join(report.fault_log) + "\n")
    sys.exit(1 if report.wrong or report.panics or report.harness_errors else 0)


if __name__ == "__main__":
    main()
