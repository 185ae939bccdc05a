//! `McpVirtualServer`: tools (and prompts and resources) of several McpServers presented as one
//! endpoint, selected, renamed and reshaped by the platform team.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Condition, ToolFilter};

/// A curated set of tools served at `/mcp/<path>` (both protocol eras). It narrows what its
/// callers see and never widens what they reach: a caller reaches the virtual server under the
/// same rules as a server (its own namespace, `allowedNamespaces`, keys naming it or sharing an
/// access group), and each tool only where it could reach the McpServer behind it directly.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "switchboard.dev",
    version = "v1alpha1",
    kind = "McpVirtualServer",
    doc = "Tools of several McpServers selected, renamed and narrowed, served at `/mcp/<path>`: it narrows what callers see and never widens what they reach.",
    namespaced,
    status = "McpVirtualServerStatus",
    shortname = "mcpvs",
    category = "switchboard",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Tools","type":"integer","jsonPath":".status.toolCount"}"#,
    printcolumn = r#"{"name":"Path","type":"string","jsonPath":".status.path"}"#,
    // Why it is not Ready, with `kubectl get -o wide`.
    printcolumn = r#"{"name":"Reason","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63").message("metadata.name of an McpVirtualServer must be a DNS-1123 label (at most 63 lower-case letters, digits and '-')")
)]
#[serde(rename_all = "camelCase")]
pub struct McpVirtualServerSpec {
    /// The endpoint's path segment (`/mcp/<path>`); defaults to the resource's name. It shares
    /// one space with the McpServers' tool prefixes: the older resource keeps a contested one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), length(max = 63))]
    pub path: Option<String>,
    /// Shown to people; not used for routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where the tools come from, in order: a name two sources select is the first one's.
    #[schemars(length(min = 1, max = 64))]
    pub sources: Vec<VirtualSource>,
    /// Keys sharing one of these groups reach this virtual server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_groups: Vec<String>,
    /// Namespaces besides this one whose keys may reach it (`*`: every namespace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_namespaces: Vec<String>,
    /// Every admitted key reaches it (each tool still only where its McpServer is reached).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_all_keys: bool,
    /// Rules over the arguments of its tools (`tools`: the names it presents, globs with `*`)
    /// and arguments set from the caller, as an McpKey's `arguments`, for every caller that
    /// calls through it (the caller's key's own rules hold too). A bound argument is left out
    /// of the input schema it presents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub arguments: Vec<crate::key::ArgumentRule>,
    /// Search mode: list `find_tools` and `call_tool` (and the pinned tools) instead of every
    /// tool; the model finds the others by what they do and calls them through `call_tool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<ToolSearch>,
}

/// How a search-mode virtual server presents its tools.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolSearch {
    /// Presented tool names always listed beside the two search tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub pinned: Vec<String>,
    /// How many tools a search answers when the model asks for no number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub results: Option<u32>,
}

/// One McpServer's share of a virtual server.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualSource {
    /// The McpServer: a name in this namespace, or `<namespace>/<name>`.
    #[schemars(
        regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
        length(max = 127)
    )]
    pub server: String,
    /// Which of the server's tools, by their own names (none when left out; `allow: ["*"]`
    /// for all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolFilter>,
    /// Which of its prompts, by name (none when left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<ToolFilter>,
    /// Which of its resources, by URI (globs with `*`; none when left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ToolFilter>,
    /// How selected tools are presented, by their own name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub overrides: Vec<ToolOverride>,
}

/// How one tool is presented; the upstream still gets its own name and, for fixed
/// parameters, the fixed values.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolOverride {
    /// The server's own name of the tool (it must be selected by `tools`).
    #[schemars(length(min = 1, max = 128))]
    pub tool: String,
    /// The name clients see and call (1-64 of `a-z A-Z 0-9 _ - .`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.-]{1,64}$"))]
    pub name: Option<String>,
    /// The title clients show.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Replaces the server's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Appended to the (server's or replaced) description, after a blank line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description_suffix: Option<String>,
    /// Per parameter (a top-level property of the tool's input schema).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, ParameterOverride>,
}

/// How one parameter is narrowed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParameterOverride {
    /// The parameter is hidden from clients and always sent with this value (any JSON value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub fixed: Option<serde_json::Value>,
    /// Only these values are offered and accepted (narrowing the server's own `enum`, when it
    /// has one, is the author's care: the gateway checks a call's value against this list).
    #[serde(default, rename = "enum", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_values")]
    pub allowed: Option<Vec<serde_json::Value>>,
    /// Replaces the parameter's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

fn any_value(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "The parameter is hidden from clients and always sent with this value (any JSON value).",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

fn any_values(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Only these values are offered and accepted (narrowing the server's own `enum`, when it has one, is the author's care: the gateway checks a call's value against this list).",
        "type": "array",
        "maxItems": 256,
        "items": {"x-kubernetes-preserve-unknown-fields": true}
    })
}

/// What the operator observed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpVirtualServerStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The path in effect (`/mcp/<path>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Tools it presents: those its sources select among what their servers last listed with
    /// the gateway's credential. Left out while a source's server has not been listed, or
    /// uses each caller's own credential (what it presents then depends on the caller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_count: Option<i64>,
    /// `Accepted`, `Programmed`, `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // A map keyed by type: server-side apply merges each writer's conditions, so one the
    // operator does not own survives its writes.
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}
