//! `switchboard-operator tools review <namespace>/<name>`: what a platform team reads before
//! approving a server's tool definitions, and the `spec.tools.approved` block it applies.
//!
//! It reads the server's status (`toolReview`, written from the operator's own listing of the
//! upstream), so it needs nothing but read access to McpServers; `--apply` patches
//! `spec.tools.approved` (GitOps users paste the printed block instead). Tools the poisoning
//! or shadowing checks flag are left out of the block unless `--include-flagged` says the team
//! read the findings and approves anyway.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use kube::api::{Api, Patch, PatchParams};
use switchboard_crds::McpServer;
use switchboard_crds::server::ReviewedTool;

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

/// A review: the text for people, and the approvals it proposes (the server's current ones
/// with the reviewed tools' digests added or replaced).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub text: String,
    pub approved: BTreeMap<String, String>,
    /// Digests the plan adds or replaces.
    pub proposed: usize,
    /// Flagged tools left out of the proposal.
    pub withheld: usize,
}

/// The review of `server` (`<namespace>/<name>`) from its status and approvals. Pure.
pub fn plan(
    server: &str,
    approved: &BTreeMap<String, String>,
    review: &[ReviewedTool],
    include_flagged: bool,
) -> Plan {
    let mut text = String::new();
    let mut proposal = approved.clone();
    let (mut proposed, mut withheld) = (0, 0);
    let _ = writeln!(text, "McpServer {server}: {} tools to review", review.len());
    for tool in review {
        let mark = match tool.state.as_str() {
            "changed" => "~",
            "new" => "+",
            "unpinned" => "?",
            _ => "!",
        };
        let what = match tool.state.as_str() {
            "changed" if tool.changed.is_empty() => "definition changed".to_string(),
            "changed" => format!("{} changed", tool.changed.join(", ")),
            "new" => "new".to_string(),
            "unpinned" => "not approved (the server has no approvals yet)".to_string(),
            _ => "approved, flagged".to_string(),
        };
        let held = if tool.held { " [held]" } else { "" };
        let _ = writeln!(text, "{mark} {}: {what}{held}", tool.name);
        if let Some(old) = approved.get(&tool.name).filter(|_| tool.state == "changed") {
            let _ = writeln!(text, "    approved: {old}");
        }
        let _ = writeln!(text, "    now:      {}", tool.digest);
        for finding in &tool.findings {
            let _ = writeln!(text, "    finding:  {finding}");
        }
        if tool.state == "approved" {
            continue;
        }
        if !tool.findings.is_empty() && !include_flagged {
            withheld += 1;
            let _ = writeln!(
                text,
                "    left out of the approvals below: read the findings, then --include-flagged"
            );
            continue;
        }
        proposal.insert(tool.name.clone(), tool.digest.clone());
        proposed += 1;
    }
    let _ = writeln!(
        text,
        "\n# {proposed} approvals proposed{}; apply with --apply, or paste into the McpServer:",
        if withheld > 0 {
            format!(", {withheld} flagged tools left out")
        } else {
            String::new()
        }
    );
    let _ = writeln!(text, "spec:\n  tools:\n    approved:");
    for (name, digest) in &proposal {
        let _ = writeln!(text, "      {}: {}", yaml_key(name), digest);
    }
    Plan {
        text,
        approved: proposal,
        proposed,
        withheld,
    }
}

/// A tool name as a YAML key: quoted unless plainly safe.
fn yaml_key(name: &str) -> String {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
        && !name.starts_with(['-', '.']);
    if plain {
        name.to_string()
    } else {
        serde_json::Value::from(name).to_string()
    }
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
    let plan = plan(server, &approved, &status.tool_review, include_flagged);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, state: &str, changed: &[&str], findings: &[&str]) -> ReviewedTool {
        ReviewedTool {
            name: name.into(),
            digest: format!("v1:{name}"),
            state: state.into(),
            changed: changed.iter().map(|s| s.to_string()).collect(),
            findings: findings.iter().map(|s| s.to_string()).collect(),
            held: true,
        }
    }

    #[test]
    fn a_plan_names_each_change_and_proposes_all_but_the_flagged() {
        let approved = BTreeMap::from([
            ("weather".to_string(), "v1:old".to_string()),
            ("kept".to_string(), "v1:kept".to_string()),
        ]);
        let review = [
            tool("weather", "changed", &["description"], &[]),
            tool("forecast", "new", &[], &[]),
            tool(
                "add",
                "new",
                &[],
                &["sensitive-file in description (~/.ssh)"],
            ),
        ];
        let plan = plan("team/up", &approved, &review, false);
        assert!(plan.text.contains("~ weather: description changed [held]\n    approved: v1:old\n    now:      v1:weather"), "{}", plan.text);
        assert!(
            plan.text.contains("+ forecast: new [held]"),
            "{}",
            plan.text
        );
        assert!(
            plan.text
                .contains("    finding:  sensitive-file in description (~/.ssh)\n    left out"),
            "{}",
            plan.text
        );
        assert_eq!((plan.proposed, plan.withheld), (2, 1));
        assert_eq!(
            plan.approved,
            BTreeMap::from([
                ("forecast".to_string(), "v1:forecast".to_string()),
                ("kept".to_string(), "v1:kept".to_string()),
                ("weather".to_string(), "v1:weather".to_string()),
            ])
        );
        assert!(plan.text.ends_with("spec:\n  tools:\n    approved:\n      forecast: v1:forecast\n      kept: v1:kept\n      weather: v1:weather\n"), "{}", plan.text);
        let flagged_too = super::plan("team/up", &approved, &review, true);
        assert_eq!((flagged_too.proposed, flagged_too.withheld), (3, 0));
        assert_eq!(yaml_key("a b"), "\"a b\"");
    }
}
