//! Loadstar's gRPC layer: the `loadstar.v1` services (`Ingest` for agents, `Scorer` and
//! `Scheduler` for clients), gRPC health and reflection, assembled into one server. This is
//! the only layer that speaks `tonic`: domain errors from the layers below become a
//! [`tonic::Status`] here ([`status`]).
pub mod aligned;
pub mod gate;
pub mod ingest;
pub mod listener;
pub mod pacing;
pub mod podspec;
pub mod scheduler;
pub mod scorer;
pub mod server;
pub mod status;
pub mod watch;

/// The message for calls that need Kubernetes when the scorer runs without it.
pub const NO_KUBERNETES: &str = "this scorer has no Kubernetes connection (standalone mode or no \
--kubeconfig / in-cluster config): pod references cannot be resolved and pods cannot be bound; \
describe the pod inline with `description` instead";
