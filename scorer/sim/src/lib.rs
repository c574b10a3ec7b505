//! A deterministic, trace-driven cluster simulator: heterogeneous nodes, a workload trace
//! whose real usage differs from its requests, simulated agents that keep the same
//! [`WindowSet`](loadstar_common::window::WindowSet)s as the real agent, and a scheduling
//! loop that builds [`ClusterSnapshot`](loadstar_framework::snapshot::ClusterSnapshot)s and calls the very
//! same [`Profile::evaluate_sampled`](loadstar_framework::Profile::evaluate_sampled) and plugins as the scorer's scheduler.
//! It measures how evenly each profile spreads real load (stddev, hot-node-minutes, the seed
//! paper's balance efficiency H(i)), why pods wait, and how GPUs fragment; it writes tables
//! (text, CSV, JSON) and plots (SVG, PNG). See `docs/simulator.md`.
//!
//! Layers, least powerful first: [`csv`] parses tables; [`cluster`] and [`trace`] describe
//! and generate the inputs (`loadstar-traces` converts real cluster traces into them); [`agent`] turns pod usage into windowed load reports;
//! [`engine`] runs one profile over one trace; [`measure`] accumulates the measures;
//! [`report`] and [`plot`] write them; [`seeds`] aggregates a scenario over several seeds;
//! [`scenario`] names the built-in comparisons; [`cli`]
//! is the `simulate` subcommand's flags and entry point.
pub mod agent;
pub mod cli;
pub mod cluster;
pub mod csv;
pub mod engine;
pub mod measure;
pub mod mix;
pub mod plot;
pub mod report;
pub mod scenario;
pub mod seeds;
pub mod settings;
pub mod trace;

pub use engine::{RunResult, SimSettings, simulate};
