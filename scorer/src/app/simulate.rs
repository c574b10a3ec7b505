//! `loadstar-scorer simulate`: the placement simulator (see [`loadstar_sim`] and
//! `docs/simulator.md`). Thin: the flags and the run live in [`loadstar_sim::cli`].
use clap::Args;

use crate::app::AppError;
use loadstar_sim::cli::{self, SimArgs};

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
