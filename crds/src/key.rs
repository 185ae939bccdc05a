//! `McpKey`: a client credential for the gateway and the scope it grants.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::{Condition, RequestLimits, ToolFilter};

/// A gateway key. The operator generates it (unless the named Secret already holds one under
/// `key`), writes it to `spec.secretName` in this namespace, and puts only its hash in the
/// snapshot. The key reaches servers and ModelRoutes of its own namespace, and those of other
/// namespaces that admit this one.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "switchboard.dev",
    version = "v1alpha1",
    kind = "McpKey",
    doc = "A gateway key (generated into a Secret) or the ServiceAccounts and people acting as it, and the servers, models and tools it reaches.",
    namespaced,
    status = "McpKeyStatus",
    shortname = "mcpk",
    category = "switchboard",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Secret","type":"string","jsonPath":".status.secretName"}"#,
    printcolumn = r#"{"name":"Expires","type":"string","jsonPath":".spec.expiresAt"}"#,
    // Why it is not Ready, with `kubectl get -o wide`.
    printcolumn = r#"{"name":"Reason","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct McpKeySpec {
    /// Secret (in this namespace) that holds the key under `key`; created if missing.
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
        length(max = 253)
    )]
    pub secret_name: String,
    /// Servers this key reaches: names in this namespace, or `<namespace>/<name>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
    /// Reaches every server and ModelRoute sharing one of these groups (subject to tenancy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_groups: Vec<String>,
    /// ModelRoutes this key may use: names in this namespace, or `<namespace>/<name>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 256),
        inner(
            regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
            length(max = 127)
        )
    )]
    pub models: Vec<String>,
    /// ServiceAccounts of this namespace whose tokens act as this key (a workload presents its
    /// projected token, audience `switchboard`, instead of the key): names, or `*` for every
    /// ServiceAccount of the namespace. A ServiceAccount is bound by one McpKey at most (the
    /// older one keeps it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(
            regex(pattern = r"^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$"),
            length(min = 1, max = 253)
        )
    )]
    pub service_accounts: Vec<String>,
    /// Filter over prefixed tool names (`<prefix>__<tool>`, globs with `*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("!has(self.allow) || !has(self.deny) || !self.allow.exists(a, a in self.deny)").message("a tool name cannot be both in spec.tools.allow and spec.tools.deny"))]
    pub tools: Option<ToolFilter>,
    /// Rules over the arguments of the tools this key admits (a CEL expression over `args`
    /// and `caller` that must hold), and arguments set from the caller that a call cannot set
    /// (`bind: {user: "${caller.subject}"}`). Checked on every tool call before the upstream is
    /// asked anything.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub arguments: Vec<ArgumentRule>,
    /// RFC 3339 instant after which the key is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(
            pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"
        ),
        length(max = 64)
    )]
    pub expires_at: Option<String>,
    /// People who act with this key's scope, signed in with an IdentityProvider of this
    /// namespace: by subject or by group. A person several keys name gets the union of their
    /// reach, under every one's limits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub people: Vec<PeopleBinding>,
    /// Limits on this key's requests (MCP, REST and LLM alike), per gateway replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("!has(self.burst) || has(self.rate)").message("spec.limits.burst needs spec.limits.rate"))]
    pub limits: Option<RequestLimits>,
}

/// What the operator observed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpKeyStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// A short, non-reversible label of the key (never the key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// The Secret that holds the key (field `key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// `Accepted` and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // A map keyed by type: server-side apply merges each writer's conditions, so one the
    // operator does not own survives its writes.
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// People of one identity provider: by subject, by group, or both.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.subjects) ? size(self.subjects) : 0) + (has(self.groups) ? size(self.groups) : 0) > 0").message("spec.people[] needs subjects, groups or both"))]
pub struct PeopleBinding {
    /// An IdentityProvider of this namespace, by name.
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
        length(max = 253)
    )]
    pub provider: String,
    /// Subjects (the provider's subject claim), exactly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 256)))]
    pub subjects: Vec<String>,
    /// Groups (the provider's groups claim), exactly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 256)))]
    pub groups: Vec<String>,
}

/// A rule over some tools' arguments.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArgumentRule {
    /// Prefixed tool names (`<prefix>__<tool>`, globs with `*`) the rule is for.
    #[schemars(length(min = 1, max = 64), inner(length(max = 128)))]
    pub tools: Vec<String>,
    /// A CEL expression that must be true: over `args` (the call's arguments, with the
    /// bindings set) and `caller` (`subject`, `namespace`, `key`, `kind`, `groups`, `claims`),
    /// e.g. `args.repo.startsWith("acme/")`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub rule: Option<String>,
    /// What a refused caller is told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
    /// Argument name → the value it takes from the caller: a text with `${caller.subject}`,
    /// `${caller.namespace}`, `${caller.key}`, `${caller.kind}` or `${caller.claims.<claim>}`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub bind: std::collections::BTreeMap<String, String>,
}
