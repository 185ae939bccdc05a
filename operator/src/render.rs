//! Rendering: McpServers, McpKeys, ModelRoutes, IdentityProviders and the Secrets they reference → one gateway
//! snapshot, plus a verdict per resource saying what happened to it. Pure: no API server, no clock, no I/O, so
//! every rule here is tested over plain values.
//!
//! A resource that cannot be rendered (missing Secret, prefix or model name taken, a tool server
//! that is not in the snapshot, invalid after resolution) is left out of the snapshot with a
//! verdict that says why; nothing else is affected (docs/architecture.md, invariant 9).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use kube::ResourceExt;
use switchboard_crds::model_route as crd_model;
use switchboard_crds::server::{AuthType, ClientAuth, ServerAuth};
use switchboard_crds::{
    ConfigMapKeyRef, IdentityProvider, McpKey, McpServer, McpVirtualServer, ModelRoute,
    SecretKeyRef,
};

use crate::reservations::{NameKind, Reservations};
use crate::upstream_policy::UpstreamPolicy;
use switchboard_snapshot::{
    ClientAuthMethod, GatewaySettings, HeaderSettings, KeySpec, ModelProvider, ModelSpec,
    ModelTools, OpenApiSpec, RequireApproval, SCHEMA_VERSION, SecretSource, ServerAddressPolicy,
    ServerSpec, Snapshot, StaticHeader, ToolFilter, ToolVisibility, UpstreamAuth,
    VirtualServerSpec, key_hash,
};

/// The key under which a McpKey's Secret holds the key.
pub const KEY_FIELD: &str = "key";

/// `(namespace, name)` of a resource.
pub type ObjectRef = (String, String);

/// Secret data by `(namespace, name)`, values decoded.
pub type SecretData = HashMap<ObjectRef, BTreeMap<String, Vec<u8>>>;

/// Why a resource is in the snapshot or not: the `reason` of its `Accepted` condition (and of
/// `Ready` for a key that is not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Accepted,
    InvalidSpec,
    InvalidSecret,
    SecretNotFound,
    ConfigMapNotFound,
    DuplicateKey,
    IdentityProviderNotFound,
    ModelNameConflict,
    NameConflict,
    PathConflict,
    PrefixConflict,
    NameReserved,
    ServerNotAccepted,
    ServerNotAdmitted,
    ServerNotFound,
    ServiceAccountConflict,
    UpstreamAddressDenied,
    UpstreamPolicyInvalid,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Accepted => "Accepted",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::InvalidSecret => "InvalidSecret",
            Reason::SecretNotFound => "SecretNotFound",
            Reason::ConfigMapNotFound => "ConfigMapNotFound",
            Reason::DuplicateKey => "DuplicateKey",
            Reason::IdentityProviderNotFound => "IdentityProviderNotFound",
            Reason::ModelNameConflict => "ModelNameConflict",
            Reason::NameConflict => "NameConflict",
            Reason::PathConflict => "PathConflict",
            Reason::PrefixConflict => "PrefixConflict",
            Reason::NameReserved => "NameReserved",
            Reason::ServerNotAccepted => "ServerNotAccepted",
            Reason::ServerNotAdmitted => "ServerNotAdmitted",
            Reason::ServerNotFound => "ServerNotFound",
            Reason::ServiceAccountConflict => "ServiceAccountConflict",
            Reason::UpstreamAddressDenied => "UpstreamAddressDenied",
            Reason::UpstreamPolicyInvalid => "UpstreamPolicyInvalid",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// (so a test reads `assert_eq!(verdict.reason, "PrefixConflict")`)
impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Whether a resource made it into the snapshot, and if not why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub accepted: bool,
    pub reason: Reason,
    /// Human-readable; names fields and other resources, never secret values.
    pub message: String,
}

impl Verdict {
    fn accepted(message: impl Into<String>) -> Verdict {
        Verdict {
            accepted: true,
            reason: Reason::Accepted,
            message: message.into(),
        }
    }
    fn rejected(reason: Reason, message: impl Into<String>) -> Verdict {
        Verdict {
            accepted: false,
            reason,
            message: message.into(),
        }
    }
}

/// Facts about a key that its status shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyOutcome {
    pub verdict: Verdict,
    pub fingerprint: Option<String>,
}

#[derive(Debug)]
pub struct Rendered {
    pub snapshot: Snapshot,
    pub servers: BTreeMap<ObjectRef, Verdict>,
    pub keys: BTreeMap<ObjectRef, KeyOutcome>,
    pub models: BTreeMap<ObjectRef, Verdict>,
    pub identity_providers: BTreeMap<ObjectRef, Verdict>,
    pub virtual_servers: BTreeMap<ObjectRef, Verdict>,
}

impl Rendered {
    /// With `--secret-selector`, a Secret that "does not exist" may only be unlabelled: say so
    /// where the user looks (the condition).
    pub fn note_secret_selector(&mut self, selector: &str) {
        let verdicts = self
            .servers
            .values_mut()
            .chain(self.models.values_mut())
            .chain(self.identity_providers.values_mut())
            .chain(self.virtual_servers.values_mut())
            .chain(self.keys.values_mut().map(|k| &mut k.verdict));
        for verdict in verdicts {
            if verdict.reason == Reason::SecretNotFound
                && verdict.message.ends_with("does not exist")
            {
                verdict.message.push_str(&format!(
                    " (the operator only sees Secrets labelled {selector})"
                ));
            }
        }
    }
}

/// Everything render needs besides the resources.
pub struct RenderInput<'a> {
    pub servers: &'a [McpServer],
    pub virtual_servers: &'a [McpVirtualServer],
    pub keys: &'a [McpKey],
    pub models: &'a [ModelRoute],
    pub identity_providers: &'a [IdentityProvider],
    pub secrets: &'a SecretData,
    /// ConfigMaps' data, by the same kind of reference (CA bundles may live in one).
    pub config_maps: &'a SecretData,
    pub settings: GatewaySettings,
    /// Which upstream addresses McpServers may use (admission; the gateway checks again).
    pub upstreams: &'a UpstreamPolicy,
    /// Namespaces with their own upstream policy (from their annotations), or the reason it
    /// does not parse.
    pub namespace_policies: &'a NamespacePolicies,
    /// Names an administrator reserved for some namespaces.
    pub reservations: &'a Reservations,
}

/// Namespace name → its upstream policy ([`crate::upstream_policy::namespace_policy`]).
pub type NamespacePolicies = BTreeMap<String, Result<ServerAddressPolicy, String>>;

pub fn render(input: RenderInput<'_>) -> Rendered {
    let mut servers: Vec<&McpServer> = input.servers.iter().collect();
    // The older resource keeps a contested prefix; ties break by namespace and name.
    servers.sort_by_key(|s| {
        (
            s.metadata.creation_timestamp.as_ref().map(|t| t.0),
            s.namespace(),
            s.name_any(),
        )
    });
    let mut verdicts = BTreeMap::new();
    let mut prefixes: HashMap<String, String> = HashMap::new();
    let mut specs = Vec::new();
    for server in servers {
        let key = object_ref(server);
        let id = format!("{}/{}", key.0, key.1);
        let spec = server_spec(server, input.secrets, input.config_maps).and_then(|mut spec| {
            spec.upstream_policy = namespace_policy(&input, &key.0)?;
            Ok(spec)
        });
        let verdict = match spec {
            Err(verdict) => verdict,
            Ok(spec) => match input
                .upstreams
                .check(&spec)
                .map_err(|m| (Reason::UpstreamAddressDenied, m))
                .and_then(|()| {
                    input
                        .reservations
                        .check(NameKind::Prefix, spec.prefix(), &key.0)
                        .map_err(|m| (Reason::NameReserved, m))
                }) {
                Err((reason, message)) => Verdict::rejected(reason, message),
                Ok(()) => match prefixes.get(spec.prefix()) {
                    Some(owner) => Verdict::rejected(
                        Reason::PrefixConflict,
                        format!(
                            "tool prefix {:?} is already used by McpServer {owner}",
                            spec.prefix()
                        ),
                    ),
                    None => match check_alone(&spec, &input.settings) {
                        Err(message) => Verdict::rejected(Reason::InvalidSpec, message),
                        Ok(()) => {
                            prefixes.insert(spec.prefix().to_string(), id.clone());
                            specs.push(spec);
                            Verdict::accepted(format!("routed as {id}"))
                        }
                    },
                },
            },
        };
        verdicts.insert(key, verdict);
    }
    specs.sort_by(|a, b| a.id().cmp(b.id()));
    let (virtual_servers, virtual_specs) = render_virtual_servers(&input, &specs);
    let (models, model_specs) = render_models(&input, &specs, &virtual_specs);
    let (identity_providers, provider_specs) = render_identity_providers(&input);

    let mut keys = BTreeMap::new();
    let mut key_specs = Vec::new();
    let mut by_hash: HashMap<String, String> = HashMap::new();
    let mut bound_accounts: HashMap<String, String> = HashMap::new();
    let mut ordered: Vec<&McpKey> = input.keys.iter().collect();
    // The older McpKey keeps a key two of them share.
    ordered.sort_by_key(|k| {
        (
            k.metadata.creation_timestamp.as_ref().map(|t| t.0),
            k.namespace(),
            k.name_any(),
        )
    });
    for key in ordered {
        let (mut outcome, spec) = key_spec(key, input.secrets);
        let (namespace, name) = object_ref(key);
        let spec = spec.and_then(|spec| {
            if let Some((j, missing)) = spec.people.iter().enumerate().find(|(_, p)| {
                !provider_specs
                    .iter()
                    .any(|s| s.namespace == namespace && s.name == p.provider)
            }) {
                outcome.verdict = Verdict::rejected(
                    Reason::IdentityProviderNotFound,
                    format!(
                        "spec.people[{j}].provider: IdentityProvider {namespace}/{} does not exist or is not accepted",
                        missing.provider
                    ),
                );
                return None;
            }
            let hash = spec.hash.clone().unwrap_or_default();
            if let Some(owner) = by_hash.get(&hash) {
                outcome.verdict = Verdict::rejected(
                    Reason::DuplicateKey,
                    format!("McpKey {owner} already uses the same key; every key must be unique"),
                );
                return None;
            }
            if let Err(message) = check_key_alone(&spec, &provider_specs) {
                outcome.verdict = Verdict::rejected(Reason::InvalidSpec, message);
                return None;
            }
            if let Some((account, owner)) = spec
                .service_accounts
                .iter()
                .find_map(|a| bound_accounts.get(a).map(|owner| (a, owner)))
            {
                outcome.verdict = Verdict::rejected(
                    Reason::ServiceAccountConflict,
                    format!("McpKey {owner} already binds ServiceAccount {account}"),
                );
                return None;
            }
            for account in &spec.service_accounts {
                bound_accounts.insert(account.clone(), format!("{namespace}/{name}"));
            }
            by_hash.insert(hash, format!("{namespace}/{name}"));
            Some(spec)
        });
        keys.insert((namespace, name), outcome);
        key_specs.extend(spec);
    }
    key_specs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Rendered {
        snapshot: Snapshot {
            version: SCHEMA_VERSION,
            generation: 0,
            gateway: input.settings,
            servers: specs,
            keys: key_specs,
            models: model_specs,
            identity_providers: provider_specs,
            virtual_servers: virtual_specs,
        },
        servers: verdicts,
        keys,
        models,
        identity_providers,
        virtual_servers,
    }
}

/// IdentityProviders → the snapshot's providers and a verdict each (checked alone the way the
/// gateway will, so one bad provider leaves only itself and the keys that name it out).
fn render_identity_providers(
    input: &RenderInput<'_>,
) -> (
    BTreeMap<ObjectRef, Verdict>,
    Vec<switchboard_snapshot::IdentityProviderSpec>,
) {
    let mut verdicts = BTreeMap::new();
    let mut specs = Vec::new();
    // One provider at most is brokered (the gateway's authorization server fronts one): the
    // older resource keeps it.
    let mut ordered: Vec<&IdentityProvider> = input.identity_providers.iter().collect();
    ordered.sort_by_key(|p| {
        (
            p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            p.namespace(),
            p.name_any(),
        )
    });
    let mut brokered_by: Option<String> = None;
    for provider in ordered {
        let key = object_ref(provider);
        let spec = identity_provider_spec(provider, input.secrets, input.config_maps);
        let verdict = match spec {
            Err(verdict) => verdict,
            Ok(spec) if spec.brokered.is_some() && brokered_by.is_some() => Verdict::rejected(
                Reason::InvalidSpec,
                format!(
                    "spec.brokered: IdentityProvider {} is brokered already (one at most)",
                    brokered_by.clone().unwrap_or_default()
                ),
            ),
            Ok(spec) => {
                let alone = Snapshot {
                    identity_providers: vec![spec.clone()],
                    ..Snapshot::default()
                };
                match switchboard_snapshot::validate(&alone) {
                    Err(e) => Verdict::rejected(
                        Reason::InvalidSpec,
                        user_paths(e, "identityProviders", &[]),
                    ),
                    Ok(()) => {
                        let message = format!("people of {} sign in", spec.issuer);
                        if spec.brokered.is_some() {
                            brokered_by = Some(format!("{}/{}", key.0, key.1));
                        }
                        specs.push(spec);
                        Verdict::accepted(message)
                    }
                }
            }
        };
        verdicts.insert(key, verdict);
    }
    specs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    (verdicts, specs)
}

fn identity_provider_spec(
    provider: &IdentityProvider,
    secrets: &SecretData,
    config_maps: &SecretData,
) -> Result<switchboard_snapshot::IdentityProviderSpec, Verdict> {
    let (namespace, name) = object_ref(provider);
    let spec = &provider.spec;
    let claims = spec.claims.clone().unwrap_or_default();
    let defaults = switchboard_snapshot::IdentityClaims::default();
    Ok(switchboard_snapshot::IdentityProviderSpec {
        issuer: spec.issuer.clone(),
        audiences: spec.audiences.clone(),
        algorithms: if spec.algorithms.is_empty() {
            switchboard_snapshot::default_algorithms()
        } else {
            spec.algorithms.iter().map(|a| a.as_str().into()).collect()
        },
        clock_skew: duration(spec.clock_skew.as_deref(), "spec.clockSkew")?
            .unwrap_or_else(switchboard_snapshot::default_clock_skew),
        claims: switchboard_snapshot::IdentityClaims {
            subject: claims.subject.unwrap_or(defaults.subject),
            groups: claims.groups.unwrap_or(defaults.groups),
        },
        required_claims: spec.required_claims.clone(),
        jwks_url: spec.jwks_url.clone(),
        scopes: spec.scopes.clone(),
        tls: spec
            .tls
            .as_ref()
            .map(|tls| upstream_tls(tls, &namespace, secrets, config_maps))
            .transpose()?,
        brokered: spec
            .brokered
            .as_ref()
            .map(|b| brokered(b, &namespace, secrets))
            .transpose()?,
        name,
        namespace,
    })
}

fn brokered(
    b: &switchboard_crds::identity_provider::Brokered,
    namespace: &str,
    secrets: &SecretData,
) -> Result<switchboard_snapshot::Brokered, Verdict> {
    let field = "spec.brokered.clientSecretRef";
    Ok(switchboard_snapshot::Brokered {
        client_id: b.client_id.clone(),
        client_secret: SecretSource::Value {
            value: secret_value(secrets, namespace, &b.client_secret_ref, field)?,
        },
        scopes: if b.scopes.is_empty() {
            switchboard_snapshot::default_brokered_scopes()
        } else {
            b.scopes.clone()
        },
        access_token_ttl: duration(
            b.access_token_ttl.as_deref(),
            "spec.brokered.accessTokenTtl",
        )?
        .unwrap_or_else(switchboard_snapshot::default_access_ttl),
        refresh_token_ttl: duration(
            b.refresh_token_ttl.as_deref(),
            "spec.brokered.refreshTokenTtl",
        )?
        .unwrap_or_else(switchboard_snapshot::default_refresh_ttl),
    })
}

/// ModelRoutes → model specs and verdicts. `servers` are the servers in the snapshot: a model
/// whose tools name any other server is left out (the gateway would refuse the snapshot).
fn render_models(
    input: &RenderInput<'_>,
    servers: &[ServerSpec],
    virtual_servers: &[VirtualServerSpec],
) -> (BTreeMap<ObjectRef, Verdict>, Vec<ModelSpec>) {
    let existing = Existing::of(input);
    let attachable = Attachable {
        servers,
        virtual_servers,
    };
    let mut routes: Vec<&ModelRoute> = input.models.iter().collect();
    // The older resource keeps a contested model name; ties break by namespace and name.
    routes.sort_by_key(|m| {
        (
            m.metadata.creation_timestamp.as_ref().map(|t| t.0),
            m.namespace(),
            m.name_any(),
        )
    });
    let mut verdicts = BTreeMap::new();
    let mut names: HashMap<String, String> = HashMap::new();
    let mut specs = Vec::new();
    for route in routes {
        let key = object_ref(route);
        let id = format!("{}/{}", key.0, key.1);
        let verdict = match model_spec(
            route,
            input.secrets,
            input.config_maps,
            &attachable,
            &existing,
        ) {
            Err(verdict) => verdict,
            Ok(spec) => {
                let taken = spec
                    .client_names()
                    .find_map(|n| names.get(n).map(|owner| (n.to_string(), owner.clone())));
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
                                names.insert(name.to_string(), id.clone());
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

/// Which resources exist at all (accepted or not), to tell "not found" from "not accepted".
struct Existing {
    servers: HashSet<ObjectRef>,
    virtual_servers: HashSet<ObjectRef>,
}

impl Existing {
    fn of(input: &RenderInput<'_>) -> Existing {
        Existing {
            servers: input.servers.iter().map(object_ref).collect(),
            virtual_servers: input.virtual_servers.iter().map(object_ref).collect(),
        }
    }
}

/// What a ModelRoute may attach: accepted servers and virtual servers.
struct Attachable<'a> {
    servers: &'a [ServerSpec],
    virtual_servers: &'a [VirtualServerSpec],
}

impl Attachable<'_> {
    /// The id a `tools[].server` of a resource in `namespace` names (a name there, or
    /// `<namespace>/<name>`), when it is accepted and admits that namespace.
    fn resolve(
        &self,
        reference: &str,
        namespace: &str,
        field: &str,
        existing: &Existing,
    ) -> Result<String, Verdict> {
        let key = reference_key(reference, namespace);
        let id = format!("{}/{}", key.0, key.1);
        if let Some(server) = self.servers.iter().find(|s| s.id() == id) {
            admits(
                "McpServer",
                &id,
                &server.allowed_namespaces,
                &server.namespace,
                namespace,
                field,
            )?;
            return Ok(id);
        }
        if let Some(vs) = self.virtual_servers.iter().find(|v| v.id() == id) {
            admits(
                "McpVirtualServer",
                &id,
                &vs.allowed_namespaces,
                &vs.namespace,
                namespace,
                field,
            )?;
            return Ok(id);
        }
        Err(if existing.servers.contains(&key) {
            not_accepted(field, "McpServer", &id)
        } else if existing.virtual_servers.contains(&key) {
            not_accepted(field, "McpVirtualServer", &id)
        } else {
            Verdict::rejected(
                Reason::ServerNotFound,
                format!("{field}: no McpServer or McpVirtualServer {id} exists"),
            )
        })
    }
}

/// `(namespace, name)` a reference names from a resource in `namespace`.
fn reference_key(reference: &str, namespace: &str) -> ObjectRef {
    match reference.split_once('/') {
        Some((ns, n)) => (ns.to_string(), n.to_string()),
        None => (namespace.to_string(), reference.to_string()),
    }
}

fn not_accepted(field: &str, kind: &str, id: &str) -> Verdict {
    Verdict::rejected(
        Reason::ServerNotAccepted,
        format!("{field}: {kind} {id} is not in the snapshot (see its Accepted condition)"),
    )
}

/// Whether a resource of `owner` namespace admits `namespace` (its own, or listed in its
/// `allowedNamespaces`, `*` for all): tenancy for references, as for keys.
fn admits(
    kind: &str,
    id: &str,
    allowed: &[String],
    owner: &str,
    namespace: &str,
    field: &str,
) -> Result<(), Verdict> {
    if owner == namespace || allowed.iter().any(|ns| ns == "*" || ns == namespace) {
        return Ok(());
    }
    Err(Verdict::rejected(
        Reason::ServerNotAdmitted,
        format!(
            "{field}: {kind} {id} does not admit namespace {namespace} (its spec.allowedNamespaces)"
        ),
    ))
}

/// McpVirtualServers → the snapshot's virtual servers and a verdict each. Every source must be
/// an accepted McpServer that admits the virtual server's namespace; a path must not be a
/// server's tool prefix (servers keep theirs) or an older virtual server's.
fn render_virtual_servers(
    input: &RenderInput<'_>,
    servers: &[ServerSpec],
) -> (BTreeMap<ObjectRef, Verdict>, Vec<VirtualServerSpec>) {
    let existing = Existing::of(input);
    let only_servers = Attachable {
        servers,
        virtual_servers: &[],
    };
    let mut ordered: Vec<&McpVirtualServer> = input.virtual_servers.iter().collect();
    ordered.sort_by_key(|v| {
        (
            v.metadata.creation_timestamp.as_ref().map(|t| t.0),
            v.namespace(),
            v.name_any(),
        )
    });
    let mut paths: HashMap<String, String> = servers
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
    for vs in ordered {
        let key = object_ref(vs);
        let id = format!("{}/{}", key.0, key.1);
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
            Ok(spec) => match paths.get(spec.path()) {
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
                        paths.insert(
                            spec.path().to_string(),
                            format!("the path of McpVirtualServer {id}"),
                        );
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

fn virtual_server_spec(
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
    })
}

/// Validates one virtual server beside the servers it selects from, the way the gateway will
/// (one bad virtual server never blocks the snapshot).
fn check_virtual_alone(
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

fn tool_filter(f: &switchboard_crds::ToolFilter) -> ToolFilter {
    ToolFilter {
        allow: f.allow.clone(),
        deny: f.deny.clone(),
    }
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

fn model_spec(
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
fn check_model_alone(
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

pub fn object_ref<K: kube::Resource>(object: &K) -> ObjectRef {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// Validates one server the way the gateway will, so nothing the gateway would refuse enters
/// the snapshot (and one bad server never blocks the others).
fn check_alone(spec: &ServerSpec, settings: &GatewaySettings) -> Result<(), String> {
    let alone = Snapshot {
        gateway: settings.clone(),
        servers: vec![spec.clone()],
        ..Snapshot::default()
    };
    switchboard_snapshot::validate(&alone).map_err(|e| user_paths(e, "servers", &[]))?;
    switchboard_core::table::RoutingTable::build(&alone)
        .map_err(|e| user_paths(e, "servers", &[]))?;
    Ok(())
}

/// Validates one key the way the gateway will (one bad key never blocks the snapshot), beside
/// the identity providers its people may name.
fn check_key_alone(
    spec: &KeySpec,
    providers: &[switchboard_snapshot::IdentityProviderSpec],
) -> Result<(), String> {
    let alone = Snapshot {
        keys: vec![spec.clone()],
        identity_providers: providers.to_vec(),
        ..Snapshot::default()
    };
    switchboard_snapshot::validate(&alone).map_err(|e| user_paths(e, "keys", &[]))
}

/// The snapshot's complaints about the one resource checked alone (entry 0 of `list`), each
/// field path said the way the user wrote it: `servers[0].auth.header` is the McpServer's
/// `spec.auth.header`; `renamed` maps the snapshot's fields whose resource field has another
/// name (`models[0].apiKey` is `spec.apiKeySecretRef`). Paths elsewhere stay as they are.
fn user_paths(
    error: switchboard_snapshot::SnapshotError,
    list: &str,
    renamed: &[(&str, &str)],
) -> String {
    let user_path = |path: &str| -> Option<String> {
        let field = path.strip_prefix(list)?.strip_prefix("[0]")?;
        let field = field.strip_prefix('.').unwrap_or(field);
        for (from, to) in renamed {
            if let Some(rest) = field.strip_prefix(from)
                && (rest.is_empty() || rest.starts_with(['.', '[']))
            {
                return Some(format!("{to}{rest}"));
            }
        }
        Some(if field.is_empty() {
            "spec".to_string()
        } else {
            format!("spec.{field}")
        })
    };
    let fields: Vec<String> = error
        .errors
        .into_iter()
        .map(|mut e| {
            if let Some(path) = user_path(&e.path) {
                e.path = path;
            }
            // A message may name a sibling field by its snapshot path too.
            e.message = e.message.replace(&format!("{list}[0]."), "spec.");
            e.to_string()
        })
        .collect();
    fields.join("; ")
}

fn secret_value(
    secrets: &SecretData,
    namespace: &str,
    reference: &SecretKeyRef,
    field: &str,
) -> Result<String, Verdict> {
    data_value(secrets, "Secret", namespace, reference, field)
}

fn config_map_value(
    config_maps: &SecretData,
    namespace: &str,
    reference: &ConfigMapKeyRef,
    field: &str,
) -> Result<String, Verdict> {
    let as_secret = SecretKeyRef {
        name: reference.name.clone(),
        key: reference.key.clone(),
    };
    data_value(config_maps, "ConfigMap", namespace, &as_secret, field)
}

/// A key of a Secret or a ConfigMap (`kind`), as text.
fn data_value(
    objects: &SecretData,
    kind: &str,
    namespace: &str,
    reference: &SecretKeyRef,
    field: &str,
) -> Result<String, Verdict> {
    let not_found = if kind == "Secret" {
        Reason::SecretNotFound
    } else {
        Reason::ConfigMapNotFound
    };
    let data = objects
        .get(&(namespace.to_string(), reference.name.clone()))
        .ok_or_else(|| {
            Verdict::rejected(
                not_found,
                format!(
                    "{field}: {kind} {namespace}/{} does not exist",
                    reference.name
                ),
            )
        })?;
    let bytes = data.get(&reference.key).ok_or_else(|| {
        Verdict::rejected(
            not_found,
            format!(
                "{field}: {kind} {namespace}/{} has no key {:?}",
                reference.name, reference.key
            ),
        )
    })?;
    String::from_utf8(bytes.clone())
        .map(|s| s.trim_end_matches(['\r', '\n']).to_string())
        .map_err(|_| {
            Verdict::rejected(
                Reason::InvalidSecret,
                format!("{field}: the {kind} value is not UTF-8"),
            )
        })
}

/// `spec.tls` with its references resolved (the PEM itself is checked by the snapshot's
/// validation, which names `spec.tls.*`).
fn upstream_tls(
    tls: &switchboard_crds::UpstreamTls,
    namespace: &str,
    secrets: &SecretData,
    config_maps: &SecretData,
) -> Result<switchboard_snapshot::UpstreamTls, Verdict> {
    let ca_bundle = match &tls.ca_bundle {
        None => None,
        Some(bundle) => Some(match (&bundle.secret_key_ref, &bundle.config_map_key_ref) {
            (Some(r), None) => secret_value(secrets, namespace, r, "spec.tls.caBundle")?,
            (None, Some(r)) => config_map_value(config_maps, namespace, r, "spec.tls.caBundle")?,
            _ => {
                return Err(Verdict::rejected(
                    Reason::InvalidSpec,
                    "spec.tls.caBundle: needs exactly one of secretKeyRef and configMapKeyRef",
                ));
            }
        }),
    };
    let client_certificate = match &tls.client_certificate {
        None => None,
        Some(c) => {
            let field = |key: &str| SecretKeyRef {
                name: c.secret_name.clone(),
                key: key.into(),
            };
            let at = "spec.tls.clientCertificate";
            Some(switchboard_snapshot::ClientCertificate {
                certificate: SecretSource::Value {
                    value: secret_value(secrets, namespace, &field("tls.crt"), at)?,
                },
                key: SecretSource::Value {
                    value: secret_value(secrets, namespace, &field("tls.key"), at)?,
                },
            })
        }
    };
    Ok(switchboard_snapshot::UpstreamTls {
        ca_bundle: ca_bundle.map(|value| SecretSource::Value { value }),
        client_certificate,
        server_name: tls.server_name.clone(),
    })
}

fn duration(value: Option<&str>, field: &str) -> Result<Option<Duration>, Verdict> {
    value
        .map(|v| {
            humantime::parse_duration(v).map_err(|_| {
                Verdict::rejected(
                    Reason::InvalidSpec,
                    format!("{field}: {v:?} is not a duration such as 30s"),
                )
            })
        })
        .transpose()
}

/// The upstream policy of a namespace, for its servers' specs; one that does not parse refuses
/// them all (a policy that cannot be read must not fail open).
fn namespace_policy(
    input: &RenderInput<'_>,
    namespace: &str,
) -> Result<Option<ServerAddressPolicy>, Verdict> {
    match input.namespace_policies.get(namespace) {
        None => Ok(None),
        Some(Ok(policy)) => Ok(Some(policy.clone())),
        Some(Err(message)) => Err(Verdict::rejected(
            Reason::UpstreamPolicyInvalid,
            format!("namespace {namespace}: {message}"),
        )),
    }
}

fn server_spec(
    server: &McpServer,
    secrets: &SecretData,
    config_maps: &SecretData,
) -> Result<ServerSpec, Verdict> {
    let (namespace, name) = object_ref(server);
    let spec = &server.spec;
    // A REST API's base URL has no path of its own unless given; an MCP endpoint is `/mcp`.
    let default_path = if spec.openapi.is_some() { "" } else { "/mcp" };
    let url = match (&spec.url, &spec.service, &spec.run) {
        (Some(url), None, None) => url.clone(),
        (None, Some(svc), None) => format!(
            "{}://{}.{namespace}.svc:{}{}",
            svc.scheme.as_deref().unwrap_or("http"),
            svc.name,
            svc.port,
            svc.path.as_deref().unwrap_or(default_path)
        ),
        (None, None, Some(run)) => crate::workload::url(&name, &namespace, run),
        _ => {
            return Err(Verdict::rejected(
                Reason::InvalidSpec,
                "exactly one of spec.url, spec.service and spec.run must be set",
            ));
        }
    };
    let mut static_headers = Vec::new();
    for (i, h) in spec
        .headers
        .iter()
        .flat_map(|h| &h.static_headers)
        .enumerate()
    {
        let value = match (&h.value, &h.secret_key_ref) {
            (Some(v), None) => v.clone(),
            (None, Some(r)) => {
                secret_value(secrets, &namespace, r, &format!("spec.headers.static[{i}]"))?
            }
            _ => {
                return Err(Verdict::rejected(
                    Reason::InvalidSpec,
                    format!(
                        "spec.headers.static[{i}]: needs exactly one of value and secretKeyRef"
                    ),
                ));
            }
        };
        static_headers.push(StaticHeader {
            name: h.name.clone(),
            value: SecretSource::Value { value },
        });
    }
    let filter = |f: &Option<switchboard_crds::ToolFilter>| {
        f.as_ref().map_or_else(ToolFilter::default, tool_filter)
    };
    Ok(ServerSpec {
        tls: spec
            .tls
            .as_ref()
            .map(|tls| upstream_tls(tls, &namespace, secrets, config_maps))
            .transpose()?,
        id: Some(format!("{namespace}/{name}")),
        name: name.clone(),
        namespace: namespace.clone(),
        url,
        tool_prefix: Some(spec.tool_prefix.clone().unwrap_or(name)),
        description: spec.description.clone(),
        timeout: duration(spec.timeout.as_deref(), "spec.timeout")?
            .unwrap_or(Duration::from_secs(30)),
        listing_timeout: duration(spec.listing_timeout.as_deref(), "spec.listingTimeout")?,
        access_groups: spec.access_groups.clone(),
        allowed_namespaces: spec.allowed_namespaces.clone(),
        allow_all_keys: spec.allow_all_keys,
        tools: filter(&spec.tools),
        headers: HeaderSettings {
            static_headers,
            forward: spec
                .headers
                .as_ref()
                .map(|h| h.forward.clone())
                .unwrap_or_default(),
        },
        auth: match &spec.auth {
            None => UpstreamAuth::None,
            Some(auth) => upstream_auth(auth, &namespace, secrets)?,
        },
        limits: spec.limits.as_ref().map(limits),
        openapi: spec
            .openapi
            .as_ref()
            .map(|o| openapi_spec(o, &namespace, secrets, config_maps))
            .transpose()?,
        upstream_policy: None, // the namespace's, set by render
        // The stdio bridge keeps a process per legacy session: each legacy client keeps its own.
        upstream_era: match (spec.upstream_era, &spec.run) {
            (Some(switchboard_crds::server::UpstreamEra::ByClient), _) => {
                switchboard_snapshot::UpstreamEra::ByClient
            }
            (None, Some(run)) if run.transport == switchboard_crds::run::RunTransport::Stdio => {
                switchboard_snapshot::UpstreamEra::ByClient
            }
            _ => switchboard_snapshot::UpstreamEra::Auto,
        },
    })
}

/// `spec.openapi` with its document resolved (the gateway compiles it; render checks it does,
/// see [`check_alone`], so a document that does not parse names its path in `Accepted`).
fn openapi_spec(
    openapi: &switchboard_crds::openapi::OpenApi,
    namespace: &str,
    secrets: &SecretData,
    config_maps: &SecretData,
) -> Result<OpenApiSpec, Verdict> {
    const FIELD: &str = "spec.openapi.document";
    let document = match &openapi.document {
        None => None,
        Some(d) => Some(match (&d.config_map_key_ref, &d.secret_key_ref) {
            (Some(r), None) => config_map_value(config_maps, namespace, r, FIELD)?,
            (None, Some(r)) => secret_value(secrets, namespace, r, FIELD)?,
            _ => {
                return Err(Verdict::rejected(
                    Reason::InvalidSpec,
                    format!("{FIELD}: needs exactly one of configMapKeyRef and secretKeyRef"),
                ));
            }
        }),
    };
    let selector = openapi.operations.clone().unwrap_or_default();
    Ok(OpenApiSpec {
        document: document.map(|value| SecretSource::Value { value }),
        document_url: openapi.document_url.clone(),
        operations: switchboard_snapshot::OperationSelector {
            operation_ids: selector.operation_ids,
            tags: selector.tags,
            paths: selector.paths,
            methods: selector.methods,
            exclude: selector.exclude,
        },
        overrides: openapi
            .overrides
            .iter()
            .map(|o| switchboard_snapshot::OperationOverride {
                operation: o.operation.clone(),
                name: o.name.clone(),
                description: o.description.clone(),
            })
            .collect(),
    })
}

fn limits(l: &switchboard_crds::RequestLimits) -> switchboard_snapshot::RequestLimits {
    switchboard_snapshot::RequestLimits {
        concurrent_requests: l.concurrent_requests,
        rate: l.rate.clone(),
        burst: l.burst,
    }
}

fn client_auth(c: Option<ClientAuth>) -> ClientAuthMethod {
    match c {
        Some(ClientAuth::ClientSecretBasic) => ClientAuthMethod::ClientSecretBasic,
        _ => ClientAuthMethod::ClientSecretPost,
    }
}

fn upstream_auth(
    auth: &ServerAuth,
    namespace: &str,
    secrets: &SecretData,
) -> Result<UpstreamAuth, Verdict> {
    let required = |field: &str| {
        Verdict::rejected(
            Reason::InvalidSpec,
            format!(
                "spec.auth.{field} is required for auth type {:?}",
                auth.auth_type
            ),
        )
    };
    let secret = || -> Result<SecretSource, Verdict> {
        let reference = auth
            .secret_ref
            .as_ref()
            .ok_or_else(|| required("secretRef"))?;
        Ok(SecretSource::Value {
            value: secret_value(secrets, namespace, reference, "spec.auth.secretRef")?,
        })
    };
    let id_or_ref = |literal: &Option<String>,
                     reference: &Option<SecretKeyRef>,
                     field: &str|
     -> Result<SecretSource, Verdict> {
        match (literal, reference) {
            (Some(v), None) => Ok(SecretSource::Value { value: v.clone() }),
            (None, Some(r)) => Ok(SecretSource::Value {
                value: secret_value(secrets, namespace, r, field)?,
            }),
            _ => Err(Verdict::rejected(
                Reason::InvalidSpec,
                format!("{field}: needs exactly one of clientId and clientIdRef"),
            )),
        }
    };
    let token_header = auth.upstream_token_header.clone();
    Ok(match auth.auth_type {
        AuthType::None => UpstreamAuth::None,
        AuthType::ApiKey => UpstreamAuth::ApiKey {
            secret: secret()?,
            header: auth
                .header
                .clone()
                .unwrap_or_else(|| "X-API-Key".to_string()),
            prefix: auth.prefix.clone(),
        },
        AuthType::Bearer => UpstreamAuth::Bearer {
            secret: secret()?,
            upstream_token_header: token_header,
        },
        AuthType::Basic => UpstreamAuth::Basic { secret: secret()? },
        AuthType::Token => UpstreamAuth::Token {
            secret: secret()?,
            upstream_token_header: token_header,
        },
        AuthType::Authorization => UpstreamAuth::Authorization { secret: secret()? },
        AuthType::Passthrough => UpstreamAuth::Passthrough {
            upstream_token_header: token_header,
        },
        AuthType::OauthDelegate => UpstreamAuth::OauthDelegate {
            header: auth.header.clone(),
            upstream_token_header: token_header,
        },
        AuthType::OAuth2ClientCredentials => {
            let o = auth.oauth2.as_ref().ok_or_else(|| required("oauth2"))?;
            UpstreamAuth::Oauth2ClientCredentials {
                token_url: o.token_url.clone(),
                client_id: id_or_ref(&o.client_id, &o.client_id_ref, "spec.auth.oauth2")?,
                client_secret: SecretSource::Value {
                    value: secret_value(
                        secrets,
                        namespace,
                        &o.client_secret_ref,
                        "spec.auth.oauth2.clientSecretRef",
                    )?,
                },
                scopes: o.scopes.clone(),
                audience: o.audience.clone(),
                client_auth: client_auth(o.client_auth),
                upstream_token_header: token_header,
            }
        }
        AuthType::TokenExchange => {
            let t = auth
                .token_exchange
                .as_ref()
                .ok_or_else(|| required("tokenExchange"))?;
            let client_secret = t
                .client_secret_ref
                .as_ref()
                .map(|r| {
                    secret_value(
                        secrets,
                        namespace,
                        r,
                        "spec.auth.tokenExchange.clientSecretRef",
                    )
                })
                .transpose()?
                .map(|value| SecretSource::Value { value });
            UpstreamAuth::TokenExchange {
                token_url: t.token_url.clone(),
                client_id: id_or_ref(&t.client_id, &t.client_id_ref, "spec.auth.tokenExchange")?,
                client_secret,
                audience: t.audience.clone(),
                scopes: t.scopes.clone(),
                subject_token_type: t
                    .subject_token_type
                    .clone()
                    .unwrap_or_else(|| "urn:ietf:params:oauth:token-type:access_token".to_string()),
                client_auth: client_auth(t.client_auth),
                cache_size: t.cache_size.map_or(10_000, |n| n.max(1) as usize),
                upstream_token_header: token_header,
            }
        }
    })
}

fn key_spec(key: &McpKey, secrets: &SecretData) -> (KeyOutcome, Option<KeySpec>) {
    let (namespace, name) = object_ref(key);
    let reference = SecretKeyRef {
        name: key.spec.secret_name.clone(),
        key: KEY_FIELD.to_string(),
    };
    let secret = match secret_value(secrets, &namespace, &reference, "spec.secretName") {
        Ok(s) if !s.is_empty() => s,
        Ok(_) => {
            let verdict = Verdict::rejected(
                Reason::InvalidSecret,
                format!("Secret {namespace}/{} holds an empty key", reference.name),
            );
            return (
                KeyOutcome {
                    verdict,
                    fingerprint: None,
                },
                None,
            );
        }
        Err(verdict) => {
            return (
                KeyOutcome {
                    verdict,
                    fingerprint: None,
                },
                None,
            );
        }
    };
    let digest = key_hash::key_digest(&secret);
    let spec = KeySpec {
        name,
        namespace,
        hash: Some(key_hash::hash_key(&secret)),
        secret: None,
        servers: key.spec.servers.clone(),
        access_groups: key.spec.access_groups.clone(),
        models: key.spec.models.clone(),
        // A key binds ServiceAccounts of its own namespace only.
        service_accounts: key
            .spec
            .service_accounts
            .iter()
            .map(|account| format!("{}/{account}", key.namespace().unwrap_or_default()))
            .collect(),
        people: key
            .spec
            .people
            .iter()
            .map(|p| switchboard_snapshot::PeopleBinding {
                provider: p.provider.clone(),
                subjects: p.subjects.clone(),
                groups: p.groups.clone(),
            })
            .collect(),
        tools: key
            .spec
            .tools
            .as_ref()
            .map_or_else(ToolFilter::default, |f| ToolFilter {
                allow: f.allow.clone(),
                deny: f.deny.clone(),
            }),
        expires_at: key.spec.expires_at.clone(),
        limits: key.spec.limits.as_ref().map(limits),
    };
    let outcome = KeyOutcome {
        verdict: Verdict::accepted(format!("key {} is served", key_hash::fingerprint(&digest))),
        fingerprint: Some(key_hash::fingerprint(&digest)),
    };
    (outcome, Some(spec))
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let verdict =
            |name: &str| r.virtual_servers[&("team".to_string(), name.to_string())].clone();
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
        let spec: switchboard_crds::ModelRouteSpec =
            serde_json::from_value(spec).expect("valid spec");
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

        let (v, _) = verdict(
            serde_json::json!({"caBundle": {"secretKeyRef": {"name": "ca", "key": "ca.crt"}}}),
        );
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
            v.message.ends_with(
                "(the operator only sees Secrets labelled switchboard.dev/credential=true)"
            ),
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
        let people =
            |provider: &str| serde_json::json!([{"provider": provider, "groups": ["team-a"]}]);
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
}
