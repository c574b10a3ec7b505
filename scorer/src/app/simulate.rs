//! `loadstar-scorer simulate` and `convert-trace`: the placement simulator (see [`loadstar_sim`] and
//! `docs/simulator.md`), and with `--scenario autoscale` the autoscaling comparison
//! ([`loadstar_autoscale_sim`]). Thin: the flags and the runs live in those crates.
use clap::Args;

use crate::app::AppError;
use loadstar_sim::cli::{self, SimArgs};
use loadstar_traces::cli::ConvertArgs;

/// Flags of `simulate`.
#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// The simulator's flags.
    #[command(flatten)]
    pub sim: SimArgs,
}

/// Runs the simulation, prints the table and writes the outputs.
pub fn run(args: SimulateArgs) -> Result<(), AppError> {
    if args.sim.scenario.as_deref() == Some("autoscale") {
        return loadstar_autoscale_sim::execute(&args.sim)
            .map(drop)
            .map_err(|e| AppError::Other(format!("simulate: {e}")));
    }
    cli::execute(&args.sim).map_err(|e| AppError::Other(format!("simulate: {e}")))
}

/// Flags of `convert-trace`.
#[derive(Debug, Clone, Args)]
pub struct ConvertTraceArgs {
    /// The converter's flags.
    #[command(flatten)]
    pub convert: ConvertArgs,
}

/// Converts a real trace into the simulator's CSVs.
pub fn convert(args: ConvertTraceArgs) -> Result<(), AppError> {
    loadstar_traces::cli::convert(&args.convert)
        .map(drop)
        .map_err(|e| AppError::Other(format!("convert-trace: {e}")))
}
