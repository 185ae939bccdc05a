//! `answer` in process: each shape one MCP POST can end in, driven with a real context whose
//! server `up` is an in-process upstream (`crate::test_support`, switchboard-upstream's), in both eras, with what the
//! request's metric counts. What the upstream saw shows which answers never went upstream.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use futures_util::StreamExt;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::answer::{Counted, accepts_stream, answer};
use crate::exchange::Pending;
use crate::relay::ReplyRoute;
use crate::test_support::{KEY, bearer, caller, events, read, read_json, served};
use switchboard_protocol::{
    LATEST_LEGACY_VERSION, META_CLIENT_CAPABILITIES, META_LOG_LEVEL, META_PROTOCOL_VERSION,
    MODERN_VERSION, named_field,
};
use switchboard_upstream::test_upstream::TestUpstream;

use switchboard_protocol::ACCEPT_BOTH;

fn header(headers: &mut HeaderMap, name: &'static str, value: &str) {
    headers.insert(name, HeaderValue::from_str(value).expect("a header value"));
}

/// A 2026-07-28 request (`id` 7, or a notification for `None`) as a conforming client sends
/// it: `_meta` with the version and capabilities, the headers repeating the body.
fn modern_with(method: &str, mut params: Value, id: Option<Value>) -> (HeaderMap, Bytes) {
    params["_meta"] =
        json!({ META_PROTOCOL_VERSION: MODERN_VERSION, META_CLIENT_CAPABILITIES: {} });
    let mut headers = bearer(KEY);
    header(&mut headers, "mcp-protocol-version", MODERN_VERSION);
    header(&mut headers, "mcp-method", method);
    header(&mut headers, "accept", ACCEPT_BOTH);
    if let Some(name) = named_field(method).and_then(|f| params[f].as_str()) {
        header(&mut headers, "mcp-name", name);
    }
    let mut message = json!({"jsonrpc": "2.0", "method": method, "params": params});
    if let Some(id) = id {
        message["id"] = id;
    }
    (headers, Bytes::from(message.to_string()))
}

fn modern(method: &str, params: Value) -> (HeaderMap, Bytes) {
    modern_with(method, params, Some(json!(7)))
}

/// A legacy request (`id` 3, or a notification for `None`) on the session `session`.
fn legacy_with(
    session: &str,
    method: &str,
    params: Value,
    id: Option<Value>,
) -> (HeaderMap, Bytes) {
    let mut headers = bearer(KEY);
    header(&mut headers, "mcp-session-id", session);
    header(&mut headers, "mcp-protocol-version", LATEST_LEGACY_VERSION);
    header(&mut headers, "accept", ACCEPT_BOTH);
    let mut message = json!({"jsonrpc": "2.0", "method": method, "params": params});
    if let Some(id) = id {
        message["id"] = id;
    }
    (headers, Bytes::from(message.to_string()))
}

fn legacy(session: &str, method: &str, params: Value) -> (HeaderMap, Bytes) {
    legacy_with(session, method, params, Some(json!(3)))
}

/// A legacy `initialize` by `key`, asking for the latest legacy revision.
fn initialize(key: &str) -> (HeaderMap, Bytes) {
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": LATEST_LEGACY_VERSION, "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    (bearer(key), Bytes::from(message.to_string()))
}

/// A legacy session `key` opened on `/mcp`: its sealed id.
async fn session_of(cx: &std::sync::Arc<crate::context::McpContext>, key: &str) -> String {
    let (headers, body) = initialize(key);
    let (response, _) = answer(cx, None, headers, body).await;
    response.headers()["mcp-session-id"]
        .to_str()
        .expect("a session id")
        .to_string()
}

fn path(prefix: &str) -> Option<String> {
    Some(prefix.to_string())
}

fn counted(method: &'static str, outcome: &'static str) -> Counted {
    Some((method, outcome))
}

/// Nothing went upstream: no request at all, so a client's reply (which has no method)
/// counts as much as a request.
fn untouched(upstream: &TestUpstream) {
    let seen: Vec<String> = upstream
        .seen()
        .iter()
        .map(|s| format!("{} {} {}", s.method, s.path, s.body))
        .collect();
    assert_eq!(seen, Vec::<String>::new());
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_before_the_key_is_read() {
    let (upstream, cx) = served().await;
    let body = Bytes::from(vec![b' '; 4097]);
    let (response, count) = answer(&cx, None, HeaderMap::new(), body).await;
    assert_eq!(count, counted("-", "payload_too_large"));
    let (status, body) = read_json(response).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(body["error"]["message"].is_string(), "{body}");
    assert_eq!(body["id"], Value::Null);
    // At the limit, the key is what is refused next.
    let (_, count) = answer(&cx, None, HeaderMap::new(), Bytes::from(vec![b' '; 4096])).await;
    assert_eq!(count, counted("-", "unauthenticated"));
    untouched(&upstream);
}

#[tokio::test]
async fn a_call_without_a_valid_key_is_refused_as_unauthenticated() {
    let (upstream, cx) = served().await;
    let (_, body) = modern("tools/call", json!({"name": "up__echo"}));
    for headers in [HeaderMap::new(), bearer("not-a-key")] {
        let (response, count) = answer(&cx, None, headers, body.clone()).await;
        assert_eq!(count, counted("-", "unauthenticated"));
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }
    untouched(&upstream);
}

#[tokio::test]
async fn a_body_that_is_no_message_is_refused_naming_why() {
    let (upstream, cx) = served().await;
    for (body, code, says) in [
        ("{not json", -32700, ""),
        ("[1, 2]", -32600, "batches are not supported"),
        (
            r#"{"jsonrpc":"2.0","id":1}"#,
            -32600,
            "needs an id and one of result or error",
        ),
    ] {
        let (response, count) = answer(&cx, None, bearer(KEY), Bytes::from(body)).await;
        assert_eq!(count, counted("-", "bad_request"), "{body}");
        let (status, answer) = read_json(response).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{body}: {message}");
    }
    untouched(&upstream);
}

/// A legacy client's reply to an input request the gateway asked for a 2026-07-28 upstream:
/// handed to the stream waiting for it (202); once that exchange is over, refused.
#[tokio::test]
async fn a_reply_to_a_held_exchange_goes_to_the_stream_waiting_for_it() {
    let (upstream, cx) = served().await;
    let me = caller(&cx, KEY).await;
    let key_tag = me.short_tag();
    let (tx, mut rx) = mpsc::channel(1);
    let mut route = cx
        .exchanges
        .hold(key_tag, Pending::Replies(tx), Duration::from_secs(60))
        .expect("held");
    route.input = Some("q1".into());
    let token = route.seal(&cx.table().sealer);
    let reply = json!({"jsonrpc": "2.0", "id": token, "result": {"action": "accept"}});
    let body = Bytes::from(reply.to_string());

    let (response, count) = answer(&cx, None, bearer(KEY), body.clone()).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(count, counted("reply", "ok"));
    let (key, delivered) = rx.try_recv().expect("the waiting stream got the reply");
    assert_eq!(key, "q1");
    assert_eq!(delivered["result"], json!({"action": "accept"}));

    cx.exchanges.release(route.pending);
    let (response, count) = answer(&cx, None, bearer(KEY), body).await;
    assert_eq!(count, counted("reply", "failed"));
    let (_, answer) = read_json(response).await;
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("is over"), "{answer}");
    untouched(&upstream);
}

/// A client's reply to a server-to-client request the gateway relayed: its sealed id names
/// the upstream that asked, which gets it with its own id; an id this gateway did not hand
/// out, or handed to another key, answers nothing.
#[tokio::test]
async fn a_reply_to_a_relayed_request_goes_to_the_upstream_that_asked() {
    let (upstream, cx) = served().await;
    let me = caller(&cx, KEY).await;
    let route = |key_tag: [u8; 8]| ReplyRoute {
        key_tag,
        server: "up".into(),
        session: None,
        version: LATEST_LEGACY_VERSION.into(),
        id: RawValue::from_string("41".into()).expect("raw"),
    };
    let mine = me.short_tag();
    let reply = |id: Value| {
        let message = json!({"jsonrpc": "2.0", "id": id, "result": {"roots": []}});
        Bytes::from(message.to_string())
    };
    let token = route(mine).seal(&cx.table().sealer);
    let (response, count) = answer(&cx, path("up"), bearer(KEY), reply(json!(token))).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(count, counted("reply", "ok"));
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].body,
        json!({"jsonrpc": "2.0", "id": 41, "result": {"roots": []}})
    );

    let stranger = route([9; 8]).seal(&cx.table().sealer);
    for id in [json!("nope"), json!(stranger)] {
        let (response, count) = answer(&cx, None, bearer(KEY), reply(id)).await;
        assert_eq!(count, counted("reply", "bad_request"));
        let (_, answer) = read_json(response).await;
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("answers no request of this gateway"),
            "{answer}"
        );
    }
    assert_eq!(upstream.seen().len(), 1, "nothing more went upstream");
}

/// `/mcp/{path}` for a server that does not exist, and for one the key does not reach: the
/// same plain 404; only the count tells the refusal apart.
#[tokio::test]
async fn a_path_naming_no_server_of_the_caller_is_no_endpoint() {
    let (upstream, cx) = served().await;
    let (headers, body) = modern("tools/list", json!({}));
    let (response, count) = answer(&cx, path("nowhere"), headers, body.clone()).await;
    assert_eq!(count, counted("tools/list", "not_found"));
    let (status, _, text) = read(response).await;
    assert_eq!(
        (status, text.as_str()),
        (StatusCode::NOT_FOUND, "unknown server: nowhere")
    );

    let mut far = bearer("s-far");
    header(&mut far, "mcp-protocol-version", MODERN_VERSION);
    let (response, count) = answer(&cx, path("up"), far, body).await;
    assert_eq!(count, counted("tools/list", "access_denied"));
    let (status, _, text) = read(response).await;
    assert_eq!(
        (status, text.as_str()),
        (StatusCode::NOT_FOUND, "unknown server: up")
    );
    untouched(&upstream);
}

/// A 2026-07-28 retry whose `requestState` names an exchange this replica holds but that is
/// no paused stream (any more): refused, and left uncounted like every resumed exchange.
#[tokio::test]
async fn a_retry_naming_an_exchange_that_is_over_is_refused() {
    let (upstream, cx) = served().await;
    let me = caller(&cx, KEY).await;
    let key_tag = me.short_tag();
    let (tx, _rx) = mpsc::channel(1);
    let route = cx
        .exchanges
        .hold(key_tag, Pending::Replies(tx), Duration::from_secs(60))
        .expect("held");
    let state = route.seal(&cx.table().sealer);
    let (headers, body) = modern(
        "tools/call",
        json!({"name": "up__echo", "requestState": state}),
    );
    let (response, count) = answer(&cx, None, headers, body).await;
    assert_eq!(count, None);
    let (status, answer) = read_json(response).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(answer["id"], 7);
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("requestState names an exchange that is over"),
        "{answer}"
    );
    untouched(&upstream);
}

/// Legacy `initialize` is the gateway's to answer: a session sealed into its id, the
/// gateway's identity on `/mcp`, the upstream's own on `/mcp/{prefix}`.
#[tokio::test]
async fn a_legacy_initialize_is_answered_with_a_sealed_session() {
    let (_upstream, cx) = served().await;
    let (headers, body) = initialize(KEY);
    let (response, count) = answer(&cx, None, headers.clone(), body.clone()).await;
    assert_eq!(count, counted("initialize", "ok"));
    let (status, response_headers, text) = read(response).await;
    assert_eq!(status, StatusCode::OK);
    assert!(response_headers.contains_key("mcp-session-id"));
    let result: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(result["result"]["protocolVersion"], LATEST_LEGACY_VERSION);
    assert_eq!(result["result"]["serverInfo"]["name"], "switchboard");

    let (response, count) = answer(&cx, path("up"), headers, body).await;
    assert_eq!(count, counted("initialize", "ok"));
    let (_, result) = read_json(response).await;
    assert_eq!(result["result"]["serverInfo"]["name"], "upstream-itself");
}

/// Legacy calls need a session this key opened, not ended, and a version it can speak; each
/// refusal says which.
#[tokio::test]
async fn legacy_calls_are_refused_without_a_live_session_of_their_key() {
    let (upstream, cx) = served().await;
    let mine = session_of(&cx, KEY).await;
    let theirs = session_of(&cx, "s-far").await;
    let call = json!({"name": "echo"});

    let (mut headers, body) = legacy(&mine, "tools/call", call.clone());
    headers.remove("mcp-session-id");
    let (response, count) = answer(&cx, path("up"), headers, body).await;
    assert_eq!(count, counted("tools/call", "bad_request"));
    let (status, answer_body) = read_json(response).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        answer_body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("missing Mcp-Session-Id")
    );
    assert_eq!(answer_body["id"], 3);

    let (headers, body) = legacy(&theirs, "tools/call", call.clone());
    let (_, count) = answer(&cx, path("up"), headers, body).await;
    assert_eq!(
        count,
        counted("tools/call", "forbidden"),
        "another key's session"
    );

    let (mut headers, body) = legacy(&mine, "tools/call", call.clone());
    header(&mut headers, "mcp-protocol-version", "1999-01-01");
    let (response, count) = answer(&cx, path("up"), headers, body).await;
    assert_eq!(count, counted("tools/call", "bad_request"));
    let (_, answer_body) = read_json(response).await;
    assert!(
        answer_body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("unsupported MCP-Protocol-Version")
    );

    let tag = cx
        .table()
        .sealer
        .unseal(
            &mine,
            caller(&cx, KEY).await.tag(),
            std::time::SystemTime::now(),
        )
        .expect("mine")
        .tag;
    cx.end_session(tag);
    let (headers, body) = legacy(&mine, "tools/call", call);
    let (response, count) = answer(&cx, path("up"), headers, body).await;
    assert_eq!(count, counted("tools/call", "session_not_found"));
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(!upstream.rpc_methods().contains(&"tools/call".to_string()));
}

/// A 2026-07-28 request whose headers do not repeat its body is refused in its era's terms
/// (HTTP 400, `HEADER_MISMATCH`), before anything goes upstream.
#[tokio::test]
async fn a_2026_request_whose_headers_disagree_is_refused() {
    let (upstream, cx) = served().await;
    let (mut headers, body) = modern("tools/call", json!({"name": "up__echo"}));
    header(&mut headers, "mcp-method", "tools/list");
    let (response, count) = answer(&cx, None, headers, body).await;
    assert_eq!(count, counted("tools/call", "bad_request"));
    let (status, answer) = read_json(response).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(answer["error"]["code"], -32020);
    assert_eq!(answer["id"], 7);
    untouched(&upstream);
}

/// Notifications concern the gateway's own session with the client: 202, nothing upstream,
/// nothing counted, in either era.
#[tokio::test]
async fn notifications_are_accepted_and_not_counted() {
    let (upstream, cx) = served().await;
    let session = session_of(&cx, KEY).await;
    let sent = [
        modern_with("notifications/initialized", json!({}), None),
        legacy_with(&session, "notifications/initialized", json!({}), None),
        legacy_with(
            &session,
            "notifications/cancelled",
            json!({"requestId": 1}),
            None,
        ),
    ];
    for (headers, body) in sent {
        let (response, count) = answer(&cx, path("up"), headers, body).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        assert_eq!(count, None);
    }
    assert!(
        !upstream
            .rpc_methods()
            .iter()
            .any(|m| m.starts_with("notifications/"))
    );
}

/// What the gateway answers itself: legacy `ping` and a session setting on `/mcp`, the
/// aggregate's `server/discover`; a method 2026-07-28 removed is not found. None goes
/// upstream; a legacy log level set on the gateway reaches the upstream with the next call.
#[tokio::test]
async fn methods_the_gateway_answers_itself() {
    let (upstream, cx) = served().await;
    let session = session_of(&cx, KEY).await;

    let (headers, body) = legacy(&session, "ping", json!({}));
    let (response, count) = answer(&cx, None, headers, body).await;
    assert_eq!(count, counted("ping", "ok"));
    assert_eq!(
        read_json(response).await.1,
        json!({"jsonrpc": "2.0", "id": 3, "result": {}})
    );

    let (headers, body) = modern("ping", json!({}));
    let (response, count) = answer(&cx, None, headers, body).await;
    assert_eq!(count, counted("ping", "bad_request"));
    let (status, answer_body) = read_json(response).await;
    assert_eq!(
        (status, &answer_body["error"]["code"]),
        (StatusCode::NOT_FOUND, &json!(-32601))
    );

    let (headers, body) = modern("server/discover", json!({}));
    let (response, count) = answer(&cx, None, headers, body).await;
    assert_eq!(count, counted("server/discover", "ok"));
    let (_, discovered) = read_json(response).await;
    let result = &discovered["result"];
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "switchboard"
    );
    assert_eq!(result["supportedVersions"][0], MODERN_VERSION);
    assert_eq!(result["resultType"], "complete", "stamped for its era");

    let (headers, body) = legacy(&session, "logging/setLevel", json!({"level": "error"}));
    let (response, count) = answer(&cx, None, headers, body).await;
    assert_eq!(count, counted("logging/setLevel", "ok"));
    assert_eq!(read_json(response).await.1["result"], json!({}));
    untouched(&upstream);

    let (headers, body) = legacy(&session, "tools/call", json!({"name": "echo"}));
    let (response, _) = answer(&cx, path("up"), headers, body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let call = upstream.last_call().expect("the call went upstream").body;
    assert_eq!(call["params"]["_meta"][META_LOG_LEVEL], "error");
}

/// `server/discover` on `/mcp/{prefix}` is the upstream's, with the versions the gateway
/// serves.
#[tokio::test]
async fn a_single_servers_discover_is_the_upstreams_own() {
    let (upstream, cx) = served().await;
    let (headers, body) = modern("server/discover", json!({}));
    let (response, count) = answer(&cx, path("up"), headers, body).await;
    assert_eq!(count, counted("server/discover", "ok"));
    let (_, discovered) = read_json(response).await;
    let result = &discovered["result"];
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "upstream-itself"
    );
    assert_eq!(result["supportedVersions"][0], MODERN_VERSION);
    assert!(
        result["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.len() > 1)
    );
    assert!(
        upstream
            .rpc_methods()
            .contains(&"server/discover".to_string())
    );
}

/// A tool's result passes as it came: a 2026-07-28 client gets `resultType` where the
/// upstream left it out; a legacy client never sees it. The prefix is gone upstream.
#[tokio::test]
async fn a_tool_result_is_relayed_as_it_came_in_each_era() {
    let (upstream, cx) = served().await;
    let session = session_of(&cx, KEY).await;
    let result_of = |tool: &str, modern_client: bool| {
        let params = json!({"name": tool, "arguments": {}});
        match modern_client {
            true => modern("tools/call", params),
            false => legacy(&session, "tools/call", params),
        }
    };
    for (tool, modern_client, expected) in [
        (
            "up__echo",
            true,
            json!({"resultType": "complete", "content": [{"type": "text", "text": "hi"}]}),
        ),
        (
            "up__typed",
            true,
            json!({"content": [], "resultType": "complete"}),
        ),
        (
            "up__echo",
            false,
            json!({"content": [{"type": "text", "text": "hi"}]}),
        ),
        ("up__typed", false, json!({"content": []})),
    ] {
        let (headers, body) = result_of(tool, modern_client);
        let (response, count) = answer(&cx, None, headers, body).await;
        assert_eq!(count, counted("tools/call", "ok"), "{tool}");
        let (status, _, text) = read(response).await;
        assert_eq!(status, StatusCode::OK);
        let got: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(
            got["result"], expected,
            "{tool}, 2026-07-28 client: {modern_client}"
        );
        if modern_client && tool == "up__echo" {
            assert!(
                text.contains(r#""result":{"resultType":"complete","content""#),
                "in front: {text}"
            );
        }
        let call = upstream.last_call().expect("went upstream").body;
        assert_eq!(call["params"]["name"], tool.trim_start_matches("up__"));
    }
}

/// A call's parameters go upstream as the client wrote them, on the server's path, on `/mcp`
/// (the name's prefix taken off) and in a legacy session: its arguments' members in the
/// client's order and its escapes as they were. The gateway reads the members it checks and
/// writes the call from the text (`switchboard_protocol::Params`); a tree of the parameters
/// written out again would sort the members and unescape the `é`.
#[tokio::test]
async fn a_calls_arguments_go_upstream_as_the_client_wrote_them() {
    let (upstream, cx) = served().await;
    let session = session_of(&cx, KEY).await;
    let arguments = r#"{"z":1,"a":{"y":"\u00e9\"","b":[2,1]}}"#;
    let modern_call = |name: &str| {
        let mut headers = bearer(KEY);
        header(&mut headers, "mcp-protocol-version", MODERN_VERSION);
        header(&mut headers, "mcp-method", "tools/call");
        header(&mut headers, "mcp-name", name);
        header(&mut headers, "accept", ACCEPT_BOTH);
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"{name}","arguments":{arguments},"_meta":{{"{META_PROTOCOL_VERSION}":"{MODERN_VERSION}","{META_CLIENT_CAPABILITIES}":{{}}}}}}}}"#
        );
        (headers, Bytes::from(body))
    };
    let legacy_call = |name: &str| {
        let mut headers = bearer(KEY);
        header(&mut headers, "mcp-session-id", &session);
        header(&mut headers, "mcp-protocol-version", LATEST_LEGACY_VERSION);
        header(&mut headers, "accept", ACCEPT_BOTH);
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"arguments":{arguments},"name":"{name}"}}}}"#
        );
        (headers, Bytes::from(body))
    };
    for (prefix, (headers, body)) in [
        (path("up"), modern_call("echo")),
        (None, modern_call("up__echo")),
        (None, legacy_call("up__echo")),
    ] {
        let (response, count) = answer(&cx, prefix.clone(), headers, body).await;
        assert_eq!(count, counted("tools/call", "ok"), "{prefix:?}");
        let (status, _, text) = read(response).await;
        assert_eq!(status, StatusCode::OK, "{prefix:?}: {text}");
        let sent = upstream.last_call().expect("went upstream");
        assert!(
            sent.text.contains(&format!(r#""arguments":{arguments}"#)),
            "{prefix:?}: {}",
            sent.text
        );
        assert_eq!(sent.body["params"]["name"], "echo", "{prefix:?}");
    }
}

/// A listing the gateway reads: completed for a 2026-07-28 client (`resultType`, the cache
/// hints it lacks; the upstream's own `ttlMs` kept), stripped of them for a legacy one; the
/// aggregate's merged listing names the tool by its prefix.
#[tokio::test]
async fn listings_are_completed_or_stripped_for_their_era() {
    let (_upstream, cx) = served().await;
    let session = session_of(&cx, KEY).await;
    let (headers, body) = modern("tools/list", json!({}));
    let (response, count) = answer(&cx, path("up"), headers, body).await;
    assert_eq!(count, counted("tools/list", "ok"));
    let result = read_json(response).await.1["result"].clone();
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["ttlMs"], 5);
    assert_eq!(result["cacheScope"], "private");
    assert_eq!(result["tools"][0]["name"], "echo");

    let (headers, body) = legacy(&session, "tools/list", json!({}));
    let (response, _) = answer(&cx, path("up"), headers, body).await;
    let result = read_json(response).await.1["result"].clone();
    assert_eq!(
        result,
        json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]})
    );

    let (headers, body) = modern("tools/list", json!({}));
    let (response, count) = answer(&cx, None, headers, body).await;
    assert_eq!(count, counted("tools/list", "ok"));
    let result = read_json(response).await.1["result"].clone();
    assert_eq!(result["tools"][0]["name"], "up__echo", "{result}");
}

/// The upstream's JSON-RPC error goes to the client unchanged; its HTTP status is the era's:
/// 200 for a legacy client, for a 2026-07-28 one the upstream's own 4xx, else the revision's
/// rule for the code (-32602: 400).
#[tokio::test]
async fn an_upstream_error_is_relayed_with_its_eras_status() {
    let (_upstream, cx) = served().await;
    let session = session_of(&cx, KEY).await;
    let bad = json!({"code": -32602, "message": "bad arguments"});
    for (tool, modern_client, status) in [
        ("broken", true, StatusCode::BAD_REQUEST),
        ("refused", true, StatusCode::UNPROCESSABLE_ENTITY),
        ("broken", false, StatusCode::OK),
        ("refused", false, StatusCode::OK),
    ] {
        let params = json!({"name": tool});
        let (headers, body) = match modern_client {
            true => modern("tools/call", params),
            false => legacy(&session, "tools/call", params),
        };
        let (response, count) = answer(&cx, path("up"), headers, body).await;
        assert_eq!(count, counted("tools/call", "upstream_error"), "{tool}");
        let (got, answer_body) = read_json(response).await;
        assert_eq!(got, status, "{tool}, 2026-07-28 client: {modern_client}");
        assert_eq!(answer_body["error"], bad);
    }
}

/// A failure of the gateway's own after the era checks (here: a tool no server in scope
/// has) is a JSON-RPC error with the request's id, its status the era's.
#[tokio::test]
async fn a_gateway_failure_is_a_jsonrpc_error_in_the_requests_era() {
    let (upstream, cx) = served().await;
    let session = session_of(&cx, KEY).await;
    for (modern_client, status) in [(true, StatusCode::BAD_REQUEST), (false, StatusCode::OK)] {
        let params = json!({"name": "nowhere__echo"});
        let (headers, body, id) = match modern_client {
            true => {
                let (h, b) = modern("tools/call", params);
                (h, b, 7)
            }
            false => {
                let (h, b) = legacy(&session, "tools/call", params);
                (h, b, 3)
            }
        };
        let (response, count) = answer(&cx, None, headers, body).await;
        assert_eq!(count, counted("tools/call", "tool_not_found"));
        let (got, answer_body) = read_json(response).await;
        assert_eq!(got, status, "2026-07-28 client: {modern_client}");
        assert_eq!(answer_body["id"], id);
        assert_eq!(answer_body["error"]["code"], -32602);
    }
    assert!(!upstream.rpc_methods().contains(&"tools/call".to_string()));
}

/// An upstream's stream is relayed event by event: the progress notification before the
/// result, which answers the client's own id.
#[tokio::test]
async fn a_streamed_answer_is_relayed_event_by_event() {
    let (_upstream, cx) = served().await;
    let (headers, body) = modern("tools/call", json!({"name": "stream"}));
    let (response, count) = answer(&cx, path("up"), headers, body).await;
    assert_eq!(count, counted("tools/call", "stream"));
    let (status, headers, text) = read(response).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap_or_default()
            .starts_with("text/event-stream")
    );
    let messages = events(&text);
    assert_eq!(messages.len(), 2, "{text}");
    assert_eq!(messages[0]["method"], "notifications/progress");
    assert_eq!(messages[1]["id"], 7);
    assert_eq!(messages[1]["result"]["content"][0]["text"], "done");
}

/// `subscriptions/listen` on `/mcp` fans in to one stream whose first message is the merged
/// acknowledgement, tagged with the client's id as its subscription id.
#[tokio::test]
async fn a_subscription_is_answered_with_the_fanned_in_stream() {
    let (upstream, cx) = served().await;
    let params = json!({"notifications": {"toolsListChanged": true}});
    let (headers, body) = modern("subscriptions/listen", params);
    let (response, count) = answer(&cx, None, headers, body).await;
    assert_eq!(count, counted("subscriptions/listen", "stream"));
    assert!(
        upstream
            .rpc_methods()
            .contains(&"subscriptions/listen".to_string())
    );
    // Read up to the acknowledgement only: a subscription is not bound to end.
    let mut frames = response.into_body().into_data_stream();
    let mut text = String::new();
    while !text.contains("\n\n") {
        let frame = frames.next().await.expect("a frame").expect("readable");
        text.push_str(&String::from_utf8_lossy(&frame));
    }
    let ack = &events(&text)[0];
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        7
    );
    assert_eq!(ack["params"]["notifications"]["toolsListChanged"], true);
}

/// MCP Apps through `/mcp`: a tool's link to its `ui://` resource, the resource in the
/// listing, its read (routed to the upstream's own URI, read whole though the upstream
/// streams it) and the contents' URI all name it `ui://up__<rest>`, which a host accepts (it
/// starts with `ui://`); `/mcp/up` relays the upstream's own URIs. A caller that does not
/// reach `up` is answered as for a resource that does not exist, and it is counted as the
/// refusal it is.
#[tokio::test]
async fn a_ui_resource_and_the_links_to_it_keep_the_ui_scheme_on_the_aggregate() {
    use switchboard_upstream::test_upstream::{Reply, Upstream};
    const UI: &str = "ui://weather/view.html";
    const SHOWN: &str = "ui://up__weather/view.html";
    let tool = json!({"name": "show", "inputSchema": {"type": "object"},
        "_meta": {"ui": {"resourceUri": UI, "visibility": ["model", "app"]}, "ui/resourceUri": UI}});
    let contents = json!({"contents": [{"uri": UI, "mimeType": "text/html;profile=mcp-app",
        "text": "<p>weather</p>"}]});
    let upstream = Upstream {
        replies: vec![
            ("tools/list", Reply::Result(json!({"tools": [tool]}))),
            (
                "resources/list",
                Reply::Result(json!({"resources": [{"uri": UI, "name": "view",
                    "mimeType": "text/html;profile=mcp-app"}]})),
            ),
            ("resources/read", Reply::Stream(Vec::new(), Some(contents))),
        ],
        ..Upstream::default()
    }
    .serve()
    .await;
    let cx = crate::test_support::context(&crate::test_support::config(&upstream.base));
    // The answer's message, whether it came as JSON or as an event stream (relayed).
    let ask = |method: &str, params: Value, at: Option<String>| {
        let (headers, body) = modern(method, params);
        let cx = cx.clone();
        async move {
            let (status, _, text) = read(answer(&cx, at, headers, body).await.0).await;
            let message = serde_json::from_str(&text)
                .ok()
                .or_else(|| events(&text).pop())
                .unwrap_or(Value::Null);
            (status, message)
        }
    };
    let (status, listed) = ask("tools/list", json!({}), None).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let meta = &listed["result"]["tools"][0]["_meta"];
    assert_eq!(meta["ui"]["resourceUri"], SHOWN, "{listed}");
    assert_eq!(meta["ui/resourceUri"], SHOWN);
    assert_eq!(meta["ui"]["visibility"], json!(["model", "app"]));
    let (_, resources) = ask("resources/list", json!({}), None).await;
    assert_eq!(
        resources["result"]["resources"][0]["uri"], SHOWN,
        "{resources}"
    );
    let (status, read) = ask("resources/read", json!({"uri": SHOWN}), None).await;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert_eq!(read["result"]["contents"][0]["uri"], SHOWN, "{read}");
    assert_eq!(read["result"]["contents"][0]["text"], "<p>weather</p>");
    let asked = upstream.requests_of("resources/read");
    assert_eq!(
        asked.last().map(|s| &s.body["params"]["uri"]),
        Some(&json!(UI))
    );
    // The server's own endpoint relays the upstream's URIs as they are.
    let (_, own) = ask("tools/list", json!({}), path("up")).await;
    assert_eq!(
        own["result"]["tools"][0]["_meta"]["ui"]["resourceUri"], UI,
        "{own}"
    );
    let (_, own_read) = ask("resources/read", json!({"uri": UI}), path("up")).await;
    assert_eq!(own_read["result"]["contents"][0]["uri"], UI, "{own_read}");
    // Out of scope: no such resource, counted as refused.
    let (mut far, body) = modern("resources/read", json!({"uri": SHOWN}));
    far.insert(
        axum::http::header::AUTHORIZATION,
        HeaderValue::from_static("Bearer s-far"),
    );
    let (response, count) = answer(&cx, None, far, body).await;
    assert_eq!(count, counted("resources/read", "access_denied"));
    let (_, refused) = read_json(response).await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(SHOWN)),
        "{refused}"
    );
}

#[test]
fn an_accept_value_takes_a_stream_by_one_of_its_media_ranges() {
    for taken in [
        "text/event-stream",
        "application/json, text/event-stream",
        "application/json;q=0.9,Text/Event-Stream ; q=0.5",
        "*/*",
        "application/json, */*;q=0.1",
    ] {
        assert!(accepts_stream(taken), "{taken}");
    }
    for refused in [
        "",
        "application/json",
        "text/*",
        "text/event-streams",
        "application/json; profile=\"text/event-stream\"x",
        "*/*x",
    ] {
        assert!(!accepts_stream(refused), "{refused}");
    }
}
