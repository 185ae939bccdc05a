//! Turns a rule's `respond` into the answer both wire formats render: content with its
//! templates filled in, and the usage to report.

use crate::conversation::Conversation;
use crate::script::{DEFAULT_TEXT, Item, Respond};

/// Output tokens reported per content item when the rule does not say.
const OUTPUT_TOKENS_PER_ITEM: u64 = 7;

pub struct Answer {
    pub content: Vec<Item>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Streaming only: how many SSE events to send before breaking the connection.
    pub break_after: Option<usize>,
}

impl Answer {
    pub fn has_tool_use(&self) -> bool {
        self.content
            .iter()
            .any(|i| matches!(i, Item::ToolUse { .. }))
    }
}

/// The default input estimate: a quarter of the body bytes, rounded up.
pub fn estimate_tokens(bytes: usize) -> u64 {
    u64::try_from(bytes.div_ceil(4)).unwrap_or(u64::MAX)
}

pub fn build(respond: Respond, c: &Conversation) -> Answer {
    let content: Vec<Item> = respond
        .content
        .unwrap_or_else(|| {
            vec![Item::Text {
                text: DEFAULT_TEXT.to_owned(),
            }]
        })
        .into_iter()
        .map(|item| match item {
            Item::Text { text } => Item::Text {
                text: fill(&text, c),
            },
            other => other,
        })
        .collect();
    let usage = respond.usage.unwrap_or_default();
    let items = u64::try_from(content.len()).unwrap_or(u64::MAX);
    Answer {
        input_tokens: usage
            .input_tokens
            .unwrap_or_else(|| estimate_tokens(c.body_bytes)),
        output_tokens: usage
            .output_tokens
            .unwrap_or(items.saturating_mul(OUTPUT_TOKENS_PER_ITEM)),
        break_after: respond.break_stream_after,
        content,
    }
}

/// Replaces `{{tool_result:NAME}}` and `{{messages}}`; anything else in braces stays as is.
fn fill(text: &str, c: &Conversation) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        let key = &after[..end];
        if key == "messages" {
            out.push_str(&c.messages.to_string());
        } else if let Some(name) = key.strip_prefix("tool_result:") {
            out.push_str(c.tool_result_text(name).unwrap_or("<none>"));
        } else {
            out.push_str(&rest[start..start + 2 + end + 2]);
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::UsageOverride;

    #[test]
    fn templates() {
        let c = Conversation {
            messages: 3,
            tool_results: vec![
                (Some("Read".into()), "old".into()),
                (None, "orphan".into()),
                (Some("Read".into()), "new".into()),
            ],
            ..Conversation::default()
        };
        assert_eq!(
            fill(
                "{{messages}} {{tool_result:Read}} {{tool_result:Bash}} {{x}} {{open",
                &c
            ),
            "3 new <none> {{x}} {{open"
        );
    }

    #[test]
    fn default_answer_and_usage() {
        let c = Conversation {
            body_bytes: 9,
            ..Conversation::default()
        };
        let a = build(Respond::default(), &c);
        assert!(matches!(&a.content[..], [Item::Text { text }] if text == DEFAULT_TEXT));
        assert_eq!((a.input_tokens, a.output_tokens), (3, 7));
        let r = Respond {
            usage: Some(UsageOverride {
                input_tokens: Some(100),
                output_tokens: None,
            }),
            content: Some(Vec::new()),
            ..Respond::default()
        };
        let a = build(r, &c);
        assert_eq!((a.input_tokens, a.output_tokens), (100, 0));
    }
}
