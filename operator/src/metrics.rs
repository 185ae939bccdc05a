//! Operator metrics: reconciles, their errors and durations, replicas, snapshot generation.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub struct Metrics {
    registry: Registry,
    reconciles: Counter,
    reconcile_errors: Family<Vec<(String, String)>, Counter>,
    reconcile_duration: Histogram,
    snapshot_generation: Gauge,
    connected_replicas: Gauge,
    known_replicas: Gauge,
    status_write_failures: Family<Vec<(String, String)>, Counter>,
    leader: Gauge,
    certificate_expiry: Family<Vec<(String, String)>, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("switchboard_operator");
        let reconciles = Counter::default();
        registry.register(
            "reconciles",
            "Renders of the snapshot and status passes",
            reconciles.clone(),
        );
        let reconcile_errors = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Reconcile passes that failed, by what failed (`error`: the error's metric label)",
            reconcile_errors.clone(),
        );
        let reconcile_duration = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "reconcile_duration_seconds",
            "Time of one reconcile pass",
            reconcile_duration.clone(),
        );
        let snapshot_generation = Gauge::default();
        registry.register(
            "snapshot_generation",
            "Generation of the latest published snapshot",
            snapshot_generation.clone(),
        );
        let connected_replicas = Gauge::default();
        registry.register(
            "connected_replicas",
            "Gateway replicas following the snapshot stream",
            connected_replicas.clone(),
        );
        let known_replicas = Gauge::default();
        registry.register(
            "known_replicas",
            "Gateway replicas connected or recently seen",
            known_replicas.clone(),
        );
        let status_write_failures = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "status_write_failures",
            "Status writes that failed, by kind (each object retries on its own backoff)",
            status_write_failures.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 on the operator replica holding the lease, 0 on standbys",
            leader.clone(),
        );
        let certificate_expiry = Family::<Vec<(String, String)>, Gauge>::default();
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "When the snapshot stream's certificates expire (Unix seconds), by certificate \
             (delivery_ca, delivery_serving); managed TLS only",
            certificate_expiry.clone(),
        );
        Metrics {
            leader,
            certificate_expiry,
            status_write_failures,
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            snapshot_generation,
            connected_replicas,
            known_replicas,
        }
    }
}

impl Metrics {
    pub fn leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    pub(crate) fn certificate_expiry(&self, certificate: &str, not_after_unix: i64) {
        self.certificate_expiry
            .get_or_create(&vec![("certificate".to_string(), certificate.to_string())])
            .set(not_after_unix);
    }

    /// A reconcile pass ended after `took`; `failed` is its error's metric label.
    pub(crate) fn reconciled(&self, took: Duration, failed: Option<&'static str>) {
        self.reconciles.inc();
        if let Some(label) = failed {
            self.reconcile_errors
                .get_or_create(&vec![("error".to_string(), label.to_string())])
                .inc();
        }
        self.reconcile_duration.observe(took.as_secs_f64());
    }

    pub(crate) fn status_write_failed(&self, kind: &str) {
        self.status_write_failures
            .get_or_create(&vec![("kind".to_string(), kind.to_string())])
            .inc();
    }

    pub(crate) fn snapshot_published(&self, generation: u64) {
        self.snapshot_generation.set(generation as i64);
    }

    pub fn replicas(&self, connected: usize, known: usize) {
        self.connected_replicas.set(connected as i64);
        self.known_replicas.set(known as i64);
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
