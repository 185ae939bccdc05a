//! The neutral view of a model request that rules match against and templates read. Each wire
//! format (`anthropic.rs`, `openai.rs`) fills one from its own request body.

use serde_json::Value;

#[derive(Debug, Default)]
pub struct Conversation {
    /// The provider path asked (`/v1/messages` or `/v1/chat/completions`).
    pub path: &'static str,
    /// The request's `model`, if it is a string.
    pub model: Option<String>,
    /// The request's `stream` (absent = false).
    pub stream: bool,
    /// Length of the request's `messages` array.
    pub messages: usize,
    /// Names of the tools the request defines.
    pub tools: Vec<String>,
    /// Whether the final message(s) hold any tool result.
    pub ends_with_tool_result: bool,
    /// Names of the calls (made by the assistant message just before) that the final
    /// message(s) answer.
    pub answered_last: Vec<String>,
    /// Text of the last user message that has text, if any.
    pub last_user_text: Option<String>,
    /// Every tool result, oldest first: the name of the call it answers (if that call is in
    /// the conversation) and its text.
    pub tool_results: Vec<(Option<String>, String)>,
    /// Size of the request body in bytes (the default usage estimate).
    pub body_bytes: usize,
}

impl Conversation {
    /// Text of the most recent tool result answering a call named `name`.
    pub fn tool_result_text(&self, name: &str) -> Option<&str> {
        self.tool_results
            .iter()
            .rev()
            .find(|(n, _)| n.as_deref() == Some(name))
            .map(|(_, text)| text.as_str())
    }

    /// The fields both formats share: model, stream and body size.
    pub fn common(path: &'static str, body: &Value, body_bytes: usize) -> Self {
        Self {
            path,
            model: body.get("model").and_then(Value::as_str).map(str::to_owned),
            stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
            messages: messages(body).len(),
            body_bytes,
            ..Self::default()
        }
    }
}

/// The request's `messages` array (empty when absent or not an array).
pub fn messages(body: &Value) -> &[Value] {
    body.get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// A message's `role`.
pub fn role(message: &Value) -> &str {
    message
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Text of a `content` that is a string, or the `text` of its `{"type": "text"}` parts joined
/// with `\n`. `None` when there is no text at all.
pub fn text_of(content: Option<&Value>) -> Option<String> {
    match content? {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

/// The last `user` message that has text.
pub fn last_user_text(messages: &[Value]) -> Option<String> {
    messages
        .iter()
        .rev()
        .filter(|m| role(m) == "user")
        .find_map(|m| text_of(m.get("content")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_of_string_and_parts() {
        assert_eq!(text_of(Some(&json!("hi"))), Some("hi".into()));
        let parts = json!([{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]);
        assert_eq!(text_of(Some(&parts)), Some("a\nb".into()));
        assert_eq!(text_of(Some(&json!([{"type": "tool_result"}]))), None);
        assert_eq!(text_of(None), None);
    }

    #[test]
    fn last_user_text_skips_messages_without_text() {
        let msgs = json!([
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "x"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
        ]);
        let msgs = msgs.as_array().map(Vec::as_slice).unwrap_or_default();
        assert_eq!(last_user_text(msgs), Some("first".into()));
    }
}
