//! `switchboard-scripted-provider`: a scripted LLM provider for Switchboard's tests and demo.
//! It serves the Anthropic Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`)
//! and the OpenAI Chat Completions API (`POST /v1/chat/completions`), streaming and not, plus
//! `GET /v1/models`, and answers model calls from rules posted to `POST /_script`. Every
//! provider request is recorded for `GET /_requests`. The full interface is in this crate's
//! README.md.
//!
//! ```text
//! switchboard-scripted-provider [--listen 127.0.0.1:8932] [--api-key KEY] [--record 1000] [--script FILE]
//! ```
//!
//! When ready it prints one line to stdout, `listening on http://ADDR`, with the real port
//! (so `--listen 127.0.0.1:0` works). Each request is logged to stderr as one line with its
//! method, path and status; bodies never are.

mod answer;
mod anthropic;
mod app;
mod auth;
mod conversation;
mod ids;
mod openai;
mod provider;
mod record;
mod script;
mod sse;

use std::io::{IsTerminal as _, Write as _};
use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;

#[derive(Parser)]
#[command(
    version,
    about = "Scripted LLM provider (Anthropic Messages and OpenAI Chat Completions) for tests"
)]
struct Cli {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8932")]
    listen: SocketAddr,
    /// Require this key: `x-api-key` on Anthropic paths, `Authorization: Bearer` on OpenAI
    /// paths, either on `GET /v1/models`.
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
    /// How many requests `/_requests` keeps (the oldest are dropped; 0 records nothing).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    record: usize,
    /// Rules to start with: a JSON file shaped like a `POST /_script` body (the demo's).
    #[arg(long, value_name = "FILE")]
    script: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // One line saying why, never a backtrace (a port in use names --listen and the address).
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> std::io::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
    let rules = match &cli.script {
        Some(path) => script::parse(&std::fs::read(path)?)
            .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display())))?,
        None => Vec::new(),
    };
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("--listen {}: {e}", cli.listen)))?;
    let listen = listener.local_addr()?;
    let app = Arc::new(app::App {
        script: script::Script::default(),
        recorder: record::Recorder::new(cli.record),
        api_key: cli.api_key,
    });
    app.script.replace(rules);
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on http://{listen}")?;
    out.flush()?;
    drop(out);
    // No graceful drain: scripted delays may hold requests for long, so a signal just exits.
    tokio::select! {
        served = axum::serve(listener, app::router(app)) => served,
        () = shutdown() => Ok(()),
    }
}

async fn shutdown() {
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        return;
    }
    let _ = tokio::signal::ctrl_c().await;
}
