"""Issue 22: OpenTelemetry traces into a real Jaeger v2 (tests/setup-jaeger.sh), read back through
its query API: the span tree of a `tools/call` through a credential that needs a token fetch
(OTLP over gRPC), of a relayed SSE stream with progress, and of an LLM request whose loop runs a
hidden gateway tool (OTLP over HTTP); the client's trace id is the one the upstream, the token
endpoint and the provider received in `traceparent`. The control cases: with tracing off the
client's `traceparent` is passed on unchanged, and a trace id never sent is not found.

Export over TLS: a second Jaeger whose OTLP receivers serve TLS with a private CA and ask for a
client certificate (mTLS); the gateway exports to it over gRPC and HTTP with
OTEL_EXPORTER_OTLP_CERTIFICATE / _CLIENT_CERTIFICATE / _CLIENT_KEY. The controls: without the CA,
or without the client certificate, nothing arrives (checked once a correctly configured
gateway's later trace did, after the misconfigured one had exited).
"""

from __future__ import annotations

import httpx
import pytest
from harness import (
    MODERN_VERSION,
    RawMcp,
    gateway_config,
    key,
    new_secret,
    oauth_server,
    server,
    start_rust_upstream,
    start_rust_upstream_with,
)
from jaeger import GATEWAY_SERVICE
from jaeger import start as start_jaeger
from llm_harness import ANTHROPIC_VERSION, start_llm_world, text, tool_use
from private_ca import PrivateCa

PARENT = "00f067aa0ba902b7"


def has_request(spans) -> bool:
    """The request's own span arrived: it ends after its children (the response is written
    last), so with short export batches it may come a batch after them."""
    return any(s.kind == "server" for s in spans)


def traceparent(trace_id: str) -> str:
    return f"00-{trace_id}-{PARENT}-01"


def new_trace_id() -> str:
    import secrets

    return secrets.token_hex(16)


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory):
    j = start_jaeger(tmp_path_factory.mktemp("jaeger"))
    yield j
    j.stop()


def otel_env(endpoint: str, protocol: str) -> dict[str, str]:
    # Spans exported a fifth of a second after they end, not the SDK's 5 s: the tests wait.
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_BSP_SCHEDULE_DELAY": "200"}  # fmt: skip


def received(upstream, path_part: str, trace_id: str) -> list[dict]:
    return [
        r for r in upstream.recent_requests() if path_part in r["path"] and trace_id in (r["headers"].get("traceparent") or "")
    ]


def test_a_tool_call_through_a_token_fetch_is_one_trace_over_grpc(gateways, procs, jaeger):
    up = start_rust_upstream_with(procs, "traced", "--record", "200")
    secret = new_secret("traced")
    gw = gateways.start(
        gateway_config([server("alpha", up.mcp_url, auth=oauth_server(up, "gw"))], [key("one", secret, ["alpha"])]),
        env=otel_env(jaeger.otlp_grpc, "grpc"),
    )
    trace_id = new_trace_id()
    reply = RawMcp(gw.mcp_url(), secret, MODERN_VERSION, headers={"traceparent": traceparent(trace_id)}).call_tool(
        "alpha__add", {"a": 1, "b": 2}
    )
    assert reply.status == 200 and not reply.result.get("isError"), reply.raw[:300]

    trace = jaeger.wait_for_trace(
        trace_id,
        lambda spans: has_request(spans) and sum(s.name.startswith("POST") and s.kind == "client" for s in spans) >= 2,
    )
    request = next(s for s in trace.spans if s.kind == "server")
    assert request.service == GATEWAY_SERVICE, trace.describe()
    assert request.parent_id == PARENT, f"the request span continues the client's: {trace.describe()}"
    assert request.attributes.get("mcp.method.name") == "tools/call", request.attributes
    assert request.attributes.get("gen_ai.tool.name") == "alpha__add", request.attributes
    assert request.attributes.get("switchboard.server") == "alpha", request.attributes
    assert request.attributes.get("http.response.status_code") == 200, request.attributes
    # The HTTP exchanges (the MCP call's client span holds them: see test_traces_semconv.py).
    outgoing = [s for s in request.descendants() if s.kind == "client" and "url.path" in s.attributes]
    paths = sorted(s.attributes.get("url.path") for s in outgoing)
    assert "/oauth/token" in paths and "/mcp" in paths, f"token fetch and MCP call as children: {trace.describe()}"
    # What the upstream and its token endpoint received: the client's trace id, each with the
    # span id of the gateway's span for that call as parent.
    for part in ("/oauth/token", "/mcp"):
        got = received(up, part, trace_id)
        assert got, f"{part} received no traceparent with the client's trace id: {up.recent_requests()[-3:]}"
        span_ids = {s.span_id for s in outgoing if s.attributes.get("url.path") == part}
        assert got[-1]["headers"]["traceparent"].split("-")[2] in span_ids


def test_a_relayed_stream_is_one_span_to_its_end(gateways, procs, jaeger):
    up = start_rust_upstream(procs, "traced-sse")
    secret = new_secret("traced-sse")
    gw = gateways.start(
        gateway_config([server("ex", up.variant_url("sse"))], [key("c", secret, ["ex"])]),
        env=otel_env(jaeger.otlp_grpc, "grpc"),
    )
    trace_id = new_trace_id()
    mcp = RawMcp(
        gw.mcp_url("ex"),
        secret,
        MODERN_VERSION,
        headers={"accept": "application/json, text/event-stream", "traceparent": traceparent(trace_id)},
    )
    reply = mcp.request("tools/call", {"name": "slow", "arguments": {"ms": 300}, "_meta": {"progressToken": "p"}})
    assert reply.status == 200 and len(reply.messages) >= 2, reply.raw[:300]
    trace = jaeger.wait_for_trace(trace_id, lambda spans: any(s.kind == "server" for s in spans))
    request = next(s for s in trace.spans if s.kind == "server")
    assert request.attributes.get("switchboard.outcome") == "stream", request.attributes
    took = (request.end_ns - request.start_ns) / 1e6
    assert took >= 300, f"the request span ends with the stream: {took:.0f} ms, the reply took {reply.elapsed * 1000:.0f} ms"
    assert any(s.kind == "client" for s in request.descendants()), trace.describe()


def test_an_llm_loop_with_a_gateway_tool_is_one_trace_over_http(gateways, procs, rust_upstream, jaeger, monkeypatch):
    for k, v in otel_env(jaeger.otlp_http, "http/protobuf").items():
        monkeypatch.setenv(k, v)
    world = start_llm_world(gateways, procs, rust_upstream, tools=[{"server": "tools", "tools": {"allow": ["add"]}}])
    world.provider.script(
        {"respond": {"content": [tool_use("tools__add", a=1, b=2)]}},
        {"respond": {"content": [text("three")]}},
    )
    trace_id = new_trace_id()
    r = httpx.post(
        f"{world.gateway.url}/v1/messages",
        json={"model": "claude-test", "max_tokens": 20, "messages": [{"role": "user", "content": "add"}]},
        headers={"x-api-key": world.key, "anthropic-version": ANTHROPIC_VERSION, "traceparent": traceparent(trace_id)},
        timeout=30,
    )
    assert r.status_code == 200, r.text[:300]
    trace = jaeger.wait_for_trace(trace_id, lambda spans: has_request(spans) and sum(s.kind == "client" for s in spans) >= 3)
    request = next(s for s in trace.spans if s.kind == "server")
    assert request.attributes.get("gen_ai.request.model") == "claude", request.attributes
    assert request.attributes.get("gen_ai.usage.output_tokens", 0) > 0, request.attributes
    children = [s for s in request.descendants() if s.kind == "client"]
    model_calls = [s for s in children if s.attributes.get("url.path") == "/v1/messages"]
    tool_calls = [s for s in children if s.attributes.get("url.path") == "/mcp"]
    assert len(model_calls) >= 2 and tool_calls, f"model calls and the gateway tool calls: {trace.describe()}"
    seen = [q for q in world.provider.model_calls() if trace_id in (q.get("headers", {}).get("traceparent") or "")]
    assert len(seen) == len(model_calls), (
        f"the provider received the client's trace id on every call: {len(seen)} of {len(model_calls)}"
    )
    parents = {q["headers"]["traceparent"].split("-")[2] for q in seen}
    assert parents == {s.span_id for s in model_calls}, "each model call's parent is the gateway's span for it"


def test_control_tracing_off_passes_the_clients_traceparent_on(gateways, procs, jaeger):
    up = start_rust_upstream_with(procs, "untraced", "--record", "50")
    secret = new_secret("untraced")
    gw = gateways.start(gateway_config([server("alpha", up.mcp_url)], [key("one", secret, ["alpha"])]))
    trace_id = new_trace_id()
    reply = RawMcp(gw.mcp_url(), secret, MODERN_VERSION, headers={"traceparent": traceparent(trace_id)}).call_tool(
        "alpha__add", {"a": 1, "b": 2}
    )
    assert reply.status == 200
    got = received(up, "/mcp", trace_id)
    assert got and got[-1]["headers"]["traceparent"] == traceparent(trace_id), up.recent_requests()[-2:]
    # Nothing was exported: the wait for this trace fails (the checks above can fail too).
    with pytest.raises(AssertionError):
        jaeger.wait_for_trace(trace_id, lambda spans: bool(spans), timeout=3)


def test_ratio_zero_follows_the_clients_sampled_flag(gateways, procs, jaeger):
    up = start_rust_upstream_with(procs, "ratio0", "--record", "50")
    secret = new_secret("ratio0")
    gw = gateways.start(
        gateway_config([server("alpha", up.mcp_url)], [key("one", secret, ["alpha"])]),
        env={**otel_env(jaeger.otlp_grpc, "grpc"), "OTEL_TRACES_SAMPLER_ARG": "0"},
    )
    unsampled, sampled = new_trace_id(), new_trace_id()
    for trace_id, flags in ((unsampled, "00"), (sampled, "01")):
        header = f"00-{trace_id}-{PARENT}-{flags}"
        reply = RawMcp(gw.mcp_url(), secret, MODERN_VERSION, headers={"traceparent": header}).call_tool(
            "alpha__add", {"a": 1, "b": 2}
        )
        assert reply.status == 200
    # The client said sampled: traced at ratio 0 (parent-based), the upstream's parent is ours.
    trace = jaeger.wait_for_trace(sampled, lambda spans: any(s.kind == "client" for s in spans))
    got = received(up, "/mcp", sampled)
    assert got and got[-1]["headers"]["traceparent"].split("-")[2] != PARENT, trace.describe()
    # Not sampled: no span anywhere, and the client's context passes on unchanged.
    got = received(up, "/mcp", unsampled)
    assert got and got[-1]["headers"]["traceparent"] == f"00-{unsampled}-{PARENT}-00"
    with pytest.raises(AssertionError):
        jaeger.wait_for_trace(unsampled, lambda spans: bool(spans), timeout=3)


# --------------------------------------------------------------------------------------------
# Export over TLS


@pytest.fixture(scope="module")
def tls_collector(tmp_path_factory):
    """A Jaeger whose OTLP receivers serve TLS under a private CA and require a client
    certificate from it; yields (jaeger, the CA's PEM, a client certificate, its key)."""
    d = tmp_path_factory.mktemp("jaeger-tls")
    ca = PrivateCa("collector")
    ca_path = ca.write(d)
    cert, key_path = ca.issue("collector", ips=("127.0.0.1",)).write(d, "collector")
    client_cert, client_key = ca.issue("gateway", client=True).write(d, "gateway")
    j = start_jaeger(d, tls={"cert_file": str(cert), "key_file": str(key_path), "client_ca_file": str(ca_path)})
    assert j.otlp_grpc.startswith("https://") and j.otlp_http.startswith("https://")
    yield j, ca_path, client_cert, client_key
    j.stop()


def tls_env(collector, protocol: str, *, ca: bool = True, client: bool = True) -> dict[str, str]:
    j, ca_path, client_cert, client_key = collector
    env = otel_env(j.otlp_grpc if protocol == "grpc" else j.otlp_http, protocol)
    if ca:
        env["OTEL_EXPORTER_OTLP_CERTIFICATE"] = str(ca_path)
    if client:
        env["OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"] = str(client_cert)
        env["OTEL_EXPORTER_OTLP_CLIENT_KEY"] = str(client_key)
    return env


def traced_call(gateways, procs, name: str, env: dict[str, str]):
    """A gateway exporting with `env`, and one traced `tools/call` through it; returns
    (gateway, trace id)."""
    up = start_rust_upstream(procs, name)
    secret = new_secret(name)
    gw = gateways.start(gateway_config([server("alpha", up.mcp_url)], [key("one", secret, ["alpha"])]), env=env)
    trace_id = new_trace_id()
    reply = RawMcp(gw.mcp_url(), secret, MODERN_VERSION, headers={"traceparent": traceparent(trace_id)}).call_tool(
        "alpha__add", {"a": 1, "b": 2}
    )
    assert reply.status == 200 and not reply.result.get("isError"), reply.raw[:300]
    return gw, trace_id


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_export_to_a_collector_behind_a_private_ca_with_mtls(gateways, procs, tls_collector, protocol):
    j = tls_collector[0]
    _, trace_id = traced_call(gateways, procs, "tls-export", tls_env(tls_collector, protocol))
    trace = j.wait_for_trace(trace_id, lambda spans: has_request(spans) and any(s.kind == "client" for s in spans))
    request = next(s for s in trace.spans if s.kind == "server")
    assert request.service == GATEWAY_SERVICE and request.parent_id == PARENT, trace.describe()


@pytest.mark.parametrize(
    "missing, settings",
    [("the private CA", {"ca": False}), ("the client certificate", {"client": False})],
    ids=["no-ca", "no-client-cert"],
)
def test_control_a_misconfigured_tls_export_delivers_nothing(gateways, procs, tls_collector, missing, settings):
    j = tls_collector[0]
    bad, lost = traced_call(gateways, procs, "tls-bad", tls_env(tls_collector, "grpc", **settings))
    # Its exit flushes the batch (the export fails at the handshake) before the next starts.
    bad.proc.stop(grace=15)
    _, arrived = traced_call(gateways, procs, "tls-good", tls_env(tls_collector, "grpc"))
    j.wait_for_trace(arrived, lambda spans: any(s.kind == "server" for s in spans))
    assert j.trace(lost) is None, f"a trace arrived without {missing}: the collector's TLS is not what it seems"
