//! `Mcp-Param-*` headers (2026-07-28): a tool's input schema may mark a parameter with
//! `x-mcp-header: Name`, and a 2026-07-28 request must then repeat that argument in the header
//! `Mcp-Param-Name`. A modern client sends them itself and the gateway forwards them, since it
//! forwards the arguments unchanged; for a legacy client calling a modern upstream the gateway
//! derives them from the schema it listed.

use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use crate::encode_header_value;

/// Whether the caller already sent tool-parameter headers (then they are forwarded as sent).
pub fn caller_sent_any(headers: &HeaderMap) -> bool {
    headers.keys().any(|n| n.as_str().starts_with("mcp-param-"))
}

/// The headers `arguments` call for under `input_schema`. Only parameters reached through a
/// chain of `properties` are eligible, as the specification says; a null or absent argument
/// means no header.
pub fn derive(input_schema: &Value, arguments: Option<&Value>) -> HeaderMap {
    let mut out = HeaderMap::new();
    if let Some(arguments) = arguments {
        collect(input_schema, arguments, &mut out, 0);
    }
    out
}

/// The schema keyword that names a parameter's header.
pub const MARK: &str = "x-mcp-header";

fn collect(schema: &Value, value: &Value, out: &mut HeaderMap, depth: usize) {
    let (Some(properties), Value::Object(values)) =
        (schema.get("properties").and_then(Value::as_object), value)
    else {
        return;
    };
    if depth > 16 {
        return;
    }
    for (name, property) in properties {
        let Some(argument) = values.get(name) else {
            continue;
        };
        if let Some(header) = property.get(MARK).and_then(Value::as_str) {
            let text = match argument {
                Value::String(s) => Some(encode_header_value(s)),
                Value::Bool(b) => Some(b.to_string()),
                Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
                _ => None,
            };
            let name = HeaderName::from_bytes(
                format!("mcp-param-{}", header.to_ascii_lowercase()).as_bytes(),
            );
            if let (Some(text), Ok(name)) = (text, name)
                && let Ok(value) = HeaderValue::from_str(&text)
            {
                out.insert(name, value);
            }
        }
        collect(property, argument, out, depth + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn headers_follow_the_schema() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "count": {"type": "integer", "x-mcp-header": "Count"},
            "plain": {"type": "string"},
            "nested": {"type": "object", "properties": {"flag": {"type": "boolean", "x-mcp-header": "Flag"}}},
        }});
        let h = derive(
            &schema,
            Some(&json!({"region": "us-wést", "count": 3, "plain": "x", "nested": {"flag": true}})),
        );
        assert_eq!(h["mcp-param-region"], "=?base64?dXMtd8Opc3Q=?=");
        assert_eq!(h["mcp-param-count"], "3");
        assert_eq!(h["mcp-param-flag"], "true");
        assert_eq!(h.len(), 3);
        assert!(derive(&schema, Some(&json!({"region": null}))).is_empty());
    }
}
