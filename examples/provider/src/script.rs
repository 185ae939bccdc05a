//! The script: rules posted to `/_script`, and picking the first one that matches a request.
//! Rules are checked when posted (unknown fields, bad statuses or headers are refused), so a
//! request never meets an invalid rule.

use std::sync::{Arc, PoisonError, RwLock};

use axum::http::{HeaderName, HeaderValue, StatusCode};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::conversation::Conversation;

/// The text answered when no rule matches (or a rule gives no `content`).
pub const DEFAULT_TEXT: &str = "scripted default answer";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptBody {
    rules: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(default)]
    when: When,
    #[serde(default)]
    respond: Respond,
}

/// Conditions, all optional and ANDed.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    path: Option<String>,
    model: Option<String>,
    last_tool_result_for: Option<String>,
    no_tool_results: Option<bool>,
    last_user_text_contains: Option<String>,
    has_tool: Option<String>,
    stream: Option<bool>,
}

impl When {
    pub fn matches(&self, c: &Conversation) -> bool {
        self.path.as_ref().is_none_or(|p| p == c.path)
            && self
                .model
                .as_ref()
                .is_none_or(|m| c.model.as_ref() == Some(m))
            && self
                .last_tool_result_for
                .as_ref()
                .is_none_or(|n| c.answered_last.contains(n))
            && self
                .no_tool_results
                .is_none_or(|none| none != c.ends_with_tool_result)
            && self
                .last_user_text_contains
                .as_ref()
                .is_none_or(|s| c.last_user_text.as_ref().is_some_and(|t| t.contains(s)))
            && self.has_tool.as_ref().is_none_or(|n| c.tools.contains(n))
            && self.stream.is_none_or(|s| s == c.stream)
    }
}

/// What a rule answers, in a neutral form each wire format renders.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Respond {
    pub content: Option<Vec<Item>>,
    pub error: Option<ScriptedError>,
    pub delay_ms: Option<u64>,
    pub break_stream_after: Option<usize>,
    pub usage: Option<UsageOverride>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Item {
    Text {
        text: String,
    },
    ToolUse {
        name: String,
        #[serde(default = "empty_object", deserialize_with = "object")]
        input: Map<String, Value>,
    },
    Thinking {
        thinking: String,
        #[serde(default)]
        signature: String,
    },
}

fn empty_object() -> Map<String, Value> {
    Map::new()
}

fn object<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Map<String, Value>, D::Error> {
    match Value::deserialize(d)? {
        Value::Object(map) => Ok(map),
        other => Err(serde::de::Error::custom(format!(
            "tool_use input must be a JSON object, got {other}"
        ))),
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageOverride {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

/// A scripted error answer: status, optional body (else the provider's error shape) and
/// extra headers, all checked when the script is posted.
#[derive(Clone, Debug, Deserialize)]
#[serde(try_from = "RawError")]
pub struct ScriptedError {
    pub status: StatusCode,
    pub body: Option<Value>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawError {
    status: u16,
    #[serde(default)]
    body: Option<Value>,
    #[serde(default)]
    headers: Map<String, Value>,
}

impl TryFrom<RawError> for ScriptedError {
    type Error = String;

    fn try_from(raw: RawError) -> Result<Self, String> {
        let status = StatusCode::from_u16(raw.status)
            .ok()
            .filter(|s| s.as_u16() >= 200)
            .ok_or_else(|| format!("invalid error status {}", raw.status))?;
        let mut headers = Vec::with_capacity(raw.headers.len());
        for (name, value) in raw.headers {
            let value = match value {
                Value::String(s) => s,
                other => other.to_string(),
            };
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("invalid header name {name:?}"))?;
            let value = HeaderValue::from_str(&value)
                .map_err(|_| format!("invalid value for header {name}"))?;
            headers.push((name, value));
        }
        Ok(Self {
            status,
            body: raw.body,
            headers,
        })
    }
}

/// Parses a `/_script` body into its rules; the error names the offending place.
pub fn parse(body: &[u8]) -> Result<Vec<Rule>, String> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize::<_, ScriptBody>(de)
        .map(|s| s.rules)
        .map_err(|e| {
            let path = e.path().to_string();
            format!("{path}: {}", e.into_inner())
        })
}

/// The current rules, replaced as a whole by `/_script`.
#[derive(Default)]
pub struct Script {
    rules: RwLock<Arc<Vec<Rule>>>,
}

impl Script {
    pub fn replace(&self, rules: Vec<Rule>) {
        *self.rules.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(rules);
    }

    /// The answer of the first matching rule, or the default answer.
    pub fn pick(&self, c: &Conversation) -> Respond {
        let rules = self
            .rules
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        rules
            .iter()
            .find(|r| r.when.matches(c))
            .map(|r| r.respond.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conv() -> Conversation {
        Conversation {
            path: "/v1/messages",
            model: Some("m".into()),
            stream: true,
            tools: vec!["Read".into()],
            ends_with_tool_result: true,
            answered_last: vec!["Read".into()],
            last_user_text: Some("please read".into()),
            ..Conversation::default()
        }
    }

    fn rules(v: Value) -> Vec<Rule> {
        parse(v.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn first_matching_rule_answers() {
        let s = Script::default();
        s.replace(rules(json!({"rules": [
            {"when": {"path": "/v1/chat/completions"}, "respond": {"delay_ms": 1}},
            {"when": {"model": "m", "stream": true, "has_tool": "Read",
                      "last_tool_result_for": "Read", "no_tool_results": false,
                      "last_user_text_contains": "read"},
             "respond": {"delay_ms": 2}},
            {"respond": {"delay_ms": 3}},
        ]})));
        assert_eq!(s.pick(&conv()).delay_ms, Some(2));
        let mut c = conv();
        c.answered_last.clear();
        assert_eq!(s.pick(&c).delay_ms, Some(3));
        s.replace(Vec::new());
        assert!(s.pick(&c).content.is_none());
    }

    #[test]
    fn bad_rules_are_refused_with_a_path() {
        let e = parse(br#"{"rules": [{"when": {"modle": "x"}}]}"#).err();
        assert!(e.is_some_and(|e| e.contains("rules[0].when")));
        let e = parse(br#"{"rules": [{"respond": {"error": {"status": 99}}}]}"#).err();
        assert!(e.is_some_and(|e| e.contains("invalid error status")));
        let bad_input = br#"{"rules": [{"respond": {"content": [
            {"type": "tool_use", "name": "x", "input": 1}]}}]}"#;
        let e = parse(bad_input).err();
        assert!(e.is_some_and(|e| e.contains("JSON object")));
        assert!(parse(b"not json").is_err());
    }
}
