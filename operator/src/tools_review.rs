//! `switchboard-operator tools review <namespace>/<name>`: what a platform team reads before
//! approving a server's tool definitions, and the `spec.tools.approved` block it applies.
//!
//! It reads the server's status (`toolReview`, written from the operator's own listing of the
//! upstream), so it needs nothing but read access to McpServers; `--apply` patches
//! `spec.tools.approved` (GitOps users paste the printed block instead). Tools the poisoning
//! or shadowing checks flag are left out of the block unless `--include-flagged` says the team
//! read the findings and approves anyway.

use kube::api::{Api, Patch, PatchParams};
use switchboard_crds::McpServer;
use switchboard_crds::server::ReviewedTool;
use switchboard_trust::{Plan, ReviewEntry, Target, plan};

/// What failed a review (the sub-command prints it and exits non-zero).
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("the server is named <namespace>/<name>, not {0:?}")]
    Name(String),
    #[error("reading McpServer {server}: {source}")]
    Read {
        server: String,
        #[source]
        source: kube::Error,
    },
    #[error("patching spec.tools.approved of McpServer {server}: {source}")]
    Apply {
        server: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "McpServer {0} has no review in its status yet: the operator has not listed its tools (see its Ready and ToolsChanged conditions)"
    )]
    NotReviewed(String),
}

/// Reads `server`'s review, prints it, and with `apply` patches its approvals.
pub async fn run(
    client: kube::Client,
    server: &str,
    apply: bool,
    include_flagged: bool,
) -> Result<Plan, ReviewError> {
    let (namespace, name) = server
        .split_once('/')
        .filter(|(n, m)| !n.is_empty() && !m.is_empty())
        .ok_or_else(|| ReviewError::Name(server.to_string()))?;
    let api: Api<McpServer> = Api::namespaced(client, namespace);
    let object = api.get(name).await.map_err(|source| ReviewError::Read {
        server: server.to_string(),
        source,
    })?;
    let status = object
        .status
        .as_ref()
        .filter(|s| s.conditions.iter().any(|c| c.type_ == "ToolsChanged"))
        .ok_or_else(|| ReviewError::NotReviewed(server.to_string()))?;
    let approved = object
        .spec
        .tools
        .as_ref()
        .map(|t| t.approved.clone())
        .unwrap_or_default();
    let entries: Vec<ReviewEntry> = status.tool_review.iter().map(entry).collect();
    let plan = plan(
        Target::McpServer,
        server,
        &approved,
        &entries,
        include_flagged,
    );
    if apply && plan.proposed > 0 {
        let patch = serde_json::json!({"spec": {"tools": {"approved": plan.approved}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| ReviewError::Apply {
                server: server.to_string(),
                source,
            })?;
    }
    Ok(plan)
}

/// A status entry as the review reads it.
fn entry(tool: &ReviewedTool) -> ReviewEntry {
    ReviewEntry {
        name: tool.name.clone(),
        digest: tool.digest.clone(),
        state: tool.state.clone(),
        changed: tool.changed.clone(),
        findings: tool.findings.clone(),
        held: tool.held,
    }
}

/// A review entry as status holds it.
pub(crate) fn reviewed_tool(entry: ReviewEntry) -> ReviewedTool {
    ReviewedTool {
        name: entry.name,
        digest: entry.digest,
        state: entry.state,
        changed: entry.changed,
        findings: entry.findings,
        held: entry.held,
    }
}
