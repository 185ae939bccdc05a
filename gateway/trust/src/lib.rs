//! Trust in tool definitions (docs/architecture.md, invariant 14): a tool's definition is
//! input from its upstream. This crate says, for one definition, whether it is the one the
//! platform team approved ([`Approval`]), what in it looks like poisoning ([`inspect()`]), and,
//! across servers, which tools imitate another server's ([`shadowing()`]). It decides nothing
//! about serving: the upstream plane holds back what a server's pinning says to hold, from
//! the [`Review`] made here.
//!
//! Pure and configuration-free, so the gateway (on every listing), the operator (in status and
//! the review it prints) and the tests all judge a definition the same way.

mod approval;
mod inspect;
mod plan;
mod shadow;

use std::collections::BTreeMap;

use serde_json::Value;

pub use approval::{Approval, BadApproval, Part};
pub use inspect::{DETAIL_CHARS, Finding, FindingKind, hidden_characters, inspect};
pub use plan::{Plan, ReviewEntry, Target, plan};
pub use shadow::{COPIED_DESCRIPTION_CHARS, Listed, ShadowKey, shadowing};

/// How a definition stands against a server's approvals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// The approved definition, as approved.
    Approved,
    /// No approval of this name while the server has approvals (a tool the upstream added).
    New,
    /// Approved under this name with another definition: these parts differ (empty when the
    /// change could not be placed in a part).
    Changed(Vec<Part>),
    /// The server has no approvals at all: nothing to compare with.
    Unpinned,
}

impl Standing {
    /// How a definition named `name` with digest `approval` stands against `approved` (tool
    /// name → approval text; a text that does not parse approves nothing).
    pub fn of(name: &str, approval: &Approval, approved: &BTreeMap<String, String>) -> Standing {
        if approved.is_empty() {
            return Standing::Unpinned;
        }
        match approved.get(name).map(|a| a.parse::<Approval>()) {
            None => Standing::New,
            Some(Ok(a)) if approval.matches(&a) => Standing::Approved,
            Some(Ok(a)) => Standing::Changed(approval.changed_parts(&a)),
            Some(Err(_)) => Standing::Changed(Part::ALL.to_vec()),
        }
    }

    /// The standing in words (`description changed`, `new (not approved)`, ...); `None` for an
    /// approved definition.
    pub fn words(&self) -> Option<String> {
        Some(match self {
            Standing::Approved => return None,
            Standing::Unpinned => "no tool of the server is approved yet".into(),
            Standing::New => "new (not approved)".into(),
            Standing::Changed(changed) if changed.is_empty() => "definition changed".into(),
            Standing::Changed(changed) => format!(
                "{} changed",
                changed
                    .iter()
                    .map(|p| p.field())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
    }
}

/// One definition reviewed: its digest, how it stands and what it carries.
#[derive(Debug, Clone)]
pub struct Review {
    pub approval: Approval,
    pub standing: Standing,
    pub findings: Vec<Finding>,
}

impl Review {
    /// Reviews `tool` (a definition as listed) against `approved` (tool name → approval text;
    /// texts that do not parse were refused when the configuration was loaded, and here
    /// approve nothing).
    pub fn of(tool: &Value, approved: &BTreeMap<String, String>) -> Review {
        let approval = Approval::of(tool);
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        let standing = Standing::of(name, &approval, approved);
        Review {
            approval,
            standing,
            findings: inspect(tool),
        }
    }

    /// Whether a server that holds what is not approved serves this definition: only as
    /// approved. (An approval is the platform team's word on that exact definition, findings
    /// and all: a false positive is approved like any tool, and a definition that changes
    /// afterwards is held again.)
    pub fn approved(&self) -> bool {
        self.standing == Standing::Approved
    }

    /// Whether there is anything to tell: a change against the approvals, or findings.
    pub fn flagged(&self) -> bool {
        !matches!(self.standing, Standing::Approved | Standing::Unpinned)
            || !self.findings.is_empty()
    }

    /// One line for people: `description changed; model-instruction in description (...)`.
    /// (Nothing pinned is no news on a served tool: only a held one says so, [`Self::held_why`].)
    pub fn summary(&self) -> String {
        let standing = match self.standing {
            Standing::Unpinned => None,
            _ => self.standing.words(),
        };
        standing
            .into_iter()
            .chain(self.findings.iter().map(ToString::to_string))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Why a server under `hold` holds this definition back: its standing, then its findings.
    pub fn held_why(&self) -> String {
        self.standing
            .words()
            .into_iter()
            .chain(self.findings.iter().map(ToString::to_string))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_review_tells_approved_new_changed_and_unpinned_apart() {
        let tool = json!({"name": "a", "description": "Adds."});
        let unpinned = Review::of(&tool, &BTreeMap::new());
        assert_eq!(unpinned.standing, Standing::Unpinned);
        assert!(!unpinned.flagged() && !unpinned.approved());
        let approvals: BTreeMap<String, String> =
            [("a".to_string(), unpinned.approval.to_string())].into();
        let approved = Review::of(&tool, &approvals);
        assert!(approved.approved() && !approved.flagged());
        let changed = Review::of(&json!({"name": "a", "description": "Adds!"}), &approvals);
        assert_eq!(changed.standing, Standing::Changed(vec![Part::Description]));
        assert_eq!(changed.summary(), "description changed");
        let new = Review::of(&json!({"name": "b"}), &approvals);
        assert_eq!(new.standing, Standing::New);
        assert!(new.flagged() && !new.approved());
    }
}
