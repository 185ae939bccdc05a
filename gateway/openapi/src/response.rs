//! A REST response as a `tools/call` result: JSON as structured content and text, an error
//! status as a tool error with a bounded body, binary described rather than dumped.

use serde_json::{Value, json};

use crate::compile::{OperationTool, is_json};

/// Most bytes of an error response's body a tool error carries.
const MAX_ERROR_BODY: usize = 2048;
/// Most bytes of a non-JSON text response a result carries.
const MAX_TEXT: usize = 256 * 1024;

impl OperationTool {
    /// The tool result for a response (`status`, its `Content-Type`, its body).
    pub fn result(
        &self,
        status: http::StatusCode,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Value {
        let reason = status.canonical_reason().unwrap_or("");
        if !status.is_success() {
            let shown = bounded_text(body, MAX_ERROR_BODY);
            return json!({
                "content": [{"type": "text", "text": format!("HTTP {} {reason}: {shown}", status.as_u16())}],
                "isError": true,
            });
        }
        if body.is_empty() {
            return json!({"content": [{"type": "text", "text": format!("HTTP {} {reason}", status.as_u16())}]});
        }
        let content_type = content_type.unwrap_or("application/octet-stream");
        if is_json(content_type)
            && let Ok(value) = serde_json::from_slice::<Value>(body)
        {
            let text = String::from_utf8_lossy(body).into_owned();
            let structured = if self.wraps_output || !value.is_object() {
                json!({"result": value})
            } else {
                value
            };
            return json!({
                "content": [{"type": "text", "text": text}],
                "structuredContent": structured,
            });
        }
        let textual = content_type.starts_with("text/")
            || content_type.contains("xml")
            || content_type.contains("yaml");
        match std::str::from_utf8(body) {
            Ok(text) if textual => {
                json!({"content": [{"type": "text", "text": bounded_text(text.as_bytes(), MAX_TEXT)}]})
            }
            _ => json!({"content": [{"type": "text", "text": format!(
                "binary response: {content_type}, {} bytes (not shown)", body.len()
            )}]}),
        }
    }
}

/// At most `limit` bytes of a body as text, cut at a character boundary, with a note when cut.
fn bounded_text(body: &[u8], limit: usize) -> String {
    let text = String::from_utf8_lossy(body);
    if text.len() <= limit {
        return text.into_owned();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes in all)", &text[..end], body.len())
}

#[cfg(test)]
mod tests {
    use crate::compile;
    use http::StatusCode;
    use serde_json::json;
    use switchboard_snapshot::OpenApiSpec;

    fn tool() -> crate::OperationTool {
        let doc = r#"{"openapi": "3.0.0", "paths": {"/n": {"get": {"operationId": "n",
            "responses": {"200": {"description": "", "content": {"application/json": {"schema": {"type": "integer"}}}}}}}}}"#;
        compile(doc, &OpenApiSpec::default())
            .unwrap()
            .tools
            .remove(0)
    }

    #[test]
    fn json_becomes_structured_content_wrapped_when_not_an_object() {
        let r = tool().result(StatusCode::OK, Some("application/json"), b"42");
        assert_eq!(r["structuredContent"], json!({"result": 42}));
        assert_eq!(r["content"][0]["text"], "42");
        assert!(r.get("isError").is_none());
    }

    #[test]
    fn errors_are_tool_errors_with_a_bounded_body() {
        let body = "x".repeat(10_000);
        let r = tool().result(StatusCode::FORBIDDEN, Some("text/plain"), body.as_bytes());
        assert_eq!(r["isError"], true);
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("HTTP 403 Forbidden: xxx"), "{text}");
        assert!(
            text.len() < 2200 && text.ends_with("(10000 bytes in all)"),
            "{text}"
        );
    }

    #[test]
    fn binary_is_described_not_dumped() {
        let r = tool().result(
            StatusCode::OK,
            Some("image/png"),
            &[0x89, b'P', b'N', b'G', 0, 0xff],
        );
        assert_eq!(
            r["content"][0]["text"],
            "binary response: image/png, 6 bytes (not shown)"
        );
    }
}
