//! A review for people: which of a server's tools are not approved as they are (and in
//! which parts), what the checks found, and the approvals to write. The operator's
//! `tools review` (from a server's status) and the gateway's (from its own listing, standalone)
//! both print this.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::{Review, Standing};

/// One listed tool as a review names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReviewEntry {
    pub name: String,
    /// The digest of its definition as listed (what an approval names).
    pub digest: String,
    /// `changed`, `new`, `unpinned` or `approved` (approved, but flagged).
    pub state: String,
    /// The parts that differ from the approved definition.
    pub changed: Vec<String>,
    /// What the poisoning and shadowing checks found.
    pub findings: Vec<String>,
    /// Held back from every caller (pinning `hold`).
    pub held: bool,
}

impl ReviewEntry {
    /// The entry of a reviewed definition; `None` when there is nothing to review (approved
    /// as it is, and nothing found).
    pub fn of(name: &str, review: &Review, held: bool) -> Option<ReviewEntry> {
        if review.approved() && review.findings.is_empty() {
            return None;
        }
        let (state, changed) = match &review.standing {
            Standing::Approved => ("approved", Vec::new()),
            Standing::New => ("new", Vec::new()),
            Standing::Unpinned => ("unpinned", Vec::new()),
            Standing::Changed(parts) => ("changed", parts.iter().map(|p| p.to_string()).collect()),
        };
        Some(ReviewEntry {
            name: name.to_string(),
            digest: review.approval.to_string(),
            state: state.into(),
            changed,
            findings: review.findings.iter().map(ToString::to_string).collect(),
            held,
        })
    }
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

/// Where the approvals a review proposes are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// An McpServer (`spec.tools.approved`; the operator's review can apply it).
    McpServer,
    /// A server entry of the standalone config file (`tools.approved`).
    ConfigFile,
}

/// The review of `server` (as `target` names it) from its review entries and approvals. Pure.
pub fn plan(
    target: Target,
    server: &str,
    approved: &BTreeMap<String, String>,
    review: &[ReviewEntry],
    include_flagged: bool,
) -> Plan {
    let mut text = String::new();
    let mut proposal = approved.clone();
    let (mut proposed, mut withheld) = (0, 0);
    let kind = match target {
        Target::McpServer => "McpServer",
        Target::ConfigFile => "server",
    };
    let _ = writeln!(text, "{kind} {server}: {} tools to review", review.len());
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
        "\n# {proposed} approvals proposed{}; {}",
        if withheld > 0 {
            format!(", {withheld} flagged tools left out")
        } else {
            String::new()
        },
        match target {
            Target::McpServer => "apply with --apply, or paste into the McpServer:",
            Target::ConfigFile => "paste into the server's entry of the file:",
        }
    );
    let (head, indent) = match target {
        Target::McpServer => ("spec:\n  tools:\n    approved:", "      "),
        Target::ConfigFile => ("tools:\n  approved:", "    "),
    };
    let _ = writeln!(text, "{head}");
    for (name, digest) in &proposal {
        let _ = writeln!(text, "{indent}{}: {}", yaml_key(name), digest);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, state: &str, changed: &[&str], findings: &[&str]) -> ReviewEntry {
        ReviewEntry {
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
        let plan = plan(Target::McpServer, "team/up", &approved, &review, false);
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
        let flagged_too = super::plan(Target::ConfigFile, "up", &approved, &review, true);
        assert!(
            flagged_too
                .text
                .contains("\ntools:\n  approved:\n    add: v1:add\n"),
            "{}",
            flagged_too.text
        );
        assert_eq!((flagged_too.proposed, flagged_too.withheld), (3, 0));
        assert_eq!(yaml_key("a b"), "\"a b\"");
    }
}
