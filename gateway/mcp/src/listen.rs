//! `subscriptions/listen` on the aggregate endpoint: one subscription per server in scope that
//! speaks 2026-07-28, fanned in to one client stream.
//!
//! The client's filter is split per server: list-changed flags go to every server, each
//! `resourceSubscriptions` URI (`<prefix>__<uri>` on `/mcp`, as `resources/read` takes it) only
//! to the server its prefix names, without the prefix. The client first gets one
//! acknowledgement: the union of what the servers acknowledged, URIs prefixed again. Every
//! notification after it carries the client's subscription id and, for a resource, the
//! prefixed URI the client reads it by on `/mcp`. Servers that speak a legacy revision have no
//! `subscriptions/listen` and are left out; a server whose stream ends or fails leaves the
//! others running.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use futures_util::{Stream, StreamExt};
use serde_json::{Map, Value, json};

use crate::context::McpContext;
use crate::event_stream::event_stream;
use switchboard_core::errors::GatewayError;
use switchboard_core::route::{prefixed_uri, split_prefixed_uri};
use switchboard_core::scope::Caller;
use switchboard_core::table::Server;
use switchboard_protocol::Era;
use switchboard_protocol::sse::SseEvent;
use switchboard_upstream::UpstreamCall;
use switchboard_upstream::{RpcOutcome, SessionScope, UpstreamStream};

pub const SUBSCRIPTION_ID_META: &str = "io.modelcontextprotocol/subscriptionId";
const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
/// How long a server has to acknowledge its subscription.
const ACK_WAIT: Duration = Duration::from_secs(10);
const FLAGS: &[&str] = &[
    "toolsListChanged",
    "promptsListChanged",
    "resourcesListChanged",
];

type Events = Pin<Box<dyn Stream<Item = (Arc<Server>, SseEvent)> + Send>>;

/// Opens one subscription per server (those in the caller's scope on the aggregate, a virtual
/// server's) and answers with the fanned-in stream.
pub async fn fan_in(
    cx: &McpContext,
    caller: &Caller,
    servers: Vec<Arc<Server>>,
    client_id: Value,
    params: Option<Value>,
    session: SessionScope,
) -> Result<Response, GatewayError> {
    let filter = params
        .as_ref()
        .and_then(|p| p.get("notifications"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    let opened = futures_util::future::join_all(servers.iter().map(|server| {
        let upstream_filter = filter_for(&filter, server.prefix());
        let mut upstream_params = params.clone().unwrap_or_else(|| json!({}));
        upstream_params["notifications"] = upstream_filter;
        async move {
            if cx.upstream.era_of(server) == Some(Era::Rev2025) {
                return None;
            }
            let upstream_call = UpstreamCall {
                method: "subscriptions/listen",
                params: Some(upstream_params.into()),
                stream: true,
                session,
                modern_client: true,
                log_level: None,
            };
            match cx.upstream.call(caller, server, &upstream_call).await {
                Ok(RpcOutcome::Stream(stream)) => Some((server.clone(), stream)),
                Ok(_) | Err(_) => None,
            }
        }
    }))
    .await;
    let mut streams: Vec<(Arc<Server>, Box<UpstreamStream>)> =
        opened.into_iter().flatten().collect();
    // Each server's first message should acknowledge what it will send; anything before the
    // acknowledgement is kept and relayed after the merged one.
    let mut acknowledged = Map::new();
    let mut uris = Vec::new();
    let mut early: Vec<(Arc<Server>, SseEvent)> = Vec::new();
    let acks = futures_util::future::join_all(streams.iter_mut().map(|(server, s)| {
        let id = server.id().to_string();
        let server = server.clone();
        async move {
            let mut before = Vec::new();
            let wait = async {
                while let Ok(Some(event)) = s.next_event(&id).await {
                    let message = serde_json::from_str::<Value>(&event.data).ok();
                    if message
                        .as_ref()
                        .and_then(|m| m.get("method"))
                        .and_then(Value::as_str)
                        == Some(ACKNOWLEDGED)
                    {
                        return message;
                    }
                    before.push((server.clone(), event));
                }
                None
            };
            let ack = tokio::time::timeout(ACK_WAIT, wait).await.ok().flatten();
            (ack, before)
        }
    }))
    .await;
    for ((server, _), (ack, before)) in streams.iter().zip(acks) {
        early.extend(before);
        let Some(ack) = ack else {
            continue;
        };
        let honored = &ack["params"]["notifications"];
        for flag in FLAGS {
            if honored.get(flag).and_then(Value::as_bool) == Some(true) {
                acknowledged.insert((*flag).into(), Value::Bool(true));
            }
        }
        if let Some(list) = honored
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
        {
            uris.extend(
                list.iter()
                    .filter_map(Value::as_str)
                    .map(|u| Value::from(prefixed_uri(server.prefix(), u))),
            );
        }
    }
    if !uris.is_empty() {
        acknowledged.insert("resourceSubscriptions".into(), Value::Array(uris));
    }
    let ack = json!({
        "jsonrpc": "2.0",
        "method": ACKNOWLEDGED,
        "params": {
            "_meta": { SUBSCRIPTION_ID_META: client_id },
            "notifications": acknowledged,
        },
    });
    let merged = futures_util::stream::select_all(streams.into_iter().map(|(server, stream)| {
        let events: Events = Box::pin(futures_util::stream::unfold(
            (server, stream),
            |(server, mut stream)| async move {
                // Parked here while idle: the server's id is borrowed, not copied per event.
                let event = stream.next_event(server.id()).await.ok().flatten()?;
                Some(((server.clone(), event), (server, stream)))
            },
        ));
        events
    }));
    let first = futures_util::stream::once(async move {
        Ok::<Bytes, Infallible>(SseEvent::message(ack.to_string()).encode())
    });
    let rest =
        futures_util::stream::iter(early)
            .chain(merged)
            .filter_map(move |(server, event)| {
                let client_id = client_id.clone();
                async move { retag(&server, event, &client_id).map(Ok::<Bytes, Infallible>) }
            });
    Ok(event_stream(Body::from_stream(first.chain(rest))))
}

/// The part of the client's filter one server gets: every list-changed flag, and its own
/// resource URIs without the prefix.
fn filter_for(filter: &Value, prefix: &str) -> Value {
    let mut out = Map::new();
    for flag in FLAGS {
        if let Some(v) = filter.get(flag) {
            out.insert((*flag).into(), v.clone());
        }
    }
    let own: Vec<Value> = filter
        .get("resourceSubscriptions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(split_prefixed_uri)
        .filter(|(p, _)| *p == prefix)
        .map(|(_, uri)| Value::from(uri.into_owned()))
        .collect();
    if !own.is_empty() {
        out.insert("resourceSubscriptions".into(), Value::Array(own));
    }
    Value::Object(out)
}

/// A server's notification as the aggregate's client sees it: its subscription id, and a
/// resource URI with the server's prefix. Acknowledgements were merged already; a final
/// result ends only that server's part.
fn retag(server: &Server, event: SseEvent, client_id: &Value) -> Option<Bytes> {
    let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(&event.data) else {
        return None;
    };
    let method = message.get("method").and_then(Value::as_str)?.to_string();
    if method == ACKNOWLEDGED {
        return None;
    }
    if method == "notifications/resources/updated"
        && let Some(Value::String(uri)) = message.get_mut("params").and_then(|p| p.get_mut("uri"))
    {
        *uri = prefixed_uri(server.prefix(), uri);
    }
    tag_subscription(&mut message, client_id);
    Some(SseEvent::message(Value::Object(message).to_string()).encode())
}

/// Names the client's subscription in a listen-stream notification
/// (`params._meta["io.modelcontextprotocol/subscriptionId"]`, the client's listen request id).
pub fn tag_subscription(message: &mut Map<String, Value>, subscription: &Value) {
    let params = message
        .entry("params")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(p) = params {
        let meta = p
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(SUBSCRIPTION_ID_META.into(), subscription.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_server_gets_its_own_uris_and_every_flag() {
        let filter = json!({
            "toolsListChanged": true,
            "resourceSubscriptions": ["docs__file:///a", "wiki__page://b", "unprefixed"],
        });
        assert_eq!(
            filter_for(&filter, "docs"),
            json!({"toolsListChanged": true, "resourceSubscriptions": ["file:///a"]})
        );
        assert_eq!(
            filter_for(&filter, "other"),
            json!({"toolsListChanged": true})
        );
    }
}
