//! Loadstar's live cluster state, the layer above the policy library: the node store fed by
//! agent reports and Kubernetes facts, the one place where incoming reports are validated,
//! the seams through which the API layer asks the Kubernetes integration for pods and
//! bindings, the record of recent placement decisions, and the scorer's metrics.
pub mod cluster;
pub mod decisions;
mod images;
pub mod metrics;
mod store;
pub mod validate;

pub use store::*;
