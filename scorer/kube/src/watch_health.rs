//! How a failing watch reaches the operator: one log line with the reason (a hint at RBAC
//! when the API server forbids it) and a line on `/readyz` until the watch works again.
use std::sync::Arc;

use ::kube::runtime::watcher;
use loadstar_store::metrics::Readiness;
use tracing::{info, warn};

/// What one watch tells `/readyz` and the log: a failure (with a hint when the scorer's RBAC
/// forbids it) until the watch works again.
pub struct WatchStatus {
    what: &'static str,
    readiness: Arc<Readiness>,
    failing: bool,
}

impl WatchStatus {
    /// A watch named `what` (e.g. `pods watch`) reporting to `readiness`.
    pub fn new(what: &'static str, readiness: Arc<Readiness>) -> WatchStatus {
        WatchStatus {
            what,
            readiness,
            failing: false,
        }
    }

    /// The watch delivered an event: clear an earlier failure.
    pub fn ok(&mut self) {
        if self.failing {
            self.failing = false;
            self.readiness.unblock(self.what);
            info!(watch = self.what, "watch recovered");
        }
    }

    /// The watch failed; the watcher retries with backoff.
    pub fn failed(&mut self, e: &watcher::Error) {
        self.failing = true;
        let why = describe_watch_error(e);
        warn!(watch = self.what, error = %why, "watch failed; retrying with backoff");
        self.readiness.block(self.what, why);
    }
}

/// A watch error in words; a refusal names the missing permission's likely cause.
pub fn describe_watch_error(e: &watcher::Error) -> String {
    let api = match e {
        watcher::Error::InitialListFailed(::kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(::kube::Error::Api(s))
        | watcher::Error::WatchFailed(::kube::Error::Api(s)) => Some(s.as_ref()),
        watcher::Error::WatchError(s) => Some(s.as_ref()),
        _ => None,
    };
    match api {
        Some(s) if s.is_forbidden() => format!(
            "forbidden: {} (the scorer's ServiceAccount lacks this permission: check the \
             ClusterRole bound to it, e.g. the Helm chart's loadstar-scorer)",
            s.message
        ),
        Some(s) if s.code == 401 => format!(
            "unauthorized: {} (the scorer's token is invalid or expired)",
            s.message
        ),
        _ => e.to_string(),
    }
}
