//! One sanitizer for every tool schema the gateway hands a provider, in both wire formats.
//!
//! MCP servers publish JSON Schema as their authors wrote it: `$schema`, `$id`, `definitions`
//! or `$defs` with `$ref`s into them, `oneOf` at the top, keywords a provider does not know.
//! Providers accept a narrower dialect (an object at the top, no combinators there, no
//! references), and Anthropic refuses a tool whose schema steps outside it. So every schema is
//! rewritten the same way: local references inlined (cycles cut after a bounded depth), an
//! allow-list of keywords kept, `oneOf` turned into `anyOf` below the top, and the top made an
//! object whose `properties` and `required` survive.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

/// Keywords kept (everything else is dropped).
const KEPT: &[&str] = &[
    "type",
    "description",
    "title",
    "properties",
    "required",
    "items",
    "enum",
    "const",
    "default",
    "anyOf",
    "allOf",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minItems",
    "maxItems",
    "uniqueItems",
    "additionalProperties",
    "nullable",
    "examples",
];

/// How deep references are followed: a recursive schema is cut (to "any value") below this.
const MAX_REF_DEPTH: usize = 8;
/// Most schema nodes one sanitized schema may have: references that fan out (a node whose
/// properties all refer back to it) would otherwise multiply; past this, "any value".
const MAX_NODES: usize = 5_000;

/// The provider-safe form of an MCP tool's `inputSchema`.
pub fn sanitize(schema: &Value) -> Value {
    let definitions = collect_definitions(schema);
    Cleaner::inlining(&definitions, &[]).sanitize(schema).schema
}

/// Annotations next to a `$ref` that describe this use of the referenced schema (and stay
/// with it, inlined or not): keywords that describe rather than constrain.
pub const USE_ANNOTATIONS: [&str; 4] = ["description", "title", "default", "examples"];

/// Reference as written (`#/components/schemas/Pet`) → its name under `$defs` (`Pet`), for a
/// cleaning that keeps references ([`Cleaner::sharing`]).
pub type DefNames = HashMap<String, String>;

/// How a schema is cleaned: the referenced definitions by reference string (an OpenAPI
/// document's `#/components/schemas/<name>`, collected once for all its operations), keywords
/// kept beyond the allow-list (`also_kept`: an MCP client reads annotations a provider is never
/// shown), and whether references are inlined (what a provider takes) or kept as `$ref`s into
/// the schema's `$defs` (what an MCP client takes: a definition used five times in one schema
/// is written once).
#[derive(Clone, Copy)]
pub struct Cleaner<'a> {
    definitions: &'a Map<String, Value>,
    also_kept: &'a [&'a str],
    shared: Option<&'a DefNames>,
    /// References at a depth below this are inlined even when shared: the top of a schema (an
    /// MCP tool's schemas are objects at the top, which a bare `$ref` is not) and, for a tool's
    /// input, each argument (so the marks and description of an argument are its own).
    inline_depth: usize,
}

/// A cleaned schema and the references it kept ([`Cleaner::sharing`]), each once, in the order
/// met.
#[derive(Debug)]
pub struct Cleaned {
    pub schema: Value,
    pub reached: Vec<String>,
}

impl<'a> Cleaner<'a> {
    /// References inlined, cycles cut after a bounded depth.
    pub(crate) fn inlining(definitions: &'a Map<String, Value>, also_kept: &'a [&'a str]) -> Self {
        Cleaner {
            definitions,
            also_kept,
            shared: None,
            inline_depth: usize::MAX,
        }
    }

    /// References named in `names` kept as `#/$defs/<name>` below `inline_depth` (the caller
    /// writes the `$defs`); others inlined.
    pub fn sharing(
        definitions: &'a Map<String, Value>,
        also_kept: &'a [&'a str],
        names: &'a DefNames,
        inline_depth: usize,
    ) -> Self {
        Cleaner {
            definitions,
            also_kept,
            shared: Some(names),
            inline_depth,
        }
    }

    /// The schema with an object forced at the top and no combinator there (a tool's input).
    pub fn sanitize(&self, schema: &Value) -> Cleaned {
        let mut cleaned = self.clean(schema);
        let Value::Object(object) = &mut cleaned.schema else {
            return Cleaned {
                schema: json!({"type": "object", "properties": {}}),
                reached: Vec::new(),
            };
        };
        flatten_top_combinators(object);
        object.insert("type".into(), Value::String("object".into()));
        if !object.get("properties").is_some_and(Value::is_object) {
            object.insert("properties".into(), Value::Object(Map::new()));
        }
        if let Some(required) = object.get("required")
            && !required.is_array()
        {
            object.remove("required");
        }
        cleaned
    }

    /// The schema with the same rules but no object forced at the top (an OpenAPI response's
    /// schema, a parameter's, a definition's).
    pub fn clean(&self, schema: &Value) -> Cleaned {
        let mut walk = Walk {
            how: *self,
            path: Vec::new(),
            budget: MAX_NODES,
            depth: 0,
            reached: Vec::new(),
        };
        let schema = walk.clean(schema);
        Cleaned {
            schema,
            reached: walk.reached,
        }
    }
}

/// `#/$defs/...` and `#/definitions/...` targets, by reference string.
fn collect_definitions(schema: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    for section in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = schema.get(section) {
            for (name, def) in defs {
                out.insert(format!("#/{section}/{name}"), def.clone());
            }
        }
    }
    out
}

/// One sanitizing walk: the references being inlined (a reference to one of them is a cycle,
/// cut), the nodes it may still make, how deep below the top it is, and the references it kept.
struct Walk<'a> {
    how: Cleaner<'a>,
    path: Vec<&'a str>,
    budget: usize,
    depth: usize,
    reached: Vec<String>,
}

impl<'a> Walk<'a> {
    fn clean(&mut self, value: &Value) -> Value {
        let Value::Object(object) = value else {
            // `true`/`false` schemas and junk: "any value" is the safe reading.
            return Value::Object(Map::new());
        };
        if self.budget == 0 {
            return Value::Object(Map::new());
        }
        self.budget -= 1;
        if let Some(Value::String(reference)) = object.get("$ref") {
            let annotations = USE_ANNOTATIONS
                .iter()
                .filter_map(|k| Some((k.to_string(), object.get(*k)?.clone())));
            if let Some(name) = self.how.shared.and_then(|names| names.get(reference))
                && self.depth >= self.how.inline_depth
            {
                if !self.reached.contains(reference) {
                    self.reached.push(reference.clone());
                }
                let mut kept = Map::new();
                kept.insert("$ref".into(), Value::String(format!("#/$defs/{name}")));
                kept.extend(annotations);
                return Value::Object(kept);
            }
            let Some((name, target)) = self.how.definitions.get_key_value(reference.as_str())
            else {
                return Value::Object(Map::new());
            };
            if self.path.len() >= MAX_REF_DEPTH || self.path.contains(&name.as_str()) {
                return Value::Object(Map::new());
            }
            self.path.push(name);
            let mut inlined = self.clean(target);
            self.path.pop();
            // Annotations next to the reference describe this use of it.
            if let Value::Object(o) = &mut inlined {
                o.extend(annotations);
            }
            return inlined;
        }
        self.depth += 1;
        let out = self.clean_object(object);
        self.depth -= 1;
        out
    }

    fn clean_object(&mut self, object: &Map<String, Value>) -> Value {
        let mut out = Map::new();
        for (key, v) in object {
            let key = if key == "oneOf" {
                "anyOf"
            } else {
                key.as_str()
            };
            if !KEPT.contains(&key) && !self.how.also_kept.contains(&key) {
                continue;
            }
            let cleaned = match key {
                "properties" => match v {
                    Value::Object(props) => Value::Object(
                        props
                            .iter()
                            .map(|(name, p)| (name.clone(), self.clean(p)))
                            .collect(),
                    ),
                    _ => continue,
                },
                "items" => self.clean(v),
                "additionalProperties" => match v {
                    Value::Bool(_) => v.clone(),
                    other => self.clean(other),
                },
                "anyOf" | "allOf" => match v {
                    Value::Array(branches) => {
                        Value::Array(branches.iter().map(|b| self.clean(b)).collect())
                    }
                    _ => continue,
                },
                "required" => match v {
                    Value::Array(names) => {
                        Value::Array(names.iter().filter(|n| n.is_string()).cloned().collect())
                    }
                    _ => continue,
                },
                _ => v.clone(),
            };
            out.insert(key.to_string(), cleaned);
        }
        Value::Object(out)
    }
}

/// Providers take no combinator at the top of a tool schema: the branches' properties are
/// merged, and only names every branch requires stay required.
fn flatten_top_combinators(object: &mut Map<String, Value>) {
    for combinator in ["anyOf", "allOf"] {
        let Some(Value::Array(branches)) = object.remove(combinator) else {
            continue;
        };
        let mut properties = match object.remove("properties") {
            Some(Value::Object(p)) => p,
            _ => Map::new(),
        };
        let mut required: Option<Vec<Value>> = object
            .get("required")
            .and_then(Value::as_array)
            .cloned()
            .filter(|r| !r.is_empty());
        let mut common: Option<Vec<Value>> = None;
        for branch in &branches {
            if let Some(Value::Object(p)) = branch.get("properties") {
                for (name, schema) in p {
                    properties
                        .entry(name.clone())
                        .or_insert_with(|| schema.clone());
                }
            }
            let branch_required = branch
                .get("required")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            common = Some(match common {
                None => branch_required,
                Some(c) if combinator == "allOf" => {
                    let mut all = c;
                    for name in branch_required {
                        if !all.contains(&name) {
                            all.push(name);
                        }
                    }
                    all
                }
                Some(c) => c
                    .into_iter()
                    .filter(|n| branch_required.contains(n))
                    .collect(),
            });
        }
        if let Some(extra) = common.filter(|c| !c.is_empty()) {
            let r = required.get_or_insert_with(Vec::new);
            for name in extra {
                if !r.contains(&name) {
                    r.push(name);
                }
            }
        }
        object.insert("properties".into(), Value::Object(properties));
        match required {
            Some(r) => object.insert("required".into(), Value::Array(r)),
            None => object.remove("required"),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_schema_inlines_refs_and_turns_one_of_into_any_of() {
        let input = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "definitions": {"page": {"type": "integer", "minimum": 1}},
            "$defs": {"mode": {"oneOf": [{"const": "fast"}, {"const": "exact"}]}},
            "properties": {
                "page": {"$ref": "#/definitions/page", "description": "which page"},
                "mode": {"$ref": "#/$defs/mode"},
                "x-vendor": {"type": "string", "x-internal": true}
            },
            "required": ["page"]
        });
        let out = sanitize(&input);
        assert_eq!(
            out,
            json!({
                "type": "object",
                "properties": {
                    "page": {"type": "integer", "minimum": 1, "description": "which page"},
                    "mode": {"anyOf": [{"const": "fast"}, {"const": "exact"}]},
                    "x-vendor": {"type": "string"}
                },
                "required": ["page"]
            })
        );
    }

    #[test]
    fn top_level_one_of_is_flattened_into_one_object() {
        let input = json!({
            "oneOf": [
                {"type": "object", "properties": {"a": {"type": "string"}, "c": {}}, "required": ["a", "c"]},
                {"type": "object", "properties": {"b": {"type": "number"}, "c": {}}, "required": ["b", "c"]}
            ]
        });
        let out = sanitize(&input);
        assert_eq!(out["type"], "object");
        assert!(out.get("anyOf").is_none() && out.get("oneOf").is_none());
        assert_eq!(out["properties"].as_object().unwrap().len(), 3);
        assert_eq!(out["required"], json!(["c"]));
    }

    #[test]
    fn references_that_fan_out_stay_bounded() {
        // Every property of `node` refers to `node`: without cycle cutting and a budget this
        // inlines 6^8 copies.
        let props: Map<String, Value> = (0..6)
            .map(|i| (format!("p{i}"), json!({"$ref": "#/$defs/node"})))
            .collect();
        let input = json!({"$defs": {"node": {"type": "object", "properties": props}}, "$ref": "#/$defs/node"});
        let out = sanitize(&input);
        assert!(out.to_string().len() < 10_000, "{}", out.to_string().len());
        assert_eq!(
            out["properties"]["p0"],
            json!({}),
            "the cycle is cut at once"
        );
    }

    #[test]
    fn recursive_refs_are_cut_and_junk_becomes_an_empty_object() {
        let input = json!({
            "type": "object",
            "$defs": {"node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}}}},
            "properties": {"root": {"$ref": "#/$defs/node"}, "remote": {"$ref": "https://x/y.json"}}
        });
        let out = sanitize(&input);
        let text = out.to_string();
        assert!(!text.contains("$ref") && !text.contains("$defs"), "{text}");
        assert_eq!(out["properties"]["remote"], json!({}));
        assert_eq!(
            sanitize(&json!(true)),
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(
            sanitize(&json!({})),
            json!({"type": "object", "properties": {}})
        );
    }

    #[test]
    fn a_sharing_cleaner_keeps_references_below_its_depth_and_says_which() {
        let definitions: Map<String, Value> = [
            (
                "#/components/schemas/Node".to_string(),
                json!({"type": "object", "properties": {"child": {"$ref": "#/components/schemas/Node"}, "x-a": {}}}),
            ),
            (
                "#/components/schemas/Tag".to_string(),
                json!({"type": "string", "x-internal": true}),
            ),
        ]
        .into_iter()
        .collect();
        let names: DefNames = [
            ("#/components/schemas/Node".to_string(), "Node".to_string()),
            ("#/components/schemas/Tag".to_string(), "Tag".to_string()),
        ]
        .into_iter()
        .collect();
        let schema = json!({"$ref": "#/components/schemas/Node", "description": "the root"});
        let top = Cleaner::sharing(&definitions, &[], &names, 1).clean(&schema);
        assert_eq!(
            top.schema,
            json!({"type": "object", "description": "the root",
                   "properties": {"child": {"$ref": "#/$defs/Node"}, "x-a": {}}}),
            "the top inlined, a reference below it kept, unknown keywords still dropped"
        );
        assert_eq!(top.reached, ["#/components/schemas/Node"]);
        let args = json!({"type": "object", "properties": {
            "tag": {"$ref": "#/components/schemas/Tag", "default": "a"},
            "tags": {"type": "array", "items": {"$ref": "#/components/schemas/Tag"}},
            "other": {"$ref": "#/elsewhere"}}});
        let input = Cleaner::sharing(&definitions, &[], &names, 2).sanitize(&args);
        assert_eq!(
            input.schema["properties"]["tag"],
            json!({"type": "string", "default": "a"}),
            "an argument is inlined, the default beside its reference kept"
        );
        assert_eq!(
            input.schema["properties"]["tags"]["items"],
            json!({"$ref": "#/$defs/Tag"})
        );
        assert_eq!(
            input.schema["properties"]["other"],
            json!({}),
            "unknown: any value"
        );
        assert_eq!(input.reached, ["#/components/schemas/Tag"], "each once");
        // Inlining (what a provider is given) reads the same schema without a reference.
        let inlined = Cleaner::inlining(&definitions, &[]).sanitize(&args);
        assert!(inlined.reached.is_empty());
        assert_eq!(
            inlined.schema["properties"]["tags"]["items"],
            json!({"type": "string"})
        );
    }
}
