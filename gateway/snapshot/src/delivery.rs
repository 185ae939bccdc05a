//! How snapshots travel from the operator to gateway replicas (docs/architecture.md, "The snapshot").
//!
//! A replica opens `GET /v1/snapshots/watch` with its ServiceAccount token as a bearer token
//! and its replica name in `X-Switchboard-Replica`. The operator answers with a stream of
//! newline-delimited JSON: the full snapshot on connect and after every change (a bare newline
//! is a keep-alive). After applying (or refusing) a snapshot the replica reports it with
//! `POST /v1/snapshots/ack`, so the operator knows which replica serves which generation.
//!
//! Behind a Service the ack is a new request that may reach another operator replica than the
//! stream did, and only the lease holder counts acks. So the stream's answer names, in
//! `X-Switchboard-Ack-Url`, where the replica serving it takes acks (its pod address); replicas
//! send acks there, and to the stream's endpoint when the header is absent.

use serde::{Deserialize, Serialize};

pub const WATCH_PATH: &str = "/v1/snapshots/watch";
pub const ACK_PATH: &str = "/v1/snapshots/ack";
pub const REPLICA_HEADER: &str = "x-switchboard-replica";
pub const ACK_URL_HEADER: &str = "x-switchboard-ack-url";
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
    /// The replica is shutting down (SIGTERM): stop expecting it. A replica that vanishes
    /// without saying so still counts, as missing, until the operator's `--replica-expiry`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub leaving: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Rejected {
    pub generation: u64,
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaving_is_sent_only_when_true_and_defaults_to_false() {
        let ack = Ack {
            replica: "r1".into(),
            serving: 3,
            rejected: None,
            leaving: false,
        };
        let wire = serde_json::to_string(&ack).expect("serializes");
        assert_eq!(wire, r#"{"replica":"r1","serving":3}"#);
        // An older gateway's ack (no field) reads as staying.
        assert_eq!(serde_json::from_str::<Ack>(&wire).expect("parses"), ack);
        let goodbye = Ack {
            leaving: true,
            ..ack
        };
        let wire = serde_json::to_string(&goodbye).expect("serializes");
        assert!(wire.contains(r#""leaving":true"#), "{wire}");
        assert!(serde_json::from_str::<Ack>(&wire).expect("parses").leaving);
    }
}
