//! `loadstar-agent`: parses flags, sets up logging, runs the agent until SIGTERM or SIGINT,
//! then shuts down within `--shutdown-timeout`.
use anyhow::Context;
use clap::Parser;
use std::io::IsTerminal;

use loadstar_agent::config::{AgentConfig, LogFormat};
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

fn main() -> anyhow::Result<()> {
    let config = AgentConfig::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
            .init(),
    }
    // One thread for all network work; sampling has its own thread.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(async {
        let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
        let mut int = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received"),
                _ = int.recv() => tracing::info!("SIGINT received"),
            }
        };
        loadstar_agent::daemon::run(config, shutdown)
            .await
            .context("loadstar-agent")
    })
}
