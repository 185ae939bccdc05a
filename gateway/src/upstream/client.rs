//! Sending one JSON-RPC request to an upstream MCP server, in whichever protocol era it speaks.
//!
//! rmcp's client transport owns its HTTP headers per connection, but the gateway needs
//! per-request credential headers, a hard deadline on every exchange including the handshake,
//! credential stripping on cross-origin redirects and the raw HTTP status of every answer (a
//! 401 must reach the caller as a 401). So this narrow piece speaks Streamable HTTP itself over
//! a pooled reqwest client.
//!
//! Era detection follows the 2026-07-28 versioning rules for a dual-era client: the first
//! request to an upstream goes out in the modern (stateless) form; a 4xx without a recognised
//! modern error body means a legacy server, and the request is repeated on a legacy session.
//! The answer is cached per server revision, so a modern upstream costs exactly one request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::errors::GatewayError;
use crate::mcp::era::{
    LATEST_LEGACY_VERSION, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION,
    MODERN_VERSION,
};
use crate::table::Server;
use crate::upstream::request_credential::{RequestCredential, SHARED_PARTITION};
use crate::upstream::wire::response_from_body;

/// Largest upstream answer the gateway reads; a bigger one is treated as a broken upstream.
const MAX_UPSTREAM_BODY: usize = 32 * 1024 * 1024;
const MAX_REDIRECTS: usize = 5;
const ACCEPT_BOTH: &str = "application/json, text/event-stream";

const ERA_MODERN: u8 = 1;
const ERA_LEGACY: u8 = 2;

/// One request to one upstream.
pub struct RpcCall<'a> {
    pub server: &'a Server,
    pub caller_headers: &'a HeaderMap,
    /// `Mcp-Param-*` headers the gateway derived for a caller that sent none.
    pub param_headers: Option<&'a HeaderMap>,
    /// The credential resolved for this request, for arms without a static one.
    pub credential: Option<&'a RequestCredential>,
    pub method: &'a str,
    /// Parameters as they go upstream (names already without the gateway prefix).
    pub params: Option<Value>,
    /// Ends the whole exchange, handshake and redirects included.
    pub deadline: Instant,
    /// The budget behind `deadline`, named in a timeout error.
    pub budget: Duration,
}

/// The upstream's JSON-RPC answer: a result or an error object, passed on unchanged.
#[derive(Debug)]
pub enum RpcOutcome {
    Result(Value),
    Error(Value),
}

/// What the gateway remembers about one upstream (per server revision): its era and, for a
/// legacy server, its session. Both are caches any replica rebuilds on demand.
#[derive(Default)]
struct UpstreamState {
    /// 0 until a request tells, then ERA_MODERN or ERA_LEGACY.
    era: AtomicU8,
    /// Legacy sessions per credential partition: an upstream session is bound to the
    /// credential that opened it.
    sessions: Mutex<HashMap<u64, SessionSlot>>,
}

type SessionSlot = Arc<tokio::sync::Mutex<Option<Arc<LegacySession>>>>;

/// Most legacy sessions kept per upstream (one per caller credential on caller-credential
/// servers); past it the map is cleared and sessions are re-opened on use.
const MAX_SESSIONS_PER_UPSTREAM: usize = 4096;

impl UpstreamState {
    fn session_slot(&self, partition: u64) -> SessionSlot {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.len() >= MAX_SESSIONS_PER_UPSTREAM && !sessions.contains_key(&partition) {
            sessions.clear();
        }
        sessions.entry(partition).or_default().clone()
    }
}

#[derive(Debug)]
struct LegacySession {
    id: Option<HeaderValue>,
    version: HeaderValue,
}

impl LegacySession {
    /// The headers every request on this session carries.
    fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("mcp-protocol-version"),
            self.version.clone(),
        );
        if let Some(sid) = &self.id {
            headers.insert(HeaderName::from_static("mcp-session-id"), sid.clone());
        }
        headers
    }
}

pub struct Upstreams {
    http: reqwest::Client,
    /// Keyed by server revision (a hash of the whole spec, id included): the per-call lookup
    /// allocates nothing and takes a shared lock.
    states: RwLock<HashMap<u64, (String, Arc<UpstreamState>)>>,
    next_id: AtomicU64,
    client_info: Value,
}

impl Default for Upstreams {
    fn default() -> Self {
        Self::new()
    }
}

impl Upstreams {
    pub fn new() -> Upstreams {
        let http = reqwest::Client::builder()
            // Redirects are followed by hand so that credentials never cross origins.
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(256)
            .tcp_nodelay(true)
            .build()
            .unwrap_or_default();
        Upstreams {
            http,
            states: RwLock::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            client_info: json!({"name": "switchboard-gateway", "version": env!("CARGO_PKG_VERSION")}),
        }
    }

    /// Forgets upstreams that are no longer in the routing table (or changed revision).
    pub fn retain(&self, live: impl Fn(&str, u64) -> bool) {
        let mut states = self.states.write().unwrap_or_else(|p| p.into_inner());
        states.retain(|rev, (id, _)| live(id, *rev));
    }

    fn state(&self, server: &Server) -> Arc<UpstreamState> {
        if let Some((_, state)) = self
            .states
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&server.revision)
        {
            return state.clone();
        }
        let mut states = self.states.write().unwrap_or_else(|p| p.into_inner());
        states
            .entry(server.revision)
            .or_insert_with(|| (server.id().to_string(), Arc::default()))
            .1
            .clone()
    }

    /// The pooled HTTP client, shared with token requests.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The era an upstream was found to speak, once a request has told.
    pub fn era_of(&self, server: &Server) -> Option<crate::mcp::era::Era> {
        match self.state(server).era.load(Ordering::Relaxed) {
            ERA_MODERN => Some(crate::mcp::era::Era::Modern),
            ERA_LEGACY => Some(crate::mcp::era::Era::Legacy),
            _ => None,
        }
    }

    /// Sends one request and returns the upstream's JSON-RPC answer.
    pub async fn call(&self, call: RpcCall<'_>) -> Result<RpcOutcome, GatewayError> {
        let timeout = GatewayError::UpstreamTimeout {
            server: call.server.id().to_string(),
            budget: call.budget,
        };
        match tokio::time::timeout_at(call.deadline, self.call_in_era(&call)).await {
            Ok(result) => result,
            Err(_) => Err(timeout),
        }
    }

    async fn call_in_era(&self, call: &RpcCall<'_>) -> Result<RpcOutcome, GatewayError> {
        let state = self.state(call.server);
        match state.era.load(Ordering::Relaxed) {
            ERA_MODERN => self.modern(call).await.map_err(Attempt::into_error),
            ERA_LEGACY => self.legacy(call, &state).await,
            _ => match self.modern(call).await {
                Ok(outcome) => {
                    state.era.store(ERA_MODERN, Ordering::Relaxed);
                    Ok(outcome)
                }
                Err(Attempt::NotModern) => {
                    state.era.store(ERA_LEGACY, Ordering::Relaxed);
                    self.legacy(call, &state).await
                }
                Err(Attempt::Failed(e)) => Err(e),
            },
        }
    }

    async fn modern(&self, call: &RpcCall<'_>) -> Result<RpcOutcome, Attempt> {
        let id = json!(self.next_id.fetch_add(1, Ordering::Relaxed));
        let params = with_modern_meta(call.params.clone(), &self.client_info);
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("mcp-protocol-version"),
            HeaderValue::from_static(MODERN_VERSION),
        );
        if let Ok(v) = HeaderValue::from_str(call.method) {
            headers.insert(HeaderName::from_static("mcp-method"), v);
        }
        if let Some(name) = routed_name(call.method, params.as_ref())
            && let Ok(v) = HeaderValue::from_str(&encode_header_value(name))
        {
            headers.insert(HeaderName::from_static("mcp-name"), v);
        }
        // Tool-parameter headers describe the arguments, which the gateway forwards unchanged.
        for (name, value) in call.caller_headers {
            if name.as_str().starts_with("mcp-param-") {
                headers.append(name.clone(), value.clone());
            }
        }
        if let Some(derived) = call.param_headers {
            headers.extend(derived.clone());
        }
        let body = rpc_body(&id, call.method, params);
        let reply = self
            .post(call, headers, body)
            .await
            .map_err(Attempt::Failed)?;
        // Only a 4xx needs the error code (to tell a modern error from a legacy server); a
        // success is parsed once, by `outcome`.
        match reply.status {
            s if s.is_success() => reply.outcome(call.server, &id).map_err(Attempt::Failed),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                Err(Attempt::Failed(reply.auth_error(call.server)))
            }
            s if s.is_client_error()
                && reply.rpc_error_code().is_some_and(is_modern_error_code) =>
            {
                reply.outcome(call.server, &id).map_err(Attempt::Failed)
            }
            s if s.is_client_error() => Err(Attempt::NotModern),
            _ => Err(Attempt::Failed(reply.unavailable(call.server))),
        }
    }

    async fn legacy(
        &self,
        call: &RpcCall<'_>,
        state: &UpstreamState,
    ) -> Result<RpcOutcome, GatewayError> {
        // A dropped upstream session (404) is re-established once, then the request repeats.
        for attempt in 0..2 {
            let session = self.legacy_session(call, state, attempt > 0).await?;
            let id = json!(self.next_id.fetch_add(1, Ordering::Relaxed));
            let headers = session.headers();
            let body = rpc_body(&id, call.method, call.params.clone());
            let reply = self.post(call, headers, body).await?;
            match reply.status {
                StatusCode::NOT_FOUND if session.id.is_some() && attempt == 0 => continue,
                s if s.is_success() => return reply.outcome(call.server, &id),
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                    return Err(reply.auth_error(call.server));
                }
                s if s.is_client_error() && reply.rpc_error_code().is_some() => {
                    return reply.outcome(call.server, &id);
                }
                _ => return Err(reply.unavailable(call.server)),
            }
        }
        Err(GatewayError::UpstreamUnavailable {
            server: call.server.id().to_string(),
            detail: "the upstream dropped a fresh session".into(),
        })
    }

    /// The shared legacy session for this upstream, opened when missing or when `renew`.
    /// Concurrent callers wait for one handshake rather than opening one each.
    async fn legacy_session(
        &self,
        call: &RpcCall<'_>,
        state: &UpstreamState,
        renew: bool,
    ) -> Result<Arc<LegacySession>, GatewayError> {
        let partition = call.credential.map_or(SHARED_PARTITION, |c| c.partition);
        let slot = state.session_slot(partition);
        let mut slot = slot.lock().await;
        if let Some(existing) = slot.as_ref()
            && !renew
        {
            return Ok(existing.clone());
        }
        let id = json!(self.next_id.fetch_add(1, Ordering::Relaxed));
        let params = json!({
            "protocolVersion": LATEST_LEGACY_VERSION,
            "capabilities": {},
            "clientInfo": self.client_info,
        });
        let reply = self
            .post(
                call,
                HeaderMap::new(),
                rpc_body(&id, "initialize", Some(params)),
            )
            .await?;
        if matches!(
            reply.status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
        ) {
            return Err(reply.auth_error(call.server));
        }
        let session_id = reply.headers.get("mcp-session-id").cloned();
        let result = match reply.outcome(call.server, &id)? {
            RpcOutcome::Result(r) => r,
            RpcOutcome::Error(e) => {
                return Err(GatewayError::UpstreamUnavailable {
                    server: call.server.id().to_string(),
                    detail: format!("initialize failed: {}", e["message"].as_str().unwrap_or("")),
                });
            }
        };
        let version = result["protocolVersion"]
            .as_str()
            .and_then(|v| HeaderValue::from_str(v).ok())
            .unwrap_or(HeaderValue::from_static(LATEST_LEGACY_VERSION));
        let session = Arc::new(LegacySession {
            id: session_id,
            version,
        });
        let headers = session.headers();
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.post(
            call,
            headers,
            serde_json::to_vec(&initialized).unwrap_or_default(),
        )
        .await?;
        *slot = Some(session.clone());
        Ok(session)
    }

    /// One HTTP POST with the server's headers, following same-origin redirects with
    /// credentials and cross-origin ones without any credential slot.
    async fn post(
        &self,
        call: &RpcCall<'_>,
        mut headers: HeaderMap,
        body: Vec<u8>,
    ) -> Result<Reply, GatewayError> {
        headers.insert(header::ACCEPT, HeaderValue::from_static(ACCEPT_BOTH));
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        call.server.headers.apply(
            call.caller_headers,
            call.credential.map(|c| &c.value),
            &mut headers,
        );
        let body = bytes::Bytes::from(body);
        let mut url = call.server.url.clone();
        for _ in 0..=MAX_REDIRECTS {
            let response = self
                .http
                .post(url.clone())
                .headers(headers.clone())
                .body(body.clone())
                .send()
                .await
                .map_err(|e| unavailable(call.server, &e))?;
            let status = response.status();
            if matches!(status.as_u16(), 307 | 308)
                && let Some(next) = response
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .and_then(|l| url.join(l).ok())
            {
                if next.origin() != url.origin() {
                    for slot in call.server.headers.secret_slots() {
                        headers.remove(slot);
                    }
                }
                url = next;
                continue;
            }
            let response_headers = response.headers().clone();
            let bytes = read_limited(response).await.map_err(|detail| {
                GatewayError::UpstreamUnavailable {
                    server: call.server.id().to_string(),
                    detail,
                }
            })?;
            return Ok(Reply {
                status,
                headers: response_headers,
                body: bytes,
            });
        }
        Err(GatewayError::UpstreamUnavailable {
            server: call.server.id().to_string(),
            detail: "too many redirects".into(),
        })
    }
}

enum Attempt {
    /// The upstream does not speak the 2026-07-28 revision.
    NotModern,
    Failed(GatewayError),
}

impl Attempt {
    fn into_error(self) -> GatewayError {
        match self {
            Attempt::Failed(e) => e,
            Attempt::NotModern => GatewayError::UpstreamUnavailable {
                server: String::new(),
                detail: "the upstream no longer speaks the 2026-07-28 revision".into(),
            },
        }
    }
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: bytes::Bytes,
}

impl Reply {
    fn content_type(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn rpc_error_code(&self) -> Option<i64> {
        let v: Value = if self.content_type().starts_with("text/event-stream") {
            crate::upstream::wire::sse_messages(&self.body)
                .into_iter()
                .next()?
        } else {
            serde_json::from_slice(&self.body).ok()?
        };
        v.get("error")?.get("code")?.as_i64()
    }

    /// The JSON-RPC answer to request `id`, with its id left for the caller to restore.
    fn outcome(&self, server: &Server, id: &Value) -> Result<RpcOutcome, GatewayError> {
        let message = response_from_body(self.content_type(), &self.body, id)
            .or_else(|| {
                // An error about the request itself may carry a null id.
                response_from_body(self.content_type(), &self.body, &Value::Null)
            })
            .ok_or_else(|| GatewayError::UpstreamUnavailable {
                server: server.id().to_string(),
                detail: format!(
                    "HTTP {}: the body is not a JSON-RPC response",
                    self.status.as_u16()
                ),
            })?;
        match message {
            Value::Object(mut m) => {
                if let Some(result) = m.remove("result") {
                    Ok(RpcOutcome::Result(result))
                } else {
                    Ok(RpcOutcome::Error(m.remove("error").unwrap_or(Value::Null)))
                }
            }
            _ => Err(GatewayError::UpstreamUnavailable {
                server: server.id().to_string(),
                detail: "the body is not a JSON-RPC response".into(),
            }),
        }
    }

    fn auth_error(&self, server: &Server) -> GatewayError {
        let challenge = self
            .headers
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if self.status == StatusCode::FORBIDDEN {
            GatewayError::UpstreamForbidden {
                server: server.id().to_string(),
            }
        } else {
            GatewayError::UpstreamUnauthorized {
                server: server.id().to_string(),
                challenge,
            }
        }
    }

    fn unavailable(&self, server: &Server) -> GatewayError {
        GatewayError::UpstreamUnavailable {
            server: server.id().to_string(),
            detail: format!("HTTP {}", self.status.as_u16()),
        }
    }
}

fn unavailable(server: &Server, e: &reqwest::Error) -> GatewayError {
    // reqwest's message can include the URL; keep only the kind of failure (URLs may carry
    // credentials in their query string).
    let kind = if e.is_connect() {
        "connection refused or unreachable"
    } else if e.is_timeout() {
        "timed out"
    } else if e.is_body() || e.is_decode() {
        "broken response body"
    } else {
        "request failed"
    };
    GatewayError::UpstreamUnavailable {
        server: server.id().to_string(),
        detail: kind.into(),
    }
}

async fn read_limited(mut response: reqwest::Response) -> Result<bytes::Bytes, String> {
    let mut buf = bytes::BytesMut::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|_| "broken response body".to_string())?
    {
        if buf.len() + chunk.len() > MAX_UPSTREAM_BODY {
            return Err(format!("response larger than {MAX_UPSTREAM_BODY} bytes"));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

fn rpc_body(id: &Value, method: &str, params: Option<Value>) -> Vec<u8> {
    let mut m = Map::with_capacity(4);
    m.insert("jsonrpc".into(), Value::from("2.0"));
    m.insert("id".into(), id.clone());
    m.insert("method".into(), Value::from(method));
    if let Some(p) = params {
        m.insert("params".into(), p);
    }
    serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
}

/// Adds the per-request `_meta` a 2026-07-28 server requires, keeping what the client sent
/// (a modern client's own capabilities, its progress token).
fn with_modern_meta(params: Option<Value>, client_info: &Value) -> Option<Value> {
    let mut params = match params {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert(META_PROTOCOL_VERSION.into(), Value::from(MODERN_VERSION));
        meta.entry(META_CLIENT_CAPABILITIES)
            .or_insert_with(|| json!({}));
        meta.entry(META_CLIENT_INFO)
            .or_insert_with(|| client_info.clone());
    }
    Some(Value::Object(params))
}

/// The body value the `Mcp-Name` header repeats, for the methods that have one.
fn routed_name<'a>(method: &str, params: Option<&'a Value>) -> Option<&'a str> {
    let field = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        _ => return None,
    };
    params?.get(field)?.as_str()
}

/// A header value as the 2026-07-28 transport sends it: plain when it is safe visible ASCII,
/// else `=?base64?...?=` (so is a plain value that looks like that sentinel).
pub fn encode_header_value(value: &str) -> String {
    let visible_ascii = value.bytes().all(|b| (0x20..0x7f).contains(&b));
    let padded = value.starts_with(' ') || value.ends_with(' ');
    let looks_encoded = value.starts_with("=?base64?") && value.ends_with("?=");
    if !value.is_empty() && visible_ascii && !padded && !looks_encoded {
        value.to_string()
    } else {
        format!("=?base64?{}?=", STANDARD.encode(value.as_bytes()))
    }
}

fn is_modern_error_code(code: i64) -> bool {
    // HeaderMismatch, MissingRequiredClientCapability, UnsupportedProtocolVersion, and the
    // -32601/-32602 a modern server answers with HTTP 4xx.
    matches!(code, -32022..=-32020 | -32601 | -32602)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_encoded_only_when_needed() {
        assert_eq!(encode_header_value("add"), "add");
        assert_eq!(encode_header_value("héllo"), "=?base64?aMOpbGxv?=");
        assert_eq!(encode_header_value(" x"), "=?base64?IHg=?=");
        assert!(encode_header_value("=?base64?abc?=").starts_with("=?base64?PT9i"));
    }

    #[test]
    fn modern_meta_keeps_the_clients_fields() {
        let params = json!({"name": "add", "_meta": {"progressToken": 5}});
        let out = with_modern_meta(Some(params), &json!({"name": "gw"})).unwrap();
        assert_eq!(out["_meta"]["progressToken"], 5);
        assert_eq!(out["_meta"][META_PROTOCOL_VERSION], MODERN_VERSION);
        assert_eq!(out["_meta"][META_CLIENT_CAPABILITIES], json!({}));
        assert_eq!(out["name"], "add");
    }
}
