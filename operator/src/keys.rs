//! McpKey Secrets: the operator generates a key when the named Secret does not hold one, and
//! owns the Secret it creates (so it goes away with the McpKey). Only hashes leave the Secret.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use switchboard_crds::McpKey;

use crate::labels::MANAGED_BY;
use crate::render::{KEY_FIELD, SecretData};

/// A new gateway key: 32 random bytes, recognisable by its prefix in leak scanners.
pub(crate) fn generate_key() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("sk-sb-{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// Makes sure every McpKey's Secret holds a key. Returns how many Secrets were written (their
/// watch events trigger the next render).
pub(crate) async fn ensure_key_secrets(
    client: &kube::Client,
    keys: &[McpKey],
    secrets: &SecretData,
) -> usize {
    let mut written = 0;
    for key in keys {
        let namespace = key.namespace().unwrap_or_default();
        let name = &key.spec.secret_name;
        let existing = secrets.get(&(namespace.clone(), name.clone()));
        if existing.is_some_and(|data| data.get(KEY_FIELD).is_some_and(|v| !v.is_empty())) {
            continue;
        }
        let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
        let data = BTreeMap::from([(
            KEY_FIELD.to_string(),
            ByteString(generate_key().into_bytes()),
        )]);
        let result = if existing.is_some() {
            // The user's Secret without a key: add one, leave everything else alone.
            let patch = serde_json::json!({ "data": data });
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
        } else {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(namespace.clone()),
                    labels: Some(BTreeMap::from([(
                        MANAGED_BY.0.to_string(),
                        MANAGED_BY.1.to_string(),
                    )])),
                    owner_references: key.controller_owner_ref(&()).map(|o| vec![o]),
                    ..Default::default()
                },
                data: Some(data),
                type_: Some("Opaque".into()),
                ..Default::default()
            };
            api.create(&PostParams::default(), &secret)
                .await
                .map(|_| ())
        };
        match result {
            Ok(()) => {
                tracing::info!(key = %format!("{namespace}/{}", key.name_any()), secret = %name, "generated a gateway key");
                written += 1;
            }
            Err(e) => {
                tracing::warn!(secret = %format!("{namespace}/{name}"), error = %e, "could not write the key Secret")
            }
        }
    }
    written
}
