//! The Anthropic Messages format: tool definitions, calls, results, usage, the client-visible
//! assembly of a turn, and the restoring of carried gateway work in a request.

use std::collections::HashMap;

use serde_json::{Map, Value, json};
use switchboard_snapshot::ToolVisibility;

use crate::carry::{CARRY_MARK, Carry, carried_token, stand_in_id, sweep_carried_ids};
use crate::toolset::GatewayTool;
use crate::turn::{Call, Executed, Usage};

/// Marks the ids of display blocks of visible gateway tools (`mcptoolu_sbv_<id>`): the
/// gateway drops them from requests (the carried record restores the real exchange).
const DISPLAY_MARK: &str = "_sbv_";
/// The prefix of carried tool-use ids.
const ID_PREFIX: &str = "toolu";
/// The prefix of a carrier block's data (`switchboard_sbx_<sealed>`).
const CARRIER_PREFIX: &str = "switchboard";

pub(crate) fn tool_definition(tool: &GatewayTool) -> Value {
    let mut definition = json!({"name": tool.name, "input_schema": tool.schema});
    if let Some(d) = &tool.description {
        definition["description"] = Value::String(d.clone());
    }
    definition
}

pub(crate) fn blocks(response: &Value) -> impl Iterator<Item = &Value> {
    response
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

pub fn calls(response: &Value) -> Vec<Call> {
    blocks(response).filter_map(call_of_block).collect()
}

fn call_of_block(block: &Value) -> Option<Call> {
    if block.get("type").and_then(Value::as_str) != Some("tool_use") {
        return None;
    }
    let input = match block.get("input") {
        Some(Value::Object(o)) => Ok(Value::Object(o.clone())),
        None | Some(Value::Null) => Ok(Value::Object(Map::new())),
        Some(_) => Err("the tool input is not a JSON object".to_string()),
    };
    Some(Call {
        id: block.get("id").and_then(Value::as_str)?.to_string(),
        name: block.get("name").and_then(Value::as_str)?.to_string(),
        input,
    })
}

pub fn usage(usage: Option<&Value>) -> Usage {
    let n = |k: &str| {
        usage
            .and_then(|u| u.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    Usage {
        input: n("input_tokens"),
        output: n("output_tokens"),
        cache_creation: n("cache_creation_input_tokens"),
        cache_read: n("cache_read_input_tokens"),
    }
}

pub(crate) fn usage_json(usage: Usage) -> Value {
    json!({
        "input_tokens": usage.input,
        "output_tokens": usage.output,
        "cache_creation_input_tokens": usage.cache_creation,
        "cache_read_input_tokens": usage.cache_read,
    })
}

pub(crate) fn assistant_message(response: &Value) -> Value {
    json!({"role": "assistant", "content": response.get("content").cloned().unwrap_or(json!([]))})
}

pub(crate) fn result_message(executed: &[Executed<'_>]) -> Value {
    json!({"role": "user", "content": result_blocks(executed)})
}

pub(crate) fn result_blocks(executed: &[Executed<'_>]) -> Vec<Value> {
    executed
        .iter()
        .map(|e| {
            let mut block = json!({
                "type": "tool_result",
                "tool_use_id": e.call.id,
                "content": result_content(&e.outcome.content),
            });
            if e.outcome.is_error {
                block["is_error"] = Value::Bool(true);
            }
            block
        })
        .collect()
}

/// MCP content as `tool_result` content: text and images as themselves, the rest as text.
fn result_content(items: &[Value]) -> Value {
    let blocks: Vec<Value> = items
        .iter()
        .filter_map(|item| match item.get("type").and_then(Value::as_str) {
            Some("image") => Some(json!({
                "type": "image",
                "source": {
                    "type": "base64",
                    "media_type": item.get("mimeType").cloned().unwrap_or(json!("image/png")),
                    "data": item.get("data").cloned().unwrap_or(json!("")),
                },
            })),
            _ => {
                let text = crate::turn::Outcome {
                    call_id: String::new(),
                    content: vec![item.clone()],
                    is_error: false,
                }
                .text();
                (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
            }
        })
        .collect();
    if blocks.is_empty() {
        Value::String("(no output)".into())
    } else {
        Value::Array(blocks)
    }
}

/// The blocks a client sees for a gateway call: nothing for a hidden tool; for a visible one,
/// the `mcp_tool_use` / `mcp_tool_result` pair the provider's own MCP connector shows.
pub(crate) fn display_blocks(executed: &Executed<'_>) -> Vec<Value> {
    if executed.tool.visibility == ToolVisibility::Hidden {
        return Vec::new();
    }
    let id = format!("mcptoolu{DISPLAY_MARK}{}", executed.call.id);
    let text = executed.outcome.text();
    vec![
        json!({
            "type": "mcp_tool_use",
            "id": id,
            "name": executed.tool.tool,
            "server_name": executed.tool.server_name(),
            "input": executed.call.input.clone().unwrap_or(json!({})),
        }),
        json!({
            "type": "mcp_tool_result",
            "tool_use_id": id,
            "is_error": executed.outcome.is_error,
            "content": [{"type": "text", "text": text}],
        }),
    ]
}

/// The id a client sees for the tool call that carries a record.
pub(crate) fn carried_id(token: &str) -> String {
    format!("{ID_PREFIX}{CARRY_MARK}{token}")
}

/// The block that carries a record in a turn with no client tool call.
pub(crate) fn carrier_block(token: &str) -> Value {
    json!({"type": "redacted_thinking", "data": format!("{CARRIER_PREFIX}{CARRY_MARK}{token}")})
}

/// Turns of one client request, merged into what the client sees.
#[derive(Default)]
pub struct Merged {
    pub blocks: Vec<Value>,
}

impl Merged {
    /// Adds an iteration that ended in gateway calls only.
    pub(crate) fn add_turn(&mut self, response: &Value, executed: &[Executed<'_>]) {
        for block in blocks(response) {
            match executed_for(block, executed) {
                Some(e) => self.blocks.extend(display_blocks(e)),
                None => self.blocks.push(block.clone()),
            }
        }
    }

    /// The client's response: the last response with every iteration's visible content, the
    /// record sealed into the first client call (or a carrier block), and the usage summed.
    pub fn finish(
        mut self,
        mut last: Value,
        executed: &[Executed<'_>],
        mut carry: Carry,
        seal: &dyn Fn(Carry) -> Option<String>,
        usage: Usage,
        limit_reached: bool,
    ) -> Value {
        carry.shown = self.blocks.len();
        let carrier_at = self.blocks.len();
        let first_client = blocks(&last)
            .filter(|b| executed_for(b, executed).is_none())
            .find_map(call_of_block)
            .map(|c| c.id);
        carry.id = first_client.clone();
        let token = if carry.is_empty() { None } else { seal(carry) };
        for block in blocks(&last) {
            match executed_for(block, executed) {
                Some(e) => self.blocks.extend(display_blocks(e)),
                None => {
                    let mut block = block.clone();
                    if let (Some(token), Some(first)) = (&token, &first_client)
                        && block.get("id").and_then(Value::as_str) == Some(first.as_str())
                    {
                        block["id"] = Value::String(carried_id(token));
                    }
                    self.blocks.push(block);
                }
            }
        }
        if let (Some(token), None) = (&token, &first_client) {
            // Ahead of the last iteration's blocks, as thinking comes before text (a client may
            // read the message's last block as its answer).
            self.blocks.insert(carrier_at, carrier_block(token));
        }
        if let Value::Object(o) = &mut last {
            o.insert("content".into(), Value::Array(self.blocks));
            o.insert("usage".into(), usage_json(usage));
            if limit_reached && first_client.is_none() {
                // The gateway stopped running tools: the client may send the turn back as it
                // is to let the model go on, as with the provider's own server tools.
                o.insert("stop_reason".into(), json!("pause_turn"));
            }
        }
        last
    }
}

fn executed_for<'e, 'a>(block: &Value, executed: &'e [Executed<'a>]) -> Option<&'e Executed<'a>> {
    if block.get("type").and_then(Value::as_str) != Some("tool_use") {
        return None;
    }
    let id = block.get("id").and_then(Value::as_str)?;
    executed.iter().find(|e| e.call.id == id)
}

/// Puts the provider's view of a conversation back together: every assistant message that
/// carries a record gets the earlier iterations before it, its gateway calls back, and their
/// results at the head of the next user message; display blocks of visible gateway tools are
/// dropped (the record holds the real exchange).
pub(crate) fn expand(messages: &mut Vec<Value>, open: &dyn Fn(&str) -> Option<Carry>) {
    if !messages
        .iter()
        .any(|m| is_assistant(m) && has_gateway_blocks(m))
    {
        return;
    }
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 4);
    let mut renamed: HashMap<String, String> = HashMap::new();
    let mut pending: Vec<Value> = Vec::new();
    for mut message in messages.drain(..) {
        if !pending.is_empty() {
            let results = std::mem::take(&mut pending);
            if message.get("role").and_then(Value::as_str) == Some("user") {
                prepend_blocks(&mut message, results);
            } else {
                out.push(json!({"role": "user", "content": results}));
            }
        }
        if is_assistant(&message) && has_gateway_blocks(&message) {
            let Some(Value::Array(content)) = message.get_mut("content") else {
                out.push(message);
                continue;
            };
            // (the last: a streamed turn of several iterations carries one ahead of each, and
            // each holds more than the one before)
            let carry = content
                .iter()
                .rev()
                .find_map(|b| carrier_of(b))
                .and_then(open);
            let mut kept: Vec<Value> = match &carry {
                Some(c) => without_earlier_blocks(std::mem::take(content), c),
                None => std::mem::take(content),
            };
            kept.retain(|b| !is_display_block(b) && !is_carrier_block(b));
            for block in kept.iter_mut() {
                if let Some(id) = block.get("id").and_then(Value::as_str)
                    && carried_token(id).is_some()
                {
                    let original = carry
                        .as_ref()
                        .and_then(|c| c.id.clone())
                        .unwrap_or_else(|| stand_in_id(id, "toolu_"));
                    renamed.insert(id.to_string(), original.clone());
                    block["id"] = Value::String(original);
                }
            }
            if let Some(c) = carry {
                out.extend(c.prior);
                kept.extend(c.calls);
                pending = c.results;
            }
            if kept.is_empty() {
                continue;
            }
            *content = kept;
        } else if !renamed.is_empty()
            && let Some(Value::Array(content)) = message.get_mut("content")
        {
            for block in content.iter_mut() {
                if let Some(id) = block.get("tool_use_id").and_then(Value::as_str)
                    && let Some(original) = renamed.get(id)
                {
                    block["tool_use_id"] = Value::String(original.clone());
                }
            }
        }
        out.push(message);
    }
    if !pending.is_empty() {
        out.push(json!({"role": "user", "content": pending}));
    }
    // Whatever a client did to its copy, no carried id reaches the provider.
    sweep_carried_ids(&mut out, "toolu_");
    *messages = out;
}

/// The client's copy of a carried turn without the blocks of the loop's earlier iterations
/// (those come back with the record's `prior` messages): a leading run of at most `shown`
/// blocks, each a display block or the same as a block of an earlier assistant message. Never
/// a tool call: a client that dropped or reordered blocks loses at worst a repeated text.
fn without_earlier_blocks(blocks: Vec<Value>, carry: &Carry) -> Vec<Value> {
    let earlier: Vec<&Value> = carry
        .prior
        .iter()
        .filter(|m| is_assistant(m))
        .filter_map(|m| m.get("content").and_then(Value::as_array))
        .flatten()
        .collect();
    let mut skipped = 0;
    let mut out = Vec::with_capacity(blocks.len());
    for block in blocks {
        if is_carrier_block(&block) {
            // (not the model's, and not counted in `shown`)
            continue;
        }
        let earlier_copy =
            is_display_block(&block) || earlier.iter().any(|e| same_shown_block(e, &block));
        if skipped < carry.shown && out.is_empty() && earlier_copy {
            skipped += 1;
        } else {
            out.push(block);
        }
    }
    out
}

/// Whether a client's block is its copy of `original` (SDKs may drop null fields).
fn same_shown_block(original: &Value, copy: &Value) -> bool {
    let kind = original.get("type").and_then(Value::as_str);
    if kind != copy.get("type").and_then(Value::as_str) {
        return false;
    }
    let fields: &[&str] = match kind {
        Some("text") => &["text"],
        Some("thinking") => &["thinking", "signature"],
        Some("redacted_thinking") => &["data"],
        _ => return false,
    };
    fields.iter().all(|f| original.get(f) == copy.get(f))
}

fn is_assistant(message: &Value) -> bool {
    message.get("role").and_then(Value::as_str) == Some("assistant")
}

fn has_gateway_blocks(message: &Value) -> bool {
    message
        .get("content")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|b| carrier_of(b).is_some() || is_display_block(b))
        })
}

/// The sealed token a block carries: a carried tool-use id, or a carrier block's data.
fn carrier_of(block: &Value) -> Option<&str> {
    let field = match block.get("type").and_then(Value::as_str)? {
        "tool_use" => "id",
        "redacted_thinking" => "data",
        _ => return None,
    };
    carried_token(block.get(field).and_then(Value::as_str)?)
}

fn is_carrier_block(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("redacted_thinking")
        && carrier_of(block).is_some()
}

fn is_display_block(block: &Value) -> bool {
    let field = match block.get("type").and_then(Value::as_str) {
        Some("mcp_tool_use") => "id",
        Some("mcp_tool_result") => "tool_use_id",
        _ => return false,
    };
    block
        .get(field)
        .and_then(Value::as_str)
        .is_some_and(|id| id.contains(DISPLAY_MARK))
}

/// Puts `blocks` first in a user message (tool results must lead it).
fn prepend_blocks(message: &mut Value, mut blocks: Vec<Value>) {
    let existing = match message.get_mut("content").map(Value::take) {
        Some(Value::Array(items)) => items,
        Some(Value::String(text)) if !text.is_empty() => {
            vec![json!({"type": "text", "text": text})]
        }
        _ => Vec::new(),
    };
    blocks.extend(existing);
    message["content"] = Value::Array(blocks);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_carried_turn_is_put_back_together() {
        let carry = Carry {
            key_tag: 1,
            prior: vec![
                json!({"role": "assistant", "content": [{"type": "text", "text": "looking"}, {"type": "tool_use", "id": "toolu_a", "name": "ocr__read", "input": {}}]}),
                json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"}]}),
            ],
            shown: 1,
            calls: vec![
                json!({"type": "tool_use", "id": "toolu_b", "name": "ocr__read", "input": {"p": 2}}),
            ],
            results: vec![json!({"type": "tool_result", "tool_use_id": "toolu_b", "content": "B"})],
            id: Some("toolu_read".into()),
            ..Carry::default()
        };
        let open = move |token: &str| (token == "T").then(|| carry.clone());
        let mut messages = vec![
            json!({"role": "user", "content": "read it"}),
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "looking"},
                {"type": "text", "text": "now Read"},
                {"type": "tool_use", "id": carried_id("T"), "name": "Read", "input": {"file_path": "a"}}
            ]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": carried_id("T"), "content": "file"}]}),
        ];
        expand(&mut messages, &open);
        assert_eq!(messages.len(), 5, "{messages:#?}");
        assert_eq!(messages[1]["content"][1]["id"], "toolu_a");
        assert_eq!(messages[2]["content"][0]["content"], "A");
        let last_assistant = &messages[3]["content"];
        assert_eq!(last_assistant[0]["text"], "now Read");
        assert_eq!(last_assistant[1]["id"], "toolu_read");
        assert_eq!(last_assistant[2]["id"], "toolu_b");
        let results = &messages[4]["content"];
        assert_eq!(results[0]["tool_use_id"], "toolu_b", "gateway results lead");
        assert_eq!(results[1]["tool_use_id"], "toolu_read");
    }

    /// A streamed turn of three model calls: a carrier ahead of the second call's blocks and
    /// one ahead of the third's, each holding everything before it. The last one is opened,
    /// the carriers go, and the client's copies of earlier blocks give way to the record.
    #[test]
    fn a_streamed_turn_opens_its_last_carrier() {
        let first = json!({"role": "assistant", "content": [{"type": "text", "text": "one"}, {"type": "tool_use", "id": "toolu_a", "name": "t__x", "input": {}}]});
        let first_results = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"}]});
        let second = json!({"role": "assistant", "content": [{"type": "text", "text": "two"}, {"type": "tool_use", "id": "toolu_b", "name": "t__x", "input": {}}]});
        let second_results = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_b", "content": "B"}]});
        let carry = |prior: Vec<Value>, shown| Carry {
            key_tag: 1,
            prior,
            shown,
            ..Carry::default()
        };
        let ahead_of_second = carry(vec![first.clone(), first_results.clone()], 1);
        let ahead_of_third = carry(vec![first, first_results, second, second_results], 2);
        let open = move |token: &str| match token {
            "T2" => Some(ahead_of_second.clone()),
            "T3" => Some(ahead_of_third.clone()),
            _ => None,
        };
        let mut messages = vec![
            json!({"role": "user", "content": "go"}),
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "one"},
                carrier_block("T2"),
                {"type": "text", "text": "two"},
                carrier_block("T3"),
                {"type": "text", "text": "three"}
            ]}),
            json!({"role": "user", "content": "thanks"}),
        ];
        expand(&mut messages, &open);
        let texts: Vec<String> = messages.iter().map(|m| m["content"].to_string()).collect();
        assert_eq!(messages.len(), 7, "{texts:#?}");
        assert_eq!(messages[1]["content"][1]["id"], "toolu_a");
        assert_eq!(messages[3]["content"][1]["id"], "toolu_b");
        assert_eq!(messages[4]["content"][0]["content"], "B");
        assert_eq!(
            messages[5]["content"],
            json!([{"type": "text", "text": "three"}]),
            "no carrier and no second copy of an earlier block"
        );
        assert_eq!(messages[6]["content"], "thanks");
    }

    #[test]
    fn a_client_that_dropped_an_earlier_block_loses_no_tool_call() {
        let carry = Carry {
            key_tag: 1,
            prior: vec![
                json!({"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "tool_use", "id": "toolu_a", "name": "ocr__read", "input": {}}]}),
                json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"}]}),
            ],
            shown: 1,
            calls: vec![
                json!({"type": "tool_use", "id": "toolu_b", "name": "ocr__read", "input": {}}),
            ],
            results: vec![json!({"type": "tool_result", "tool_use_id": "toolu_b", "content": "B"})],
            id: Some("toolu_read".into()),
            ..Carry::default()
        };
        let open = move |token: &str| (token == "T").then(|| carry.clone());
        // The earlier thinking block is gone from the client's copy: the first block is the call.
        let mut messages = vec![
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": carried_id("T"), "name": "Read", "input": {}}]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": carried_id("T"), "content": "file"}]}),
        ];
        expand(&mut messages, &open);
        let text = serde_json::to_string(&messages).unwrap();
        assert!(!text.contains(CARRY_MARK), "{text}");
        assert_eq!(messages[2]["content"][0]["id"], "toolu_read");
        assert_eq!(messages[3]["content"][1]["tool_use_id"], "toolu_read");
    }

    #[test]
    fn an_unopenable_carrier_gets_one_stand_in_id_everywhere() {
        let open = |_: &str| None;
        let mut messages = vec![
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": carried_id("X"), "name": "Read", "input": {}}]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": carried_id("X"), "content": "f"}]}),
        ];
        expand(&mut messages, &open);
        let id = messages[0]["content"][0]["id"].as_str().unwrap();
        assert!(id.len() < 40 && !id.contains(CARRY_MARK));
        assert_eq!(messages[1]["content"][0]["tool_use_id"], id);
    }

    #[test]
    fn messages_without_gateway_blocks_are_untouched() {
        let mut messages = vec![
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}]}),
        ];
        let before = messages.clone();
        expand(&mut messages, &|_| None);
        assert_eq!(messages, before);
    }
}
