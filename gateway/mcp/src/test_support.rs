//! What the crate's unit tests share: a context over a table built from a config (as the
//! gateway builds one, minus the snapshot source), callers authenticated by their key, and an
//! in-process upstream MCP server (an axum app on a loopback port) that records what it was
//! sent. Nothing here touches the disk or a socket other than that loopback listener.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::context::McpContext;
use switchboard_core::live::LiveTable;
use switchboard_core::metrics::Metrics;
use switchboard_core::scope::{Caller, Resource, authenticate};
use switchboard_core::table::RoutingTable;
use switchboard_upstream::UpstreamPlane;

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
pub(crate) async fn served() -> (Upstream, Arc<McpContext>) {
    let upstream = Upstream::start().await;
    let cx = context(&config(&upstream.base));
    (upstream, cx)
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

/// The in-process upstream: a 2026-07-28 MCP server whose answers depend on the method and,
/// for `tools/call`, on the tool's name:
///
/// - `echo`: a result without `resultType` (as a legacy-shaped result comes);
/// - `typed`: a result that names `resultType: complete`;
/// - `broken`: the JSON-RPC error -32602 with HTTP 200; `refused`: the same code with HTTP 422;
/// - `stream`: an event stream, a progress notification before the result;
/// - anything else: a result echoing the name it was called with (`{"called": name}`).
///
/// `tools/list` lists `echo` with `ttlMs` and no `resultType`; `server/discover` names the
/// server `upstream-itself`; `subscriptions/listen` acknowledges on a stream that then ends; a
/// message without a method (a client's reply) is accepted with 202.
pub(crate) struct Upstream {
    pub base: String,
    seen: Seen,
}

/// Every message the upstream received, with its headers, in order.
type Seen = Arc<Mutex<Vec<(HeaderMap, Value)>>>;

impl Upstream {
    pub async fn start() -> Upstream {
        let seen = Seen::default();
        let app = Router::new()
            .route("/mcp", post(mcp))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let base = format!("http://{}", listener.local_addr().expect("an address"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Upstream { base, seen }
    }

    /// Every message the upstream received, with its headers, in order.
    pub fn seen(&self) -> Vec<(HeaderMap, Value)> {
        self.seen.lock().expect("not poisoned").clone()
    }

    /// The methods (or `reply` for a message without one) the upstream received, in order.
    pub fn methods(&self) -> Vec<String> {
        self.seen()
            .iter()
            .map(|(_, m)| m["method"].as_str().unwrap_or("reply").to_string())
            .collect()
    }

    /// The last `tools/call` the upstream received.
    pub fn last_call(&self) -> Option<(HeaderMap, Value)> {
        self.seen()
            .into_iter()
            .rev()
            .find(|(_, m)| m["method"] == "tools/call")
    }
}

async fn mcp(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> Response {
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    seen.lock()
        .expect("not poisoned")
        .push((headers, message.clone()));
    let id = message["id"].clone();
    let result = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
    let Some(method) = message["method"].as_str() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let answer = match method {
        "server/discover" => result(json!({
            "resultType": "complete", "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}}, "ttlMs": 0, "cacheScope": "private",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "upstream-itself", "version": "1"}},
        })),
        "tools/list" => result(json!({
            "tools": [{"name": "echo", "inputSchema": {"type": "object"}}], "ttlMs": 5,
        })),
        "subscriptions/listen" => {
            let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                             "params": {"notifications": {"toolsListChanged": true}}});
            return event_stream(&[ack]);
        }
        "tools/call" => match message["params"]["name"].as_str().unwrap_or_default() {
            "echo" => result(json!({"content": [{"type": "text", "text": "hi"}]})),
            "typed" => result(json!({"content": [], "resultType": "complete"})),
            "broken" | "refused" => {
                let error = json!({"jsonrpc": "2.0", "id": id,
                                   "error": {"code": -32602, "message": "bad arguments"}});
                let status = match message["params"]["name"] == "refused" {
                    true => StatusCode::UNPROCESSABLE_ENTITY,
                    false => StatusCode::OK,
                };
                return (status, axum::Json(error)).into_response();
            }
            "stream" => {
                let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                                      "params": {"progressToken": "p", "progress": 1}});
                let done = result(json!({"content": [{"type": "text", "text": "done"}],
                                         "resultType": "complete"}));
                return event_stream(&[progress, done]);
            }
            other => result(json!({"called": other, "resultType": "complete"})),
        },
        _ => result(json!({"resultType": "complete"})),
    };
    axum::Json(answer).into_response()
}

/// An event stream of `messages` that ends after the last.
fn event_stream(messages: &[Value]) -> Response {
    let body: String = messages
        .iter()
        .map(|m| format!("event: message\ndata: {m}\n\n"))
        .collect();
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}
