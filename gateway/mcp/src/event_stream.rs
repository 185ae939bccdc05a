//! The head of every SSE answer the MCP endpoint streams (relayed calls, subscriptions).

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// An HTTP 200 `text/event-stream` response that proxies in between must not buffer.
pub fn event_stream(body: Body) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    // Sized for its three headers: hyper keeps this map for the connection's life (to reuse
    // it), so a default-sized one would cost every open stream twice the memory.
    headers.reserve(3);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
