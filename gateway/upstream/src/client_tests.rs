//! Streams a legacy server closes before its answer (2025-11-25 stream polling), against an
//! in-process upstream (an axum app on a loopback port) that plays a script: the SSE body
//! of the `tools/call` POST, then the answer to each resuming GET, in turn.

use super::*;
use crate::test_upstream::{Speaks, TestUpstream, Upstream};

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
    let server = &table.servers[0];
    let request = UpstreamCall {
        stream,
        session,
        ..UpstreamCall::whole("tools/call", Some(json!({"name": "slow", "arguments": {}})))
    };
    upstreams
        .call(RpcCall {
            request: &request,
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
