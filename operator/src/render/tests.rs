use super::*;
use std::collections::HashMap;
use std::time::Duration;

use switchboard_crds::{IdentityProvider, McpKey, McpServer, McpVirtualServer, ModelRoute};

use crate::reservations::Reservations;
use crate::upstream_policy::UpstreamPolicy;
use switchboard_snapshot::{
    GatewaySettings, ModelProvider, ModelSpec, RequireApproval, SecretSource, ServerAddressPolicy,
    ToolVisibility, key_hash,
};

use super::input::*;
use super::models::*;
use super::references::*;
use super::verdict::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use switchboard_crds::{McpKeySpec, McpServerSpec};

fn server(ns: &str, name: &str, age: i64, spec: serde_json::Value) -> McpServer {
    let spec: McpServerSpec = serde_json::from_value(spec).expect("valid spec");
    let mut s = McpServer::new(name, spec);
    s.metadata.namespace = Some(ns.into());
    let t = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 - age).unwrap();
    s.metadata.creation_timestamp = Some(Time(t));
    s
}

#[test]
fn field_paths_are_the_resources_own() {
    use switchboard_snapshot::{FieldError, SnapshotError};
    let error = |paths: &[&str]| SnapshotError {
        errors: paths
            .iter()
            .map(|p| FieldError {
                path: p.to_string(),
                message: "wrong".into(),
            })
            .collect(),
    };
    let renamed = &[
        ("apiKey", "spec.apiKeySecretRef"),
        ("name", "metadata.name"),
    ];
    assert_eq!(
        user_paths(
            error(&[
                "models[0].apiKey",
                "models[0].name",
                "models[0].names[1]",
                "models[0]"
            ]),
            "models",
            renamed
        ),
        "spec.apiKeySecretRef: wrong; metadata.name: wrong; spec.names[1]: wrong; spec: wrong"
    );
    // Another entry (an attached server) and a path of no entry are left as they are.
    assert_eq!(
        user_paths(error(&["servers[1].url", "gateway.x", ""]), "servers", &[]),
        "servers[1].url: wrong; gateway.x: wrong; wrong"
    );
}

fn secrets(entries: &[(&str, &str, &str, &str)]) -> SecretData {
    let mut out: SecretData = HashMap::new();
    for (ns, name, key, value) in entries {
        out.entry((ns.to_string(), name.to_string()))
            .or_default()
            .insert(key.to_string(), value.as_bytes().to_vec());
    }
    out
}

fn run(servers: &[McpServer], keys: &[McpKey], secrets: &SecretData) -> Rendered {
    run_models(servers, keys, &[], secrets)
}

fn run_models(
    servers: &[McpServer],
    keys: &[McpKey],
    models: &[ModelRoute],
    secrets: &SecretData,
) -> Rendered {
    run_in_namespaces(servers, keys, models, secrets, &NamespacePolicies::new())
}

fn run_in_namespaces(
    servers: &[McpServer],
    keys: &[McpKey],
    models: &[ModelRoute],
    secrets: &SecretData,
    namespace_policies: &NamespacePolicies,
) -> Rendered {
    render(RenderInput {
        servers,
        virtual_servers: &[],
        keys,
        models,
        identity_providers: &[],
        secrets,
        config_maps: &SecretData::new(),
        settings: GatewaySettings::default(),
        upstreams: &UpstreamPolicy::new(&Default::default(), true).unwrap(),
        namespace_policies,
        reservations: &Reservations::default(),
    })
}

fn virtual_server(ns: &str, name: &str, age: i64, spec: serde_json::Value) -> McpVirtualServer {
    let spec = serde_json::from_value(spec).expect("valid spec");
    let mut v = McpVirtualServer::new(name, spec);
    v.metadata.namespace = Some(ns.into());
    let t = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 - age).unwrap();
    v.metadata.creation_timestamp = Some(Time(t));
    v
}

fn run_all(
    servers: &[McpServer],
    virtual_servers: &[McpVirtualServer],
    models: &[ModelRoute],
    config_maps: &SecretData,
) -> Rendered {
    render(RenderInput {
        servers,
        virtual_servers,
        keys: &[],
        models,
        identity_providers: &[],
        secrets: &SecretData::new(),
        config_maps,
        settings: GatewaySettings::default(),
        upstreams: &UpstreamPolicy::new(&Default::default(), true).unwrap(),
        namespace_policies: &NamespacePolicies::new(),
        reservations: &Reservations::default(),
    })
}

const PETS: &str = r#"{"openapi": "3.0.3", "info": {"title": "pets", "version": "1"},
    "paths": {"/pets/{id}": {"get": {"operationId": "getPet",
        "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]}}}}"#;

#[test]
fn an_openapi_document_comes_from_its_config_map_and_a_broken_one_names_its_path() {
    let config_maps = secrets(&[
        ("team", "pets-api", "openapi.json", PETS),
        (
            "team",
            "broken",
            "openapi.json",
            r#"{"openapi": "3.0.3", "paths": []}"#,
        ),
    ]);
    let api = |cm: &str| {
        serde_json::json!({"url": "https://pets.example", "openapi": {
            "document": {"configMapKeyRef": {"name": cm, "key": "openapi.json"}},
            "operations": {"operationIds": ["get*"]}}})
    };
    let servers = [
        server("team", "pets", 2, api("pets-api")),
        server("team", "broken", 1, api("broken")),
        server("team", "missing", 0, api("nowhere")),
        server(
            "team",
            "fetched",
            0,
            serde_json::json!({"service": {"name": "pets", "port": 8080},
                "openapi": {"documentUrl": "/openapi.json"}}),
        ),
    ];
    let r = run_all(&servers, &[], &[], &config_maps);
    let verdict = |name: &str| r.servers[&("team".to_string(), name.to_string())].clone();
    assert!(verdict("pets").accepted, "{:?}", verdict("pets"));
    let pets = r
        .snapshot
        .servers
        .iter()
        .find(|s| s.name == "pets")
        .unwrap();
    let openapi = pets.openapi.as_ref().unwrap();
    assert_eq!(openapi.operations.operation_ids, ["get*"]);
    assert!(matches!(&openapi.document, Some(SecretSource::Value { value }) if value == PETS));
    let broken = verdict("broken");
    assert_eq!(broken.reason, "InvalidSpec");
    assert!(
        broken.message.contains("spec.openapi.document") && broken.message.contains("paths"),
        "{}",
        broken.message
    );
    let missing = verdict("missing");
    assert_eq!(missing.reason, "ConfigMapNotFound");
    assert!(
        missing
            .message
            .starts_with("spec.openapi.document: ConfigMap team/nowhere"),
        "{}",
        missing.message
    );
    // A Service as a REST API's base: no `/mcp` path appended.
    let fetched = r
        .snapshot
        .servers
        .iter()
        .find(|s| s.name == "fetched")
        .unwrap();
    assert_eq!(fetched.url, "http://pets.team.svc:8080");
    assert_eq!(
        fetched.openapi.as_ref().unwrap().document_url.as_deref(),
        Some("/openapi.json")
    );
}

#[test]
fn virtual_servers_resolve_their_sources_and_refuse_what_cannot_be_served() {
    let servers = [
        server(
            "team",
            "docs",
            5,
            serde_json::json!({"url": "http://docs.example/mcp"}),
        ),
        server(
            "team",
            "search",
            5,
            serde_json::json!({"url": "http://search.example/mcp"}),
        ),
        server(
            "other",
            "private",
            5,
            serde_json::json!({"url": "http://p.example/mcp"}),
        ),
        server(
            "other",
            "shared",
            5,
            serde_json::json!({"url": "http://s.example/mcp", "allowedNamespaces": ["team"]}),
        ),
    ];
    let vs =
        |name: &str, age: i64, spec: serde_json::Value| virtual_server("team", name, age, spec);
    let virtual_servers = [
        vs(
            "curated",
            4,
            serde_json::json!({"sources": [
                {"server": "docs", "tools": {"allow": ["read"]},
                 "overrides": [{"tool": "read", "name": "read_docs", "parameters": {"lang": {"fixed": "en"}}}]},
                {"server": "other/shared", "tools": {"allow": ["*"]}}]}),
        ),
        vs(
            "dangling",
            3,
            serde_json::json!({"sources": [{"server": "gone"}]}),
        ),
        vs(
            "foreign",
            3,
            serde_json::json!({"sources": [{"server": "other/private"}]}),
        ),
        // Its path is a server's tool prefix: the server keeps it.
        vs(
            "taken",
            3,
            serde_json::json!({"path": "search", "sources": [{"server": "docs"}]}),
        ),
        // The older virtual server keeps a contested path.
        vs(
            "younger",
            1,
            serde_json::json!({"path": "curated", "sources": [{"server": "docs"}]}),
        ),
        // An McpServer of the same name: a key's `servers: [search]` would name both.
        vs(
            "search",
            3,
            serde_json::json!({"path": "find", "sources": [{"server": "docs"}]}),
        ),
        // Invalid once resolved: an override of a tool its filter does not select.
        vs(
            "unselected",
            2,
            serde_json::json!({"sources": [{"server": "docs", "tools": {"allow": ["read"]},
                "overrides": [{"tool": "write", "name": "w"}]}]}),
        ),
    ];
    let r = run_all(&servers, &virtual_servers, &[], &SecretData::new());
    let verdict = |name: &str| r.virtual_servers[&("team".to_string(), name.to_string())].clone();
    assert!(verdict("curated").accepted, "{:?}", verdict("curated"));
    assert_eq!(
        verdict("curated").message,
        "served at /mcp/curated (team/curated)"
    );
    let curated = &r.snapshot.virtual_servers[0];
    assert_eq!(curated.id(), "team/curated");
    assert_eq!(curated.sources[0].server, "team/docs");
    assert_eq!(curated.sources[1].server, "other/shared");
    assert_eq!(
        curated.sources[0].overrides[0].parameters["lang"].fixed,
        Some(serde_json::json!("en"))
    );
    assert_eq!(
        r.snapshot.virtual_servers.len(),
        1,
        "only the good one is served"
    );
    let expect = |name: &str, reason: &str, text: &str| {
        let v = verdict(name);
        assert_eq!(
            (v.accepted, v.reason.as_str()),
            (false, reason),
            "{name}: {v:?}"
        );
        assert!(v.message.contains(text), "{name}: {}", v.message);
    };
    expect(
        "dangling",
        "ServerNotFound",
        "spec.sources[0].server: no McpServer or McpVirtualServer team/gone",
    );
    expect(
        "foreign",
        "ServerNotAdmitted",
        "McpServer other/private does not admit namespace team",
    );
    expect(
        "taken",
        "PathConflict",
        "the tool prefix of McpServer team/search",
    );
    expect(
        "younger",
        "PathConflict",
        "the path of McpVirtualServer team/curated",
    );
    expect(
        "unselected",
        "InvalidSpec",
        "spec.sources[0].overrides[0].tool",
    );
}

#[test]
fn a_model_attaches_a_virtual_server_with_the_servers_behind_it() {
    let servers = [server(
        "team",
        "docs",
        5,
        serde_json::json!({"url": "http://docs.example/mcp"}),
    )];
    let virtual_servers = [virtual_server(
        "team",
        "curated",
        4,
        serde_json::json!({"sources": [{"server": "docs", "tools": {"allow": ["read"]},
            "overrides": [{"tool": "read", "name": "read_docs"}]}]}),
    )];
    let route = |name: &str, attached: &str| {
        let spec = serde_json::json!({"provider": "anthropic", "baseUrl": "https://api.example",
            "tools": [{"server": attached}]});
        let mut m = ModelRoute::new(name, serde_json::from_value(spec).unwrap());
        m.metadata.namespace = Some("team".into());
        m
    };
    let models = [route("good", "curated"), route("bad", "not-there")];
    let r = run_all(&servers, &virtual_servers, &models, &SecretData::new());
    let good = &r.models[&("team".to_string(), "good".to_string())];
    assert!(good.accepted, "{good:?}");
    let spec = r.snapshot.models.iter().find(|m| m.name == "good").unwrap();
    assert_eq!(spec.tools[0].server, "team/curated");
    let bad = &r.models[&("team".to_string(), "bad".to_string())];
    assert_eq!(bad.reason, "ServerNotFound", "{bad:?}");
}

#[test]
fn a_namespace_policy_reaches_its_servers_specs_and_a_bad_one_refuses_them() {
    let servers = [
        ("team-a", "inside", "tools.team-a.svc"),
        ("team-a", "outside", "tools.team-b.svc"),
        ("team-b", "free", "tools.team-b.svc"),
        ("team-c", "any", "tools.team-c.svc"),
    ]
    .map(|(ns, name, host)| {
        server(
            ns,
            name,
            0,
            serde_json::json!({"url": format!("http://{host}/mcp")}),
        )
    });
    let policy = ServerAddressPolicy {
        hosts: vec!["*.team-a.svc".into()],
        networks: vec![],
    };
    let policies: NamespacePolicies = [
        ("team-a".to_string(), Ok(policy.clone())),
        (
            "team-c".to_string(),
            Err("annotation x, entry 0: bad".to_string()),
        ),
    ]
    .into();
    let out = run_in_namespaces(&servers, &[], &[], &SecretData::new(), &policies);
    let reason = |ns: &str, name: &str| out.servers[&(ns.to_string(), name.to_string())].reason;
    assert_eq!(reason("team-a", "inside"), "Accepted");
    assert_eq!(reason("team-a", "outside"), "UpstreamAddressDenied");
    assert_eq!(reason("team-b", "free"), "Accepted");
    assert_eq!(reason("team-c", "any"), "UpstreamPolicyInvalid");
    let specs: Vec<_> = out
        .snapshot
        .servers
        .iter()
        .map(|s| (s.id(), s.upstream_policy.clone()))
        .collect();
    assert_eq!(
        specs,
        [("team-a/inside", Some(policy)), ("team-b/free", None)],
        "the gateways get the policy with the spec"
    );
}

fn model(ns: &str, name: &str, age: i64, spec: serde_json::Value) -> ModelRoute {
    let spec: switchboard_crds::ModelRouteSpec = serde_json::from_value(spec).expect("valid spec");
    let mut m = ModelRoute::new(name, spec);
    m.metadata.namespace = Some(ns.into());
    let t = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 - age).unwrap();
    m.metadata.creation_timestamp = Some(Time(t));
    m
}

fn model_verdict<'a>(r: &'a Rendered, ns: &str, name: &str) -> &'a Verdict {
    &r.models[&(ns.to_string(), name.to_string())]
}

#[test]
fn a_model_renders_with_server_ids_and_its_resolved_key() {
    let search = server(
        "team",
        "search",
        10,
        serde_json::json!({"url": "http://search/mcp"}),
    );
    let route = model(
        "team",
        "claude",
        5,
        serde_json::json!({
            "modelNames": ["claude-sonnet", "sonnet"],
            "provider": "anthropic",
            "baseUrl": "https://api.anthropic.com",
            "upstreamModel": "claude-sonnet-4-5",
            "apiKeySecretRef": {"name": "anthropic", "key": "apiKey"},
            "maxIterations": 4,
            "tools": [{"server": "search", "tools": {"deny": ["delete_*"]}, "requireApproval": "always", "visibility": "visible"}],
            "accessGroups": ["llm"],
        }),
    );
    let r = run_models(
        &[search],
        &[],
        &[route],
        &secrets(&[("team", "anthropic", "apiKey", "sk-ant-s3cr3t\n")]),
    );
    let v = model_verdict(&r, "team", "claude");
    assert!(v.accepted, "{v:?}");
    assert!(v.message.contains("claude-sonnet, sonnet"), "{}", v.message);
    let m = &r.snapshot.models[0];
    assert_eq!(m.id(), "team/claude");
    assert_eq!(m.provider, ModelProvider::Anthropic);
    assert_eq!(m.upstream_model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(
        m.api_key,
        Some(SecretSource::Value {
            value: "sk-ant-s3cr3t".into()
        }),
        "resolved, without the Secret's trailing newline"
    );
    assert_eq!(m.timeout, Duration::from_secs(600));
    assert_eq!(m.max_iterations, 4);
    assert_eq!(m.access_groups, vec!["llm".to_string()]);
    assert_eq!(m.tools.len(), 1);
    assert_eq!(
        m.tools[0].server, "team/search",
        "a name becomes the server id"
    );
    assert_eq!(m.tools[0].tools.deny, vec!["delete_*".to_string()]);
    assert_eq!(m.tools[0].require_approval, RequireApproval::Always);
    assert_eq!(m.tools[0].visibility, ToolVisibility::Visible);
    switchboard_snapshot::validate(&r.snapshot).expect("the snapshot is valid");
    assert!(!format!("{:?}", r.models).contains("s3cr3t"));
}

/// `spec.tls` resolves a CA bundle from a Secret or a ConfigMap and a client certificate
/// from a kubernetes.io/tls Secret; a missing one refuses the server by name, and a bundle
/// that is no PEM is refused with the user's field path. Nothing of the material appears
/// in a verdict.
#[test]
fn tls_references_resolve_or_refuse_by_name() {
    let ca = rcgen::generate_simple_self_signed(vec!["ca.test".into()]).unwrap();
    let pem = ca.cert.pem();
    let pem = pem.trim_end();
    let with = |tls: serde_json::Value| {
        server(
            "t",
            "s",
            0,
            serde_json::json!({"url": "https://s.t.svc/mcp", "tls": tls}),
        )
    };
    let render_with = |servers: &[McpServer], config_maps: &SecretData| {
        render(RenderInput {
            servers,
            virtual_servers: &[],
            keys: &[],
            models: &[],
            identity_providers: &[],
            secrets: &secrets(&[
                ("t", "ca", "ca.crt", "not a pem"),
                ("t", "client", "tls.crt", "chain"),
                ("t", "client", "tls.key", "s3cr3t-key"),
            ]),
            config_maps,
            settings: GatewaySettings::default(),
            upstreams: &UpstreamPolicy::new(&Default::default(), true).unwrap(),
            namespace_policies: &NamespacePolicies::new(),
            reservations: &Reservations::default(),
        })
    };
    let config_maps = secrets(&[("t", "bundle", "ca.crt", pem)]);
    let verdict = |tls: serde_json::Value| {
        let r = render_with(&[with(tls)], &config_maps);
        (r.servers[&("t".into(), "s".into())].clone(), r.snapshot)
    };

    let (v, _) = verdict(
        serde_json::json!({"caBundle": {"configMapKeyRef": {"name": "gone", "key": "ca.crt"}}}),
    );
    assert!(!v.accepted);
    assert_eq!(v.reason, "ConfigMapNotFound");
    assert!(
        v.message
            .contains("spec.tls.caBundle: ConfigMap t/gone does not exist"),
        "{}",
        v.message
    );

    let (v, _) = verdict(serde_json::json!({"clientCertificate": {"secretName": "missing"}}));
    assert_eq!((v.accepted, v.reason), (false, Reason::SecretNotFound));
    assert!(
        v.message.contains("spec.tls.clientCertificate"),
        "{}",
        v.message
    );

    let (v, _) =
        verdict(serde_json::json!({"caBundle": {"secretKeyRef": {"name": "ca", "key": "ca.crt"}}}));
    assert!(!v.accepted, "a bundle that is no PEM is refused");
    assert!(v.message.contains("spec.tls.caBundle"), "{}", v.message);
    assert!(
        !v.message.contains("not a pem"),
        "the material never shows: {}",
        v.message
    );

    let (v, snapshot) = verdict(serde_json::json!({
        "caBundle": {"configMapKeyRef": {"name": "bundle", "key": "ca.crt"}},
        "serverName": "mcp.corp.internal",
    }));
    assert!(v.accepted, "{v:?}");
    let tls = snapshot.servers[0]
        .tls
        .clone()
        .expect("the server's tls is rendered");
    assert_eq!(tls.server_name.as_deref(), Some("mcp.corp.internal"));
    assert_eq!(
        tls.ca_bundle
            .as_ref()
            .and_then(switchboard_snapshot::resolved_value),
        Some(pem)
    );
}

#[test]
fn defaults_are_the_snapshot_defaults() {
    let route = model(
        "a",
        "local",
        1,
        serde_json::json!({"provider": "openai", "baseUrl": "http://vllm:8000/v1"}),
    );
    let r = run_models(&[], &[], &[route], &HashMap::new());
    let m = &r.snapshot.models[0];
    let defaults: ModelSpec = serde_json::from_value(serde_json::json!({
        "name": "local", "namespace": "a", "id": "a/local",
        "provider": "openai", "baseUrl": "http://vllm:8000/v1",
    }))
    .unwrap();
    assert_eq!(*m, defaults);
    assert_eq!(m.client_names().collect::<Vec<_>>(), ["local"]);
    assert_eq!(model_names(&route_named("local")), ["local"]);
}

fn route_named(name: &str) -> ModelRoute {
    model(
        "a",
        name,
        1,
        serde_json::json!({"provider": "openai", "baseUrl": "http://x/v1"}),
    )
}

#[test]
fn tool_servers_must_be_in_the_snapshot_and_admit_the_model() {
    let servers = [
        server("a", "ok", 10, serde_json::json!({"url": "http://x/mcp"})),
        server(
            "a",
            "locked",
            10,
            serde_json::json!({"url": "http://x/mcp", "auth": {"type": "bearer", "secretRef": {"name": "gone", "key": "t"}}}),
        ),
        server(
            "b",
            "private",
            10,
            serde_json::json!({"url": "http://x/mcp", "toolPrefix": "private"}),
        ),
        server(
            "b",
            "shared",
            10,
            serde_json::json!({"url": "http://x/mcp", "toolPrefix": "shared", "allowedNamespaces": ["a"]}),
        ),
    ];
    let with_tools = |name: &str, server: &str| {
        model(
            "a",
            name,
            5,
            serde_json::json!({"provider": "openai", "baseUrl": "http://x/v1", "tools": [{"server": server}]}),
        )
    };
    let models = [
        with_tools("m-ok", "ok"),
        with_tools("m-shared", "b/shared"),
        with_tools("m-missing", "nothing"),
        with_tools("m-locked", "locked"),
        with_tools("m-private", "b/private"),
    ];
    let r = run_models(&servers, &[], &models, &HashMap::new());
    assert!(model_verdict(&r, "a", "m-ok").accepted);
    assert!(model_verdict(&r, "a", "m-shared").accepted);
    let cases = [
        ("m-missing", "ServerNotFound", "a/nothing"),
        ("m-locked", "ServerNotAccepted", "a/locked"),
        ("m-private", "ServerNotAdmitted", "b/private"),
    ];
    for (name, reason, names) in cases {
        let v = model_verdict(&r, "a", name);
        assert_eq!(v.reason, reason, "{name}: {v:?}");
        assert!(v.message.starts_with("spec.tools[0].server"), "{v:?}");
        assert!(v.message.contains(names), "{v:?}");
    }
    let ids: Vec<&str> = r.snapshot.models.iter().map(|m| m.id()).collect();
    assert_eq!(ids, ["a/m-ok", "a/m-shared"]);
    assert_eq!(r.snapshot.models[1].tools[0].server, "b/shared");
    switchboard_snapshot::validate(&r.snapshot).expect("the snapshot stays valid");
}

#[test]
fn a_missing_key_secret_leaves_only_that_model_out() {
    let spec = |secret: &str| {
        serde_json::json!({"provider": "anthropic", "baseUrl": "https://api.anthropic.com", "modelNames": [secret],
            "apiKeySecretRef": {"name": secret, "key": "apiKey"}})
    };
    let r = run_models(
        &[],
        &[],
        &[
            model("a", "one", 5, spec("here")),
            model("a", "two", 5, spec("gone")),
        ],
        &secrets(&[("a", "here", "apiKey", "sk-1")]),
    );
    assert!(model_verdict(&r, "a", "one").accepted);
    let v = model_verdict(&r, "a", "two");
    assert_eq!(v.reason, "SecretNotFound");
    assert!(v.message.starts_with("spec.apiKeySecretRef"), "{v:?}");
    assert!(v.message.contains("a/gone"), "{v:?}");
    assert_eq!(r.snapshot.models.len(), 1);

    let mut r = r;
    r.note_secret_selector("switchboard.dev/credential=true");
    let v = model_verdict(&r, "a", "two");
    assert!(
        v.message
            .ends_with("(the operator only sees Secrets labelled switchboard.dev/credential=true)"),
        "{v:?}"
    );
    assert!(model_verdict(&r, "a", "one").accepted);
}

#[test]
fn the_older_model_keeps_a_contested_name() {
    let old = model(
        "a",
        "claude",
        100,
        serde_json::json!({"provider": "anthropic", "baseUrl": "https://api.anthropic.com"}),
    );
    // Same default name ("claude") in another namespace, and an explicit overlap.
    let same_name = model(
        "b",
        "claude",
        10,
        serde_json::json!({"provider": "anthropic", "baseUrl": "https://api.anthropic.com"}),
    );
    let overlap = model(
        "c",
        "gpt",
        10,
        serde_json::json!({"provider": "openai", "baseUrl": "https://api.openai.com/v1", "modelNames": ["gpt-4o", "claude"]}),
    );
    let r = run_models(&[], &[], &[overlap, same_name, old], &HashMap::new());
    assert!(model_verdict(&r, "a", "claude").accepted);
    for (ns, name) in [("b", "claude"), ("c", "gpt")] {
        let v = model_verdict(&r, ns, name);
        assert_eq!(v.reason, "ModelNameConflict", "{v:?}");
        assert!(v.message.contains("a/claude"), "{v:?}");
    }
    assert_eq!(r.snapshot.models.len(), 1);
    switchboard_snapshot::validate(&r.snapshot).expect("the snapshot stays valid");
}

#[test]
fn invalid_after_resolution_is_reported_alone_with_the_user_path() {
    let injected = model(
        "a",
        "crlf",
        5,
        serde_json::json!({"provider": "openai", "baseUrl": "http://x/v1",
            "apiKeySecretRef": {"name": "k", "key": "v"}}),
    );
    let dotted = model(
        "a",
        "dotted.name",
        5,
        serde_json::json!({"provider": "openai", "baseUrl": "http://x/v1", "modelNames": ["dotted"]}),
    );
    let r = run_models(
        &[],
        &[],
        &[injected, dotted],
        &secrets(&[("a", "k", "v", "sk-inj3cted\r\nX-Evil: 1")]),
    );
    let v = model_verdict(&r, "a", "crlf");
    assert_eq!(v.reason, "InvalidSpec");
    assert!(v.message.starts_with("spec.apiKeySecretRef"), "{v:?}");
    assert!(!v.message.contains("inj3cted"), "{v:?}");
    let v = model_verdict(&r, "a", "dotted.name");
    assert_eq!(v.reason, "InvalidSpec");
    assert!(v.message.starts_with("metadata.name"), "{v:?}");
    assert!(r.snapshot.models.is_empty());
}

#[test]
fn keys_carry_the_models_they_name() {
    let k = key(
        "a",
        "k",
        1,
        serde_json::json!({"secretName": "s", "models": ["claude", "b/gpt"]}),
    );
    let r = run(&[], &[k], &secrets(&[("a", "s", "key", "sk-k")]));
    assert_eq!(r.snapshot.keys[0].models, ["claude", "b/gpt"]);
}

#[test]
fn older_server_keeps_a_contested_prefix() {
    let old = server(
        "a",
        "weather",
        100,
        serde_json::json!({"url": "http://x/mcp"}),
    );
    let new = server(
        "b",
        "other",
        10,
        serde_json::json!({"url": "http://y/mcp", "toolPrefix": "weather"}),
    );
    let r = run(&[new, old], &[], &HashMap::new());
    assert!(r.servers[&("a".into(), "weather".into())].accepted);
    let v = &r.servers[&("b".into(), "other".into())];
    assert_eq!(v.reason, "PrefixConflict");
    assert!(v.message.contains("a/weather"), "{}", v.message);
    assert_eq!(r.snapshot.servers.len(), 1);
    assert_eq!(r.snapshot.servers[0].id(), "a/weather");
}

#[test]
fn a_reserved_name_goes_to_its_namespace_however_old_the_other_claim() {
    let reservations = Reservations::parse(
        &["weather=platform".to_string(), "team-*=teams".to_string()],
        &["claude=ml".to_string()],
    )
    .unwrap();
    let squatter = server(
        "b",
        "weather",
        100,
        serde_json::json!({"url": "http://x/mcp"}),
    );
    let owner = server(
        "platform",
        "weather",
        10,
        serde_json::json!({"url": "http://y/mcp"}),
    );
    let glob = server(
        "b",
        "tools",
        10,
        serde_json::json!({"url": "http://z/mcp", "toolPrefix": "team-x"}),
    );
    let path_squatter = virtual_server(
        "b",
        "team-view",
        10,
        serde_json::json!({"sources": [{"server": "platform/weather"}]}),
    );
    let old_model = model(
        "b",
        "claude",
        100,
        serde_json::json!({"provider": "anthropic", "baseUrl": "https://api.anthropic.com"}),
    );
    let ml_model = model(
        "ml",
        "claude",
        10,
        serde_json::json!({"provider": "anthropic", "baseUrl": "https://api.anthropic.com"}),
    );
    let mut owner_admits = owner.clone();
    owner_admits.spec.allowed_namespaces = vec!["b".into()];
    let r = render(RenderInput {
        servers: &[squatter, owner_admits, glob],
        virtual_servers: &[path_squatter],
        keys: &[],
        models: &[old_model, ml_model],
        identity_providers: &[],
        secrets: &SecretData::new(),
        config_maps: &SecretData::new(),
        settings: GatewaySettings::default(),
        upstreams: &UpstreamPolicy::new(&Default::default(), true).unwrap(),
        namespace_policies: &NamespacePolicies::new(),
        reservations: &reservations,
    });
    assert!(r.servers[&("platform".into(), "weather".into())].accepted);
    for (ns, name, flag) in [
        ("b", "weather", "--reserved-prefixes"),
        ("b", "tools", "--reserved-prefixes"),
    ] {
        let v = &r.servers[&(ns.into(), name.into())];
        assert_eq!(v.reason, "NameReserved", "{v:?}");
        assert!(
            v.message.contains(flag) && v.message.contains(&format!("namespace {ns} may not")),
            "{v:?}"
        );
    }
    let v = &r.virtual_servers[&("b".into(), "team-view".into())];
    assert_eq!(v.reason, "NameReserved", "{v:?}");
    assert!(model_verdict(&r, "ml", "claude").accepted);
    let v = model_verdict(&r, "b", "claude");
    assert_eq!(v.reason, "NameReserved", "{v:?}");
    assert!(v.message.contains("reserved for namespace ml"), "{v:?}");
    // Control: without the reservations the older claims win, as they always did.
    let r = run_models(
        &[
            server(
                "b",
                "weather",
                100,
                serde_json::json!({"url": "http://x/mcp"}),
            ),
            server(
                "platform",
                "weather",
                10,
                serde_json::json!({"url": "http://y/mcp"}),
            ),
        ],
        &[],
        &[],
        &SecretData::new(),
    );
    assert!(r.servers[&("b".into(), "weather".into())].accepted);
    assert_eq!(
        r.servers[&("platform".into(), "weather".into())].reason,
        "PrefixConflict"
    );
}

#[test]
fn missing_secret_leaves_only_that_server_out() {
    let s1 = server(
        "a",
        "one",
        5,
        serde_json::json!({"url": "http://x/mcp", "auth": {"type": "bearer", "secretRef": {"name": "tok", "key": "token"}}}),
    );
    let s2 = server(
        "a",
        "two",
        5,
        serde_json::json!({"url": "http://x/mcp", "auth": {"type": "bearer", "secretRef": {"name": "gone", "key": "token"}}}),
    );
    let r = run(
        &[s1, s2],
        &[],
        &secrets(&[("a", "tok", "token", "s3cr3t-value")]),
    );
    assert!(r.servers[&("a".into(), "one".into())].accepted);
    let v = &r.servers[&("a".into(), "two".into())];
    assert_eq!(v.reason, "SecretNotFound");
    assert!(v.message.contains("a/gone"));
    assert_eq!(r.snapshot.servers.len(), 1);
    let text = format!("{:?}", r.servers);
    assert!(
        !text.contains("s3cr3t-value"),
        "verdicts never carry secret values"
    );
}

#[test]
fn service_reference_becomes_a_cluster_url() {
    let s = server(
        "team",
        "svc",
        1,
        serde_json::json!({"service": {"name": "mcp", "port": 8080}}),
    );
    let r = run(&[s], &[], &HashMap::new());
    assert_eq!(r.snapshot.servers[0].url, "http://mcp.team.svc:8080/mcp");
}

#[test]
fn invalid_after_resolution_is_reported_with_the_spec_path() {
    let s = server(
        "a",
        "b",
        1,
        serde_json::json!({"url": "http://x/mcp", "auth": {"type": "basic", "secretRef": {"name": "tok", "key": "t"}}}),
    );
    let r = run(&[s], &[], &secrets(&[("a", "tok", "t", "no-colon")]));
    let v = &r.servers[&("a".into(), "b".into())];
    assert_eq!(v.reason, "InvalidSpec");
    assert!(v.message.starts_with("spec.auth"), "{}", v.message);
}

/// IdentityProviders render with the snapshot's defaults; a bad one is refused alone with
/// the field named; a key's people need an accepted provider of its own namespace, and a key
/// whose provider is missing is left out alone (the reason says which).
#[test]
fn identity_providers_and_the_people_keys_name() {
    let provider = |ns: &str, name: &str, spec: serde_json::Value| {
        let mut p = IdentityProvider::new(name, serde_json::from_value(spec).unwrap());
        p.metadata.namespace = Some(ns.into());
        p
    };
    let providers = [
        provider(
            "a",
            "corp",
            serde_json::json!({"issuer": "https://login.example/realms/corp", "audiences": ["gw"], "claims": {"groups": "realm_access.roles"}, "scopes": ["switchboard"]}),
        ),
        provider(
            "a",
            "plain",
            serde_json::json!({"issuer": "http://login.example/realms/x", "audiences": ["gw"]}),
        ),
    ];
    let people = |provider: &str| serde_json::json!([{"provider": provider, "groups": ["team-a"]}]);
    let keys = [
        key(
            "a",
            "team-a",
            3,
            serde_json::json!({"secretName": "ka", "people": people("corp")}),
        ),
        key(
            "a",
            "ghost",
            2,
            serde_json::json!({"secretName": "kg", "people": people("gone")}),
        ),
        key(
            "a",
            "refused",
            1,
            serde_json::json!({"secretName": "kr", "people": people("plain")}),
        ),
        key(
            "b",
            "elsewhere",
            0,
            serde_json::json!({"secretName": "kb", "people": people("corp")}),
        ),
    ];
    let secrets = secrets(&[
        ("a", "ka", "key", "k1"),
        ("a", "kg", "key", "k2"),
        ("a", "kr", "key", "k3"),
        ("b", "kb", "key", "k4"),
    ]);
    let r = render(RenderInput {
        servers: &[],
        virtual_servers: &[],
        keys: &keys,
        models: &[],
        identity_providers: &providers,
        secrets: &secrets,
        config_maps: &SecretData::new(),
        settings: GatewaySettings::default(),
        upstreams: &UpstreamPolicy::new(&Default::default(), true).unwrap(),
        namespace_policies: &NamespacePolicies::new(),
        reservations: &Reservations::default(),
    });
    let corp = &r.snapshot.identity_providers;
    assert_eq!(corp.len(), 1, "{corp:?}");
    assert_eq!(
        (corp[0].namespace.as_str(), corp[0].name.as_str()),
        ("a", "corp")
    );
    assert_eq!(corp[0].algorithms, ["RS256", "ES256"]);
    assert_eq!(corp[0].claims.subject, "sub");
    assert_eq!(corp[0].claims.groups, "realm_access.roles");
    assert_eq!(corp[0].clock_skew, Duration::from_secs(60));
    let plain = &r.identity_providers[&("a".into(), "plain".into())];
    assert_eq!(plain.reason, "InvalidSpec");
    assert!(
        plain
            .message
            .starts_with("spec.issuer: must be an https URL"),
        "{}",
        plain.message
    );
    let served: Vec<&str> = r.snapshot.keys.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(served, ["team-a"]);
    assert_eq!(r.snapshot.keys[0].people[0].groups, ["team-a"]);
    for (ns, name, provider) in [
        ("a", "ghost", "a/gone"),
        ("a", "refused", "a/plain"),
        ("b", "elsewhere", "b/corp"),
    ] {
        let v = &r.keys[&(ns.into(), name.into())].verdict;
        assert_eq!(v.reason, "IdentityProviderNotFound", "{name}");
        assert!(
            v.message.contains(&format!(
                "spec.people[0].provider: IdentityProvider {provider} "
            )),
            "{}",
            v.message
        );
    }
    // The snapshot the gateway gets is one it accepts.
    switchboard_snapshot::validate(&r.snapshot).expect("a valid snapshot");
}

/// A brokered IdentityProvider's client secret comes from its Secret; without the Secret
/// the provider is left out with SecretNotFound naming the field.
#[test]
fn a_brokered_provider_takes_its_client_secret_from_a_secret() {
    let mut p = IdentityProvider::new(
        "corp",
        serde_json::from_value(serde_json::json!({
            "issuer": "https://login.example/realms/corp", "audiences": ["gw"],
            "brokered": {"clientId": "switchboard-gateway", "clientSecretRef": {"name": "idp", "key": "secret"}, "accessTokenTtl": "2m"}
        }))
        .unwrap(),
    );
    p.metadata.namespace = Some("a".into());
    let render_with = |secrets: &SecretData| {
        render(RenderInput {
            servers: &[],
            virtual_servers: &[],
            keys: &[],
            models: &[],
            identity_providers: std::slice::from_ref(&p),
            secrets,
            config_maps: &SecretData::new(),
            settings: GatewaySettings::default(),
            upstreams: &UpstreamPolicy::new(&Default::default(), true).unwrap(),
            namespace_policies: &NamespacePolicies::new(),
            reservations: &Reservations::default(),
        })
    };
    let r = render_with(&secrets(&[("a", "idp", "secret", "s3cr3t")]));
    let brokered = r.snapshot.identity_providers[0]
        .brokered
        .as_ref()
        .expect("brokered");
    assert_eq!(
        switchboard_snapshot::resolved_value(&brokered.client_secret),
        Some("s3cr3t")
    );
    assert_eq!(brokered.access_token_ttl, Duration::from_secs(120));
    assert_eq!(brokered.scopes, ["openid"]);
    // A second brokered provider, newer, is refused alone.
    let mut second = p.clone();
    second.metadata.name = Some("corp2".into());
    let newer = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap();
    second.metadata.creation_timestamp = Some(Time(newer));
    let both = [p.clone(), second];
    let r = render(RenderInput {
        servers: &[],
        virtual_servers: &[],
        keys: &[],
        models: &[],
        identity_providers: &both,
        secrets: &secrets(&[("a", "idp", "secret", "s3cr3t")]),
        config_maps: &SecretData::new(),
        settings: GatewaySettings::default(),
        upstreams: &UpstreamPolicy::new(&Default::default(), true).unwrap(),
        namespace_policies: &NamespacePolicies::new(),
        reservations: &Reservations::default(),
    });
    assert_eq!(r.snapshot.identity_providers.len(), 1);
    let v = &r.identity_providers[&("a".into(), "corp2".into())];
    assert!(
        v.message
            .contains("IdentityProvider a/corp is brokered already"),
        "{}",
        v.message
    );
    switchboard_snapshot::validate(&r.snapshot).expect("the gateway accepts the snapshot");
    let r = render_with(&SecretData::new());
    let v = &r.identity_providers[&("a".into(), "corp".into())];
    assert_eq!(v.reason, "SecretNotFound");
    assert!(
        v.message
            .starts_with("spec.brokered.clientSecretRef: Secret a/idp does not exist"),
        "{}",
        v.message
    );
    assert!(r.snapshot.identity_providers.is_empty());
}

/// A brokered provider whose identity assertions another IdentityProvider signs is accepted
/// with it, and refused (naming the field) while that one is missing; the snapshot stays one
/// the gateway takes either way.
#[test]
fn identity_assertions_signed_by_another_provider_need_it_accepted() {
    let provider = |name: &str, spec: serde_json::Value| {
        let mut p = IdentityProvider::new(name, serde_json::from_value(spec).unwrap());
        p.metadata.namespace = Some("a".into());
        p
    };
    let corp = provider(
        "corp",
        serde_json::json!({
            "issuer": "https://login.example/realms/corp", "audiences": ["gw"],
            "brokered": {"clientId": "gw", "clientSecretRef": {"name": "idp", "key": "secret"},
                         "identityAssertions": {"provider": "org"}}
        }),
    );
    let org = provider(
        "org",
        serde_json::json!({"issuer": "https://org.example", "audiences": ["unused"]}),
    );
    let secrets = secrets(&[("a", "idp", "secret", "s3cr3t")]);
    let render_of = |providers: &[IdentityProvider]| {
        render(RenderInput {
            servers: &[],
            virtual_servers: &[],
            keys: &[],
            models: &[],
            identity_providers: providers,
            secrets: &secrets,
            config_maps: &SecretData::new(),
            settings: GatewaySettings::default(),
            upstreams: &UpstreamPolicy::new(&Default::default(), true).unwrap(),
            namespace_policies: &NamespacePolicies::new(),
            reservations: &Reservations::default(),
        })
    };
    let r = render_of(&[corp.clone(), org]);
    assert_eq!(r.snapshot.identity_providers.len(), 2);
    let signer = r.snapshot.identity_providers[0]
        .brokered
        .as_ref()
        .and_then(|b| b.identity_assertions.as_ref())
        .and_then(|a| a.provider.as_deref());
    assert_eq!(signer, Some("org"));
    switchboard_snapshot::validate(&r.snapshot).expect("the gateway accepts the snapshot");
    let r = render_of(std::slice::from_ref(&corp));
    let v = &r.identity_providers[&("a".into(), "corp".into())];
    assert_eq!(v.reason, "InvalidSpec");
    assert!(
        v.message.starts_with(
            "spec.brokered.identityAssertions.provider: IdentityProvider a/org does not exist"
        ),
        "{}",
        v.message
    );
    assert!(r.snapshot.identity_providers.is_empty());
    switchboard_snapshot::validate(&r.snapshot).expect("the gateway accepts the snapshot");
}

fn key(ns: &str, name: &str, age: i64, spec: serde_json::Value) -> McpKey {
    let mut k = McpKey::new(name, serde_json::from_value::<McpKeySpec>(spec).unwrap());
    k.metadata.namespace = Some(ns.into());
    let t = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 - age).unwrap();
    k.metadata.creation_timestamp = Some(Time(t));
    k
}

#[test]
fn a_shared_key_stays_with_the_older_mcpkey_and_blocks_nothing() {
    let old = key(
        "a",
        "first",
        100,
        serde_json::json!({"secretName": "shared"}),
    );
    let new = key(
        "a",
        "second",
        10,
        serde_json::json!({"secretName": "shared"}),
    );
    let other = key("a", "third", 5, serde_json::json!({"secretName": "own"}));
    let r = run(
        &[],
        &[new, other, old],
        &secrets(&[("a", "shared", "key", "k1"), ("a", "own", "key", "k2")]),
    );
    assert!(r.keys[&("a".into(), "first".into())].verdict.accepted);
    let dup = &r.keys[&("a".into(), "second".into())].verdict;
    assert_eq!(dup.reason, "DuplicateKey");
    assert!(dup.message.contains("a/first"), "{}", dup.message);
    assert_eq!(r.snapshot.keys.len(), 2);
    switchboard_snapshot::validate(&r.snapshot).expect("the snapshot stays valid");
}

#[test]
fn a_service_account_stays_bound_to_the_older_mcpkey_in_its_own_namespace() {
    let old = key(
        "a",
        "first",
        100,
        serde_json::json!({"secretName": "s1", "serviceAccounts": ["builder", "*"]}),
    );
    let new = key(
        "a",
        "second",
        10,
        serde_json::json!({"secretName": "s2", "serviceAccounts": ["builder"]}),
    );
    let elsewhere = key(
        "b",
        "third",
        5,
        serde_json::json!({"secretName": "s3", "serviceAccounts": ["builder"]}),
    );
    let r = run(
        &[],
        &[new, elsewhere, old],
        &secrets(&[
            ("a", "s1", "key", "k1"),
            ("a", "s2", "key", "k2"),
            ("b", "s3", "key", "k3"),
        ]),
    );
    let conflict = &r.keys[&("a".into(), "second".into())].verdict;
    assert_eq!(conflict.reason, "ServiceAccountConflict");
    assert!(conflict.message.contains("a/first") && conflict.message.contains("a/builder"));
    assert!(
        r.keys[&("b".into(), "third".into())].verdict.accepted,
        "another namespace's builder"
    );
    let bound: Vec<_> = r
        .snapshot
        .keys
        .iter()
        .map(|k| (k.name.as_str(), k.service_accounts.clone()))
        .collect();
    assert_eq!(
        bound,
        [
            ("first", vec!["a/builder".to_string(), "a/*".to_string()]),
            ("third", vec!["b/builder".to_string()])
        ]
    );
    switchboard_snapshot::validate(&r.snapshot).expect("the snapshot stays valid");
}

#[test]
fn expiry_with_an_offset_is_accepted_and_garbage_is_refused_alone() {
    let ok = key(
        "a",
        "k1",
        10,
        serde_json::json!({"secretName": "s1", "expiresAt": "2099-01-01T00:00:00+02:00"}),
    );
    let bad = key(
        "a",
        "k2",
        5,
        serde_json::json!({"secretName": "s2", "expiresAt": "2099-13-01T00:00:00Z"}),
    );
    let r = run(
        &[],
        &[ok, bad],
        &secrets(&[("a", "s1", "key", "v1"), ("a", "s2", "key", "v2")]),
    );
    assert!(r.keys[&("a".into(), "k1".into())].verdict.accepted);
    let v = &r.keys[&("a".into(), "k2".into())].verdict;
    assert_eq!(v.reason, "InvalidSpec");
    assert!(v.message.starts_with("spec.expiresAt"), "{}", v.message);
    switchboard_snapshot::validate(&r.snapshot).expect("the snapshot stays valid");
}

#[test]
fn keys_carry_only_hashes_and_fingerprints() {
    let mut k = McpKey::new(
        "ci",
        serde_json::from_value::<McpKeySpec>(
            serde_json::json!({"secretName": "ci-key", "accessGroups": ["g"]}),
        )
        .unwrap(),
    );
    k.metadata.namespace = Some("team".into());
    let r = run(
        &[],
        &[k.clone()],
        &secrets(&[("team", "ci-key", "key", "sk-abc")]),
    );
    let spec = &r.snapshot.keys[0];
    assert_eq!(
        spec.hash.as_deref(),
        Some(key_hash::hash_key("sk-abc").as_str())
    );
    assert!(spec.secret.is_none());
    assert!(
        !serde_json::to_string(&r.snapshot)
            .unwrap()
            .contains("sk-abc")
    );
    let missing = run(&[], &[k], &HashMap::new());
    assert_eq!(
        missing.keys[&("team".into(), "ci".into())].verdict.reason,
        "SecretNotFound"
    );
    assert!(missing.snapshot.keys.is_empty());
}
