//! Cached listings per server, and the tool-ownership map (tool name → server ids) that only
//! unprefixed names need. Both are caches: a replica that has neither rebuilds them on demand,
//! and a prefixed call never looks here (DESIGN.md invariants 2 and 3).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::http::HeaderMap;
use serde_json::Value;
use tokio::time::Instant;

use crate::errors::GatewayError;
use crate::table::Server;
use crate::upstream::client::Upstreams;
use crate::upstream::listing::{ListKind, Listing, walk};

type EntryKey = (String, ListKind);

struct Entry {
    revision: u64,
    fetched: Instant,
    listing: Arc<Listing>,
}

#[derive(Default)]
pub struct Catalog {
    entries: RwLock<HashMap<EntryKey, Entry>>,
    owners: RwLock<HashMap<String, BTreeSet<String>>>,
    /// One refresh at a time per (server, kind): concurrent callers wait for it and share it.
    refreshing: Mutex<HashMap<EntryKey, Arc<tokio::sync::Mutex<()>>>>,
}

impl Catalog {
    fn fresh(&self, server: &Server, kind: ListKind, ttl: Duration) -> Option<Arc<Listing>> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        let entry = entries.get(&(server.id().to_string(), kind))?;
        (entry.revision == server.revision && entry.fetched.elapsed() < ttl)
            .then(|| entry.listing.clone())
    }

    /// Whether this server's tools were ever listed at its current revision (stale or not).
    pub fn has_tools_of(&self, server: &Server) -> bool {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries
            .get(&(server.id().to_string(), ListKind::Tools))
            .is_some_and(|e| e.revision == server.revision)
    }

    /// The input schema of one of the server's tools, from its last listing (any age).
    pub fn tool_schema(&self, server: &Server, tool: &str) -> Option<Value> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        let entry = entries.get(&(server.id().to_string(), ListKind::Tools))?;
        if entry.revision != server.revision {
            return None;
        }
        entry
            .listing
            .items
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(tool))?
            .get("inputSchema")
            .cloned()
    }

    /// The server's listing, from cache when younger than `ttl`, else walked afresh.
    pub async fn listing(
        &self,
        upstreams: &Upstreams,
        server: &Server,
        caller_headers: &HeaderMap,
        kind: ListKind,
        ttl: Duration,
        page_cap: u32,
    ) -> Result<Arc<Listing>, GatewayError> {
        if let Some(hit) = self.fresh(server, kind, ttl) {
            return Ok(hit);
        }
        let lock = {
            let mut refreshing = self.refreshing.lock().unwrap_or_else(|p| p.into_inner());
            refreshing
                .entry((server.id().to_string(), kind))
                .or_default()
                .clone()
        };
        let _guard = lock.lock().await;
        if let Some(hit) = self.fresh(server, kind, ttl) {
            return Ok(hit);
        }
        let listing = Arc::new(walk(upstreams, server, caller_headers, kind, page_cap).await?);
        self.store(server, kind, listing.clone());
        Ok(listing)
    }

    /// Replaces a server's listing; for tools, also that server's rows of the ownership map
    /// (never union-only: a tool the upstream stopped serving stops routing).
    fn store(&self, server: &Server, kind: ListKind, listing: Arc<Listing>) {
        if kind == ListKind::Tools {
            let names: BTreeSet<String> = listing
                .items
                .iter()
                .filter_map(|t| t.get("name").and_then(Value::as_str))
                .filter(|n| server.spec.tools.admits(n))
                .map(str::to_owned)
                .collect();
            let mut owners = self.owners.write().unwrap_or_else(|p| p.into_inner());
            withdraw(&mut owners, server.id());
            for name in names {
                owners
                    .entry(name)
                    .or_default()
                    .insert(server.id().to_string());
            }
        }
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        entries.insert(
            (server.id().to_string(), kind),
            Entry {
                revision: server.revision,
                fetched: Instant::now(),
                listing,
            },
        );
    }

    /// Server ids whose last tool listing contains `name`.
    pub fn owners_of(&self, name: &str) -> BTreeSet<String> {
        let owners = self.owners.read().unwrap_or_else(|p| p.into_inner());
        owners.get(name).cloned().unwrap_or_default()
    }

    /// Drops what belongs to servers that left the table or changed; only their own rows go.
    pub fn retain(&self, live: impl Fn(&str, u64) -> bool) {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let mut gone = BTreeSet::new();
        entries.retain(|(id, _), e| {
            let keep = live(id, e.revision);
            if !keep {
                gone.insert(id.clone());
            }
            keep
        });
        drop(entries);
        let mut owners = self.owners.write().unwrap_or_else(|p| p.into_inner());
        for id in &gone {
            withdraw(&mut owners, id);
        }
    }
}

fn withdraw(owners: &mut HashMap<String, BTreeSet<String>>, server_id: &str) {
    owners.retain(|_, ids| {
        ids.remove(server_id);
        !ids.is_empty()
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::RoutingTable;
    use serde_json::json;
    use switchboard_snapshot::{SystemLookup, load};

    fn table(yaml: &str) -> RoutingTable {
        RoutingTable::build(&load(yaml, &SystemLookup).unwrap()).unwrap()
    }

    fn tools(names: &[&str]) -> Arc<Listing> {
        Arc::new(Listing {
            items: names.iter().map(|n| json!({ "name": n })).collect(),
            ..Listing::default()
        })
    }

    #[test]
    fn a_listing_replaces_its_servers_rows_only() {
        let t = table(
            "servers:\n- {name: a, url: 'http://x/mcp'}\n- {name: b, url: 'http://x/mcp', tools: {deny: [hidden]}}\n",
        );
        let (a, b) = (t.server_by_id("a").unwrap(), t.server_by_id("b").unwrap());
        let c = Catalog::default();
        c.store(a, ListKind::Tools, tools(&["x", "y"]));
        c.store(b, ListKind::Tools, tools(&["y", "hidden"]));
        assert_eq!(c.owners_of("y").len(), 2);
        assert!(
            c.owners_of("hidden").is_empty(),
            "the server's filter applies to routing"
        );
        c.store(a, ListKind::Tools, tools(&["y"]));
        assert!(
            c.owners_of("x").is_empty(),
            "a tool a stopped serving stops routing"
        );
        assert_eq!(c.owners_of("y").len(), 2);
        c.retain(|id, _| id != "b");
        assert_eq!(c.owners_of("y").into_iter().collect::<Vec<_>>(), vec!["a"]);
        assert!(c.has_tools_of(a) && !c.has_tools_of(b));
    }
}
