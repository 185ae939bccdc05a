//! The answer to one MCP POST: the era told apart, its checks, then dispatch (or a reply routed
//! to the relay that asked), and what the request's metric says.
//!
//! One function per stage, so each answer shape is read in one place: [`answer`] refuses what
//! comes before a call is read; [`answer_reply`] routes a client's reply; [`answer_call`] tells
//! the endpoint and era, runs the era's checks and answers a resumed exchange, a notification
//! or a subscription; [`run_method`] runs the method (or the gateway answers it itself); and
//! [`respond`] writes its outcome for the client's era (a result, a relayed stream, the
//! upstream's error or the gateway's).

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::context::McpContext;
use crate::dispatch::{Answer, Failure, Request};
use crate::exchange::ExchangeRoute;
use crate::listen;
use crate::relay;
use crate::target::{Target, dispatch};
use switchboard_core::audit;
use switchboard_core::errors::{
    GatewayError, is_connect_retry, jsonrpc_error_response_in, plain_error_response,
};
use switchboard_core::scope::{Caller, Resource, authenticate};
use switchboard_core::table::Server;
use switchboard_protocol::{self as protocol, Era, Params, RawResult};
use switchboard_upstream::{RpcResult, SessionScope};

use super::input::{deliver_reply, exchange_route, pass_input_reply, resume_exchange};
use super::legacy::{check_legacy, session_setting};
use super::message::{EraChecked, Incoming, Message, parse_message};
use super::modern::{check_modern, discover};
use super::replies::{header_str, metric_method, raw_result_response, rpc_response};

/// A call's method and the name it is about, as its audit record carries them (the name, never
/// the arguments).
pub(super) fn note_call(noted: &mut audit::Noted, method: &str, params: Option<&Params>) {
    noted.rpc_method = Some(audit::name(method));
    let field = |f: &str| {
        params
            .and_then(|p| p.str_member(f))
            .map(|n| audit::name(&n))
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

/// What a request's metric says: (its method's label, outcome), `None` for nothing to count.
pub(super) type Counted = Option<(&'static str, &'static str)>;

/// The answer to one MCP POST, and what its metric says. What comes before a call is read is
/// answered here (a body over the limit, a refused key, a body that is no message, a reply to a
/// relayed request); a call goes on to [`answer_call`].
pub(super) async fn answer(
    cx: &Arc<McpContext>,
    prefix: Option<String>,
    headers: HeaderMap,
    body: Bytes,
) -> (Response, Counted) {
    let table = cx.table();
    let limit = table.settings.max_body_bytes;
    if body.len() > limit {
        let too_large = GatewayError::PayloadTooLarge { limit };
        return refused(&Value::Null, too_large, "-", Era::Rev2025);
    }
    let resource = match prefix.as_deref() {
        Some(prefix) => Resource::McpServer(prefix),
        None => Resource::Mcp,
    };
    let caller = match authenticate(table, headers, &cx.metrics, resource).await {
        Ok(c) => Arc::new(c),
        Err(e) => return refused(&Value::Null, e, "-", Era::Rev2025),
    };
    // The rare branches (replies, exchanges, handshakes, subscriptions) are boxed: their
    // state would otherwise make every request's future as large as the largest of them.
    match parse_message(&body) {
        Ok(Incoming::Call(message)) => answer_call(cx, &caller, prefix, message, body).await,
        Ok(Incoming::Reply { id, body: reply }) => {
            Box::pin(answer_reply(cx, &caller, prefix, id, reply, body)).await
        }
        Err(e) => refused(&Value::Null, e, "-", Era::Rev2025),
    }
}

/// A refusal as a JSON-RPC error in `era`, counted under `label` with the error's outcome.
fn refused(id: &Value, e: GatewayError, label: &'static str, era: Era) -> (Response, Counted) {
    let outcome = e.outcome();
    (
        jsonrpc_error_response_in(id, &e, era),
        Some((label, outcome)),
    )
}

/// A client's reply to a request the gateway relayed to it: to the exchange that waits for it
/// (wherever that is held), else to the upstream session that asked (its id names it, sealed).
async fn answer_reply(
    cx: &Arc<McpContext>,
    caller: &Arc<Caller>,
    prefix: Option<String>,
    id: Value,
    reply: Map<String, Value>,
    body: Bytes,
) -> (Response, Counted) {
    if let Some(route) = exchange_route(caller, id.as_str()) {
        let headers = caller.headers.clone();
        let response = pass_input_reply(cx, caller, route, reply, headers, body).await;
        let outcome = if response.status().is_success() {
            "ok"
        } else {
            "failed"
        };
        return (response, Some(("reply", outcome)));
    }
    match deliver_reply(cx, caller, prefix.as_deref(), id, reply).await {
        Ok(()) => (StatusCode::ACCEPTED.into_response(), Some(("reply", "ok"))),
        Err(e) => refused(&Value::Null, e, "reply", Era::Rev2025),
    }
}

/// A call (a request or a notification): its endpoint and era told, the era's checks, then the
/// method. A retry that resumes a paused exchange, a notification and a subscription leave
/// here; every other call is run by [`run_method`] and answered by [`respond`].
async fn answer_call(
    cx: &Arc<McpContext>,
    caller: &Arc<Caller>,
    prefix: Option<String>,
    mut message: Message,
    body: Bytes,
) -> (Response, Counted) {
    let id = message.id.clone().unwrap_or(Value::Null);
    let label = metric_method(&message.method);
    // (The id as text is the span's alone: made only when the request is traced.)
    let rpc_id = audit::traced()
        .then(|| message.id.as_ref().and_then(rpc_id_text))
        .flatten();
    audit::note(|n| {
        note_call(n, &message.method, message.params.as_ref());
        n.rpc_id = rpc_id;
    });
    let target = match target_of(caller, prefix.as_deref()) {
        Ok(target) => target,
        // A server the caller cannot reach is invisible: the endpoint does not exist (its
        // record says it was refused).
        Err(e) => return (plain_error_response(&e), Some((label, e.outcome()))),
    };
    let era = era_of(caller, &message);
    if era == Era::Rev2026
        && let Some(route) = resumed_route(caller, &message)
    {
        // The retry of a call whose legacy upstream asked for input: it resumes the paused
        // stream, wherever that is held.
        let headers = caller.headers.clone();
        let response = Box::pin(resume_exchange(cx, caller, route, message, headers, body)).await;
        return (response, None);
    }
    if era == Era::Rev2026 {
        audit::note(|n| n.protocol_version = Some(protocol::MODERN_VERSION));
        forget_connect_answers(&mut message);
    }
    let prepared = match era {
        Era::Rev2026 => check_modern(&caller.headers, &message),
        Era::Rev2025 => Box::pin(check_legacy(cx, caller, &target, &message)).await,
    };
    let session = match prepared {
        Ok(EraChecked::Answer(response)) => return (response, Some((label, "ok"))),
        Ok(EraChecked::Dispatch { session }) => session,
        Err(e) => return refused(&id, e, label, era),
    };
    if message.id.is_none() {
        // Notifications (initialized, cancelled, ...) concern the gateway's own session with
        // the client; a request the client gives up is cancelled by closing its stream.
        return (StatusCode::ACCEPTED.into_response(), None);
    }
    if message.method == "subscriptions/listen"
        && let Some((servers, params)) = listened(caller, &target, &message)
    {
        let listened = listen::fan_in(cx, caller, servers, id.clone(), params, session);
        return match Box::pin(listened).await {
            Ok(response) => (response, Some((label, "stream"))),
            // (once: it used to count as a stream and as its error)
            Err(e) => refused(&id, e, label, era),
        };
    }
    let rpc_method = message.method.clone();
    let request = request_of(cx, caller, message, era, session);
    let outcome = run_method(cx, caller, &target, request).await;
    respond(cx, caller, &id, label, &rpc_method, era, outcome)
}

/// Which endpoint the path names: `/mcp` the aggregate; `/mcp/{path}` a virtual server or a
/// server's prefix (validation keeps them apart), one the caller reaches.
fn target_of(caller: &Caller, prefix: Option<&str>) -> Result<Target, GatewayError> {
    let Some(p) = prefix else {
        return Ok(Target::Aggregate);
    };
    if let Some(vs) = caller.virtual_for_path(p) {
        audit::note(|n| n.virtual_server = Some(vs.id().to_string()));
        return Ok(Target::Virtual(vs));
    }
    caller.server_for_path(p).map(Target::Single)
}

/// The call's era, told by how the client opens (its `_meta`, its headers, its session).
fn era_of(caller: &Caller, message: &Message) -> Era {
    // (The headers are read only when the body does not say: a 2026-07-28 call says.)
    protocol::classify(&message.method, message.params.as_ref(), || {
        (
            header_str(&caller.headers, protocol::headers::PROTOCOL_VERSION),
            caller.headers.contains_key(protocol::headers::SESSION_ID),
        )
    })
}

/// A 2026-07-28 retry after the gateway asked the caller to connect an account (its own
/// input-required answer, `GatewayError::input_required_result`): the upstream never asked, so
/// the retry goes to it as a fresh call, without the state and the answers.
fn forget_connect_answers(message: &mut Message) {
    if let Some(params) = message.params.as_mut()
        && is_connect_retry(params.member("requestState").as_deref())
        && let Value::Object(params) = &mut **params
    {
        params.remove("requestState");
        params.remove("inputResponses");
    }
}

/// The paused exchange a 2026-07-28 retry resumes: its `requestState`, when that is a route
/// this caller's key may use.
fn resumed_route(caller: &Caller, message: &Message) -> Option<ExchangeRoute> {
    let state = message.params.as_ref()?.member("requestState")?;
    exchange_route(caller, state.as_str())
}

/// The servers a `subscriptions/listen` fans out to and the parameters they get: those in
/// scope on `/mcp`, a virtual server's; `None` on `/mcp/{prefix}`, where the upstream's own
/// method answers.
fn listened(
    caller: &Caller,
    target: &Target,
    message: &Message,
) -> Option<(Vec<Arc<Server>>, Option<Value>)> {
    match target {
        Target::Aggregate => Some((
            caller.servers_in_scope(),
            message.params.as_deref().cloned(),
        )),
        Target::Virtual(vs) => Some((
            crate::virtual_server::servers(caller, vs),
            crate::virtual_server::listen_params(message.params.as_deref().cloned()),
        )),
        Target::Single(_) => None,
    }
}

/// Whether an `Accept` value takes an event stream: one of its media ranges is
/// `text/event-stream` or `*/*` (parameters aside). Read range by range, as bytes: a substring
/// search set up per call cost the call about 400 instructions, `str`'s splitting by a
/// character about 140 a range. (A header's text is visible ASCII, space and tab: ASCII's
/// trimming is `str::trim`'s there.)
pub(super) fn accepts_stream(accept: &str) -> bool {
    // What the official SDKs send, compared whole first.
    if accept == protocol::ACCEPT_BOTH {
        return true;
    }
    accept.as_bytes().split(|&b| b == b',').any(|range| {
        let media = range
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        media.eq_ignore_ascii_case(b"text/event-stream") || media == b"*/*"
    })
}

/// The method call as the methods see it. A legacy session's log level (set here by its
/// `logging/setLevel`) goes with it, for 2026-07-28 upstreams that hear it in `_meta`.
fn request_of(
    cx: &McpContext,
    caller: &Caller,
    message: Message,
    era: Era,
    session: SessionScope,
) -> Request {
    let accepts_stream = header_str(&caller.headers, header::ACCEPT).is_some_and(accepts_stream);
    let log_level = (era == Era::Rev2025 && session.client != 0).then(|| {
        if message.method == "logging/setLevel"
            && let Some(level) = message.params.as_ref().and_then(|p| p.str_member("level"))
        {
            cx.set_log_level(session.client, &level);
        }
        cx.log_level(session.client)
    });
    Request {
        method: message.method,
        params: message.params,
        era,
        accepts_stream,
        session,
        log_level,
    }
}

/// Runs the method: the few the gateway answers itself in each era (legacy `ping`, methods
/// 2026-07-28 removed, `server/discover`, legacy session settings), else the endpoint's
/// handler. A tool's error result is noted in the record (when it is traced).
async fn run_method(
    cx: &McpContext,
    caller: &Caller,
    target: &Target,
    request: Request,
) -> Result<Answer, Failure> {
    let tool_call = request.method == "tools/call";
    let outcome = match (request.era, request.method.as_str()) {
        (Era::Rev2025, "ping") => Ok(Answer::Json(json!({}))),
        (Era::Rev2026, removed) if protocol::REMOVED_IN_MODERN.contains(&removed) => Err(
            Failure::Gateway(GatewayError::MethodNotFound(removed.to_string())),
        ),
        (Era::Rev2026, "server/discover") => Box::pin(discover(cx, caller, target, request)).await,
        (Era::Rev2025, m) if protocol::REMOVED_IN_MODERN.contains(&m) => {
            Box::pin(session_setting(cx, caller, target, request)).await
        }
        _ => dispatch(cx, caller, target, request).await,
    };
    if let Ok(answer) = &outcome
        && tool_call
        && audit::traced()
        && answer.is_tool_error()
    {
        audit::note(|n| n.tool_error = true);
    }
    outcome
}

/// The client's answer to a method's outcome, in its era: a result (completed for a
/// 2026-07-28 client, stripped of 2026-07-28 members for a legacy one, or passed as it came),
/// a relayed stream, the upstream's JSON-RPC error, or the gateway's. `label` is the method as
/// the metric names it, `rpc_method` the call's own method name.
fn respond(
    cx: &Arc<McpContext>,
    caller: &Arc<Caller>,
    id: &Value,
    label: &'static str,
    rpc_method: &str,
    era: Era,
    outcome: Result<Answer, Failure>,
) -> (Response, Counted) {
    let ok = Some((label, "ok"));
    match outcome {
        Ok(Answer::Json(mut result)) => {
            match era {
                Era::Rev2026 => protocol::stamp_modern_result(&mut result, rpc_method),
                Era::Rev2025 => protocol::strip_modern_result(&mut result),
            }
            (rpc_response(id, "result", result, StatusCode::OK), ok)
        }
        Ok(Answer::Written(text)) => (raw_result_response(id, text, None), ok),
        Ok(Answer::Relayed {
            result,
            has_result_type,
        }) => (relayed(id, rpc_method, era, result, has_result_type), ok),
        Ok(Answer::Stream(relay)) => {
            let response = stream(cx, caller, id.clone(), era, *relay);
            (response, Some((label, "stream")))
        }
        Err(Failure::Upstream(error, status)) => {
            let response = upstream_error(id, era, error, status);
            (response, Some((label, "upstream_error")))
        }
        Err(Failure::Gateway(e)) => {
            let outcome = e.outcome();
            tracing::info!(method = %rpc_method, error = %e, outcome, "request failed");
            refused(id, e, label, era)
        }
    }
}

/// An upstream's result passed on as it came: a 2026-07-28 client gets the `resultType` it
/// needs in front where the upstream left it out (and a result with cache hints, were one
/// passed on unread, completed as a tree).
fn relayed(
    id: &Value,
    rpc_method: &str,
    era: Era,
    result: RawResult,
    has_result_type: bool,
) -> Response {
    match era {
        Era::Rev2026 if protocol::has_cache_fields(rpc_method) => {
            let mut result = RpcResult::Raw(result).into_value();
            protocol::stamp_modern_result(&mut result, rpc_method);
            rpc_response(id, "result", result, StatusCode::OK)
        }
        Era::Rev2026 if !has_result_type => {
            raw_result_response(id, result.into_string(), Some(r#""resultType":"complete""#))
        }
        // (A legacy client's result came without 2026-07-28 members already, or `Written`
        // for it: dispatch read them.)
        _ => raw_result_response(id, result.into_string(), None),
    }
}

/// An upstream's stream relayed event by event, with what the relay needs to answer the
/// client's id and to bridge the eras (server-to-client requests on the same stream).
fn stream(
    cx: &Arc<McpContext>,
    caller: &Arc<Caller>,
    id: Value,
    era: Era,
    relay: relay::Relay,
) -> Response {
    let key_tag = caller.short_tag();
    relay::sse_response(
        relay,
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
    )
}

/// The upstream's own JSON-RPC error, unchanged. A 2026-07-28 client reads the HTTP status as
/// part of the answer: the upstream's own when it set one, else the revision's rule for the
/// code. Legacy: 200.
fn upstream_error(id: &Value, era: Era, error: Value, status: StatusCode) -> Response {
    let status = match era {
        Era::Rev2025 => StatusCode::OK,
        Era::Rev2026 if status.is_client_error() => status,
        Era::Rev2026 => {
            protocol::modern_error_status(error.get("code").and_then(Value::as_i64).unwrap_or(0))
        }
    };
    audit::note(|n| n.rpc_error_code = error.get("code").and_then(Value::as_i64));
    rpc_response(id, "error", error, status)
}
