//! Writing JSON-RPC answers (a value, or an upstream's result as it came) and the small readers
//! every era uses.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use switchboard_core::errors::GatewayError;

pub(super) fn protocol_error(code: i64, message: String, data: Option<Value>) -> GatewayError {
    GatewayError::Protocol {
        code,
        message,
        status: StatusCode::BAD_REQUEST,
        data,
    }
}

pub(super) fn rpc_response(id: &Value, kind: &str, payload: Value, status: StatusCode) -> Response {
    let mut body = Map::with_capacity(3);
    body.insert("jsonrpc".into(), Value::from("2.0"));
    body.insert("id".into(), id.clone());
    body.insert(kind.into(), payload);
    let bytes = serde_json::to_vec(&Value::Object(body)).unwrap_or_default();
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response()
}

/// Past this size a result's text is not copied into the answer's body: the body is sent as
/// the envelope's head, the text, and its closing brace (a 43 MB listing copied would be held
/// twice while it is sent). Below it, one buffer costs less than three chunks.
const COPIED_RESULT_BYTES: usize = 64 * 1024;

/// A result serialized already (merged listings, which carry `resultType` themselves, or an
/// upstream's result as it came), with `first_member` (`"name":value`) added in front of the
/// result object's own members. Only an object result gets one.
pub(super) fn raw_result_response(
    id: &Value,
    result: String,
    first_member: Option<&str>,
) -> Response {
    let id = serde_json::to_string(id).unwrap_or_else(|_| "null".into());
    const OPEN: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":";
    const RESULT: &[u8] = b",\"result\":";
    // (where the result's own text goes on from: after its `{` when a member goes in front)
    let trimmed = result.trim_start();
    let member = match (first_member, trimmed.strip_prefix('{')) {
        (Some(member), Some(members)) => {
            let comma = !members.trim_start().starts_with('}');
            Some((member, comma, result.len() - members.len()))
        }
        _ => None,
    };
    let from = member.map_or(0, |(_, _, from)| from);
    let head_length = OPEN.len()
        + id.len()
        + RESULT.len()
        + member.map_or(0, |(m, comma, _)| 1 + m.len() + usize::from(comma));
    let length = head_length + result.len() - from + 1;
    let write_head = |out: &mut Vec<u8>| {
        out.extend_from_slice(OPEN);
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(RESULT);
        if let Some((member, comma, _)) = member {
            out.push(b'{');
            out.extend_from_slice(member.as_bytes());
            if comma {
                out.push(b',');
            }
        }
    };
    let body = if result.len() < COPIED_RESULT_BYTES {
        let mut body = Vec::with_capacity(length);
        write_head(&mut body);
        body.extend_from_slice(&result.as_bytes()[from..]);
        body.push(b'}');
        Body::from(body)
    } else {
        let mut head = Vec::with_capacity(head_length);
        write_head(&mut head);
        let text = Bytes::from(result).slice(from..);
        let chunks = [Bytes::from(head), text, Bytes::from_static(b"}")];
        Body::from_stream(futures_util::stream::iter(
            chunks.map(Ok::<_, std::convert::Infallible>),
        ))
    };
    (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::CONTENT_LENGTH, HeaderValue::from(length)),
        ],
        body,
    )
        .into_response()
}

pub(super) fn header_str(
    headers: &HeaderMap,
    name: impl axum::http::header::AsHeaderName,
) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Method names as metric labels: the known ones, else "other" (clients choose method names,
/// and a label set must stay bounded).
pub(super) fn metric_method(method: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "completion/complete",
        "subscriptions/listen",
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
    ];
    KNOWN
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}
