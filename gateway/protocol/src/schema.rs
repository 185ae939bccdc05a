//! One sanitizer for every tool schema the gateway hands a provider, in both wire formats.
//!
//! MCP servers publish JSON Schema as their authors wrote it: `$schema`, `$id`, `definitions`
//! or `$defs` with `$ref`s into them, `oneOf` at the top, keywords a provider does not know.
//! Providers accept a narrower dialect (an object at the top, no combinators there, no
//! references), and Anthropic refuses a tool whose schema steps outside it. So every schema is
//! rewritten the same way: local references inlined (cycles cut after a bounded depth), an
//! allow-list of keywords kept, `oneOf` turned into `anyOf` below the top, and the top made an
//! object whose `properties` and `required` survive.

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
    sanitize_with(schema, &definitions, &[])
}

/// The same, with the referenced definitions given by reference string (an OpenAPI
/// document's `#/components/schemas/<name>`, collected once for all its operations), and
/// keywords kept beyond the allow-list (`also_kept`: an MCP client reads annotations a
/// provider is never shown).
pub fn sanitize_with(
    schema: &Value,
    definitions: &Map<String, Value>,
    also_kept: &[&str],
) -> Value {
    let mut top = clean_with(schema, definitions, also_kept);
    let Value::Object(object) = &mut top else {
        return json!({"type": "object", "properties": {}});
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
    top
}

/// A schema with the same rules but no object forced at the top (an OpenAPI response's
/// schema, a parameter's): references inlined with the same bounds, keywords allow-listed
/// (and `also_kept`).
pub fn clean_with(schema: &Value, definitions: &Map<String, Value>, also_kept: &[&str]) -> Value {
    let mut walk = Walk {
        definitions,
        also_kept,
        path: Vec::new(),
        budget: MAX_NODES,
    };
    walk.clean(schema)
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

/// One sanitizing walk: the definitions it inlines, the references being inlined (a reference
/// to one of them is a cycle, cut), and the nodes it may still make.
struct Walk<'a> {
    definitions: &'a Map<String, Value>,
    also_kept: &'a [&'a str],
    path: Vec<&'a str>,
    budget: usize,
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
            let Some((name, target)) = self.definitions.get_key_value(reference.as_str()) else {
                return Value::Object(Map::new());
            };
            if self.path.len() >= MAX_REF_DEPTH || self.path.contains(&name.as_str()) {
                return Value::Object(Map::new());
            }
            self.path.push(name);
            let mut inlined = self.clean(target);
            self.path.pop();
            // A description next to the reference describes this use of it.
            if let (Value::Object(o), Some(d)) = (&mut inlined, object.get("description")) {
                o.insert("description".into(), d.clone());
            }
            return inlined;
        }
        let mut out = Map::new();
        for (key, v) in object {
            let key = if key == "oneOf" {
                "anyOf"
            } else {
                key.as_str()
            };
            if !KEPT.contains(&key) && !self.also_kept.contains(&key) {
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
}
