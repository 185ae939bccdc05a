//! `switchboard-stdio-bridge [OPTIONS] -- PROGRAM [ARGS...]`: PROGRAM is a stdio MCP server; the
//! bridge serves it over Streamable HTTP (see the library's docs).
//!
//! `switchboard-stdio-bridge install DIR`: copies this binary into DIR (an init container's
//! job: the Switchboard image has no shell to `cp` with, and the server's image needs none).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use switchboard_stdio_bridge::peers::Peers;
use switchboard_stdio_bridge::pool::{Processes, Settings};
use switchboard_stdio_bridge::process::Launch;
use switchboard_stdio_bridge::serve::{Bridge, router};
use switchboard_stdio_bridge::session_id::Sealer;

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Parser)]
#[command(
    name = "switchboard-stdio-bridge",
    version,
    about = "Serves a stdio MCP server over Streamable HTTP"
)]
struct Args {
    /// Address to listen on.
    #[arg(
        long,
        env = "SWITCHBOARD_BRIDGE_LISTEN",
        default_value = "0.0.0.0:8080"
    )]
    listen: SocketAddr,
    /// The MCP endpoint's path.
    #[arg(long, env = "SWITCHBOARD_BRIDGE_PATH", default_value = "/mcp")]
    path: String,
    /// `host:port` the other replicas reach this one at (the pod IP and port); sealed into
    /// this replica's session ids. Default: the listen address.
    #[arg(long, env = "SWITCHBOARD_BRIDGE_ADVERTISE")]
    advertise: Option<String>,
    /// File holding the key every replica seals session ids with (a Secret). Without one, a
    /// random key: legacy sessions then only work on a single replica.
    #[arg(long, env = "SWITCHBOARD_BRIDGE_SESSION_KEY_FILE")]
    session_key_file: Option<PathBuf>,
    /// The replicas, `host:port` each, comma-separated (in the cluster: the headless Service
    /// of the server's pods, which resolves to every ready pod). A legacy session a gateway
    /// asks for by affinity lives on the one replica they rank highest; without peers, here.
    #[arg(long, env = "SWITCHBOARD_BRIDGE_PEERS", value_delimiter = ',')]
    peers: Vec<String>,
    /// Initialized processes kept ready for 2026-07-28 requests (at least 1).
    #[arg(long, env = "SWITCHBOARD_BRIDGE_POOL_SIZE", default_value_t = 2)]
    pool_size: usize,
    /// Processes alive at once on this replica, pooled and sessions together.
    #[arg(long, env = "SWITCHBOARD_BRIDGE_MAX_PROCESSES", default_value_t = 16)]
    max_processes: usize,
    /// A pooled process beyond the pool size idle this long is stopped.
    #[arg(long, env = "SWITCHBOARD_BRIDGE_PROCESS_IDLE", value_parser = humantime::parse_duration, default_value = "5m")]
    process_idle: Duration,
    /// A legacy session idle this long is ended (its process stopped).
    #[arg(long, env = "SWITCHBOARD_BRIDGE_SESSION_IDLE", value_parser = humantime::parse_duration, default_value = "30m")]
    session_idle: Duration,
    /// How long a process may take to answer `initialize`.
    #[arg(long, env = "SWITCHBOARD_BRIDGE_INIT_TIMEOUT", value_parser = humantime::parse_duration, default_value = "30s")]
    init_timeout: Duration,
    /// How long a 2026-07-28 request waits for a process when all are busy and no more may start.
    #[arg(long, env = "SWITCHBOARD_BRIDGE_QUEUE_TIMEOUT", value_parser = humantime::parse_duration, default_value = "30s")]
    queue_timeout: Duration,
    /// After SIGTERM: readiness fails at once, requests are served this long still (the
    /// endpoints update), then open requests get up to --shutdown-grace to finish.
    #[arg(long, env = "SWITCHBOARD_BRIDGE_DRAIN_DELAY", value_parser = humantime::parse_duration, default_value = "5s")]
    drain_delay: Duration,
    #[arg(long, env = "SWITCHBOARD_BRIDGE_SHUTDOWN_GRACE", value_parser = humantime::parse_duration, default_value = "15s")]
    shutdown_grace: Duration,
    #[arg(
        long,
        env = "SWITCHBOARD_BRIDGE_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    /// The stdio server: program and arguments.
    #[arg(required = true, last = true)]
    command: Vec<String>,
}

fn main() -> std::process::ExitCode {
    // A start that fails says why on one line (a port in use names its flag), no backtrace.
    switchboard_telemetry::start::exit_code(start())
}

fn start() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("install") {
        let [_, _, dir] = argv.as_slice() else {
            anyhow::bail!("usage: switchboard-stdio-bridge install DIR");
        };
        return install(std::path::Path::new(dir));
    }
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let telemetry = switchboard_telemetry::init(
                "switchboard-stdio-bridge",
                matches!(args.log_format, LogFormat::Json),
            )?;
            let served = run(args).await;
            let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
            served
        })
}

async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.pool_size >= 1,
        "--pool-size: at least 1 (readiness waits for a process to answer initialize)"
    );
    anyhow::ensure!(
        args.max_processes >= args.pool_size,
        "--max-processes ({}) is below --pool-size ({})",
        args.max_processes,
        args.pool_size
    );
    let key = match &args.session_key_file {
        Some(path) => {
            let key = std::fs::read(path)
                .map_err(|e| anyhow::anyhow!("--session-key-file {}: {e}", path.display()))?;
            anyhow::ensure!(
                key.trim_ascii().len() >= 16,
                "--session-key-file {}: fewer than 16 bytes",
                path.display()
            );
            Some(key.trim_ascii().to_vec())
        }
        None => {
            tracing::warn!("no --session-key-file: legacy sessions work on this replica only");
            None
        }
    };
    let listener = switchboard_telemetry::start::bind("--listen", &args.listen.to_string()).await?;
    let local = listener.local_addr()?;
    let advertise = args.advertise.clone().unwrap_or_else(|| local.to_string());
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("no command given after --"))?;
    let launch = Launch {
        program: program.clone(),
        args: rest.to_vec(),
    };
    let settings = Settings {
        pool_size: args.pool_size,
        max_processes: args.max_processes,
        process_idle: args.process_idle,
        session_idle: args.session_idle,
        init_timeout: args.init_timeout,
        queue_timeout: args.queue_timeout,
    };
    let processes = Processes::new(launch, advertise.clone(), settings);
    tokio::spawn(processes.clone().maintain());
    let bridge = Arc::new(Bridge::new(
        processes.clone(),
        Sealer::new(key.as_deref()),
        advertise,
        args.path.clone(),
        args.init_timeout,
        Peers::new(args.peers.clone()),
    ));
    println!("switchboard-stdio-bridge listening on http://{local}");

    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let draining = bridge.clone();
    let drain_delay = args.drain_delay;
    tokio::spawn(async move {
        shutdown_signal().await;
        draining.draining.store(true, Ordering::Relaxed);
        tracing::info!(
            "draining: readiness fails; serving for {}",
            humantime::format_duration(drain_delay)
        );
        // The sessions here end with this replica: the others are told (bounded), so that a
        // gateway that asks one of them for such a session later hears that it ended.
        tokio::join!(draining.announce_ended(), tokio::time::sleep(drain_delay));
        let _ = stop_tx.send(true);
    });
    let mut stop = stop_rx.clone();
    let server = axum::serve(listener, router(bridge)).with_graceful_shutdown(async move {
        let _ = stop.wait_for(|s| *s).await;
    });
    let grace = args.shutdown_grace;
    let bounded = async move {
        let _ = stop_rx.wait_for(|s| *s).await;
        tokio::time::sleep(grace).await;
    };
    let failed = processes.clone();
    tokio::select! {
        served = server => served?,
        _ = bounded => tracing::warn!("requests still open after the shutdown grace: ending them"),
        why = failed.failed() => {
            // The server cannot be started: exit, so that the pod shows a crash with the reason
            // (Kubernetes reads it from the termination log).
            let _ = std::fs::write("/dev/termination-log", format!("gave up: {why}\n"));
            processes.stop_all(Duration::from_secs(2)).await;
            anyhow::bail!("gave up: {why}");
        }
    }
    processes.stop_all(Duration::from_secs(5)).await;
    tracing::info!("stopped");
    Ok(())
}

/// Copies the running binary to `dir/switchboard-stdio-bridge`, executable by anyone (the
/// server's container may run as another user than the init container).
fn install(dir: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let me = std::env::current_exe()?;
    let to = dir.join("switchboard-stdio-bridge");
    let partial = dir.join(".switchboard-stdio-bridge.partial");
    std::fs::copy(&me, &partial)
        .map_err(|e| anyhow::anyhow!("copying {} to {}: {e}", me.display(), partial.display()))?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&partial, &to)?;
    println!("installed {}", to.display());
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
