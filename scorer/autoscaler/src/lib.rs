//! The `StepScaler` controller (`loadstar.io/v1alpha1`): the research's step-tolerance
//! autoscaler, fed by the agents' per-pod cgroup readings. `feed` copies each report's pod
//! usage from the node store into the shared [`loadstar_autoscale::usage::PodUsageBook`];
//! `status` is the resource's status with its conditions (pure); `target` resolves any kind
//! with a `scale` subresource; `controller` polls each StepScaler while this scorer leads.
pub mod controller;
pub mod feed;
pub mod status;
pub mod target;

use std::sync::{Arc, Mutex};

use loadstar_autoscale::usage::PodUsageBook;

/// The book the feeder writes and the controller and `metrics.k8s.io` read.
pub type SharedBook = Arc<Mutex<PodUsageBook>>;

/// Locks the book, recovering from a panicked holder (the book stays consistent: every
/// update is a single push or pop).
pub fn lock(book: &SharedBook) -> std::sync::MutexGuard<'_, PodUsageBook> {
    book.lock().unwrap_or_else(|p| p.into_inner())
}
