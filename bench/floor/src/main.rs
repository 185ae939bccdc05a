//! The benchmark's floor: what any HTTP proxy on the gateway's stack costs per call.
//!
//! It forwards method, path and query, headers and body bytes to one upstream and relays the
//! answer (status, headers, body, streamed as it comes), with nothing else: no parsing, no
//! checks, no logs, no metrics. Same runtime (tokio multi-thread, one worker per CPU unless
//! `--worker-threads`), same HTTP library (hyper 1, HTTP/1.1 with keep-alive on both sides),
//! same allocator (mimalloc) and `TCP_NODELAY` on both sides, as the gateway. Anything the
//! gateway costs above this is the gateway's own work.
//!
//! ```text
//! switchboard-bench-floor --listen 127.0.0.1:0 --upstream http://127.0.0.1:8080
//! ```
//! prints `listening on http://ADDR` once bound (bench/bench.py waits for that line).

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Body = BoxBody<Bytes, hyper::Error>;

struct Args {
    listen: SocketAddr,
    upstream: Uri,
    worker_threads: Option<usize>,
}

fn usage(why: &str) -> ! {
    eprintln!(
        "switchboard-bench-floor: {why}\n\
         usage: switchboard-bench-floor --listen ADDR --upstream http://HOST:PORT [--worker-threads N]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut listen = None;
    let mut upstream = None;
    let mut worker_threads = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--listen" => {
                listen = Some(value.parse().unwrap_or_else(|e| usage(&format!("--listen: {e}"))))
            }
            "--upstream" => {
                upstream = Some(value.parse().unwrap_or_else(|e| usage(&format!("--upstream: {e}"))))
            }
            "--worker-threads" => {
                worker_threads = Some(
                    value
                        .parse()
                        .unwrap_or_else(|e| usage(&format!("--worker-threads: {e}"))),
                )
            }
            other => usage(&format!("unknown flag {other}")),
        }
    }
    Args {
        listen: listen.unwrap_or_else(|| usage("--listen is required")),
        upstream: upstream.unwrap_or_else(|| usage("--upstream is required")),
        worker_threads,
    }
}

/// Where a request goes: the upstream's scheme and authority, the request's own path and query.
struct Target {
    scheme: Scheme,
    authority: Authority,
}

impl Target {
    fn uri_for(&self, incoming: &Uri) -> Result<Uri, http::Error> {
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = incoming.path_and_query().cloned();
        Uri::from_parts(parts).map_err(http::Error::from)
    }
}

async fn forward(
    client: &Client<HttpConnector, Incoming>,
    target: &Target,
    mut req: Request<Incoming>,
) -> Response<Body> {
    match target.uri_for(req.uri()) {
        Ok(uri) => *req.uri_mut() = uri,
        Err(_) => return status(StatusCode::BAD_REQUEST),
    }
    // The client's Host names this proxy; the upstream gets its own (as a reverse proxy does).
    req.headers_mut().remove(http::header::HOST);
    match client.request(req).await {
        Ok(resp) => resp.map(|body| body.boxed()),
        Err(_) => status(StatusCode::BAD_GATEWAY),
    }
}

fn status(code: StatusCode) -> Response<Body> {
    let mut resp = Response::new(
        Full::new(Bytes::new())
            .map_err(|never| match never {})
            .boxed(),
    );
    *resp.status_mut() = code;
    resp
}

fn main() {
    let args = parse_args();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.worker_threads.filter(|n| *n > 0) {
        runtime.worker_threads(threads);
    }
    let runtime = runtime
        .enable_all()
        .build()
        .unwrap_or_else(|e| usage(&format!("runtime: {e}")));
    runtime.block_on(serve(args));
}

async fn serve(args: Args) {
    let (Some(scheme), Some(authority)) = (
        args.upstream.scheme().cloned(),
        args.upstream.authority().cloned(),
    ) else {
        usage("--upstream must be an absolute http:// URL")
    };
    let target: &'static Target = Box::leak(Box::new(Target { scheme, authority }));
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: &'static Client<HttpConnector, Incoming> =
        Box::leak(Box::new(Client::builder(TokioExecutor::new()).build(connector)));

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .unwrap_or_else(|e| usage(&format!("bind {}: {e}", args.listen)));
    let bound = listener
        .local_addr()
        .unwrap_or_else(|e| usage(&format!("local address: {e}")));
    println!("listening on http://{bound}");

    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = service_fn(move |req| async move {
                Ok::<_, Infallible>(forward(client, target, req).await)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
