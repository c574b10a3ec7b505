//! Loadstar's test kit, for tests, benchmarks and the load generator only (a dev-dependency,
//! never a production dependency): synthetic agent reports with chosen loads, and builders
//! for nodes, pods and snapshots, a throwaway PKI for TLS tests, and a paging `ListNodes`
//! reader.
pub mod agent;
pub mod client;
pub mod pki;
pub mod snapshot;
pub mod wire;
