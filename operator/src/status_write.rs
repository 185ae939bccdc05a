//! Writing status: the conditions [`crate::status`] decided, by server-side apply, only when
//! they say something new; an event per transition (not per write).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::Recorder;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use switchboard_crds::{
    Condition, IdentityProviderStatus, McpKey, McpServerStatus, McpVirtualServerStatus,
    ModelRouteStatus,
};

use crate::render::KeyOutcome;
use crate::status::{Desired, conditions, differs, transitions};

pub(crate) const FIELD_MANAGER: &str = "switchboard-operator";

/// The status of a kind whose conditions the operator writes (all but McpKey, whose status
/// has fields of its own: [`write_key`]).
pub(crate) trait Conditioned: serde::Serialize + Default + Clone {
    fn conditions(&self) -> &[Condition];
    fn observed_generation(&self) -> Option<i64>;
}

macro_rules! conditioned {
    ($($status:ty),*) => {$(
        impl Conditioned for $status {
            fn conditions(&self) -> &[Condition] {
                &self.conditions
            }
            fn observed_generation(&self) -> Option<i64> {
                self.observed_generation
            }
        }
    )*};
}
conditioned!(
    McpServerStatus,
    McpVirtualServerStatus,
    ModelRouteStatus,
    IdentityProviderStatus
);

/// Writes an object's status (`status`, as stored) if it changed; publishes events for
/// transitions.
pub async fn write<K, S>(
    client: &kube::Client,
    recorder: &Recorder,
    object: &K,
    status: Option<&S>,
    desired: &[Desired],
    fields: BTreeMap<&'static str, serde_json::Value>,
) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
    S: Conditioned,
{
    let status = status.cloned().unwrap_or_default();
    let current = CurrentStatus {
        conditions: status.conditions(),
        observed_generation: status.observed_generation(),
        fields: serde_json::to_value(&status).unwrap_or_default(),
    };
    write_status(client, recorder, object, &current, desired, fields).await
}

/// A resource's status as stored.
struct CurrentStatus<'a> {
    conditions: &'a [Condition],
    observed_generation: Option<i64>,
    /// The whole status as JSON, to compare the extra fields with.
    fields: serde_json::Value,
}

/// Server-side applies `observedGeneration`, the conditions and `fields` to the status of
/// `object` when any of them changed.
async fn write_status<K>(
    client: &kube::Client,
    recorder: &Recorder,
    object: &K,
    current: &CurrentStatus<'_>,
    desired: &[Desired],
    fields: BTreeMap<&'static str, serde_json::Value>,
) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let generation = object.meta().generation;
    let wanted = conditions(desired, current.conditions, generation);
    let fields_changed = fields
        .iter()
        .any(|(k, v)| current.fields.get(*k) != Some(v))
        || current.observed_generation != generation;
    if !differs(&wanted, current.conditions) && !fields_changed {
        return Ok(false);
    }
    let mut body = json!({ "observedGeneration": generation, "conditions": wanted });
    for (k, v) in fields {
        body[k] = v;
    }
    let api: Api<K> = Api::namespaced(client.clone(), &object.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": body,
    });
    api.patch_status(
        &object.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    announce(recorder, object, &wanted, current.conditions).await;
    Ok(true)
}

pub(crate) async fn write_key(
    client: &kube::Client,
    recorder: &Recorder,
    key: &McpKey,
    outcome: &KeyOutcome,
    desired: &[Desired],
) -> Result<bool, kube::Error> {
    let status = key.status.clone().unwrap_or_default();
    let generation = key.metadata.generation;
    let wanted = conditions(desired, &status.conditions, generation);
    let unchanged = !differs(&wanted, &status.conditions)
        && status.fingerprint == outcome.fingerprint
        && status.secret_name.as_deref() == Some(key.spec.secret_name.as_str())
        && status.observed_generation == generation;
    if unchanged {
        return Ok(false);
    }
    let api: Api<McpKey> = Api::namespaced(client.clone(), &key.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": "switchboard.dev/v1alpha1",
        "kind": "McpKey",
        "status": {
            "observedGeneration": generation,
            "fingerprint": outcome.fingerprint,
            "secretName": key.spec.secret_name,
            "conditions": wanted,
        }
    });
    api.patch_status(
        &key.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    announce(recorder, key, &wanted, &status.conditions).await;
    Ok(true)
}

/// One event per condition whose status or reason changed (not per write).
async fn announce<K>(recorder: &Recorder, object: &K, wanted: &[Condition], current: &[Condition])
where
    K: Resource<DynamicType = ()>,
{
    let regarding = object.object_ref(&());
    for mut event in transitions(wanted, current) {
        // A related field of this object: the object's reference, with the field.
        if let Some(related) = event.secondary.as_mut() {
            *related = ObjectReference {
                field_path: related.field_path.take(),
                ..regarding.clone()
            };
        }
        if let Err(e) = recorder.publish(&event, &regarding).await {
            tracing::debug!(error = %e, "could not publish an event");
        }
    }
}
