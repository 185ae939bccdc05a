//! Every kind and every field of the API says what it is (`kubectl explain --recursive` shows
//! no empty description), and no kind carries kube-derive's placeholder text.

use serde_json::Value;

/// Fields whose schema is the Kubernetes API's own (metav1.Condition, Pod objects kept as
/// opaque objects), described by Kubernetes, not here.
fn foreign(path: &str) -> bool {
    path.contains(".conditions[].")
}

fn walk(schema: &Value, path: &str, missing: &mut Vec<String>) {
    let described = schema
        .get("description")
        .and_then(Value::as_str)
        .is_some_and(|d| !d.trim().is_empty());
    if !described && !foreign(path) {
        missing.push(path.to_string());
    }
    if let Some(Value::Object(properties)) = schema.get("properties") {
        for (name, sub) in properties {
            walk(sub, &format!("{path}.{name}"), missing);
        }
    }
    if let Some(items) = schema.get("items") {
        // An item is described by its list; its own fields are walked.
        if let Some(Value::Object(properties)) = items.get("properties") {
            for (name, sub) in properties {
                walk(sub, &format!("{path}[].{name}"), missing);
            }
        }
    }
    if let Some(Value::Object(values)) = schema.get("additionalProperties")
        && let Some(Value::Object(properties)) = values.get("properties")
    {
        for (name, sub) in properties {
            walk(sub, &format!("{path}{{}}.{name}"), missing);
        }
    }
}

#[test]
fn every_kind_and_field_is_described() {
    let mut missing = Vec::new();
    for (file, yaml) in switchboard_crds::crd_manifests() {
        let crd: Value = serde_saphyr::from_str(&yaml).expect("the generated CRD parses");
        let kind = crd["spec"]["names"]["kind"]
            .as_str()
            .unwrap_or(file)
            .to_string();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let top = schema["description"].as_str().unwrap_or_default();
        assert!(
            !top.contains("Auto-generated derived type"),
            "{kind}: the kind's description is kube-derive's placeholder: {top}"
        );
        for (name, sub) in schema["properties"].as_object().into_iter().flatten() {
            if name == "spec" || name == "status" {
                walk(sub, &format!("{kind}.{name}"), &mut missing);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{} fields have no description (a `///` comment on the Rust field becomes it):\n{}",
        missing.len(),
        missing.join("\n")
    );
}
