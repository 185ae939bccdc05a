//! `subscriptions/listen` (2026-07-28): the answer is an SSE stream that first acknowledges
//! the requested notifications, then stays open, idle, until the client goes away. Events
//! come only from `POST /_notify` (see the crate docs), so a test decides when one is sent.
//!
//! Every requested kind is honored (as the reference SDK does: whether an event ever fires
//! depends on what is published). Every message on the stream carries the listen request's id
//! as `_meta["io.modelcontextprotocol/subscriptionId"]`. An idle stream holds one broadcast
//! receiver and no timer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::{Body, Bytes};
use futures_util::{StreamExt as _, stream};
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

pub const SUBSCRIPTION_ID_META: &str = "io.modelcontextprotocol/subscriptionId";
pub const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
const FLAGS: [(&str, &str); 3] = [
    ("toolsListChanged", "tools"),
    ("promptsListChanged", "prompts"),
    ("resourcesListChanged", "resources"),
];
/// Events a slow reader may fall behind by before it misses some.
const BACKLOG: usize = 64;

/// Something `POST /_notify` publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `notifications/{tools|prompts|resources}/list_changed`.
    List(&'static str),
    /// `notifications/resources/updated` for a URI.
    Resource(String),
}

#[derive(Debug, Clone)]
struct Event {
    change: Change,
    /// Only streams opened on this endpoint path, if given.
    path: Option<String>,
}

/// The open listen streams of this process.
pub struct Listeners {
    tx: broadcast::Sender<Arc<Event>>,
    open: Arc<AtomicUsize>,
}

impl Default for Listeners {
    fn default() -> Self {
        Self {
            tx: broadcast::channel(BACKLOG).0,
            open: Arc::default(),
        }
    }
}

/// What one stream asked for and was acknowledged.
#[derive(Debug, Default, PartialEq, Eq)]
struct Filter {
    lists: Vec<&'static str>,
    uris: Vec<String>,
}

impl Filter {
    fn from_params(params: &Value) -> Filter {
        let asked = &params["notifications"];
        let lists = FLAGS
            .iter()
            .filter(|(flag, _)| asked.get(flag).and_then(Value::as_bool) == Some(true))
            .map(|(_, list)| *list)
            .collect();
        let uris = asked
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        Filter { lists, uris }
    }

    /// The acknowledged subset, as the acknowledgement carries it (false flags and an empty
    /// URI list left out).
    fn honored(&self) -> Value {
        let mut out = Map::new();
        for (flag, list) in FLAGS {
            if self.lists.contains(&list) {
                out.insert(flag.into(), Value::Bool(true));
            }
        }
        if !self.uris.is_empty() {
            out.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        Value::Object(out)
    }

    fn wants(&self, change: &Change) -> bool {
        match change {
            Change::List(list) => self.lists.contains(list),
            Change::Resource(uri) => self.uris.iter().any(|u| u == uri),
        }
    }
}

/// Counts a stream as open for as long as it lives.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Listeners {
    /// Listen streams open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Sends `change` to the open streams that asked for it (all of them, or those opened on
    /// `path`); returns how many streams are open.
    pub fn publish(&self, change: Change, path: Option<String>) -> usize {
        let _ = self.tx.send(Arc::new(Event { change, path }));
        self.open()
    }

    /// The SSE body answering a `subscriptions/listen` request `id` on `path`.
    pub fn stream(&self, path: &str, id: &Value, params: &Value) -> Body {
        let filter = Filter::from_params(params);
        let meta = json!({ SUBSCRIPTION_ID_META: id });
        let ack = json!({ "jsonrpc": "2.0", "method": ACKNOWLEDGED,
                          "params": { "_meta": meta, "notifications": filter.honored() } });
        self.open.fetch_add(1, Ordering::Relaxed);
        let state = Stream {
            rx: self.tx.subscribe(),
            _open: Open(self.open.clone()),
            filter,
            path: path.to_owned(),
            meta,
        };
        let events = stream::unfold(state, |mut s| async move {
            let bytes = s.next().await?;
            Some((Ok::<_, std::io::Error>(bytes), s))
        });
        Body::from_stream(stream::once(async move { Ok(event(&ack)) }).chain(events))
    }
}

struct Stream {
    rx: broadcast::Receiver<Arc<Event>>,
    _open: Open,
    filter: Filter,
    path: String,
    meta: Value,
}

impl Stream {
    /// The next notification this stream asked for; `None` when the process stops.
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            let e = match self.rx.recv().await {
                Ok(e) => e,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            if e.path.as_ref().is_some_and(|p| *p != self.path) || !self.filter.wants(&e.change) {
                continue;
            }
            let message = match &e.change {
                Change::List(list) => json!({ "jsonrpc": "2.0",
                    "method": format!("notifications/{list}/list_changed"),
                    "params": { "_meta": self.meta } }),
                Change::Resource(uri) => json!({ "jsonrpc": "2.0",
                    "method": "notifications/resources/updated",
                    "params": { "uri": uri, "_meta": self.meta } }),
            };
            return Some(event(&message));
        }
    }
}

fn event(message: &Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

/// Parses a `POST /_notify` body: `{"uri": U}` (resources/updated) or `{"list": "tools" |
/// "prompts" | "resources"}` (list_changed), each with an optional `"path"`.
pub fn parse_notify(body: &[u8]) -> Result<(Change, Option<String>), String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let path = match v.get("path") {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) => Some(p.clone()),
        Some(_) => return Err("`path` must be a string".into()),
    };
    let change = match (v.get("uri"), v.get("list").and_then(Value::as_str)) {
        (Some(Value::String(uri)), None) => Change::Resource(uri.clone()),
        (None, Some(list)) => Change::List(
            FLAGS
                .iter()
                .map(|(_, l)| *l)
                .find(|l| *l == list)
                .ok_or_else(|| format!("unknown list `{list}`"))?,
        ),
        _ => return Err("give exactly one of `uri` (a string) and `list`".into()),
    };
    Ok((change, path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt as _;

    fn params(notifications: Value) -> Value {
        json!({ "notifications": notifications })
    }

    #[test]
    fn acknowledges_what_was_asked_and_nothing_false() {
        let f = Filter::from_params(&params(json!({
            "toolsListChanged": true, "promptsListChanged": false,
            "resourceSubscriptions": ["example://readme"] })));
        assert_eq!(
            f.honored(),
            json!({"toolsListChanged": true, "resourceSubscriptions": ["example://readme"]})
        );
        assert_eq!(Filter::from_params(&json!({})).honored(), json!({}));
        assert!(f.wants(&Change::List("tools")) && !f.wants(&Change::List("prompts")));
        assert!(!f.wants(&Change::Resource("example://items/1".into())));
    }

    #[test]
    fn notify_bodies() {
        assert_eq!(
            parse_notify(br#"{"uri": "example://readme"}"#),
            Ok((Change::Resource("example://readme".into()), None))
        );
        assert_eq!(
            parse_notify(br#"{"list": "tools", "path": "/mcp"}"#),
            Ok((Change::List("tools"), Some("/mcp".into())))
        );
        assert!(parse_notify(br#"{"list": "nope"}"#).is_err());
        assert!(parse_notify(br#"{"uri": "a", "list": "tools"}"#).is_err());
        assert!(parse_notify(b"{}").is_err());
    }

    #[tokio::test]
    async fn a_stream_acknowledges_then_carries_only_its_events() {
        let l = Listeners::default();
        let mut body = l
            .stream(
                "/mcp",
                &json!(7),
                &params(json!({"resourceSubscriptions": ["u"]})),
            )
            .into_data_stream();
        let frame = |b: Option<Result<Bytes, axum::Error>>| {
            String::from_utf8(b.unwrap().unwrap().to_vec()).unwrap()
        };
        let ack = frame(body.next().await);
        assert!(
            ack.contains(ACKNOWLEDGED) && ack.contains(r#"/subscriptionId":7"#),
            "{ack}"
        );
        assert!(body.next().now_or_never().is_none(), "idle after the ack");
        assert_eq!(l.open(), 1);
        l.publish(Change::List("tools"), None);
        l.publish(Change::Resource("u".into()), Some("/other".into()));
        l.publish(Change::Resource("u".into()), Some("/mcp".into()));
        let update = frame(body.next().await);
        assert!(
            update.contains(r#""method":"notifications/resources/updated""#)
                && update.contains(r#""uri":"u""#)
                && update.contains(r#"/subscriptionId":7"#),
            "{update}"
        );
        drop(body);
        assert_eq!(l.open(), 0);
    }
}
