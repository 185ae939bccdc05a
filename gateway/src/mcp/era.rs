//! The two protocol eras a client can speak on one endpoint, and how a request says which.
//!
//! The 2026-07-28 revision is stateless: every request carries its version in
//! `params._meta["io.modelcontextprotocol/protocolVersion"]` and in the `MCP-Protocol-Version`
//! header. The legacy revisions open with `initialize` and then carry an `Mcp-Session-Id`.
//! Following the versioning page, the body decides first (modern `_meta` present, or the
//! method is `initialize`), then the headers.

use serde_json::Value;

pub const MODERN_VERSION: &str = "2026-07-28";
/// Legacy revisions served to clients, oldest first. A sealed session stores an index here.
pub const LEGACY_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
pub const LATEST_LEGACY_VERSION: &str = "2025-11-25";

pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// 2026-07-28 error codes (HTTP 400).
pub const HEADER_MISMATCH: i64 = -32020;
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2026-07-28: stateless, version per request.
    Modern,
    /// 2024-11-05 .. 2025-11-25: `initialize`, then a session.
    Legacy,
}

/// Which era a POST speaks.
pub fn classify(
    method: &str,
    params: Option<&Value>,
    version_header: Option<&str>,
    has_session: bool,
) -> Era {
    if method == "initialize" {
        return Era::Legacy;
    }
    let meta_version = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_PROTOCOL_VERSION));
    if meta_version.is_some() {
        return Era::Modern;
    }
    if has_session {
        return Era::Legacy;
    }
    match version_header {
        Some(v) if !LEGACY_VERSIONS.contains(&v) => Era::Modern,
        _ => Era::Legacy,
    }
}

pub fn legacy_version_index(version: &str) -> Option<u8> {
    LEGACY_VERSIONS
        .iter()
        .position(|v| *v == version)
        .map(|i| i as u8)
}

/// The version a legacy `initialize` negotiates: the client's if we serve it, else our latest.
pub fn negotiate_legacy(requested: Option<&str>) -> &'static str {
    requested
        .and_then(|r| LEGACY_VERSIONS.iter().find(|v| **v == r))
        .copied()
        .unwrap_or(LATEST_LEGACY_VERSION)
}

/// Decodes a 2026-07-28 header value (`=?base64?...?=` or plain).
pub fn decode_header_value(raw: &str) -> Option<String> {
    use base64::Engine;
    match raw
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .ok()
            .and_then(|b| String::from_utf8(b).ok()),
        None => Some(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn body_decides_before_headers() {
        let modern = json!({"_meta": {META_PROTOCOL_VERSION: "2026-07-28"}});
        assert_eq!(
            classify("tools/list", Some(&modern), None, false),
            Era::Modern
        );
        assert_eq!(
            classify("initialize", Some(&modern), None, false),
            Era::Legacy
        );
        assert_eq!(
            classify("tools/list", None, Some("2025-06-18"), true),
            Era::Legacy
        );
        assert_eq!(
            classify("tools/list", None, Some("2026-07-28"), false),
            Era::Modern
        );
        assert_eq!(classify("tools/list", None, None, false), Era::Legacy);
    }

    #[test]
    fn negotiation_and_header_decoding() {
        assert_eq!(negotiate_legacy(Some("2025-03-26")), "2025-03-26");
        assert_eq!(negotiate_legacy(Some("2026-07-28")), "2025-11-25");
        assert_eq!(
            decode_header_value("=?base64?aMOpbGxv?="),
            Some("héllo".into())
        );
        assert_eq!(decode_header_value("add"), Some("add".into()));
    }
}
