//! Serving snapshots to gateway replicas (see `switchboard_snapshot::delivery`): a watch stream
//! per replica, authenticated by the replica's ServiceAccount token through TokenReview, and
//! the acknowledgements that say which replica serves which generation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::PostParams;
use sha2::{Digest, Sha256};
use switchboard_snapshot::delivery::{
    ACK_PATH, ACK_URL_HEADER, Ack, REPLICA_HEADER, TOKEN_AUDIENCE, WATCH_PATH,
};
use tokio::sync::{Notify, watch};

/// One published snapshot, serialized once for every replica.
#[derive(Debug, Clone, Default)]
pub(crate) struct Published {
    pub frame: Bytes,
}

/// What the operator knows of one gateway replica.
#[derive(Debug, Clone)]
pub(crate) struct Replica {
    pub serving: u64,
    pub connected: bool,
    pub last_seen: Instant,
    pub rejected: Option<String>,
}

/// A kept-warm keep-alive interval, well inside the gateway's idle limit.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How long a successful TokenReview is trusted.
const REVIEW_TTL: Duration = Duration::from_secs(60);

pub struct Hub {
    published: watch::Sender<Arc<Published>>,
    replicas: Mutex<HashMap<String, Replica>>,
    /// Replicas disconnected for longer than this stop counting as expected.
    replica_expiry: Duration,
    /// Woken when replica state changes (status reflects it).
    pub changed: Notify,
    /// `system:serviceaccount:<ns>:<name>` allowed to read snapshots.
    allowed_user: String,
    client: kube::Client,
    reviews: Mutex<HashMap<[u8; 32], Instant>>,
    /// Only the lease holder serves; others answer 503 so replicas try the next endpoint.
    leader: watch::Receiver<bool>,
    /// This replica's own address for acks (`--advertise-url`), sent with every stream.
    ack_url: Option<HeaderValue>,
}

impl Hub {
    pub fn new(
        client: kube::Client,
        allowed_user: String,
        replica_expiry: Duration,
        leader: watch::Receiver<bool>,
        ack_url: Option<HeaderValue>,
    ) -> Arc<Hub> {
        Arc::new(Hub {
            published: watch::Sender::new(Arc::new(Published::default())),
            replicas: Mutex::new(HashMap::new()),
            replica_expiry,
            ack_url,
            changed: Notify::new(),
            allowed_user,
            client,
            reviews: Mutex::new(HashMap::new()),
            leader,
        })
    }

    pub(crate) fn publish(&self, published: Published) {
        self.published.send_replace(Arc::new(published));
    }

    /// Replicas that count: connected now, or gone for less than the expiry (so a crashed
    /// replica shows as missing rather than silently shrinking the denominator).
    pub(crate) fn replicas(&self) -> Vec<(String, Replica)> {
        let mut replicas = self.replicas.lock().unwrap_or_else(|p| p.into_inner());
        let expiry = self.replica_expiry;
        replicas.retain(|_, r| r.connected || r.last_seen.elapsed() < expiry);
        let mut all: Vec<_> = replicas
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// A replica that said goodbye is no longer expected.
    fn forget(&self, replica: &str) {
        self.replicas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(replica);
        self.changed.notify_waiters();
    }

    /// Like `update`, for a replica still known (a forgotten one stays forgotten).
    fn update_known(&self, replica: &str, f: impl FnOnce(&mut Replica)) {
        let known = {
            let mut replicas = self.replicas.lock().unwrap_or_else(|p| p.into_inner());
            replicas.get_mut(replica).map(|entry| {
                entry.last_seen = Instant::now();
                f(entry);
            })
        };
        if known.is_some() {
            self.changed.notify_waiters();
        }
    }

    /// Updates a replica, first meeting it if it is new.
    fn update(&self, replica: &str, f: impl FnOnce(&mut Replica)) {
        self.replicas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(replica.to_string())
            .or_insert(Replica {
                serving: 0,
                connected: false,
                last_seen: Instant::now(),
                rejected: None,
            });
        self.update_known(replica, f);
    }

    /// Whether the bearer token belongs to the gateway's ServiceAccount (TokenReview with the
    /// snapshot audience; successful reviews are cached briefly by token hash).
    async fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(token) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        else {
            return false;
        };
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if self
            .reviews
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&digest)
            .is_some_and(|at| at.elapsed() < REVIEW_TTL)
        {
            return true;
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: Some(vec![TOKEN_AUDIENCE.to_string()]),
            },
            ..Default::default()
        };
        let api: kube::Api<TokenReview> = kube::Api::all(self.client.clone());
        let reviewed = match api.create(&PostParams::default(), &review).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "TokenReview failed");
                return false;
            }
        };
        let status = reviewed.status.unwrap_or_default();
        let user = status.user.and_then(|u| u.username).unwrap_or_default();
        let ok = status.authenticated == Some(true) && user == self.allowed_user;
        if ok {
            let mut reviews = self.reviews.lock().unwrap_or_else(|p| p.into_inner());
            reviews.retain(|_, at| at.elapsed() < REVIEW_TTL);
            reviews.insert(digest, Instant::now());
        } else {
            tracing::warn!(%user, "refused a snapshot reader that is not the gateway's ServiceAccount");
        }
        ok
    }
}

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route(WATCH_PATH, get(watch_snapshots))
        .route(ACK_PATH, post(ack))
        .with_state(hub)
}

/// Marks a replica disconnected when its stream ends, however it ends.
struct Connection {
    hub: Arc<Hub>,
    replica: String,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.hub
            .update_known(&self.replica, |r| r.connected = false);
        tracing::info!(replica = %self.replica, "gateway replica disconnected");
    }
}

async fn watch_snapshots(State(hub): State<Arc<Hub>>, headers: HeaderMap) -> Response {
    if !*hub.leader.borrow() {
        // Closing the connection makes the gateway's retry a new connection, which a Service
        // may send to another pod (the leader); a kept-alive one would return here forever.
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONNECTION, "close")],
            "not the lease holder",
        )
            .into_response();
    }
    if !hub.authorized(&headers).await {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let replica = headers
        .get(REPLICA_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|r| !r.is_empty() && r.len() <= 253)
        .unwrap_or("unnamed")
        .to_string();
    hub.update(&replica, |r| r.connected = true);
    tracing::info!(%replica, "gateway replica connected");
    let connection = Connection {
        hub: hub.clone(),
        replica,
    };
    let mut receiver = hub.published.subscribe();
    let leader = hub.leader.clone();
    receiver.mark_changed();
    let stream =
        futures_util::stream::unfold((receiver, connection), move |(mut receiver, connection)| {
            let mut leader = leader.clone();
            async move {
                // Ends the stream when leadership is lost, so replicas move to the new holder.
                let frame = tokio::select! {
                    changed = receiver.changed() => {
                        changed.ok()?;
                        let published = receiver.borrow_and_update().clone();
                        let mut frame = published.frame.to_vec();
                        frame.push(b'\n');
                        Bytes::from(frame)
                    }
                    _ = tokio::time::sleep(KEEP_ALIVE) => Bytes::from_static(b"\n"),
                    _ = leader.wait_for(|l| !*l) => return None,
                };
                Some((Ok::<_, std::io::Error>(frame), (receiver, connection)))
            }
        });
    let mut response = Response::builder().header(header::CONTENT_TYPE, "application/x-ndjson");
    if let Some(url) = &hub.ack_url {
        response = response.header(ACK_URL_HEADER, url);
    }
    response
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn ack(State(hub): State<Arc<Hub>>, headers: HeaderMap, body: Bytes) -> Response {
    // A standby's count is never read: refuse, so a misdirected ack shows in the gateway's log.
    if !*hub.leader.borrow() {
        return (StatusCode::SERVICE_UNAVAILABLE, "not the lease holder").into_response();
    }
    if !hub.authorized(&headers).await {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let Ok(ack) = serde_json::from_slice::<Ack>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    if ack.leaving {
        hub.forget(&ack.replica);
        tracing::info!(replica = %ack.replica, "gateway replica leaving");
        return StatusCode::NO_CONTENT.into_response();
    }
    if let Some(rejected) = &ack.rejected {
        tracing::warn!(replica = %ack.replica, generation = rejected.generation, error = %rejected.error, "a gateway replica refused a snapshot");
    }
    hub.update(&ack.replica, |r| {
        r.serving = ack.serving;
        r.rejected = ack.rejected.as_ref().map(|x| x.error.clone());
    });
    StatusCode::NO_CONTENT.into_response()
}
