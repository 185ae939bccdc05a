//! The Kubernetes API of Switchboard: `McpServer`, `McpVirtualServer`, `McpKey`, `ModelRoute`
//! and `IdentityProvider` in `switchboard.dev/v1alpha1`.
//!
//! Everything a standalone config file can say about a server, key or model can be said here; secrets
//! are references to Kubernetes Secrets in the resource's namespace, which the operator resolves
//! into the snapshot. Admission-time validation lives in the schema (patterns, enums) and in
//! CEL rules, so `kubectl apply` names the field that is wrong.

pub mod identity_provider;
pub mod key;
pub mod model_route;
pub mod openapi;
pub mod run;
pub mod server;
pub mod virtual_server;

pub use identity_provider::{IdentityProvider, IdentityProviderSpec, IdentityProviderStatus};
pub use key::{McpKey, McpKeySpec, McpKeyStatus, PeopleBinding};
pub use model_route::{ModelRoute, ModelRouteSpec, ModelRouteStatus};
pub use server::{McpServer, McpServerSpec, McpServerStatus, Pinning, ServerTools};
pub use virtual_server::{McpVirtualServer, McpVirtualServerSpec, McpVirtualServerStatus};

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A key of a Secret in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret (same namespace as the resource).
    pub name: String,
    /// Key within the Secret's data.
    pub key: String,
}

/// A key of a ConfigMap in the resource's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKeyRef {
    /// Name of the ConfigMap (same namespace as the resource).
    pub name: String,
    /// Key within the ConfigMap's data.
    pub key: String,
}

/// TLS towards an upstream (an McpServer's server, its token endpoint and metadata; a
/// ModelRoute's provider). Without it the public roots are trusted, plus the gateway-wide
/// bundle; there is no way to turn verification off.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamTls {
    /// PEM certificates of the authorities trusted for this upstream besides the public roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundleRef>,
    /// A `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`) the gateway presents (mTLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<ClientCertificateRef>,
    /// The name the upstream's certificate must be valid for (default: the URL's host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub server_name: Option<String>,
}

/// Where a CA bundle is: a key of a Secret or of a ConfigMap (exactly one).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.secretKeyRef) != has(self.configMapKeyRef)").message("tls.caBundle needs exactly one of secretKeyRef and configMapKeyRef"))]
pub struct CaBundleRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<ConfigMapKeyRef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientCertificateRef {
    /// A Secret of type `kubernetes.io/tls` in the resource's namespace.
    pub secret_name: String,
}

/// Names a filter admits: `allow` empty means every name; `deny` always wins. Entries are exact
/// names or globs with `*`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolFilter {
    /// Names admitted (exact or globs with `*`); empty admits every name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 128)))]
    pub allow: Vec<String>,
    /// Names refused even when allowed (exact or globs with `*`).
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
        (
            "switchboard.dev_mcpvirtualservers.yaml",
            yaml(&McpVirtualServer::crd()),
        ),
        ("switchboard.dev_mcpkeys.yaml", yaml(&McpKey::crd())),
        ("switchboard.dev_modelroutes.yaml", yaml(&ModelRoute::crd())),
        (
            "switchboard.dev_identityproviders.yaml",
            yaml(&IdentityProvider::crd()),
        ),
    ]
}
