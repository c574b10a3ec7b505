//! Shared core of Loadstar with no I/O and no RPC stack: sliding-window statistics, Kubernetes
//! quantities, the retry backoff and the domain types the agent, scorer and simulator share. The wire protocol
//! lives in `loadstar-proto`.
pub mod backoff;
pub mod exposition;
pub mod model;
pub mod pace;
pub mod procstat;
pub mod quantity;
pub mod rate;
pub mod text;
pub mod window;

/// The version of this build, reported by agents and shown by `--version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
