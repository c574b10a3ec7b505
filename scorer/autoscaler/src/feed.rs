//! Copies each agent report's per-pod usage from the node store into the shared usage book,
//! as the store announces reports; when the announcements lag (a burst of reports), every
//! node is read once instead, so a missed announcement costs one sample, never a pod. In a
//! cluster a node's readings are kept only for the pods placed on it (none for a node
//! Kubernetes does not know): one agent (one compromised node) cannot fill the book with
//! made-up pods nor speak for another node's pods.
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use loadstar_store::metrics::Metrics;
use loadstar_store::{ChangeKind, NodeStore};
use tokio::sync::broadcast::error::RecvError;
use tracing::{debug, warn};

use crate::{SharedBook, lock};
use loadstar_autoscale::usage::Reading;

/// Wall-clock seconds since the Unix epoch: the book's clock, shared with the controller
/// (whose cool-downs survive restarts in the object's status as wall-clock times).
pub fn unix_now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// What the feeder already copied: the receive time of each node's last report.
#[derive(Debug, Default)]
pub struct Feeder {
    seen: HashMap<Arc<str>, Instant>,
    /// Keep only readings of pods placed on the reporting node (Kubernetes' view).
    placed_only: bool,
}

impl Feeder {
    /// A feeder for a cluster: a node speaks only for the pods placed on it.
    pub fn for_cluster() -> Feeder {
        Feeder {
            placed_only: true,
            ..Feeder::default()
        }
    }

    /// Copies `node`'s latest report into `book` unless it was copied before; returns the
    /// pods recorded. The sample time is when the scorer received the report, on the wall
    /// clock (`now_s` is the wall clock at `now`).
    pub fn copy(
        &mut self,
        store: &NodeStore,
        book: &SharedBook,
        node: &Arc<str>,
        now: Instant,
        now_s: f64,
    ) -> usize {
        let Some(agent) = store.agent(node) else {
            self.seen.remove(node);
            return 0;
        };
        let Some(at) = agent.received_at else {
            return 0;
        };
        if self.seen.get(node) == Some(&at) {
            return 0;
        }
        self.seen.insert(node.clone(), at);
        let at_s = now_s - now.saturating_duration_since(at).as_secs_f64();
        let every = agent.interval_seconds.max(agent.report_interval_seconds);
        // In a cluster only the pods placed on the node count (none when Kubernetes does not
        // know the node); without one there is nothing to check against.
        let alloc = store
            .allocation(node)
            .filter(|_| store.kube_node(node).is_some());
        let placed: Option<HashSet<&str>> = self.placed_only.then(|| {
            alloc
                .iter()
                .flat_map(|a| a.pods.iter().map(|p| p.uid.as_str()))
                .collect()
        });
        let mut book = lock(book);
        let mut foreign = 0usize;
        let recorded = agent
            .pods
            .iter()
            .filter(|(uid, _)| {
                let here = placed.as_ref().is_none_or(|p| p.contains(uid.as_str()));
                foreign += usize::from(!here);
                here
            })
            .filter(|(uid, p)| {
                let r = Reading::new(at_s, p.cpu_millis / 1000.0, p.memory_bytes);
                book.record(node, every, uid, r)
            })
            .count();
        if foreign > 0 {
            debug!(
                node = %node,
                foreign, "usage of pods not placed on the node left out"
            );
        }
        recorded
    }

    /// Forgets a removed node.
    pub fn forget(&mut self, node: &str) {
        self.seen.remove(node);
    }
}

/// How often old samples are dropped.
const PRUNE_EVERY: Duration = Duration::from_secs(10);

/// Feeds `book` from `store` until `shutdown` resolves; `metrics` shows the pods kept.
pub fn spawn(
    store: Arc<NodeStore>,
    book: SharedBook,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let mut rx = store.subscribe();
    tokio::spawn(async move {
        let mut feeder = Feeder::for_cluster();
        let mut prune = tokio::time::interval(PRUNE_EVERY);
        let mut refused_before = 0u64;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                _ = prune.tick() => {
                    let (dropped, kept, refused) = {
                        let mut b = lock(&book);
                        (b.prune(unix_now_s()), b.len(), b.refused())
                    };
                    metrics.pod_usage_pods.set(i64::try_from(kept).unwrap_or(i64::MAX));
                    metrics.pod_usage_refused.inc_by(refused.saturating_sub(refused_before));
                    refused_before = refused;
                    debug!(dropped, kept, "pod usage book pruned");
                }
                change = rx.recv() => match change {
                    Ok(c) => match c.kind {
                        ChangeKind::Added | ChangeKind::Updated => {
                            feeder.copy(&store, &book, &c.node, Instant::now(), unix_now_s());
                        }
                        ChangeKind::Removed => feeder.forget(&c.node),
                        ChangeKind::Stale => {}
                    },
                    Err(RecvError::Lagged(n)) => {
                        warn!(missed = n, "pod usage feeder lagged; reading every node once");
                        let (now, now_s) = (Instant::now(), unix_now_s());
                        for node in store.node_names() {
                            feeder.copy(&store, &book, &node, now, now_s);
                        }
                    }
                    Err(RecvError::Closed) => return,
                },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_autoscale::usage::{BookLimits, PodUsageBook};
    use loadstar_proto::pb;
    use loadstar_store::StoreConfig;
    use std::sync::Mutex;

    fn report(node: &str, seq: u64, cpu: f64) -> pb::NodeReport {
        let mut r = loadstar_testkit::agent::fixed_report(node, seq, 0.5, 0.5);
        r.pods.push(pb::PodUsage {
            pod_uid: "uid-1".into(),
            cpu_cores: cpu,
            memory_working_set_bytes: 1 << 20,
        });
        r
    }

    #[test]
    fn each_report_is_copied_once_at_its_receive_time() {
        let store = NodeStore::new(StoreConfig::default());
        let book: SharedBook = Arc::new(Mutex::new(PodUsageBook::new(BookLimits::default())));
        let mut f = Feeder::default();
        let node: Arc<str> = Arc::from("n1");
        let t0 = Instant::now();
        store
            .apply_report(report("n1", 1, 0.25), t0)
            .expect("valid");
        // Copied 2 s after it arrived: stamped 2 s before "now".
        assert_eq!(
            f.copy(&store, &book, &node, t0 + Duration::from_secs(2), 100.0),
            1
        );
        assert_eq!(
            f.copy(&store, &book, &node, t0 + Duration::from_secs(3), 101.0),
            0,
            "same report"
        );
        let w = lock(&book).window("uid-1", 100.0, 10.0).expect("sample");
        assert!((w.last_s - 98.0).abs() < 1e-6, "{w:?}");
        assert!((w.cpu_cores - 0.25).abs() < 1e-6);
        assert_eq!(w.memory_bytes, f64::from(1u32 << 20));
        store
            .apply_report(report("n1", 2, 0.75), t0 + Duration::from_secs(4))
            .expect("valid");
        assert_eq!(
            f.copy(&store, &book, &node, t0 + Duration::from_secs(4), 102.0),
            1
        );
        let w = lock(&book).window("uid-1", 102.0, 10.0).expect("samples");
        assert_eq!(w.samples, 2);
        assert!((w.cpu_cores - 0.5).abs() < 1e-6);
        // A node without an agent report records nothing.
        assert_eq!(f.copy(&store, &book, &Arc::from("n2"), t0, 0.0), 0);
    }

    #[test]
    fn a_node_known_to_kubernetes_speaks_only_for_the_pods_placed_on_it() {
        let store = NodeStore::new(StoreConfig::default());
        let book: SharedBook = Arc::new(Mutex::new(PodUsageBook::new(BookLimits::default())));
        let mut f = Feeder::for_cluster();
        let node: Arc<str> = Arc::from("n1");
        let kube = loadstar_testkit::snapshot::kube_node("n1", 4000, 1 << 33).kube;
        store.set_kube_node("n1", kube.map(|k| (*k).clone()));
        store.update_allocation("n1", |a| {
            a.put_pod(loadstar_framework::snapshot::PodOnNode {
                uid: "uid-1".into(),
                ..Default::default()
            })
        });
        let t0 = Instant::now();
        let mut r = report("n1", 1, 0.25);
        // Made-up pods, and another node's pod: left out.
        for uid in ["made-up", "uid-on-n2"] {
            r.pods.push(pb::PodUsage {
                pod_uid: uid.into(),
                cpu_cores: 3.0,
                memory_working_set_bytes: 1,
            });
        }
        store.apply_report(r, t0).expect("valid");
        assert_eq!(f.copy(&store, &book, &node, t0, 100.0), 1);
        {
            let b = lock(&book);
            assert!(b.window("uid-1", 100.0, 10.0).is_some());
            assert!(b.window("made-up", 100.0, 10.0).is_none());
            assert!(b.window("uid-on-n2", 100.0, 10.0).is_none());
        }
        // A node Kubernetes does not know speaks for no pod at all.
        let mut r = report("ghost", 1, 0.5);
        r.pods[0].pod_uid = "ghost-pod".into();
        store.apply_report(r, t0).expect("valid");
        assert_eq!(f.copy(&store, &book, &Arc::from("ghost"), t0, 100.0), 0);
        assert!(lock(&book).window("ghost-pod", 100.0, 10.0).is_none());
    }
}
