//! A legacy client's capabilities, as few bits as the session id can carry: the client declares
//! them once, in `initialize`, and every upstream request made for its session must carry them
//! again (a 2026-07-28 upstream reads them from each request's `_meta`; a legacy upstream from
//! the `initialize` the gateway sends it), or the upstream refuses sampling, elicitation and
//! roots with -32021.

use std::sync::OnceLock;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

pub const SAMPLING: u8 = 1;
pub const SAMPLING_CONTEXT: u8 = 1 << 1;
pub const SAMPLING_TOOLS: u8 = 1 << 2;
pub const ELICITATION_FORM: u8 = 1 << 3;
pub const ELICITATION_URL: u8 = 1 << 4;
pub const ROOTS: u8 = 1 << 5;
pub const ROOTS_LIST_CHANGED: u8 = 1 << 6;
/// The tasks extension (`io.modelcontextprotocol/tasks`).
pub const TASKS: u8 = 1 << 7;

pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The bits of a `ClientCapabilities` object the gateway carries.
pub fn to_bits(caps: Option<&Value>) -> u8 {
    let Some(caps) = caps else { return 0 };
    let has = |path: &[&str]| {
        let mut node = caps;
        for key in path {
            match node.get(key) {
                Some(v) if !v.is_null() => node = v,
                _ => return false,
            }
        }
        true
    };
    let mut bits = 0;
    let mut set = |cond: bool, bit: u8| {
        if cond {
            bits |= bit;
        }
    };
    set(has(&["sampling"]), SAMPLING);
    set(has(&["sampling", "context"]), SAMPLING_CONTEXT);
    set(has(&["sampling", "tools"]), SAMPLING_TOOLS);
    // A bare `elicitation: {}` (before modes existed) means form support.
    let form =
        has(&["elicitation", "form"]) || (has(&["elicitation"]) && !has(&["elicitation", "url"]));
    set(form, ELICITATION_FORM);
    set(has(&["elicitation", "url"]), ELICITATION_URL);
    set(has(&["roots"]), ROOTS);
    set(
        // (Not `pointer`: it allocates each step's key, on every 2026-07-28 request.)
        caps.get("roots")
            .and_then(|roots| roots.get("listChanged"))
            .and_then(Value::as_bool)
            == Some(true),
        ROOTS_LIST_CHANGED,
    );
    set(has(&["extensions", TASKS_EXTENSION]), TASKS);
    bits
}

/// The `ClientCapabilities` object the bits stand for.
pub fn to_json(bits: u8) -> Value {
    let mut caps = Map::new();
    if bits & SAMPLING != 0 {
        let mut sampling = Map::new();
        if bits & SAMPLING_CONTEXT != 0 {
            sampling.insert("context".into(), json!({}));
        }
        if bits & SAMPLING_TOOLS != 0 {
            sampling.insert("tools".into(), json!({}));
        }
        caps.insert("sampling".into(), Value::Object(sampling));
    }
    if bits & (ELICITATION_FORM | ELICITATION_URL) != 0 {
        let mut elicitation = Map::new();
        if bits & ELICITATION_FORM != 0 {
            elicitation.insert("form".into(), json!({}));
        }
        if bits & ELICITATION_URL != 0 {
            elicitation.insert("url".into(), json!({}));
        }
        caps.insert("elicitation".into(), Value::Object(elicitation));
    }
    if bits & ROOTS != 0 {
        caps.insert(
            "roots".into(),
            json!({"listChanged": bits & ROOTS_LIST_CHANGED != 0}),
        );
    }
    if bits & TASKS != 0 {
        caps.insert("extensions".into(), json!({ TASKS_EXTENSION: {} }));
    }
    Value::Object(caps)
}

/// [`to_json`]'s object as text, made once for every value of the bits: a request written from
/// its text takes it as it is, rather than building the tree and writing it on every call.
pub fn json_text(bits: u8) -> &'static RawValue {
    static TEXTS: OnceLock<Vec<Box<RawValue>>> = OnceLock::new();
    let texts = TEXTS.get_or_init(|| {
        (0..=u8::MAX)
            .map(|bits| {
                serde_json::value::to_raw_value(&to_json(bits))
                    .expect("a tree of objects and booleans serializes")
            })
            .collect()
    });
    // One text for each of the 256 values a `u8` has.
    &texts[usize::from(bits)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let caps = json!({
            "sampling": {"tools": {}},
            "elicitation": {"form": {}, "url": {}},
            "roots": {"listChanged": true},
            "extensions": {TASKS_EXTENSION: {}},
        });
        let bits = to_bits(Some(&caps));
        assert_eq!(
            bits,
            SAMPLING
                | SAMPLING_TOOLS
                | ELICITATION_FORM
                | ELICITATION_URL
                | ROOTS
                | ROOTS_LIST_CHANGED
                | TASKS
        );
        assert_eq!(to_bits(Some(&to_json(bits))), bits);
    }

    #[test]
    fn bare_elicitation_is_form() {
        assert_eq!(to_bits(Some(&json!({"elicitation": {}}))), ELICITATION_FORM);
        assert_eq!(to_bits(Some(&json!({}))), 0);
        assert_eq!(to_bits(None), 0);
        assert_eq!(to_json(0), json!({}));
    }

    #[test]
    fn the_text_is_the_tree() {
        for bits in 0..=u8::MAX {
            let text: Value = serde_json::from_str(json_text(bits).get()).unwrap_or_default();
            assert_eq!(text, to_json(bits), "{bits:#010b}");
        }
    }
}
