//! Autoscaling decisions, pure: the research's step-tolerance algorithm ([`step`]) and, as its
//! peer, Kubernetes 1.20's HorizontalPodAutoscaler ([`hpa`]); the `StepScaler` resource's spec
//! ([`spec`]), each pod's recent usage from the agents ([`usage`]) and one controller poll over
//! them ([`poll`]). The simulator and the StepScaler controller (`loadstar-autoscaler`) call
//! these with their own clocks.
pub mod admission;
pub mod hpa;
pub mod poll;
pub mod spec;
pub mod step;
pub mod usage;
