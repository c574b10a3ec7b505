//! Loadstar's scorer: ingests agents' load reports into a live node store, scores nodes for
//! pods with real-load policies, serves the `loadstar.v1` gRPC API, and schedules pods.
pub mod app;
pub mod config;
pub mod framework;
pub mod ingest;
pub mod kube;
pub mod metrics;
pub mod policy;
pub mod server;
pub mod service;
pub mod sim;
pub mod simagent;
pub mod snapshot;
pub mod store;
