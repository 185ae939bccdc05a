//! McpServers → the snapshot's servers.

use std::collections::BTreeMap;
use std::time::Duration;

use switchboard_crds::server::{AuthType, ClientAuth, ServerAuth};
use switchboard_crds::{McpServer, SecretKeyRef};

use crate::reservations::NameKind;
use switchboard_snapshot::{
    ClientAuthMethod, GatewaySettings, HeaderSettings, OpenApiSpec, Pinning, SecretSource,
    ServerAddressPolicy, ServerSpec, ServerTools, Snapshot, StaticHeader, UpstreamAuth,
};

use super::contested::*;
use super::input::*;
use super::references::*;
use super::verdict::*;

/// McpServers → the snapshot's servers (sorted by id) and a verdict each. A tool prefix two
/// servers want is the older one's ([`super::contested`]).
pub(crate) fn render_servers(
    input: &RenderInput<'_>,
) -> (BTreeMap<ObjectRef, Verdict>, Vec<ServerSpec>) {
    let mut verdicts = BTreeMap::new();
    let mut prefixes = Claims::default();
    let mut specs = Vec::new();
    for server in oldest_first(input.servers) {
        let key = object_ref(server);
        let id = id_of(&key);
        let spec = server_spec(server, input.secrets, input.config_maps).and_then(|mut spec| {
            spec.upstream_policy = namespace_policy(input, &key.0)?;
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
                Ok(()) => match prefixes.holder(spec.prefix()) {
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
                            prefixes.take(spec.prefix(), id.clone());
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
    (verdicts, specs)
}

/// Validates one server the way the gateway will, so nothing the gateway would refuse enters
/// the snapshot (and one bad server never blocks the others).
pub(crate) fn check_alone(spec: &ServerSpec, settings: &GatewaySettings) -> Result<(), String> {
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

/// The upstream policy of a namespace, for its servers' specs; one that does not parse refuses
/// them all (a policy that cannot be read must not fail open).
pub(crate) fn namespace_policy(
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

pub(crate) fn server_spec(
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
    let policy = match &spec.policy {
        None => None,
        Some(p) => Some(switchboard_snapshot::PolicyHook {
            url: p.url.clone(),
            timeout: duration(p.timeout.as_deref(), "spec.policy.timeout")?
                .unwrap_or(Duration::from_secs(2)),
            failure: match p.failure {
                Some(switchboard_crds::server::PolicyFailure::Open) => {
                    switchboard_snapshot::PolicyFailure::Open
                }
                _ => switchboard_snapshot::PolicyFailure::Closed,
            },
            phases: if p.phases.is_empty() {
                vec![
                    switchboard_snapshot::PolicyPhase::Request,
                    switchboard_snapshot::PolicyPhase::Response,
                ]
            } else {
                p.phases
                    .iter()
                    .map(|phase| match phase {
                        switchboard_crds::server::PolicyPhase::Request => {
                            switchboard_snapshot::PolicyPhase::Request
                        }
                        switchboard_crds::server::PolicyPhase::Response => {
                            switchboard_snapshot::PolicyPhase::Response
                        }
                    })
                    .collect()
            },
        }),
    };
    Ok(ServerSpec {
        policy,
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
        tools: server_tools(spec.tools.as_ref()),
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
pub(crate) fn openapi_spec(
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
        max_output_schema_bytes: openapi.max_output_schema_bytes,
        max_compiled_bytes: openapi.max_compiled_bytes,
    })
}

pub(crate) fn client_auth(c: Option<ClientAuth>) -> ClientAuthMethod {
    match c {
        Some(ClientAuth::ClientSecretBasic) => ClientAuthMethod::ClientSecretBasic,
        _ => ClientAuthMethod::ClientSecretPost,
    }
}

pub(crate) fn upstream_auth(
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
        AuthType::UserOAuth => {
            let u = auth
                .user_oauth
                .as_ref()
                .ok_or_else(|| required("userOAuth"))?;
            let client_secret = u
                .client_secret_ref
                .as_ref()
                .map(|r| secret_value(secrets, namespace, r, "spec.auth.userOAuth.clientSecretRef"))
                .transpose()?
                .map(|value| SecretSource::Value { value });
            UpstreamAuth::UserOauth {
                authorization_server: u.authorization_server.clone(),
                client_id: id_or_ref(&u.client_id, &u.client_id_ref, "spec.auth.userOAuth")?,
                client_secret,
                scopes: u.scopes.clone(),
                resource: u.resource.clone(),
                client_auth: client_auth(u.client_auth),
                upstream_token_header: token_header,
            }
        }
    })
}

/// The server's tools as the snapshot carries them (left out: every tool, pinning `warn`, no
/// approvals).
fn server_tools(tools: Option<&switchboard_crds::ServerTools>) -> ServerTools {
    let Some(tools) = tools else {
        return ServerTools::default();
    };
    ServerTools {
        allow: tools.allow.clone(),
        deny: tools.deny.clone(),
        pinning: match tools.pinning {
            None | Some(switchboard_crds::server::Pinning::Warn) => Pinning::Warn,
            Some(switchboard_crds::server::Pinning::Off) => Pinning::Off,
            Some(switchboard_crds::server::Pinning::Hold) => Pinning::Hold,
        },
        approved: tools.approved.clone(),
        required_scopes: tools.required_scopes.clone(),
    }
}
