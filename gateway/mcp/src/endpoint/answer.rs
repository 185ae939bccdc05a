//! The answer to one MCP POST: the era told apart, its checks, then dispatch (or a reply routed
//! to the relay that asked), and what the request's metric says.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::context::McpContext;
use crate::dispatch::{Answer, Failure, Request};
use crate::listen;
use crate::relay::{self};
use crate::target::{Target, dispatch};
use switchboard_core::audit;
use switchboard_core::errors::{GatewayError, jsonrpc_error_response_in, plain_error_response};
use switchboard_core::scope::{Resource, authenticate};
use switchboard_protocol::{self as protocol, Era};
use switchboard_upstream::RpcResult;

use super::input::{deliver_reply, exchange_route, pass_input_reply, resume_exchange};
use super::legacy::{check_legacy, session_setting};
use super::message::{EraChecked, Incoming, parse_message};
use super::modern::{check_modern, discover};
use super::replies::{header_str, metric_method, raw_result_response, rpc_response};

/// A call's method and the name it is about, as its audit record carries them (the name, never
/// the arguments).
pub(super) fn note_call(noted: &mut audit::Noted, method: &str, params: Option<&Value>) {
    noted.rpc_method = Some(audit::name(method));
    let field = |f: &str| {
        params
            .and_then(|p| p.get(f))
            .and_then(Value::as_str)
            .map(audit::name)
    };
    match method {
        "tools/call" => noted.tool = field("name"),
        "prompts/get" => noted.prompt = field("name"),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            noted.resource = field("uri")
        }
        _ => {}
    }
}

/// A JSON-RPC id as the request's span carries it (`jsonrpc.request.id`): a string as it is
/// (capped like a name), a number as its text; none for `null` (the conventions leave it out).
fn rpc_id_text(id: &Value) -> Option<String> {
    match id {
        Value::String(s) => Some(audit::name(s)),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// What a request's metric says: (method, outcome), `None` for nothing to count.
pub(super) type Counted = Option<(&'static str, &'static str)>;

/// The answer to one MCP POST, and what its metric says.
pub(super) async fn answer(
    cx: &Arc<McpContext>,
    prefix: Option<String>,
    headers: HeaderMap,
    body: Bytes,
) -> (Response, Counted) {
    let table = cx.table();
    let limit = table.settings.max_body_bytes;
    let fail = |id: &Value, e: GatewayError, method: &'static str, era: Era| {
        let outcome = e.outcome();
        (
            jsonrpc_error_response_in(id, &e, era),
            Some((method, outcome)),
        )
    };
    if body.len() > limit {
        return fail(
            &Value::Null,
            GatewayError::PayloadTooLarge { limit },
            "-",
            Era::Rev2025,
        );
    }
    // The rare branches below (replies, exchanges, handshakes, subscriptions) are boxed: their
    // state would otherwise make every request's future as large as the largest of them.
    let resource = match prefix.as_deref() {
        Some(prefix) => Resource::McpServer(prefix),
        None => Resource::Mcp,
    };
    let caller = match authenticate(table, headers, &cx.metrics, resource).await {
        Ok(c) => Arc::new(c),
        Err(e) => return fail(&Value::Null, e, "-", Era::Rev2025),
    };
    let message = match parse_message(&body) {
        Ok(Incoming::Call(m)) => m,
        Ok(Incoming::Reply { id, body: reply }) => {
            if let Some(route) = exchange_route(&caller, id.as_str()) {
                let response = Box::pin(pass_input_reply(
                    cx,
                    &caller,
                    route,
                    reply,
                    caller.headers.clone(),
                    body,
                ))
                .await;
                let outcome = if response.status().is_success() {
                    "ok"
                } else {
                    "failed"
                };
                return (response, Some(("reply", outcome)));
            }
            return match Box::pin(deliver_reply(cx, &caller, prefix.as_deref(), id, reply)).await {
                Ok(()) => (StatusCode::ACCEPTED.into_response(), Some(("reply", "ok"))),
                Err(e) => fail(&Value::Null, e, "reply", Era::Rev2025),
            };
        }
        Err(e) => return fail(&Value::Null, e, "-", Era::Rev2025),
    };
    let id = message.id.clone().unwrap_or(Value::Null);
    let method = metric_method(&message.method);
    audit::note(|n| {
        note_call(n, &message.method, message.params.as_ref());
        n.rpc_id = message.id.as_ref().and_then(rpc_id_text);
    });
    let target = match &prefix {
        None => Target::Aggregate,
        // A path names a virtual server or a server's prefix (validation keeps them apart).
        Some(p) => match caller.virtual_for_path(p) {
            Some(vs) => {
                audit::note(|n| n.virtual_server = Some(vs.id().to_string()));
                Target::Virtual(vs)
            }
            None => match caller.server_for_path(p) {
                Ok(server) => Target::Single(server),
                // A server the caller cannot reach is invisible: the endpoint does not exist
                // (its record says it was refused).
                Err(e) => return (plain_error_response(&e), Some((method, e.outcome()))),
            },
        },
    };
    let version_header = header_str(&caller.headers, "mcp-protocol-version");
    let has_session = caller.headers.contains_key("mcp-session-id");
    let era = protocol::classify(
        &message.method,
        message.params.as_ref(),
        version_header,
        has_session,
    );
    if era == Era::Rev2026
        && let Some(route) = message
            .params
            .as_ref()
            .and_then(|p| p.get("requestState"))
            .and_then(|s| exchange_route(&caller, s.as_str()))
    {
        // The retry of a call whose legacy upstream asked for input: it resumes the paused
        // stream, wherever that is held.
        let headers = caller.headers.clone();
        let response = Box::pin(resume_exchange(cx, &caller, route, message, headers, body)).await;
        return (response, None);
    }
    if era == Era::Rev2026 {
        audit::note(|n| n.protocol_version = Some(protocol::MODERN_VERSION));
    }
    let prepared = match era {
        Era::Rev2026 => check_modern(&caller.headers, &message),
        Era::Rev2025 => Box::pin(check_legacy(cx, &caller, &target, &message)).await,
    };
    let session = match prepared {
        Ok(EraChecked::Answer(response)) => return (response, Some((method, "ok"))),
        Ok(EraChecked::Dispatch { session }) => session,
        Err(e) => return fail(&id, e, method, era),
    };
    if message.id.is_none() {
        // Notifications (initialized, cancelled, ...) concern the gateway's own session with
        // the client; a request the client gives up is cancelled by closing its stream.
        return (StatusCode::ACCEPTED.into_response(), None);
    }
    let accepts_stream = header_str(&caller.headers, "accept")
        .is_some_and(|a| a.contains("text/event-stream") || a.contains("*/*"));
    let listened_servers = match &target {
        Target::Aggregate => Some((caller.servers_in_scope(), message.params.clone())),
        Target::Virtual(vs) => Some((
            crate::virtual_server::servers(&caller, vs),
            crate::virtual_server::listen_params(message.params.clone()),
        )),
        Target::Single(_) => None,
    };
    if message.method == "subscriptions/listen"
        && let Some((servers, params)) = listened_servers
    {
        let listened = Box::pin(listen::fan_in(
            cx,
            &caller,
            servers,
            id.clone(),
            params,
            session,
        ))
        .await;
        return match listened {
            Ok(response) => (response, Some((method, "stream"))),
            // (once: it used to count as a stream and as its error)
            Err(e) => fail(&id, e, method, era),
        };
    }
    let log_level = (era == Era::Rev2025 && session.client != 0).then(|| {
        if message.method == "logging/setLevel"
            && let Some(level) = message
                .params
                .as_ref()
                .and_then(|p| p.get("level"))
                .and_then(Value::as_str)
        {
            cx.set_log_level(session.client, level);
        }
        cx.log_level(session.client)
    });
    let request = Request {
        method: message.method.clone(),
        params: message.params,
        era,
        accepts_stream,
        session,
        log_level,
    };
    let outcome = match (era, message.method.as_str()) {
        (Era::Rev2025, "ping") => Ok(Answer::Json(json!({}))),
        (Era::Rev2026, removed) if protocol::REMOVED_IN_MODERN.contains(&removed) => Err(
            Failure::Gateway(GatewayError::MethodNotFound(removed.to_string())),
        ),
        (Era::Rev2026, "server/discover") => {
            Box::pin(discover(cx, &caller, &target, request)).await
        }
        (Era::Rev2025, m) if protocol::REMOVED_IN_MODERN.contains(&m) => {
            Box::pin(session_setting(cx, &caller, &target, request)).await
        }
        _ => dispatch(cx, &caller, &target, request).await,
    };
    if let Ok(answer) = &outcome
        && message.method == "tools/call"
        && audit::traced()
        && answer.is_tool_error()
    {
        audit::note(|n| n.tool_error = true);
    }
    match outcome {
        Ok(Answer::Json(mut result)) => {
            match era {
                Era::Rev2026 => protocol::stamp_modern_result(&mut result, &message.method),
                Era::Rev2025 => protocol::strip_modern_result(&mut result),
            }
            let response = rpc_response(&id, "result", result, StatusCode::OK);
            (response, Some((method, "ok")))
        }
        Ok(Answer::Raw(result)) => (
            raw_result_response(&id, result.get(), None),
            Some((method, "ok")),
        ),
        Ok(Answer::ForLegacy(text)) => {
            (raw_result_response(&id, &text, None), Some((method, "ok")))
        }
        Ok(Answer::Relayed {
            result,
            has_result_type,
        }) => {
            let response = match era {
                Era::Rev2026 if protocol::has_cache_fields(&message.method) => {
                    let mut result = RpcResult::Raw(result).into_value();
                    protocol::stamp_modern_result(&mut result, &message.method);
                    rpc_response(&id, "result", result, StatusCode::OK)
                }
                Era::Rev2026 if !has_result_type => {
                    raw_result_response(&id, result.get(), Some(r#""resultType":"complete""#))
                }
                // (A legacy client's result came without 2026-07-28 members already, or as
                // `ForLegacy`: dispatch read them.)
                _ => raw_result_response(&id, result.get(), None),
            };
            (response, Some((method, "ok")))
        }
        Ok(Answer::Stream(relay)) => {
            let mut key_tag = [0u8; 8];
            key_tag.copy_from_slice(&caller.tag()[..8]);
            let response = relay::sse_response(
                *relay,
                relay::Client {
                    id,
                    era,
                    key_tag,
                    table: caller.table.clone(),
                    bridge: Some(relay::Bridge {
                        cx: cx.clone(),
                        caller: caller.clone(),
                    }),
                },
            );
            (response, Some((method, "stream")))
        }
        Err(Failure::Upstream(error, status)) => {
            // A 2026-07-28 client reads the HTTP status as part of the answer: the upstream's
            // own when it set one, else the revision's rule for the code. Legacy: 200.
            let status = match era {
                Era::Rev2025 => StatusCode::OK,
                Era::Rev2026 if status.is_client_error() => status,
                Era::Rev2026 => protocol::modern_error_status(
                    error.get("code").and_then(Value::as_i64).unwrap_or(0),
                ),
            };
            audit::note(|n| n.rpc_error_code = error.get("code").and_then(Value::as_i64));
            (
                rpc_response(&id, "error", error, status),
                Some((method, "upstream_error")),
            )
        }
        Err(Failure::Gateway(e)) => {
            let outcome = e.outcome();
            tracing::info!(method = %message.method, error = %e, outcome, "request failed");
            fail(&id, e, method, era)
        }
    }
}
