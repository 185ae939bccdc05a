//! Invisible gateway tools, carried by the client without it knowing.
//!
//! When the gateway runs a hidden tool, the model's call and the tool's result must reach the
//! provider again on every later request of the conversation (the model reasons from them),
//! while the client must never see them, and any replica must be able to restore them with no
//! shared store. So what the gateway did in one client-visible turn is recorded as a [`Carry`]:
//! the complete provider messages of the loop's earlier iterations, and the gateway's calls and
//! results of the last one. The record is sealed (ChaCha20-Poly1305 under the snapshot's
//! session key, like legacy session ids) and rides in something the client echoes back
//! verbatim: the id of the turn's first client tool call (`toolu_sbx_<sealed>`,
//! `call_sbx_<sealed>`), or, in an Anthropic turn that ends without one, a `redacted_thinking`
//! block (`sbx_<sealed>`), which clients keep and never display. On the next request the
//! gateway opens it and puts the provider's view of the conversation back together.
//!
//! Bounded: a record larger than [`MAX_CARRY_BYTES`] has its longest tool results cut (with a
//! note saying so) until it fits; one that still does not fit is not carried, and later turns
//! then see only what the model itself wrote. An OpenAI turn that ends in text alone has no
//! echoed id to carry a record either (docs/llm.md, "Hidden tools").

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use switchboard_core::session::{SessionSealer, TokenKind};

/// Largest sealed record, before encoding (the id grows by a third in base64url).
const MAX_CARRY_BYTES: usize = 48 * 1024;
/// Marks a carried id: `<provider prefix>_sbx_<sealed>`.
pub(crate) const CARRY_MARK: &str = "_sbx_";
/// Shortest a cut result gets: below this it is left alone.
const MIN_CUT: usize = 256;

/// What the gateway did during one client-visible turn, in the provider's wire format.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
pub struct Carry {
    /// First 8 bytes of the key's digest: a record opens only for the key it was made for.
    #[serde(rename = "k")]
    pub key_tag: u64,
    /// The model it was made for: its tools' results go to no other model.
    #[serde(rename = "m", default)]
    pub model: String,
    /// The provider messages of the loop's earlier iterations, complete, in order.
    #[serde(rename = "p", default, skip_serializing_if = "Vec::is_empty")]
    pub prior: Vec<Value>,
    /// Anthropic: how many leading content blocks of the client's copy came from `prior`, so
    /// they are not sent twice (only blocks that match `prior` are dropped). OpenAI needs no
    /// count: the earlier texts are a prefix of the client's `content`.
    #[serde(rename = "s", default)]
    pub shown: usize,
    /// The gateway's calls in the last iteration (Anthropic `tool_use` blocks; OpenAI
    /// `tool_calls` entries).
    #[serde(rename = "c", default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<Value>,
    /// Their results (Anthropic `tool_result` blocks; OpenAI `role: tool` messages).
    #[serde(rename = "r", default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<Value>,
    /// The provider's own id of the client tool call whose id carries this record.
    #[serde(rename = "i", default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

impl Carry {
    pub fn is_empty(&self) -> bool {
        self.prior.is_empty() && self.calls.is_empty()
    }

    /// The sealed record as an id-safe token, cut to fit; `None` when it cannot fit.
    pub fn seal(mut self, sealer: &SessionSealer) -> Option<String> {
        // A few passes at most: each cuts every long result down to a common length at once.
        for _ in 0..CUT_PASSES {
            let plain = serde_json::to_vec(&self).ok()?;
            if plain.len() <= MAX_CARRY_BYTES {
                return Some(URL_SAFE_NO_PAD.encode(sealer.seal_bytes(TokenKind::Carry, &plain)));
            }
            if !self.cut_results(plain.len() - MAX_CARRY_BYTES) {
                break;
            }
        }
        tracing::warn!(
            "a turn's gateway tool results are too large to carry; later turns will not see them"
        );
        None
    }

    /// Opens a token for the key with `key_tag` and the model `model`; `None` if it is not a
    /// genuine one for both.
    pub fn open(sealer: &SessionSealer, token: &str, key_tag: u64, model: &str) -> Option<Carry> {
        // A token longer than any record could seal to is refused before decoding.
        if token.len() > MAX_CARRY_BYTES * 4 / 3 + 64 {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(token).ok()?;
        let plain = sealer.open_bytes(TokenKind::Carry, &raw)?;
        let carry: Carry = serde_json::from_slice(&plain).ok()?;
        (carry.key_tag == key_tag && carry.model == model).then_some(carry)
    }

    /// Cuts every tool-result text longer than a common length, chosen so that at least
    /// `excess` bytes go (plus the notes' own bytes); false when nothing is left to cut.
    fn cut_results(&mut self, excess: usize) -> bool {
        let mut texts = Vec::new();
        for message in self.prior.iter_mut().chain(self.results.iter_mut()) {
            collect_result_texts(message, false, &mut texts);
        }
        let mut lengths: Vec<usize> = texts
            .iter()
            .map(|t| t.len())
            .filter(|&n| n > MIN_CUT)
            .collect();
        if lengths.is_empty() {
            return false;
        }
        lengths.sort_unstable_by(|a, b| b.cmp(a));
        // The largest cap that frees enough: cutting the k longest to `cap` frees
        // sum(longest k) - k * cap; each note costs about NOTE_BYTES.
        let mut cap = MIN_CUT;
        let mut sum = 0usize;
        for (k, &len) in lengths.iter().enumerate() {
            sum += len;
            let count = k + 1;
            let next = lengths.get(count).copied().unwrap_or(MIN_CUT).max(MIN_CUT);
            let needed = excess + count * NOTE_BYTES;
            if sum > needed && (sum - needed) / count >= next {
                cap = (sum - needed) / count;
                break;
            }
        }
        for text in texts {
            if text.len() > cap.max(MIN_CUT) {
                let mut at = cap.max(MIN_CUT / 2).min(text.len());
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                let cut = text.len() - at;
                text.truncate(at);
                text.push_str(&format!(
                    "\n[{cut} bytes of this result were left out by the gateway to fit the conversation]"
                ));
            }
        }
        true
    }
}

/// Most serializations of one record while it is cut to fit.
const CUT_PASSES: usize = 8;

/// About what one cut's note adds.
const NOTE_BYTES: usize = 96;

// The string arm cannot take a guard: a guarded binding would be borrowed twice for `'a`.
#[allow(clippy::collapsible_match)]
/// The text strings of tool results in a message or block (Anthropic `tool_result` blocks,
/// their text blocks, OpenAI `role: tool` messages).
fn collect_result_texts<'a>(value: &'a mut Value, in_result: bool, out: &mut Vec<&'a mut String>) {
    match value {
        Value::Object(object) => {
            let is_result = in_result
                || object.get("type").and_then(Value::as_str) == Some("tool_result")
                || object.get("role").and_then(Value::as_str) == Some("tool");
            for (key, v) in object.iter_mut() {
                let is_text = key == "content" || key == "text";
                match v {
                    Value::String(s) => {
                        if is_result && is_text {
                            out.push(s);
                        }
                    }
                    Value::Object(_) | Value::Array(_) => collect_result_texts(v, is_result, out),
                    _ => {}
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                collect_result_texts(item, in_result, out);
            }
        }
        _ => {}
    }
}

/// The sealed part of an id or token that carries a record.
pub(crate) fn carried_token(id: &str) -> Option<&str> {
    id.split_once(CARRY_MARK).map(|(_, token)| token)
}

/// Replaces every carried id left in `messages` (`id`, `tool_use_id`, `tool_call_id` fields)
/// by its stand-in: the last guard that no carried id reaches a provider.
pub(crate) fn sweep_carried_ids(messages: &mut [Value], prefix: &str) {
    for message in messages {
        sweep(message, prefix);
    }
}

fn sweep(value: &mut Value, prefix: &str) {
    match value {
        Value::Object(object) => {
            for (key, v) in object.iter_mut() {
                match v {
                    Value::String(id) => {
                        let is_id = key == "id" || key == "tool_use_id" || key == "tool_call_id";
                        if is_id && carried_token(id).is_some() {
                            *id = stand_in_id(id, prefix);
                        }
                    }
                    Value::Object(_) | Value::Array(_) => sweep(v, prefix),
                    _ => {}
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| sweep(i, prefix)),
        _ => {}
    }
}

/// A stable stand-in for a carried id that can no longer be opened (another session key, a
/// changed key): the same id everywhere it appears, short enough for any provider.
pub(crate) fn stand_in_id(id: &str, prefix: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(id.as_bytes());
    format!("{prefix}{}", hex::encode(&digest[..12]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn sealer(secret: &str) -> SessionSealer {
        SessionSealer::new(Some(secret), Duration::from_secs(60))
    }

    #[test]
    fn seals_and_opens_for_the_same_key_and_model_only() {
        let s = sealer("sixteen-or-more-characters");
        let carry = Carry {
            key_tag: 7,
            model: "m".into(),
            calls: vec![json!({"type": "tool_use", "id": "toolu_1", "name": "ocr", "input": {}})],
            results: vec![
                json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "42"}),
            ],
            id: Some("toolu_client".into()),
            ..Carry::default()
        };
        let token = carry.clone().seal(&s).expect("fits");
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert_eq!(Carry::open(&s, &token, 7, "m"), Some(carry));
        assert_eq!(Carry::open(&s, &token, 8, "m"), None, "another key");
        assert_eq!(Carry::open(&s, &token, 7, "other"), None, "another model");
        assert_eq!(
            Carry::open(&sealer("another-session-key!"), &token, 7, "m"),
            None
        );
        assert_eq!(
            carried_token(&format!("toolu{CARRY_MARK}{token}")),
            Some(token.as_str())
        );
    }

    #[test]
    fn oversized_results_are_cut_with_a_note_and_still_open() {
        let s = sealer("sixteen-or-more-characters");
        let big = "x".repeat(200_000);
        let carry = Carry {
            key_tag: 1,
            results: vec![json!({"role": "tool", "tool_call_id": "c1", "content": big})],
            ..Carry::default()
        };
        let token = carry.seal(&s).expect("cut to fit");
        let opened = Carry::open(&s, &token, 1, "").unwrap();
        let text = opened.results[0]["content"].as_str().unwrap();
        assert!(text.len() < MAX_CARRY_BYTES, "{}", text.len());
        assert!(text.contains("left out by the gateway"));
    }

    #[test]
    fn many_results_are_cut_in_a_few_passes_keeping_the_short_ones() {
        let s = sealer("sixteen-or-more-characters");
        let mut results: Vec<Value> = (0..3000)
            .map(|i| json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "z".repeat(10_000)}))
            .collect();
        results.push(json!({"role": "tool", "tool_call_id": "short", "content": "keep me"}));
        let carry = Carry {
            key_tag: 1,
            results,
            ..Carry::default()
        };
        // 3,000 results cannot fit 48 KiB even cut to the minimum: not carried (after at most
        // CUT_PASSES serializations, whatever the number of results).
        assert!(carry.seal(&s).is_none());
        let few = Carry {
            key_tag: 1,
            results: (0..20)
                .map(|i| json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "z".repeat(50_000)}))
                .chain([json!({"role": "tool", "tool_call_id": "short", "content": "keep me"})])
                .collect(),
            ..Carry::default()
        };
        let opened = Carry::open(&s, &few.seal(&s).expect("fits after cutting"), 1, "").unwrap();
        assert_eq!(opened.results[20]["content"], "keep me");
        assert!(
            opened.results[0]["content"]
                .as_str()
                .unwrap()
                .contains("left out")
        );
    }

    #[test]
    fn a_record_that_cannot_be_cut_is_not_carried() {
        let s = sealer("sixteen-or-more-characters");
        let carry = Carry {
            key_tag: 1,
            // Not a tool result: nothing the gateway may cut.
            prior: vec![json!({"role": "assistant", "content": "y".repeat(100_000)})],
            ..Carry::default()
        };
        assert_eq!(carry.seal(&s), None);
    }
}
