//! The event-by-event relay: an upstream's SSE answer goes to the client as SSE, each event as
//! soon as it is complete, in order (progress and log notifications before the result), with
//! `retry:` and event ids kept. Only the memory of one event is held.
//!
//! Three things change on the way through:
//! - the answer to the request carries the client's id again (and, for a 2026-07-28 client of a
//!   legacy upstream, `resultType`; on the aggregate endpoint, prefixed task ids);
//! - a request the upstream sends the client (sampling, elicitation, roots: legacy revisions)
//!   gets a sealed id naming the upstream session that asked, so the client's reply reaches it
//!   from whichever replica receives the reply (see [`ReplyRoute`]);
//! - a timeout or a broken upstream ends the stream with a JSON-RPC error event for the request.
//!
//! The server's `timeout` bounds the wait for the answer of a request; a `subscriptions/listen`
//! stream stays open as long as the upstream keeps it open. A client that goes away drops the
//! relay, which drops the upstream response (closing its connection) and, on a legacy session,
//! sends `notifications/cancelled`.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::time::Instant;

use crate::errors::GatewayError;
use crate::mcp::dispatch::prefix_task_id;
use crate::mcp::protocol::Era;
use crate::session::{SessionSealer, TokenKind};
use crate::table::{RoutingTable, Server};
use crate::upstream::client::UpstreamStream;
use crate::upstream::sse::SseEvent;

/// An upstream stream on its way to a client.
pub struct Relay {
    pub stream: Box<UpstreamStream>,
    pub server: Arc<Server>,
    /// The aggregate endpoint: task ids in the answer get the server's prefix.
    pub prefix_task_ids: bool,
    /// When the answer is due; `None` for a subscription.
    pub deadline: Option<Instant>,
}

/// Who the relayed stream goes to.
pub struct Client {
    /// The id of the client's request.
    pub id: Value,
    pub era: Era,
    /// Binds reply routes to the key that made the request.
    pub key_tag: [u8; 8],
    pub table: Arc<RoutingTable>,
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
    };
    let events = futures_util::stream::unfold(state, |mut state| async move {
        let bytes = state.next_frame().await?;
        Some((Ok::<Bytes, Infallible>(bytes), state))
    });
    let mut response = (StatusCode::OK, Body::from_stream(events)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

struct RelayState {
    relay: Relay,
    client: Client,
    done: bool,
}

impl RelayState {
    /// The next bytes for the client, `None` once the stream is over.
    async fn next_frame(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let server = self.relay.server.id().to_string();
        let next = match self.relay.deadline {
            Some(deadline) => {
                match tokio::time::timeout_at(deadline, self.relay.stream.next_event(&server)).await
                {
                    Ok(next) => next,
                    Err(_) => Err(GatewayError::UpstreamTimeout {
                        server: server.clone(),
                        budget: self.relay.server.spec.timeout,
                    }),
                }
            }
            None => self.relay.stream.next_event(&server).await,
        };
        match next {
            Ok(Some(event)) => Some(self.relay_event(event)),
            Ok(None) if self.relay.deadline.is_none() => {
                // A subscription the upstream ended: so does the client's.
                self.done = true;
                None
            }
            Ok(None) => Some(self.fail(GatewayError::UpstreamUnavailable {
                server,
                detail: "the stream ended without an answer".into(),
            })),
            Err(e) => Some(self.fail(e)),
        }
    }

    fn relay_event(&mut self, event: SseEvent) -> Bytes {
        if event.data.is_empty() {
            return event.encode();
        }
        let Ok(probe) = serde_json::from_str::<Probe>(&event.data) else {
            return event.encode();
        };
        let is_ours =
            probe.id.map(RawValue::get) == Some(self.relay.stream.upstream_id.to_string().as_str());
        if probe.method.is_none() && (probe.result.is_some() || probe.error.is_some()) && is_ours {
            return self.answer(event);
        }
        if let (Some(id), Some(_)) = (probe.id, &probe.method)
            && self.client.era == Era::Legacy
        {
            let route = ReplyRoute {
                key_tag: self.client.key_tag,
                server: self.relay.server.id().to_string(),
                session: self
                    .relay
                    .stream
                    .session_id
                    .as_ref()
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                version: self
                    .relay
                    .stream
                    .session_version
                    .as_ref()
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned(),
                id: id.to_owned(),
            };
            let sealed = route.seal(&self.client.table.sealer);
            return self.rewrite(event, |message| {
                message.insert("id".into(), Value::from(sealed));
            });
        }
        event.encode()
    }

    /// The upstream's answer: the client's id again, and the stream ends with it.
    fn answer(&mut self, event: SseEvent) -> Bytes {
        self.done = true;
        self.relay.stream.answered();
        let modern = self.client.era == Era::Modern;
        let prefix = self
            .relay
            .prefix_task_ids
            .then(|| self.relay.server.prefix().to_string());
        let id = self.client.id.clone();
        self.rewrite(event, |message| {
            message.insert("id".into(), id);
            if let Some(result) = message.get_mut("result") {
                if modern && let Value::Object(r) = result {
                    r.entry("resultType")
                        .or_insert_with(|| Value::from("complete"));
                }
                if let Some(prefix) = &prefix {
                    prefix_task_id(result, prefix);
                }
            }
        })
    }

    fn rewrite(&self, mut event: SseEvent, change: impl FnOnce(&mut Map<String, Value>)) -> Bytes {
        if let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(&event.data) {
            change(&mut message);
            event.data = serde_json::to_string(&message).unwrap_or_default();
        }
        event.encode()
    }

    /// Ends the stream with a JSON-RPC error for the client's request.
    fn fail(&mut self, error: GatewayError) -> Bytes {
        self.done = true;
        tracing::info!(server = self.relay.server.id(), error = %error, "relayed stream failed");
        let message = serde_json::json!({
            "jsonrpc": "2.0",
            "id": self.client.id,
            "error": error.jsonrpc_error(),
        });
        SseEvent::message(message.to_string()).encode()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
        let session = sealer.seal(&[7; 32], 0, 0, std::time::SystemTime::now());
        assert!(ReplyRoute::open(&sealer, &session).is_none());
    }
}
