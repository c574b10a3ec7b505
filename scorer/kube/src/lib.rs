//! The Kubernetes integration: a rate-limited client, Node and Pod reflectors feeding the node
//! store, a priority scheduling queue with backoff, the assume-then-bind scheduler loop with
//! Events and conditions, and Lease-based leader election.
//!
//! The flow follows kube-scheduler's: watch → trim → convert → cache (the [`NodeStore`] for
//! nodes and their allocations, [`cache::ClusterCache`] for pods) → queue → evaluate the
//! profile on a snapshot that includes earlier assumptions → assume → bind asynchronously.
//!
//! [`NodeStore`]: loadstar_store::NodeStore
pub use loadstar_kube_model::{attach, constraints, convert, volume_lookup};

pub mod api;
pub mod cache;
pub mod capacity;
pub mod client;
pub mod default_selector;
pub mod disruption;
pub mod leader;
pub mod protobuf;
pub mod queue;
pub mod reservations;
pub mod review;
pub mod runtime;
pub mod scheduler;
pub mod volume_binder;
pub mod volumes;
pub mod watch_health;
pub mod watched_pod;
