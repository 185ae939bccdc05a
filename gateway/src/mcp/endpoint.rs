//! The client-facing Streamable HTTP endpoint (`POST /mcp`, `POST /mcp/{prefix}`): checks the
//! gateway key, tells the two protocol eras apart, keeps legacy sessions sealed in their ids,
//! validates 2026-07-28 request headers, and answers with one JSON-RPC response.

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::errors::{GatewayError, codes, jsonrpc_error_response};
use crate::mcp::dispatch::{Answer, Failure, Target, dispatch};
use crate::mcp::era::{
    self, Era, HEADER_MISMATCH, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, META_SERVER_INFO,
    MODERN_VERSION, UNSUPPORTED_PROTOCOL_VERSION,
};
use crate::scope::{Caller, authenticate};
use crate::session::UnsealError;
use crate::state::Gateway;

pub async fn aggregate(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&gw, None, headers, body).await
}

pub async fn single(
    State(gw): State<Arc<Gateway>>,
    Path(prefix): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&gw, Some(prefix), headers, body).await
}

/// GET (a legacy server-to-client stream) and DELETE (session teardown): sessions live in
/// their sealed ids, so there is nothing to stream or delete; both are allowed to answer 405.
pub async fn method_not_allowed() -> Response {
    (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "POST")]).into_response()
}

/// A parsed JSON-RPC message from a client.
struct Message {
    id: Option<Value>,
    method: String,
    params: Option<Value>,
}

fn parse_message(body: &[u8]) -> Result<Option<Message>, GatewayError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| GatewayError::Parse(e.to_string()))?;
    let Value::Object(mut obj) = value else {
        return Err(GatewayError::InvalidRequest(
            "the body must be one JSON-RPC message (batches are not supported)".into(),
        ));
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(GatewayError::InvalidRequest(
            "jsonrpc must be \"2.0\"".into(),
        ));
    }
    let Some(method) = obj.remove("method") else {
        // A response to a server-to-client request; the gateway sends none.
        return Ok(None);
    };
    let method = method
        .as_str()
        .ok_or_else(|| GatewayError::InvalidRequest("method must be a string".into()))?
        .to_string();
    let params = obj.remove("params");
    if params.as_ref().is_some_and(|p| !p.is_object()) {
        return Err(GatewayError::InvalidRequest(
            "params must be an object".into(),
        ));
    }
    Ok(Some(Message {
        id: obj.remove("id"),
        method,
        params,
    }))
}

async fn handle(gw: &Gateway, prefix: Option<String>, headers: HeaderMap, body: Bytes) -> Response {
    let endpoint = if prefix.is_some() {
        "mcp_single"
    } else {
        "mcp"
    };
    let table = gw.table();
    let limit = table.settings.max_body_bytes;
    let fail = |id: &Value, e: GatewayError, method: &'static str| {
        gw.metrics.request(endpoint, method, e.outcome());
        jsonrpc_error_response(id, &e)
    };
    if body.len() > limit {
        return fail(&Value::Null, GatewayError::PayloadTooLarge { limit }, "-");
    }
    let caller = match authenticate(table, headers) {
        Ok(c) => c,
        Err(e) => return fail(&Value::Null, e, "-"),
    };
    let message = match parse_message(&body) {
        Ok(Some(m)) => m,
        Ok(None) => return StatusCode::ACCEPTED.into_response(),
        Err(e) => return fail(&Value::Null, e, "-"),
    };
    let id = message.id.clone().unwrap_or(Value::Null);
    let method = metric_method(&message.method);
    let target = match &prefix {
        None => Target::Aggregate,
        Some(p) => match caller.server_for_path(p) {
            Ok(server) => Target::Single(server),
            // A server the caller cannot reach is invisible: the endpoint does not exist.
            Err(e) => {
                gw.metrics.request(endpoint, method, e.outcome());
                return (StatusCode::NOT_FOUND, e.to_string()).into_response();
            }
        },
    };
    let version_header = header_str(&caller.headers, "mcp-protocol-version");
    let has_session = caller.headers.contains_key("mcp-session-id");
    let era = era::classify(
        &message.method,
        message.params.as_ref(),
        version_header,
        has_session,
    );
    let prepared = match era {
        Era::Modern => check_modern(&caller.headers, &message),
        Era::Legacy => check_legacy(&caller, &message),
    };
    let session_header = match prepared {
        Ok(Prepared::Answer(response)) => {
            gw.metrics.request(endpoint, method, "ok");
            return response;
        }
        Ok(Prepared::Dispatch { session_header }) => session_header,
        Err(e) => return fail(&id, e, method),
    };
    if message.id.is_none() {
        // Notifications (initialized, cancelled, ...) concern the gateway's own session with
        // the client; upstream sessions are the gateway's, so nothing is forwarded.
        return StatusCode::ACCEPTED.into_response();
    }
    let outcome = match (era, message.method.as_str()) {
        (Era::Legacy, "ping") => Ok(Answer::Json(json!({}))),
        (Era::Modern, "server/discover") => Ok(Answer::Json(discover_result(&target))),
        _ => dispatch(gw, &caller, &target, &message.method, message.params).await,
    };
    let mut response = match outcome {
        Ok(Answer::Json(mut result)) => {
            gw.metrics.request(endpoint, method, "ok");
            if era == Era::Modern {
                stamp_modern_result(&mut result);
            }
            rpc_response(&id, "result", result)
        }
        Ok(Answer::Raw(result)) => {
            gw.metrics.request(endpoint, method, "ok");
            raw_result_response(&id, &result)
        }
        Err(Failure::Upstream(error)) => {
            gw.metrics.request(endpoint, method, "upstream_error");
            rpc_response(&id, "error", error)
        }
        Err(Failure::Gateway(e)) => {
            tracing::info!(method = %message.method, error = %e, "request failed");
            return fail(&id, e, method);
        }
    };
    if let Some(value) = session_header {
        response.headers_mut().insert("mcp-session-id", value);
    }
    response
}

enum Prepared {
    /// The gateway answers itself (legacy `initialize`).
    Answer(Response),
    /// Go on to the method; set this session header on the answer.
    Dispatch { session_header: Option<HeaderValue> },
}

/// 2026-07-28: `_meta` must carry the version and capabilities; `MCP-Protocol-Version`,
/// `Mcp-Method` and `Mcp-Name` must repeat the body; the version must be one we serve.
fn check_modern(headers: &HeaderMap, message: &Message) -> Result<Prepared, GatewayError> {
    let meta = message
        .params
        .as_ref()
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object);
    let version = meta
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str);
    let (Some(version), Some(_)) = (version, meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES)))
    else {
        return Err(protocol_error(
            codes::INVALID_PARAMS,
            format!(
                "params._meta must carry {META_PROTOCOL_VERSION} and {META_CLIENT_CAPABILITIES}"
            ),
            None,
        ));
    };
    let mismatch =
        |what: &str| protocol_error(HEADER_MISMATCH, format!("Header mismatch: {what}"), None);
    if header_str(headers, "mcp-protocol-version") != Some(version) {
        return Err(mismatch(
            "MCP-Protocol-Version header must equal _meta protocolVersion",
        ));
    }
    if header_str(headers, "mcp-method") != Some(message.method.as_str()) {
        return Err(mismatch("Mcp-Method header must equal the body's method"));
    }
    let body_name = match message.method.as_str() {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
    .and_then(|f| message.params.as_ref()?.get(f)?.as_str());
    if let Some(body_name) = body_name {
        let header_name = header_str(headers, "mcp-name").and_then(era::decode_header_value);
        if header_name.as_deref() != Some(body_name) {
            return Err(mismatch("Mcp-Name header must equal the body's name"));
        }
    }
    if version != MODERN_VERSION {
        return Err(protocol_error(
            UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version".into(),
            Some(json!({ "supported": supported_versions(), "requested": version })),
        ));
    }
    Ok(Prepared::Dispatch {
        session_header: None,
    })
}

/// Legacy: `initialize` opens a sealed session; everything else must present one that this
/// key opened and that has not expired.
fn check_legacy(caller: &Caller, message: &Message) -> Result<Prepared, GatewayError> {
    let now = SystemTime::now();
    if message.method == "initialize" {
        let requested = message
            .params
            .as_ref()
            .and_then(|p| p.get("protocolVersion"))
            .and_then(Value::as_str);
        let version = era::negotiate_legacy(requested);
        let index = era::legacy_version_index(version).unwrap_or(0);
        let session = caller.table.sealer.seal(&caller.key.digest, index, now);
        let result = json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": {"listChanged": false},
                "prompts": {"listChanged": false},
                "resources": {"listChanged": false, "subscribe": false},
            },
            "serverInfo": {"name": "switchboard", "version": env!("CARGO_PKG_VERSION")},
        });
        let mut response = rpc_response(
            message.id.as_ref().unwrap_or(&Value::Null),
            "result",
            result,
        );
        if let Ok(value) = HeaderValue::from_str(&session) {
            response.headers_mut().insert("mcp-session-id", value);
        }
        return Ok(Prepared::Answer(response));
    }
    let session_id = header_str(&caller.headers, "mcp-session-id").ok_or_else(|| {
        GatewayError::InvalidRequest("missing Mcp-Session-Id; initialize a session first".into())
    })?;
    caller
        .table
        .sealer
        .unseal(session_id, &caller.key.digest, now)
        .map_err(|e| match e {
            UnsealError::Invalid => GatewayError::SessionNotFound,
            UnsealError::WrongKey => GatewayError::SessionForbidden,
        })?;
    if let Some(v) = header_str(&caller.headers, "mcp-protocol-version")
        && era::legacy_version_index(v).is_none()
    {
        return Err(GatewayError::Protocol {
            code: codes::INVALID_REQUEST,
            message: format!("unsupported MCP-Protocol-Version {v:?}"),
            status: StatusCode::BAD_REQUEST,
            data: None,
        });
    }
    Ok(Prepared::Dispatch {
        session_header: None,
    })
}

fn protocol_error(code: i64, message: String, data: Option<Value>) -> GatewayError {
    GatewayError::Protocol {
        code,
        message,
        status: StatusCode::BAD_REQUEST,
        data,
    }
}

fn supported_versions() -> Vec<&'static str> {
    let mut all = vec![MODERN_VERSION];
    all.extend(era::LEGACY_VERSIONS.iter().rev());
    all
}

fn discover_result(target: &Target) -> Value {
    let name = match target {
        Target::Aggregate => "switchboard".to_string(),
        Target::Single(server) => format!("switchboard/{}", server.prefix()),
    };
    json!({
        "supportedVersions": [MODERN_VERSION],
        "capabilities": {
            "tools": {"listChanged": false},
            "prompts": {"listChanged": false},
            "resources": {"listChanged": false},
        },
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": { META_SERVER_INFO: {"name": name, "version": env!("CARGO_PKG_VERSION")} },
    })
}

/// Every 2026-07-28 result carries `resultType`; a legacy upstream's answer gets `complete`.
fn stamp_modern_result(result: &mut Value) {
    if let Value::Object(m) = result {
        m.entry("resultType")
            .or_insert_with(|| Value::from("complete"));
    }
}

fn rpc_response(id: &Value, kind: &str, payload: Value) -> Response {
    let mut body = Map::with_capacity(3);
    body.insert("jsonrpc".into(), Value::from("2.0"));
    body.insert("id".into(), id.clone());
    body.insert(kind.into(), payload);
    let bytes = serde_json::to_vec(&Value::Object(body)).unwrap_or_default();
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response()
}

/// A result serialized already (merged listings, which carry `resultType` themselves).
fn raw_result_response(id: &Value, result: &RawValue) -> Response {
    let id = serde_json::to_string(id).unwrap_or_else(|_| "null".into());
    let mut body = Vec::with_capacity(result.get().len() + id.len() + 40);
    body.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    body.extend_from_slice(id.as_bytes());
    body.extend_from_slice(b",\"result\":");
    body.extend_from_slice(result.get().as_bytes());
    body.push(b'}');
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Method names as metric labels: the known ones, else "other" (clients choose method names,
/// and a label set must stay bounded).
fn metric_method(method: &str) -> &'static str {
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
    ];
    KNOWN
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}
