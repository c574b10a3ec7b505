//! Loadstar's node agent: samples the node's CPU, memory, network, disk, filesystem, GPU and
//! per-pod usage every interval, keeps sliding windows of utilisation, and streams
//! self-contained `NodeReport`s to every scorer replica.
//!
//! - [`collector`]: one module per kernel data source (pure parsers + thin I/O).
//! - [`sampler`]: runs the collectors and assembles a report — also used by the scorer's
//!   standalone mode.
//! - [`report`]: streams reports to scorers with reconnect, backoff and jitter.
//! - [`metrics`]: the agent's own `/metrics` and `/healthz`.
//! - [`config`]: command-line configuration.
//! - [`daemon`]: wires them together and shuts down in bounded time.
pub mod collector;
pub mod config;
pub mod daemon;
pub mod metrics;
pub mod report;
pub mod sampler;

mod entropy;
