//! The seams between the API layer and the Kubernetes integration, in domain terms: looking
//! up a pod by reference and placing-and-binding it. The Kubernetes crate implements them;
//! the gRPC crate calls them and maps [`ClusterError`] to a gRPC status. Neither knows the
//! other, and neither trait mentions the wire types.
use std::sync::Arc;

use loadstar_framework::preemption::DisruptionBudget;
use loadstar_framework::snapshot::{ClusterSnapshot, PodInfo};
use loadstar_framework::{Evaluation, Profile};
use thiserror::Error;

/// Why the cluster integration could not answer; each variant's text is shown to the caller
/// as is.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ClusterError {
    /// The integration cannot answer right now (not the leader, caches not synced yet).
    #[error("{0}")]
    Unavailable(String),
    /// The pod or node named is not known.
    #[error("{0}")]
    NotFound(String),
    /// The request cannot be carried out in the cluster's current state (pod already bound,
    /// pod spec not understood, no feasible node, no profile configured).
    #[error("{0}")]
    FailedPrecondition(String),
    /// Another writer got there first (the pod was bound elsewhere meanwhile).
    #[error("{0}")]
    Conflict(String),
    /// The attempt was abandoned midway (e.g. the assumption could not be recorded).
    #[error("{0}")]
    Aborted(String),
    /// The caller's input is malformed (a pod that is not a valid core/v1 Pod).
    #[error("{0}")]
    Invalid(String),
    /// The request is not this scorer's to carry out (a pod of another scheduler).
    #[error("{0}")]
    PermissionDenied(String),
}

/// Reads a whole Kubernetes pod (JSON) into the scheduler's view of it, exactly as cluster
/// pods are read (implemented by the Kubernetes integration; pure, no cluster needed).
pub trait PodDecoder: Send + Sync + std::fmt::Debug {
    /// The pod as the scheduler would see it.
    fn decode(&self, json: &str) -> Result<PodInfo, ClusterError>;
}

/// The cluster's PodDisruptionBudgets, for preemption answers (implemented by the
/// Kubernetes integration).
pub trait BudgetSource: Send + Sync + std::fmt::Debug {
    /// Every budget as last seen.
    fn disruption_budgets(&self) -> Vec<DisruptionBudget>;
}

/// A request to place and bind one pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BindRequest {
    /// The pod's namespace (empty: `default`).
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// Profile to use (empty: the pod's `schedulerName` if it names one, else the default).
    pub profile: String,
    /// Bind to this node if it is feasible (empty: the best node).
    pub node_name: String,
    /// Bind it even if its `schedulerName` is not one of the scorer's profiles.
    pub other_schedulers: bool,
}

/// How a pod was placed: the node and the evaluation that chose it.
#[derive(Debug, Clone)]
pub struct BindOutcome {
    /// The node the pod is now bound to.
    pub node_name: String,
    /// The profile that decided.
    pub profile: Arc<Profile>,
    /// The snapshot the decision was made on (node indices in `evaluation` refer to it).
    pub snapshot: Arc<ClusterSnapshot>,
    /// Every node's verdict.
    pub evaluation: Evaluation,
}

/// Looks up a pod in the cluster by reference (implemented by the Kubernetes integration).
#[async_trait::async_trait]
pub trait PodResolver: Send + Sync + std::fmt::Debug {
    /// The pod `namespace/name` as the scheduler would see it.
    async fn resolve(&self, namespace: &str, name: &str) -> Result<PodInfo, ClusterError>;
}

/// Places and binds a pod by reference (implemented by the Kubernetes scheduler).
#[async_trait::async_trait]
pub trait Binder: Send + Sync + std::fmt::Debug {
    /// Binds the pod, to `request.node_name` if set, else to the best node of the profile.
    async fn bind(&self, request: BindRequest) -> Result<BindOutcome, ClusterError>;
}
