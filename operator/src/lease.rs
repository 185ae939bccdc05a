//! Leader election on a coordination.k8s.io Lease: one operator replica holds it, serves the
//! snapshot stream and writes status; the others stay warm (watching and rendering) and take
//! over when the holder stops renewing.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;

pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a holder that stopped renewing keeps the lease.
    pub duration: Duration,
}

/// Runs the election loop, publishing whether this replica holds the lease, until `stop`
/// turns true: then it steps down (publishes `false` first, so nothing more is written as
/// leader) and hands the lease back, so a standby takes over at its next round instead of
/// waiting for the lease to expire.
pub async fn run(
    client: kube::Client,
    config: LeaseConfig,
    leader: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let renew_every = config.duration / 3;
    while !*stop.borrow() {
        let holding = match try_acquire(&api, &config).await {
            Ok(holding) => holding,
            Err(e) => {
                tracing::warn!(error = %e, "lease update failed");
                // Without a successful renewal we cannot know we still hold it.
                false
            }
        };
        if *leader.borrow() != holding {
            tracing::info!(identity = %config.identity, holding, "leadership changed");
            leader.send_replace(holding);
        }
        tokio::select! {
            () = tokio::time::sleep(renew_every) => {}
            _ = stop.changed() => {}
        }
    }
    let held = leader.send_replace(false);
    if held {
        match release(&api, &config).await {
            Ok(()) => tracing::info!(identity = %config.identity, "stepped down: lease released"),
            Err(e) => {
                tracing::warn!(error = %e, "stepping down: could not release the lease; it expires instead")
            }
        }
    }
}

/// Hands the lease back if this replica holds it: no holder, renewed now, for one second (what
/// client-go's ReleaseOnCancel writes).
async fn release(api: &Api<Lease>, config: &LeaseConfig) -> Result<(), kube::Error> {
    let Some(mut lease) = api.get_opt(&config.name).await? else {
        return Ok(());
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now());
    api.replace(&config.name, &PostParams::default(), &lease)
        .await
        .map(|_| ())
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// One round: create, renew, or take over an expired lease. Optimistic concurrency
/// (resourceVersion) makes two contenders' writes exclusive.
async fn try_acquire(api: &Api<Lease>, config: &LeaseConfig) -> Result<bool, kube::Error> {
    let seconds = config.duration.as_secs().max(1) as i32;
    let existing = api.get_opt(&config.name).await?;
    let Some(mut lease) = existing else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(config.name.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(config.identity.clone()),
                lease_duration_seconds: Some(seconds),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let expired = spec.renew_time.as_ref().is_none_or(|t| {
        let held_for = spec.lease_duration_seconds.unwrap_or(seconds) as i64;
        Timestamp::now().as_second() - t.0.as_second() > held_for
    });
    // A released lease (no holder) is free at once.
    if holder != config.identity && !holder.is_empty() && !expired {
        return Ok(false);
    }
    if holder != config.identity {
        spec.holder_identity = Some(config.identity.clone());
        spec.acquire_time = Some(now());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.renew_time = Some(now());
    spec.lease_duration_seconds = Some(seconds);
    match api
        .replace(&config.name, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}
