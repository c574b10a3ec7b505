//! `loadstar-scorer`: parses the command line and runs one mode; the work lives in the library.
use anyhow::Context;
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
    /// Threads of the main runtime: everything but gRPC — the Kubernetes watches and
    /// writes, the scheduling loop, the extender, the admission webhook, the metrics.k8s.io
    /// API, the autoscaler, the metrics server and UI. gRPC (agent streams, scoring) has its
    /// own runtime (`--grpc-threads`). One is the default, run by tokio's current-thread
    /// scheduler: the scheduling loop is serial anyway, and a second worker mostly adds
    /// wake-ups between threads — one worker used about 10 % less CPU per pod than two at
    /// the same pods/s, at 1 000 and at 5 000 nodes, and the current-thread scheduler 6 %
    /// and 9 % less again (order-balanced paired rounds; bench/README.md, "Scheduler
    /// throughput", 2026-11-28 and its morning). More may help when the extender, the
    /// webhook or many watches are busy on a machine with cores to spare.
    #[arg(
        long,
        global = true,
        default_value = "1",
        env = "LOADSTAR_MAIN_THREADS",
        value_parser = clap::value_parser!(u16).range(1..=1024)
    )]
    main_threads: u16,
    /// Threads of the gRPC runtime: agent streams, `Score`, `Bind` and the other services.
    /// One, the default, runs tokio's current-thread scheduler on a thread of its own, as
    /// `--main-threads 1` does; 0 is a multi-thread runtime with one worker per CPU the
    /// process may run on (the setting before this flag). With one thread no report wakes a
    /// second worker: at 5 000 agents, scheduling at 5 000 nodes on two CPUs, ingest took
    /// 17 % less CPU and the scheduling loop 4 % less than with a worker per CPU
    /// (bench/README.md, "Scheduler throughput", 2026-11-30 night). `Score` evaluations run
    /// beside it, one per CPU but one at a time, on blocking threads (`loadstar-pool`), so a call
    /// over 20 000 nodes (~30 ms) does not hold reports up. When ingest keeps the one thread
    /// busy (its CPU is that of the thread named `loadstar-grpc`), raise it.
    #[arg(
        long,
        global = true,
        default_value = "1",
        env = "LOADSTAR_GRPC_THREADS",
        value_parser = clap::value_parser!(u16).range(0..=1024)
    )]
    grpc_threads: u16,
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

/// The stack of the one-thread runtime's thread: the usual main-thread stack (the common
/// `RLIMIT_STACK` default), where the runtime's top-level future ran before.
const MAIN_STACK_BYTES: usize = 8 << 20;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    app::init_logging(cli.log_format);
    // One thread: tokio's current-thread scheduler, driven on a thread of its own (named,
    // with the main thread's stack), where its tasks run without the multi-thread
    // scheduler's hand-offs between a parked main thread and a worker (see `main_threads`).
    let one = cli.main_threads == 1;
    let mut builder = if one {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(usize::from(cli.main_threads));
        b
    };
    let runtime = builder
        .thread_name(app::MAIN_THREAD_NAME)
        .enable_all()
        .build()
        .context("starting the main tokio runtime")?;
    if !one {
        return runtime.block_on(run(cli.command, cli.grpc_threads));
    }
    std::thread::Builder::new()
        .name(app::MAIN_THREAD_NAME.to_string())
        .stack_size(MAIN_STACK_BYTES)
        .spawn(move || runtime.block_on(run(cli.command, cli.grpc_threads)))
        .context("starting the main runtime's thread")?
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

async fn run(command: Command, grpc_threads: u16) -> anyhow::Result<()> {
    let grpc = app::GrpcThreads(grpc_threads);
    match command {
        Command::Standalone(args) => app::standalone::run(args, grpc).await?,
        Command::Serve(args) => app::serve::run(*args, grpc).await?,
        Command::Simulate(args) => {
            tokio::task::spawn_blocking(move || app::simulate::run(args)).await??
        }
        Command::ConvertTrace(args) => {
            tokio::task::spawn_blocking(move || app::simulate::convert(args)).await??
        }
    }
    Ok(())
}
