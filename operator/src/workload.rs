//! `spec.run`: the objects the operator keeps for a server it runs, and what its pods say. Pure:
//! `crate::workload_apply` writes the objects, `crate::status` turns `Health` into
//! conditions.
//!
//! Per McpServer `<name>` (each name cut to 63 characters with a hash when longer):
//!
//! - Deployment `<name>-mcp`: the server's pods. With `transport: stdio` an init container
//!   copies the stdio bridge out of the Switchboard image (`switchboard-stdio-bridge install`)
//!   into an emptyDir, and the server container runs it in front of `spec.run.command`, so the
//!   server's image is used unchanged;
//! - Service `<name>-mcp`: what the route points at (`http://<name>-mcp.<ns>.svc:<port>`);
//! - Service `<name>-mcp-peers` (stdio): headless, the ready pods' addresses, which the bridges
//!   rank a legacy session's home over (`--peers`);
//! - Secret `<name>-mcp-bridge` (stdio): the key the bridges seal session ids with;
//! - HorizontalPodAutoscaler `<name>-mcp` with `spec.run.autoscaling`;
//! - NetworkPolicy `<name>-mcp` unless `spec.run.network.policy: Unmanaged`: the fence
//!   (`network_policy`). Applied before the Deployment, so no pod runs unfenced.
//!
//! All carry the McpServer as their controller owner: deleting it deletes them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec, MetricSpec,
    MetricTarget, ResourceMetricSource,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, ObjectFieldSelector, Pod, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    SeccompProfile, SecretVolumeSource, SecurityContext, Service, ServicePort, ServiceSpec,
    TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sha2::Digest as _;
use switchboard_crds::McpServer;
use switchboard_crds::run::{Run, RunNetworkPolicy, RunTransport};

use crate::labels::MANAGED_BY;

/// The port the stdio bridge listens on in the pod.
const BRIDGE_PORT: i32 = 8080;
const DEFAULT_HTTP_PORT: i32 = 8080;
/// The label that names the McpServer a workload object belongs to.
pub(crate) const SERVER_LABEL: &str = "switchboard.dev/mcpserver";
const COMPONENT: (&str, &str) = ("app.kubernetes.io/component", "mcp-server");
/// The key field of the bridge's session key Secret.
pub(crate) const BRIDGE_KEY_FIELD: &str = "key";
const BRIDGE_DIR: &str = "/switchboard";
const BRIDGE_KEY_DIR: &str = "/switchboard-key";
/// The label the API server puts on every namespace: its name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// The non-root user the restricted default runs as (distroless `nonroot`).
const NONROOT: i64 = 65532;

/// What the operator was told about the cluster.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The image holding `switchboard-stdio-bridge` (the gateway's image).
    pub bridge_image: String,
    /// The pods a server's fence admits besides its own: the gateway's (they call it) and the
    /// operator's (its probe lists the server's tools).
    pub admitted: Vec<PodGroup>,
}

/// Pods by namespace and labels, as a NetworkPolicy peer selects them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodGroup {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
}

/// Pod labels given to the operator that cannot select the pods a fence admits.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PodLabelsError {
    #[error("`{0}` is not key=value")]
    NotAPair(String),
    #[error("no labels: the fence would admit every pod of the namespace")]
    Empty,
}

impl PodGroup {
    /// `key=value,key=value` (the form of a label selector made only of equalities).
    pub fn parse(namespace: &str, labels: &str) -> Result<PodGroup, PodLabelsError> {
        let mut parsed = BTreeMap::new();
        for pair in labels.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .filter(|(k, _)| !k.trim().is_empty())
                .ok_or_else(|| PodLabelsError::NotAPair(pair.to_string()))?;
            parsed.insert(key.trim().to_string(), value.trim().to_string());
        }
        if parsed.is_empty() {
            return Err(PodLabelsError::Empty);
        }
        Ok(PodGroup {
            namespace: namespace.to_string(),
            labels: parsed,
        })
    }
}

/// The objects' names for McpServer `name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Names {
    pub workload: String,
    pub peers: String,
    pub bridge_key: String,
}

impl Names {
    pub fn of(name: &str) -> Names {
        Names {
            workload: label_name(name, "-mcp"),
            peers: label_name(name, "-mcp-peers"),
            bridge_key: label_name(name, "-mcp-bridge"),
        }
    }
}

/// `base + suffix` as a DNS label (at most 63 characters): a long base is cut and a hash of
/// the whole base keeps two long names apart.
fn label_name(base: &str, suffix: &str) -> String {
    let whole = format!("{base}{suffix}");
    if whole.len() <= 63 {
        return whole;
    }
    let digest: [u8; 32] = sha2::Sha256::digest(base.as_bytes()).into();
    let tag: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    let keep = 63 - suffix.len() - tag.len() - 1;
    format!("{}-{tag}{suffix}", base[..keep].trim_end_matches('-'))
}

pub fn port(run: &Run) -> i32 {
    match run.transport {
        RunTransport::Stdio => BRIDGE_PORT,
        RunTransport::StreamableHttp => run.port.unwrap_or(DEFAULT_HTTP_PORT),
    }
}

/// The route's URL: the Service the operator made (`<svc>.<ns>.svc`, as `spec.service` is
/// addressed: the pods' DNS search path completes it whatever the cluster's domain).
pub fn url(name: &str, namespace: &str, run: &Run) -> String {
    let path = match run.transport {
        RunTransport::Stdio => "/mcp",
        RunTransport::StreamableHttp => run.path.as_deref().unwrap_or("/mcp"),
    };
    format!(
        "http://{}.{namespace}.svc:{}{path}",
        Names::of(name).workload,
        port(run)
    )
}

/// The labels of every object of a server's workload.
pub fn labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string()),
        (COMPONENT.0.to_string(), COMPONENT.1.to_string()),
        (SERVER_LABEL.to_string(), name.to_string()),
    ])
}

/// The label selector of a server's pods (and the watch of all of them).
pub(crate) fn pod_selector() -> String {
    format!(
        "{}={},{}={}",
        MANAGED_BY.0, MANAGED_BY.1, COMPONENT.0, COMPONENT.1
    )
}

fn meta(server: &McpServer, name: String) -> ObjectMeta {
    let owner: Option<OwnerReference> = kube::Resource::controller_owner_ref(server, &());
    ObjectMeta {
        name: Some(name),
        namespace: kube::ResourceExt::namespace(server),
        labels: Some(labels(&kube::ResourceExt::name_any(server))),
        owner_references: owner.map(|o| vec![o]),
        ..Default::default()
    }
}

/// The restricted container context (Pod Security Standards, `restricted`).
fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        run_as_non_root: Some(true),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(read_only),
        ..Default::default()
    }
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

/// The bridge's arguments: where it listens, who its peers are, its key, its bounds, then the
/// server's command.
fn bridge_args(server: &McpServer, run: &Run) -> Vec<String> {
    let name = kube::ResourceExt::name_any(server);
    let namespace = kube::ResourceExt::namespace(server).unwrap_or_default();
    let names = Names::of(&name);
    let mut args = vec![
        format!("--listen=0.0.0.0:{BRIDGE_PORT}"),
        format!("--advertise=$(POD_IP):{BRIDGE_PORT}"),
        format!("--peers={}.{namespace}.svc:{BRIDGE_PORT}", names.peers),
        format!("--session-key-file={BRIDGE_KEY_DIR}/{BRIDGE_KEY_FIELD}"),
    ];
    if let Some(stdio) = &run.stdio {
        if let Some(n) = stdio.pool_size {
            args.push(format!("--pool-size={n}"));
        }
        if let Some(n) = stdio.max_processes {
            args.push(format!("--max-processes={n}"));
        }
        if let Some(idle) = &stdio.session_idle {
            args.push(format!("--session-idle={idle}"));
        }
    }
    args.push("--".into());
    args.extend(run.command.clone().unwrap_or_default());
    args.extend(run.args.iter().cloned());
    args
}

pub(crate) fn deployment(server: &McpServer, run: &Run, settings: &Settings) -> Deployment {
    let name = kube::ResourceExt::name_any(server);
    let names = Names::of(&name);
    let stdio = run.transport == RunTransport::Stdio;
    let port = port(run);
    let mut env = vec![EnvVar {
        name: "POD_IP".into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "status.podIP".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }];
    env.extend(run.env.iter().cloned());
    let mut mounts = run.volume_mounts.clone();
    let mut volumes = run.volumes.clone();
    // Most servers write somewhere (npm's cache, Python's bytecode): a /tmp of their own.
    if !mounts.iter().any(|m| m.mount_path == "/tmp") {
        mounts.push(mount("tmp", "/tmp", false));
        volumes.push(empty_dir("tmp"));
    }
    let (command, args, probe) = if stdio {
        mounts.push(mount("switchboard-bridge", BRIDGE_DIR, true));
        mounts.push(mount("switchboard-bridge-key", BRIDGE_KEY_DIR, true));
        volumes.push(empty_dir("switchboard-bridge"));
        volumes.push(Volume {
            name: "switchboard-bridge-key".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(names.bridge_key.clone()),
                ..Default::default()
            }),
            ..Default::default()
        });
        let http = |path: &str| Probe {
            http_get: Some(HTTPGetAction {
                path: Some(path.into()),
                port: IntOrString::Int(BRIDGE_PORT),
                ..Default::default()
            }),
            period_seconds: Some(2),
            ..Default::default()
        };
        (
            Some(vec![format!("{BRIDGE_DIR}/switchboard-stdio-bridge")]),
            bridge_args(server, run),
            (Some(http("/readyz")), Some(http("/healthz"))),
        )
    } else {
        let tcp = Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(port),
                ..Default::default()
            }),
            period_seconds: Some(2),
            ..Default::default()
        };
        (run.command.clone(), run.args.clone(), (Some(tcp), None))
    };
    let server_container = Container {
        name: "server".into(),
        image: Some(run.image.clone()),
        image_pull_policy: run.image_pull_policy.clone(),
        command,
        args: Some(args),
        env: Some(env),
        env_from: (!run.env_from.is_empty()).then(|| run.env_from.clone()),
        ports: Some(vec![ContainerPort {
            name: Some("mcp".into()),
            container_port: port,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        // A container that exits with an error and wrote no termination message reports its
        // log's tail instead (the bridge's last line says why the server cannot start).
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        readiness_probe: probe.0,
        liveness_probe: probe.1,
        resources: run.resources.clone(),
        security_context: Some(run.security_context.clone().unwrap_or_else(restricted)),
        volume_mounts: Some(mounts),
        ..Default::default()
    };
    let init = stdio.then(|| Container {
        name: "install-bridge".into(),
        image: Some(settings.bridge_image.clone()),
        command: Some(vec!["switchboard-stdio-bridge".into()]),
        args: Some(vec!["install".into(), BRIDGE_DIR.into()]),
        security_context: Some(restricted()),
        volume_mounts: Some(vec![mount("switchboard-bridge", BRIDGE_DIR, false)]),
        ..Default::default()
    });
    let labels = labels(&name);
    Deployment {
        metadata: meta(server, names.workload.clone()),
        spec: Some(DeploymentSpec {
            replicas: run
                .autoscaling
                .is_none()
                .then_some(run.replicas.unwrap_or(1)),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..Default::default()
            },
            // A new pod is ready before an old one goes: capacity holds through a rollout.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: run.service_account_name.clone(),
                    automount_service_account_token: Some(run.service_account_name.is_some()),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(NONROOT),
                        run_as_group: Some(NONROOT),
                        fs_group: Some(NONROOT),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    init_containers: init.map(|c| vec![c]),
                    containers: vec![server_container],
                    volumes: Some(volumes),
                    node_selector: (!run.node_selector.is_empty())
                        .then(|| run.node_selector.clone()),
                    tolerations: (!run.tolerations.is_empty()).then(|| run.tolerations.clone()),
                    affinity: run.affinity.clone(),
                    termination_grace_period_seconds: Some(30),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

fn service_of(server: &McpServer, name: String, port: i32, headless: bool) -> Service {
    let labels = labels(&kube::ResourceExt::name_any(server));
    Service {
        metadata: meta(server, name),
        spec: Some(ServiceSpec {
            cluster_ip: headless.then(|| "None".into()),
            selector: Some(labels),
            ports: Some(vec![ServicePort {
                name: Some("mcp".into()),
                port,
                target_port: Some(IntOrString::String("mcp".into())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// The Service the route points at.
pub fn service(server: &McpServer, run: &Run) -> Service {
    service_of(
        server,
        Names::of(&kube::ResourceExt::name_any(server)).workload,
        port(run),
        false,
    )
}

/// The bridges' peers: headless, ready pods only.
pub fn peers(server: &McpServer, run: &Run) -> Option<Service> {
    (run.transport == RunTransport::Stdio).then(|| {
        service_of(
            server,
            Names::of(&kube::ResourceExt::name_any(server)).peers,
            BRIDGE_PORT,
            true,
        )
    })
}

pub(crate) fn autoscaler(server: &McpServer, run: &Run) -> Option<HorizontalPodAutoscaler> {
    let scaling = run.autoscaling.as_ref()?;
    let names = Names::of(&kube::ResourceExt::name_any(server));
    Some(HorizontalPodAutoscaler {
        metadata: meta(server, names.workload.clone()),
        spec: Some(HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".into()),
                kind: "Deployment".into(),
                name: names.workload,
            },
            min_replicas: scaling.min_replicas,
            max_replicas: scaling.max_replicas,
            metrics: Some(vec![MetricSpec {
                type_: "Resource".into(),
                resource: Some(ResourceMetricSource {
                    name: "cpu".into(),
                    target: MetricTarget {
                        type_: "Utilization".into(),
                        average_utilization: Some(
                            scaling.target_cpu_utilization_percentage.unwrap_or(80),
                        ),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    })
}

/// The server's fence, unless `spec.run.network.policy` is `Unmanaged`: its pods admit
/// connections only from the gateway's and the operator's pods and from each other, on the
/// server's port; they connect only to DNS (port 53, to any address: the cluster's resolver
/// may be a pod, the node or a node-local cache), their peers (stdio: the bridges hand legacy
/// sessions over) and the rules `spec.run.network.egress` declares. Kubelet probes come from
/// the node, which NetworkPolicy implementations let through.
pub(crate) fn network_policy(
    server: &McpServer,
    run: &Run,
    settings: &Settings,
) -> Option<NetworkPolicy> {
    let network = run.network.clone().unwrap_or_default();
    if network.policy == Some(RunNetworkPolicy::Unmanaged) {
        return None;
    }
    let name = kube::ResourceExt::name_any(server);
    let own = LabelSelector {
        match_labels: Some(labels(&name)),
        ..Default::default()
    };
    let tcp = |port: i32| NetworkPolicyPort {
        port: Some(IntOrString::Int(port)),
        protocol: Some("TCP".into()),
        ..Default::default()
    };
    let mut from: Vec<NetworkPolicyPeer> = settings
        .admitted
        .iter()
        .map(|group| NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    NAMESPACE_NAME_LABEL.to_string(),
                    group.namespace.clone(),
                )])),
                ..Default::default()
            }),
            pod_selector: Some(LabelSelector {
                match_labels: Some(group.labels.clone()),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    from.push(NetworkPolicyPeer {
        pod_selector: Some(own.clone()),
        ..Default::default()
    });
    let mut egress = vec![NetworkPolicyEgressRule {
        ports: Some(vec![
            NetworkPolicyPort {
                port: Some(IntOrString::Int(53)),
                protocol: Some("UDP".into()),
                ..Default::default()
            },
            tcp(53),
        ]),
        to: None,
    }];
    if run.transport == RunTransport::Stdio {
        egress.push(NetworkPolicyEgressRule {
            ports: Some(vec![tcp(BRIDGE_PORT)]),
            to: Some(vec![NetworkPolicyPeer {
                pod_selector: Some(own.clone()),
                ..Default::default()
            }]),
        });
    }
    egress.extend(network.egress.iter().cloned());
    Some(NetworkPolicy {
        metadata: meta(server, Names::of(&name).workload),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(own),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(from),
                ports: Some(vec![tcp(port(run))]),
            }]),
            egress: Some(egress),
        }),
    })
}

/// What a server's pods say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Health {
    /// Pods the Deployment wants (its spec, or the autoscaler's choice).
    pub desired: i32,
    pub replicas: i32,
    pub ready: i32,
    /// Why pods do not run, from the first failing one (by name).
    pub failure: Option<Failure>,
    /// The Deployment exists.
    pub created: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: String,
    pub message: String,
}

/// Waiting reasons that mean the pod will not run without a change (or a retry that has
/// failed already).
const FAILING: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

pub(crate) fn health(deployment: Option<&Deployment>, pods: &[Arc<Pod>]) -> Health {
    let desired = deployment
        .and_then(|d| d.spec.as_ref())
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let mut pods: Vec<&Pod> = pods
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let ready = pods.iter().filter(|p| pod_ready(p)).count() as i32;
    let failure = pods.iter().find_map(|p| pod_failure(p));
    Health {
        desired,
        replicas: pods.len() as i32,
        ready,
        failure,
        created: deployment.is_some(),
    }
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_failure(pod: &Pod) -> Option<Failure> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let status = pod.status.as_ref()?;
    if let Some(c) = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    }) {
        return Some(Failure {
            reason: "Unschedulable".into(),
            message: format!(
                "pod {name} cannot be scheduled: {}",
                c.message.clone().unwrap_or_default()
            ),
        });
    }
    let containers = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for c in containers {
        let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
        let waiting = c.state.as_ref().and_then(|s| s.waiting.as_ref());
        if let Some(w) = waiting
            && let Some(reason) = w.reason.as_deref()
            && FAILING.contains(&reason)
        {
            if reason == "CrashLoopBackOff"
                && let Some(t) = last
            {
                let oom = t.reason.as_deref() == Some("OOMKilled");
                return Some(Failure {
                    reason: if oom {
                        "OOMKilled".into()
                    } else {
                        "CrashLoopBackOff".into()
                    },
                    message: format!(
                        "pod {name}: container {} keeps exiting; it last exited with code {}{}{}",
                        c.name,
                        t.exit_code,
                        t.reason
                            .as_deref()
                            .map(|r| format!(" ({r})"))
                            .unwrap_or_default(),
                        last_words(t.message.as_deref())
                    ),
                });
            }
            return Some(Failure {
                reason: reason.into(),
                message: format!(
                    "pod {name}: container {}: {}",
                    c.name,
                    w.message.clone().unwrap_or_else(|| reason.to_string())
                ),
            });
        }
        if let Some(t) = c.state.as_ref().and_then(|s| s.terminated.as_ref()) {
            if t.reason.as_deref() == Some("OOMKilled") {
                return Some(Failure {
                    reason: "OOMKilled".into(),
                    message: format!(
                        "pod {name}: container {} ran out of memory (exit code {})",
                        c.name, t.exit_code
                    ),
                });
            }
            // Exited and not restarted yet (the crash before a CrashLoopBackOff).
            if t.exit_code != 0 {
                return Some(Failure {
                    reason: t.reason.clone().unwrap_or_else(|| "Error".into()),
                    message: format!(
                        "pod {name}: container {} exited with code {}{}",
                        c.name,
                        t.exit_code,
                        last_words(t.message.as_deref())
                    ),
                });
            }
        }
    }
    None
}

/// `": <the last line>"` of a termination message (with FallbackToLogsOnError, the log's tail),
/// at most 300 characters; empty without one.
fn last_words(message: Option<&str>) -> String {
    let Some(line) = message.and_then(|m| m.lines().rev().map(str::trim).find(|l| !l.is_empty()))
    else {
        return String::new();
    };
    let mut end = line.len().min(300);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!(": {}", &line[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
        PodCondition, PodStatus,
    };
    use switchboard_crds::McpServerSpec;

    fn server(name: &str, run: Run) -> McpServer {
        let spec: McpServerSpec = serde_json::from_value(serde_json::json!({})).unwrap();
        let mut s = McpServer::new(
            name,
            McpServerSpec {
                run: Some(run),
                ..spec
            },
        );
        s.metadata.namespace = Some("tools".into());
        s.metadata.uid = Some("uid-1".into());
        s
    }

    fn settings() -> Settings {
        Settings {
            bridge_image: "ghcr.io/switchboard-dev/switchboard-gateway:0.1.0".into(),
            admitted: vec![
                PodGroup::parse("switchboard", "app.kubernetes.io/component=gateway").unwrap(),
                PodGroup::parse(
                    "ops",
                    "app.kubernetes.io/component=operator, team = platform",
                )
                .unwrap(),
            ],
        }
    }

    fn stdio_run() -> Run {
        Run {
            image: "example/everything:1".into(),
            command: Some(vec!["node".into(), "/app/index.js".into()]),
            args: vec!["stdio".into()],
            replicas: Some(3),
            ..Default::default()
        }
    }

    #[test]
    fn a_stdio_server_runs_the_bridge_in_front_of_its_command_with_a_restricted_context() {
        let run = stdio_run();
        let s = server("everything", run.clone());
        let d = deployment(&s, &run, &settings());
        assert_eq!(d.metadata.name.as_deref(), Some("everything-mcp"));
        let owner = &d.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("McpServer", Some(true))
        );
        let spec = d.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(3));
        let pod = spec.template.spec.as_ref().unwrap();
        let init = &pod.init_containers.as_ref().unwrap()[0];
        assert_eq!(
            init.image.as_deref(),
            Some(settings().bridge_image.as_str())
        );
        assert_eq!(
            init.args.as_deref(),
            Some(&["install".to_string(), "/switchboard".to_string()][..])
        );
        let c = &pod.containers[0];
        assert_eq!(
            c.image.as_deref(),
            Some("example/everything:1"),
            "the server's image, unchanged"
        );
        assert_eq!(
            c.command.as_deref(),
            Some(&["/switchboard/switchboard-stdio-bridge".to_string()][..])
        );
        let args = c.args.clone().unwrap();
        let dash = args.iter().position(|a| a == "--").unwrap();
        assert_eq!(&args[dash + 1..], ["node", "/app/index.js", "stdio"]);
        assert!(args.contains(&"--advertise=$(POD_IP):8080".to_string()));
        assert!(args.contains(&"--peers=everything-mcp-peers.tools.svc:8080".to_string()));
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(
            pod.security_context.as_ref().unwrap().run_as_user,
            Some(65532)
        );
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(
            c.readiness_probe
                .as_ref()
                .unwrap()
                .http_get
                .as_ref()
                .unwrap()
                .path
                .as_deref(),
            Some("/readyz")
        );
        assert_eq!(
            url("everything", "tools", &run),
            "http://everything-mcp.tools.svc:8080/mcp"
        );
        let peers = peers(&s, &run).unwrap();
        assert_eq!(peers.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    }

    #[test]
    fn a_streamable_http_server_is_its_own_container_on_its_port_and_path() {
        let run = Run {
            image: "example/upstream:1".into(),
            transport: RunTransport::StreamableHttp,
            port: Some(8931),
            path: Some("/v/era=2026/mcp".into()),
            ..Default::default()
        };
        let s = server("ex", run.clone());
        let d = deployment(&s, &run, &settings());
        let pod = d.spec.unwrap().template.spec.unwrap();
        assert!(pod.init_containers.is_none());
        assert_eq!(pod.containers[0].command, None, "the image's entrypoint");
        assert_eq!(
            pod.containers[0].ports.as_ref().unwrap()[0].container_port,
            8931
        );
        assert!(peers(&s, &run).is_none());
        assert_eq!(
            url("ex", "tools", &run),
            "http://ex-mcp.tools.svc:8931/v/era=2026/mcp"
        );
    }

    #[test]
    fn autoscaling_leaves_replicas_to_the_autoscaler() {
        let mut run = stdio_run();
        run.autoscaling = Some(switchboard_crds::run::Autoscaling {
            min_replicas: Some(2),
            max_replicas: 5,
            target_cpu_utilization_percentage: None,
        });
        let s = server("everything", run.clone());
        assert_eq!(
            deployment(&s, &run, &settings()).spec.unwrap().replicas,
            None
        );
        let hpa = autoscaler(&s, &run).unwrap().spec.unwrap();
        assert_eq!((hpa.min_replicas, hpa.max_replicas), (Some(2), 5));
    }

    #[test]
    fn long_names_stay_dns_labels_and_apart() {
        let a = "a".repeat(60);
        let b = format!("{}b", "a".repeat(59));
        let (na, nb) = (Names::of(&a), Names::of(&b));
        for n in [&na.workload, &na.peers, &na.bridge_key, &nb.peers] {
            assert!(n.len() <= 63, "{n}");
        }
        assert_ne!(na.peers, nb.peers);
        assert!(na.peers.ends_with("-mcp-peers"));
    }

    fn pod(
        name: &str,
        ready: bool,
        state: Option<ContainerState>,
        last: Option<ContainerStateTerminated>,
    ) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                container_statuses: Some(vec![ContainerStatus {
                    name: "server".into(),
                    state,
                    last_state: last.map(|t| ContainerState {
                        terminated: Some(t),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    fn waiting(reason: &str, message: &str) -> Option<ContainerState> {
        Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message: Some(message.into()),
            }),
            ..Default::default()
        })
    }

    #[test]
    fn pods_say_why_they_do_not_run() {
        let run = stdio_run();
        let d = deployment(&server("everything", run.clone()), &run, &settings());
        let h = health(
            Some(&d),
            &[
                pod("p1", true, None, None),
                pod("p2", true, None, None),
                pod("p3", true, None, None),
            ],
        );
        assert_eq!((h.desired, h.replicas, h.ready, h.failure), (3, 3, 3, None));

        let pull = health(
            Some(&d),
            &[pod(
                "p1",
                false,
                waiting("ImagePullBackOff", "Back-off pulling image \"nope:1\""),
                None,
            )],
        );
        let f = pull.failure.unwrap();
        assert_eq!(f.reason, "ImagePullBackOff");
        assert!(
            f.message.contains("nope:1") && f.message.contains("pod p1"),
            "{}",
            f.message
        );

        let exited = ContainerStateTerminated {
            exit_code: 3,
            reason: Some("Error".into()),
            ..Default::default()
        };
        let crash = health(
            Some(&d),
            &[pod(
                "p1",
                false,
                waiting("CrashLoopBackOff", "back-off"),
                Some(exited),
            )],
        );
        let f = crash.failure.unwrap();
        assert_eq!(f.reason, "CrashLoopBackOff");
        assert!(f.message.contains("exited with code 3"), "{}", f.message);
        // The log's tail as the termination message: its last line is the reason.
        let said = ContainerStateTerminated {
            exit_code: 1,
            reason: Some("Error".into()),
            message: Some(
                "starting\nError: the stdio server did not initialize: exited with code 3\n\n"
                    .into(),
            ),
            ..Default::default()
        };
        let f = health(
            Some(&d),
            &[pod(
                "p1",
                false,
                waiting("CrashLoopBackOff", ""),
                Some(said.clone()),
            )],
        )
        .failure
        .unwrap();
        assert!(
            f.message.ends_with(
                "code 1 (Error): Error: the stdio server did not initialize: exited with code 3"
            ),
            "{}",
            f.message
        );
        // Before its restart: the exit itself.
        let mut exited_now = (*pod("p1", false, None, None)).clone();
        exited_now
            .status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .state = Some(ContainerState {
            terminated: Some(said),
            ..Default::default()
        });
        let f = health(Some(&d), &[Arc::new(exited_now)]).failure.unwrap();
        assert_eq!(f.reason, "Error");
        assert!(
            f.message
                .contains("exited with code 1: Error: the stdio server"),
            "{}",
            f.message
        );

        let oom = ContainerStateTerminated {
            exit_code: 137,
            reason: Some("OOMKilled".into()),
            ..Default::default()
        };
        assert_eq!(
            health(
                Some(&d),
                &[pod("p1", false, waiting("CrashLoopBackOff", ""), Some(oom))]
            )
            .failure
            .unwrap()
            .reason,
            "OOMKilled"
        );

        let mut unschedulable = (*pod("p1", false, None, None)).clone();
        unschedulable.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            message: Some("0/1 nodes are available: 1 Insufficient memory.".into()),
            ..Default::default()
        }]);
        let f = health(Some(&d), &[Arc::new(unschedulable)])
            .failure
            .unwrap();
        assert_eq!(f.reason, "Unschedulable");
        assert!(f.message.contains("Insufficient memory"));

        // Starting, not failing: no reason yet.
        let starting = health(
            Some(&d),
            &[pod("p1", false, waiting("ContainerCreating", ""), None)],
        );
        assert_eq!((starting.ready, starting.failure), (0, None));
    }

    #[test]
    fn the_fence_admits_the_gateway_the_operator_and_the_peers_and_lets_out_dns_peers_and_what_is_declared()
     {
        let mut run = stdio_run();
        let declared: NetworkPolicyEgressRule = serde_json::from_value(serde_json::json!({
            "to": [{"ipBlock": {"cidr": "10.1.2.3/32"}}],
            "ports": [{"port": 5432, "protocol": "TCP"}]
        }))
        .unwrap();
        run.network = Some(switchboard_crds::run::RunNetwork {
            policy: None,
            egress: vec![declared.clone()],
        });
        let s = server("everything", run.clone());
        let policy = network_policy(&s, &run, &settings()).expect("fenced by default");
        assert_eq!(policy.metadata.name.as_deref(), Some("everything-mcp"));
        let owner = &policy.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("McpServer", "uid-1")
        );
        let got = serde_json::to_value(policy.spec.unwrap()).unwrap();
        let own = serde_json::to_value(labels("everything")).unwrap();
        assert_eq!(
            got,
            serde_json::json!({
                "podSelector": {"matchLabels": own},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{
                    "from": [
                        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "switchboard"}},
                         "podSelector": {"matchLabels": {"app.kubernetes.io/component": "gateway"}}},
                        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
                         "podSelector": {"matchLabels": {"app.kubernetes.io/component": "operator", "team": "platform"}}},
                        {"podSelector": {"matchLabels": own}}
                    ],
                    "ports": [{"port": 8080, "protocol": "TCP"}]
                }],
                "egress": [
                    {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
                    {"to": [{"podSelector": {"matchLabels": own}}], "ports": [{"port": 8080, "protocol": "TCP"}]},
                    serde_json::to_value(&declared).unwrap()
                ]
            })
        );
    }

    #[test]
    fn an_http_server_is_fenced_on_its_own_port_without_peers_and_unmanaged_has_no_fence() {
        let mut run = Run {
            image: "example/http:1".into(),
            transport: RunTransport::StreamableHttp,
            port: Some(3000),
            ..Default::default()
        };
        let s = server("http", run.clone());
        let spec = network_policy(&s, &run, &settings()).unwrap().spec.unwrap();
        let ingress = &spec.ingress.unwrap()[0];
        assert_eq!(
            ingress.ports.as_ref().unwrap()[0].port,
            Some(IntOrString::Int(3000))
        );
        assert_eq!(
            spec.egress.unwrap().len(),
            1,
            "DNS only: nothing declared, no peers"
        );
        run.network = Some(switchboard_crds::run::RunNetwork {
            policy: Some(RunNetworkPolicy::Unmanaged),
            egress: vec![],
        });
        assert!(network_policy(&s, &run, &settings()).is_none());
    }

    #[test]
    fn pod_labels_must_select_something() {
        assert_eq!(PodGroup::parse("ns", " , "), Err(PodLabelsError::Empty));
        assert_eq!(
            PodGroup::parse("ns", "a=b,c"),
            Err(PodLabelsError::NotAPair("c".into()))
        );
        assert_eq!(
            PodGroup::parse("ns", "=b"),
            Err(PodLabelsError::NotAPair("=b".into()))
        );
        let group = PodGroup::parse("ns", "a=b, c = d").unwrap();
        assert_eq!(
            group.labels,
            BTreeMap::from([("a".into(), "b".into()), ("c".into(), "d".into())])
        );
    }
}
