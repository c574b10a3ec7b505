//! The shared cluster cache fed by the Node and Pod reflectors. Nodes go into the
//! [`NodeStore`] as [`KubeNode`]s; pods bound (or assumed) to a node become that node's
//! [`NodeAllocation`] (request sums, non-zero sums, the pod list); pending pods whose
//! `schedulerName` names a profile enter the [`SchedulingQueue`]. Assumptions made by the
//! scheduler before binding live here too, so a failed bind can be forgotten exactly.
use loadstar_auth::review::{AgentPod, AgentPods, PodLookup};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ::kube::ResourceExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::CSINode;
use loadstar_common::model::ResourceList;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::attach;
use super::convert::{self, PodFacts};
use super::default_selector::{self, ControllerStores};
use super::disruption::Budgets;
use super::queue::SchedulingQueue;
use super::reservations::Reservations;
use super::volumes::{self, VolumeLookup, VolumeStores};
use loadstar_framework::snapshot::{
    AttachableVolume, Inflight, KubeNode, LabelSelector, NamespaceLabels, NodeAllocation, PodInfo,
    PodOnNode,
};
use loadstar_policy::profiles::Profiles;
use loadstar_store::NodeStore;
use loadstar_store::cluster::{BudgetSource, ClusterError, PodDecoder, PodResolver};

/// Errors of the cache.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CacheError {
    /// The pod is already placed (bound or assumed) on a node.
    #[error("pod {pod} is already placed on node {node}")]
    AlreadyPlaced {
        /// namespace/name.
        pod: String,
        /// The node.
        node: String,
    },
}

/// A pod counted on a node.
#[derive(Debug, Clone)]
struct Placement {
    node: Arc<str>,
    requests: ResourceList,
    nonzero_cpu_millis: i64,
    nonzero_memory_bytes: i64,
    /// True while only the scheduler's assumption (not yet seen bound in the watch).
    assumed: bool,
    /// While assumed: the pod as the scheduler decided it, when known (its placed form was
    /// built from it), so the watch's first sight of the binding can tell whether that form
    /// still holds.
    assumed_from: Option<Arc<PodFacts>>,
    /// What its claims attach (kept to notice when their binding changes it).
    claim_attachable: Vec<AttachableVolume>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Every non-terminal pod, by `namespace/name`.
    pods: HashMap<String, Arc<PodFacts>>,
    /// Pods counted on nodes, by UID.
    placed: HashMap<String, Placement>,
    /// Last conversion of each node.
    nodes: HashMap<String, KubeNode>,
    /// Pending pods nominated to a node by a preemption, by `namespace/name`.
    nominated: HashMap<String, Nomination>,
    /// Keys seen since the watcher restarted (relist), to drop what vanished.
    relist_pods: Option<HashSet<String>>,
    relist_nodes: Option<HashSet<String>>,
    /// Per-driver attach limits from each node's CSINode.
    csi_limits: HashMap<String, BTreeMap<String, i64>>,
    /// Placed pods with claims, UID → `namespace/name`: their attachments follow the
    /// claims' binding.
    claimed: HashMap<String, String>,
}

/// A pending pod's claim on the node a preemption cleared for it: pods of lower or equal
/// priority are evaluated as if it were already there (kube-scheduler's nominator).
#[derive(Debug, Clone)]
pub struct Nomination {
    /// `namespace/name`.
    pub key: String,
    /// The nominated node.
    pub node: String,
    /// The pod as it would sit on the node.
    pub pod: PodOnNode,
}

/// Which reflectors have completed their first list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Synced {
    /// Nodes listed.
    pub nodes: bool,
    /// Pods listed.
    pub pods: bool,
    /// Namespaces listed (their labels are what affinity terms' namespace selectors read:
    /// without them an existing pod's term could not be checked against a newcomer).
    pub namespaces: bool,
    /// The API server's version read (its release decides how spread constraints count).
    pub version: bool,
}

impl Synced {
    /// All listed and the version read, as kube-scheduler waits for its informers' caches.
    pub fn all(&self) -> bool {
        self.nodes && self.pods && self.namespaces && self.version
    }
}

/// The cluster cache. Share it in an `Arc`.
#[derive(Debug)]
pub struct ClusterCache {
    store: Arc<NodeStore>,
    queue: Arc<SchedulingQueue>,
    profiles: Arc<Profiles>,
    inner: Mutex<Inner>,
    node_epoch: AtomicU64,
    synced: watch::Sender<Synced>,
    /// Claims, volumes and classes, once the volume reflectors run (pods with claims are
    /// refused until then).
    volumes: std::sync::OnceLock<VolumeStores>,
    /// PodDisruptionBudgets, for preemption (empty until their watch lists them).
    budgets: Arc<Budgets>,
    /// Services and controllers, for default spreading selectors (none until their
    /// reflectors run: default spread constraints then do not apply).
    controllers: std::sync::OnceLock<ControllerStores>,
    /// Volumes and provisioning this scheduler decided for pods still binding.
    reservations: Reservations,
}

fn pod_on_node(info: &PodInfo, facts: &PodFacts) -> PodOnNode {
    PodOnNode {
        terminating: facts.deleting,
        start_time: facts.start_time,
        ..PodOnNode::of(info)
    }
}

/// Whether the pod the watch shows bound for the first time (`now`) still has the placed
/// form it was assumed with, built from `from` ([`PodOnNode::of`]): its binding changed
/// nothing that form carries. Then the node's allocation is left as it is, not copied to
/// put back the same pod (and the scheduler's snapshot keeps the node's row).
fn placed_as_assumed(from: &PodFacts, now: &PodFacts) -> bool {
    match (&from.info, &now.info) {
        (Ok(a), Ok(b)) => {
            // Claims' attachments are read again at this first sight; the assumed form is
            // neither terminating nor started, and carries the owner too.
            b.claims.is_empty()
                && !now.deleting
                && now.start_time.is_none()
                && a.owner == b.owner
                && !pod_on_node_changed(from, now)
        }
        _ => false,
    }
}

/// Whether an update of a placed pod changes what other pods' constraints read of it.
fn pod_on_node_changed(old: &PodFacts, new: &PodFacts) -> bool {
    match (&old.info, &new.info) {
        (Ok(a), Ok(b)) => {
            old.deleting != new.deleting
                || old.start_time != new.start_time
                || a.labels != b.labels
                || a.pod_affinity != b.pod_affinity
                || a.priority != b.priority
        }
        _ => false,
    }
}

/// Whether a resize to `new` gives back any of what `old` held.
fn shrinks(old: &Placement, new: &PodInfo) -> bool {
    let (a, b) = (&old.requests, &new.requests);
    b.cpu_millis < a.cpu_millis
        || b.memory_bytes < a.memory_bytes
        || b.ephemeral_storage_bytes < a.ephemeral_storage_bytes
        || b.gpus < a.gpus
        || a.extended.iter().any(|(k, v)| b.get(k) < *v)
        || new.nonzero_cpu_millis < old.nonzero_cpu_millis
        || new.nonzero_memory_bytes < old.nonzero_memory_bytes
}

/// A placed pod's requests changed from `old` to `new` on the same node.
fn resize_on(a: &mut NodeAllocation, old: &Placement, new: &Placement, pod: PodOnNode) {
    a.requested.sub(&old.requests);
    a.requested.add(&new.requests);
    a.nonzero_cpu_millis = a
        .nonzero_cpu_millis
        .saturating_sub(old.nonzero_cpu_millis)
        .saturating_add(new.nonzero_cpu_millis);
    a.nonzero_memory_bytes = a
        .nonzero_memory_bytes
        .saturating_sub(old.nonzero_memory_bytes)
        .saturating_add(new.nonzero_memory_bytes);
    a.put_pod(pod);
}

fn add_to(a: &mut NodeAllocation, p: &Placement, pod: PodOnNode) {
    a.requested.add(&p.requests);
    a.requested.pods = a.requested.pods.saturating_add(1);
    a.nonzero_cpu_millis = a.nonzero_cpu_millis.saturating_add(p.nonzero_cpu_millis);
    a.nonzero_memory_bytes = a
        .nonzero_memory_bytes
        .saturating_add(p.nonzero_memory_bytes);
    a.put_pod(pod);
}

fn remove_from(a: &mut NodeAllocation, p: &Placement, uid: &str) {
    a.requested.sub(&p.requests);
    a.requested.pods = a.requested.pods.saturating_sub(1).max(0);
    a.nonzero_cpu_millis = a.nonzero_cpu_millis.saturating_sub(p.nonzero_cpu_millis);
    a.nonzero_memory_bytes = a
        .nonzero_memory_bytes
        .saturating_sub(p.nonzero_memory_bytes);
    a.remove_pod(uid);
    a.inflight.retain(|i| i.uid != uid);
}

impl ClusterCache {
    /// An empty cache writing into `store` and queueing pods for `profiles`.
    pub fn new(
        store: Arc<NodeStore>,
        queue: Arc<SchedulingQueue>,
        profiles: Arc<Profiles>,
    ) -> ClusterCache {
        ClusterCache {
            store,
            queue,
            profiles,
            inner: Mutex::new(Inner::default()),
            node_epoch: AtomicU64::new(0),
            synced: watch::channel(Synced::default()).0,
            volumes: std::sync::OnceLock::new(),
            budgets: Arc::new(Budgets::default()),
            controllers: std::sync::OnceLock::new(),
            reservations: Reservations::default(),
        }
    }

    /// Attaches the Service and controller reflectors' stores (once).
    pub fn set_controller_stores(&self, stores: ControllerStores) {
        let _ = self.controllers.set(stores);
    }

    /// The volume reservations of pods still binding.
    pub fn reservations(&self) -> &Reservations {
        &self.reservations
    }

    /// The claims, volumes and classes, once their reflectors run.
    pub fn volume_stores(&self) -> Option<&VolumeStores> {
        self.volumes.get()
    }

    /// Attaches the volume reflectors' stores (once).
    pub fn set_volume_stores(&self, stores: VolumeStores) {
        let _ = self.volumes.set(stores);
    }

    /// The PodDisruptionBudgets (fed by [`crate::disruption::reflect`]).
    pub fn budgets(&self) -> &Arc<Budgets> {
        &self.budgets
    }

    /// Pending pods nominated to nodes.
    pub fn nominations(&self) -> Vec<Nomination> {
        self.lock().nominated.values().cloned().collect()
    }

    /// Records that a preemption nominated `info` to `node` (before the status patch comes
    /// back through the watch).
    pub fn nominate(&self, key: &str, node: &str, info: &PodInfo) {
        self.lock().nominated.insert(
            key.to_string(),
            Nomination {
                key: key.to_string(),
                node: node.to_string(),
                pod: PodOnNode::of(info),
            },
        );
    }

    /// Drops a pod's nomination (a higher-priority preemption took its node).
    pub fn clear_nomination(&self, key: &str) {
        self.lock().nominated.remove(key);
    }

    /// A claim, volume or class changed: waiting pods may fit now, and placed pods'
    /// attachments follow their claims' binding.
    pub fn volumes_changed(&self) {
        self.queue.with(|q| q.retry_all());
        self.refresh_claimed();
    }

    /// Storage capacity became known or changed: pending pods with claims to provision may
    /// fit now (nothing placed attaches differently).
    pub fn capacities_changed(&self) {
        self.queue.with(|q| q.retry_all());
    }

    /// A Service or controller changed: pending pods' default spreading may differ.
    pub fn controllers_changed(&self) {
        self.queue.with(|q| q.retry_all());
    }

    /// The Namespace watch listed (then the cache counts as synced for namespaces), or saw
    /// a change: the store's snapshots carry the namespaces' labels from now on, and waiting
    /// pods are tried again (a namespace selector may pick other pods now, also when a
    /// namespace appears after its pods did, the watches not being in step). An update that
    /// leaves the table as it was (the trimmed watch still sees status changes) changes
    /// nothing. Called only from the Namespace reflector's task, so the compare and the set
    /// do not race.
    pub fn namespaces_changed(
        &self,
        namespaces: impl IntoIterator<Item = (String, BTreeMap<String, String>)>,
    ) {
        let table = NamespaceLabels::new(namespaces);
        if self.store.namespaces().is_none_or(|old| *old != table) {
            self.store.set_namespaces(Arc::new(table));
            self.queue.with(|q| q.retry_all());
        }
        if !self.synced.borrow().namespaces {
            self.synced.send_modify(|s| s.namespaces = true);
        }
    }

    /// The API server's `/version` was read: Loadstar counts spread constraints as that
    /// release's kube-scheduler does (`release::spread_default_inclusion`; an unreadable
    /// version counts as current releases do), and the cache counts as synced for it.
    pub fn server_version(&self, major: &str, minor: &str) {
        let release = loadstar_kube_model::release::release(major, minor);
        let inclusion = loadstar_kube_model::release::spread_default_inclusion(release);
        info!(
            major,
            minor,
            affinity_excludes_pods = inclusion.is_some(),
            "API server version read: topology spread counts as this release's kube-scheduler"
        );
        if self.store.spread_default_inclusion() != inclusion {
            self.store.set_spread_default_inclusion(inclusion);
            self.queue.with(|q| q.retry_all());
        }
        self.synced.send_modify(|s| s.version = true);
    }

    /// What the claims of a pod on a node attach now (an ephemeral volume's claim only
    /// while the pod controls it, as upstream's CSI limit counts a placed pod's).
    fn claim_attachable(&self, info: &PodInfo) -> Vec<AttachableVolume> {
        match self.volumes.get() {
            Some(stores) if !info.claims.is_empty() => info
                .claims
                .iter()
                .filter(|c| {
                    stores
                        .claim(&info.namespace, &c.name)
                        .is_some_and(|pvc| volumes::claim_is_for_pod(c, &pvc, &info.uid))
                })
                .flat_map(|c| attach::of_claim(&info.namespace, &c.name, stores))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A pod as it sits on its node: its inline attachments and its claims'.
    fn placed_form(&self, info: &PodInfo, facts: &PodFacts) -> (PodOnNode, Vec<AttachableVolume>) {
        let mut on = pod_on_node(info, facts);
        let claims = self.claim_attachable(info);
        on.attachable.extend(claims.iter().cloned());
        (on, claims)
    }

    /// Re-reads what placed pods' claims attach, and refreshes the pods whose attachments
    /// changed (a claim bound after its pod was placed, a volume replaced).
    fn refresh_claimed(&self) {
        let claimed: Vec<(String, String)> = self
            .lock()
            .claimed
            .iter()
            .map(|(u, k)| (u.clone(), k.clone()))
            .collect();
        for (uid, key) in claimed {
            let Some(facts) = self.lock().pods.get(&key).cloned() else {
                continue;
            };
            let Ok(info) = &facts.info else { continue };
            let (on, claims) = self.placed_form(info, &facts);
            let node = {
                let mut inner = self.lock();
                match inner.placed.get_mut(&uid) {
                    Some(p) if p.claim_attachable != claims => {
                        p.claim_attachable = claims;
                        p.node.clone()
                    }
                    _ => continue,
                }
            };
            self.store.update_allocation(&node, |a| {
                if a.remove_pod(&uid).is_some() {
                    a.put_pod(on);
                }
            });
            self.bump_epoch();
        }
    }

    /// Resolves what `info` needs of the cluster when it is scheduled or scored: its claims
    /// against the volume stores (with this scheduler's reservations over them; a pod
    /// without claims is left as is, and without stores its claims stay unresolved, which
    /// refuses it), and, for a pod without spread constraints of its own, the selector of
    /// its default spread constraints.
    pub fn with_volumes(&self, mut info: PodInfo) -> PodInfo {
        info.default_spread_selector = self.default_selector(&info);
        self.with_claims(info)
    }

    /// The selector of `info`'s default spread constraints: none for a pod with constraints
    /// of its own, and the stored one while no controllers are known.
    fn default_selector(&self, info: &PodInfo) -> Option<LabelSelector> {
        match self.controllers.get() {
            Some(c) if info.spread_constraints.is_empty() => {
                default_selector::default_selector(&info.namespace, &info.labels, c)
            }
            _ => info.default_spread_selector.clone(),
        }
    }

    /// `info` with its claims resolved (see [`ClusterCache::with_volumes`]).
    fn with_claims(&self, mut info: PodInfo) -> PodInfo {
        if info.claims.is_empty() {
            return info;
        }
        let Some(stores) = self.volumes.get() else {
            return info;
        };
        let r = volumes::resolve(&info, &self.reservations.over(stores));
        info.volumes = Some(r.needs);
        info.attachable.extend(r.attachable);
        info
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Increases whenever the set of nodes or a node's scheduling facts change (or an
    /// assumption was made outside the scheduler loop): a cached snapshot older than this is
    /// not good enough.
    pub fn node_epoch(&self) -> u64 {
        self.node_epoch.load(Ordering::Acquire)
    }

    /// Forces snapshot users to rebuild.
    pub fn bump_epoch(&self) {
        self.node_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Watches the sync state.
    pub fn synced(&self) -> watch::Receiver<Synced> {
        self.synced.subscribe()
    }

    /// The pod `namespace/name`, if known.
    pub fn pod(&self, key: &str) -> Option<Arc<PodFacts>> {
        let facts = self.lock().pods.get(key).cloned()?;
        // Claims are resolved when the pod is asked for (their binding changes on its own),
        // and so is the selector of default spreading (Services and controllers change).
        // A pod with nothing to resolve (no claims, and spread constraints of its own or no
        // Service or controller selecting it) is handed out as stored, not copied: a pod's
        // info is a dozen heap blocks. Pods that a Service or controller selects are still
        // copied to carry their default spreading selector.
        let Ok(info) = &facts.info else {
            return Some(facts);
        };
        let selector = self.default_selector(info);
        if info.claims.is_empty() && selector == info.default_spread_selector {
            return Some(facts);
        }
        let mut info = info.clone();
        info.default_spread_selector = selector;
        Some(Arc::new(PodFacts {
            info: Ok(self.with_claims(info)),
            ..(*facts).clone()
        }))
    }

    /// What an agent token's pod looks like now (for binding agents to their node).
    pub fn agent_pod(&self, namespace: &str, name: &str) -> PodLookup {
        if !self.synced.borrow().pods {
            return PodLookup::NotSynced;
        }
        match self.lock().pods.get(&format!("{namespace}/{name}")) {
            None => PodLookup::Missing,
            Some(f) => PodLookup::Found(AgentPod {
                uid: f.uid.clone(),
                node_name: f.node_name.clone(),
                running: f.running && !f.deleting,
            }),
        }
    }

    /// Number of pods known.
    pub fn pod_count(&self) -> usize {
        self.lock().pods.len()
    }

    // ---- nodes ---------------------------------------------------------------------------

    /// The node watcher (re)started a list.
    pub fn nodes_relist_started(&self) {
        self.lock().relist_nodes = Some(HashSet::new());
    }

    /// The node list completed: nodes not seen in it are gone.
    pub fn nodes_relist_done(&self) {
        let gone: Vec<String> = {
            let mut inner = self.lock();
            let Some(seen) = inner.relist_nodes.take() else {
                return;
            };
            inner
                .nodes
                .keys()
                .filter(|k| !seen.contains(*k))
                .cloned()
                .collect()
        };
        for name in gone {
            self.delete_node(&name);
        }
        self.synced.send_modify(|s| s.nodes = true);
    }

    /// A node was added or changed.
    pub fn apply_node(&self, node: &Node) {
        let name = node.name_any();
        let mut converted = match convert::kube_node(node) {
            Ok(k) => k,
            Err(e) => {
                warn!(node = %name, error = %e, "node cannot be used for scheduling");
                self.delete_node(&name);
                return;
            }
        };
        let (changed, images_changed) = {
            let mut inner = self.lock();
            if let Some(seen) = inner.relist_nodes.as_mut() {
                seen.insert(name.clone());
            }
            converted.volume_limits =
                attach::node_limits(&converted.allocatable, inner.csi_limits.get(&name));
            let (changed, images_changed) = match inner.nodes.get(&name) {
                Some(old) => (
                    convert::node_changed(old, &converted),
                    convert::images_changed(old, &converted),
                ),
                None => (true, true),
            };
            if changed || images_changed {
                inner.nodes.insert(name.clone(), converted.clone());
            }
            (changed, images_changed)
        };
        if changed || images_changed {
            self.store.set_kube_node(&name, Some(converted));
            // Keep the store's image list (whose names every node shares), not a second copy.
            if let Some(held) = self.store.kube_node(&name).filter(|_| images_changed)
                && let Some(k) = self.lock().nodes.get_mut(&name)
                && k.images == held.images
            {
                k.images = held.images.clone();
            }
            self.bump_epoch();
        }
        // Images are only scored: a pod no node could take still cannot.
        if changed {
            let retried = self.queue.with(|q| q.retry_all());
            if retried > 0 {
                debug!(node = %name, retried, "node changed: retrying unschedulable pods");
            }
        }
    }

    /// A node's CSINode was added or changed (`None`: deleted): its drivers' attach
    /// limits override the node's allocatable ones.
    pub fn apply_csinode(&self, name: &str, csinode: Option<&CSINode>) {
        let updated = {
            let mut inner = self.lock();
            match csinode {
                Some(c) => {
                    inner
                        .csi_limits
                        .insert(name.to_string(), attach::csinode_limits(c));
                }
                None => {
                    inner.csi_limits.remove(name);
                }
            }
            let limits = inner.csi_limits.get(name).cloned();
            match inner.nodes.get_mut(name) {
                Some(k) => {
                    let new = attach::node_limits(&k.allocatable, limits.as_ref());
                    (new != k.volume_limits).then(|| {
                        k.volume_limits = new;
                        k.clone()
                    })
                }
                None => None,
            }
        };
        if let Some(k) = updated {
            self.store.set_kube_node(name, Some(k));
            self.bump_epoch();
            self.queue.with(|q| q.retry_all());
        }
    }

    /// A node was deleted.
    pub fn delete_node(&self, name: &str) {
        if self.lock().nodes.remove(name).is_some() {
            self.store.set_kube_node(name, None);
            self.bump_epoch();
        }
    }

    // ---- pods ----------------------------------------------------------------------------

    /// The pod watcher (re)started a list.
    pub fn pods_relist_started(&self) {
        self.lock().relist_pods = Some(HashSet::new());
    }

    /// The pod list completed: pods not seen in it are gone.
    pub fn pods_relist_done(&self) {
        let gone: Vec<Arc<PodFacts>> = {
            let mut inner = self.lock();
            let Some(seen) = inner.relist_pods.take() else {
                return;
            };
            inner
                .pods
                .iter()
                .filter(|(k, _)| !seen.contains(*k))
                .map(|(_, v)| v.clone())
                .collect()
        };
        for f in gone {
            self.remove_pod(&f.key(), &f.uid);
        }
        self.synced.send_modify(|s| s.pods = true);
    }

    /// A pod was added or changed.
    pub fn apply_pod(&self, pod: &Pod) {
        let facts = Arc::new(convert::pod_facts(pod));
        let key = facts.key();
        if facts.terminal {
            // A finished pod frees its node.
            if let Some(seen) = self.lock().relist_pods.as_mut() {
                seen.insert(key.clone());
            }
            self.remove_pod(&key, &facts.uid);
            return;
        }
        let mut place: Option<(Arc<str>, Placement, PodOnNode)> = None;
        let mut unplace: Option<Placement> = None;
        let mut refresh: Option<(Arc<str>, PodOnNode)> = None;
        let mut resized_down = false;
        let mut resize: Option<(Placement, Placement, PodOnNode)> = None;
        {
            let mut inner = self.lock();
            if let Some(seen) = inner.relist_pods.as_mut() {
                seen.insert(key.clone());
            }
            // A pod replaced under the same name (new UID) frees the old one's place.
            if let Some(old_uid) = inner
                .pods
                .get(&key)
                .filter(|old| old.uid != facts.uid)
                .map(|old| old.uid.clone())
                && let Some(p) = inner.placed.remove(&old_uid)
            {
                inner.claimed.remove(&old_uid);
                // Lock order is always cache, then store.
                self.store
                    .update_allocation(&p.node, |a| remove_from(a, &p, &old_uid));
            }
            let previous = inner.pods.insert(key.clone(), facts.clone());
            match (
                &facts.node_name,
                facts.deleting,
                &facts.nominated_node,
                &facts.info,
            ) {
                (None, false, Some(node), Ok(info)) => {
                    let n = Nomination {
                        key: key.clone(),
                        node: node.clone(),
                        pod: PodOnNode::of(info),
                    };
                    inner.nominated.insert(key.clone(), n);
                }
                // A pending pod without a nomination in its status keeps one made here
                // (the status patch may still be on its way).
                (None, false, None, Ok(_)) => {}
                _ => {
                    inner.nominated.remove(&key);
                }
            }
            if let (Some(node), Ok(info)) = (&facts.node_name, &facts.info) {
                match inner.placed.get_mut(&facts.uid) {
                    Some(p) if &*p.node == node.as_str() => {
                        // The first sight of an assumed pod as bound refreshes it too, unless
                        // nothing its placed form carries changed since it was assumed:
                        // updates seen while it was pending did not reach that form.
                        let was_assumed = std::mem::replace(&mut p.assumed, false);
                        let from = p.assumed_from.take();
                        let changed = if was_assumed {
                            from.is_none_or(|f| !placed_as_assumed(&f, &facts))
                        } else {
                            previous.is_some_and(|old| pod_on_node_changed(&old, &facts))
                        };
                        // An in-place resize (1.33+) changes a bound pod's requests: the
                        // node's sums move with it.
                        let resized = p.requests != info.requests
                            || p.nonzero_cpu_millis != info.nonzero_cpu_millis
                            || p.nonzero_memory_bytes != info.nonzero_memory_bytes;
                        if resized {
                            resized_down = shrinks(p, info);
                            let old = p.clone();
                            p.requests = info.requests.clone();
                            p.nonzero_cpu_millis = info.nonzero_cpu_millis;
                            p.nonzero_memory_bytes = info.nonzero_memory_bytes;
                            let (on, claims) = self.placed_form(info, &facts);
                            p.claim_attachable = claims;
                            resize = Some((old, p.clone(), on));
                        } else if changed {
                            let (on, claims) = self.placed_form(info, &facts);
                            p.claim_attachable = claims;
                            refresh = Some((p.node.clone(), on));
                        }
                    }
                    existing => {
                        if let Some(old) = existing {
                            unplace = Some(old.clone());
                        }
                        let (on, claims) = self.placed_form(info, &facts);
                        let p = Placement {
                            node: Arc::from(node.as_str()),
                            requests: info.requests.clone(),
                            nonzero_cpu_millis: info.nonzero_cpu_millis,
                            nonzero_memory_bytes: info.nonzero_memory_bytes,
                            assumed: false,
                            assumed_from: None,
                            claim_attachable: claims,
                        };
                        inner.placed.insert(facts.uid.clone(), p.clone());
                        if !info.claims.is_empty() {
                            inner.claimed.insert(facts.uid.clone(), key.clone());
                        }
                        place = Some((p.node.clone(), p, on));
                    }
                }
            }
        }
        if let Some(old) = unplace {
            let uid = facts.uid.clone();
            self.store
                .update_allocation(&old.node, |a| remove_from(a, &old, &uid));
        }
        if let Some((node, p, on)) = place {
            self.store.update_allocation(&node, |a| add_to(a, &p, on));
        }
        if let Some((old, new, on)) = resize {
            // One update, so no snapshot sees the node without the pod; the pod's in-flight
            // usage estimate stays (it is about its start, not its requests).
            self.store
                .update_allocation(&new.node, |a| resize_on(a, &old, &new, on));
        }
        if resized_down {
            // Room freed on a node may help waiting pods.
            self.queue.with(|q| q.retry_all());
        }
        if let Some((node, on)) = refresh {
            // Same node, same requests: only what affinity and spreading read changed.
            self.store.update_allocation(&node, |a| {
                if a.remove_pod(&on.uid).is_some() {
                    a.put_pod(on);
                }
            });
        }
        // Other schedulers' pods (and pods delegated through Bind) are never queued.
        if self.profiles.contains(&facts.scheduler_name) {
            let now = tokio::time::Instant::now();
            if facts.node_name.is_some() || facts.deleting {
                self.queue.with(|q| q.done(&key));
            } else if !facts.scheduling_gates.is_empty() {
                self.queue
                    .with(|q| q.gate(&key, facts.priority, facts.created_unix, now));
            } else {
                self.queue
                    .with(|q| q.add(&key, facts.priority, facts.created_unix, now));
            }
        }
    }

    /// A pod was deleted.
    pub fn delete_pod(&self, pod: &Pod) {
        let facts = convert::pod_facts(pod);
        self.remove_pod(&facts.key(), &facts.uid);
    }

    fn remove_pod(&self, key: &str, uid: &str) {
        let (known, placed) = {
            let mut inner = self.lock();
            let known = inner.pods.remove(key).is_some();
            inner.nominated.remove(key);
            inner.claimed.remove(uid);
            (known, inner.placed.remove(uid))
        };
        self.queue.with(|q| q.remove(key));
        if let Some(p) = &placed {
            self.store
                .update_allocation(&p.node, |a| remove_from(a, p, uid));
        }
        if known || placed.is_some() {
            // Freed resources may help waiting pods.
            self.queue.with(|q| q.retry_all());
        }
    }

    // ---- assumptions ---------------------------------------------------------------------

    /// Counts `info` on `node` before it is bound, with an in-flight usage estimate; returns
    /// the node's new allocation (for a scheduler's own snapshot). `from`: the pod's facts
    /// `info` was read from, when the caller has them (the watch's first sight of the pod
    /// bound then keeps the assumed form if nothing it carries changed). Fails when the pod
    /// is already placed (another path bound or assumed it).
    pub fn assume(
        &self,
        info: &PodInfo,
        from: Option<Arc<PodFacts>>,
        node: &Arc<str>,
        estimate: (i64, i64),
    ) -> Result<Arc<NodeAllocation>, CacheError> {
        debug_assert!(
            from.as_ref()
                .is_none_or(|f| f.info.as_ref().is_ok_and(|i| i.uid == info.uid)),
            "assumed from another pod's facts"
        );
        let p = Placement {
            node: node.clone(),
            requests: info.requests.clone(),
            nonzero_cpu_millis: info.nonzero_cpu_millis,
            nonzero_memory_bytes: info.nonzero_memory_bytes,
            assumed: true,
            assumed_from: from,
            // The resolved pod carries its claims' attachments already; the watch's first
            // sight of it bound re-reads them.
            claim_attachable: Vec::new(),
        };
        {
            let mut inner = self.lock();
            if let Some(existing) = inner.placed.get(&info.uid) {
                return Err(CacheError::AlreadyPlaced {
                    pod: format!("{}/{}", info.namespace, info.name),
                    node: existing.node.to_string(),
                });
            }
            inner.placed.insert(info.uid.clone(), p.clone());
            if !info.claims.is_empty() {
                inner.claimed.insert(
                    info.uid.clone(),
                    format!("{}/{}", info.namespace, info.name),
                );
            }
        }
        let inflight = Inflight::new(info.uid.clone(), estimate.0, estimate.1, Instant::now());
        Ok(self.store.update_allocation_shared(node, |a| {
            add_to(a, &p, PodOnNode::of(info));
            a.inflight.retain(|e| e.uid != inflight.uid);
            a.inflight.push(inflight);
        }))
    }

    /// Drops an assumption whose bind failed (no-op once the watch has shown the pod bound).
    pub fn forget(&self, uid: &str) -> bool {
        let p = {
            let mut inner = self.lock();
            match inner.placed.get(uid) {
                Some(p) if p.assumed => {
                    inner.claimed.remove(uid);
                    inner.placed.remove(uid)
                }
                _ => None,
            }
        };
        match p {
            Some(p) => {
                self.store
                    .update_allocation(&p.node, |a| remove_from(a, &p, uid));
                true
            }
            None => false,
        }
    }

    /// Where a pod is placed (bound or assumed), if anywhere.
    pub fn placement(&self, uid: &str) -> Option<(String, bool)> {
        self.lock()
            .placed
            .get(uid)
            .map(|p| (p.node.to_string(), p.assumed))
    }
}

impl BudgetSource for ClusterCache {
    fn disruption_budgets(&self) -> Vec<loadstar_framework::preemption::DisruptionBudget> {
        self.budgets.all()
    }
}

#[async_trait::async_trait]
impl PodResolver for ClusterCache {
    async fn resolve(&self, namespace: &str, name: &str) -> Result<PodInfo, ClusterError> {
        if !self.synced.borrow().pods {
            return Err(ClusterError::Unavailable(
                "the pod cache has not finished its first list yet; retry shortly".to_string(),
            ));
        }
        let key = format!("{namespace}/{name}");
        let facts = self.pod(&key).ok_or_else(|| {
            // The names come from a gRPC client: quoted bounded, never whole.
            ClusterError::NotFound(format!(
                "pod {} is not in the cluster",
                loadstar_common::text::pod_key(namespace, name)
            ))
        })?;
        facts
            .info
            .clone()
            .map_err(|e| ClusterError::FailedPrecondition(e.to_string()))
    }
}

/// Whole pods sent over gRPC are read like cluster pods, claims resolved against the
/// cluster's volumes.
impl PodDecoder for ClusterCache {
    fn decode(&self, json: &str) -> Result<PodInfo, ClusterError> {
        convert::JsonPodDecoder
            .decode(json)
            .map(|info| self.with_volumes(info))
    }
}

impl AgentPods for ClusterCache {
    fn agent_pod(&self, namespace: &str, name: &str) -> PodLookup {
        ClusterCache::agent_pod(self, namespace, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::{Profile, StalePolicy};
    use loadstar_store::StoreConfig;
    use serde_json::json;

    fn setup() -> (Arc<NodeStore>, Arc<SchedulingQueue>, ClusterCache) {
        let store = Arc::new(NodeStore::new(StoreConfig::default()));
        let queue = Arc::new(SchedulingQueue::new());
        let profiles = Arc::new(Profiles::new(vec![Profile {
            name: "loadstar".into(),
            filters: vec![],
            scores: vec![],
            window_seconds: 60,
            stale_policy: StalePolicy::Fallback,
            stale_penalty: 1.0,
            preemption: None,
            sampling: loadstar_framework::NodeSampling::ALL,
        }]));
        let cache = ClusterCache::new(store.clone(), queue.clone(), profiles);
        (store, queue, cache)
    }

    fn pod(name: &str, uid: &str, sched: &str, node: Option<&str>, cpu: &str) -> Pod {
        let mut spec = json!({
            "schedulerName": sched,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]
        });
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid},
            "spec": spec
        }))
        .expect("pod json")
    }

    fn node(name: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("node json")
    }

    fn alloc(store: &NodeStore, n: &str) -> Arc<NodeAllocation> {
        store.snapshot_now().get(n).expect("node").alloc.clone()
    }

    #[test]
    fn namespace_labels_reach_the_stores_snapshots_and_retry_waiting_pods() {
        let (store, queue, cache) = setup();
        cache.apply_pod(&pod("waiting", "u1", "loadstar", None, "10m"));
        let waiting_again = || {
            let popped = queue
                .with(|q| q.pop(tokio::time::Instant::now()))
                .expect("the pending pod is queued");
            queue.with(|q| q.requeue_backoff(&popped.key, tokio::time::Instant::now()));
            assert_eq!(queue.with(|q| q.depths()).backoff, 1);
        };
        waiting_again();
        assert!(!cache.synced().borrow().namespaces);
        let team = |t: &str| BTreeMap::from([("team".to_string(), t.to_string())]);
        cache.namespaces_changed([("team-a".to_string(), team("a"))]);
        assert!(cache.synced().borrow().namespaces, "the first list syncs");
        assert_eq!(
            queue.with(|q| q.depths()).active,
            1,
            "a namespace selector may match other pods now"
        );
        let table = store.snapshot_now().namespaces.clone().expect("a table");
        // The same table again (a status update): no retry, no new generation.
        waiting_again();
        let generation = store.generation();
        cache.namespaces_changed([("team-a".to_string(), team("a"))]);
        assert_eq!(store.generation(), generation, "nothing changed");
        assert_eq!(queue.with(|q| q.depths()).backoff, 1);
        // A namespace added (its pods may have come first), or one relabelled: retried.
        cache.namespaces_changed([
            ("team-a".to_string(), team("a")),
            ("new".to_string(), team("b")),
        ]);
        assert!(store.generation() > generation);
        assert_eq!(queue.with(|q| q.depths()).active, 1);
        waiting_again();
        cache.namespaces_changed([
            ("team-a".to_string(), team("b")),
            ("new".to_string(), team("b")),
        ]);
        assert_eq!(queue.with(|q| q.depths()).active, 1);
        assert_eq!(
            table
                .get("team-a")
                .and_then(|l| l.get("team"))
                .map(String::as_str),
            Some("a")
        );
        assert!(table.get("team-b").is_none());
    }

    #[test]
    fn agent_pods_are_looked_up_with_uid_node_and_phase() {
        let (_, _, cache) = setup();
        assert_eq!(cache.agent_pod("ns", "agent"), PodLookup::NotSynced);
        cache.pods_relist_started();
        cache.pods_relist_done();
        assert_eq!(cache.agent_pod("ns", "agent"), PodLookup::Missing);
        let mut p = pod("agent", "u1", "default-scheduler", Some("n1"), "10m");
        cache.apply_pod(&p);
        let found = |running| {
            PodLookup::Found(AgentPod {
                uid: "u1".into(),
                node_name: Some("n1".into()),
                running,
            })
        };
        assert_eq!(cache.agent_pod("ns", "agent"), found(false), "Pending");
        p.status = Some(serde_json::from_value(json!({"phase": "Running"})).expect("status"));
        cache.apply_pod(&p);
        assert_eq!(cache.agent_pod("ns", "agent"), found(true));
        p.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).expect("time"));
        cache.apply_pod(&p);
        assert_eq!(
            cache.agent_pod("ns", "agent"),
            found(false),
            "being deleted"
        );
        cache.delete_pod(&p);
        assert_eq!(cache.agent_pod("ns", "agent"), PodLookup::Missing);
    }

    #[test]
    fn bound_pods_become_allocations_and_ours_are_queued() {
        let (store, queue, cache) = setup();
        cache.nodes_relist_started();
        cache.apply_node(&node("n1"));
        cache.nodes_relist_done();
        cache.pods_relist_started();
        cache.apply_pod(&pod("a", "ua", "default-scheduler", Some("n1"), "500m"));
        cache.apply_pod(&pod("b", "ub", "loadstar", None, "1"));
        cache.apply_pod(&pod("c", "uc", "default-scheduler", None, "1"));
        cache.pods_relist_done();
        assert!(!cache.synced().borrow().all(), "namespaces not listed yet");
        cache.namespaces_changed([]);
        assert!(
            !cache.synced().borrow().all(),
            "the server's version not read yet"
        );
        cache.server_version("1", "20+");
        assert!(cache.synced().borrow().all());
        assert_eq!(
            store.spread_default_inclusion(),
            None,
            "1.20 counts every pod"
        );
        let a = alloc(&store, "n1");
        assert_eq!(a.requested.cpu_millis, 500);
        assert_eq!(a.requested.pods, 1);
        assert_eq!(a.pods.len(), 1);
        assert_eq!(
            a.nonzero_memory_bytes,
            loadstar_framework::snapshot::DEFAULT_NONZERO_MEMORY_BYTES
        );
        // Only the loadstar pod is queued.
        let keys: Vec<String> = queue.with(|q| {
            std::iter::from_fn(|| q.pop(tokio::time::Instant::now()).ok().map(|p| p.key)).collect()
        });
        assert_eq!(keys, vec!["ns/b"]);
        // Deleting the bound pod frees the node.
        cache.delete_pod(&pod("a", "ua", "default-scheduler", Some("n1"), "500m"));
        let a = alloc(&store, "n1");
        assert_eq!((a.requested.cpu_millis, a.requested.pods), (0, 0));
    }

    #[test]
    fn in_place_resizes_move_the_nodes_sums_and_a_shrink_retries_waiting_pods() {
        let (store, queue, cache) = setup();
        cache.apply_node(&node("n1"));
        cache.apply_pod(&pod("waiting", "uw", "loadstar", None, "4"));
        let popped = queue
            .with(|q| q.pop(tokio::time::Instant::now()))
            .expect("queued");
        queue.with(|q| q.requeue_backoff(&popped.key, tokio::time::Instant::now()));
        // A bound pod resized from 1 to 3 CPUs while the kubelet still runs it at 1.
        let resized = |spec: &str, reported: &str| {
            let mut p = pod("web", "u1", "default-scheduler", Some("n1"), spec);
            p.status = Some(
                serde_json::from_value(json!({"phase": "Running", "containerStatuses": [
                    {"name": "c", "image": "i", "imageID": "", "ready": true,
                     "restartCount": 0, "resources": {"requests": {"cpu": reported}},
                     "allocatedResources": {"cpu": reported}}]}))
                .expect("status"),
            );
            p
        };
        cache.apply_pod(&resized("1", "1"));
        let a = alloc(&store, "n1");
        assert_eq!((a.requested.cpu_millis, a.nonzero_cpu_millis), (1000, 1000));
        // The pod started moments ago: its in-flight usage estimate outlives a resize.
        store.update_allocation("n1", |a| {
            a.inflight
                .push(Inflight::new("u1".into(), 800, 0, Instant::now()))
        });
        cache.apply_pod(&resized("3", "1"));
        let a = alloc(&store, "n1");
        assert_eq!((a.requested.cpu_millis, a.requested.pods), (3000, 1));
        assert_eq!(a.nonzero_cpu_millis, 3000);
        assert_eq!(a.pods.len(), 1);
        assert_eq!(a.inflight.len(), 1);
        assert_eq!(
            queue.with(|q| q.depths()).backoff,
            1,
            "growing frees nothing"
        );
        // Back down to 500m, actuated: the node frees room and the waiting pod is retried.
        cache.apply_pod(&resized("500m", "500m"));
        let a = alloc(&store, "n1");
        assert_eq!((a.requested.cpu_millis, a.requested.pods), (500, 1));
        assert_eq!(queue.with(|q| q.depths()).active, 1);
        // Deleting it frees exactly what it holds now.
        cache.delete_pod(&resized("500m", "500m"));
        let a = alloc(&store, "n1");
        assert_eq!((a.requested.cpu_millis, a.requested.pods), (0, 0));
    }

    #[test]
    fn assumptions_are_confirmed_or_forgotten() {
        let (store, _queue, cache) = setup();
        cache.apply_node(&node("n1"));
        let p = pod("b", "ub", "loadstar", None, "1");
        cache.apply_pod(&p);
        let info = cache
            .pod("ns/b")
            .expect("known")
            .info
            .clone()
            .expect("valid");
        let n1: Arc<str> = Arc::from("n1");
        let a = cache
            .assume(&info, None, &n1, (1500, 1 << 20))
            .expect("assumed");
        assert_eq!(a.requested.cpu_millis, 1000);
        assert_eq!(a.inflight.len(), 1);
        assert!(matches!(
            cache.assume(&info, None, &n1, (0, 0)),
            Err(CacheError::AlreadyPlaced { .. })
        ));
        assert!(cache.forget("ub"));
        let a = alloc(&store, "n1");
        assert_eq!((a.requested.cpu_millis, a.inflight.len()), (0, 0));
        // Assume again, then the watch shows it bound: forgetting is then a no-op.
        cache.assume(&info, None, &n1, (1500, 0)).expect("assumed");
        cache.apply_pod(&pod("b", "ub", "loadstar", Some("n1"), "1"));
        assert_eq!(cache.placement("ub"), Some(("n1".into(), false)));
        assert!(!cache.forget("ub"));
        let a = alloc(&store, "n1");
        assert_eq!((a.requested.cpu_millis, a.requested.pods), (1000, 1));
        // A pod that finished frees its node.
        let mut done = pod("b", "ub", "loadstar", Some("n1"), "1");
        done.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        cache.apply_pod(&done);
        assert_eq!(alloc(&store, "n1").requested.pods, 0);
    }

    #[test]
    fn a_binding_that_changed_nothing_keeps_the_assumed_allocation() {
        let (store, _queue, cache) = setup();
        cache.apply_node(&node("n1"));
        let n1: Arc<str> = Arc::from("n1");
        let assume = |name: &str| {
            let facts = cache.pod(&format!("ns/{name}")).expect("known");
            let info = facts.info.clone().expect("valid");
            cache
                .assume(&info, Some(facts), &n1, (0, 0))
                .expect("assumed")
        };
        cache.apply_pod(&pod("b", "ub", "loadstar", None, "1"));
        let (x, y) = (
            cache.pod("ns/b").expect("known"),
            cache.pod("ns/b").expect("known"),
        );
        assert!(
            Arc::ptr_eq(&x, &y),
            "a pod without claims or default spreading is not copied"
        );
        let assumed = assume("b");
        cache.apply_pod(&pod("b", "ub", "loadstar", Some("n1"), "1"));
        assert_eq!(cache.placement("ub"), Some(("n1".into(), false)));
        assert!(
            Arc::ptr_eq(&assumed, &alloc(&store, "n1")),
            "the node's allocation is the assumed one, not a copy"
        );
        // Labels changed between the decision and the binding: the placed form follows.
        cache.apply_pod(&pod("c", "uc", "loadstar", None, "1"));
        let assumed = assume("c");
        let mut bound = pod("c", "uc", "loadstar", Some("n1"), "1");
        bound.metadata.labels = Some([("app".to_string(), "x".to_string())].into());
        cache.apply_pod(&bound);
        let a = alloc(&store, "n1");
        assert!(!Arc::ptr_eq(&assumed, &a));
        let c = a.pods.iter().find(|p| p.uid == "uc").expect("placed");
        assert_eq!(c.labels.get("app").map(String::as_str), Some("x"));
        assert_eq!((a.requested.cpu_millis, a.requested.pods), (2000, 2));
        // Started already when first seen bound (a kubelet was quick): refreshed too.
        cache.apply_pod(&pod("d", "ud", "loadstar", None, "1"));
        assume("d");
        let mut started = pod("d", "ud", "loadstar", Some("n1"), "1");
        started.status = Some(k8s_openapi::api::core::v1::PodStatus {
            start_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-28T00:00:00Z".parse().expect("time"),
            )),
            ..Default::default()
        });
        cache.apply_pod(&started);
        let a = alloc(&store, "n1");
        let d = a.pods.iter().find(|p| p.uid == "ud").expect("placed");
        assert!(d.start_time.is_some(), "{d:?}");
    }

    #[test]
    fn relist_drops_vanished_objects() {
        let (store, _queue, cache) = setup();
        cache.apply_node(&node("n1"));
        cache.apply_node(&node("n2"));
        cache.apply_pod(&pod("a", "ua", "x", Some("n1"), "1"));
        cache.nodes_relist_started();
        cache.apply_node(&node("n1"));
        cache.nodes_relist_done();
        cache.pods_relist_started();
        cache.pods_relist_done();
        assert!(
            store
                .snapshot_now()
                .get("n2")
                .is_none_or(|n| n.kube.is_none())
        );
        assert_eq!(alloc(&store, "n1").requested.pods, 0);
        assert_eq!(cache.pod_count(), 0);
    }

    #[tokio::test]
    async fn resolver_answers_from_the_cache() {
        let (_store, _queue, cache) = setup();
        assert!(matches!(
            cache.resolve("ns", "a").await.expect_err("not synced"),
            ClusterError::Unavailable(_)
        ));
        cache.pods_relist_started();
        cache.apply_pod(&pod("a", "ua", "x", None, "250m"));
        cache.pods_relist_done();
        let info = cache.resolve("ns", "a").await.expect("found");
        assert_eq!(info.requests.cpu_millis, 250);
        assert!(matches!(
            cache.resolve("ns", "zz").await.expect_err("missing"),
            ClusterError::NotFound(_)
        ));
        cache.apply_pod(&pod("bad", "ub", "x", None, "lots"));
        assert!(matches!(
            cache.resolve("ns", "bad").await.expect_err("bad"),
            ClusterError::FailedPrecondition(_)
        ));
    }

    #[tokio::test]
    async fn unknown_pods_are_named_briefly_however_long_the_names() {
        let (_store, _queue, cache) = setup();
        cache.pods_relist_started();
        cache.pods_relist_done();
        let e = cache.resolve("ns", "zz").await.expect_err("missing");
        assert_eq!(e.to_string(), "pod ns/zz is not in the cluster");
        let huge = "q".repeat(1_000_000);
        for (ns, name) in [(huge.as_str(), "a"), ("ns", huge.as_str())] {
            let e = cache.resolve(ns, name).await.expect_err("missing");
            assert!(matches!(e, ClusterError::NotFound(_)), "{e:?}");
            let message = e.to_string();
            assert!(message.len() < 1024, "{} bytes", message.len());
            assert!(message.contains("\"qqqqqqqqqqqqqqqq"), "{message}");
        }
    }

    #[test]
    fn claims_resolve_when_the_pod_is_asked_for_and_follow_their_binding() {
        use ::kube::runtime::watcher::Event;
        use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
        let (_, _, cache) = setup();
        let mut p: serde_json::Value =
            serde_json::to_value(pod("db", "u1", "loadstar", None, "1")).expect("json");
        p["spec"]["volumes"] = json!([{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]);
        cache.apply_pod(&serde_json::from_value(p.clone()).expect("pod"));
        // No volume reflectors: the claim stays unresolved (the profile refuses the pod).
        let info = cache.pod("ns/db").expect("pod").info.clone().expect("info");
        assert_eq!(
            info.claims,
            vec![loadstar_framework::snapshot::PodClaim::from("c")]
        );
        assert!(info.volumes.is_none());
        let (claims, mut claims_w) = ::kube::runtime::reflector::store::<PersistentVolumeClaim>();
        let (volumes, mut volumes_w) = ::kube::runtime::reflector::store::<PersistentVolume>();
        let (classes, _classes_w) = ::kube::runtime::reflector::store();
        cache.set_volume_stores(VolumeStores {
            claims,
            volumes,
            classes,
            drivers: ::kube::runtime::reflector::store().0,
            capacities: Default::default(),
        });
        let info = cache.pod("ns/db").expect("pod").info.clone().expect("info");
        assert_eq!(
            info.volumes.and_then(|v| v.unschedulable),
            Some("persistentvolumeclaim \"c\" not found".to_string())
        );
        let claim = |bound: bool| -> PersistentVolumeClaim {
            let mut c = json!({"metadata": {"name": "c", "namespace": "ns"}, "spec": {}});
            if bound {
                c["metadata"]["annotations"] = json!({volumes::BIND_COMPLETED: "yes"});
                c["spec"]["volumeName"] = json!("pv1");
            }
            serde_json::from_value(c).expect("pvc")
        };
        claims_w.apply_watcher_event(&Event::Apply(claim(false)));
        let info = cache.pod("ns/db").expect("pod").info.clone().expect("info");
        assert_eq!(
            info.volumes.and_then(|v| v.unschedulable).as_deref(),
            Some(volumes::UNBOUND_IMMEDIATE)
        );
        claims_w.apply_watcher_event(&Event::Apply(claim(true)));
        volumes_w.apply_watcher_event(&Event::Apply(
            serde_json::from_value(json!({"metadata": {"name": "pv1",
                "labels": {"topology.kubernetes.io/zone": "z1"}},
                "spec": {"hostPath": {"path": "/d"}}}))
            .expect("pv"),
        ));
        let v = cache
            .pod("ns/db")
            .expect("pod")
            .info
            .clone()
            .expect("info")
            .volumes;
        let v = v.expect("resolved");
        assert_eq!(v.unschedulable, None);
        assert_eq!(
            v.zones,
            vec![(
                "topology.kubernetes.io/zone".to_string(),
                vec!["z1".to_string()]
            )]
        );
        // A whole pod sent over gRPC resolves the same way.
        let decoded = PodDecoder::decode(&cache, &p.to_string()).expect("decodes");
        assert_eq!(decoded.volumes.map(|v| v.zones.len()), Some(1));
    }

    #[test]
    fn csinode_counts_override_the_nodes_attach_limits_and_follow_it() {
        let (store, _, cache) = setup();
        let mut n: serde_json::Value = serde_json::to_value(node("n1")).expect("json");
        n["status"]["allocatable"]["attachable-volumes-csi-d.example.com"] = json!("10");
        cache.apply_node(&serde_json::from_value(n).expect("node"));
        let limits = |store: &NodeStore| {
            store
                .snapshot_now()
                .get("n1")
                .and_then(|v| v.kube.clone())
                .expect("kube")
                .volume_limits
                .clone()
        };
        let key = "attachable-volumes-csi-d.example.com".to_string();
        assert_eq!(limits(&store).get(&key), Some(&10));
        let csinode: CSINode = serde_json::from_value(json!({"metadata": {"name": "n1"},
            "spec": {"drivers": [{"name": "d.example.com", "nodeID": "n1",
                                  "allocatable": {"count": 2}}]}}))
        .expect("csinode");
        let epoch = cache.node_epoch();
        cache.apply_csinode("n1", Some(&csinode));
        assert_eq!(limits(&store).get(&key), Some(&2));
        assert!(
            cache.node_epoch() > epoch,
            "snapshots must see the new limit"
        );
        // A node (re)applied after its CSINode keeps the override; deleting it restores
        // the allocatable limit.
        cache.apply_node(&node("n1"));
        assert_eq!(limits(&store).get(&key), Some(&2));
        cache.apply_csinode("n1", None);
        assert_eq!(limits(&store).get(&key), None);
    }

    #[test]
    fn placed_pods_attach_their_claims_volumes_as_the_claims_bind() {
        use ::kube::runtime::watcher::Event;
        use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
        use loadstar_framework::snapshot::AttachKind;
        let (store, _, cache) = setup();
        let (claims, mut claims_w) = ::kube::runtime::reflector::store::<PersistentVolumeClaim>();
        let (volumes, mut volumes_w) = ::kube::runtime::reflector::store::<PersistentVolume>();
        let (classes, mut classes_w) = ::kube::runtime::reflector::store();
        cache.set_volume_stores(VolumeStores {
            claims,
            volumes,
            classes,
            drivers: ::kube::runtime::reflector::store().0,
            capacities: Default::default(),
        });
        classes_w.apply_watcher_event(&Event::Apply(
            serde_json::from_value(json!({"metadata": {"name": "fast"},
                "provisioner": "d.example.com", "volumeBindingMode": "WaitForFirstConsumer"}))
            .expect("sc"),
        ));
        claims_w.apply_watcher_event(&Event::Apply(
            serde_json::from_value(json!({"metadata": {"name": "c", "namespace": "ns"},
                "spec": {"storageClassName": "fast"}}))
            .expect("pvc"),
        ));
        cache.apply_node(&node("n1"));
        let mut p: serde_json::Value =
            serde_json::to_value(pod("db", "u1", "other", Some("n1"), "1")).expect("json");
        p["spec"]["volumes"] = json!([{"name": "d", "persistentVolumeClaim": {"claimName": "c"}},
                                      {"name": "e", "awsElasticBlockStore": {"volumeID": "vol-1"}}]);
        cache.apply_pod(&serde_json::from_value(p).expect("pod"));
        let attached = |store: &NodeStore| -> Vec<(AttachKind, String)> {
            alloc(store, "n1").pods[0]
                .attachable
                .iter()
                .map(|v| (v.kind, v.id.clone()))
                .collect()
        };
        assert_eq!(
            attached(&store),
            vec![
                (AttachKind::AwsEbs, "vol-1".into()),
                (AttachKind::Csi, "claim:ns/c".into())
            ]
        );
        // The claim binds to a CSI volume: the pod now holds that volume's handle.
        volumes_w.apply_watcher_event(&Event::Apply(
            serde_json::from_value(json!({"metadata": {"name": "pv1"},
                "spec": {"csi": {"driver": "d.example.com", "volumeHandle": "h-1"}}}))
            .expect("pv"),
        ));
        claims_w.apply_watcher_event(&Event::Apply(
            serde_json::from_value(json!({"metadata": {"name": "c", "namespace": "ns",
                "annotations": {volumes::BIND_COMPLETED: "yes"}},
                "spec": {"storageClassName": "fast", "volumeName": "pv1"}}))
            .expect("pvc"),
        ));
        cache.volumes_changed();
        assert_eq!(
            attached(&store),
            vec![
                (AttachKind::AwsEbs, "vol-1".into()),
                (AttachKind::Csi, "h-1".into())
            ]
        );
    }
}
