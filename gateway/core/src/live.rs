//! The routing table that serves now: swapped whole on every snapshot (in-flight requests keep
//! the table they started with), shared by every client face and the edge.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;

use crate::table::RoutingTable;

pub struct LiveTable {
    table: ArcSwap<RoutingTable>,
    /// A snapshot has been applied (readiness).
    loaded: AtomicBool,
}

impl LiveTable {
    /// An empty table; not ready until the first snapshot is stored.
    pub fn empty() -> LiveTable {
        let empty = RoutingTable::build(&Default::default())
            .unwrap_or_else(|_| unreachable!("the empty snapshot is valid"));
        LiveTable {
            table: ArcSwap::from_pointee(empty),
            loaded: AtomicBool::new(false),
        }
    }

    pub fn load(&self) -> Arc<RoutingTable> {
        self.table.load_full()
    }

    pub fn store(&self, table: Arc<RoutingTable>) {
        self.table.store(table);
        self.loaded.store(true, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }
}

impl Default for LiveTable {
    fn default() -> Self {
        LiveTable::empty()
    }
}

/// What a snapshot source feeds: the config file watcher and the operator stream apply what
/// they read through this, and know nothing else of what serves it.
pub trait SnapshotSink: Send + Sync {
    /// The table that serves now.
    fn current(&self) -> Arc<RoutingTable>;
    /// Serves `table` from now on (in-flight requests finish on the table they started with).
    fn apply(&self, table: RoutingTable);
    /// A snapshot was refused; the previous good one keeps serving.
    fn rejected(&self);
    /// The operator's snapshot stream was opened (`true`) or broke (`false`).
    fn stream_connected(&self, _connected: bool) {}
}

/// A bare live table is a sink too (the operator's probe, tests, benchmarks): it serves what it
/// is given and has nowhere to report a refusal.
impl SnapshotSink for LiveTable {
    fn current(&self) -> Arc<RoutingTable> {
        self.load()
    }

    fn apply(&self, table: RoutingTable) {
        self.store(Arc::new(table));
    }

    fn rejected(&self) {}
}
