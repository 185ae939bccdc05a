//! Exchanges that bridge the two eras' ways of asking the client for input, on any replica.
//!
//! - A legacy client of a 2026-07-28 upstream: the upstream answers `input_required`; the
//!   gateway sends each input request to the client inside the open SSE stream, collects the
//!   client's replies and asks the upstream again with `inputResponses` and `requestState`.
//! - A 2026-07-28 client of a legacy upstream: the upstream sends a request (sampling,
//!   elicitation, roots) inside the stream of a call; the gateway answers the client
//!   `input_required` and keeps the upstream stream paused until the client's retry brings the
//!   answers, which go to the upstream session before the stream resumes.
//!
//! Either way one replica holds something open (the client's stream, or the paused upstream
//! stream) while the client's next message may reach another replica. The ids and
//! `requestState` the client sees are sealed [`ExchangeRoute`]s naming the replica that holds
//! the exchange (its advertised URL and process instance) and the exchange; a replica that
//! receives a message for an exchange held elsewhere passes it to that replica's
//! `/mcp-internal/exchanges/*` endpoint with the client's own headers, where it is
//! authenticated again. Nothing else is shared between replicas.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use switchboard_core::session::{SessionSealer, TokenKind};

/// Most exchanges one replica holds open at once, and per client key; past either, new ones
/// are refused (503) rather than pushing out others.
const MAX_PENDING: usize = 10_000;
const MAX_PENDING_PER_KEY: usize = 256;

/// The sealed route of an exchange (a relayed input request's id, or a `requestState`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExchangeRoute {
    /// The key of the client the exchange belongs to (first 8 bytes of its digest).
    #[serde(rename = "k")]
    pub key_tag: [u8; 8],
    /// Where the replica holding the exchange is reached, and which process it is.
    #[serde(rename = "a")]
    pub address: String,
    #[serde(rename = "n")]
    pub instance: u64,
    #[serde(rename = "p")]
    pub pending: u64,
    /// For a relayed input request: its key in the upstream's `inputRequests`.
    #[serde(rename = "i", default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// Unix seconds after which the exchange is over: a stale route is refused before anything
    /// is sent to the address it names (which may belong to someone else by then).
    #[serde(rename = "e")]
    pub expires_at: u64,
}

impl ExchangeRoute {
    pub fn seal(&self, sealer: &SessionSealer) -> String {
        let payload = serde_json::to_vec(self).unwrap_or_default();
        sealer.seal_token(TokenKind::Exchange, &payload)
    }

    /// The route a token holds, if it is genuine and not expired.
    pub fn open(sealer: &SessionSealer, token: &str) -> Option<ExchangeRoute> {
        let (_, payload) = sealer.open_token(TokenKind::Exchange, token)?;
        let route: ExchangeRoute = serde_json::from_slice(&payload).ok()?;
        (unix_now() < route.expires_at).then_some(route)
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One reply of a legacy client to a relayed input request: its key, and the JSON-RPC
/// response message it sent.
pub type InputReply = (String, serde_json::Map<String, Value>);

/// What a replica holds for an exchange.
pub enum Pending {
    /// A legacy client's stream waits for its replies to these input requests.
    Replies(mpsc::Sender<InputReply>),
    /// An upstream stream paused at its own requests, waiting for a 2026-07-28 client's retry.
    Paused(Box<PausedRelay>),
}

/// A relay stopped at server-to-client requests: the upstream ids of the requests, by the
/// keys the client was given.
///
/// The store never looks at the relay itself, so it holds it unnamed: the relay (which holds the
/// MCP context, which holds this store) is the layer above, and takes it back by its type
/// ([`PausedRelay::take_relay`]).
pub struct PausedRelay {
    relay: Box<dyn std::any::Any + Send>,
    pub requests: Vec<(String, Value)>,
}

impl PausedRelay {
    pub fn new<R: Send + 'static>(relay: R, requests: Vec<(String, Value)>) -> PausedRelay {
        PausedRelay {
            relay: Box::new(relay),
            requests,
        }
    }

    /// The relay and the requests it stopped at; `None` if it was paused as another type.
    pub fn take_relay<R: 'static>(self) -> Option<(R, Vec<(String, Value)>)> {
        let relay = self.relay.downcast::<R>().ok()?;
        Some((*relay, self.requests))
    }
}

/// One held exchange: what is held, whose it is, until when.
struct Held {
    pending: Pending,
    key_tag: [u8; 8],
    until: Instant,
}

pub struct Exchanges {
    instance: u64,
    next: AtomicU64,
    pending: Mutex<HashMap<u64, Held>>,
    address: std::sync::OnceLock<String>,
}

impl Default for Exchanges {
    fn default() -> Self {
        Exchanges {
            instance: rand::random(),
            next: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            address: std::sync::OnceLock::new(),
        }
    }
}

impl Exchanges {
    /// Where other replicas reach this one (set once, when the listener is bound).
    pub fn set_address(&self, url: String) {
        let _ = self.address.set(url.trim_end_matches('/').to_string());
    }

    pub fn address(&self) -> &str {
        self.address.get().map_or("", String::as_str)
    }

    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// Holds `pending` for `ttl`; its route, or `None` when the replica (or this key) holds
    /// too many already. Expired exchanges are dropped here: a paused upstream stream dropped
    /// this way cancels its upstream request.
    pub fn hold(&self, key_tag: [u8; 8], pending: Pending, ttl: Duration) -> Option<ExchangeRoute> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let expired;
        {
            let mut map = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            expired = map
                .extract_if(|_, held| held.until <= now)
                .collect::<Vec<_>>();
            let of_key = map.values().filter(|h| h.key_tag == key_tag).count();
            if map.len() >= MAX_PENDING || of_key >= MAX_PENDING_PER_KEY {
                return None;
            }
            map.insert(
                id,
                Held {
                    pending,
                    key_tag,
                    until: now + ttl,
                },
            );
        }
        // Dropped outside the lock (a paused stream's drop spawns its cancellation).
        drop(expired);
        Some(ExchangeRoute {
            key_tag,
            address: self.address().to_string(),
            instance: self.instance,
            pending: id,
            input: None,
            expires_at: unix_now() + ttl.as_secs() + 1,
        })
    }

    /// Whether this process holds the exchange a route names.
    pub fn is_local(&self, route: &ExchangeRoute) -> bool {
        route.instance == self.instance
    }

    /// A sender for a waiting legacy client's replies.
    pub fn reply_sender(&self, id: u64) -> Option<mpsc::Sender<InputReply>> {
        let map = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(&id).map(|h| &h.pending) {
            Some(Pending::Replies(tx)) => Some(tx.clone()),
            _ => None,
        }
    }

    /// The input keys a paused relay waits for (to check a retry before resuming it).
    pub fn paused_keys(&self, id: u64) -> Option<Vec<String>> {
        let map = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(&id).map(|h| &h.pending) {
            Some(Pending::Paused(p)) => Some(p.requests.iter().map(|(k, _)| k.clone()).collect()),
            _ => None,
        }
    }

    /// Takes a paused relay out (a retry resumes it once).
    pub fn take_paused(&self, id: u64) -> Option<Box<PausedRelay>> {
        let mut map = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(map.get(&id).map(|h| &h.pending), Some(Pending::Paused(_))) {
            return None;
        }
        match map.remove(&id).map(|h| h.pending) {
            Some(Pending::Paused(p)) => Some(p),
            _ => None,
        }
    }

    /// Forgets an exchange (its stream ended, or nobody came back in time).
    pub fn release(&self, id: u64) {
        let removed = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        drop(removed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn routes_are_sealed_and_exchanges_are_held_once() {
        let exchanges = Exchanges::default();
        exchanges.set_address("http://10.0.0.7:8080/".into());
        let (tx, _rx) = mpsc::channel(1);
        let route = exchanges
            .hold([1; 8], Pending::Replies(tx), Duration::from_secs(60))
            .unwrap();
        assert_eq!(route.address, "http://10.0.0.7:8080");
        assert!(exchanges.is_local(&route));
        assert!(exchanges.reply_sender(route.pending).is_some());
        assert!(
            exchanges.take_paused(route.pending).is_none(),
            "not a paused relay"
        );
        assert!(exchanges.reply_sender(route.pending).is_some(), "kept");
        exchanges.release(route.pending);
        assert!(exchanges.reply_sender(route.pending).is_none());

        let sealer = SessionSealer::new(Some("k"), Duration::from_secs(60));
        let token = route.seal(&sealer);
        let opened = ExchangeRoute::open(&sealer, &token).unwrap();
        assert_eq!(opened.pending, route.pending);
        // Not a reply route: the kinds of sealed token never open as each other.
        assert!(sealer.open_token(TokenKind::ReplyRoute, &token).is_none());
        let stale = ExchangeRoute {
            expires_at: 1,
            ..route
        };
        assert!(ExchangeRoute::open(&sealer, &stale.seal(&sealer)).is_none());
    }

    #[tokio::test]
    async fn expired_exchanges_go_and_one_key_cannot_take_every_slot() {
        let exchanges = Exchanges::default();
        let (tx, _rx) = mpsc::channel(1);
        let short = exchanges
            .hold([1; 8], Pending::Replies(tx.clone()), Duration::ZERO)
            .unwrap();
        let kept = exchanges
            .hold(
                [1; 8],
                Pending::Replies(tx.clone()),
                Duration::from_secs(60),
            )
            .unwrap();
        assert!(
            exchanges.reply_sender(short.pending).is_none(),
            "expired on the next hold"
        );
        assert!(exchanges.reply_sender(kept.pending).is_some());
        for _ in 0..MAX_PENDING_PER_KEY {
            exchanges.hold(
                [2; 8],
                Pending::Replies(tx.clone()),
                Duration::from_secs(60),
            );
        }
        assert!(
            exchanges
                .hold(
                    [2; 8],
                    Pending::Replies(tx.clone()),
                    Duration::from_secs(60)
                )
                .is_none(),
            "a key past its share is refused"
        );
        assert!(
            exchanges
                .hold([3; 8], Pending::Replies(tx), Duration::from_secs(60))
                .is_some(),
            "other keys still get theirs"
        );
    }
}
