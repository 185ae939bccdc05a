//! The client-facing Streamable HTTP endpoint (`POST /mcp`, `POST /mcp/{prefix}`, `DELETE` of a
//! legacy session): checks the gateway key, tells the two protocol eras apart, keeps legacy
//! sessions sealed in their ids, validates 2026-07-28 request headers, routes clients' replies
//! to relayed server-to-client requests, and answers with one JSON-RPC response or a relayed
//! stream.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::context::McpContext;
use crate::dispatch::{Answer, Failure, Request, Target, dispatch};
use crate::exchange::ExchangeRoute;
use crate::listen;
use crate::relay::{self, ReplyRoute};
use switchboard_core::errors::{
    GatewayError, codes, jsonrpc_error_response, jsonrpc_error_response_in,
};
use switchboard_core::scope::{Caller, authenticate, identify};
use switchboard_core::session::{Session, TokenKind, UnsealError};
use switchboard_core::table::Server;
use switchboard_protocol::capabilities;
use switchboard_protocol::{
    self as protocol, Era, HEADER_MISMATCH, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION,
    META_SERVER_INFO, MODERN_VERSION, UNSUPPORTED_PROTOCOL_VERSION,
};
use switchboard_upstream::client::{RpcOutcome, RpcResult, SessionScope};
use switchboard_upstream::plane::Forward;

// The handlers take the whole request and move its headers out: axum's `HeaderMap` extractor
// would copy them on every call.
pub async fn aggregate(
    State(cx): State<Arc<McpContext>>,
    request: axum::extract::Request,
) -> Response {
    match into_headers_and_body(request).await {
        Ok((headers, body)) => handle(&cx, None, headers, body).await,
        Err(refused) => refused,
    }
}

pub async fn single(
    State(cx): State<Arc<McpContext>>,
    Path(prefix): Path<String>,
    request: axum::extract::Request,
) -> Response {
    match into_headers_and_body(request).await {
        Ok((headers, body)) => handle(&cx, Some(prefix), headers, body).await,
        Err(refused) => refused,
    }
}

/// The request's headers and body (read whole by the body-read layer already).
async fn into_headers_and_body(
    request: axum::extract::Request,
) -> Result<(HeaderMap, Bytes), Response> {
    let (parts, body) = request.into_parts();
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => Ok((parts.headers, body)),
        Err(_) => Err((
            StatusCode::BAD_REQUEST,
            "the request body could not be read",
        )
            .into_response()),
    }
}

/// GET: a legacy server-to-client stream outside any request. The gateway keeps no stream per
/// session (a replica holds nothing a request depends on), and the 2026-07-28 revision has
/// none: both allow 405.
pub async fn method_not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "POST, DELETE")],
    )
        .into_response()
}

/// DELETE ends a legacy session: its id is refused from then on (on this replica: see
/// docs/architecture.md, "Sessions"), and the upstream sessions this replica opened for it are
/// closed.
pub async fn end_session(State(cx): State<Arc<McpContext>>, headers: HeaderMap) -> Response {
    let table = cx.table();
    let caller = match authenticate(table, headers, &cx.metrics) {
        Ok(c) => c,
        Err(e) => return jsonrpc_error_response(&Value::Null, &e),
    };
    let Some(session_id) = header_str(&caller.headers, "mcp-session-id") else {
        return (
            StatusCode::BAD_REQUEST,
            "DELETE needs the Mcp-Session-Id of the session to end",
        )
            .into_response();
    };
    let session = match open_session(&cx, &caller, session_id) {
        Ok(s) => s,
        Err(e) => return jsonrpc_error_response(&Value::Null, &e),
    };
    cx.end_session(session.tag);
    cx.upstream
        .close_client_sessions(&caller, session.tag)
        .await;
    tracing::info!(key = %caller.key.name, "legacy session ended by the client");
    StatusCode::NO_CONTENT.into_response()
}

/// A JSON-RPC message from a client.
pub enum Incoming {
    /// A request (with an id) or a notification (without).
    Call(Message),
    /// A response to a request the gateway relayed to the client.
    Reply { id: Value, body: Map<String, Value> },
}

pub struct Message {
    id: Option<Value>,
    method: String,
    pub params: Option<Value>,
}

/// The members of a call the gateway reads, read without building a tree of the whole message
/// (a call is most of what clients send). Anything this does not take (a reply, a member of the
/// wrong type, a repeated member) goes to the full reading below, which says what is wrong.
#[derive(Deserialize)]
struct CallMembers<'a> {
    #[serde(borrow)]
    jsonrpc: Cow<'a, str>,
    method: String,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    params: Option<Value>,
}

/// `Some` for a member that is there, `null` included (`Option` alone reads `null` as absent,
/// and `"id": null` is not a notification).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

pub fn parse_message(body: &[u8]) -> Result<Incoming, GatewayError> {
    // Only an object: serde would also read a struct from an array, by position.
    if body.trim_ascii_start().first() == Some(&b'{')
        && let Ok(call) = serde_json::from_slice::<CallMembers>(body)
        && call.jsonrpc == "2.0"
        && call.params.as_ref().is_none_or(Value::is_object)
    {
        return Ok(Incoming::Call(Message {
            id: call.id,
            method: call.method,
            params: call.params,
        }));
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|e| GatewayError::Parse(e.to_string()))?;
    let Value::Object(mut obj) = value else {
        return Err(GatewayError::InvalidRequest(
            "the body must be one JSON-RPC message (batches are not supported)".into(),
        ));
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(GatewayError::InvalidRequest(
            "jsonrpc must be \"2.0\"".into(),
        ));
    }
    let Some(method) = obj.remove("method") else {
        // A response: it must answer something, with a result or an error.
        let answers = obj.contains_key("result") != obj.contains_key("error");
        return match obj.get("id") {
            Some(id) if answers && !id.is_null() => Ok(Incoming::Reply {
                id: id.clone(),
                body: obj,
            }),
            _ => Err(GatewayError::InvalidRequest(
                "a message without a method is a response: it needs an id and one of result or error".into(),
            )),
        };
    };
    let method = method
        .as_str()
        .ok_or_else(|| GatewayError::InvalidRequest("method must be a string".into()))?
        .to_string();
    let params = obj.remove("params");
    if params.as_ref().is_some_and(|p| !p.is_object()) {
        return Err(GatewayError::InvalidRequest(
            "params must be an object".into(),
        ));
    }
    Ok(Incoming::Call(Message {
        id: obj.remove("id"),
        method,
        params,
    }))
}

async fn handle(
    cx: &Arc<McpContext>,
    prefix: Option<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let endpoint = if prefix.is_some() {
        "mcp_single"
    } else {
        "mcp"
    };
    let (response, counted) = answer(cx, prefix, headers, body).await;
    // The request metric, once per request whatever the exit (a notification counts nothing).
    if let Some((method, outcome)) = counted {
        cx.metrics.request(endpoint, method, outcome);
    }
    response
}

/// What a request's metric says: (method, outcome), `None` for nothing to count.
type Counted = Option<(&'static str, &'static str)>;

/// The answer to one MCP POST, and what its metric says.
async fn answer(
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
    let caller = match authenticate(table, headers, &cx.metrics) {
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
    let target = match &prefix {
        None => Target::Aggregate,
        Some(p) => match caller.server_for_path(p) {
            Ok(server) => Target::Single(server),
            // A server the caller cannot reach is invisible: the endpoint does not exist.
            Err(e) => {
                let response = (StatusCode::NOT_FOUND, e.to_string()).into_response();
                return (response, Some((method, e.outcome())));
            }
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
    let prepared = match era {
        Era::Rev2026 => check_modern(&caller.headers, &message),
        Era::Rev2025 => Box::pin(check_legacy(cx, &caller, &target, &message)).await,
    };
    let session = match prepared {
        Ok(Prepared::Answer(response)) => return (response, Some((method, "ok"))),
        Ok(Prepared::Dispatch { session }) => session,
        Err(e) => return fail(&id, e, method, era),
    };
    if message.id.is_none() {
        // Notifications (initialized, cancelled, ...) concern the gateway's own session with
        // the client; a request the client gives up is cancelled by closing its stream.
        return (StatusCode::ACCEPTED.into_response(), None);
    }
    let accepts_stream = header_str(&caller.headers, "accept")
        .is_some_and(|a| a.contains("text/event-stream") || a.contains("*/*"));
    if matches!(target, Target::Aggregate) && message.method == "subscriptions/listen" {
        let listened = Box::pin(listen::fan_in(
            cx,
            &caller,
            id.clone(),
            message.params,
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
            raw_result_response(&id, &result, None),
            Some((method, "ok")),
        ),
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
                    raw_result_response(&id, &result, Some(r#""resultType":"complete""#))
                }
                // A 2026-07-28 upstream's result to a legacy client: without that revision's
                // fields (the head read says whether it has any; most legacy pairs have none).
                Era::Rev2025 if has_result_type => {
                    let mut result = RpcResult::Raw(result).into_value();
                    protocol::strip_modern_result(&mut result);
                    rpc_response(&id, "result", result, StatusCode::OK)
                }
                _ => raw_result_response(&id, &result, None),
            };
            (response, Some((method, "ok")))
        }
        Ok(Answer::Stream(relay)) => {
            let mut key_tag = [0u8; 8];
            key_tag.copy_from_slice(&caller.key.digest[..8]);
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
            (
                rpc_response(&id, "error", error, status),
                Some((method, "upstream_error")),
            )
        }
        Err(Failure::Gateway(e)) => {
            tracing::info!(method = %message.method, error = %e, "request failed");
            fail(&id, e, method, era)
        }
    }
}

/// An exchange route the caller's key may use, from a token the client echoed.
fn exchange_route(caller: &Caller, token: Option<&str>) -> Option<ExchangeRoute> {
    let route = ExchangeRoute::open(&caller.table.sealer, token?)?;
    (route.key_tag == caller.key.digest[..8]).then_some(route)
}

/// A legacy client's reply to an input request the gateway asked for a 2026-07-28 upstream:
/// handed to the stream waiting for it, here or on the replica that holds it.
async fn pass_input_reply(
    cx: &McpContext,
    caller: &Caller,
    route: ExchangeRoute,
    reply: Map<String, Value>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !cx.exchanges.is_local(&route) {
        return pass_to_holder(cx, &route, headers, body).await;
    }
    let _ = caller;
    let key = route.input.clone().unwrap_or_default();
    match cx.exchanges.reply_sender(route.pending) {
        Some(tx) if tx.try_send((key, reply)).is_ok() => StatusCode::ACCEPTED.into_response(),
        _ => jsonrpc_error_response(
            &Value::Null,
            &GatewayError::InvalidRequest(
                "the request this reply answers is over (answered, timed out or cancelled)".into(),
            ),
        ),
    }
}

/// A 2026-07-28 client's retry carrying the answers a legacy upstream asked for: they go to
/// the upstream session, and the paused stream resumes as the answer to this request.
async fn resume_exchange(
    cx: &Arc<McpContext>,
    caller: &Arc<Caller>,
    route: ExchangeRoute,
    message: Message,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !cx.exchanges.is_local(&route) {
        return pass_to_holder(cx, &route, headers, body).await;
    }
    let Some(id) = message.id.clone() else {
        return jsonrpc_error_response_in(
            &Value::Null,
            &GatewayError::InvalidRequest("a retry with requestState must be a request".into()),
            Era::Rev2026,
        );
    };
    let fail = |e: GatewayError| jsonrpc_error_response_in(&id, &e, Era::Rev2026);
    let over = || {
        GatewayError::InvalidParams(
            "requestState names an exchange that is over (answered, timed out or cancelled)".into(),
        )
    };
    // Checked before the paused stream is taken: a retry missing an answer can be repeated.
    let Some(keys) = cx.exchanges.paused_keys(route.pending) else {
        return fail(over());
    };
    let responses = message
        .params
        .as_ref()
        .and_then(|p| p.get("inputResponses"));
    if let Some(missing) = keys
        .iter()
        .find(|k| responses.and_then(|r| r.get(k)).is_none())
    {
        return fail(GatewayError::InvalidParams(format!(
            "inputResponses.{missing} is missing"
        )));
    }
    let Some(paused) = cx.exchanges.take_paused(route.pending) else {
        return fail(over());
    };
    let Some((mut relay, requests)) = paused.take_relay::<relay::Relay>() else {
        return fail(over());
    };
    // The snapshot may have changed while the stream was paused.
    if !caller.reaches(&relay.server) {
        return fail(over());
    }
    let session = relay
        .stream
        .as_ref()
        .map(|s| (s.session_id.clone(), s.session_version.clone()));
    let (session_id, version) = session.unwrap_or((None, None));
    for (key, upstream_id) in requests {
        let response = responses
            .and_then(|r| r.get(&key))
            .cloned()
            .unwrap_or(Value::Null);
        let reply = json!({"jsonrpc": "2.0", "id": upstream_id, "result": response});
        let delivered = cx
            .upstream
            .deliver_reply(
                caller,
                &relay.server,
                session_id.clone(),
                version
                    .clone()
                    .unwrap_or(HeaderValue::from_static(protocol::LATEST_LEGACY_VERSION)),
                serde_json::to_vec(&reply).unwrap_or_default(),
            )
            .await;
        match delivered {
            Ok(status) if status.is_success() => {}
            Ok(status) => {
                return fail(GatewayError::UpstreamUnavailable {
                    server: relay.server.id().to_string(),
                    detail: format!("the upstream refused the answer (HTTP {})", status.as_u16()),
                });
            }
            Err(e) => return fail(e.into()),
        }
    }
    relay.deadline = Some(tokio::time::Instant::now() + relay.server.spec.timeout);
    let mut key_tag = [0u8; 8];
    key_tag.copy_from_slice(&caller.key.digest[..8]);
    relay::sse_response(
        relay,
        relay::Client {
            id,
            era: Era::Rev2026,
            key_tag,
            table: caller.table.clone(),
            bridge: Some(relay::Bridge {
                cx: cx.clone(),
                caller: caller.clone(),
            }),
        },
    )
}

/// Client headers that concern the hop to this replica, not the client's request.
const HOP_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "expect",
    "keep-alive",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// How long the holding replica has to start answering a handed-on message.
const HANDOFF_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A client's message on its way to the replica holding its exchange: the client's headers
/// (its gateway key among them) and body, sealed so that only a replica can read them.
#[derive(serde::Serialize, serde::Deserialize)]
struct Handoff {
    headers: Vec<(String, String)>,
    body: String,
}

/// Hands a client's message about an exchange to the replica that holds it (named by the
/// sealed route), and relays that replica's answer.
async fn pass_to_holder(
    cx: &McpContext,
    route: &ExchangeRoute,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let unreachable = || {
        tracing::warn!(holder = %route.address, "the replica holding an exchange is unreachable");
        jsonrpc_error_response(
            &Value::Null,
            &GatewayError::UpstreamUnavailable {
                server: "switchboard".into(),
                detail: "the gateway replica holding this exchange is unreachable; repeat the call"
                    .into(),
            },
        )
    };
    let handoff = Handoff {
        headers: headers
            .iter()
            .filter(|(name, _)| !HOP_HEADERS.contains(&name.as_str()))
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
            .collect(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let sealed = cx.table().sealer.seal_bytes(
        TokenKind::Handoff,
        &serde_json::to_vec(&handoff).unwrap_or_default(),
    );
    let send = cx
        .upstream
        .upstreams
        .http()
        .post(format!("{}/mcp-internal/exchange", route.address))
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .body(sealed)
        .send();
    let Ok(Ok(response)) = tokio::time::timeout(HANDOFF_TIMEOUT, send).await else {
        return unreachable();
    };
    let status = response.status();
    let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
    let mut out = (
        status,
        axum::body::Body::from_stream(response.bytes_stream()),
    )
        .into_response();
    if let Some(ct) = content_type {
        out.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    out
}

/// `POST /mcp-internal/exchange`: another replica passing on a client's message about an
/// exchange this one holds, sealed (only a replica can have made it). The client's own headers
/// came along and are checked like any client's; only exchanges held here are served (a
/// message is never passed on twice).
pub async fn internal_exchange(State(cx): State<Arc<McpContext>>, sealed: Bytes) -> Response {
    let table = cx.table();
    let refused = || (StatusCode::FORBIDDEN, "not a message from a replica").into_response();
    if sealed.len() > table.settings.max_body_bytes.saturating_mul(2) + 64 * 1024 {
        return refused();
    }
    let Some(handoff) = table
        .sealer
        .open_bytes(TokenKind::Handoff, &sealed)
        .and_then(|plain| serde_json::from_slice::<Handoff>(&plain).ok())
    else {
        return refused();
    };
    let mut headers = HeaderMap::new();
    for (name, value) in &handoff.headers {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.append(name, value);
        }
    }
    let body = Bytes::from(handoff.body);
    let caller = match identify(table, headers.clone()) {
        Ok(c) => Arc::new(c),
        Err(e) => return jsonrpc_error_response(&Value::Null, &e),
    };
    let not_here = || {
        jsonrpc_error_response(
            &Value::Null,
            &GatewayError::InvalidRequest(
                "the exchange is over, or this replica does not hold it; repeat the call".into(),
            ),
        )
    };
    match parse_message(&body) {
        Ok(Incoming::Reply { id, body: reply }) => match exchange_route(&caller, id.as_str()) {
            Some(route) if cx.exchanges.is_local(&route) => {
                pass_input_reply(&cx, &caller, route, reply, headers, body).await
            }
            _ => not_here(),
        },
        Ok(Incoming::Call(message)) => {
            let route = message
                .params
                .as_ref()
                .and_then(|p| p.get("requestState"))
                .and_then(|s| exchange_route(&caller, s.as_str()));
            match route {
                Some(route) if cx.exchanges.is_local(&route) => {
                    resume_exchange(&cx, &caller, route, message, headers, body).await
                }
                _ => not_here(),
            }
        }
        Err(e) => jsonrpc_error_response(&Value::Null, &e),
    }
}

/// A client's reply to a server-to-client request the gateway relayed: its id is a sealed
/// [`ReplyRoute`] naming the upstream session that asked; the reply goes there with the
/// upstream's own id, from whichever replica received it.
async fn deliver_reply(
    cx: &McpContext,
    caller: &Caller,
    prefix: Option<&str>,
    id: Value,
    mut body: Map<String, Value>,
) -> Result<(), GatewayError> {
    let unknown =
        || GatewayError::InvalidRequest("the response answers no request of this gateway".into());
    let route = id
        .as_str()
        .and_then(|token| ReplyRoute::open(&caller.table.sealer, token))
        .ok_or_else(unknown)?;
    if route.key_tag != caller.key.digest[..8] {
        return Err(unknown());
    }
    let server = caller
        .table
        .server_by_id(&route.server)
        .filter(|s| caller.reaches(s))
        .filter(|s| prefix.is_none_or(|p| s.prefix() == p))
        .cloned()
        .ok_or_else(unknown)?;
    let upstream_id: Value = serde_json::from_str(route.id.get()).map_err(|_| unknown())?;
    body.insert("id".into(), upstream_id);
    let session = route
        .session
        .as_deref()
        .and_then(|s| HeaderValue::from_str(s).ok());
    let version = HeaderValue::from_str(&route.version)
        .unwrap_or(HeaderValue::from_static(protocol::LATEST_LEGACY_VERSION));
    let bytes = serde_json::to_vec(&Value::Object(body)).unwrap_or_default();
    let status = cx
        .upstream
        .deliver_reply(caller, &server, session, version, bytes)
        .await?;
    if status.is_success() {
        Ok(())
    } else {
        Err(GatewayError::UpstreamUnavailable {
            server: server.id().to_string(),
            detail: format!("the upstream refused the reply (HTTP {})", status.as_u16()),
        })
    }
}

/// A legacy session setting (`logging/setLevel`, `resources/subscribe`/`unsubscribe`): a legacy
/// upstream gets it on the client's own upstream session; an upstream that speaks 2026-07-28
/// removed these methods, and the aggregate has no session of its own to keep them on, so the
/// gateway acknowledges them there.
async fn session_setting(
    cx: &McpContext,
    caller: &Caller,
    target: &Target,
    request: Request,
) -> Result<Answer, Failure> {
    let Target::Single(server) = target else {
        return Ok(Answer::Json(json!({})));
    };
    if cx.upstream.upstreams.era_of(server) == Some(Era::Rev2026) {
        return Ok(Answer::Json(json!({})));
    }
    match dispatch(cx, caller, target, request).await {
        Err(Failure::Upstream(e, _))
            if cx.upstream.upstreams.era_of(server) == Some(Era::Rev2026)
                && e.get("code").and_then(Value::as_i64) == Some(codes::METHOD_NOT_FOUND) =>
        {
            Ok(Answer::Json(json!({})))
        }
        other => other,
    }
}

/// `server/discover`: on `/mcp/{prefix}` the upstream's own answer (its serverInfo,
/// instructions, capabilities, extensions), with the versions the gateway serves (it speaks
/// every era to the client, whatever the upstream speaks); on `/mcp` the gateway's.
async fn discover(
    cx: &McpContext,
    caller: &Caller,
    target: &Target,
    request: Request,
) -> Result<Answer, Failure> {
    let Target::Single(server) = target else {
        return Ok(Answer::Json(gateway_discover(cx, caller).await));
    };
    let mut result = match cx
        .upstream
        .legacy_identity(caller, server, request.session)
        .await?
    {
        Some(init) => discover_from_initialize(&init),
        None => match dispatch(cx, caller, target, request).await? {
            Answer::Json(v) => v,
            // The upstream's discover arrived as a stream; relay it as it is.
            other => return Ok(other),
        },
    };
    if let Value::Object(m) = &mut result {
        m.insert(
            "supportedVersions".into(),
            json!(protocol::supported_versions()),
        );
    }
    Ok(Answer::Json(result))
}

/// A legacy upstream's `initialize` result in the shape of a 2026-07-28 discover result.
fn discover_from_initialize(init: &Value) -> Value {
    let mut result = Map::new();
    result.insert("resultType".into(), Value::from("complete"));
    result.insert(
        "capabilities".into(),
        init.get("capabilities").cloned().unwrap_or(json!({})),
    );
    if let Some(instructions) = init.get("instructions") {
        result.insert("instructions".into(), instructions.clone());
    }
    result.insert("ttlMs".into(), Value::from(0));
    result.insert("cacheScope".into(), Value::from("private"));
    if let Some(info) = init.get("serverInfo") {
        result.insert("_meta".into(), json!({ META_SERVER_INFO: info }));
    }
    Value::Object(result)
}

/// The aggregate's identity: the gateway, advertising what every server behind it in the
/// caller's scope supports.
async fn gateway_discover(cx: &McpContext, caller: &Caller) -> Value {
    json!({
        "supportedVersions": protocol::supported_versions(),
        "capabilities": aggregate_capabilities(cx, caller),
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": { META_SERVER_INFO: {"name": "switchboard", "version": env!("CARGO_PKG_VERSION")} },
    })
}

/// The aggregate endpoint serves tools, prompts and resources merged across servers.
fn aggregate_capabilities(_cx: &McpContext, _caller: &Caller) -> Value {
    json!({
        "tools": {"listChanged": false},
        "prompts": {"listChanged": false},
        "resources": {"listChanged": false, "subscribe": false},
    })
}

enum Prepared {
    /// The gateway answers itself (legacy `initialize`).
    Answer(Response),
    /// Go on to the method, on this client's upstream sessions.
    Dispatch { session: SessionScope },
}

/// 2026-07-28: `_meta` must carry the version and capabilities; `MCP-Protocol-Version`,
/// `Mcp-Method` and `Mcp-Name` must repeat the body; the version must be one we serve.
fn check_modern(headers: &HeaderMap, message: &Message) -> Result<Prepared, GatewayError> {
    let meta = message
        .params
        .as_ref()
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object);
    let version = meta
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str);
    let (Some(version), Some(_)) = (version, meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES)))
    else {
        return Err(protocol_error(
            codes::INVALID_PARAMS,
            format!(
                "params._meta must carry {META_PROTOCOL_VERSION} and {META_CLIENT_CAPABILITIES}"
            ),
            None,
        ));
    };
    let mismatch =
        |what: &str| protocol_error(HEADER_MISMATCH, format!("Header mismatch: {what}"), None);
    if header_str(headers, "mcp-protocol-version") != Some(version) {
        return Err(mismatch(
            "MCP-Protocol-Version header must equal _meta protocolVersion",
        ));
    }
    if header_str(headers, "mcp-method") != Some(message.method.as_str()) {
        return Err(mismatch("Mcp-Method header must equal the body's method"));
    }
    let body_name = protocol::named_field(&message.method)
        .and_then(|f| message.params.as_ref()?.get(f)?.as_str());
    if let Some(body_name) = body_name {
        let header_name = header_str(headers, "mcp-name").and_then(protocol::decode_header_value);
        if header_name.as_deref() != Some(body_name) {
            return Err(mismatch("Mcp-Name header must equal the body's name"));
        }
    }
    if version != MODERN_VERSION {
        return Err(protocol_error(
            UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version".into(),
            Some(json!({ "supported": protocol::supported_versions(), "requested": version })),
        ));
    }
    // A legacy upstream hears a 2026-07-28 client's capabilities through the session the
    // gateway opens for them.
    let capabilities = capabilities::to_bits(meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES)));
    Ok(Prepared::Dispatch {
        session: SessionScope {
            client: 0,
            capabilities,
        },
    })
}

/// Legacy: `initialize` opens a sealed session; everything else must present one that this
/// key opened, that has not expired and that the client has not ended.
async fn check_legacy(
    cx: &McpContext,
    caller: &Caller,
    target: &Target,
    message: &Message,
) -> Result<Prepared, GatewayError> {
    if message.method == "initialize" {
        return Ok(Prepared::Answer(
            initialize(cx, caller, target, message).await,
        ));
    }
    let session_id = header_str(&caller.headers, "mcp-session-id").ok_or_else(|| {
        GatewayError::InvalidRequest("missing Mcp-Session-Id; initialize a session first".into())
    })?;
    let session = open_session(cx, caller, session_id)?;
    if let Some(v) = header_str(&caller.headers, "mcp-protocol-version")
        && protocol::legacy_version_index(v).is_none()
    {
        return Err(GatewayError::Protocol {
            code: codes::INVALID_REQUEST,
            message: format!("unsupported MCP-Protocol-Version {v:?}"),
            status: StatusCode::BAD_REQUEST,
            data: None,
        });
    }
    Ok(Prepared::Dispatch {
        session: SessionScope {
            client: session.tag,
            capabilities: session.capabilities,
        },
    })
}

/// A session id this key opened, unexpired and not ended by the client.
fn open_session(
    cx: &McpContext,
    caller: &Caller,
    session_id: &str,
) -> Result<Session, GatewayError> {
    let session = caller
        .table
        .sealer
        .unseal(session_id, &caller.key.digest, SystemTime::now())
        .map_err(|e| match e {
            UnsealError::Invalid => GatewayError::SessionNotFound,
            UnsealError::WrongKey => GatewayError::SessionForbidden,
        })?;
    if cx.session_ended(session.tag) {
        return Err(GatewayError::SessionNotFound);
    }
    Ok(session)
}

/// A legacy `initialize`: seals the session (version, the client's capabilities) into its id.
/// On `/mcp/{prefix}` the answer is the upstream's own identity (serverInfo, instructions,
/// capabilities), from the upstream session opened for this client session; on `/mcp`, or if
/// the upstream cannot be reached now, the gateway's.
async fn initialize(
    cx: &McpContext,
    caller: &Caller,
    target: &Target,
    message: &Message,
) -> Response {
    let params = message.params.as_ref();
    let requested = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let version = protocol::negotiate_legacy(requested);
    let index = protocol::legacy_version_index(version).unwrap_or(0);
    let capabilities = capabilities::to_bits(params.and_then(|p| p.get("capabilities")));
    let (sealed, tag) =
        caller
            .table
            .sealer
            .seal(&caller.key.digest, index, capabilities, SystemTime::now());
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": aggregate_capabilities(cx, caller),
        "serverInfo": {"name": "switchboard", "version": env!("CARGO_PKG_VERSION")},
    });
    if let Target::Single(server) = target {
        let scope = SessionScope {
            client: tag,
            capabilities,
        };
        match upstream_identity(cx, caller, server, scope).await {
            Ok(identity) => {
                for field in ["capabilities", "serverInfo", "instructions"] {
                    if let Some(v) = identity.get(field) {
                        result[field] = v.clone();
                    }
                }
            }
            Err(e) => {
                tracing::warn!(server = server.id(), error = %e, "upstream identity unavailable; answering initialize with the gateway's")
            }
        }
    }
    let mut response = rpc_response(
        message.id.as_ref().unwrap_or(&Value::Null),
        "result",
        result,
        StatusCode::OK,
    );
    if let Ok(value) = HeaderValue::from_str(&sealed) {
        response.headers_mut().insert("mcp-session-id", value);
    }
    response
}

/// What a legacy client's `initialize` on `/mcp/{prefix}` reports: the legacy upstream's own
/// `initialize` result, or a 2026-07-28 upstream's `server/discover` (serverInfo read from its
/// `_meta`, or the top level where a server puts it there).
async fn upstream_identity(
    cx: &McpContext,
    caller: &Caller,
    server: &Arc<Server>,
    scope: SessionScope,
) -> Result<Value, GatewayError> {
    if let Some(init) = cx.upstream.legacy_identity(caller, server, scope).await? {
        return Ok(init);
    }
    let mut forward = Forward::call("server/discover", None);
    forward.session = scope;
    match cx.upstream.forward(caller, server, &forward).await? {
        RpcOutcome::Result(discover) => {
            let discover = discover.into_value();
            let mut identity = Map::new();
            for field in ["capabilities", "instructions", "serverInfo"] {
                if let Some(v) = discover.get(field) {
                    identity.insert(field.into(), v.clone());
                }
            }
            if let Some(info) =
                discover.pointer(&format!("/_meta/{}", META_SERVER_INFO.replace('/', "~1")))
            {
                identity.insert("serverInfo".into(), info.clone());
            }
            Ok(Value::Object(identity))
        }
        _ => Err(GatewayError::UpstreamUnavailable {
            server: server.id().to_string(),
            detail: "server/discover failed".into(),
        }),
    }
}

fn protocol_error(code: i64, message: String, data: Option<Value>) -> GatewayError {
    GatewayError::Protocol {
        code,
        message,
        status: StatusCode::BAD_REQUEST,
        data,
    }
}

fn rpc_response(id: &Value, kind: &str, payload: Value, status: StatusCode) -> Response {
    let mut body = Map::with_capacity(3);
    body.insert("jsonrpc".into(), Value::from("2.0"));
    body.insert("id".into(), id.clone());
    body.insert(kind.into(), payload);
    let bytes = serde_json::to_vec(&Value::Object(body)).unwrap_or_default();
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response()
}

/// A result serialized already (merged listings, which carry `resultType` themselves, or an
/// upstream's result as it came), with `first_member` (`"name":value`) added in front of the
/// result object's own members. Only an object result gets one.
fn raw_result_response(id: &Value, result: &RawValue, first_member: Option<&str>) -> Response {
    let id = serde_json::to_string(id).unwrap_or_else(|_| "null".into());
    let result = result.get();
    let extra = first_member.map_or(0, str::len);
    let mut body = Vec::with_capacity(result.len() + extra + id.len() + 40);
    body.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    body.extend_from_slice(id.as_bytes());
    body.extend_from_slice(b",\"result\":");
    match (first_member, result.trim_start().strip_prefix('{')) {
        (Some(member), Some(members)) => {
            body.push(b'{');
            body.extend_from_slice(member.as_bytes());
            if !members.trim_start().starts_with('}') {
                body.push(b',');
            }
            body.extend_from_slice(members.as_bytes());
        }
        _ => body.extend_from_slice(result.as_bytes()),
    }
    body.push(b'}');
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Method names as metric labels: the known ones, else "other" (clients choose method names,
/// and a label set must stay bounded).
fn metric_method(method: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "completion/complete",
        "subscriptions/listen",
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
    ];
    KNOWN
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(response: Response) -> Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn calls_read_like_the_full_reading() {
        let call = |body: &str| match parse_message(body.as_bytes()) {
            Ok(Incoming::Call(m)) => Some((m.id, m.method, m.params)),
            _ => None,
        };
        assert_eq!(
            call(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"},"x":[1]}"#),
            Some((
                Some(json!(1)),
                "tools/call".into(),
                Some(json!({"name": "a"}))
            ))
        );
        assert_eq!(
            call(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Some((None, "notifications/initialized".into(), None))
        );
        // "id": null is a request with a null id, not a notification.
        assert_eq!(
            call(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#)
                .unwrap()
                .0,
            Some(Value::Null)
        );
        // A repeated member: the last one counts, as in the full reading.
        assert_eq!(
            call(r#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#)
                .unwrap()
                .1,
            "b"
        );
        for refused in [
            r#"["2.0","ping",1]"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":null}"#,
        ] {
            assert!(call(refused).is_none(), "{refused}");
        }
    }

    #[tokio::test]
    async fn a_relayed_result_gets_its_result_type_in_front() {
        const STAMP: Option<&str> = Some(r#""resultType":"complete""#);
        let result = RawValue::from_string(r#" {"content":[],"isError":false}"#.into()).unwrap();
        let body = body_of(raw_result_response(&json!(7), &result, STAMP)).await;
        assert_eq!(
            body,
            json!({"jsonrpc": "2.0", "id": 7,
                   "result": {"resultType": "complete", "content": [], "isError": false}})
        );
        let empty = RawValue::from_string("{ }".into()).unwrap();
        let body = body_of(raw_result_response(&json!("a"), &empty, STAMP)).await;
        assert_eq!(body["result"], json!({"resultType": "complete"}));
        let body = body_of(raw_result_response(&json!(1), &result, None)).await;
        assert_eq!(body["result"], json!({"content": [], "isError": false}));
    }
}
