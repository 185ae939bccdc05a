//! The event-by-event relay: an upstream's SSE answer goes to the client as SSE, each event as
//! soon as it is complete, in order (progress and log notifications before the result). Only
//! the memory of one event is held. The upstream's event ids and `retry:` stay with the gateway
//! (they say where the gateway resumes the upstream stream a legacy server closed, see
//! [`UpstreamStream::next_event`]); the client gets no ids, since the gateway offers no
//! resumption of its own streams (docs/architecture.md, "Streams").
//!
//! What changes on the way through:
//! - the answer to the request carries the client's id again (and, for a 2026-07-28 client of a
//!   legacy upstream, `resultType`; on the aggregate endpoint, prefixed task ids);
//! - a request a legacy upstream sends a legacy client (sampling, elicitation, roots) gets a
//!   sealed id naming the upstream session that asked, so the client's reply reaches it from
//!   whichever replica receives the reply (see [`ReplyRoute`]);
//! - the eras' two ways of asking the client for input are bridged (see
//!   [`crate::exchange`]): a 2026-07-28 upstream's input-required result becomes requests
//!   on a legacy client's stream, then a retry with the answers; a legacy upstream's request to
//!   a 2026-07-28 client becomes an input-required answer, and the stream pauses until the retry;
//! - a timeout or a broken upstream ends the stream with a JSON-RPC error event for the request.
//!
//! The server's `timeout` bounds the wait for the answer of a request, resumes of the upstream
//! stream included; a `subscriptions/listen` stream stays open as long as the upstream keeps it
//! open. A client that goes away drops the relay, which drops the upstream response (closing its
//! connection) and, on a legacy session, sends `notifications/cancelled`.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::HeaderValue;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::context::McpContext;
use crate::event_stream::event_stream;
use crate::exchange::{ExchangeRoute, InputReply, PausedRelay, Pending};
use crate::listen::tag_subscription;
use switchboard_core::audit;
use switchboard_core::errors::GatewayError;
use switchboard_core::route::prefix_task_id;
use switchboard_core::scope::Caller;
use switchboard_core::session::{SessionSealer, TokenKind};
use switchboard_core::table::{RoutingTable, Server};
use switchboard_protocol::sse::SseEvent;
use switchboard_protocol::{Era, Params, stamp_modern_result, strip_modern_result};
use switchboard_upstream::UpstreamCall;
use switchboard_upstream::error::UpstreamError;
use switchboard_upstream::{RpcOutcome, SessionScope, UpstreamStream};

/// An upstream answer on its way to a client as a stream.
pub struct Relay {
    /// The upstream's SSE answer, while there is one to read.
    pub stream: Option<Box<UpstreamStream>>,
    /// An answer that came whole (the `result`) and still needs bridging: an input-required
    /// result for a legacy client.
    pub answered: Option<Value>,
    pub server: Arc<Server>,
    /// The aggregate endpoint: task ids in the answer get the server's prefix.
    pub prefix_task_ids: bool,
    /// When the answer is due; `None` for a subscription.
    pub deadline: Option<Instant>,
    /// The request as it went upstream: its method, and (only where a legacy client's input
    /// rounds may need to ask again) its parameters.
    pub upstream_request: Option<UpstreamRequest>,
}

/// A method call as it went upstream.
#[derive(Clone)]
pub struct UpstreamRequest {
    pub method: String,
    pub params: Option<Params>,
    pub session: SessionScope,
    pub log_level: Option<&'static str>,
}

/// Who the relayed stream goes to.
pub struct Client {
    /// The id of the client's request.
    pub id: Value,
    pub era: Era,
    /// Binds reply routes to the key that made the request.
    pub key_tag: [u8; 8],
    pub table: Arc<RoutingTable>,
    /// What bridging the eras needs: the gateway (to ask the upstream again and hold
    /// exchanges) and the caller (whose credential asks).
    pub bridge: Option<Bridge>,
}

#[derive(Clone)]
pub struct Bridge {
    pub cx: Arc<McpContext>,
    pub caller: Arc<Caller>,
}

/// Where a client's reply to a relayed server-to-client request goes: sealed into the request
/// id the client sees, so any replica can deliver the reply without remembering anything.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReplyRoute {
    /// The key the request was relayed to (first 8 bytes of its digest).
    #[serde(rename = "k")]
    pub key_tag: [u8; 8],
    #[serde(rename = "s")]
    pub server: String,
    /// The upstream session that asked, and its protocol version.
    #[serde(rename = "u")]
    pub session: Option<String>,
    #[serde(rename = "v")]
    pub version: String,
    /// The upstream's own id for its request.
    #[serde(rename = "i")]
    pub id: Box<RawValue>,
}

impl ReplyRoute {
    pub fn seal(&self, sealer: &SessionSealer) -> String {
        let payload = serde_json::to_vec(self).unwrap_or_default();
        sealer.seal_token(TokenKind::ReplyRoute, &payload)
    }

    pub fn open(sealer: &SessionSealer, token: &str) -> Option<ReplyRoute> {
        let (_, payload) = sealer.open_token(TokenKind::ReplyRoute, token)?;
        serde_json::from_slice(&payload).ok()
    }
}

/// What the relay needs to know of an event's JSON-RPC message, read without building it.
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<Cow<'a, str>>,
    result: Option<serde::de::IgnoredAny>,
    error: Option<serde::de::IgnoredAny>,
}

/// The client's SSE response for a relayed stream.
pub fn sse_response(relay: Relay, client: Client) -> Response {
    let state = RelayState {
        relay,
        client,
        done: false,
        awaiting: None,
        rounds: 0,
        // (The stream is polled by the connection, outside the request's scope.)
        slot: audit::current(),
    };
    let events = futures_util::stream::unfold(state, |mut state| async move {
        let bytes = state.next_frame().await?;
        Some((Ok::<Bytes, Infallible>(bytes), state))
    });
    event_stream(Body::from_stream(events))
}

/// How long a client has to answer input requests (a person may be answering an elicitation):
/// the server's timeout, but never less than this.
const MIN_INPUT_WAIT: Duration = Duration::from_secs(300);

/// A legacy client's stream waiting for its replies to input requests.
struct Awaiting {
    pending: u64,
    replies_rx: mpsc::Receiver<InputReply>,
    keys: Vec<String>,
    request_state: Option<Value>,
    replies: Map<String, Value>,
    until: Instant,
}

struct RelayState {
    relay: Relay,
    client: Client,
    done: bool,
    awaiting: Option<Awaiting>,
    /// Input rounds so far (an upstream that keeps asking is cut off).
    rounds: u32,
    /// The client request's audit slot: how the stream's call ended goes into its record and
    /// span.
    slot: Option<Arc<audit::Slot>>,
}

/// Most input rounds one call may take.
const MAX_INPUT_ROUNDS: u32 = 8;

impl Drop for RelayState {
    /// A client that goes away while its replies are awaited leaves nothing held.
    fn drop(&mut self) {
        if let (Some(awaiting), Some(bridge)) = (&self.awaiting, &self.client.bridge) {
            bridge.cx.exchanges.release(awaiting.pending);
        }
    }
}

impl RelayState {
    /// The next bytes for the client, `None` once the stream is over.
    ///
    /// An idle stream is parked in this future, so it is kept small: the rare input-round
    /// branch, whose state holds a whole upstream request, is boxed (inline, it made every open
    /// stream's relay 4,448 bytes instead of 576), and the server id is not copied.
    async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            if self.done {
                return None;
            }
            if let Some(result) = self.relay.answered.take() {
                let message = json!({"jsonrpc": "2.0", "id": Value::Null, "result": result});
                if let Value::Object(message) = message {
                    return Some(self.answer(message, SseEvent::default()));
                }
            }
            if self.awaiting.is_some() {
                match Box::pin(self.ask_again()).await {
                    Ok(()) => continue,
                    Err(frame) => return Some(frame),
                }
            }
            let server = self.relay.server.clone();
            let Some(stream) = self.relay.stream.as_mut() else {
                return Some(self.fail(GatewayError::UpstreamUnavailable {
                    server: server.id().to_string(),
                    detail: "no answer to relay".into(),
                }));
            };
            let next = match self.relay.deadline {
                Some(deadline) => {
                    match tokio::time::timeout_at(deadline, stream.next_event(server.id())).await {
                        Ok(next) => next,
                        Err(_) => Err(UpstreamError::Timeout {
                            server: server.id().to_string(),
                            budget: server.spec.timeout,
                        }),
                    }
                }
                None => stream.next_event(server.id()).await,
            };
            if let Ok(Some(event)) = &next
                && event.data.is_empty()
            {
                // An event with no data (a priming event, once its id is off) says nothing.
                continue;
            }
            return match next {
                Ok(Some(event)) => Some(self.relay_event(event)),
                Ok(None) if self.relay.deadline.is_none() => {
                    // A subscription the upstream ended: so does the client's.
                    self.done = true;
                    None
                }
                Ok(None) => Some(self.fail(GatewayError::UpstreamUnavailable {
                    server: server.id().to_string(),
                    detail: "the stream ended without an answer".into(),
                })),
                Err(e) => Some(self.fail(e.into())),
            };
        }
    }

    fn relay_event(&mut self, event: SseEvent) -> Bytes {
        let Ok(probe) = serde_json::from_str::<Probe>(&event.data) else {
            return event.encode();
        };
        let is_ours = match (probe.id, self.relay.stream.as_ref()) {
            (Some(id), Some(stream)) => stream.is_answer_id(id.get()),
            _ => false,
        };
        if probe.method.is_none() && (probe.result.is_some() || probe.error.is_some()) && is_ours {
            return match serde_json::from_str::<Value>(&event.data) {
                Ok(Value::Object(message)) => self.answer(message, event),
                _ => event.encode(),
            };
        }
        let listening = self
            .relay
            .upstream_request
            .as_ref()
            .is_some_and(|r| r.method == "subscriptions/listen");
        if listening && probe.id.is_none() && probe.method.is_some() {
            // The upstream tags its notifications with the id it was sent; the client knows
            // its subscription by its own.
            let client_id = &self.client.id;
            return rewrite(event, |message| tag_subscription(message, client_id));
        }
        if let (Some(id), Some(_)) = (probe.id, &probe.method) {
            let id = id.to_owned();
            return match self.client.era {
                Era::Rev2025 => self.relay_request(event, id),
                Era::Rev2026 => self.pause_for_input(event, &id),
            };
        }
        event.encode()
    }

    /// A legacy upstream's request to a legacy client: relayed with a sealed reply route.
    fn relay_request(&mut self, event: SseEvent, id: Box<RawValue>) -> Bytes {
        let stream = self.relay.stream.as_ref();
        let header = |v: Option<&HeaderValue>| v.and_then(|v| v.to_str().ok()).map(str::to_owned);
        let route = ReplyRoute {
            key_tag: self.client.key_tag,
            server: self.relay.server.id().to_string(),
            session: header(stream.and_then(|s| s.session_id.as_ref())),
            version: header(stream.and_then(|s| s.session_version.as_ref())).unwrap_or_default(),
            id,
        };
        let sealed = route.seal(&self.client.table.sealer);
        rewrite(event, |message| {
            message.insert("id".into(), Value::from(sealed));
        })
    }

    /// A legacy upstream's request to a 2026-07-28 client, which takes no requests: the client
    /// gets an input-required answer whose `requestState` names this paused stream; its retry
    /// (on any replica) brings the answer back here.
    fn pause_for_input(&mut self, event: SseEvent, id: &RawValue) -> Bytes {
        let Some(bridge) = self.client.bridge.clone() else {
            return event.encode();
        };
        let Ok(Value::Object(request)) = serde_json::from_str::<Value>(&event.data) else {
            return event.encode();
        };
        let upstream_id: Value = serde_json::from_str(id.get()).unwrap_or(Value::Null);
        let mut input = Map::new();
        input.insert(
            "method".into(),
            request.get("method").cloned().unwrap_or(Value::Null),
        );
        if let Some(params) = request.get("params") {
            input.insert("params".into(), params.clone());
        }
        let paused = Relay {
            stream: self.relay.stream.take(),
            answered: None,
            server: self.relay.server.clone(),
            prefix_task_ids: self.relay.prefix_task_ids,
            deadline: None,
            upstream_request: self.relay.upstream_request.clone(),
        };
        // Nobody may come back: the paused upstream request is given up after the wait.
        let held = bridge.cx.exchanges.hold(
            self.client.key_tag,
            Pending::Paused(Box::new(PausedRelay::new(
                paused,
                vec![(INPUT_KEY.to_string(), upstream_id)],
            ))),
            input_wait(&self.relay.server),
        );
        let Some(route) = held else {
            return self.fail(GatewayError::Overloaded(
                "too many open input exchanges".into(),
            ));
        };
        let result = json!({
            "resultType": "input_required",
            "inputRequests": { INPUT_KEY: Value::Object(input) },
            "requestState": route.seal(&self.client.table.sealer),
        });
        self.done = true;
        let message = json!({"jsonrpc": "2.0", "id": self.client.id, "result": result});
        SseEvent::message(message.to_string()).encode()
    }

    /// The upstream's answer: the client's id again, and the stream ends with it, unless it is
    /// an input-required result for a legacy client, which the gateway asks the client for.
    fn answer(&mut self, mut message: Map<String, Value>, event: SseEvent) -> Bytes {
        if let Some(stream) = self.relay.stream.as_mut() {
            stream.answered();
        }
        let can_bridge = self.client.bridge.is_some()
            && self
                .relay
                .upstream_request
                .as_ref()
                .is_some_and(|r| r.params.is_some());
        if self.client.era == Era::Rev2025
            && can_bridge
            && let Some(result) = message.get_mut("result")
            && result.get("resultType").and_then(Value::as_str) == Some("input_required")
            && let Some(frames) = self.ask_client(result.take())
        {
            self.relay.stream = None;
            return frames;
        }
        self.done = true;
        self.note_answer(&message, true);
        let modern = self.client.era == Era::Rev2026;
        let prefix = self
            .relay
            .prefix_task_ids
            .then(|| self.relay.server.prefix().to_string());
        message.insert("id".into(), self.client.id.clone());
        let method = self
            .relay
            .upstream_request
            .as_ref()
            .map_or("", |r| r.method.as_str());
        if let Some(result) = message.get_mut("result") {
            if modern {
                stamp_modern_result(result, method);
            } else {
                strip_modern_result(result);
            }
            if let Some(prefix) = &prefix {
                prefix_task_id(result, prefix);
            }
        }
        let mut event = event;
        event.data = serde_json::to_string(&message).unwrap_or_default();
        event.encode()
    }

    /// Sends a legacy client the input requests of an input-required result, as requests on
    /// its stream whose ids route the replies back here; `None` if this relay cannot bridge.
    fn ask_client(&mut self, result: Value) -> Option<Bytes> {
        let bridge = self.client.bridge.clone()?;
        self.relay.upstream_request.as_ref()?;
        let requests = match result.get("inputRequests") {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        self.rounds += 1;
        if self.rounds > MAX_INPUT_ROUNDS {
            return Some(self.fail(GatewayError::UpstreamUnavailable {
                server: self.relay.server.id().to_string(),
                detail: format!("asked for input more than {MAX_INPUT_ROUNDS} times in one call"),
            }));
        }
        if requests.is_empty() && result.get("requestState").is_none() {
            return Some(self.fail(GatewayError::UpstreamUnavailable {
                server: self.relay.server.id().to_string(),
                detail:
                    "an input_required result with neither inputRequests nor requestState".into(),
            }));
        }
        let (tx, rx) = mpsc::channel(requests.len().max(1));
        let Some(route) = bridge.cx.exchanges.hold(
            self.client.key_tag,
            Pending::Replies(tx),
            input_wait(&self.relay.server),
        ) else {
            return Some(self.fail(GatewayError::Overloaded(
                "too many open input exchanges".into(),
            )));
        };
        let mut frames = Vec::new();
        for (key, request) in &requests {
            let id = ExchangeRoute {
                input: Some(key.clone()),
                ..route.clone()
            }
            .seal(&self.client.table.sealer);
            let mut message = Map::new();
            message.insert("jsonrpc".into(), Value::from("2.0"));
            message.insert("id".into(), Value::from(id));
            message.insert(
                "method".into(),
                request.get("method").cloned().unwrap_or(Value::Null),
            );
            if let Some(params) = request.get("params") {
                message.insert("params".into(), params.clone());
            }
            frames
                .extend_from_slice(&SseEvent::message(Value::Object(message).to_string()).encode());
        }
        self.awaiting = Some(Awaiting {
            pending: route.pending,
            replies_rx: rx,
            keys: requests.keys().cloned().collect(),
            request_state: result.get("requestState").cloned(),
            replies: Map::new(),
            until: Instant::now() + input_wait(&self.relay.server),
        });
        // Nothing to send yet when the upstream only wants its state back: ask again at once.
        Some(Bytes::from(frames))
    }

    /// Waits for the legacy client's replies, then asks the upstream again with them. `Err`
    /// carries the frame that ends the stream.
    async fn ask_again(&mut self) -> Result<(), Bytes> {
        let Some(bridge) = self.client.bridge.clone() else {
            return Err(self.fail(GatewayError::InvalidRequest("cannot bridge".into())));
        };
        // Left in place while waiting: if the client goes away now, dropping the relay state
        // releases the exchange.
        let Some(awaiting) = self.awaiting.as_mut() else {
            return Ok(());
        };
        let until = awaiting.until;
        let collected = async {
            while awaiting.replies.len() < awaiting.keys.len() {
                let Some((key, mut reply)) = awaiting.replies_rx.recv().await else {
                    break;
                };
                if let Some(error) = reply.remove("error") {
                    return Err(error);
                }
                if let Some(result) = reply.remove("result") {
                    awaiting.replies.insert(key, result);
                }
            }
            Ok(())
        };
        let outcome = tokio::time::timeout_at(until, collected).await;
        let Some(mut awaiting) = self.awaiting.take() else {
            return Ok(());
        };
        bridge.cx.exchanges.release(awaiting.pending);
        match outcome {
            Err(_) => {
                return Err(self.fail(GatewayError::InvalidRequest(
                    "the client did not answer the upstream's input requests in time".into(),
                )));
            }
            Ok(Err(client_error)) => return Err(self.error_answer(client_error)),
            Ok(Ok(())) => {}
        }
        let Some(request) = self.relay.upstream_request.clone() else {
            return Err(self.fail(GatewayError::InvalidRequest("cannot bridge".into())));
        };
        let mut params = match request.params.map(|mut p| p.take()) {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        params.insert(
            "inputResponses".into(),
            Value::Object(std::mem::take(&mut awaiting.replies)),
        );
        if let Some(state) = awaiting.request_state {
            params.insert("requestState".into(), state);
        }
        let upstream_call = UpstreamCall {
            method: &request.method,
            params: Some(Params::from(Value::Object(params))),
            stream: true,
            session: request.session,
            modern_client: false,
            log_level: request.log_level,
        };
        let server = self.relay.server.clone();
        match bridge
            .cx
            .upstream
            .call(&bridge.caller, &server, &upstream_call)
            .await
        {
            Ok(RpcOutcome::Stream(stream)) => {
                self.relay.deadline = Some(Instant::now() + server.spec.timeout);
                self.relay.stream = Some(stream);
                Ok(())
            }
            Ok(RpcOutcome::Result(result)) => {
                self.relay.answered = Some(result.into_value());
                Ok(())
            }
            Ok(RpcOutcome::Error(error, _)) => Err(self.error_answer(error)),
            Err(e) => Err(self.fail(e.into())),
        }
    }

    /// Ends the stream with a JSON-RPC error object for the client's request.
    fn error_answer(&mut self, error: Value) -> Bytes {
        self.done = true;
        let message = json!({"jsonrpc": "2.0", "id": self.client.id, "error": error});
        if let Value::Object(message) = &message {
            // (Not the upstream call's answer: its span was told by whoever failed it.)
            self.note_answer(message, false);
        }
        SseEvent::message(message.to_string()).encode()
    }

    /// Ends the stream with the gateway's error for the client's request.
    fn fail(&mut self, error: GatewayError) -> Bytes {
        tracing::info!(server = self.relay.server.id(), error = %error, "relayed stream failed");
        if let Some(stream) = &self.relay.stream {
            stream.trace_failure(error.outcome(), error.to_string());
        }
        self.error_answer(error.jsonrpc_error())
    }

    /// The answer that ends the stream (the response message the client gets): an error's
    /// code, or a tool's `isError`, goes into the request's record and span, and into the
    /// upstream call's span when it is the `upstream`'s own answer.
    fn note_answer(&self, message: &Map<String, Value>, upstream: bool) {
        let method = self
            .relay
            .upstream_request
            .as_ref()
            .map_or("", |r| r.method.as_str());
        if upstream && let Some(stream) = &self.relay.stream {
            stream.trace_answer(method, message);
        }
        let Some(slot) = &self.slot else { return };
        let code = message
            .get("error")
            .and_then(|e| e.get("code"))
            .and_then(Value::as_i64);
        let tool_error = method == "tools/call"
            && message.get("result").and_then(|r| r.get("isError")) == Some(&Value::Bool(true));
        slot.note(|n| {
            if code.is_some() {
                n.rpc_error_code = code;
            }
            n.tool_error |= tool_error;
        });
    }
}

/// The key the one input request of a paused legacy stream gets.
const INPUT_KEY: &str = "0";

fn input_wait(server: &Server) -> Duration {
    server.spec.timeout.max(MIN_INPUT_WAIT)
}

fn rewrite(mut event: SseEvent, change: impl FnOnce(&mut Map<String, Value>)) -> Bytes {
    if let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(&event.data) {
        change(&mut message);
        event.data = serde_json::to_string(&message).unwrap_or_default();
    }
    event.encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_routes_open_only_with_the_same_key_and_kind() {
        let sealer = SessionSealer::new(Some("k"), Duration::from_secs(60));
        let route = ReplyRoute {
            key_tag: [7; 8],
            server: "ns/weather".into(),
            session: Some("0123456789abcdef0123456789abcdef".into()),
            version: "2025-11-25".into(),
            id: RawValue::from_string("0".into()).unwrap(),
        };
        let token = route.seal(&sealer);
        assert!(token.len() < 256, "{} bytes", token.len());
        let opened = ReplyRoute::open(&sealer, &token).unwrap();
        assert_eq!(opened.server, route.server);
        assert_eq!(opened.session, route.session);
        assert_eq!(opened.id.get(), "0");
        assert_eq!(opened.key_tag, [7; 8]);
        let other = SessionSealer::new(Some("other"), Duration::from_secs(60));
        assert!(ReplyRoute::open(&other, &token).is_none());
        let (session, _) = sealer.seal(&[7; 32], 0, 0, std::time::SystemTime::now());
        assert!(ReplyRoute::open(&sealer, &session).is_none());
    }
}
