//! `ModelRoute`: one LLM model behind the gateway (`/v1/messages`, `/v1/chat/completions`).

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Condition, SecretKeyRef, ToolFilter};

/// An LLM model the gateway fronts. Its id is `<namespace>/<name>`; clients pick it by one of
/// `modelNames` (default: the resource's name), which are unique across all ModelRoutes: the
/// older resource keeps a contested name. Keys reach it by name (`McpKey.spec.models`) or by
/// access group, under the same tenancy rules as servers.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "switchboard.dev",
    version = "v1alpha1",
    kind = "ModelRoute",
    doc = "An LLM model behind the gateway (`/v1/messages`, `/v1/chat/completions`): its provider, credential and the gateway tools attached to it.",
    namespaced,
    status = "ModelRouteStatus",
    shortname = "mr",
    category = "switchboard",
    printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".spec.provider"}"#,
    printcolumn = r#"{"name":"Model","type":"string","jsonPath":".status.modelNames"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    // Why it is not Ready, with `kubectl get -o wide`.
    printcolumn = r#"{"name":"Reason","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63").message("metadata.name of a ModelRoute must be a DNS-1123 label (at most 63 lower-case letters, digits and '-')")
)]
#[serde(rename_all = "camelCase")]
pub struct ModelRouteSpec {
    /// The `model` values clients send for this model (default: the resource's name). Unique
    /// across all ModelRoutes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(
            regex(pattern = r"^[^\x00-\x1f\x7f-\x9f]+$"),
            length(min = 1, max = 256)
        )
    )]
    pub model_names: Vec<String>,
    /// `anthropic` (the Messages API) or `openai` (Chat Completions, and servers compatible with
    /// it such as vLLM or Ollama).
    pub provider: ModelProvider,
    /// `anthropic`: the API root (`https://api.anthropic.com`). `openai`: the base URL including
    /// its version (`https://api.openai.com/v1`, `http://vllm.ns.svc:8000/v1`).
    #[schemars(regex(pattern = r"^https?://[^\s/]+(/\S*)?$"), length(max = 2048))]
    #[x_kube(validation = Rule::new("isURL(self) && url(self).getScheme() in ['http', 'https']").message("spec.baseUrl must be an http or https URL"))]
    pub base_url: String,
    /// The model id the provider gets (default: what the client sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(pattern = r"^[^\x00-\x1f\x7f-\x9f]+$"),
        length(min = 1, max = 256)
    )]
    pub upstream_model: Option<String>,
    /// The provider credential, from a Secret in this namespace (`x-api-key` for anthropic,
    /// `Authorization: Bearer` for openai). Leave out for a provider that needs none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_secret_ref: Option<SecretKeyRef>,
    /// Bound on every single provider call, a whole stream included (e.g. `10m`). Default 10m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"))]
    #[schemars(extend("default" = "10m"))]
    pub timeout: Option<String>,
    /// Most model calls one client request may cause while gateway tools run. Default 8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    #[schemars(extend("default" = 8))]
    pub max_iterations: Option<i32>,
    /// Tools of McpServers attached to this model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub tools: Vec<ModelTools>,
    /// Keys sharing one of these groups may use this model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_groups: Vec<String>,
    /// Namespaces besides this one whose keys may use this model (`*`: every namespace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_namespaces: Vec<String>,
    /// Every admitted key may use this model, whatever its models and groups say.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_all_keys: bool,
    /// TLS towards the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::UpstreamTls>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModelProvider {
    Anthropic,
    Openai,
}

/// Tools of one McpServer (or McpVirtualServer) attached to the model.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelTools {
    /// The McpServer or McpVirtualServer: a name in this namespace, or `<namespace>/<name>`
    /// (which must admit this namespace through its `allowedNamespaces`).
    #[schemars(
        regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
        length(min = 1, max = 127)
    )]
    pub server: String,
    /// Filter over the server's own (unprefixed) tool names, or a virtual server's presented
    /// names; globs with `*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("!has(self.allow) || !has(self.deny) || !self.allow.exists(a, a in self.deny)").message("a tool name cannot be both in spec.tools[].tools.allow and spec.tools[].tools.deny"))]
    pub tools: Option<ToolFilter>,
    /// `never` (default): the gateway runs the model's calls of these tools itself. `always`:
    /// the calls go to the client as ordinary tool calls, for it to run or refuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "never"))]
    pub require_approval: Option<RequireApproval>,
    /// `hidden` (default): the client never sees these tools, their calls or results.
    /// `visible`: they are shown the way the provider shows server-side tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "hidden"))]
    pub visibility: Option<ToolVisibility>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RequireApproval {
    Never,
    Always,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ToolVisibility {
    Hidden,
    Visible,
}

/// What the operator observed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelRouteStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The names clients send, in effect (spec.modelNames, or the name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_names: Vec<String>,
    /// `Accepted`, `Programmed`, `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // A map keyed by type: server-side apply merges each writer's conditions, so one the
    // operator does not own survives its writes.
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}
