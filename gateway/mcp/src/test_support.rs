//! What the crate's unit tests share: a context over a table built from a config (as the
//! gateway builds one, minus the snapshot source), callers authenticated by their key, and the
//! in-process upstream MCP server they call (switchboard-upstream's, an axum app on a loopback
//! port that records what it was sent), told how to answer these tests. Nothing here touches
//! the disk or a socket other than that loopback listener.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use crate::context::McpContext;
use switchboard_core::live::LiveTable;
use switchboard_core::metrics::Metrics;
use switchboard_core::scope::{Caller, Resource, authenticate};
use switchboard_core::table::RoutingTable;
use switchboard_upstream::UpstreamPlane;
use switchboard_upstream::test_upstream::{Reply, TestUpstream, Upstream};

/// The key most tests call with (`Bearer s-k`), reaching the one server `up`.
pub(crate) const KEY: &str = "s-k";

/// A config whose server `up` is the in-process upstream at `base`, presented also by the
/// virtual server `desk` (its `echo`, and its `typed` as `plain`): key `k` reaches both, key
/// `far` reaches only `side` (so `up` is invisible to it). Bodies over 4 KiB are refused.
pub(crate) fn config(base: &str) -> String {
    format!(
        r#"
gateway: {{sessionKey: a-session-key-for-tests, maxBodyBytes: 4096}}
servers:
- {{name: up, url: '{base}/mcp', timeout: 5s}}
- {{name: side, url: '{base}/side', timeout: 5s}}
virtualServers:
- name: desk
  sources:
  - server: up
    tools: {{allow: [echo, typed]}}
    overrides:
    - {{tool: typed, name: plain}}
keys:
- {{name: k, secret: {KEY}, servers: [up, desk]}}
- {{name: far, secret: s-far, servers: [side]}}
"#
    )
}

/// A context serving the table `config` builds, as `Gateway::apply` would put it in place
/// (the plane takes the table's address policy first).
pub(crate) fn context(config: &str) -> Arc<McpContext> {
    let snapshot = switchboard_snapshot::load(config, &switchboard_snapshot::SystemLookup)
        .expect("a valid config");
    let table = Arc::new(RoutingTable::build(&snapshot).expect("a valid table"));
    let metrics = Arc::new(Metrics::default());
    let upstream = Arc::new(UpstreamPlane::new(metrics.clone()));
    upstream.prepare(&table);
    let live = Arc::new(LiveTable::empty());
    live.store(table);
    Arc::new(McpContext::new(live, upstream, metrics))
}

/// An upstream and a context whose server `up` is it: what most tests start from.
pub(crate) async fn served() -> (TestUpstream, Arc<McpContext>) {
    let upstream = upstream_at().await;
    let cx = context(&config(&upstream.base));
    (upstream, cx)
}

/// The upstream alone, for a test with a config of its own (its base URL in `base`).
pub(crate) async fn upstream_at() -> TestUpstream {
    upstream().serve().await
}

/// Headers carrying `key` as the gateway key.
pub(crate) fn bearer(key: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let value = HeaderValue::from_str(&format!("Bearer {key}")).expect("a header value");
    headers.insert(header::AUTHORIZATION, value);
    headers
}

/// The caller `key` makes on the MCP endpoint.
pub(crate) async fn caller(cx: &McpContext, key: &str) -> Caller {
    authenticate(cx.table(), bearer(key), &cx.metrics, Resource::Mcp)
        .await
        .expect("the key authenticates")
}

/// A response's status and body, the body read whole (a relayed stream to its end).
pub(crate) async fn read(response: Response) -> (StatusCode, HeaderMap, String) {
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("a body");
    let text = String::from_utf8(bytes.to_vec()).expect("a UTF-8 body");
    (status, headers, text)
}

/// A response's status and its body as JSON (`null` when it is not JSON).
pub(crate) async fn read_json(response: Response) -> (StatusCode, Value) {
    let (status, _, text) = read(response).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The JSON-RPC messages of an event stream's `data:` lines, in order.
pub(crate) fn events(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

/// The upstream the tests call: a 2026-07-28 MCP server on `/mcp` only (so the server `side`,
/// on `/side`, answers no MCP), whose answers depend on the method and, for `tools/call`, on
/// the tool's name:
///
/// - `echo`: a result without `resultType` (as a legacy-shaped result comes);
/// - `typed`: a result that names `resultType: complete`;
/// - `broken`: the JSON-RPC error -32602 with HTTP 200; `refused`: the same code with HTTP 422;
/// - `stream`: an event stream, a progress notification before the result;
/// - anything else: the usual answer, naming the tool it was called as (`called`).
///
/// `tools/list` lists `echo` with `ttlMs` and no `resultType`; `server/discover` names the
/// server `upstream-itself` (the gateway's answers tell it from the gateway's own);
/// `subscriptions/listen` acknowledges on a stream that then ends; a client's reply is
/// accepted with 202.
fn upstream() -> Upstream {
    let bad = json!({"code": -32602, "message": "bad arguments"});
    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                          "params": {"progressToken": "p", "progress": 1}});
    let acknowledged = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                              "params": {"notifications": {"toolsListChanged": true}}});
    let discovered = json!({
        "resultType": "complete", "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {}}, "ttlMs": 0, "cacheScope": "private",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "upstream-itself", "version": "1"}},
    });
    Upstream {
        only_path: Some("/mcp"),
        tools: vec![
            (
                "echo",
                Reply::Result(json!({"content": [{"type": "text", "text": "hi"}]})),
            ),
            (
                "typed",
                Reply::Result(json!({"content": [], "resultType": "complete"})),
            ),
            ("broken", Reply::Error(StatusCode::OK, bad.clone())),
            (
                "refused",
                Reply::Error(StatusCode::UNPROCESSABLE_ENTITY, bad),
            ),
            (
                "stream",
                Reply::Stream(
                    vec![progress],
                    Some(json!({"content": [{"type": "text", "text": "done"}],
                                "resultType": "complete"})),
                ),
            ),
        ],
        replies: vec![
            ("server/discover", Reply::Result(discovered)),
            (
                "tools/list",
                Reply::Result(json!({
                    "tools": [{"name": "echo", "inputSchema": {"type": "object"}}], "ttlMs": 5,
                })),
            ),
            (
                "subscriptions/listen",
                Reply::Stream(vec![acknowledged], None),
            ),
        ],
        ..Upstream::default()
    }
}
