//! The HTTP routers: the public one (MCP, REST, the LLM APIs, sign-in) and the internal one
//! (health, metrics, the replica hand-off), each behind one edge layer that
//! does, in this order, what every request needs before a handler sees it:
//!
//! 1. shedding: past the replica's bounds a request is refused before anything else happens
//!    to it (no body read, no parse, no upstream I/O);
//! 2. the body read whole, in time and under `gateway.maxBodyBytes`;
//! 3. DNS-rebinding protection on the client faces (`Host` and `Origin`);
//! 4. while stopping, `Connection: close` on every answer.
//!
//! One layer rather than one per job: each `from_fn` layer costs a boxed future and a pass
//! through the router's service stack on every call (about a tenth of the instructions of a
//! proxied call, measured in BENCHMARKS.md).

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderName, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

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

pub fn router(gw: Arc<Gateway>) -> Router {
    // Each face gets its own context as state; the edge's layers and routes take the gateway.
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
        .layer(middleware::from_fn_with_state(gw.clone(), audited_edge))
        .with_state(gw)
}

/// The internal listener's router (`--internal-listen`): what kubelets, Prometheus and other
/// replicas reach at a pod address, and clients never should (metrics are labelled with key
/// and server names; the hand-off route is for replicas). Behind the same edge layer: never
/// shed (admission exempts these paths), bodies read in time, `Connection: close` while
/// stopping.
pub fn internal_router(gw: Arc<Gateway>) -> Router {
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
        .layer(middleware::from_fn_with_state(gw.clone(), edge))
        .with_state(gw)
}

/// The client listener's edge: [`edge`], inside the request's audit slot (`audit`), whose
/// record and usage are written when the answer ends.
async fn audited_edge(State(gw): State<Arc<Gateway>>, request: Request, next: Next) -> Response {
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
    // boxed future `from_fn` makes of this function then move a pointer, not the answer's
    // state (each move of a future is a copy of it, paid on every request).
    let mut response = slot
        .scope(Box::pin(edge_answer(&gw, request, next)))
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
                gw,
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

/// The internal listener's edge: [`edge`] alone (no audit record: probes and scrapes).
async fn edge(State(gw): State<Arc<Gateway>>, request: Request, next: Next) -> Response {
    edge_answer(&gw, request, next).await
}

/// The edge layer (the module's comment says what it does, and why in one layer).
async fn edge_answer(gw: &Gateway, request: Request, next: Next) -> Response {
    let mut response = admitted_answer(gw, request, next).await;
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
async fn admitted_answer(gw: &Gateway, request: Request, next: Next) -> Response {
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
    let request = Request::from_parts(parts, axum::body::Body::from(body));
    if is_client_face(request.uri().path()) && !host_and_origin_ok(gw, &request) {
        let refused = RestError(GatewayError::ForbiddenOrigin).into_response();
        audit::note(|n| n.outcome = Some("forbidden_origin"));
        return refused;
    }
    match late_span {
        Some(span) => {
            use tracing::Instrument as _;
            next.run(request).instrument(span).await
        }
        None => next.run(request).await,
    }
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
    let read = read_body_up_to(body, limit);
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
                rest,
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

/// The body whole, or, once it passes `limit` bytes, the part not read yet. (One chunk, the
/// common case, is kept as it came: no copy.)
async fn read_body_up_to(
    mut body: axum::body::Body,
    limit: usize,
) -> Result<Result<bytes::Bytes, axum::body::Body>, axum::Error> {
    use http_body_util::BodyExt;
    let mut first: Option<bytes::Bytes> = None;
    let mut more: Option<bytes::BytesMut> = None;
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue; // trailers
        };
        len += data.len();
        if len > limit {
            return Ok(Err(body));
        }
        match (&mut first, &mut more) {
            (None, _) => first = Some(data),
            (Some(head), None) => {
                let mut buf = bytes::BytesMut::with_capacity(len);
                buf.extend_from_slice(head);
                buf.extend_from_slice(&data);
                more = Some(buf);
            }
            (Some(_), Some(buf)) => buf.extend_from_slice(&data),
        }
    }
    Ok(Ok(match (more, first) {
        (Some(buf), _) => buf.freeze(),
        (None, Some(head)) => head,
        (None, None) => bytes::Bytes::new(),
    }))
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
fn host_and_origin_ok(gw: &Gateway, request: &Request) -> bool {
    let table = gw.table();
    let settings = &table.settings;
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    let host_ok =
        host.is_some_and(|h| is_loopback_host(h) || matches_allowed(h, &settings.allowed_hosts));
    let origin_ok = match request
        .headers()
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
