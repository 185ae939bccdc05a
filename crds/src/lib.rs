//! The Kubernetes API of Switchboard: `McpServer`, `McpKey` and `ModelRoute` in
//! `switchboard.dev/v1alpha1`.
//!
//! Everything a standalone config file can say about a server, key or model can be said here; secrets
//! are references to Kubernetes Secrets in the resource's namespace, which the operator resolves
//! into the snapshot. Admission-time validation lives in the schema (patterns, enums) and in
//! CEL rules, so `kubectl apply` names the field that is wrong.

pub mod key;
pub mod model_route;
pub mod server;

pub use key::{McpKey, McpKeySpec, McpKeyStatus};
pub use model_route::{ModelRoute, ModelRouteSpec, ModelRouteStatus};
pub use server::{McpServer, McpServerSpec, McpServerStatus};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "switchboard.dev";
pub const VERSION: &str = "v1alpha1";

/// A key of a Secret in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret (same namespace as the resource).
    pub name: String,
    /// Key within the Secret's data.
    pub key: String,
}

/// Names a filter admits: `allow` empty means every name; `deny` always wins. Entries are exact
/// names or globs with `*`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolFilter {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 128)))]
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 128)))]
    pub deny: Vec<String>,
}

/// Request limits, enforced by each gateway replica on its own (N replicas admit up to N times
/// the figures). A request over a limit is answered 429 with `Retry-After` before any upstream
/// I/O.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestLimits {
    /// Requests in flight at once; a streamed answer counts until it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub concurrent_requests: Option<u32>,
    /// Sustained rate: `<count>/s`, `<count>/m` or `<count>/h` (e.g. `50/s`, `600/m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,8}/(s|m|h)$"))]
    pub rate: Option<String>,
    /// Requests admitted at once after a quiet spell; defaults to the rate's count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub burst: Option<u32>,
}

/// Kubernetes `metav1.Condition`, as status subresources carry it.
pub type Condition = k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// The generated CRD manifests, in the order they are written under `crds/`.
pub fn crd_manifests() -> Vec<(&'static str, String)> {
    use kube::CustomResourceExt;
    let yaml = |crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition| {
        serde_saphyr::to_string(crd).unwrap_or_default()
    };
    vec![
        ("switchboard.dev_mcpservers.yaml", yaml(&McpServer::crd())),
        ("switchboard.dev_mcpkeys.yaml", yaml(&McpKey::crd())),
        ("switchboard.dev_modelroutes.yaml", yaml(&ModelRoute::crd())),
    ]
}
