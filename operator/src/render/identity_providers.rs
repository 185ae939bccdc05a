//! IdentityProviders → the snapshot's identity providers.

use std::collections::BTreeMap;

use switchboard_crds::IdentityProvider;

use switchboard_snapshot::{SecretSource, Snapshot};

use super::contested::*;
use super::input::*;
use super::references::*;
use super::verdict::*;

/// The one role only one provider may have (the gateway's authorization server fronts one):
/// the older resource keeps it ([`super::contested`]).
const BROKERED: &str = "brokered";

/// IdentityProviders → the snapshot's providers and a verdict each (checked alone the way the
/// gateway will, so one bad provider leaves only itself and the keys that name it out).
pub(crate) fn render_identity_providers(
    input: &RenderInput<'_>,
) -> (
    BTreeMap<ObjectRef, Verdict>,
    Vec<switchboard_snapshot::IdentityProviderSpec>,
) {
    let mut verdicts = BTreeMap::new();
    let mut specs = Vec::new();
    // One provider at most is brokered (the gateway's authorization server fronts one): the
    // older resource keeps it.
    let mut brokered = Claims::default();
    for provider in oldest_first(input.identity_providers) {
        let key = object_ref(provider);
        let spec = identity_provider_spec(provider, input.secrets, input.config_maps);
        let verdict = match spec {
            Err(verdict) => verdict,
            Ok(spec)
                if spec.brokered.is_some()
                    && let Some(holder) = brokered.holder(BROKERED) =>
            {
                Verdict::rejected(
                    Reason::InvalidSpec,
                    format!(
                        "spec.brokered: IdentityProvider {holder} is brokered already (one at most)"
                    ),
                )
            }
            Ok(spec) => {
                // The provider that signs identity assertions is another resource: checked once
                // every provider's verdict is known (below).
                let mut checked = spec.clone();
                if let Some(assertions) = checked
                    .brokered
                    .as_mut()
                    .and_then(|b| b.identity_assertions.as_mut())
                {
                    assertions.provider = None;
                }
                let alone = Snapshot {
                    identity_providers: vec![checked],
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
                            brokered.take(BROKERED, id_of(&key));
                        }
                        specs.push(spec);
                        Verdict::accepted(message)
                    }
                }
            }
        };
        verdicts.insert(key, verdict);
    }
    // A brokered provider whose identity assertions another provider signs needs that one
    // accepted beside it (the gateway would refuse the whole snapshot otherwise).
    let accepted: std::collections::HashSet<(String, String)> = specs
        .iter()
        .map(|s| (s.namespace.clone(), s.name.clone()))
        .collect();
    specs.retain(|spec| {
        let signer = spec
            .brokered
            .as_ref()
            .and_then(|b| b.identity_assertions.as_ref())
            .and_then(|a| a.provider.as_ref());
        match signer {
            Some(name) if !accepted.contains(&(spec.namespace.clone(), name.clone())) => {
                verdicts.insert(
                    (spec.namespace.clone(), spec.name.clone()),
                    Verdict::rejected(
                        Reason::InvalidSpec,
                        format!(
                            "spec.brokered.identityAssertions.provider: IdentityProvider {}/{name} does not exist or is not accepted",
                            spec.namespace
                        ),
                    ),
                );
                false
            }
            _ => true,
        }
    });
    specs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    (verdicts, specs)
}

pub(crate) fn identity_provider_spec(
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

pub(crate) fn brokered(
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
        identity_assertions: b.identity_assertions.as_ref().map(|a| {
            switchboard_snapshot::IdentityAssertions {
                provider: a.provider.clone(),
            }
        }),
    })
}
