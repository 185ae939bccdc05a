//! An OpenAPI Schema Object as the JSON Schema 2020-12 an MCP tool schema is.
//!
//! OpenAPI 3.1's Schema Object is JSON Schema 2020-12 with a few annotations of its own;
//! 3.0's is an extended subset of an older draft, with keywords 2020-12 does not have or reads
//! otherwise. A validator given 3.0's `exclusiveMinimum: true` refuses the schema itself, and
//! one given `nullable: true` ignores it and refuses the `null` the document allows. Every
//! schema a tool gets, input and output alike, is read the same way:
//!
//! 1. [`upgrade`], before the sanitizer, on each schema of the document (the operations' own
//!    and every reference target):
//!    - `nullable: true` (3.0; a 3.1 document that still writes it, as ReadMe's own does, means
//!      the same) adds `"null"` to `type` (and to `enum`, where the document's
//!      authors leave it out: GitHub's "`active`, `inactive`, or `null` to clear"); a schema
//!      whose values are also constrained elsewhere (`$ref`, `allOf`, `anyOf`, `oneOf`, `not`)
//!      becomes `anyOf: [<the schema>, {"type": "null"}]`, its annotations kept outside.
//!      3.0.3 says `nullable` only counts beside a `type`; documents write it beside
//!      `oneOf` and `allOf` meaning "or null", and a schema that refuses a null the API sends
//!      fails every client that validates the result, where one that admits a null the API
//!      refuses costs a 4xx. `nullable: false` goes;
//!    - a boolean `exclusiveMinimum`/`exclusiveMaximum` (3.0) becomes the numeric keyword
//!      with the value of `minimum`/`maximum` (`false`, or `true` without the bound: dropped);
//!    - `example` (3.0; deprecated in 3.1) becomes `examples: [<example>]`; an `examples` that
//!      is not a list (not a Schema Object keyword in 3.0) goes.
//! 2. The sanitizer (`switchboard_protocol::schema`): references inlined, keywords
//!    allow-listed. Specification extensions (`x-*`), `discriminator` (a hint beside the
//!    `oneOf`/`anyOf` that validates), `xml` and `externalDocs` are annotations no client
//!    validates with, and go, in both versions. `readOnly` and `writeOnly` stay
//!    ([`KEPT_FOR_CLIENTS`]).
//! 3. [`Direction::settle`]: a `readOnly` property is not required in a request (a tool's
//!    input), a `writeOnly` one not in a response (its output): OpenAPI 3.0's rule, which 3.1
//!    allows. The two mark properties only: at the top of an argument (GitHub marks its
//!    `alert_number` path parameter `readOnly`) or of the output they say nothing and go.

use serde_json::{Map, Value, json};

/// Keywords an MCP client reads that the provider sanitizer's allow-list leaves out.
pub(crate) const KEPT_FOR_CLIENTS: &[&str] = &["readOnly", "writeOnly"];

/// Keywords whose value is one schema, a list of schemas, or a map of names to schemas.
const SUBSCHEMA: [&str; 11] = [
    "items",
    "additionalProperties",
    "not",
    "contains",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "additionalItems",
];
const SUBSCHEMA_LISTS: [&str; 4] = ["anyOf", "allOf", "oneOf", "prefixItems"];
const SUBSCHEMA_MAPS: [&str; 5] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// Keywords that constrain a value beside the node's own `type`: where one is present, a
/// `nullable` node is `anyOf` the node and null.
const COMPOSED: [&str; 5] = ["$ref", "allOf", "anyOf", "oneOf", "not"];
/// Keywords that describe the value rather than constrain it: kept outside a `nullable` node
/// made `anyOf`, where a reader looks for them.
const DESCRIBING: [&str; 8] = [
    "title",
    "description",
    "default",
    "examples",
    "readOnly",
    "writeOnly",
    "deprecated",
    "externalDocs",
];

/// The OpenAPI version a document declares, as far as its schemas differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    V30,
    V31,
}

impl Version {
    pub(crate) fn of(declared: &str) -> Version {
        if declared.starts_with("3.0") {
            Version::V30
        } else {
            Version::V31
        }
    }
}

/// Calls `f` on every direct subschema of a schema object (not on values such as `default`,
/// `enum` or `examples`, which are data).
pub(crate) fn each_subschema(o: &mut Map<String, Value>, mut f: impl FnMut(&mut Value)) {
    for (key, value) in o.iter_mut() {
        let key = key.as_str();
        match value {
            Value::Object(map) if SUBSCHEMA_MAPS.contains(&key) => {
                map.values_mut().for_each(&mut f)
            }
            Value::Array(list) if SUBSCHEMA_LISTS.contains(&key) || key == "items" => {
                list.iter_mut().for_each(&mut f)
            }
            v if SUBSCHEMA.contains(&key) => f(v),
            _ => {}
        }
    }
}

/// Rewrites a schema, and every schema below it, into JSON Schema 2020-12 (step 1 above), the
/// same for both versions: what 3.0 says this way has no other reading in a 3.1 document.
/// Idempotent: what it writes it leaves alone.
pub(crate) fn upgrade(schema: &mut Value) {
    let Value::Object(o) = schema else { return };
    each_subschema(o, upgrade);
    exclusive_bounds(o);
    examples(o);
    nullable(schema);
}

/// 3.0's `exclusiveMinimum: true` beside `minimum: m` is 2020-12's `exclusiveMinimum: m`.
fn exclusive_bounds(o: &mut Map<String, Value>) {
    for (flag, bound) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        match o.get(flag) {
            Some(Value::Bool(true)) => match o.remove(bound) {
                Some(limit @ Value::Number(_)) => {
                    o.insert(flag.into(), limit);
                }
                other => {
                    // No bound to make exclusive: nothing is said.
                    if let Some(other) = other {
                        o.insert(bound.into(), other);
                    }
                    o.remove(flag);
                }
            },
            Some(Value::Bool(false)) => {
                o.remove(flag);
            }
            _ => {}
        }
    }
}

/// `example` as 2020-12's `examples` (a list), unless the schema has that list already.
fn examples(o: &mut Map<String, Value>) {
    if o.get("examples").is_some_and(|e| !e.is_array()) {
        o.remove("examples");
    }
    if let Some(example) = o.remove("example") {
        o.entry("examples").or_insert_with(|| json!([example]));
    }
}

/// 3.0's `nullable: true`, as 2020-12 says it.
fn nullable(schema: &mut Value) {
    let Value::Object(o) = schema else { return };
    if o.remove("nullable") != Some(Value::Bool(true)) {
        return;
    }
    if COMPOSED.iter().any(|k| o.contains_key(*k)) {
        let mut outside = Map::new();
        for k in DESCRIBING {
            if let Some(v) = o.remove(k) {
                outside.insert(k.into(), v);
            }
        }
        let inner = std::mem::take(o);
        outside.insert(
            "anyOf".into(),
            json!([Value::Object(inner), {"type": "null"}]),
        );
        *o = outside;
        return;
    }
    match o.get_mut("type") {
        Some(Value::String(t)) if t != "null" => {
            let t = std::mem::take(t);
            o.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(types)) if !types.iter().any(|t| t == "null") => {
            types.push(json!("null"));
        }
        _ => {}
    }
    if let Some(Value::Array(values)) = o.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
}

/// Which way a schema's values travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Direction {
    /// A tool's input: the request's parameters and body.
    Request,
    /// A tool's output: the response's body.
    Response,
}

impl Direction {
    /// The annotation of properties that do not travel this way.
    fn other_way(self) -> &'static str {
        match self {
            Direction::Request => "readOnly",
            Direction::Response => "writeOnly",
        }
    }

    /// Step 3 above, on a sanitized schema that is an argument or an output: properties that
    /// travel only the other way are not required this way, and at its top the two marks go.
    /// `uses` names what a `$ref` the schema kept stands for (a property that is a reference
    /// is marked where its definition is).
    pub(crate) fn settle<'v>(self, schema: &mut Value, uses: &dyn Fn(&str) -> Option<&'v Value>) {
        if let Value::Object(o) = schema {
            o.remove("readOnly");
            o.remove("writeOnly");
        }
        self.settle_within(schema, uses);
    }

    /// Step 3 within a schema (a shared definition's: its own marks stay, they say how each
    /// use of it travels).
    pub(crate) fn settle_within<'v>(
        self,
        schema: &mut Value,
        uses: &dyn Fn(&str) -> Option<&'v Value>,
    ) {
        let Value::Object(o) = schema else { return };
        let flag = self.other_way();
        if let (Some(Value::Object(properties)), Some(Value::Array(required))) =
            (o.get("properties"), o.get("required"))
        {
            let marked = |p: &Value| p.get(flag) == Some(&Value::Bool(true));
            let other_way = |name: &Value| {
                name.as_str()
                    .and_then(|n| properties.get(n))
                    .is_some_and(|p| {
                        marked(p)
                            || p.get("$ref")
                                .and_then(Value::as_str)
                                .and_then(uses)
                                .is_some_and(marked)
                    })
            };
            if required.iter().any(other_way) {
                let kept: Vec<Value> = required.iter().filter(|n| !other_way(n)).cloned().collect();
                o.insert("required".into(), Value::Array(kept));
            }
        }
        each_subschema(o, |s| self.settle_within(s, uses));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upgraded(mut schema: Value) -> Value {
        upgrade(&mut schema);
        schema
    }

    #[test]
    fn nullable_adds_null_to_the_type_and_the_enum() {
        assert_eq!(
            upgraded(json!({"type": "string", "nullable": true})),
            json!({"type": ["string", "null"]})
        );
        assert_eq!(
            upgraded(json!({"type": "string", "enum": ["active", "inactive"], "nullable": true})),
            json!({"type": ["string", "null"], "enum": ["active", "inactive", null]})
        );
        assert_eq!(
            upgraded(json!({"type": "string", "enum": ["a", null], "nullable": true})),
            json!({"type": ["string", "null"], "enum": ["a", null]}),
            "null is not added twice"
        );
        assert_eq!(
            upgraded(json!({"type": "integer", "nullable": false})),
            json!({"type": "integer"})
        );
        assert_eq!(
            upgraded(json!({"nullable": true, "description": "any"})),
            json!({"description": "any"}),
            "without a type every value, null too, is allowed already"
        );
    }

    #[test]
    fn nullable_beside_a_reference_or_a_combinator_is_any_of_null() {
        assert_eq!(
            upgraded(
                json!({"allOf": [{"$ref": "#/components/schemas/User"}], "nullable": true,
                       "readOnly": true, "description": "The author", "x-github": {}})
            ),
            json!({"description": "The author", "readOnly": true, "anyOf": [
                {"allOf": [{"$ref": "#/components/schemas/User"}], "x-github": {}},
                {"type": "null"}]})
        );
        assert_eq!(
            upgraded(json!({"oneOf": [{"type": "string"}, {"type": "integer"}], "nullable": true})),
            json!({"anyOf": [{"oneOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "null"}]})
        );
        assert_eq!(
            upgraded(json!({"$ref": "#/components/schemas/User", "nullable": true})),
            json!({"anyOf": [{"$ref": "#/components/schemas/User"}, {"type": "null"}]})
        );
    }

    #[test]
    fn nullable_is_read_in_every_subschema_but_not_in_data() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "array", "items": {"type": "string", "nullable": true}},
            "b": {"type": "object", "additionalProperties": {"type": "number", "nullable": true}},
            "c": {"anyOf": [{"type": "string", "nullable": true}]},
            "nullable": {"type": "boolean"}},
            "default": {"x": {"nullable": true}}});
        let out = upgraded(schema);
        assert_eq!(
            out["properties"]["a"]["items"]["type"],
            json!(["string", "null"])
        );
        assert_eq!(
            out["properties"]["b"]["additionalProperties"]["type"],
            json!(["number", "null"])
        );
        assert_eq!(
            out["properties"]["c"]["anyOf"][0]["type"],
            json!(["string", "null"])
        );
        assert_eq!(
            out["properties"]["nullable"],
            json!({"type": "boolean"}),
            "a property named nullable"
        );
        assert_eq!(out["default"], json!({"x": {"nullable": true}}), "data");
    }

    #[test]
    fn a_3_1_schema_is_left_as_it_is() {
        let schema = json!({"type": ["string", "null"], "exclusiveMinimum": 0, "examples": ["a"],
            "anyOf": [{"const": "a"}, {"type": "null"}]});
        assert_eq!(upgraded(schema.clone()), schema);
    }

    #[test]
    fn boolean_exclusive_bounds_become_numeric() {
        // @readme/oas-examples' schema-validation.json
        let schema = json!({"type": "number", "minimum": 10, "maximum": 20,
            "exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": 2});
        let out = upgraded(schema);
        assert_eq!(
            out,
            json!({"type": "number", "exclusiveMinimum": 10, "exclusiveMaximum": 20, "multipleOf": 2})
        );
        assert_eq!(
            upgraded(json!({"minimum": 1, "exclusiveMinimum": false, "exclusiveMaximum": true})),
            json!({"minimum": 1}),
            "false, and true without its bound, say nothing"
        );
        assert_eq!(
            upgraded(json!({"exclusiveMinimum": 0})),
            json!({"exclusiveMinimum": 0}),
            "2020-12's numeric form stays"
        );
        assert_eq!(
            upgraded(json!({"minimum": 3, "exclusiveMinimum": true})),
            json!({"exclusiveMinimum": 3}),
            "a 3.1 document written the 3.0 way has one reading"
        );
    }

    #[test]
    fn example_becomes_examples() {
        assert_eq!(
            upgraded(json!({"type": "integer", "example": 14})),
            json!({"type": "integer", "examples": [14]})
        );
        assert_eq!(
            upgraded(json!({"example": "a", "examples": ["b"]})),
            json!({"examples": ["b"]})
        );
        assert_eq!(
            upgraded(json!({"examples": {"one": {"value": 1}}})),
            json!({}),
            "a map of examples is not a schema keyword"
        );
        let twice = upgraded(json!({"type": "string", "nullable": true, "example": "x"}));
        assert_eq!(upgraded(twice.clone()), twice, "idempotent");
    }

    #[test]
    fn read_only_is_not_required_in_a_request_nor_write_only_in_a_response() {
        let user = json!({"type": "object", "required": ["id", "name", "password"], "properties": {
            "id": {"type": "integer", "readOnly": true},
            "name": {"type": "string"},
            "password": {"type": "string", "writeOnly": true},
            "friends": {"type": "array", "items": {"type": "object", "required": ["id"],
                "properties": {"id": {"type": "integer", "readOnly": true}}}}}});
        let mut request = user.clone();
        request["readOnly"] = json!(true);
        Direction::Request.settle(&mut request, &|_| None);
        assert_eq!(
            request.get("readOnly"),
            None,
            "only a property is read-only"
        );
        assert_eq!(request["required"], json!(["name", "password"]));
        assert_eq!(
            request["properties"]["friends"]["items"]["required"],
            json!([])
        );
        assert_eq!(
            request["properties"]["id"]["readOnly"], true,
            "annotation kept"
        );
        let mut response = user;
        Direction::Response.settle(&mut response, &|_| None);
        assert_eq!(response["required"], json!(["id", "name"]));
        assert_eq!(
            response["properties"]["friends"]["items"]["required"],
            json!(["id"])
        );
    }
}
