//! `switchboard-gateway --config FILE [--listen ADDR]`: standalone mode.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, ValueEnum};
use switchboard_gateway::{config_file, http, state::Gateway};
use tracing_subscriber::EnvFilter;

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
    /// Config file (the snapshot schema in YAML); re-read on change and on SIGHUP.
    #[arg(long, env = "SWITCHBOARD_CONFIG")]
    config: PathBuf,
    /// Address to listen on.
    #[arg(long, env = "SWITCHBOARD_LISTEN", default_value = "127.0.0.1:8080")]
    listen: String,
    /// Log format.
    #[arg(
        long,
        env = "SWITCHBOARD_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logging(args.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let gw = Arc::new(Gateway::new());
    // Registered before the first load, so a SIGHUP at any time reloads rather than kills.
    let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let Ok(applied) = config_file::reload(&gw, &args.config) else {
        anyhow::bail!(
            "the config file {} is not valid (see the error above)",
            args.config.display()
        );
    };
    let watcher = config_file::watch(gw.clone(), args.config.clone(), Some(applied), hangup);
    tokio::spawn(watcher);
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "listening");
    // Tests and scripts wait for this line on stdout.
    println!("switchboard-gateway listening on http://{addr}");
    std::io::stdout().flush()?;
    axum::serve(listener, http::router(gw))
        .with_graceful_shutdown(shutdown())
        .await?;
    Ok(())
}

async fn shutdown() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        Some(()) = async { match term.as_mut() { Some(t) => t.recv().await, None => std::future::pending().await } } => {}
    }
    tracing::info!("shutting down");
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
