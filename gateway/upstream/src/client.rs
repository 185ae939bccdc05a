//! Sending one JSON-RPC request to an upstream MCP server, in whichever protocol era it speaks.
//!
//! rmcp's client transport owns its HTTP headers per connection, but the gateway needs
//! per-request credential headers, a hard deadline on every exchange including the handshake,
//! credential stripping on cross-origin redirects and the raw HTTP status of every answer (a
//! 401 must reach the caller as a 401). So this narrow piece speaks Streamable HTTP itself over
//! the gateway's own pooled client (`http_client.rs`).
//!
//! Era detection follows the 2026-07-28 versioning rules for a dual-era client: the first
//! request to an upstream goes out in the modern (stateless) form; a 4xx without a recognised
//! modern error body means a legacy server, and the request is repeated on a legacy session.
//! The answer is cached per server revision, so a modern upstream costs exactly one request.

use std::borrow::Cow;
use std::collections::HashSet;

// Looked up on every call by keys of the gateway's own (revisions, client keys): foldhash,
// not SipHash (the core table's maps say why).
use foldhash::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use switchboard_snapshot::{Denied, NetworkPolicy, UpstreamEra, UpstreamNetworks};
use tokio::time::Instant;

use crate::call::{SessionScope, UpstreamCall};
use crate::error::{ClientBuildError, FetchError, UpstreamError};
use crate::http_client::{self, ByteStream, HttpClient, HttpError, HttpResponse};
use crate::request_credential::{RequestCredential, SHARED_PARTITION};
use switchboard_core::table::{Model, RoutingTable, Server, UpstreamRoots};
use switchboard_protocol::jsonrpc::{
    ModernMeta, legacy_call_body, legacy_notification_body, legacy_request_body, modern_call_body,
    raw_response, response_from_body,
};
use switchboard_protocol::sse::{SseDecoder, SseError, SseEvent};
use switchboard_protocol::trace_context::TraceContext;
use switchboard_protocol::{self as protocol, capabilities};
use switchboard_protocol::{LATEST_LEGACY_VERSION, ListChanged, MODERN_VERSION, Params, RawResult};
use switchboard_snapshot::TlsMaterial;

/// Largest upstream answer the gateway reads; a bigger one is treated as a broken upstream.
pub(crate) const MAX_UPSTREAM_BODY: usize = 32 * 1024 * 1024;
const MAX_REDIRECTS: usize = 5;

const ERA_MODERN: u8 = 1;
const ERA_LEGACY: u8 = 2;

/// One call on its way to the wire: the face's [`UpstreamCall`] (what to ask, never copied) and
/// what the plane resolved for it (where, with which credential, until when).
#[derive(Clone, Copy)]
pub struct RpcCall<'a> {
    pub request: &'a UpstreamCall<'a>,
    pub server: &'a Server,
    pub caller_headers: &'a HeaderMap,
    /// `Mcp-Param-*` headers the gateway derived for a caller that sent none.
    pub param_headers: Option<&'a HeaderMap>,
    /// The credential resolved for this request, for arms without a static one.
    pub credential: Option<&'a RequestCredential>,
    /// Ends the whole exchange, handshake and redirects included.
    pub deadline: Instant,
    /// The budget behind `deadline`, named in a timeout error.
    pub budget: Duration,
}

impl<'a> RpcCall<'a> {
    pub fn method(&self) -> &'a str {
        self.request.method
    }

    /// Parameters as they go upstream (names already without the gateway prefix).
    pub fn params(&self) -> Option<&'a Params> {
        self.request.params.as_ref()
    }

    pub fn session(&self) -> SessionScope {
        self.request.session
    }
}

/// The upstream's JSON-RPC answer: a result, an error object passed on unchanged with the
/// HTTP status it came with, or an SSE stream to relay.
#[derive(Debug)]
pub enum RpcOutcome {
    Result(RpcResult),
    Error(Value, StatusCode),
    Stream(Box<UpstreamStream>),
}

/// An upstream's `result`. A plain JSON answer keeps it as the text it came in, so a result the
/// gateway relays unchanged (most tool calls) is never parsed into a tree and written out again;
/// whoever needs to look inside asks for the tree.
#[derive(Debug)]
pub enum RpcResult {
    Raw(RawResult),
    Parsed(Value),
}

impl RpcResult {
    pub fn into_value(self) -> Value {
        match self {
            // Text the parser accepted once parses again.
            RpcResult::Raw(raw) => serde_json::from_str(raw.get()).unwrap_or(Value::Null),
            RpcResult::Parsed(value) => value,
        }
    }
}

/// What the gateway remembers about one upstream (per server revision): its era and, for a
/// legacy server, its session. Both are caches any replica rebuilds on demand.
#[derive(Default)]
pub(crate) struct UpstreamState {
    /// 0 until a request tells, then ERA_MODERN or ERA_LEGACY.
    era: AtomicU8,
    /// How many times the upstream announced each list changed (`ListChanged::index`), as
    /// seen on this replica: a listing walked before the last announcement is out of date.
    lists_changed: [AtomicU64; 3],
    /// Legacy sessions per credential partition and client session: an upstream session is
    /// bound to the credential that opened it and carries its client's capabilities.
    sessions: Mutex<HashMap<(u64, SessionScope), SessionSlot>>,
    /// An OpenAPI server's fetched document, compiled, and when it was fetched.
    pub(crate) document: tokio::sync::Mutex<Option<(Instant, Arc<switchboard_openapi::Compiled>)>>,
}

type SessionSlot = Arc<tokio::sync::Mutex<Slot>>;

/// One client session's (or the shared) upstream session on this replica.
#[derive(Default)]
struct Slot {
    session: Option<Arc<LegacySession>>,
    /// One was opened here before. On a `byClient` upstream the session holds the client's
    /// state, so its handshake then asks to resume that session, never for a new one.
    opened: bool,
}

/// Most legacy sessions kept per upstream (one per credential partition and legacy client
/// session); past it one is forgotten for each new one, and re-opened on use.
const MAX_SESSIONS_PER_UPSTREAM: usize = 4096;

impl UpstreamState {
    /// Notes that the upstream answers as a 2026-07-28 server (a REST API described by an
    /// OpenAPI document does: the gateway answers for it, statelessly).
    pub(crate) fn answers_as_modern(&self) {
        self.era.store(ERA_MODERN, Ordering::Relaxed);
    }

    /// The upstream said a list changed (a notification the gateway read from it).
    fn list_changed(&self, change: ListChanged) {
        self.lists_changed[change.index()].fetch_add(1, Ordering::Relaxed);
    }

    fn session_slot(&self, partition: u64, scope: SessionScope) -> SessionSlot {
        let key = (partition, scope);
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.len() >= MAX_SESSIONS_PER_UPSTREAM && !sessions.contains_key(&key) {
            // One goes (re-opened if its client comes back), not everyone's.
            if let Some(evicted) = sessions.keys().next().copied() {
                sessions.remove(&evicted);
            }
        }
        sessions.entry(key).or_default().clone()
    }

    /// Forgets the upstream sessions opened for one client session; returns them to close.
    fn take_client_sessions(&self, client: u64) -> Vec<SessionSlot> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let keys: Vec<_> = sessions
            .keys()
            .filter(|(_, scope)| scope.client == client)
            .copied()
            .collect();
        keys.iter().filter_map(|k| sessions.remove(k)).collect()
    }
}

#[derive(Debug)]
struct LegacySession {
    id: Option<HeaderValue>,
    version: HeaderValue,
    /// The upstream's `initialize` result: its serverInfo, capabilities and instructions.
    init: Value,
}

impl LegacySession {
    /// The headers every request on this session carries.
    fn headers(&self) -> HeaderMap {
        session_headers(self.id.as_ref(), &self.version)
    }
}

/// The headers of a request on a legacy session (which may have no id: a sessionless server).
fn session_headers(id: Option<&HeaderValue>, version: &HeaderValue) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(protocol::headers::PROTOCOL_VERSION, version.clone());
    if let Some(id) = id {
        headers.insert(protocol::headers::SESSION_ID, id.clone());
    }
    headers
}

pub struct Upstreams {
    /// Keyed by server revision (a hash of the whole spec, id included): the per-call lookup
    /// allocates nothing and takes a shared lock.
    states: RwLock<HashMap<u64, (String, Arc<UpstreamState>)>>,
    next_id: AtomicU64,
    /// As text: every 2026-07-28 request carries it.
    client_info: Box<RawValue>,
    /// `gateway.upstreamNetworks`, shared with the clients' resolvers.
    networks: Arc<ArcSwap<NetworkPolicy>>,
    /// The HTTP clients, by what tells them apart: the address policy of the server (its own
    /// `upstreamPolicy`, if any) and its TLS material (`tls`, if any). Every client trusts
    /// `gateway.upstreamTls` too; when that changes, they are all built again.
    clients: RwLock<Clients>,
    /// `gateway.listingTtl` in milliseconds: how long a fetched OpenAPI document is used.
    pub(crate) document_ttl_ms: AtomicU64,
}

#[derive(Default)]
struct Clients {
    /// The gateway-wide roots the clients below were built with.
    roots: UpstreamRoots,
    /// `ClientKey::SHARED`: servers with neither their own policy nor TLS settings, models
    /// without TLS settings, other replicas.
    by_key: HashMap<ClientKey, Result<HttpClient, ClientBuildError>>,
}

/// What sets one HTTP client apart from another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ClientKey {
    policy: Option<u64>,
    tls: Option<u64>,
}

impl ClientKey {
    const SHARED: ClientKey = ClientKey {
        policy: None,
        tls: None,
    };
}

impl Default for Upstreams {
    fn default() -> Self {
        Self::new()
    }
}

impl Upstreams {
    pub fn new() -> Upstreams {
        let networks = Arc::new(ArcSwap::from_pointee(
            NetworkPolicy::parse(&UpstreamNetworks::default()).unwrap_or_default(),
        ));
        Upstreams {
            states: RwLock::new(HashMap::default()),
            next_id: AtomicU64::new(1),
            client_info: serde_json::value::to_raw_value(
                &json!({"name": "switchboard-gateway", "version": env!("CARGO_PKG_VERSION")}),
            )
            .expect("two strings serialize"),
            networks,
            clients: RwLock::default(),
            document_ttl_ms: AtomicU64::new(60_000),
        }
    }

    /// The network policy and the gateway-wide TLS roots of the snapshot now served (new
    /// connections and redirects use them), and the servers and models it serves: clients
    /// nothing uses any more go, and all go when the roots changed.
    pub fn set_table(&self, table: &RoutingTable) {
        self.networks.store(Arc::new(table.networks.clone()));
        self.document_ttl_ms.store(
            u64::try_from(table.settings.listing_ttl.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        let live: HashSet<ClientKey> = table
            .servers
            .iter()
            .map(|s| server_key(s))
            .chain(table.models.iter().map(|m| model_key(m)))
            .chain(
                table
                    .people
                    .iter()
                    .flat_map(|p| p.providers())
                    .map(|(_, _, tls)| tls_key(tls.map(|t| &**t))),
            )
            .chain([ClientKey::SHARED])
            .collect();
        let mut clients = self.clients.write().unwrap_or_else(|p| p.into_inner());
        if clients.roots.key != table.upstream_roots.key {
            clients.roots = table.upstream_roots.clone();
            clients.by_key.clear();
        }
        clients.by_key.retain(|key, _| live.contains(key));
    }

    /// Whether a URL may be used for a server under both policies (its host, and a literal
    /// address; names are checked again as they resolve).
    pub fn allows(&self, server: &Server, url: &url::Url) -> Result<(), Denied> {
        self.networks.load().check_url(url)?;
        server
            .scope
            .as_ref()
            .map_or(Ok(()), |s| s.policy.check_url(url))
    }

    /// The HTTP client for a server (and its token endpoint and metadata): under its own
    /// policy and with its own TLS settings. A client is a handle to a shared pool (cloning it
    /// is cheap). An error names what in the TLS settings no client can be built from.
    pub fn http_for(&self, server: &Server) -> Result<HttpClient, UpstreamError> {
        let scoped = server.scope.as_ref().map(|s| &s.policy);
        self.client(server_key(server), scoped, server.tls.as_deref())
            .map_err(|e| UpstreamError::Unavailable {
                server: server.id().to_string(),
                detail: e.to_string(),
            })
    }

    /// The HTTP client for a model's provider, with the model's TLS settings.
    pub fn http_for_model(&self, model: &Model) -> Result<HttpClient, ClientBuildError> {
        self.client(model_key(model), None, model.tls.as_deref())
    }

    /// The HTTP client for an identity provider's discovery and keys, with its TLS settings.
    pub fn http_for_tls(&self, tls: Option<&TlsMaterial>) -> Result<HttpClient, ClientBuildError> {
        self.client(tls_key(tls), None, tls)
    }

    /// The JSON document at `url` (an identity provider's discovery or key set, a client's
    /// metadata document): under the address policy, with `tls`, at most `limit` bytes. Errors
    /// say the cause, never the URL.
    pub async fn get_json(
        &self,
        url: &url::Url,
        tls: Option<&TlsMaterial>,
        limit: usize,
    ) -> Result<serde_json::Value, FetchError> {
        self.allows_url(url).map_err(FetchError::AddressDenied)?;
        let response = self
            .http_for_tls(tls)?
            .get(url)
            .header(header::ACCEPT, HeaderValue::from_static("application/json"))
            .send()
            .await
            .map_err(|e| match e {
                HttpError::Denied(denied) => FetchError::AddressDenied(denied),
                other => FetchError::Transport(other.to_string()),
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(FetchError::Status(status.as_u16()));
        }
        let body = http_client::read_limited(response.into_body(), limit)
            .await
            .map_err(|e| FetchError::Transport(e.to_string()))?;
        serde_json::from_slice(&body).map_err(|_| FetchError::NotJson)
    }

    /// Whether a URL may be used under `gateway.upstreamNetworks` (its host, and a literal
    /// address; names are checked again as they resolve).
    pub fn allows_url(&self, url: &url::Url) -> Result<(), Denied> {
        self.networks.load().check_url(url)
    }

    /// The pooled HTTP client for what has no TLS settings of its own (other replicas). An
    /// error names a gateway-wide CA bundle no client can be built with.
    pub fn http(&self) -> Result<HttpClient, ClientBuildError> {
        self.client(ClientKey::SHARED, None, None)
    }

    /// The client for `key`, built on first use (the policy is cloned only then: a lookup on
    /// the request path allocates nothing).
    fn client(
        &self,
        key: ClientKey,
        scoped: Option<&Arc<switchboard_snapshot::ScopedPolicy>>,
        tls: Option<&TlsMaterial>,
    ) -> Result<HttpClient, ClientBuildError> {
        if let Some(client) = self
            .clients
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .by_key
            .get(&key)
        {
            return client.clone();
        }
        let mut clients = self.clients.write().unwrap_or_else(|p| p.into_inner());
        let roots = clients.roots.clone();
        clients
            .by_key
            .entry(key)
            .or_insert_with(|| http_client(&self.networks, scoped.cloned(), &roots, tls))
            .clone()
    }

    /// Forgets upstreams that are no longer in the routing table (or changed revision).
    pub fn retain(&self, live: impl Fn(&str, u64) -> bool) {
        let mut states = self.states.write().unwrap_or_else(|p| p.into_inner());
        states.retain(|rev, (id, _)| live(id, *rev));
    }

    pub(crate) fn state(&self, server: &Server) -> Arc<UpstreamState> {
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

    /// The era an upstream was found to speak, once a request has told.
    /// A `byClient` upstream counts as legacy here: it answers 2026-07-28 requests on top of a
    /// legacy server (the stdio bridge), so what it can do (no parameter headers, no
    /// `subscriptions/listen`, legacy cursors) is the legacy revision's.
    pub fn era_of(&self, server: &Server) -> Option<switchboard_protocol::Era> {
        if server.spec.upstream_era == UpstreamEra::ByClient {
            return Some(switchboard_protocol::Era::Rev2025);
        }
        match self.state(server).era.load(Ordering::Relaxed) {
            ERA_MODERN => Some(switchboard_protocol::Era::Rev2026),
            ERA_LEGACY => Some(switchboard_protocol::Era::Rev2025),
            _ => None,
        }
    }

    /// How many times this replica has read the upstream announce that `list` changed: a
    /// listing walked when the count was lower is out of date (the catalog's rule).
    pub fn list_generation(&self, server: &Server, list: ListChanged) -> u64 {
        self.state(server).lists_changed[list.index()].load(Ordering::Relaxed)
    }

    /// Sends one request and returns the upstream's JSON-RPC answer (for a stream: once its
    /// headers arrived; the caller bounds the rest). A stream notes each list change the
    /// upstream announces on it as the event is read, before anyone relays it.
    pub async fn call(&self, call: RpcCall<'_>) -> Result<RpcOutcome, UpstreamError> {
        match tokio::time::timeout_at(call.deadline, self.call_in_era(&call)).await {
            Ok(result) => result,
            Err(_) => Err(timeout_error(&call)),
        }
    }

    /// The upstream's own identity for a legacy client: the `initialize` result of the legacy
    /// session this scope uses (a legacy upstream), or `None` for a modern upstream (ask it
    /// `server/discover`).
    pub async fn legacy_identity(&self, call: RpcCall<'_>) -> Result<Option<Value>, UpstreamError> {
        let state = self.state(call.server);
        let legacy = async {
            if call.server.spec.upstream_era == UpstreamEra::ByClient {
                if call.session().client == 0 {
                    return Ok(None);
                }
                let session = self.legacy_session(&call, &state, false).await?;
                return Ok(Some(session.init.clone()));
            }
            if state.era.load(Ordering::Relaxed) == 0 {
                // Unknown yet: one discover tells (and caches) the era.
                let discover = UpstreamCall {
                    session: call.session(),
                    ..UpstreamCall::whole("server/discover", None)
                };
                self.call_in_era(&RpcCall {
                    request: &discover,
                    ..call
                })
                .await?;
            }
            if state.era.load(Ordering::Relaxed) != ERA_LEGACY {
                return Ok(None);
            }
            let session = self.legacy_session(&call, &state, false).await?;
            Ok(Some(session.init.clone()))
        };
        match tokio::time::timeout_at(call.deadline, legacy).await {
            Ok(result) => result,
            Err(_) => Err(timeout_error(&call)),
        }
    }

    /// Posts a client's JSON-RPC response (to a server-to-client request) to the upstream
    /// session that asked; returns the upstream's HTTP status.
    pub async fn deliver_reply(
        &self,
        call: RpcCall<'_>,
        session: Option<HeaderValue>,
        version: HeaderValue,
        body: Vec<u8>,
    ) -> Result<StatusCode, UpstreamError> {
        let send = self.post(&call, || session_headers(session.as_ref(), &version), body);
        match tokio::time::timeout_at(call.deadline, send).await {
            Ok(reply) => Ok(reply?.status),
            Err(_) => Err(timeout_error(&call)),
        }
    }

    /// Whether this replica opened an upstream session on `server` for a client session.
    pub fn has_client_sessions(&self, server: &Server, client: u64) -> bool {
        let state = self.state(server);
        let sessions = state.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.keys().any(|(_, scope)| scope.client == client)
    }

    /// Ends the upstream sessions opened for one client session (HTTP DELETE, as a legacy
    /// client ends its own); a failure is logged, never the client's problem.
    pub async fn close_client_sessions(&self, call: RpcCall<'_>, client: u64) {
        let state = self.state(call.server);
        for slot in state.take_client_sessions(client) {
            let Some(session) = slot.lock().await.session.take() else {
                continue;
            };
            if session.id.is_none() {
                continue;
            }
            let mut headers = session.headers();
            call.server.headers.apply(
                call.caller_headers,
                call.credential.map(|c| &c.value),
                &mut headers,
            );
            let Ok(http) = self.http_for(call.server) else {
                continue;
            };
            let sent = http
                .request(http::Method::DELETE, &call.server.url)
                .headers(headers)
                .send();
            let error = match tokio::time::timeout(call.budget, sent).await {
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => UpstreamError::http(call.server, e),
                Err(_) => timeout_error(&call),
            };
            tracing::info!(server = call.server.id(), %error, "closing an upstream session failed");
        }
    }

    async fn call_in_era(&self, call: &RpcCall<'_>) -> Result<RpcOutcome, UpstreamError> {
        let state = self.state(call.server);
        if let Some(tools) = &call.server.openapi {
            // A REST API: answered like a stateless (2026-07-28) server, from its document.
            state.answers_as_modern();
            return self.openapi(call, &state, tools).await;
        }
        if call.server.spec.upstream_era == UpstreamEra::ByClient {
            // Both eras upstream: a legacy client's session keeps its own upstream session
            // (the state it builds there is its own), a 2026-07-28 request goes stateless.
            return if call.session().client != 0 {
                self.legacy(call, &state).await
            } else {
                self.modern(call).await.map_err(Attempt::into_error)
            };
        }
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
        // The call's trace context in `_meta` too (SEP-414): a server without HTTP
        // instrumentation (a stdio one behind the bridge) has no other carrier. It names the
        // call's span; the `traceparent` header names the HTTP request's beneath it.
        let trace = switchboard_core::audit::outgoing_trace();
        let meta = ModernMeta {
            client_info: &self.client_info,
            capabilities: call.session().capabilities,
            log_level: call.request.log_level,
            trace: trace.as_ref(),
        };
        let body = modern_call_body(&id, call.method(), call.params(), meta);
        let reply = self
            .post(call, || modern_headers(call), body)
            .await
            .map_err(Attempt::Failed)?;
        if reply.status.is_success() && reply.is_event_stream() {
            // 2026-07-28 has no resumption: a stream of its is read as it comes, or not at all.
            let stream = reply.into_stream(id, None, None, self.state(call.server));
            // (Boxed: an SSE answer is the rarer case, and its reader's state is large.)
            return Box::pin(stream.outcome(call))
                .await
                .map_err(Attempt::Failed);
        }
        let reply = reply.read(call.server).await.map_err(Attempt::Failed)?;
        for change in reply.announced_list_changes() {
            self.state(call.server).list_changed(change);
        }
        // Only a 4xx needs the error code (to tell a modern error from a legacy server); a
        // success is parsed once, by `outcome`.
        match reply.status {
            s if s.is_success() => reply.outcome(call.server, &id).map_err(Attempt::Failed),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                Err(Attempt::Failed(reply.auth_error(call.server)))
            }
            s if s.is_client_error()
                && reply
                    .rpc_error_code()
                    .is_some_and(protocol::is_modern_error_code) =>
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
    ) -> Result<RpcOutcome, UpstreamError> {
        // A dropped upstream session (404) is re-established once, then the request repeats.
        for attempt in 0..2 {
            let session = self.legacy_session(call, state, attempt > 0).await?;
            let id = json!(self.next_id.fetch_add(1, Ordering::Relaxed));
            // The session says what the 2026-07-28 reserved `_meta` keys would: not both.
            let trace = switchboard_core::audit::outgoing_trace();
            let body = legacy_call_body(&id, call.method(), call.params(), trace.as_ref());
            let reply = self.post(call, || session.headers(), body).await?;
            if reply.status.is_success() && reply.is_event_stream() {
                let origin = StreamOrigin {
                    http: self.http_for(call.server)?,
                    url: reply.final_url(call.server).clone(),
                    headers: reply
                        .sent_headers(call, || self.request_headers(call, session.headers())),
                    trace: trace.clone(),
                    presents_certificate: call
                        .server
                        .tls
                        .as_ref()
                        .is_some_and(|t| t.client.is_some()),
                };
                let stream = reply.into_stream(
                    id,
                    Some(session.clone()),
                    Some(origin),
                    self.state(call.server),
                );
                return Box::pin(stream.outcome(call)).await;
            }
            let reply = reply.read(call.server).await?;
            for change in reply.announced_list_changes() {
                state.list_changed(change);
            }
            match reply.status {
                StatusCode::NOT_FOUND if session.id.is_some() && attempt == 0 => continue,
                StatusCode::NOT_FOUND if session.id.is_some() => break,
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
        Err(UpstreamError::Unavailable {
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
    ) -> Result<Arc<LegacySession>, UpstreamError> {
        let partition = call.credential.map_or(SHARED_PARTITION, |c| c.partition);
        let slot = state.session_slot(partition, call.session());
        let mut slot = slot.lock().await;
        if let Some(existing) = slot.session.as_ref()
            && !renew
        {
            return Ok(existing.clone());
        }
        let id = json!(self.next_id.fetch_add(1, Ordering::Relaxed));
        let params = json!({
            "protocolVersion": LATEST_LEGACY_VERSION,
            "capabilities": capabilities::to_json(call.session().capabilities),
            "clientInfo": self.client_info,
        });
        let mut headers = HeaderMap::new();
        // A client session's own upstream session on a `byClient` upstream: the same one from
        // every replica (the affinity), and, once it existed, that one or none (resume).
        let client_state =
            call.server.spec.upstream_era == UpstreamEra::ByClient && call.session().client != 0;
        if client_state {
            headers.insert(
                HeaderName::from_static(protocol::AFFINITY_HEADER),
                affinity(call.server.id(), call.session().client),
            );
            if renew || slot.opened {
                headers.insert(
                    HeaderName::from_static(protocol::RESUME_HEADER),
                    HeaderValue::from_static("1"),
                );
            }
        }
        let reply = self
            .post(
                call,
                || headers.clone(),
                legacy_request_body(
                    &id,
                    "initialize",
                    Some(&params),
                    switchboard_core::audit::outgoing_trace().as_ref(),
                ),
            )
            .await?
            .read(call.server)
            .await?;
        if matches!(
            reply.status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
        ) {
            return Err(reply.auth_error(call.server));
        }
        if client_state && reply.status == StatusCode::GONE {
            // The process that held the client's state is gone: the client starts over.
            slot.session = None;
            slot.opened = true;
            return Err(UpstreamError::SessionGone {
                server: call.server.id().to_string(),
            });
        }
        let session_id = reply.headers.get(protocol::headers::SESSION_ID).cloned();
        let result = match reply.outcome(call.server, &id)? {
            RpcOutcome::Result(r) => r.into_value(),
            RpcOutcome::Stream(_) => {
                return Err(UpstreamError::Unavailable {
                    server: call.server.id().to_string(),
                    detail: "initialize answered with a stream".into(),
                });
            }
            RpcOutcome::Error(e, _) => {
                return Err(UpstreamError::Unavailable {
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
            init: result,
        });
        let trace = switchboard_core::audit::outgoing_trace();
        let initialized =
            legacy_notification_body("notifications/initialized", None, trace.as_ref());
        self.post(call, || session.headers(), initialized)
            .await?
            .read(call.server)
            .await?;
        slot.session = Some(session.clone());
        slot.opened = true;
        Ok(session)
    }

    /// One HTTP POST with the server's headers, following same-origin redirects with
    /// credentials and cross-origin ones without any credential slot. `headers_of` makes the
    /// request's own headers (the server's are added here), once per request sent: a redirect
    /// is rare, and a copy kept for it cost every call about a thousand instructions.
    async fn post(
        &self,
        call: &RpcCall<'_>,
        headers_of: impl Fn() -> HeaderMap + Sync,
        body: Vec<u8>,
    ) -> Result<SentReply, UpstreamError> {
        let headers_of = || self.request_headers(call, headers_of());
        let body = Some(("application/json", bytes::Bytes::from(body)));
        self.send_following(call, http::Method::POST, None, &headers_of, body)
            .await
    }

    /// `headers` with what every POST to the server carries: `Accept`, `Content-Type` and the
    /// server's own headers (its credential among them).
    fn request_headers(&self, call: &RpcCall<'_>, mut headers: HeaderMap) -> HeaderMap {
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static(protocol::ACCEPT_BOTH),
        );
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        call.server.headers.apply(
            call.caller_headers,
            call.credential.map(|c| &c.value),
            &mut headers,
        );
        headers
    }

    /// One HTTP request to `url` (`None`: the server's own) with the headers `headers_of` makes
    /// (the server's credential already among them) under both address policies, following
    /// redirects: 307/308 with the same method and body, 301/302/303 of a GET or HEAD as
    /// themselves (a REST API's); a cross-origin one without any credential slot.
    pub(crate) async fn send_following(
        &self,
        call: &RpcCall<'_>,
        method: http::Method,
        url: Option<url::Url>,
        headers_of: &(dyn Fn() -> HeaderMap + Sync),
        body: Option<(&'static str, bytes::Bytes)>,
    ) -> Result<SentReply, UpstreamError> {
        let http = self.http_for(call.server)?;
        let safe = matches!(method, http::Method::GET | http::Method::HEAD);
        // `None`: the server's own URL, made into a request target once (`Endpoint`).
        let mut elsewhere = url;
        let mut credential_stripped = false;
        for _ in 0..=MAX_REDIRECTS {
            let url = elsewhere.as_ref().unwrap_or(&call.server.url);
            // The first URL passed validation under these policies, but a redirect target did not.
            if let Err(denied) = self.allows(call.server, url) {
                return Err(UpstreamError::AddressDenied {
                    server: call.server.id().to_string(),
                    denied,
                });
            }
            let outgoing = match (&call.server.endpoint, &elsewhere) {
                (Some(endpoint), None) => http.request_to(method.clone(), endpoint),
                _ => http.request(method.clone(), url),
            };
            let mut headers = headers_of();
            if credential_stripped {
                strip_credentials(call.server, &mut headers);
            }
            let mut outgoing = outgoing.headers(headers);
            if let Some((content_type, body)) = &body {
                outgoing = outgoing.body(content_type, body.clone());
            }
            let response = outgoing
                .send()
                .await
                .map_err(|e| UpstreamError::http(call.server, e))?;
            let status = response.status();
            let follows = matches!(status.as_u16(), 307 | 308)
                || (safe && matches!(status.as_u16(), 301..=303));
            if follows
                && let Some(next) = response
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .and_then(|l| url.join(l).ok())
            {
                credential_stripped |= next.origin() != url.origin();
                elsewhere = Some(next);
                continue;
            }
            return Ok(SentReply {
                status,
                elsewhere,
                credential_stripped,
                response,
            });
        }
        Err(UpstreamError::Unavailable {
            server: call.server.id().to_string(),
            detail: "too many redirects".into(),
        })
    }
}

/// Takes every credential slot of the server's out of `headers` (a cross-origin redirect).
fn strip_credentials(server: &Server, headers: &mut HeaderMap) {
    for slot in server.headers.secret_slots() {
        headers.remove(slot);
    }
}

/// The headers of a 2026-07-28 call, before the server's own: its version, method and name
/// repeated (SEP-2243), and the tool-parameter headers.
fn modern_headers(call: &RpcCall<'_>) -> HeaderMap {
    // Room for what a call's request carries (these three, `Accept`, `Content-Type`, the
    // credential, a trace context), so the map is not grown on the way.
    let mut headers = HeaderMap::with_capacity(8);
    headers.insert(
        protocol::headers::PROTOCOL_VERSION,
        HeaderValue::from_static(MODERN_VERSION),
    );
    if let Ok(v) = HeaderValue::from_str(call.method()) {
        headers.insert(protocol::headers::METHOD, v);
    }
    if let Some(name) = routed_name(call.method(), call.params())
        && let Ok(v) = HeaderValue::from_str(&protocol::encode_header_value(&name))
    {
        headers.insert(protocol::headers::NAME, v);
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
    headers
}

enum Attempt {
    /// The upstream does not speak the 2026-07-28 revision.
    NotModern,
    Failed(UpstreamError),
}

impl Attempt {
    fn into_error(self) -> UpstreamError {
        match self {
            Attempt::Failed(e) => e,
            Attempt::NotModern => UpstreamError::Unavailable {
                server: String::new(),
                detail: "the upstream no longer speaks the 2026-07-28 revision".into(),
            },
        }
    }
}

/// An upstream's answer whose body is not read yet: read whole, or relayed as a stream.
pub(crate) struct SentReply {
    pub(crate) status: StatusCode,
    /// Where the request finally went when that is not the server's own URL, and whether a
    /// redirect took the credentials off (it crossed origins).
    elsewhere: Option<url::Url>,
    credential_stripped: bool,
    pub(crate) response: HttpResponse,
}

impl SentReply {
    /// Where the request finally went.
    fn final_url<'a>(&'a self, server: &'a Server) -> &'a url::Url {
        self.elsewhere.as_ref().unwrap_or(&server.url)
    }

    /// The headers the request finally went with, made again by `headers_of`.
    fn sent_headers(&self, call: &RpcCall<'_>, headers_of: impl Fn() -> HeaderMap) -> HeaderMap {
        let mut headers = headers_of();
        if self.credential_stripped {
            strip_credentials(call.server, &mut headers);
        }
        headers
    }

    fn is_event_stream(&self) -> bool {
        self.response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"))
    }

    async fn read(self, server: &Server) -> Result<Reply, UpstreamError> {
        let (parts, body) = self.response.into_parts();
        let body = http_client::read_limited(body, MAX_UPSTREAM_BODY)
            .await
            .map_err(|e| UpstreamError::http(server, e))?;
        Ok(Reply {
            status: self.status,
            headers: parts.headers,
            body,
        })
    }

    /// The SSE answer as a stream. `origin` (a request in the legacy form) is where the stream
    /// is resumed from and where giving the request up is said.
    fn into_stream(
        self,
        upstream_id: Value,
        session: Option<Arc<LegacySession>>,
        origin: Option<StreamOrigin>,
        lists: Arc<UpstreamState>,
    ) -> UpstreamStream {
        UpstreamStream {
            status: self.status,
            session_id: session.as_ref().and_then(|s| s.id.clone()),
            session_version: session.map(|s| s.version.clone()),
            upstream_id,
            body: http_client::byte_stream(self.response),
            decoder: SseDecoder::new(MAX_UPSTREAM_BODY),
            origin: origin.map(Box::new),
            resume: ResumePoint::default(),
            answered: false,
            admission: None,
            span: tracing::Span::none(),
            lists,
        }
    }
}

/// Where a legacy request's SSE answer came from, for the two things a legacy client may send
/// about it afterwards: a GET with `Last-Event-ID` resuming the stream the server closed, and
/// `notifications/cancelled` giving the request up. (2026-07-28 has neither: no resumption,
/// and a closed connection is the cancellation.)
#[derive(Debug)]
struct StreamOrigin {
    http: HttpClient,
    /// Where the request finally went (after same-origin redirects).
    url: url::Url,
    /// The headers it went with: its session and version, the server's headers and
    /// credential (as the redirects left them).
    headers: HeaderMap,
    /// Whether the gateway presents the server a client certificate (for naming a failure).
    presents_certificate: bool,
    /// The request's trace context (the call's span), which its cancellation carries too: it
    /// is sent when the request's own task may be gone.
    trace: Option<TraceContext>,
}

/// How long to wait before resuming a stream whose server named no `retry:` (the SSE
/// standard leaves the default to the client; a few seconds is browsers' and the SDKs' figure).
const DEFAULT_RECONNECT: Duration = Duration::from_secs(1);
/// The wait after a resumed connection that brought no event at all doubles from at least this,
/// up to [`MAX_RECONNECT`]: a server that keeps answering a resume with an empty stream costs a
/// few requests per deadline, not a busy loop.
const MIN_FRUITLESS_RECONNECT: Duration = Duration::from_millis(100);
const MAX_RECONNECT: Duration = Duration::from_secs(30);

/// Where an upstream stream would be resumed from: what the SSE standard keeps as the "last
/// event ID" and the "reconnection time".
#[derive(Debug, Default)]
struct ResumePoint {
    /// The id of the last event the upstream sent, as the header that names it (an empty `id:`
    /// clears it, as the standard says; so does one no header can carry: nothing to resume).
    last_event_id: Option<HeaderValue>,
    /// The reconnection time the upstream asked for last (`retry:`, milliseconds).
    retry_ms: Option<u64>,
    /// Resumed connections in a row that ended before any event.
    fruitless: u32,
}

impl ResumePoint {
    /// Takes an event's id and `retry:` off it: they are the gateway's business (where to
    /// resume this stream from, and when), and mean nothing to anyone it relays the event to.
    fn take_from(&mut self, event: &mut SseEvent) {
        if let Some(id) = event.id.take() {
            self.last_event_id = (!id.is_empty())
                .then(|| HeaderValue::from_str(&id).ok())
                .flatten();
        }
        if let Some(retry) = event.retry.take() {
            self.retry_ms = Some(retry);
        }
        self.fruitless = 0;
    }

    /// How long to wait before the next resume: what the server asked for, longer after
    /// resumes that brought nothing.
    fn delay(&self) -> Duration {
        let asked = self
            .retry_ms
            .map_or(DEFAULT_RECONNECT, Duration::from_millis);
        if self.fruitless == 0 {
            return asked;
        }
        asked
            .max(MIN_FRUITLESS_RECONNECT)
            .saturating_mul(1 << self.fruitless.min(16))
            .min(MAX_RECONNECT.max(asked))
    }
}

impl StreamOrigin {
    /// The GET that resumes the stream after `last_event_id`, with the request's own headers
    /// (session, version, credential, the server's headers).
    async fn resume(&self, last_event_id: HeaderValue) -> Result<HttpResponse, HttpError> {
        let mut headers = self.headers.clone();
        headers.remove(header::CONTENT_TYPE);
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(HeaderName::from_static("last-event-id"), last_event_id);
        self.http.get(&self.url).headers(headers).send().await
    }

    /// Tells a legacy upstream that a request it is still working on was given up (the client
    /// went away, the deadline passed, the stream could not be resumed):
    /// `notifications/cancelled` on the same session, as the legacy transport asks.
    fn cancel(self, request_id: Value) {
        let params = json!({
            "requestId": request_id,
            "reason": "the gateway gave the request up (its client went away, or its deadline passed)",
        });
        let body = legacy_notification_body(
            "notifications/cancelled",
            params.as_object(),
            self.trace.as_ref(),
        );
        let mut headers = self.headers;
        if let Some(trace) = &self.trace {
            switchboard_core::audit::insert_trace_headers(trace, &mut headers);
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        handle.spawn(async move {
            let send = self
                .http
                .post(&self.url)
                .headers(headers)
                .body("application/json", body)
                .send();
            let _ = tokio::time::timeout(Duration::from_secs(5), send).await;
        });
    }
}

/// An upstream's SSE answer, read one event at a time: memory stays one event, whatever the
/// length of the stream. Dropped before the answer arrived, it cancels the upstream request.
pub struct UpstreamStream {
    /// The upstream's HTTP status (2xx).
    pub status: StatusCode,
    /// The id the gateway gave the request upstream: the event that carries it is the answer.
    pub upstream_id: Value,
    /// The legacy upstream session the request went on: where replies to the upstream's own
    /// requests must go.
    pub session_id: Option<HeaderValue>,
    pub session_version: Option<HeaderValue>,
    body: ByteStream,
    decoder: SseDecoder,
    /// A legacy request's: where the stream is resumed from and the request given up.
    origin: Option<Box<StreamOrigin>>,
    resume: ResumePoint,
    /// The answer came: nothing is left to resume or to give up.
    answered: bool,
    /// The server's concurrency slot, held until the stream ends (see [`switchboard_core::limits`]).
    admission: Option<switchboard_core::limits::LimitPermit>,
    /// The call's client span ([`crate::call_span`]), open until the stream ends.
    span: tracing::Span,
    /// Where a list change the upstream announces on this stream is noted, whether the
    /// stream is relayed or read whole for its answer.
    lists: Arc<UpstreamState>,
}

impl std::fmt::Debug for UpstreamStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamStream")
            .field("status", &self.status)
            .field("upstream_id", &self.upstream_id)
            .finish_non_exhaustive()
    }
}

impl UpstreamStream {
    /// Holds a limit's slot for as long as the stream lives.
    pub fn hold(&mut self, admission: Option<switchboard_core::limits::LimitPermit>) {
        self.admission = admission;
    }

    /// The answer as the call wants it: this stream to relay, or (a caller that needs the whole
    /// answer) read up to the answer, notifications passed over, the stream resumed wherever
    /// the upstream closes it. The caller's deadline bounds both.
    async fn outcome(self, call: &RpcCall<'_>) -> Result<RpcOutcome, UpstreamError> {
        if call.request.stream {
            return Ok(RpcOutcome::Stream(Box::new(self)));
        }
        self.read_answer(call.server.id()).await
    }

    async fn read_answer(mut self, server: &str) -> Result<RpcOutcome, UpstreamError> {
        while let Some(event) = self.next_event(server).await? {
            let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(&event.data) else {
                continue;
            };
            // The answer has our id; an error about the request itself may carry a null one.
            let ours = match message.get("id") {
                Some(Value::Null) => message.contains_key("error"),
                Some(id) => *id == self.upstream_id,
                None => false,
            };
            if !ours || message.contains_key("method") {
                continue;
            }
            self.answered();
            return Ok(match message.remove("result") {
                Some(result) => RpcOutcome::Result(RpcResult::Parsed(result)),
                None => {
                    RpcOutcome::Error(message.remove("error").unwrap_or(Value::Null), self.status)
                }
            });
        }
        Err(UpstreamError::Unavailable {
            server: server.to_string(),
            detail: "the stream ended without an answer".into(),
        })
    }

    /// The next event, `None` when the upstream ended the stream.
    ///
    /// A legacy server may close the connection before its answer once it has sent an event
    /// id (2025-11-25 stream polling; or the connection broke): the stream is resumed here, with
    /// a GET carrying `Last-Event-ID`, after the `retry:` the server asked for, as often as it
    /// closes, so whoever reads the stream sees one stream. The caller's deadline bounds the
    /// waits. Event ids and `retry:` are taken off the events: they say where this stream
    /// resumes, which is the gateway's business alone (docs/architecture.md, "Streams").
    pub async fn next_event(&mut self, server: &str) -> Result<Option<SseEvent>, UpstreamError> {
        // Read inside the call's span: a span ends when it was last entered.
        use tracing::Instrument as _;
        let span = self.span.clone();
        self.read_event(server).instrument(span).await
    }

    async fn read_event(&mut self, server: &str) -> Result<Option<SseEvent>, UpstreamError> {
        use futures_util::StreamExt;
        let broken = |detail: String| UpstreamError::Unavailable {
            server: server.to_string(),
            detail,
        };
        loop {
            match self.decoder.next_event() {
                Ok(Some(mut event)) => {
                    self.resume.take_from(&mut event);
                    // Noted before the event is handed on: a client that lists again as soon
                    // as it reads the notification gets a fresh listing.
                    if let Some(change) = ListChanged::announced_by(&event.data) {
                        self.lists.list_changed(change);
                    }
                    return Ok(Some(event));
                }
                Ok(None) => {}
                Err(SseError::EventTooLarge(limit)) => {
                    return Err(broken(format!("an event larger than {limit} bytes")));
                }
            }
            let ended = match self.body.next().await {
                Some(Ok(chunk)) => {
                    self.decoder.push(&chunk);
                    continue;
                }
                Some(Err(_)) => Err(broken("the stream broke".into())),
                None => Ok(None),
            };
            if !self.reconnect(server).await? {
                return ended;
            }
        }
    }

    /// Resumes a stream that ended before the answer, if it can be: `false` when there is
    /// nothing to resume from (no event id, a 2026-07-28 request, the answer already came).
    async fn reconnect(&mut self, server: &str) -> Result<bool, UpstreamError> {
        let (Some(origin), Some(last)) = (&self.origin, &self.resume.last_event_id) else {
            return Ok(false);
        };
        if self.answered {
            return Ok(false);
        }
        let last = last.clone();
        tokio::time::sleep(self.resume.delay()).await;
        self.resume.fruitless = self.resume.fruitless.saturating_add(1);
        let failed = |detail: String| UpstreamError::Unavailable {
            server: server.to_string(),
            detail: format!("the stream closed before the answer, and resuming it {detail}"),
        };
        let response = match origin.resume(last).await {
            Ok(response) => response,
            Err(error) => {
                return Err(
                    match UpstreamError::http_of(server, origin.presents_certificate, error) {
                        UpstreamError::Unavailable { detail, .. } => {
                            failed(format!("failed: {detail}"))
                        }
                        other => other,
                    },
                );
            }
        };
        let status = response.status();
        let is_stream = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        if !status.is_success() || !is_stream {
            return Err(failed(format!(
                "(GET with Last-Event-ID) was answered HTTP {}{}",
                status.as_u16(),
                if is_stream {
                    ""
                } else {
                    " without an event stream"
                }
            )));
        }
        tracing::debug!(server, "resumed an upstream stream the upstream closed");
        self.body = http_client::byte_stream(response);
        // An event cut off by the close is not dispatched (the SSE rule): it comes again.
        self.decoder = SseDecoder::new(MAX_UPSTREAM_BODY);
        Ok(true)
    }

    /// Whether a message id (its JSON text) is the id of this request: the event carrying it
    /// is the answer. The gateway's ids are numbers, compared without building anything.
    pub fn is_answer_id(&self, raw_id: &str) -> bool {
        match self.upstream_id.as_u64() {
            Some(n) => raw_id.trim().parse::<u64>() == Ok(n),
            None => serde_json::from_str::<Value>(raw_id).ok().as_ref() == Some(&self.upstream_id),
        }
    }

    /// The upstream answered: nothing is left to resume or to cancel.
    pub fn answered(&mut self) {
        self.answered = true;
    }

    /// Keeps the call's span open for as long as the stream lives.
    pub(crate) fn trace(&mut self, span: tracing::Span) {
        self.span = span;
    }

    /// The answer (the response message) of a `method` call this stream carried: an error, or
    /// a tool's `isError`, marks the call's span failed.
    pub fn trace_answer(&self, method: &str, message: &serde_json::Map<String, Value>) {
        crate::call_span::answered(&self.span, method, message);
    }

    /// The stream ended without an answer (`error_type`: the outcome, `description`: why).
    pub fn trace_failure(&self, error_type: &'static str, description: String) {
        switchboard_telemetry::span::fail(&self.span, error_type, Some(description));
    }
}

impl Drop for UpstreamStream {
    /// A legacy request given up before its answer (the client went away, the deadline passed,
    /// the stream could not be resumed) is cancelled upstream. A close the server made for
    /// polling is not a drop: the stream was resumed.
    fn drop(&mut self) {
        if !self.answered
            && let Some(origin) = self.origin.take()
        {
            (*origin).cancel(self.upstream_id.clone());
        }
    }
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: bytes::Bytes,
}

impl Reply {
    /// The list changes an answer read whole announced among its events (an SSE answer the
    /// gateway did not relay, such as a tool call of the LLM loop: the change is noted all
    /// the same).
    fn announced_list_changes(&self) -> Vec<ListChanged> {
        const NAMED: &[u8] = b"/list_changed";
        if !self.content_type().starts_with("text/event-stream")
            || !self.body.windows(NAMED.len()).any(|w| w == NAMED)
        {
            return Vec::new();
        }
        switchboard_protocol::jsonrpc::sse_messages(&self.body)
            .iter()
            .filter(|m| m.get("id").is_none())
            .filter_map(|m| m.get("method").and_then(Value::as_str))
            .filter_map(ListChanged::from_method)
            .collect()
    }

    fn content_type(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn rpc_error_code(&self) -> Option<i64> {
        let v: Value = if self.content_type().starts_with("text/event-stream") {
            switchboard_protocol::jsonrpc::sse_messages(&self.body)
                .into_iter()
                .next()?
        } else {
            serde_json::from_slice(&self.body).ok()?
        };
        v.get("error")?.get("code")?.as_i64()
    }

    /// The JSON-RPC answer to request `id`, with its id left for the caller to restore.
    fn outcome(&self, server: &Server, id: &Value) -> Result<RpcOutcome, UpstreamError> {
        if let Some(response) = raw_response(self.content_type(), &self.body) {
            // A response to another request (or a message that is none) is not this call's
            // answer, however well formed: relaying it would answer the caller wrongly.
            if !response.answers(id) {
                return Err(self.not_the_answer(server));
            }
            return Ok(match response.result {
                Some(result) => RpcOutcome::Result(RpcResult::Raw(result)),
                None => RpcOutcome::Error(response.error.unwrap_or(Value::Null), self.status),
            });
        }
        let message = response_from_body(self.content_type(), &self.body, id)
            .ok_or_else(|| self.not_the_answer(server))?;
        match message {
            Value::Object(mut m) => {
                if let Some(result) = m.remove("result") {
                    Ok(RpcOutcome::Result(RpcResult::Parsed(result)))
                } else {
                    Ok(RpcOutcome::Error(
                        m.remove("error").unwrap_or(Value::Null),
                        self.status,
                    ))
                }
            }
            _ => Err(UpstreamError::Unavailable {
                server: server.id().to_string(),
                detail: "the body is not a JSON-RPC response".into(),
            }),
        }
    }

    /// A body that holds no response to the request sent (no JSON-RPC response at all, or one
    /// to another request). The detail names no id: ids are the caller's.
    fn not_the_answer(&self, server: &Server) -> UpstreamError {
        UpstreamError::Unavailable {
            server: server.id().to_string(),
            detail: format!(
                "HTTP {}: the body is not the JSON-RPC response to this request",
                self.status.as_u16()
            ),
        }
    }

    fn auth_error(&self, server: &Server) -> UpstreamError {
        let challenge = www_authenticate(&self.headers);
        if self.status == StatusCode::FORBIDDEN {
            UpstreamError::Forbidden {
                server: server.id().to_string(),
                challenge,
            }
        } else {
            UpstreamError::Unauthorized {
                server: server.id().to_string(),
                challenge,
            }
        }
    }

    fn unavailable(&self, server: &Server) -> UpstreamError {
        UpstreamError::Unavailable {
            server: server.id().to_string(),
            detail: format!("HTTP {}", self.status.as_u16()),
        }
    }
}

/// An upstream's `WWW-Authenticate` challenge, relayed with its 401.
pub(crate) fn www_authenticate(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn server_key(server: &Server) -> ClientKey {
    ClientKey {
        policy: server.scope.as_ref().map(|s| s.key),
        tls: server.tls.as_ref().map(|t| t.key),
    }
}

fn tls_key(tls: Option<&TlsMaterial>) -> ClientKey {
    ClientKey {
        policy: None,
        tls: tls.map(|t| t.key),
    }
}

fn model_key(model: &Model) -> ClientKey {
    ClientKey {
        policy: None,
        tls: model.tls.as_ref().map(|t| t.key),
    }
}

/// A pooled client whose resolver applies `networks` (and a server's own policy), with TLS by
/// rustls under the gateway-wide roots and the upstream's own settings (`tls.rs`).
fn http_client(
    networks: &Arc<ArcSwap<NetworkPolicy>>,
    scoped: Option<Arc<switchboard_snapshot::ScopedPolicy>>,
    roots: &UpstreamRoots,
    tls: Option<&TlsMaterial>,
) -> Result<HttpClient, ClientBuildError> {
    let config = crate::tls::client_config(roots, tls)
        .map_err(|e| ClientBuildError(crate::tls::describe(&e)))?;
    let server_name = tls.and_then(|t| t.server_name.clone());
    Ok(HttpClient::new(
        networks.clone(),
        scoped,
        config,
        server_name,
    ))
}

/// The body value the `Mcp-Name` header repeats, for the methods that have one.
fn routed_name<'a>(method: &str, params: Option<&'a Params>) -> Option<Cow<'a, str>> {
    params?.str_member(protocol::named_field(method)?)
}

pub(crate) fn timeout_error(call: &RpcCall<'_>) -> UpstreamError {
    UpstreamError::Timeout {
        server: call.server.id().to_string(),
        budget: call.budget,
    }
}

/// The affinity of a client session on a `byClient` upstream: the same on every replica (the
/// session's tag comes from the id the client presents), and no use to anyone else (a digest).
fn affinity(server: &str, client: u64) -> HeaderValue {
    use sha2::Digest as _;
    let digest = sha2::Sha256::new()
        .chain_update(b"switchboard affinity v1\0")
        .chain_update(server.as_bytes())
        .chain_update(b"\0")
        .chain_update(client.to_be_bytes())
        .finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    HeaderValue::from_str(&hex).unwrap_or(HeaderValue::from_static("0000000000000000"))
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
