//! Streams a legacy server closes before its answer (2025-11-25 stream polling), against an
//! in-process upstream (an axum app on a loopback port) that plays a script: the SSE body
//! of the `tools/call` POST, then the answer to each resuming GET, in turn.

use super::*;
use crate::test_upstream::{Answer, Speaks, TestUpstream, Upstream};

/// A `byClient` upstream that plays a script: `call` is the SSE body of the `tools/call`
/// POST (`{ID}` stands for the request's id), `gets` the answers to each resuming GET, in
/// turn (past them, 405).
async fn scripted(call: &str, gets: &[(StatusCode, &str)]) -> TestUpstream {
    Upstream {
        speaks: Speaks::ByClient,
        call_script: Some(call.into()),
        gets: gets.iter().map(|(s, b)| (*s, b.to_string())).collect(),
        ..Upstream::default()
    }
    .serve()
    .await
}

fn table(url: &str) -> Arc<RoutingTable> {
    // byClient: a legacy client's request goes on its own legacy session, a 2026-07-28
    // request in that form, with no detection round in between.
    let yaml = format!(
        "servers:\n  - name: up\n    url: {url}\n    timeout: 5s\n    upstreamEra: byClient\n    auth: {{type: bearer, secret: upstream-credential}}\n"
    );
    let snapshot = switchboard_snapshot::parse(&yaml).expect("a valid snapshot");
    Arc::new(RoutingTable::build(&snapshot).expect("a valid table"))
}

/// The table for `up`, and the clients set up for that table.
fn served(up: &TestUpstream) -> (Arc<RoutingTable>, Upstreams) {
    let table = table(&up.mcp_url());
    let upstreams = Upstreams::new();
    upstreams.set_table(&table);
    (table, upstreams)
}

const LEGACY_CLIENT: SessionScope = SessionScope {
    client: 7,
    capabilities: 0,
};

async fn call(
    upstreams: &Upstreams,
    table: &RoutingTable,
    session: SessionScope,
    stream: bool,
    budget: Duration,
) -> Result<RpcOutcome, UpstreamError> {
    let request = UpstreamCall {
        stream,
        session,
        ..UpstreamCall::whole("tools/call", Some(json!({"name": "slow", "arguments": {}})))
    };
    send(upstreams, &table.servers[0], &request, budget).await
}

/// `request` straight to the client, as the plane sends it (no caller headers, no credential).
async fn send(
    upstreams: &Upstreams,
    server: &Server,
    request: &UpstreamCall<'_>,
    budget: Duration,
) -> Result<RpcOutcome, UpstreamError> {
    upstreams
        .call(RpcCall {
            request,
            server,
            caller_headers: &HeaderMap::new(),
            param_headers: None,
            credential: None,
            deadline: Instant::now() + budget,
            budget,
        })
        .await
}

async fn stream_of(
    upstreams: &Upstreams,
    table: &RoutingTable,
    session: SessionScope,
) -> Box<UpstreamStream> {
    match call(upstreams, table, session, true, Duration::from_secs(5)).await {
        Ok(RpcOutcome::Stream(stream)) => stream,
        other => panic!("expected a stream, got {other:?}"),
    }
}

/// Every event of a stream until it ends (or fails), and how it ended.
async fn drain(stream: &mut UpstreamStream) -> (Vec<SseEvent>, Result<(), UpstreamError>) {
    let mut events = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.next_event("up")).await {
            Ok(Ok(Some(event))) => {
                let answer = event.data.contains("\"result\"");
                events.push(event);
                if answer {
                    stream.answered();
                    return (events, Ok(()));
                }
            }
            Ok(Ok(None)) => return (events, Ok(())),
            Ok(Err(e)) => return (events, Err(e)),
            Err(_) => panic!("the stream neither ended nor answered in 10 s"),
        }
    }
}

fn progress(n: u32) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"p","progress":{n}}}}}"#
    )
}

const ANSWER: &str =
    r#"{"jsonrpc":"2.0","id":{ID},"result":{"content":[{"type":"text","text":"done"}]}}"#;

/// A server that closes twice (after its priming event, after a progress notification on
/// the first resume) and answers on the second resume.
async fn polling_server() -> TestUpstream {
    let call = format!(
        "id: e0\nretry: 10\ndata: \n\nid: e1\ndata: {}\n\n",
        progress(1)
    );
    let first = format!(
        "id: e2\nretry: 20\ndata: \n\nid: e3\ndata: {}\n\n",
        progress(2)
    );
    let second = format!("id: e4\ndata: \n\nid: e5\ndata: {ANSWER}\n\n");
    scripted(
        &call,
        &[(StatusCode::OK, &first), (StatusCode::OK, &second)],
    )
    .await
}

#[tokio::test]
async fn a_stream_the_server_closes_is_resumed_until_the_answer() {
    let up = polling_server().await;
    let (table, upstreams) = served(&up);
    let mut stream = stream_of(&upstreams, &table, LEGACY_CLIENT).await;
    let (events, ended) = drain(&mut stream).await;
    ended.expect("the stream is resumed, not failed");
    let data: Vec<&str> = events
        .iter()
        .map(|e| e.data.as_str())
        .filter(|d| !d.is_empty())
        .collect();
    let id = up.call_id().unwrap();
    let answer = ANSWER.replace("{ID}", &id.to_string());
    assert_eq!(
        data,
        [progress(1), progress(2), answer],
        "one stream, in order"
    );
    assert!(
        events.iter().all(|e| e.id.is_none() && e.retry.is_none()),
        "ids and retry: stay with the gateway: {events:?}"
    );
    let gets: Vec<HeaderMap> = up.gets().into_iter().map(|s| s.headers).collect();
    let header =
        |h: &HeaderMap, name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let resumed_after: Vec<_> = gets.iter().map(|h| header(h, "last-event-id")).collect();
    // The one session the upstream opened (for the client session: its affinity).
    let session: Vec<String> = up.held().into_iter().collect();
    assert_eq!(session.len(), 1, "{session:?}");
    assert_eq!(
        resumed_after,
        [Some("e1".into()), Some("e3".into())],
        "each resume names the last event seen"
    );
    for h in &gets {
        assert_eq!(header(h, "mcp-session-id").as_ref(), Some(&session[0]));
        assert_eq!(
            header(h, "mcp-protocol-version").as_deref(),
            Some("2025-11-25")
        );
        assert_eq!(
            header(h, "authorization").as_deref(),
            Some("Bearer upstream-credential"),
            "the server's credential"
        );
        assert_eq!(header(h, "accept").as_deref(), Some("text/event-stream"));
        assert!(h.get(header::CONTENT_TYPE).is_none(), "a GET has no body");
    }
}

#[tokio::test]
async fn a_whole_answer_is_read_across_the_closes() {
    let up = polling_server().await;
    let (table, upstreams) = served(&up);
    let outcome = call(
        &upstreams,
        &table,
        LEGACY_CLIENT,
        false,
        Duration::from_secs(5),
    )
    .await;
    let Ok(RpcOutcome::Result(result)) = outcome else {
        panic!("expected the answer, got {outcome:?}");
    };
    assert_eq!(result.into_value()["content"][0]["text"], "done");
    assert_eq!(up.gets().len(), 2);
}

#[tokio::test]
async fn the_wait_the_server_asks_for_is_kept_within_the_deadline() {
    // retry: 60 s, a 300 ms budget: a client that honours `retry:` times out before it
    // resumes (one that ignored it would GET at once).
    let call_body = format!(
        "id: e0\nretry: 60000\ndata: \n\nid: e1\ndata: {}\n\n",
        progress(1)
    );
    let answer = format!("id: e2\ndata: {ANSWER}\n\n");
    let up = scripted(&call_body, &[(StatusCode::OK, &answer)]).await;
    let (table, upstreams) = served(&up);
    let budget = Duration::from_millis(300);
    let outcome = call(&upstreams, &table, LEGACY_CLIENT, false, budget).await;
    match outcome {
        Err(UpstreamError::Timeout { server, budget: b }) => {
            assert_eq!(server, "up");
            assert_eq!(b, budget);
        }
        other => panic!("expected a timeout naming the server and budget, got {other:?}"),
    }
    assert!(up.gets().is_empty(), "resumed before the retry: time");
    // Given up at the deadline: the server is told.
    tokio::time::timeout(Duration::from_secs(10), up.cancel_came())
        .await
        .expect("notifications/cancelled after the deadline");
    let id = up.call_id().unwrap();
    assert_eq!(up.cancelled(), [id]);
}

#[tokio::test]
async fn a_resume_the_server_refuses_fails_naming_the_status_and_cancels() {
    let call_body = "id: e0\nretry: 5\ndata: \n\n";
    let up = scripted(call_body, &[]).await;
    let (table, upstreams) = served(&up);
    let mut stream = stream_of(&upstreams, &table, LEGACY_CLIENT).await;
    let (_, ended) = drain(&mut stream).await;
    match ended {
        Err(UpstreamError::Unavailable { server, detail }) => {
            assert_eq!(server, "up");
            assert!(detail.contains("HTTP 405"), "{detail}");
            assert!(detail.contains("resuming"), "{detail}");
        }
        other => panic!("expected the refused resume, got {other:?}"),
    }
    assert_eq!(up.gets().len(), 1);
    drop(stream);
    tokio::time::timeout(Duration::from_secs(10), up.cancel_came())
        .await
        .expect("notifications/cancelled once the gateway gives up");
}

#[tokio::test]
async fn a_stream_without_an_event_id_is_not_resumed() {
    let call_body = format!("data: {}\n\n", progress(1));
    let up = scripted(&call_body, &[(StatusCode::OK, ANSWER)]).await;
    let (table, upstreams) = served(&up);
    let mut stream = stream_of(&upstreams, &table, LEGACY_CLIENT).await;
    let (events, ended) = drain(&mut stream).await;
    assert!(ended.is_ok() && events.len() == 1, "{events:?} {ended:?}");
    assert!(up.gets().is_empty());
}

#[tokio::test]
async fn a_2026_request_is_never_resumed() {
    // The 2026-07-28 revision has no resumption (and no GET): a stream closed before its
    // answer is a failed stream, whatever ids it carried.
    let call_body = format!(
        "id: e0\nretry: 5\ndata: \n\nid: e1\ndata: {}\n\n",
        progress(1)
    );
    let up = scripted(&call_body, &[(StatusCode::OK, ANSWER)]).await;
    let (table, upstreams) = served(&up);
    let mut stream = stream_of(&upstreams, &table, SessionScope::default()).await;
    let (events, ended) = drain(&mut stream).await;
    assert!(ended.is_ok() && events.len() == 2, "{events:?} {ended:?}");
    assert!(up.gets().is_empty());
}

#[test]
fn the_reconnection_time_is_the_servers_then_backs_off_when_resumes_bring_nothing() {
    let mut point = ResumePoint::default();
    assert_eq!(point.delay(), DEFAULT_RECONNECT, "none asked: the default");
    let mut event = SseEvent {
        id: Some("e1".into()),
        retry: Some(0),
        ..SseEvent::default()
    };
    point.take_from(&mut event);
    assert_eq!((event.id, event.retry), (None, None), "taken off the event");
    assert_eq!(
        point.delay(),
        Duration::ZERO,
        "the server's retry: 0 is kept"
    );
    point.fruitless = 1;
    assert_eq!(point.delay(), MIN_FRUITLESS_RECONNECT * 2);
    point.fruitless = 40;
    assert_eq!(point.delay(), MAX_RECONNECT);
    point.take_from(&mut SseEvent {
        id: Some(String::new()),
        retry: Some(90_000),
        ..SseEvent::default()
    });
    assert_eq!(point.fruitless, 0, "an event resets the backoff");
    assert_eq!(
        point.delay(),
        Duration::from_secs(90),
        "longer than the cap if asked"
    );
    assert!(
        point.last_event_id.is_none(),
        "an empty id: nothing to resume from"
    );
}

#[test]
fn a_json_answer_is_relayed_only_when_it_answers_the_request_sent() {
    let table = table("http://127.0.0.1:9/mcp");
    let server = &table.servers[0];
    let reply = |body: &str| Reply {
        status: StatusCode::OK,
        headers: HeaderMap::from_iter([(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )]),
        body: bytes::Bytes::from(body.to_owned()),
    };
    let sent = json!(5);
    let answer = r#"{"jsonrpc":"2.0","id":5,"result":{"content":[]}}"#;
    assert!(matches!(
        reply(answer).outcome(server, &sent),
        Ok(RpcOutcome::Result(_))
    ));
    let error = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}"#;
    assert!(matches!(
        reply(error).outcome(server, &sent),
        Ok(RpcOutcome::Error(..))
    ));
    let in_a_batch = format!("[{error}]");
    assert!(matches!(
        reply(&in_a_batch).outcome(server, &sent),
        Ok(RpcOutcome::Error(..))
    ));
    for other in [
        r#"{"jsonrpc":"2.0","id":4,"result":{"content":[]}}"#,
        r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"bad"}}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#,
        r#"[{"jsonrpc":"2.0","id":4,"result":{}}]"#,
        r#"[{"jsonrpc":"2.0","id":null,"result":{}}]"#,
    ] {
        let Err(UpstreamError::Unavailable { detail, .. }) = reply(other).outcome(server, &sent)
        else {
            panic!("{other} was taken as the answer to request 5");
        };
        assert_eq!(
            detail,
            "HTTP 200: the body is not the JSON-RPC response to this request"
        );
    }
}

// Eras, legacy sessions, redirects and SSE answers, driven through the plane (the crate's
// public surface) against the in-process upstream, and asserted from its side.

use crate::plane::UpstreamPlane;
use switchboard_core::metrics::Metrics;
use switchboard_core::scope::Caller;
use switchboard_protocol::Era;

/// A plane serving one server `up` (its YAML lines after `url`), as the gateway's own caller.
struct Gateway {
    plane: UpstreamPlane,
    server: Arc<Server>,
    caller: Caller,
}

impl Gateway {
    fn new(url: &str, more: &str) -> Gateway {
        Gateway::with_settings("", url, more)
    }

    /// `gateway` is the snapshot's `gateway:` block (empty: none).
    fn with_settings(gateway: &str, url: &str, more: &str) -> Gateway {
        let yaml =
            format!("{gateway}servers:\n  - name: up\n    url: {url}\n    timeout: 5s\n{more}");
        let snapshot = switchboard_snapshot::parse(&yaml).expect("a valid snapshot");
        let table = Arc::new(RoutingTable::build(&snapshot).expect("a valid table"));
        let plane = UpstreamPlane::new(Arc::new(Metrics::default()));
        plane.prepare(&table);
        let server = table.servers[0].clone();
        let caller = Caller::probe(table, &server);
        Gateway {
            plane,
            server,
            caller,
        }
    }

    async fn ask(&self, request: &UpstreamCall<'_>) -> Result<RpcOutcome, UpstreamError> {
        self.plane.call(&self.caller, &self.server, request).await
    }

    /// `tools/call` of `echo`, answered whole.
    async fn call_echo(&self) -> Result<RpcOutcome, UpstreamError> {
        self.ask(&UpstreamCall::whole("tools/call", Some(echo())))
            .await
    }

    fn era(&self) -> Option<Era> {
        self.plane.era_of(&self.server)
    }
}

fn echo() -> Value {
    json!({"name": "echo", "arguments": {}})
}

/// The result of a whole answer, as a tree (panics on anything else).
fn result_of(outcome: Result<RpcOutcome, UpstreamError>) -> Value {
    match outcome {
        Ok(RpcOutcome::Result(result)) => result.into_value(),
        other => panic!("expected a result, got {other:?}"),
    }
}

const BEARER: &str = "    auth: {type: bearer, secret: upstream-credential}\n";

#[tokio::test]
async fn a_2026_upstream_costs_one_request_per_call_and_is_remembered_as_modern() {
    let up = TestUpstream::modern().await;
    let gw = Gateway::new(&up.mcp_url(), "");
    assert_eq!(gw.era(), None, "unknown until a request tells");
    for _ in 0..2 {
        assert_eq!(result_of(gw.call_echo().await)["content"][0]["text"], "ok");
    }
    assert_eq!(gw.era(), Some(Era::Rev2026));
    assert_eq!(
        up.rpc_methods(),
        ["tools/call", "tools/call"],
        "no handshake"
    );
    for seen in up.seen() {
        // The 2026-07-28 request form: the version, method and name as headers.
        assert_eq!(
            seen.header("mcp-protocol-version").as_deref(),
            Some("2026-07-28")
        );
        assert_eq!(seen.header("mcp-method").as_deref(), Some("tools/call"));
        assert_eq!(seen.header("mcp-name").as_deref(), Some("echo"));
        assert!(seen.header("mcp-session-id").is_none());
    }
}

#[tokio::test]
async fn a_legacy_upstream_is_told_by_its_refusal_then_spoken_to_on_one_session() {
    let up = Upstream {
        speaks: Speaks::Legacy,
        legacy_version: "2025-06-18",
        ..Upstream::default()
    }
    .serve()
    .await;
    let gw = Gateway::new(&up.mcp_url(), "");
    assert_eq!(result_of(gw.call_echo().await)["content"][0]["text"], "ok");
    assert_eq!(gw.era(), Some(Era::Rev2025));
    assert_eq!(
        up.rpc_methods(),
        [
            "tools/call",
            "initialize",
            "notifications/initialized",
            "tools/call"
        ],
        "the 2026-07-28 try, refused; the handshake; the request again on the session"
    );
    // Remembered: the next call goes straight to the session.
    assert_eq!(result_of(gw.call_echo().await)["content"][0]["text"], "ok");
    let calls = up.requests_of("tools/call");
    assert_eq!(calls.len(), 3, "no second detection");
    assert_eq!(up.sessions_opened(), 1, "initialized once");
    for legacy in &calls[1..] {
        assert_eq!(
            legacy.header("mcp-session-id").as_deref(),
            Some("session-1")
        );
        // The version the handshake agreed, not the gateway's latest.
        assert_eq!(
            legacy.header("mcp-protocol-version").as_deref(),
            Some("2025-06-18")
        );
    }
}

#[tokio::test]
async fn a_2026_error_in_a_4xx_is_the_upstreams_answer_not_a_sign_of_a_legacy_server() {
    let up = TestUpstream::modern().await;
    let gw = Gateway::new(&up.mcp_url(), "");
    let outcome = gw.ask(&UpstreamCall::whole("nope/unknown", None)).await;
    let Ok(RpcOutcome::Error(error, status)) = outcome else {
        panic!("expected the upstream's error, got {outcome:?}");
    };
    assert_eq!(
        (error["code"].as_i64(), status),
        (Some(-32601), StatusCode::NOT_FOUND)
    );
    assert_eq!(gw.era(), Some(Era::Rev2026));
    assert!(
        up.requests_of("initialize").is_empty(),
        "no legacy fallback"
    );
}

#[tokio::test]
async fn a_refused_first_request_decides_no_era() {
    let up = TestUpstream::modern().await;
    up.accept_only(&[]);
    let gw = Gateway::new(&up.mcp_url(), BEARER);
    let outcome = gw.call_echo().await;
    assert!(
        matches!(&outcome, Err(UpstreamError::Unauthorized { challenge: Some(c), .. }) if c.contains("scope=\"tools\"")),
        "a gateway-held static credential refused: the gateway's failure, with the challenge: {outcome:?}"
    );
    assert_eq!(gw.era(), None, "a 401 says nothing of the era");
    assert_eq!(up.seen().len(), 1, "a static credential is not renewed");
    // Once it is accepted, the first answer tells.
    up.accept_only(&["Bearer upstream-credential"]);
    result_of(gw.call_echo().await);
    assert_eq!(gw.era(), Some(Era::Rev2026));
    assert!(up.requests_of("initialize").is_empty());
}

#[tokio::test]
async fn the_legacy_identity_is_the_handshakes_result_and_none_for_a_2026_upstream() {
    let modern = TestUpstream::modern().await;
    let gw = Gateway::new(&modern.mcp_url(), "");
    let identity = gw
        .plane
        .legacy_identity(&gw.caller, &gw.server, SessionScope::default())
        .await
        .expect("an answer");
    assert_eq!(identity, None);
    assert_eq!(
        modern.rpc_methods(),
        ["server/discover"],
        "one discover tells the era"
    );

    let legacy = TestUpstream::legacy().await;
    let gw = Gateway::new(&legacy.mcp_url(), "");
    let identity = gw
        .plane
        .legacy_identity(&gw.caller, &gw.server, SessionScope::default())
        .await
        .expect("an answer")
        .expect("a legacy upstream's identity");
    assert_eq!(identity["serverInfo"]["name"], "test-upstream");
    assert_eq!(identity["protocolVersion"], "2025-11-25");
}

#[tokio::test]
async fn concurrent_first_calls_to_a_legacy_upstream_share_one_handshake() {
    let up = TestUpstream::legacy().await;
    let gw = Gateway::new(&up.mcp_url(), "");
    let calls = (0..4).map(|_| gw.call_echo());
    for outcome in futures_util::future::join_all(calls).await {
        result_of(outcome);
    }
    assert_eq!(up.sessions_opened(), 1, "{:?}", up.rpc_methods());
}

#[tokio::test]
async fn an_expired_session_is_opened_again_once_and_the_call_repeats() {
    let up = TestUpstream::legacy().await;
    let gw = Gateway::new(&up.mcp_url(), "");
    result_of(gw.call_echo().await);
    // The upstream restarted: session-1 is a 404 now.
    up.drop_sessions();
    let before = up.seen().len();
    assert_eq!(result_of(gw.call_echo().await)["content"][0]["text"], "ok");
    let after: Vec<_> = up.seen()[before..]
        .iter()
        .map(|s| {
            (
                s.rpc_method().unwrap_or("").to_string(),
                s.header("mcp-session-id"),
            )
        })
        .collect();
    assert_eq!(
        after,
        [
            ("tools/call".to_string(), Some("session-1".to_string())),
            ("initialize".to_string(), None),
            (
                "notifications/initialized".to_string(),
                Some("session-2".to_string())
            ),
            ("tools/call".to_string(), Some("session-2".to_string())),
        ]
    );
}

#[tokio::test]
async fn a_fresh_session_dropped_again_is_a_clear_failure_not_a_loop() {
    let up = Upstream {
        speaks: Speaks::Legacy,
        forgets_sessions: true,
        ..Upstream::default()
    }
    .serve()
    .await;
    let gw = Gateway::new(&up.mcp_url(), "");
    let outcome = gw.call_echo().await;
    // The error says what happened: the session the gateway had just opened was dropped too.
    assert!(
        matches!(&outcome, Err(UpstreamError::Unavailable { detail, .. })
            if detail == "the upstream dropped a fresh session"),
        "{outcome:?}"
    );
    assert_eq!(up.sessions_opened(), 2, "re-opened once, not more");
    assert_eq!(
        up.requests_of("tools/call").len(),
        3,
        "the 2026 try, then one per session"
    );
}

#[tokio::test]
async fn a_legacy_client_sessions_upstream_session_ends_with_a_delete() {
    let up = TestUpstream::legacy().await;
    let gw = Gateway::new(&up.mcp_url(), "");
    let request = UpstreamCall {
        session: LEGACY_CLIENT,
        ..UpstreamCall::whole("tools/call", Some(echo()))
    };
    result_of(gw.ask(&request).await);
    assert_eq!(up.held().len(), 1);
    gw.plane
        .close_client_sessions(&gw.caller, LEGACY_CLIENT.client)
        .await;
    let deletes: Vec<_> = up
        .seen()
        .into_iter()
        .filter(|s| s.method == http::Method::DELETE)
        .collect();
    assert_eq!(deletes.len(), 1);
    assert_eq!(
        deletes[0].header("mcp-session-id").as_deref(),
        Some("session-1")
    );
    assert!(up.held().is_empty(), "the upstream ended it");
}

#[tokio::test]
async fn a_same_origin_redirect_is_followed_with_the_credential_and_the_body() {
    let up = TestUpstream::modern().await;
    up.redirect("/mcp", StatusCode::TEMPORARY_REDIRECT, "/moved");
    let gw = Gateway::new(&up.mcp_url(), BEARER);
    result_of(gw.call_echo().await);
    let seen = up.seen();
    assert_eq!(
        seen.iter().map(|s| s.path.as_str()).collect::<Vec<_>>(),
        ["/mcp", "/moved"]
    );
    for s in &seen {
        assert_eq!(
            s.header("authorization").as_deref(),
            Some("Bearer upstream-credential")
        );
        assert_eq!(s.method, http::Method::POST, "307 keeps the method");
        assert_eq!(s.body["params"]["name"], "echo", "and the body");
    }
}

#[tokio::test]
async fn a_cross_origin_redirect_drops_every_credential_slot() {
    let first = TestUpstream::modern().await;
    let other = TestUpstream::modern().await;
    first.redirect("/mcp", StatusCode::PERMANENT_REDIRECT, &other.mcp_url());
    // Every header the server's config adds may be a secret: the credential, a static header,
    // a forwarded one.
    let more = format!(
        "{BEARER}    headers:\n      static:\n      - {{name: X-Team-Key, value: team-secret}}\n      forward: [X-Caller-Token]\n"
    );
    let mut gw = Gateway::new(&first.mcp_url(), &more);
    gw.caller
        .headers
        .insert("x-caller-token", HeaderValue::from_static("caller-secret"));
    result_of(gw.call_echo().await);
    let sent = &first.seen()[0];
    assert_eq!(
        sent.header("authorization").as_deref(),
        Some("Bearer upstream-credential")
    );
    assert_eq!(sent.header("x-team-key").as_deref(), Some("team-secret"));
    assert_eq!(
        sent.header("x-caller-token").as_deref(),
        Some("caller-secret")
    );
    let arrived = other.seen();
    assert_eq!(arrived.len(), 1);
    for slot in ["authorization", "x-team-key", "x-caller-token"] {
        assert_eq!(
            arrived[0].header(slot),
            None,
            "{slot} went to another origin"
        );
    }
    // What is the protocol's, not a secret, goes on.
    assert_eq!(
        arrived[0].header("mcp-protocol-version").as_deref(),
        Some("2026-07-28")
    );
    // Each request names its own origin's host: the server's own made once with its URL
    // (`Endpoint`), the redirect target's made for it.
    let host_of = |url: &str| {
        let url = url::Url::parse(url).expect("a URL");
        format!(
            "{}:{}",
            url.host_str().unwrap_or_default(),
            url.port().unwrap_or(80)
        )
    };
    assert_eq!(sent.header("host"), Some(host_of(&first.mcp_url())));
    assert_eq!(arrived[0].header("host"), Some(host_of(&other.mcp_url())));
}

#[tokio::test]
async fn redirects_are_followed_up_to_the_limit_and_no_further() {
    let up = TestUpstream::modern().await;
    // /mcp → /r1 → ... → /r5: five redirects, the most followed.
    up.redirect("/mcp", StatusCode::TEMPORARY_REDIRECT, "/r1");
    for n in 1..MAX_REDIRECTS {
        up.redirect(
            &format!("/r{n}"),
            StatusCode::TEMPORARY_REDIRECT,
            &format!("/r{}", n + 1),
        );
    }
    let gw = Gateway::new(&up.mcp_url(), "");
    result_of(gw.call_echo().await);
    assert_eq!(
        up.seen().last().map(|s| s.path.clone()).as_deref(),
        Some("/r5")
    );

    // One more is one too many.
    up.redirect("/r5", StatusCode::TEMPORARY_REDIRECT, "/r6");
    let before = up.seen().len();
    let outcome = gw.call_echo().await;
    assert!(
        matches!(&outcome, Err(UpstreamError::Unavailable { detail, .. }) if detail == "too many redirects"),
        "{outcome:?}"
    );
    assert_eq!(
        up.seen().len() - before,
        MAX_REDIRECTS + 1,
        "/r6 never asked"
    );
}

#[tokio::test]
async fn a_redirect_to_an_address_the_policy_denies_is_refused_before_it_is_asked() {
    let up = TestUpstream::modern().await;
    // The cloud metadata address, denied by the default gateway-wide policy.
    up.redirect(
        "/mcp",
        StatusCode::TEMPORARY_REDIRECT,
        "http://169.254.169.254/latest/meta-data",
    );
    let gw = Gateway::new(&up.mcp_url(), "");
    let outcome = gw.call_echo().await;
    assert!(
        matches!(&outcome, Err(UpstreamError::AddressDenied { server, .. }) if server == "up"),
        "{outcome:?}"
    );

    // A server's own policy narrows it: its hosts only, so `localhost` is refused though the
    // address is the same loopback.
    let scoped = TestUpstream::modern().await;
    let port = scoped
        .base
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_string();
    scoped.redirect(
        "/mcp",
        StatusCode::TEMPORARY_REDIRECT,
        &format!("http://localhost:{port}/moved"),
    );
    let gw = Gateway::new(
        &scoped.mcp_url(),
        "    upstreamPolicy: {hosts: [127.0.0.1]}\n",
    );
    let outcome = gw.call_echo().await;
    assert!(
        matches!(&outcome, Err(UpstreamError::AddressDenied { .. })),
        "{outcome:?}"
    );
    assert_eq!(
        scoped.seen().len(),
        1,
        "the redirect target was never asked"
    );
}

#[tokio::test]
async fn a_302_to_a_post_is_not_followed() {
    let up = TestUpstream::modern().await;
    up.redirect("/mcp", StatusCode::FOUND, "/moved");
    let gw = Gateway::new(&up.mcp_url(), "");
    let outcome = gw.call_echo().await;
    assert!(
        matches!(&outcome, Err(UpstreamError::Unavailable { detail, .. }) if detail == "HTTP 302"),
        "{outcome:?}"
    );
    assert_eq!(
        up.seen().len(),
        1,
        "a POST is not turned into a GET elsewhere"
    );
}

fn sse_upstream(speaks: Speaks) -> Upstream {
    Upstream {
        speaks,
        answer: Answer::Sse,
        ..Upstream::default()
    }
}

#[tokio::test]
async fn an_sse_answer_is_read_whole_when_the_caller_needs_the_whole_answer() {
    let up = sse_upstream(Speaks::Modern).serve().await;
    let gw = Gateway::new(&up.mcp_url(), "");
    // The progress notification before it is passed over.
    assert_eq!(result_of(gw.call_echo().await)["content"][0]["text"], "ok");
}

#[tokio::test]
async fn an_sse_answer_is_relayed_as_a_stream_event_by_event() {
    let up = sse_upstream(Speaks::Legacy).serve().await;
    let gw = Gateway::new(&up.mcp_url(), "");
    let request = UpstreamCall {
        stream: true,
        ..UpstreamCall::whole("tools/call", Some(echo()))
    };
    let Ok(RpcOutcome::Stream(mut stream)) = gw.ask(&request).await else {
        panic!("expected a stream");
    };
    // A legacy request's stream says which session it went on (replies go there).
    assert_eq!(
        stream.session_id.as_ref().and_then(|v| v.to_str().ok()),
        Some("session-1")
    );
    let mut methods = Vec::new();
    while let Some(event) = stream.next_event("up").await.expect("a whole stream") {
        let message: Value = serde_json::from_str(&event.data).expect("JSON events");
        if stream.is_answer_id(&message["id"].to_string()) {
            stream.answered();
            methods.push("answer".to_string());
        } else {
            methods.push(message["method"].as_str().unwrap_or_default().to_string());
        }
    }
    assert_eq!(
        methods,
        ["notifications/progress", "answer"],
        "in order, each on its own"
    );
}

#[tokio::test]
async fn a_list_change_announced_on_a_relayed_stream_is_noted_as_it_is_read() {
    let up = Upstream {
        announce_tools_changed: true,
        ..sse_upstream(Speaks::Modern)
    }
    .serve()
    .await;
    let gw = Gateway::new(&up.mcp_url(), "");
    let upstreams = Upstreams::new();
    upstreams.set_table(&gw.caller.table);
    let request = UpstreamCall {
        stream: true,
        ..UpstreamCall::whole("tools/call", Some(echo()))
    };
    let outcome = send(&upstreams, &gw.server, &request, Duration::from_secs(5)).await;
    let Ok(RpcOutcome::Stream(mut stream)) = outcome else {
        panic!("expected a stream, got {outcome:?}");
    };
    let tools = || upstreams.list_generation(&gw.server, ListChanged::Tools);
    stream.next_event("up").await.expect("the progress event");
    assert_eq!(tools(), 0, "not before the announcement is read");
    let event = stream.next_event("up").await.expect("the announcement");
    assert!(event.is_some_and(|e| e.data.contains("tools/list_changed")));
    // Noted before it is handed on: a client that lists again at once gets a fresh listing.
    assert_eq!(tools(), 1);
    assert_eq!(
        upstreams.list_generation(&gw.server, ListChanged::Prompts),
        0
    );
}

/// A 2xx SSE answer read whole goes through the stream reader (for resumption), like a relayed
/// one: a change it announces is noted too (it was lost once: an LLM-loop tool call whose
/// answer announced a change left the listing cached as fresh).
#[tokio::test]
async fn a_list_change_announced_in_an_answer_read_whole_is_noted() {
    let up = Upstream {
        announce_tools_changed: true,
        ..sse_upstream(Speaks::Modern)
    }
    .serve()
    .await;
    let gw = Gateway::new(&up.mcp_url(), "");
    let upstreams = Upstreams::new();
    upstreams.set_table(&gw.caller.table);
    assert_eq!(upstreams.list_generation(&gw.server, ListChanged::Tools), 0);
    let request = UpstreamCall::whole("tools/call", Some(echo()));
    let outcome = send(&upstreams, &gw.server, &request, Duration::from_secs(5)).await;
    result_of(outcome);
    // The catalog's rule: a listing walked before this count is out of date.
    assert_eq!(upstreams.list_generation(&gw.server, ListChanged::Tools), 1);
    assert_eq!(
        upstreams.list_generation(&gw.server, ListChanged::Prompts),
        0
    );
}
