//! `switchboard-gateway --config FILE [--listen ADDR]`: standalone mode.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use switchboard_core::audit::{AuditLog, Destination};
use switchboard_gateway::admission::AdmissionLimits;
use switchboard_gateway::http;
use switchboard_gateway::serve::{ConnectionLimits, serve};
use switchboard_gateway::state::{Gateway, LocalSettings};
use switchboard_source::config_file;
use switchboard_source::operator_source::OperatorSource;
use switchboard_source::operator_tls::{OperatorTrust, certificate_name};
use switchboard_telemetry::start::bind;

/// After the drain phase, how long connections still open (long streams, mostly) get to end
/// before the process exits: well inside a pod's default 30 s termination grace, after the
/// chart's preStop sleep and drain.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(15);

mod allocator;

/// mimalloc: faster small allocations on the request path than glibc's malloc, and freed
/// memory goes back to the system instead of piling up in per-thread arenas (RSS after a large
/// listing). `allocator` says why not through the `mimalloc` crate.
#[global_allocator]
static ALLOCATOR: allocator::Allocator = allocator::Allocator;

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Parser)]
#[command(
    name = "switchboard-gateway",
    version,
    about = "MCP gateway: serves MCP tool servers from one snapshot"
)]
struct Args {
    /// Config file (the snapshot schema in YAML); re-read on change and on SIGHUP. With
    /// `--operator`, the snapshot the replica starts from (e.g. mounted from the operator's
    /// Secret); optional.
    #[arg(long, env = "SWITCHBOARD_CONFIG")]
    config: Option<PathBuf>,
    /// Operator snapshot endpoint(s), comma-separated (e.g.
    /// http://switchboard-operator.switchboard.svc:9090): follow its snapshot stream.
    #[arg(long, env = "SWITCHBOARD_OPERATOR", value_delimiter = ',')]
    operator: Vec<url::Url>,
    /// PEM bundle of the CAs the operator's certificate is verified with (`https` operator URLs;
    /// in the chart, the operator's trust ConfigMap). Read again before every connection.
    #[arg(long, env = "SWITCHBOARD_OPERATOR_CA")]
    operator_ca: Option<PathBuf>,
    /// The name the operator's certificate must carry, whichever operator address is dialed
    /// (acks go to a pod IP); default: the host of the first `--operator` URL.
    #[arg(long, env = "SWITCHBOARD_OPERATOR_SERVER_NAME")]
    operator_server_name: Option<String>,
    /// ServiceAccount token presented to the operator (a projected token with audience
    /// `switchboard-operator`).
    #[arg(
        long,
        env = "SWITCHBOARD_TOKEN_FILE",
        default_value = "/var/run/secrets/switchboard/token"
    )]
    token_file: PathBuf,
    /// This replica's name, as the operator reports it (default: $POD_NAME, else the host name).
    #[arg(long, env = "POD_NAME")]
    replica: Option<String>,
    /// Host names accepted besides loopback and the snapshot's (this deployment's Service
    /// names), comma-separated.
    #[arg(long, env = "SWITCHBOARD_ALLOWED_HOSTS", value_delimiter = ',')]
    allowed_hosts: Vec<String>,
    /// This deployment's external URL (overrides the snapshot's `gateway.publicUrl`).
    #[arg(long, env = "SWITCHBOARD_PUBLIC_URL")]
    public_url: Option<String>,
    /// The URL other replicas reach this one's internal listener at (in a cluster: the pod IP
    /// and the internal port), for exchanges that span two of a client's messages; default:
    /// the internal listening address. It must name the internal listener, not the client
    /// one: a given URL is tried once at start, with a warning if it does not reach the
    /// hand-off route.
    #[arg(long, env = "SWITCHBOARD_ADVERTISE_URL")]
    advertise_url: Option<String>,
    /// Address to listen on for clients (MCP, REST, the LLM APIs, sign-in).
    #[arg(long, env = "SWITCHBOARD_LISTEN", default_value = "127.0.0.1:8080")]
    listen: String,
    /// Address of the internal listener: `/metrics`, `/healthz`, `/readyz` and the replica
    /// hand-off route, none of which the client listener serves (the chart: 0.0.0.0:9091,
    /// reached by kubelets, Prometheus and other replicas at the pod's address).
    #[arg(
        long,
        env = "SWITCHBOARD_INTERNAL_LISTEN",
        default_value = "127.0.0.1:9091"
    )]
    internal_listen: String,
    /// Where the audit log (one JSON line per request, docs/audit.md) goes: `stdout`, `off`,
    /// or a file appended to.
    #[arg(long, env = "SWITCHBOARD_AUDIT_LOG", default_value = "stdout")]
    audit_log: String,
    /// Log format.
    #[arg(
        long,
        env = "SWITCHBOARD_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    /// After SIGTERM, keep serving this long before closing the listener, with every answer
    /// closing its connection, so kept-alive clients move to another replica between requests
    /// instead of finding their connection closed under a request (the chart sets 5s, after
    /// its preStop sleep). 0: close at once.
    #[arg(long, env = "SWITCHBOARD_DRAIN", default_value = "0s", value_parser = humantime::parse_duration)]
    drain: Duration,
    /// Most client connections open at once; more wait in the accept queue until one closes.
    #[arg(long, env = "SWITCHBOARD_MAX_CONNECTIONS", default_value_t = 10_000)]
    max_connections: usize,
    /// While this replica's queueing delay (how long ready work waits for a CPU; probed every
    /// 10 ms) stays above this for 100 ms windows, cap requests in flight below what it has
    /// and shed the excess (503 + Retry-After). Waiting on slow upstreams adds no delay. 0: off.
    #[arg(long, env = "SWITCHBOARD_MAX_QUEUE_DELAY", default_value = "10ms", value_parser = humantime::parse_duration)]
    max_queue_delay: Duration,
    /// Most requests in flight at once (arrival to response head: a relayed stream holds
    /// none once its head is out); more are shed with 503 + Retry-After. 0: no bound.
    #[arg(long, env = "SWITCHBOARD_MAX_IN_FLIGHT", default_value_t = 0)]
    max_in_flight: usize,
    /// A request's headers must arrive within this; a kept-alive connection idle this long is
    /// closed too (one timer in hyper).
    #[arg(long, env = "SWITCHBOARD_HEADER_READ_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    header_read_timeout: Duration,
    /// A request's whole body must arrive within this, or it is answered 408.
    #[arg(long, env = "SWITCHBOARD_BODY_READ_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    body_read_timeout: Duration,
    /// Threads serving requests (default: the CPUs this process may use). Fewer threads than
    /// CPUs can help when the gateway shares its CPUs with other busy processes.
    #[arg(long, env = "SWITCHBOARD_WORKER_THREADS")]
    worker_threads: Option<usize>,
    /// Without a command the gateway serves; a command is a tool for the platform team.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Tool definitions a server lists (its `tools.pinning`).
    #[command(subcommand)]
    Tools(ToolsCommand),
}

#[derive(clap::Subcommand)]
enum ToolsCommand {
    /// Lists a server of the --config file now, with the gateway's own credential, and prints
    /// which of its tools differ from `tools.approved` (and in which parts), what the
    /// poisoning and shadowing checks found, and the `approved` block to paste into the file.
    Review {
        /// The server's name (its id in the file).
        server: String,
        /// Propose approvals for flagged tools too (after reading their findings).
        #[arg(long)]
        include_flagged: bool,
    },
}

fn main() -> std::process::ExitCode {
    allocator::tune();
    // A start that fails says why on one line (a port in use names its flag), no backtrace.
    switchboard_telemetry::start::exit_code(start(Args::parse()))
}

fn start(args: Args) -> anyhow::Result<()> {
    if let Some(Command::Tools(ToolsCommand::Review {
        server,
        include_flagged,
    })) = &args.command
    {
        let config = args
            .config
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("tools review reads the servers of --config FILE"))?;
        let text = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(switchboard_gateway::tools_review::review(
                config,
                server,
                *include_flagged,
            ))?;
        std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes())?;
        return Ok(());
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.worker_threads.filter(|n| *n > 0) {
        runtime.worker_threads(threads);
    }
    let runtime = runtime.enable_all().build()?;
    runtime.block_on(async move {
        let telemetry = switchboard_telemetry::init(
            "switchboard-gateway",
            matches!(args.log_format, LogFormat::Json),
        )?;
        let served = run(args).await;
        // What is still batched goes out before the process ends.
        let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        served
    })
}

async fn run(args: Args) -> anyhow::Result<()> {
    // The listeners first: a port another process holds stops the start before anything else
    // happens, named by its flag.
    let internal = bind("--internal-listen", &args.internal_listen).await?;
    let internal_addr = internal.local_addr()?;
    let listener = bind("--listen", &args.listen).await?;
    let addr = listener.local_addr()?;
    let gw = Arc::new(Gateway::with_local_settings(LocalSettings {
        allowed_hosts: args.allowed_hosts.clone(),
        public_url: args.public_url.clone().filter(|u| !u.is_empty()),
        body_read_timeout: args.body_read_timeout,
        admission: AdmissionLimits {
            max_in_flight: args.max_in_flight,
            max_queue_delay: args.max_queue_delay,
        },
    }));
    let replica = args.replica.clone().unwrap_or_else(default_replica_name);
    gw.set_audit_log(
        AuditLog::open(
            &Destination::parse(&args.audit_log),
            replica.clone(),
            gw.metrics.clone(),
        )
        .map_err(anyhow::Error::msg)?,
    );
    // The overload bound's probe (--max-queue-delay): one thread for the process's life.
    switchboard_gateway::admission::watch_queue_delay(&gw.shedding);
    // Turns true on SIGTERM: the operator's stream then ends with a goodbye.
    let (leaving_tx, leaving) = tokio::sync::watch::channel(false);
    // Registered before the first load, so a SIGHUP at any time reloads rather than kills, and
    // a SIGTERM at any time stops gracefully.
    let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let mut following = None;
    match (&args.config, args.operator.is_empty()) {
        (Some(config), true) => {
            let Ok(applied) = config_file::initial_load(&*gw, config).await else {
                anyhow::bail!(
                    "the config file {} is not valid (see the error above)",
                    config.display()
                );
            };
            allocator::give_back_freed_memory();
            tokio::spawn(config_file::watch(
                gw.clone(),
                config.clone(),
                Some(applied),
                hangup,
            ));
        }
        (None, true) => {
            anyhow::bail!("give --config FILE (standalone) or --operator URL (cluster)")
        }
        (initial, false) => {
            // The operator's stream is the source of truth; a mounted snapshot only lets a
            // replica serve before it reaches the operator.
            if let Some(file) = initial.as_ref().filter(|f| f.exists()) {
                let _ = config_file::reload(&*gw, file);
                allocator::give_back_freed_memory();
            }
            let source = OperatorSource {
                trust: operator_trust(&args)?,
                endpoints: args.operator.clone(),
                token_file: args.token_file.clone(),
                replica,
                leaving,
            };
            following = Some(tokio::spawn(source.follow(gw.clone())));
        }
    }
    tracing::info!(%addr, %internal_addr, "listening");
    let advertised = args.advertise_url.clone().filter(|u| !u.is_empty());
    gw.mcp.exchanges.set_address(
        advertised
            .clone()
            .unwrap_or_else(|| format!("http://{internal_addr}")),
    );
    // Tests and scripts wait for these lines on stdout (the client listener's last).
    println!("switchboard-gateway internal on http://{internal_addr}");
    println!("switchboard-gateway listening on http://{addr}");
    std::io::stdout().flush()?;
    let draining = gw.clone();
    let drain = args.drain;
    let limits = ConnectionLimits {
        max_connections: args.max_connections,
        header_read_timeout: args.header_read_timeout,
        shutdown_grace: SHUTDOWN_GRACE,
    };
    // The internal listener stops with the process: probes and scrapes answer through the
    // drain (readiness says "stopping"), and a hand-off to this replica still lands.
    let internal_limits = ConnectionLimits {
        max_connections: 1024,
        ..limits
    };
    tokio::spawn(serve(
        internal,
        http::Edge::internal(gw.clone()),
        internal_limits,
        std::future::pending(),
    ));
    // A given --advertise-url is checked once: does it reach this replica's hand-off route?
    // (Without one, the internal listener's own address is advertised, right by construction.)
    if advertised.is_some() {
        let checking = gw.clone();
        tokio::spawn(async move {
            switchboard_mcp::endpoint::check_advertised_address(&checking.mcp).await;
        });
    }
    let closing = gw.clone();
    serve(listener, http::Edge::client(gw), limits, async move {
        shutdown(terminate).await;
        leaving_tx.send_replace(true);
        if !drain.is_zero() {
            tracing::info!(?drain, "stopping: draining kept-alive connections");
            draining.start_draining();
            tokio::time::sleep(drain).await;
        }
    })
    .await;
    // Every request has ended (or was cut off at the grace): their records go out now.
    closing.close_audit_log();
    // The goodbye to the operator is a request of its own; let it go out before the process ends.
    if let Some(following) = following
        && tokio::time::timeout(Duration::from_secs(3), following)
            .await
            .is_err()
    {
        tracing::warn!("could not tell the operator this replica is leaving within 3s");
    }
    Ok(())
}

/// TLS settings for the operator's stream; a CA bundle with a plain `http` operator URL is a
/// mistake that would send the stream in clear text, so it stops the gateway.
fn operator_trust(args: &Args) -> anyhow::Result<Option<OperatorTrust>> {
    let Some(bundle) = args.operator_ca.clone() else {
        return Ok(None);
    };
    if let Some(plain) = args.operator.iter().find(|u| u.scheme() != "https") {
        anyhow::bail!("--operator-ca is given but --operator {plain} is not https");
    }
    let name = match (&args.operator_server_name, args.operator.first()) {
        (Some(name), _) => name.clone(),
        (None, Some(url)) => certificate_name(url).unwrap_or_default(),
        (None, None) => String::new(),
    };
    Ok(Some(OperatorTrust::new(bundle, &name)?))
}

fn default_replica_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("gateway-{}", std::process::id()))
}

/// Resolves on SIGTERM (given registered, so a signal that comes before the server runs is
/// not the default action, which ends the process at once) or Ctrl-C.
async fn shutdown(mut term: Option<tokio::signal::unix::Signal>) {
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        Some(()) = async { match term.as_mut() { Some(t) => t.recv().await, None => std::future::pending().await } } => {}
    }
    tracing::info!("shutting down");
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
