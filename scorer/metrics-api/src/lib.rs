//! `metrics.k8s.io/v1beta1` served from the agents' data as an aggregated API, as
//! metrics-server serves it, so `kubectl top nodes/pods` and the stock HPA run on Loadstar's
//! fresher readings: label selectors (`selector`, pure), the wire format (`wire`, pure) and the
//! HTTPS server behind the API server's front proxy (`server`).
pub mod selector;
pub mod server;
pub mod wire;
