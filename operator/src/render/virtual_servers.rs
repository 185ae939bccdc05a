//! McpVirtualServers → the snapshot's virtual servers.

use std::collections::BTreeMap;

use switchboard_crds::McpVirtualServer;

use crate::reservations::NameKind;
use switchboard_snapshot::{GatewaySettings, ServerSpec, Snapshot, VirtualServerSpec};

use super::contested::*;
use super::input::*;
use super::references::*;
use super::verdict::*;

/// McpVirtualServers → the snapshot's virtual servers and a verdict each. Every source must be
/// an accepted McpServer that admits the virtual server's namespace; a path must not be a
/// server's tool prefix (servers keep theirs) or an older virtual server's.
pub(crate) fn render_virtual_servers(
    input: &RenderInput<'_>,
    servers: &[ServerSpec],
) -> (BTreeMap<ObjectRef, Verdict>, Vec<VirtualServerSpec>) {
    let existing = Existing::of(input);
    let only_servers = Attachable {
        servers,
        virtual_servers: &[],
    };
    // Servers keep their prefixes; the older virtual server keeps a contested path.
    let mut paths: Claims = servers
        .iter()
        .map(|s| {
            (
                s.prefix().to_string(),
                format!("the tool prefix of McpServer {}", s.id()),
            )
        })
        .collect();
    let mut verdicts = BTreeMap::new();
    let mut specs = Vec::new();
    for vs in oldest_first(input.virtual_servers) {
        let key = object_ref(vs);
        let id = id_of(&key);
        let verdict = match virtual_server_spec(vs, &only_servers, &existing) {
            Err(verdict) => verdict,
            // Keys and ModelRoutes name both kinds alike (a name, or `<namespace>/<name>`).
            Ok(_) if existing.servers.contains(&key) => Verdict::rejected(
                Reason::NameConflict,
                format!(
                    "McpServer {id} has the same namespace and name; keys and ModelRoutes could not tell them apart"
                ),
            ),
            Ok(spec)
                if let Err(message) =
                    input
                        .reservations
                        .check(NameKind::Prefix, spec.path(), &key.0) =>
            {
                Verdict::rejected(Reason::NameReserved, message)
            }
            Ok(spec) => match paths.holder(spec.path()) {
                Some(owner) => Verdict::rejected(
                    Reason::PathConflict,
                    format!(
                        "path {:?} (/mcp/{}) is already {owner}",
                        spec.path(),
                        spec.path()
                    ),
                ),
                None => match check_virtual_alone(&spec, servers, &input.settings) {
                    Err(message) => Verdict::rejected(Reason::InvalidSpec, message),
                    Ok(()) => {
                        paths.take(spec.path(), format!("the path of McpVirtualServer {id}"));
                        let message = format!("served at /mcp/{} ({id})", spec.path());
                        specs.push(spec);
                        Verdict::accepted(message)
                    }
                },
            },
        };
        verdicts.insert(key, verdict);
    }
    specs.sort_by(|a, b| a.id().cmp(b.id()));
    (verdicts, specs)
}

pub(crate) fn virtual_server_spec(
    vs: &McpVirtualServer,
    servers: &Attachable<'_>,
    existing: &Existing,
) -> Result<VirtualServerSpec, Verdict> {
    use switchboard_snapshot::{ParameterOverride, ToolOverride, VirtualSource};
    let (namespace, name) = object_ref(vs);
    let spec = &vs.spec;
    let mut sources = Vec::new();
    for (j, source) in spec.sources.iter().enumerate() {
        let field = format!("spec.sources[{j}].server");
        let server = servers.resolve(&source.server, &namespace, &field, existing)?;
        sources.push(VirtualSource {
            server,
            tools: source.tools.as_ref().map(tool_filter),
            prompts: source.prompts.as_ref().map(tool_filter),
            resources: source.resources.as_ref().map(tool_filter),
            overrides: source
                .overrides
                .iter()
                .map(|o| ToolOverride {
                    tool: o.tool.clone(),
                    name: o.name.clone(),
                    title: o.title.clone(),
                    description: o.description.clone(),
                    description_suffix: o.description_suffix.clone(),
                    parameters: o
                        .parameters
                        .iter()
                        .map(|(p, n)| {
                            let narrowed = ParameterOverride {
                                fixed: n.fixed.clone(),
                                allowed: n.allowed.clone(),
                                description: n.description.clone(),
                            };
                            (p.clone(), narrowed)
                        })
                        .collect(),
                })
                .collect(),
        });
    }
    Ok(VirtualServerSpec {
        id: Some(format!("{namespace}/{name}")),
        path: Some(spec.path.clone().unwrap_or_else(|| name.clone())),
        name,
        namespace,
        description: spec.description.clone(),
        sources,
        access_groups: spec.access_groups.clone(),
        allowed_namespaces: spec.allowed_namespaces.clone(),
        allow_all_keys: spec.allow_all_keys,
        arguments: super::keys::argument_rules(&spec.arguments),
        search: spec.search.as_ref().map(|s| {
            let mut search = switchboard_snapshot::ToolSearch {
                pinned: s.pinned.clone(),
                ..Default::default()
            };
            if let Some(results) = s.results {
                search.results = results;
            }
            search
        }),
    })
}

/// Validates one virtual server beside the servers it selects from, the way the gateway will
/// (one bad virtual server never blocks the snapshot).
pub(crate) fn check_virtual_alone(
    spec: &VirtualServerSpec,
    servers: &[ServerSpec],
    settings: &GatewaySettings,
) -> Result<(), String> {
    let alone = Snapshot {
        gateway: settings.clone(),
        servers: servers
            .iter()
            .filter(|s| spec.sources.iter().any(|src| src.server == s.id()))
            .cloned()
            .collect(),
        virtual_servers: vec![spec.clone()],
        ..Snapshot::default()
    };
    switchboard_snapshot::validate(&alone).map_err(|e| user_paths(e, "virtualServers", &[]))?;
    switchboard_core::table::RoutingTable::build(&alone)
        .map_err(|e| user_paths(e, "virtualServers", &[]))?;
    Ok(())
}
