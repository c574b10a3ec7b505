//! Starts the Kubernetes side of the scorer: clients (main, events and leader election, each
//! with its own rate limit as kube-scheduler), the reflectors feeding the [`ClusterCache`]
//! (Nodes, Pods, CSINodes; claims, volumes and storage classes; Services and controllers
//! for default spreading, trimmed to their selectors; Namespaces, trimmed to their labels,
//! for namespace selectors; PodDisruptionBudgets), leader
//! election, and the [`Scheduler`]; and stops it in order — stop taking pods, drain
//! bindings, release the Lease.
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ::kube::api::Api;
use ::kube::runtime::WatchStreamExt;
use ::kube::runtime::watcher::{self, Event};
use ::kube::{Client, ResourceExt};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::api::KubeApi;
use super::cache::ClusterCache;
use super::client::{self, ClientError, RateLimit};
use super::default_selector::{self, ControllerStores};
use super::leader::{self, LeaderConfig, LeaderElector};
use super::queue::SchedulingQueue;
use super::scheduler::{Estimator, Scheduler, SchedulerConfig};
use super::volumes::VolumeStores;
use super::watch_health::{WatchHealth, WatchStatus};
use super::watched_pod::WatchedPod;
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
    /// Where the scheduler records its decisions (shared with `ExplainPod` and the web view).
    pub decisions: Arc<loadstar_store::decisions::DecisionLog>,
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

async fn reflect_nodes(client: Client, cache: Arc<ClusterCache>, mut status: WatchStatus) {
    let api: Api<Node> = Api::all(client);
    let stream = watcher::watcher(api, watcher::Config::default().any_semantic())
        .backoff(super::watch_health::watch_backoff());
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        status.observe(&ev);
        match ev {
            Ok(Event::Init) => cache.nodes_relist_started(),
            Ok(Event::InitApply(n)) | Ok(Event::Apply(n)) => cache.apply_node(&n),
            Ok(Event::InitDone) => cache.nodes_relist_done(),
            Ok(Event::Delete(n)) => cache.delete_node(&n.name_any()),
            Err(_) => {}
        }
    }
}

async fn reflect_pods(client: Client, cache: Arc<ClusterCache>, mut status: WatchStatus) {
    // Decoded without managed fields (`WatchedPod`): every pod change passes through here.
    let api: Api<WatchedPod> = Api::all(client);
    let config = watcher::Config::default()
        .any_semantic()
        .fields(ACTIVE_PODS);
    let stream = watcher::watcher(api, config).backoff(super::watch_health::watch_backoff());
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        status.observe(&ev);
        match ev {
            Ok(Event::Init) => cache.pods_relist_started(),
            Ok(Event::InitApply(p)) | Ok(Event::Apply(p)) => cache.apply_pod(&p),
            Ok(Event::InitDone) => cache.pods_relist_done(),
            Ok(Event::Delete(p)) => cache.delete_pod(&p),
            Err(_) => {}
        }
    }
}

async fn reflect_csinodes(client: Client, cache: Arc<ClusterCache>, mut status: WatchStatus) {
    use k8s_openapi::api::storage::v1::CSINode;
    use std::collections::HashSet;
    let api: Api<CSINode> = Api::all(client);
    let stream = watcher::watcher(api, watcher::Config::default().any_semantic())
        .backoff(super::watch_health::watch_backoff());
    futures::pin_mut!(stream);
    let mut known: HashSet<String> = HashSet::new();
    let mut relist: Option<HashSet<String>> = None;
    while let Some(ev) = stream.next().await {
        status.observe(&ev);
        match ev {
            Ok(Event::Init) => relist = Some(HashSet::new()),
            Ok(Event::InitApply(c)) | Ok(Event::Apply(c)) => {
                let name = c.name_any();
                if let Some(seen) = relist.as_mut() {
                    seen.insert(name.clone());
                }
                cache.apply_csinode(&name, Some(&c));
                known.insert(name);
            }
            Ok(Event::InitDone) => {
                if let Some(seen) = relist.take() {
                    for gone in known.difference(&seen) {
                        cache.apply_csinode(gone, None);
                    }
                    known = seen;
                }
            }
            Ok(Event::Delete(c)) => {
                let name = c.name_any();
                cache.apply_csinode(&name, None);
                known.remove(&name);
            }
            Err(_) => {}
        }
    }
}

/// Mirrors one kind into a reflector store, trimming each object with `trim` on the way in
/// and calling `changed` after every change (not during the first list).
fn reflect_into<K>(
    api: Api<K>,
    writer: ::kube::runtime::reflector::store::Writer<K>,
    mut status: WatchStatus,
    trim: fn(&mut K),
    changed: impl Fn() + Send + 'static,
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
            watcher::watcher(api, watcher::Config::default().any_semantic()).modify(trim),
        )
        .backoff(super::watch_health::watch_backoff());
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            status.observe(&ev);
            match ev {
                Ok(Event::Init) | Ok(Event::InitApply(_)) | Err(_) => {}
                Ok(_) => changed(),
            }
        }
    })
}

/// Keeps an object as it comes.
fn untrimmed<K>(_: &mut K) {}

/// Starts the claim, volume, storage-class, CSI driver and storage-capacity reflectors and
/// hands their stores to the cache.
fn reflect_volumes(
    client: Client,
    cache: Arc<ClusterCache>,
    health: &WatchHealth,
) -> Vec<tokio::task::JoinHandle<()>> {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
    let (claims, claims_w) = ::kube::runtime::reflector::store();
    let (volumes, volumes_w) = ::kube::runtime::reflector::store();
    let (classes, classes_w) = ::kube::runtime::reflector::store();
    let (drivers, drivers_w) = ::kube::runtime::reflector::store();
    let capacities = Arc::new(super::capacity::Capacities::default());
    cache.set_volume_stores(VolumeStores {
        claims,
        volumes,
        classes,
        drivers: drivers.clone(),
        capacities: capacities.clone(),
    });
    let on_change = |cache: &Arc<ClusterCache>| {
        let cache = cache.clone();
        move || cache.volumes_changed()
    };
    vec![
        tokio::spawn(super::capacity::reflect(
            client.clone(),
            capacities,
            drivers.clone(),
            health.status("csistoragecapacities watch"),
            {
                let cache = cache.clone();
                move || cache.capacities_changed()
            },
        )),
        reflect_into(
            Api::<CSIDriver>::all(client.clone()),
            drivers_w,
            health.status("csidrivers watch"),
            untrimmed,
            on_change(&cache),
        ),
        reflect_into(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            claims_w,
            health.status("persistentvolumeclaims watch"),
            untrimmed,
            on_change(&cache),
        ),
        reflect_into(
            Api::<PersistentVolume>::all(client.clone()),
            volumes_w,
            health.status("persistentvolumes watch"),
            untrimmed,
            on_change(&cache),
        ),
        reflect_into(
            Api::<StorageClass>::all(client),
            classes_w,
            health.status("storageclasses watch"),
            untrimmed,
            on_change(&cache),
        ),
    ]
}

/// Starts the Service, ReplicationController, ReplicaSet and StatefulSet reflectors (kept
/// to their selectors) and hands their stores to the cache, for default spreading.
fn reflect_controllers(
    client: Client,
    cache: Arc<ClusterCache>,
    health: &WatchHealth,
) -> Vec<tokio::task::JoinHandle<()>> {
    use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
    use k8s_openapi::api::core::v1::{ReplicationController, Service};
    let (services, services_w) = ::kube::runtime::reflector::store();
    let (rcs, rcs_w) = ::kube::runtime::reflector::store();
    let (rss, rss_w) = ::kube::runtime::reflector::store();
    let (sss, sss_w) = ::kube::runtime::reflector::store();
    cache.set_controller_stores(ControllerStores {
        services,
        replication_controllers: rcs,
        replica_sets: rss,
        stateful_sets: sss,
    });
    let on_change = |cache: &Arc<ClusterCache>| {
        let cache = cache.clone();
        move || cache.controllers_changed()
    };
    vec![
        reflect_into(
            Api::<Service>::all(client.clone()),
            services_w,
            health.status("services watch"),
            default_selector::trim_service,
            on_change(&cache),
        ),
        reflect_into(
            Api::<ReplicationController>::all(client.clone()),
            rcs_w,
            health.status("replicationcontrollers watch"),
            default_selector::trim_replication_controller,
            on_change(&cache),
        ),
        reflect_into(
            Api::<ReplicaSet>::all(client.clone()),
            rss_w,
            health.status("replicasets watch"),
            default_selector::trim_replica_set,
            on_change(&cache),
        ),
        reflect_into(
            Api::<StatefulSet>::all(client),
            sss_w,
            health.status("statefulsets watch"),
            default_selector::trim_stateful_set,
            on_change(&cache),
        ),
    ]
}

/// Keeps a Namespace's name and labels only: what namespace selectors read.
fn trim_namespace(ns: &mut k8s_openapi::api::core::v1::Namespace) {
    ns.spec = None;
    ns.status = None;
    ns.metadata.annotations = None;
    ns.metadata.managed_fields = None;
    ns.metadata.owner_references = None;
    ns.metadata.finalizers = None;
}

/// Starts the Namespace reflector: after its first list and on every change, the cache
/// hands the store every namespace's labels (for affinity terms' namespace selectors).
fn reflect_namespaces(
    client: Client,
    cache: Arc<ClusterCache>,
    health: &WatchHealth,
) -> tokio::task::JoinHandle<()> {
    use k8s_openapi::api::core::v1::Namespace;
    let (reader, writer) = ::kube::runtime::reflector::store::<Namespace>();
    reflect_into(
        Api::<Namespace>::all(client),
        writer,
        health.status("namespaces watch"),
        trim_namespace,
        move || {
            cache.namespaces_changed(reader.state().iter().map(|ns| {
                (
                    ns.name_any(),
                    ns.metadata.labels.clone().unwrap_or_default(),
                )
            }))
        },
    )
}

/// Reads the API server's version into the cache (which counts as synced only then),
/// retried with the watches' backoff until the server answers; meanwhile `/readyz` says
/// why the scorer is not ready.
async fn read_version(client: Client, cache: Arc<ClusterCache>, readiness: Arc<Readiness>) {
    const WHAT: &str = "API server version";
    let mut backoff = super::watch_health::watch_backoff();
    loop {
        match client.apiserver_version().await {
            Ok(v) => {
                readiness.unblock(WHAT);
                return cache.server_version(&v.major, &v.minor);
            }
            Err(e) => {
                let delay = backoff
                    .next()
                    .unwrap_or(super::watch_health::WATCH_BACKOFF_MAX);
                warn!(error = %e, ?delay, "cannot read the API server's version; retrying");
                readiness.block(WHAT, format!("GET /version failed: {e}"));
                tokio::time::sleep(delay).await;
            }
        }
    }
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
    // Watches and the scheduler's writes share one token bucket, as they share one client in
    // kube-scheduler; the writes go over HTTP/2 (`client::build_multiplexed`). Events have
    // their own bucket and connection.
    let bucket = client::RateLimitLayer::new(options.rate_limit);
    let main = client::build_with(&config, Some(&bucket))?;
    let writes = client::build_multiplexed(&config, Some(&bucket))?;
    let events = client::build_multiplexed(
        &config,
        Some(&client::RateLimitLayer::new(options.rate_limit)),
    )?;
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
    let health = &WatchHealth::new(options.readiness.clone(), metrics.clone());
    let nodes = tokio::spawn(reflect_nodes(
        main.clone(),
        cache.clone(),
        health.status("nodes watch"),
    ));
    let pods = tokio::spawn(reflect_pods(
        main.clone(),
        cache.clone(),
        health.status("pods watch"),
    ));
    let mut volume_tasks = reflect_volumes(main.clone(), cache.clone(), health);
    volume_tasks.extend(reflect_controllers(main.clone(), cache.clone(), health));
    volume_tasks.push(reflect_namespaces(main.clone(), cache.clone(), health));
    volume_tasks.push(tokio::spawn(reflect_csinodes(
        main.clone(),
        cache.clone(),
        health.status("csinodes watch"),
    )));
    volume_tasks.push(tokio::spawn(read_version(
        main.clone(),
        cache.clone(),
        options.readiness.clone(),
    )));
    let budgets = tokio::spawn(super::disruption::reflect(
        main.clone(),
        cache.budgets().clone(),
        health.status("poddisruptionbudgets watch"),
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
    let api = KubeApi::new(writes, events, &options.component, &options.identity);
    let scheduler = Arc::new(
        Scheduler::new(
            cache.clone(),
            queue,
            store,
            profiles,
            metrics,
            api,
            leadership,
            estimate,
            options.scheduler.clone(),
        )
        .with_decisions(options.decisions.clone()),
    );
    let run = scheduler.clone();
    let handle = tokio::spawn(async move {
        run.run(shutdown).await;
        let _ = stop_elector.send(true);
        if let Some(task) = elector {
            let _ = tokio::time::timeout(leader::STOP_WAIT + Duration::from_secs(1), task).await;
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
