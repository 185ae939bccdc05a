//! Names an administrator reserves for namespaces (`--reserved-prefixes`, `--reserved-models`).
//!
//! Without a reservation a tool prefix (or an McpVirtualServer path, which shares `/mcp/<name>`)
//! and a model name go to the oldest resource that claims it, in whichever namespace: a team
//! that creates `github` first takes it from the team whose keys and routes depend on it. A
//! reservation gives a name, or every name matching `<start>*`, to the listed namespaces only;
//! a resource elsewhere that claims it is refused (`NameReserved`) however old it is. Where
//! several reservations match a name, the most specific one decides alone: the name itself,
//! else the longest start.
//!
//! Why an administrator's list rather than deriving ownership from `allowedNamespaces` (who may
//! call a server): calling and naming are different rights, the list is one place to read and
//! review, and a name nobody reserved behaves as before.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, Default)]
pub struct Reservations {
    prefixes: BTreeMap<String, BTreeSet<String>>,
    models: BTreeMap<String, BTreeSet<String>>,
}

/// What a name is: the thing the reservation protects, named in messages.
#[derive(Clone, Copy, Debug)]
pub(crate) enum NameKind {
    /// An McpServer's tool prefix or an McpVirtualServer's path (both are `/mcp/<name>`).
    Prefix,
    Model,
}

impl Reservations {
    /// Entries `<name>=<namespace>` (a name may end in `*`: every name that starts so); a name
    /// listed several times belongs to each namespace listed for it. The error names the flag.
    pub fn parse(prefixes: &[String], models: &[String]) -> Result<Self, String> {
        Ok(Reservations {
            prefixes: entries(prefixes, "--reserved-prefixes")?,
            models: entries(models, "--reserved-models")?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.prefixes.is_empty() && self.models.is_empty()
    }

    /// `Err(message)` when `name` is reserved and `namespace` is not among its namespaces.
    pub(crate) fn check(&self, kind: NameKind, name: &str, namespace: &str) -> Result<(), String> {
        let (table, what, flag) = match kind {
            NameKind::Prefix => (&self.prefixes, "tool prefix", "--reserved-prefixes"),
            NameKind::Model => (&self.models, "model name", "--reserved-models"),
        };
        // The most specific reservation decides alone (the name itself, else the longest start):
        // with `team-*=teams` and `team-a-*=team-a`, `team-a-jira` is team-a's, not also teams'.
        let Some(owners) = table
            .iter()
            .filter(|(pattern, _)| matches(pattern, name))
            .max_by_key(|(pattern, _)| (!pattern.ends_with('*'), pattern.len()))
            .map(|(_, namespaces)| namespaces)
        else {
            return Ok(());
        };
        if owners.contains(namespace) {
            return Ok(());
        }
        let owners: Vec<&str> = owners.iter().map(String::as_str).collect();
        Err(format!(
            "{what} {name:?} is reserved for namespace {} (the operator's {flag}); \
             namespace {namespace} may not use it",
            owners.join(", ")
        ))
    }
}

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(start) => name.starts_with(start),
        None => pattern == name,
    }
}

fn entries(list: &[String], flag: &str) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let mut table: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for entry in list.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let Some((name, namespace)) = entry.split_once('=') else {
            return Err(format!(
                "{flag}: {entry:?} is not <name>=<namespace> (e.g. github=platform)"
            ));
        };
        let (name, namespace) = (name.trim(), namespace.trim());
        let stem = name.strip_suffix('*').unwrap_or(name);
        if name.is_empty() || stem.contains('*') {
            return Err(format!(
                "{flag}: {entry:?}: the name must be a name, or a start followed by one '*'"
            ));
        }
        if namespace.is_empty() {
            return Err(format!("{flag}: {entry:?}: no namespace after '='"));
        }
        table
            .entry(name.to_string())
            .or_default()
            .insert(namespace.to_string());
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reservations(prefixes: &[&str], models: &[&str]) -> Reservations {
        let owned = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Reservations::parse(&owned(prefixes), &owned(models)).unwrap()
    }

    #[test]
    fn a_reserved_name_belongs_to_its_namespaces_only() {
        let r = reservations(
            &["github=platform", "github=ops", "team-a-*=team-a"],
            &["claude-*=ml"],
        );
        assert!(r.check(NameKind::Prefix, "github", "platform").is_ok());
        assert!(r.check(NameKind::Prefix, "github", "ops").is_ok());
        let e = r.check(NameKind::Prefix, "github", "team-b").unwrap_err();
        assert_eq!(
            e,
            "tool prefix \"github\" is reserved for namespace ops, platform (the operator's \
             --reserved-prefixes); namespace team-b may not use it"
        );
        assert!(r.check(NameKind::Prefix, "team-a-jira", "team-a").is_ok());
        assert!(r.check(NameKind::Prefix, "team-a-jira", "team-b").is_err());
        // Names nobody reserved, and models against prefixes, are not affected.
        assert!(r.check(NameKind::Prefix, "jira", "team-b").is_ok());
        assert!(r.check(NameKind::Prefix, "claude-sonnet", "team-b").is_ok());
        let e = r
            .check(NameKind::Model, "claude-sonnet", "team-b")
            .unwrap_err();
        assert!(e.contains("--reserved-models"), "{e}");
        assert!(r.check(NameKind::Model, "claude-sonnet", "ml").is_ok());
    }

    #[test]
    fn the_most_specific_reservation_decides_alone() {
        let r = reservations(
            &[
                "team-*=teams",
                "team-a-*=team-a",
                "git*=ops",
                "github=platform",
            ],
            &[],
        );
        // The longer start wins over the shorter one: teams may not take team-a's names.
        assert!(r.check(NameKind::Prefix, "team-a-jira", "team-a").is_ok());
        let e = r
            .check(NameKind::Prefix, "team-a-jira", "teams")
            .unwrap_err();
        assert!(e.contains("reserved for namespace team-a ("), "{e}");
        assert!(r.check(NameKind::Prefix, "team-b-jira", "teams").is_ok());
        assert!(r.check(NameKind::Prefix, "team-b-jira", "team-a").is_err());
        // The name itself wins over any start.
        assert!(r.check(NameKind::Prefix, "github", "platform").is_ok());
        assert!(r.check(NameKind::Prefix, "github", "ops").is_err());
        assert!(r.check(NameKind::Prefix, "gitlab", "ops").is_ok());
    }

    #[test]
    fn malformed_entries_are_refused_naming_the_flag() {
        let parse = |p: &str| Reservations::parse(&[p.to_string()], &[]).unwrap_err();
        assert!(parse("github").starts_with("--reserved-prefixes: \"github\""));
        assert!(parse("github=").contains("no namespace"));
        assert!(parse("git*hub=ops").contains("one '*'"));
        let e = Reservations::parse(&[], &["=ml".to_string()]).unwrap_err();
        assert!(e.starts_with("--reserved-models"), "{e}");
        assert!(Reservations::parse(&["".into()], &[]).unwrap().is_empty());
    }
}
