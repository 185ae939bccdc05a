//! Writing status: the conditions [`crate::status`] decided, by server-side apply, only when
//! they say something new; an event per transition (not per write).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

/// Most status fields one write leaves out for an older CRD before it gives up.
const MAX_UNDECLARED: usize = 4;
/// How long a status field an older CRD did not declare is left out of that kind's writes
/// before it is tried again (the CRD may have been upgraded since).
const UNDECLARED_RECHECK: Duration = Duration::from_secs(300);

/// Status fields (by kind) the installed CRDs did not declare, and when that was learned.
static UNDECLARED: Undeclared = Undeclared(Mutex::new(BTreeMap::new()));

struct Undeclared(Mutex<BTreeMap<(String, String), Instant>>);

impl Undeclared {
    fn holds(&self, kind: &str, field: &str) -> bool {
        let mut known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // (every status write asks, and the CRDs nearly always declare everything)
        if known.is_empty() {
            return false;
        }
        let key = (kind.to_string(), field.to_string());
        match known.get(&key) {
            Some(at) if at.elapsed() < UNDECLARED_RECHECK => true,
            Some(_) => {
                known.remove(&key);
                false
            }
            None => false,
        }
    }

    fn remember(&self, kind: &str, field: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((kind.to_string(), field.to_string()), Instant::now());
    }
}

/// The top-level status field a server-side apply was refused for because the stored schema
/// does not declare it: the API server says `... : .status.<field>...: field not declared in
/// schema` (today with HTTP 500, kubernetes/kubernetes#139253, so the message is what is read).
fn undeclared_status_field(e: &kube::Error) -> Option<String> {
    let kube::Error::Api(status) = e else {
        return None;
    };
    let end = status.message.find(": field not declared in schema")?;
    let path = status.message[..end].rsplit(' ').next()?;
    let field = path.strip_prefix(".status.")?;
    let top = field.split(['.', '[']).next()?;
    (!top.is_empty()).then(|| top.to_string())
}

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
    let kind = K::kind(&());
    let mut fields = fields;
    fields.retain(|field, _| !UNDECLARED.holds(&kind, field));
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
    // An operator upgraded before its CRDs writes fields the stored schema does not declare,
    // and server-side apply refuses the whole write for one of them: the rest of the status
    // (the conditions first of all) is written without it, and it is left out for a while.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let patch = json!({
            "apiVersion": K::api_version(&()),
            "kind": kind,
            "status": body,
        });
        let result = api
            .patch_status(
                &object.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await;
        let Err(e) = result else { break };
        let Some(field) = undeclared_status_field(&e).filter(|f| {
            attempts <= MAX_UNDECLARED
                && !matches!(f.as_str(), "conditions" | "observedGeneration")
                && body.get(f.as_str()).is_some()
        }) else {
            return Err(e);
        };
        tracing::warn!(
            kind = %kind,
            field = %format!("status.{field}"),
            "the installed CRD does not declare this status field: apply the chart's CRDs (the rest of the status is written without it)"
        );
        UNDECLARED.remember(&kind, &field);
        if let Some(map) = body.as_object_mut() {
            map.remove(&field);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16, message: &str) -> kube::Error {
        let status: kube::core::Status =
            serde_json::from_value(json!({"code": code, "message": message})).unwrap();
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn the_field_an_older_crd_does_not_declare_is_read_from_the_refusal() {
        // As the API server says it (kubernetes/kubernetes#139253: a 500 today).
        let e = refused(
            500,
            "failed to create typed patch object (default/defs; switchboard.dev/v1alpha1, Kind=McpServer): .status.toolReview: field not declared in schema",
        );
        assert_eq!(undeclared_status_field(&e).as_deref(), Some("toolReview"));
        let nested = refused(
            500,
            "failed to create typed patch object (x): .status.toolReview[0].held: field not declared in schema",
        );
        assert_eq!(
            undeclared_status_field(&nested).as_deref(),
            Some("toolReview")
        );
        // Anything else is no such refusal.
        assert_eq!(
            undeclared_status_field(&refused(500, ".spec.tools: field not declared in schema")),
            None
        );
        assert_eq!(
            undeclared_status_field(&refused(409, "Apply failed with 1 conflict")),
            None
        );
    }

    #[test]
    fn an_undeclared_field_is_left_out_for_a_while_per_kind() {
        UNDECLARED.remember("KindA", "extra");
        assert!(UNDECLARED.holds("KindA", "extra"));
        assert!(!UNDECLARED.holds("KindB", "extra"));
        assert!(!UNDECLARED.holds("KindA", "other"));
    }
}
