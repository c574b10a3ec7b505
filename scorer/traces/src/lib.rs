//! Real cluster traces for the simulator: converters from published trace formats into
//! `loadstar-sim`'s cluster and trace ([`alibaba`]: Alibaba cluster-trace-v2018), and the
//! `convert-trace` subcommand ([`cli`]). See `docs/simulator.md`, "Real traces".
pub mod alibaba;
pub mod cli;
