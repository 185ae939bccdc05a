//! A tool call's arguments as the REST request the operation describes.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Map, Value};

use crate::compile::{OperationTool, ParamLocation};

/// Characters a path segment keeps unencoded (RFC 3986 unreserved).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The REST request of one call, relative to the server's base URL.
#[derive(Debug, PartialEq)]
pub struct RestRequest {
    pub method: http::Method,
    /// The path with its parameters filled in, and the query string (`/pets/7?verbose=true`).
    pub path_and_query: String,
    pub headers: Vec<(String, String)>,
    /// The JSON body, serialized, and its media type (the operation's, e.g.
    /// `application/merge-patch+json`; static because the HTTP client takes it so).
    pub body: Option<(&'static str, Vec<u8>)>,
}

/// Why a tool call's arguments make no request (nothing is sent): each names the argument.
/// The model can correct its arguments, so the caller answers with a tool error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgumentError {
    #[error("unknown argument {0:?}")]
    Unknown(String),
    #[error("missing required argument {0:?}")]
    Missing(String),
    #[error("argument {0:?} must be a string, number or boolean")]
    NotScalar(String),
    #[error("argument {0:?} must not be empty, \".\" or \"..\": it is one segment of the path")]
    LeavesSegment(String),
    #[error("argument {0:?} must not contain CR, LF or NUL")]
    ControlCharacter(String),
}

impl OperationTool {
    /// Where each argument goes; a missing required one, or an argument the tool does not
    /// have, is an error naming it (the request is not sent).
    pub fn request(
        &self,
        arguments: Option<&Map<String, Value>>,
    ) -> Result<RestRequest, ArgumentError> {
        let empty = Map::new();
        let arguments = arguments.unwrap_or(&empty);
        for name in arguments.keys() {
            let known = self.params.iter().any(|p| &p.name == name)
                || self.body.as_ref().is_some_and(|b| &b.argument == name);
            if !known {
                return Err(ArgumentError::Unknown(name.clone()));
            }
        }
        let mut path = self.path.clone();
        let mut query: Vec<(String, String)> = Vec::new();
        let mut headers = Vec::new();
        let mut cookies = Vec::new();
        for param in &self.params {
            let Some(value) = arguments.get(&param.name).filter(|v| !v.is_null()) else {
                if param.required {
                    return Err(ArgumentError::Missing(param.name.clone()));
                }
                continue;
            };
            match param.location {
                ParamLocation::Path => {
                    let text = scalar(value)
                        .ok_or_else(|| ArgumentError::NotScalar(param.name.clone()))?;
                    // `.` and `..` are kept as they are by the encoding, and every URL parser
                    // (the one the request goes through too) removes them with the segment
                    // before: `/stores/s1/orders/..` is `/stores/s1/`, another operation's path.
                    // An empty value makes `/orders/`, which a server may redirect elsewhere.
                    if matches!(text.as_str(), "" | "." | "..") {
                        return Err(ArgumentError::LeavesSegment(param.name.clone()));
                    }
                    let encoded = utf8_percent_encode(&text, SEGMENT).to_string();
                    path = path.replace(&format!("{{{}}}", param.name), &encoded);
                }
                ParamLocation::Query => match value {
                    Value::Array(items) if param.explode => {
                        for item in items {
                            query.push((
                                param.name.clone(),
                                scalar(item).unwrap_or_else(|| item.to_string()),
                            ));
                        }
                    }
                    Value::Array(items) => query.push((param.name.clone(), joined(items))),
                    other => query.push((param.name.clone(), text_of(other))),
                },
                ParamLocation::Header => {
                    let text = match value {
                        Value::Array(items) => joined(items),
                        other => text_of(other),
                    };
                    if text.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
                        return Err(ArgumentError::ControlCharacter(param.name.clone()));
                    }
                    headers.push((param.name.clone(), text));
                }
                ParamLocation::Cookie => {
                    let text = text_of(value);
                    cookies.push(format!(
                        "{}={}",
                        param.name,
                        utf8_percent_encode(&text, SEGMENT)
                    ));
                }
            }
        }
        if !cookies.is_empty() {
            headers.push(("cookie".into(), cookies.join("; ")));
        }
        let body = match &self.body {
            Some(body) => match arguments.get(&body.argument) {
                Some(value) => Some((
                    static_media_type(&body.media_type),
                    serde_json::to_vec(value)
                        .map_err(|_| ArgumentError::NotScalar(body.argument.clone()))?,
                )),
                None if body.required => {
                    return Err(ArgumentError::Missing(body.argument.clone()));
                }
                None => None,
            },
            None => None,
        };
        if !query.is_empty() {
            let encoded: Vec<String> = query
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}={}",
                        utf8_percent_encode(k, SEGMENT),
                        utf8_percent_encode(v, SEGMENT)
                    )
                })
                .collect();
            path.push('?');
            path.push_str(&encoded.join("&"));
        }
        Ok(RestRequest {
            method: self.method.clone(),
            path_and_query: path,
            headers,
            body,
        })
    }
}

/// Most distinct body media types kept for the process (documents name a handful).
const MAX_MEDIA_TYPES: usize = 64;
/// Body media types common enough to need no interning (the first is the fallback).
const KNOWN_MEDIA_TYPES: [&str; 6] = [
    "application/json",
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
    "application/vnd.api+json",
    "application/problem+json",
];

/// A body media type as a `&'static str`: the common JSON types as constants, others
/// (`application/vnd.example.v2+json`) made static once each, up to [`MAX_MEDIA_TYPES`] (then,
/// and for a value that cannot be a header value, `application/json`), so no document, however
/// often fetched, grows the set further.
pub(crate) fn static_media_type(media_type: &str) -> &'static str {
    if let Some(known) = KNOWN_MEDIA_TYPES
        .into_iter()
        .find(|k| k.eq_ignore_ascii_case(media_type))
    {
        return known;
    }
    // What `HeaderValue::from_static` (the HTTP client's) takes without a panic: visible
    // ASCII, space and tab (`from_str` would let bytes past ASCII through).
    let header_safe = media_type
        .bytes()
        .all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
    if media_type.is_empty() || !header_safe {
        return KNOWN_MEDIA_TYPES[0];
    }
    static SEEN: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(found) = seen.iter().copied().find(|s| *s == media_type) {
        return found;
    }
    if seen.len() >= MAX_MEDIA_TYPES {
        return KNOWN_MEDIA_TYPES[0];
    }
    let made: &'static str = Box::leak(media_type.to_string().into_boxed_str());
    seen.push(made);
    made
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A scalar as itself, anything else as its JSON text.
fn text_of(value: &Value) -> String {
    scalar(value).unwrap_or_else(|| value.to_string())
}

fn joined(items: &[Value]) -> String {
    items.iter().map(text_of).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::ArgumentError;
    use crate::compile;
    use serde_json::json;
    use switchboard_snapshot::OpenApiSpec;

    const DOC: &str = r#"{"openapi": "3.1.0", "paths": {"/items/{id}": {"post": {
        "operationId": "update",
        "parameters": [
          {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
          {"name": "tag", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
          {"name": "X-Req", "in": "header", "schema": {"type": "string"}},
          {"name": "session", "in": "cookie", "schema": {"type": "string"}}
        ],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object"}}}},
        "responses": {"200": {"description": "ok"}}}}}}"#;

    #[test]
    fn arguments_go_where_the_operation_says() {
        let c = compile(DOC, &OpenApiSpec::default()).unwrap();
        let t = c.tool("update").unwrap();
        let args = json!({"id": "a b/c", "tag": ["x", "y z"], "X-Req": "r1", "session": "s", "body": {"k": 1}});
        let r = t.request(args.as_object()).unwrap();
        assert_eq!(r.method, http::Method::POST);
        assert_eq!(r.path_and_query, "/items/a%20b%2Fc?tag=x&tag=y%20z");
        assert_eq!(
            r.headers,
            [
                ("X-Req".to_string(), "r1".to_string()),
                ("cookie".to_string(), "session=s".to_string())
            ]
        );
        assert_eq!(r.body, Some(("application/json", br#"{"k":1}"#.to_vec())));
    }

    #[test]
    fn a_path_argument_cannot_leave_its_segment() {
        let c = compile(DOC, &OpenApiSpec::default()).unwrap();
        let t = c.tool("update").unwrap();
        for id in ["..", ".", ""] {
            let e = t
                .request(json!({"id": id, "body": {}}).as_object())
                .unwrap_err();
            assert_eq!(e, ArgumentError::LeavesSegment("id".into()), "{id:?}");
        }
        for (id, path) in [
            ("...", "/items/..."),
            ("a..b", "/items/a..b"),
            ("%2e%2e", "/items/%252e%252e"),
        ] {
            let r = t
                .request(json!({"id": id, "body": {}}).as_object())
                .unwrap();
            assert_eq!(r.path_and_query, path);
        }
    }

    #[test]
    fn body_media_types_are_static_once_each() {
        use crate::request::static_media_type;
        assert_eq!(
            static_media_type("application/merge-patch+json"),
            "application/merge-patch+json"
        );
        let vendor = static_media_type("application/vnd.example.v2+json");
        assert_eq!(vendor, "application/vnd.example.v2+json");
        assert!(std::ptr::eq(
            vendor,
            static_media_type("application/vnd.example.v2+json")
        ));
        assert_eq!(static_media_type("bad\nvalue"), "application/json");
        assert_eq!(
            static_media_type("application/vnd.ü+json"),
            "application/json"
        );
        // Every answer is one the HTTP client's `HeaderValue::from_static` takes.
        let _ = http::HeaderValue::from_static(static_media_type("application/x-ü+json"));
    }

    #[test]
    fn missing_unknown_and_unsafe_arguments_are_refused_by_name() {
        let c = compile(DOC, &OpenApiSpec::default()).unwrap();
        let t = c.tool("update").unwrap();
        let e = t.request(json!({"body": {}}).as_object()).unwrap_err();
        assert_eq!(e, ArgumentError::Missing("id".into()));
        assert_eq!(e.to_string(), "missing required argument \"id\"");
        let e = t.request(json!({"id": "1"}).as_object()).unwrap_err();
        assert_eq!(e, ArgumentError::Missing("body".into()));
        let e = t
            .request(json!({"id": "1", "body": {}, "extra": 1}).as_object())
            .unwrap_err();
        assert_eq!(e, ArgumentError::Unknown("extra".into()));
        let e = t
            .request(json!({"id": "1", "body": {}, "X-Req": "a\r\nb"}).as_object())
            .unwrap_err();
        assert_eq!(e, ArgumentError::ControlCharacter("X-Req".into()));
        assert!(e.to_string().contains("CR"), "{e}");
    }
}
