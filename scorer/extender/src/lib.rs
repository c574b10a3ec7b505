//! Loadstar as a kube-scheduler extender: the stock kube-scheduler keeps every predicate and
//! plugin of its own and calls this HTTP endpoint to add the real-load view — **filter** with
//! a profile's load-aware filters (usage thresholds, eviction pressure) and stale-node policy,
//! **prioritize** with its load-aware scores scaled to the extender's 0–10 range.
//!
//! The protocol is `k8s.io/kube-scheduler/extender/v1` as kube-scheduler 1.20 speaks it
//! ([`wire`]); the decisions are pure functions of the node store's snapshot ([`verdict`]);
//! [`server`] is the HTTP side: routes `POST /extender/v1/{profile}/filter` and
//! `/prioritize`, request limits, metrics; [`tls`] serves it over HTTPS when given a
//! certificate and key. Bind is not served (kube-scheduler binds itself
//! when no extender has a `bindVerb`).
pub mod server;
pub mod tls;
pub mod verdict;
pub mod wire;

pub use server::{Extender, ExtenderLimits, router, serve, serve_tls};
