//! What the MCP faces (the MCP endpoint, its replica-to-replica exchange route, REST) need to
//! serve a request, and nothing more: the live table, the upstream plane, metrics, the
//! exchanges this replica holds open, and what it remembers of legacy sessions.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
    ended_sessions: SessionMemory<()>,
    /// The log level legacy sessions set (`logging/setLevel`), by tag, on this replica: carried
    /// to 2026-07-28 upstreams in each request's `_meta`. Like an upstream session, a cache of
    /// the replica that received it (docs/architecture.md, "Subscriptions").
    log_levels: SessionMemory<&'static str>,
}

/// What a replica remembers about legacy sessions, by tag: a cache that is asked on every
/// legacy call and is empty until a client first ends a session or sets a level, which most
/// never do (so it is not asked until then: a lookup costs a call about 600 instructions).
struct SessionMemory<V> {
    cache: moka::sync::Cache<u64, V>,
    used: AtomicBool,
}

impl<V: Clone + Send + Sync + 'static> SessionMemory<V> {
    fn new(cache: moka::sync::Cache<u64, V>) -> SessionMemory<V> {
        SessionMemory {
            cache,
            used: AtomicBool::new(false),
        }
    }

    fn insert(&self, tag: u64, value: V) {
        // Set before the entry goes in: whoever sees the entry sees the flag.
        self.used.store(true, Ordering::Release);
        self.cache.insert(tag, value);
    }

    fn get(&self, tag: u64) -> Option<V> {
        if !self.used.load(Ordering::Acquire) {
            return None;
        }
        self.cache.get(&tag)
    }
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
            ended_sessions: SessionMemory::new(
                moka::sync::Cache::builder()
                    .max_capacity(MAX_REMEMBERED_SESSIONS)
                    .time_to_live(SESSION_MEMORY)
                    .build(),
            ),
            log_levels: SessionMemory::new(
                moka::sync::Cache::builder()
                    .max_capacity(MAX_REMEMBERED_SESSIONS)
                    .time_to_idle(SESSION_MEMORY)
                    .build(),
            ),
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
        self.ended_sessions.get(tag).is_some()
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
        self.log_levels.get(tag).unwrap_or(LOG_LEVELS[0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_memory_answers_what_was_put_in_it_once_anything_was() {
        let memory = SessionMemory::new(moka::sync::Cache::new(10));
        assert_eq!(memory.get(1), None);
        memory.insert(1, "info");
        assert_eq!((memory.get(1), memory.get(2)), (Some("info"), None));
        memory.insert(2, "debug");
        assert_eq!(memory.get(2), Some("debug"));
    }
}
