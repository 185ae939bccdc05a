//! How snapshots travel from the operator to gateway replicas (docs/architecture.md, "The snapshot").
//!
//! A replica opens `GET /v1/snapshots/watch` with its ServiceAccount token as a bearer token
//! and its replica name in `X-Switchboard-Replica`. The operator answers with a stream of
//! newline-delimited JSON: the full snapshot on connect and after every change (a bare newline
//! is a keep-alive). After applying (or refusing) a snapshot the replica reports it with
//! `POST /v1/snapshots/ack`, so the operator knows which replica serves which generation.

use serde::{Deserialize, Serialize};

pub const WATCH_PATH: &str = "/v1/snapshots/watch";
pub const ACK_PATH: &str = "/v1/snapshots/ack";
pub const REPLICA_HEADER: &str = "x-switchboard-replica";
/// The audience of the ServiceAccount tokens replicas present.
pub const TOKEN_AUDIENCE: &str = "switchboard-operator";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Ack {
    pub replica: String,
    /// The generation the replica now serves.
    pub serving: u64,
    /// Set when the replica refused a newer snapshot (it keeps serving `serving`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<Rejected>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Rejected {
    pub generation: u64,
    pub error: String,
}
