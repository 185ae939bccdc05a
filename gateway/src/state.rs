//! The gateway's shared state: the current routing table (swapped whole on every snapshot) and
//! the caches that hang off it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use serde_json::Value;
use tokio::time::Instant;

use crate::catalog::Catalog;
use crate::errors::GatewayError;
use crate::mcp::era::HEADER_MISMATCH;
use crate::metrics::Metrics;
use crate::scope::Caller;
use crate::table::{RoutingTable, Server};
use crate::upstream::client::{RpcCall, RpcOutcome, Upstreams};
use crate::upstream::listing::{ListKind, Listing};
use crate::upstream::param_headers;
use axum::http::HeaderMap;
use std::time::Duration;

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
    ///
    /// A tool call from a caller that sent no `Mcp-Param-*` headers gets the ones the tool's
    /// schema calls for; if the upstream still answers HeaderMismatch (its schema changed, or
    /// this replica never listed it), the tools are listed afresh and the call repeats once.
    pub async fn forward(
        &self,
        caller: &Caller,
        server: &Server,
        method: &str,
        params: Option<Value>,
    ) -> Result<RpcOutcome, GatewayError> {
        let derive = method == "tools/call" && !param_headers::caller_sent_any(&caller.headers);
        if !derive {
            return self
                .forward_once(caller, server, method, params, None)
                .await;
        }
        let tool = params
            .as_ref()
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let derived = || {
            let arguments = params.as_ref().and_then(|p| p.get("arguments"));
            self.catalog
                .tool_schema(server, &tool)
                .map(|schema| param_headers::derive(&schema, arguments))
        };
        let headers = derived();
        let outcome = self
            .forward_once(caller, server, method, params.clone(), headers.as_ref())
            .await;
        let mismatch = matches!(&outcome, Ok(RpcOutcome::Error(e))
            if e.get("code").and_then(Value::as_i64) == Some(HEADER_MISMATCH));
        if !mismatch {
            return outcome;
        }
        let settings = &caller.table.settings;
        let relisted = self
            .catalog
            .listing(
                &self.upstreams,
                server,
                &caller.headers,
                ListKind::Tools,
                Duration::ZERO,
                settings.listing_page_cap,
            )
            .await;
        match relisted {
            Ok(_) => {
                let headers = derived();
                self.forward_once(caller, server, method, params, headers.as_ref())
                    .await
            }
            Err(_) => outcome,
        }
    }

    async fn forward_once(
        &self,
        caller: &Caller,
        server: &Server,
        method: &str,
        params: Option<Value>,
        param_headers: Option<&HeaderMap>,
    ) -> Result<RpcOutcome, GatewayError> {
        let budget = server.spec.timeout;
        let started = Instant::now();
        let outcome = self
            .upstreams
            .call(RpcCall {
                server,
                caller_headers: &caller.headers,
                param_headers,
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
