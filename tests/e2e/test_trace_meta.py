"""Issue 40, item 1: W3C trace context in `_meta` (SEP-414, in the 2026-07-28 revision), both ways.

The fixtures are not ours: the client is the official Python SDK (mcp 2.3.0), which puts its
trace context in `params._meta` and sends no `traceparent` header; the server is a stdio process
made with the same SDK (tests/e2e/upstreams/python_upstream.py --stdio --traced), run by
switchboard-stdio-bridge: its own OpenTelemetry middleware opens a span per request as the child
of the context in the request's `_meta` (it has no headers) and exports it with the
OpenTelemetry SDK into the same Jaeger as the gateway.

- Traces on: the SDK client's `_meta` context is the parent of the gateway's request span; the
  stdio process's span is the child of the gateway's MCP client span (the `_meta` the bridge
  handed it names that span); one trace over three processes, in both client eras.
- Traces off: the gateway passes the client's context on as it came, from `_meta` and from the
  `traceparent` header alike (the bridge copies a header into `_meta` where `_meta` has none).
- The control: a call that carries no context does not land in the client's trace, and the
  process's `_meta` holds the gateway's own new trace, not the client's.
"""

from __future__ import annotations

import asyncio
import secrets
import sys

import httpx
import pytest
from harness import (
    MODERN_VERSION,
    PYTHON_UPSTREAM,
    ProcessGroup,
    RawMcp,
    binary,
    gateway_config,
    key,
    new_secret,
    sdk_client,
    server,
    wait_until,
)
from jaeger import GATEWAY_SERVICE
from jaeger import start as start_jaeger

BRIDGE_BIN = "switchboard-stdio-bridge"
STDIO_SERVICE = "stdio-sdk-server"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACESTATE = "client=e2e"


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory):
    j = start_jaeger(tmp_path_factory.mktemp("jaeger"))
    yield j
    j.stop()


def traceparent(trace_id: str) -> str:
    return f"00-{trace_id}-{CLIENT_SPAN}-01"


def start_bridge(procs: ProcessGroup, otlp_http: str | None) -> str:
    """The bridge running the SDK's stdio server (exporting its spans to `otlp_http`); its URL."""
    child = [sys.executable, str(PYTHON_UPSTREAM), "--stdio", "--name", "stdio-traced"]
    if otlp_http is not None:
        # Only the process exports: the variables are its own, not the bridge's.
        child = ["env", f"OTEL_EXPORTER_OTLP_ENDPOINT={otlp_http}", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
                 f"OTEL_SERVICE_NAME={STDIO_SERVICE}", *child, "--traced"]  # fmt: skip
    else:
        child = [*child, "--traced"]
    argv = [str(binary(BRIDGE_BIN)), "--listen", "127.0.0.1:0", "--pool-size", "1", "--drain-delay", "1s", "--", *child]
    url = procs.start("bridge-traced", argv).url
    wait_until(lambda: httpx.get(f"{url}/readyz", timeout=2).status_code == 200, 60,
               what="the bridge to be ready (its process answered initialize)")  # fmt: skip
    return url


def sdk_call_with_meta_context(url: str, secret: str, era: str, trace_id: str) -> dict:
    """Calls `st__trace_context` with the official SDK, its context attached: the SDK writes it
    into the request's `_meta` (and no header). Returns what the stdio process saw in `_meta`."""
    from opentelemetry import context, propagate

    async def run() -> dict:
        carrier = {"traceparent": traceparent(trace_id), "tracestate": TRACESTATE}
        token = context.attach(propagate.extract(carrier))
        try:
            async with sdk_client(url, secret, era) as client:
                result = await client.call_tool("st__trace_context", {})
        finally:
            context.detach(token)
        assert not result.is_error, result
        return dict(result.structured_content or {})

    return asyncio.run(run())


def world(procs, gateways, jaeger, *, traced: bool):
    bridge = start_bridge(procs, jaeger.otlp_http if traced else None)
    secret = new_secret("trace-meta")
    config = gateway_config([server("st", f"{bridge}/mcp", upstreamEra="byClient", timeout="20s")],
                            [key("c", secret, ["st"])])  # fmt: skip
    # (Spans exported a fifth of a second after they end rather than the SDK's 5 s: the test
    # waits for them.)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_grpc, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
           "OTEL_BSP_SCHEDULE_DELAY": "200"} if traced else {}  # fmt: skip
    return gateways.start(config, env=env), secret


def test_a_stdio_server_behind_the_bridge_is_in_the_clients_trace_through_meta(gateways, procs, jaeger):
    gw, secret = world(procs, gateways, jaeger, traced=True)
    for era in (MODERN_VERSION, "legacy"):
        one_trace_through_meta(gw, secret, jaeger, era)


def one_trace_through_meta(gw, secret: str, jaeger, era: str) -> None:
    trace_id = secrets.token_hex(16)
    seen = sdk_call_with_meta_context(gw.mcp_url(), secret, era, trace_id)
    # The process got the client's trace, its parent the gateway's span (not the client's).
    parts = seen.get("traceparent", "").split("-")
    assert len(parts) == 4 and parts[1] == trace_id, f"{era}: the stdio process's _meta: {seen}"
    assert parts[2] != CLIENT_SPAN, f"the gateway's span is the process's parent, not the client's: {seen}"

    def complete(spans) -> bool:
        names = {(s.service, s.kind, s.name) for s in spans}
        return {
            (STDIO_SERVICE, "server", "tools/call trace_context"),
            (GATEWAY_SERVICE, "client", "tools/call trace_context"),
            (GATEWAY_SERVICE, "server", "tools/call st__trace_context"),
        } <= names

    trace = jaeger.wait_for_trace(trace_id, complete)
    request = trace.one("tools/call st__trace_context")
    assert request.service == GATEWAY_SERVICE and request.kind == "server", trace.describe()
    assert request.parent_id == CLIENT_SPAN, f"the gateway's request continues the SDK client's _meta: {trace.describe()}"
    call = next(s for s in request.descendants() if s.kind == "client" and s.name == "tools/call trace_context")
    stdio = [s for s in trace.spans if s.service == STDIO_SERVICE and s.name == "tools/call trace_context"]
    assert len(stdio) == 1, trace.describe()
    assert stdio[0].kind == "server", trace.describe()
    assert stdio[0].parent_id == call.span_id == parts[2], (
        f"the process's span is the child of the gateway's MCP client span: {trace.describe()}"
    )


def test_with_traces_off_the_clients_context_goes_on_as_it_came(gateways, procs, jaeger):
    gw, secret = world(procs, gateways, jaeger, traced=False)
    # From the SDK client's `_meta`, in both eras.
    for era in (MODERN_VERSION, "legacy"):
        trace_id = secrets.token_hex(16)
        seen = sdk_call_with_meta_context(gw.mcp_url(), secret, era, trace_id)
        assert seen == {"traceparent": traceparent(trace_id), "tracestate": TRACESTATE}, (era, seen)
    # From a header alone: the gateway writes it into `_meta` as well.
    trace_id = secrets.token_hex(16)
    headers = {"traceparent": traceparent(trace_id), "tracestate": TRACESTATE}
    reply = RawMcp(gw.mcp_url(), secret, MODERN_VERSION, headers=headers).call_tool("st__trace_context", {})
    assert reply.status == 200 and not reply.result.get("isError"), reply.raw[:300]
    assert reply.result.get("structuredContent") == headers, reply.raw[:300]
    # The control: no context sent, none invented (traces are off: the gateway starts none).
    reply = RawMcp(gw.mcp_url(), secret, MODERN_VERSION).call_tool("st__trace_context", {})
    assert reply.status == 200 and reply.result.get("structuredContent") == {}, reply.raw[:300]


def test_a_call_without_a_context_starts_the_gateways_own_trace(gateways, procs, jaeger):
    gw, secret = world(procs, gateways, jaeger, traced=True)
    reply = RawMcp(gw.mcp_url(), secret, MODERN_VERSION).call_tool("st__trace_context", {})
    assert reply.status == 200 and not reply.result.get("isError"), reply.raw[:300]
    tp = reply.result.get("structuredContent", {}).get("traceparent", "")
    parts = tp.split("-")
    assert len(parts) == 4, reply.raw[:300]
    trace = jaeger.wait_for_trace(parts[1], lambda spans: {STDIO_SERVICE, GATEWAY_SERVICE} <= {s.service for s in spans})
    request = next(s for s in trace.spans if s.service == GATEWAY_SERVICE and s.kind == "server")
    assert request.parent_id is None, f"a new trace's root: {trace.describe()}"
