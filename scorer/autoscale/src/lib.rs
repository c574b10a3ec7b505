//! Autoscaling decisions, pure: the research's step-tolerance algorithm ([`step`]) and, as its
//! peer, Kubernetes 1.20's HorizontalPodAutoscaler ([`hpa`]). The simulator compares them;
//! callers poll with the time, the replica count and each pod's measured utilisation.
pub mod hpa;
pub mod step;
