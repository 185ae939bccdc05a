//! The connect-time half of `gateway.upstreamNetworks` (the rule is in the snapshot crate's
//! `networks.rs`). Validation refuses URLs whose host is a denied literal address; this resolver
//! refuses names that resolve to one, so a name cannot smuggle a metadata or API server address
//! past validation (DNS answers change; this runs on every new connection). Redirect targets are
//! checked by the client before it follows them.
//!
//! A resolver sees no port, so an address listed in `denyEndpoints` is refused on every port
//! when it is reached by name (on its own port when reached by a literal address).
//!
//! A server with its own `upstreamPolicy` gets its own HTTP client (one per distinct policy,
//! kept by `Upstreams`), whose resolver applies both policies: a resolver only sees a host name,
//! not which server asked.

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use switchboard_snapshot::{NetworkPolicy, ScopedPolicy};

/// Resolves with the system resolver and keeps only the addresses the current policy (and the
/// server's own, for a server's client) allows.
pub struct PolicyResolver {
    pub policy: Arc<ArcSwap<NetworkPolicy>>,
    pub scoped: Option<Arc<ScopedPolicy>>,
}

/// A server's own policy, parsed, with the hash its HTTP client is kept under.
#[derive(Debug)]
pub struct ServerScope {
    pub key: u64,
    pub policy: Arc<ScopedPolicy>,
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let scoped = self.scoped.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let policy = policy.load();
            let mut denied = None;
            let allowed: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|addr| {
                    let scoped = scoped.as_ref().map_or(Ok(()), |s| s.check_ip(addr.ip()));
                    match policy.check_any_port(addr.ip()).and(scoped) {
                        Ok(()) => true,
                        Err(e) => {
                            denied.get_or_insert(e);
                            false
                        }
                    }
                })
                .collect();
            match (allowed.is_empty(), denied) {
                (true, Some(denied)) => {
                    Err(Box::new(denied) as Box<dyn std::error::Error + Send + Sync>)
                }
                _ => Ok(Box::new(allowed.into_iter()) as Addrs),
            }
        })
    }
}
