//! Cached listings per server, and the tool-ownership map (tool name → server ids) that only
//! unprefixed names need. Both are caches: a replica that has neither rebuilds them on demand,
//! and a prefixed call never looks here (docs/architecture.md, invariants 2 and 3).
//!
//! A listing is fresh for `gateway.listingTtl`, unless the upstream has announced that list
//! changed (`notifications/tools/list_changed`, ...) since the walk that made it began: the
//! gateway notes each announcement as it reads it from an upstream stream, before relaying it
//! ([`Upstreams::list_generation`]), so a client that lists again at once is answered anew.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use moka::sync::Cache;
use std::time::Duration;

use serde_json::Value;
use switchboard_protocol::param_headers;
use tokio::time::Instant;

use crate::client::Upstreams;
use crate::error::UpstreamError;
use crate::listing::{Item, ListKind, Listing, ListingRequest, walk};
use crate::request_credential::{SHARED_PARTITION, partition_of};
use crate::trust::{self, ReviewMemory};
use switchboard_core::metrics::Metrics;
use switchboard_core::table::Server;

/// (server revision, kind, credential partition). A revision hashes the whole server spec,
/// id included, so lookups on the request path allocate nothing.
type EntryKey = (u64, ListKind, u64);

struct Entry {
    id: String,
    revision: u64,
    fetched: Instant,
    /// How many changes of this list the upstream had announced when the walk began.
    generation: u64,
    listing: Arc<Listing>,
}

/// The listings of the shared partition (one per server and kind: bounded by the table) and of
/// callers' own credentials (one per caller token for servers that use it: bounded in bytes and
/// dropped when idle, since tokens rotate and a caller that left never comes back for its
/// listing). Neither grows with time; both forget servers that left or changed.
pub struct Catalog {
    shared: Cache<EntryKey, Arc<Entry>>,
    callers: Cache<EntryKey, Arc<Entry>>,
    owners: RwLock<HashMap<String, BTreeSet<String>>>,
    /// One refresh at a time per (server, kind, partition): concurrent callers wait for it and
    /// share it. A lock nobody waits on for a while goes.
    refreshing: Cache<EntryKey, Arc<tokio::sync::Mutex<()>>>,
    /// Listings that failed lately, when (tokio's clock) and how. The cache's own expiry only
    /// bounds memory; whether a failure still answers is judged by its time.
    failures: Cache<EntryKey, (Instant, UpstreamError)>,
    /// What this replica's reviews remember per server: the tools shadowing compares, what was
    /// last logged (see [`crate::trust`]).
    reviewed: ReviewMemory,
    /// Servers (at a revision) that forward callers' headers and whose listing of a kind the
    /// upstream said is `private`: each caller's is kept apart, never served to another.
    said_private: Cache<(u64, ListKind), ()>,
}

/// How long a failed listing is answered from memory.
const FAILURE_TTL: Duration = Duration::from_secs(5);
/// Bytes (approximately: the listing's JSON) of callers' own listings kept at most, and how
/// long one unused is kept.
const CALLER_LISTING_BYTES: u64 = 16 * 1024 * 1024;
const CALLER_LISTING_IDLE: Duration = Duration::from_secs(600);
/// Listings of the shared partition kept at most (servers × kinds; far above any table).
const SHARED_LISTINGS: u64 = 100_000;

impl Default for Catalog {
    fn default() -> Self {
        Catalog {
            shared: Cache::builder()
                .max_capacity(SHARED_LISTINGS)
                .support_invalidation_closures()
                .build(),
            callers: Cache::builder()
                .max_capacity(CALLER_LISTING_BYTES)
                .weigher(|_, e: &Arc<Entry>| e.listing.weight())
                .time_to_idle(CALLER_LISTING_IDLE)
                .support_invalidation_closures()
                .build(),
            owners: RwLock::default(),
            refreshing: Cache::builder()
                .max_capacity(SHARED_LISTINGS)
                .time_to_idle(Duration::from_secs(60))
                .build(),
            failures: Cache::builder()
                .max_capacity(SHARED_LISTINGS)
                .time_to_live(FAILURE_TTL * 2)
                .build(),
            reviewed: ReviewMemory::default(),
            said_private: Cache::builder()
                .max_capacity(SHARED_LISTINGS)
                .time_to_idle(CALLER_LISTING_IDLE)
                .build(),
        }
    }
}

impl Catalog {
    fn cache(&self, partition: u64) -> &Cache<EntryKey, Arc<Entry>> {
        if partition == SHARED_PARTITION {
            &self.shared
        } else {
            &self.callers
        }
    }

    fn entry(&self, server: &Server, kind: ListKind, partition: u64) -> Option<Arc<Entry>> {
        self.cache(partition)
            .get(&(server.revision, kind, partition))
    }

    /// The listing, if it is younger than `ttl` and no change of its list was announced since
    /// its walk began (`generation`: the count of announcements now).
    fn fresh(
        &self,
        server: &Server,
        kind: ListKind,
        partition: u64,
        ttl: Duration,
        generation: u64,
    ) -> Option<Arc<Listing>> {
        let entry = self.entry(server, kind, partition)?;
        (entry.fetched.elapsed() < ttl && entry.generation == generation)
            .then(|| entry.listing.clone())
    }

    /// Whether `server`'s listings of `kind` are kept per caller although its credential is
    /// shared: its upstream said they are private, and it forwards callers' headers.
    pub fn lists_per_caller(&self, server: &Server, kind: ListKind) -> bool {
        self.said_private.contains_key(&(server.revision, kind))
    }

    /// Entries held now: (shared listings, callers' listings, their approximate bytes).
    pub fn sizes(&self) -> (u64, u64, u64) {
        self.shared.run_pending_tasks();
        self.callers.run_pending_tasks();
        (
            self.shared.entry_count(),
            self.callers.entry_count(),
            self.callers.weighted_size(),
        )
    }

    /// Whether this server's tools were ever listed at its current revision for this
    /// credential partition (stale or not).
    pub fn has_tools_of(&self, server: &Server, partition: u64) -> bool {
        self.cache(partition)
            .contains_key(&(server.revision, ListKind::Tools, partition))
    }

    /// The input schema of one of the server's tools, from its last listing (any age), when it
    /// may name parameter headers (`param_headers::MARK`): most name none, and a call to one
    /// then reads neither its schema nor its arguments into a tree (about 2,400 instructions a
    /// call of a legacy client to a 2026-07-28 upstream).
    pub(crate) fn header_schema(
        &self,
        server: &Server,
        partition: u64,
        tool: &str,
    ) -> Option<Value> {
        let entry = self.entry(server, ListKind::Tools, partition)?;
        let item = entry.listing.items.iter().find(|t| t.id() == Some(tool))?;
        if !item.may_hold(param_headers::MARK) {
            return None;
        }
        item.get("inputSchema")
    }

    /// The server's listing for the caller's credential partition, from cache when younger
    /// than `ttl`, else walked afresh (an empty listing is cached like any other).
    pub async fn listing(
        &self,
        upstreams: &Upstreams,
        request: &ListingRequest<'_>,
        ttl: Duration,
        page_cap: u32,
        metrics: &Metrics,
    ) -> Result<Arc<Listing>, UpstreamError> {
        let (server, kind) = (request.server, request.kind);
        let mut partition = request.credential.map_or(SHARED_PARTITION, |c| c.partition);
        // A listing its upstream says is private is one authorization context's: with a shared
        // credential that is the gateway's own, and every caller shares it, unless the server
        // forwards callers' own headers upstream, which then make it each caller's (walked and
        // kept per caller, never served to another).
        let own_partition = partition_of(request.caller_tag);
        if partition == SHARED_PARTITION && self.lists_per_caller(server, kind) {
            partition = own_partition;
        }
        let generation = || upstreams.list_generation(server, kind.list());
        if let Some(hit) = self.fresh(server, kind, partition, ttl, generation()) {
            return Ok(hit);
        }
        let key = (server.revision, kind, partition);
        let lock = self.refreshing.get_with(key, Default::default);
        let _guard = lock.lock().await;
        // Read before the walk: a change announced while it runs leaves its result stale.
        let walked_at = generation();
        if let Some(hit) = self.fresh(server, kind, partition, ttl, walked_at) {
            return Ok(hit);
        }
        if let Some(failure) = self.recent_failure(&key, ttl) {
            return Err(failure);
        }
        let mut listing = match walk(upstreams, request, page_cap).await {
            Ok(listing) => listing,
            Err(e) => {
                self.remember_failure(key, &e);
                return Err(e);
            }
        };
        self.failures.invalidate(&key);
        if trust::reviews(server, kind) {
            let shared = partition == SHARED_PARTITION;
            trust::review(server, &mut listing, shared, &self.reviewed, metrics);
        }
        metrics.listing_walked(
            &server.metric_name,
            kind.field(),
            listing.items.len(),
            listing.bytes(),
        );
        if partition == SHARED_PARTITION
            && listing.said_private
            && !server.spec.headers.forward.is_empty()
        {
            self.said_private.insert((server.revision, kind), ());
            partition = own_partition;
        }
        let listing = Arc::new(listing);
        self.store(server, kind, partition, walked_at, listing.clone());
        Ok(listing)
    }

    /// A listing that failed moments ago fails again without waiting: a hung upstream costs
    /// aggregate listings its timeout once per `FAILURE_TTL`, not on every request. Auth
    /// failures are the caller's to answer and are never remembered; a probe (`ttl` zero)
    /// always asks.
    fn recent_failure(&self, key: &EntryKey, ttl: Duration) -> Option<UpstreamError> {
        let (at, error) = self.failures.get(key)?;
        (at.elapsed() < FAILURE_TTL.min(ttl)).then_some(error)
    }

    fn remember_failure(&self, key: EntryKey, error: &UpstreamError) {
        if matches!(
            error,
            UpstreamError::AuthRequired { .. }
                | UpstreamError::Unauthorized { .. }
                | UpstreamError::ScopeRequired(_)
        ) {
            return;
        }
        self.failures.insert(key, (Instant::now(), error.clone()));
    }

    /// Replaces a server's listing; for tools in the shared partition, also that server's rows
    /// of the ownership map (never union-only: a tool the upstream stopped serving stops
    /// routing). Caller-credential listings stay out of the map: they speak for one caller.
    fn store(
        &self,
        server: &Server,
        kind: ListKind,
        partition: u64,
        generation: u64,
        listing: Arc<Listing>,
    ) {
        if kind == ListKind::Tools && partition == SHARED_PARTITION {
            let names: BTreeSet<String> = listing
                .items
                .iter()
                .filter_map(Item::id)
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
        self.cache(partition).insert(
            (server.revision, kind, partition),
            Arc::new(Entry {
                id: server.id().to_string(),
                revision: server.revision,
                fetched: Instant::now(),
                generation,
                listing,
            }),
        );
    }

    /// Server ids whose last tool listing contains `name`.
    pub fn owners_of(&self, name: &str) -> BTreeSet<String> {
        let owners = self.owners.read().unwrap_or_else(|p| p.into_inner());
        owners.get(name).cloned().unwrap_or_default()
    }

    /// Drops what belongs to servers that left the table or changed; only their own rows go.
    pub fn retain(&self, live: impl Fn(&str, u64) -> bool) {
        let mut gone = BTreeSet::new();
        for (_, entry) in self.shared.iter() {
            if !live(&entry.id, entry.revision) {
                gone.insert(entry.id.clone());
            }
        }
        let live = Arc::new(
            self.shared
                .iter()
                .chain(self.callers.iter())
                .filter(|(_, e)| live(&e.id, e.revision))
                .map(|(_, e)| e.revision)
                .collect::<std::collections::HashSet<u64>>(),
        );
        for cache in [&self.shared, &self.callers] {
            let live = live.clone();
            // (only fails when the cache was built without invalidation closures)
            let _ = cache.invalidate_entries_if(move |_, e| !live.contains(&e.revision));
        }
        let mut owners = self.owners.write().unwrap_or_else(|p| p.into_inner());
        for id in &gone {
            withdraw(&mut owners, id);
            self.reviewed.forget(id);
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
    use serde_json::json;
    use switchboard_core::table::RoutingTable;
    use switchboard_snapshot::{SystemLookup, load};

    fn table(yaml: &str) -> RoutingTable {
        RoutingTable::build(&load(yaml, &SystemLookup).unwrap()).unwrap()
    }

    fn tools(names: &[&str]) -> Arc<Listing> {
        Arc::new(Listing {
            items: names
                .iter()
                .map(|n| Item::new(ListKind::Tools, &json!({ "name": n })))
                .collect(),
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
        c.store(a, ListKind::Tools, SHARED_PARTITION, 0, tools(&["x", "y"]));
        c.store(
            b,
            ListKind::Tools,
            SHARED_PARTITION,
            0,
            tools(&["y", "hidden"]),
        );
        c.store(b, ListKind::Tools, 7, 0, tools(&["private"]));
        assert!(
            c.owners_of("private").is_empty(),
            "a caller's own catalog stays out of the map"
        );
        assert_eq!(c.owners_of("y").len(), 2);
        assert!(
            c.owners_of("hidden").is_empty(),
            "the server's filter applies to routing"
        );
        c.store(a, ListKind::Tools, SHARED_PARTITION, 0, tools(&["y"]));
        assert!(
            c.owners_of("x").is_empty(),
            "a tool a stopped serving stops routing"
        );
        assert_eq!(c.owners_of("y").len(), 2);
        c.retain(|id, _| id != "b");
        assert_eq!(c.owners_of("y").into_iter().collect::<Vec<_>>(), vec!["a"]);
        assert!(c.has_tools_of(a, SHARED_PARTITION) && !c.has_tools_of(b, SHARED_PARTITION));
    }

    /// `notifications/tools/list_changed` read from the upstream (the count of them, noted
    /// before the notification is relayed) outdates the listing whatever its age, for that
    /// list only; routing by the old rows stays until a listing replaces them.
    #[tokio::test(start_paused = true)]
    async fn an_announced_change_outdates_a_listing_at_once() {
        let t = table("servers:\n- {name: a, url: 'http://x/mcp'}\n");
        let a = t.server_by_id("a").unwrap();
        let c = Catalog::default();
        let ttl = Duration::from_secs(60);
        c.store(a, ListKind::Tools, SHARED_PARTITION, 3, tools(&["x"]));
        c.store(a, ListKind::Prompts, SHARED_PARTITION, 0, tools(&[]));
        assert!(
            c.fresh(a, ListKind::Tools, SHARED_PARTITION, ttl, 3)
                .is_some()
        );
        assert!(
            c.fresh(a, ListKind::Tools, SHARED_PARTITION, ttl, 4)
                .is_none(),
            "a change announced after the walk began"
        );
        assert!(
            c.fresh(a, ListKind::Prompts, SHARED_PARTITION, ttl, 0)
                .is_some()
        );
        assert!(c.has_tools_of(a, SHARED_PARTITION));
        assert_eq!(
            c.owners_of("x").into_iter().collect::<Vec<_>>(),
            vec!["a"],
            "until a listing replaces them"
        );
        assert_eq!(
            ListKind::ResourceTemplates.list(),
            ListKind::Resources.list()
        );
    }

    /// Expiry on tokio's clock, paused: a listing is served from memory for exactly its ttl,
    /// a failure for at most FAILURE_TTL (never longer than the ttl), an auth failure never.
    #[tokio::test(start_paused = true)]
    async fn a_listing_is_fresh_for_its_ttl_and_a_failure_for_five_seconds_at_most() {
        use tokio::time::advance;
        let t = table("servers:\n- {name: a, url: 'http://x/mcp'}\n");
        let a = t.server_by_id("a").unwrap();
        let c = Catalog::default();
        let ttl = Duration::from_secs(60);
        let ms = Duration::from_millis(1);
        c.store(a, ListKind::Tools, SHARED_PARTITION, 0, tools(&["x"]));
        advance(ttl - ms).await;
        assert!(
            c.fresh(a, ListKind::Tools, SHARED_PARTITION, ttl, 0)
                .is_some()
        );
        advance(ms).await;
        assert!(
            c.fresh(a, ListKind::Tools, SHARED_PARTITION, ttl, 0)
                .is_none(),
            "expired at its ttl"
        );
        assert!(
            c.has_tools_of(a, SHARED_PARTITION),
            "an expired listing still routes until replaced"
        );

        let key = (a.revision, ListKind::Tools, SHARED_PARTITION);
        let down = UpstreamError::Unavailable {
            server: "a".into(),
            detail: "connection refused".into(),
        };
        c.remember_failure(key, &down);
        advance(FAILURE_TTL - ms).await;
        assert!(c.recent_failure(&key, ttl).is_some());
        assert!(
            c.recent_failure(&key, Duration::from_secs(1)).is_none(),
            "never longer than the ttl"
        );
        assert!(
            c.recent_failure(&key, Duration::ZERO).is_none(),
            "a probe always asks"
        );
        advance(ms).await;
        assert!(
            c.recent_failure(&key, ttl).is_none(),
            "forgotten after FAILURE_TTL"
        );

        let unauthorized = UpstreamError::AuthRequired {
            server: "a".into(),
            www_authenticate: String::new(),
        };
        c.remember_failure(key, &unauthorized);
        assert!(
            c.recent_failure(&key, ttl).is_none(),
            "an auth failure is the caller's to answer, never remembered"
        );
    }
}
