//! The accept loop: HTTP/1.1 and HTTP/2 on one listener, with the bounds that keep slow or
//! greedy clients from pinning a replica (docs/architecture.md, "Limits"):
//!
//! - at most `max_connections` client connections at once; past that, new connections wait in
//!   the kernel's accept queue until one closes;
//! - a request's headers must arrive within `header_read_timeout`, which also closes a kept-alive
//!   HTTP/1.1 connection idle that long (hyper times both with one timer);
//! - a request's whole body must arrive within `body_read_timeout` (see
//!   `http::read_body_in_time`), and no larger than `gateway.maxBodyBytes`.
//!
//! `axum::serve` has none of these knobs (no timer, so hyper's header timeout never runs), hence
//! this loop on hyper-util's server, which axum itself uses underneath.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::http::Edge;

/// How the listener treats client connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    /// How long connections still open at shutdown get to finish before they are dropped.
    pub shutdown_grace: Duration,
}

/// Serves `edge` on `listener` until `shutdown` resolves, then stops accepting, lets open
/// connections finish their requests (HTTP/2 gets a GOAWAY) for at most `shutdown_grace`.
pub async fn serve(
    listener: TcpListener,
    edge: Edge,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder.http2().timer(TokioTimer::new());
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot,
            () = &mut shutdown => break,
        };
        let Ok(slot) = slot else { break };
        let (tcp, _remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: pause instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Small writes (one SSE event) go out at once: with Nagle's algorithm a streamed event
        // waits for the client's delayed ACK of the one before (about 40 ms).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on a client connection");
        }
        let connection = builder
            .serve_connection(TokioIo::new(tcp), edge.clone())
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "client connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::info!(
            grace = ?limits.shutdown_grace,
            "connections still open at the end of the shutdown grace are dropped"
        );
    }
}
