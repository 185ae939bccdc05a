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

/// The provider-safe form of an MCP tool's `inputSchema`.
pub fn sanitize(schema: &Value) -> Value {
    let definitions = collect_definitions(schema);
    let mut top = clean(schema, &definitions, 0);
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

fn clean(value: &Value, definitions: &Map<String, Value>, depth: usize) -> Value {
    let Value::Object(object) = value else {
        // `true`/`false` schemas and junk: "any value" is the safe reading.
        return Value::Object(Map::new());
    };
    if let Some(Value::String(reference)) = object.get("$ref") {
        return match definitions.get(reference) {
            Some(target) if depth < MAX_REF_DEPTH => {
                let mut inlined = clean(target, definitions, depth + 1);
                // A description next to the reference describes this use of it.
                if let (Value::Object(o), Some(d)) = (&mut inlined, object.get("description")) {
                    o.insert("description".into(), d.clone());
                }
                inlined
            }
            _ => Value::Object(Map::new()),
        };
    }
    let mut out = Map::new();
    for (key, v) in object {
        let key = if key == "oneOf" {
            "anyOf"
        } else {
            key.as_str()
        };
        if !KEPT.contains(&key) {
            continue;
        }
        let cleaned = match key {
            "properties" => match v {
                Value::Object(props) => Value::Object(
                    props
                        .iter()
                        .map(|(name, p)| (name.clone(), clean(p, definitions, depth)))
                        .collect(),
                ),
                _ => continue,
            },
            "items" => clean(v, definitions, depth),
            "additionalProperties" => match v {
                Value::Bool(_) => v.clone(),
                other => clean(other, definitions, depth),
            },
            "anyOf" | "allOf" => match v {
                Value::Array(branches) => Value::Array(
                    branches
                        .iter()
                        .map(|b| clean(b, definitions, depth))
                        .collect(),
                ),
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
