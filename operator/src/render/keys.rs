//! McpKeys → the snapshot's keys.

use std::collections::BTreeMap;

use kube::ResourceExt;
use switchboard_crds::{McpKey, SecretKeyRef};

use switchboard_snapshot::{KeySpec, Snapshot, ToolFilter, key_hash};

use super::contested::*;
use super::input::*;
use super::references::*;
use super::verdict::*;

/// The key under which a McpKey's Secret holds the key.
pub(crate) const KEY_FIELD: &str = "key";

/// McpKeys → the snapshot's keys (sorted by namespace and name) and an outcome each. A key
/// two McpKeys share, or a ServiceAccount two bind, is the older one's
/// ([`super::contested`]); a key naming an identity provider that is not accepted is left out.
pub(crate) fn render_keys(
    input: &RenderInput<'_>,
    provider_specs: &[switchboard_snapshot::IdentityProviderSpec],
) -> (BTreeMap<ObjectRef, KeyOutcome>, Vec<KeySpec>) {
    let mut keys = BTreeMap::new();
    let mut key_specs = Vec::new();
    // The older McpKey keeps a key two of them share, and a ServiceAccount two of them bind.
    let mut by_hash = Claims::default();
    let mut bound_accounts = Claims::default();
    for key in oldest_first(input.keys) {
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
            if let Some(owner) = by_hash.holder(&hash) {
                outcome.verdict = Verdict::rejected(
                    Reason::DuplicateKey,
                    format!("McpKey {owner} already uses the same key; every key must be unique"),
                );
                return None;
            }
            if let Err(message) = check_key_alone(&spec, provider_specs) {
                outcome.verdict = Verdict::rejected(Reason::InvalidSpec, message);
                return None;
            }
            if let Some((account, owner)) = spec
                .service_accounts
                .iter()
                .find_map(|a| bound_accounts.holder(a).map(|owner| (a, owner)))
            {
                outcome.verdict = Verdict::rejected(
                    Reason::ServiceAccountConflict,
                    format!("McpKey {owner} already binds ServiceAccount {account}"),
                );
                return None;
            }
            for account in &spec.service_accounts {
                bound_accounts.take(account.clone(), format!("{namespace}/{name}"));
            }
            by_hash.take(hash, format!("{namespace}/{name}"));
            Some(spec)
        });
        keys.insert((namespace, name), outcome);
        key_specs.extend(spec);
    }
    key_specs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    (keys, key_specs)
}

/// Validates one key the way the gateway will (one bad key never blocks the snapshot), beside
/// the identity providers its people may name.
pub(crate) fn check_key_alone(
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

pub(crate) fn key_spec(key: &McpKey, secrets: &SecretData) -> (KeyOutcome, Option<KeySpec>) {
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
        arguments: argument_rules(&key.spec.arguments),
        expires_at: key.spec.expires_at.clone(),
        limits: key.spec.limits.as_ref().map(limits),
    };
    let outcome = KeyOutcome {
        verdict: Verdict::accepted(format!("key {} is served", key_hash::fingerprint(&digest))),
        fingerprint: Some(key_hash::fingerprint(&digest)),
    };
    (outcome, Some(spec))
}

/// An McpKey's or McpVirtualServer's `spec.arguments` as the snapshot carries them (checked
/// by the loader's validation, which names the field).
pub(crate) fn argument_rules(
    rules: &[switchboard_crds::key::ArgumentRule],
) -> Vec<switchboard_snapshot::ArgumentRule> {
    rules
        .iter()
        .map(|a| switchboard_snapshot::ArgumentRule {
            tools: a.tools.clone(),
            rule: a.rule.clone(),
            message: a.message.clone(),
            bind: a.bind.clone(),
        })
        .collect()
}
