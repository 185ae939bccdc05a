//! The gateway's shared state: the current routing table (swapped whole on every snapshot) and
//! the caches that hang off it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;

use crate::admission::{Admission, AdmissionLimits};
use crate::catalog::Catalog;
use crate::errors::GatewayError;
use crate::forward::renews;
use crate::mcp::exchange::Exchanges;
use crate::metrics::Metrics;
use crate::protected_resource::ProtectedResources;
use crate::scope::Caller;
use crate::table::{RoutingTable, Server};
use crate::upstream::client::Upstreams;
use crate::upstream::listing::{ListKind, Listing, ListingRequest};
use crate::upstream::tokens::Tokens;
use axum::http::HeaderMap;
use std::time::Duration;
use switchboard_protocol::LOG_LEVELS;
use switchboard_snapshot::GatewaySettings;

pub struct Gateway {
    table: ArcSwap<RoutingTable>,
    loaded: AtomicBool,
    /// Stopping: answers still go out, each closing its connection (see `http::drain`).
    draining: AtomicBool,
    pub upstreams: Upstreams,
    pub catalog: Catalog,
    pub metrics: Metrics,
    pub tokens: Tokens,
    pub protected_resources: ProtectedResources,
    /// Exchanges this replica holds open between a client's messages (era bridging).
    pub exchanges: Exchanges,
    /// The replica-wide bounds on requests (`--max-in-flight`, `--max-queue-delay`).
    pub admission: Admission,
    /// Legacy sessions their clients ended (DELETE), by tag, until they would have expired.
    ended_sessions: moka::sync::Cache<u64, ()>,
    /// The log level legacy sessions set (`logging/setLevel`), by tag, on this replica: carried
    /// to 2026-07-28 upstreams in each request's `_meta`. Like an upstream session, a cache of
    /// the replica that received it (docs/architecture.md, "Subscriptions").
    log_levels: moka::sync::Cache<u64, &'static str>,
    /// Settings of this deployment rather than of the snapshot (its Service names, its public
    /// URL), merged into every table applied.
    local: LocalSettings,
}

/// Most legacy sessions a replica remembers something about (that they ended, their log level),
/// and for how long: a session that old has expired by itself.
const MAX_REMEMBERED_SESSIONS: u64 = 100_000;
const SESSION_MEMORY: Duration = Duration::from_secs(24 * 3600);

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
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);

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
        let empty = RoutingTable::build(&Default::default())
            .unwrap_or_else(|_| unreachable!("the empty snapshot is valid"));
        Gateway {
            table: ArcSwap::from_pointee(empty),
            loaded: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            upstreams: Upstreams::new(),
            catalog: Catalog::default(),
            metrics: Metrics::default(),
            tokens: Tokens::default(),
            protected_resources: ProtectedResources::default(),
            exchanges: Exchanges::default(),
            admission: Admission::new(AdmissionLimits::default()),
            ended_sessions: moka::sync::Cache::builder()
                .max_capacity(MAX_REMEMBERED_SESSIONS)
                .time_to_live(SESSION_MEMORY)
                .build(),
            log_levels: moka::sync::Cache::builder()
                .max_capacity(MAX_REMEMBERED_SESSIONS)
                .time_to_idle(SESSION_MEMORY)
                .build(),
            local: LocalSettings::default(),
        }
    }

    /// Refuses a legacy session from now on (on this replica).
    pub fn end_session(&self, tag: u64) {
        self.ended_sessions.insert(tag, ());
    }

    /// Remembers a legacy session's log level (one of [`LOG_LEVELS`]); `false` for another.
    pub fn set_log_level(&self, tag: u64, level: &str) -> bool {
        match LOG_LEVELS.iter().find(|l| **l == level) {
            Some(level) => {
                self.log_levels.insert(tag, level);
                true
            }
            None => false,
        }
    }

    /// The log level a legacy session asks 2026-07-28 upstreams for: the one it set on this
    /// replica, else every message (a legacy server sends its log lines unasked).
    pub fn log_level(&self, tag: u64) -> &'static str {
        self.log_levels.get(&tag).unwrap_or(LOG_LEVELS[0])
    }

    pub fn session_ended(&self, tag: u64) -> bool {
        self.ended_sessions.contains_key(&tag)
    }

    pub fn table(&self) -> Arc<RoutingTable> {
        self.table.load_full()
    }

    pub fn is_ready(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Swaps in a new table. In-flight requests keep the table they started with; caches
    /// forget servers that left or changed.
    /// A gateway whose deployment adds `local` to every snapshot's settings.
    pub fn with_local_settings(local: LocalSettings) -> Gateway {
        Gateway {
            admission: Admission::new(local.admission),
            local,
            ..Gateway::new()
        }
    }

    /// How long a request's whole body may take to arrive.
    pub fn body_read_timeout(&self) -> Duration {
        self.local.body_read_timeout
    }

    pub fn apply(&self, mut table: RoutingTable) {
        let settings = &mut table.settings;
        settings
            .allowed_hosts
            .extend(self.local.allowed_hosts.iter().cloned());
        if self.local.public_url.is_some() {
            settings.public_url = self.local.public_url.clone();
        }
        let live: std::collections::HashMap<String, u64> = table
            .servers
            .iter()
            .map(|s| (s.id().to_string(), s.revision))
            .collect();
        self.metrics
            .snapshot_applied(table.generation, table.servers.len(), table.key_count());
        table.limiters.carry_over(&self.table.load().limiters);
        self.upstreams
            .set_networks(table.networks.clone(), &table.servers);
        self.table.store(Arc::new(table));
        self.loaded.store(true, Ordering::Release);
        let is_live = |id: &str, rev: u64| live.get(id) == Some(&rev);
        self.catalog.retain(is_live);
        self.upstreams.retain(is_live);
        self.tokens.retain(is_live);
        self.protected_resources.retain(is_live);
    }

    /// A server's listing of one kind for the caller's credential partition, cached or
    /// walked afresh (with the same renew-once rule as [`Gateway::forward`]).
    pub async fn listing(
        &self,
        caller: &Caller,
        server: &Server,
        kind: ListKind,
    ) -> Result<Arc<Listing>, GatewayError> {
        self.listing_fresher_than(caller, server, kind, caller.table.settings.listing_ttl)
            .await
    }

    /// Lists a server's tools now with the gateway's own credential, as no caller: the
    /// readiness probe the operator runs. Servers whose catalog depends on the caller's
    /// credential cannot be probed this way (the caller has none to give).
    pub async fn probe(&self, server_id: &str) -> Result<Arc<Listing>, GatewayError> {
        let table = self.table();
        let server =
            table
                .server_by_id(server_id)
                .cloned()
                .ok_or_else(|| GatewayError::ServerNotFound {
                    server: server_id.to_string(),
                })?;
        let caller = Caller::probe(table, &server);
        self.listing_fresher_than(&caller, &server, ListKind::Tools, Duration::ZERO)
            .await
    }

    async fn listing_fresher_than(
        &self,
        caller: &Caller,
        server: &Server,
        kind: ListKind,
        ttl: Duration,
    ) -> Result<Arc<Listing>, GatewayError> {
        let settings = &caller.table.settings;
        let mut rejected = None;
        let result = loop {
            let credential = match self.credential(caller, server, rejected.as_ref()).await {
                Ok(c) => c,
                Err(e) => break Err(e),
            };
            let result = self
                .catalog
                .listing(
                    &self.upstreams,
                    &ListingRequest {
                        server,
                        caller_headers: &caller.headers,
                        credential: credential.as_ref(),
                        kind,
                    },
                    ttl,
                    settings.listing_page_cap,
                )
                .await;
            match result {
                Err(e) if renews(server, &e, &rejected, &credential) => {
                    rejected = credential.map(|c| c.value);
                }
                other => break other.map_err(|e| self.relay_auth(caller, server, e)),
            }
        };
        if let Err(e) = &result {
            self.metrics.listing_failed(&server.metric_name);
            if !matches!(e, GatewayError::UpstreamAuthRequired { .. }) {
                tracing::warn!(server = server.id(), kind = kind.method(), error = %e, "upstream listing failed");
            }
        }
        result
    }
}

/// The gateway's base URL as clients reach it: `gateway.publicUrl`, else from `Host`.
pub fn base_url(settings: &GatewaySettings, headers: &HeaderMap) -> String {
    if let Some(url) = &settings.public_url {
        return url.trim_end_matches('/').to_string();
    }
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    format!("http://{host}")
}

impl Default for Gateway {
    fn default() -> Self {
        Self::new()
    }
}
