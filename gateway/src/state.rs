//! The gateway's composition root: the live table, the upstream plane, the contexts of the
//! client faces and the edge's own state, built once and shared. Each handler takes the context
//! of its face ([`McpContext`], [`LlmContext`], [`Shedding`]), never this whole.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use switchboard_core::audit::AuditLog;

use crate::admission::{Admission, AdmissionLimits, Shedding};
use switchboard_core::live::{LiveTable, SnapshotSink};
use switchboard_core::metrics::Metrics;
use switchboard_core::table::RoutingTable;
use switchboard_llm::context::LlmContext;
use switchboard_mcp::context::McpContext;
use switchboard_store::Store;
use switchboard_upstream::UpstreamPlane;

use crate::sign_in::SignInContext;

pub struct Gateway {
    live: Arc<LiveTable>,
    /// Stopping: answers still go out, each closing its connection (see `http::edge_answer`).
    draining: AtomicBool,
    pub upstream: Arc<UpstreamPlane>,
    pub metrics: Arc<Metrics>,
    pub mcp: Arc<McpContext>,
    pub llm: Arc<LlmContext>,
    /// The brokered sign-in handlers' and the protected-resource metadata's.
    pub(crate) sign_in: Arc<SignInContext>,
    /// The replica-wide bounds on requests (`--max-in-flight`, `--max-queue-delay`).
    pub shedding: Arc<Shedding>,
    /// Where each client request's audit record goes (`--audit-log`); set once at start.
    audit: std::sync::OnceLock<AuditLog>,
    /// Settings of this deployment rather than of the snapshot (its Service names, its public
    /// URL), merged into every table applied.
    local: LocalSettings,
    /// The shared store this gateway made for the tables it applied (`gateway.store`), kept
    /// while their settings stay the same.
    store: std::sync::Mutex<Option<Arc<Store>>>,
}

/// Per-deployment settings given on the command line.
#[derive(Debug, Clone)]
pub struct LocalSettings {
    pub allowed_hosts: Vec<String>,
    pub public_url: Option<String>,
    /// A request's whole body must arrive within this (see `http::read_body_in_time`).
    pub body_read_timeout: Duration,
    /// When the replica sheds requests (see `admission`).
    pub admission: AdmissionLimits,
}

/// The default of `--body-read-timeout`.
const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for LocalSettings {
    fn default() -> Self {
        LocalSettings {
            allowed_hosts: Vec::new(),
            public_url: None,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            admission: AdmissionLimits::default(),
        }
    }
}

impl Gateway {
    /// A gateway with an empty table; not ready until the first snapshot is applied.
    pub fn new() -> Gateway {
        Gateway::with_local_settings(LocalSettings::default())
    }

    /// A gateway whose deployment adds `local` to every snapshot's settings.
    pub fn with_local_settings(local: LocalSettings) -> Gateway {
        let metrics = Arc::new(Metrics::default());
        let live = Arc::new(LiveTable::empty());
        let upstream = Arc::new(UpstreamPlane::new(metrics.clone()));
        Gateway {
            mcp: Arc::new(McpContext::new(
                live.clone(),
                upstream.clone(),
                metrics.clone(),
            )),
            llm: Arc::new(LlmContext::new(
                live.clone(),
                upstream.clone(),
                metrics.clone(),
            )),
            sign_in: Arc::new(SignInContext::new(
                live.clone(),
                upstream.clone(),
                metrics.clone(),
            )),
            shedding: Arc::new(Shedding {
                admission: Admission::new(local.admission),
                metrics: metrics.clone(),
            }),
            live,
            audit: std::sync::OnceLock::new(),
            draining: AtomicBool::new(false),
            upstream,
            metrics,
            local,
            store: std::sync::Mutex::new(None),
        }
    }

    /// Sets where audit records go (once, at start; without it, nowhere).
    pub fn set_audit_log(&self, log: AuditLog) {
        let _ = self.audit.set(log);
    }

    /// Writes out the audit records still queued (at exit).
    pub fn close_audit_log(&self) {
        if let Some(log) = self.audit.get() {
            log.close();
        }
    }

    pub(crate) fn audit_log(&self) -> Option<&AuditLog> {
        self.audit.get().filter(|log| log.is_on())
    }

    pub fn table(&self) -> Arc<RoutingTable> {
        self.live.load()
    }

    pub fn is_ready(&self) -> bool {
        self.live.is_ready()
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// How long a request's whole body may take to arrive.
    pub(crate) fn body_read_timeout(&self) -> Duration {
        self.local.body_read_timeout
    }

    /// Swaps in a new table. In-flight requests keep the table they started with; caches
    /// forget servers that left or changed.
    pub fn apply(&self, mut table: RoutingTable) {
        let settings = &mut table.settings;
        settings
            .allowed_hosts
            .extend(self.local.allowed_hosts.iter().cloned());
        if self.local.public_url.is_some() {
            settings.public_url = self.local.public_url.clone();
        }
        self.metrics
            .snapshot_applied(table.generation, table.servers.len(), table.key_count());
        table.limiters.carry_over(&self.live.load().limiters);
        table.store = self.store_for(&table);
        self.upstream.prepare(&table);
        self.upstream.serve_people(&mut table);
        let table = Arc::new(table);
        self.live.store(table.clone());
        self.upstream.forget_all_but(&table);
    }
}

impl Gateway {
    /// The store `table`'s settings name: the one made before when they are the same (nothing
    /// it holds is lost on a reload), else a new one. A store that cannot be made (its file does
    /// not read) leaves the one before serving, and says why.
    fn store_for(&self, table: &RoutingTable) -> Arc<Store> {
        let mut made = self.store.lock().unwrap_or_else(|p| p.into_inner());
        let settings = &table.settings.store;
        let session_key = table
            .settings
            .session_key
            .as_ref()
            .and_then(switchboard_snapshot::resolved_value);
        if let Some(store) = made.as_ref()
            && store.serves(settings, session_key)
        {
            return store.clone();
        }
        match Store::from_settings(settings, session_key) {
            Ok(store) => {
                self.metrics.store_in_use(store.backend_name());
                tracing::info!(backend = store.backend_name(), "state store in use");
                let store = Arc::new(store.observed_by(self.metrics.clone()));
                *made = Some(store.clone());
                store
            }
            Err(e) => {
                tracing::error!(error = %e, "gateway.store: cannot make the state store; the one before keeps serving");
                made.clone().unwrap_or_else(|| Arc::new(Store::in_memory()))
            }
        }
    }

    /// What `/readyz` adds when the store is shared and does not answer (asked now, within its
    /// timeout). The gateway still serves every call that needs no person's account, so it
    /// stays ready.
    pub(crate) async fn store_detail(&self) -> Option<&'static str> {
        let store = self.table().store.clone();
        if !store.is_shared() {
            return None;
        }
        store.ping().await.err().map(|_| {
            "the state store does not answer: calls that need a person's upstream account are refused, limits are counted by each replica"
        })
    }
}

impl Default for Gateway {
    fn default() -> Self {
        Self::new()
    }
}

/// Both sources (the config file, the operator stream) feed the gateway through this.
impl SnapshotSink for Gateway {
    fn current(&self) -> Arc<RoutingTable> {
        self.table()
    }

    fn stream_connected(&self, connected: bool) {
        self.metrics.operator_stream(connected);
    }

    fn apply(&self, table: RoutingTable) {
        Gateway::apply(self, table);
    }

    fn rejected(&self) {
        self.metrics.snapshot_rejected();
    }
}
