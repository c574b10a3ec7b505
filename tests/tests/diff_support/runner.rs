//! Runs one generated scenario against both schedulers on the e2e API server and collects
//! each one's answer: plays the scenario's history if it has one, creates its objects, waits
//! until both schedulers' caches show exactly them (a probe pod, below), creates the incoming
//! pod, reads kube-scheduler's feasible set from the recording extender and its
//! `PodScheduled` condition, asks Loadstar's `Scorer.Score` by reference, and deletes
//! everything so scenarios do not interact.
//!
//! The probe is the barrier: a pod in a namespace no generated term mentions, requesting
//! nothing, tolerating every generated taint and cordon (but not `not-ready`). Its feasible
//! set is known in advance — every scenario node with a free pod slot, and nothing else —
//! so when kube-scheduler's extender call shows exactly that set, and Loadstar ranks exactly
//! that set and lists exactly the scenario's nodes as backed by Node objects, both caches
//! hold every node (with its Ready condition), every bound pod (they were created before
//! the probe, on the same watch), and no node of an earlier scenario.
//!
//! A scenario with volumes and claims adds one more object of each kind, created after the
//! scenario's: a volume without constraints and a claim in the probes' namespace bound to
//! it, which the probe mounts. Each scheduler reads claims and volumes through one ordered
//! watch per kind, so a cache that lets the probe through (a claim or volume it has not seen
//! fails the probe everywhere) holds every claim and volume of the scenario too.
//!
//! A scenario with CSINodes gives every node one, and the probe a CSI volume that only a
//! node's CSINode lets on (`generator::attach`): a cache that lets the probe onto a node
//! holds that node's CSINode. StorageClasses and the Services and controllers that select
//! pods (read through watches of their own, with no such proof) are created before
//! everything else.
//!
//! Loadstar may also list entries with neither a Node object nor an agent behind them (a
//! node deleted before its pods leaves one: see the regression cases); they have no labels,
//! are never candidates here and cannot change a feasible set, so the barrier ignores them
//! and the run reports how many are left.
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use loadstar_proto::pb;
use loadstar_proto::pb::scorer_client::ScorerClient;
use serde_json::{Value, json};
use tonic::transport::Channel;

use super::extender::Extender;
use super::generator::preemption::admitted;
use super::kube_scheduler::KubeScheduler;
use super::scenario::{
    AFTER_CREATE, DELETE_GRACEFULLY, MARK_SUCCEEDED, SCHEDULER_NAME, Scenario, after_create,
    probe_tolerations, str_at,
};
use super::storage;

/// How often waits poll.
const POLL: Duration = Duration::from_millis(20);
/// The longest the barrier may take (the first scenario also waits for cache syncs).
const BARRIER_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one probe pod may wait for kube-scheduler's decision before a fresh probe is
/// tried (a pod kube-scheduler found unschedulable is only retried on some cluster events).
const PROBE_DECISION_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest kube-scheduler may take to decide about the incoming pod.
const DECISION_TIMEOUT: Duration = Duration::from_secs(30);
/// Loadstar's store reuses a snapshot younger than 50 ms: wait at least this long after the
/// barrier before asking it about the incoming pod.
const SNAPSHOT_AGE: Duration = Duration::from_millis(100);

/// Both schedulers' answers for one scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Nodes kube-scheduler's filters let through (what the extender was called with).
    pub kube_feasible: BTreeSet<String>,
    /// Its `PodScheduled` condition: `reason: message` (the `FailedScheduling` text).
    pub kube_message: String,
    /// Node lists of later filter calls that differed from the first (kube-scheduler retried
    /// the pod and answered differently); empty normally.
    pub kube_unstable: Vec<Vec<String>>,
    /// Nodes Loadstar ranked.
    pub loadstar_feasible: BTreeSet<String>,
    /// Nodes Loadstar filtered: (node, plugin, reason).
    pub loadstar_filtered: Vec<(String, String, String)>,
    /// Loadstar's summary line.
    pub loadstar_summary: String,
    /// Loadstar's error, when `Score` failed.
    pub loadstar_error: Option<String>,
    /// Preemption scenarios: what kube-scheduler did.
    pub kube_preempted: Option<Preempted>,
    /// Preemption scenarios: Loadstar's best candidates (all of rank 0; empty when it
    /// would not preempt), and its outcome in words.
    pub loadstar_preempted: Vec<Preempted>,
    /// See [`Outcome::loadstar_preempted`].
    pub loadstar_preemption_note: String,
}

/// A preemption decision: the nominated node (`None`: no preemption) and the victims, as
/// `namespace/name`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preempted {
    /// The nominated node.
    pub node: Option<String>,
    /// The deleted pods.
    pub victims: BTreeSet<String>,
}

impl Outcome {
    /// Whether both feasible sets are identical (and Loadstar answered), and in preemption
    /// scenarios whether kube-scheduler's nominated node and victims are one of Loadstar's
    /// best candidates (or neither preempted).
    pub fn identical(&self) -> bool {
        let preemption = match &self.kube_preempted {
            None => true,
            Some(Preempted {
                node: None,
                victims,
            }) => victims.is_empty() && self.loadstar_preempted.is_empty(),
            Some(k) => self.loadstar_preempted.contains(k),
        };
        self.loadstar_error.is_none() && self.kube_feasible == self.loadstar_feasible && preemption
    }
}

impl Outcome {
    /// Reads a `Score` answer with a preemption part into this outcome.
    fn read_preemption_answer(&mut self, r: pb::ScoreResponse) {
        self.loadstar_feasible = r.ranked.iter().map(|n| n.node_name.clone()).collect();
        self.loadstar_filtered = r
            .filtered
            .iter()
            .map(|f| (f.node_name.clone(), f.plugin.clone(), f.reason.clone()))
            .collect();
        self.loadstar_summary = r.summary;
        let Some(p) = r.preemption else {
            self.loadstar_preemption_note = "no preemption answer".into();
            return;
        };
        self.loadstar_preemption_note = format!(
            "{:?} {} ({} potential, {} examined, {} candidate(s))",
            pb::PreemptionOutcome::try_from(p.outcome).unwrap_or_default(),
            p.reason,
            p.potential_nodes,
            p.examined_nodes,
            p.candidates.len()
        );
        self.loadstar_preempted = p
            .candidates
            .iter()
            .filter(|c| c.rank == 0)
            .map(|c| Preempted {
                node: Some(c.node_name.clone()),
                victims: c
                    .victims
                    .iter()
                    .map(|v| format!("{}/{}", v.namespace, v.name))
                    .collect(),
            })
            .collect();
    }
}

/// The schedulers and clients one run shares.
pub struct Harness {
    /// Admin client.
    pub client: Client,
    /// Loadstar's gRPC client.
    pub scorer: ScorerClient<Channel>,
    /// The recording extender.
    pub extender: Extender,
    /// The dedicated kube-scheduler.
    pub kube: KubeScheduler,
    /// Namespace of the probe pods.
    pub probe_ns: String,
}

async fn create_namespace(client: &Client, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    api.create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

async fn create_pod(client: &Client, pod: &Value) -> Result<Pod> {
    let ns = str_at(pod, "/metadata/namespace");
    let name = str_at(pod, "/metadata/name");
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let p: Pod = serde_json::from_value(pod.clone())
        .with_context(|| format!("pod {ns}/{name} is not a Pod"))?;
    api.create(&PostParams::default(), &p)
        .await
        .with_context(|| format!("creating pod {ns}/{name}"))
}

async fn create_node(client: &Client, node: &Value) -> Result<()> {
    let name = str_at(node, "/metadata/name");
    let api: Api<Node> = Api::all(client.clone());
    let n: Node =
        serde_json::from_value(node.clone()).with_context(|| format!("{name} is not a Node"))?;
    api.create(&PostParams::default(), &n)
        .await
        .with_context(|| format!("creating node {name}"))?;
    Ok(())
}

/// The API of a namespaced object given with its `apiVersion` and `kind`.
fn dynamic_api(client: &Client, object: &Value) -> Api<DynamicObject> {
    let api_version = str_at(object, "/apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        group,
        version,
        &str_at(object, "/kind"),
    ));
    Api::namespaced_with(
        client.clone(),
        &str_at(object, "/metadata/namespace"),
        &resource,
    )
}

/// Creates the Services and controllers that select pods.
async fn create_selectors(client: &Client, sc: &Scenario) -> Result<()> {
    for o in &sc.selectors {
        let obj: DynamicObject = serde_json::from_value(o.clone())?;
        dynamic_api(client, o)
            .create(&PostParams::default(), &obj)
            .await
            .with_context(|| {
                format!(
                    "creating {} {}",
                    str_at(o, "/kind"),
                    str_at(o, "/metadata/name")
                )
            })?;
    }
    Ok(())
}

/// Makes an existing pod Terminating or Succeeded, as its [`AFTER_CREATE`] annotation says.
async fn after_create_step(client: &Client, pod: &Value) -> Result<()> {
    let ns = str_at(pod, "/metadata/namespace");
    let name = str_at(pod, "/metadata/name");
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    match after_create(pod) {
        None => {}
        Some(DELETE_GRACEFULLY) => {
            api.delete(&name, &DeleteParams::default())
                .await
                .with_context(|| format!("deleting {ns}/{name} gracefully"))?;
        }
        Some(MARK_SUCCEEDED) => {
            let patch = json!({"status": {"phase": "Succeeded"}});
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("marking {ns}/{name} Succeeded"))?;
        }
        Some(other) => bail!("{ns}/{name}: unknown {AFTER_CREATE} {other:?}"),
    }
    Ok(())
}

/// PodDisruptionBudgets as the 1.20 API server serves them (`policy/v1beta1`).
fn budgets_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "policy",
        "v1beta1",
        "PodDisruptionBudget",
    ));
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// Creates the scenario's budgets and writes their status (the disruption controller that
/// would does not run here).
async fn create_budgets(client: &Client, sc: &Scenario) -> Result<()> {
    for b in &sc.budgets {
        let ns = str_at(b, "/metadata/namespace");
        let name = str_at(b, "/metadata/name");
        let api = budgets_api(client, &ns);
        let obj: DynamicObject = serde_json::from_value(b.clone())?;
        api.create(&PostParams::default(), &obj)
            .await
            .with_context(|| format!("creating PodDisruptionBudget {ns}/{name}"))?;
        let status = json!({"status": b.get("status").cloned().unwrap_or_default()});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .with_context(|| format!("writing the status of PodDisruptionBudget {ns}/{name}"))?;
    }
    Ok(())
}

/// Writes an existing pod's `status.startTime` (a kubelet would), when the scenario gives
/// one.
async fn set_start_time(client: &Client, pod: &Value) -> Result<()> {
    let Some(start) = pod.pointer("/status/startTime") else {
        return Ok(());
    };
    let ns = str_at(pod, "/metadata/namespace");
    let name = str_at(pod, "/metadata/name");
    let patch = json!({"status": {"startTime": start}});
    Api::<Pod>::namespaced(client.clone(), &ns)
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("writing {ns}/{name}'s start time"))?;
    Ok(())
}

/// Creates the PriorityClasses preemption scenarios name (once per run; existing ones are
/// kept).
pub async fn create_priority_classes(client: &Client) -> Result<()> {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let api: Api<PriorityClass> = Api::all(client.clone());
    for (name, value, policy) in super::generator::preemption::CLASSES {
        let pc: PriorityClass = serde_json::from_value(
            json!({"metadata": {"name": name}, "value": value, "preemptionPolicy": policy}),
        )?;
        match api.create(&PostParams::default(), &pc).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating PriorityClass {name}")),
        }
    }
    Ok(())
}

fn now_gone() -> DeleteParams {
    DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    }
}

async fn delete_pod(client: &Client, ns: &str, name: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let _ = api.delete(name, &now_gone()).await;
}

/// The pod's PodScheduled=False condition as `reason: message`, if it has one.
fn unschedulable_condition(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| {
            format!(
                "{}: {}",
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default()
            )
        })
}

/// kube-scheduler's first decision about a pod: the extender's first node list, or the
/// empty set when the pod became unschedulable without an extender call (no node passed).
enum KubeDecision {
    /// The first filter call's nodes.
    Called(Vec<String>),
    /// PodScheduled=False with no filter call.
    NoneFeasible,
}

impl Harness {
    async fn kube_decision(
        &mut self,
        ns: &str,
        name: &str,
        uid: &str,
        timeout: Duration,
        need_condition: bool,
    ) -> Result<Option<(KubeDecision, String)>> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let deadline = Instant::now() + timeout;
        loop {
            let called = self.extender.calls(uid).into_iter().next();
            if let (Some(nodes), false) = (&called, need_condition) {
                return Ok(Some((KubeDecision::Called(nodes.clone()), String::new())));
            }
            let pod = api.get(name).await?;
            if let Some(cond) = unschedulable_condition(&pod) {
                // The extender is called before the condition is written: look again.
                let decision = match self.extender.calls(uid).into_iter().next() {
                    Some(nodes) => KubeDecision::Called(nodes),
                    None => KubeDecision::NoneFeasible,
                };
                return Ok(Some((decision, cond)));
            }
            if let Some(st) = self.kube.exited() {
                bail!("kube-scheduler exited ({st}):\n{}", self.kube.log_tail());
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Loadstar's answer for the same pod sent whole (`pod_json`, as the API server returns
    /// it), which must equal the by-reference answer: the gRPC API speaks every constraint.
    async fn score_json(
        &mut self,
        ns: &str,
        name: &str,
        candidates: Vec<String>,
    ) -> Result<pb::ScoreResponse> {
        let pod = Api::<Pod>::namespaced(self.client.clone(), ns)
            .get(name)
            .await
            .context("reading the incoming pod back")?;
        let answer = self
            .scorer
            .score(pb::ScoreRequest {
                pod: Some(pb::score_request::Pod::PodJson(serde_json::to_string(
                    &pod,
                )?)),
                candidate_nodes: candidates,
                ..Default::default()
            })
            .await?;
        Ok(answer.into_inner())
    }

    /// Loadstar's answer, preemption included, for a pod sent whole before it exists.
    async fn score_preempt(
        &mut self,
        pod: &Value,
        candidates: Vec<String>,
    ) -> Result<pb::ScoreResponse> {
        let answer = self
            .scorer
            .score(pb::ScoreRequest {
                pod: Some(pb::score_request::Pod::PodJson(pod.to_string())),
                candidate_nodes: candidates,
                preempt: true,
                ..Default::default()
            })
            .await?;
        Ok(answer.into_inner())
    }

    /// kube-scheduler's first decision about a preemption scenario's incoming pod (which
    /// the extender lets through, see [`super::extender::ACCEPT`]): its feasible set, its
    /// condition, and what its preemption did — the `nominatedNodeName` (written with the
    /// Unschedulable condition, in one patch) and the scenario pods that are gone (deleted
    /// before that patch). A pod bound without a nomination had feasible nodes: the
    /// extender's first call.
    async fn kube_preemption(
        &mut self,
        sc: &Scenario,
        ns: &str,
        name: &str,
        uid: &str,
    ) -> Result<(BTreeSet<String>, String, Preempted)> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let deadline = Instant::now() + DECISION_TIMEOUT;
        let (feasible, message, node) = loop {
            let pod = api.get(name).await?;
            let status = pod.status.clone().unwrap_or_default();
            let nominated = status.nominated_node_name.clone().filter(|n| !n.is_empty());
            let condition = unschedulable_condition(&pod).unwrap_or_default();
            let first_call = self.extender.calls(uid).into_iter().next();
            if nominated.is_some() {
                break (BTreeSet::new(), condition, nominated);
            }
            if pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some()
            {
                let nodes = first_call.unwrap_or_default().into_iter().collect();
                break (nodes, "bound without preemption".to_string(), None);
            }
            if !condition.is_empty() {
                break (BTreeSet::new(), condition, None);
            }
            if let Some(st) = self.kube.exited() {
                bail!("kube-scheduler exited ({st}):\n{}", self.kube.log_tail());
            }
            if Instant::now() >= deadline {
                bail!(
                    "scenario {}: kube-scheduler did not decide about {ns}/{name} within \
                     {DECISION_TIMEOUT:?}; its log:\n{}",
                    sc.index,
                    self.kube.log_tail()
                );
            }
            tokio::time::sleep(POLL).await;
        };
        let mut present = BTreeSet::new();
        for ns in &sc.namespaces {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            for p in api.list(&ListParams::default()).await?.items {
                if p.metadata.deletion_timestamp.is_none() {
                    present.insert(format!("{ns}/{}", p.metadata.name.unwrap_or_default()));
                }
            }
        }
        let victims = sc
            .pods
            .iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    str_at(p, "/metadata/namespace"),
                    str_at(p, "/metadata/name")
                )
            })
            .filter(|k| !present.contains(k))
            .collect();
        Ok((feasible, message, Preempted { node, victims }))
    }

    async fn score(
        &mut self,
        ns: &str,
        name: &str,
        candidates: Vec<String>,
    ) -> Result<pb::ScoreResponse, tonic::Status> {
        self.scorer
            .score(pb::ScoreRequest {
                pod: Some(pb::score_request::Pod::Reference(pb::PodReference {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                })),
                candidate_nodes: candidates,
                ..Default::default()
            })
            .await
            .map(tonic::Response::into_inner)
    }

    /// Every node Loadstar lists: name → whether Kubernetes facts back it (`false`: an entry
    /// with neither a Node object nor an agent, e.g. a deleted node's ghost).
    pub async fn loadstar_nodes(&mut self) -> Result<BTreeMap<String, bool>, tonic::Status> {
        let mut out = BTreeMap::new();
        let mut token = String::new();
        loop {
            let page = self
                .scorer
                .list_nodes(pb::ListNodesRequest {
                    page_size: 5000,
                    page_token: token,
                })
                .await?
                .into_inner();
            for n in page.nodes {
                let backed = n.source != pb::NodeSource::Unspecified as i32;
                out.insert(n.node_name, backed);
            }
            if page.next_page_token.is_empty() {
                return Ok(out);
            }
            token = page.next_page_token;
        }
    }

    /// Waits until the Kubernetes-backed nodes Loadstar lists are exactly `all` and, scoring
    /// the probe over them, it ranks exactly `expected`. Returns what it last saw otherwise.
    async fn loadstar_sees(
        &mut self,
        probe: &str,
        expected: &BTreeSet<String>,
        all: &BTreeSet<String>,
        timeout: Duration,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let ns = self.probe_ns.clone();
            let listed = self.loadstar_nodes().await;
            let scored = self.score(&ns, probe, all.iter().cloned().collect()).await;
            let last = match (listed, scored) {
                (Ok(listed), Ok(r)) => {
                    let backed: BTreeSet<String> = listed
                        .into_iter()
                        .filter_map(|(n, backed)| backed.then_some(n))
                        .collect();
                    let ranked: BTreeSet<String> =
                        r.ranked.iter().map(|n| n.node_name.clone()).collect();
                    if &ranked == expected && &backed == all {
                        return Ok(());
                    }
                    format!(
                        "lists {backed:?}; ranks {ranked:?} for the probe ({})",
                        r.summary
                    )
                }
                (Err(s), _) => format!("ListNodes failed: {s}"),
                (_, Err(s)) => format!("Score failed: {s}"),
            };
            if Instant::now() >= deadline {
                return Err(last);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until `check` holds for Loadstar's view of `node` (`None`: not listed).
    async fn loadstar_node_until(
        &mut self,
        node: &str,
        what: &str,
        check: impl Fn(Option<&pb::NodeStatus>) -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status = match self
                .scorer
                .get_node(pb::GetNodeRequest {
                    node_name: node.to_string(),
                })
                .await
            {
                Ok(r) => Some(r.into_inner()),
                Err(s) if s.code() == tonic::Code::NotFound => None,
                Err(s) => bail!("GetNode {node}: {s}"),
            };
            if check(status.as_ref()) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("Loadstar never showed node {node} {what}; last: {status:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Plays [`Scenario::history`]: the node's previous incarnation with its pods, the node
    /// deleted once Loadstar counts the pods on it, the pods deleted once Loadstar has seen
    /// the node go.
    async fn play_history(&mut self, sc: &Scenario) -> Result<()> {
        let Some(first) = sc.history.first() else {
            return Ok(());
        };
        let node = str_at(first, "/spec/nodeName");
        let object = sc
            .nodes
            .iter()
            .find(|n| str_at(n, "/metadata/name") == node)
            .with_context(|| format!("history names unknown node {node}"))?;
        create_node(&self.client, object).await?;
        for p in &sc.history {
            create_pod(&self.client, p).await?;
        }
        let want = sc.history.len();
        self.loadstar_node_until(&node, "with the history pods' requests", |s| {
            s.is_some_and(|s| s.requested.contains_key("cpu"))
        })
        .await
        .with_context(|| format!("{want} history pod(s)"))?;
        let nodes: Api<Node> = Api::all(self.client.clone());
        nodes
            .delete(&node, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting node {node}"))?;
        self.loadstar_node_until(&node, "without its Node object", |s| {
            s.is_none_or(|s| s.source != pb::NodeSource::Kubernetes as i32)
        })
        .await?;
        for p in &sc.history {
            delete_pod(
                &self.client,
                &str_at(p, "/metadata/namespace"),
                &str_at(p, "/metadata/name"),
            )
            .await;
        }
        Ok(())
    }

    /// The barrier (module docs): probes until both schedulers show exactly the scenario.
    async fn barrier(&mut self, sc: &Scenario, tag: &str) -> Result<()> {
        let expected = sc.nodes_with_a_free_pod_slot();
        let all: BTreeSet<String> = sc.node_names().into_iter().collect();
        let deadline = Instant::now() + BARRIER_TIMEOUT;
        let mut last = String::new();
        for attempt in 1.. {
            if Instant::now() >= deadline {
                bail!(
                    "scenario {}: the schedulers' caches never showed exactly its nodes \
                     {expected:?} within {BARRIER_TIMEOUT:?}; last seen: {last}\n\
                     kube-scheduler log:\n{}",
                    sc.index,
                    self.kube.log_tail()
                );
            }
            let name = format!("probe-{tag}-{attempt}");
            let mut probe = json!({
                "metadata": {"name": name, "namespace": self.probe_ns},
                "spec": {
                    "schedulerName": SCHEDULER_NAME,
                    "terminationGracePeriodSeconds": 0,
                    "tolerations": probe_tolerations(),
                    "containers": [{"name": "c", "image": "registry.invalid/pause:3"}]
                }
            });
            if sc.has_storage() {
                let (_, claim) = storage::probe_storage_names(tag);
                probe["spec"]["volumes"] =
                    json!([{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]);
            }
            let created = create_pod(&self.client, &probe).await?;
            let uid = created.metadata.uid.clone().unwrap_or_default();
            let ns = self.probe_ns.clone();
            let left = deadline.saturating_duration_since(Instant::now());
            let loadstar = self.loadstar_sees(&name, &expected, &all, left).await;
            let kube = self
                .kube_decision(&ns, &name, &uid, PROBE_DECISION_TIMEOUT, false)
                .await;
            delete_pod(&self.client, &ns, &name).await;
            let kube_set: Option<BTreeSet<String>> = match kube? {
                Some((KubeDecision::Called(nodes), _)) => Some(nodes.into_iter().collect()),
                Some((KubeDecision::NoneFeasible, _)) => Some(BTreeSet::new()),
                None => None,
            };
            match (&loadstar, &kube_set) {
                (Ok(()), Some(k)) if k == &expected => return Ok(()),
                _ => last = format!("Loadstar: {loadstar:?}; kube-scheduler's probe: {kube_set:?}"),
            }
        }
        unreachable!("the attempt loop only ends by returning")
    }

    /// Creates the scenario, asks both schedulers, deletes it.
    pub async fn run(&mut self, sc: &Scenario, tag: &str) -> Result<Outcome> {
        let result = self.run_inner(sc, tag).await;
        self.clean_up(sc, tag).await;
        result
    }

    async fn run_inner(&mut self, sc: &Scenario, tag: &str) -> Result<Outcome> {
        for ns in &sc.namespaces {
            create_namespace(&self.client, ns).await?;
        }
        create_selectors(&self.client, sc).await?;
        storage::create_scenario_storage(&self.client, sc, &self.probe_ns, tag).await?;
        create_budgets(&self.client, sc).await?;
        self.play_history(sc).await?;
        let client = &self.client;
        let created: Vec<Result<()>> = futures::stream::iter(&sc.nodes)
            .map(|n| create_node(client, n))
            .buffer_unordered(8)
            .collect()
            .await;
        created.into_iter().collect::<Result<Vec<()>>>()?;
        for c in &sc.csinodes {
            storage::create_csinode(client, c).await?;
        }
        let created: Vec<Result<Pod>> = futures::stream::iter(&sc.pods)
            .map(|p| create_pod(client, p))
            .buffer_unordered(8)
            .collect()
            .await;
        created.into_iter().collect::<Result<Vec<Pod>>>()?;
        for p in &sc.pods {
            after_create_step(client, p).await?;
            set_start_time(client, p).await?;
        }

        self.barrier(sc, tag).await?;
        let synced = Instant::now();

        let ns = str_at(&sc.incoming, "/metadata/namespace");
        let name = str_at(&sc.incoming, "/metadata/name");
        let before = if sc.is_preemption() {
            if let Some(wait) = SNAPSHOT_AGE.checked_sub(synced.elapsed()) {
                tokio::time::sleep(wait).await;
            }
            let pod = admitted(&sc.incoming, &sc.priority_classes);
            Some(self.score_preempt(&pod, sc.node_names()).await)
        } else {
            None
        };
        let pod = create_pod(&self.client, &sc.incoming).await?;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if let Some(answer) = before {
            let (kube_feasible, kube_message, preempted) =
                self.kube_preemption(sc, &ns, &name, &uid).await?;
            let mut out = Outcome {
                kube_feasible,
                kube_message,
                kube_unstable: Vec::new(),
                loadstar_feasible: BTreeSet::new(),
                loadstar_filtered: Vec::new(),
                loadstar_summary: String::new(),
                loadstar_error: None,
                kube_preempted: Some(preempted),
                loadstar_preempted: Vec::new(),
                loadstar_preemption_note: String::new(),
            };
            // Loadstar was asked before the pod existed: kube-scheduler deletes the victims
            // at once, so by reference is no longer the same question afterwards.
            match answer {
                Ok(r) => out.read_preemption_answer(r),
                Err(e) => out.loadstar_error = Some(format!("Score by pod_json: {e:#}")),
            }
            return Ok(out);
        }
        let (decision, kube_message) = self
            .kube_decision(&ns, &name, &uid, DECISION_TIMEOUT, true)
            .await?
            .with_context(|| {
                format!(
                    "scenario {}: kube-scheduler did not decide about {ns}/{name} within \
                     {DECISION_TIMEOUT:?}; its log:\n{}",
                    sc.index,
                    self.kube.log_tail()
                )
            })?;
        if !kube_message.starts_with("Unschedulable:") {
            bail!(
                "scenario {}: kube-scheduler failed instead of filtering: {kube_message} \
                 (extender errors: {:?})",
                sc.index,
                self.extender.errors()
            );
        }
        let kube_feasible: BTreeSet<String> = match decision {
            KubeDecision::Called(nodes) => nodes.into_iter().collect(),
            KubeDecision::NoneFeasible => BTreeSet::new(),
        };
        if let Some(wait) = SNAPSHOT_AGE.checked_sub(synced.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let answer = self.score(&ns, &name, sc.node_names()).await;
        // Retries after the first decision (none expected: nothing changed meanwhile).
        let kube_unstable: Vec<Vec<String>> = self
            .extender
            .calls(&uid)
            .into_iter()
            .filter(|c| c.iter().cloned().collect::<BTreeSet<_>>() != kube_feasible)
            .collect();
        let mut out = Outcome {
            kube_feasible,
            kube_message,
            kube_unstable,
            loadstar_feasible: BTreeSet::new(),
            loadstar_filtered: Vec::new(),
            loadstar_summary: String::new(),
            loadstar_error: None,
            kube_preempted: None,
            loadstar_preempted: Vec::new(),
            loadstar_preemption_note: String::new(),
        };
        let by_json = self.score_json(&ns, &name, sc.node_names()).await;
        match answer {
            Ok(r) => {
                out.loadstar_feasible = r.ranked.iter().map(|n| n.node_name.clone()).collect();
                match by_json {
                    Ok(j) => {
                        let json_feasible: BTreeSet<String> =
                            j.ranked.iter().map(|n| n.node_name.clone()).collect();
                        if json_feasible != out.loadstar_feasible {
                            out.loadstar_error = Some(format!(
                                "Score by pod_json answered {json_feasible:?}, by reference {:?}",
                                out.loadstar_feasible
                            ));
                        }
                    }
                    Err(e) => out.loadstar_error = Some(format!("Score by pod_json: {e:#}")),
                }
                out.loadstar_filtered = r
                    .filtered
                    .iter()
                    .map(|f| (f.node_name.clone(), f.plugin.clone(), f.reason.clone()))
                    .collect();
                out.loadstar_summary = r.summary;
            }
            Err(s) => out.loadstar_error = Some(format!("{:?}: {}", s.code(), s.message())),
        }
        Ok(out)
    }

    /// Deletes the incoming pod first (so kube-scheduler does not retry it while the rest
    /// goes), then the other pods, the claims and volumes, the nodes and the namespaces.
    /// Best effort: a failure here shows up as the next scenario's barrier timing out,
    /// naming the leftovers.
    async fn clean_up(&mut self, sc: &Scenario, tag: &str) {
        let ns = str_at(&sc.incoming, "/metadata/namespace");
        let name = str_at(&sc.incoming, "/metadata/name");
        delete_pod(&self.client, &ns, &name).await;
        for ns in &sc.namespaces {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            let _ = api
                .delete_collection(&now_gone(), &ListParams::default())
                .await;
        }
        storage::delete_scenario_storage(&self.client, sc, &self.probe_ns, tag).await;
        let csinodes: Vec<String> = sc
            .csinodes
            .iter()
            .map(|c| str_at(c, "/metadata/name"))
            .collect();
        storage::delete_csinodes(&self.client, &csinodes).await;
        for o in &sc.selectors {
            let _ = dynamic_api(&self.client, o)
                .delete(&str_at(o, "/metadata/name"), &DeleteParams::default())
                .await;
        }
        for b in &sc.budgets {
            let api = budgets_api(&self.client, &str_at(b, "/metadata/namespace"));
            let _ = api
                .delete(&str_at(b, "/metadata/name"), &DeleteParams::default())
                .await;
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        let names = sc.node_names();
        futures::future::join_all(names.iter().map(|n| {
            let nodes = nodes.clone();
            async move {
                let _ = nodes.delete(n, &DeleteParams::default()).await;
            }
        }))
        .await;
        // Without a namespace controller they stay Terminating; nothing can be created in
        // them any more.
        let nss: Api<Namespace> = Api::all(self.client.clone());
        for ns in &sc.namespaces {
            let _ = nss.delete(ns, &DeleteParams::default()).await;
        }
    }
}

/// Creates the probes' namespace (once per run).
pub async fn probe_namespace(client: &Client, name: &str) -> Result<()> {
    create_namespace(client, name).await
}
