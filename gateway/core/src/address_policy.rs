//! A server's own `upstreamPolicy`, as the routing table keeps it. The rules are the snapshot
//! crate's (`networks.rs`); they are applied when a URL is validated, when a redirect is
//! followed, and at connect time by the resolver of the server's HTTP client (the upstream
//! crate's `http_client.rs`), which is why a server with a policy of its own gets a client of
//! its own, kept under `key`.

use std::sync::Arc;

use switchboard_snapshot::ScopedPolicy;

/// A server's own policy, parsed, with the hash its HTTP client is kept under.
#[derive(Debug)]
pub struct ServerScope {
    pub key: u64,
    pub policy: Arc<ScopedPolicy>,
}
