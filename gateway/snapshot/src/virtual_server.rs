//! Virtual servers: tools (and prompts and resources) of several servers presented as one
//! endpoint, selected, renamed and reshaped by the platform team. A virtual server narrows what
//! its callers see and never widens what they reach (docs/architecture.md, invariant 12): each
//! tool stays a tool of its server, under that server's scope and filters.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{ServerSpec, ToolFilter, default_namespace};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VirtualServerSpec {
    /// Name, unique within the namespace; a DNS-1123 label. Served at `/mcp/<path>`.
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Identity used for scope (keys name it in `servers`). The operator sets
    /// `<namespace>/<name>`; a file may leave it out, and it then is the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The endpoint's path segment (`/mcp/<path>`); defaults to the name. Shares one space
    /// with the servers' `toolPrefix`es.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where its tools come from, in order: a name two sources select is the first one's.
    pub sources: Vec<VirtualSource>,
    #[serde(default)]
    pub access_groups: Vec<String>,
    /// Namespaces besides its own whose keys may use it (`*` admits every namespace).
    #[serde(default)]
    pub allowed_namespaces: Vec<String>,
    /// Every admitted key reaches it (each tool still only where its server is reached).
    #[serde(default)]
    pub allow_all_keys: bool,
}

impl VirtualServerSpec {
    pub fn id(&self) -> &str {
        self.id.as_deref().unwrap_or(&self.name)
    }
    pub fn path(&self) -> &str {
        self.path.as_deref().unwrap_or(&self.name)
    }
    /// Whether `reference` (a `sources[].server`) names `server`: its id, or its name when both
    /// live in this virtual server's namespace.
    pub fn names_server(&self, reference: &str, server: &ServerSpec) -> bool {
        reference == server.id() || (server.namespace == self.namespace && reference == server.name)
    }
}

/// One server's share of a virtual server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VirtualSource {
    /// Server id, or a name in the virtual server's namespace.
    pub server: String,
    /// Which of the server's tools (its own names); none when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolFilter>,
    /// Which of its prompts (their names); none when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<ToolFilter>,
    /// Which of its resources (their URIs, globs with `*`); none when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ToolFilter>,
    /// How selected tools are presented, by their own name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<ToolOverride>,
}

impl VirtualSource {
    /// Whether the source selects `name` of this kind (`tools`, `prompts`, `resources`).
    pub fn selects(&self, filter: &Option<ToolFilter>, name: &str) -> bool {
        filter.as_ref().is_some_and(|f| f.admits(name))
    }
}

/// How one tool is presented.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolOverride {
    /// The server's own name of the tool (it must be selected by `tools`).
    pub tool: String,
    /// The name clients see and call; the upstream still gets `tool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Replaces the server's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Appended to the (server's or replaced) description, after a blank line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description_suffix: Option<String>,
    /// Per parameter (a top-level property of the input schema).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, ParameterOverride>,
}

/// How one parameter is narrowed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParameterOverride {
    /// The parameter is hidden from clients and always sent with this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<Value>,
    /// Only these values are offered and accepted (a subset of the server's own `enum`, when it
    /// has one).
    #[serde(default, rename = "enum", skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Vec<Value>>,
    /// Replaces the parameter's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Names clients may send as tool names: what both LLM providers and MCP clients accept
/// (1 to 64 of `a-z A-Z 0-9 _ - .`).
pub fn is_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}
