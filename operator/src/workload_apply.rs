//! Writes what `spec.run` asks for ([`crate::workload`]), by server-side apply under the
//! operator's field manager, from the lease holder's reconcile pass.
//!
//! A server's objects are applied when what the operator wants changed (a digest of it rides
//! on the Deployment as an annotation), when the Deployment's replicas drifted from it, and
//! otherwise at least every [`RESYNC`], which puts back anything else someone changed. The
//! bridge's key Secret is made once and kept; the NetworkPolicy is applied before the
//! Deployment and deleted after it. Objects of a server whose `spec.run` went (or
//! changed transport, or dropped autoscaling) are deleted, but for the key Secret (the operator
//! deletes no Secret); a deleted McpServer's go with it (owner references).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use sha2::Digest as _;
use switchboard_crds::McpServer;
use switchboard_crds::run::RunTransport;

use crate::render::SecretData;
use crate::status_write::FIELD_MANAGER;
use crate::workload::{self, BRIDGE_KEY_FIELD, Names, SERVER_LABEL, Settings};

/// Anything someone changed on a server's objects is put back within this.
const RESYNC: Duration = Duration::from_secs(60);
const APPLIED: &str = "switchboard.dev/applied";

/// When each server's objects were last applied (the lease holder's memory; a new holder
/// applies everything once), and why the last apply failed where it did (the API server's
/// words: a bad volume, a quota; shown in the `Running` condition).
#[derive(Default)]
pub struct Applied {
    at: HashMap<(String, String), Instant>,
    pub refused: HashMap<(String, String), String>,
}

pub async fn apply(
    client: &kube::Client,
    settings: &Settings,
    servers: &[McpServer],
    deployments: &[Arc<Deployment>],
    secrets: &SecretData,
    applied: &mut Applied,
) {
    let observed: BTreeMap<(String, String), &Deployment> = deployments
        .iter()
        .filter_map(|d| {
            let server = d.labels().get(SERVER_LABEL)?.clone();
            Some(((d.namespace().unwrap_or_default(), server), d.as_ref()))
        })
        .collect();
    let mut running = std::collections::BTreeSet::new();
    for server in servers {
        let Some(run) = &server.spec.run else {
            continue;
        };
        let namespace = server.namespace().unwrap_or_default();
        let name = server.name_any();
        let key = (namespace.clone(), name.clone());
        running.insert(key.clone());
        let mut deployment = workload::deployment(server, run, settings);
        let service = workload::service(server, run);
        let peers = workload::peers(server, run);
        let autoscaler = workload::autoscaler(server, run);
        let fence = workload::network_policy(server, run, settings);
        let digest = digest(&(&deployment, &service, &peers, &autoscaler, &fence));
        deployment
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(APPLIED.into(), digest.clone());
        let current = observed.get(&key);
        let unchanged = current.is_some_and(|d| {
            d.annotations().get(APPLIED) == Some(&digest)
                && (run.autoscaling.is_some()
                    || d.spec.as_ref().and_then(|s| s.replicas)
                        == deployment.spec.as_ref().and_then(|s| s.replicas))
        });
        let recent = applied.at.get(&key).is_some_and(|at| at.elapsed() < RESYNC);
        let names = Names::of(&name);
        if run.transport == RunTransport::Stdio {
            ensure_bridge_key(client, server, &names.bridge_key, secrets).await;
        }
        if unchanged && recent {
            continue;
        }
        let result = async {
            // The fence first: a pod never runs without it.
            match &fence {
                Some(policy) => patch(client, &namespace, policy).await?,
                None => delete::<NetworkPolicy>(client, &namespace, &names.workload).await?,
            }
            patch(client, &namespace, &deployment).await?;
            patch(client, &namespace, &service).await?;
            match &peers {
                Some(peers) => patch(client, &namespace, peers).await?,
                None => delete::<Service>(client, &namespace, &names.peers).await?,
            }
            match &autoscaler {
                Some(hpa) => patch(client, &namespace, hpa).await?,
                None => {
                    delete::<HorizontalPodAutoscaler>(client, &namespace, &names.workload).await?
                }
            }
            Ok::<(), kube::Error>(())
        }
        .await;
        match result {
            Ok(()) => {
                if !unchanged {
                    tracing::info!(server = %format!("{namespace}/{name}"), "applied the server's workload");
                }
                applied.refused.remove(&key);
                applied.at.insert(key, Instant::now());
            }
            Err(e) => {
                tracing::warn!(server = %format!("{namespace}/{name}"), error = %e, "could not apply the server's workload; retrying");
                let message = match &e {
                    kube::Error::Api(status) => status.message.clone(),
                    other => other.to_string(),
                };
                applied.refused.insert(key, message);
            }
        }
    }
    // A server that stopped asking to be run: its objects go.
    for ((namespace, name), deployment) in &observed {
        if running.contains(&(namespace.clone(), name.clone())) {
            continue;
        }
        // Only what this server still owns (a deleted server's are the garbage collector's).
        let Some(server) = servers
            .iter()
            .find(|s| s.namespace().as_deref() == Some(namespace) && &s.name_any() == name)
        else {
            continue;
        };
        if !owned_by(deployment, server) {
            continue;
        }
        let names = Names::of(name);
        let result = async {
            delete::<HorizontalPodAutoscaler>(client, namespace, &names.workload).await?;
            delete::<Deployment>(client, namespace, &names.workload).await?;
            delete::<Service>(client, namespace, &names.workload).await?;
            delete::<Service>(client, namespace, &names.peers).await?;
            // Last, after the pods it fences.
            delete::<NetworkPolicy>(client, namespace, &names.workload).await?;
            // (the bridges' key Secret stays until the McpServer goes: the operator deletes no
            // Secret, and a key on its own opens nothing)
            Ok::<(), kube::Error>(())
        }
        .await;
        match result {
            Ok(()) => {
                tracing::info!(server = %format!("{namespace}/{name}"), "deleted the workload of a server no longer run")
            }
            Err(e) => {
                tracing::warn!(server = %format!("{namespace}/{name}"), error = %e, "could not delete a workload; retrying")
            }
        }
        applied.at.remove(&(namespace.clone(), name.clone()));
        applied.refused.remove(&(namespace.clone(), name.clone()));
    }
}

fn owned_by(deployment: &Deployment, server: &McpServer) -> bool {
    let uid = server.meta().uid.as_deref();
    deployment
        .owner_references()
        .iter()
        .any(|o| o.kind == "McpServer" && Some(o.uid.as_str()) == uid)
}

fn digest(value: &impl Serialize) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    sha2::Sha256::digest(&bytes)[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn patch<K>(client: &kube::Client, namespace: &str, object: &K) -> Result<(), kube::Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let name = object.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map(|_| ())
}

async fn delete<K>(client: &kube::Client, namespace: &str, name: &str) -> Result<(), kube::Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The key the server's bridges share, made once (random, 32 bytes as hex).
async fn ensure_bridge_key(
    client: &kube::Client,
    server: &McpServer,
    name: &str,
    secrets: &SecretData,
) {
    let namespace = server.namespace().unwrap_or_default();
    if secrets
        .get(&(namespace.clone(), name.to_string()))
        .is_some_and(|d| d.get(BRIDGE_KEY_FIELD).is_some_and(|v| !v.is_empty()))
    {
        return;
    }
    let key: [u8; 32] = rand::random();
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    // The workload's labels: the server's other objects' (and its cleanup's) selector finds it.
    let labels = workload::labels(&server.name_any());
    let secret = Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.clone()),
            labels: Some(labels),
            owner_references: server.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            BRIDGE_KEY_FIELD.to_string(),
            ByteString(hex.into_bytes()),
        )])),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            tracing::info!(secret = %format!("{namespace}/{name}"), "generated the stdio bridges' session key")
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {} // made by an earlier pass; the watch brings it
        Err(e) => {
            tracing::warn!(secret = %format!("{namespace}/{name}"), error = %e, "could not write the bridges' key Secret")
        }
    }
}
