//! Loadstar's scheduling framework, the bottom layer of the scorer: the immutable
//! [`ClusterSnapshot`](snapshot::ClusterSnapshot) that scoring reads, the filter and score
//! plugin traits, and [`Profile::evaluate`]. Pure: no I/O, no clock reads, no RPC.
pub mod constraints;
pub mod images;
pub mod preemption;
pub mod profile;
pub mod sampling;
pub mod snapshot;
pub mod volumes;

pub use profile::*;
pub use sampling::{NodeSampling, SampleCursor};
