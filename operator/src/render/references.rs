//! What one resource names of another's or of a Secret's or ConfigMap's, resolved: the
//! shared lookups every kind uses (Secret and ConfigMap values, TLS settings, durations, the
//! servers a reference may attach, tenancy), and the gateway's own field paths renamed to the
//! resource's.

use std::collections::HashSet;
use std::time::Duration;

use switchboard_crds::{ConfigMapKeyRef, SecretKeyRef};

use switchboard_snapshot::{SecretSource, ServerSpec, ToolFilter, VirtualServerSpec};

use super::input::*;
use super::verdict::*;

/// Which resources exist at all (accepted or not), to tell "not found" from "not accepted".
pub(crate) struct Existing {
    pub(crate) servers: HashSet<ObjectRef>,
    pub(crate) virtual_servers: HashSet<ObjectRef>,
}

impl Existing {
    pub(crate) fn of(input: &RenderInput<'_>) -> Existing {
        Existing {
            servers: input.servers.iter().map(object_ref).collect(),
            virtual_servers: input.virtual_servers.iter().map(object_ref).collect(),
        }
    }
}

/// What a ModelRoute may attach: accepted servers and virtual servers.
pub(crate) struct Attachable<'a> {
    pub(crate) servers: &'a [ServerSpec],
    pub(crate) virtual_servers: &'a [VirtualServerSpec],
}

impl Attachable<'_> {
    /// The id a `tools[].server` of a resource in `namespace` names (a name there, or
    /// `<namespace>/<name>`), when it is accepted and admits that namespace.
    pub(crate) fn resolve(
        &self,
        reference: &str,
        namespace: &str,
        field: &str,
        existing: &Existing,
    ) -> Result<String, Verdict> {
        let key = reference_key(reference, namespace);
        let id = id_of(&key);
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
pub(crate) fn reference_key(reference: &str, namespace: &str) -> ObjectRef {
    match reference.split_once('/') {
        Some((ns, n)) => (ns.to_string(), n.to_string()),
        None => (namespace.to_string(), reference.to_string()),
    }
}

/// Whether a resource of `owner` namespace admits `namespace` (its own, or listed in its
/// `allowedNamespaces`, `*` for all): tenancy for references, as for keys.
pub(crate) fn admits(
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

/// The snapshot's complaints about the one resource checked alone (entry 0 of `list`), each
/// field path said the way the user wrote it: `servers[0].auth.header` is the McpServer's
/// `spec.auth.header`; `renamed` maps the snapshot's fields whose resource field has another
/// name (`models[0].apiKey` is `spec.apiKeySecretRef`). Paths elsewhere stay as they are.
pub(crate) fn user_paths(
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

pub(crate) fn secret_value(
    secrets: &SecretData,
    namespace: &str,
    reference: &SecretKeyRef,
    field: &str,
) -> Result<String, Verdict> {
    data_value(secrets, "Secret", namespace, reference, field)
}

pub(crate) fn config_map_value(
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
pub(crate) fn data_value(
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
        .ok_or_else(|| Verdict {
            secret_missing: kind == "Secret",
            ..Verdict::rejected(
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
pub(crate) fn upstream_tls(
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

pub(crate) fn duration(value: Option<&str>, field: &str) -> Result<Option<Duration>, Verdict> {
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

pub(crate) fn limits(l: &switchboard_crds::RequestLimits) -> switchboard_snapshot::RequestLimits {
    switchboard_snapshot::RequestLimits {
        concurrent_requests: l.concurrent_requests,
        rate: l.rate.clone(),
        burst: l.burst,
    }
}

pub(crate) fn tool_filter(f: &switchboard_crds::ToolFilter) -> ToolFilter {
    ToolFilter {
        allow: f.allow.clone(),
        deny: f.deny.clone(),
    }
}
