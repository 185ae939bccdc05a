//! The Streamable HTTP face: `POST`/`DELETE` on the MCP path, `/healthz`, `/readyz`.
//!
//! - A 2026-07-28 request (its `params._meta` names `io.modelcontextprotocol/protocolVersion`)
//!   leases an idle pooled process for its duration. `server/discover` is answered from the
//!   process's `initialize` result; other methods go to the process with the 2026-07-28
//!   `_meta` keys taken off (it speaks a legacy revision), and the result gets
//!   `resultType: "complete"` and the server's info in `_meta`, as a 2026-07-28 server's does.
//! - A legacy `initialize` starts a process of the session's own; the `Mcp-Session-Id` names
//!   this replica (see [`crate::session_id`]). A request with an id another replica sealed is
//!   handed to that replica over HTTP (`x-switchboard-bridge-hop` marks it; a handed request is
//!   never handed on). An unknown id, a session whose process exited, or a holder that is gone
//!   answer 404: the client opens a new session, as the transport says.
//! - A gateway's `initialize` with an affinity goes where `crate::peers::place` says: the
//!   replica that holds that session (asked on `/_bridge/sessions/{name}`), or, for a new one,
//!   the replica the affinity ranks first; a session that ended answers 410. A draining replica
//!   tells the others which sessions end with it (`/_bridge/ended`, sealed).
//! - The answer is JSON when it is the first thing the process sends for the request; when a
//!   notification or a server request comes first and the client accepts `text/event-stream`,
//!   everything up to the answer is an SSE stream. A client that goes away cancels the request
//!   on the process.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

use crate::peers::{Asked, Peers, Place, place};
use crate::pool::{Holding, Lease, Processes, Refused};
use crate::process::{Call, INTERNAL_ERROR, Process, is_answer};
use crate::session_id::Sealer;

const SESSION: &str = "mcp-session-id";
/// Names the client session a gateway opens an upstream session for: every gateway replica
/// sends the same value for the same client session, so they all get the same process.
const AFFINITY: &str = switchboard_protocol::AFFINITY_HEADER;
/// The gateway had this session (see [`switchboard_protocol::RESUME_HEADER`]).
const RESUME: &str = switchboard_protocol::RESUME_HEADER;
/// Marks a request one replica handed to the session's holder.
const HOP: &str = "x-switchboard-bridge-hop";
/// How long another replica may take to say what it knows of a session, or to take a note.
const PEER_ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// The replicas' own routes: what one knows of a session, and the sessions one ends draining.
const PEER_SESSIONS: &str = "/_bridge/sessions";
const PEER_ENDED: &str = "/_bridge/ended";
use switchboard_protocol::{META_PROTOCOL_VERSION as META_VERSION, META_SERVER_INFO};
/// The 2026-07-28 `_meta` keys a legacy server is not sent.
const META_PREFIX: &str = "io.modelcontextprotocol/";
/// How long a handed-off request may wait for the holder's response headers.
const HAND_OFF_TIMEOUT: Duration = Duration::from_secs(30);
const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const SESSION_NOT_FOUND: i64 = -32001;

pub struct Bridge {
    pub processes: Arc<Processes>,
    pub sealer: Sealer,
    /// `host:port` other replicas reach this one at (sealed into its session ids).
    pub advertise: String,
    pub path: String,
    pub init_timeout: Duration,
    pub draining: AtomicBool,
    /// The replicas (see [`crate::peers`]): where a session with an affinity lives.
    pub peers: Peers,
    client: Client<HttpConnector, Full<Bytes>>,
    /// Handshakes one at a time: two gateways opening the same affinity get one process.
    opening: tokio::sync::Mutex<()>,
}

impl Bridge {
    pub fn new(
        processes: Arc<Processes>,
        sealer: Sealer,
        advertise: String,
        path: String,
        init_timeout: Duration,
        peers: Peers,
    ) -> Bridge {
        Bridge {
            processes,
            sealer,
            advertise,
            path,
            init_timeout,
            draining: AtomicBool::new(false),
            peers,
            client: Client::builder(hyper_util::rt::TokioExecutor::new()).build(peer_connector()),
            opening: tokio::sync::Mutex::new(()),
        }
    }
}

/// Connections to other replicas: a replica whose pod is gone takes its IP with it, and a
/// connect to it would hang (no one answers, not even with a reset) until the hand-off's
/// whole timeout; two seconds tell it is gone.
fn peer_connector() -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(PEER_CONNECT_TIMEOUT));
    connector.set_nodelay(true);
    connector
}

pub fn router(bridge: Arc<Bridge>) -> Router {
    let path = bridge.path.clone();
    Router::new()
        .route(
            &path,
            axum::routing::post(post_mcp)
                .delete(delete_mcp)
                .get(|| async {
                    (
                        StatusCode::METHOD_NOT_ALLOWED,
                        [(header::ALLOW, "POST, DELETE")],
                    )
                }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route(&format!("{PEER_SESSIONS}/{{name}}"), get(peer_session))
        .route(PEER_ENDED, axum::routing::post(peer_ended))
        .with_state(bridge)
}

/// What this replica knows of a session, for another replica placing a handshake:
/// `{"session": "held" | "ended" | "unknown", "draining": bool}`.
async fn peer_session(
    State(b): State<Arc<Bridge>>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Response {
    let holding = match b.processes.holding(&name) {
        Holding::Held => "held",
        Holding::Ended => "ended",
        Holding::Unknown => "unknown",
    };
    json_response(&json!({"session": holding, "draining": b.draining.load(Ordering::Relaxed)}))
}

/// Sessions another replica ends (it drains): remembered as ended, so that a gateway asking
/// for one later is told so. Sealed by a replica, else refused.
async fn peer_ended(State(b): State<Arc<Bridge>>, body: Bytes) -> Response {
    let Some(names) = b.sealer.open_ended(&body) else {
        return (
            StatusCode::FORBIDDEN,
            "not sealed by a replica of this server\n",
        )
            .into_response();
    };
    let names: Vec<String> = names.into_iter().filter(|n| valid_affinity(n)).collect();
    tracing::info!(sessions = names.len(), "a replica drains: its sessions end");
    b.processes.mark_ended(names);
    StatusCode::NO_CONTENT.into_response()
}

async fn readyz(State(b): State<Arc<Bridge>>) -> Response {
    if b.draining.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
    }
    if !b.processes.ready() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "no server process has answered initialize yet",
        )
            .into_response();
    }
    let (alive, idle, sessions) = b.processes.counts();
    format!("ready: {alive} processes, {idle} idle, {sessions} sessions\n").into_response()
}

fn rpc_error(status: StatusCode, id: Value, code: i64, message: impl Into<String>) -> Response {
    let body =
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// No process could be had: busy (503, the client may retry) or the server did not start (502).
fn refused(id: Value, refused: Refused) -> Response {
    match refused {
        Refused::Busy(waited) if waited.is_zero() => rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            INTERNAL_ERROR,
            "no room for another server process on this replica",
        ),
        Refused::Busy(waited) => rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            INTERNAL_ERROR,
            format!(
                "every server process is busy (waited {})",
                humantime::format_duration(waited)
            ),
        ),
        Refused::Failed(e) => rpc_error(StatusCode::BAD_GATEWAY, id, INTERNAL_ERROR, e.to_string()),
    }
}

fn json_response(message: &Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        message.to_string(),
    )
        .into_response()
}

/// A gateway asked for a session (by its affinity) that ended: its process and its state are
/// gone, and no new one is opened under its name.
fn session_ended(message: &Value) -> Response {
    rpc_error(
        StatusCode::GONE,
        message.get("id").cloned().unwrap_or(Value::Null),
        SESSION_NOT_FOUND,
        "this session ended (its server process is gone, with its state): initialize a new session",
    )
}

fn session_not_found(message: &Value) -> Response {
    rpc_error(
        StatusCode::NOT_FOUND,
        message.get("id").cloned().unwrap_or(Value::Null),
        SESSION_NOT_FOUND,
        "session not found: initialize a new one",
    )
}

fn accepts_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

fn is_modern(message: &Value) -> bool {
    message
        .get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_VERSION))
        .is_some()
}

async fn post_mcp(State(b): State<Arc<Bridge>>, headers: HeaderMap, body: Bytes) -> Response {
    let mut message: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                -32700,
                "the body is not one JSON-RPC message",
            );
        }
    };
    carry_trace(&headers, &mut message);
    let sse = accepts_sse(&headers);
    if let Some(id) = headers.get(SESSION) {
        let Some((holder, name)) = id.to_str().ok().and_then(|id| b.sealer.open(id)) else {
            return session_not_found(&message);
        };
        if holder != b.advertise {
            if headers.contains_key(HOP) {
                return session_not_found(&message);
            }
            return b
                .hand_off(Method::POST, &headers, body, &holder, &message)
                .await;
        }
        let Some(process) = b.processes.session(&name) else {
            return session_not_found(&message);
        };
        return session_message(process, message, sse).await;
    }
    if is_modern(&message) {
        return modern(&b, message, sse).await;
    }
    if message.get("method").and_then(Value::as_str) == Some("initialize") {
        let affinity = headers
            .get(AFFINITY)
            .and_then(|v| v.to_str().ok())
            .filter(|a| valid_affinity(a))
            .map(str::to_string);
        let Some(affinity) = affinity else {
            return initialize(&b, message, None, false).await;
        };
        let resume = headers.contains_key(RESUME);
        if !headers.contains_key(HOP) {
            let id = message.get("id").cloned().unwrap_or(Value::Null);
            match b.place(&affinity, resume).await {
                Place::Here => {}
                Place::Ended => return session_ended(&message),
                Place::Unsure => {
                    return rpc_error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        id,
                        INTERNAL_ERROR,
                        "a replica of this server did not say in time whether it holds this session; try again",
                    );
                }
                Place::Holder(holder) => {
                    return match b
                        .forward(Method::POST, &headers, body, &holder, &message)
                        .await
                    {
                        Ok(response) => response,
                        Err(Unreachable) => rpc_error(
                            StatusCode::SERVICE_UNAVAILABLE,
                            id,
                            INTERNAL_ERROR,
                            "the replica holding this session could not be reached; try again",
                        ),
                    };
                }
                Place::Home(home) => {
                    // A home that cannot be reached now is gone: the session opens here.
                    if let Ok(response) = b
                        .forward(Method::POST, &headers, body, &home, &message)
                        .await
                    {
                        return response;
                    }
                }
            }
        }
        return initialize(&b, message, Some(affinity), resume).await;
    }
    rpc_error(
        StatusCode::BAD_REQUEST,
        message.get("id").cloned().unwrap_or(Value::Null),
        -32600,
        "a legacy request needs an Mcp-Session-Id (initialize first), or 2026-07-28 _meta",
    )
}

async fn delete_mcp(State(b): State<Arc<Bridge>>, headers: HeaderMap) -> Response {
    let none = json!({});
    let Some((holder, name)) = headers
        .get(SESSION)
        .and_then(|v| v.to_str().ok())
        .and_then(|id| b.sealer.open(id))
    else {
        return session_not_found(&none);
    };
    if holder != b.advertise {
        if headers.contains_key(HOP) {
            return session_not_found(&none);
        }
        return b
            .hand_off(Method::DELETE, &headers, Bytes::new(), &holder, &none)
            .await;
    }
    if b.processes.close_session(&name) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        session_not_found(&none)
    }
}

async fn modern(b: &Bridge, message: Value, sse: bool) -> Response {
    let Some(id) = message.get("id").cloned() else {
        // A notification: a 2026-07-28 client cancels by closing its request.
        return StatusCode::ACCEPTED.into_response();
    };
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            -32600,
            "a request needs a method",
        );
    };
    let lease = match b.processes.lease().await {
        Ok(lease) => lease,
        Err(e) => return refused(id, e),
    };
    let init = lease.process().init().unwrap_or_default();
    let shape = ModernShape {
        server_info: init.get("serverInfo").cloned(),
    };
    if method == "server/discover" {
        let mut result = json!({
            "supportedVersions": [switchboard_protocol::MODERN_VERSION],
            "capabilities": init.get("capabilities").cloned().unwrap_or_else(|| json!({})),
        });
        if let Some(instructions) = init.get("instructions") {
            result["instructions"] = instructions.clone();
        }
        return json_response(&shape.apply(json!({"jsonrpc": "2.0", "id": id, "result": result})));
    }
    let mut params = message.get("params").cloned();
    if let Some(meta) = params
        .as_mut()
        .and_then(|p| p.get_mut("_meta"))
        .and_then(Value::as_object_mut)
    {
        meta.retain(|k, _| !k.starts_with(META_PREFIX));
    }
    if let Some(p) = params.as_mut().and_then(Value::as_object_mut)
        && p.get("_meta")
            .and_then(Value::as_object)
            .is_some_and(|m| m.is_empty())
    {
        p.remove("_meta");
    }
    let process = lease.process().clone();
    match process.request(method, params, id.clone()).await {
        Ok(call) => respond(call, sse, Some(lease), Some(shape)).await,
        Err(e) => rpc_error(StatusCode::BAD_GATEWAY, id, INTERNAL_ERROR, e.to_string()),
    }
}

/// What a 2026-07-28 answer carries that a legacy one does not.
struct ModernShape {
    server_info: Option<Value>,
}

impl ModernShape {
    fn apply(&self, mut message: Value) -> Value {
        if let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) {
            result
                .entry("resultType")
                .or_insert_with(|| json!("complete"));
            if let Some(info) = &self.server_info {
                let meta = result.entry("_meta").or_insert_with(|| json!({}));
                if let Some(meta) = meta.as_object_mut() {
                    meta.insert(META_SERVER_INFO.into(), info.clone());
                }
            }
        }
        message
    }
}

/// Puts a request's trace context where its process can read it: `_meta` (SEP-414), from the
/// `traceparent` header when `_meta` names none (a stdio process has no headers). A gateway
/// writes its call's context into `_meta` itself; this serves a client that sends the header
/// alone. A response (no method) carries no trace context.
fn carry_trace(headers: &HeaderMap, message: &mut Value) {
    use switchboard_protocol::trace_context::{TRACEPARENT, TRACESTATE, TraceContext};
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let Some(trace) = header(TRACEPARENT).and_then(|tp| TraceContext::new(tp, header(TRACESTATE)))
    else {
        return;
    };
    let Some(message) = message.as_object_mut().filter(|m| m.contains_key("method")) else {
        return;
    };
    let params = message.entry("params").or_insert_with(|| json!({}));
    let Some(meta) = params
        .as_object_mut()
        .map(|p| p.entry("_meta").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    if meta.contains_key(TRACEPARENT) {
        return;
    }
    meta.insert(TRACEPARENT.into(), json!(trace.traceparent()));
    if let Some(state) = trace.tracestate() {
        meta.insert(TRACESTATE.into(), json!(state));
    }
}

/// An affinity is a gateway's digest: 16 to 64 hex digits.
fn valid_affinity(a: &str) -> bool {
    (16..=64).contains(&a.len()) && a.bytes().all(|c| c.is_ascii_hexdigit())
}

/// Opens a session here (`affinity`: under that name, answering again for one held already;
/// `resume`: only that).
async fn initialize(
    b: &Bridge,
    message: Value,
    affinity: Option<String>,
    resume: bool,
) -> Response {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let _one_at_a_time = b.opening.lock().await;
    let name = match affinity {
        Some(affinity) => {
            // Another gateway replica opened this client session's process already: the same
            // session, answered as it was the first time.
            if let Some(process) = b.processes.session(&affinity)
                && let Some(init) = process.init()
            {
                let mut response =
                    json_response(&json!({"jsonrpc": "2.0", "id": id, "result": init}));
                if let Ok(v) = HeaderValue::from_str(&b.sealer.seal(&b.advertise, &affinity)) {
                    response.headers_mut().insert(SESSION, v);
                }
                return response;
            }
            if resume || b.processes.holding(&affinity) == Holding::Ended {
                return session_ended(&message);
            }
            affinity
        }
        None => format!("{:032x}", rand::random::<u128>()),
    };
    let process = match b.processes.open_session(&name) {
        Ok(p) => p,
        Err(e) => return refused(id, e),
    };
    let answer = async {
        let mut call = process
            .request("initialize", message.get("params").cloned(), id.clone())
            .await?;
        call.answer().await
    };
    let answer = match tokio::time::timeout(b.init_timeout, answer).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => {
            b.processes.discard_session(&name);
            return rpc_error(StatusCode::BAD_GATEWAY, id, INTERNAL_ERROR, e.to_string());
        }
        Err(_) => {
            b.processes.discard_session(&name);
            return rpc_error(
                StatusCode::GATEWAY_TIMEOUT,
                id,
                INTERNAL_ERROR,
                "the server process did not answer initialize in time",
            );
        }
    };
    let Some(result) = answer.get("result") else {
        b.processes.discard_session(&name);
        return json_response(&answer);
    };
    process.remember_init(result.clone());
    let mut response = json_response(&answer);
    if let Ok(v) = HeaderValue::from_str(&b.sealer.seal(&b.advertise, &name)) {
        response.headers_mut().insert(SESSION, v);
    }
    tracing::info!(process = %process.label, "session opened");
    response
}

async fn session_message(process: Arc<Process>, mut message: Value, sse: bool) -> Response {
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_string);
    let id = message.get("id").cloned();
    match (method, id) {
        (Some(m), Some(id)) if m == "initialize" => rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            -32600,
            "this session is initialized already",
        ),
        (Some(m), Some(id)) => match process
            .request(&m, message.get("params").cloned(), id.clone())
            .await
        {
            Ok(call) => respond(call, sse, None, None).await,
            Err(e) => {
                // The process is gone: so is the session.
                tracing::info!(process = %process.label, error = %e, "a session's process is gone");
                session_not_found(&message)
            }
        },
        (Some(m), None) => {
            if m == "notifications/cancelled" {
                // The client names its own id; the process knows the bridge's.
                let theirs = message
                    .pointer("/params/requestId")
                    .cloned()
                    .unwrap_or(Value::Null);
                match process.id_of(&theirs) {
                    Some(ours) => message["params"]["requestId"] = json!(ours),
                    None => return StatusCode::ACCEPTED.into_response(),
                }
            }
            match process.send(&message).await {
                Ok(()) => StatusCode::ACCEPTED.into_response(),
                Err(_) => session_not_found(&message),
            }
        }
        // The client's answer to a server request: its id is the process's own.
        (None, Some(_)) => match process.send(&message).await {
            Ok(()) => StatusCode::ACCEPTED.into_response(),
            Err(_) => session_not_found(&message),
        },
        (None, None) => rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            -32600,
            "not a JSON-RPC request, notification or response",
        ),
    }
}

/// The answer as JSON, or everything up to it as SSE (see the module docs). `lease` is held
/// until the answer went out.
async fn respond(
    mut call: Call,
    sse: bool,
    lease: Option<Lease>,
    shape: Option<ModernShape>,
) -> Response {
    let shape = move |m: Value| match (&shape, is_answer(&m)) {
        (Some(s), true) => s.apply(m),
        _ => m,
    };
    let Some(first) = call.next().await else {
        return rpc_error(
            StatusCode::BAD_GATEWAY,
            Value::Null,
            INTERNAL_ERROR,
            "the server process stopped",
        );
    };
    if is_answer(&first) {
        return json_response(&shape(first));
    }
    if !sse {
        return match call.answer().await {
            Ok(answer) => json_response(&shape(answer)),
            Err(e) => rpc_error(
                StatusCode::BAD_GATEWAY,
                Value::Null,
                INTERNAL_ERROR,
                e.to_string(),
            ),
        };
    }
    let events = futures_util::stream::unfold(
        (call, lease, Some(first), shape),
        |(mut call, lease, first, shape)| async move {
            let message = match first {
                Some(m) => m,
                None => call.next().await?,
            };
            let event = Bytes::from(format!("event: message\ndata: {}\n\n", shape(message)));
            Some((Ok::<_, Infallible>(event), (call, lease, None, shape)))
        },
    );
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(events))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The replica a request was handed to could not be reached.
struct Unreachable;

impl Bridge {
    /// Where a gateway's handshake for `affinity` goes: this replica's own knowledge, then the
    /// other replicas', asked at once (see [`crate::peers`]).
    async fn place(&self, affinity: &str, resume: bool) -> Place {
        let here = self.processes.holding(affinity);
        let draining = self.draining.load(Ordering::Relaxed);
        if here != Holding::Unknown {
            return place(affinity, &self.advertise, here, draining, &[], resume);
        }
        let others = self.peers.others(&self.advertise).await;
        let asked =
            futures_util::future::join_all(others.iter().map(|peer| self.ask(peer, affinity)))
                .await;
        let answers: Vec<(String, Asked)> = others.into_iter().zip(asked).collect();
        place(affinity, &self.advertise, here, draining, &answers, resume)
    }

    /// What the replica at `peer` knows of the session `name`.
    async fn ask(&self, peer: &str, name: &str) -> Asked {
        let Ok(uri) = format!("http://{peer}{PEER_SESSIONS}/{name}").parse::<http::Uri>() else {
            return Asked::Unreachable;
        };
        let mut request = http::Request::new(Full::new(Bytes::new()));
        *request.uri_mut() = uri;
        let asked = async {
            let response = self.client.request(request).await?;
            let status = response.status();
            let body = http_body_util::BodyExt::collect(response.into_body())
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            Ok::<_, hyper_util::client::legacy::Error>((status, body))
        };
        match tokio::time::timeout(PEER_ANSWER_TIMEOUT, asked).await {
            Ok(Ok((StatusCode::OK, body))) => {
                let answer: Value = serde_json::from_slice(&body).unwrap_or_default();
                let holding = match answer["session"].as_str() {
                    Some("held") => Holding::Held,
                    Some("ended") => Holding::Ended,
                    Some("unknown") => Holding::Unknown,
                    _ => return Asked::Unsure,
                };
                Asked::Answered {
                    holding,
                    draining: answer["draining"].as_bool().unwrap_or(false),
                }
            }
            // A replica of an older version, without the route, holds no session by affinity
            // that it would tell of.
            Ok(Ok((StatusCode::NOT_FOUND, _))) => Asked::Answered {
                holding: Holding::Unknown,
                draining: false,
            },
            Ok(Ok((status, _))) => {
                tracing::info!(peer, %status, "a replica did not say what it knows of a session");
                Asked::Unsure
            }
            Ok(Err(e)) if e.is_connect() => Asked::Unreachable,
            Ok(Err(e)) => {
                tracing::info!(peer, error = %e, "a replica did not say what it knows of a session");
                Asked::Unsure
            }
            Err(_) => Asked::Unsure,
        }
    }

    /// Draining: tells the other replicas that the sessions held here end, so that a gateway
    /// asking any of them for one later is told it is gone. Bounded; a replica that does not
    /// take the note just does not know.
    pub async fn announce_ended(&self) {
        let names = self.processes.session_names();
        if names.is_empty() {
            return;
        }
        let note = Bytes::from(self.sealer.seal_ended(&names));
        let others = self.peers.others(&self.advertise).await;
        let note = &note;
        let told = futures_util::future::join_all(others.iter().map(|peer| async move {
            let Ok(uri) = format!("http://{peer}{PEER_ENDED}").parse::<http::Uri>() else {
                return false;
            };
            let mut request = http::Request::new(Full::new(note.clone()));
            *request.method_mut() = Method::POST;
            *request.uri_mut() = uri;
            matches!(
                tokio::time::timeout(PEER_ANSWER_TIMEOUT, self.client.request(request)).await,
                Ok(Ok(r)) if r.status().is_success()
            )
        }))
        .await;
        tracing::info!(
            sessions = names.len(),
            told = told.iter().filter(|t| **t).count(),
            replicas = others.len(),
            "told the other replicas which sessions end with this one"
        );
    }

    /// Passes a request for a session held by the replica at `holder` to it, and its answer
    /// (streamed) back. A holder that cannot be reached took the session with it: 404.
    async fn hand_off(
        &self,
        method: Method,
        headers: &HeaderMap,
        body: Bytes,
        holder: &str,
        message: &Value,
    ) -> Response {
        match self.forward(method, headers, body, holder, message).await {
            Ok(response) => response,
            Err(Unreachable) => session_not_found(message),
        }
    }

    async fn forward(
        &self,
        method: Method,
        headers: &HeaderMap,
        body: Bytes,
        holder: &str,
        message: &Value,
    ) -> Result<Response, Unreachable> {
        let uri = format!("http://{holder}{}", self.path)
            .parse::<http::Uri>()
            .map_err(|_| Unreachable)?;
        let mut request = http::Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        for (name, value) in headers {
            if !matches!(
                name.as_str(),
                "host" | "content-length" | "connection" | "transfer-encoding"
            ) {
                request.headers_mut().append(name.clone(), value.clone());
            }
        }
        request
            .headers_mut()
            .insert(HOP, HeaderValue::from_static("1"));
        match tokio::time::timeout(HAND_OFF_TIMEOUT, self.client.request(request)).await {
            Ok(Ok(response)) => {
                let (parts, body) = response.into_parts();
                Ok(Response::from_parts(parts, Body::new(body)))
            }
            Ok(Err(e)) => {
                tracing::info!(holder, error = %e, "a replica could not be reached");
                Err(Unreachable)
            }
            Err(_) => Ok(rpc_error(
                StatusCode::GATEWAY_TIMEOUT,
                message.get("id").cloned().unwrap_or(Value::Null),
                INTERNAL_ERROR,
                "the replica holding this session did not answer in time",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const GATEWAYS: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01";

    fn carried(headers: &[(&'static str, &'static str)], message: Value) -> Value {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, HeaderValue::from_static(value));
        }
        let mut message = message;
        carry_trace(&map, &mut message);
        message
    }

    #[test]
    fn the_header_context_reaches_meta_where_meta_has_none() {
        let headers = [("traceparent", TP), ("tracestate", "k=v")];
        // No parameters, parameters without `_meta`, a `_meta` without a context: added.
        for message in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}}),
            json!({"jsonrpc": "2.0", "method": "notifications/x", "params": {"_meta": {"p": 1}}}),
        ] {
            let out = carried(&headers, message.clone());
            assert_eq!(out["params"]["_meta"]["traceparent"], TP, "{message}");
            assert_eq!(out["params"]["_meta"]["tracestate"], "k=v", "{message}");
        }
        // A context in `_meta` already (a gateway's own call span) is kept.
        let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
            "params": {"_meta": {"traceparent": GATEWAYS}}});
        assert_eq!(carried(&headers, message.clone()), message);
        // No valid header context, a response, or parameters that are not an object: untouched.
        let plain = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        assert_eq!(carried(&[], plain.clone()), plain);
        assert_eq!(carried(&[("traceparent", "00-x")], plain.clone()), plain);
        let response = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
        assert_eq!(carried(&headers, response.clone()), response);
        let array = json!({"jsonrpc": "2.0", "id": 1, "method": "m", "params": [1]});
        assert_eq!(carried(&headers, array.clone()), array);
    }
}
