//! An in-process upstream MCP server for tests: an axum app on a loopback port (127.0.0.1:0,
//! bound by the test's own runtime, so no port is picked and released), which speaks the era it
//! is told, answers as it is told, and writes down everything it saw. Tests drive the gateway's
//! upstream client against it and assert from the upstream's side (which headers arrived, how
//! many handshakes, which credential).
//!
//! Compiled for this crate's tests, and for other crates' tests through the `test-support`
//! feature (a dev-dependency only: nothing shipped links it).
//!
//! What it serves, on every path (or only the one [`Upstream::only_path`] names):
//!
//! - `POST`: a JSON-RPC request, unless the path is redirected ([`TestUpstream::redirect`]),
//!   refused ([`Upstream::forbid`], [`TestUpstream::accept_only`]), or on a session it does not
//!   hold (404). A request is answered as its method (and, for `tools/call`, its tool's name)
//!   is told to be ([`Upstream::replies`], [`Upstream::tools`]), else with the usual result; a
//!   notification or a reply to a request of its own is accepted (202). `POST /oauth/token`
//!   issues `t1`, `t2`, ... instead.
//! - `GET`: the resumption of a closed stream (the next of [`Upstream::gets`], else 405), or the
//!   upstream's protected-resource metadata under `/.well-known/oauth-protected-resource`.
//! - `DELETE`: the end of a legacy session.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// The protocol era the upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Speaks {
    /// 2026-07-28: stateless, every request answered as it comes.
    #[default]
    Modern,
    /// A legacy revision: `initialize` opens a session (`Mcp-Session-Id: session-<n>`), every
    /// other request must carry a session it holds (404 otherwise), and a request without one
    /// (such as a 2026-07-28 request) is a 400 with a non-2026 error code, as legacy SDKs answer.
    Legacy,
    /// Both, as the stdio bridge: a handshake names its session by the gateway's affinity header
    /// (and asks to resume it with the resume header: 410 when it is gone); a request without a
    /// session is answered statelessly.
    ByClient,
}

/// How a request's answer comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Answer {
    #[default]
    Json,
    /// `text/event-stream`: a `notifications/progress` event (and, with
    /// [`Upstream::announce_tools_changed`], a `notifications/tools/list_changed` one), then the
    /// answer.
    Sse,
}

/// How one request is answered, instead of the usual answer ([`Upstream::tools`],
/// [`Upstream::replies`]).
#[derive(Debug, Clone)]
pub enum Reply {
    /// This result, with HTTP 200 (as an event stream with [`Answer::Sse`]).
    Result(Value),
    /// This JSON-RPC error object (`code`, `message`), with this HTTP status: a legacy server
    /// says an error with 200, a 2026-07-28 one with the 4xx it chooses.
    Error(StatusCode, Value),
    /// `text/event-stream`: these notifications, then the result if there is one, and the
    /// stream ends (a subscription's acknowledgement is a stream with no result).
    Stream(Vec<Value>, Option<Value>),
}

/// How the upstream behaves; [`Upstream::serve`] starts it.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub speaks: Speaks,
    pub answer: Answer,
    /// Every MCP request is answered 403.
    pub forbid: bool,
    /// The `WWW-Authenticate` of a 401 ([`TestUpstream::accept_only`]).
    pub challenge: String,
    /// The `protocolVersion` a legacy handshake answers.
    pub legacy_version: &'static str,
    /// The SSE body of a `tools/call` (`{ID}` stands for the request's id), instead of the
    /// usual answer: a script for streams the upstream closes before its answer.
    pub call_script: Option<String>,
    /// The answers to resuming GETs, in turn (status, SSE body with `{ID}`); past them, 405.
    pub gets: Vec<(StatusCode, String)>,
    /// Served under `/.well-known/oauth-protected-resource` (any suffix); 404 when `None`.
    pub resource_document: Option<Value>,
    /// An SSE answer announces that the tools changed before it answers.
    pub announce_tools_changed: bool,
    /// A legacy upstream that opens sessions but holds none: every request on one is a 404.
    pub forgets_sessions: bool,
    /// The answers of `tools/call` by the tool's name; a tool not named here gets the usual
    /// answer (`ok`, naming the tool it was called as).
    pub tools: Vec<(&'static str, Reply)>,
    /// The answers of other methods by the method's name, instead of the usual ones (a
    /// `tools/list` with cache hints, a 2026-07-28 `server/discover`, a subscription's stream).
    pub replies: Vec<(&'static str, Reply)>,
    /// Serves this path only: any other is a 404 it does not write down (as if no server were
    /// there), so what it saw is what reached this path; `None`: every path.
    pub only_path: Option<&'static str>,
}

impl Default for Upstream {
    fn default() -> Self {
        Upstream {
            speaks: Speaks::Modern,
            answer: Answer::Json,
            forbid: false,
            challenge: "Bearer resource_metadata=\"https://idp.example/rm\", scope=\"tools\""
                .into(),
            legacy_version: "2025-11-25",
            call_script: None,
            gets: Vec::new(),
            resource_document: None,
            announce_tools_changed: false,
            forgets_sessions: false,
            tools: Vec::new(),
            replies: Vec::new(),
            only_path: None,
        }
    }
}

/// One request the upstream received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
    /// The body as JSON (`Null` when it had none or was not JSON).
    pub body: Value,
    /// The body as it came, for what its reading hides (the order of members).
    pub text: String,
}

impl Seen {
    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    /// The JSON-RPC method of a POST (`None` for anything else).
    pub fn rpc_method(&self) -> Option<&str> {
        self.body.get("method").and_then(Value::as_str)
    }
}

/// A served upstream: where it is and what it saw. It lives as long as the test's runtime.
#[derive(Clone)]
pub struct TestUpstream {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    shared: Arc<Shared>,
}

struct Shared {
    config: Upstream,
    seen: Mutex<Vec<Seen>>,
    issued: AtomicU32,
    sessions_opened: AtomicU32,
    /// The sessions the upstream holds (legacy: `session-<n>`; byClient: the affinity).
    held: Mutex<HashSet<String>>,
    /// Answer the next request on a held session 404 all the same.
    refuse_once: AtomicBool,
    /// Path → (status, Location).
    redirects: Mutex<HashMap<String, (StatusCode, String)>>,
    /// `Some`: only these `Authorization` values are served; others get 401.
    accept: Mutex<Option<Vec<String>>>,
    gets: Mutex<VecDeque<(StatusCode, String)>>,
    /// The id of the last `tools/call`, for `{ID}` in scripts.
    call_id: Mutex<Option<Value>>,
    cancelled: Mutex<Vec<Value>>,
    cancel_came: Notify,
}

impl Upstream {
    /// Binds 127.0.0.1:0 and serves on the current runtime.
    pub async fn serve(self) -> TestUpstream {
        let shared = Arc::new(Shared {
            gets: Mutex::new(self.gets.iter().cloned().collect()),
            config: self,
            seen: Mutex::default(),
            issued: AtomicU32::new(0),
            sessions_opened: AtomicU32::new(0),
            held: Mutex::default(),
            refuse_once: AtomicBool::new(false),
            redirects: Mutex::default(),
            accept: Mutex::new(None),
            call_id: Mutex::default(),
            cancelled: Mutex::default(),
            cancel_came: Notify::new(),
        });
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let base = format!("http://{}", listener.local_addr().expect("its address"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        TestUpstream { base, shared }
    }
}

impl TestUpstream {
    /// A modern upstream answering JSON, served.
    pub async fn modern() -> TestUpstream {
        Upstream::default().serve().await
    }

    /// A legacy upstream answering JSON, served.
    pub async fn legacy() -> TestUpstream {
        Upstream {
            speaks: Speaks::Legacy,
            ..Upstream::default()
        }
        .serve()
        .await
    }

    /// `http://127.0.0.1:<port>/mcp`.
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// Answers requests to `path` with `status` and `Location: to` from now on.
    pub fn redirect(&self, path: &str, status: StatusCode, to: &str) {
        lock(&self.shared.redirects).insert(path.to_string(), (status, to.to_string()));
    }

    /// From now on, serves only MCP requests whose `Authorization` is one of `values` (none:
    /// refuses every one) and answers the others 401 with the configured challenge.
    pub fn accept_only(&self, values: &[&str]) {
        *lock(&self.shared.accept) = Some(values.iter().map(|v| v.to_string()).collect());
    }

    /// Forgets every session it holds (as a restarted legacy server does): a request on one is
    /// a 404 from now on.
    pub fn drop_sessions(&self) {
        lock(&self.shared.held).clear();
    }

    /// The next request on a session it still holds is answered 404 all the same (a hand-off
    /// that failed on the way).
    pub fn refuse_session_once(&self) {
        self.shared.refuse_once.store(true, Ordering::SeqCst);
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.shared.seen).clone()
    }

    /// The JSON-RPC methods of the POSTs so far (notifications included), in order.
    pub fn rpc_methods(&self) -> Vec<String> {
        self.seen()
            .iter()
            .filter_map(|s| s.rpc_method().map(str::to_owned))
            .collect()
    }

    /// The requests of one JSON-RPC method.
    pub fn requests_of(&self, method: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.rpc_method() == Some(method))
            .collect()
    }

    /// The GETs so far (stream resumptions and metadata).
    pub fn gets(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == Method::GET)
            .collect()
    }

    /// The `Authorization` of every POST to an MCP path (not the token endpoint), in order.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.seen()
            .iter()
            .filter(|s| s.method == Method::POST && s.path != "/oauth/token")
            .map(|s| s.header("authorization"))
            .collect()
    }

    /// Tokens the token endpoint issued.
    pub fn issued(&self) -> u32 {
        self.shared.issued.load(Ordering::SeqCst)
    }

    /// Legacy sessions opened (handshakes answered with a session).
    pub fn sessions_opened(&self) -> u32 {
        self.shared.sessions_opened.load(Ordering::SeqCst)
    }

    /// The sessions it holds now.
    pub fn held(&self) -> HashSet<String> {
        lock(&self.shared.held).clone()
    }

    /// The last `tools/call` it received.
    pub fn last_call(&self) -> Option<Seen> {
        self.requests_of("tools/call").pop()
    }

    /// The id of the last `tools/call` it received.
    pub fn call_id(&self) -> Option<Value> {
        lock(&self.shared.call_id).clone()
    }

    /// The request ids of the `notifications/cancelled` it received.
    pub fn cancelled(&self) -> Vec<Value> {
        lock(&self.shared.cancelled).clone()
    }

    /// Waits for a `notifications/cancelled` (each wakes one wait; one that came before the
    /// wait counts).
    pub async fn cancel_came(&self) {
        self.shared.cancel_came.notified().await;
    }
}

/// A poisoned lock in a test upstream only means another test thread panicked: go on.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn handle(
    State(up): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    let path = uri.path().to_string();
    if up.config.only_path.is_some_and(|only| only != path) {
        // Nothing is there: another server's path, which this one does not see.
        return StatusCode::NOT_FOUND.into_response();
    }
    let message: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    lock(&up.seen).push(Seen {
        method: method.clone(),
        path: path.clone(),
        headers: headers.clone(),
        body: message.clone(),
        text: body.clone(),
    });
    if let Some((status, to)) = lock(&up.redirects).get(&path).cloned() {
        return (status, [(header::LOCATION, to)]).into_response();
    }
    if path.starts_with("/.well-known/oauth-protected-resource") {
        return match &up.config.resource_document {
            Some(document) => axum::Json(document.clone()).into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        };
    }
    if path == "/oauth/token" && method == Method::POST {
        let n = up.issued.fetch_add(1, Ordering::SeqCst) + 1;
        return axum::Json(json!({
            "access_token": format!("t{n}"), "token_type": "Bearer", "expires_in": 3600
        }))
        .into_response();
    }
    if let Some(refused) = refusal(&up, &headers) {
        return refused;
    }
    let session = headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match method {
        Method::GET => resume(&up),
        Method::DELETE => {
            if let Some(session) = session {
                lock(&up.held).remove(&session);
            }
            StatusCode::OK.into_response()
        }
        Method::POST => post(&up, &headers, session, message),
        _ => StatusCode::METHOD_NOT_ALLOWED.into_response(),
    }
}

/// 403 for every request of a forbidding upstream, 401 for a credential it does not accept,
/// each with the challenge.
fn refusal(up: &Shared, headers: &HeaderMap) -> Option<Response> {
    if up.config.forbid {
        return Some(
            (
                StatusCode::FORBIDDEN,
                [(header::WWW_AUTHENTICATE, up.config.challenge.clone())],
            )
                .into_response(),
        );
    }
    let accept = lock(&up.accept);
    let accepted = accept.as_ref()?;
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if authorization.is_some_and(|a| accepted.iter().any(|ok| ok == a)) {
        return None;
    }
    Some(
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, up.config.challenge.clone())],
        )
            .into_response(),
    )
}

fn post(up: &Shared, headers: &HeaderMap, session: Option<String>, message: Value) -> Response {
    let rpc_method = message["method"].as_str().unwrap_or_default().to_string();
    let id = message.get("id").cloned();
    if rpc_method == "notifications/cancelled" {
        lock(&up.cancelled).push(message["params"]["requestId"].clone());
        up.cancel_came.notify_one();
        return StatusCode::ACCEPTED.into_response();
    }
    if up.config.speaks != Speaks::Modern {
        if rpc_method == "initialize" {
            return handshake(up, headers, id.unwrap_or(Value::Null));
        }
        match &session {
            // A stateless request to a byClient upstream is answered as it comes.
            None if up.config.speaks == Speaks::ByClient => {}
            None => {
                return (
                    StatusCode::BAD_REQUEST,
                    axum::Json(json!({"jsonrpc": "2.0", "id": null, "error": {
                        "code": -32000, "message": "Bad Request: No valid session ID provided"}})),
                )
                    .into_response();
            }
            Some(s) => {
                let refused_once = up.refuse_once.swap(false, Ordering::SeqCst);
                if refused_once || !lock(&up.held).contains(s) {
                    return StatusCode::NOT_FOUND.into_response();
                }
            }
        }
    }
    let Some(id) = id else {
        // A notification.
        return StatusCode::ACCEPTED.into_response();
    };
    if message.get("method").is_none() {
        // A client's reply to a request of the upstream's (an id and no method).
        return StatusCode::ACCEPTED.into_response();
    }
    if rpc_method == "tools/call"
        && let Some(script) = &up.config.call_script
    {
        *lock(&up.call_id) = Some(id.clone());
        return sse(StatusCode::OK, script.replace("{ID}", &id.to_string()));
    }
    if rpc_method == "tools/call" {
        *lock(&up.call_id) = Some(id.clone());
    }
    respond(up, &rpc_method, &message["params"], id)
}

/// The answer to a request (`id`) of `method`, in the way the upstream answers
/// ([`Upstream::answer`]).
fn respond(up: &Shared, method: &str, params: &Value, id: Value) -> Response {
    let (status, answer) = match reply_to(up, method, params) {
        Reply::Result(result) => (
            StatusCode::OK,
            json!({"jsonrpc": "2.0", "id": id, "result": result}),
        ),
        Reply::Error(status, error) => {
            (status, json!({"jsonrpc": "2.0", "id": id, "error": error}))
        }
        Reply::Stream(notifications, result) => {
            let answer = result.map(|r| json!({"jsonrpc": "2.0", "id": id, "result": r}));
            let body: String = notifications.iter().chain(&answer).map(event).collect();
            return sse(StatusCode::OK, body);
        }
    };
    match up.config.answer {
        Answer::Json => (status, axum::Json(answer)).into_response(),
        Answer::Sse => {
            let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                                  "params": {"progressToken": "p", "progress": 1}});
            let mut body = event(&progress);
            if up.config.announce_tools_changed {
                let changed =
                    json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
                body.push_str(&event(&changed));
            }
            body.push_str(&event(&answer));
            sse(status, body)
        }
    }
}

/// How a request of `method` is answered: as the test told it to ([`Upstream::tools`] by the
/// tool's name, [`Upstream::replies`] by the method), else the usual result, else "method not
/// found", which the 2026-07-28 revision says with an HTTP 4xx and a legacy server with 200.
fn reply_to(up: &Shared, method: &str, params: &Value) -> Reply {
    let named = |told: &[(&str, Reply)], name: &str| {
        told.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, reply)| reply.clone())
    };
    let told = match method {
        "tools/call" => named(
            &up.config.tools,
            params["name"].as_str().unwrap_or_default(),
        ),
        _ => named(&up.config.replies, method),
    };
    told.or_else(|| result_of(method, params).map(Reply::Result))
        .unwrap_or_else(|| {
            let status = match up.config.speaks {
                Speaks::Modern => StatusCode::NOT_FOUND,
                _ => StatusCode::OK,
            };
            let error = json!({"code": -32601, "message": format!("Method not found: {method}")});
            Reply::Error(status, error)
        })
}

/// The usual result of the methods the upstream knows; `None`: an unknown method. A tool's
/// result names the tool it was called as (`called`), so a test sees which name arrived from
/// the answer as well.
fn result_of(method: &str, params: &Value) -> Option<Value> {
    Some(match method {
        "tools/call" => json!({"content": [{"type": "text", "text": "ok"}],
                               "called": params["name"]}),
        "tools/list" => json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}),
        "server/discover" => json!({
            "supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
            "serverInfo": {"name": "test-upstream", "version": "1"}}),
        "resources/read" | "ping" => json!({}),
        _ => return None,
    })
}

/// A legacy handshake: a new session (legacy), or the one the affinity names (byClient, 410
/// when asked to resume one that is gone).
fn handshake(up: &Shared, headers: &HeaderMap, id: Value) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let session = if up.config.speaks == Speaks::ByClient {
        let affinity = header(switchboard_protocol::AFFINITY_HEADER)
            .unwrap_or_default()
            .to_string();
        let resume = header(switchboard_protocol::RESUME_HEADER).is_some();
        if resume && !lock(&up.held).contains(&affinity) {
            return (
                StatusCode::GONE,
                axum::Json(json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32001, "message": "this session ended"}})),
            )
                .into_response();
        }
        affinity
    } else {
        let n = up.sessions_opened.load(Ordering::SeqCst) + 1;
        format!("session-{n}")
    };
    up.sessions_opened.fetch_add(1, Ordering::SeqCst);
    if !up.config.forgets_sessions {
        lock(&up.held).insert(session.clone());
    }
    let mut response = axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": {
        "protocolVersion": up.config.legacy_version, "capabilities": {"tools": {}},
        "serverInfo": {"name": "test-upstream", "version": "1"}}}))
    .into_response();
    if let Ok(value) = HeaderValue::from_str(&session) {
        response.headers_mut().insert("mcp-session-id", value);
    }
    response
}

/// A GET resuming a stream: the next scripted answer, else 405 (no stream to resume).
fn resume(up: &Shared) -> Response {
    let next = lock(&up.gets).pop_front();
    match next {
        Some((status, body)) => {
            let id = lock(&up.call_id).clone().unwrap_or(Value::Null);
            sse(status, body.replace("{ID}", &id.to_string()))
        }
        None => StatusCode::METHOD_NOT_ALLOWED.into_response(),
    }
}

/// One message as an event of a stream.
fn event(message: &Value) -> String {
    format!("event: message\ndata: {message}\n\n")
}

fn sse(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from(body),
    )
        .into_response()
}
