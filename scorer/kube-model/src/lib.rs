//! Kubernetes objects as the scheduler sees them: pure, unit-tested conversions of pods,
//! nodes, placement constraints and attachable volumes into the framework's types, apart from
//! the client (`loadstar-kube-client`) and the reflectors and runtime of `loadstar-kube`
//! (which re-exports these modules under their old paths). Depends on `k8s-openapi` for the object types only.
pub mod attach;
pub mod binding;
pub mod capacity;
pub mod constraints;
pub mod convert;
pub mod lease;
pub mod listing;
pub mod release;
pub mod requests;
pub mod volume_lookup;
