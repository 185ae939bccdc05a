//! The typed parts of the chart's values schema (`charts/switchboard/values.schema.json`), as
//! JSON Schema draft-07 (what Helm validates values with): the Kubernetes types the chart
//! renders values into (resources, probes, security contexts, affinity, volumes, ...) and
//! `gateway.settings`. Written to `charts/values-schema-types.json` by the `chart-schema`
//! binary; `charts/values-schema.py` places each type at the values that render it.
//!
//! - Kubernetes types come from k8s-openapi's schemas (the Kubernetes OpenAPI document of the
//!   version the operator is built against), so they need no network and no API server and
//!   move with the crate's pin. Like the OpenAPI document they keep objects open: a field a
//!   newer API server knows is not refused here; the API server has the last word on fields.
//! - `gateway.settings` is [`GatewaySettings`]' own schema, without the fields the operator
//!   owns (`crate::gateway_settings::OPERATOR_OWNED`), so Helm refuses what the operator
//!   would refuse when it starts.

use k8s_openapi::api::{apps, autoscaling, core, networking};
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};
use switchboard_snapshot::GatewaySettings;

/// The definition `gateway.settings` is checked with.
const GATEWAY_SETTINGS: &str = "GatewaySettings";

/// What a Kubernetes quantity is written as: a number, or a string in the grammar the API
/// server parses (`500m`, `1.5Gi`, `1e3`); the pattern is the one Kubernetes' CRD generator
/// (controller-gen) gives every `resource.Quantity` field.
const QUANTITY: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// The definitions, keyed by their OpenAPI names (`io.k8s.api.core.v1.Probe`), and
/// `GATEWAY_SETTINGS`; only what the chart uses and what that refers to.
pub fn definitions() -> Map<String, Value> {
    // draft-07 ignores a `$ref`'s siblings: the descriptions k8s-openapi puts beside its
    // references stay there for editors instead of being wrapped in `allOf`, which would only
    // add "'allOf' failed" lines to Helm's messages.
    let draft07 = SchemaSettings::draft07().with(|s| {
        s.transforms
            .retain(|t| !t.is::<schemars::transform::RemoveRefSiblings>())
    });
    let mut generator = SchemaGenerator::new(draft07);
    let mut roots = vec![
        root::<core::v1::Affinity>(&mut generator),
        root::<core::v1::EnvVar>(&mut generator),
        root::<core::v1::LocalObjectReference>(&mut generator),
        root::<core::v1::PodSecurityContext>(&mut generator),
        root::<core::v1::Probe>(&mut generator),
        root::<core::v1::ResourceRequirements>(&mut generator),
        root::<core::v1::SecurityContext>(&mut generator),
        root::<core::v1::Toleration>(&mut generator),
        root::<core::v1::TopologySpreadConstraint>(&mut generator),
        root::<core::v1::Volume>(&mut generator),
        root::<core::v1::VolumeMount>(&mut generator),
        root::<apps::v1::DeploymentStrategy>(&mut generator),
        root::<autoscaling::v2::HorizontalPodAutoscalerBehavior>(&mut generator),
        root::<networking::v1::IngressTLS>(&mut generator),
        root::<networking::v1::NetworkPolicyPeer>(&mut generator),
    ];
    let settings = generator.subschema_for::<GatewaySettings>();
    let mut all = generator.take_definitions(true);
    // `GatewaySettings` is a definition already (it is referred to); the chart's form drops the
    // operator's fields.
    let name = reference_name(settings.as_value()).expect("GatewaySettings is a definition");
    let mut chart_settings = all.remove(&name).expect("its definition");
    if let Some(object) = chart_settings.as_object_mut() {
        for (field, _) in crate::gateway_settings::OPERATOR_OWNED {
            if let Some(properties) = object.get_mut("properties").and_then(Value::as_object_mut) {
                properties.remove(field);
            }
            if let Some(required) = object.get_mut("required").and_then(Value::as_array_mut) {
                required.retain(|r| r != field);
            }
        }
        if object
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
        {
            object.remove("required");
        }
    }
    all.insert(GATEWAY_SETTINGS.to_string(), chart_settings);
    roots.push(GATEWAY_SETTINGS.to_string());
    // Types k8s-openapi leaves untyped (`x-kubernetes-int-or-string`): what the API server reads.
    if let Some(q) = all.get_mut("io.k8s.apimachinery.pkg.api.resource.Quantity") {
        *q = json!({
            "description": "A Kubernetes quantity: a number, or a string such as 500m, 1.5Gi or 1e3.",
            "anyOf": [{"type": "number"}, {"type": "string", "pattern": QUANTITY}],
        });
    }
    if let Some(i) = all.get_mut("io.k8s.apimachinery.pkg.util.intstr.IntOrString") {
        *i = json!({
            "description": "An integer or a string (e.g. a port number or name, a count or a percentage).",
            "anyOf": [{"type": "integer"}, {"type": "string"}],
        });
    }
    reachable(all, roots)
}

/// The document `chart-schema` writes: the definitions, sorted (stable diffs).
pub fn document() -> String {
    let definitions: std::collections::BTreeMap<String, Value> =
        definitions().into_iter().collect();
    let doc = json!({
        "$comment": "Generated by `cargo run -p switchboard-operator --bin chart-schema` from k8s-openapi and the gateway settings type; charts/values-schema.py reads it. Do not edit.",
        "definitions": definitions,
    });
    let mut text = serde_json::to_string_pretty(&doc).expect("a JSON value serializes");
    text.push('\n');
    text
}

/// Adds `T`'s definition and returns its name.
fn root<T: JsonSchema>(generator: &mut SchemaGenerator) -> String {
    let schema = generator.subschema_for::<T>();
    reference_name(schema.as_value()).expect("k8s-openapi types are definitions")
}

/// `#/definitions/<name>` → name.
fn reference_name(schema: &Value) -> Option<String> {
    schema
        .get("$ref")?
        .as_str()?
        .strip_prefix("#/definitions/")
        .map(str::to_string)
}

/// The definitions the roots refer to, directly or through others.
fn reachable(mut all: Map<String, Value>, roots: Vec<String>) -> Map<String, Value> {
    let mut out = Map::new();
    let mut todo = roots;
    while let Some(name) = todo.pop() {
        if out.contains_key(&name) {
            continue;
        }
        let Some(schema) = all.remove(&name) else {
            continue;
        };
        references(&schema, &mut todo);
        out.insert(name, schema);
    }
    out
}

fn references(schema: &Value, into: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            if let Some(name) = reference_name(schema) {
                into.push(name);
            }
            map.values().for_each(|v| references(v, into));
        }
        Value::Array(items) => items.iter().for_each(|v| references(v, into)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_types_are_what_the_rust_types_make() {
        // At run time: the compile-time value may name another checkout sharing the build.
        let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or(env!("CARGO_MANIFEST_DIR").into());
        let path = std::path::Path::new(&dir).join("../charts/values-schema-types.json");
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == document(),
            "{} differs from the Rust types: run `cargo run -p switchboard-operator --bin chart-schema`, then `python3 charts/values-schema.py`, and commit both",
            path.display()
        );
    }

    #[test]
    fn gateway_settings_are_every_setting_but_the_operators() {
        let definitions = definitions();
        let settings = &definitions[GATEWAY_SETTINGS];
        assert_eq!(settings["additionalProperties"], json!(false));
        let properties = settings["properties"].as_object().expect("properties");
        for (owned, _) in crate::gateway_settings::OPERATOR_OWNED {
            assert!(!properties.contains_key(owned), "{owned}");
        }
        // Every field the settings serialize (the defaults leave out only unset options) is
        // either in the chart's schema or the operator's.
        let serialized = serde_json::to_value(GatewaySettings::default()).expect("serializes");
        for field in serialized.as_object().expect("an object").keys() {
            assert!(
                properties.contains_key(field)
                    || crate::gateway_settings::OPERATOR_OWNED
                        .iter()
                        .any(|(f, _)| f == field),
                "{field}"
            );
        }
        for (field, minimum) in [("maxBodyBytes", 1), ("listingPageCap", 1)] {
            assert_eq!(properties[field]["minimum"], json!(minimum), "{field}");
        }
        for field in ["sessionTtl", "listingTtl"] {
            assert_eq!(properties[field]["type"], json!("string"), "{field}");
            assert!(properties[field]["pattern"].is_string(), "{field}");
        }
        // What the settings refer to is there; the operator's types are not.
        assert!(definitions.contains_key("GatewayTls"));
        assert!(definitions.contains_key("SecretSource"));
        assert!(!definitions.contains_key("ServiceAccountTokens"));
        assert!(!definitions.contains_key("UpstreamNetworks"));
    }

    #[test]
    fn untyped_kubernetes_values_get_what_the_api_server_reads() {
        let definitions = definitions();
        let quantity = &definitions["io.k8s.apimachinery.pkg.api.resource.Quantity"];
        let pattern =
            regex::Regex::new(quantity["anyOf"][1]["pattern"].as_str().expect("a pattern"))
                .expect("compiles");
        for q in [
            "500m", "1", "1.5Gi", "64Mi", "1e3", "0.1", ".5", "2k", "100n", "+1",
        ] {
            assert!(pattern.is_match(q), "{q}");
        }
        for q in ["half", "1 Gi", "1GB", "Mi", ""] {
            assert!(!pattern.is_match(q), "{q}");
        }
        let int_or_string = &definitions["io.k8s.apimachinery.pkg.util.intstr.IntOrString"];
        assert_eq!(
            int_or_string["anyOf"],
            json!([{"type": "integer"}, {"type": "string"}])
        );
        // Every reference resolves.
        let mut refs = Vec::new();
        references(&Value::Object(definitions.clone()), &mut refs);
        for name in refs {
            assert!(definitions.contains_key(&name), "{name}");
        }
    }
}
