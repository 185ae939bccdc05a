//! A client request's span (kind SERVER): the fields it is created with and what it says when
//! its answer ends, following the OpenTelemetry HTTP, MCP and GenAI conventions (docs/audit.md,
//! "Traces", is the list). One POST carries one JSON-RPC message (no batches), so on the MCP
//! endpoints the HTTP server span is the MCP server span too: it is renamed
//! `{mcp.method.name} {target}` (`tools/call github__create_issue`) once the message is read.
//!
//! The span fails (status Error, `error.type`) when the request did, as the conventions say a
//! server span does: a JSON-RPC error (`error.type` is its code, for the gateway's own errors
//! and relayed upstream ones alike), a tool result with `isError` (`tool_error`), an answer
//! with a 5xx status (the status; a 4xx is the client's mistake, not the server's failure), or
//! an LLM stream that broke after its 200 (the outcome). The status description stays empty:
//! a JSON-RPC error's message may repeat the client's arguments, and spans carry names, never
//! payloads (invariant 8); the class is in `error.type`, the gateway's word in
//! `switchboard.outcome`.

use tracing::field::Empty;

use crate::noted::{self, Noted};

/// The endpoints that speak MCP (one JSON-RPC message per POST), as records name them.
const MCP_ENDPOINTS: [&str; 2] = ["mcp", "mcp_single"];

/// The span of a client request, named `{method} {route}` (the HTTP conventions; `{method}`
/// alone for a path that matched no route) until [`finish`] knows better.
pub fn start(
    method: &http::Method,
    route: Option<&'static str>,
    path: &str,
    request_id: &str,
) -> tracing::Span {
    let name = match route {
        Some(route) => format!("{method} {route}"),
        None => method.to_string(),
    };
    tracing::info_span!(
        target: switchboard_telemetry::SPAN_TARGET,
        "request",
        otel.name = name,
        otel.kind = "server",
        http.request.method = %method,
        http.route = route,
        url.path = %noted::name(path),
        switchboard.request_id = %request_id,
        http.response.status_code = Empty,
        switchboard.outcome = Empty,
        switchboard.caller = Empty,
        switchboard.server = Empty,
        mcp.method.name = Empty,
        mcp.protocol.version = Empty,
        mcp.session.id = Empty,
        jsonrpc.request.id = Empty,
        rpc.response.status_code = Empty,
        gen_ai.operation.name = Empty,
        gen_ai.tool.name = Empty,
        gen_ai.prompt.name = Empty,
        gen_ai.request.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
    )
}

/// What the span of a request to `endpoint` says once its answer (`status`, `outcome`) ended.
pub fn finish(span: &tracing::Span, endpoint: &str, noted: &Noted, status: u16, outcome: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("http.response.status_code", i64::from(status));
    span.record("switchboard.outcome", outcome);
    if let Some(c) = &noted.caller {
        span.record("switchboard.caller", c.key.as_str());
    }
    for (field, value) in [
        ("switchboard.server", &noted.server),
        ("mcp.method.name", &noted.rpc_method),
        ("jsonrpc.request.id", &noted.rpc_id),
        ("gen_ai.tool.name", &noted.tool),
        ("gen_ai.prompt.name", &noted.prompt),
        ("gen_ai.request.model", &noted.model),
    ] {
        if let Some(v) = value {
            span.record(field, v.as_str());
        }
    }
    if let Some(version) = noted.protocol_version {
        span.record("mcp.protocol.version", version);
    }
    if let Some(tag) = noted.session_tag {
        span.record("mcp.session.id", session_id(tag).as_str());
    }
    if noted.tool.is_some() && noted.rpc_method.as_deref() == Some("tools/call") {
        span.record("gen_ai.operation.name", "execute_tool");
    }
    if let Some(t) = noted.tokens {
        // (i64: unsigned values reach the exporter as strings)
        span.record("gen_ai.usage.input_tokens", t.input as i64);
        span.record("gen_ai.usage.output_tokens", t.output as i64);
    }
    if MCP_ENDPOINTS.contains(&endpoint)
        && let Some(method) = &noted.rpc_method
    {
        switchboard_telemetry::span::rename(span, mcp_span_name(method, noted));
    }
    if let Some(code) = noted.rpc_error_code {
        let code = code.to_string();
        span.record("rpc.response.status_code", code.as_str());
        switchboard_telemetry::span::fail(span, code, None);
    } else if noted.tool_error {
        switchboard_telemetry::span::fail(span, "tool_error", None);
    } else if status >= 500 {
        switchboard_telemetry::span::fail(span, status.to_string(), None);
    } else if STREAM_FAILURES.contains(&outcome) {
        switchboard_telemetry::span::fail(span, outcome.to_string(), None);
    }
}

/// Outcomes of a streamed answer that failed after its 200 was sent (the LLM loop's).
const STREAM_FAILURES: [&str; 2] = ["provider_stream_broken", "provider_stream_error"];

/// `{mcp.method.name} {target}`: the target is the tool or prompt the request names (low
/// cardinality); a resource's URI is not (the conventions leave it out of names by default).
fn mcp_span_name(method: &str, noted: &Noted) -> String {
    let target = match method {
        "tools/call" => noted.tool.as_deref(),
        "prompts/get" => noted.prompt.as_deref(),
        _ => None,
    };
    match target {
        Some(target) => format!("{method} {target}"),
        None => method.to_string(),
    }
}

/// `mcp.session.id` of a legacy session: its tag, which is the first 8 bytes of the sealed
/// `Mcp-Session-Id` (its nonce), in hex. Not the id itself: with the key that opened it, the id
/// continues and ends the session, and traces reach more readers than keys do; the tag tells
/// one session's requests apart just as well, and a client's id maps to it (the first 16 hex
/// digits of its base64url decoding).
pub fn session_id(tag: u64) -> String {
    tag.to_le_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mcp_span_is_named_by_its_method_and_target() {
        let noted = Noted {
            tool: Some("alpha__add".into()),
            prompt: Some("greet".into()),
            resource: Some("file:///etc/hosts".into()),
            ..Noted::default()
        };
        assert_eq!(mcp_span_name("tools/call", &noted), "tools/call alpha__add");
        assert_eq!(mcp_span_name("prompts/get", &noted), "prompts/get greet");
        // A URI is high-cardinality: the method alone.
        assert_eq!(mcp_span_name("resources/read", &noted), "resources/read");
        assert_eq!(mcp_span_name("tools/list", &Noted::default()), "tools/list");
    }

    #[test]
    fn a_session_is_named_by_the_first_bytes_of_its_sealed_id() {
        use base64::Engine as _;
        let sealer =
            crate::session::SessionSealer::new(Some("a key"), std::time::Duration::from_secs(60));
        let (id, tag) = sealer.seal(&[7u8; 32], 2, 5, std::time::SystemTime::now());
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&id)
            .unwrap();
        let expected: String = bytes[..8].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(session_id(tag), expected);
        assert!(!id.contains(&session_id(tag)), "the tag is not the id");
    }
}
