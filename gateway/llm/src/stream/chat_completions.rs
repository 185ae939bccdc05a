//! The streamed loop in OpenAI's Chat Completions format: chunks relayed, tool-call deltas merged,
//! client calls held to the iteration's end, gateway calls never shown.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::format::Format;
use crate::openai;
use crate::run::{Prepared, Tally};
use crate::turn::Usage;

use super::round::{Events, Out, TurnEnd, execute_with_pings, next_round};

/// One provider iteration of chunks, assembled.
#[derive(Default)]
pub(super) struct OpenAiTurn {
    text: String,
    /// Tool calls by the provider's index: id, name, arguments.
    calls: Vec<(u64, String, String, String)>,
    finish_reason: Option<Value>,
    usage: Usage,
    /// The model that answered (its chunks' `model`), for the call's span.
    model: Option<String>,
}

pub(super) async fn openai_loop(
    prepared: &mut Prepared,
    first: Events,
    out: &mut Out,
    tally: &mut Tally,
    client_wants_usage: bool,
) -> &'static str {
    let mut events = first;
    let mut carry = prepared.new_carry();
    let mut merged = openai::Merged::default();
    let mut template: Option<Value> = None;
    let max = prepared.model.spec.max_iterations;
    // OpenAI streams have no ping event; an SSE comment keeps the connection alive.
    let ping: &'static [u8] = b": ping\n\n";
    for iteration in 1..=max {
        let turn = match openai_turn(&mut events, out, &merged, &mut template, iteration == 1).await
        {
            Ok(turn) => turn,
            Err(end) => {
                events.ended_early(&end);
                return end.finish(out, Format::OpenAi).await;
            }
        };
        events.turn_ended(
            turn.model.as_deref(),
            turn.finish_reason.as_ref(),
            turn.usage,
        );
        tally.usage += turn.usage;
        let tool_calls: Vec<Value> = turn
            .calls
            .iter()
            .map(|(_, id, name, arguments)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
            })
            .collect();
        let mut message = json!({"role": "assistant", "content": if turn.text.is_empty() { Value::Null } else { json!(turn.text) }});
        if !tool_calls.is_empty() {
            message["tool_calls"] = Value::Array(tool_calls);
        }
        let response =
            json!({"choices": [{"message": message, "finish_reason": turn.finish_reason}]});
        let calls = Format::OpenAi.runnable_calls(&response);
        let (ours, theirs) = prepared.split(&calls);
        let executed = if ours.is_empty() {
            Vec::new()
        } else {
            execute_with_pings(prepared, ours, tally, out, ping).await
        };
        let limit = iteration == max && !executed.is_empty() && theirs == 0;
        if executed.is_empty() || theirs > 0 || limit {
            // The gateway's own chunks look like the provider's first one.
            let chunk_template = template
                .clone()
                .unwrap_or_else(|| json!({"object": "chat.completion.chunk"}));
            let (c, r) = Format::OpenAi.carried_calls(&response, &executed);
            carry.calls = c;
            carry.results = r;
            let client_calls: Vec<&(u64, String, String, String)> = turn
                .calls
                .iter()
                .filter(|(_, _, name, _)| prepared.tools.gateway_run(name).is_none())
                .collect();
            carry.id = client_calls.first().map(|c| c.1.clone());
            let token = if carry.is_empty() || carry.id.is_none() {
                None
            } else {
                prepared.seal(carry)
            };
            if !client_calls.is_empty() {
                let entries: Vec<Value> = client_calls
                    .iter()
                    .enumerate()
                    .map(|(i, (_, id, name, arguments))| {
                        let id = match (&token, i) {
                            (Some(t), 0) => openai::carried_id(t),
                            _ => id.clone(),
                        };
                        json!({"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
                    })
                    .collect();
                out.data(&chunk(
                    &chunk_template,
                    json!({"tool_calls": entries}),
                    Value::Null,
                ))
                .await;
            }
            let finish = if client_calls.is_empty() {
                if turn.finish_reason.as_ref().and_then(Value::as_str) == Some("tool_calls") {
                    json!("stop")
                } else {
                    turn.finish_reason.unwrap_or(json!("stop"))
                }
            } else {
                json!("tool_calls")
            };
            out.data(&chunk(&chunk_template, json!({}), finish)).await;
            if client_wants_usage {
                let mut usage = chunk_template.clone();
                usage["choices"] = json!([]);
                usage["usage"] = openai::usage_json(tally.usage);
                out.data(&usage).await;
            }
            out.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
            return "ok";
        }
        merged.push_text(&turn.text);
        let messages = Format::OpenAi.iteration_messages(&response, &executed);
        drop(executed);
        events = match next_round(prepared, &mut carry, messages, out, tally).await {
            Ok(events) => events,
            Err(outcome) => return outcome,
        };
    }
    "ok"
}

/// Adds one streamed tool-call delta to the calls assembled so far. The slot is the delta's
/// `index`, or its `id`, or the last call; the name is taken once (some compatible servers
/// repeat it in every delta), the arguments are appended. A bounded number of calls is kept.
pub(super) fn merge_call_delta(calls: &mut Vec<(u64, String, String, String)>, call: &Value) {
    let id = call
        .get("id")
        .and_then(Value::as_str)
        .filter(|i| !i.is_empty());
    let slot = match call.get("index").and_then(Value::as_u64) {
        Some(index) => calls.iter().position(|c| c.0 == index).or_else(|| {
            (calls.len() < MAX_CALLS).then(|| {
                calls.push((index, String::new(), String::new(), String::new()));
                calls.len() - 1
            })
        }),
        None => match id.and_then(|id| calls.iter().position(|c| c.1 == id)) {
            Some(p) => Some(p),
            None if id.is_some() || calls.is_empty() => (calls.len() < MAX_CALLS).then(|| {
                calls.push((
                    calls.len() as u64,
                    String::new(),
                    String::new(),
                    String::new(),
                ));
                calls.len() - 1
            }),
            None => Some(calls.len() - 1),
        },
    };
    let Some(entry) = slot.and_then(|p| calls.get_mut(p)) else {
        return;
    };
    if let Some(id) = id {
        entry.1 = id.to_string();
    }
    if let Some(name) = call.pointer("/function/name").and_then(Value::as_str)
        && entry.2.is_empty()
    {
        entry.2 = name.to_string();
    }
    if let Some(arguments) = call.pointer("/function/arguments").and_then(Value::as_str) {
        entry.3.push_str(arguments);
    }
}

/// Most tool calls one streamed iteration may make.
pub(super) const MAX_CALLS: usize = 128;

/// A chunk of the gateway's own, shaped like the provider's.
pub(super) fn chunk(template: &Value, delta: Value, finish_reason: Value) -> Value {
    let mut c = template.clone();
    c["choices"] =
        json!([{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": null}]);
    if let Some(o) = c.as_object_mut() {
        o.remove("usage");
    }
    c
}

/// Relays one provider iteration's text and assembles its calls.
pub(super) async fn openai_turn(
    events: &mut Events,
    out: &mut Out,
    merged: &openai::Merged,
    template: &mut Option<Value>,
    first_iteration: bool,
) -> Result<OpenAiTurn, TurnEnd> {
    let mut role_sent = !first_iteration;
    let mut turn = OpenAiTurn::default();
    let mut separated = merged.text.is_empty();
    loop {
        let Some(event) = events.next(out).await? else {
            return Err(TurnEnd::Broken(
                "the model's stream ended before [DONE]".into(),
            ));
        };
        if event.data.trim() == "[DONE]" {
            return Ok(turn);
        }
        // Only objects are chunks; anything else is passed over.
        let Ok(mut data @ Value::Object(_)) = serde_json::from_str::<Value>(&event.data) else {
            continue;
        };
        if data.get("error").is_some() {
            return Err(TurnEnd::Provider(data));
        }
        if let Some(usage) = data.get("usage").filter(|u| !u.is_null()) {
            turn.usage = openai::usage(Some(usage));
        }
        if turn.model.is_none() {
            turn.model = data.get("model").and_then(Value::as_str).map(str::to_owned);
        }
        if template.is_none() {
            let mut t = data.clone();
            if let Some(o) = t.as_object_mut() {
                o.remove("choices");
                o.remove("usage");
            }
            *template = Some(t);
        }
        // (Not `pointer_mut`, which allocates for every step of the path, on every chunk.)
        let Some(choice) = data
            .get_mut("choices")
            .and_then(|c| c.get_mut(0))
            .filter(|c| c.is_object())
        else {
            continue;
        };
        // One choice is asked for (`n` > 1 is refused with gateway tools); another index is not
        // this conversation's.
        if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
            continue;
        }
        if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
            turn.finish_reason = Some(reason.clone());
        }
        let Some(delta) = choice.get_mut("delta").and_then(Value::as_object_mut) else {
            continue;
        };
        if let Some(Value::Array(calls)) = delta.remove("tool_calls") {
            for call in calls {
                merge_call_delta(&mut turn.calls, &call);
            }
        }
        if let Some(Value::String(text)) = delta.get_mut("content")
            && !text.is_empty()
        {
            turn.text.push_str(text);
            if !separated {
                text.insert_str(0, openai::TEXT_SEPARATOR);
                separated = true;
            }
        } else if role_sent || !delta.contains_key("role") {
            // Nothing for the client in this chunk (calls are held, finish comes at the end).
            continue;
        } else {
            // The opening chunk carries the role alone.
            delta.retain(|k, _| k == "role" || k == "content");
        }
        role_sent = true;
        choice["finish_reason"] = Value::Null;
        if let Some(t) = template.as_ref() {
            for key in ["id", "created", "model"] {
                if let Some(v) = t.get(key)
                    && data.get(key) != Some(v)
                {
                    data[key] = v.clone();
                }
            }
        }
        if let Some(o) = data.as_object_mut() {
            o.remove("usage");
        }
        out.data(&data).await;
    }
}
