//! Which part of a cluster one operator install owns, so several installs can share a cluster:
//!
//! - the namespaces it watches (`--watch-namespaces`): with a list, every namespaced watch is
//!   one watch per listed namespace, so the operator never reads another namespace and its RBAC
//!   can be Roles in those namespaces alone (a label selector could not confine RBAC: a Role
//!   names its namespace, and the API server has no "namespaces labelled x" permission);
//! - its instance (`--instance`): the resources it takes are those labelled
//!   `switchboard.dev/instance=<instance>`; an install without an instance takes the resources
//!   without that label. The label selector is applied by the API server, so an install never
//!   sees, renders or writes the status of another install's resources.
//!
//! Pure: the API objects are made by the controller from what this says.

use std::collections::BTreeSet;

/// The label that assigns a resource to an install (see the module docs).
const INSTANCE_LABEL: &str = "switchboard.dev/instance";

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// `None`: every namespace (cluster-wide watches).
    namespaces: Option<BTreeSet<String>>,
    instance: Option<String>,
}

impl Scope {
    /// `namespaces` empty means the whole cluster; `instance` empty means none. Each namespace
    /// and the instance must be a DNS label (a namespace name; a label value); the error names
    /// the flag.
    pub fn new(namespaces: &[String], instance: &str) -> Result<Self, String> {
        let mut listed = BTreeSet::new();
        for namespace in namespaces
            .iter()
            .map(|n| n.trim())
            .filter(|n| !n.is_empty())
        {
            if !is_dns_label(namespace) {
                return Err(format!(
                    "--watch-namespaces: {namespace:?} is not a namespace name (a DNS label: \
                     lower-case letters, digits and '-', at most 63)"
                ));
            }
            listed.insert(namespace.to_string());
        }
        let instance = instance.trim();
        if !instance.is_empty() && !is_dns_label(instance) {
            return Err(format!(
                "--instance: {instance:?} is not a valid label value here (a DNS label: \
                 lower-case letters, digits and '-', at most 63)"
            ));
        }
        Ok(Scope {
            namespaces: (!listed.is_empty()).then_some(listed),
            instance: (!instance.is_empty()).then(|| instance.to_string()),
        })
    }

    /// The watched namespaces, or `None` for the whole cluster.
    pub(crate) fn namespaces(&self) -> Option<&BTreeSet<String>> {
        self.namespaces.as_ref()
    }

    /// The namespaces the operator's own Secrets may be in: the watched ones and its own (the
    /// snapshot Secret), or `None` for the whole cluster.
    pub(crate) fn with_own(&self, own: &str) -> Option<BTreeSet<String>> {
        self.namespaces.as_ref().map(|listed| {
            let mut all = listed.clone();
            all.insert(own.to_string());
            all
        })
    }

    pub fn instance(&self) -> Option<&str> {
        self.instance.as_deref()
    }

    /// The label selector of the resources this install takes (McpServer, McpVirtualServer,
    /// McpKey, ModelRoute, IdentityProvider).
    pub(crate) fn resource_selector(&self) -> String {
        match &self.instance {
            Some(instance) => format!("{INSTANCE_LABEL}={instance}"),
            None => format!("!{INSTANCE_LABEL}"),
        }
    }

    /// One line for the start-up log and for messages that explain why a reference is not
    /// found.
    pub fn describe(&self) -> String {
        let namespaces = match &self.namespaces {
            None => "every namespace".to_string(),
            Some(listed) => format!(
                "namespaces {}",
                listed.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
        };
        match &self.instance {
            Some(instance) => {
                format!("{namespaces}; resources labelled {INSTANCE_LABEL}={instance}")
            }
            None => format!("{namespaces}; resources without a {INSTANCE_LABEL} label"),
        }
    }
}

/// RFC 1123 label: what a namespace name and (a subset of) a label value may be.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_empty_scope_is_the_whole_cluster_and_unlabelled_resources() {
        let scope = Scope::new(&[], "").unwrap();
        assert_eq!(scope.namespaces(), None);
        assert_eq!(scope.with_own("switchboard"), None);
        assert_eq!(scope.resource_selector(), "!switchboard.dev/instance");
        // (blank entries, as `--watch-namespaces ""` gives, are no namespaces)
        assert_eq!(Scope::new(&list(&["", " "]), " ").unwrap(), scope);
    }

    #[test]
    fn listed_namespaces_and_an_instance_narrow_it() {
        let scope = Scope::new(&list(&["team-b", "team-a", "team-b"]), "blue").unwrap();
        let listed: Vec<&str> = scope
            .namespaces()
            .unwrap()
            .iter()
            .map(|s| s.as_str())
            .collect();
        assert_eq!(listed, ["team-a", "team-b"]);
        let own: Vec<String> = scope.with_own("sb").unwrap().into_iter().collect();
        assert_eq!(own, ["sb", "team-a", "team-b"]);
        assert_eq!(scope.resource_selector(), "switchboard.dev/instance=blue");
        assert_eq!(
            scope.describe(),
            "namespaces team-a, team-b; resources labelled switchboard.dev/instance=blue"
        );
    }

    #[test]
    fn bad_names_are_refused_naming_the_flag() {
        let e = Scope::new(&list(&["Team_A"]), "").unwrap_err();
        assert!(e.starts_with("--watch-namespaces: \"Team_A\""), "{e}");
        let e = Scope::new(&[], "blue green").unwrap_err();
        assert!(e.starts_with("--instance: \"blue green\""), "{e}");
    }
}
