//! Standalone mode: the snapshot comes from a file. The file is re-read when its contents
//! change (polled, so it also works on mounted ConfigMaps/Secrets whose symlinks flip) and on
//! SIGHUP (which also picks up changed `env`/`file` secrets). A broken edit is logged with the
//! field it concerns and the previous snapshot keeps serving (DESIGN.md invariant 9).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use switchboard_snapshot::{SnapshotError, SystemLookup, load};

use crate::state::Gateway;
use crate::table::RoutingTable;

/// How often the file is checked for changes.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Reads, resolves, validates and indexes the file: a table ready to swap in.
pub fn load_table(path: &Path) -> Result<RoutingTable, SnapshotError> {
    let text = std::fs::read_to_string(path).map_err(|e| SnapshotError {
        errors: vec![switchboard_snapshot::FieldError {
            path: String::new(),
            message: format!("cannot read {}: {e}", path.display()),
        }],
    })?;
    let snapshot = load(&text, &SystemLookup)?;
    RoutingTable::build(&snapshot)
}

/// Loads the file into the gateway; on error, logs it and keeps what is served.
pub fn reload(gw: &Gateway, path: &Path) -> bool {
    match load_table(path) {
        Ok(table) => {
            if table.settings.session_key.is_none() {
                tracing::warn!(
                    "gateway.sessionKey is not set: legacy sessions only continue on this process"
                );
            }
            tracing::info!(
                file = %path.display(),
                servers = table.servers.len(),
                keys = table.key_count(),
                "config applied"
            );
            gw.apply(table);
            true
        }
        Err(e) => {
            gw.metrics.snapshot_rejected();
            tracing::error!(file = %path.display(), error = %e, "config rejected; the previous config keeps serving");
            false
        }
    }
}

/// Watches the file for the life of the process.
pub async fn watch(gw: Arc<Gateway>, path: PathBuf) {
    let mut last = std::fs::read(&path).ok();
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let forced = tokio::select! {
            _ = tick.tick() => false,
            Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
        };
        let current = std::fs::read(&path).ok();
        if forced || current != last {
            if forced {
                tracing::info!("SIGHUP: reloading config");
            }
            last = current;
            reload(&gw, &path);
        }
    }
}
