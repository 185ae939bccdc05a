//! Merged listings on the aggregate endpoint: every server in scope is listed concurrently (each
//! under its own budget, so the slowest bounds the wait, not the sum), items are prefixed and
//! filtered, one server's failure is reported beside the others' items, and the merged list is
//! paged with gateway-issued opaque cursors.

use std::ops::Range;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::ser::{Serialize, SerializeSeq, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::context::McpContext;
use switchboard_core::errors::GatewayError;
use switchboard_core::route::{prefix_ui_links, prefixed_name, prefixed_uri};
use switchboard_core::scope::Caller;
use switchboard_core::table::Server;
use switchboard_core::virtual_server::hide_parameters;
use switchboard_protocol::Era;
use switchboard_upstream::listing::{ListKind, Listing};

/// Items per page of a merged list.
pub const PAGE_SIZE: usize = 1000;
pub const META_LISTING_ERRORS: &str = "switchboard.dev/listingErrors";
pub const META_LISTING_WARNINGS: &str = "switchboard.dev/listingWarnings";

/// Everything in scope of one kind, merged in snapshot order. Items are not copied: the merge
/// keeps the cached listings and the positions of the visible items, and serializes them with
/// their prefixed names on the way out (a 50,000-tool catalog is never held twice).
pub struct Merged {
    kind: ListKind,
    listings: Vec<(Arc<Server>, Arc<Listing>)>,
    /// (index into `listings`, index into that listing's items), visible ones only.
    visible: Vec<(usize, usize)>,
    /// The visible tools (as in `visible`, in its order) whose parameters the caller's grant
    /// binds, and those parameters: left out of what is served (empty for most callers).
    hidden: Vec<((usize, usize), Vec<String>)>,
    /// Servers whose listing failed, and why; the others' items are still here.
    pub failures: Vec<(String, GatewayError)>,
    pub warnings: Vec<Value>,
    pub ttl_ms: u64,
    pub private: bool,
}

pub async fn merge(
    cx: &McpContext,
    caller: &Caller,
    servers: &[Arc<Server>],
    kind: ListKind,
) -> Merged {
    let listings = futures_util::future::join_all(
        servers.iter().map(|s| cx.upstream.listing(caller, s, kind)),
    )
    .await;
    let mut merged = Merged {
        kind,
        listings: Vec::new(),
        visible: Vec::new(),
        hidden: Vec::new(),
        failures: Vec::new(),
        warnings: Vec::new(),
        ttl_ms: u64::MAX,
        private: false,
    };
    for (server, listing) in servers.iter().zip(listings) {
        match listing {
            Ok(listing) => absorb(&mut merged, caller, server, listing),
            Err(e) => merged.failures.push((server.id().to_string(), e.into())),
        }
    }
    if merged.ttl_ms == u64::MAX {
        merged.ttl_ms = 0;
    }
    merged
}

/// One server whose listing failed, as every listing reports it: `{server, kind, message}`.
pub(crate) fn listing_error(server: &str, e: &GatewayError) -> Value {
    json!({ "server": server, "kind": e.rest_code(), "message": e.to_string() })
}

impl Merged {
    /// The failures as reported to clients: `[{server, kind, message}]`.
    pub fn errors_json(&self) -> Vec<Value> {
        self.failures
            .iter()
            .map(|(server, e)| listing_error(server, e))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.visible.len()
    }

    /// About how many bytes of JSON text items `range` are as served.
    fn text_bytes(&self, range: Range<usize>) -> usize {
        self.visible[range]
            .iter()
            .map(|&(l, i)| {
                let (server, listing) = &self.listings[l];
                // (the item, its prefixed name's prefix and separator, and a comma)
                listing.items[i].bytes() + server.prefix().len() + 8
            })
            .sum()
    }

    /// Items `range` as the aggregate shows them, ready to serialize.
    pub fn items(&self, range: Range<usize>) -> PublicItems<'_> {
        PublicItems {
            merged: self,
            range,
        }
    }
}

fn absorb(merged: &mut Merged, caller: &Caller, server: &Arc<Server>, listing: Arc<Listing>) {
    let kind = merged.kind;
    for message in &listing.warnings {
        tracing::warn!(server = server.id(), kind = kind.method(), %message, "partial listing");
        merged
            .warnings
            .push(json!({ "server": server.id(), "message": message }));
    }
    merged.ttl_ms = merged.ttl_ms.min(listing.ttl_ms.unwrap_or(0));
    merged.private |= listing.private;
    let at = merged.listings.len();
    let binds = kind == ListKind::Tools && caller.has_argument_rules();
    for (i, item) in listing.items.iter().enumerate() {
        let Some(own) = item.id() else { continue };
        if kind != ListKind::Tools || caller.sees_tool(server, own) {
            merged.visible.push((at, i));
            if binds {
                let bound = caller.bound_parameters(server, own);
                if !bound.is_empty() {
                    let bound = bound.into_iter().map(str::to_owned).collect();
                    merged.hidden.push(((at, i), bound));
                    // Another caller sees this tool otherwise: the list is this caller's.
                    merged.private = true;
                }
            }
        }
    }
    merged.listings.push((server.clone(), listing));
}

/// A slice of the merged list, serialized item by item.
pub struct PublicItems<'a> {
    merged: &'a Merged,
    range: Range<usize>,
}

impl Serialize for PublicItems<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let merged = self.merged;
        let mut seq = serializer.serialize_seq(Some(self.range.len()))?;
        for &at in &merged.visible[self.range.clone()] {
            let text = merged.served(at).map_err(serde::ser::Error::custom)?;
            let raw = RawValue::from_string(text).map_err(serde::ser::Error::custom)?;
            seq.serialize_element(&raw)?;
        }
        seq.end()
    }
}

impl Merged {
    /// Visible item `(l, i)` (an index into `listings`, and into that listing's items) as this
    /// endpoint serves it: prefixed, without the parameters the caller's grant binds, with its
    /// UI links named as here.
    fn served(&self, (l, i): (usize, usize)) -> Result<String, serde_json::Error> {
        let (server, listing) = &self.listings[l];
        let item = &listing.items[i];
        let own = item.id().unwrap_or_default();
        let named = match self.kind {
            ListKind::Resources | ListKind::ResourceTemplates => prefixed_uri(server.prefix(), own),
            ListKind::Tools | ListKind::Prompts => prefixed_name(server.prefix(), own),
        };
        let text = item.json_with_id(&named);
        let hidden = self
            .hidden
            .binary_search_by_key(&(l, i), |(at, _)| *at)
            .ok()
            .map(|h| self.hidden[h].1.as_slice());
        // A tool that links to an MCP Apps UI names the resource as this endpoint does (a
        // look at its text first: most tools have none, and are not parsed).
        let links_ui = self.kind == ListKind::Tools && text.contains("resourceUri");
        if hidden.is_some() || links_ui {
            let prefix = links_ui.then(|| server.prefix());
            return edited_tool(&text, hidden, prefix);
        }
        Ok(text)
    }
}

/// A listed tool's JSON without the parameters `bound` (a grant sets them from the caller), and
/// with its UI links named under `ui_prefix`.
fn edited_tool(
    text: &str,
    bound: Option<&[String]>,
    ui_prefix: Option<&str>,
) -> Result<String, serde_json::Error> {
    let mut tool: Map<String, Value> = serde_json::from_str(text)?;
    if let Some(bound) = bound {
        hide_parameters(&mut tool, bound);
    }
    if let Some(prefix) = ui_prefix {
        prefix_ui_links(&mut tool, prefix);
    }
    serde_json::to_string(&tool)
}

/// One page of a merged list as an MCP list result (written once, straight from the cached
/// listings).
struct ListResult<'a> {
    merged: &'a Merged,
    page: Range<usize>,
    next_cursor: Option<String>,
    /// A 2026-07-28 client: its revision's result fields are written (a legacy one gets none).
    modern: bool,
}

impl ListResult<'_> {
    /// The result's JSON text. Its items are text already (each written by the gateway, or an
    /// upstream's read as JSON when it was walked), so they are written as they are, not read
    /// again as serde's raw values would be.
    fn write(&self) -> Result<String, serde_json::Error> {
        let merged = self.merged;
        // Written into a buffer of about its size at once: grown by doubling, a listing of
        // tens of megabytes would be held one and a half times over while it is copied.
        let mut out = Vec::with_capacity(merged.text_bytes(self.page.clone()) + 1024);
        out.push(b'{');
        serde_json::to_writer(&mut out, merged.kind.field())?;
        out.extend_from_slice(b":[");
        for (n, &at) in merged.visible[self.page.clone()].iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            out.extend_from_slice(merged.served(at)?.as_bytes());
        }
        out.push(b']');
        if let Some(cursor) = &self.next_cursor {
            member(&mut out, "nextCursor", cursor)?;
        }
        if self.modern {
            member(&mut out, "ttlMs", &merged.ttl_ms)?;
            let scope = if merged.private { "private" } else { "public" };
            member(&mut out, "cacheScope", &scope)?;
            member(&mut out, "resultType", &"complete")?;
        }
        let mut meta = Map::new();
        if !merged.failures.is_empty() {
            meta.insert(
                META_LISTING_ERRORS.into(),
                Value::Array(merged.errors_json()),
            );
        }
        if !merged.warnings.is_empty() {
            meta.insert(
                META_LISTING_WARNINGS.into(),
                Value::Array(merged.warnings.clone()),
            );
        }
        if !meta.is_empty() {
            member(&mut out, "_meta", &meta)?;
        }
        out.push(b'}');
        // (serde_json writes UTF-8, and the items are text)
        String::from_utf8(out).map_err(serde::ser::Error::custom)
    }
}

/// `,"<name>":<value>` (a name without escapes).
fn member(out: &mut Vec<u8>, name: &str, value: &impl Serialize) -> Result<(), serde_json::Error> {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
    serde_json::to_writer(out, value)
}

/// One page of the merged list of `kind`, as an MCP list result's JSON text.
pub async fn list(
    cx: &McpContext,
    caller: &Caller,
    kind: ListKind,
    cursor: Option<&str>,
    era: Era,
) -> Result<String, GatewayError> {
    let offset = match cursor {
        Some(c) => decode_cursor(c)
            .ok_or_else(|| GatewayError::InvalidParams(format!("invalid cursor {c:?}")))?,
        None => 0,
    };
    let scope = caller.servers_in_scope();
    let merged = merge(cx, caller, &scope, kind).await;
    let offset = offset.min(merged.len());
    let end = (offset + PAGE_SIZE).min(merged.len());
    let result = ListResult {
        merged: &merged,
        page: offset..end,
        next_cursor: (end < merged.len()).then(|| encode_cursor(end)),
        modern: era == Era::Rev2026,
    };
    result
        .write()
        .map_err(|e| GatewayError::InvalidRequest(format!("cannot encode the list: {e}")))
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
    use crate::test_support::{caller, context, upstream_at};

    /// The in-process upstream's `echo` beside an OpenAPI server's two tools (whose schemas
    /// share a definition) and a server that answers no MCP, merged for a 2026-07-28 and a
    /// legacy client.
    #[tokio::test]
    async fn a_merged_page_is_written_whole_with_its_hints() {
        let upstream = upstream_at().await;
        let document = json!({
            "openapi": "3.1.0", "info": {"title": "t", "version": "1"},
            "components": {"schemas": {"Pet": {"type": "object", "properties": {"name": {"type": "string"}}}}},
            "paths": {"/pets": {
                "get": {"operationId": "listPets", "responses": {"200": {"description": "ok",
                    "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Pet"}}}}}}},
                "post": {"operationId": "addPet", "requestBody": {"content": {"application/json":
                    {"schema": {"$ref": "#/components/schemas/Pet"}}}}, "responses": {"201": {"description": "made"}}}}}
        });
        let config = format!(
            r#"
gateway: {{sessionKey: a-session-key-for-tests}}
servers:
- {{name: up, url: '{base}/mcp', timeout: 5s}}
- name: api
  url: http://127.0.0.1:9/api
  openapi: {{document: {{value: '{document}'}}}}
- {{name: side, url: '{base}/side', timeout: 5s}}
keys:
- {{name: k, secret: s-k, servers: [up, api, side]}}
"#,
            base = upstream.base,
        );
        let cx = context(&config);
        let caller = caller(&cx, "s-k").await;
        let text = list(&cx, &caller, ListKind::Tools, None, Era::Rev2026)
            .await
            .unwrap();
        let result: Value = serde_json::from_str(&text).unwrap();
        let names: Vec<&str> = result["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["up__echo", "api__addPet", "api__listPets"]);
        let listed = &result["tools"][2];
        assert_eq!(
            listed["outputSchema"]["$defs"]["Pet"]["properties"]["name"]["type"],
            "string"
        );
        assert_eq!(
            result["ttlMs"], 0,
            "the smallest: the OpenAPI server gives none"
        );
        assert_eq!(result["cacheScope"], "private");
        assert_eq!(result["resultType"], "complete");
        assert!(result.get("nextCursor").is_none());
        let errors = &result["_meta"][META_LISTING_ERRORS];
        assert_eq!(errors.as_array().map(Vec::len), Some(1), "{errors}");
        assert_eq!(errors[0]["server"], "side");

        // The buffer was sized for what was written.
        let merged = merge(&cx, &caller, &caller.servers_in_scope(), ListKind::Tools).await;
        assert!(merged.text_bytes(0..merged.len()) + 1024 >= text.len());

        let legacy = list(&cx, &caller, ListKind::Tools, None, Era::Rev2025)
            .await
            .unwrap();
        let legacy: Value = serde_json::from_str(&legacy).unwrap();
        assert_eq!(legacy["tools"], result["tools"]);
        assert_eq!(legacy["_meta"], result["_meta"]);
        assert_eq!(legacy.as_object().unwrap().len(), 2, "{legacy}");
    }

    #[test]
    fn bound_parameters_leave_the_schema_and_its_required_list() {
        let text = r#"{"name":"gh__post","inputSchema":{"type":"object","properties":{"channel":{"type":"string"},"user":{"type":"string"}},"required":["channel","user"]},"annotations":{"readOnlyHint":false}}"#;
        let shown: Value =
            serde_json::from_str(&edited_tool(text, Some(&["user".to_string()]), None).unwrap())
                .unwrap();
        assert_eq!(
            shown,
            json!({"name": "gh__post", "annotations": {"readOnlyHint": false}, "inputSchema": {
                "type": "object", "properties": {"channel": {"type": "string"}}, "required": ["channel"]}})
        );
        // A tool without an input schema is served as it is.
        let bare = r#"{"name":"x"}"#;
        assert_eq!(
            edited_tool(bare, Some(&["user".to_string()]), None).unwrap(),
            bare
        );
    }

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        assert_eq!(decode_cursor(&encode_cursor(1000)), Some(1000));
        assert_eq!(decode_cursor("nonsense"), None);
        assert_eq!(decode_cursor(""), None);
    }
}
