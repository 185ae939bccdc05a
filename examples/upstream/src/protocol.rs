//! JSON-RPC framing and the two MCP eras: parsing a POST body, deciding which era a request
//! speaks, and the 2026-07-28 validation ladder (`_meta`, routing headers, version).

use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use serde_json::{Map, Value, json};

pub const MODERN_VERSION: &str = "2026-07-28";
pub const LEGACY_VERSIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];
pub const LATEST_LEGACY: &str = "2025-11-25";
/// Versions before the modern era that a client may name in `MCP-Protocol-Version`.
const HANDSHAKE_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

pub const H_SESSION: &str = "mcp-session-id";
pub const H_VERSION: &str = "mcp-protocol-version";
pub const H_METHOD: &str = "mcp-method";
pub const H_NAME: &str = "mcp-name";

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
/// Legacy-era "resource not found" (2026-07-28 uses -32602 instead).
pub const RESOURCE_NOT_FOUND: i64 = -32002;
pub const HEADER_MISMATCH: i64 = -32020;
pub const MISSING_CAPABILITY: i64 = -32021;
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub fn to_json(&self) -> Value {
        let mut e = json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            e["data"] = data.clone();
        }
        e
    }

    /// HTTP status for this error on the 2026-07-28 wire (legacy answers errors with 200).
    pub fn modern_status(&self) -> StatusCode {
        match self.code {
            PARSE_ERROR | INVALID_REQUEST | INVALID_PARAMS | HEADER_MISMATCH
            | MISSING_CAPABILITY | UNSUPPORTED_VERSION => StatusCode::BAD_REQUEST,
            METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            _ => StatusCode::OK,
        }
    }

    pub fn unsupported_version(requested: &Value, supported: &[&str], message: &str) -> Self {
        Self::new(UNSUPPORTED_VERSION, message)
            .with_data(json!({ "supported": supported, "requested": requested }))
    }
}

/// What a POST body carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notification,
    /// A JSON-RPC response posted by the client.
    Response,
}

/// One decoded JSON-RPC message.
#[derive(Debug, Clone)]
pub struct Message {
    pub kind: Kind,
    pub id: Value,
    pub method: String,
    pub params: Value,
}

impl Message {
    /// `params.name` of a `tools/call` (for recording).
    pub fn tool(&self) -> Option<&str> {
        (self.method == "tools/call")
            .then(|| self.params.get("name")?.as_str())
            .flatten()
    }

    pub fn meta(&self) -> Option<&Map<String, Value>> {
        self.params.get("_meta")?.as_object()
    }

    pub fn progress_token(&self) -> Option<&Value> {
        self.meta()?
            .get("progressToken")
            .filter(|t| t.is_string() || t.is_number())
    }

    /// The log level a 2026-07-28 request asks for (`_meta`); without it such a request gets
    /// no log notifications.
    pub fn log_level(&self) -> Option<&str> {
        self.meta()?
            .get("io.modelcontextprotocol/logLevel")?
            .as_str()
    }
}

/// Decodes a POST body into a single JSON-RPC message.
pub fn parse(body: &[u8]) -> Result<Message, RpcError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|_| RpcError::new(PARSE_ERROR, "Parse error"))?;
    let Value::Object(mut obj) = value else {
        return Err(RpcError::new(
            INVALID_REQUEST,
            "Body must be a single JSON-RPC request or notification object",
        ));
    };
    let id = obj.remove("id");
    let params = obj.remove("params").unwrap_or(Value::Null);
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => return Err(RpcError::new(INVALID_REQUEST, "`method` must be a string")),
        None if id.is_some() && (obj.contains_key("result") || obj.contains_key("error")) => {
            return Ok(Message {
                kind: Kind::Response,
                id: Value::Null,
                method: String::new(),
                params,
            });
        }
        None => return Err(RpcError::new(INVALID_REQUEST, "missing `method`")),
    };
    if !matches!(params, Value::Null | Value::Object(_)) {
        return Err(RpcError::new(INVALID_REQUEST, "`params` must be an object"));
    }
    match id {
        None => Ok(Message {
            kind: Kind::Notification,
            id: Value::Null,
            method,
            params,
        }),
        Some(id @ (Value::String(_) | Value::Number(_))) => Ok(Message {
            kind: Kind::Request,
            id,
            method,
            params,
        }),
        Some(_) => Err(RpcError::new(
            INVALID_REQUEST,
            "`id` must be a string or a number",
        )),
    }
}

/// Which era one request speaks, on a dual-era endpoint.
///
/// Body first: a `_meta` protocol version is modern, `initialize` is legacy; then headers:
/// a session id is legacy, a non-handshake `MCP-Protocol-Version` is modern; `server/discover`
/// is modern; anything else is legacy (and will need a session).
pub fn is_modern(msg: &Message, headers: &HeaderMap) -> bool {
    if msg
        .meta()
        .is_some_and(|m| m.contains_key(META_PROTOCOL_VERSION))
    {
        return true;
    }
    if msg.method == "initialize" || headers.contains_key(H_SESSION) {
        return false;
    }
    if let Some(v) = header_str(headers, H_VERSION) {
        return !HANDSHAKE_VERSIONS.contains(&v);
    }
    msg.method == "server/discover"
}

pub fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name)?.to_str().ok()
}

/// The 2026-07-28 request ladder, in the order the reference SDK applies it.
pub fn check_modern_request(msg: &Message, headers: &HeaderMap) -> Result<(), RpcError> {
    for name in [H_VERSION, H_METHOD, H_NAME] {
        if headers.get_all(name).iter().nth(1).is_some() {
            return Err(mismatch(format!("{name} header appears more than once")));
        }
    }
    let meta = msg.meta().ok_or_else(|| {
        RpcError::new(
            INVALID_PARAMS,
            format!(
                "params._meta must be an object carrying the required \
                 '{META_PROTOCOL_VERSION}' and '{META_CLIENT_CAPABILITIES}' keys"
            ),
        )
    })?;
    let missing: Vec<&str> = [META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES]
        .into_iter()
        .filter(|k| !meta.contains_key(*k))
        .collect();
    if !missing.is_empty() {
        return Err(RpcError::new(
            INVALID_PARAMS,
            format!(
                "params._meta is missing the required key(s): {}",
                missing.join(", ")
            ),
        ));
    }
    let requested = meta.get(META_PROTOCOL_VERSION).unwrap_or(&Value::Null);
    match header_str(headers, H_VERSION) {
        Some(h) if Some(h) == requested.as_str() => {}
        Some(h) => {
            return Err(mismatch(format!(
                "MCP-Protocol-Version header '{h}' does not match _meta protocol version {requested}"
            )));
        }
        None => return Err(mismatch("MCP-Protocol-Version header is missing".into())),
    }
    match header_str(headers, H_METHOD) {
        Some(h) if h == msg.method => {}
        Some(h) => {
            return Err(mismatch(format!(
                "Mcp-Method header '{h}' does not match body method '{}'",
                msg.method
            )));
        }
        None => return Err(mismatch("Mcp-Method header is missing".into())),
    }
    let name_key = match msg.method.as_str() {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    };
    if let Some(body) = name_key.and_then(|k| msg.params.get(k)?.as_str()) {
        match headers
            .get(H_NAME)
            .map(|h| decode_header_value(h.as_bytes()))
        {
            Some(Some(h)) if h == body => {}
            Some(_) => {
                return Err(mismatch(format!(
                    "Mcp-Name header does not match body value '{body}'"
                )));
            }
            None => return Err(mismatch("Mcp-Name header is missing".into())),
        }
    }
    if requested.as_str() != Some(MODERN_VERSION) {
        return Err(RpcError::unsupported_version(
            requested,
            &[MODERN_VERSION],
            "Unsupported protocol version",
        ));
    }
    Ok(())
}

/// Checks an `Mcp-Param-{token}` header against the argument it mirrors (absent together,
/// or equal after decoding).
pub fn check_param_header(
    headers: &HeaderMap,
    token: &str,
    arg: Option<&str>,
) -> Result<(), RpcError> {
    let name = format!("mcp-param-{}", token.to_ascii_lowercase());
    let header = headers
        .get(&name)
        .map(|h| decode_header_value(h.as_bytes()));
    match (header, arg) {
        (None, None) => Ok(()),
        (Some(Some(h)), Some(a)) if h == a => Ok(()),
        (None, Some(_)) => Err(mismatch(format!(
            "Mcp-Param-{token} header is missing but the argument is present"
        ))),
        _ => Err(mismatch(format!(
            "Mcp-Param-{token} header does not match the argument"
        ))),
    }
}

fn mismatch(message: String) -> RpcError {
    RpcError::new(HEADER_MISMATCH, format!("Header mismatch: {message}"))
}

/// Decodes a header value, unwrapping the `=?base64?…?=` sentinel. `None` if malformed.
pub fn decode_header_value(raw: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(raw).ok()?;
    match text
        .strip_prefix("=?base64?")
        .and_then(|t| t.strip_suffix("?="))
    {
        Some(b64) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(text.to_owned()),
    }
}

/// All request headers as a JSON object with lower-case names (repeats joined with ", ").
pub fn headers_json(headers: &HeaderMap) -> Map<String, Value> {
    let mut out = Map::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes());
        match out.get_mut(name.as_str()) {
            Some(Value::String(prev)) => {
                prev.push_str(", ");
                prev.push_str(&value);
            }
            _ => {
                out.insert(name.as_str().to_owned(), Value::String(value.into_owned()));
            }
        }
    }
    out
}

pub fn response(id: &Value, result: Result<Value, RpcError>) -> Value {
    match result {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err(e) => json!({ "jsonrpc": "2.0", "id": id, "error": e.to_json() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn modern_body(method: &str, extra: Value) -> Message {
        let mut params = json!({ "_meta": {
            META_PROTOCOL_VERSION: MODERN_VERSION, META_CLIENT_CAPABILITIES: {} } });
        if let (Some(p), Value::Object(e)) = (params.as_object_mut(), extra) {
            p.extend(e);
        }
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        parse(body.to_string().as_bytes()).unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn parse_kinds_and_errors() {
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
                .unwrap()
                .kind,
            Kind::Notification
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#)
                .unwrap()
                .kind,
            Kind::Response
        );
        assert_eq!(parse(b"nope").unwrap_err().code, PARSE_ERROR);
        assert_eq!(parse(b"[]").unwrap_err().code, INVALID_REQUEST);
        assert_eq!(
            parse(br#"{"id":{},"method":"x"}"#).unwrap_err().code,
            INVALID_REQUEST
        );
    }

    #[test]
    fn era_classification() {
        let legacy = parse(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).unwrap();
        assert!(!is_modern(&legacy, &HeaderMap::new()));
        assert!(is_modern(&legacy, &headers(&[(H_VERSION, "2026-07-28")])));
        assert!(!is_modern(&legacy, &headers(&[(H_VERSION, "2025-06-18")])));
        assert!(is_modern(
            &modern_body("tools/list", json!({})),
            &headers(&[(H_SESSION, "x")])
        ));
    }

    #[test]
    fn ladder_order_and_codes() {
        let call = modern_body("tools/call", json!({ "name": "add" }));
        let ok = [
            (H_VERSION, MODERN_VERSION),
            (H_METHOD, "tools/call"),
            (H_NAME, "add"),
        ];
        assert_eq!(check_modern_request(&call, &headers(&ok)), Ok(()));
        let b64 = [
            (H_VERSION, MODERN_VERSION),
            (H_METHOD, "tools/call"),
            (H_NAME, "=?base64?YWRk?="),
        ];
        assert_eq!(check_modern_request(&call, &headers(&b64)), Ok(()));
        for bad in [
            &[(H_VERSION, MODERN_VERSION), (H_METHOD, "tools/call")][..],
            &[
                (H_VERSION, MODERN_VERSION),
                (H_METHOD, "tools/list"),
                (H_NAME, "add"),
            ],
            &[(H_METHOD, "tools/call"), (H_NAME, "add")],
            &[
                (H_VERSION, MODERN_VERSION),
                (H_METHOD, "tools/call"),
                (H_NAME, "add"),
                (H_NAME, "add"),
            ],
        ] {
            assert_eq!(
                check_modern_request(&call, &headers(bad)).unwrap_err().code,
                HEADER_MISMATCH
            );
        }
        let no_meta = parse(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).unwrap();
        assert_eq!(
            check_modern_request(&no_meta, &HeaderMap::new())
                .unwrap_err()
                .code,
            INVALID_PARAMS
        );
        let mut future = modern_body("tools/list", json!({}));
        future.params["_meta"][META_PROTOCOL_VERSION] = json!("2099-01-01");
        let e = check_modern_request(
            &future,
            &headers(&[(H_VERSION, "2099-01-01"), (H_METHOD, "tools/list")]),
        )
        .unwrap_err();
        assert_eq!(
            (e.code, e.modern_status()),
            (UNSUPPORTED_VERSION, StatusCode::BAD_REQUEST)
        );
        assert_eq!(e.data.unwrap()["supported"], json!([MODERN_VERSION]));
    }

    #[test]
    fn param_headers() {
        let h = headers(&[("mcp-param-tag", "=?base64?w6k=?=")]);
        assert_eq!(check_param_header(&h, "Tag", Some("é")), Ok(()));
        assert!(check_param_header(&h, "Tag", None).is_err());
        assert!(check_param_header(&HeaderMap::new(), "Tag", Some("x")).is_err());
        assert_eq!(check_param_header(&HeaderMap::new(), "Tag", None), Ok(()));
    }
}
