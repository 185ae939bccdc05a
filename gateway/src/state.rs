//! The gateway's shared state: the current routing table (swapped whole on every snapshot) and
//! the caches that hang off it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use serde_json::Value;
use tokio::time::Instant;

use crate::catalog::Catalog;
use crate::errors::GatewayError;
use crate::metrics::Metrics;
use crate::scope::Caller;
use crate::table::{RoutingTable, Server};
use crate::upstream::client::{RpcCall, RpcOutcome, Upstreams};
use crate::upstream::listing::{ListKind, Listing};

pub struct Gateway {
    table: ArcSwap<RoutingTable>,
    loaded: AtomicBool,
    pub upstreams: Upstreams,
    pub catalog: Catalog,
    pub metrics: Metrics,
}

impl Gateway {
    /// A gateway with an empty table; not ready until the first snapshot is applied.
    pub fn new() -> Gateway {
        let empty = RoutingTable::build(&Default::default())
            .unwrap_or_else(|_| unreachable!("the empty snapshot is valid"));
        Gateway {
            table: ArcSwap::from_pointee(empty),
            loaded: AtomicBool::new(false),
            upstreams: Upstreams::new(),
            catalog: Catalog::default(),
            metrics: Metrics::default(),
        }
    }

    pub fn table(&self) -> Arc<RoutingTable> {
        self.table.load_full()
    }

    pub fn is_ready(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// Swaps in a new table. In-flight requests keep the table they started with; caches
    /// forget servers that left or changed.
    pub fn apply(&self, table: RoutingTable) {
        let live: std::collections::HashMap<String, u64> = table
            .servers
            .iter()
            .map(|s| (s.id().to_string(), s.revision))
            .collect();
        self.metrics.snapshot_applied(&table);
        self.table.store(Arc::new(table));
        self.loaded.store(true, Ordering::Release);
        let is_live = |id: &str, rev: u64| live.get(id) == Some(&rev);
        self.catalog.retain(is_live);
        self.upstreams.retain(is_live);
    }

    /// One request to a server's upstream under its `timeout`, measured.
    pub async fn forward(
        &self,
        caller: &Caller,
        server: &Server,
        method: &str,
        params: Option<Value>,
    ) -> Result<RpcOutcome, GatewayError> {
        let budget = server.spec.timeout;
        let started = Instant::now();
        let outcome = self
            .upstreams
            .call(RpcCall {
                server,
                caller_headers: &caller.headers,
                method,
                params,
                deadline: started + budget,
                budget,
            })
            .await;
        self.metrics
            .upstream_call(server.id(), &outcome, started.elapsed());
        outcome
    }

    /// A server's cached (or freshly walked) listing of one kind.
    pub async fn listing(
        &self,
        caller: &Caller,
        server: &Server,
        kind: ListKind,
    ) -> Result<Arc<Listing>, GatewayError> {
        let settings = &caller.table.settings;
        let result = self
            .catalog
            .listing(
                &self.upstreams,
                server,
                &caller.headers,
                kind,
                settings.listing_ttl,
                settings.listing_page_cap,
            )
            .await;
        if let Err(e) = &result {
            self.metrics.listing_failed(server.id());
            tracing::warn!(server = server.id(), kind = kind.method(), error = %e, "upstream listing failed");
        }
        result
    }
}

impl Default for Gateway {
    fn default() -> Self {
        Self::new()
    }
}
