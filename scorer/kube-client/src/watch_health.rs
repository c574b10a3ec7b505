//! How a watch's health reaches the operator: a failure is one log line with the reason (a
//! hint at RBAC when the API server forbids it), a count in `loadstar_scorer_watch_failures`
//! and a line on `/readyz` until the watch works again; every full list (at start, and after
//! the watch could not resume, e.g. `410 Gone` once etcd compacted past it) is logged with its
//! duration and object count and recorded in `loadstar_scorer_watch_relists` and
//! `loadstar_scorer_watch_relist_duration_seconds`.
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::kube::ResourceExt;
use ::kube::api::{Api, ApiResource, DynamicObject};
use ::kube::runtime::WatchStreamExt;
use ::kube::runtime::watcher;
use futures::StreamExt;
use loadstar_common::backoff::{Backoff, BackoffConfig};
use loadstar_kube_model::listing::Listed;
use loadstar_store::metrics::{Metrics, Readiness, WatchLabel};
use tracing::{info, warn};

/// The longest wait between retries of a failed watch.
///
/// kube-runtime's default (as client-go's reflectors) doubles from 0.8 s to 30 s. Measured
/// with `tests/e2e/faults/run.sh`: after kube-apiserver was down for ~13 s, the pods watch
/// came back 14.6 s after the API server served again — new pods went unseen that long. A
/// 5 s cap bounds that wait; a scorer runs a dozen watches, so even a struggling API server
/// sees at most a few requests per second from it.
pub const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The retry policy of every watch: 0.8 s doubling to [`WATCH_BACKOFF_MAX`], each delay
/// uniform in its upper half (the agent's backoff, `loadstar_common::backoff`: kube-runtime's
/// own `ExponentialBackoff` cannot be built with other bounds, and `backon`'s jitter would add
/// on top of the cap). kube-runtime resets it after a successful event.
pub struct WatchBackoff(Backoff);

/// A fresh [`WatchBackoff`].
pub fn watch_backoff() -> WatchBackoff {
    WatchBackoff(Backoff::new(BackoffConfig {
        initial: Duration::from_millis(800),
        max: WATCH_BACKOFF_MAX,
        multiplier: 2.0,
        jitter: 0.5,
    }))
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.0.next_delay(rand::random::<f64>()))
    }
}

impl ::kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.0.reset();
    }
}

/// Watches every object of `resource` (a kind read as [`DynamicObject`]s, in whichever
/// version the API server serves) until aborted, with [`watch_backoff`], reporting to
/// `status` and handing each event to `apply`.
pub async fn watch_dynamic(
    client: ::kube::Client,
    resource: &ApiResource,
    mut status: WatchStatus,
    mut apply: impl FnMut(watcher::Event<DynamicObject>),
) {
    let api: Api<DynamicObject> = Api::all_with(client, resource);
    let stream =
        watcher::watcher(api, watcher::Config::default().any_semantic()).backoff(watch_backoff());
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        status.observe(&ev);
        if let Ok(ev) = ev {
            apply(ev);
        }
    }
}

/// `ev` for a [`Listing`](loadstar_kube_model::listing::Listing), keyed by `namespace/name`,
/// its object converted by `read` (given the key and the object; `None`: unreadable).
pub fn listed<T>(
    ev: watcher::Event<DynamicObject>,
    read: impl Fn(&str, &DynamicObject) -> Option<T>,
) -> Listed<T> {
    let key = |o: &DynamicObject| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
    let keyed = |o: &DynamicObject| {
        let k = key(o);
        let v = read(&k, o);
        (k, v)
    };
    match ev {
        watcher::Event::Init => Listed::Started,
        watcher::Event::InitApply(o) => {
            let (k, v) = keyed(&o);
            Listed::One(k, v)
        }
        watcher::Event::InitDone => Listed::Done,
        watcher::Event::Apply(o) => {
            let (k, v) = keyed(&o);
            Listed::Put(k, v)
        }
        watcher::Event::Delete(o) => Listed::Gone(key(&o)),
    }
}

/// Where watches report: `/readyz` and the metrics.
#[derive(Clone)]
pub struct WatchHealth {
    readiness: Arc<Readiness>,
    metrics: Arc<Metrics>,
}

impl WatchHealth {
    /// Watches reporting to `readiness` and `metrics`.
    pub fn new(readiness: Arc<Readiness>, metrics: Arc<Metrics>) -> WatchHealth {
        WatchHealth { readiness, metrics }
    }

    /// The status of the watch named `what` (e.g. `pods watch`).
    pub fn status(&self, what: &'static str) -> WatchStatus {
        WatchStatus {
            what,
            label: WatchLabel {
                watch: what.trim_end_matches(" watch").to_string(),
            },
            readiness: self.readiness.clone(),
            metrics: self.metrics.clone(),
            failing: false,
            listing: None,
        }
    }
}

/// What one watch tells `/readyz`, the metrics and the log: a failure (with a hint when the
/// scorer's RBAC forbids it) until the watch works again, and each full list.
pub struct WatchStatus {
    what: &'static str,
    label: WatchLabel,
    readiness: Arc<Readiness>,
    metrics: Arc<Metrics>,
    failing: bool,
    /// A full list in progress: when it started and the objects so far.
    listing: Option<(Instant, usize)>,
}

impl WatchStatus {
    /// Records one item of the watch stream: a failure, or an event (which clears an earlier
    /// failure) and, for the events of a full list, its start, objects and end.
    pub fn observe<K>(&mut self, ev: &Result<watcher::Event<K>, watcher::Error>) {
        match ev {
            Ok(e) => {
                self.ok();
                match e {
                    watcher::Event::Init => self.list_started(),
                    watcher::Event::InitApply(_) => self.listed_one(),
                    watcher::Event::InitDone => self.list_done(),
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) => {}
                }
            }
            Err(e) => self.failed(e),
        }
    }

    /// A full list started (`Event::Init`).
    fn list_started(&mut self) {
        self.listing = Some((Instant::now(), 0));
    }

    /// One object of the full list arrived (`Event::InitApply`).
    fn listed_one(&mut self) {
        if let Some((_, n)) = &mut self.listing {
            *n += 1;
        }
    }

    /// The full list is complete (`Event::InitDone`).
    fn list_done(&mut self) {
        let Some((started, objects)) = self.listing.take() else {
            return;
        };
        let took = started.elapsed();
        self.metrics.watch_relists.get_or_create(&self.label).inc();
        self.metrics
            .watch_relist_duration
            .get_or_create(&self.label)
            .observe(took.as_secs_f64());
        info!(
            watch = self.what,
            objects,
            seconds = took.as_secs_f64(),
            "listed"
        );
    }

    /// The watch delivered an event: clear an earlier failure.
    fn ok(&mut self) {
        if self.failing {
            self.failing = false;
            self.readiness.unblock(self.what);
            info!(watch = self.what, "watch recovered");
        }
    }

    /// The watch failed; the watcher retries with backoff.
    fn failed(&mut self, e: &watcher::Error) {
        self.failing = true;
        self.metrics.watch_failures.get_or_create(&self.label).inc();
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

#[cfg(test)]
mod tests {
    use super::*;
    use ::kube::runtime::utils::Backoff as _;

    #[test]
    fn watch_retries_grow_to_the_cap_and_reset() {
        let mut b = watch_backoff();
        let delays: Vec<Duration> = (0..12).map(|_| b.next().expect("endless")).collect();
        // Each delay lies in the upper half of 0.8 s × 2ⁿ, capped at 5 s.
        for (n, d) in delays.iter().enumerate() {
            let full = (0.8 * 2f64.powi(n as i32)).min(5.0);
            let s = d.as_secs_f64();
            assert!(
                s >= full / 2.0 - 1e-9 && s <= full + 1e-9,
                "retry {n}: {s} s"
            );
        }
        assert!(delays.iter().all(|d| *d <= WATCH_BACKOFF_MAX));
        assert!(delays[6..].iter().all(|d| *d >= WATCH_BACKOFF_MAX / 2));
        b.reset();
        assert!(b.next().expect("endless") <= Duration::from_millis(800));
    }
}
