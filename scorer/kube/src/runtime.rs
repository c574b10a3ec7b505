//! Starts the Kubernetes side of the scorer: clients (main, events and leader election, each
//! with its own rate limit as kube-scheduler), the Node, Pod, volume and
//! PodDisruptionBudget reflectors feeding the [`ClusterCache`], leader election, and the [`Scheduler`]; and stops it in order — stop
//! taking pods, drain bindings, release the Lease.
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ::kube::api::Api;
use ::kube::runtime::WatchStreamExt;
use ::kube::runtime::watcher::{self, Event};
use ::kube::{Client, ResourceExt};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::api::KubeApi;
use super::cache::ClusterCache;
use super::client::{self, ClientError, RateLimit};
use super::leader::{self, LeaderConfig, LeaderElector};
use super::queue::SchedulingQueue;
use super::scheduler::{Estimator, Scheduler, SchedulerConfig};
use super::volumes::VolumeStores;
use super::watch_health::WatchStatus;
use loadstar_policy::profiles::Profiles;
use loadstar_store::NodeStore;
use loadstar_store::metrics::{Metrics, Readiness};

/// Pods in these phases never need a node again; the watch leaves them out (as upstream).
const ACTIVE_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// Everything the Kubernetes side needs to know.
#[derive(Debug, Clone)]
pub struct KubeOptions {
    /// Kubeconfig path; `None`: in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    /// Client rate limit, per client (main and events).
    pub rate_limit: RateLimit,
    /// Lease-based leader election (`None`: always the leader).
    pub leader: Option<LeaderConfig>,
    /// This process's identity (Event `reportingInstance`, leader identity).
    pub identity: String,
    /// Component name in Events.
    pub component: String,
    /// Scheduler settings.
    pub scheduler: SchedulerConfig,
    /// Where failing watches are reported (`/readyz`).
    pub readiness: Arc<Readiness>,
}

/// The running Kubernetes side.
#[derive(Debug)]
pub struct KubeRuntime {
    /// The cluster cache (also the scorer's pod resolver).
    pub cache: Arc<ClusterCache>,
    /// The scheduler (also the `Scheduler.Bind` binder).
    pub scheduler: Arc<Scheduler>,
    /// Token and access reviews (their own rate-limited client).
    pub reviews: Arc<super::review::KubeReviews>,
    handle: JoinHandle<()>,
}

impl KubeRuntime {
    /// Waits until the runtime stopped (after the shutdown future resolved), at most `limit`.
    pub async fn join(self, limit: Duration) {
        if tokio::time::timeout(limit, self.handle).await.is_err() {
            warn!(?limit, "Kubernetes side did not stop in time");
        }
    }
}

async fn reflect_nodes(client: Client, cache: Arc<ClusterCache>, readiness: Arc<Readiness>) {
    let mut status = WatchStatus::new("nodes watch", readiness);
    let api: Api<Node> = Api::all(client);
    let stream = watcher::watcher(api, watcher::Config::default().any_semantic()).default_backoff();
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        if ev.is_ok() {
            status.ok();
        }
        match ev {
            Ok(Event::Init) => cache.nodes_relist_started(),
            Ok(Event::InitApply(n)) | Ok(Event::Apply(n)) => cache.apply_node(&n),
            Ok(Event::InitDone) => cache.nodes_relist_done(),
            Ok(Event::Delete(n)) => cache.delete_node(&n.name_any()),
            Err(e) => status.failed(&e),
        }
    }
}

async fn reflect_pods(client: Client, cache: Arc<ClusterCache>, readiness: Arc<Readiness>) {
    let mut status = WatchStatus::new("pods watch", readiness);
    let api: Api<Pod> = Api::all(client);
    let config = watcher::Config::default()
        .any_semantic()
        .fields(ACTIVE_PODS);
    let stream = watcher::watcher(api, config).default_backoff();
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        if ev.is_ok() {
            status.ok();
        }
        match ev {
            Ok(Event::Init) => cache.pods_relist_started(),
            Ok(Event::InitApply(p)) | Ok(Event::Apply(p)) => cache.apply_pod(&p),
            Ok(Event::InitDone) => cache.pods_relist_done(),
            Ok(Event::Delete(p)) => cache.delete_pod(&p),
            Err(e) => status.failed(&e),
        }
    }
}

/// Mirrors one kind into a reflector store, telling the cache after every change.
fn reflect_into<K>(
    api: Api<K>,
    cache: Arc<ClusterCache>,
    writer: ::kube::runtime::reflector::store::Writer<K>,
    mut status: WatchStatus,
) -> tokio::task::JoinHandle<()>
where
    K: ::kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    tokio::spawn(async move {
        let stream = ::kube::runtime::reflector(
            writer,
            watcher::watcher(api, watcher::Config::default().any_semantic()),
        )
        .default_backoff();
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            if ev.is_ok() {
                status.ok();
            }
            match ev {
                Ok(Event::Init) | Ok(Event::InitApply(_)) => {}
                Ok(_) => cache.volumes_changed(),
                Err(e) => status.failed(&e),
            }
        }
    })
}

/// Starts the claim, volume and storage-class reflectors and hands their stores to the
/// cache.
fn reflect_volumes(
    client: Client,
    cache: Arc<ClusterCache>,
    readiness: &Arc<Readiness>,
) -> Vec<tokio::task::JoinHandle<()>> {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::StorageClass;
    let (claims, claims_w) = ::kube::runtime::reflector::store();
    let (volumes, volumes_w) = ::kube::runtime::reflector::store();
    let (classes, classes_w) = ::kube::runtime::reflector::store();
    cache.set_volume_stores(VolumeStores {
        claims,
        volumes,
        classes,
    });
    vec![
        reflect_into(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            cache.clone(),
            claims_w,
            WatchStatus::new("persistentvolumeclaims watch", readiness.clone()),
        ),
        reflect_into(
            Api::<PersistentVolume>::all(client.clone()),
            cache.clone(),
            volumes_w,
            WatchStatus::new("persistentvolumes watch", readiness.clone()),
        ),
        reflect_into(
            Api::<StorageClass>::all(client),
            cache,
            classes_w,
            WatchStatus::new("storageclasses watch", readiness.clone()),
        ),
    ]
}

/// Connects and starts everything; the returned runtime stops when `shutdown` resolves.
pub async fn start(
    options: KubeOptions,
    store: Arc<NodeStore>,
    profiles: Arc<Profiles>,
    metrics: Arc<Metrics>,
    estimate: Estimator,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<KubeRuntime, ClientError> {
    let config = client::load_config(options.kubeconfig.as_deref()).await?;
    info!(server = %config.cluster_url, qps = options.rate_limit.qps,
          burst = options.rate_limit.burst, "connecting to Kubernetes");
    let main = client::build(&config, Some(options.rate_limit))?;
    let events = client::build(&config, Some(options.rate_limit))?;
    let reviews = Arc::new(super::review::KubeReviews::new(client::build(
        &config,
        Some(options.rate_limit),
    )?));
    let queue = Arc::new(SchedulingQueue::new());
    let cache = Arc::new(ClusterCache::new(
        store.clone(),
        queue.clone(),
        profiles.clone(),
    ));
    let ready = &options.readiness;
    let nodes = tokio::spawn(reflect_nodes(main.clone(), cache.clone(), ready.clone()));
    let pods = tokio::spawn(reflect_pods(main.clone(), cache.clone(), ready.clone()));
    let volume_tasks = reflect_volumes(main.clone(), cache.clone(), ready);
    let budgets = tokio::spawn(super::disruption::reflect(
        main.clone(),
        cache.budgets().clone(),
        WatchStatus::new("poddisruptionbudgets watch", ready.clone()),
    ));
    let (stop_elector, elector_stopped) = watch::channel(false);
    let (leadership, elector) = match &options.leader {
        Some(lc) => {
            let le = LeaderElector::new(client::build(&config, None)?, lc.clone());
            let rx = le.subscribe();
            let mut stopped = elector_stopped.clone();
            let task = tokio::spawn(le.run(async move {
                let _ = stopped.wait_for(|s| *s).await;
            }));
            (rx, Some(task))
        }
        None => (leader::always_leader(&options.identity), None),
    };
    let api = KubeApi::new(main, events, &options.component, &options.identity);
    let scheduler = Arc::new(Scheduler::new(
        cache.clone(),
        queue,
        store,
        profiles,
        metrics,
        api,
        leadership,
        estimate,
        options.scheduler.clone(),
    ));
    let run = scheduler.clone();
    let handle = tokio::spawn(async move {
        run.run(shutdown).await;
        let _ = stop_elector.send(true);
        if let Some(task) = elector {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        nodes.abort();
        pods.abort();
        budgets.abort();
        for t in volume_tasks {
            t.abort();
        }
        info!("Kubernetes side stopped");
    });
    Ok(KubeRuntime {
        cache,
        scheduler,
        reviews,
        handle,
    })
}
