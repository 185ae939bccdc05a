//! Walking an upstream's paginated listing under one deadline (docs/architecture.md, invariant 7).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::call::UpstreamCall;
use crate::client::{RpcCall, RpcOutcome, RpcResult, Upstreams};
use crate::error::UpstreamError;
use crate::request_credential::RequestCredential;
use switchboard_core::table::Server;
use switchboard_openapi::Compiled;
use switchboard_protocol::{Era, ListChanged};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListKind {
    Tools,
    Prompts,
    Resources,
    ResourceTemplates,
}

impl ListKind {
    pub fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "tools/list",
            ListKind::Prompts => "prompts/list",
            ListKind::Resources => "resources/list",
            ListKind::ResourceTemplates => "resources/templates/list",
        }
    }
    /// The field that identifies an item of this kind (the aggregate prefixes it).
    pub fn id_field(self) -> &'static str {
        match self {
            ListKind::Tools | ListKind::Prompts => "name",
            ListKind::Resources => "uri",
            ListKind::ResourceTemplates => "uriTemplate",
        }
    }

    /// The list whose `list_changed` notification says this kind changed (resources and
    /// their templates share one).
    pub fn list(self) -> ListChanged {
        match self {
            ListKind::Tools => ListChanged::Tools,
            ListKind::Prompts => ListChanged::Prompts,
            ListKind::Resources | ListKind::ResourceTemplates => ListChanged::Resources,
        }
    }

    /// The result field that holds the items.
    pub fn field(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources => "resources",
            ListKind::ResourceTemplates => "resourceTemplates",
        }
    }
    pub fn from_method(method: &str) -> Option<ListKind> {
        [
            ListKind::Tools,
            ListKind::Prompts,
            ListKind::Resources,
            ListKind::ResourceTemplates,
        ]
        .into_iter()
        .find(|k| k.method() == method)
    }
}

/// What to list: one kind, of one server, as one caller (with its credential).
#[derive(Clone, Copy)]
pub struct ListingRequest<'a> {
    pub server: &'a Server,
    /// The caller's tag (a listing its upstream says is private is kept per caller).
    pub caller_tag: &'a [u8; 32],
    pub caller_headers: &'a axum::http::HeaderMap,
    pub credential: Option<&'a RequestCredential>,
    pub kind: ListKind,
}

/// One listed item, kept compact: its identifying field (a tool's `name`, a resource's `uri`)
/// apart, everything else as JSON text. A parsed tree costs about 3.6 KB per tool, the text a
/// tenth of that, and the aggregate writes it out without parsing it again.
#[derive(Debug, Clone)]
pub struct Item {
    field: &'static str,
    id: Option<String>,
    rest: Rest,
}

/// An item's text, as held.
#[derive(Clone)]
enum Rest {
    /// The item without its identifying field: a JSON object (or, for an item that is not an
    /// object, the item itself).
    Text(Box<RawValue>),
    /// A tool of an OpenAPI server, by its index in the server's compiled document, and
    /// written from it when read: the document holds each definition its schemas share once,
    /// a listing of each tool's own text would copy them into every tool that reaches them
    /// (the kube-apiserver's Pod definition into each of ~15 tools: 43 MB of text for what
    /// the document holds in a few).
    Operation(Arc<Compiled>, usize),
}

impl std::fmt::Debug for Rest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rest::Text(text) => f.debug_tuple("Text").field(text).finish(),
            Rest::Operation(_, index) => f.debug_tuple("Operation").field(index).finish(),
        }
    }
}

impl Item {
    pub fn new(kind: ListKind, value: &Value) -> Item {
        let field = kind.id_field();
        let (id, rest) = match value {
            Value::Object(object) => {
                let id = object.get(field).and_then(Value::as_str).map(str::to_owned);
                let rest: Map<String, Value> = object
                    .iter()
                    .filter(|(k, _)| id.is_none() || k.as_str() != field)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                (id, serde_json::value::to_raw_value(&rest))
            }
            other => (None, serde_json::value::to_raw_value(other)),
        };
        Item {
            field,
            id,
            rest: Rest::Text(rest.unwrap_or_else(|_| empty_object())),
        }
    }

    /// Tool `index` of an OpenAPI server's compiled document (see [`Rest::Operation`]).
    fn operation(compiled: &Arc<Compiled>, index: usize) -> Item {
        Item {
            field: ListKind::Tools.id_field(),
            id: compiled.tools.get(index).map(|tool| tool.name.clone()),
            rest: Rest::Operation(compiled.clone(), index),
        }
    }

    /// An item from its JSON text, read member by member (no tree of the item is built: its
    /// members stay as they were written, in key order as a parsed item's would be).
    pub fn from_raw(kind: ListKind, raw: &RawValue) -> Item {
        let field = kind.id_field();
        let members = match serde_json::from_str::<BTreeMap<&str, &RawValue>>(raw.get()) {
            Ok(members) => members,
            // (not an object, or keys with escapes, which cannot be borrowed: the usual way)
            Err(_) => {
                let value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
                return Item::new(kind, &value);
            }
        };
        let id: Option<String> = members
            .get(field)
            .and_then(|v| serde_json::from_str(v.get()).ok());
        let mut rest = String::with_capacity(raw.get().len());
        rest.push('{');
        for (key, value) in &members {
            if id.is_some() && *key == field {
                continue;
            }
            if rest.len() > 1 {
                rest.push(',');
            }
            // (a borrowed key has no escapes: it is written as it was)
            rest.push('"');
            rest.push_str(key);
            rest.push_str("\":");
            rest.push_str(value.get());
        }
        rest.push('}');
        Item {
            field,
            id,
            rest: Rest::Text(RawValue::from_string(rest).unwrap_or_else(|_| empty_object())),
        }
    }

    /// The identifying field's value (`None` when the upstream gave none).
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The item as JSON text with its identifying field set to `id`.
    pub fn json_with_id(&self, id: &str) -> String {
        let rest = match &self.rest {
            Rest::Text(rest) => rest.get(),
            Rest::Operation(compiled, index) => {
                return compiled
                    .listed_tool(*index, id)
                    .unwrap_or_else(|| "{}".into());
            }
        };
        if self.id.is_none() || !rest.starts_with('{') {
            return rest.to_string();
        }
        let mut out = String::with_capacity(rest.len() + id.len() + self.field.len() + 8);
        out.push('{');
        out.push_str(&Value::from(self.field).to_string());
        out.push(':');
        out.push_str(&Value::from(id).to_string());
        if rest == "{}" {
            out.push('}');
        } else {
            out.push(',');
            out.push_str(&rest[1..]);
        }
        out
    }

    /// Whether the item's text may hold `word` (ASCII letters and `-`): `false` only when it
    /// cannot, holding neither the word nor a `\u` escape, which could spell it. (A tool of an
    /// OpenAPI document may.)
    pub(crate) fn may_hold(&self, word: &str) -> bool {
        match &self.rest {
            Rest::Text(rest) => rest.get().contains(word) || rest.get().contains("\\u"),
            Rest::Operation(..) => true,
        }
    }

    /// One field of the item, parsed (for the rare reader, such as `Mcp-Param-*` derivation).
    pub fn get(&self, key: &str) -> Option<Value> {
        self.fields()?.remove(key)
    }

    /// Every field but the identifying one, parsed (for a reader of several).
    pub fn fields(&self) -> Option<Map<String, Value>> {
        match &self.rest {
            Rest::Text(rest) => serde_json::from_str(rest.get()).ok(),
            Rest::Operation(..) => {
                let mut fields: Map<String, Value> =
                    serde_json::from_str(&self.json_with_id("")).ok()?;
                fields.remove(self.field);
                Some(fields)
            }
        }
    }

    /// About how many bytes of JSON text the item is (its identifying field included).
    pub fn bytes(&self) -> usize {
        let id = self.id.as_ref().map_or(0, String::len);
        match &self.rest {
            Rest::Text(rest) => rest.get().len() + id,
            Rest::Operation(compiled, index) => compiled.listed_bytes(*index),
        }
    }
}

fn empty_object() -> Box<RawValue> {
    RawValue::from_string("{}".into()).unwrap_or_default()
}

/// Everything one server lists of one kind, with how the walk went.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    pub items: Vec<Item>,
    /// Why the walk stopped early, if it did (repeated cursor, page cap, deadline).
    pub warnings: Vec<String>,
    /// Smallest `ttlMs` any page gave; `None` when no page gave one.
    pub ttl_ms: Option<u64>,
    /// Whether any page was `cacheScope: "private"` (or gave no scope: assume private).
    pub private: bool,
    /// Whether a page said `cacheScope: "private"` in so many words: the listing is then the
    /// caller's own, kept apart from other callers' even under a shared credential.
    pub said_private: bool,
    /// What the review of a tools listing found (`None`: not reviewed, `tools.pinning: off`,
    /// or not tools).
    pub review: Option<ListingReview>,
}

impl Listing {
    /// Its items in the order of their identifying field (a tool's name, a resource's URI),
    /// items without one last in the upstream's order. An upstream may list in any order
    /// (a map's, a registry's); the gateway's listings do not: the same scope gets the same
    /// bytes, which clients' caches and models' prompt caches depend on.
    pub fn sort(&mut self) {
        self.items.sort_by(|a, b| match (a.id(), b.id()) {
            (Some(a), Some(b)) => a.cmp(b),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        });
    }

    /// The bytes of its items' JSON text as listed (identifying fields included).
    pub fn bytes(&self) -> usize {
        self.items.iter().map(Item::bytes).sum()
    }

    /// An OpenAPI server's tools, each kept by its index in the compiled document
    /// ([`Item::operation`]), in the document's order ([`walk`] sorts). Like any listing
    /// without `cacheScope` it is taken as private (as its text, read by [`Page::read`], was).
    pub(crate) fn of_operations(compiled: &Arc<Compiled>) -> Listing {
        Listing {
            items: (0..compiled.tools.len())
                .map(|i| Item::operation(compiled, i))
                .collect(),
            private: true,
            ..Listing::default()
        }
    }

    /// About how many bytes the listing holds (its items' text), for a cache bounded in bytes;
    /// at least 1.
    pub fn weight(&self) -> u32 {
        let bytes = self.bytes() + 64 * self.items.len();
        u32::try_from(bytes.max(1)).unwrap_or(u32::MAX)
    }
}

/// Follows `nextCursor` until the upstream ends the list, the cursor repeats, the page cap is
/// reached or the deadline passes; each of the last three returns what was collected with a
/// warning. A failure before the first page is an error. The items come out in the order of
/// their identifying field ([`Listing::sort`]), whatever order the upstream gave.
pub async fn walk(
    upstreams: &Upstreams,
    request: &ListingRequest<'_>,
    page_cap: u32,
) -> Result<Listing, UpstreamError> {
    let mut listing = walk_pages(upstreams, request, page_cap).await?;
    listing.sort();
    Ok(listing)
}

async fn walk_pages(
    upstreams: &Upstreams,
    request: &ListingRequest<'_>,
    page_cap: u32,
) -> Result<Listing, UpstreamError> {
    let ListingRequest { server, kind, .. } = *request;
    let budget = server.spec.listing_budget();
    let deadline = Instant::now() + budget;
    if let (Some(tools), ListKind::Tools) = (&server.openapi, kind) {
        // (from the compiled document: what its listing's text would say, without the text)
        let asked = UpstreamCall::whole(kind.method(), None);
        let call = page_call(&asked, request, deadline, budget);
        return upstreams.openapi_listing(&call, tools).await;
    }
    let mut listing = Listing::default();
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    for page in 0..page_cap {
        let asked = UpstreamCall::whole(
            kind.method(),
            cursor.as_ref().map(|c| json!({ "cursor": c })),
        );
        let result = match upstreams
            .call(page_call(&asked, request, deadline, budget))
            .await
        {
            Ok(RpcOutcome::Result(r)) => r,
            Ok(RpcOutcome::Error(e, _)) if page == 0 => {
                return Err(UpstreamError::Unavailable {
                    server: server.id().to_string(),
                    detail: format!(
                        "{} failed: {}",
                        kind.method(),
                        e.get("message").and_then(Value::as_str).unwrap_or("error")
                    ),
                });
            }
            Err(e) if page == 0 => return Err(e),
            Ok(RpcOutcome::Error(..) | RpcOutcome::Stream(_)) | Err(_)
                if Instant::now() >= deadline =>
            {
                listing.warnings.push(format!(
                    "listing stopped at the {} deadline after {page} pages",
                    humantime::format_duration(budget)
                ));
                return Ok(listing);
            }
            Ok(RpcOutcome::Error(..) | RpcOutcome::Stream(_)) | Err(_) => {
                listing.warnings.push(format!(
                    "listing stopped after {page} pages: a later page failed"
                ));
                return Ok(listing);
            }
        };
        let page = Page::read(&result, kind);
        drop(result);
        let next = page.absorb_into(&mut listing);
        let era = upstreams.era_of(server);
        match next_cursor(next, era) {
            None => return Ok(listing),
            Some(next) if !seen.insert(next.clone()) => {
                listing.warnings.push(format!(
                    "upstream repeated cursor {next:?}; returning the {} items listed so far",
                    listing.items.len()
                ));
                return Ok(listing);
            }
            Some(next) => cursor = Some(next),
        }
    }
    listing.warnings.push(format!(
        "listing stopped at the page cap ({page_cap} pages); returning the {} items listed so far",
        listing.items.len()
    ));
    Ok(listing)
}

/// One page's call: within the listing's `deadline` (of `budget`), and the server's timeout at
/// most.
fn page_call<'a>(
    page: &'a UpstreamCall<'a>,
    listing: &ListingRequest<'a>,
    deadline: Instant,
    budget: std::time::Duration,
) -> RpcCall<'a> {
    let server = listing.server;
    let page_deadline = deadline.min(Instant::now() + server.spec.timeout);
    RpcCall {
        request: page,
        server,
        caller_headers: listing.caller_headers,
        param_headers: None,
        credential: listing.credential,
        deadline: page_deadline,
        budget: if page_deadline == deadline {
            budget
        } else {
            server.spec.timeout
        },
    }
}

/// What the walk takes from one page of a listing.
#[derive(Default)]
struct Page {
    items: Vec<Item>,
    ttl_ms: Option<u64>,
    scope: Option<String>,
    next_cursor: Option<Value>,
}

impl Page {
    /// Reads a page: an upstream's text is read member by member, each item kept as its own
    /// text (a large listing is never a tree); a parsed result is read as it is.
    fn read(result: &RpcResult, kind: ListKind) -> Page {
        match result {
            RpcResult::Parsed(value) => Page {
                items: value
                    .get(kind.field())
                    .and_then(Value::as_array)
                    .map(|items| items.iter().map(|i| Item::new(kind, i)).collect())
                    .unwrap_or_default(),
                ttl_ms: value.get("ttlMs").and_then(Value::as_u64),
                scope: value
                    .get("cacheScope")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                next_cursor: value.get("nextCursor").cloned(),
            },
            RpcResult::Raw(raw) => {
                let Ok(members) = serde_json::from_str::<BTreeMap<&str, &RawValue>>(raw.get())
                else {
                    // (keys with escapes cannot be borrowed: read it whole)
                    let value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
                    return Page::read(&RpcResult::Parsed(value), kind);
                };
                let member = |name: &str| members.get(name).map(|r| r.get());
                Page {
                    items: member(kind.field())
                        .and_then(|items| serde_json::from_str::<Vec<&RawValue>>(items).ok())
                        .map(|items| items.into_iter().map(|i| Item::from_raw(kind, i)).collect())
                        .unwrap_or_default(),
                    ttl_ms: member("ttlMs").and_then(|t| serde_json::from_str(t).ok()),
                    scope: member("cacheScope").and_then(|s| serde_json::from_str(s).ok()),
                    next_cursor: member("nextCursor").and_then(|c| serde_json::from_str(c).ok()),
                }
            }
        }
    }

    /// Adds the page to the listing; the page's cursor, if any.
    fn absorb_into(self, listing: &mut Listing) -> Option<Value> {
        listing.items.extend(self.items);
        if let Some(ttl) = self.ttl_ms {
            listing.ttl_ms = Some(listing.ttl_ms.map_or(ttl, |t| t.min(ttl)));
        }
        let scope = self.scope.as_deref();
        listing.private |= scope != Some("public");
        listing.said_private |= scope == Some("private");
        self.next_cursor
    }
}

/// The cursor of the next page, if there is one. In the 2026-07-28 revision only an absent or
/// null `nextCursor` ends a list: `""` is a valid cursor. Legacy revisions predate that rule and
/// several legacy SDKs serialize "no more pages" as `""`, so from a legacy upstream an empty
/// string ends the walk; following it would re-request page one and end on the
/// repeated-cursor guard anyway, one request later.
fn next_cursor(next: Option<Value>, era: Option<Era>) -> Option<String> {
    let Value::String(next) = next? else {
        return None;
    };
    if next.is_empty() && era != Some(Era::Rev2026) {
        return None;
    }
    Some(next)
}

/// What the review of one tools listing found (kept with the listing).
#[derive(Debug, Clone, Default)]
pub struct ListingReview {
    /// Tools held back under `hold` (not in the listing's items).
    pub held: Vec<HeldTool>,
    /// Served tools with something to tell.
    pub flagged: Vec<FlaggedTool>,
}

/// A tool held back: its name, why, and its review (its digest is what an approval names).
#[derive(Debug, Clone)]
pub struct HeldTool {
    pub name: String,
    pub why: String,
    pub review: switchboard_trust::Review,
}

/// A served tool the review flags: its name, what (one line), and its review.
#[derive(Debug, Clone)]
pub struct FlaggedTool {
    pub name: String,
    pub what: String,
    pub review: switchboard_trust::Review,
}

impl ListingReview {
    /// Why `tool` is held, if it is.
    pub fn held(&self, tool: &str) -> Option<&str> {
        self.held
            .iter()
            .find(|h| h.name == tool)
            .map(|h| h.why.as_str())
    }

    /// What the review says of `tool`, if anything: why it is held, or what is flagged.
    pub fn of(&self, tool: &str) -> Option<&str> {
        self.held(tool).or_else(|| {
            self.flagged
                .iter()
                .find(|f| f.name == tool)
                .map(|f| f.what.as_str())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_cursor_is_a_cursor_only_in_the_modern_era() {
        let empty = || Some(json!(""));
        assert_eq!(
            next_cursor(empty(), Some(Era::Rev2026)),
            Some(String::new())
        );
        assert_eq!(next_cursor(empty(), Some(Era::Rev2025)), None);
        assert_eq!(next_cursor(Some(Value::Null), Some(Era::Rev2026)), None);
        assert_eq!(next_cursor(None, Some(Era::Rev2026)), None);
    }

    /// `may_hold` says `false` only where no reading of the item could find the word: a tool
    /// whose schema names a header, plainly or with its letters escaped, may hold it; one
    /// whose text has other escapes only (`\n`, `\"`) does not.
    #[test]
    fn an_item_may_hold_a_word_unless_its_text_cannot_spell_it() {
        let mark = switchboard_protocol::param_headers::MARK;
        let item = |text: &str| {
            let raw = RawValue::from_string(text.to_string()).expect("JSON");
            Item::from_raw(ListKind::Tools, &raw)
        };
        for (text, may) in [
            (
                r#"{"name":"a","inputSchema":{"properties":{"r":{"x-mcp-header":"R"}}}}"#,
                true,
            ),
            (
                r#"{"name":"a","inputSchema":{"properties":{"r":{"x\u002dmcp-header":"R"}}}}"#,
                true,
            ),
            (
                r#"{"name":"a","inputSchema":{"properties":{"r":{"\u0078-mcp-header":"R"}}}}"#,
                true,
            ),
            (
                r#"{"name":"a","description":"two\nlines, \"quoted\"","inputSchema":{}}"#,
                false,
            ),
            (
                r#"{"name":"a","inputSchema":{"properties":{"r":{"type":"string"}}}}"#,
                false,
            ),
        ] {
            let item = item(text);
            assert_eq!(item.may_hold(mark), may, "{text}");
            // Where it may not, the tree has no such name either.
            let schema = item.get("inputSchema").unwrap_or_default();
            let named = serde_json::to_string(&schema)
                .unwrap_or_default()
                .contains(mark);
            assert!(may || !named, "{text}");
            assert_eq!(named, may, "{text}");
        }
    }

    fn raw(value: &Value) -> RpcResult {
        RpcResult::Raw(serde_json::value::to_raw_value(value).unwrap().into())
    }

    /// An upstream's text is read without a tree and gives the same items, hints and cursor
    /// as the same result parsed (an escaped key, which cannot be borrowed, included).
    #[test]
    fn a_page_read_from_text_is_the_page_parsed() {
        let page = json!({
            "tools": [
                {"name": "add", "description": "Add", "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}}},
                {"name": "odd\"name", "xé": 1},
                {"name": "b", "q\"k": 2},
                {"title": "no name"},
                7
            ],
            "ttlMs": 250, "cacheScope": "private", "nextCursor": "c2"
        });
        let escaped_member = json!({"tools": [{"name": "a"}], "k\"ey": 1, "nextCursor": "c"});
        for page in [page, escaped_member] {
            let (mut from_text, mut parsed) = (Listing::default(), Listing::default());
            let a = Page::read(&raw(&page), ListKind::Tools).absorb_into(&mut from_text);
            let b = Page::read(&RpcResult::Parsed(page.clone()), ListKind::Tools)
                .absorb_into(&mut parsed);
            assert_eq!(a, b);
            assert_eq!(from_text.items.len(), parsed.items.len());
            for (x, y) in from_text.items.iter().zip(&parsed.items) {
                assert_eq!(x.id(), y.id());
                let text: Value = serde_json::from_str(&x.json_with_id("p__x")).unwrap();
                let tree: Value = serde_json::from_str(&y.json_with_id("p__x")).unwrap();
                assert_eq!(text, tree);
            }
            assert_eq!(
                (from_text.ttl_ms, from_text.private, from_text.said_private),
                (parsed.ttl_ms, parsed.private, parsed.said_private)
            );
        }
    }

    #[test]
    fn items_keep_everything_and_swap_only_their_id() {
        let tool = json!({"name": "add", "description": "Add", "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}}});
        let item = Item::new(ListKind::Tools, &tool);
        assert_eq!(item.id(), Some("add"));
        let out: Value = serde_json::from_str(&item.json_with_id("w__add")).unwrap();
        let mut expected = tool.clone();
        expected["name"] = json!("w__add");
        assert_eq!(
            out, expected,
            "nested fields named like the id stay untouched"
        );
        assert_eq!(item.get("inputSchema").unwrap()["type"], "object");
        let bare = Item::new(ListKind::Tools, &json!({"name": "x"}));
        assert_eq!(bare.json_with_id("p__x"), r#"{"name":"p__x"}"#);
        let odd = Item::new(ListKind::Resources, &json!({"name": "no uri"}));
        assert_eq!(odd.id(), None);
        assert_eq!(
            serde_json::from_str::<Value>(&odd.json_with_id("ignored")).unwrap(),
            json!({"name": "no uri"})
        );
    }

    /// An OpenAPI server's tools kept by their index in the compiled document read as the
    /// text of its `tools/list` answer reads: the same items (under another name too), the same
    /// fields, the same hints, and about the same size.
    #[test]
    fn operations_kept_by_index_are_their_listing_read_from_text() {
        let document = json!({
            "openapi": "3.1.0",
            "info": {"title": "t", "version": "1"},
            "components": {"schemas": {"Pet": {"type": "object", "description": "A pet",
                "properties": {"name": {"type": "string"}, "owner": {"$ref": "#/components/schemas/Owner"}}},
                "Owner": {"type": "object", "properties": {"id": {"type": "integer"}}}}},
            "paths": {
                "/pets": {
                    "get": {"operationId": "listPets", "description": "Lists \"pets\"",
                        "responses": {"200": {"description": "ok", "content": {"application/json":
                            {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Pet"}}}}}}},
                    "post": {"operationId": "addPet", "requestBody": {"required": true, "content":
                        {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}}},
                        "responses": {"201": {"description": "made"}}}
                },
                "/owners/{id}": {"delete": {"operationId": "dropOwner", "parameters": [
                    {"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
                    "responses": {"204": {"description": "gone"}}}}
            }
        });
        let compiled = Arc::new(
            switchboard_openapi::compile(&document.to_string(), &Default::default()).unwrap(),
        );
        let mut kept = Listing::of_operations(&compiled);
        kept.sort();
        let mut read = Listing::default();
        Page::read(&RpcResult::Raw(compiled.listing().into()), ListKind::Tools)
            .absorb_into(&mut read);
        read.sort();
        let names = |l: &Listing| {
            l.items
                .iter()
                .map(|i| i.id().map(str::to_owned))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&kept), names(&read));
        assert_eq!(kept.items.len(), 3);
        for (k, r) in kept.items.iter().zip(&read.items) {
            for id in ["p__x", "plain"] {
                let k: Value = serde_json::from_str(&k.json_with_id(id)).unwrap();
                let r: Value = serde_json::from_str(&r.json_with_id(id)).unwrap();
                assert_eq!(k, r);
                assert_eq!(k["name"], id);
            }
            assert_eq!(k.fields(), r.fields(), "every field but the name");
            assert!(!k.fields().unwrap().contains_key("name"));
            assert_eq!(k.get("inputSchema"), r.get("inputSchema"));
        }
        let listed = kept
            .items
            .iter()
            .find(|i| i.id() == Some("listPets"))
            .unwrap();
        let output = listed.get("outputSchema").unwrap();
        assert!(output["$defs"]["Pet"].is_object(), "{output}");
        assert!(output["$defs"]["Owner"].is_object(), "{output}");
        assert_eq!(
            (kept.ttl_ms, kept.private, kept.said_private),
            (read.ttl_ms, read.private, read.said_private)
        );
        // (sizes as listed: never under the text, at most a little over it per item)
        let (k, r) = (kept.bytes(), read.bytes());
        assert!(k >= r && k <= r + 200 * kept.items.len(), "{k} against {r}");
    }

    #[test]
    fn cache_hints_merge_to_smallest_ttl_and_private_if_any() {
        let mut l = Listing::default();
        let page = |v: Value| Page::read(&raw(&v), ListKind::Tools);
        page(json!({"tools": [1], "ttlMs": 5000, "cacheScope": "public"})).absorb_into(&mut l);
        assert!(!l.private && !l.said_private);
        page(json!({"tools": [2], "ttlMs": 100})).absorb_into(&mut l);
        assert!(
            l.private && !l.said_private,
            "no scope: not shared, not said private"
        );
        page(json!({"tools": [3], "ttlMs": 200, "cacheScope": "private"})).absorb_into(&mut l);
        assert_eq!(l.ttl_ms, Some(100));
        assert!(l.private && l.said_private);
        assert_eq!(l.items.len(), 3);
    }
}
