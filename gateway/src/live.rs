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
