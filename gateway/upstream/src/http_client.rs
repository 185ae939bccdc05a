//! The HTTP client every outbound call of the gateway uses (upstream MCP servers, their token
//! endpoints and metadata, LLM providers, other replicas): hyper-util's pooled client straight,
//! with TLS by rustls (HTTP/2 or HTTP/1.1 by ALPN) and the address-policy resolver.
//!
//! Why not a higher-level client: the gateway follows redirects itself (credentials never cross
//! origins), bounds each exchange by one deadline of its own, needs the raw status of every
//! answer, and sends an upstream's `tls.serverName` as the SNI. A general client's redirect
//! policy, timeouts, decompression and proxy lookup are all switched off or in the way; what is
//! left is this file, and it costs a third of the instructions per call.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, header};
use http_body_util::{BodyDataStream, BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use rustls::pki_types::ServerName;
use switchboard_core::table::{Endpoint, UpstreamRoots};
use switchboard_snapshot::{Denied, NetworkPolicy, ScopedPolicy, UpstreamNetworks};

/// An answer whose body is still to be read (whole, or as a stream).
pub type HttpResponse = Response<Incoming>;

/// A body as a stream of chunks, for relaying.
pub type ByteStream = BodyDataStream<Incoming>;

mod connections;

use connections::{Connections, Failure};

/// How a client connects: TCP through the policy's resolver, then TLS when the URL says so.
type Connector = HttpsConnector<HttpConnector<PolicyResolver>>;

/// A client: a handle, cheap to clone; clones share connections (`connections`).
#[derive(Clone, Debug)]
pub struct HttpClient {
    connections: Arc<Connections>,
}

/// No HTTP client can be built from a set of TLS settings (a CA bundle, a client certificate
/// and key): what in them, named (`tls::describe`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("TLS settings unusable: {0}")]
pub struct ClientBuildError(pub(crate) String);

/// Why an exchange failed, in words that name the cause and never the URL (which may carry
/// credentials in its query).
#[derive(Debug, Clone, thiserror::Error)]
pub enum HttpError {
    /// The name resolved only to addresses a policy refuses.
    #[error("{0}")]
    Denied(Denied),
    /// A refused certificate, a required client certificate, … (see `tls::describe`).
    #[error("{0}")]
    Tls(String),
    /// An HTTPS peer hung up during or right after the handshake without a TLS close (see
    /// `tls::hung_up_detail`: what the likely cause is depends on the certificate offered).
    #[error("TLS: the upstream closed the connection without a TLS close")]
    HungUp,
    #[error("connection refused or unreachable")]
    Connect,
    #[error("request failed")]
    Request,
    #[error("broken response body")]
    Body,
    #[error("response larger than {0} bytes")]
    TooLarge(usize),
    #[error("timed out")]
    Timeout,
    #[error("the URL cannot be sent: {0}")]
    Url(&'static str),
}

impl HttpError {
    /// The failure in words for a server's condition or a client's error; a hang-up on HTTPS is
    /// told by whether a client certificate was offered (`tls::hung_up_detail`).
    pub fn detail(&self, presents_certificate: bool) -> String {
        match self {
            HttpError::HungUp => crate::tls::hung_up_detail(presents_certificate),
            other => other.to_string(),
        }
    }
}

impl HttpClient {
    /// A client whose connections resolve names under `networks` (and a server's own policy),
    /// and speak TLS with `tls`; `server_name` is sent as SNI and checked in the certificate
    /// instead of the URL's host.
    pub fn new(
        networks: Arc<ArcSwap<NetworkPolicy>>,
        scoped: Option<Arc<ScopedPolicy>>,
        tls: rustls::ClientConfig,
        server_name: Option<ServerName<'static>>,
    ) -> HttpClient {
        let mut http = HttpConnector::new_with_resolver(PolicyResolver {
            policy: networks,
            scoped,
        });
        http.enforce_http(false);
        http.set_nodelay(true);
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http();
        let builder = match server_name {
            Some(name) => builder.with_server_name_resolver(FixedServerNameResolver::new(name)),
            None => builder,
        };
        let connector = builder.enable_http1().enable_http2().wrap_connector(http);
        HttpClient {
            connections: Arc::new(Connections::new(connector)),
        }
    }

    /// A client under the default network policy and the public roots, with no TLS settings
    /// of any upstream (the operator's probes of a model before any snapshot, tests).
    pub fn plain() -> Result<HttpClient, ClientBuildError> {
        let networks = NetworkPolicy::parse(&UpstreamNetworks::default()).unwrap_or_default();
        let tls = crate::tls::client_config(&UpstreamRoots::default(), None)
            .map_err(|e| ClientBuildError(crate::tls::describe(&e)))?;
        Ok(HttpClient::new(
            Arc::new(ArcSwap::from_pointee(networks)),
            None,
            tls,
            None,
        ))
    }

    /// A request to `url` (its fragment is never sent). User and password in the URL become
    /// Basic authentication, as browsers and curl do, and are not sent in the request line.
    pub fn request(&self, method: Method, url: &url::Url) -> Outgoing<'_> {
        let mut headers = HeaderMap::new();
        let uri = if url.username().is_empty() && url.password().is_none() {
            url[..url::Position::AfterQuery].parse::<http::Uri>()
        } else {
            // The URL holds them percent-encoded; the header holds the bytes they encode.
            let decoded =
                |part: &str| percent_encoding::percent_decode_str(part).collect::<Vec<u8>>();
            let mut pair = decoded(url.username());
            pair.push(b':');
            pair.extend(decoded(url.password().unwrap_or_default()));
            use base64::Engine;
            let basic = base64::engine::general_purpose::STANDARD.encode(pair);
            if let Ok(value) = HeaderValue::from_str(&format!("Basic {basic}")) {
                headers.insert(header::AUTHORIZATION, value);
            }
            let mut bare = url.clone();
            let _ = bare.set_username("");
            let _ = bare.set_password(None);
            bare[..url::Position::AfterQuery].parse::<http::Uri>()
        };
        Outgoing {
            client: self,
            method,
            uri,
            host: None,
            https: url.scheme() == "https",
            headers,
            body: Bytes::new(),
        }
    }

    /// A request to a server's own URL, made once (`Endpoint`): what `request` makes of that
    /// URL, without making it again.
    pub fn request_to(&self, method: Method, endpoint: &Endpoint) -> Outgoing<'_> {
        let https = endpoint.uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        Outgoing {
            client: self,
            method,
            https,
            uri: Ok(endpoint.uri.clone()),
            // Over TLS the connection may turn out HTTP/2 (ALPN), where hyper-util sends the
            // authority as `:authority` and no `Host`; it writes `Host` itself for an HTTP/1.1
            // one. A plain `http` URL is always HTTP/1.1 here (no prior-knowledge HTTP/2).
            host: (!https).then(|| endpoint.host.clone()),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    }

    pub fn get(&self, url: &url::Url) -> Outgoing<'_> {
        self.request(Method::GET, url)
    }

    pub fn post(&self, url: &url::Url) -> Outgoing<'_> {
        self.request(Method::POST, url)
    }
}

/// One request being put together.
pub struct Outgoing<'c> {
    client: &'c HttpClient,
    method: Method,
    uri: Result<http::Uri, http::uri::InvalidUri>,
    /// The `Host` header made with the endpoint; without one, hyper-util writes it from `uri`.
    host: Option<HeaderValue>,
    https: bool,
    headers: HeaderMap,
    body: Bytes,
}

impl Outgoing<'_> {
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// These headers too (replacing one of the same name set before).
    pub fn headers(mut self, headers: HeaderMap) -> Self {
        if self.headers.is_empty() {
            self.headers = headers;
        } else {
            self.headers.extend(headers);
        }
        self
    }

    pub fn body(mut self, content_type: &'static str, body: impl Into<Bytes>) -> Self {
        self.headers
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        self.body = body.into();
        self
    }

    /// An `application/x-www-form-urlencoded` body.
    pub fn form(self, pairs: &[(&str, String)]) -> Self {
        let encoded = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())))
            .finish();
        self.body("application/x-www-form-urlencoded", encoded)
    }

    pub fn json(self, value: &impl serde::Serialize) -> Self {
        self.body(
            "application/json",
            serde_json::to_vec(value).unwrap_or_default(),
        )
    }

    /// Sends the request; the answer's body is left to read. No deadline of its own: the
    /// caller bounds the whole exchange (redirects and body included) with one.
    ///
    /// A traced request's outgoing call is an HTTP client span (named by its method, as the
    /// HTTP conventions name a client span without a URL template), failed when no answer
    /// came (`error.type`: see `failure_type`) or the answer is 4xx/5xx (`error.type`: the status).
    pub async fn send(self) -> Result<HttpResponse, HttpError> {
        let uri = self.uri.map_err(|_| HttpError::Url("not a valid URI"))?;
        // A traced request's outgoing calls are its children; an untraced one's are not spans.
        let span = if switchboard_telemetry::tracing_on() && !tracing::Span::current().is_disabled()
        {
            let port = uri.port_u16().unwrap_or(if self.https { 443 } else { 80 });
            tracing::info_span!(
                target: switchboard_telemetry::SPAN_TARGET,
                "upstream request",
                otel.name = %self.method,
                otel.kind = "client",
                http.request.method = %self.method,
                server.address = uri.host().unwrap_or("-"),
                server.port = i64::from(port),
                url.path = uri.path(),
                http.response.status_code = tracing::field::Empty,
            )
        } else {
            tracing::Span::none()
        };
        let mut request = Request::new(Full::new(self.body));
        *request.method_mut() = self.method;
        *request.uri_mut() = uri;
        *request.headers_mut() = self.headers;
        if let Some(host) = self.host {
            // (A `Host` set among the headers stays, as hyper-util keeps it.)
            request.headers_mut().entry(header::HOST).or_insert(host);
        }
        {
            let _inside = span.enter();
            switchboard_core::audit::propagate(request.headers_mut());
        }
        use tracing::Instrument as _;
        // (Boxed as hyper-util's answer future was: the exchange is moved through the wrappers
        // below and the callers' futures, and a pointer is cheaper to move than its state.)
        let exchange = Box::pin(self.client.connections.send(request)).instrument(span.clone());
        let (answered, asked) = crate::tls::noting_certificate_requests(exchange).await;
        let answered = match answered {
            Ok(answered) => answered,
            Err(e) => {
                let failed = classify(&e, self.https, asked);
                if !span.is_disabled() {
                    switchboard_telemetry::span::fail(
                        &span,
                        failure_type(&e, &failed),
                        Some(failed.to_string()),
                    );
                }
                return Err(failed);
            }
        };
        let status = answered.status().as_u16();
        span.record("http.response.status_code", i64::from(status));
        if status >= 400 {
            // (The status says why: no description, as the HTTP conventions ask.)
            switchboard_telemetry::span::fail(&span, status.to_string(), None);
        }
        switchboard_core::audit::note(|n| n.upstream_status = Some(status));
        Ok(answered)
    }
}

/// The `error.type` of an exchange that got no answer: the operating system's reason when the
/// connection failed for one (`connection_refused`, `connection_reset`, `timed_out`,
/// `host_unreachable`, `network_unreachable`, `address_not_available`), else the kind of
/// failure (`address_denied`, `tls`, `tls_hung_up`, `connect`, `request`). Low-cardinality, as
/// the conventions ask; docs/audit.md lists them.
fn failure_type(error: &Failure, failed: &HttpError) -> &'static str {
    let cause: &(dyn std::error::Error + 'static) = error;
    let mut source = Some(cause);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            let named = match io.kind() {
                K::ConnectionRefused => Some("connection_refused"),
                K::ConnectionReset => Some("connection_reset"),
                K::ConnectionAborted => Some("connection_aborted"),
                K::TimedOut => Some("timed_out"),
                K::HostUnreachable => Some("host_unreachable"),
                K::NetworkUnreachable => Some("network_unreachable"),
                K::AddrNotAvailable => Some("address_not_available"),
                _ => None,
            };
            if let Some(named) = named {
                return named;
            }
        }
        source = cause.source();
    }
    match failed {
        HttpError::Denied(_) => "address_denied",
        HttpError::Tls(_) => "tls",
        HttpError::HungUp => "tls_hung_up",
        HttpError::Connect => "connect",
        _ => "request",
    }
}

/// What a failed exchange means: the resolver's refusal (which rule, an address, never the
/// URL), a TLS failure (why; `asked`: what the server asked of the client certificate during
/// the handshake), or the kind of failure.
fn classify(error: &Failure, https: bool, asked: crate::tls::CertificateRequest) -> HttpError {
    let cause: &(dyn std::error::Error + 'static) = error;
    let mut source = Some(cause);
    while let Some(cause) = source {
        if let Some(denied) = cause.downcast_ref::<Denied>() {
            return HttpError::Denied(denied.clone());
        }
        source = cause.source();
    }
    if let Some(detail) = crate::tls::failure_in(error, asked) {
        return HttpError::Tls(detail);
    }
    if https && crate::tls::hung_up(error) {
        // A server that asked for the certificate the gateway lacks, then hung up, refused the
        // handshake without it: said as fact, not as the likely cause.
        if asked == crate::tls::CertificateRequest::NoneConfigured {
            return HttpError::Tls(crate::tls::certificate_required_detail(
                "it closed the connection",
            ));
        }
        return HttpError::HungUp;
    }
    if https && asked == crate::tls::CertificateRequest::NoneConfigured && never_sent(error) {
        // The same refusal, seen later: a TLS 1.3 client's handshake is done before the server
        // has read its (empty) certificate, so the connection is handed over as ready, and when
        // the server's alert ends it before the request went out, hyper says only that the
        // connection "was not ready" (the alert went with the connection's task).
        return HttpError::Tls(crate::tls::certificate_required_detail(
            "it closed the connection before the request was sent",
        ));
    }
    if error.is_connect() {
        HttpError::Connect
    } else {
        HttpError::Request
    }
}

/// Whether the exchange ended before its request was sent on the connection (hyper's
/// cancelled request).
fn never_sent(error: &Failure) -> bool {
    crate::tls::causes(error).any(|cause| {
        cause
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
    })
}

/// A whole body, at most `limit` bytes.
pub async fn read_limited(body: Incoming, limit: usize) -> Result<Bytes, HttpError> {
    match read_up_to(body, limit).await {
        Ok(Ok(whole)) => Ok(whole),
        Ok(Err(_rest)) => Err(HttpError::TooLarge(limit)),
        Err(_) => Err(HttpError::Body),
    }
}

/// A body whole, or, once it passes `limit` bytes, the body with what is not read yet (a
/// server refusing a request may still read it away). One chunk, the common case, is kept as
/// it came: no copy, none of a general collector's queue of chunks (`Collect` cost a call
/// about 600 instructions more, for each of its two bodies).
pub async fn read_up_to<B>(mut body: B, limit: usize) -> Result<Result<Bytes, B>, B::Error>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
{
    let mut first: Option<Bytes> = None;
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
        (None, None) => Bytes::new(),
    }))
}

/// A body as a stream of its chunks.
pub fn byte_stream(response: HttpResponse) -> ByteStream {
    BodyDataStream::new(response.into_body())
}

/// The connect-time half of `gateway.upstreamNetworks` (the rule is in the snapshot crate's
/// `networks.rs`). Validation refuses URLs whose host is a denied literal address; this resolver
/// refuses names that resolve to one, so a name cannot smuggle a metadata or API server address
/// past validation (DNS answers change; this runs on every new connection). Redirect targets are
/// checked by the client before it follows them.
///
/// A resolver sees no port, so an address listed in `denyEndpoints` is refused on every port
/// when it is reached by name (on its own port when reached by a literal address). A server with
/// its own `upstreamPolicy` gets its own client, whose resolver applies both policies: a resolver
/// only sees a host name, not which server asked.
#[derive(Clone)]
struct PolicyResolver {
    policy: Arc<ArcSwap<NetworkPolicy>>,
    scoped: Option<Arc<ScopedPolicy>>,
}

impl tower_service::Service<Name> for PolicyResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let policy = self.policy.clone();
        let scoped = self.scoped.clone();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let policy = policy.load();
            let mut denied = None;
            let allowed: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|addr| {
                    let scoped = scoped.as_ref().map_or(Ok(()), |s| s.check_ip(addr.ip()));
                    match policy.check_any_port(addr.ip()).and(scoped) {
                        Ok(()) => true,
                        Err(e) => {
                            denied.get_or_insert(e);
                            false
                        }
                    }
                })
                .collect();
            match (allowed.is_empty(), denied) {
                (true, Some(denied)) => Err(Box::new(denied) as Self::Error),
                _ => Ok(allowed.into_iter()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper_util::rt::TokioExecutor;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use std::sync::Mutex;
    use switchboard_snapshot::TlsMaterial;

    /// A private CA and a serving certificate for `name` under it.
    fn ca_and_leaf(name: &str) -> (CertificateDer<'static>, rustls::ServerConfig) {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A subject of its own: a client finds a certificate's issuer by name.
        static SERIAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, format!("test CA {serial}"));
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap();
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .unwrap();
        (ca_cert.der().clone(), server)
    }

    /// What an HTTPS server saw of one connection: the SNI, the HTTP version spoken and the
    /// last request's `Host` header.
    #[derive(Default, Debug, Clone, PartialEq)]
    struct Seen {
        sni: Option<String>,
        version: Option<http::Version>,
        host: Option<String>,
        /// TLS connections accepted.
        connections: usize,
    }

    /// An HTTPS server on loopback offering `alpn`, answering every request with 200.
    async fn https_server(
        mut config: rustls::ServerConfig,
        alpn: &[&[u8]],
    ) -> (SocketAddr, Arc<Mutex<Seen>>) {
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    continue;
                };
                {
                    let mut seen = record.lock().unwrap();
                    seen.sni = tls.get_ref().1.server_name().map(str::to_owned);
                    seen.connections += 1;
                }
                let record = record.clone();
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let mut seen = record.lock().unwrap();
                    seen.version = Some(request.version());
                    seen.host = request
                        .headers()
                        .get(header::HOST)
                        .and_then(|h| h.to_str().ok())
                        .map(str::to_owned);
                    drop(seen);
                    async {
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(
                            "ok",
                        ))))
                    }
                });
                tokio::spawn(
                    hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .into_owned(),
                );
            }
        });
        (address, seen)
    }

    fn client(ca: &CertificateDer<'static>, server_name: Option<&str>) -> HttpClient {
        let material = TlsMaterial {
            roots: vec![ca.clone()],
            client: None,
            server_name: server_name.map(|n| ServerName::try_from(n.to_string()).unwrap()),
            key: 1,
        };
        let config = crate::tls::client_config(&UpstreamRoots::default(), Some(&material)).unwrap();
        let networks = NetworkPolicy::parse(&UpstreamNetworks::default()).unwrap_or_default();
        HttpClient::new(
            Arc::new(ArcSwap::from_pointee(networks)),
            None,
            config,
            material.server_name.clone(),
        )
    }

    async fn get(client: &HttpClient, address: SocketAddr) -> Result<http::StatusCode, HttpError> {
        let url = url::Url::parse(&format!("https://{address}/mcp")).unwrap();
        Ok(client.get(&url).send().await?.status())
    }

    #[tokio::test]
    async fn https_upstreams_get_h2_by_alpn_and_the_configured_server_name_as_sni() {
        let (ca, config) = ca_and_leaf("mcp.corp.internal");
        let (address, seen) = https_server(config, &[b"h2", b"http/1.1"]).await;
        let http = client(&ca, Some("mcp.corp.internal"));
        assert_eq!(get(&http, address).await.unwrap(), 200);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.sni.as_deref(), Some("mcp.corp.internal"));
        assert_eq!(seen.version, Some(http::Version::HTTP_2));
    }

    /// A request to a server's own URL made once (`request_to`) is what `request` sends: over
    /// HTTP/2 the authority goes as `:authority` with no `Host` header, over HTTP/1.1 `Host`
    /// names the host and port.
    #[tokio::test]
    async fn a_request_to_an_endpoint_carries_host_as_its_http_version_does() {
        for (alpn, version, host) in [
            (&[&b"h2"[..], b"http/1.1"][..], http::Version::HTTP_2, false),
            (&[&b"http/1.1"[..]][..], http::Version::HTTP_11, true),
        ] {
            let (ca, config) = ca_and_leaf("mcp.corp.internal");
            let (address, seen) = https_server(config, alpn).await;
            let http = client(&ca, Some("mcp.corp.internal"));
            let url = url::Url::parse(&format!("https://{address}/mcp")).unwrap();
            let endpoint = Endpoint::of(&url).expect("an endpoint");
            for outgoing in [http.get(&url), http.request_to(Method::GET, &endpoint)] {
                assert_eq!(outgoing.send().await.unwrap().status(), 200);
                let seen = seen.lock().unwrap().clone();
                assert_eq!(seen.version, Some(version));
                let expected = host.then(|| address.to_string());
                assert_eq!(seen.host, expected, "{version:?}");
            }
        }
    }

    /// An origin that negotiated HTTP/2 gets one connection, which requests one after another
    /// and at once share.
    #[tokio::test]
    async fn requests_to_an_h2_upstream_share_one_connection() {
        let (ca, config) = ca_and_leaf("mcp.corp.internal");
        let (address, seen) = https_server(config, &[b"h2", b"http/1.1"]).await;
        let http = client(&ca, Some("mcp.corp.internal"));
        assert_eq!(get(&http, address).await.unwrap(), 200);
        assert_eq!(get(&http, address).await.unwrap(), 200);
        let at_once = (0..4).map(|_| get(&http, address));
        for answer in futures_util::future::join_all(at_once).await {
            assert_eq!(answer.unwrap(), 200);
        }
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.version, Some(http::Version::HTTP_2));
        assert_eq!(seen.connections, 1);
    }

    #[tokio::test]
    async fn an_http1_only_upstream_gets_http1() {
        let (ca, config) = ca_and_leaf("mcp.corp.internal");
        let (address, seen) = https_server(config, &[b"http/1.1"]).await;
        let http = client(&ca, Some("mcp.corp.internal"));
        assert_eq!(get(&http, address).await.unwrap(), 200);
        assert_eq!(seen.lock().unwrap().version, Some(http::Version::HTTP_11));
    }

    #[tokio::test]
    async fn without_the_server_name_the_address_is_checked_and_refused() {
        // The control case: the same server and CA, dialed by address with no serverName. No
        // SNI goes out for an address, and the certificate does not name it.
        let (ca, config) = ca_and_leaf("mcp.corp.internal");
        let (address, seen) = https_server(config, &[b"h2", b"http/1.1"]).await;
        let http = client(&ca, None);
        match get(&http, address).await {
            Err(HttpError::Tls(detail)) => {
                assert!(
                    detail.contains("not valid for the expected name"),
                    "{detail}"
                )
            }
            other => panic!("refused by name, got {other:?}"),
        }
        assert_eq!(seen.lock().unwrap().version, None, "no request was served");
        // And another CA is refused as unknown, whatever the name.
        let (other_ca, _) = ca_and_leaf("mcp.corp.internal");
        let stranger = client(&other_ca, Some("mcp.corp.internal"));
        match get(&stranger, address).await {
            Err(HttpError::Tls(detail)) => {
                assert!(detail.contains("unknown authority"), "{detail}")
            }
            other => panic!("refused as unknown, got {other:?}"),
        }
    }

    /// How a TLS 1.2 server that requires a client certificate answers a client without one.
    #[derive(Clone, Copy)]
    enum Refusal {
        /// A bare `handshake_failure` alert, as OpenSSL (and so most servers) sends.
        HandshakeFailure,
        /// The connection closed with no alert.
        HangUp,
    }

    /// The `certificate_required` alert record, plaintext (sent before the server's
    /// ChangeCipherSpec): type 21 (alert), TLS 1.2, 2 bytes, fatal (2), 116.
    const CERTIFICATE_REQUIRED_RECORD: [u8; 7] = [21, 3, 3, 0, 2, 2, 116];

    /// A TLS 1.2-only server requiring a client certificate (issued by its own CA, which the
    /// client has none of), refusing a client without one as `refusal` says. rustls's server
    /// sends `certificate_required` even in TLS 1.2 (an alert TLS 1.2 does not have); OpenSSL
    /// sends `handshake_failure`. A relay in front of the rustls server makes it answer like
    /// OpenSSL: it rewrites that one alert record, or closes the connection in its place.
    async fn tls12_server_requiring_a_client_certificate(
        refusal: Refusal,
    ) -> (SocketAddr, CertificateDer<'static>) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let (ca, serving) = ca_and_leaf("mcp.corp.internal");
        let (client_ca, _) = ca_and_leaf("clients");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut client_roots = rustls::RootCertStore::empty();
        client_roots.add(client_ca).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(client_roots),
            provider.clone(),
        )
        .build()
        .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS12])
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(serving.cert_resolver.clone());
        let (server, _) = https_server(config, &[b"http/1.1"]).await;
        let relay = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = relay.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((client, _)) = relay.accept().await {
                let Ok(upstream) = tokio::net::TcpStream::connect(server).await else {
                    continue;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = upstream.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                });
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = server_read.read(&mut buf).await {
                        let chunk = &mut buf[..n];
                        if n == 0 {
                            break;
                        }
                        if let Some(at) = chunk
                            .windows(CERTIFICATE_REQUIRED_RECORD.len())
                            .position(|w| w == CERTIFICATE_REQUIRED_RECORD)
                        {
                            match refusal {
                                Refusal::HandshakeFailure => chunk[at + 6] = 40,
                                Refusal::HangUp => break, // dropping the halves closes it
                            }
                        }
                        if client_write.write_all(chunk).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (address, ca)
    }

    #[tokio::test]
    async fn a_tls12_server_that_asked_for_a_client_certificate_is_named_when_it_refuses() {
        for refusal in [Refusal::HandshakeFailure, Refusal::HangUp] {
            let (address, ca) = tls12_server_requiring_a_client_certificate(refusal).await;
            let http = client(&ca, Some("mcp.corp.internal"));
            match get(&http, address).await {
                Err(HttpError::Tls(detail)) => assert!(
                    detail.contains("requires a client certificate (tls.clientCertificate)")
                        && detail.contains("asked for one"),
                    "{detail}"
                ),
                other => panic!("a named refusal, got {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_hang_up_without_a_certificate_request_is_not_blamed_on_the_certificate() {
        // The control: a server that asks for nothing and hangs up mid-handshake is still only
        // "closed the connection" (its likely cause, not a certificate request it never made).
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                drop(tcp);
            }
        });
        let (ca, _) = ca_and_leaf("mcp.corp.internal");
        let http = client(&ca, Some("mcp.corp.internal"));
        match get(&http, address).await {
            Err(HttpError::HungUp) => {}
            other => panic!("a hang-up, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn url_userinfo_becomes_basic_authentication_and_is_not_in_the_request_line() {
        let seen = Arc::new(Mutex::new(None::<(String, Option<String>)>));
        let record = seen.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let record = record.clone();
            async move {
                let auth = request
                    .headers()
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                *record.lock().unwrap() = Some((request.uri().to_string(), auth));
                "ok"
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        let http = HttpClient::plain().unwrap();
        let url = url::Url::parse(&format!("http://us%40er:p%3Ass@{address}/v1?x=1#frag")).unwrap();
        assert_eq!(http.get(&url).send().await.unwrap().status(), 200);
        let (uri, auth) = seen.lock().unwrap().clone().unwrap();
        assert_eq!(uri, "/v1?x=1");
        use base64::Engine;
        let expected = base64::engine::general_purpose::STANDARD.encode("us@er:p:ss");
        assert_eq!(auth, Some(format!("Basic {expected}")));
    }
}
