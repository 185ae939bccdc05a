//! Tool definitions reviewed where listings are made (docs/architecture.md, invariant 14):
//! every tools listing of a server whose `tools.pinning` is `warn` or `hold` is reviewed once,
//! when it is walked (not on each request that reads it), against the server's approvals and
//! the poisoning checks of `switchboard-trust`; under `hold` what is not approved leaves the
//! listing there, so no face (aggregate, single server, virtual servers, REST, the LLM loop)
//! and no routing map ever sees it. A call of a held tool is refused by
//! [`crate::UpstreamPlane::call`].
//!
//! Shadowing compares a server's tools with the other servers' last shared listings on this
//! replica, when the listing is stored: a tool imitating one of a server listed later is
//! flagged when its own listing is walked again (within `gateway.listingTtl`).

use std::collections::HashMap;
use std::sync::RwLock;

use serde_json::Value;
use switchboard_core::metrics::Metrics;
use switchboard_core::table::Server;
use switchboard_snapshot::Pinning;
use switchboard_trust::{FindingKind, Listed, Review, ReviewEntry, ShadowKey, Standing, shadowing};

use crate::listing::{FlaggedTool, HeldTool, ListKind, Listing, ListingReview};

/// What this replica remembers of its reviews, per server: the shadowing keys of the last
/// shared listing, and what the last review said in the log (a flag is logged when it is new or
/// changed, not on every walk: a `warn` server's flagged tool would otherwise be logged every
/// `listingTtl` on every replica).
#[derive(Default)]
pub(crate) struct ReviewMemory {
    keys: RwLock<HashMap<String, Vec<ShadowKey>>>,
    said: RwLock<HashMap<String, u64>>,
}

impl ReviewMemory {
    pub(crate) fn forget(&self, server_id: &str) {
        self.keys
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(server_id);
        self.said
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(server_id);
    }

    /// Whether `report` says something else than the last one logged for `server_id` (and
    /// remembers it).
    fn news(&self, server_id: &str, report: &ListingReview) -> bool {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        for held in &report.held {
            (&held.name, &held.why).hash(&mut hasher);
        }
        0u8.hash(&mut hasher);
        for flagged in &report.flagged {
            (&flagged.name, &flagged.what).hash(&mut hasher);
        }
        let now = hasher.finish();
        let mut said = self.said.write().unwrap_or_else(|p| p.into_inner());
        said.insert(server_id.to_string(), now) != Some(now)
    }
}

/// Reviews a freshly walked listing of `server` in place (tools only; nothing under `off`).
/// `shared`: the listing speaks for every caller (the gateway's own credential), so it takes
/// part in shadowing; a caller's own listing does not.
pub(crate) fn review(
    server: &Server,
    listing: &mut Listing,
    shared: bool,
    memory: &ReviewMemory,
    metrics: &Metrics,
) {
    let tools = &server.spec.tools;
    if tools.pinning == Pinning::Off {
        return;
    }
    let mut report = ListingReview::default();
    let mut counts: HashMap<&'static str, usize> = HashMap::new();
    let mut keys = Vec::with_capacity(listing.items.len());
    let mut reviewed = Vec::with_capacity(listing.items.len());
    for item in listing.items.drain(..) {
        let Some(name) = item.id().map(str::to_owned) else {
            reviewed.push((item, None));
            continue;
        };
        let definition: Value =
            serde_json::from_str(&item.json_with_id(&name)).unwrap_or(Value::Null);
        if shared {
            keys.push(ShadowKey::of(
                &name,
                definition.get("description").and_then(Value::as_str),
            ));
        }
        let review = Review::of(&definition, &tools.approved);
        reviewed.push((item, Some((name, review))));
    }
    // Held tools take part too: what a server holds back still imitates what it imitates.
    if shared {
        for (name, finding) in memory.compare(server.id(), keys) {
            if let Some((_, Some((_, review)))) = reviewed
                .iter_mut()
                .find(|(_, r)| r.as_ref().is_some_and(|(n, _)| *n == name))
            {
                review.findings.push(finding);
            }
        }
    }
    for (item, named) in reviewed {
        let Some((name, review)) = named else {
            listing.items.push(item);
            continue;
        };
        count(&review, &mut counts);
        if tools.pinning == Pinning::Hold && !review.approved() {
            *counts.entry("held").or_default() += 1;
            report.held.push(HeldTool {
                why: review.held_why(),
                review,
                name,
            });
            continue;
        }
        if review.flagged() {
            report.flagged.push(FlaggedTool {
                what: review.summary(),
                name,
                review,
            });
        }
        listing.items.push(item);
    }
    for state in ["held", "changed", "new"]
        .into_iter()
        .chain(FindingKind::ALL.iter().map(|k| k.as_str()))
    {
        metrics.tools_reviewed(
            &server.metric_name,
            state,
            counts.get(state).copied().unwrap_or(0),
        );
    }
    // Logged when it changes (the metric says it on every walk).
    if memory.news(server.id(), &report) {
        for held in &report.held {
            tracing::warn!(server = server.id(), tool = %held.name, why = %held.why, "tool held: its definition is not approved (tools.pinning: hold)");
        }
        for flagged in &report.flagged {
            tracing::warn!(server = server.id(), tool = %flagged.name, what = %flagged.what, "tool definition flagged");
        }
    }
    listing.review = Some(report);
}

fn count(review: &Review, counts: &mut HashMap<&'static str, usize>) {
    match review.standing {
        Standing::Changed(_) => *counts.entry("changed").or_default() += 1,
        Standing::New => *counts.entry("new").or_default() += 1,
        Standing::Approved | Standing::Unpinned => {}
    }
    let mut kinds: Vec<FindingKind> = review.findings.iter().map(|f| f.kind).collect();
    kinds.dedup();
    for kind in kinds {
        *counts.entry(kind.as_str()).or_default() += 1;
    }
}

impl ReviewMemory {
    /// Replaces `server_id`'s keys and returns its tools' shadowing findings against every
    /// other server's (by tool name).
    fn compare(
        &self,
        server_id: &str,
        keys: Vec<ShadowKey>,
    ) -> Vec<(String, switchboard_trust::Finding)> {
        let mut all = self.keys.write().unwrap_or_else(|p| p.into_inner());
        all.insert(server_id.to_string(), keys);
        let servers: Vec<&String> = all.keys().collect();
        let Some(me) = servers.iter().position(|s| *s == server_id) else {
            return Vec::new();
        };
        let listed: Vec<Listed<'_>> = servers
            .iter()
            .enumerate()
            .flat_map(|(i, s)| all[*s].iter().map(move |key| Listed { server: i, key }))
            .collect();
        shadowing(&listed, |i| servers[i].to_string())
            .into_iter()
            .filter(|(i, _)| listed[*i].server == me)
            .map(|(i, finding)| (listed[i].key.name.clone(), finding))
            .collect()
    }
}

/// Whether `kind` of `server` is reviewed at all.
pub(crate) fn reviews(server: &Server, kind: ListKind) -> bool {
    kind == ListKind::Tools && server.spec.tools.pinning != Pinning::Off
}

/// A listing relayed as the upstream gave it (the single-server endpoint): under `hold`, the
/// tools whose definitions are not approved taken out and noted on the request's record. Only
/// digests are computed here, on every relayed listing; the checks and the flags of `warn`
/// come from the catalog's review, once per walk, not per request.
pub(crate) fn review_relayed(server: &Server, tools: &mut Vec<Value>) {
    let trust = &server.spec.tools;
    if trust.pinning != Pinning::Hold {
        return;
    }
    tools.retain(|tool| {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        let digest = switchboard_trust::Approval::of(tool);
        match Standing::of(name, &digest, &trust.approved).words() {
            None => true,
            Some(why) => {
                switchboard_core::audit::note(|n| n.flag_tool(format!("{name}: held: {why}")));
                false
            }
        }
    });
}

/// The listed tools (those the server's filter admits) that are not approved as they are, or
/// that the review flags, sorted by name; `None` under `tools.pinning: off`. Served tools are
/// reviewed here (a listing's review keeps only what it flags); held ones come from the
/// listing's review, which took them out; shadowing is the catalog's (it compares servers).
pub fn review_entries(server: &Server, listing: &Listing) -> Option<Vec<ReviewEntry>> {
    let tools = &server.spec.tools;
    if tools.pinning == Pinning::Off {
        return None;
    }
    let of_listing = listing.review.as_ref();
    let mut out: Vec<ReviewEntry> = Vec::new();
    for item in &listing.items {
        let Some(name) = item.id().filter(|n| tools.admits(n)) else {
            continue;
        };
        let flagged = of_listing.and_then(|r| r.flagged.iter().find(|f| f.name == name));
        let review = match flagged {
            Some(flagged) => flagged.review.clone(),
            None => {
                let definition: Value =
                    serde_json::from_str(&item.json_with_id(name)).unwrap_or_default();
                Review::of(&definition, &tools.approved)
            }
        };
        out.extend(ReviewEntry::of(name, &review, false));
    }
    for held in of_listing.map(|r| r.held.as_slice()).unwrap_or_default() {
        if tools.admits(&held.name) {
            out.extend(ReviewEntry::of(&held.name, &held.review, true));
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Some(out)
}
