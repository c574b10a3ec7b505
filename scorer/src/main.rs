//! `loadstar-scorer`: parses the command line and runs one mode; the work lives in the library.
use clap::{Parser, Subcommand};

mod app;

/// mimalloc instead of glibc's allocator. With thousands of agents streaming reports, every
/// report decoded, applied and dropped on the tokio workers, glibc spent ~20 % of the
/// scorer's CPU in its own bookkeeping while scheduling (`_int_malloc`, `malloc_consolidate`,
/// `unlink_chunk`: its arenas consolidate and trim around the large per-pod blocks); see
/// `bench/README.md` ("Scheduler throughput"). Vector and TiKV replace it for the same reason.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Loadstar scorer: real-load-aware node scores over gRPC, and a Kubernetes scheduler.
#[derive(Debug, Parser)]
#[command(name = "loadstar-scorer", version, about)]
struct Cli {
    /// Log line format (level and targets: `RUST_LOG`, default `info`).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "LOADSTAR_LOG_FORMAT"
    )]
    log_format: app::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run with an in-process agent sampling this machine; no Kubernetes needed.
    Standalone(app::standalone::StandaloneArgs),
    /// Run the central service: agents stream to it, clients score with it.
    Serve(Box<app::serve::ServeArgs>),
    /// Replay a workload on a simulated cluster with several profiles and compare placements.
    Simulate(app::simulate::SimulateArgs),
    /// Convert a real cluster trace (Alibaba cluster-trace-v2018) into `simulate`'s inputs.
    ConvertTrace(app::simulate::ConvertTraceArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    app::init_logging(cli.log_format);
    match cli.command {
        Command::Standalone(args) => app::standalone::run(args).await?,
        Command::Serve(args) => app::serve::run(*args).await?,
        Command::Simulate(args) => {
            tokio::task::spawn_blocking(move || app::simulate::run(args)).await??
        }
        Command::ConvertTrace(args) => {
            tokio::task::spawn_blocking(move || app::simulate::convert(args)).await??
        }
    }
    Ok(())
}
