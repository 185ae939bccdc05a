//! Readiness probes: the operator lists each server's tools the way a gateway replica would,
//! with the gateway's own credential, using the gateway's own upstream code (so "Ready" means
//! what the gateway will experience, not a TCP connect).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use switchboard_gateway::errors::GatewayError;
use switchboard_gateway::state::Gateway;
use switchboard_gateway::table::RoutingTable;
use switchboard_snapshot::Snapshot;
use tokio::sync::{Notify, watch};

use crate::status::Probe;

#[derive(Default)]
pub struct Probes {
    results: Mutex<HashMap<String, Probe>>,
}

impl Probes {
    pub fn get(&self, server_id: &str) -> Option<Probe> {
        self.results
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(server_id)
            .cloned()
    }

    /// Records a result; true when it changes what status says (not just the time).
    fn record(&self, server_id: &str, probe: Probe) -> bool {
        let mut results = self.results.lock().unwrap_or_else(|p| p.into_inner());
        let changed = match (results.get(server_id), &probe) {
            (Some(Probe::Listed { tools: a, .. }), Probe::Listed { tools: b, .. }) => a != b,
            (Some(old), new) => old != new,
            (None, _) => true,
        };
        if changed || matches!(probe, Probe::Listed { .. }) {
            results.insert(server_id.to_string(), probe);
        }
        changed
    }
}

fn failure(e: &GatewayError) -> Probe {
    let reason = match e {
        GatewayError::UpstreamTimeout { .. } => "UpstreamTimeout",
        GatewayError::UpstreamUnauthorized { .. } | GatewayError::UpstreamForbidden { .. } => {
            "UpstreamAuthFailed"
        }
        _ => "UpstreamUnavailable",
    };
    Probe::Failed {
        reason,
        message: e.to_string(),
    }
}

/// Probes every server of the latest snapshot each `interval`; wakes `changed` when a result
/// changes what status says.
pub async fn run(
    snapshots: watch::Receiver<Arc<Snapshot>>,
    probes: Arc<Probes>,
    interval: Duration,
    changed: Arc<Notify>,
) {
    let gateway = Gateway::new();
    let mut applied_generation = None;
    loop {
        let snapshot = snapshots.borrow().clone();
        if applied_generation != Some(snapshot.generation) {
            match RoutingTable::build(&snapshot) {
                Ok(table) => gateway.apply(table),
                Err(e) => tracing::warn!(error = %e, "probe: snapshot does not build"),
            }
            applied_generation = Some(snapshot.generation);
        }
        let table = gateway.table();
        let rounds = table.servers.iter().map(|server| {
            let gateway = &gateway;
            async move {
                let id = server.id().to_string();
                if server.spec.auth.uses_caller_credential() {
                    return (id, Probe::DependsOnCaller);
                }
                let probe = match gateway.probe(&id).await {
                    Ok(listing) => Probe::Listed {
                        tools: listing
                            .items
                            .iter()
                            .filter(|t| t.id().is_some_and(|n| server.spec.tools.admits(n)))
                            .count(),
                        at: Timestamp::now(),
                    },
                    Err(e) => failure(&e),
                };
                (id, probe)
            }
        });
        let results = futures_util::future::join_all(rounds).await;
        let mut any = false;
        for (id, probe) in results {
            any |= probes.record(&id, probe);
        }
        if any {
            changed.notify_one();
        }
        tokio::time::sleep(interval).await;
    }
}
