//! What the MCP faces (the MCP endpoint, its replica-to-replica exchange route, REST) need to
//! serve a request, and nothing more: the live table, the upstream plane, metrics, the
//! exchanges this replica holds open, and what it remembers of legacy sessions.

use std::sync::Arc;
use std::time::Duration;

use switchboard_protocol::LOG_LEVELS;

use crate::exchange::Exchanges;
use switchboard_core::live::LiveTable;
use switchboard_core::metrics::Metrics;
use switchboard_core::table::RoutingTable;
use switchboard_upstream::UpstreamPlane;

pub struct McpContext {
    live: Arc<LiveTable>,
    pub upstream: Arc<UpstreamPlane>,
    pub metrics: Arc<Metrics>,
    /// Exchanges this replica holds open between a client's messages (era bridging).
    pub exchanges: Exchanges,
    /// Legacy sessions their clients ended (DELETE), by tag, until they would have expired.
    ended_sessions: moka::sync::Cache<u64, ()>,
    /// The log level legacy sessions set (`logging/setLevel`), by tag, on this replica: carried
    /// to 2026-07-28 upstreams in each request's `_meta`. Like an upstream session, a cache of
    /// the replica that received it (docs/architecture.md, "Subscriptions").
    log_levels: moka::sync::Cache<u64, &'static str>,
}

/// Most legacy sessions a replica remembers something about (that they ended, their log level),
/// and for how long: a session that old has expired by itself.
const MAX_REMEMBERED_SESSIONS: u64 = 100_000;
const SESSION_MEMORY: Duration = Duration::from_secs(24 * 3600);

impl McpContext {
    pub fn new(
        live: Arc<LiveTable>,
        upstream: Arc<UpstreamPlane>,
        metrics: Arc<Metrics>,
    ) -> McpContext {
        McpContext {
            live,
            upstream,
            metrics,
            exchanges: Exchanges::default(),
            ended_sessions: moka::sync::Cache::builder()
                .max_capacity(MAX_REMEMBERED_SESSIONS)
                .time_to_live(SESSION_MEMORY)
                .build(),
            log_levels: moka::sync::Cache::builder()
                .max_capacity(MAX_REMEMBERED_SESSIONS)
                .time_to_idle(SESSION_MEMORY)
                .build(),
        }
    }

    pub fn table(&self) -> Arc<RoutingTable> {
        self.live.load()
    }

    /// Refuses a legacy session from now on (on this replica).
    pub fn end_session(&self, tag: u64) {
        self.ended_sessions.insert(tag, ());
    }

    pub fn session_ended(&self, tag: u64) -> bool {
        self.ended_sessions.contains_key(&tag)
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
}
