//! What a client sent: one JSON-RPC message read (a call, or a reply to a relayed request), and
//! what the era checks made of it (`EraChecked`).

use axum::response::Response;
use serde_json::{Map, Value};

use switchboard_core::errors::GatewayError;
use switchboard_protocol::Params;
use switchboard_protocol::scan;
use switchboard_upstream::SessionScope;

/// A JSON-RPC message from a client.
pub enum Incoming {
    /// A request (with an id) or a notification (without).
    Call(Message),
    /// A response to a request the gateway relayed to the client.
    Reply { id: Value, body: Map<String, Value> },
}

pub struct Message {
    pub(super) id: Option<Value>,
    pub(super) method: String,
    pub params: Option<Params>,
}

/// A call read in one pass (`switchboard_protocol::scan::read_call`: the protocol's walk of the
/// common call, else serde's reading of its members); `None` sends the body to the whole
/// reading.
fn read_call(body: &str) -> Option<Message> {
    let call = scan::read_call(body)?;
    let params = match call.params {
        Some(read) => Some(Params::from_read(body, read)?),
        None => None,
    };
    Some(Message {
        id: call.id,
        method: call.method.into_owned(),
        params,
    })
}

pub fn parse_message(body: &[u8]) -> Result<Incoming, GatewayError> {
    // UTF-8 checked once for the whole body: read from bytes, the parser checks every string
    // on its own (a per-string cost on every call).
    let body = std::str::from_utf8(body).map_err(|e| GatewayError::Parse(e.to_string()))?;
    if let Some(call) = read_call(body) {
        return Ok(Incoming::Call(call));
    }
    let value: Value =
        serde_json::from_str(body).map_err(|e| GatewayError::Parse(e.to_string()))?;
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
        // A response: it must answer something, with a result or an error.
        let answers = obj.contains_key("result") != obj.contains_key("error");
        return match obj.get("id") {
            Some(id) if answers && !id.is_null() => Ok(Incoming::Reply {
                id: id.clone(),
                body: obj,
            }),
            _ => Err(GatewayError::InvalidRequest(
                "a message without a method is a response: it needs an id and one of result or error".into(),
            )),
        };
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
    Ok(Incoming::Call(Message {
        id: obj.remove("id"),
        method,
        params: params.map(Params::from),
    }))
}

/// What a request's era checks decided: the gateway answers itself, or the method goes on.
pub(super) enum EraChecked {
    /// The gateway answers itself (legacy `initialize`).
    Answer(Response),
    /// Go on to the method, on this client's upstream sessions.
    Dispatch { session: SessionScope },
}
