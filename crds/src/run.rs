//! `McpServer.spec.run`: a server the operator runs, as a Deployment and a Service it owns.
//!
//! On the McpServer rather than a resource of its own: the route, the scope, the credential and
//! the workload of one server are one object to apply, review and delete, and the operator
//! points the route at the Service it made (there is no URL to keep in step by hand).

use k8s_openapi::api::core::v1::{
    Affinity, EnvFromSource, EnvVar, ResourceRequirements, SecurityContext, Toleration, Volume,
    VolumeMount,
};
use k8s_openapi::api::networking::v1::NetworkPolicyEgressRule;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The server's workload. With `transport: stdio` (the default) the container runs the
/// Switchboard stdio bridge, copied into the pod by an init container, in front of `command`:
/// the image is used as it is. With `streamableHttp` the container is the server itself,
/// listening on `port` and `path`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(validation = Rule::new("(has(self.transport) && self.transport == 'streamableHttp') || (has(self.command) && size(self.command) > 0)").message("spec.run.command is required with transport stdio: the bridge runs it, and the image's own entrypoint cannot be read from the cluster"))]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// The container image (e.g. `ghcr.io/org/server@sha256:...`).
    #[schemars(length(min = 1, max = 1024))]
    pub image: String,
    /// `Always`, `IfNotPresent` or `Never` (Kubernetes' default when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// The program (stdio: the server the bridge starts; streamableHttp: the container's
    /// command, else the image's entrypoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Arguments to the command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment of the server (values, Secret and ConfigMap keys, as in a Pod).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Whole ConfigMaps or Secrets as environment variables, as in a Pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<EnvFromSource>,
    /// `stdio` (default) or `streamableHttp`.
    #[serde(default)]
    #[schemars(extend("default" = "stdio"))]
    pub transport: RunTransport,
    /// streamableHttp: the port the server listens on (default 8080).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// streamableHttp: the MCP endpoint's path (default `/mcp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^/\S*$"))]
    pub path: Option<String>,
    /// Pods (default 1); ignored while `autoscaling` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    #[schemars(extend("default" = 1))]
    pub replicas: Option<i32>,
    /// A HorizontalPodAutoscaler on CPU for the Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// The server container's security context. Default: restricted (non-root user 65532,
    /// no privilege escalation, every capability dropped, RuntimeDefault seccomp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    /// Volumes of the pod (ConfigMap, Secret, emptyDir, PVC, ...), as in a Pod, and where the
    /// server mounts them. Validated by the API server when the operator applies the
    /// Deployment (an error shows in the `Running` condition): the whole Volume schema would
    /// make this CRD too large to `kubectl apply`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "pod_objects")]
    pub volumes: Vec<Volume>,
    /// Where `volumes` are mounted in the server's container, as in a Pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,
    /// The pods' ServiceAccount (default: the namespace's `default`, with no token mounted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Node labels the pods must run on, as in a Pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the pods tolerate, as in a Pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// As in a Pod; validated like `volumes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "pod_object")]
    pub affinity: Option<Affinity>,
    /// stdio: the bridge's bounds per pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdio: Option<StdioSettings>,
    /// The fence around the pods (by default): a NetworkPolicy `<name>-mcp` admitting only the
    /// gateway's pods, the operator's (its readiness probe lists the tools) and the server's
    /// own (stdio bridges hand legacy sessions to each other), on the server's port, and
    /// letting the pods reach only DNS (port 53), their own peers and what `egress` declares.
    /// Without it any pod in the cluster could call the tools past the gateway's keys, and the
    /// server could reach any Service. Enforced where the cluster's network plugin enforces
    /// NetworkPolicies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<RunNetwork>,
}

/// `spec.run.network`: the fence around a server the operator runs (see `Run::network`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunNetwork {
    /// `Fenced` (the default) or `Unmanaged`: no NetworkPolicy is made (and one made before is
    /// deleted), the namespace's own policies decide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Fenced"))]
    pub policy: Option<RunNetworkPolicy>,
    /// Where the pods may connect besides DNS and their peers: NetworkPolicy egress rules
    /// (`to`, `ports`), kept as they are (the API server validates them in the policy; a
    /// refusal shows in the `Running` condition). Empty: nowhere else.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "pod_objects")]
    pub egress: Vec<NetworkPolicyEgressRule>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum RunNetworkPolicy {
    #[default]
    Fenced,
    Unmanaged,
}

/// A list of Pod API objects, kept as they are (the API server validates them in the Deployment).
fn pod_objects(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
    })
}

fn pod_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RunTransport {
    #[default]
    Stdio,
    StreamableHttp,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("!has(self.minReplicas) || self.minReplicas <= self.maxReplicas").message("spec.run.autoscaling.minReplicas is above maxReplicas"))]
#[serde(rename_all = "camelCase")]
pub struct Autoscaling {
    /// Fewest pods (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    #[schemars(extend("default" = 1))]
    pub min_replicas: Option<i32>,
    /// Most pods the autoscaler may run.
    #[schemars(range(min = 1, max = 1000))]
    pub max_replicas: i32,
    /// Average CPU utilization to hold, percent of the request (default 80).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    #[schemars(extend("default" = 80))]
    pub target_cpu_utilization_percentage: Option<i32>,
}

/// How the stdio bridge runs the server's processes in each pod.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StdioSettings {
    /// Initialized processes kept for 2026-07-28 requests (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 256))]
    pub pool_size: Option<i32>,
    /// Processes alive at once per pod, pooled and legacy sessions together (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub max_processes: Option<i32>,
    /// A legacy session idle this long ends (e.g. `30m`, the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"))]
    pub session_idle: Option<String>,
}
