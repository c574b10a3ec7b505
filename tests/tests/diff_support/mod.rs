//! Support of the differential test `e2e_diff.rs` (kube-scheduler v1.20.2 vs Loadstar's
//! filters): what a scenario is, the seeded generator of scenarios, the recording filter
//! extender, the dedicated kube-scheduler process, storage objects on the API server and the
//! runner that asks both schedulers about one scenario.
pub mod extender;
pub mod generator;
pub mod kube_scheduler;
pub mod runner;
pub mod scenario;
pub mod storage;
