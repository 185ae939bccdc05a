//! ModelRoutes → the snapshot's models.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::ResourceExt;
use switchboard_crds::ModelRoute;
use switchboard_crds::model_route as crd_model;

use crate::reservations::NameKind;
use switchboard_snapshot::{
    GatewaySettings, ModelProvider, ModelSpec, ModelTools, RequireApproval, SecretSource,
    ServerSpec, Snapshot, ToolFilter, ToolVisibility, VirtualServerSpec,
};

use super::contested::*;
use super::input::*;
use super::references::*;
use super::verdict::*;

/// ModelRoutes → model specs and verdicts. `servers` are the servers in the snapshot: a model
/// whose tools name any other server is left out (the gateway would refuse the snapshot).
pub(crate) fn render_models(
    input: &RenderInput<'_>,
    servers: &[ServerSpec],
    virtual_servers: &[VirtualServerSpec],
) -> (BTreeMap<ObjectRef, Verdict>, Vec<ModelSpec>) {
    let existing = Existing::of(input);
    let attachable = Attachable {
        servers,
        virtual_servers,
    };
    let mut verdicts = BTreeMap::new();
    // The older resource keeps a contested model name.
    let mut names = Claims::default();
    let mut specs = Vec::new();
    for route in oldest_first(input.models) {
        let key = object_ref(route);
        let id = id_of(&key);
        let verdict = match model_spec(
            route,
            input.secrets,
            input.config_maps,
            &attachable,
            &existing,
        ) {
            Err(verdict) => verdict,
            Ok(spec) => {
                let taken = spec.client_names().find_map(|n| {
                    names
                        .holder(n)
                        .map(|owner| (n.to_string(), owner.to_string()))
                });
                let reserved = spec
                    .client_names()
                    .find_map(|n| input.reservations.check(NameKind::Model, n, &key.0).err());
                match (reserved, taken) {
                    // (a reservation wins over an older claim: that is what it is for)
                    (Some(message), _) => Verdict::rejected(Reason::NameReserved, message),
                    (None, Some((name, owner))) => Verdict::rejected(
                        Reason::ModelNameConflict,
                        format!("model name {name:?} is already used by ModelRoute {owner}"),
                    ),
                    (None, None) => match check_model_alone(&spec, &attachable, &input.settings) {
                        Err(message) => Verdict::rejected(Reason::InvalidSpec, message),
                        Ok(()) => {
                            for name in spec.client_names() {
                                names.take(name, id.clone());
                            }
                            let served: Vec<&str> = spec.client_names().collect();
                            let message = format!("served as {} ({id})", served.join(", "));
                            specs.push(spec);
                            Verdict::accepted(message)
                        }
                    },
                }
            }
        };
        verdicts.insert(key, verdict);
    }
    specs.sort_by(|a, b| a.id().cmp(b.id()));
    (verdicts, specs)
}

/// The names clients send for a ModelRoute: `spec.modelNames`, else its name (what
/// `ModelSpec::client_names` says once rendered).
pub fn model_names(route: &ModelRoute) -> Vec<String> {
    if route.spec.model_names.is_empty() {
        vec![route.name_any()]
    } else {
        route.spec.model_names.clone()
    }
}

pub(crate) fn model_spec(
    route: &ModelRoute,
    secrets: &SecretData,
    config_maps: &SecretData,
    attachable: &Attachable<'_>,
    existing: &Existing,
) -> Result<ModelSpec, Verdict> {
    let (namespace, name) = object_ref(route);
    let spec = &route.spec;
    let api_key = spec
        .api_key_secret_ref
        .as_ref()
        .map(|r| secret_value(secrets, &namespace, r, "spec.apiKeySecretRef"))
        .transpose()?
        .map(|value| SecretSource::Value { value });
    let max_iterations = match spec.max_iterations {
        None => 8,
        Some(n) => u32::try_from(n).map_err(|_| {
            Verdict::rejected(
                Reason::InvalidSpec,
                "spec.maxIterations: must be between 1 and 64",
            )
        })?,
    };
    let mut tools = Vec::new();
    for (j, attached) in spec.tools.iter().enumerate() {
        let field = format!("spec.tools[{j}].server");
        let server_id = attachable.resolve(&attached.server, &namespace, &field, existing)?;
        tools.push(ModelTools {
            server: server_id,
            tools: attached
                .tools
                .as_ref()
                .map_or_else(ToolFilter::default, tool_filter),
            require_approval: match attached.require_approval {
                Some(crd_model::RequireApproval::Always) => RequireApproval::Always,
                Some(crd_model::RequireApproval::Never) | None => RequireApproval::Never,
            },
            visibility: match attached.visibility {
                Some(crd_model::ToolVisibility::Visible) => ToolVisibility::Visible,
                Some(crd_model::ToolVisibility::Hidden) | None => ToolVisibility::Hidden,
            },
        });
    }
    Ok(ModelSpec {
        tls: spec
            .tls
            .as_ref()
            .map(|tls| upstream_tls(tls, &namespace, secrets, config_maps))
            .transpose()?,
        id: Some(format!("{namespace}/{name}")),
        name,
        namespace,
        model_names: spec.model_names.clone(),
        provider: match spec.provider {
            crd_model::ModelProvider::Anthropic => ModelProvider::Anthropic,
            crd_model::ModelProvider::Openai => ModelProvider::Openai,
        },
        base_url: spec.base_url.clone(),
        upstream_model: spec.upstream_model.clone(),
        api_key,
        timeout: duration(spec.timeout.as_deref(), "spec.timeout")?
            .unwrap_or(Duration::from_secs(600)),
        max_iterations,
        tools,
        access_groups: spec.access_groups.clone(),
        allowed_namespaces: spec.allowed_namespaces.clone(),
        allow_all_keys: spec.allow_all_keys,
    })
}

/// Validates one model with the servers it attaches, the way the gateway will (one bad model
/// never blocks the snapshot).
pub(crate) fn check_model_alone(
    spec: &ModelSpec,
    attachable: &Attachable<'_>,
    settings: &GatewaySettings,
) -> Result<(), String> {
    let virtual_servers: Vec<VirtualServerSpec> = attachable
        .virtual_servers
        .iter()
        .filter(|v| spec.tools.iter().any(|t| t.server == v.id()))
        .cloned()
        .collect();
    // The servers it attaches, directly or behind a virtual server.
    let behind = |s: &ServerSpec| {
        spec.tools.iter().any(|t| t.server == s.id())
            || virtual_servers
                .iter()
                .any(|v| v.sources.iter().any(|src| src.server == s.id()))
    };
    let alone = Snapshot {
        gateway: settings.clone(),
        servers: attachable
            .servers
            .iter()
            .filter(|s| behind(s))
            .cloned()
            .collect(),
        models: vec![spec.clone()],
        virtual_servers,
        ..Snapshot::default()
    };
    const RENAMED: &[(&str, &str)] = &[
        ("apiKey", "spec.apiKeySecretRef"),
        ("name", "metadata.name"),
    ];
    switchboard_snapshot::validate(&alone).map_err(|e| user_paths(e, "models", RENAMED))?;
    switchboard_core::table::RoutingTable::build(&alone)
        .map_err(|e| user_paths(e, "models", RENAMED))?;
    Ok(())
}
