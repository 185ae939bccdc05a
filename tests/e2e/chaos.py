"""Chaos soak: two gateway replicas behind a round-robin balancer, seven upstream servers on three
upstream processes (six with a static credential each, one with tokens the gateway obtains from an
OAuth token endpoint, a fourth process), a mixed client load with an oracle, and faults injected
at random while it runs. Every answer is classified:

- correct: the answer the oracle expects (the right sum, the server's own credential seen by the
  upstream, exactly the key's servers in a listing, a refusal where the key has no access);
- documented: an error explained by a fault *of a kind that produces it*, *on the server the call
  went to* (`PRODUCES` below is the whole table): an unavailable upstream (502
  `upstream_unavailable`, JSON-RPC -32002) only while that server's upstream process is crashed,
  or the server answers 503 or garbage, or cuts its stream, or (s6) its token endpoint is down;
  a timeout (504 `upstream_timeout`, -32001) only while its upstream process is frozen or the
  server is made slow; an auth failure (`upstream_auth_failed`, -32003) only while the server no
  longer accepts the credential the gateway holds for it (`credential_revoked` on that server);
  a connection error only on a connection the balancer sent to a replica that is being killed.
  The error must name the server called. "In force" means at any time from `SETTLE_S` before
  the call started to its end, since a replica applies a config change within about half a
  second. A listing may leave a server out for longer: the gateway remembers a failed listing
  for `LISTING_FAILURE_MEMORY_S` (so a hung upstream costs listings its timeout once, not on
  every request), and the walk that failed may have taken the server timeout; the listing's
  `errors` entry for the server says which kind of failure it was;
- wrong: anything else (another server's data or credential, a tool outside the key's scope, an
  error no fault in force produces on that server, e.g. `upstream_auth_failed` during a crash or
  during another server's credential fault, which is how a credential sent to the wrong server
  shows up; a 5xx or a refusal no fault explains, a call past its budget).

`--sabotage` makes the system give wrong answers on purpose (`SABOTAGES`: a static credential
sent to another server, an OAuth credential sent to another server, another server's credential
accepted by an upstream that checks nothing) and schedules faults around them; the oracle must
call them wrong (tests/e2e/test_chaos_sabotage.py).

Run the long profile by hand (after `cargo build --workspace --bins`; CARGO_TARGET_DIR as for the
tests):  ~/.cache/switchboard/venv/bin/python tests/e2e/chaos.py --duration 1800
The short profile runs in the test command (tests/e2e/test_chaos_short.py).

Operator kill and failover are the cluster profile's (tests/k8s_e2e/test_chaos_operator.py, the
same load and oracle through soak()): here the gateways run on a config file.
"""

from __future__ import annotations

import argparse
import bisect
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
from collections import Counter, deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpcore
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402
    reserve_port,
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
    "credential_revoked",
    "token_endpoint_down",
    "gateway_kill",
    "invalid_config",
)
# The faults that are a change of one server's URL (its upstream's variant options), by kind.
# `credential_revoked` is a credential fault: the upstream stops accepting the credential the
# gateway holds for the server (rotated or revoked on the upstream's side before the gateway
# was given the new one).
REVOKED = "<revoked>"
VARIANTS = {
    "slow": "delay=1200",
    "status_5xx": "status=503",
    "garbage": "garbage",
    "stream_cut": "cut",
    "credential_revoked": REVOKED,
}

# What a client can see from each fault, on the calls the fault touches (the servers of its
# upstream process, its server, the OAuth server of its token endpoint, the connections sent to
# its replica). An error is documented only by a fault in force whose kind produces that class
# of error; anything the table does not list is wrong:
# - upstream_crash: the process is gone (connection refused, reset, a body broken off): the
#   gateway answers "unavailable". Never a timeout (a dead port refuses at once) nor an auth
#   failure (the restarted process checks the same credentials).
# - upstream_hang (SIGSTOP): the kernel still accepts connections, nothing answers: a timeout.
# - slow (1.2 s per answer, 2 s budget): nothing on an idle machine; a timeout on a loaded one.
# - status_5xx, garbage, stream_cut: the upstream's answer is not a JSON-RPC response, or is cut
#   off after the progress event: "unavailable".
# - credential_revoked: the upstream answers 401 to the credential the gateway sends (for s6 also
#   to the token the gateway renews once): an auth failure.
# - token_endpoint_down (s6 only): the gateway cannot renew its token; it keeps using the one in
#   hand until it expires, then answers "unavailable" ("token endpoint: unreachable"). Never an
#   auth failure: the gateway sends no token it could not obtain, and s6's upstream accepts
#   every token minted for its client.
# - gateway_kill: a connection error (or no answer at all while the replica restarts) on a
#   connection the balancer sent to that replica, never an HTTP answer.
# - invalid_config and the in-place rewrites of the same config: nothing (a broken file is
#   refused, the same content changes nothing); they are not fault windows.
# The cluster profile's operator_kill is not in the table: a failover must cost no call.
PRODUCES: dict[str, frozenset[str]] = {
    "upstream_crash": frozenset({"unavailable"}),
    "upstream_hang": frozenset({"timeout"}),
    "slow": frozenset({"timeout"}),
    "status_5xx": frozenset({"unavailable"}),
    "garbage": frozenset({"unavailable"}),
    "stream_cut": frozenset({"unavailable"}),
    "credential_revoked": frozenset({"auth"}),
    "token_endpoint_down": frozenset({"unavailable"}),
    "gateway_kill": frozenset({"connection"}),
}
# The class of an upstream error, by REST code (with the HTTP status the gateway answers it
# with) and by JSON-RPC code (docs/architecture.md, "Errors").
REST_ERRORS = {
    "upstream_timeout": ("timeout", 504),
    "upstream_unavailable": ("unavailable", 502),
    "upstream_auth_failed": ("auth", 502),
    "upstream_forbidden": ("auth", 502),
    "upstream_auth_required": ("auth", 401),
}
RPC_ERRORS = {-32001: "timeout", -32002: "unavailable", -32003: "auth"}

# The oracle's own check (`--sabotage`): each makes the system answer wrongly on purpose, and
# the oracle must say so. (server, whose credential the gateway sends it):
# - swap: s0 gets s1's static secret; s0's upstream refuses it (upstream_auth_failed on s0, at
#   all times, during faults on s0 and during credential faults on other servers too);
# - oauth: s2 gets s6's client credentials, i.e. s6's minted tokens go to s2's upstream (auth
#   failures on s2, and "unavailable" on s2 while s6's token endpoint is down);
# - leak: s4 gets s3's secret and its upstream checks nothing: the calls succeed, only the
#   oracle's check of what the upstream saw can tell.
SABOTAGES = {"swap": ("s0", "s1"), "oauth": ("s2", "s6"), "leak": ("s4", "s3")}
# Faults the sabotage run starts with, so that the sabotaged servers' wrong answers also happen
# while faults that cannot explain them are in force: a credential fault on another server, a
# fault on s0 itself that produces no auth failure, s6's token endpoint down (not s2's).
SABOTAGE_PLAN = (("credential_revoked", "s1"), ("slow", "s0"), ("token_endpoint_down", "idp"))


def sabotage_kinds(sabotage: bool | str | Iterable[str] | None) -> frozenset[str]:
    """`True` (or "all"): every kind; a comma-separated string or a list: those."""
    if not sabotage:
        return frozenset()
    if sabotage is True or sabotage == "all":
        return frozenset(SABOTAGES)
    kinds = frozenset(sabotage.split(",") if isinstance(sabotage, str) else sabotage)
    unknown = kinds - set(SABOTAGES)
    assert not unknown, f"unknown sabotage {sorted(unknown)} (kinds: {sorted(SABOTAGES)})"
    return kinds


# --------------------------------------------------------------------------------------------
# The round-robin balancer: every new connection goes to the next replica (clients here open a
# new connection per call, so consecutive calls, legacy sessions included, hop replicas).


class Balancer:
    """`names` name the replicas (default: their ports); `replica_of` says which one a client's
    connection (by its local port) was sent to, so the oracle blames a connection error only on
    a fault of that replica."""

    def __init__(self, backends: list[int], names: list[str] | None = None):
        self.backends = backends
        self.names = names or [str(p) for p in backends]
        self.turn = 0
        # client port -> the latest (accept time, replica) for it (ports are reused over a run)
        self.routes: dict[int, deque[tuple[float, str]]] = {}
        self.routes_lock = threading.Lock()
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
                client, (_, client_port) = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            i = self.turn % len(self.backends)
            self.turn += 1
            with self.routes_lock:
                self.routes.setdefault(client_port, deque(maxlen=4)).append((time.monotonic(), self.names[i]))
            threading.Thread(target=self._relay, args=(client, self.backends[i]), daemon=True).start()

    def replica_of(self, client_port: int, opened_at: float) -> str | None:
        """The replica the connection from `client_port` opened at `opened_at` went to: the
        route recorded for that port closest in time (within a second)."""
        with self.routes_lock:
            routes = list(self.routes.get(client_port, ()))
        near = [(abs(at - opened_at), name) for at, name in routes if abs(at - opened_at) < 1.0]
        return min(near)[1] if near else None

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
    """The faults a world has had, with their times (Client.explain says which explain a call)."""

    def __init__(self) -> None:
        self.faults: list[FaultWindow] = []
        self.lock = threading.Lock()

    def in_force(self, t0: float, t1: float, after: float = SETTLE_S) -> list[FaultWindow]:
        """Every fault, on any target, that overlaps the call or ended less than `after` before
        it started."""
        with self.lock:
            return [f for f in self.faults if f.start <= t1 and f.end >= t0 - after]


class World(FaultWindows):
    def __init__(self, workdir: Path, seed: int, sabotage: bool | str | Iterable[str] = False):
        self.workdir = workdir
        # The oracle's own check (SABOTAGES): the kinds in force for this world.
        self.sabotage = sabotage_kinds(sabotage)
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
        self.upstream_ports = [reserve_port() for _ in range(UPSTREAMS)]
        self.upstreams: list[Proc | None] = [None] * UPSTREAMS
        self.idp_port = reserve_port()
        self.idp: Proc | None = None
        self.gateway_ports = {"gw-a": reserve_port(), "gw-b": reserve_port()}
        self.gateways: dict[str, Proc] = {}
        self.config_path = workdir / "gateway.yaml"
        self.variants: dict[str, str] = {}  # server -> extra variant options in force
        super().__init__()
        self.write_lock = threading.Lock()
        self.write_config()
        self.balancer = Balancer(list(self.gateway_ports.values()), list(self.gateway_ports))
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

    def sabotaged(self, kind: str, server: str) -> str | None:
        """The server whose credential `server` is given by sabotage `kind`, if it is in force
        and concerns `server`."""
        victim, source = SABOTAGES[kind]
        return source if kind in self.sabotage and server == victim else None

    def server_url(self, server: str) -> str:
        check = "require-prefix" if server == OAUTH_SERVER else "require"
        required = self.credential(server)
        extra = self.variants.get(server)
        if extra == REVOKED:
            # (a credential the gateway does not have: for s6 no token minted for its client)
            required = required.replace("Bearer ", "Bearer revoked-", 1)
            extra = None
        options = f"name={server}"
        if not self.sabotaged("leak", server):
            options += f",{check}=authorization:{required.replace(' ', '%20')}"
        if server in SSE_SERVERS:
            options += ",sse"
        if extra:
            options += "," + extra
        return f"http://127.0.0.1:{self.upstream_ports[self.upstream_of(server)]}/v/{options}/mcp"

    def auth(self, server: str) -> dict:
        if server == OAUTH_SERVER or self.sabotaged("oauth", server):
            return {
                "type": "oauth2ClientCredentials",
                "tokenUrl": f"http://127.0.0.1:{self.idp_port}/oauth/token",
                "clientId": OAUTH_CLIENT,
                "clientSecret": f"secret-{OAUTH_CLIENT}",
            }
        source = self.sabotaged("swap", server) or self.sabotaged("leak", server) or server
        return {"type": "bearer", "secret": self.tokens[source]}

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
    """Injects faults one at a time: the `plan`'s (kind, target) first, then every kind once (in
    a random order, so that a short run sees each; not with `every_kind=False`), then at
    random; a pause of `PAUSE_S` between them, each held `HOLD_S`."""

    KINDS: tuple[str, ...] = FAULT_KINDS
    PAUSE_S = (0.5, 2.0)
    HOLD_S = (1.0, 4.0)

    def __init__(
        self,
        world: World,
        stop: threading.Event,
        log: list[str],
        plan: Iterable[tuple[str, str]] = (),
        every_kind: bool = True,
    ):
        super().__init__(daemon=True)
        self.world, self.stop_event, self.log = world, stop, log
        self.plan, self.every_kind = list(plan), every_kind
        self.rng = random.Random(world.rng.random())
        self.counts: Counter[str] = Counter()
        # A fault the harness could not carry out or end (e.g. a replica that did not restart):
        # reported, and the run fails, rather than a thread dying quietly.
        self.errors: list[str] = []
        # Set once the plan and (with `every_kind`) each kind have been injected: the soak lasts
        # until then.
        self.first_round = threading.Event()

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
        first = self.rng.sample(self.KINDS, len(self.KINDS)) if self.every_kind else []
        plan = list(self.plan)
        while not self.stop_event.wait(self.rng.uniform(*self.PAUSE_S)):
            if not plan and not first:
                self.first_round.set()
            kind, target = plan.pop(0) if plan else (first.pop() if first else self.rng.choice(self.KINDS), None)
            hold = self.rng.uniform(*self.HOLD_S)
            try:
                # (an injector of another world may not take a target)
                self.inject(kind, hold) if target is None else self.inject(kind, hold, target)
            except Exception as exc:  # noqa: BLE001 - reported in the run's result
                self.errors.append(f"{kind}: {str(exc)[:500]}")
                self.note(f"HARNESS ERROR in {kind}: {str(exc)[:200]}")
                return

    def inject(self, kind: str, hold: float, target: str | None = None) -> None:
        """One fault of `kind` on `target` (default: one chosen at random)."""
        w = self.world
        if kind in ("upstream_crash", "upstream_hang"):
            i = int(target.removeprefix("upstream-")) if target else self.rng.randrange(UPSTREAMS)
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
        elif kind in VARIANTS:
            # (a stream can only break off where there is one)
            pool = sorted(SSE_SERVERS) if kind == "stream_cut" else sorted(w.scope["all"])
            server = target or self.rng.choice(pool)
            assert server in pool, f"{kind} on {server}"
            window = self.open(kind, server)
            w.variants[server] = VARIANTS[kind]
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
    start: float = 0.0  # time.monotonic() when the call started, and ended
    end: float = 0.0


class OpenedConnections(httpcore.SyncBackend):
    """httpcore's network backend, noting the local port (and the time) of every connection it
    opens, so that the balancer can say which replica a failed connection was sent to."""

    def __init__(self) -> None:
        self.opened: list[tuple[int, float]] = []

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):  # noqa: ANN001, ANN201
        stream = super().connect_tcp(host, port, timeout, local_address, socket_options)
        self.opened.append((stream.get_extra_info("client_addr")[1], time.monotonic()))
        return stream


def same_server(named: Any, server: str) -> bool:
    """Whether an error's `server` (an id: `s3` from a file, `default/s3` from the operator)
    is `server`."""
    return isinstance(named, str) and named.rsplit("/", 1)[-1] == server


class Client(threading.Thread):
    def __init__(self, world: World, stop: threading.Event, out: list[Outcome], seed: int):
        super().__init__(daemon=True)
        self.world, self.stop_event, self.out = world, stop, out
        self.rng = random.Random(seed)
        self.progress_tokens = 0
        self.url = f"http://127.0.0.1:{world.balancer.port}"
        # No kept-alive connections: each call is a new connection, which the balancer sends to
        # the next replica. (httpx has no public hook for the network backend: it is set on the
        # transport's pool.)
        self.connections = OpenedConnections()
        transport = httpx.HTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
        assert isinstance(getattr(transport, "_pool", None), httpcore.ConnectionPool), "httpx changed its transport"
        transport._pool._network_backend = self.connections
        self.http = httpx.Client(timeout=CALL_BUDGET_S, transport=transport)

    def run(self) -> None:
        while not self.stop_event.is_set():
            kind = self.rng.choice(("rest_call", "mcp_modern", "mcp_legacy", "listing"))
            key = self.rng.choice(("all", "even"))
            server = self.rng.choice(sorted(self.world.scope["all"]))
            self.connections.opened.clear()
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
            self.out.append(Outcome(kind, verdict, f"{at} {kind} key={key} server={server}: {detail}", t1 - t0, t0, t1))

    # -- explanations

    def targets(self, server: str) -> set[str]:
        """What a fault can be on to touch calls to `server`: the server (a variant), its
        upstream process, and for the OAuth server its token endpoint."""
        own = {server, f"upstream-{self.world.upstream_of(server)}"}
        return own | {"idp"} if server == OAUTH_SERVER else own

    def explain(
        self, symptom: str, server: str, t0: float, what: str, *, targets: set[str] | None = None, after: float = SETTLE_S
    ) -> tuple[str, str]:
        """Documented if a fault in force on one of `targets` (default: the server's) is of a
        kind that produces `symptom`; else wrong, naming the faults in force that do not."""
        targets = self.targets(server) if targets is None else targets
        windows = self.world.in_force(t0, time.monotonic(), after)
        producing = [f for f in windows if f.target in targets and symptom in PRODUCES.get(f.kind, ())]
        if producing:
            # (of several, the one that overlaps the call and started last)
            fault = max(producing, key=lambda f: (f.end >= t0, f.start))
            return "documented", f"{what} ({fault.kind})"
        if not windows:
            return "wrong", f"{what} with no fault in force"
        listed = ", ".join(sorted({f"{f.kind} on {f.target}" for f in windows}))
        return "wrong", f"{what}, which no fault in force produces on {server} (in force: {listed})"

    def explain_error(self, symptom: str, server: str, t0: float, what: str, named: Any) -> tuple[str, str]:
        """An upstream error of class `symptom` that names server `named`."""
        if not same_server(named, server):
            return "wrong", f"{what} names server {named!r}, not {server}"
        return self.explain(symptom, server, t0, what)

    def explain_transport(self, exc: Exception, server: str, t0: float) -> tuple[str, str]:
        """A connection error is a fault of the replica the failed connection went to (the last
        one opened: each request opens its own)."""
        what = f"transport error {type(exc).__name__}"
        if not self.connections.opened:
            return "wrong", f"{what} before a connection was open"
        replica = self.world.balancer.replica_of(*self.connections.opened[-1])
        if replica is None:
            return "wrong", f"{what} on a connection the balancer has no route for"
        return self.explain("connection", server, t0, f"{what} via {replica}", targets={replica})

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
        try:
            error = r.json().get("error") or {}
        except ValueError:
            error = {}
        code = error.get("code") if isinstance(error, dict) else None
        symptom, status = REST_ERRORS.get(code, (None, None))
        if symptom is None or r.status_code != status:
            return "wrong", f"HTTP {r.status_code} {r.text[:200]}"
        return self.explain_error(symptom, server, t0, f"HTTP {r.status_code} {code}", error.get("server"))

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
        # An upstream's failure rides on HTTP 200 as a JSON-RPC error; no fault makes the
        # gateway answer an in-scope call with another status, or without a response.
        if reply.status != 200:
            return "wrong", f"HTTP {reply.status} {reply.raw[:200]!r}"
        if message is None:
            return "wrong", f"no JSON-RPC response in the answer: {reply.raw[:200]!r}"
        if "error" in message:
            error = message["error"] if isinstance(message["error"], dict) else {}
            code = error.get("code")
            symptom = RPC_ERRORS.get(code)
            if symptom is None:
                return "wrong", f"JSON-RPC error {str(error)[:200]}"
            return self.explain_error(symptom, server, t0, f"JSON-RPC {code}", (error.get("data") or {}).get("server"))
        result = message.get("result") or {}
        if result.get("isError"):
            # (request_headers never fails: a tool error here is no upstream's doing)
            return "wrong", f"tool error {json.dumps(result)[:200]}"
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
            # (a server that fails is left out of a listing, with an entry in its `errors`)
            return "wrong", f"listing HTTP {r.status_code} {r.text[:200]}"
        body = r.json()
        names = [t if isinstance(t, str) else t["name"] for t in body.get("tools", [])]
        servers = {n.split("__", 1)[0] for n in names}
        if outside := servers - self.world.scope[key]:
            return "wrong", f"listing holds tools of {sorted(outside)} outside the key's scope"
        errors: dict[str, dict] = {}
        for e in body.get("errors") or []:
            named = str(e.get("server")).rsplit("/", 1)[-1]
            if named not in self.world.scope[key]:
                return "wrong", f"listing names the failure of {named}, outside the key's scope: {e}"
            errors[named] = e
        missing = self.world.scope[key] - servers
        if not missing:
            return "correct", "listing"
        faults, kinds = set(), set()
        for server in sorted(missing):
            error = errors.get(server)
            if error is None:
                return "wrong", f"listing without {server} and no error for it"
            symptom = REST_ERRORS.get(error.get("kind"), (None,))[0]
            if symptom is None:
                return "wrong", f"listing without {server}: {error}"
            # (the gateway never remembers an auth failure: the next listing asks again)
            memory = SETTLE_S if symptom == "auth" else LISTING_FAILURE_MEMORY_S
            verdict, detail = self.explain(symptom, server, t0, f"listing without {server} ({error['kind']})", after=memory)
            if verdict != "documented":
                return verdict, detail
            faults.add(documented_symptom(detail)[0])
            kinds.add(error["kind"])
        return "documented", f"listing without {sorted(missing)} [{'+'.join(sorted(kinds))}] ({'+'.join(sorted(faults))})"


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
    # streamed answers checked, per MCP era ("mcp_modern", "mcp_legacy")
    streamed_by_era: dict[str, int] = dataclasses.field(default_factory=dict)
    # whether the plan and every fault kind were injected before the soak ended
    first_round_done: bool = False
    # fault windows that no call of the load overlapped ("<kind> on <target>")
    faults_without_calls: list[str] = dataclasses.field(default_factory=list)

    def text(self) -> str:
        lines = [
            f"chaos soak: {self.duration_s:.0f}s, {self.calls} calls, "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.classes.items())),
            f"  per kind: {json.dumps(self.by_kind, sort_keys=True)}",
            f"  streamed answers (SSE servers, progress event relayed before the result): {self.streamed}"
            f" {json.dumps(self.streamed_by_era, sort_keys=True)}",
            f"  latency p50 {self.p50_ms:.1f} ms, p99 {self.p99_ms:.1f} ms (budget {CALL_BUDGET_S:.0f} s)",
            f"  faults injected: {json.dumps(dict(sorted(self.faults.items())))}"
            + (f"; in-place config rewrites: {self.rewrites}" if self.rewrites else "")
            + ("" if self.first_round_done else "; the first round of faults did not finish")
            + (f"; faults no call overlapped: {self.faults_without_calls}" if self.faults_without_calls else ""),
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
        # "listing without ['s1', 's3'] [upstream_unavailable]": the servers vary, not the kind
        kinds = symptom.rsplit(" [", 1)[1].rstrip("]") if " [" in symptom else ""
        symptom = f"listing without the server ({kinds})" if kinds else "listing without the server"
    return fault, symptom


def run(
    duration: float, seed: int, workdir: Path, clients: int = 4, sabotage: bool | str | Iterable[str] = False
) -> Report:
    """The soak on config files: the world above, its faults, and in-place rewrites every second.
    With `sabotage` (SABOTAGES), the faults are SABOTAGE_PLAN, then at random."""
    world = World(workdir, seed, sabotage)
    plan = SABOTAGE_PLAN if world.sabotage else ()
    try:
        stop = threading.Event()
        churn = Churn(world, stop)
        report = soak(
            world,
            lambda log: Injector(world, stop, log, plan, every_kind=not plan),
            stop,
            duration,
            seed,
            clients,
            measured=(world.gateways["gw-a"].popen.pid, f"http://{world.gateways['gw-a'].internal_addr}"),
            background=[churn],
        )
        report.rewrites = churn.rewrites
    finally:
        world.stop()
    report.panics = count_panics(world.logdir.glob("gw-*.log"))
    return report


def count_panics(logs) -> int:
    return sum(p.read_text(errors="replace").count("panicked") for p in logs)


class Calls:
    """The calls of a run, indexed to say whether one overlaps a fault window (ended after it
    started and started before it ended) in O(log n): a long run has hundreds of thousands."""

    def __init__(self, outcomes: list[Outcome]):
        by_end = sorted((o.end, o.start) for o in outcomes)
        self.ends = [end for end, _ in by_end]
        # the earliest start among the calls that ended at or after each one
        self.earliest, low = [0.0] * len(by_end), float("inf")
        for i in range(len(by_end) - 1, -1, -1):
            low = min(low, by_end[i][1])
            self.earliest[i] = low

    def overlap(self, window: FaultWindow) -> bool:
        i = bisect.bisect_left(self.ends, window.start)
        return i < len(self.ends) and self.earliest[i] <= window.end


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
    """Runs the load, the injector (`make_injector(fault_log)`, a thread with `counts`, `errors`
    and `first_round`) and `background` threads on `world` for `duration`, and on until the
    injector's first round (its plan, then every kind once) is done (at most `duration` more),
    then sets `stop` (which the injector and the background threads watch), and classifies every
    answer. `world` has `World`'s interface (balancer, keys, scope, credential, upstream_of,
    faults, in_force).
    Resources are figures of `measured` (pid, URL), a replica never killed.
    The caller stops the world, then counts panics and rewrites."""
    outcomes: list[Outcome] = []
    fault_log: list[str] = []
    start_figures = proc_figures(*measured)
    workers = [Client(world, stop, outcomes, seed + i) for i in range(clients)]
    injector = make_injector(fault_log)
    started = time.monotonic()
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
        # A slow machine runs longer rather than with fewer kinds of fault.
        deadline = time.monotonic() + duration
        while not injector.first_round.is_set() and injector.is_alive() and time.monotonic() < deadline:
            injector.first_round.wait(0.5)
        first_round_done = injector.first_round.is_set()
        ran = time.monotonic() - started
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
    streamed = [o for o in outcomes if o.detail.endswith("streamed with progress")]
    with world.lock:
        windows = list(world.faults)
    calls = Calls(outcomes)
    unloaded = [f"{f.kind} on {f.target}" for f in windows if not calls.overlap(f)]
    return Report(
        duration_s=ran,
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
        streamed=len(streamed),
        harness_errors=injector.errors,
        streamed_by_era=dict(Counter(o.kind for o in streamed)),
        first_round_done=first_round_done,
        faults_without_calls=unloaded,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=60)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--fault-log", type=Path, help="write every injected fault with its time here")
    parser.add_argument(
        "--sabotage",
        nargs="?",
        const="all",
        metavar="KIND,...",
        help=f"answer wrongly on purpose ({', '.join(SABOTAGES)}; default all): the oracle must report wrong answers",
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
