//! What the loop needs of a wire format, in one place: the two formats are the Anthropic
//! Messages API and OpenAI Chat Completions, and a client always speaks the format of the
//! model's provider (the gateway does not translate between them).

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::carry::Carry;
use crate::format::Format;
use crate::toolset::ToolSet;
use crate::turn::{Call, Executed, Usage};
use crate::{anthropic, openai};

impl Format {
    /// Names of the tools the client defines itself.
    pub(crate) fn client_tool_names(self, body: &Map<String, Value>) -> HashSet<String> {
        let path = match self {
            Format::Anthropic => "/name",
            Format::OpenAi => "/function/name",
        };
        body.get("tools")
            .and_then(Value::as_array)
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t.pointer(path).and_then(Value::as_str))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Adds the tool set's definitions to the request's `tools`.
    pub(crate) fn inject(self, body: &mut Map<String, Value>, set: &ToolSet) {
        if set.tools.is_empty() {
            return;
        }
        let tools = body
            .entry("tools")
            .or_insert_with(|| Value::Array(Vec::new()));
        let Value::Array(tools) = tools else { return };
        for tool in &set.tools {
            tools.push(match self {
                Format::Anthropic => anthropic::tool_definition(tool),
                Format::OpenAi => openai::tool_definition(tool),
            });
        }
    }

    /// Restores carried gateway work in the request's messages (see `crate::carry`).
    pub(crate) fn expand(
        self,
        body: &mut Map<String, Value>,
        open: &dyn Fn(&str) -> Option<Carry>,
    ) {
        let Some(Value::Array(messages)) = body.get_mut("messages") else {
            return;
        };
        match self {
            Format::Anthropic => anthropic::expand(messages, open),
            Format::OpenAi => openai::expand(messages, open),
        }
    }

    /// Whether the model stopped to have its tool calls run (`stop_reason: tool_use`,
    /// `finish_reason: tool_calls`). A call cut off by `max_tokens` is not one to run.
    pub(crate) fn stopped_for_tools(self, response: &Value) -> bool {
        match self {
            Format::Anthropic => {
                response.get("stop_reason").and_then(Value::as_str) == Some("tool_use")
            }
            Format::OpenAi => {
                response
                    .pointer("/choices/0/finish_reason")
                    .and_then(Value::as_str)
                    == Some("tool_calls")
            }
        }
    }

    /// The calls to run: the response's calls if the model stopped for them, else none.
    pub(crate) fn runnable_calls(self, response: &Value) -> Vec<Call> {
        if self.stopped_for_tools(response) {
            self.calls(response)
        } else {
            Vec::new()
        }
    }

    /// Removes the calls of gateway tools from a response that will not have them run: the
    /// client never sees them either way.
    pub(crate) fn drop_gateway_calls(self, response: &mut Value, set: &ToolSet) {
        let (pointer, name) = match self {
            Format::Anthropic => ("/content", "/name"),
            Format::OpenAi => ("/choices/0/message/tool_calls", "/function/name"),
        };
        if let Some(Value::Array(items)) = response.pointer_mut(pointer) {
            items.retain(|item| {
                let is_call = self == Format::OpenAi
                    || item.get("type").and_then(Value::as_str) == Some("tool_use");
                !(is_call
                    && item
                        .pointer(name)
                        .and_then(Value::as_str)
                        .is_some_and(|n| set.gateway_run(n).is_some()))
            });
        }
    }

    /// The tool calls of a whole (non-streamed) response.
    pub fn calls(self, response: &Value) -> Vec<Call> {
        match self {
            Format::Anthropic => anthropic::calls(response),
            Format::OpenAi => openai::calls(response),
        }
    }

    pub fn usage(self, response: &Value) -> Usage {
        match self {
            Format::Anthropic => anthropic::usage(response.get("usage")),
            Format::OpenAi => openai::usage(response.get("usage")),
        }
    }

    /// The response as the assistant message that goes back into the conversation.
    pub(crate) fn assistant_message(self, response: &Value) -> Value {
        match self {
            Format::Anthropic => anthropic::assistant_message(response),
            Format::OpenAi => openai::assistant_message(response),
        }
    }

    /// The results as the message(s) that answer the calls.
    fn result_messages(self, executed: &[Executed<'_>]) -> Vec<Value> {
        match self {
            Format::Anthropic => vec![anthropic::result_message(executed)],
            Format::OpenAi => executed.iter().map(openai::tool_message).collect(),
        }
    }

    /// An iteration that ended in gateway calls only, as it goes into the conversation: the
    /// model's message, then the results.
    pub(crate) fn iteration_messages(
        self,
        response: &Value,
        executed: &[Executed<'_>],
    ) -> Vec<Value> {
        let mut messages = vec![self.assistant_message(response)];
        messages.extend(self.result_messages(executed));
        messages
    }

    /// The gateway's calls of the last iteration and their results, for a `Carry`.
    pub(crate) fn carried_calls(
        self,
        response: &Value,
        executed: &[Executed<'_>],
    ) -> (Vec<Value>, Vec<Value>) {
        let ids: HashSet<&str> = executed.iter().map(|e| e.call.id.as_str()).collect();
        match self {
            Format::Anthropic => (
                anthropic::blocks(response)
                    .filter(|b| {
                        b.get("id")
                            .and_then(Value::as_str)
                            .is_some_and(|id| ids.contains(id))
                    })
                    .cloned()
                    .collect(),
                anthropic::result_blocks(executed),
            ),
            Format::OpenAi => (
                openai::tool_calls(response)
                    .filter(|c| {
                        c.get("id")
                            .and_then(Value::as_str)
                            .is_some_and(|id| ids.contains(id))
                    })
                    .cloned()
                    .collect(),
                executed.iter().map(openai::tool_message).collect(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolset::GatewayTool;
    use serde_json::json;
    use switchboard_core::table::RoutingTable;
    use switchboard_snapshot::{SystemLookup, ToolVisibility, load};

    fn set() -> ToolSet {
        let table = RoutingTable::build(
            &load(
                "servers:\n- {name: ocr, url: 'http://x/mcp'}\n",
                &SystemLookup,
            )
            .unwrap(),
        )
        .unwrap();
        ToolSet {
            tools: vec![GatewayTool {
                name: "ocr__read".into(),
                server: table.servers[0].clone(),
                tool: "read".into(),
                description: None,
                schema: json!({"type": "object"}),
                approval: switchboard_snapshot::RequireApproval::Never,
                visibility: ToolVisibility::Hidden,
                via: None,
                search: None,
            }],
        }
    }

    #[test]
    fn calls_cut_off_by_max_tokens_are_dropped_not_run() {
        let set = set();
        let mut cut = json!({"stop_reason": "max_tokens", "content": [
            {"type": "text", "text": "t"},
            {"type": "tool_use", "id": "a", "name": "ocr__read", "input": {}},
            {"type": "tool_use", "id": "b", "name": "Read", "input": {}}
        ]});
        assert!(!Format::Anthropic.stopped_for_tools(&cut));
        Format::Anthropic.drop_gateway_calls(&mut cut, &set);
        let names: Vec<_> = Format::Anthropic
            .calls(&cut)
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["Read"]);
        assert_eq!(
            cut["content"].as_array().unwrap().len(),
            2,
            "the text stays"
        );

        let mut cut = json!({"choices": [{"finish_reason": "length", "message": {"tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "ocr__read", "arguments": "{\"p"}},
            {"id": "b", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        ]}}]});
        assert!(!Format::OpenAi.stopped_for_tools(&cut));
        Format::OpenAi.drop_gateway_calls(&mut cut, &set);
        let names: Vec<_> = Format::OpenAi
            .calls(&cut)
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["read"]);
        assert!(
            Format::OpenAi
                .stopped_for_tools(&json!({"choices": [{"finish_reason": "tool_calls"}]}))
        );
    }
}
