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

/// What a `ClientCapabilities` object declares of what the gateway carries: each member there
/// and not `null`, `roots.listChanged` when `true`. Read from a tree ([`to_bits`]) or from the
/// text ([`text_bits`]); [`Declared::bits`] is the one place their rules are.
#[derive(Default)]
struct Declared {
    sampling: bool,
    sampling_context: bool,
    sampling_tools: bool,
    elicitation: bool,
    elicitation_form: bool,
    elicitation_url: bool,
    roots: bool,
    roots_list_changed: bool,
    tasks: bool,
}

impl Declared {
    fn bits(&self) -> u8 {
        // A bare `elicitation: {}` (before modes existed) means form support.
        let form = self.elicitation_form || (self.elicitation && !self.elicitation_url);
        [
            (self.sampling, SAMPLING),
            (self.sampling_context, SAMPLING_CONTEXT),
            (self.sampling_tools, SAMPLING_TOOLS),
            (form, ELICITATION_FORM),
            (self.elicitation_url, ELICITATION_URL),
            (self.roots, ROOTS),
            (self.roots_list_changed, ROOTS_LIST_CHANGED),
            (self.tasks, TASKS),
        ]
        .into_iter()
        .filter(|(declared, _)| *declared)
        .fold(0, |bits, (_, bit)| bits | bit)
    }
}

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
    Declared {
        sampling: has(&["sampling"]),
        sampling_context: has(&["sampling", "context"]),
        sampling_tools: has(&["sampling", "tools"]),
        elicitation: has(&["elicitation"]),
        elicitation_form: has(&["elicitation", "form"]),
        elicitation_url: has(&["elicitation", "url"]),
        roots: has(&["roots"]),
        // (Not `pointer`: it allocates each step's key, on every 2026-07-28 request.)
        roots_list_changed: caps
            .get("roots")
            .and_then(|roots| roots.get("listChanged"))
            .and_then(Value::as_bool)
            == Some(true),
        tasks: has(&["extensions", TASKS_EXTENSION]),
    }
    .bits()
}

/// [`to_bits`] of a capabilities object's text, read by the walk (`scan`) rather than into a
/// tree: a 2026-07-28 client sends the object on every request. What the walk leaves to serde
/// (a name with an escape) is read into a tree. `text` is one JSON value (a reading of the
/// message checked it).
pub fn text_bits(text: &str) -> u8 {
    walked(text).map_or_else(
        || to_bits(serde_json::from_str::<Value>(text).ok().as_ref()),
        |declared| declared.bits(),
    )
}

/// The members of a value's text as `Value::get` finds them: an object's (the last of a name
/// named twice, as a tree keeps it), none for any other value. `None`: the walk left it.
fn members_of(text: &str) -> Option<Vec<(&str, &str)>> {
    if !text.trim_ascii_start().starts_with('{') {
        return Some(Vec::new());
    }
    match crate::scan::read_object(text)? {
        crate::ObjectRead::Object(members) => Some(members),
        crate::ObjectRead::Null => Some(Vec::new()),
    }
}

/// A member's value's text, when it is there and not `null` (`to_bits`'s `has`).
fn present<'a>(members: &[(&str, &'a str)], name: &str) -> Option<&'a str> {
    members
        .iter()
        .rev()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
        .filter(|v| *v != "null")
}

/// What the text declares, each object walked once (`None`: the walk left it to serde).
fn walked(text: &str) -> Option<Declared> {
    let caps = members_of(text)?;
    let inner = |name: &str| -> Option<Option<Vec<(&str, &str)>>> {
        match present(&caps, name) {
            Some(value) => members_of(value).map(Some),
            None => Some(None),
        }
    };
    let (sampling, elicitation, roots, extensions) = (
        inner("sampling")?,
        inner("elicitation")?,
        inner("roots")?,
        inner("extensions")?,
    );
    let has = |object: &Option<Vec<(&str, &str)>>, name: &str| {
        object.as_ref().is_some_and(|m| present(m, name).is_some())
    };
    Some(Declared {
        sampling: sampling.is_some(),
        sampling_context: has(&sampling, "context"),
        sampling_tools: has(&sampling, "tools"),
        elicitation: elicitation.is_some(),
        elicitation_form: has(&elicitation, "form"),
        elicitation_url: has(&elicitation, "url"),
        roots: roots.is_some(),
        roots_list_changed: roots.as_ref().and_then(|m| present(m, "listChanged")) == Some("true"),
        tasks: has(&extensions, TASKS_EXTENSION),
    })
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

    /// `text_bits` reads what `to_bits` reads of the tree, on generated objects: each name
    /// `to_bits` looks at, others, `null`s, values that are not objects, names given twice,
    /// white space, a name with an escape (left to serde), and values that are not objects.
    #[test]
    fn the_walk_of_a_capabilities_text_finds_the_trees_bits() {
        /// Texts from a fixed seed (xorshift): objects of the names below, nested once.
        struct Texts(u64);
        impl Texts {
            fn next(&mut self, n: usize) -> usize {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                (self.0 % n as u64) as usize
            }
            fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
                from[self.next(from.len())]
            }
            fn space(&mut self) -> &'static str {
                self.pick(&[" ", "", "\n ", ""])
            }
            fn leaf(&mut self) -> String {
                let leaves = ["{}", "null", "true", "false", "\"x\"", "[]", "1", "[{}]"];
                self.pick(&leaves).to_string()
            }
            fn object(&mut self, names: &[&str], nested: bool) -> String {
                let members: Vec<String> = (0..self.next(4))
                    .map(|_| {
                        let name = self.pick(names);
                        let value = match (nested, self.next(3)) {
                            (true, 0) | (false, _) => self.leaf(),
                            (true, _) => self.object(INNER, false),
                        };
                        let (a, b, c) = (self.space(), self.space(), self.space());
                        format!("{a}\"{name}\"{b}:{c}{value}")
                    })
                    .collect();
                format!("{{{}{}}}", members.join(","), self.space())
            }
        }
        const INNER: &[&str] = &[
            "context",
            "tools",
            "form",
            "url",
            "listChanged",
            TASKS_EXTENSION,
            "other",
            "f\\u006frm",
        ];
        const OUTER: &[&str] = &[
            "sampling",
            "elicitation",
            "roots",
            "extensions",
            "experimental",
            "s\\u0061mpling",
        ];
        let mut texts = Texts(0x2545_f491_4f6c_dd1d);
        let mut by_walk = 0;
        for _ in 0..3000 {
            let text = match texts.next(8) {
                0 => texts.leaf(),
                _ => texts.object(OUTER, true),
            };
            // (Space before a value, as a reading that kept it would give it.)
            let text = format!("{}{text}", texts.space());
            let tree: Value = serde_json::from_str(&text).expect("generated JSON");
            assert_eq!(text_bits(&text), to_bits(Some(&tree)), "{text}");
            by_walk += usize::from(walked(&text).is_some());
        }
        // Most are the walk's; some (the escaped names) serde's.
        assert!(by_walk > 2000, "{by_walk}");
    }

    #[test]
    fn the_text_is_the_tree() {
        for bits in 0..=u8::MAX {
            let text: Value = serde_json::from_str(json_text(bits).get()).unwrap_or_default();
            assert_eq!(text, to_json(bits), "{bits:#010b}");
        }
    }
}
