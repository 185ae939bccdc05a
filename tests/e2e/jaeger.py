"""A real Jaeger v2 trace backend for the tracing tests: built by tests/setup-jaeger.sh (the
`jaeger` binary from the Go module proxy, cached outside the checkout) and started with a config
of its own: memory storage, OTLP on gRPC and HTTP and the query API each on a free loopback port,
nothing else listening (no collector metrics, health check, zpages, remote sampling, Jaeger or
Zipkin receivers), and the query service's own tracing off (it would export to localhost:4317).
Start-up is bounded; a Jaeger that does not come up fails the test with its log's tail, and a
missing binary fails it with the command that builds it.

    from jaeger import start as start_jaeger

    @pytest.fixture(scope="module")
    def jaeger(tmp_path_factory):
        j = start_jaeger(tmp_path_factory.mktemp("jaeger"))
        yield j
        j.stop()

    # the gateway exports to j.otlp_grpc (or j.otlp_http), then:
    trace = j.wait_for_trace(trace_id, lambda spans: any(s.name == "tools/call" for s in spans))
    call = trace.one("tools/call")
    assert trace.one("POST /mcp").is_parent_of(call), trace.describe()

Reading: `trace(id)` uses the API v3 (`/api/v3/traces/{id}?raw_traces=true`): it returns the
spans as OTLP JSON, exactly as exported (typed attributes, resource attributes, span kind, status,
events, `parentSpanId`). `services()` and `traces(service)` use the classic API (`/api/services`,
`/api/traces?service=`), whose search needs no time window; both are turned into the same `Span`
objects."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from harness import REPO_ROOT, reserve_port, wait_until

SETUP = REPO_ROOT / "tests" / "setup-jaeger.sh"
# A cold build compiles the collector and its dependencies (about 8 minutes on two shared cores).
SETUP_TIMEOUT = 1800.0
START_TIMEOUT = 30.0
# How long a span may take to show up: exporters batch (the OTel SDK's default delay is 5 s).
TRACE_TIMEOUT = 20.0

GATEWAY_SERVICE = "switchboard-gateway"
OPERATOR_SERVICE = "switchboard-operator"


def binary() -> Path:
    """The jaeger binary, built by tests/setup-jaeger.sh when missing (instant when cached)."""
    try:
        setup = subprocess.run([str(SETUP)], capture_output=True, text=True, timeout=SETUP_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"tests/setup-jaeger.sh did not finish within {SETUP_TIMEOUT:.0f}s:\n{(exc.stderr or b'')[-3000:]!r}")
    assert setup.returncode == 0, (
        "tests/setup-jaeger.sh failed (it builds github.com/jaegertracing/jaeger/cmd/jaeger from the Go module proxy; "
        f"it needs Go >= 1.24 on PATH):\n{setup.stderr[-3000:]}"
    )
    path = Path(setup.stdout.strip().splitlines()[-1])
    assert path.is_file() and os.access(path, os.X_OK), f"tests/setup-jaeger.sh printed {path}, which is not an executable"
    return path


def config(
    otlp_grpc: int, otlp_http: int, query_http: int, query_grpc: int, tls: dict | None = None, badger: Path | None = None
) -> dict:
    """The collector config: OTLP in, memory storage, the query API; every listener on loopback.
    `tls` (the collector's `cert_file`, `key_file` and, for mTLS, `client_ca_file`): both OTLP
    receivers serve TLS with it. `badger`: Badger storage in that directory instead of memory
    (its search reads a span's ERROR status as the tag `error=true`, as the Jaeger UI's error
    search asks; the memory store of this Jaeger version compares the tag's text with a boolean
    and finds nothing)."""
    backend: dict[str, Any] = {"memory": {"max_traces": 100000}}
    if badger is not None:
        backend = {
            "badger": {
                "directories": {"keys": str(badger / "keys"), "values": str(badger / "values")},
                "ephemeral": False,
            }
        }
    grpc: dict[str, Any] = {"endpoint": f"127.0.0.1:{otlp_grpc}"}
    http: dict[str, Any] = {"endpoint": f"127.0.0.1:{otlp_http}"}
    if tls:
        grpc["tls"] = dict(tls)
        http["tls"] = dict(tls)
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query"],
            "pipelines": {
                # No batch processor: spans are stored as they arrive (the exporters batch already).
                "traces": {"receivers": ["otlp"], "exporters": ["jaeger_storage_exporter"]},
            },
            "telemetry": {
                # `none` binds no Prometheus endpoint (the default would be :8888).
                "metrics": {"level": "none"},
                "logs": {"level": "info"},
            },
        },
        "extensions": {
            "jaeger_storage": {"backends": {"memstore": backend}},
            "jaeger_query": {
                "storage": {"traces": "memstore"},
                # On by default in v2: it would export the query service's own spans over OTLP
                # to localhost:4317 (whoever listens there).
                "enable_tracing": False,
                "http": {"endpoint": f"127.0.0.1:{query_http}"},
                "grpc": {"endpoint": f"127.0.0.1:{query_grpc}"},  # always started; kept on loopback
            },
        },
        "receivers": {
            "otlp": {
                "protocols": {"grpc": grpc, "http": http},
            },
        },
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
    }


# --------------------------------------------------------------------------------------------
# Spans and trees


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_id: str | None  # None for a root; may name a span outside this trace (a remote parent)
    name: str
    service: str
    attributes: dict[str, Any]
    resource: dict[str, Any] = field(default_factory=dict)
    kind: str = ""  # "server", "client", "internal", "producer", "consumer" or ""
    status_code: str = ""  # "", "OK" or "ERROR"
    status_message: str = ""
    start_ns: int = 0
    end_ns: int = 0
    events: list[dict] = field(default_factory=list)
    parent: Span | None = field(default=None, repr=False, compare=False)
    children: list[Span] = field(default_factory=list, repr=False, compare=False)

    @property
    def operation_name(self) -> str:
        return self.name

    def is_parent_of(self, other: Span) -> bool:
        return other.parent_id == self.span_id

    def is_ancestor_of(self, other: Span) -> bool:
        node = other.parent
        while node is not None:
            if node is self:
                return True
            node = node.parent
        return False

    def descendants(self) -> Iterator[Span]:
        for child in self.children:
            yield child
            yield from child.descendants()


_KINDS = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
_STATUS = {0: "", 1: "OK", 2: "ERROR"}


def _otlp_value(value: dict) -> Any:
    """An OTLP JSON AnyValue as Python (intValue arrives as a string in proto3 JSON)."""
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return value["boolValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    if "arrayValue" in value:
        return [_otlp_value(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return _otlp_attrs(value["kvlistValue"].get("values", []))
    return None


def _otlp_attrs(attrs: list[dict]) -> dict[str, Any]:
    return {a["key"]: _otlp_value(a.get("value", {})) for a in attrs or []}


def _otlp_id(value: str | None) -> str | None:
    """Span and trace ids as lowercase hex (Jaeger's v3 API writes hex; OTLP/JSON from other
    marshallers may use base64)."""
    if not value:
        return None
    if len(value) in (16, 32) and all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()
    return base64.b64decode(value).hex()


def spans_from_otlp(document: dict) -> list[Span]:
    """Spans of an OTLP JSON document ({"resourceSpans": [...]}, or the v3 API's {"result": ...})."""
    document = document.get("result", document)
    spans = []
    for rs in document.get("resourceSpans", []):
        resource = _otlp_attrs(rs.get("resource", {}).get("attributes", []))
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                status = s.get("status", {})
                code = status.get("code", 0)
                spans.append(Span(
                    trace_id=_otlp_id(s["traceId"]) or "",
                    span_id=_otlp_id(s["spanId"]) or "",
                    parent_id=_otlp_id(s.get("parentSpanId")),
                    name=s.get("name", ""),
                    service=str(resource.get("service.name", "")),
                    attributes=_otlp_attrs(s.get("attributes", [])),
                    resource=resource,
                    kind=_KINDS.get(s.get("kind", 0), ""),
                    status_code=_STATUS.get(code, code) if isinstance(code, int) else str(code).removeprefix("STATUS_CODE_"),
                    status_message=status.get("message", ""),
                    start_ns=int(s.get("startTimeUnixNano", 0)),
                    end_ns=int(s.get("endTimeUnixNano", 0)),
                    events=[{"name": e.get("name", ""), "attributes": _otlp_attrs(e.get("attributes", []))} for e in s.get("events", [])],
                ))
    return spans


def _v1_value(tag: dict) -> Any:
    """A classic-API tag's value as the OTLP JSON of the v3 API gives it (the classic API writes
    int64 tags as strings)."""
    value = tag.get("value")
    kind = tag.get("type")
    try:
        if kind == "int64":
            return int(value)
        if kind == "float64":
            return float(value)
    except (TypeError, ValueError):
        return value
    if kind == "bool" and isinstance(value, str):
        return value == "true"
    return value


def spans_from_v1(trace: dict) -> list[Span]:
    """Spans of one trace of the classic API (`data[i]` of /api/traces): tags as attributes,
    the CHILD_OF reference as the parent, the process's service name and tags."""
    processes = trace.get("processes", {})
    spans = []
    for s in trace.get("spans", []):
        process = processes.get(s.get("processID"), {})
        tags = {t["key"]: _v1_value(t) for t in s.get("tags", [])}
        parents = [r["spanID"] for r in s.get("references", []) if r.get("refType") == "CHILD_OF"]
        spans.append(Span(
            trace_id=s["traceID"],
            span_id=s["spanID"],
            parent_id=parents[0] if parents else None,
            name=s.get("operationName", ""),
            service=process.get("serviceName", ""),
            attributes=tags,
            resource={"service.name": process.get("serviceName", ""), **{t["key"]: _v1_value(t) for t in process.get("tags", [])}},
            kind=str(tags.get("span.kind", "")),
            status_code=str(tags.get("otel.status_code", "")),
            status_message=str(tags.get("otel.status_description", "")),
            start_ns=int(s.get("startTime", 0)) * 1000,
            end_ns=(int(s.get("startTime", 0)) + int(s.get("duration", 0))) * 1000,
            events=[{"name": "", "attributes": {f["key"]: f.get("value") for f in log.get("fields", [])}} for log in s.get("logs", [])],
        ))
    return spans


@dataclass
class Trace:
    """The spans of one trace linked into a tree (`parent`, `children`)."""

    trace_id: str
    spans: list[Span]
    roots: list[Span]  # spans without a parent in this trace, by start time

    def named(self, name: str) -> list[Span]:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str, **attributes: Any) -> Span:
        """The one span named `name` (with these attribute values); fails with the tree if
        there is none or more than one."""
        found = [s for s in self.named(name) if all(s.attributes.get(k) == v for k, v in attributes.items())]
        assert len(found) == 1, f"{len(found)} spans named {name!r} with {attributes} in trace {self.trace_id}:\n{self.describe()}"
        return found[0]

    def services(self) -> set[str]:
        return {s.service for s in self.spans}

    def describe(self) -> str:
        """The tree as indented text, for assertion messages."""
        lines: list[str] = []

        def walk(span: Span, depth: int) -> None:
            parent = "" if depth or span.parent_id is None else f" (parent {span.parent_id} not in trace)"
            lines.append(f"{'  ' * depth}{span.name} [{span.service}] {span.span_id}{parent} {span.attributes}")
            for child in span.children:
                walk(child, depth + 1)

        for root in self.roots:
            walk(root, 0)
        return "\n".join(lines) or "(no spans)"


def tree(spans: list[Span], trace_id: str = "") -> Trace:
    """Links `spans` into a tree: each span's `parent` and `children` (by start time); spans
    whose parent is not among them are roots."""
    by_id = {s.span_id: s for s in spans}
    for s in spans:
        s.parent, s.children = None, []
    for s in sorted(spans, key=lambda s: (s.start_ns, s.span_id)):
        parent = by_id.get(s.parent_id) if s.parent_id else None
        if parent is not None and parent is not s:
            s.parent = parent
            parent.children.append(s)
    roots = sorted((s for s in spans if s.parent is None), key=lambda s: (s.start_ns, s.span_id))
    return Trace(trace_id=trace_id or (spans[0].trace_id if spans else ""), spans=spans, roots=roots)


# --------------------------------------------------------------------------------------------
# The process


@dataclass
class Jaeger:
    proc: subprocess.Popen
    log: Path
    config_path: Path
    ports: dict[str, int]
    tls: bool = False

    @property
    def otlp_grpc(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.ports['otlp_grpc']}"

    @property
    def otlp_http(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.ports['otlp_http']}"

    @property
    def query(self) -> str:
        return f"http://127.0.0.1:{self.ports['query_http']}"

    def log_text(self, tail: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-tail:]

    def _get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(f"{self.query}{path}", params=params, timeout=10)

    def services(self) -> list[str]:
        reply = self._get("/api/services")
        assert reply.status_code == 200, f"Jaeger /api/services: {reply.status_code} {reply.text[:500]}"
        return sorted(reply.json().get("data") or [])

    def traces(self, service: str, **params: Any) -> list[Trace]:
        """The traces of `service` (the classic search: `operation`, `tags` (JSON), `limit`,
        `lookback` ("1h"), `start`/`end` (µs), `minDuration`, ...), each as a tree."""
        params.setdefault("limit", 100)
        reply = self._get("/api/traces", service=service, **params)
        assert reply.status_code == 200, f"Jaeger /api/traces?service={service}: {reply.status_code} {reply.text[:500]}"
        return [tree(spans_from_v1(t), t.get("traceID", "")) for t in reply.json().get("data") or []]

    def trace(self, trace_id: str) -> Trace | None:
        """One trace by its id (32 hex digits), from the API v3; None when Jaeger has none."""
        trace_id = trace_id.lower()
        # raw_traces: as stored, without the query service's adjusters (which would add
        # `@jaeger@warnings` attributes, e.g. about clock skew between services).
        reply = self._get(f"/api/v3/traces/{trace_id}", raw_traces="true")
        if reply.status_code == 404:
            return None
        assert reply.status_code == 200, f"Jaeger /api/v3/traces/{trace_id}: {reply.status_code} {reply.text[:500]}"
        spans = spans_from_otlp(reply.json())
        return tree(spans, trace_id) if spans else None

    def wait_for_trace(
        self, trace_id: str, predicate: Callable[[list[Span]], Any] = bool, timeout: float = TRACE_TIMEOUT
    ) -> Trace:
        """Polls until the trace exists and `predicate(spans)` holds (spans arrive late and in
        batches); fails after `timeout` seconds with what Jaeger had."""
        last: list[Trace | None] = [None]

        def ready() -> Trace | None:
            assert self.proc.poll() is None, f"Jaeger exited ({self.proc.returncode}):\n{self.log_text()}"
            last[0] = found = self.trace(trace_id)
            return found if found is not None and predicate(found.spans) else None

        try:
            return wait_until(ready, timeout, interval=0.2, what=f"trace {trace_id} in Jaeger")
        except AssertionError as exc:
            seen = last[0].describe() if last[0] is not None else "no such trace"
            raise AssertionError(f"{exc}\nJaeger has: {seen}\nservices: {self.services()}") from None

    def wait_for_traces(
        self, service: str, predicate: Callable[[list[Trace]], Any] = bool, timeout: float = TRACE_TIMEOUT, **params: Any
    ) -> list[Trace]:
        """Polls `traces(service, **params)` until `predicate(traces)` holds."""
        last: list[list[Trace]] = [[]]

        def ready() -> list[Trace] | None:
            assert self.proc.poll() is None, f"Jaeger exited ({self.proc.returncode}):\n{self.log_text()}"
            last[0] = found = self.traces(service, **params)
            return found if predicate(found) else None

        try:
            return wait_until(ready, timeout, interval=0.2, what=f"traces of {service} in Jaeger")
        except AssertionError as exc:
            seen = "\n\n".join(t.describe() for t in last[0]) or "no traces"
            raise AssertionError(f"{exc}\nJaeger has for {service}:\n{seen}\nservices: {self.services()}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start(logdir: Path, tls: dict | None = None, badger: bool = False) -> Jaeger:
    """Builds (once) and starts Jaeger; returns when the query API answers and both OTLP ports
    accept connections. A port taken between picking and binding is retried with new ports.
    `tls`: the OTLP receivers serve TLS; `badger`: Badger storage under `logdir` (see
    `config`)."""
    path = binary()
    logdir.mkdir(parents=True, exist_ok=True)
    # The collector reads no OTEL_* variables in this config; keep them from reaching it anyway.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    log_tail = ""
    for attempt in range(3):
        ports: dict[str, int] = {}
        while len(ports) < 4:
            port = reserve_port()
            if port not in ports.values():
                ports[("otlp_grpc", "otlp_http", "query_http", "query_grpc")[len(ports)]] = port
        config_path = logdir / f"jaeger-{attempt}.yaml"
        store = logdir / f"badger-{attempt}" if badger else None
        config_path.write_text(yaml.safe_dump(config(**ports, tls=tls, badger=store), sort_keys=False))
        log = logdir / f"jaeger-{attempt}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(path), "--config", str(config_path)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
        jaeger = Jaeger(proc=proc, log=log, config_path=config_path, ports=ports, tls=bool(tls))

        def up() -> bool:
            if proc.poll() is not None:
                return True  # stop waiting: handled below
            try:
                if httpx.get(f"{jaeger.query}/api/services", timeout=2).status_code != 200:
                    return False
            except httpx.HTTPError:
                return False
            return _accepts(ports["otlp_grpc"]) and _accepts(ports["otlp_http"])

        try:
            wait_until(up, START_TIMEOUT, interval=0.1, what="Jaeger's query API and OTLP ports")
        except AssertionError:
            jaeger.stop()
            raise AssertionError(f"Jaeger did not start within {START_TIMEOUT:.0f}s:\n{jaeger.log_text()}") from None
        if proc.poll() is None:
            return jaeger
        log_tail = jaeger.log_text()
        if "address already in use" not in log_tail:
            raise AssertionError(f"Jaeger exited ({proc.returncode}) at start-up:\n{log_tail}")
        # A port was taken by someone else between picking and binding: new ports.
    raise AssertionError(f"Jaeger found no free ports in 3 attempts:\n{log_tail}")


@contextlib.contextmanager
def running(logdir: Path) -> Iterator[Jaeger]:
    """`start`, and `stop` at the end of the block."""
    jaeger = start(logdir)
    try:
        yield jaeger
    finally:
        jaeger.stop()
