//! A client key as the gateway knows it (never the key itself), and what it reaches: the
//! tenancy rules keys, ServiceAccounts and people all act under.

use std::time::SystemTime;

use switchboard_snapshot::{KeySpec, ModelSpec, ServerSpec, ToolFilter, key_hash};

/// A client key, as the gateway knows it: never the key itself.
#[derive(Debug)]
pub struct Key {
    /// `<namespace>/<name>`: the identity its limits are kept under across snapshots.
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub digest: [u8; 32],
    pub fingerprint: String,
    pub servers: Vec<String>,
    pub access_groups: Vec<String>,
    /// Model ids (or names in the key's namespace) the key names.
    pub models: Vec<String>,
    pub tools: ToolFilter,
    /// Argument rules and bindings (`arguments`), compiled.
    pub(crate) arguments: Vec<crate::arguments::CompiledRule>,
    pub expires_at: Option<SystemTime>,
}

/// What tenancy needs to know of a server or a model to decide whether a key reaches it.
struct Reachable<'a> {
    namespace: &'a str,
    id: &'a str,
    name: &'a str,
    access_groups: &'a [String],
    allowed_namespaces: &'a [String],
    allow_all_keys: bool,
}

impl Key {
    pub(crate) fn from_spec(spec: &KeySpec) -> Option<Key> {
        let digest = key_hash::parse_hash(spec.hash.as_deref()?)?;
        Some(Key {
            id: crate::limits::key_id(spec),
            name: spec.name.clone(),
            namespace: spec.namespace.clone(),
            fingerprint: key_hash::fingerprint(&digest),
            digest,
            servers: spec.servers.clone(),
            access_groups: spec.access_groups.clone(),
            models: spec.models.clone(),
            tools: spec.tools.clone(),
            arguments: spec
                .arguments
                .iter()
                .filter_map(crate::arguments::CompiledRule::compile)
                .collect(),
            // Validation refused unparsable instants before a table is built.
            expires_at: spec.expiry().and_then(Result::ok),
        })
    }

    pub(crate) fn is_expired(&self, now: SystemTime) -> bool {
        self.expires_at.is_some_and(|at| now >= at)
    }

    /// Whether this key reaches `server` (docs/architecture.md, invariant 4): the server's owner must admit
    /// the key's namespace, and then the server must be open to all keys or named by the key
    /// (by id, or by name within the key's namespace) or share an access group with it.
    pub fn reaches(&self, server: &ServerSpec) -> bool {
        self.reaches_one(
            &self.servers,
            Reachable {
                namespace: &server.namespace,
                id: server.id(),
                name: &server.name,
                access_groups: &server.access_groups,
                allowed_namespaces: &server.allowed_namespaces,
                allow_all_keys: server.allow_all_keys,
            },
        )
    }

    /// Whether this key reaches a virtual server: the same rules as a server (its tools are
    /// then still only those of servers the key reaches).
    pub fn reaches_virtual(&self, vs: &switchboard_snapshot::VirtualServerSpec) -> bool {
        self.reaches_one(
            &self.servers,
            Reachable {
                namespace: &vs.namespace,
                id: vs.id(),
                name: &vs.name,
                access_groups: &vs.access_groups,
                allowed_namespaces: &vs.allowed_namespaces,
                allow_all_keys: vs.allow_all_keys,
            },
        )
    }

    /// Whether this key may use `model`: the same tenancy rules as servers, with the key's
    /// `models` list in place of `servers`.
    pub fn reaches_model(&self, model: &ModelSpec) -> bool {
        self.reaches_one(
            &self.models,
            Reachable {
                namespace: &model.namespace,
                id: model.id(),
                name: &model.name,
                access_groups: &model.access_groups,
                allowed_namespaces: &model.allowed_namespaces,
                allow_all_keys: model.allow_all_keys,
            },
        )
    }

    fn reaches_one(&self, named: &[String], target: Reachable<'_>) -> bool {
        let admitted = target.namespace == self.namespace
            || target
                .allowed_namespaces
                .iter()
                .any(|ns| ns == "*" || *ns == self.namespace);
        if !admitted {
            return false;
        }
        target.allow_all_keys
            || named.iter().any(|s| {
                s == target.id || (target.namespace == self.namespace && *s == target.name)
            })
            || self
                .access_groups
                .iter()
                .any(|g| target.access_groups.contains(g))
    }

    /// Whether this key may use the tool `tool` of `server` (key filters see prefixed names).
    pub(crate) fn admits_tool(&self, server: &ServerSpec, tool: &str) -> bool {
        if self.tools.allow.is_empty() && self.tools.deny.is_empty() {
            return true;
        }
        self.tools
            .admits(&crate::route::prefixed_name(server.prefix(), tool))
    }
}
