//! The OpenAI Chat Completions format: tool definitions, calls, results, usage, the
//! client-visible assembly of a turn, and the restoring of carried gateway work in a request.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::carry::{CARRY_MARK, Carry, carried_token, stand_in_id, sweep_carried_ids};
use crate::toolset::GatewayTool;
use crate::turn::{Call, Executed, Usage};

/// The prefix of carried tool-call ids.
const ID_PREFIX: &str = "call";
/// Between the texts of two iterations in the client's merged message.
pub(crate) const TEXT_SEPARATOR: &str = "\n\n";

pub(crate) fn tool_definition(tool: &GatewayTool) -> Value {
    let mut function = json!({"name": tool.name, "parameters": tool.schema});
    if let Some(d) = &tool.description {
        function["description"] = Value::String(d.clone());
    }
    json!({"type": "function", "function": function})
}

fn message(response: &Value) -> Option<&Value> {
    response.pointer("/choices/0/message")
}

pub(crate) fn tool_calls(response: &Value) -> impl Iterator<Item = &Value> {
    message(response)
        .and_then(|m| m.get("tool_calls"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

pub fn calls(response: &Value) -> Vec<Call> {
    tool_calls(response).filter_map(call_of).collect()
}

fn call_of(entry: &Value) -> Option<Call> {
    let arguments = entry
        .pointer("/function/arguments")
        .and_then(Value::as_str)
        .unwrap_or("");
    let input = if arguments.trim().is_empty() {
        Ok(Value::Object(Map::new()))
    } else {
        match serde_json::from_str::<Value>(arguments) {
            Ok(v @ Value::Object(_)) => Ok(v),
            _ => Err("the tool arguments are not a JSON object".to_string()),
        }
    };
    Some(Call {
        id: entry.get("id").and_then(Value::as_str)?.to_string(),
        name: entry
            .pointer("/function/name")
            .and_then(Value::as_str)?
            .to_string(),
        input,
    })
}

pub fn usage(usage: Option<&Value>) -> Usage {
    let n = |p: &str| {
        usage
            .and_then(|u| u.pointer(p))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    Usage {
        input: n("/prompt_tokens"),
        output: n("/completion_tokens"),
        cache_creation: 0,
        cache_read: n("/prompt_tokens_details/cached_tokens"),
    }
}

pub(crate) fn usage_json(usage: Usage) -> Value {
    json!({
        "prompt_tokens": usage.input,
        "completion_tokens": usage.output,
        "total_tokens": usage.input + usage.output,
    })
}

/// The response's message as it goes back into the conversation: role, content and calls.
pub(crate) fn assistant_message(response: &Value) -> Value {
    let mut out = Map::new();
    out.insert("role".into(), json!("assistant"));
    if let Some(m) = message(response).and_then(Value::as_object) {
        for key in ["content", "tool_calls", "reasoning_content"] {
            if let Some(v) = m.get(key).filter(|v| !v.is_null()) {
                out.insert(key.into(), v.clone());
            }
        }
    }
    out.entry("content").or_insert(Value::Null);
    Value::Object(out)
}

pub(crate) fn tool_message(executed: &Executed<'_>) -> Value {
    let mut text = executed.outcome.text();
    if executed.outcome.is_error && !text.starts_with("Error") {
        text = format!("Error: {text}");
    }
    json!({"role": "tool", "tool_call_id": executed.call.id, "content": text})
}

pub(crate) fn carried_id(token: &str) -> String {
    format!("{ID_PREFIX}{CARRY_MARK}{token}")
}

fn text_of(response: &Value) -> &str {
    message(response)
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Turns of one client request, merged into what the client sees.
#[derive(Default)]
pub struct Merged {
    pub text: String,
}

impl Merged {
    pub(crate) fn add_turn(&mut self, response: &Value) {
        self.push_text(text_of(response));
    }

    /// Appends one iteration's text; returns how much of `text` the client saw before it.
    pub(crate) fn push_text(&mut self, text: &str) -> usize {
        if !text.is_empty() && !self.text.is_empty() {
            self.text.push_str(TEXT_SEPARATOR);
        }
        let before = self.text.len();
        self.text.push_str(text);
        before
    }

    pub fn finish(
        mut self,
        mut last: Value,
        executed: &[crate::turn::Executed<'_>],
        mut carry: Carry,
        seal: &dyn Fn(Carry) -> Option<String>,
        usage: Usage,
    ) -> Value {
        self.push_text(text_of(&last));
        let client_calls: Vec<Value> = tool_calls(&last)
            .filter(|c| {
                let id = c.get("id").and_then(Value::as_str);
                !executed.iter().any(|e| Some(e.call.id.as_str()) == id)
            })
            .cloned()
            .collect();
        carry.id = client_calls
            .first()
            .and_then(|c| c.get("id").and_then(Value::as_str))
            .map(str::to_owned);
        // Without a client call there is nothing the client echoes to carry a record in.
        let token = if carry.is_empty() || carry.id.is_none() {
            None
        } else {
            seal(carry)
        };
        if let Some(m) = last
            .pointer_mut("/choices/0/message")
            .and_then(Value::as_object_mut)
        {
            m.insert(
                "content".into(),
                if self.text.is_empty() {
                    Value::Null
                } else {
                    Value::String(self.text)
                },
            );
            if client_calls.is_empty() {
                m.remove("tool_calls");
            } else {
                let mut calls = client_calls;
                if let Some(token) = &token {
                    calls[0]["id"] = Value::String(carried_id(token));
                }
                m.insert("tool_calls".into(), Value::Array(calls));
            }
        }
        if let Some(choice) = last
            .pointer_mut("/choices/0")
            .and_then(Value::as_object_mut)
            && !executed.is_empty()
            && choice.get("finish_reason").and_then(Value::as_str) == Some("tool_calls")
            && message_has_no_calls(choice)
        {
            choice.insert("finish_reason".into(), json!("stop"));
        }
        if let Value::Object(o) = &mut last {
            o.insert("usage".into(), usage_json(usage));
        }
        last
    }
}

fn message_has_no_calls(choice: &Map<String, Value>) -> bool {
    choice
        .get("message")
        .and_then(|m| m.get("tool_calls"))
        .is_none()
}

/// Puts the provider's view of a conversation back together (see [`crate::carry`]).
pub(crate) fn expand(messages: &mut Vec<Value>, open: &dyn Fn(&str) -> Option<Carry>) {
    let carries = |m: &Value| {
        m.get("tool_calls")
            .and_then(Value::as_array)
            .is_some_and(|c| c.iter().any(|c| carried_of(c).is_some()))
    };
    if !messages.iter().any(carries) {
        return;
    }
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 4);
    let mut renamed: HashMap<String, String> = HashMap::new();
    for mut message in messages.drain(..) {
        if message.get("role").and_then(Value::as_str) == Some("tool") {
            if let Some(id) = message.get("tool_call_id").and_then(Value::as_str)
                && let Some(original) = renamed.get(id)
            {
                message["tool_call_id"] = Value::String(original.clone());
            }
            out.push(message);
            continue;
        }
        if !carries(&message) {
            out.push(message);
            continue;
        }
        let token = message
            .get("tool_calls")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find_map(carried_of))
            .map(str::to_owned);
        let carry = token.as_deref().and_then(open);
        if let Some(Value::Array(calls)) = message.get_mut("tool_calls") {
            for call in calls.iter_mut() {
                if let Some(id) = call.get("id").and_then(Value::as_str)
                    && carried_token(id).is_some()
                {
                    let original = carry
                        .as_ref()
                        .and_then(|c| c.id.clone())
                        .unwrap_or_else(|| stand_in_id(id, "call_"));
                    renamed.insert(id.to_string(), original.clone());
                    call["id"] = Value::String(original);
                }
            }
        }
        let Some(carry) = carry else {
            out.push(message);
            continue;
        };
        // The client's text starts with the earlier iterations' texts (they come back with
        // `prior`): dropped when it does, left as it is otherwise.
        let earlier = earlier_text(&carry.prior);
        if let Some(Value::String(text)) = message.get_mut("content")
            && !earlier.is_empty()
            && let Some(rest) = text.strip_prefix(earlier.as_str())
        {
            *text = rest
                .strip_prefix(TEXT_SEPARATOR)
                .unwrap_or(rest)
                .to_string();
        }
        out.extend(carry.prior);
        if let Some(Value::Array(calls)) = message.get_mut("tool_calls") {
            calls.extend(carry.calls);
        }
        out.push(message);
        out.extend(carry.results);
    }
    sweep_carried_ids(&mut out, "call_");
    *messages = out;
}

/// The texts of a record's earlier assistant messages as the client saw them, merged.
fn earlier_text(prior: &[Value]) -> String {
    let mut merged = Merged::default();
    for message in prior {
        if message.get("role").and_then(Value::as_str) == Some("assistant") {
            merged.push_text(message.get("content").and_then(Value::as_str).unwrap_or(""));
        }
    }
    merged.text
}

fn carried_of(call: &Value) -> Option<&str> {
    carried_token(call.get("id").and_then(Value::as_str)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_carried_turn_is_put_back_together() {
        let carry = Carry {
            key_tag: 1,
            prior: vec![
                json!({"role": "assistant", "content": "looking", "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "ocr__read", "arguments": "{}"}}]}),
                json!({"role": "tool", "tool_call_id": "call_a", "content": "A"}),
            ],
            shown: "looking".len(),
            calls: vec![
                json!({"id": "call_b", "type": "function", "function": {"name": "ocr__read", "arguments": "{}"}}),
            ],
            results: vec![json!({"role": "tool", "tool_call_id": "call_b", "content": "B"})],
            id: Some("call_read".into()),
            ..Carry::default()
        };
        let open = move |t: &str| (t == "T").then(|| carry.clone());
        let mut messages = vec![
            json!({"role": "user", "content": "go"}),
            json!({"role": "assistant", "content": "looking\n\nnow read", "tool_calls": [
                {"id": carried_id("T"), "type": "function", "function": {"name": "read", "arguments": "{}"}}
            ]}),
            json!({"role": "tool", "tool_call_id": carried_id("T"), "content": "file"}),
        ];
        expand(&mut messages, &open);
        let roles: Vec<&str> = messages
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(
            roles,
            ["user", "assistant", "tool", "assistant", "tool", "tool"]
        );
        assert_eq!(messages[3]["content"], "now read");
        assert_eq!(messages[3]["tool_calls"][0]["id"], "call_read");
        assert_eq!(messages[3]["tool_calls"][1]["id"], "call_b");
        assert_eq!(messages[4]["tool_call_id"], "call_b");
        assert_eq!(messages[5]["tool_call_id"], "call_read");
    }
}
