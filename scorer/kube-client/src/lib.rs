//! The Kubernetes plumbing the scheduler stands on, apart from it so that it builds and is
//! tested on its own: a rate-limited client, how a watch's health reaches the operator,
//! Lease-based leader election, and the API server's TokenReview and SubjectAccessReview.
//! `loadstar-kube` re-exports each module under its own paths.

pub mod client;
pub mod leader;
pub mod review;
pub mod watch_health;
