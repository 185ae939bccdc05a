//! Finding tools by what they do: a BM25 index (the `bm25` crate) over the tools a set of
//! listings presents, for a search-mode virtual server and the REST face's search. An index is
//! built once per change of the listings behind it and shared by every caller those listings
//! serve; the caller's scope and filters are applied when a search is answered, so a caller
//! never finds a tool it could not call (docs/virtual-servers.md, "Search mode").

use std::sync::Arc;
use std::time::Duration;

use bm25::{Document, Language, SearchEngine, SearchEngineBuilder};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use switchboard_core::route::prefixed_name;
use switchboard_core::scope::Caller;
use switchboard_core::table::Server;
use switchboard_core::virtual_server::{Selected, VirtualServer};

use crate::error::UpstreamError;
use crate::listing::{Item, Listing};

/// What a search looks through.
#[derive(Clone, Copy)]
pub enum Searched<'a> {
    /// The tools a virtual server presents, under the names it presents them by.
    Virtual(&'a Arc<VirtualServer>),
    /// The tools of these servers, under their `<prefix>__<tool>` names (the aggregate).
    Servers(&'a [Arc<Server>]),
}

/// What a search found for one caller.
#[derive(Debug, Default)]
pub struct FoundTools {
    /// The tools found, best first, each as the caller would see it listed (name, title,
    /// description, input schema, annotations), without its output schema.
    pub tools: Vec<Map<String, Value>>,
    /// How many tools the search went through (those the caller may call).
    pub searched: usize,
    /// The servers whose listing failed (their tools could not be searched): id and error.
    pub failures: Vec<(String, UpstreamError)>,
}

impl FoundTools {
    /// The answer of a `find_tools` call (an MCP `CallToolResult`): the tools found, with the
    /// servers that could not be searched, as structured content and as the same JSON in a
    /// text block (what a model reads); a search that found nothing says so.
    pub fn result(&self) -> Value {
        let mut found = Map::new();
        found.insert(
            "tools".into(),
            Value::Array(self.tools.iter().cloned().map(Value::Object).collect()),
        );
        if !self.failures.is_empty() {
            let unavailable = self
                .failures
                .iter()
                .map(|(server, e)| serde_json::json!({"server": server, "message": e.to_string()}))
                .collect();
            found.insert("unavailable".into(), Value::Array(unavailable));
        }
        let text = if self.tools.is_empty() {
            format!(
                "No tool matches among the {} searched; try other words.{}",
                self.searched,
                if self.failures.is_empty() {
                    ""
                } else {
                    " Some servers could not be searched."
                }
            )
        } else {
            Value::Object(found.clone()).to_string()
        };
        serde_json::json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": found,
            "isError": false,
        })
    }
}

/// One tool in an index: where it comes from and how it is presented to every caller (before
/// a caller's own bound parameters come out), kept as JSON text.
#[derive(Debug)]
struct Indexed {
    server: Arc<Server>,
    own: String,
    tool: Box<RawValue>,
}

/// An index over one set of listings. It holds the listings (and the virtual server) its key
/// names by address, so no address in a cached key is reused while the entry lives.
pub(crate) struct ToolIndex {
    tools: Vec<Indexed>,
    /// About the bytes it holds of its own (the tools' text, twice over with the fields).
    bytes: u32,
    head: SearchEngine<u32>,
    body: SearchEngine<u32>,
    _held: (Vec<Arc<Listing>>, Option<Arc<VirtualServer>>),
}

/// The words of an identifier: `repos/create-fork`, `createFork` and `create_fork` all read
/// `create fork` (a tokenizer for prose keeps them whole).
fn identifier_words(name: &str, out: &mut String) {
    let mut previous: Option<char> = None;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            out.push(' ');
        } else {
            if c.is_uppercase() && previous.is_some_and(|p| p.is_lowercase() || p.is_numeric()) {
                out.push(' ');
            }
            out.push(c);
        }
        previous = Some(c);
    }
    out.push(' ');
}

/// The two texts a tool is found by, scored apart and added up (BM25 per field): its head (its
/// presented name, title and the description's first paragraph: what it does, in a line) and
/// its body (its argument names and the start of the rest of its description: long API
/// descriptions go on about rate limits and media types, which every tool shares). A word in a
/// short head says more than the same word in a long body.
fn fields(name: &str, tool: &Map<String, Value>) -> (String, String) {
    let mut head = String::new();
    identifier_words(name, &mut head);
    let description = tool
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (summary, rest) = description.split_once("\n\n").unwrap_or((description, ""));
    for part in [tool.get("title").and_then(Value::as_str), Some(summary)]
        .into_iter()
        .flatten()
    {
        head.push_str(part);
        head.push(' ');
    }
    let mut body = String::new();
    if let Some(Value::Object(properties)) =
        tool.get("inputSchema").and_then(|s| s.get("properties"))
    {
        for argument in properties.keys() {
            identifier_words(argument, &mut body);
        }
    }
    for word in rest.split_whitespace().take(REST_WORDS) {
        body.push_str(word);
        body.push(' ');
    }
    (head, body)
}

/// How much a head's score counts against a body's (chosen on bench/tool_search_tasks.json:
/// top-5 recall 0.78 with one field, 0.83 at 2, 0.88 from 5 to 20; BENCHMARKS.md).
const HEAD_WEIGHT: f32 = 6.0;

/// Words of a description past its first paragraph that count.
const REST_WORDS: usize = 40;

/// The words APIs name their operations by, for the words people ask with: a query's word
/// brings its API words along (the query keeps its own words too).
const VERBS: [(&str, &str); 25] = [
    ("open", "create"),
    ("new", "create"),
    ("make", "create"),
    ("add", "create"),
    ("publish", "create"),
    ("start", "create"),
    ("show", "list get"),
    ("see", "list get"),
    ("view", "list get"),
    ("read", "get"),
    ("fetch", "get"),
    ("which", "list get"),
    ("what", "list get"),
    ("remove", "delete"),
    ("erase", "delete"),
    ("drop", "delete"),
    ("edit", "update"),
    ("change", "update"),
    ("modify", "update"),
    ("rename", "update"),
    ("find", "search list"),
    // (the caller's own things: APIs say "authenticated user" or "current user")
    ("me", "authenticated current"),
    ("my", "authenticated current"),
    ("signed", "authenticated current"),
    ("logged", "authenticated current"),
];

/// A query with the API verbs its words stand for.
fn with_verbs(query: &str) -> String {
    let mut out = query.to_string();
    for word in query.split(|c: char| !c.is_alphanumeric()) {
        let word = word.to_lowercase();
        if let Some((_, verbs)) = VERBS.iter().find(|(w, _)| *w == word) {
            out.push(' ');
            out.push_str(verbs);
        }
    }
    out
}

impl ToolIndex {
    fn build(
        tools: Vec<(Arc<Server>, String, Map<String, Value>)>,
        held: (Vec<Arc<Listing>>, Option<Arc<VirtualServer>>),
    ) -> ToolIndex {
        let (mut heads, mut bodies) = (Vec::new(), Vec::new());
        let mut bytes = 0usize;
        let mut indexed = Vec::with_capacity(tools.len());
        for (i, (server, own, mut tool)) in tools.into_iter().enumerate() {
            // A found tool is answered without its output schema: a model needs none to call
            // it, and they are most of a large description (GitHub's: 8.5 KB on average, up
            // to 461 KB, against 0.9 KB of input schema).
            tool.remove("outputSchema");
            let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
            let id = u32::try_from(i).unwrap_or(u32::MAX);
            let (head, body) = fields(name, &tool);
            heads.push(Document::new(id, head));
            bodies.push(Document::new(id, body));
            let tool = serde_json::value::to_raw_value(&tool)
                .unwrap_or_else(|_| RawValue::from_string("{}".into()).unwrap_or_default());
            bytes += 2 * tool.get().len() + own.len();
            indexed.push(Indexed { server, own, tool });
        }
        let engine = |documents: Vec<Document<u32>>| {
            SearchEngineBuilder::<u32>::with_documents(Language::English, documents).build()
        };
        ToolIndex {
            bytes: u32::try_from(bytes).unwrap_or(u32::MAX),
            head: engine(heads),
            body: engine(bodies),
            tools: indexed,
            _held: held,
        }
    }

    /// The best `limit` tools for `query` that `admits` lets through, best first (equal scores
    /// in listing order, so the same query finds the same tools in the same order).
    fn search<'s>(
        &'s self,
        query: &str,
        limit: usize,
        admits: impl Fn(&Indexed) -> bool,
    ) -> (Vec<&'s Indexed>, usize) {
        let query = with_verbs(query);
        let mut scores: foldhash::HashMap<u32, f32> = foldhash::HashMap::default();
        for (engine, weight) in [(&self.head, HEAD_WEIGHT), (&self.body, 1.0)] {
            for r in engine.search(&query, None) {
                *scores.entry(r.document.id).or_default() += weight * r.score;
            }
        }
        let mut matches: Vec<(f32, u32)> = scores.into_iter().map(|(id, s)| (s, id)).collect();
        matches.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let searched = self.tools.iter().filter(|t| admits(t)).count();
        let found = matches
            .into_iter()
            .filter_map(|(_, id)| self.tools.get(usize::try_from(id).ok()?))
            .filter(|t| admits(t))
            .take(limit)
            .collect();
        (found, searched)
    }
}

/// A listed tool as `searched` presents it, when it does: under its presented name, renamed
/// and narrowed as a virtual server says, with the virtual server's bindings out.
fn presented(
    searched: Searched<'_>,
    source: usize,
    server: &Server,
    item: &Item,
) -> Option<(String, Map<String, Value>)> {
    let own = item.id()?;
    match searched {
        Searched::Virtual(vs) => {
            let name = vs.presented_name(Selected::Tools, source, own).ok()?;
            let fields = item.fields().unwrap_or_default();
            let shown = vs.present(fields, name, vs.sources[source].override_of(own));
            Some((name.to_string(), shown))
        }
        Searched::Servers(_) => {
            let name = prefixed_name(server.prefix(), own);
            let mut fields = Map::new();
            fields.insert("name".into(), Value::String(name.clone()));
            fields.extend(item.fields().unwrap_or_default());
            Some((name, fields))
        }
    }
}

/// The sources of `searched` the caller reaches: (source index, server), each server once.
pub(crate) fn sources(caller: &Caller, searched: Searched<'_>) -> Vec<(usize, Arc<Server>)> {
    match searched {
        Searched::Virtual(vs) => vs
            .sources
            .iter()
            .enumerate()
            .filter(|(_, s)| caller.reaches(&s.server))
            .map(|(i, s)| (i, s.server.clone()))
            .collect(),
        Searched::Servers(servers) => servers.iter().cloned().enumerate().collect(),
    }
}

/// The search indexes of one plane: one per distinct set of listings (a virtual server's, the
/// aggregate's per scope), dropped when unused for a while, and bounded in bytes: an index
/// holds the listings it was built from, so one left over from an earlier snapshot or listing
/// must not keep them alive for long.
pub(crate) struct ToolIndexes(moka::sync::Cache<Vec<usize>, Arc<ToolIndex>>);

/// Bytes of indexes kept at most (GitHub's 1,230 tools take about 25 MB).
const INDEX_BYTES: u64 = 128 << 20;

impl Default for ToolIndexes {
    fn default() -> ToolIndexes {
        ToolIndexes(
            moka::sync::Cache::builder()
                .max_capacity(INDEX_BYTES)
                .weigher(|_, index: &Arc<ToolIndex>| index.bytes.max(1))
                .time_to_idle(Duration::from_secs(300))
                .build(),
        )
    }
}

impl ToolIndexes {
    /// Answers a search over the listings of `sources` (as [`sources`] gave them, each with its
    /// listing or why it failed), from the index of those listings (built now if there is
    /// none), filtered by the caller's scope.
    pub(crate) fn find(
        &self,
        caller: &Caller,
        searched: Searched<'_>,
        sources: Vec<(usize, Arc<Server>)>,
        listings: Vec<Result<Arc<Listing>, UpstreamError>>,
        query: &str,
        limit: usize,
    ) -> FoundTools {
        let mut found = FoundTools::default();
        let mut listed = Vec::with_capacity(sources.len());
        let mut key = vec![match searched {
            Searched::Virtual(vs) => Arc::as_ptr(vs) as usize,
            Searched::Servers(_) => 0,
        }];
        for ((i, server), listing) in sources.into_iter().zip(listings) {
            match listing {
                Ok(listing) => {
                    key.extend([i, Arc::as_ptr(&server) as usize]);
                    key.push(Arc::as_ptr(&listing) as usize);
                    listed.push((i, server, listing));
                }
                Err(e) => found.failures.push((server.id().to_string(), e)),
            }
        }
        let index = self.0.get_with(key, || {
            let mut tools = Vec::new();
            for (i, server, listing) in &listed {
                for item in &listing.items {
                    if let Some((_, shown)) = presented(searched, *i, server, item) {
                        let own = item.id().unwrap_or_default().to_string();
                        tools.push((server.clone(), own, shown));
                    }
                }
            }
            let vs = match searched {
                Searched::Virtual(vs) => Some(vs.clone()),
                Searched::Servers(_) => None,
            };
            let held = listed.iter().map(|(_, _, l)| l.clone()).collect();
            Arc::new(ToolIndex::build(tools, (held, vs)))
        });
        let (tools, searched_count) =
            index.search(query, limit, |t| caller.sees_tool(&t.server, &t.own));
        found.searched = searched_count;
        for t in tools {
            let Ok(mut shown) = serde_json::from_str::<Map<String, Value>>(t.tool.get()) else {
                continue;
            };
            caller.hide_bound_parameters(&t.server, &t.own, &mut shown);
            found.tools.push(shown);
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn identifiers_read_as_words() {
        let mut out = String::new();
        identifier_words("repos/create-fork", &mut out);
        identifier_words("createFork", &mut out);
        identifier_words("list_issues_v2", &mut out);
        assert_eq!(
            out.split_whitespace().collect::<Vec<_>>(),
            [
                "repos", "create", "fork", "create", "Fork", "list", "issues", "v2"
            ]
        );
    }

    fn index(tools: &[(&str, &str, &[&str])]) -> ToolIndex {
        let snapshot =
            switchboard_snapshot::parse("servers:\n  - name: s\n    url: http://127.0.0.1:9/mcp\n")
                .expect("a valid snapshot");
        let table = switchboard_core::table::RoutingTable::build(&snapshot).expect("a table");
        let server = table.servers[0].clone();
        let tools = tools
            .iter()
            .map(|(name, description, arguments)| {
                let properties: Map<String, Value> = arguments
                    .iter()
                    .map(|a| (a.to_string(), json!({"type": "string"})))
                    .collect();
                let tool = json!({"name": name, "description": description,
                    "inputSchema": {"type": "object", "properties": properties}});
                let Value::Object(tool) = tool else {
                    unreachable!()
                };
                (server.clone(), name.to_string(), tool)
            })
            .collect();
        ToolIndex::build(tools, (Vec::new(), None))
    }

    fn names(index: &ToolIndex, query: &str, admits: impl Fn(&Indexed) -> bool) -> Vec<String> {
        index
            .search(query, 3, admits)
            .0
            .iter()
            .map(|t| t.own.clone())
            .collect()
    }

    #[test]
    fn a_search_ranks_by_name_description_and_arguments() {
        let index = index(&[
            (
                "pulls/list",
                "List pull requests",
                &["owner", "repo", "state"],
            ),
            (
                "issues/create",
                "Create an issue",
                &["owner", "repo", "title"],
            ),
            ("gists/delete", "Delete a gist", &["gist_id"]),
            ("add", "Adds two numbers", &["a", "b"]),
        ]);
        assert_eq!(
            names(&index, "open a new issue", |_| true)[0],
            "issues/create"
        );
        assert_eq!(
            names(&index, "which pull requests are open", |_| true)[0],
            "pulls/list"
        );
        assert_eq!(
            names(&index, "remove a gist", |_| true),
            ["gists/delete"],
            "stemmed words"
        );
        assert_eq!(names(&index, "sum of numbers", |_| true), ["add"]);
        assert!(names(&index, "weather in Paris", |_| true).is_empty());
    }

    #[test]
    fn a_search_finds_only_what_the_caller_may_call_and_counts_only_that() {
        let index = index(&[
            ("issues/create", "Create an issue", &["title"]),
            ("issues/update", "Update an issue", &["title"]),
        ]);
        let (found, searched) = index.search("issue", 5, |t| t.own != "issues/create");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].own, "issues/update");
        assert_eq!(searched, 1);
    }

    #[test]
    fn equal_scores_keep_listing_order() {
        let index = index(&[
            ("zeta_tool", "does the thing", &[]),
            ("alpha_tool", "does the thing", &[]),
            ("beta_tool", "does the thing", &[]),
        ]);
        for _ in 0..5 {
            assert_eq!(
                names(&index, "thing", |_| true),
                ["zeta_tool", "alpha_tool", "beta_tool"]
            );
        }
    }
}
