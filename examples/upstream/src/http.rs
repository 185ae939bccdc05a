//! HTTP wiring: routes, fault injection, sessions and era selection per request, and
//! JSON / SSE response encoding.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use futures_util::StreamExt as _;
use futures_util::stream;
use serde_json::{Value, json};

use crate::accounts;
use crate::dispatch::{self, Request};
use crate::listen::{self, Listeners};
use crate::oauth::{self, Issuer};
use crate::protocol::{
    self, H_SESSION, H_VERSION, INVALID_REQUEST, Kind, LEGACY_VERSIONS, MODERN_VERSION, Message,
    RpcError,
};
use crate::rest;
use crate::sessions::Sessions;
use crate::stats::Stats;
use crate::variants::{self, Era, Hang, Variant};

pub struct App {
    pub stats: Stats,
    pub accounts: crate::accounts::AccountServer,
    /// What `/accounts/mcp` serves: the example's tools and `whoami`.
    pub accounts_variant: Arc<Variant>,
    pub sessions: Sessions,
    pub oauth: Issuer,
    pub listeners: Listeners,
    pub listen: SocketAddr,
    pub default_variant: Arc<Variant>,
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/mcp", any(mcp_default))
        .route("/v/{opts}/mcp", any(mcp_variant))
        .route(
            "/_stats",
            get(|State(a): State<Arc<App>>| async move {
                let mut summary = a.stats.summary();
                summary["listening"] = json!(a.listeners.open());
                axum::Json(summary)
            }),
        )
        .route("/_notify", post(notify))
        .route(
            "/_requests",
            get(|State(a): State<Arc<App>>| async move { axum::Json(a.stats.recent()) }),
        )
        .route(
            "/_reset",
            post(|State(a): State<Arc<App>>| async move {
                a.stats.reset();
                StatusCode::NO_CONTENT
            }),
        )
        .route(
            "/.well-known/oauth-protected-resource",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*rest}",
            get(resource_metadata),
        )
        .route(oauth::TOKEN_PATH, post(oauth::token_endpoint))
        .route(
            "/.well-known/oauth-authorization-server",
            get(oauth::metadata),
        )
        .route(
            "/.well-known/oauth-authorization-server/oauth",
            get(oauth::metadata),
        )
        .route(
            "/.well-known/oauth-authorization-server/accounts",
            get(accounts::metadata),
        )
        .route(
            "/accounts/authorize",
            get(accounts::authorize_page).post(accounts::authorize),
        )
        .route("/accounts/token", post(accounts::token))
        .route("/accounts/revoke", post(accounts::revoke))
        .route("/accounts/_stats", get(accounts::stats))
        .route("/accounts/_forget", post(accounts::forget))
        .route("/accounts/mcp", any(accounts::mcp))
        .route("/rest/add", get(rest::add_endpoint))
        .route("/rest/echo", post(rest::echo_endpoint))
        .route("/rest/openapi.json", get(rest::document))
        .with_state(app)
}

async fn mcp_default(
    State(app): State<Arc<App>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let variant = app.default_variant.clone();
    serve(app, variant, uri, method, headers, body).await
}

async fn mcp_variant(
    State(app): State<Arc<App>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // The raw segment: options are split before they are percent-decoded.
    let opts = uri
        .path()
        .strip_prefix("/v/")
        .and_then(|p| p.strip_suffix("/mcp"))
        .unwrap_or_default();
    match variants::parse(opts) {
        Ok(v) => serve(app, Arc::new(v), uri, method, headers, body).await,
        Err(e) => (StatusCode::BAD_REQUEST, e).into_response(),
    }
}

pub(crate) async fn serve(
    app: Arc<App>,
    v: Arc<Variant>,
    uri: Uri,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path();
    let msg = (method == Method::POST).then(|| protocol::parse(&body));
    if let Some(m) = &msg {
        let m = m.as_ref().ok();
        app.stats.record(
            path,
            m.map(|m| m.method.as_str()),
            m.and_then(Message::tool),
            &headers,
        );
    }
    if v.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(v.delay_ms)).await;
    }
    let lists = matches!(&msg, Some(Ok(m)) if m.method == "tools/list");
    if v.hang == Hang::All || (v.hang == Hang::List && lists) {
        std::future::pending::<()>().await;
    }
    if let Some(refusal) = fault(&app, &v, &headers) {
        return refusal;
    }
    match (method, msg) {
        (_, Some(Err(e))) => json_response(
            StatusCode::BAD_REQUEST,
            &protocol::response(&Value::Null, Err(e)),
        ),
        (_, Some(Ok(m))) => {
            let modern = match v.era {
                Era::Dual => protocol::is_modern(&m, &headers),
                Era::Legacy => false,
                Era::Modern => true,
            };
            if modern {
                post_modern(&app, v, path, headers, m).await
            } else {
                post_legacy(&app, v, path, headers, m).await
            }
        }
        (Method::DELETE, None) if v.era != Era::Modern => {
            match protocol::header_str(&headers, H_SESSION) {
                None => legacy_error(StatusCode::BAD_REQUEST, "Bad Request: Missing session ID"),
                Some(sid) if app.sessions.remove(sid, &session_scope(path, &v, &headers)) => {
                    StatusCode::OK.into_response()
                }
                Some(_) => legacy_error(StatusCode::NOT_FOUND, "Session not found"),
            }
        }
        _ => {
            let allow = if v.era == Era::Modern {
                "POST"
            } else {
                "POST, DELETE"
            };
            (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, allow)]).into_response()
        }
    }
}

/// `status=`, `garbage`, `require=`/`require-prefix=` and `redirect=`, in that order; `None`
/// lets the request through.
fn fault(app: &App, v: &Variant, headers: &HeaderMap) -> Option<Response> {
    let challenge = |error: Option<&str>| {
        let mut value = format!(
            "Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource\"",
            origin(app, headers)
        );
        if let Some(e) = error {
            value.push_str(&format!(", error=\"{e}\""));
        }
        value
    };
    if let Some(code) = v.status {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let (www, error) = match code {
            401 => (Some(challenge(Some("invalid_token"))), "invalid_token"),
            403 => (
                Some(challenge(Some("insufficient_scope")) + ", scope=\"mcp:admin\""),
                "insufficient_scope",
            ),
            _ => (None, "injected_failure"),
        };
        let body = json!({ "error": error, "error_description": format!("injected HTTP {code} (server {})", v.name) });
        let mut resp = (status, axum::Json(body)).into_response();
        if let Some(www) = www.and_then(|w| HeaderValue::from_str(&w).ok()) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, www);
        }
        return Some(resp);
    }
    if v.garbage {
        return Some(
            (
                [(header::CONTENT_TYPE, "application/json")],
                "<<< this is not JSON >>>",
            )
                .into_response(),
        );
    }
    let exact = v.require.iter().map(|(n, w)| (n, w, false));
    let prefix = v.require_prefix.iter().map(|(n, w)| (n, w, true));
    for (name, want, is_prefix) in exact.chain(prefix) {
        let got = headers.get(name.as_str()).map(HeaderValue::as_bytes);
        let ok = match got {
            Some(got) if is_prefix => got.starts_with(want.as_bytes()),
            Some(got) => got == want.as_bytes(),
            None => false,
        };
        if !ok {
            let www = challenge(got.map(|_| "invalid_token"));
            let body = json!({ "error": "invalid_token", "error_description": format!("header {name} missing or wrong") });
            let mut resp = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
            if let Ok(www) = HeaderValue::from_str(&www) {
                resp.headers_mut().insert(header::WWW_AUTHENTICATE, www);
            }
            return Some(resp);
        }
    }
    if let Some(target) = &v.redirect {
        // The parser admits only visible ASCII, so this is a valid header value.
        let location = HeaderValue::from_str(target).ok()?;
        return Some(
            (
                StatusCode::TEMPORARY_REDIRECT,
                [(header::LOCATION, location)],
            )
                .into_response(),
        );
    }
    None
}

/// What a legacy session is bound to: its endpoint path, plus with `session-auth` the
/// `Authorization` value (or its absence) of the request.
fn session_scope(path: &str, v: &Variant, headers: &HeaderMap) -> String {
    if !v.session_auth {
        return path.to_owned();
    }
    match headers.get(header::AUTHORIZATION) {
        None => format!("{path}\n-"),
        Some(auth) => format!("{path}\n={}", String::from_utf8_lossy(auth.as_bytes())),
    }
}

/// `http://host[:port]` as the client addressed us (falls back to the listen address).
pub fn origin(app: &App, headers: &HeaderMap) -> String {
    let sane = |h: &&str| {
        !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
    };
    match protocol::header_str(headers, "host").filter(sane) {
        Some(host) => format!("http://{host}"),
        None => format!("http://{}", app.listen),
    }
}

/// `POST /_notify`: publishes a change to the open `subscriptions/listen` streams.
async fn notify(State(app): State<Arc<App>>, body: Bytes) -> Response {
    match listen::parse_notify(&body) {
        Ok((change, path)) => {
            axum::Json(json!({ "listening": app.listeners.publish(change, path) })).into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, e).into_response(),
    }
}

/// RFC 9728 protected-resource metadata, at the root and path-suffixed well-known URIs.
async fn resource_metadata(State(app): State<Arc<App>>, uri: Uri, headers: HeaderMap) -> Response {
    let origin = origin(&app, &headers);
    let suffix = uri
        .path()
        .strip_prefix("/.well-known/oauth-protected-resource")
        .unwrap_or_default();
    if suffix == "/accounts/mcp" {
        return axum::Json(crate::accounts::resource_document(&origin)).into_response();
    }
    let resource = if suffix.is_empty() {
        format!("{origin}/mcp")
    } else {
        format!("{origin}{suffix}")
    };
    axum::Json(json!({
        "resource": resource,
        "authorization_servers": [format!("{origin}/oauth")],
        "scopes_supported": ["mcp"],
        "bearer_methods_supported": ["header"],
        "resource_name": "switchboard example upstream",
    }))
    .into_response()
}

async fn post_legacy(
    app: &App,
    v: Arc<Variant>,
    path: &str,
    headers: HeaderMap,
    m: Message,
) -> Response {
    let scope = session_scope(path, &v, &headers);
    if m.kind == Kind::Request && m.method == "initialize" {
        let sid = app.sessions.create(&scope);
        let result = dispatch::initialize(&v, &m.params);
        let mut resp = answer(v, false, m, headers, Some(Ok(result))).await;
        if let Ok(sid) = HeaderValue::from_str(&sid) {
            resp.headers_mut().insert(H_SESSION, sid);
        }
        return resp;
    }
    match protocol::header_str(&headers, H_SESSION) {
        None => return legacy_error(StatusCode::BAD_REQUEST, "Bad Request: Missing session ID"),
        Some(sid) if !app.sessions.contains(sid, &scope) => {
            return legacy_error(StatusCode::NOT_FOUND, "Session not found");
        }
        Some(_) => {}
    }
    if let Some(pv) =
        protocol::header_str(&headers, H_VERSION).filter(|pv| !LEGACY_VERSIONS.contains(pv))
    {
        let msg = format!(
            "Bad Request: Unsupported protocol version: {pv} (supported versions: {})",
            LEGACY_VERSIONS.join(", ")
        );
        return legacy_error(StatusCode::BAD_REQUEST, &msg);
    }
    if m.kind != Kind::Request {
        return StatusCode::ACCEPTED.into_response();
    }
    answer(v, false, m, headers, None).await
}

async fn post_modern(
    app: &App,
    v: Arc<Variant>,
    path: &str,
    headers: HeaderMap,
    m: Message,
) -> Response {
    let refuse =
        |e: RpcError, id: &Value| json_response(e.modern_status(), &protocol::response(id, Err(e)));
    if m.kind == Kind::Response {
        return refuse(
            RpcError::new(
                INVALID_REQUEST,
                "clients must not post responses in 2026-07-28",
            ),
            &Value::Null,
        );
    }
    if m.kind == Kind::Notification {
        return match protocol::header_str(&headers, H_VERSION) {
            Some(pv) if pv != MODERN_VERSION => refuse(
                RpcError::unsupported_version(
                    &json!(pv),
                    &[MODERN_VERSION],
                    "Unsupported protocol version",
                ),
                &Value::Null,
            ),
            _ => StatusCode::ACCEPTED.into_response(),
        };
    }
    if v.era == Era::Modern && m.method == "initialize" {
        let requested = m
            .params
            .get("protocolVersion")
            .cloned()
            .unwrap_or(Value::Null);
        let e = RpcError::unsupported_version(
            &requested,
            &[MODERN_VERSION],
            "This server speaks only 2026-07-28; the initialize handshake is not accepted",
        );
        return refuse(e, &m.id);
    }
    if let Err(e) = protocol::check_modern_request(&m, &headers) {
        return refuse(e, &m.id);
    }
    if m.method == "subscriptions/listen" {
        return sse_response(app.listeners.stream(path, &m.id, &m.params));
    }
    answer(v, true, m, headers, None).await
}

/// Answers a request (or uses `ready`), as JSON or SSE per the variant.
///
/// SSE with a progress token streams the progress event before the work is done. Otherwise
/// the result is computed first; 2026-07-28 errors are then sent as JSON with their status.
async fn answer(
    v: Arc<Variant>,
    modern: bool,
    m: Message,
    headers: HeaderMap,
    ready: Option<Result<Value, RpcError>>,
) -> Response {
    let progress = m.progress_token().cloned();
    // A legacy request always gets the log line; a 2026-07-28 one only when it asks for logs.
    let log = !modern || m.log_level().is_some();
    let id = m.id;
    let req = Request {
        variant: v.clone(),
        modern,
        headers,
        method: m.method,
        params: m.params,
    };
    let work = async move {
        match ready {
            Some(r) => r,
            None => dispatch::dispatch(&req).await,
        }
    };
    if let (true, Some(token)) = (v.sse, progress) {
        let note = json!({ "jsonrpc": "2.0", "method": "notifications/progress",
                           "params": { "progressToken": token, "progress": 0, "total": 1, "message": "working" } });
        let mut before = vec![Ok::<_, std::io::Error>(sse_event(&note))];
        if log {
            let line = json!({ "jsonrpc": "2.0", "method": "notifications/message",
                               "params": { "level": "info", "logger": "example-upstream", "data": "working" } });
            before.push(Ok(sse_event(&line)));
        }
        let first = stream::iter(before);
        if v.cut {
            // An error from the body stream makes hyper abort the connection: the client sees
            // the events so far, then a reset instead of the end of the stream. (The work is
            // done first, with a pause, so the events are on the wire before the reset.)
            let reset = stream::once(async move {
                let _ = work.await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                Err(std::io::Error::other("cut mid-stream"))
            });
            return sse_response(Body::from_stream(first.chain(reset)));
        }
        let last = stream::once(async move { Ok(sse_event(&protocol::response(&id, work.await))) });
        return sse_response(Body::from_stream(first.chain(last)));
    }
    let result = work.await;
    match &result {
        Err(e) if modern => json_response(e.modern_status(), &protocol::response(&id, result)),
        _ if v.sse => sse_response(Body::from(sse_event(&protocol::response(&id, result)))),
        _ => json_response(StatusCode::OK, &protocol::response(&id, result)),
    }
}

fn sse_event(message: &Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

fn sse_response(body: Body) -> Response {
    let headers = [
        (header::CONTENT_TYPE, "text/event-stream"),
        (header::CACHE_CONTROL, "no-cache, no-transform"),
        (header::HeaderName::from_static("x-accel-buffering"), "no"),
    ];
    (headers, body).into_response()
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn legacy_error(status: StatusCode, message: &str) -> Response {
    json_response(
        status,
        &protocol::response(&Value::Null, Err(RpcError::new(INVALID_REQUEST, message))),
    )
}
