//! Loadstar's node agent: the daemon that samples this node every interval with
//! `loadstar-sampler` and streams the self-contained `NodeReport`s to every scorer replica.
//!
//! - [`report`]: streams reports to scorers with reconnect, backoff and jitter.
//! - [`metrics`]: the agent's own `/metrics` and `/healthz`.
//! - [`config`]: command-line configuration.
//! - [`daemon`]: wires them together and shuts down in bounded time.
//!
//! The collectors and the sampler live in `loadstar_sampler`, which the scorer's standalone
//! mode uses too.
pub mod config;
pub mod daemon;
pub mod metrics;
pub mod report;
