//! Loadstar's node sampler: reads this node's CPU, memory, network, disk, filesystem, GPU and
//! per-pod usage, keeps sliding windows of utilisation, and assembles self-contained
//! `NodeReport`s. A library with no runtime and no network, so that both the agent daemon
//! (`loadstar-agent`) and the scorer's standalone mode can sample a node.
//!
//! - [`collector`]: one module per kernel data source (pure parsers + thin I/O).
//! - [`sampler`]: runs the collectors by name and assembles a report.
pub mod collector;
pub mod sampler;
