"""Issue 35, item 3: traces that show failure, named and attributed as the OpenTelemetry HTTP,
MCP and GenAI semantic conventions say, read back from a real Jaeger v2 (tests/setup-jaeger.sh)
field by field.

- An upstream that refuses connections (a socket bound and never listening), one that answers
  HTTP 500 (the standard library's HTTP server), and a JSON-RPC error from the official Python
  SDK's server (`resources/read` of an unknown URI: -32602, as JSON and as SSE): the HTTP client
  span, the MCP client span and the request's server span are each status ERROR with the
  `error.type` the conventions name; a tool result with `isError` is `tool_error`.
- The control: a tool call that succeeds has no span with an error status or an `error.type`.
- Names and attributes: `tools/call {tool}` server and client spans, `mcp.method.name`,
  `gen_ai.tool.name`, `gen_ai.operation.name` `execute_tool`, `jsonrpc.request.id`,
  `mcp.protocol.version`, and for a legacy session `mcp.session.id`: the session's tag (the first
  8 bytes of the sealed id), never the id itself.
- A model call through `/v1/messages` (the scripted provider, examples/provider) is a GenAI
  client span `chat {model}` with `gen_ai.operation.name`, `gen_ai.provider.name`, request and
  response model and the call's own token usage, whole and streamed; the gateway tool the loop
  runs is an MCP client span beside it; a provider's 500 fails the model call's span.
- Jaeger's error search (`tags={"error":"true"}`, what its UI sends; on Badger storage, whose
  search reads a span's status) finds each failed call and not the control.
- No span carries a prompt, an argument or a result.
"""

from __future__ import annotations

import base64
import http.server
import json
import secrets
import socket
import threading

import httpx
import pytest
from harness import (
    LEGACY_VERSION,
    MODERN_VERSION,
    RawMcp,
    gateway_config,
    key,
    new_secret,
    server,
    start_python_upstream,
)
from jaeger import Span, Trace
from jaeger import start as start_jaeger
from llm_harness import ANTHROPIC_VERSION, start_llm_world, text, tool_use

PARENT = "00f067aa0ba902b7"
UPSTREAM_UNAVAILABLE = "-32002"


def new_trace_id() -> str:
    return secrets.token_hex(16)


def traceparent(trace_id: str) -> dict[str, str]:
    return {"traceparent": f"00-{trace_id}-{PARENT}-01"}


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory):
    j = start_jaeger(tmp_path_factory.mktemp("jaeger"))
    yield j
    j.stop()


def otel(jaeger) -> dict[str, str]:
    # Spans exported a fifth of a second after they end, not the SDK's 5 s: the tests wait.
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_grpc, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_BSP_SCHEDULE_DELAY": "200"}  # fmt: skip


@pytest.fixture
def refusing_url():
    """An address that refuses connections: a socket bound (so the port stays ours) and never
    listening, so a connection attempt gets a reset."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}/mcp"


@pytest.fixture
def failing_url():
    """The standard library's HTTP server answering every POST with HTTP 500."""

    class Fails(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (the standard library's name)
            self.rfile.read(int(self.headers.get("content-length") or 0))
            body = b"internal error"
            self.send_response(500)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fails)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def one_server_gateway(gateways, jaeger, url: str, name: str = "alpha"):
    secret = new_secret(name)
    gw = gateways.start(gateway_config([server(name, url)], [key("one", secret, [name])]), env=otel(jaeger))
    return gw, secret


def the_request(trace: Trace) -> Span:
    servers = [s for s in trace.spans if s.kind == "server"]
    assert len(servers) == 1, f"one server span: {trace.describe()}"
    return servers[0]


def failed(span: Span, error_type: str, trace: Trace) -> None:
    """The span is status ERROR with this `error.type` (the conventions' "Recording errors")."""
    assert span.status_code == "ERROR", f"{span.name} status {span.status_code!r}:\n{trace.describe()}"
    assert span.attributes.get("error.type") == error_type, (
        f"{span.name}: error.type {span.attributes.get('error.type')!r}, expected {error_type!r}"
    )


def no_payload(trace: Trace, *payloads: str) -> None:
    for s in trace.spans:
        for k, v in {**s.attributes, "(name)": s.name, "(status)": s.status_message}.items():
            for p in payloads:
                assert p not in str(v), f"{p!r} in {s.name} {k}={v!r}"


def wait_for(jaeger, trace_id: str, clients: int) -> Trace:
    """The trace once its server span and `clients` client spans arrived; if fewer come (a span
    that outlives the request's, e.g. a stream's, arrives a batch later), what there is, for the
    assertions to say what is missing."""
    first = jaeger.wait_for_trace(
        trace_id, lambda spans: any(s.kind == "server" for s in spans) and any(s.kind == "client" for s in spans)
    )
    try:
        return jaeger.wait_for_trace(trace_id, lambda spans: sum(s.kind == "client" for s in spans) >= clients, timeout=12)
    except AssertionError:
        return jaeger.trace(trace_id) or first


def call_and_trace(gw, secret, jaeger, method: str, params: dict, clients: int, era: str = MODERN_VERSION, prefix="alpha"):
    trace_id = new_trace_id()
    mcp = RawMcp(gw.mcp_url(prefix), secret, era, headers=traceparent(trace_id))
    reply = mcp.request(method, params)
    return reply, wait_for(jaeger, trace_id, clients), trace_id, mcp


# --------------------------------------------------------------------------------------------
# Failed upstream calls


def test_an_upstream_that_refuses_connections_fails_every_span_of_the_call(gateways, jaeger, refusing_url):
    gw, secret = one_server_gateway(gateways, jaeger, refusing_url)
    reply, trace, _, _ = call_and_trace(gw, secret, jaeger, "tools/call", {"name": "add", "arguments": {"a": 1}}, clients=2)
    assert reply.error["code"] == int(UPSTREAM_UNAVAILABLE), reply.raw[:300]

    request = the_request(trace)
    failed(request, UPSTREAM_UNAVAILABLE, trace)
    assert request.name == "tools/call add", trace.describe()
    assert request.attributes.get("rpc.response.status_code") == UPSTREAM_UNAVAILABLE
    assert request.attributes.get("http.response.status_code") == reply.status
    assert request.attributes.get("mcp.method.name") == "tools/call"
    assert request.attributes.get("gen_ai.tool.name") == "add"
    assert request.attributes.get("gen_ai.operation.name") == "execute_tool"
    assert request.attributes.get("mcp.protocol.version") == MODERN_VERSION
    assert request.attributes.get("jsonrpc.request.id") == "1"
    assert request.attributes.get("http.route") == "/mcp/{prefix}"

    calls = [s for s in request.descendants() if s.kind == "client" and s.attributes.get("mcp.method.name")]
    assert len(calls) == 1, trace.describe()
    call = calls[0]
    assert call.name == "tools/call add" and call.attributes.get("switchboard.server") == "alpha", trace.describe()
    failed(call, "upstream_unavailable", trace)
    assert "connection refused" in call.status_message, call.status_message

    attempts = [s for s in call.descendants() if s.kind == "client"]
    assert attempts, f"the HTTP attempt is the MCP call's child:\n{trace.describe()}"
    for attempt in attempts:
        assert attempt.name == "POST", trace.describe()
        failed(attempt, "connection_refused", trace)
        assert "http.response.status_code" not in attempt.attributes
        assert attempt.status_message, "the description says why"


def test_an_upstream_answering_500_fails_every_span_of_the_call(gateways, jaeger, failing_url):
    gw, secret = one_server_gateway(gateways, jaeger, failing_url)
    reply, trace, _, _ = call_and_trace(gw, secret, jaeger, "tools/call", {"name": "add", "arguments": {}}, clients=2)
    assert reply.error["code"] == int(UPSTREAM_UNAVAILABLE), reply.raw[:300]

    request = the_request(trace)
    failed(request, UPSTREAM_UNAVAILABLE, trace)
    call = next(s for s in request.descendants() if s.attributes.get("mcp.method.name") == "tools/call")
    assert call.kind == "client" and call.name == "tools/call add", trace.describe()
    failed(call, "upstream_unavailable", trace)
    attempt = next(s for s in call.descendants() if s.name == "POST")
    failed(attempt, "500", trace)
    assert attempt.attributes.get("http.response.status_code") == 500
    # The status code says why: the HTTP conventions leave the description empty.
    assert attempt.status_message == ""


@pytest.mark.parametrize("reply_kind", ["json", "sse"])
def test_an_upstream_json_rpc_error_fails_the_call_and_the_request(gateways, procs, jaeger, reply_kind):
    up = start_python_upstream(procs, f"py-{reply_kind}", json_response=reply_kind == "json")
    gw, secret = one_server_gateway(gateways, jaeger, up.mcp_url)
    # A first call, so the second's trace holds no era discovery.
    RawMcp(gw.mcp_url("alpha"), secret, MODERN_VERSION).call_tool("add", {"a": 1, "b": 2})
    reply, trace, _, _ = call_and_trace(gw, secret, jaeger, "resources/read", {"uri": "e2e://no-such-resource"}, clients=2)
    assert reply.error["code"] == -32602, reply.raw[:300]

    request = the_request(trace)
    failed(request, "-32602", trace)
    assert request.name == "resources/read", "a URI is no span name (high cardinality)"
    assert request.attributes.get("rpc.response.status_code") == "-32602"
    call = next(s for s in request.descendants() if s.attributes.get("mcp.method.name") == "resources/read")
    assert call.kind == "client" and call.name == "resources/read", trace.describe()
    failed(call, "-32602", trace)
    assert call.attributes.get("rpc.response.status_code") == "-32602"
    # The SDK answers a 2026-07-28 request's error with HTTP 400: the attempt failed too.
    attempt = next(s for s in call.descendants() if s.name == "POST")
    failed(attempt, "400", trace)
    # The upstream's message names the URI the client sent: no span repeats it.
    no_payload(trace, "no-such-resource")


def test_a_tool_result_with_is_error_is_a_tool_error(gateways, procs, jaeger):
    up = start_python_upstream(procs, "py-tool-error", json_response=True)
    gw, secret = one_server_gateway(gateways, jaeger, up.mcp_url)
    marker = "argument-" + secrets.token_hex(4)
    reply, trace, _, _ = call_and_trace(
        gw, secret, jaeger, "tools/call", {"name": "add", "arguments": {"a": marker, "b": 2}}, clients=2
    )
    assert reply.result.get("isError") is True, reply.raw[:300]
    request = the_request(trace)
    failed(request, "tool_error", trace)
    call = next(s for s in request.descendants() if s.attributes.get("mcp.method.name") == "tools/call")
    failed(call, "tool_error", trace)
    # The SDK's error text repeats the argument: no span does.
    assert marker in reply.raw.decode()
    no_payload(trace, marker)


def test_control_a_tool_call_that_succeeds_has_no_error_anywhere(gateways, procs, jaeger):
    up = start_python_upstream(procs, "py-ok")
    gw, secret = one_server_gateway(gateways, jaeger, up.mcp_url)
    reply, trace, _, _ = call_and_trace(gw, secret, jaeger, "tools/call", {"name": "add", "arguments": {"a": 20, "b": 22}}, clients=2)
    assert reply.result.get("isError") is not True and "42" in json.dumps(reply.result), reply.raw[:300]
    for s in trace.spans:
        assert s.status_code == "" and "error.type" not in s.attributes, f"{s.name}:\n{trace.describe()}"
    request = the_request(trace)
    assert request.name == "tools/call add" and request.attributes.get("gen_ai.operation.name") == "execute_tool"
    call = next(s for s in request.descendants() if s.attributes.get("mcp.method.name") == "tools/call")
    assert call.name == "tools/call add" and call.attributes.get("gen_ai.tool.name") == "add"
    assert call.attributes.get("gen_ai.operation.name") == "execute_tool"
    assert any(s.name == "POST" for s in call.descendants()), trace.describe()


def test_a_legacy_session_is_named_by_its_tag_never_by_its_id(gateways, procs, jaeger):
    up = start_python_upstream(procs, "py-legacy")
    gw, secret = one_server_gateway(gateways, jaeger, up.mcp_url)
    # The aggregate endpoint: the name the client used is the prefixed one.
    trace_id = new_trace_id()
    mcp = RawMcp(gw.mcp_url(), secret, "legacy", headers=traceparent(trace_id))
    reply = mcp.request("tools/call", {"name": "alpha__add", "arguments": {"a": 1, "b": 2}})
    assert reply.status == 200 and not reply.result.get("isError"), reply.raw[:300]
    trace = jaeger.wait_for_trace(
        trace_id,
        lambda spans: sum(s.kind == "server" for s in spans) >= 2
        and any(s.attributes.get("mcp.method.name") == "tools/call" and s.kind == "server" for s in spans),
    )
    call = next(s for s in trace.spans if s.kind == "server" and s.attributes.get("mcp.method.name") == "tools/call")
    assert call.name == "tools/call alpha__add", trace.describe()
    sealed = mcp.session_id or ""
    tag = base64.urlsafe_b64decode(sealed + "=" * (-len(sealed) % 4))[:8].hex()
    assert call.attributes.get("mcp.session.id") == tag, call.attributes
    assert call.attributes.get("mcp.protocol.version") == LEGACY_VERSION
    assert call.attributes.get("jsonrpc.request.id") == "2"  # initialize was 1
    initialize = next(s for s in trace.spans if s.attributes.get("mcp.method.name") == "initialize")
    assert initialize.name == "initialize" and initialize.attributes.get("mcp.session.id") == tag
    no_payload(trace, sealed)


# --------------------------------------------------------------------------------------------
# Model calls


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_model_call_and_a_tool_call_are_told_apart_by_their_attributes(gateways, procs, rust_upstream, jaeger, monkeypatch, stream):
    for k, v in otel(jaeger).items():
        monkeypatch.setenv(k, v)
    world = start_llm_world(gateways, procs, rust_upstream)
    world.provider.script(
        {
            "when": {"last_tool_result_for": "tools__add"},
            "respond": {"content": [text("the sum")], "usage": {"input_tokens": 17, "output_tokens": 19}},
        },
        {"respond": {"content": [tool_use("tools__add", a=7770001, b=8880002)], "usage": {"input_tokens": 11, "output_tokens": 13}}},
    )
    prompt = "prompt-" + secrets.token_hex(4)
    trace_id = new_trace_id()
    r = httpx.post(
        f"{world.gateway.url}/v1/messages",
        json={"model": "claude-test", "max_tokens": 64, "stream": stream, "messages": [{"role": "user", "content": prompt}]},
        headers={"x-api-key": world.key, "anthropic-version": ANTHROPIC_VERSION, **traceparent(trace_id)},
        timeout=30,
    )
    assert r.status_code == 200, r.text[:300]
    # Two model calls and a tool call, each with its HTTP exchange.
    trace = wait_for(jaeger, trace_id, clients=6)
    request = the_request(trace)
    assert request.name == "POST /v1/messages" and request.status_code == "", trace.describe()
    chats = sorted((s for s in request.descendants() if s.attributes.get("gen_ai.operation.name") == "chat"), key=lambda s: s.start_ns)
    tools = [s for s in request.descendants() if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert len(chats) == 2 and len(tools) == 1, trace.describe()
    for chat, (inp, out) in zip(chats, [(11, 13), (17, 19)]):
        assert chat.kind == "client" and chat.name == "chat scripted-claude", trace.describe()
        assert chat.attributes.get("gen_ai.provider.name") == "anthropic"
        assert chat.attributes.get("gen_ai.request.model") == "scripted-claude"
        assert chat.attributes.get("gen_ai.response.model") == "scripted-claude"
        assert chat.attributes.get("gen_ai.request.max_tokens") == 64
        assert (chat.attributes.get("gen_ai.usage.input_tokens"), chat.attributes.get("gen_ai.usage.output_tokens")) == (inp, out)
        assert "mcp.method.name" not in chat.attributes and "gen_ai.tool.name" not in chat.attributes
        assert chat.status_code == "" and "error.type" not in chat.attributes
        http_calls = [s for s in chat.children if s.kind == "client"]
        assert [s.attributes.get("url.path") for s in http_calls] == ["/v1/messages"], trace.describe()
    assert chats[0].attributes.get("gen_ai.response.finish_reasons") == ["tool_use"]
    assert chats[1].attributes.get("gen_ai.response.finish_reasons") == ["end_turn"]
    if not stream:
        assert str(chats[0].attributes.get("gen_ai.response.id", "")).startswith("msg_")
    tool = tools[0]
    assert tool.kind == "client" and tool.name == "tools/call add", trace.describe()
    assert tool.attributes.get("mcp.method.name") == "tools/call" and tool.attributes.get("gen_ai.tool.name") == "add"
    assert "gen_ai.provider.name" not in tool.attributes and tool.status_code == ""
    assert chats[0].end_ns <= tool.start_ns and tool.end_ns <= chats[1].start_ns, "model, tool, model: in turn"
    # The request's own figures are the sum of its model calls'.
    assert request.attributes.get("gen_ai.usage.output_tokens") == 13 + 19
    no_payload(trace, prompt, "7770001", "16650003", "the sum")


def test_a_provider_refusal_fails_the_model_call(gateways, procs, rust_upstream, jaeger, monkeypatch):
    for k, v in otel(jaeger).items():
        monkeypatch.setenv(k, v)
    world = start_llm_world(gateways, procs, rust_upstream)
    world.provider.script({"respond": {"error": {"status": 500}}})
    trace_id = new_trace_id()
    r = httpx.post(
        f"{world.gateway.url}/v1/messages",
        json={"model": "claude-test", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": world.key, "anthropic-version": ANTHROPIC_VERSION, **traceparent(trace_id)},
        timeout=30,
    )
    assert r.status_code == 500, r.text[:300]
    trace = wait_for(jaeger, trace_id, clients=2)
    request = the_request(trace)
    failed(request, "500", trace)
    chat = next(s for s in trace.spans if s.attributes.get("gen_ai.operation.name") == "chat")
    failed(chat, "500", trace)
    failed(next(s for s in chat.children if s.name == "POST"), "500", trace)


# --------------------------------------------------------------------------------------------
# Jaeger's error search


@pytest.fixture(scope="module")
def searchable_jaeger(tmp_path_factory):
    """A Jaeger with Badger storage: its search reads an ERROR status as the tag `error=true`
    (the memory store of Jaeger 2.13 compares the query's text "true" with a boolean, and its
    error search finds nothing, whoever sent the spans)."""
    j = start_jaeger(tmp_path_factory.mktemp("jaeger-badger"), badger=True)
    yield j
    j.stop()


def test_jaegers_error_search_finds_the_failed_calls_and_not_the_control(
    gateways, procs, searchable_jaeger, refusing_url, failing_url
):
    jaeger = searchable_jaeger
    up = start_python_upstream(procs, "py-search")
    secret = new_secret("search")
    servers = [server("refusing", refusing_url), server("failing", failing_url), server("fine", up.mcp_url)]
    # A service name of its own: the search sees this gateway's traces alone.
    service = "switchboard-search-" + secrets.token_hex(3)
    gw = gateways.start(
        gateway_config(servers, [key("one", secret, ["refusing", "failing", "fine"])]),
        env={**otel(jaeger), "OTEL_SERVICE_NAME": service},
    )
    RawMcp(gw.mcp_url("fine"), secret, MODERN_VERSION).call_tool("add", {"a": 1, "b": 1})  # era discovered
    traced = {}
    for prefix, method, params in [
        ("refusing", "tools/call", {"name": "add", "arguments": {}}),
        ("failing", "tools/call", {"name": "add", "arguments": {}}),
        ("fine", "resources/read", {"uri": "e2e://none"}),
        ("fine", "tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}),
    ]:
        trace_id = new_trace_id()
        RawMcp(gw.mcp_url(prefix), secret, MODERN_VERSION, headers=traceparent(trace_id)).request(method, params)
        traced[(prefix, method)] = trace_id
    failed_ids = {traced[("refusing", "tools/call")], traced[("failing", "tools/call")], traced[("fine", "resources/read")]}
    control = traced[("fine", "tools/call")]
    wait_for(jaeger, control, clients=2)
    # The Jaeger UI's "error=true" search.
    found = jaeger.wait_for_traces(
        service, lambda traces: failed_ids <= {t.trace_id for t in traces}, tags=json.dumps({"error": "true"})
    )
    assert control not in {t.trace_id for t in found}, "the successful call is no error"
    everything = {t.trace_id for t in jaeger.traces(service)}
    assert control in everything, "the control is stored, and only the error search leaves it out"
    # The search matched the failed spans themselves.
    for t in found:
        if t.trace_id in failed_ids:
            assert any(s.attributes.get("error") is True for s in t.spans), t.describe()
