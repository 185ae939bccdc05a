//! References into other documents (`$ref: common.yaml#/components/schemas/Pet`): the fetcher
//! asks [`remote_documents`] which documents a document needs (relative references resolved
//! against the URL each document came from), fetches them with its own rules, and [`bundle`]
//! copies every target it reaches into the main document and points the references there, so
//! the compiler and the sanitizer only ever follow references within one document.
//!
//! Bounded: at most [`MAX_DOCUMENTS`] documents besides the main one (the fetcher stops there)
//! and [`MAX_TARGETS`] copied targets; past either, the remaining references stay as written
//! and the operations that need them are reported as not expressible.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;
use url::Url;

/// Most documents a main document may pull in through its references (transitively).
pub const MAX_DOCUMENTS: usize = 16;
/// Most distinct remote targets copied into one main document.
const MAX_TARGETS: usize = 2_000;
/// Where the copies go in the main document (a key no OpenAPI document uses).
pub(crate) const BUNDLED: &str = "x-switchboard-bundled";

/// The documents (absolute URLs without fragment) that `document`, read from `from`, refers
/// into besides itself, the main document `main` and those in `have`, in a stable order.
pub fn remote_documents(
    document: &Value,
    from: &Url,
    main: &Url,
    have: &HashMap<Url, Value>,
) -> Vec<Url> {
    let mut out = BTreeSet::new();
    each_reference(document, &mut |reference| {
        if reference.starts_with('#') {
            return;
        }
        if let Some((url, _)) = absolute(from, reference)
            && &url != from
            && &url != main
            && !have.contains_key(&url)
        {
            out.insert(url);
        }
    });
    out.into_iter().collect()
}

/// `main` (read from `base`) with every reference into a document of `remote` pointed at a
/// copy of its target inside `main`; references inside the copies are followed the same way
/// (relative to the document each came from). References into documents not in `remote` stay
/// as written.
pub fn bundle(mut main: Value, base: &Url, remote: &HashMap<Url, Value>) -> Value {
    let mut state = Bundler {
        base,
        remote,
        index: HashMap::new(),
        queue: Vec::new(),
        copies: Vec::new(),
    };
    let mut root = std::mem::take(&mut main);
    state.rewrite(&mut root, base);
    while let Some((n, url, pointer)) = state.queue.pop() {
        let mut copy = remote
            .get(&url)
            .and_then(|d| target(d, &pointer))
            .cloned()
            .unwrap_or(Value::Null);
        state.rewrite(&mut copy, &url);
        state.copies[n] = copy;
    }
    if !state.copies.is_empty()
        && let Value::Object(object) = &mut root
    {
        object.insert(BUNDLED.into(), Value::Array(state.copies));
    }
    root
}

struct Bundler<'a> {
    base: &'a Url,
    remote: &'a HashMap<Url, Value>,
    /// (document, JSON pointer) → its copy's index.
    index: HashMap<(Url, String), usize>,
    queue: Vec<(usize, Url, String)>,
    copies: Vec<Value>,
}

impl Bundler<'_> {
    /// Points the references of `value` (read from `from`) at local targets.
    fn rewrite(&mut self, value: &mut Value, from: &Url) {
        match value {
            Value::Object(object) => {
                if let Some(Value::String(reference)) = object.get_mut("$ref")
                    && let Some(local) = self.local(reference, from)
                {
                    *reference = local;
                }
                for (key, v) in object.iter_mut() {
                    if key != "$ref" {
                        self.rewrite(v, from);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.rewrite(v, from)),
            _ => {}
        }
    }

    /// The local reference that stands for `reference` read in document `from`; `None` keeps
    /// it as written (a reference within the main document, or a target not at hand).
    fn local(&mut self, reference: &str, from: &Url) -> Option<String> {
        if from == self.base && reference.starts_with('#') {
            return None;
        }
        let (url, pointer) = absolute(from, reference)?;
        if &url == self.base {
            return Some(format!("#{pointer}"));
        }
        if !self.remote.contains_key(&url) {
            return None;
        }
        let key = (url, pointer);
        let n = match self.index.get(&key) {
            Some(&n) => n,
            None if self.copies.len() >= MAX_TARGETS => return None,
            None => {
                let n = self.copies.len();
                self.copies.push(Value::Null);
                self.index.insert(key.clone(), n);
                self.queue.push((n, key.0, key.1));
                n
            }
        };
        Some(format!("#/{BUNDLED}/{n}"))
    }
}

/// Every `$ref` string in `value`.
pub(crate) fn each_reference(value: &Value, f: &mut impl FnMut(&str)) {
    match value {
        Value::Object(o) => {
            if let Some(Value::String(r)) = o.get("$ref") {
                f(r);
            }
            o.values().for_each(|v| each_reference(v, f));
        }
        Value::Array(items) => items.iter().for_each(|v| each_reference(v, f)),
        _ => {}
    }
}

/// A reference read in document `from` as (document URL without fragment, JSON pointer as
/// written in the fragment, still escaped).
fn absolute(from: &Url, reference: &str) -> Option<(Url, String)> {
    let mut url = from.join(reference).ok()?;
    let pointer = url.fragment().unwrap_or_default().to_string();
    url.set_fragment(None);
    Some((url, pointer))
}

/// What `pointer` (a URI fragment: percent-encoded, `~1`/`~0` escaped) names in `document`.
fn target<'a>(document: &'a Value, pointer: &str) -> Option<&'a Value> {
    let decoded = percent_encoding::percent_decode_str(pointer)
        .decode_utf8()
        .ok()?;
    document.pointer(&decoded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn remote_targets_are_copied_in_and_their_own_references_followed() {
        let base = url("https://api.example/openapi.json");
        let main = json!({
            "components": {"schemas": {"Local": {"type": "string"}}},
            "paths": {"/pets": {"post": {"requestBody": {"content": {"application/json": {
                "schema": {"$ref": "schemas/pet.yaml#/Pet"}}}}}}},
            "also": {"$ref": "#/components/schemas/Local"},
            "again": {"$ref": "https://api.example/schemas/pet.yaml#/Pet"},
        });
        let have = HashMap::new();
        assert_eq!(
            remote_documents(&main, &base, &base, &have),
            [url("https://api.example/schemas/pet.yaml")]
        );
        let pet = json!({
            "Pet": {"type": "object", "properties": {
                "owner": {"$ref": "#/Owner"},
                "tag": {"$ref": "../openapi.json#/components/schemas/Local"},
                "kind": {"$ref": "kinds.json"}}},
            "Owner": {"type": "object", "properties": {"pet": {"$ref": "#/Pet"}}},
        });
        let mut have = HashMap::from([(url("https://api.example/schemas/pet.yaml"), pet.clone())]);
        assert_eq!(
            remote_documents(
                &pet,
                &url("https://api.example/schemas/pet.yaml"),
                &base,
                &have
            ),
            [url("https://api.example/schemas/kinds.json")]
        );
        have.insert(
            url("https://api.example/schemas/kinds.json"),
            json!({"enum": ["cat", "dog"]}),
        );
        let bundled = bundle(main, &base, &have);
        // Both spellings of the same target share one copy; the main document's own local
        // reference is untouched.
        let schema =
            bundled.pointer("/paths/~1pets/post/requestBody/content/application~1json/schema/$ref");
        assert_eq!(schema, Some(&json!("#/x-switchboard-bundled/0")));
        assert_eq!(bundled["again"]["$ref"], "#/x-switchboard-bundled/0");
        assert_eq!(bundled["also"]["$ref"], "#/components/schemas/Local");
        let copied = &bundled[BUNDLED][0];
        assert_eq!(copied["type"], "object");
        // Inside the copy: a local reference of pet.yaml, one back into the main document,
        // and a whole document; the cycle Pet → Owner → Pet reuses the first copy.
        let owner = copied["properties"]["owner"]["$ref"].as_str().unwrap();
        let n: usize = owner.rsplit('/').next().unwrap().parse().unwrap();
        assert_eq!(
            bundled[BUNDLED][n]["properties"]["pet"]["$ref"],
            "#/x-switchboard-bundled/0"
        );
        assert_eq!(
            copied["properties"]["tag"]["$ref"],
            "#/components/schemas/Local"
        );
        let kinds = copied["properties"]["kind"]["$ref"].as_str().unwrap();
        let k: usize = kinds.rsplit('/').next().unwrap().parse().unwrap();
        assert_eq!(bundled[BUNDLED][k], json!({"enum": ["cat", "dog"]}));
        assert_eq!(bundled[BUNDLED].as_array().unwrap().len(), 3);
    }

    #[test]
    fn a_reference_into_a_document_not_at_hand_stays_as_written() {
        let base = url("https://api.example/openapi.json");
        let main = json!({"a": {"$ref": "missing.json#/X"}});
        let bundled = bundle(main.clone(), &base, &HashMap::new());
        assert_eq!(bundled, main);
    }
}
