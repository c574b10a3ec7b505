//! The Kubernetes integration: Node and Pod reflectors feeding the node store, a priority
//! scheduling queue with backoff, and the assume-then-bind scheduler loop with Events and
//! conditions. The rate-limited client, watch health, Lease-based leader election and the
//! API server's reviews are `loadstar-kube-client`'s, re-exported here under the same paths.
//!
//! The flow follows kube-scheduler's: watch → trim → convert → cache (the [`NodeStore`] for
//! nodes and their allocations, [`cache::ClusterCache`] for pods) → queue → evaluate the
//! profile on a snapshot that includes earlier assumptions → assume → bind asynchronously.
//!
//! [`NodeStore`]: loadstar_store::NodeStore
pub use loadstar_kube_client::{client, leader, review, watch_health};
pub use loadstar_kube_model::{attach, constraints, convert, volume_lookup};

pub mod api;
pub mod cache;
pub mod capacity;
pub mod default_selector;
pub mod disruption;
pub mod protobuf;
pub mod queue;
pub mod reservations;
pub mod runtime;
pub mod scheduler;
pub mod volume_binder;
pub mod volumes;
pub mod watched_pod;
