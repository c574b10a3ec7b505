//! The scorer's HTTPS APIs for the API server. `metrics.k8s.io/v1beta1` served from the
//! agents' data as an aggregated API, as metrics-server serves it, so `kubectl top nodes/pods`
//! and the stock HPA run on Loadstar's fresher readings: label selectors (`selector`, pure), the
//! wire format (`wire`, pure) and the HTTPS server behind the API server's front proxy
//! (`server`). And the StepScaler validating admission webhook (`admission`), which refuses
//! what the CRD's schema cannot express on Kubernetes 1.20.
pub mod admission;
pub mod selector;
pub mod server;
pub mod wire;
