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
    // Read as members: the common call is never read into a tree (`Params`).
    let params = message.params.as_ref();
    let version = params.and_then(|p| p.meta_str(META_PROTOCOL_VERSION));
    // (Its bits read from its text: the object is not needed whole.)
    let capabilities = params.and_then(|p| match p.meta_text(META_CLIENT_CAPABILITIES) {
        Some(text) => Some(capabilities::text_bits(text)),
        None => p
            .meta_member(META_CLIENT_CAPABILITIES)
            .map(|caps| capabilities::to_bits(Some(&caps))),
    });
    let (Some(version), Some(capabilities)) = (version.as_deref(), capabilities) else {
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
    if header_str(headers, protocol::headers::PROTOCOL_VERSION) != Some(version) {
        return Err(mismatch(
            "MCP-Protocol-Version header must equal _meta protocolVersion",
        ));
    }
    if header_str(headers, protocol::headers::METHOD) != Some(message.method.as_str()) {
        return Err(mismatch("Mcp-Method header must equal the body's method"));
    }
    let body_name = protocol::named_field(&message.method).and_then(|f| params?.str_member(f));
    if let Some(body_name) = body_name {
        let header_name =
            header_str(headers, protocol::headers::NAME).and_then(protocol::decode_header_value);
        if header_name.as_deref() != Some(&*body_name) {
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
    Ok(EraChecked::Dispatch {
        session: SessionScope {
            client: 0,
            capabilities,
        },
    })
}

#[cfg(test)]
mod tests {
    //! The 2026-07-28 header checks: each absence or mismatch refused with the code and
    //! message that name it, and a request that repeats its body in its headers let through.
    use axum::http::HeaderValue;

    use super::super::message::{Incoming, parse_message};
    use super::*;
    use switchboard_protocol::capabilities;

    /// A `tools/call` of `name` whose `_meta` says `version` (and carries capabilities when
    /// `capabilities`), with headers that repeat the body.
    fn request(name: &str, version: &str, with_capabilities: bool) -> (HeaderMap, Message) {
        let mut meta = json!({ META_PROTOCOL_VERSION: version });
        if with_capabilities {
            meta[META_CLIENT_CAPABILITIES] = json!({"elicitation": {}});
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": name, "_meta": meta}});
        let Ok(Incoming::Call(message)) = parse_message(body.to_string().as_bytes()) else {
            panic!("a call");
        };
        let mut headers = HeaderMap::new();
        for (header, value) in [
            ("mcp-protocol-version", version.to_string()),
            ("mcp-method", "tools/call".to_string()),
            ("mcp-name", protocol::encode_header_value(name)),
        ] {
            headers.insert(
                header,
                HeaderValue::from_str(&value).expect("a header value"),
            );
        }
        (headers, message)
    }

    /// The refusal's code, message and data.
    fn refusal(checked: Result<EraChecked, GatewayError>) -> (i64, String, Option<Value>) {
        match checked {
            Err(GatewayError::Protocol {
                code,
                message,
                status,
                data,
            }) => {
                assert_eq!(status, axum::http::StatusCode::BAD_REQUEST, "{message}");
                (code, message, data)
            }
            Err(other) => panic!("a protocol error, not {other}"),
            Ok(_) => panic!("refused"),
        }
    }

    #[test]
    fn a_request_that_repeats_its_body_goes_on_statelessly() {
        let (headers, message) = request("up__echo", MODERN_VERSION, true);
        match check_modern(&headers, &message) {
            Ok(EraChecked::Dispatch { session }) => {
                assert_eq!(session.client, 0, "no legacy session");
                let asked = json!({"elicitation": {}});
                assert_eq!(session.capabilities, capabilities::to_bits(Some(&asked)));
            }
            _ => panic!("dispatched"),
        }
        // A name that is no safe header text arrives encoded, and is compared decoded.
        let (headers, message) = request("ünïcode tool", MODERN_VERSION, true);
        assert!(
            headers["mcp-name"]
                .to_str()
                .unwrap()
                .starts_with("=?base64?")
        );
        assert!(check_modern(&headers, &message).is_ok());
        // A method that names nothing needs no Mcp-Name.
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
            META_PROTOCOL_VERSION: MODERN_VERSION, META_CLIENT_CAPABILITIES: {}}}});
        let Ok(Incoming::Call(list)) = parse_message(body.to_string().as_bytes()) else {
            panic!("a call");
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            "mcp-protocol-version",
            HeaderValue::from_static(MODERN_VERSION),
        );
        headers.insert("mcp-method", HeaderValue::from_static("tools/list"));
        assert!(check_modern(&headers, &list).is_ok());
    }

    #[test]
    fn meta_without_the_version_or_the_capabilities_is_invalid_params() {
        let (headers, message) = request("up__echo", MODERN_VERSION, false);
        let (code, text, _) = refusal(check_modern(&headers, &message));
        assert_eq!(code, codes::INVALID_PARAMS);
        assert!(text.contains(META_CLIENT_CAPABILITIES), "{text}");

        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                          "params": {"_meta": { META_CLIENT_CAPABILITIES: {} }}});
        let Ok(Incoming::Call(message)) = parse_message(body.to_string().as_bytes()) else {
            panic!("a call");
        };
        let (code, text, _) = refusal(check_modern(&headers, &message));
        assert_eq!(code, codes::INVALID_PARAMS);
        assert!(text.contains(META_PROTOCOL_VERSION), "{text}");
    }

    /// Each header that must repeat the body, absent and different: `HEADER_MISMATCH`,
    /// naming the header.
    #[test]
    fn each_header_that_does_not_repeat_the_body_is_named() {
        for (header, other) in [
            ("mcp-protocol-version", "2025-11-25"),
            ("mcp-method", "tools/list"),
            ("mcp-name", "up__other"),
        ] {
            let named = match header {
                "mcp-protocol-version" => "MCP-Protocol-Version header",
                "mcp-method" => "Mcp-Method header",
                _ => "Mcp-Name header",
            };
            let (mut headers, message) = request("up__echo", MODERN_VERSION, true);
            headers.insert(header, HeaderValue::from_static(other));
            let (code, text, _) = refusal(check_modern(&headers, &message));
            assert_eq!(code, HEADER_MISMATCH, "{header} different");
            assert!(
                text.starts_with("Header mismatch") && text.contains(named),
                "{text}"
            );

            headers.remove(header);
            let (code, text, _) = refusal(check_modern(&headers, &message));
            assert_eq!(code, HEADER_MISMATCH, "{header} absent");
            assert!(text.contains(named), "{text}");
        }
    }

    /// A version the gateway does not serve, consistent in body and header: refused naming
    /// what it serves and what was asked.
    #[test]
    fn an_unserved_version_is_refused_with_the_supported_ones() {
        let (headers, message) = request("up__echo", "2027-01-01", true);
        let (code, text, data) = refusal(check_modern(&headers, &message));
        assert_eq!(code, UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(text, "Unsupported protocol version");
        let data = data.expect("data");
        assert_eq!(data["requested"], "2027-01-01");
        assert_eq!(data["supported"], json!(protocol::supported_versions()));
    }

    #[test]
    fn a_legacy_initialize_reads_as_a_discover_result() {
        let init = json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                          "instructions": "be nice", "serverInfo": {"name": "s", "version": "1"}});
        let discovered = discover_from_initialize(&init);
        assert_eq!(
            discovered,
            json!({"resultType": "complete", "capabilities": {"tools": {}},
                   "instructions": "be nice", "ttlMs": 0, "cacheScope": "private",
                   "_meta": { META_SERVER_INFO: {"name": "s", "version": "1"} }})
        );
        let bare = discover_from_initialize(&json!({}));
        assert_eq!(bare["capabilities"], json!({}));
        assert!(bare.get("instructions").is_none() && bare.get("_meta").is_none());
    }
}
