//! The Anthropic Messages wire format: reading a request into a [`Conversation`], rendering an
//! [`Answer`] as a message or as its event stream, and the error shape.

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

pub const PATH: &str = "/v1/messages";

fn blocks(message: &Value) -> impl Iterator<Item = &Value> {
    message
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn of_type<'a>(block: &'a Value, kind: &str) -> Option<&'a Value> {
    (block.get("type").and_then(Value::as_str) == Some(kind)).then_some(block)
}

fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

pub fn conversation(body: &Value, body_bytes: usize) -> Conversation {
    let mut c = Conversation::common(PATH, body, body_bytes);
    let messages = conversation::messages(body);
    c.tools = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| str_field(t, "name").map(str::to_owned))
        .collect();

    let mut calls: HashMap<&str, &str> = HashMap::new();
    for m in messages.iter().filter(|m| role(m) == "assistant") {
        for b in blocks(m).filter_map(|b| of_type(b, "tool_use")) {
            if let (Some(id), Some(name)) = (str_field(b, "id"), str_field(b, "name")) {
                calls.insert(id, name);
            }
        }
    }
    for m in messages.iter().filter(|m| role(m) == "user") {
        for b in blocks(m).filter_map(|b| of_type(b, "tool_result")) {
            let name = str_field(b, "tool_use_id")
                .and_then(|id| calls.get(id))
                .map(|n| (*n).to_owned());
            c.tool_results
                .push((name, text_of(b.get("content")).unwrap_or_default()));
        }
    }

    if let Some(last) = messages.last().filter(|m| role(m) == "user") {
        let results: Vec<&str> = blocks(last)
            .filter_map(|b| of_type(b, "tool_result"))
            .filter_map(|b| str_field(b, "tool_use_id"))
            .collect();
        c.ends_with_tool_result = blocks(last).any(|b| of_type(b, "tool_result").is_some());
        let before = messages
            .len()
            .checked_sub(2)
            .and_then(|i| messages.get(i))
            .filter(|m| role(m) == "assistant");
        if let Some(before) = before {
            c.answered_last = blocks(before)
                .filter_map(|b| of_type(b, "tool_use"))
                .filter(|b| str_field(b, "id").is_some_and(|id| results.contains(&id)))
                .filter_map(|b| str_field(b, "name").map(str::to_owned))
                .collect();
        }
    }
    c.last_user_text = conversation::last_user_text(messages);
    c
}

/// The content blocks of an answer, tool uses with fresh `toolu_` ids.
fn content_blocks(answer: &Answer) -> Vec<Value> {
    answer
        .content
        .iter()
        .map(|item| match item {
            Item::Text { text } => json!({"type": "text", "text": text}),
            Item::ToolUse { name, input } => json!({
                "type": "tool_use", "id": ids::fresh("toolu_"), "name": name, "input": input,
            }),
            Item::Thinking {
                thinking,
                signature,
            } => json!({"type": "thinking", "thinking": thinking, "signature": signature}),
        })
        .collect()
}

fn stop_reason(answer: &Answer) -> &'static str {
    if answer.has_tool_use() {
        "tool_use"
    } else {
        "end_turn"
    }
}

fn usage(input_tokens: u64, output_tokens: u64) -> Value {
    json!({
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    })
}

/// The answer as a message (`stream: false`) or as its event stream.
pub fn render(answer: &Answer, model: &str, stream: bool) -> Response {
    let id = ids::fresh("msg_");
    let response = if stream {
        sse::response(events(&id, answer, model), answer.break_after)
    } else {
        Json(json!({
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content_blocks(answer),
            "stop_reason": stop_reason(answer),
            "stop_sequence": null,
            "usage": usage(answer.input_tokens, answer.output_tokens),
        }))
        .into_response()
    };
    with_request_id(response)
}

fn events(id: &str, answer: &Answer, model: &str) -> Vec<Event> {
    let mut out = vec![
        Event::named(
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": id, "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": usage(answer.input_tokens, 1),
            }}),
        ),
        Event::named("ping", &json!({"type": "ping"})),
    ];
    for (index, item) in answer.content.iter().enumerate() {
        block_events(&mut out, index, item);
    }
    out.push(Event::named(
        "message_delta",
        &json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason(answer), "stop_sequence": null},
                "usage": {"output_tokens": answer.output_tokens}}),
    ));
    out.push(Event::named(
        "message_stop",
        &json!({"type": "message_stop"}),
    ));
    out
}

/// `content_block_start`, the deltas and `content_block_stop` of one block.
fn block_events(out: &mut Vec<Event>, index: usize, item: &Item) {
    let delta = |delta: Value| {
        Event::named(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        )
    };
    let (start, deltas): (Value, Vec<Event>) = match item {
        Item::Text { text } => (
            json!({"type": "text", "text": ""}),
            sse::word_chunks(text)
                .into_iter()
                .map(|chunk| delta(json!({"type": "text_delta", "text": chunk})))
                .collect(),
        ),
        Item::ToolUse { name, input } => {
            let json = Value::Object(input.clone()).to_string();
            (
                json!({"type": "tool_use", "id": ids::fresh("toolu_"), "name": name, "input": {}}),
                sse::pieces(&json)
                    .into_iter()
                    .map(|piece| delta(json!({"type": "input_json_delta", "partial_json": piece})))
                    .collect(),
            )
        }
        Item::Thinking {
            thinking,
            signature,
        } => (
            json!({"type": "thinking", "thinking": ""}),
            sse::word_chunks(thinking)
                .into_iter()
                .map(|chunk| delta(json!({"type": "thinking_delta", "thinking": chunk})))
                .chain([delta(
                    json!({"type": "signature_delta", "signature": signature}),
                )])
                .collect(),
        ),
    };
    out.push(Event::named(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": start}),
    ));
    out.extend(deltas);
    out.push(Event::named(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": index}),
    ));
}

fn with_request_id(mut response: Response) -> Response {
    if let Ok(v) = ids::fresh("req_").parse() {
        response.headers_mut().insert("request-id", v);
    }
    response
}

/// The Anthropic error type for an HTTP status.
pub fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

pub fn error_body(status: StatusCode, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type(status), "message": message}})
}

pub fn error(status: StatusCode, message: &str) -> Response {
    with_request_id((status, Json(error_body(status, message))).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tool_round() {
        let body = json!({
            "model": "m", "stream": true,
            "tools": [{"name": "Read"}, {"name": "Bash"}],
            "messages": [
                {"role": "user", "content": "read the file"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "ok"},
                    {"type": "tool_use", "id": "t1", "name": "Read", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1",
                     "content": [{"type": "text", "text": "line1"}]},
                ]},
            ],
        });
        let c = conversation(&body, 100);
        assert_eq!(c.model.as_deref(), Some("m"));
        assert!(c.stream && c.ends_with_tool_result);
        assert_eq!(c.messages, 3);
        assert_eq!(c.tools, vec!["Read", "Bash"]);
        assert_eq!(c.answered_last, vec!["Read"]);
        assert_eq!(c.last_user_text.as_deref(), Some("read the file"));
        assert_eq!(c.tool_result_text("Read"), Some("line1"));
    }

    #[test]
    fn stream_events_in_order() {
        let answer = Answer {
            content: vec![
                Item::Thinking {
                    thinking: "hmm".into(),
                    signature: "sig".into(),
                },
                Item::Text {
                    text: "a b c d".into(),
                },
                Item::ToolUse {
                    name: "Read".into(),
                    input: serde_json::Map::new(),
                },
            ],
            input_tokens: 5,
            output_tokens: 21,
            break_after: None,
        };
        let names: Vec<_> = events("msg_x", &answer, "m")
            .iter()
            .filter_map(|e| e.name)
            .collect();
        assert_eq!(
            names,
            vec![
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
    }
}
