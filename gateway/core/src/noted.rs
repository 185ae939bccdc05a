//! What the layers of a request note about it ([`Noted`]), read by the two that report it: its
//! audit record ([`crate::audit`]) and its span ([`crate::request_span`]). Its own module so
//! that each of them reads it without the other.

use serde::Serialize;

/// Longest name (method, tool, prompt, resource) a record carries: names come from clients.
pub(crate) const NAME_CAP: usize = 256;

/// Who called. `kind`: `key`, `serviceAccount` (a ServiceAccount token standing for a key),
/// `person` (a signed-in person; `key` is the first key granting them scope).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct CallerRecord {
    pub kind: &'static str,
    /// The key's `<namespace>/<name>`.
    pub key: String,
    pub namespace: String,
    /// The workload whose ServiceAccount token stood for the key (`kind: serviceAccount`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account: Option<WorkloadRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The identity provider's `<namespace>/<name>` a person signed in with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

/// The workload a verified ServiceAccount token names: its ServiceAccount, and its pod when the
/// token was bound to one (`kubernetes.io.pod.name`, as a projected token in a pod is).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct WorkloadRecord {
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
}

/// Model tokens the providers reported for the request (all its model calls).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
}

/// The most flagged tools one audit record names (a listing of a thousand changed tools
/// says so in the metric, not in every record).
pub const TOOLS_FLAGGED_NOTED: usize = 20;

/// What the layers of a request noted about it. The audit record writes it member by member
/// (`audit::Line`, in this order); serde's derive is the oracle a test holds that writer to, so
/// the `serde` attributes here say what the record does.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Noted {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<CallerRecord>,
    /// The server the call was routed to, or the one a refusal for scope refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The virtual server the call came through, or the one a refusal for scope refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub virtual_server: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc_method: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// What happened, as the request metric's `outcome` says it (`ok`, `stream`,
    /// `upstream_error`, or the refusal's code: `unauthenticated`, `forbidden`, `rate_limited`,
    /// `overloaded`, `invalid_request`, ...). Unset by any layer: from the HTTP status. (The
    /// record's `outcome` field, written whether noted or not.)
    #[serde(skip)]
    pub outcome: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc_error_code: Option<i64>,
    /// Tools this request listed, held back or refused whose definitions the review flagged:
    /// `<tool as the caller names it>: <what>` (changed parts, findings), at most
    /// `TOOLS_FLAGGED_NOTED` (20). Names and the definitions' own words, never a payload.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools_flagged: Vec<String>,
    /// The HTTP status of the last upstream answer the request got (its MCP server's or model
    /// provider's; a token endpoint's only when nothing came after it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Tokens>,
    /// The issuer a refused token named (unverified, shown safely), when no identity provider
    /// of the gateway has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_issuer: Option<String>,
    /// The request body's length, as read.
    #[serde(skip)]
    pub bytes_in: u64,
    /// For the request's span only (see [`crate::request_span`]): the client's JSON-RPC id
    /// (as text, capped like a name), the MCP revision it speaks, its legacy session's tag,
    /// and whether a tool's result said `isError`.
    #[serde(skip)]
    pub rpc_id: Option<String>,
    #[serde(skip)]
    pub protocol_version: Option<&'static str>,
    #[serde(skip)]
    pub session_tag: Option<u64>,
    #[serde(skip)]
    pub tool_error: bool,
}

/// A name as a record carries it: at most `NAME_CAP` bytes.
pub fn name(value: &str) -> String {
    let mut end = value.len().min(NAME_CAP);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    value[..end].to_string()
}

impl Noted {
    /// Notes a flagged tool (up to `TOOLS_FLAGGED_NOTED`; the same entry once).
    pub fn flag_tool(&mut self, entry: String) {
        if self.tools_flagged.len() < TOOLS_FLAGGED_NOTED && !self.tools_flagged.contains(&entry) {
            self.tools_flagged.push(entry);
        }
    }
}
