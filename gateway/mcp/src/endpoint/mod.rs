//! The client-facing Streamable HTTP endpoint (`POST /mcp`, `POST /mcp/{prefix}`, `DELETE` of a
//! legacy session): checks the gateway key, tells the two protocol eras apart, keeps legacy
//! sessions sealed in their ids, validates 2026-07-28 request headers, routes clients' replies
//! to relayed server-to-client requests, and answers with one JSON-RPC response or a relayed
//! stream.
//!
//! Rooms: `message` (reading a call), `answer` (one POST's answer), `modern` and `legacy` (each
//! era's checks and its own methods), `input` (replies to relayed requests), `replies` (writing
//! answers).

mod answer;
#[cfg(test)]
mod answer_tests;
mod input;
mod legacy;
mod message;
#[cfg(test)]
mod message_tests;
mod modern;
mod replies;

pub use input::{check_advertised_address, internal_exchange};
pub use message::{Incoming, parse_message};

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::context::McpContext;
use answer::answer;
use legacy::open_session;
use replies::header_str;
use switchboard_core::errors::jsonrpc_error_response;
use switchboard_core::scope::{Resource, authenticate};

// The handlers take the whole request and move its headers out: axum's `HeaderMap` extractor
// would copy them on every call.
pub async fn aggregate(
    State(cx): State<Arc<McpContext>>,
    request: axum::extract::Request,
) -> Response {
    match into_headers_and_body(request).await {
        Ok((headers, body)) => post(&cx, None, headers, body).await,
        Err(refused) => refused,
    }
}

pub async fn single(
    State(cx): State<Arc<McpContext>>,
    Path(prefix): Path<String>,
    request: axum::extract::Request,
) -> Response {
    match into_headers_and_body(request).await {
        Ok((headers, body)) => post(&cx, Some(prefix), headers, body).await,
        Err(refused) => refused,
    }
}

/// The request's headers and body (read whole by the body-read layer already).
async fn into_headers_and_body(
    request: axum::extract::Request,
) -> Result<(HeaderMap, Bytes), Response> {
    let (parts, body) = request.into_parts();
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => Ok((parts.headers, body)),
        Err(_) => Err((
            StatusCode::BAD_REQUEST,
            "the request body could not be read",
        )
            .into_response()),
    }
}

/// GET: a legacy server-to-client stream outside any request. The gateway keeps no stream per
/// session (a replica holds nothing a request depends on), and the 2026-07-28 revision has
/// none: both allow 405.
pub async fn method_not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "POST, DELETE")],
    )
        .into_response()
}

/// DELETE ends a legacy session: its id is refused from then on (on this replica: see
/// docs/architecture.md, "Sessions"), and the upstream sessions this replica opened for it are
/// closed.
pub async fn end_session(State(cx): State<Arc<McpContext>>, headers: HeaderMap) -> Response {
    let table = cx.table();
    let caller = match authenticate(table, headers, &cx.metrics, Resource::Mcp).await {
        Ok(c) => c,
        Err(e) => return jsonrpc_error_response(&Value::Null, &e),
    };
    let Some(session_id) = header_str(&caller.headers, switchboard_protocol::headers::SESSION_ID)
    else {
        return (
            StatusCode::BAD_REQUEST,
            "DELETE needs the Mcp-Session-Id of the session to end",
        )
            .into_response();
    };
    let session = match open_session(&cx, &caller, session_id) {
        Ok(s) => s,
        Err(e) => return jsonrpc_error_response(&Value::Null, &e),
    };
    cx.end_session(session.tag);
    cx.upstream
        .close_client_sessions(&caller, session.tag)
        .await;
    tracing::info!(caller = %caller.who(), "legacy session ended by the client");
    StatusCode::NO_CONTENT.into_response()
}

/// A POST to `/mcp` (`prefix` `None`) or `/mcp/{prefix}`, its body read whole: what the
/// gateway's edge calls for these paths (the common request skips the router), and what the
/// routes above call for the rest.
pub async fn post(
    cx: &Arc<McpContext>,
    prefix: Option<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let endpoint = if prefix.is_some() {
        "mcp_single"
    } else {
        "mcp"
    };
    // Boxed once here: the futures above (the edge's, or the router's layers for a request
    // that went through it) then hold a pointer rather than the whole answer's state.
    let (response, counted) = Box::pin(answer(cx, prefix, headers, body)).await;
    // The request metric, once per request whatever the exit (a notification counts nothing).
    if let Some((method, outcome)) = counted {
        cx.metrics.request(endpoint, method, outcome);
        switchboard_core::audit::note(|n| n.outcome = Some(outcome));
    }
    response
}

#[cfg(test)]
mod tests {
    use axum::http::header;
    use serde_json::json;

    use super::replies::raw_result_response;
    use super::*;

    #[test]
    fn calls_read_like_the_full_reading() {
        let call = |body: &str| match parse_message(body.as_bytes()) {
            Ok(Incoming::Call(m)) => Some((m.id, m.method, m.params.as_deref().cloned())),
            _ => None,
        };
        assert_eq!(
            call(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"},"x":[1]}"#),
            Some((
                Some(json!(1)),
                "tools/call".into(),
                Some(json!({"name": "a"}))
            ))
        );
        assert_eq!(
            call(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Some((None, "notifications/initialized".into(), None))
        );
        // "id": null is a request with a null id, not a notification.
        assert_eq!(
            call(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#)
                .unwrap()
                .0,
            Some(Value::Null)
        );
        // A repeated member: the last one counts, as in the full reading.
        assert_eq!(
            call(r#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#)
                .unwrap()
                .1,
            "b"
        );
        for refused in [
            r#"["2.0","ping",1]"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":null}"#,
        ] {
            assert!(call(refused).is_none(), "{refused}");
        }
    }

    /// The answer's JSON, after checking its `Content-Length` is its length.
    async fn sized_body_of(response: Response) -> Value {
        let length = response.headers()[header::CONTENT_LENGTH].clone();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 26)
            .await
            .unwrap();
        assert_eq!(length.to_str().unwrap(), bytes.len().to_string());
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_relayed_result_gets_its_result_type_in_front() {
        const STAMP: Option<&str> = Some(r#""resultType":"complete""#);
        let result = || r#" {"content":[],"isError":false}"#.to_string();
        let body = sized_body_of(raw_result_response(&json!(7), result(), STAMP)).await;
        assert_eq!(
            body,
            json!({"jsonrpc": "2.0", "id": 7,
                   "result": {"resultType": "complete", "content": [], "isError": false}})
        );
        let body = sized_body_of(raw_result_response(&json!("a"), "{ }".to_string(), STAMP)).await;
        assert_eq!(body["result"], json!({"resultType": "complete"}));
        let body = sized_body_of(raw_result_response(&json!(1), result(), None)).await;
        assert_eq!(body["result"], json!({"content": [], "isError": false}));
        let not_an_object =
            sized_body_of(raw_result_response(&json!(2), "[1]".to_string(), STAMP)).await;
        assert_eq!(not_an_object["result"], json!([1]));
    }

    /// A large result is sent as it is, between the envelope's ends (not copied into one
    /// buffer): the same answer, its length said.
    #[tokio::test]
    async fn a_large_result_is_the_same_answer_sent_in_pieces() {
        let tools: Vec<Value> = (0..2000)
            .map(|i| json!({"name": format!("t{i}"), "description": "x".repeat(50)}))
            .collect();
        let text = json!({"tools": tools}).to_string();
        assert!(text.len() > 100_000);
        let response = raw_result_response(
            &json!(3),
            format!("  {text}"),
            Some(r#""resultType":"complete""#),
        );
        let body = sized_body_of(response).await;
        assert_eq!(body["id"], 3);
        assert_eq!(body["result"]["resultType"], "complete");
        assert_eq!(body["result"]["tools"].as_array().unwrap().len(), 2000);
        assert_eq!(body["result"]["tools"][1999]["name"], "t1999");
        let plain = sized_body_of(raw_result_response(&json!(4), text.clone(), None)).await;
        assert_eq!(
            plain["result"],
            serde_json::from_str::<Value>(&text).unwrap()
        );
    }
}
