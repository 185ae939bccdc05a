//! The client's connections, held by origin (scheme and authority) and used again.
//!
//! Why not hyper-util's pooled client, which this replaced: per request it hashed the origin
//! three times (SipHash, byte by byte), checked a connection out of its idle list and back in,
//! and for HTTP/1.1 spawned a task that waited for the connection to be ready again before
//! putting it back: about 9.7k instructions a call under callgrind (BENCHMARKS.md), as much as
//! the rest of the upstream request. Here an HTTP/1.1 connection stays in its origin's list
//! while it is in use; a request takes the first one that is ready for another (hyper's
//! `is_ready`: the last answer was read to its end, the connection is open) and is handed to it
//! under the list's lock, which does no I/O (hyper queues it for the connection's task). An
//! origin that negotiated HTTP/2 by ALPN has one connection, which its requests share.
//!
//! What hyper-util's client did that is kept: a request that a kept-alive connection gave back
//! unsent (the server had closed it) goes again, on another connection, while a new
//! connection's failure is the answer; `Host` is written from the URI for HTTP/1.1 when the
//! request has none, and the request line is in origin form; a connection's own error is what a
//! connection that closed before its first request reports; connections unused for `IDLE` are
//! closed. What is not kept: a request waiting for a new connection does not take one that
//! another request frees meanwhile, and the idle ones are closed when the client is next used
//! (every origin's, on any request), not by a timer of their own.

use std::hash::{Hash, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::Either;
use http::uri::{Authority, Scheme};
use http::{HeaderValue, Request, Response, Uri, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::client::legacy::connect::Connection as _;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_service::Service as _;

use super::Connector;

type Body = Full<Bytes>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a connection may go unused before it is closed (what hyper-util's pool was set to).
const IDLE: Duration = Duration::from_secs(90);
/// HTTP/1.1 connections held per origin; a request beyond them gets a connection of its own,
/// closed after its answer.
const MAX_PER_ORIGIN: usize = 256;
/// How often, at most, the held connections are looked over for closed and idle ones.
const SWEEP_EVERY: Duration = Duration::from_secs(15);

/// Why a request got no answer. Its causes are walked (`source`) by the client's classification
/// (`http_client::classify`), as hyper-util's error was.
#[derive(Debug, thiserror::Error)]
pub(super) enum Failure {
    /// No connection: refused or unreachable, the resolver's policy, TLS.
    #[error("connect")]
    Connect(#[source] BoxError),
    /// The connection failed (its HTTP handshake, or while the request was sent or answered).
    #[error("request")]
    Request(#[source] hyper::Error),
    /// The URI names no host to connect to.
    #[error("the URI has no host")]
    NoOrigin,
}

impl Failure {
    pub(super) fn is_connect(&self) -> bool {
        matches!(self, Failure::Connect(_))
    }
}

/// Connections to any number of origins, made with one connector.
pub(super) struct Connections {
    connector: Connector,
    held: Mutex<Held>,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections").finish_non_exhaustive()
    }
}

struct Held {
    origins: std::collections::HashMap<Origin, Open, foldhash::fast::RandomState>,
    next_sweep: Instant,
}

/// An origin's connections.
#[derive(Default)]
struct Open {
    http1: Vec<Http1>,
    http2: Option<Http2>,
}

struct Http1 {
    sender: http1::SendRequest<Body>,
    /// When it was last given a request.
    used: Instant,
}

struct Http2 {
    sender: http2::SendRequest<Body>,
    used: Instant,
}

/// Scheme and authority, compared and hashed as written (hyper-util folded the authority's
/// case, byte by byte; URLs reach here from `url`, which writes host names in lower case).
#[derive(Clone)]
struct Origin {
    https: bool,
    authority: Authority,
}

impl PartialEq for Origin {
    fn eq(&self, other: &Origin) -> bool {
        self.https == other.https && self.authority.as_str() == other.authority.as_str()
    }
}

impl Eq for Origin {}

impl Hash for Origin {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.https.hash(state);
        self.authority.as_str().hash(state);
    }
}

/// A held connection ready for a request, lent under the lock.
enum Ready<'a> {
    Http1(&'a mut http1::SendRequest<Body>),
    Http2(&'a mut http2::SendRequest<Body>),
}

/// A new connection, ready for its first request.
enum New {
    Http1(http1::SendRequest<Body>),
    Http2(http2::SendRequest<Body>),
}

impl Connections {
    pub(super) fn new(connector: Connector) -> Connections {
        Connections {
            connector,
            held: Mutex::new(Held {
                origins: Default::default(),
                next_sweep: Instant::now() + SWEEP_EVERY,
            }),
        }
    }

    /// Sends `request` (its URI absolute) on a held connection to its origin, or a new one.
    pub(super) async fn send(
        &self,
        mut request: Request<Body>,
    ) -> Result<Response<Incoming>, Failure> {
        let uri = request.uri().clone();
        let origin = Origin {
            https: uri.scheme() == Some(&Scheme::HTTPS),
            authority: uri.authority().cloned().ok_or(Failure::NoOrigin)?,
        };
        // (Both kinds of connection hand a request over the same way; `wrote_host`: `Host` was
        // written here, taken out again before another try, which may go out on HTTP/2.)
        let hand_over = |connection: Ready<'_>, request: Request<Body>| match connection {
            Ready::Http2(sender) => (Either::Right(sender.try_send_request(request)), false),
            Ready::Http1(sender) => {
                let (request, wrote_host) = for_http1(request);
                (Either::Left(sender.try_send_request(request)), wrote_host)
            }
        };
        // (Each refusal lets go of the connection that refused; the bound is for a connection
        // that would refuse and still look open.)
        let mut tries = 0;
        loop {
            tries += 1;
            // `reused`: the connection carried a request before, so a refusal on it may be a
            // kept-alive connection the server closed, worth another try.
            let ((answer, wrote_host), reused) = match self.on_held(&origin, request, hand_over) {
                Ok(sent) => (sent, true),
                Err(unsent) => {
                    // (Boxed: a connection being made holds the TLS state and the handshake,
                    // kilobytes that the request's future would otherwise carry, and copy,
                    // on every call.)
                    let sent = match Box::pin(self.connect(&uri)).await? {
                        New::Http2(mut sender) => {
                            let sent = hand_over(Ready::Http2(&mut sender), unsent);
                            self.hold(&origin, New::Http2(sender));
                            sent
                        }
                        New::Http1(mut sender) => {
                            let sent = hand_over(Ready::Http1(&mut sender), unsent);
                            self.hold(&origin, New::Http1(sender));
                            sent
                        }
                    };
                    (sent, false)
                }
            };
            let on_http2 = matches!(answer, Either::Right(_));
            match answer.await {
                Ok(response) => return Ok(response),
                Err(mut refused) => match refused.take_message() {
                    Some(mut unsent) if reused && tries <= MAX_PER_ORIGIN => {
                        self.forget_refusing(&origin, on_http2);
                        *unsent.uri_mut() = uri.clone();
                        if wrote_host {
                            unsent.headers_mut().remove(header::HOST);
                        }
                        request = unsent;
                    }
                    _ => return Err(Failure::Request(refused.into_error())),
                },
            }
        }
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        // (Nothing under the lock panics halfway through a change; a poisoned lock's map is whole.)
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lends a held connection to `origin` that is ready for a request to `send`, under the
    /// lock (it hands the request over, no I/O), or gives the request back.
    #[allow(clippy::result_large_err)] // (the request itself, given back, as hyper does)
    fn on_held<R>(
        &self,
        origin: &Origin,
        request: Request<Body>,
        send: impl FnOnce(Ready<'_>, Request<Body>) -> R,
    ) -> Result<R, Request<Body>> {
        let now = Instant::now();
        let mut held = self.held();
        if now >= held.next_sweep {
            held.sweep(now);
        }
        let Some(open) = held.origins.get_mut(origin) else {
            return Err(request);
        };
        if let Some(http2) = &mut open.http2 {
            if !http2.sender.is_closed() {
                http2.used = now;
                return Ok(send(Ready::Http2(&mut http2.sender), request));
            }
            open.http2 = None;
        }
        match open.http1.iter_mut().find(|c| c.sender.is_ready()) {
            Some(http1) => {
                http1.used = now;
                Ok(send(Ready::Http1(&mut http1.sender), request))
            }
            None => Err(request),
        }
    }

    /// A new connection to the origin of `uri`, HTTP/2 when TLS negotiated it, ready.
    async fn connect(&self, uri: &Uri) -> Result<New, Failure> {
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(Failure::Connect)?;
        let io = connector
            .call(uri.clone())
            .await
            .map_err(Failure::Connect)?;
        if io.connected().is_negotiated_h2() {
            let (mut sender, connection) = http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .handshake(io)
                .await
                .map_err(Failure::Request)?;
            tokio::spawn(connection);
            sender.ready().await.map_err(Failure::Request)?;
            return Ok(New::Http2(sender));
        }
        let (mut sender, connection) = http1::Builder::new()
            .handshake(io)
            .await
            .map_err(Failure::Request)?;
        // A connection that ends before it is ready (a TLS 1.3 server's alert after the
        // handshake, say) leaves the sender only "closed": its own error says why.
        let (failed, why) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                let _ = failed.send(e);
            }
        });
        match sender.ready().await {
            Ok(()) => Ok(New::Http1(sender)),
            Err(closed) if closed.is_closed() => Err(Failure::Request(why.await.unwrap_or(closed))),
            Err(e) => Err(Failure::Request(e)),
        }
    }

    /// Lets go of the origin's connection that refused a request: its HTTP/2 one, or its
    /// closed HTTP/1.1 ones.
    fn forget_refusing(&self, origin: &Origin, http2: bool) {
        let mut held = self.held();
        if let Some(open) = held.origins.get_mut(origin) {
            if http2 {
                open.http2 = None;
            } else {
                open.http1.retain(|c| !c.sender.is_closed());
            }
        }
    }

    /// Holds a new connection for the origin's later requests: an HTTP/1.1 one beside the
    /// others (up to `MAX_PER_ORIGIN`), an HTTP/2 one unless the origin has one open.
    fn hold(&self, origin: &Origin, connection: New) {
        let used = Instant::now();
        let mut held = self.held();
        let open = held.origins.entry(origin.clone()).or_default();
        match connection {
            New::Http1(sender) => {
                // (A new connection is made when none was ready: those closed since go now,
                // not at the next sweep, so a server that closes every connection does not fill
                // the list.)
                open.http1.retain(|c| !c.sender.is_closed());
                if open.http1.len() < MAX_PER_ORIGIN {
                    open.http1.push(Http1 { sender, used });
                }
            }
            New::Http2(sender) => {
                if open.http2.as_ref().is_none_or(|c| c.sender.is_closed()) {
                    open.http2 = Some(Http2 { sender, used });
                }
            }
        }
    }
}

impl Held {
    /// Lets go of closed connections and of those unused for `IDLE` (a connection still
    /// answering, a stream, is not idle however long ago it was given its request).
    fn sweep(&mut self, now: Instant) {
        self.next_sweep = now + SWEEP_EVERY;
        let idle = |used: Instant| now.saturating_duration_since(used) >= IDLE;
        self.origins.retain(|_, open| {
            open.http1
                .retain(|c| !(c.sender.is_closed() || c.sender.is_ready() && idle(c.used)));
            if open
                .http2
                .as_ref()
                .is_some_and(|c| c.sender.is_closed() || idle(c.used))
            {
                open.http2 = None;
            }
            !open.http1.is_empty() || open.http2.is_some()
        });
    }
}

/// The request as HTTP/1.1 sends it: `Host` written from the URI when the caller set none (its
/// port only when not the scheme's own), the request line in origin form. Says whether it wrote
/// `Host`.
fn for_http1(mut request: Request<Body>) -> (Request<Body>, bool) {
    let uri = request.uri();
    let mut wrote_host = false;
    if !request.headers().contains_key(header::HOST)
        && let Some(host) = uri.host()
    {
        let default_port = if uri.scheme() == Some(&Scheme::HTTPS) {
            443
        } else {
            80
        };
        let value = match uri.port_u16() {
            Some(port) if port != default_port => HeaderValue::from_str(&format!("{host}:{port}")),
            _ => HeaderValue::from_str(host),
        };
        if let Ok(value) = value {
            request.headers_mut().insert(header::HOST, value);
            wrote_host = true;
        }
    }
    let origin_form = match request.uri().path_and_query() {
        Some(path) if path.as_str() != "/" => {
            let mut parts = http::uri::Parts::default();
            parts.path_and_query = Some(path.clone());
            Uri::from_parts(parts).unwrap_or_default()
        }
        _ => Uri::default(),
    };
    *request.uri_mut() = origin_form;
    (request, wrote_host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_client::{HttpClient, read_limited};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// A plain HTTP/1.1 server on loopback that counts the connections it accepted and answers
    /// every request `ok` after `delay`; with `close`, it closes each connection after its first
    /// answer (with no `Connection: close`, as a server whose keep-alive timer ran out does).
    async fn server(delay: Duration, close: bool) -> (url::Url, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url =
            url::Url::parse(&format!("http://{}/mcp", listener.local_addr().unwrap())).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    loop {
                        // One request (no body) per blank line.
                        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                            match tcp.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                        buf.drain(..end);
                        tokio::time::sleep(delay).await;
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if tcp.write_all(answer).await.is_err() || close {
                            return;
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    async fn get_ok(client: &HttpClient, url: &url::Url) {
        let response = client.get(url).send().await.expect("an answer");
        assert_eq!(response.status(), 200);
        let body = read_limited(response.into_body(), 100).await.unwrap();
        assert_eq!(&body[..], b"ok");
    }

    fn held_http1(client: &HttpClient) -> usize {
        let held = client.connections.held();
        held.origins.values().map(|open| open.http1.len()).sum()
    }

    #[tokio::test]
    async fn requests_one_after_another_share_one_connection() {
        let (url, accepted) = server(Duration::ZERO, false).await;
        let client = HttpClient::plain().unwrap();
        for _ in 0..5 {
            get_ok(&client, &url).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        assert_eq!(held_http1(&client), 1);
    }

    #[tokio::test]
    async fn requests_at_once_get_connections_of_their_own_which_are_used_again() {
        let (url, accepted) = server(Duration::from_millis(200), false).await;
        let client = HttpClient::plain().unwrap();
        let at_once = (0..4).map(|_| get_ok(&client, &url));
        futures_util::future::join_all(at_once).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 4);
        // The answers were read to their end: all four are ready again, and used.
        let again = (0..4).map(|_| get_ok(&client, &url));
        futures_util::future::join_all(again).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 4);
        assert_eq!(held_http1(&client), 4);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_not_used_again() {
        let (url, accepted) = server(Duration::ZERO, true).await;
        let client = HttpClient::plain().unwrap();
        for expected in 1..=3 {
            get_ok(&client, &url).await;
            assert_eq!(accepted.load(Ordering::SeqCst), expected);
            // (Once hyper has read the close: a request sent before would race it, as on any
            // kept-alive connection a server closes.)
            let closed = || {
                let held = client.connections.held();
                held.origins
                    .values()
                    .all(|open| open.http1.iter().all(|c| c.sender.is_closed()))
            };
            for _ in 0..200 {
                if closed() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(closed(), "the closed connection is seen closed");
        }
        // And the closed ones were let go as new ones were made.
        assert_eq!(held_http1(&client), 1);
    }

    #[tokio::test]
    async fn idle_connections_are_let_go_and_closed() {
        let (url, accepted) = server(Duration::ZERO, false).await;
        let client = HttpClient::plain().unwrap();
        get_ok(&client, &url).await;
        let now = Instant::now();
        {
            let mut held = client.connections.held();
            held.sweep(now);
            assert_eq!(held.origins.len(), 1, "a connection used just now stays");
            for open in held.origins.values_mut() {
                for c in &mut open.http1 {
                    c.used = now.checked_sub(IDLE).unwrap();
                }
            }
            held.sweep(now);
            assert!(held.origins.is_empty(), "an idle one goes");
        }
        get_ok(&client, &url).await;
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            2,
            "a new connection for the next request"
        );
    }

    #[tokio::test]
    async fn a_connection_still_answering_is_not_idle() {
        let (url, _) = server(Duration::from_millis(300), false).await;
        let client = HttpClient::plain().unwrap();
        let answering = {
            let client = client.clone();
            let url = url.clone();
            tokio::spawn(async move { get_ok(&client, &url).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = Instant::now();
        {
            let mut held = client.connections.held();
            for open in held.origins.values_mut() {
                for c in &mut open.http1 {
                    c.used = now.checked_sub(IDLE * 2).unwrap();
                }
            }
            held.sweep(now);
            assert_eq!(held.origins.len(), 1, "kept while its answer is on the way");
        }
        answering.await.unwrap();
    }

    #[test]
    fn http1_requests_carry_host_and_the_path_only() {
        let request = |uri: &str| Request::get(uri).body(Body::default()).unwrap();
        for (uri, host, line) in [
            (
                "http://127.0.0.1:8080/mcp?x=1",
                "127.0.0.1:8080",
                "/mcp?x=1",
            ),
            ("http://example.com:80/", "example.com", "/"),
            ("https://example.com:443/a", "example.com", "/a"),
            ("https://example.com:8443", "example.com:8443", "/"),
        ] {
            let (sent, wrote) = for_http1(request(uri));
            assert!(wrote);
            assert_eq!(sent.headers()[header::HOST], host, "{uri}");
            assert_eq!(sent.uri().to_string(), line, "{uri}");
        }
        let mut own = request("http://127.0.0.1:8080/mcp");
        own.headers_mut()
            .insert(header::HOST, HeaderValue::from_static("mcp.internal"));
        let (sent, wrote) = for_http1(own);
        assert!(!wrote);
        assert_eq!(sent.headers()[header::HOST], "mcp.internal");
    }
}
