//! The HTTP edge and routers: the public listener (MCP, REST, the LLM APIs, sign-in) and the
//! internal one (health, metrics, the replica hand-off), each served by one [`Edge`] that does,
//! in this order, what every request needs before a handler sees it:
//!
//! 1. shedding: past the replica's bounds a request is refused before anything else happens
//!    to it (no body read, no parse, no upstream I/O);
//! 2. the body read whole, in time and under `gateway.maxBodyBytes`;
//! 3. DNS-rebinding protection on the client faces (`Host` and `Origin`);
//! 4. while stopping, `Connection: close` on every answer.
//!
//! Then the route: a POST to `/mcp` or `/mcp/{prefix}` (most of a gateway's traffic) goes to
//! the MCP face's handler at once, everything else through the router. The edge is the
//! listener's service itself rather than a router layer, and the common call skips the router:
//! a `from_fn` layer, the router's matching and its boxed futures, and a second collection of
//! the body cost about 7,000 instructions a call, more than any one stage of the call's own
//! work (BENCHMARKS.md).

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper::body::Incoming;

use crate::refused_body;
use crate::state::Gateway;
use switchboard_core::audit;
use switchboard_core::errors::{GatewayError, RestError};
use switchboard_llm as llm;
use switchboard_mcp::endpoint;
use switchboard_mcp::rest;

/// Hard ceiling on any request body, above every configurable limit; the per-snapshot
/// `gateway.maxBodyBytes` is enforced by the handlers.
const BODY_CEILING: usize = 64 * 1024 * 1024;

/// A listener's one service: the edge (the module's comment) around its router.
#[derive(Clone)]
pub struct Edge {
    gw: Arc<Gateway>,
    router: Router,
    /// The public listener's edge: it keeps each request in an audit slot, whose record and
    /// usage are written when the answer ends, and serves the MCP endpoints. The internal one
    /// keeps no record (probes and scrapes) and has no MCP endpoint but the hand-off.
    public: bool,
}

impl Edge {
    /// The public listener's: the client faces, each request audited.
    pub fn client(gw: Arc<Gateway>) -> Edge {
        Edge {
            router: router(&gw),
            gw,
            public: true,
        }
    }

    /// The internal listener's (`--internal-listen`): what kubelets, Prometheus and other
    /// replicas reach at a pod address, and clients never should (metrics are labelled with key
    /// and server names; the hand-off route is for replicas). Never shed (admission exempts
    /// these paths), bodies read in time, `Connection: close` while stopping.
    pub fn internal(gw: Arc<Gateway>) -> Edge {
        Edge {
            router: internal_router(&gw),
            gw,
            public: false,
        }
    }
}

/// A request as it arrives: its body not read yet.
type Request = axum::http::Request<Incoming>;

impl hyper::service::Service<Request> for Edge {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Response, std::convert::Infallible>> + Send>>;

    fn call(&self, request: Request) -> Self::Future {
        let edge = self.clone();
        // A boxed future per listener: one holding both would be as large as the larger (the
        // internal edge's, whose answer is inline), and that size is copied on every request.
        if edge.public {
            Box::pin(async move { Ok(audited_edge(&edge, request).await) })
        } else {
            Box::pin(async move { Ok(edge_answer(&edge, request).await) })
        }
    }
}

fn router(gw: &Arc<Gateway>) -> Router {
    // Each face gets its own context as state; the edge and the routes left take the gateway.
    let mcp = Router::new()
        .route(
            "/mcp",
            post(endpoint::aggregate)
                .get(endpoint::method_not_allowed)
                .delete(endpoint::end_session),
        )
        .route(
            "/mcp/{prefix}",
            post(endpoint::single)
                .get(endpoint::method_not_allowed)
                .delete(endpoint::end_session),
        )
        .route("/mcp-rest/tools/list", get(rest::list_tools))
        .route("/mcp-rest/tools/search", get(rest::search_tools))
        .route("/mcp-rest/tools/call", post(rest::call_tool))
        .with_state(gw.mcp.clone());
    let llm = Router::new()
        .route("/v1/messages", post(llm::routes::messages))
        .route("/v1/messages/count_tokens", post(llm::routes::count_tokens))
        .route("/v1/chat/completions", post(llm::routes::chat_completions))
        .route("/v1/models", get(llm::routes::models))
        .with_state(gw.llm.clone());
    // The brokered sign-in (the authorization server of a brokered identity provider; 404
    // without one) and the protected-resource metadata.
    let sign_in = Router::new()
        .route(
            "/.well-known/oauth-protected-resource/mcp/{prefix}",
            get(crate::well_known::protected_resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(crate::well_known::gateway_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp-rest",
            get(crate::well_known::gateway_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/v1",
            get(crate::well_known::gateway_metadata),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(crate::oauth::metadata),
        )
        .route("/oauth/register", post(crate::oauth::register))
        .route("/oauth/authorize", get(crate::oauth::authorize))
        .route("/oauth/consent", post(crate::oauth::consent))
        .route("/oauth/callback", get(crate::oauth::callback))
        .route("/oauth/token", post(crate::oauth::token))
        .route("/connect", get(crate::connect::start))
        .route("/connect/signed-in", get(crate::connect::signed_in))
        .route("/connect/key", post(crate::connect::key_proof))
        .route("/connect/approve", post(crate::connect::approve))
        .route("/connect/callback", get(crate::connect::callback))
        .route("/connections", get(crate::connect::connections))
        .route("/connections/disconnect", post(crate::connect::disconnect))
        .route("/connections/sign-out", post(crate::connect::sign_out))
        .route("/oauth/revoke", post(crate::oauth::revoke))
        .with_state(gw.sign_in.clone());
    Router::new()
        .merge(mcp)
        .merge(llm)
        .merge(sign_in)
        .layer(DefaultBodyLimit::max(BODY_CEILING))
        .with_state(gw.clone())
}

/// The internal listener's routes ([`Edge::internal`]).
fn internal_router(gw: &Arc<Gateway>) -> Router {
    let exchange = Router::new()
        // Replica to replica: every message is authenticated as the client's own.
        .route("/mcp-internal/exchange", post(endpoint::internal_exchange))
        .with_state(gw.mcp.clone());
    Router::new()
        .merge(exchange)
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(BODY_CEILING))
        .with_state(gw.clone())
}

/// The client listener's edge: [`edge_answer`], inside the request's audit slot (`audit`),
/// whose record and usage are written when the answer ends.
async fn audited_edge(edge: &Edge, request: Request) -> Response {
    let gw = &edge.gw;
    let headers = request.headers();
    let path = request.uri().path();
    let endpoint = endpoint_of(path);
    let client_trace = audit::trace_of_headers(headers);
    // An MCP message whose headers carry no trace context may carry one in `_meta` (a client
    // without HTTP instrumentation: the Python SDK's): its trace begins once the body is read.
    let in_body = client_trace.is_none()
        && request.method() == axum::http::Method::POST
        && matches!(endpoint, "mcp" | "mcp_single");
    let slot = audit::Slot::new(audit::Arrival {
        at: std::time::SystemTime::now(),
        started: std::time::Instant::now(),
        request_id: audit::request_id(headers.get(REQUEST_ID)),
        endpoint,
        http_method: request.method().clone(),
        path: audit::name(path),
        route: route_of(path),
    });
    if !in_body {
        slot.begin_trace(client_trace);
    }
    use tracing::Instrument as _;
    // The answer's future boxed where it is made: the slot's scope, the span's wrapper and the
    // listener's boxed future (`Edge::call`) then move a pointer, not the answer's state (each
    // move of a future is a copy of it, paid on every request).
    let mut response = slot
        .scope(Box::pin(edge_answer(edge, request)))
        .instrument(slot.span().clone())
        .await;
    // Refused before its body was read (shed, too large, too slow): its trace begins now.
    slot.begin_trace(None);
    if let Ok(id) = header::HeaderValue::from_str(slot.request_id()) {
        response.headers_mut().insert(REQUEST_ID, id);
    }
    let status = response.status().as_u16();
    match axum::body::HttpBody::size_hint(response.body()).exact() {
        Some(len) => {
            slot.finish(status, len, gw.audit_log(), &gw.metrics);
            response
        }
        // A stream: finished when the connection is done with its body.
        None => response.map(|body| {
            axum::body::Body::new(Finishing {
                body,
                bytes_out: 0,
                status,
                slot,
                gw: gw.clone(),
            })
        }),
    }
}

// A header name as a constant: a `&str` name is parsed on every lookup (this one is read on
// every request).
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The endpoint a path is, as records and usage metrics name it.
fn endpoint_of(path: &str) -> &'static str {
    match path {
        "/mcp" => "mcp",
        "/v1/messages" => "llm_messages",
        "/v1/messages/count_tokens" => "llm_count_tokens",
        "/v1/chat/completions" => "llm_chat_completions",
        "/v1/models" => "llm_models",
        p if p.starts_with("/mcp/") => "mcp_single",
        p if p.starts_with("/mcp-rest/") => "rest",
        p if p.starts_with("/oauth/") => "oauth",
        p if p.starts_with("/.well-known/") => "metadata",
        _ => "other",
    }
}

/// The route a path matched, as the router names it (a span's `http.route`); `None` for a path
/// no route serves.
fn route_of(path: &str) -> Option<&'static str> {
    const ROUTES: [&str; 26] = [
        "/mcp",
        "/mcp-rest/tools/list",
        "/mcp-rest/tools/search",
        "/mcp-rest/tools/call",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/chat/completions",
        "/v1/models",
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource/mcp-rest",
        "/.well-known/oauth-protected-resource/v1",
        "/.well-known/oauth-authorization-server",
        "/oauth/register",
        "/oauth/authorize",
        "/oauth/consent",
        "/oauth/callback",
        "/oauth/token",
        "/oauth/revoke",
        "/connect",
        "/connect/signed-in",
        "/connect/key",
        "/connect/approve",
        "/connect/callback",
        "/connections",
        "/connections/disconnect",
        "/connections/sign-out",
    ];
    let one_segment = |prefix: &str| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
    };
    if let Some(route) = ROUTES.iter().find(|r| **r == path) {
        Some(route)
    } else if one_segment("/mcp/") {
        Some("/mcp/{prefix}")
    } else if one_segment("/.well-known/oauth-protected-resource/mcp/") {
        Some("/.well-known/oauth-protected-resource/mcp/{prefix}")
    } else {
        None
    }
}

/// A streamed answer's body, counting what it sends; when the connection drops it (sent, or
/// the client gone), the request is finished.
struct Finishing {
    body: axum::body::Body,
    bytes_out: u64,
    status: u16,
    slot: Arc<audit::Slot>,
    gw: Arc<Gateway>,
}

impl axum::body::HttpBody for Finishing {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        // The relay of the stream happens inside the request's span.
        let span = self.slot.span().clone();
        let _inside = span.enter();
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.bytes_out += data.len() as u64;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Finishing {
    fn drop(&mut self) {
        // (The body's own end, e.g. the LLM loop noting its tokens, came before: the body ends
        // only once its producer is done.)
        self.slot.finish(
            self.status,
            self.bytes_out,
            self.gw.audit_log(),
            &self.gw.metrics,
        );
    }
}

/// The edge (the module's comment says what it does, and why in one place).
async fn edge_answer(edge: &Edge, request: Request) -> Response {
    let gw = &*edge.gw;
    let mut response = admitted_answer(edge, request).await;
    // While stopping, every answer closes its connection, refusals included. Closing an idle
    // kept-alive connection races with a client that is sending on it at that moment (the
    // client sees EOF, and may not retry a POST); an answer that says `Connection: close` does
    // not race: the client reads it before it sends again, and its next request opens a
    // connection the Service sends elsewhere. (HTTP/2 connections get a GOAWAY at shutdown.)
    if gw.is_draining() {
        response.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    response
}

/// The answer to a request past shedding, the body read and the Host/Origin check, or the
/// refusal of whichever of them refused it.
async fn admitted_answer(edge: &Edge, request: Request) -> Response {
    let gw = &*edge.gw;
    // The permit is held until the handler produced the response head.
    let (_permit, request) = match crate::admission::admit(&gw.shedding, request) {
        Ok(admitted) => admitted,
        Err(shed) => {
            audit::note(|n| n.outcome = Some("shed"));
            return *shed;
        }
    };
    let (parts, body) = match read_body_in_time(gw, request).await {
        Ok(read) => read,
        Err(refused) => return *refused,
    };
    // The MCP message whose trace waited for its body begins it from its `_meta` (SEP-414),
    // before any stage's span exists; its handler runs inside that span.
    let late_span = audit::begin_trace_from_message(&body);
    if is_client_face(parts.uri.path()) && !host_and_origin_ok(gw, &parts) {
        let refused = RestError(GatewayError::ForbiddenOrigin).into_response();
        audit::note(|n| n.outcome = Some("forbidden_origin"));
        return refused;
    }
    match late_span {
        Some(span) => {
            use tracing::Instrument as _;
            route(edge, parts, body).instrument(span).await
        }
        None => route(edge, parts, body).await,
    }
}

/// The route of a request past the edge: a POST to the MCP endpoints straight to the MCP face's
/// handler, the rest through the router.
async fn route(edge: &Edge, parts: axum::http::request::Parts, body: bytes::Bytes) -> Response {
    if edge.public
        && parts.method == axum::http::Method::POST
        && let Some(prefix) = mcp_post_prefix(parts.uri.path())
    {
        let prefix = prefix.map(str::to_owned);
        return endpoint::post(&edge.gw.mcp, prefix, parts.headers, body).await;
    }
    use tower::ServiceExt as _;
    // `oneshot` asks the router `poll_ready` and then calls it; its error is `Infallible`.
    let request = axum::http::Request::from_parts(parts, axum::body::Body::from(body));
    let Ok(response) = edge.router.clone().oneshot(request).await;
    response
}

/// Whether `path` is an MCP endpoint the edge hands to the MCP face itself: `/mcp`
/// (`Some(None)`) or `/mcp/{prefix}` (`Some(Some(prefix))`), as the router matches them. A
/// prefix with a percent escape is left to the router, whose decoding (and refusal of what does
/// not decode) the route then has: the edge never decodes differently.
fn mcp_post_prefix(path: &str) -> Option<Option<&str>> {
    if path == "/mcp" {
        return Some(None);
    }
    let prefix = path.strip_prefix("/mcp/")?;
    (!prefix.is_empty() && !prefix.contains(['/', '%'])).then_some(Some(prefix))
}

/// The endpoints clients call through a Service or an Ingress: under DNS-rebinding protection.
/// (Health, metrics, the protected-resource metadata and replica-to-replica calls are reached at
/// pod addresses by kubelets, Prometheus and other replicas.)
fn is_client_face(path: &str) -> bool {
    path == "/mcp"
        || path.starts_with("/mcp/")
        || path.starts_with("/mcp-rest/")
        || path.starts_with("/v1/")
        || path.starts_with("/oauth/")
}

/// Reads a request's whole body within `--body-read-timeout` and no larger than
/// `gateway.maxBodyBytes` (one byte more, so the handler still answers an oversized body in its
/// own protocol): a client that trickles its body, or sends far too much, cannot pin a task and
/// its buffer. The handler then finds the body already in memory; a refusal is the answer.
async fn read_body_in_time(
    gw: &Gateway,
    request: Request,
) -> Result<(axum::http::request::Parts, bytes::Bytes), Box<Response>> {
    let (parts, body) = request.into_parts();
    let limit = gw.table().settings.max_body_bytes.saturating_add(1);
    let read = switchboard_upstream::http_client::read_up_to(body, limit);
    // A body that came with its headers (most do) is read without arming a timer.
    let mut read = std::pin::pin!(read);
    let already = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
    let collected = match already {
        Poll::Ready(collected) => Ok(collected),
        Poll::Pending => tokio::time::timeout(gw.body_read_timeout(), read).await,
    };
    match collected {
        Ok(Ok(Ok(whole))) => {
            audit::note(|n| n.bytes_in = whole.len() as u64);
            Ok((parts, whole))
        }
        Ok(Ok(Err(rest))) => {
            refused_body::discard_in_background(
                axum::body::Body::new(rest),
                refused_body::REFUSED_DISCARD_BYTES,
                refused_body::REFUSED_DISCARD_TIME,
            );
            Err(Box::new(
                RestError(GatewayError::PayloadTooLarge { limit: limit - 1 }).into_response(),
            ))
        }
        Ok(Err(_)) => Err(Box::new(
            (
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
            )
                .into_response(),
        )),
        Err(_) => Err(Box::new(
            (
                StatusCode::REQUEST_TIMEOUT,
                [(header::CONNECTION, "close")],
                "the request body did not arrive in time",
            )
                .into_response(),
        )),
    }
}

async fn readyz(State(gw): State<Arc<Gateway>>) -> Response {
    if gw.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "stopping").into_response()
    } else if gw.is_ready() {
        match gw.store_detail().await {
            Some(detail) => (StatusCode::OK, format!("ready; {detail}")).into_response(),
            None => (StatusCode::OK, "ready").into_response(),
        }
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "no snapshot loaded yet").into_response()
    }
}

async fn metrics(State(gw): State<Arc<Gateway>>) -> Response {
    gw.upstream.report_cache_sizes();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        gw.metrics.encode(),
    )
        .into_response()
}

/// DNS-rebinding protection: `Host` must be loopback or a configured name, and a browser's
/// `Origin`, when present, must be loopback or configured.
fn host_and_origin_ok(gw: &Gateway, request: &axum::http::request::Parts) -> bool {
    let table = gw.table();
    let settings = &table.settings;
    let host = request
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri.authority().map(|a| a.as_str()));
    let host_ok =
        host.is_some_and(|h| is_loopback_host(h) || matches_allowed(h, &settings.allowed_hosts));
    let origin_ok = match request
        .headers
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
    {
        None => true,
        Some(origin) => {
            let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
            is_loopback_host(origin_host)
                || settings.allowed_origins.iter().any(|o| o == origin)
                || matches_allowed(origin_host, &settings.allowed_hosts)
        }
    };
    host_ok && origin_ok
}

fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    host.rsplit_once(':').map_or(host, |(h, port)| {
        if port.chars().all(|c| c.is_ascii_digit()) {
            h
        } else {
            host
        }
    })
}

fn is_loopback_host(host: &str) -> bool {
    let bare = strip_port(host);
    // IPv4 first, as `IpAddr`'s parser tries it, without that parser's dispatch (most hosts
    // are IPv4 addresses or names): the same answer for a few hundred instructions less.
    bare == "localhost"
        || match bare.parse::<std::net::Ipv4Addr>() {
            Ok(ip) => ip.is_loopback(),
            Err(_) => bare
                .parse::<std::net::Ipv6Addr>()
                .is_ok_and(|ip| ip.is_loopback()),
        }
}

/// A configured entry matches the host with or without its port.
fn matches_allowed(host: &str, allowed: &[String]) -> bool {
    allowed
        .iter()
        .any(|a| a == "*" || a == host || a == strip_port(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_configured_hosts() {
        assert!(is_loopback_host("127.0.0.1:8080"));
        assert!(is_loopback_host("localhost"));
        assert!(is_loopback_host("[::1]:80"));
        assert!(!is_loopback_host("evil.example:80"));
        // The same answer as `IpAddr`'s parser, on the cases where the two could part.
        for host in [
            "127.0.0.1",
            "127.255.1.2:80",
            "128.0.0.1",
            "[0:0:0:0:0:0:0:1]:80",
            "[0::1]",
            "[::1]",
            "[::ffff:127.0.0.1]",
            "[::127.0.0.1]:1",
            "127.1",
            "0177.0.0.1",
            "127.0.0.1.",
            "[1::]",
            "",
            "localhost:1",
        ] {
            let bare = strip_port(host);
            let by_ip_addr = bare == "localhost"
                || bare
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            assert_eq!(is_loopback_host(host), by_ip_addr, "{host}");
        }
        let allowed = vec!["switchboard-gateway.ns.svc".to_string()];
        assert!(matches_allowed("switchboard-gateway.ns.svc:8080", &allowed));
        assert!(!matches_allowed("other.svc", &allowed));
    }

    /// The edge takes to the MCP face exactly the POSTs the router routes there, with the
    /// prefix the router's `Path` reads; what it leaves (a percent escape) the router routes.
    /// The router is the oracle: a router of the two routes alone, as `router` declares them.
    #[tokio::test]
    async fn the_edge_takes_the_mcp_posts_the_router_would_route_there() {
        use axum::body::Body;
        use axum::extract::Path;
        use http_body_util::BodyExt as _;
        use tower::ServiceExt as _;
        let routes: Router = Router::new()
            .route("/mcp", post(|| async { "aggregate".to_string() }))
            .route(
                "/mcp/{prefix}",
                post(|Path(prefix): Path<String>| async move { format!("single {prefix}") }),
            );
        let mut edge_took = 0;
        for uri in [
            "/mcp",
            "/mcp?x=1",
            "/mcp/",
            "/mcp/github",
            "/mcp/github?x=/y",
            "/mcp/git-hub.v2_x~",
            "/mcp/git%20hub",
            "/mcp/a%2Fb",
            "/mcp/%FF",
            "/mcp/a/b",
            "/mcp/github/",
            "/mcp//",
            "//mcp",
            "/mcpx",
            "/MCP",
            "/mcp-rest/tools/call",
            "/v1/messages",
        ] {
            let request = axum::http::Request::post(uri)
                .body(Body::empty())
                .expect("a request");
            let path = request.uri().path().to_string();
            let Ok(response) = routes.clone().oneshot(request).await;
            let status = response.status();
            let text = response
                .into_body()
                .collect()
                .await
                .expect("a body")
                .to_bytes();
            let routed =
                (status == StatusCode::OK).then(|| String::from_utf8_lossy(&text).to_string());
            match mcp_post_prefix(&path) {
                Some(None) => assert_eq!(routed.as_deref(), Some("aggregate"), "{uri}"),
                Some(Some(prefix)) => {
                    assert_eq!(routed, Some(format!("single {prefix}")), "{uri}")
                }
                None => assert!(
                    routed.is_none() || path.contains('%'),
                    "{uri}: the router routes it ({routed:?}), the edge does not"
                ),
            }
            edge_took += usize::from(mcp_post_prefix(&path).is_some());
        }
        assert_eq!(edge_took, 5);
    }

    #[test]
    fn a_span_names_the_route_a_path_matched_never_the_path() {
        assert_eq!(route_of("/mcp"), Some("/mcp"));
        assert_eq!(route_of("/mcp/github"), Some("/mcp/{prefix}"));
        assert_eq!(route_of("/v1/messages"), Some("/v1/messages"));
        assert_eq!(
            route_of("/.well-known/oauth-protected-resource/mcp/github"),
            Some("/.well-known/oauth-protected-resource/mcp/{prefix}")
        );
        // Paths no route serves name no route (a prefix would let any path be a span name).
        for unknown in ["/mcp/a/b", "/mcp/", "/v1/other", "/anything"] {
            assert_eq!(route_of(unknown), None, "{unknown}");
        }
    }
}
