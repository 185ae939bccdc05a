//! Replies to server-to-client requests (input a relayed upstream asked for): routed to the
//! relay waiting for them, on this replica or, through `/mcp-internal/exchange`, on the one that
//! holds it.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::context::McpContext;
use crate::exchange::ExchangeRoute;
use crate::relay::{self, ReplyRoute};
use switchboard_core::errors::{
    GatewayError, OutOfScope, jsonrpc_error_response, jsonrpc_error_response_in,
};
use switchboard_core::scope::{Caller, identify};
use switchboard_core::session::TokenKind;
use switchboard_core::table::Server;
use switchboard_protocol::{self as protocol, Era};

use super::message::{Incoming, Message, parse_message};

/// An exchange route the caller's key may use, from a token the client echoed.
pub(super) fn exchange_route(caller: &Caller, token: Option<&str>) -> Option<ExchangeRoute> {
    let route = ExchangeRoute::open(&caller.table.sealer, token?)?;
    (route.key_tag == caller.short_tag()).then_some(route)
}

/// A legacy client's reply to an input request the gateway asked for a 2026-07-28 upstream:
/// handed to the stream waiting for it, here or on the replica that holds it.
pub(super) async fn pass_input_reply(
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
pub(super) async fn resume_exchange(
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
        let refused = OutOfScope::Server(relay.server.id().to_string());
        return fail(GatewayError::invisible(refused, over()));
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
    let key_tag = caller.short_tag();
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
pub(super) const HOP_HEADERS: &[&str] = &[
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
pub(super) const HANDOFF_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A client's message on its way to the replica holding its exchange: the client's headers
/// (its gateway key among them) and body, sealed so that only a replica can read them.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct Handoff {
    headers: Vec<(String, String)>,
    body: String,
}

/// The hand-off route of the replica reached at `address` (its advertised URL).
fn handoff_url(address: &str) -> Result<url::Url, url::ParseError> {
    url::Url::parse(&format!("{address}/mcp-internal/exchange"))
}

/// Whether an answer to a hand-off came from something that does not serve the route: a 404
/// that is not JSON. Every answer of the route itself is JSON-RPC (a 404 among them carries a
/// JSON body), an event stream, or its refusal of an unsealed message (403); a replica whose
/// `--advertise-url` names its client listener, where the route is not served, answers a bare
/// 404, and so would any other server the URL names.
fn not_a_handoff_route(status: http::StatusCode, content_type: Option<&HeaderValue>) -> bool {
    status == http::StatusCode::NOT_FOUND
        && !content_type
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/json"))
}

/// What the client is told when the holder's advertised address has no hand-off route: the
/// message can never reach it, so it is said at once rather than left to the call's timeout.
const MISADVERTISED: &str = "the gateway replica holding this exchange advertises an address where the replica hand-off route is not served (its --advertise-url must name its internal listener, not its client listener); repeat the call";

/// Hands a client's message about an exchange to the replica that holds it (named by the
/// sealed route), and relays that replica's answer.
pub(super) async fn pass_to_holder(
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
    let (Ok(http), Ok(url)) = (cx.upstream.http_to_replicas(), handoff_url(&route.address)) else {
        return unreachable();
    };
    let send = http
        .post(&url)
        .body("application/octet-stream", sealed)
        .send();
    let Ok(Ok(response)) = tokio::time::timeout(HANDOFF_TIMEOUT, send).await else {
        return unreachable();
    };
    let status = response.status();
    let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
    if not_a_handoff_route(status, content_type.as_ref()) {
        tracing::error!(
            holder = %route.address,
            "the replica holding an exchange advertises an address that answers 404 for the \
             hand-off route (/mcp-internal/exchange): its --advertise-url names a listener that \
             does not serve the route, likely its client listener; it must name its internal \
             listener (--internal-listen)"
        );
        return jsonrpc_error_response(
            &Value::Null,
            &GatewayError::UpstreamUnavailable {
                server: "switchboard".into(),
                detail: MISADVERTISED.into(),
            },
        );
    }
    let mut out = (status, axum::body::Body::new(response.into_body())).into_response();
    if let Some(ct) = content_type {
        out.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    out
}

/// Checks, once at start, that this replica's advertised address (`--advertise-url`) reaches a
/// hand-off route: it sends the route an unsealed message, which the route refuses (403). A URL
/// that names the client listener instead (the two listeners' ports confused) gets a warning
/// naming the flag, and so does one this replica cannot reach: either way every message another
/// replica hands to this one would fail.
pub async fn check_advertised_address(cx: &McpContext) {
    let address = cx.exchanges.address().to_string();
    let checked = match (cx.upstream.http_to_replicas(), handoff_url(&address)) {
        (Ok(http), Ok(url)) => {
            let send = http.post(&url).body("application/octet-stream", "").send();
            match tokio::time::timeout(HANDOFF_TIMEOUT, send).await {
                Ok(Ok(answer)) => Ok((
                    answer.status(),
                    answer.headers().get(header::CONTENT_TYPE).cloned(),
                )),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {}s", HANDOFF_TIMEOUT.as_secs())),
            }
        }
        (Err(e), _) => Err(e.to_string()),
        (_, Err(e)) => Err(e.to_string()),
    };
    match checked {
        Ok((status, content_type)) if not_a_handoff_route(status, content_type.as_ref()) => {
            tracing::warn!(
                advertise_url = %address,
                "--advertise-url names a listener that answers 404 for the replica hand-off \
                 route (/mcp-internal/exchange), likely this replica's client listener: other \
                 replicas cannot hand a client's reply or retry to this one (the client gets an \
                 error); name the internal listener (--internal-listen) instead"
            );
        }
        Ok(_) => tracing::info!(
            advertise_url = %address,
            "--advertise-url reaches a replica hand-off route"
        ),
        Err(why) => tracing::warn!(
            advertise_url = %address,
            error = %why,
            "--advertise-url is not reachable from this replica: other replicas may not be able \
             to hand a client's reply or retry to this one"
        ),
    }
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
    let caller = match identify(table, headers.clone()).await {
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
pub(super) async fn deliver_reply(
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
    if route.key_tag != caller.short_tag() {
        return Err(unknown());
    }
    // On a single endpoint the path names the server, or a virtual server one of whose
    // sources it is (the request came from a tool it presents).
    let on_path = |s: &Server, p: &str| {
        s.prefix() == p
            || caller
                .virtual_for_path(p)
                .is_some_and(|vs| vs.sources.iter().any(|src| src.server.id() == s.id()))
    };
    let server = caller
        .table
        .server_by_id(&route.server)
        .filter(|s| prefix.is_none_or(|p| on_path(s, p)))
        .cloned()
        .ok_or_else(unknown)?;
    if !caller.reaches(&server) {
        // The snapshot changed since the server asked: the key no longer reaches it.
        let refused = OutOfScope::Server(server.id().to_string());
        return Err(GatewayError::invisible(refused, unknown()));
    }
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
