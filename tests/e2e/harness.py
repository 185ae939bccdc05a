"""Pieces the end-to-end tests are built from: processes, config files, a round-robin balancer,
and MCP clients (the official SDK one and a raw JSON-RPC one for exact wire checks).

Every wait here has a bound; every process started here is killed at teardown (see `ProcessGroup`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import http.cookiejar
import itertools
import json
import os
import random
import re
import secrets as _secrets
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml


@functools.cache
def _default_tls(library) -> ssl.SSLContext:
    """What `library` (httpx, or httpx2, the MCP SDK's fork of it with its own copy of the
    function) builds for a client with `verify=True`: the system's CAs, once per process."""
    return library.create_ssl_context()


def client_tls() -> ssl.SSLContext:
    """The one TLS context of this process's default httpx clients (`share_client_tls`)."""
    return _default_tls(httpx)


def share_client_tls() -> None:
    """Makes every httpx and httpx2 client of this process that is built with the default TLS
    settings (`verify=True`, no client certificate) use one context per library, built once,
    instead of building its own: the test modules and the MCP SDK make a client for almost every
    HTTP call (`httpx.get`, a poll of a process coming up, an SDK session), and each built context
    reads and parses the whole CA bundle (about 30-40 ms of CPU; about 50 CPU-seconds of the e2e
    step, measured), even for the plain-HTTP loopback most tests call. Clients given their own
    `verify` or `cert` are untouched; a context is safe to share between clients and threads. The
    conftest of each suite calls this once.

    httpx offers no public default for this: its transports call `create_ssl_context` from
    their module (`httpx._transports.default`, the same in httpx2), which is what is replaced.
    If a new httpx moves it, this fails here, naming the module, instead of quietly costing the
    CPU again."""
    import httpx2

    for library in (httpx, httpx2):
        transports = library._transports.default
        build = getattr(transports, "create_ssl_context", None)
        if build is None:
            raise AssertionError(f"{transports.__name__} has no create_ssl_context any more "
                                 f"({library.__name__} {library.__version__}): share_client_tls needs a new hook")
        if getattr(build, "shares_client_tls", False):
            continue

        def create_ssl_context(verify=True, cert=None, trust_env=True, *, _build=build, _library=library):
            if verify is True and cert is None and trust_env:
                return _default_tls(_library)
            return _build(verify=verify, cert=cert, trust_env=trust_env)

        create_ssl_context.shares_client_tls = True
        transports.create_ssl_context = create_ssl_context


REPO_ROOT = Path(__file__).resolve().parents[2]
E2E_DIR = Path(__file__).resolve().parent
PYTHON_UPSTREAM = E2E_DIR / "upstreams" / "python_upstream.py"

GATEWAY_BIN = "switchboard-gateway"
EXAMPLE_UPSTREAM_BIN = "switchboard-example-upstream"

LEGACY_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
ERAS = ("legacy", MODERN_VERSION)

# JSON-RPC / gateway error codes the tests assert (docs/architecture.md, "Errors").
INVALID_PARAMS = -32602
UPSTREAM_TIMEOUT = -32001
UPSTREAM_UNAVAILABLE = -32002
LISTING_ERRORS_META = "switchboard.dev/listingErrors"
LISTING_WARNINGS_META = "switchboard.dev/listingWarnings"

READY_RE = re.compile(r"listening on http://(\S+)")
# The gateway's internal listener (`/metrics`, probes, the replica hand-off), printed before the
# ready line. Every gateway a test starts picks a free port for it (the default is fixed).
INTERNAL_RE = re.compile(r"switchboard-gateway internal on http://(\S+)")
os.environ.setdefault("SWITCHBOARD_INTERNAL_LISTEN", "127.0.0.1:0")

# Everything the tests put in a config as a secret, and every gateway log file of this run; the
# last test of the run greps the latter for the former (acceptance item 8). The test command runs
# the tests in parallel workers, then that last test in a pytest of its own: with
# SWITCHBOARD_E2E_RECORD=DIR every process also appends what it adds to DIR/<pid>.secrets and
# DIR/<pid>.logs, and `recorded_secrets()` / `recorded_logs()` read back the whole run's.
RECORD_DIR = Path(os.environ["SWITCHBOARD_E2E_RECORD"]) if os.environ.get("SWITCHBOARD_E2E_RECORD") else None


def _record(kind: str, values: Iterable[object]) -> None:
    if RECORD_DIR is not None:
        RECORD_DIR.mkdir(parents=True, exist_ok=True)
        with (RECORD_DIR / f"{os.getpid()}.{kind}").open("a", encoding="utf-8") as f:
            f.writelines(f"{v}\n" for v in values)


class _RecordedSet(set):
    def add(self, value: str) -> None:
        if value not in self:
            _record("secrets", [value])
        super().add(value)

    def update(self, *others: Iterable[str]) -> None:
        for other in others:
            for value in other:
                self.add(value)


class _RecordedList(list):
    def append(self, value: Path) -> None:
        _record("logs", [value])
        super().append(value)

    def extend(self, values: Iterable[Path]) -> None:
        for value in values:
            self.append(value)


SECRETS_USED: set[str] = _RecordedSet()
GATEWAY_LOGS: list[Path] = _RecordedList()


def _read_records(kind: str) -> list[str]:
    if RECORD_DIR is None or not RECORD_DIR.is_dir():
        return []
    return [line for f in sorted(RECORD_DIR.glob(f"*.{kind}")) for line in f.read_text("utf-8").splitlines() if line]


def recorded_secrets() -> set[str]:
    """Every secret of the run: this process's and, with SWITCHBOARD_E2E_RECORD, every other's."""
    return set(SECRETS_USED) | set(_read_records("secrets"))


def recorded_logs() -> list[Path]:
    """Every gateway log file of the run (see recorded_secrets), each once, in order."""
    return list(dict.fromkeys([*GATEWAY_LOGS, *map(Path, _read_records("logs"))]))


def new_secret(label: str) -> str:
    """A distinctive secret value, remembered for the end-of-run log grep."""
    value = f"sbx-{label}-{_secrets.token_hex(12)}"
    SECRETS_USED.add(value)
    return value


def target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target"))


def bin_dir() -> Path:
    """Where the workspace's debug binaries are: SWITCHBOARD_BIN_DIR (tests/build-env.bash sets it
    for the test command's static build), else a plain `cargo build`'s CARGO_TARGET_DIR/debug."""
    explicit = os.environ.get("SWITCHBOARD_BIN_DIR")
    return Path(explicit) if explicit else target_dir() / "debug"


def binary(name: str) -> Path:
    """A debug binary of the workspace; a missing one fails the test (never skips it)."""
    path = bin_dir() / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"{path} is missing: run `tests/run-all.sh build` (or `cargo build --workspace --bins` "
            "with SWITCHBOARD_BIN_DIR unset) first",
            pytrace=False,
        )
    return path


# Ports a test must know before its process starts (a process restarted on the same port, peers
# that name each other, tools that cannot report what they bound) are reserved, never picked and
# released: a reservation is an exclusive lock on `<cache>/ports/<port>.lock`, held by this
# process until it exits, so no other reservation of any test process on this machine (pytest
# workers side by side, the Kubernetes suite's two passes, tests/k8s/cluster.sh) can hand the
# same port out while it is in use. Ports come from below the kernel's ephemeral range (32768+),
# so no outgoing connection takes one while the process that listens on it is restarted.
# Everything else binds port 0 and reads its address back (gateways, upstreams, bridges).
PORT_LOCKS = Path(os.environ.get("SWITCHBOARD_CACHE", Path.home() / ".cache" / "switchboard")) / "ports"
PORT_RANGE = (20000, 32000)
_reserved: dict[int, Any] = {}


def reserve_port() -> int:
    """A loopback port reserved for this process (see PORT_LOCKS): free when reserved, and never
    handed to another reservation while this process lives."""
    import fcntl

    PORT_LOCKS.mkdir(parents=True, exist_ok=True)
    for _ in range(500):
        port = random.randrange(*PORT_RANGE)
        if port in _reserved:
            continue
        lock = (PORT_LOCKS / f"{port}.lock").open("w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                lock.close()  # someone outside the reservations listens there
                continue
        _reserved[port] = lock
        return port
    raise AssertionError(f"no free loopback port to reserve in {PORT_RANGE[0]}-{PORT_RANGE[1] - 1}")


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.1, what: str = "condition") -> Any:
    """Polls `predicate` until it returns something truthy, at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - keep polling, report the last failure
            last_exc = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_exc!r})" if last_exc else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")
        time.sleep(interval)


# --------------------------------------------------------------------------------------------
# Processes


class Proc:
    """One child process; stdout is teed to a file and scanned for the ready line, stderr goes
    to a file. `addr` is the `host:port` from `listening on http://ADDR`."""

    def __init__(self, name: str, argv: list[str], logdir: Path, env: dict[str, str] | None = None):
        self.name = name
        self.argv = [str(a) for a in argv]
        logdir.mkdir(parents=True, exist_ok=True)
        self.stdout_path = _unique(logdir / f"{name}.stdout.log")
        self.stderr_path = _unique(logdir / f"{name}.stderr.log")
        self.addr: str | None = None
        self.internal_addr: str | None = None
        self._ready = threading.Event()
        self._stdout_file = open(self.stdout_path, "wb")  # noqa: SIM115 - closed in stop()
        self._stderr_file = open(self.stderr_path, "wb")  # noqa: SIM115
        full_env = dict(os.environ)
        full_env.setdefault("RUST_BACKTRACE", "1")
        full_env.update(env or {})
        self.popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr_file,
            env=full_env,
            cwd=REPO_ROOT,
            start_new_session=True,  # own process group: teardown kills children too
        )
        self._reader = threading.Thread(target=self._read_stdout, name=f"{name}-stdout", daemon=True)
        self._reader.start()

    def _read_stdout(self) -> None:
        assert self.popen.stdout is not None
        for line in iter(self.popen.stdout.readline, b""):
            self._stdout_file.write(line)
            self._stdout_file.flush()
            if not self._ready.is_set() and self._parse_ready(line.decode("utf-8", "replace")):
                self._ready.set()
        self._ready.set()  # EOF: wake a waiter; it sees addr is None

    def _parse_ready(self, line: str) -> bool:
        """Whether `line` is the ready line; records the address it announces."""
        internal = INTERNAL_RE.search(line)
        if internal:
            self.internal_addr = internal.group(1).rstrip("/")
        m = READY_RE.search(line)
        if m:
            self.addr = m.group(1).rstrip("/")
        return m is not None

    def wait_ready(self, timeout: float = 20.0) -> str:
        if not self._ready.wait(timeout):
            self.stop()
            raise AssertionError(
                f"{self.name} printed no 'listening on http://ADDR' line within {timeout}s\n{self.describe()}"
            )
        if self.addr is None:
            self.stop()
            raise AssertionError(f"{self.name} exited before it was ready\n{self.describe()}")
        return self.addr

    @property
    def url(self) -> str:
        assert self.addr, f"{self.name} is not ready"
        return f"http://{self.addr}"

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.popen.send_signal(sig)

    def stop(self, grace: float = 5.0) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(grace)
        self._reader.join(grace)
        for f in (self._stdout_file, self._stderr_file):
            if not f.closed:
                f.close()

    def wait(self, timeout: float) -> int:
        """Waits for the process to exit and for everything it wrote to stdout to reach the log
        file (the copying thread drains the pipe after the exit); returns the exit code."""
        code = self.popen.wait(timeout)
        self._reader.join(timeout)
        return code

    def log_text(self) -> str:
        """Everything the process wrote so far, stdout then stderr."""
        if self.popen.poll() is not None:
            self._reader.join(10)  # an exited process's last lines may still be in the pipe
        out = []
        for p in (self.stdout_path, self.stderr_path):
            with contextlib.suppress(FileNotFoundError):
                out.append(p.read_text("utf-8", "replace"))
        return "\n".join(out)

    def describe(self, tail: int = 4000) -> str:
        text = self.log_text()
        return (
            f"command: {' '.join(self.argv)}\nexit code: {self.popen.poll()}\n"
            f"logs ({self.stdout_path.parent}):\n{text[-tail:]}"
        )


def _unique(path: Path) -> Path:
    if not path.exists():
        return path
    for i in itertools.count(2):
        candidate = path.with_name(f"{path.stem.rsplit('.', 1)[0]}-{i}.{path.name.split('.', 1)[1]}")
        if not candidate.exists():
            return candidate
    raise AssertionError("unreachable")


class ProcessGroup:
    """Owns the processes of one fixture scope and stops all of them at teardown."""

    def __init__(self, logdir: Path):
        self.logdir = logdir
        self.procs: list[Proc] = []

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None, ready_timeout: float = 20.0) -> Proc:
        proc = Proc(name, argv, self.logdir, env)
        self.procs.append(proc)
        proc.wait_ready(ready_timeout)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


# --------------------------------------------------------------------------------------------
# Upstreams


@dataclass
class Upstream:
    proc: Proc
    kind: str  # "python" or "rust"

    @property
    def base(self) -> str:
        return self.proc.url

    @property
    def mcp_url(self) -> str:
        return f"{self.base}/mcp"

    def variant_url(self, variant: str) -> str:
        """The Rust example upstream's fault variants live under /v/<variant>/mcp."""
        assert self.kind == "rust", "variants are a feature of the Rust example upstream"
        return f"{self.base}/v/{variant}/mcp"

    def stats(self) -> dict:
        """`GET /_stats`: {"requests", "by_method", "by_path", ...} counting every MCP POST."""
        r = httpx.get(f"{self.base}/_stats", timeout=5)
        r.raise_for_status()
        return r.json()

    def reset(self) -> None:
        httpx.post(f"{self.base}/_reset", timeout=5).raise_for_status()

    def release(self, gate: str) -> None:
        """Python upstream only: opens `gate`, at which its `progress` tool holds its answer."""
        assert self.kind == "python", "gates are a feature of the Python upstream"
        httpx.post(f"{self.base}/_release", json={"gate": gate}, timeout=5).raise_for_status()

    def recent_requests(self) -> list[dict]:
        """Rust example upstream only: `GET /_requests`, the last POSTs with their headers."""
        assert self.kind == "rust"
        r = httpx.get(f"{self.base}/_requests", timeout=5)
        r.raise_for_status()
        return r.json()


def start_python_upstream(
    group: ProcessGroup,
    name: str = "py",
    *,
    stateless: bool = False,
    json_response: bool = False,
    legacy_only: bool = False,
    instructions: str | None = None,
    resumable: int | None = None,
    changing: bool = False,
    apps: bool = False,
) -> Upstream:
    """The Python SDK upstream. `legacy_only` refuses the 2026-07-28 form like a legacy-only
    server (so the gateway speaks the legacy revision to it); `instructions` are its
    initialize / server/discover instructions; `resumable` (milliseconds) gives it an event store
    and that `retry:`, and the stream-closing tool `poll`; `apps` serves its MCP App
    (show_weather, app-only refresh_weather, ui://weather/view.html); `changing` adds its
    `withdraw` tool (a tool or prompt removed and the change announced)."""
    argv = [sys.executable, str(PYTHON_UPSTREAM), "--port", "0", "--name", name]
    if stateless:
        argv.append("--stateless")
    if json_response:
        argv.append("--json")
    if legacy_only:
        argv.append("--legacy-only")
    if instructions is not None:
        argv += ["--instructions", instructions]
    if resumable is not None:
        argv += ["--resumable", str(resumable)]
    if changing:
        argv.append("--changing")
    if apps:
        argv.append("--apps")
    return Upstream(group.start(f"upstream-{name}", argv, ready_timeout=30), "python")


def start_rust_upstream(group: ProcessGroup, name: str = "ex") -> Upstream:
    argv = [binary(EXAMPLE_UPSTREAM_BIN), "--listen", "127.0.0.1:0"]
    return Upstream(group.start(f"upstream-{name}", argv), "rust")


# --------------------------------------------------------------------------------------------
# Gateway config and processes


def collect_secrets(config: dict) -> set[str]:
    """Every literal secret value in a gateway config dict (inline, `{value: ..}`)."""
    found: set[str] = set()

    def secret_value(v: Any) -> None:
        if isinstance(v, str):
            found.add(v)
        elif isinstance(v, dict) and isinstance(v.get("value"), str):
            found.add(v["value"])

    gw = config.get("gateway") or {}
    if "sessionKey" in gw:
        secret_value(gw["sessionKey"])
    for server in config.get("servers") or []:
        auth = server.get("auth") or {}
        if "secret" in auth:
            secret_value(auth["secret"])
        for h in (server.get("headers") or {}).get("static") or []:
            secret_value(h.get("value"))
    for key in config.get("keys") or []:
        if "secret" in key:
            secret_value(key["secret"])
    for model in config.get("models") or []:
        if "apiKey" in model:
            secret_value(model["apiKey"])
    return {s for s in found if s}


def write_config(path: Path, config: dict, *, atomic: bool = True) -> None:
    """Writes a gateway config (the snapshot schema, camelCase YAML) and remembers its secrets."""
    SECRETS_USED.update(collect_secrets(config))
    text = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    write_text(path, text, atomic=atomic)


def write_text(path: Path, text: str, *, atomic: bool = True) -> None:
    if atomic:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    else:
        path.write_text(text)


class Gateway:
    def __init__(self, proc: Proc, config_path: Path):
        self.proc = proc
        self.config_path = config_path

    @property
    def url(self) -> str:
        return self.proc.url

    @property
    def internal_url(self) -> str:
        """The internal listener: `/metrics`, `/healthz`, `/readyz`, the replica hand-off."""
        assert self.proc.internal_addr, f"{self.proc.name} printed no internal listener line"
        return f"http://{self.proc.internal_addr}"

    def mcp_url(self, prefix: str | None = None) -> str:
        return f"{self.url}/mcp" + (f"/{prefix}" if prefix else "")

    def write_config(self, config: dict, *, atomic: bool = True) -> None:
        write_config(self.config_path, config, atomic=atomic)

    def snapshot_applies(self) -> int:
        """How many snapshots (config versions) this gateway has applied: its /metrics,
        `switchboard_gateway_snapshot_applies_total`."""
        text = httpx.get(f"{self.internal_url}/metrics", timeout=5).text
        for line in text.splitlines():
            if line.startswith("switchboard_gateway_snapshot_applies_total "):
                return int(float(line.split()[1]))
        raise AssertionError("no switchboard_gateway_snapshot_applies_total in /metrics")

    def write_config_applied(self, config: dict, *, timeout: float = 15.0) -> None:
        """Writes a changed `config` and waits until the gateway has applied it (its count of
        applied snapshots grew; an unchanged or invalid file is never applied, so this fails)."""
        before = self.snapshot_applies()
        self.write_config(config)
        wait_until(lambda: self.snapshot_applies() > before, timeout, interval=0.05, what="the gateway to apply the new config")

    def logs(self) -> str:
        """The gateway's log (stderr), from its start. Only the log: the audit records go to
        stdout, and a slice `logs()[offset:]` must not shift as they are written."""
        with contextlib.suppress(FileNotFoundError):
            return self.proc.stderr_path.read_text("utf-8", "replace")
        return ""

    def stop(self) -> None:
        self.proc.stop()


class GatewayFactory:
    """Starts gateway processes (`--listen 127.0.0.1:0`), each with its own config file."""

    def __init__(self, group: ProcessGroup, workdir: Path):
        self.group = group
        self.workdir = workdir
        self.count = 0

    def config_path(self, name: str) -> Path:
        return self.workdir / f"{name}.yaml"

    def start(
        self,
        config: dict | None = None,
        *,
        name: str | None = None,
        config_path: Path | None = None,
        env: dict[str, str] | None = None,
        log_format: str | None = None,
        ready_timeout: float = 20.0,
    ) -> Gateway:
        """Starts one gateway. Give `config` (written to a fresh file) or an existing `config_path`
        (several gateways can share one file)."""
        self.count += 1
        name = name or f"gateway{self.count}"
        if config_path is None:
            assert config is not None
            config_path = self.config_path(name)
            write_config(config_path, config)
        argv = [binary(GATEWAY_BIN), "--config", config_path, "--listen", "127.0.0.1:0"]
        if log_format:
            argv += ["--log-format", log_format]
        proc = Proc(name, argv, self.group.logdir, env)
        self.group.procs.append(proc)
        GATEWAY_LOGS.extend([proc.stdout_path, proc.stderr_path])
        proc.wait_ready(ready_timeout)
        return Gateway(proc, config_path)


def server(name: str, url: str, **extra: Any) -> dict:
    """A `servers[]` entry."""
    return {"name": name, "url": url, **extra}


def key(name: str, secret: str, servers: Iterable[str] = (), **extra: Any) -> dict:
    """A `keys[]` entry with an inline secret."""
    return {"name": name, "secret": secret, "servers": list(servers), **extra}


def gateway_config(servers: list[dict], keys: list[dict], **gateway: Any) -> dict:
    settings = {"sessionKey": new_secret("session-key"), **gateway}
    return {"gateway": settings, "servers": servers, "keys": keys}


# --------------------------------------------------------------------------------------------
# Raw JSON-RPC client over Streamable HTTP, both eras


@dataclass
class Reply:
    """One HTTP exchange: the status, headers, and the JSON-RPC messages of the body (one for a
    JSON body; every `data:` event for SSE, in order)."""

    status: int
    headers: httpx.Headers
    messages: list[Any]
    elapsed: float
    raw: bytes = b""

    @property
    def message(self) -> dict:
        """The JSON-RPC response (the last message carrying an `id` and a result or error)."""
        for m in reversed(self.messages):
            if isinstance(m, dict) and ("result" in m or "error" in m):
                return m
        raise AssertionError(f"no JSON-RPC response in HTTP {self.status} body: {self.raw[:2000]!r}")

    @property
    def result(self) -> dict:
        m = self.message
        assert "result" in m, f"expected a result, got {json.dumps(m)[:2000]}"
        return m["result"]

    @property
    def error(self) -> dict:
        m = self.message
        assert "error" in m, f"expected a JSON-RPC error, got {json.dumps(m)[:2000]}"
        return m["error"]

    def json(self) -> Any:
        return json.loads(self.raw)


def parse_body(content_type: str, raw: bytes) -> list[Any]:
    if not raw.strip():
        return []
    if content_type.startswith("text/event-stream"):
        return [json.loads(data) for data in sse_data(raw.decode("utf-8"))]
    return [json.loads(raw)]


def sse_data(text: str) -> list[str]:
    """The `data` of each SSE event, in order (comments and empty events skipped: an event whose
    data is empty, such as a priming event's `id` with `data:`, is not dispatched, as the SSE
    standard says)."""
    events: list[str] = []
    data: list[str] = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if line == "":
            if data and "\n".join(data):
                events.append("\n".join(data))
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data and "\n".join(data):
        events.append("\n".join(data))
    return events


def encode_header_value(value: str) -> str:
    """The 2026-07-28 rule for Mcp-Name and friends: non-ASCII, control characters or edge
    whitespace go as =?base64?...?=."""
    plain = value.isascii() and value.isprintable() and value == value.strip()
    if plain and not (value.startswith("=?base64?") and value.endswith("?=")):
        return value
    return "=?base64?" + base64.b64encode(value.encode()).decode() + "?="


class RawMcp:
    """Speaks MCP JSON-RPC over HTTP by hand, so tests see statuses, headers and `_meta` exactly.

    era "legacy": `initialize` (protocol 2025-11-25) on first use, then the sealed
    `Mcp-Session-Id` on every request. era "2026-07-28": every request carries the per-request
    `_meta` envelope and the `MCP-Protocol-Version` / `Mcp-Method` / `Mcp-Name` headers.
    """

    def __init__(
        self,
        url: str,
        key: str | None,
        era: str,
        *,
        headers: dict[str, str] | None = None,
        timeout: float = 15.0,
        client: httpx.Client | None = None,
    ):
        assert era in ERAS, era
        self.url = url
        self.era = era
        self.session_id: str | None = None
        self.init_result: dict | None = None
        self._ids = itertools.count(1)
        self.headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if key is not None:
            self.headers["Authorization"] = f"Bearer {key}"
        self.headers.update(headers or {})
        self._own_client = client is None
        self.client = client or httpx.Client(timeout=timeout)

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    def __enter__(self) -> RawMcp:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- low level

    def post(self, body: Any, headers: dict[str, str] | None = None) -> Reply:
        h = dict(self.headers)
        h.update(headers or {})
        start = time.monotonic()
        r = self.client.post(self.url, content=json.dumps(body).encode(), headers=h)
        elapsed = time.monotonic() - start
        try:
            messages = parse_body(r.headers.get("content-type", ""), r.content)
        except ValueError:
            messages = []
        return Reply(r.status_code, r.headers, messages, elapsed, r.content)

    def envelope_headers(self, method: str, params: dict | None) -> dict[str, str]:
        h = {"MCP-Protocol-Version": MODERN_VERSION, "Mcp-Method": method}
        params = params or {}
        if method in ("tools/call", "prompts/get") and "name" in params:
            h["Mcp-Name"] = encode_header_value(str(params["name"]))
        elif method == "resources/read" and "uri" in params:
            h["Mcp-Name"] = encode_header_value(str(params["uri"]))
        elif method in ("tasks/get", "tasks/update", "tasks/cancel") and "taskId" in params:
            h["Mcp-Name"] = encode_header_value(str(params["taskId"]))
        return h

    def request(self, method: str, params: dict | None = None, headers: dict[str, str] | None = None) -> Reply:
        """Sends one request in this client's era (initializing a legacy session first)."""
        params = dict(params or {})
        h: dict[str, str] = {}
        if self.era == MODERN_VERSION:
            meta = dict(params.get("_meta") or {})
            meta.setdefault("io.modelcontextprotocol/protocolVersion", MODERN_VERSION)
            meta.setdefault("io.modelcontextprotocol/clientCapabilities", {})
            meta.setdefault("io.modelcontextprotocol/clientInfo", {"name": "switchboard-e2e", "version": "0"})
            params["_meta"] = meta
            h.update(self.envelope_headers(method, params))
        else:
            if self.session_id is None:
                self.initialize()
            h["MCP-Protocol-Version"] = LEGACY_VERSION
            h["Mcp-Session-Id"] = self.session_id or ""
        h.update(headers or {})
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        return self.post(body, h)

    def initialize(self, protocol_version: str = LEGACY_VERSION) -> Reply:
        assert self.era == "legacy"
        body = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": "initialize",
            "params": {
                "protocolVersion": protocol_version,
                "capabilities": {},
                "clientInfo": {"name": "switchboard-e2e", "version": "0"},
            },
        }
        reply = self.post(body)
        assert reply.status == 200, f"initialize: HTTP {reply.status} {reply.raw[:1000]!r}"
        self.init_result = reply.result
        sid = reply.headers.get("mcp-session-id")
        assert sid, f"initialize answered without an Mcp-Session-Id header: {dict(reply.headers)}"
        self.session_id = sid
        note = self.post(
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"Mcp-Session-Id": sid, "MCP-Protocol-Version": protocol_version},
        )
        assert note.status in (200, 202), f"notifications/initialized: HTTP {note.status} {note.raw[:500]!r}"
        return reply

    # -- conveniences

    def call_tool(self, name: str, arguments: dict | None = None, headers: dict[str, str] | None = None) -> Reply:
        return self.request("tools/call", {"name": name, "arguments": arguments or {}}, headers)

    def list_tools(self, cursor: str | None = None, headers: dict[str, str] | None = None) -> Reply:
        return self.request("tools/list", {"cursor": cursor} if cursor is not None else {}, headers)

    def list_all_tools(
        self, headers: dict[str, str] | None = None, max_pages: int = 50
    ) -> tuple[list[dict], list[dict]]:
        """Follows the gateway's cursors. Returns (tools, the `_meta` of every page)."""
        tools: list[dict] = []
        metas: list[dict] = []
        cursor = None
        for _ in range(max_pages):
            reply = self.list_tools(cursor, headers)
            assert reply.status == 200, f"tools/list: HTTP {reply.status} {reply.raw[:2000]!r}"
            result = reply.result
            tools.extend(result.get("tools", []))
            metas.append(result.get("_meta") or {})
            cursor = result.get("nextCursor")
            if cursor is None:
                return tools, metas
        raise AssertionError(f"tools/list did not end within {max_pages} pages")


def tool_names(tools: list[dict]) -> list[str]:
    return [t["name"] for t in tools]


def schema_refs(schema: Any) -> list[str]:
    """Every `$ref` in a schema (values of `default`, `enum`, `const`, `examples` are data)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for n in node:
                walk(n)
        elif isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                found.append(node["$ref"])
            for k, v in node.items():
                if k not in ("default", "enum", "const", "examples"):
                    walk(v)

    walk(schema)
    return found


def inline_defs(schema: Any, max_depth: int = 8) -> Any:
    """A tool schema whose `$ref`s into its own `$defs` are replaced by what they name (keywords
    beside a reference kept, as JSON Schema 2020-12 reads them; a cycle cut to `{}` after
    `max_depth` rounds); `$defs` removed. Fails on a reference that names nothing there: a
    listed schema must stand on its own."""
    defs = schema.get("$defs", {}) if isinstance(schema, dict) else {}

    def walk(node: Any, depth: int) -> Any:
        if isinstance(node, list):
            return [walk(n, depth) for n in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            assert ref.startswith("#/$defs/") and ref[len("#/$defs/"):] in defs, f"$ref {ref!r} names nothing in the schema's $defs"
            if depth >= max_depth:
                return {}
            out = walk(defs[ref[len("#/$defs/"):]], depth + 1)
            if isinstance(out, dict):
                out = {**out, **{k: walk(v, depth) for k, v in node.items() if k != "$ref"}}
            return out
        return {k: (v if k in ("default", "enum", "const", "examples") else walk(v, depth))
                for k, v in node.items() if k != "$defs"}

    return walk(schema, 0)


def call_result_value(result: dict) -> Any:
    """The value a tool returned: `structuredContent` (unwrapping the SDK's {"result": x} for
    scalars), else the first text content parsed as JSON when it is JSON, else the text."""
    assert not result.get("isError"), f"tool returned an error: {json.dumps(result)[:2000]}"
    sc = result.get("structuredContent")
    if isinstance(sc, dict):
        if set(sc) == {"result"}:
            return sc["result"]
        return sc
    if sc is not None:
        return sc
    for c in result.get("content", []):
        if c.get("type") == "text":
            try:
                return json.loads(c["text"])
            except ValueError:
                return c["text"]
    raise AssertionError(f"tool result has no value: {json.dumps(result)[:2000]}")


def headers_seen(result: dict) -> dict[str, str]:
    """What `request_headers` reported (names lower-cased). Accepts a flat map or {"headers": map}."""
    value = call_result_value(result)
    if isinstance(value, dict) and isinstance(value.get("headers"), (dict, list)):
        value = value["headers"]
    if isinstance(value, list):  # [[name, value], ...] or [{"name":..,"value":..}]
        pairs = [(p["name"], p["value"]) if isinstance(p, dict) else (p[0], p[1]) for p in value]
        value = dict(pairs)
    assert isinstance(value, dict), f"request_headers returned {value!r}"
    return {str(k).lower(): str(v) for k, v in value.items()}


def listing_meta(metas: list[dict], meta_key: str) -> list[dict]:
    out: list[dict] = []
    for m in metas:
        out.extend(m.get(meta_key) or [])
    return out


# --------------------------------------------------------------------------------------------
# REST


def rest_list(gateway: Gateway, key: str | None, server_id: str | None = None) -> httpx.Response:
    params = {"server_id": server_id} if server_id else None
    return httpx.get(f"{gateway.url}/mcp-rest/tools/list", params=params, headers=_auth(key), timeout=15)


def rest_call(
    gateway: Gateway, key: str | None, name: str, arguments: dict | None = None, server_id: str | None = None
) -> httpx.Response:
    body: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    if server_id is not None:
        body["server_id"] = server_id
    return httpx.post(f"{gateway.url}/mcp-rest/tools/call", json=body, headers=_auth(key), timeout=15)


def rest_tool_names(response: httpx.Response) -> list[str]:
    """Names from a REST tools/list body: {"tools": [names or tool objects]}."""
    assert response.status_code == 200, f"REST tools/list: HTTP {response.status_code} {response.text[:2000]}"
    return [t if isinstance(t, str) else t["name"] for t in response.json()["tools"]]


def _auth(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


# --------------------------------------------------------------------------------------------
# The official Python SDK client


def sdk_client(
    url: str,
    key: str | None,
    era: str,
    *,
    headers: dict[str, str] | None = None,
    record: list | None = None,
    auth: Any = None,
    **client_options: Any,
):
    """An async context manager yielding a connected `mcp.Client` for `url`.

    era "legacy" runs the initialize handshake; "2026-07-28" pins the stateless revision (no
    probe); "auto" probes `server/discover` first. `record`, when given, receives
    (method, url, status, response headers) for every HTTP exchange. `auth` is an httpx2 auth
    flow (the SDK's `OAuthClientProvider` signs a person in). `client_options` go to
    `mcp.Client` (e.g. sampling_callback, elicitation_callback, list_roots_callback).
    """
    import httpx2
    from mcp import Client, Implementation
    from mcp.client.streamable_http import streamable_http_client

    h = dict(headers or {})
    if key is not None:
        h["Authorization"] = f"Bearer {key}"

    async def on_response(response: Any) -> None:
        if record is not None:
            record.append(
                (response.request.method, str(response.request.url), response.status_code, dict(response.headers))
            )

    @contextlib.asynccontextmanager
    async def connect():
        async with httpx2.AsyncClient(
            headers=h, timeout=httpx2.Timeout(30, read=60), event_hooks={"response": [on_response]}, auth=auth
        ) as http:
            async with Client(
                streamable_http_client(url, http_client=http),
                mode=era,
                client_info=Implementation(name="switchboard-e2e", version="0"),
                cache=None,
                **client_options,
            ) as client:
                yield client

    return connect()


class OAuthStorage:
    """The Python SDK's OAuth token storage, in memory (one sign-in per test)."""

    def __init__(self):
        self.tokens = self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, info):
        self.client = info


def sdk_oauth(url: str, client_name: str, redirect_uri: str, browser: Callable[[str], Any]):
    """The Python SDK's OAuthClientProvider for the MCP endpoint `url`, a public client
    (PKCE, refresh tokens) whose browser step is `browser(authorization_url)`: an async function
    that returns the query of the redirect back to `redirect_uri` (code, state, iss). Returns
    (provider, storage, seen); `seen` holds the authorization URL and that query."""
    from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
    from mcp.shared.auth import OAuthClientMetadata

    storage = OAuthStorage()
    seen: dict[str, str] = {}

    async def redirect(authorization_url: str) -> None:
        seen["authorization_url"] = authorization_url
        seen.update(await browser(authorization_url))

    async def callback() -> AuthorizationCodeResult:
        assert "code" in seen, f"no code came back: {seen.get('error')} {seen.get('error_description')}"
        return AuthorizationCodeResult(code=seen["code"], state=seen.get("state"), iss=seen.get("iss"))

    metadata = OAuthClientMetadata(
        client_name=client_name,
        redirect_uris=[redirect_uri],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    provider = OAuthClientProvider(url, metadata, storage, redirect_handler=redirect, callback_handler=callback)
    return provider, storage, seen


async def sdk_list_all_tools(client: Any, max_pages: int = 50) -> list[Any]:
    """Every tool, following `nextCursor` (bounded)."""
    tools: list[Any] = []
    cursor = None
    for _ in range(max_pages):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
    raise AssertionError(f"tools/list did not end within {max_pages} pages")


def sdk_text(result: Any) -> str:
    """The first text content of an SDK CallToolResult."""
    for c in result.content:
        if getattr(c, "type", None) == "text":
            return c.text
    raise AssertionError(f"no text content in {result!r}")


def run_async(fn: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Runs an async function to completion from a sync test, with a bound."""
    import anyio

    async def bounded():
        with anyio.fail_after(timeout):
            return await fn()

    return anyio.run(bounded)


def unwrap_exception(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """Finds an exception of `kind` inside (nested) exception groups."""
    if isinstance(exc, kind):
        return exc
    for inner in getattr(exc, "exceptions", ()) or ():
        found = unwrap_exception(inner, kind)
        if found is not None:
            return found
    return None


# --------------------------------------------------------------------------------------------
# Round-robin balancer


async def read_asgi_request(scope: dict, receive: Any) -> tuple[bytes, dict[str, str]] | None:
    """The whole body and the (lower-cased) headers of an ASGI HTTP request; `None` when the
    client went away first."""
    body = bytearray()
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return None
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            break
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    return bytes(body), headers


class AsgiServer:
    """Serves an ASGI app with uvicorn in a thread on 127.0.0.1 (or another loopback address)
    and a free port (for tiny purpose-built upstreams written inside a test)."""

    def __init__(self, app: Any, name: str = "asgi-server", lifespan: str = "off", host: str = "127.0.0.1"):
        self.app = app
        self._host = host
        self._name = name
        self._lifespan = lifespan
        self.url = ""
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        # uvicorn's TLS settings (ssl_certfile, ssl_keyfile, ssl_ca_certs, ssl_cert_reqs):
        # set them before start() to serve HTTPS.
        self.ssl: dict[str, Any] = {}
        # The newest TLS version served (an ssl.TLSVersion; None: what OpenSSL offers).
        self.tls_maximum_version: Any = None

    def start(self) -> Any:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._host, 0))
        sock.listen(128)
        self._sock = sock
        scheme = "https" if self.ssl else "http"
        self.url = f"{scheme}://{self._host}:{sock.getsockname()[1]}"
        config = uvicorn.Config(
            self.app, log_level="warning", access_log=False, lifespan=self._lifespan, interface="asgi3", **self.ssl
        )
        if self.tls_maximum_version is not None:
            # uvicorn has no setting for it: its SSL context is made by load(), which serve()
            # then skips.
            config.load()
            config.ssl.maximum_version = self.tls_maximum_version
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[sock])), name=self._name, daemon=True
        )
        self._thread.start()

        def started() -> bool:
            assert self._thread is not None and self._thread.is_alive(), f"the {self._name} thread died"
            return self._server.started

        wait_until(started, timeout=10, what=f"the {self._name} to start")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        if self._sock is not None:
            self._sock.close()


class RoundRobinBalancer(AsgiServer):
    """An HTTP reverse proxy that sends each request to the next backend in turn (per request,
    not per connection) and streams every response through as it arrives, so SSE events pass
    one by one. Runs uvicorn in a thread on 127.0.0.1 and a free port.

    `served` records (backend index, HTTP method, path, Mcp-Session-Id, JSON-RPC method) for every
    request it forwarded; `on_chunk`, when set, is called with every chunk of a response body as
    it is passed to the client (e.g. to see an SSE event go by while the answer is pending).
    """

    HOP_BY_HOP = {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
    }

    def __init__(self, backends: list[str]):
        super().__init__(self.app, name="balancer", lifespan="on")
        self.backends = list(backends)
        self.served: list[tuple[int, str, str, str | None, str | None]] = []
        # Set `record_bodies` to keep every response body as the client received it.
        self.record_bodies = False
        self.bodies: list[bytes] = []
        self.on_chunk: Callable[[bytes], None] | None = None
        self._next = 0
        self._lock = threading.Lock()

    def set_backends(self, backends: list[str]) -> None:
        with self._lock:
            self.backends = list(backends)
            self._next = 0

    def _pick(self) -> tuple[int, str]:
        with self._lock:
            i = self._next % len(self.backends)
            self._next += 1
            return i, self.backends[i]

    async def app(self, scope, receive, send):  # ASGI
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    # No cookie jar: a balancer passes cookies through, it never keeps one
                    # client's cookies to send with another's requests.
                    self._client = httpx.AsyncClient(timeout=httpx.Timeout(30, read=120))
                    self._client.cookies.jar.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await self._client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        request = await read_asgi_request(scope, receive)
        if request is None:
            return
        body, _ = request
        idx, backend = self._pick()
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in scope["headers"]
            if k.decode("latin-1").lower() not in self.HOP_BY_HOP
        ]
        hmap = {k.lower(): v for k, v in headers}
        rpc_method = None
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            rpc_method = json.loads(bytes(body)).get("method")
        self.served.append((idx, scope["method"], scope["path"], hmap.get("mcp-session-id"), rpc_method))
        target = backend + scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        req = self._client.build_request(scope["method"], target, headers=headers, content=bytes(body))
        try:
            resp = await self._client.send(req, stream=True)
        except httpx.HTTPError as exc:
            data = f"balancer: backend {backend} failed: {exc!r}".encode()
            await send({"type": "http.response.start", "status": 502, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": data})
            return
        try:
            out_headers = [
                (k.encode("latin-1"), v.encode("latin-1"))
                for k, v in resp.headers.multi_items()
                if k.lower() not in self.HOP_BY_HOP
            ]
            await send({"type": "http.response.start", "status": resp.status_code, "headers": out_headers})
            received = bytearray()
            async for chunk in resp.aiter_raw():
                if self.record_bodies:
                    received += chunk
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if self.on_chunk is not None:
                    self.on_chunk(chunk)
            if self.record_bodies:
                self.bodies.append(bytes(received))
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (httpx.HTTPError, OSError):
            pass  # client or backend went away mid-stream
        finally:
            await resp.aclose()

    def backends_used(self, session_id: str | None = None) -> set[int]:
        return {i for i, _, _, sid, _ in self.served if session_id is None or sid == session_id}


@contextlib.contextmanager
def balancer(backends: list[str]) -> Iterator[RoundRobinBalancer]:
    lb = RoundRobinBalancer(backends).start()
    try:
        yield lb
    finally:
        lb.stop()


# --------------------------------------------------------------------------------------------
# Upstream credentials (issue 4): small helpers for tests/e2e/test_upstream_credentials_*.py

TOKEN_GRANT_CLIENT_CREDENTIALS = "client_credentials"
TOKEN_GRANT_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
KEY_HEADER = "X-Switchboard-Key"


def pct(value: str) -> str:
    """Percent-encodes a value for a `/v/{opts}` option of the Rust example upstream."""
    from urllib.parse import quote

    return quote(value, safe="")


def start_rust_upstream_with(group: ProcessGroup, name: str, *args: str) -> Upstream:
    """The Rust example upstream with extra command-line arguments (e.g. `--token-ttl 2`)."""
    argv = [binary(EXAMPLE_UPSTREAM_BIN), "--listen", "127.0.0.1:0", *args]
    return Upstream(group.start(f"upstream-{name}", argv), "rust")


def token_requests(upstream: Upstream, grant: str | None = None) -> int:
    """How many POSTs reached the example upstream's `/oauth/token` (for one grant type, or all)."""
    by_method = upstream.stats().get("by_method", {})
    if grant is not None:
        return int(by_method.get(f"oauth/token:{grant}", 0))
    return sum(int(n) for m, n in by_method.items() if m.startswith("oauth/token:"))


def method_count(upstream: Upstream, method: str) -> int:
    """How many POSTs of one JSON-RPC method reached the upstream (its `/_stats`)."""
    return int(upstream.stats().get("by_method", {}).get(method, 0))


def oauth_server(upstream: Upstream, client_id: str, **extra: Any) -> dict:
    """An `auth` block for `oauth2ClientCredentials` against the example upstream's token
    endpoint (client `ID` authenticates with `secret-ID`)."""
    return {
        "type": "oauth2ClientCredentials",
        "tokenUrl": f"{upstream.base}/oauth/token",
        "clientId": client_id,
        "clientSecret": f"secret-{client_id}",
        **extra,
    }


def token_exchange_auth(upstream: Upstream, client_id: str, **extra: Any) -> dict:
    """An `auth` block for RFC 8693 `tokenExchange` against the example upstream."""
    return {
        "type": "tokenExchange",
        "tokenUrl": f"{upstream.base}/oauth/token",
        "clientId": client_id,
        "clientSecret": f"secret-{client_id}",
        **extra,
    }


@contextlib.contextmanager
def asgi_server(app: Any, host: str = "127.0.0.1") -> Iterator[AsgiServer]:
    srv = AsgiServer(app, host=host).start()
    try:
        yield srv
    finally:
        srv.stop()
