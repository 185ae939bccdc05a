//! `switchboard-operator`: reconciles McpServer/McpKey/ModelRoute into the gateway snapshot and
//! serves it.

use std::future::IntoFuture;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use clap::Parser;
use switchboard_operator::controller::{Config, Controller};
use switchboard_operator::delivery::{self, Hub};
use switchboard_operator::delivery_ca::CaPolicy;
use switchboard_operator::delivery_tls::{self, ServingCert, TlsMode};
use switchboard_operator::gateway_settings;
use switchboard_operator::issuer;
use switchboard_operator::lease::{self, LeaseConfig};
use switchboard_operator::metrics::Metrics;
use switchboard_operator::probe::{self, Probes};
use switchboard_operator::upstream_policy::{self, UpstreamPolicy};
use switchboard_operator::workload::PodGroup;
use switchboard_snapshot::networks::DEFAULT_DENIED_NETWORKS;
use switchboard_snapshot::{GatewaySettings, Snapshot, UpstreamNetworks};
use switchboard_source::operator_tls::certificate_name;
use switchboard_telemetry::start::bind;
use tokio::sync::{Notify, watch};

#[derive(Parser)]
#[command(name = "switchboard-operator", version, about = "Switchboard operator")]
struct Args {
    /// The operator's own namespace (Lease and snapshot Secret live here).
    #[arg(long, env = "POD_NAMESPACE", default_value = "switchboard")]
    namespace: String,
    /// This replica's identity in the Lease (default: $POD_NAME, else host name and pid).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Where gateway replicas follow the snapshot stream.
    #[arg(
        long,
        env = "SWITCHBOARD_SNAPSHOT_LISTEN",
        default_value = "0.0.0.0:9090"
    )]
    snapshot_listen: String,
    /// This replica's own snapshot-stream address (e.g. http://<pod IP>:9090), where gateways
    /// send acks: through a Service an ack could reach another replica than the stream.
    #[arg(long, env = "SWITCHBOARD_ADVERTISE_URL")]
    advertise_url: Option<String>,
    /// Metrics and health endpoints.
    #[arg(
        long,
        env = "SWITCHBOARD_METRICS_LISTEN",
        default_value = "0.0.0.0:9091"
    )]
    metrics_listen: String,
    /// The gateway's ServiceAccount, `<namespace>:<name>`: the only reader of snapshots.
    #[arg(
        long,
        env = "SWITCHBOARD_GATEWAY_SERVICE_ACCOUNT",
        default_value = "switchboard:switchboard-gateway"
    )]
    gateway_service_account: String,
    /// The image an McpServer's `spec.run` pods copy the stdio bridge from (an init container
    /// runs `switchboard-stdio-bridge install`): the gateway's image, which the chart sets.
    #[arg(long, env = "SWITCHBOARD_STDIO_BRIDGE_IMAGE", default_value = concat!("ghcr.io/switchboard-dev/switchboard-gateway:", env!("CARGO_PKG_VERSION")))]
    stdio_bridge_image: String,
    /// The gateway pods' labels (`key=value,...`, in the gateway ServiceAccount's namespace):
    /// the NetworkPolicy of each `spec.run` server admits them.
    #[arg(
        long,
        env = "SWITCHBOARD_GATEWAY_POD_LABELS",
        default_value = "app.kubernetes.io/name=switchboard,app.kubernetes.io/component=gateway"
    )]
    gateway_pod_labels: String,
    /// The operator pods' labels (`key=value,...`, in --namespace): the NetworkPolicy of each
    /// `spec.run` server admits them too (the readiness probe lists the server's tools).
    #[arg(
        long,
        env = "SWITCHBOARD_OPERATOR_POD_LABELS",
        default_value = "app.kubernetes.io/name=switchboard,app.kubernetes.io/component=operator"
    )]
    operator_pod_labels: String,
    /// Secret (in --namespace) that keeps the latest snapshot and the session key.
    #[arg(
        long,
        env = "SWITCHBOARD_SNAPSHOT_SECRET",
        default_value = "switchboard-snapshot"
    )]
    snapshot_secret: String,
    #[arg(
        long,
        env = "SWITCHBOARD_LEASE_NAME",
        default_value = "switchboard-operator"
    )]
    lease_name: String,
    /// How long a lease holder that stopped renewing keeps the lease.
    #[arg(long, env = "SWITCHBOARD_LEASE_DURATION", default_value = "15s", value_parser = humantime::parse_duration)]
    lease_duration: Duration,
    /// How often every server is probed (Ready turns False within this plus the server's timeout).
    #[arg(long, env = "SWITCHBOARD_PROBE_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    probe_interval: Duration,
    /// How often every model's provider is asked for its model listing (never a model call);
    /// a model is also probed at once when its spec or key changes.
    #[arg(long, env = "SWITCHBOARD_MODEL_PROBE_INTERVAL", default_value = "60s", value_parser = humantime::parse_duration)]
    model_probe_interval: Duration,
    /// A replica gone for longer than this no longer counts in `Programmed`.
    #[arg(long, env = "SWITCHBOARD_REPLICA_EXPIRY", default_value = "5m", value_parser = humantime::parse_duration)]
    replica_expiry: Duration,
    /// Host names the gateways accept besides loopback (their Service names), comma-separated.
    #[arg(long, env = "SWITCHBOARD_GATEWAY_ALLOWED_HOSTS", value_delimiter = ',')]
    gateway_allowed_hosts: Vec<String>,
    /// The gateways' external URL (for OAuth metadata they serve).
    #[arg(long, env = "SWITCHBOARD_GATEWAY_PUBLIC_URL")]
    gateway_public_url: Option<String>,
    /// Gateway settings for every replica: a YAML document with one `gateway:` section, the
    /// standalone file's (maxBodyBytes, sessionTtl, listingTtl, listingPageCap, allowedOrigins,
    /// upstreamTls, ...). Read at start; `--gateway-allowed-hosts` adds to its allowedHosts and
    /// `--gateway-public-url` wins over its publicUrl.
    #[arg(long, env = "SWITCHBOARD_GATEWAY_SETTINGS")]
    gateway_settings: Option<std::path::PathBuf>,
    #[arg(long, env = "SWITCHBOARD_LOG_FORMAT", default_value = "text")]
    log_format: String,
    /// The audiences workload ServiceAccount tokens must carry to act as a key (McpKey
    /// `serviceAccounts`), comma-separated; empty turns workload tokens off.
    #[arg(
        long,
        env = "SWITCHBOARD_WORKLOAD_TOKEN_AUDIENCES",
        value_delimiter = ',',
        default_value = "switchboard"
    )]
    workload_token_audiences: Vec<String>,
    /// How often the ServiceAccount issuer's keys are read again (they rotate).
    #[arg(long, env = "SWITCHBOARD_ISSUER_REFRESH", default_value = "5m", value_parser = humantime::parse_duration)]
    issuer_refresh: Duration,
    /// Networks (CIDR or address) upstreams may not be in, comma-separated; the default is
    /// link-local and the cloud metadata addresses. Given, it replaces the default.
    #[arg(long, env = "SWITCHBOARD_UPSTREAM_DENY_NETWORKS", value_delimiter = ',', default_values_t = DEFAULT_DENIED_NETWORKS.iter().map(|s| s.to_string()))]
    upstream_deny_networks: Vec<String>,
    /// Exceptions to --upstream-deny-networks, comma-separated.
    #[arg(
        long,
        env = "SWITCHBOARD_UPSTREAM_ALLOW_NETWORKS",
        value_delimiter = ','
    )]
    upstream_allow_networks: Vec<String>,
    /// TLS on the snapshot stream with the operator's own CA, kept in this Secret (in
    /// --namespace; created and rotated by the lease holder). Needs --delivery-trust-configmap.
    #[arg(
        long,
        env = "SWITCHBOARD_DELIVERY_CA_SECRET",
        conflicts_with = "delivery_tls_secret",
        requires = "delivery_trust_configmap"
    )]
    delivery_ca_secret: Option<String>,
    /// The ConfigMap (in --namespace) the CA certificates gateways trust are published in
    /// (key `ca.crt`); gateways mount it and pass it as --operator-ca.
    #[arg(
        long,
        env = "SWITCHBOARD_DELIVERY_TRUST_CONFIGMAP",
        requires = "delivery_ca_secret"
    )]
    delivery_trust_configmap: Option<String>,
    /// TLS on the snapshot stream with a certificate someone else keeps current (a
    /// `kubernetes.io/tls` Secret in --namespace, e.g. from cert-manager).
    #[arg(long, env = "SWITCHBOARD_DELIVERY_TLS_SECRET")]
    delivery_tls_secret: Option<String>,
    /// Names the operator-issued serving certificates carry (the Service's DNS names),
    /// comma-separated; the host of --advertise-url is added.
    #[arg(long, env = "SWITCHBOARD_DELIVERY_TLS_NAMES", value_delimiter = ',')]
    delivery_tls_names: Vec<String>,
    /// Life of an operator-issued serving certificate (a new one at half of it).
    #[arg(long, env = "SWITCHBOARD_DELIVERY_CERT_VALIDITY", default_value = "24h", value_parser = humantime::parse_duration)]
    delivery_cert_validity: Duration,
    /// Life of the operator's CA (a successor is introduced with a third of it left).
    #[arg(long, env = "SWITCHBOARD_DELIVERY_CA_VALIDITY", default_value = "365d", value_parser = humantime::parse_duration)]
    delivery_ca_validity: Duration,
    /// How long a new CA is trusted before it signs: time for the trust bundle to reach every
    /// gateway (the kubelet refreshes mounted ConfigMaps within about a minute).
    #[arg(long, env = "SWITCHBOARD_DELIVERY_CA_PROPAGATION", default_value = "10m", value_parser = humantime::parse_duration)]
    delivery_ca_propagation: Duration,
    /// How often the CA Secret (or the provided Secret) is read again.
    #[arg(long, env = "SWITCHBOARD_DELIVERY_TLS_REFRESH", default_value = "10s", value_parser = humantime::parse_duration)]
    delivery_tls_refresh: Duration,
    /// Lets McpServers point at the Kubernetes API server (denied by default: a gateway would
    /// carry callers' requests to it from inside the cluster).
    #[arg(long, env = "SWITCHBOARD_ALLOW_API_SERVER_UPSTREAM")]
    allow_api_server_upstream: bool,
    /// Only Secrets with these labels (a label selector, e.g. switchboard.dev/credential=true)
    /// are watched and can be referenced by McpServers, McpKeys and ModelRoutes; the Secrets
    /// the operator writes itself are watched besides. Empty: every Secret but Helm releases
    /// and ServiceAccount tokens. On a large cluster this keeps the operator's memory to the
    /// credentials it uses.
    #[arg(long, env = "SWITCHBOARD_SECRET_SELECTOR", default_value = "")]
    secret_selector: String,
    /// Watch only these namespaces (comma-separated): the operator reads nothing in any other,
    /// so its RBAC can be Roles in these namespaces (the chart's `operator.watchNamespaces`).
    /// Empty: every namespace.
    #[arg(long, env = "SWITCHBOARD_WATCH_NAMESPACES", value_delimiter = ',')]
    watch_namespaces: Vec<String>,
    /// Take only the resources labelled switchboard.dev/instance=<this>; without it, only
    /// those without the label. Two installs with different instances share a cluster
    /// without reading or writing each other's resources.
    #[arg(long, env = "SWITCHBOARD_INSTANCE", default_value = "")]
    instance: String,
    /// Tool prefixes (and McpVirtualServer paths) reserved for namespaces, comma-separated
    /// `<name>=<namespace>` (a name may end in `*`): a resource in another namespace that
    /// claims one is refused (NameReserved), however old.
    #[arg(long, env = "SWITCHBOARD_RESERVED_PREFIXES", value_delimiter = ',')]
    reserved_prefixes: Vec<String>,
    /// Model names reserved for namespaces, like --reserved-prefixes.
    #[arg(long, env = "SWITCHBOARD_RESERVED_MODELS", value_delimiter = ',')]
    reserved_models: Vec<String>,
    /// Also read the EndpointSlices of the `kubernetes` Service (in namespace `default`) to deny
    /// every API server process as an upstream, not only the ones the API's discovery and the
    /// Service address name (needs a Role in `default`; the chart's
    /// `operator.upstreamNetworks.apiServerEndpointSlices`).
    #[arg(long, env = "SWITCHBOARD_API_SERVER_ENDPOINT_SLICES")]
    api_server_endpoint_slices: bool,
    /// Without a command the operator runs; a command is a tool for the platform team, run
    /// with their kubeconfig.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Tool definitions a server lists (spec.tools.pinning).
    #[command(subcommand)]
    Tools(ToolsCommand),
}

#[derive(clap::Subcommand)]
enum ToolsCommand {
    /// Prints which of a server's tools differ from spec.tools.approved (and in which parts),
    /// what the poisoning and shadowing checks found, and the approvals to apply.
    Review {
        /// The McpServer, `<namespace>/<name>`.
        server: String,
        /// Patch spec.tools.approved with the proposed approvals.
        #[arg(long)]
        apply: bool,
        /// Propose approvals for flagged tools too (after reading their findings).
        #[arg(long)]
        include_flagged: bool,
    },
}

fn main() -> std::process::ExitCode {
    // A start that fails says why on one line (a port in use names its flag), no backtrace.
    switchboard_telemetry::start::exit_code(start(Args::parse()))
}

fn start(args: Args) -> anyhow::Result<()> {
    if let Some(Command::Tools(ToolsCommand::Review {
        server,
        apply,
        include_flagged,
    })) = args.command
    {
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(async move {
                let client = kube::Client::try_default().await?;
                let plan = switchboard_operator::tools_review::run(
                    client,
                    &server,
                    apply,
                    include_flagged,
                )
                .await?;
                let mut out = std::io::stdout().lock();
                out.write_all(plan.text.as_bytes())?;
                if apply && plan.proposed > 0 {
                    writeln!(out, "# applied: {} approvals", plan.proposed)?;
                }
                Ok(())
            });
    }
    let json = args.log_format == "json";
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let telemetry = switchboard_telemetry::init("switchboard-operator", json)?;
            let ran = run(args).await;
            let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
            ran
        })
}

async fn run(args: Args) -> anyhow::Result<()> {
    // The listeners first: a port another process holds stops the start, named by its flag,
    // before this replica talks to the API server or contends for the lease.
    let snapshot_listener = bind("--snapshot-listen", &args.snapshot_listen).await?;
    let metrics_listener = bind("--metrics-listen", &args.metrics_listen).await?;
    let scope = switchboard_operator::scope::Scope::new(&args.watch_namespaces, &args.instance)
        .map_err(anyhow::Error::msg)?;
    let reservations = switchboard_operator::reservations::Reservations::parse(
        &args.reserved_prefixes,
        &args.reserved_models,
    )
    .map_err(anyhow::Error::msg)?;
    tracing::info!(scope = %scope.describe(), "watching");
    let kube_config = kube::Config::infer().await?;
    let client = kube::Client::try_from(kube_config.clone())?;
    let identity = args
        .identity
        .clone()
        .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
    let (sa_namespace, sa_name) = args
        .gateway_service_account
        .split_once(':')
        .ok_or_else(|| anyhow::anyhow!("--gateway-service-account must be <namespace>:<name>"))?;
    let allowed_user = format!("system:serviceaccount:{sa_namespace}:{sa_name}");
    let gateway_pods = PodGroup::parse(sa_namespace, &args.gateway_pod_labels)
        .map_err(|e| anyhow::anyhow!("--gateway-pod-labels: {e}"))?;
    let operator_pods = PodGroup::parse(&args.namespace, &args.operator_pod_labels)
        .map_err(|e| anyhow::anyhow!("--operator-pod-labels: {e}"))?;

    let ack_url = match args.advertise_url.as_deref().filter(|u| !u.is_empty()) {
        Some(url) => Some(
            url.parse::<axum::http::Uri>()
                .ok()
                .filter(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some())
                .and_then(|_| axum::http::HeaderValue::from_str(url).ok())
                .ok_or_else(|| anyhow::anyhow!("--advertise-url {url:?} is not an http(s) URL"))?,
        ),
        None => None,
    };
    let (leader_tx, leader_rx) = watch::channel(false);
    let hub = Hub::new(
        client.clone(),
        allowed_user,
        args.replica_expiry,
        leader_rx.clone(),
        ack_url,
    );
    let metrics = Arc::new(Metrics::default());
    let probes = Arc::new(Probes::default());
    let dirty = Arc::new(Notify::new());
    let (snapshots_tx, snapshots_rx) = watch::channel(Arc::new(Snapshot::default()));

    // Registered now, so a SIGTERM during startup also steps down (the default action would
    // end the process at once).
    let terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (warm_tx, warm_rx) = watch::channel(false);
    let election = tokio::spawn(lease::run(
        client.clone(),
        LeaseConfig {
            namespace: args.namespace.clone(),
            name: args.lease_name.clone(),
            identity: identity.clone(),
            duration: args.lease_duration,
        },
        leader_tx,
        stop_rx,
        warm_rx,
    ));
    tokio::spawn(probe::run(
        snapshots_rx,
        probes.clone(),
        args.probe_interval,
        args.model_probe_interval,
        dirty.clone(),
    ));
    let upstream_networks = UpstreamNetworks {
        deny: args.upstream_deny_networks.clone(),
        allow: args.upstream_allow_networks.clone(),
        deny_endpoints: if args.allow_api_server_upstream {
            Vec::new()
        } else {
            upstream_policy::api_server_endpoints(
                &client,
                &kube_config.cluster_url,
                args.api_server_endpoint_slices,
            )
            .await
        },
    };
    tracing::info!(
        deny = ?upstream_networks.deny,
        allow = ?upstream_networks.allow,
        api_server = ?upstream_networks.deny_endpoints,
        "upstream address policy"
    );
    let upstreams = UpstreamPolicy::new(&upstream_networks, !args.allow_api_server_upstream)
        .map_err(|e| anyhow::anyhow!("--upstream-deny-networks/--upstream-allow-networks: {e}"))?;
    if !args.secret_selector.is_empty() {
        // A selector the API server refuses would leave the watch retrying forever: fail now.
        // (listed in the operator's own namespace: an install confined to some namespaces
        // may not list Secrets cluster-wide, and the selector's syntax is the same anywhere)
        kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
            client.clone(),
            &args.namespace,
        )
        .list_metadata(
            &kube::api::ListParams::default()
                .labels(&args.secret_selector)
                .limit(1),
        )
        .await
        .map_err(|e| anyhow::anyhow!("--secret-selector {:?}: {e}", args.secret_selector))?;
        tracing::info!(selector = %args.secret_selector, "watching only the Secrets it selects, and the operator's own");
    }
    let mut settings = match &args.gateway_settings {
        None => GatewaySettings::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("--gateway-settings {}: {e}", path.display()))?;
            let shown = format!("--gateway-settings {}", path.display());
            gateway_settings::parse(&text, &shown, &switchboard_snapshot::SystemLookup)
                .map_err(anyhow::Error::msg)?
        }
    };
    settings
        .allowed_hosts
        .extend(args.gateway_allowed_hosts.iter().cloned());
    if args.gateway_public_url.is_some() {
        settings.public_url = args.gateway_public_url.clone();
    }
    settings.upstream_networks = upstream_networks;
    let (issuer_tx, issuer_rx) = watch::channel(None);
    let audiences: Vec<String> = args
        .workload_token_audiences
        .iter()
        .filter(|a| !a.is_empty())
        .cloned()
        .collect();
    if !audiences.is_empty() {
        tokio::spawn(issuer::follow(
            client.clone(),
            audiences,
            args.issuer_refresh,
            issuer_tx,
            dirty.clone(),
        ));
    }
    let controller = Controller {
        client: client.clone(),
        config: Config {
            namespace: args.namespace.clone(),
            snapshot_secret: args.snapshot_secret.clone(),
            identity: identity.clone(),
            settings,
            upstreams,
            secret_selector: (!args.secret_selector.is_empty())
                .then(|| args.secret_selector.clone()),
            scope,
            reservations,
            gateway_service_account: (sa_namespace.to_string(), sa_name.to_string()),
            workload: switchboard_operator::workload::Settings {
                bridge_image: args.stdio_bridge_image.clone(),
                admitted: vec![gateway_pods, operator_pods],
            },
        },
        hub: hub.clone(),
        probes,
        metrics: metrics.clone(),
        leader: leader_rx.clone(),
        dirty,
        snapshots: snapshots_tx,
        issuer: issuer_rx,
        warm: warm_tx,
    };
    tokio::spawn(controller.run());

    let tls = tls_mode(&args);
    let serving = Arc::new(ServingCert::default());
    match &tls {
        Some(mode) => {
            tokio::spawn(delivery_tls::keep(
                client.clone(),
                args.namespace.clone(),
                mode.clone(),
                serving.clone(),
                leader_rx.clone(),
                args.delivery_tls_refresh,
                metrics.clone(),
            ));
        }
        None => tracing::warn!(
            "the snapshot stream is plain HTTP (no --delivery-ca-secret or --delivery-tls-secret): \
             the upstream credentials it carries cross the network unencrypted"
        ),
    }
    println!(
        "switchboard-operator snapshot stream on {}://{} metrics on http://{}",
        if tls.is_some() { "https" } else { "http" },
        snapshot_listener.local_addr()?,
        metrics_listener.local_addr()?
    );
    std::io::stdout().flush()?;
    let health = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(render_metrics))
        .with_state((metrics, leader_rx));
    tokio::spawn(async move { axum::serve(metrics_listener, health).await });
    // Not a graceful shutdown of the streams: they never end by themselves. The leader steps
    // down first (no more status writes, lease handed back), then the process ends and the
    // gateways' streams break, so they reconnect to whoever leads next.
    let snapshots = async {
        match tls {
            Some(_) => {
                delivery_tls::serve_tls(snapshot_listener, delivery::router(hub), serving).await
            }
            None => {
                axum::serve(snapshot_listener, delivery::router(hub))
                    .into_future()
                    .await
            }
        }
    };
    tokio::select! {
        served = snapshots => served?,
        () = terminated(terminate) => {
            tracing::info!("terminating: stepping down");
            stop_tx.send_replace(true);
            if tokio::time::timeout(Duration::from_secs(5), election).await.is_err() {
                tracing::warn!("stepping down took over 5s; exiting without it");
            }
        }
    }
    Ok(())
}

/// SIGTERM (Kubernetes stopping the pod) or Ctrl-C.
async fn terminated(mut term: Option<tokio::signal::unix::Signal>) {
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        Some(()) = async { match term.as_mut() { Some(t) => t.recv().await, None => std::future::pending().await } } => {}
    }
}

type HealthState = (Arc<Metrics>, watch::Receiver<bool>);

/// Ready on every replica: a standby must not stall rollouts or block drains. Gateways find
/// the lease holder by retrying (a standby answers the stream with 503).
async fn readyz(State((_, leader)): State<HealthState>) -> impl IntoResponse {
    (
        StatusCode::OK,
        if *leader.borrow() {
            "leader"
        } else {
            "standby"
        },
    )
}

async fn render_metrics(State((metrics, leader)): State<HealthState>) -> impl IntoResponse {
    metrics.leader(*leader.borrow());
    metrics.encode()
}

/// The snapshot stream's TLS from the flags (None: plain HTTP).
fn tls_mode(args: &Args) -> Option<TlsMode> {
    if let Some(secret) = &args.delivery_tls_secret {
        return Some(TlsMode::Provided {
            secret: secret.clone(),
        });
    }
    let ca_secret = args.delivery_ca_secret.clone()?;
    let mut names: Vec<String> = args
        .delivery_tls_names
        .iter()
        .filter(|n| !n.is_empty())
        .cloned()
        .collect();
    let advertised = args
        .advertise_url
        .as_deref()
        .and_then(|u| url::Url::parse(u).ok())
        .and_then(|u| certificate_name(&u));
    names.extend(advertised);
    if names.is_empty() {
        names.push("localhost".into());
    }
    Some(TlsMode::Managed {
        ca_secret,
        trust_configmap: args.delivery_trust_configmap.clone().unwrap_or_default(),
        names,
        leaf_validity: args.delivery_cert_validity,
        policy: CaPolicy {
            ca_validity: args.delivery_ca_validity,
            propagation: args.delivery_ca_propagation,
        },
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "operator".into())
}

#[cfg(test)]
mod tests {
    /// Every flag can be set from the environment too (a Deployment's `env`, a systemd unit).
    #[test]
    fn every_flag_has_an_environment_variable() {
        use clap::CommandFactory;
        let command = super::Args::command();
        let missing: Vec<String> = command
            .get_arguments()
            .filter(|a| a.get_long().is_some() && a.get_env().is_none())
            .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
            .map(|a| format!("--{}", a.get_long().unwrap_or_default()))
            .collect();
        assert!(missing.is_empty(), "flags without env: {missing:?}");
    }
}
