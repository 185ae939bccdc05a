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

/// Fields whose description names a default that the schema cannot declare, and why.
const DERIVED_DEFAULTS: &[(&str, &str)] = &[
    // The header depends on `type`: X-API-Key for apiKey, X-MCP-<prefix>-Authorization for
    // oauthDelegate.
    ("McpServer.spec.auth.header", "depends on spec.auth.type"),
    // `/mcp` for an MCP server, none for an OpenAPI server's base path.
    ("McpServer.spec.service.path", "depends on spec.openapi"),
    // The run's port and path matter only with transport streamableHttp; declared defaults
    // would be stored on every stdio run too.
    (
        "McpServer.spec.run.port",
        "only with transport streamableHttp",
    ),
    (
        "McpServer.spec.run.path",
        "only with transport streamableHttp",
    ),
    // The stdio bridge's own defaults: passing them as flags would restart every run server's
    // pods when the CRD is upgraded, for no change in behaviour.
    ("McpServer.spec.run.stdio.poolSize", "the bridge's default"),
    (
        "McpServer.spec.run.stdio.maxProcesses",
        "the bridge's default",
    ),
    (
        "McpServer.spec.run.stdio.sessionIdle",
        "the bridge's default",
    ),
    // Resolved against the run: `streamableHttp` for a server the operator runs over HTTP.
    ("McpServer.spec.upstreamEra", "depends on spec.run"),
    (
        "McpServer.spec.service.scheme",
        "an enum whose default the gateway applies per port",
    ),
];

/// The default a description states, when it is a literal (`default \`30s\``, `Default 8`,
/// `` `never` (default) ``), not one derived from something else (`default: the resource's name`).
fn stated_default(description: &str) -> Option<String> {
    let d = description.replace('\n', " ");
    for marker in ["(default `", "Default `", "default `"] {
        if let Some(at) = d.find(marker) {
            let rest = &d[at + marker.len()..];
            return rest.split('`').next().map(str::to_string);
        }
    }
    if let Some(at) = d
        .find("` (default)")
        .or_else(|| d.find("` (default;"))
        .or_else(|| d.find("`, the default"))
    {
        return d[..at].rsplit('`').next().map(str::to_string);
    }
    for marker in ["(default ", "Default "] {
        if let Some(at) = d.find(marker) {
            let word: String = d[at + marker.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            if word.starts_with(|c: char| c.is_ascii_digit()) {
                return Some(word);
            }
        }
    }
    None
}

fn defaults_walk(schema: &Value, path: &str, found: &mut Vec<(String, String, bool)>) {
    if let Some(stated) = schema
        .get("description")
        .and_then(Value::as_str)
        .and_then(stated_default)
    {
        found.push((path.to_string(), stated, schema.get("default").is_some()));
    }
    let mut children: Vec<(String, &Value)> = Vec::new();
    if let Some(Value::Object(properties)) = schema.get("properties") {
        children.extend(properties.iter().map(|(n, s)| (format!("{path}.{n}"), s)));
    }
    if let Some(Value::Object(properties)) = schema.get("items").and_then(|i| i.get("properties")) {
        children.extend(properties.iter().map(|(n, s)| (format!("{path}[].{n}"), s)));
    }
    for (child, sub) in children {
        defaults_walk(sub, &child, found);
    }
}

#[test]
fn every_literal_default_a_description_states_is_declared_in_the_schema() {
    let mut found = Vec::new();
    for (_, yaml) in switchboard_crds::crd_manifests() {
        let crd: Value = serde_saphyr::from_str(&yaml).expect("the generated CRD parses");
        let kind = crd["spec"]["names"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        defaults_walk(spec, &format!("{kind}.spec"), &mut found);
    }
    // (the walk must find the defaults it checks, or it proves nothing)
    let declared = found.iter().filter(|(_, _, has)| *has).count();
    assert!(
        declared >= 15,
        "only {declared} declared defaults found: {found:?}"
    );
    let undeclared: Vec<String> = found
        .iter()
        .filter(|(path, _, has)| !has && !DERIVED_DEFAULTS.iter().any(|(p, _)| p == path))
        .map(|(path, stated, _)| format!("{path}: the description says the default is {stated:?}"))
        .collect();
    assert!(
        undeclared.is_empty(),
        "defaults stated in prose but not declared (add #[schemars(extend(\"default\" = ...))], \
         or list the field in DERIVED_DEFAULTS with the reason):\n{}",
        undeclared.join("\n")
    );
    // And no exception is stale.
    for (path, why) in DERIVED_DEFAULTS {
        assert!(
            found.iter().any(|(p, _, has)| p == path && !has),
            "DERIVED_DEFAULTS lists {path} ({why}), which states no default or now declares one"
        );
    }
}
