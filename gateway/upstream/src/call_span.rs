//! The MCP client span of one request the gateway makes of an upstream for a client
//! ([`crate::plane::UpstreamPlane::call`]), as the OpenTelemetry MCP conventions describe
//! it: kind CLIENT, named `{mcp.method.name} {target}` (`tools/call create_issue`: the
//! upstream's own tool name), with `mcp.method.name`, `gen_ai.tool.name` or
//! `gen_ai.prompt.name`, `gen_ai.operation.name` `execute_tool` for a tool call, the server
//! (`switchboard.server`, `server.address`, `server.port`). Its HTTP exchanges (a token fetch,
//! a legacy handshake, a renewed attempt) are its children. A streamed answer keeps the span
//! open until the stream ends.
//!
//! It fails (status Error, `error.type`) when the call did: a JSON-RPC error (its code, also in
//! `rpc.response.status_code`), a tool result with `isError` (`tool_error`), or no answer (the
//! upstream-call metric's outcome: `upstream_timeout`, `upstream_unavailable`, ...; the status
//! description says which, in the gateway's words). Never an argument or a result: the
//! conventions' opt-in `gen_ai.tool.call.arguments` and `.result` are never recorded.

use serde_json::{Map, Value};
use tracing::field::Empty;

use switchboard_core::table::Server;
use switchboard_protocol::Params;

/// The span of `method` (with `params` as they go upstream) on `server`, a child of the
/// current span; a disabled span when the request is not traced.
pub(crate) fn start(server: &Server, method: &str, params: Option<&Params>) -> tracing::Span {
    if !switchboard_telemetry::tracing_on() || tracing::Span::current().is_disabled() {
        return tracing::Span::none();
    }
    let named = |field: &str| {
        params
            .and_then(|p| p.str_member(field))
            .map(|n| switchboard_core::audit::name(&n))
    };
    let (tool, prompt) = match method {
        "tools/call" => (named("name"), None),
        "prompts/get" => (None, named("name")),
        _ => (None, None),
    };
    let name = match tool.as_deref().or(prompt.as_deref()) {
        Some(target) => format!("{method} {target}"),
        None => method.to_string(),
    };
    let port = server.url.port_or_known_default().map(i64::from);
    tracing::info_span!(
        target: switchboard_telemetry::SPAN_TARGET,
        "upstream call",
        otel.name = name,
        otel.kind = "client",
        mcp.method.name = method,
        gen_ai.operation.name = tool.is_some().then_some("execute_tool"),
        gen_ai.tool.name = tool.as_deref(),
        gen_ai.prompt.name = prompt.as_deref(),
        switchboard.server = server.id(),
        server.address = server.url.host_str().unwrap_or("-"),
        server.port = port,
        rpc.response.status_code = Empty,
    )
}

/// A streamed call's answer (the JSON-RPC response message the stream carried).
pub(crate) fn answered(span: &tracing::Span, method: &str, message: &Map<String, Value>) {
    if span.is_disabled() {
        return;
    }
    if let Some(error) = message.get("error") {
        rpc_error(span, error);
    } else if method == "tools/call"
        && message.get("result").and_then(|r| r.get("isError")) == Some(&Value::Bool(true))
    {
        switchboard_telemetry::span::fail(span, "tool_error", None);
    }
}

pub(crate) fn rpc_error(span: &tracing::Span, error: &Value) {
    let code = error
        .get("code")
        .and_then(Value::as_i64)
        .map_or_else(|| "_OTHER".to_string(), |c| c.to_string());
    span.record("rpc.response.status_code", code.as_str());
    switchboard_telemetry::span::fail(span, code, None);
}
