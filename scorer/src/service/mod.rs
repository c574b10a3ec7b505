//! The client-facing gRPC services (`Scorer`, `Scheduler`) and the seams through which the
//! Kubernetes integration plugs into them.
pub mod podspec;
pub mod scheduler;
pub mod scorer;

use loadstar_common::pb;
use tonic::Status;

use crate::snapshot::PodInfo;

/// Looks up a pod in the cluster by reference (implemented by the Kubernetes integration).
#[tonic::async_trait]
pub trait PodResolver: Send + Sync + std::fmt::Debug {
    /// The pod `namespace/name` as the scheduler would see it.
    async fn resolve(&self, namespace: &str, name: &str) -> Result<PodInfo, Status>;
}

/// Places and binds a pod by reference (implemented by the Kubernetes scheduler).
#[tonic::async_trait]
pub trait Binder: Send + Sync + std::fmt::Debug {
    /// Binds the pod, to `request.node_name` if set, else to the best node of the profile.
    async fn bind(&self, request: pb::BindRequest) -> Result<pb::BindResponse, Status>;
}

/// The message for calls that need Kubernetes when the scorer runs without it.
pub const NO_KUBERNETES: &str = "this scorer has no Kubernetes connection (standalone mode or no \
--kubeconfig / in-cluster config): pod references cannot be resolved and pods cannot be bound; \
describe the pod inline with `description` instead";
