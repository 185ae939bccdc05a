//! Merged listings on the aggregate endpoint: every server in scope is listed concurrently (each
//! under its own budget, so the slowest bounds the wait, not the sum), items are prefixed and
//! filtered, one server's failure is reported beside the others' items, and the merged list is
//! paged with gateway-issued opaque cursors.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value, json};

use crate::errors::GatewayError;
use crate::route::prefixed_name;
use crate::scope::Caller;
use crate::state::Gateway;
use crate::table::Server;
use crate::upstream::listing::{ListKind, Listing};

/// Items per page of a merged list.
pub const PAGE_SIZE: usize = 1000;
pub const META_LISTING_ERRORS: &str = "switchboard.dev/listingErrors";
pub const META_LISTING_WARNINGS: &str = "switchboard.dev/listingWarnings";

/// Everything in scope of one kind, merged in snapshot order.
pub struct Merged {
    pub items: Vec<Value>,
    /// Servers whose listing failed, and why; the others' items are still here.
    pub failures: Vec<(String, GatewayError)>,
    pub warnings: Vec<Value>,
    pub ttl_ms: u64,
    pub private: bool,
}

pub async fn merge(
    gw: &Gateway,
    caller: &Caller,
    servers: &[Arc<Server>],
    kind: ListKind,
) -> Merged {
    let listings =
        futures_util::future::join_all(servers.iter().map(|s| gw.listing(caller, s, kind))).await;
    let mut merged = Merged {
        items: Vec::new(),
        failures: Vec::new(),
        warnings: Vec::new(),
        ttl_ms: u64::MAX,
        private: false,
    };
    for (server, listing) in servers.iter().zip(listings) {
        match listing {
            Ok(listing) => absorb(&mut merged, caller, server, kind, &listing),
            Err(e) => merged.failures.push((server.id().to_string(), e)),
        }
    }
    if merged.ttl_ms == u64::MAX {
        merged.ttl_ms = 0;
    }
    merged
}

impl Merged {
    /// The failures as reported to clients: `[{server, kind, message}]`.
    pub fn errors_json(&self) -> Vec<Value> {
        self.failures
            .iter()
            .map(|(server, e)| json!({ "server": server, "kind": e.rest_code(), "message": e.to_string() }))
            .collect()
    }
}

fn absorb(
    merged: &mut Merged,
    caller: &Caller,
    server: &Server,
    kind: ListKind,
    listing: &Listing,
) {
    for message in &listing.warnings {
        tracing::warn!(server = server.id(), kind = kind.method(), %message, "partial listing");
        merged
            .warnings
            .push(json!({ "server": server.id(), "message": message }));
    }
    merged.ttl_ms = merged.ttl_ms.min(listing.ttl_ms.unwrap_or(0));
    merged.private |= listing.private;
    for item in &listing.items {
        if let Some(public) = public_item(caller, server, kind, item) {
            merged.items.push(public);
        }
    }
}

/// The item as the aggregate shows it: its identifying field prefixed; `None` when the caller
/// may not see it.
fn public_item(caller: &Caller, server: &Server, kind: ListKind, item: &Value) -> Option<Value> {
    let field = match kind {
        ListKind::Tools | ListKind::Prompts => "name",
        ListKind::Resources => "uri",
        ListKind::ResourceTemplates => "uriTemplate",
    };
    let own = item.get(field)?.as_str()?;
    if kind == ListKind::Tools && !caller.sees_tool(server, own) {
        return None;
    }
    let mut item = item.clone();
    item[field] = Value::from(prefixed_name(server.prefix(), own));
    Some(item)
}

/// One page of the merged list of `kind`, as an MCP list result.
pub async fn list(
    gw: &Gateway,
    caller: &Caller,
    kind: ListKind,
    cursor: Option<&str>,
) -> Result<Value, GatewayError> {
    let offset = match cursor {
        Some(c) => decode_cursor(c)
            .ok_or_else(|| GatewayError::InvalidParams(format!("invalid cursor {c:?}")))?,
        None => 0,
    };
    let scope = caller.servers_in_scope();
    let merged = merge(gw, caller, &scope, kind).await;
    let mut result = Map::new();
    let offset = offset.min(merged.items.len());
    let end = (offset + PAGE_SIZE).min(merged.items.len());
    let page: Vec<Value> = merged
        .items
        .get(offset..end)
        .map(<[Value]>::to_vec)
        .unwrap_or_default();
    result.insert(kind.field().into(), Value::Array(page));
    if end < merged.items.len() {
        result.insert("nextCursor".into(), Value::from(encode_cursor(end)));
    }
    result.insert("ttlMs".into(), Value::from(merged.ttl_ms));
    result.insert(
        "cacheScope".into(),
        Value::from(if merged.private { "private" } else { "public" }),
    );
    let mut meta = Map::new();
    if !merged.failures.is_empty() {
        meta.insert(
            META_LISTING_ERRORS.into(),
            Value::Array(merged.errors_json()),
        );
    }
    if !merged.warnings.is_empty() {
        meta.insert(META_LISTING_WARNINGS.into(), Value::Array(merged.warnings));
    }
    if !meta.is_empty() {
        result.insert("_meta".into(), Value::Object(meta));
    }
    Ok(Value::Object(result))
}

fn encode_cursor(offset: usize) -> String {
    URL_SAFE_NO_PAD.encode(format!("sb1:{offset}"))
}

fn decode_cursor(cursor: &str) -> Option<usize> {
    let raw = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    std::str::from_utf8(&raw)
        .ok()?
        .strip_prefix("sb1:")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        assert_eq!(decode_cursor(&encode_cursor(1000)), Some(1000));
        assert_eq!(decode_cursor("nonsense"), None);
        assert_eq!(decode_cursor(""), None);
    }
}
