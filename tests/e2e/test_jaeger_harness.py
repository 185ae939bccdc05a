"""The Jaeger of the tracing tests (tests/e2e/jaeger.py), checked without the gateway: a trace
sent by hand over OTLP/HTTP (JSON) comes back from the query API as the tree it was, both APIs
agree, only loopback ports are bound, and a trace never sent is reported missing after the
bounded wait (the helper can fail).

OTLP/gRPC ingestion is not sent here: the test venv has no grpcio (and no HTTP/2 client); the
receiver is only checked to accept connections. The gateway's own exporter covers it."""

from __future__ import annotations

import os
import re
import secrets
import time

import httpx
import pytest
from jaeger import Jaeger, running

SERVICE = "switchboard-harness-check"
DOWNSTREAM = "switchboard-harness-downstream"


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory) -> Jaeger:
    with running(tmp_path_factory.mktemp("jaeger")) as j:
        yield j


def _attr(key: str, value) -> dict:
    if isinstance(value, bool):
        v = {"boolValue": value}
    elif isinstance(value, int):
        v = {"intValue": str(value)}
    elif isinstance(value, float):
        v = {"doubleValue": value}
    elif isinstance(value, list):
        v = {"arrayValue": {"values": [_attr("", x)["value"] for x in value]}}
    else:
        v = {"stringValue": value}
    return {"key": key, "value": v}


def _span(trace_id: str, span_id: str, parent: str | None, name: str, start_ns: int, kind: int, **attrs) -> dict:
    span = {
        "traceId": trace_id, "spanId": span_id, "name": name, "kind": kind,
        "startTimeUnixNano": str(start_ns), "endTimeUnixNano": str(start_ns + 5_000_000),
        "attributes": [_attr(k.replace("_", "."), v) for k, v in attrs.items()],
    }
    if parent:
        span["parentSpanId"] = parent
    return span


def _resource_spans(service: str, spans: list[dict]) -> dict:
    return {
        "resource": {"attributes": [_attr("service.name", service), _attr("service.version", "0.0.0-test")]},
        "scopeSpans": [{"scope": {"name": "test_jaeger_harness"}, "spans": spans}],
    }


def _send_http(jaeger: Jaeger, body: dict) -> None:
    reply = httpx.post(f"{jaeger.otlp_http}/v1/traces", json=body, timeout=10)
    assert reply.status_code == 200, f"OTLP/HTTP export refused: {reply.status_code} {reply.text}"
    rejected = int(reply.json().get("partialSuccess", {}).get("rejectedSpans", 0))
    assert rejected == 0, f"OTLP/HTTP export partly rejected: {reply.text}"


def test_a_trace_sent_over_otlp_http_comes_back_as_its_tree(jaeger):
    trace_id = secrets.token_hex(16)
    root, child, remote = secrets.token_hex(8), secrets.token_hex(8), secrets.token_hex(8)
    now = time.time_ns()
    _send_http(jaeger, {"resourceSpans": [
        _resource_spans(SERVICE, [
            _span(trace_id, root, None, "POST /mcp", now, 2, http_request_method="POST", http_response_status_code=200),
            _span(trace_id, child, root, "tools/call", now + 1_000_000, 3,
                  mcp_tool_name="echo", retry=False, ratio=0.5, tags=["a", "b"]),
        ]),
        _resource_spans(DOWNSTREAM, [_span(trace_id, remote, child, "upstream call", now + 2_000_000, 2, upstream="u1")]),
    ]})

    trace = jaeger.wait_for_trace(trace_id, lambda spans: len(spans) == 3)
    top, call, up = trace.one("POST /mcp"), trace.one("tools/call"), trace.one("upstream call")
    assert trace.roots == [top], trace.describe()
    assert top.is_parent_of(call) and call.parent is top and top.children == [call], trace.describe()
    assert call.is_parent_of(up) and top.is_ancestor_of(up) and not up.is_ancestor_of(top), trace.describe()
    assert (top.service, call.service, up.service) == (SERVICE, SERVICE, DOWNSTREAM)
    assert trace.services() == {SERVICE, DOWNSTREAM}
    assert top.parent_id is None and call.parent_id == root and up.parent_id == child
    # Typed attributes survive: the v3 API gives them back as exported.
    assert call.attributes == {"mcp.tool.name": "echo", "retry": False, "ratio": 0.5, "tags": ["a", "b"]}
    assert top.attributes["http.response.status.code"] == 200
    assert (top.kind, call.kind) == ("server", "client")
    assert call.resource["service.version"] == "0.0.0-test"
    assert trace.one("tools/call", **{"mcp.tool.name": "echo"}) is call

    # The classic API sees the same tree (tags for attributes, CHILD_OF for the parent).
    assert {SERVICE, DOWNSTREAM} <= set(jaeger.services())
    found = [t for t in jaeger.traces(SERVICE) if t.trace_id == trace_id]
    assert len(found) == 1, [t.trace_id for t in jaeger.traces(SERVICE)]
    v1 = found[0]
    assert v1.one("POST /mcp").is_parent_of(v1.one("tools/call")), v1.describe()
    assert v1.one("tools/call").is_parent_of(v1.one("upstream call")), v1.describe()
    assert v1.one("upstream call").service == DOWNSTREAM
    assert v1.one("tools/call").attributes["mcp.tool.name"] == "echo"


def test_spans_sent_late_are_waited_for(jaeger):
    """The wait holds out for the predicate, not just for the trace: the child comes later."""
    trace_id, root, child = secrets.token_hex(16), secrets.token_hex(8), secrets.token_hex(8)
    now = time.time_ns()
    _send_http(jaeger, {"resourceSpans": [_resource_spans(SERVICE, [_span(trace_id, root, None, "first", now, 2)])]})
    first = jaeger.wait_for_trace(trace_id)
    assert [s.name for s in first.spans] == ["first"]
    _send_http(jaeger, {"resourceSpans": [_resource_spans(SERVICE, [_span(trace_id, child, root, "second", now + 1, 1)])]})
    both = jaeger.wait_for_trace(trace_id, lambda spans: {s.name for s in spans} == {"first", "second"})
    assert both.one("first").is_parent_of(both.one("second")), both.describe()
    assert both.one("second").kind == "internal"


def test_a_trace_never_sent_is_not_found_and_the_wait_fails(jaeger):
    missing = secrets.token_hex(16)
    assert jaeger.trace(missing) is None
    started = time.monotonic()
    with pytest.raises(AssertionError, match=rf"(?s)timed out after 1.5s waiting for trace {missing}.*no such trace"):
        jaeger.wait_for_trace(missing, timeout=1.5)
    assert 1.5 <= time.monotonic() - started < 10

    # A trace that exists but never satisfies the predicate fails too, showing what Jaeger had.
    trace_id, root = secrets.token_hex(16), secrets.token_hex(8)
    _send_http(jaeger, {"resourceSpans": [_resource_spans(SERVICE, [_span(trace_id, root, None, "lonely", time.time_ns(), 2)])]})
    jaeger.wait_for_trace(trace_id)
    with pytest.raises(AssertionError, match=r"(?s)waiting for trace.*lonely \[switchboard-harness-check\]"):
        jaeger.wait_for_trace(trace_id, lambda spans: any(s.name == "never" for s in spans), timeout=1.0)
    with pytest.raises(AssertionError, match="0 spans named 'never'"):
        jaeger.trace(trace_id).one("never")


def _listening(pid: int) -> set[tuple[str, int, str]]:
    """(address, port, proto) of the TCP listeners and UDP sockets of process `pid`."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            m = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if m:
            inodes.add(m.group(1))
    found = set()
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        with open(f"/proc/net/{proto}") as table:
            next(table)
            for line in table:
                cols = line.split()
                local, state, inode = cols[1], cols[3], cols[9]
                if inode not in inodes or (proto.startswith("tcp") and state != "0A"):
                    continue
                addr_hex, port_hex = local.split(":")
                if len(addr_hex) == 8:
                    addr = ".".join(str(b) for b in bytes.fromhex(addr_hex)[::-1])
                else:
                    addr = "::1" if addr_hex == "00000000000000000000000001000000" else addr_hex
                found.add((addr, int(port_hex, 16), proto))
    return found


def test_jaeger_listens_on_its_loopback_ports_only(jaeger):
    bound = _listening(jaeger.proc.pid)
    assert bound == {("127.0.0.1", port, "tcp") for port in jaeger.ports.values()}, (
        f"Jaeger's sockets: {sorted(bound)}; configured: {jaeger.ports}\n{jaeger.config_path.read_text()}"
    )
    for url in (jaeger.otlp_grpc, jaeger.otlp_http, jaeger.query):
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url), url
