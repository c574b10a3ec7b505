//! `loadstar-scorer convert-trace`: its flags, and the run that writes a real trace's
//! conversion as the simulator's `nodes.csv`, `trace.csv` and `usage.csv`.
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use thiserror::Error;

use crate::alibaba::{self, AlibabaError, AlibabaOptions, ConvertReport};
use loadstar_sim::cli::{SimError, write_files};

/// Errors of a conversion.
#[derive(Debug, Error)]
pub enum ConvertError {
    /// The trace could not be converted.
    #[error(transparent)]
    Alibaba(#[from] AlibabaError),
    /// An output could not be written.
    #[error(transparent)]
    Output(#[from] SimError),
}

/// Real-trace formats `convert-trace` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TraceFormat {
    /// Alibaba cluster-trace-v2018: `machine_meta.csv`, `container_meta.csv`,
    /// `container_usage.csv`, `batch_task.csv`, `batch_instance.csv` (headerless).
    #[value(name = "alibaba-2018")]
    Alibaba2018,
}

/// Flags of `convert-trace`: a real cluster trace to the simulator's node, trace and usage
/// CSVs (`docs/simulator.md`, "Real traces").
#[derive(Debug, Clone, Args)]
pub struct ConvertArgs {
    /// The trace's format.
    #[arg(long, value_enum, default_value = "alibaba-2018")]
    pub format: TraceFormat,
    /// Directory holding the trace's tables.
    #[arg(long)]
    pub input: PathBuf,
    /// Directory to write `nodes.csv`, `trace.csv`, `usage.csv` and `convert.txt` into
    /// (created).
    #[arg(long)]
    pub out: PathBuf,
    /// Keep only the first N machines by id, and what ran on them (default: all).
    #[arg(long)]
    pub machines: Option<usize>,
    /// Start of the replayed window, trace seconds.
    #[arg(long, default_value_t = 0.0)]
    pub start_s: f64,
    /// Length of the replayed window, seconds (default: to the last event).
    #[arg(long)]
    pub window_s: Option<f64>,
    /// Memory of a machine whose normalised mem_size is 100, GiB.
    #[arg(long, default_value_t = AlibabaOptions::default().machine_memory_gib)]
    pub machine_memory_gib: f64,
    /// NIC speed of every machine, Gbit/s (normalised traffic 100 = this speed).
    #[arg(long, default_value_t = AlibabaOptions::default().nic_gbps)]
    pub nic_gbps: f64,
    /// Disk throughput of every machine, MB/s (disk_io_percent is a share of it).
    #[arg(long, default_value_t = AlibabaOptions::default().disk_mb_per_second)]
    pub disk_mb_per_second: f64,
    /// Period of the CPU bursts given to batch instances from cpu_avg/cpu_max, seconds.
    #[arg(long, default_value_t = AlibabaOptions::default().batch_burst_period_s)]
    pub batch_burst_period_s: f64,
}

/// Converts a real trace into the simulator's CSVs, prints what was kept and skipped and the
/// `simulate` command that replays it.
pub fn convert(args: &ConvertArgs) -> Result<ConvertReport, ConvertError> {
    let options = AlibabaOptions {
        machines: args.machines,
        start_s: args.start_s,
        window_s: args.window_s,
        machine_memory_gib: args.machine_memory_gib,
        nic_gbps: args.nic_gbps,
        disk_mb_per_second: args.disk_mb_per_second,
        batch_burst_period_s: args.batch_burst_period_s,
    };
    let converted = match args.format {
        TraceFormat::Alibaba2018 => alibaba::convert_dir(&args.input, &options)?,
    };
    let dir = &args.out;
    let text = converted.report.render();
    write_files(
        dir,
        &[
            ("nodes.csv", &converted.cluster.to_csv()),
            ("trace.csv", &converted.trace.to_csv()),
            ("usage.csv", &converted.trace.usage_csv()),
            ("convert.txt", &text),
        ],
    )?;
    print!("{text}");
    println!(
        "\nwrote nodes.csv, trace.csv, usage.csv and convert.txt to {d}; replay with\n  \
         loadstar-scorer simulate --node-file {d}/nodes.csv --trace {d}/trace.csv --usage {d}/usage.csv \\\n    \
         --duration-s {w} --profiles loadstar-requests,koordinator-load-aware,loadstar --out <dir>",
        d = dir.display(),
        w = (converted.report.window.1 - converted.report.window.0).ceil()
    );
    Ok(converted.report)
}
