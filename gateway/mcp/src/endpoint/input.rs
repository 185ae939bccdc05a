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
    (route.key_tag == caller.tag()[..8]).then_some(route)
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
    let mut key_tag = [0u8; 8];
    key_tag.copy_from_slice(&caller.tag()[..8]);
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
    let (Ok(http), Ok(url)) = (
        cx.upstream.upstreams.http(),
        url::Url::parse(&format!("{}/mcp-internal/exchange", route.address)),
    ) else {
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
    let mut out = (status, axum::body::Body::new(response.into_body())).into_response();
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
    if route.key_tag != caller.tag()[..8] {
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
