//! The policy hook: an external service a server's tool calls are checked with (`policy` on the
//! server, else `gateway.policy`), before the upstream is asked and after it answered. Never on
//! a call's path unless configured (the plane asks [`policy_for`] once per call: two field
//! reads).
//!
//! Each check is one POST of JSON (`switchboard.policy/v1`):
//!
//! ```json
//! {"version": "switchboard.policy/v1", "phase": "request", "method": "tools/call",
//!  "server": "team/github", "tool": "create_issue",
//!  "caller": {"kind": "person", "subject": "alice", "namespace": "team", "key": "team/people",
//!             "groups": ["dev"], "claims": {...}},
//!  "arguments": {...}, "result": {...}}
//! ```
//!
//! (`result` in the response phase only). The answer is `{"decision": "allow"}`,
//! `{"decision": "deny", "reason": "..."}`, or `{"decision": "modify", "arguments": {...}}` (request)
//! / `{"decision": "modify", "result": {...}}` (response, e.g. redacted). This follows the MCP
//! interceptors proposal (SEP-2624) in its two roles, a validator (allow/deny with a reason)
//! and a mutator (a changed payload), and its two points for tools (before the call, after the
//! result); it departs in calling one endpoint per check that may do either (one round trip
//! rather than a validator then a mutator), over plain HTTP rather than as MCP JSON-RPC
//! methods, since the service is the platform team's, not a server the client negotiates with.
//!
//! A check that fails (no answer within the hook's `timeout`, an HTTP error, an answer that is
//! not one of the above) refuses the call under `failure: closed` (the default) and lets it go
//! as it is under `open`. The hook sees arguments and results; they are never logged here.

use serde_json::{Map, Value, json};
use switchboard_core::scope::Caller;
use switchboard_core::table::Server;
use switchboard_snapshot::{PolicyFailure, PolicyHook, PolicyPhase};

use crate::client::Upstreams;
use crate::error::UpstreamError;
use crate::http_client::read_limited;

/// The largest answer a check may give.
const MAX_ANSWER: usize = 8 * 1024 * 1024;

/// The hook a server's tool calls are checked with, if any.
pub(crate) fn policy_for<'a>(caller: &'a Caller, server: &'a Server) -> Option<&'a PolicyHook> {
    server
        .spec
        .policy
        .as_ref()
        .or(caller.table.settings.policy.as_ref())
}

/// What a check decided.
#[derive(Debug, PartialEq)]
pub(crate) enum Decision {
    Allow,
    /// The arguments (request) or the result (response) to use instead.
    Modify(Value),
}

/// What one check is about: the call, and in the response phase its result.
pub(crate) struct Checked<'a> {
    pub caller: &'a Caller,
    pub server: &'a Server,
    pub tool: &'a str,
    pub arguments: Option<&'a Value>,
    pub result: Option<&'a Value>,
}

/// One check of a tool call: the decision, or the call's refusal.
pub(crate) async fn check(
    upstreams: &Upstreams,
    hook: &PolicyHook,
    phase: PolicyPhase,
    checked: Checked<'_>,
) -> Result<Decision, UpstreamError> {
    let Checked {
        caller,
        server,
        tool,
        arguments,
        result,
    } = checked;
    let phase_name = match phase {
        PolicyPhase::Request => "request",
        PolicyPhase::Response => "response",
    };
    let mut body = json!({
        "version": "switchboard.policy/v1",
        "phase": phase_name,
        "method": "tools/call",
        "server": server.id(),
        "tool": tool,
        "caller": Value::Object(caller.described()),
        "arguments": arguments.cloned().unwrap_or_else(|| Value::Object(Map::new())),
    });
    if let Some(result) = result {
        body["result"] = result.clone();
    }
    let failed = |detail: String| -> Result<Decision, UpstreamError> {
        match hook.failure {
            PolicyFailure::Open => {
                tracing::warn!(server = server.id(), tool, phase = phase_name, detail = %detail, "policy check failed; the call goes on (failure: open)");
                Ok(Decision::Allow)
            }
            PolicyFailure::Closed => Err(UpstreamError::PolicyUnavailable {
                server: server.id().to_string(),
                detail,
            }),
        }
    };
    let answer = match ask(upstreams, hook, &body).await {
        Ok(answer) => answer,
        Err(detail) => return failed(detail),
    };
    let field = match phase {
        PolicyPhase::Request => "arguments",
        PolicyPhase::Response => "result",
    };
    match answer.get("decision").and_then(Value::as_str) {
        Some("allow") => Ok(Decision::Allow),
        Some("deny") => Err(UpstreamError::PolicyDenied {
            server: server.id().to_string(),
            tool: tool.to_string(),
            reason: answer
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("denied by policy")
                .chars()
                .take(500)
                .collect(),
        }),
        Some("modify") => match answer.get(field) {
            Some(value @ Value::Object(_)) => Ok(Decision::Modify(value.clone())),
            _ => failed(format!("a modify decision without an object `{field}`")),
        },
        _ => failed("the answer has no decision (allow, deny, modify)".into()),
    }
}

/// POSTs a check and reads its JSON answer, within the hook's timeout.
async fn ask(upstreams: &Upstreams, hook: &PolicyHook, body: &Value) -> Result<Value, String> {
    let url = url::Url::parse(&hook.url).map_err(|e| format!("the hook's URL: {e}"))?;
    // The same address policy as upstreams' (`gateway.upstreamNetworks`): it gets their data.
    upstreams
        .allows_url(&url)
        .map_err(|denied| denied.to_string())?;
    let http = upstreams.http().map_err(|e| e.to_string())?;
    let exchange = async {
        let response = http
            .post(&url)
            .json(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let bytes = read_limited(response.into_body(), MAX_ANSWER)
            .await
            .map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("HTTP {}", status.as_u16()));
        }
        serde_json::from_slice::<Value>(&bytes).map_err(|_| "the answer is not JSON".to_string())
    };
    tokio::time::timeout(hook.timeout, exchange)
        .await
        .map_err(|_| {
            format!(
                "no answer within {}",
                humantime::format_duration(hook.timeout)
            )
        })?
}
