//! The 2026-07-28 era: the per-request headers checked against the body, and `server/discover`.

use axum::http::HeaderMap;
use serde_json::{Map, Value, json};

use crate::context::McpContext;
use crate::dispatch::{Answer, Failure, Request};
use crate::target::{Target, dispatch};
use switchboard_core::errors::{GatewayError, codes};
use switchboard_core::scope::Caller;
use switchboard_protocol::capabilities;
use switchboard_protocol::{
    self as protocol, HEADER_MISMATCH, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION,
    META_SERVER_INFO, MODERN_VERSION, UNSUPPORTED_PROTOCOL_VERSION,
};
use switchboard_upstream::SessionScope;

use super::message::{EraChecked, Message};
use super::replies::{header_str, protocol_error};

/// `server/discover`: on `/mcp/{prefix}` the upstream's own answer (its serverInfo,
/// instructions, capabilities, extensions), with the versions the gateway serves (it speaks
/// every era to the client, whatever the upstream speaks); on `/mcp` the gateway's.
pub(super) async fn discover(
    cx: &McpContext,
    caller: &Caller,
    target: &Target,
    request: Request,
) -> Result<Answer, Failure> {
    let Target::Single(server) = target else {
        return Ok(Answer::Json(gateway_discover(cx, caller).await));
    };
    let mut result = match cx
        .upstream
        .legacy_identity(caller, server, request.session)
        .await?
    {
        Some(init) => discover_from_initialize(&init),
        None => match dispatch(cx, caller, target, request).await? {
            Answer::Json(v) => v,
            // The upstream's discover arrived as a stream; relay it as it is.
            other => return Ok(other),
        },
    };
    if let Value::Object(m) = &mut result {
        m.insert(
            "supportedVersions".into(),
            json!(protocol::supported_versions()),
        );
    }
    Ok(Answer::Json(result))
}

/// A legacy upstream's `initialize` result in the shape of a 2026-07-28 discover result.
pub(super) fn discover_from_initialize(init: &Value) -> Value {
    let mut result = Map::new();
    result.insert("resultType".into(), Value::from("complete"));
    result.insert(
        "capabilities".into(),
        init.get("capabilities").cloned().unwrap_or(json!({})),
    );
    if let Some(instructions) = init.get("instructions") {
        result.insert("instructions".into(), instructions.clone());
    }
    result.insert("ttlMs".into(), Value::from(0));
    result.insert("cacheScope".into(), Value::from("private"));
    if let Some(info) = init.get("serverInfo") {
        result.insert("_meta".into(), json!({ META_SERVER_INFO: info }));
    }
    Value::Object(result)
}

/// The aggregate's identity: the gateway, advertising what every server behind it in the
/// caller's scope supports.
pub(super) async fn gateway_discover(cx: &McpContext, caller: &Caller) -> Value {
    json!({
        "supportedVersions": protocol::supported_versions(),
        "capabilities": aggregate_capabilities(cx, caller),
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": { META_SERVER_INFO: {"name": "switchboard", "version": env!("CARGO_PKG_VERSION")} },
    })
}

/// The aggregate endpoint serves tools, prompts and resources merged across servers.
pub(super) fn aggregate_capabilities(_cx: &McpContext, _caller: &Caller) -> Value {
    json!({
        "tools": {"listChanged": false},
        "prompts": {"listChanged": false},
        "resources": {"listChanged": false, "subscribe": false},
    })
}

/// 2026-07-28: `_meta` must carry the version and capabilities; `MCP-Protocol-Version`,
/// `Mcp-Method` and `Mcp-Name` must repeat the body; the version must be one we serve.
pub(super) fn check_modern(
    headers: &HeaderMap,
    message: &Message,
) -> Result<EraChecked, GatewayError> {
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
    let body_name = protocol::named_field(&message.method)
        .and_then(|f| message.params.as_ref()?.get(f)?.as_str());
    if let Some(body_name) = body_name {
        let header_name = header_str(headers, "mcp-name").and_then(protocol::decode_header_value);
        if header_name.as_deref() != Some(body_name) {
            return Err(mismatch("Mcp-Name header must equal the body's name"));
        }
    }
    if version != MODERN_VERSION {
        return Err(protocol_error(
            UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version".into(),
            Some(json!({ "supported": protocol::supported_versions(), "requested": version })),
        ));
    }
    // A legacy upstream hears a 2026-07-28 client's capabilities through the session the
    // gateway opens for them.
    let capabilities = capabilities::to_bits(meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES)));
    Ok(EraChecked::Dispatch {
        session: SessionScope {
            client: 0,
            capabilities,
        },
    })
}
