//! `switchboard-gateway --config FILE tools review <server>`: the standalone counterpart of the
//! operator's review. It lists the server now, as the gateway would (its own credential, its
//! approvals and checks), and prints what differs from `tools.approved` and the block to paste.

use std::path::Path;
use std::sync::Arc;

use switchboard_core::metrics::Metrics;
use switchboard_upstream::UpstreamPlane;

/// Why a review could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(#[from] switchboard_snapshot::SnapshotError),
    #[error("no server {0:?} in the file")]
    NoServer(String),
    #[error("listing {server}: {source}")]
    Listing {
        server: String,
        #[source]
        source: switchboard_upstream::error::UpstreamError,
    },
    #[error("server {0:?} has tools.pinning: off (nothing is reviewed)")]
    PinningOff(String),
}

/// The review of `server` of the file at `config`, as text.
pub async fn review(
    config: &Path,
    server: &str,
    include_flagged: bool,
) -> Result<String, ReviewError> {
    let content = std::fs::read(config).map_err(|source| ReviewError::Read {
        path: config.display().to_string(),
        source,
    })?;
    let table = Arc::new(switchboard_source::config_file::load_table(&content)?);
    let found = table
        .server_by_id(server)
        .cloned()
        .ok_or_else(|| ReviewError::NoServer(server.to_string()))?;
    let plane = UpstreamPlane::new(Arc::new(Metrics::default()));
    plane.prepare(&table);
    // The other servers first: shadowing compares this server's tools with theirs. (One that
    // cannot be listed now is left out of the comparison, as on a replica that has not yet
    // listed it.)
    for other in table.servers.iter().filter(|s| s.id() != server) {
        if !other.spec.auth.uses_caller_credential() && !other.spec.auth.is_user_account() {
            let _ = plane.probe(table.clone(), other.id()).await;
        }
    }
    let listing =
        plane
            .probe(table.clone(), server)
            .await
            .map_err(|source| ReviewError::Listing {
                server: server.to_string(),
                source,
            })?;
    let entries = switchboard_upstream::review_entries(&found, &listing)
        .ok_or_else(|| ReviewError::PinningOff(server.to_string()))?;
    let plan = switchboard_trust::plan(
        switchboard_trust::Target::ConfigFile,
        server,
        &found.spec.tools.approved,
        &entries,
        include_flagged,
    );
    Ok(plan.text)
}
