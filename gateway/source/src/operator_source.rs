//! Cluster mode: the snapshot comes from the operator's stream (see
//! `switchboard_snapshot::delivery`). The replica keeps serving its last good snapshot while the
//! operator is away, and reconnects by itself; each snapshot it receives is validated like a
//! file, applied atomically, and acknowledged.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use switchboard_snapshot::delivery::{
    ACK_PATH, ACK_URL_HEADER, Ack, REPLICA_HEADER, Rejected, WATCH_PATH,
};
use switchboard_snapshot::{Snapshot, SnapshotError, validate};

use crate::operator_tls::{OperatorTrust, TrustedClient, stream_client};
use switchboard_core::live::SnapshotSink;
use switchboard_core::table::RoutingTable;

pub struct OperatorSource {
    /// Operator base URLs, tried in turn (only the lease holder serves the stream).
    pub endpoints: Vec<url::Url>,
    /// Projected ServiceAccount token, re-read on every connect (the kubelet rotates it).
    pub token_file: PathBuf,
    pub replica: String,
    /// Turns true when the process is stopping: the stream ends with a goodbye.
    pub leaving: watch::Receiver<bool>,
    /// The CA bundle the operator's certificate is verified with (`https` endpoints); without
    /// it, the system's web roots.
    pub trust: Option<OperatorTrust>,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// A stream with no bytes (not even a keep-alive) for this long is considered dead.
const STREAM_IDLE: Duration = Duration::from_secs(45);

/// A stream the operator accepted: its body, the token it was opened with, where acks go.
struct Opened {
    response: reqwest::Response,
    token: String,
    ack_base: url::Url,
}

impl OperatorSource {
    /// Follows the operator for the life of the process.
    pub async fn follow(self, sink: Arc<dyn SnapshotSink>) {
        let plain = stream_client(None).unwrap_or_default();
        let mut trusted: Option<TrustedClient> = None;
        let mut backoff = FIRST_BACKOFF;
        let mut turn = 0usize;
        while !*self.leaving.borrow() {
            let endpoint = &self.endpoints[turn % self.endpoints.len()];
            turn += 1;
            let attempt = match &self.trust {
                None => Ok(plain.clone()),
                Some(trust) => trust
                    .client(trusted.take())
                    .map(|client| {
                        let http = client.http.clone();
                        trusted = Some(client);
                        http
                    })
                    .map_err(|e| e.to_string()),
            };
            let watched = match attempt {
                Ok(http) => match self.open(&http, endpoint).await {
                    Ok(opened) => {
                        // A stream that was followed starts the retries afresh: the next
                        // connection (after a leader change, say) is tried at once, however
                        // long the backoff had grown before.
                        backoff = FIRST_BACKOFF;
                        sink.stream_connected(true);
                        let read = self.read_stream(&http, opened, &*sink).await;
                        sink.stream_connected(false);
                        read
                    }
                    Err(reason) => Err(reason),
                },
                Err(reason) => Err(reason),
            };
            match watched {
                Ok(()) => backoff = FIRST_BACKOFF,
                Err(reason) => {
                    tracing::info!(operator = %endpoint, %reason, "snapshot stream unavailable; serving the last good snapshot");
                    tokio::time::sleep(backoff).await;
                    // Gently: after a leader change the first tries may reach the old leader on
                    // its way out or a standby not yet holding the lease (both answer at once).
                    backoff = (backoff * 3 / 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    fn token(&self) -> Result<String, String> {
        std::fs::read_to_string(&self.token_file)
            .map(|t| t.trim().to_string())
            .map_err(|e| {
                format!(
                    "cannot read the token file {}: {e}",
                    self.token_file.display()
                )
            })
    }

    /// Opens the stream at `endpoint` (an answer other than 200 is a refusal).
    async fn open(&self, http: &reqwest::Client, endpoint: &url::Url) -> Result<Opened, String> {
        let token = self.token()?;
        let url = endpoint.join(WATCH_PATH).map_err(|e| e.to_string())?;
        let response = http
            .get(url)
            .bearer_auth(&token)
            .header(REPLICA_HEADER, &self.replica)
            .send()
            .await
            .map_err(|e| format!("connect: {}", root_cause(&e)))?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status().as_u16()));
        }
        // Acks go to the replica that serves this stream (behind a Service another request
        // may reach another replica); only its address changes, the token stays the same.
        let ack_base = response
            .headers()
            .get(ACK_URL_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| url::Url::parse(v).ok())
            .filter(|u| u.scheme() == endpoint.scheme())
            .unwrap_or_else(|| endpoint.clone());
        tracing::info!(operator = %endpoint, acks = %ack_base, "following the operator's snapshot stream");
        Ok(Opened {
            response,
            token,
            ack_base,
        })
    }

    /// Applies and acknowledges every snapshot of an opened stream until it breaks (`Err`) or
    /// the process leaves (`Ok`, after a goodbye).
    async fn read_stream(
        &self,
        http: &reqwest::Client,
        opened: Opened,
        sink: &dyn SnapshotSink,
    ) -> Result<(), String> {
        let Opened {
            mut response,
            token,
            ack_base,
        } = opened;
        let mut buffer: Vec<u8> = Vec::new();
        let mut leaving = self.leaving.clone();
        loop {
            let chunk = tokio::select! {
                chunk = tokio::time::timeout(STREAM_IDLE, response.chunk()) => chunk,
                // (the guard wait_for returns must not live across the ack's await)
                () = async { drop(leaving.wait_for(|l| *l).await) } => {
                    // Said to the operator serving this stream, so it stops expecting this
                    // replica at once instead of reporting it missing.
                    let goodbye = Ack {
                        replica: self.replica.clone(),
                        serving: sink.current().generation,
                        rejected: None,
                        leaving: true,
                    };
                    self.ack(http, &ack_base, &token, &goodbye).await;
                    return Ok(());
                }
            };
            let chunk = chunk
                .map_err(|_| "stream idle".to_string())?
                .map_err(|e| format!("stream: {}", e.without_url()))?;
            let Some(chunk) = chunk else {
                return Err("stream ended".into());
            };
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                if line.len() > 1 {
                    let ack = apply_frame(sink, &line, &self.replica);
                    self.ack(http, &ack_base, &token, &ack).await;
                }
            }
        }
    }

    async fn ack(&self, http: &reqwest::Client, endpoint: &url::Url, token: &str, ack: &Ack) {
        let Ok(url) = endpoint.join(ACK_PATH) else {
            return;
        };
        let sent = http
            .post(url)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(ack).unwrap_or_default())
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        match sent {
            Err(e) => tracing::warn!(error = %e.without_url(), "could not acknowledge a snapshot"),
            Ok(r) if !r.status().is_success() => {
                tracing::warn!(
                    status = r.status().as_u16(),
                    "the operator refused an acknowledgement"
                )
            }
            Ok(_) => {}
        }
    }
}

/// The innermost cause (e.g. "invalid peer certificate: UnknownIssuer", "Connection refused"):
/// reqwest's own message is only "error sending request".
pub fn root_cause(e: &reqwest::Error) -> String {
    let mut root: &dyn std::error::Error = e;
    while let Some(cause) = root.source() {
        root = cause;
    }
    root.to_string()
}

/// Applies one frame if it is a valid snapshot; the answer is what the replica now serves.
pub fn apply_frame(sink: &dyn SnapshotSink, frame: &[u8], replica: &str) -> Ack {
    let serving = sink.current().generation;
    match build(frame) {
        Ok(table) => {
            let generation = table.generation;
            tracing::info!(
                generation,
                servers = table.servers.len(),
                keys = table.key_count(),
                "snapshot applied"
            );
            sink.apply(table);
            Ack {
                replica: replica.to_string(),
                serving: generation,
                rejected: None,
                leaving: false,
            }
        }
        Err((generation, e)) => {
            sink.rejected();
            tracing::error!(generation, error = %e, "snapshot rejected; the previous snapshot keeps serving");
            Ack {
                replica: replica.to_string(),
                serving,
                rejected: Some(Rejected {
                    generation,
                    error: e.to_string(),
                }),
                leaving: false,
            }
        }
    }
}

fn build(frame: &[u8]) -> Result<RoutingTable, (u64, SnapshotError)> {
    let snapshot: Snapshot = serde_json::from_slice(frame).map_err(|e| {
        (
            0,
            SnapshotError {
                errors: vec![switchboard_snapshot::FieldError {
                    path: String::new(),
                    message: format!("not a snapshot: {}", json_error_kind(&e)),
                }],
            },
        )
    })?;
    let generation = snapshot.generation;
    validate(&snapshot).map_err(|e| (generation, e))?;
    RoutingTable::build(&snapshot).map_err(|e| (generation, e))
}

/// The kind of a JSON error, without the excerpt of input serde may quote (a frame holds
/// secrets).
fn json_error_kind(e: &serde_json::Error) -> &'static str {
    match e.classify() {
        serde_json::error::Category::Io => "I/O error",
        serde_json::error::Category::Syntax => "invalid JSON",
        serde_json::error::Category::Data => "JSON that does not fit the schema",
        serde_json::error::Category::Eof => "truncated JSON",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_frame_keeps_the_previous_snapshot() {
        let sink = switchboard_core::live::LiveTable::empty();
        let good =
            serde_json::json!({"generation": 3, "servers": [{"name": "a", "url": "http://x/mcp"}]});
        let ack = apply_frame(&sink, good.to_string().as_bytes(), "r1");
        assert_eq!((ack.serving, ack.rejected.is_none()), (3, true));
        let bad = serde_json::json!({"generation": 4, "servers": [{"name": "A_B", "url": "http://x/mcp"}]});
        let ack = apply_frame(&sink, bad.to_string().as_bytes(), "r1");
        assert_eq!(ack.serving, 3);
        assert_eq!(ack.rejected.as_ref().map(|r| r.generation), Some(4));
        assert!(ack.rejected.unwrap().error.contains("servers[0].name"));
        assert_eq!(sink.current().generation, 3);
        assert!(sink.current().server_by_id("a").is_some());
    }
}
