//! Runs the placement simulator (`loadstar-scorer simulate` with the same flags), e.g.
//! `cargo run --release -p loadstar-sim --example simulate -- --scenario paper --out docs/results/paper`.
use clap::Parser;
use loadstar_sim::cli::{self, SimArgs};

/// The simulator's flags.
#[derive(Debug, Parser)]
#[command(
    name = "simulate",
    about = "Deterministic, trace-driven placement simulator"
)]
struct Cli {
    #[command(flatten)]
    sim: SimArgs,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    cli::execute(&cli.sim)?;
    Ok(())
}
