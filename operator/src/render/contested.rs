//! The one rule for a name two resources want (a server's tool prefix, a virtual server's path,
//! a model name, a key, a ServiceAccount a key binds, the one brokered identity provider): the
//! older resource keeps it, ties broken by namespace and then name. Every kind visits its
//! resources in that order ([`oldest_first`]) and records what each takes in a [`Claims`]; a
//! resource that finds a name of its taken is left out, its verdict naming the holder. (A name
//! an administrator reserved for other namespaces is refused before any claim:
//! [`crate::reservations`].)

use std::collections::HashMap;

use kube::ResourceExt;

/// `objects`, oldest first: by creation time, then namespace, then name.
pub(crate) fn oldest_first<K: kube::Resource>(objects: &[K]) -> Vec<&K> {
    let mut ordered: Vec<&K> = objects.iter().collect();
    ordered.sort_by_key(|o| {
        (
            o.meta().creation_timestamp.as_ref().map(|t| t.0),
            o.namespace(),
            o.name_any(),
        )
    });
    ordered
}

/// The names taken so far, each with its holder as a verdict names it.
#[derive(Default)]
pub(crate) struct Claims(HashMap<String, String>);

impl Claims {
    /// Who holds `name`, if anyone does.
    pub(crate) fn holder(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// `name` is `holder`'s from now on (a resource takes its names once it is accepted).
    pub(crate) fn take(&mut self, name: impl Into<String>, holder: impl Into<String>) {
        self.0.insert(name.into(), holder.into());
    }
}

impl FromIterator<(String, String)> for Claims {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(names: I) -> Self {
        Claims(names.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn key(ns: &str, name: &str, age: Option<i64>) -> ConfigMap {
        let mut k = ConfigMap::default();
        k.metadata.name = Some(name.into());
        k.metadata.namespace = Some(ns.into());
        k.metadata.creation_timestamp = age
            .map(|s| Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 - s).unwrap()));
        k
    }

    #[test]
    fn the_older_resource_comes_first_and_ties_break_by_namespace_then_name() {
        let keys = [
            key("b", "x", Some(10)),
            key("a", "y", Some(10)),
            key("a", "x", Some(10)),
            key("z", "old", Some(99)),
        ];
        let order: Vec<String> = oldest_first(&keys)
            .iter()
            .map(|k| format!("{}/{}", k.namespace().unwrap_or_default(), k.name_any()))
            .collect();
        assert_eq!(order, ["z/old", "a/x", "a/y", "b/x"]);
    }

    #[test]
    fn a_claimed_name_names_its_holder() {
        let mut claims = Claims::default();
        assert_eq!(claims.holder("github"), None);
        claims.take("github", "team-a/github");
        assert_eq!(claims.holder("github"), Some("team-a/github"));
        let seeded: Claims = [(
            "p".to_string(),
            "the tool prefix of McpServer a/p".to_string(),
        )]
        .into_iter()
        .collect();
        assert_eq!(seeded.holder("p"), Some("the tool prefix of McpServer a/p"));
    }
}
