//! The shapes of a tool turn that both formats share: the calls a model made, what running a
//! gateway tool gave, and the token counts.

use serde_json::Value;

use crate::toolset::GatewayTool;

/// One tool call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: String,
    pub name: String,
    /// The arguments; an error when the model's arguments are not a JSON object.
    pub input: Result<Value, String>,
}

/// What running a gateway tool gave, as MCP content.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Outcome {
    pub call_id: String,
    /// MCP content items (`{"type":"text",...}`, images, resources).
    pub content: Vec<Value>,
    pub is_error: bool,
}

impl Outcome {
    pub fn error(call_id: &str, message: String) -> Outcome {
        Outcome {
            call_id: call_id.to_string(),
            content: vec![serde_json::json!({"type": "text", "text": message})],
            is_error: true,
        }
    }

    /// The text of the outcome, for formats whose results are text alone.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for item in &self.content {
            let piece = match item.get("type").and_then(Value::as_str) {
                Some("text") => item.get("text").and_then(Value::as_str).map(str::to_owned),
                Some("resource") => item
                    .pointer("/resource/text")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                Some("resource_link") => item
                    .get("uri")
                    .and_then(Value::as_str)
                    .map(|u| format!("[resource: {u}]")),
                Some(other) => Some(format!("[{other} content omitted]")),
                None => None,
            };
            if let Some(piece) = piece {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(&piece);
            }
        }
        out
    }
}

/// Token counts, summed over every model call of a request.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_creation: u64,
    pub cache_read: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input += other.input;
        self.output += other.output;
        self.cache_creation += other.cache_creation;
        self.cache_read += other.cache_read;
    }
}

/// A gateway call that ran, with the tool it ran as.
pub(crate) struct Executed<'a> {
    pub call: Call,
    pub tool: &'a GatewayTool,
    pub outcome: Outcome,
}
