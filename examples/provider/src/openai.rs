//! The OpenAI Chat Completions wire format: reading a request into a [`Conversation`],
//! rendering an [`Answer`] as a completion or as its chunk stream, and the error shape.
//! Thinking items have no place here and are skipped.

use std::collections::HashMap;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::answer::Answer;
use crate::conversation::{self, Conversation, role, text_of};
use crate::ids;
use crate::script::Item;
use crate::sse::{self, Event};

pub const PATH: &str = "/v1/chat/completions";

fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// `(id, function name)` of each `tool_calls[]` entry of a message.
fn calls(message: &Value) -> impl Iterator<Item = (&str, &str)> {
    message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|call| {
            let name = call.get("function").and_then(|f| str_field(f, "name"))?;
            Some((str_field(call, "id")?, name))
        })
}

pub fn conversation(body: &Value, body_bytes: usize) -> Conversation {
    let mut c = Conversation::common(PATH, body, body_bytes);
    let messages = conversation::messages(body);
    c.tools = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("function").and_then(|f| str_field(f, "name")))
        .map(str::to_owned)
        .collect();

    let ids: HashMap<&str, &str> = messages
        .iter()
        .filter(|m| role(m) == "assistant")
        .flat_map(calls)
        .collect();
    for m in messages.iter().filter(|m| role(m) == "tool") {
        let name = str_field(m, "tool_call_id")
            .and_then(|id| ids.get(id))
            .map(|n| (*n).to_owned());
        c.tool_results
            .push((name, text_of(m.get("content")).unwrap_or_default()));
    }

    let trailing = messages
        .iter()
        .rev()
        .take_while(|m| role(m) == "tool")
        .count();
    c.ends_with_tool_result = trailing > 0;
    let first_tool = messages.len() - trailing;
    let before = first_tool
        .checked_sub(1)
        .and_then(|i| messages.get(i))
        .filter(|m| role(m) == "assistant");
    if let (true, Some(before)) = (trailing > 0, before) {
        let answered: Vec<&str> = messages[first_tool..]
            .iter()
            .filter_map(|m| str_field(m, "tool_call_id"))
            .collect();
        c.answered_last = calls(before)
            .filter(|(id, _)| answered.contains(id))
            .map(|(_, name)| name.to_owned())
            .collect();
    }
    c.last_user_text = conversation::last_user_text(messages);
    c
}

/// The answer's texts concatenated (`None` if it has none).
fn text(answer: &Answer) -> Option<String> {
    let texts: Vec<&str> = answer
        .content
        .iter()
        .filter_map(|i| match i {
            Item::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    (!texts.is_empty()).then(|| texts.concat())
}

/// `(call id, name, arguments JSON)` of each tool use, with fresh `call_` ids.
fn tool_calls(answer: &Answer) -> Vec<(String, &str, String)> {
    answer
        .content
        .iter()
        .filter_map(|i| match i {
            Item::ToolUse { name, input } => Some((
                ids::fresh("call_"),
                name.as_str(),
                Value::Object(input.clone()).to_string(),
            )),
            _ => None,
        })
        .collect()
}

fn finish_reason(answer: &Answer) -> &'static str {
    if answer.has_tool_use() {
        "tool_calls"
    } else {
        "stop"
    }
}

fn usage(answer: &Answer) -> Value {
    json!({
        "prompt_tokens": answer.input_tokens,
        "completion_tokens": answer.output_tokens,
        "total_tokens": answer.input_tokens.saturating_add(answer.output_tokens),
    })
}

/// The answer as a completion (`stream: false`) or as its chunk stream; `include_usage` is
/// the request's `stream_options.include_usage`.
pub fn render(answer: &Answer, model: &str, stream: bool, include_usage: bool) -> Response {
    let id = ids::fresh("chatcmpl-");
    let response = if stream {
        sse::response(
            chunks(&id, answer, model, include_usage),
            answer.break_after,
        )
    } else {
        let mut message = json!({"role": "assistant", "content": text(answer), "refusal": null});
        let calls = tool_calls(answer);
        if !calls.is_empty() {
            message["tool_calls"] = calls
                .into_iter()
                .map(|(id, name, arguments)| {
                    json!({"id": id, "type": "function",
                           "function": {"name": name, "arguments": arguments}})
                })
                .collect();
        }
        Json(json!({
            "id": id,
            "object": "chat.completion",
            "created": ids::unix_now(),
            "model": model,
            "choices": [{
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(answer),
                "logprobs": null,
            }],
            "usage": usage(answer),
        }))
        .into_response()
    };
    with_request_id(response)
}

fn chunks(id: &str, answer: &Answer, model: &str, include_usage: bool) -> Vec<Event> {
    let created = ids::unix_now();
    let chunk = |delta: Value, finish: Option<&str>| {
        let mut c = json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": null,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if include_usage {
            c["usage"] = Value::Null;
        }
        Event::data(c.to_string())
    };
    let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    for piece in text(answer)
        .as_deref()
        .map(sse::word_chunks)
        .unwrap_or_default()
    {
        out.push(chunk(json!({"content": piece}), None));
    }
    for (index, (call_id, name, arguments)) in tool_calls(answer).into_iter().enumerate() {
        out.push(chunk(
            json!({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                   "function": {"name": name, "arguments": ""}}]}),
            None,
        ));
        for piece in sse::pieces(&arguments) {
            out.push(chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                None,
            ));
        }
    }
    out.push(chunk(json!({}), Some(finish_reason(answer))));
    if include_usage {
        out.push(Event::data(
            json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                "system_fingerprint": null, "choices": [], "usage": usage(answer),
            })
            .to_string(),
        ));
    }
    out.push(Event::data("[DONE]"));
    out
}

fn with_request_id(mut response: Response) -> Response {
    if let Ok(v) = ids::fresh("req_").parse() {
        response.headers_mut().insert("x-request-id", v);
    }
    response
}

/// The OpenAI error `type` for an HTTP status.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        429 => "rate_limit_error",
        500..=599 => "server_error",
        _ => "invalid_request_error",
    }
}

pub fn error_body(status: StatusCode, message: &str, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": error_type(status), "param": null, "code": code}})
}

pub fn error(status: StatusCode, message: &str, code: Option<&str>) -> Response {
    with_request_id((status, Json(error_body(status, message, code))).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tool_round() {
        let body = json!({
            "model": "m",
            "tools": [{"type": "function", "function": {"name": "Read"}}],
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "read it"}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "Read", "arguments": "{}"}},
                    {"id": "c2", "type": "function", "function": {"name": "Bash", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "c2", "content": "ran"},
                {"role": "tool", "tool_call_id": "c1", "content": "contents"},
            ],
        });
        let c = conversation(&body, 10);
        assert!(!c.stream && c.ends_with_tool_result);
        assert_eq!(c.messages, 5);
        assert_eq!(c.tools, vec!["Read"]);
        assert_eq!(c.answered_last, vec!["Read", "Bash"]);
        assert_eq!(c.last_user_text.as_deref(), Some("read it"));
        assert_eq!(c.tool_result_text("Read"), Some("contents"));
        assert_eq!(c.tool_result_text("Bash"), Some("ran"));
    }

    #[test]
    fn no_tool_results_at_turn_start() {
        let body = json!({"messages": [{"role": "user", "content": "hi"}]});
        let c = conversation(&body, 10);
        assert!(!c.ends_with_tool_result && c.answered_last.is_empty());
    }
}
