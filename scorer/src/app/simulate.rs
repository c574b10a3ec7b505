//! `loadstar-scorer simulate` and `convert-trace`: the placement simulator (see [`loadstar_sim`] and
//! `docs/simulator.md`). Thin: the flags and the run live in [`loadstar_sim::cli`].
use clap::Args;

use crate::app::AppError;
use loadstar_sim::cli::{self, ConvertArgs, SimArgs};

/// Flags of `simulate`.
#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// The simulator's flags.
    #[command(flatten)]
    pub sim: SimArgs,
}

/// Runs the simulation, prints the table and writes the outputs.
pub fn run(args: SimulateArgs) -> Result<(), AppError> {
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
    cli::convert(&args.convert)
        .map(drop)
        .map_err(|e| AppError::Other(format!("convert-trace: {e}")))
}
