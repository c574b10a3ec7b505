//! The `loadstar.v1.Scorer` gRPC service: scores (with per-plugin breakdown and filter
//! reasons), node listings, a node-change watch, and the configured profiles.
use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures::{Stream, StreamExt};
use loadstar_common::text::{pod_key, quote, quote_list};
use loadstar_proto::pb;
use prost::Message;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tracing::{Instrument, debug, error, info_span};

use loadstar_framework::{Evaluation, Profile};
use loadstar_policy::profiles::Profiles;
use loadstar_store::cluster::{BudgetSource, PodDecoder, PodResolver};
use loadstar_store::decisions::{Decision, DecisionLog, Outcome, Recorded, Source};
use loadstar_store::metrics::Metrics;

use crate::gate::{Gate, Service, peer};
use crate::watch::{WatchHub, WatchLimits, WatchStats};
use crate::{NO_KUBERNETES, podspec, status};
use loadstar_auth::Authenticated;
use loadstar_auth::review::ResourceAttributes;
use loadstar_framework::preemption::PreemptionOutcome;
use loadstar_framework::snapshot::{ClusterSnapshot, PodInfo};
use loadstar_store::NodeStore;

/// The wire form of one ranked node: its total and each plugin's (name, score, weight).
fn node_score(
    node_name: String,
    total_score: f64,
    plugins: &[(&'static str, i64, i64)],
    stale: bool,
) -> pb::NodeScore {
    pb::NodeScore {
        node_name,
        total_score,
        plugins: plugins
            .iter()
            .map(|(name, score, weight)| pb::PluginScore {
                plugin: (*name).to_string(),
                score: *score,
                weight: *weight,
            })
            .collect(),
        stale,
    }
}

/// Builds the wire answer for an evaluation.
pub fn to_response(
    profile: &Profile,
    snap: &ClusterSnapshot,
    ev: &Evaluation,
) -> pb::ScoreResponse {
    pb::ScoreResponse {
        profile: profile.name.clone(),
        ranked: ev
            .ranked
            .iter()
            .map(|r| {
                node_score(
                    snap.nodes()[r.index].name.to_string(),
                    r.total,
                    &r.plugins,
                    r.stale,
                )
            })
            .collect(),
        filtered: ev
            .filtered
            .iter()
            .map(|f| pb::FilteredNode {
                node_name: snap.nodes()[f.index].name.to_string(),
                plugin: f.plugin.to_string(),
                reason: f.reason.to_string(),
            })
            .collect(),
        summary: ev.summary(),
        nodes_evaluated: ev.evaluated as u32,
        preemption: None,
    }
}

/// The wire form of a preemption outcome.
pub fn preemption_response(snap: &ClusterSnapshot, outcome: PreemptionOutcome) -> pb::Preemption {
    use pb::PreemptionOutcome as O;
    match outcome {
        PreemptionOutcome::Ineligible(reason) => pb::Preemption {
            outcome: O::Ineligible as i32,
            reason,
            ..Default::default()
        },
        PreemptionOutcome::NoCandidates { potential } => pb::Preemption {
            outcome: O::NoCandidates as i32,
            reason: if potential == 0 {
                "preemption cannot help: every node's rejection is unresolvable".to_string()
            } else {
                "evicting every lower-priority pod would not let the pod fit on any node"
                    .to_string()
            },
            potential_nodes: potential as u32,
            ..Default::default()
        },
        PreemptionOutcome::Proposal(p) => pb::Preemption {
            outcome: O::Proposed as i32,
            reason: String::new(),
            candidates: p
                .candidates
                .iter()
                .map(|c| pb::PreemptionCandidate {
                    node_name: snap.nodes()[c.index].name.to_string(),
                    victims: c
                        .victims
                        .iter()
                        .map(|v| pb::PreemptionVictim {
                            namespace: v.namespace.clone(),
                            name: v.name.clone(),
                            uid: v.uid.clone(),
                            priority: v.priority,
                        })
                        .collect(),
                    pdb_violations: c.pdb_violations as u32,
                    rank: c.rank as u32,
                })
                .collect(),
            potential_nodes: p.potential as u32,
            examined_nodes: p.examined as u32,
        },
    }
}

/// The Scorer service.
#[derive(Debug, Clone)]
pub struct ScorerService {
    store: Arc<NodeStore>,
    profiles: Arc<Profiles>,
    metrics: Arc<Metrics>,
    resolver: Option<Arc<dyn PodResolver>>,
    decoder: Option<Arc<dyn PodDecoder>>,
    budgets: Option<Arc<dyn BudgetSource>>,
    closing: CancellationToken,
    hub: Arc<WatchHub>,
    limits: QueryLimits,
    gate: Gate,
    decisions: Arc<DecisionLog>,
    evaluations: Arc<Semaphore>,
}

/// How many `Score` evaluations run at once on `cpus` CPUs: one per CPU but one, at least
/// one, so that `Score` callers never take every CPU from ingest and the scheduler.
fn evaluation_permits(cpus: usize) -> usize {
    cpus.saturating_sub(1).max(1)
}

/// Most decisions one `ListDecisions` call returns, and how many when the caller asks for 0.
const MAX_DECISIONS: usize = 1_000;
const DEFAULT_DECISIONS: usize = 50;

/// The wire form of a recorded decision.
pub fn decision_record(r: &Recorded) -> pb::DecisionRecord {
    let d = &r.decision;
    pb::DecisionRecord {
        pod: Some(pb::PodReference {
            namespace: d.namespace.clone(),
            name: d.name.clone(),
        }),
        uid: d.uid.clone(),
        source: d.source.as_str().to_string(),
        profile: d.profile.clone(),
        decided_at_unix_ms: d.decided_at_ms,
        attempt: d.attempt,
        outcome: r.outcome.kind().to_string(),
        node_name: r.outcome.node().unwrap_or_default().to_string(),
        error: r.outcome.error().unwrap_or_default().to_string(),
        summary: d.summary.clone(),
        nodes_evaluated: u32::try_from(d.evaluated).unwrap_or(u32::MAX),
        nodes_feasible: u32::try_from(d.feasible).unwrap_or(u32::MAX),
        ranked: d
            .ranked
            .iter()
            .map(|n| node_score(n.node.to_string(), n.total, &n.plugins, n.stale))
            .collect(),
        filtered: d
            .filtered
            .iter()
            .map(|g| pb::FilteredGroup {
                plugin: g.plugin.to_string(),
                reason: g.reason.clone(),
                node_names: g.nodes.iter().map(|n| n.to_string()).collect(),
                count: u32::try_from(g.count).unwrap_or(u32::MAX),
            })
            .collect(),
        seq: r.seq,
    }
}

/// Limits on the query calls; see [`QueryLimits::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryLimits {
    /// Most distinct `candidate_nodes` in one `Score` call (duplicates are dropped first).
    pub max_candidates: usize,
    /// `ListNodes` page size when the client asks for none.
    pub default_page_size: usize,
    /// Largest `ListNodes` page size a client may ask for.
    pub max_page_size: usize,
    /// A `ListNodes` page stops before its encoded size passes this, so every answer fits a
    /// default client's 4 MiB receive limit.
    pub max_page_bytes: usize,
    /// Watcher limits.
    pub watch: WatchLimits,
}

impl Default for QueryLimits {
    /// 20 000 candidates (kube-scheduler's tested maximum is 15 000 nodes), pages of 500
    /// nodes by default and 5 000 at most, 3 MiB per page.
    fn default() -> Self {
        QueryLimits {
            max_candidates: 20_000,
            default_page_size: 500,
            max_page_size: 5_000,
            max_page_bytes: 3 << 20,
            watch: WatchLimits::default(),
        }
    }
}

impl ScorerService {
    /// A service over `store` with `profiles`; `resolver` resolves pod references (None:
    /// references answer FAILED_PRECONDITION).
    pub fn new(
        store: Arc<NodeStore>,
        profiles: Arc<Profiles>,
        metrics: Arc<Metrics>,
        resolver: Option<Arc<dyn PodResolver>>,
    ) -> Self {
        Self::with_limits(store, profiles, metrics, resolver, QueryLimits::default())
    }

    /// Like [`ScorerService::new`], with explicit limits.
    pub fn with_limits(
        store: Arc<NodeStore>,
        profiles: Arc<Profiles>,
        metrics: Arc<Metrics>,
        resolver: Option<Arc<dyn PodResolver>>,
        limits: QueryLimits,
    ) -> Self {
        let hub = WatchHub::start(store.clone(), metrics.clone(), limits.watch);
        ScorerService {
            store,
            profiles,
            metrics,
            resolver,
            decoder: None,
            budgets: None,
            closing: CancellationToken::new(),
            hub,
            limits,
            gate: Gate::open(),
            decisions: Arc::new(DecisionLog::default()),
            evaluations: Arc::new(Semaphore::new(evaluation_permits(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            ))),
        }
    }

    /// Records `Score` calls in, and answers `ExplainPod`/`ListDecisions` from, `log` (the
    /// scheduler's, when there is one).
    pub fn with_decisions(mut self, log: Arc<DecisionLog>) -> Self {
        self.decisions = log;
        self
    }

    /// Checks callers at `gate` (queries need a caller when it says so; a pod by reference
    /// needs the caller's `get pods` on it).
    pub fn with_gate(mut self, gate: Gate) -> Self {
        self.gate = gate;
        self
    }

    /// The watch hub's accounting (watchers, queued bytes, drops).
    pub fn watch_stats(&self) -> WatchStats {
        self.hub.stats()
    }

    /// Reads PodDisruptionBudgets for preemption answers from `budgets` (without: none).
    pub fn with_budgets(mut self, budgets: Option<Arc<dyn BudgetSource>>) -> Self {
        self.budgets = budgets;
        self
    }

    /// Reads `pod_json` requests with `decoder` (without one they answer UNIMPLEMENTED).
    pub fn with_decoder(mut self, decoder: Option<Arc<dyn PodDecoder>>) -> Self {
        self.decoder = decoder;
        self
    }

    /// Ends server streams (`WatchNodes`) when `closing` is cancelled, so a graceful shutdown
    /// is not held open by watchers.
    pub fn with_closing(mut self, closing: CancellationToken) -> Self {
        self.closing = closing;
        self
    }

    /// Runs `f` (a `Score` evaluation) on Tokio's blocking pool, at most one per CPU but one
    /// at a time ([`evaluation_permits`]; the others wait their turn without holding a
    /// thread). An evaluation over a large cluster takes milliseconds of CPU (about 30 ms
    /// over 20 000 nodes here); on the port's runtime, one thread by default, it would hold
    /// every report and call behind it for that long, and under a flood of reports it would
    /// wait behind them in the runtime's queue. On its own thread the kernel shares the CPUs
    /// between the two. A panic in `f` answers INTERNAL instead of ending the connection.
    async fn off_thread<T: Send + 'static>(
        &self,
        f: impl FnOnce(&ScorerService) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        // The semaphore is never closed: an error here is a bug, answered as one.
        let permit = self
            .evaluations
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Status::internal("the evaluation pool is closed"))?;
        let this = self.clone();
        let span = tracing::Span::current();
        // The permit goes with the evaluation: one whose caller left still holds it until
        // it ends, so abandoned evaluations are bounded by the permits too.
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            span.in_scope(|| f(&this))
        })
        .await
        .map_err(|e| {
            if e.is_panic() {
                // The panic's text is for the log, not for the caller.
                error!(error = %e, "a Score evaluation panicked");
                Status::internal("the evaluation failed; the scorer's log says why")
            } else {
                Status::unavailable("the scorer is shutting down")
            }
        })?
    }

    async fn pod_of(
        &self,
        req: &pb::ScoreRequest,
        caller: Option<(&Authenticated, Option<std::net::SocketAddr>)>,
    ) -> Result<PodInfo, Status> {
        match &req.pod {
            Some(pb::score_request::Pod::Description(d)) => {
                podspec::from_description(d).map_err(|e| Status::invalid_argument(e.to_string()))
            }
            Some(pb::score_request::Pod::Reference(r)) => {
                if r.name.is_empty() {
                    return Err(Status::invalid_argument("reference.name is empty"));
                }
                let ns = if r.namespace.is_empty() {
                    "default"
                } else {
                    &r.namespace
                };
                if let Some((who, peer)) = caller {
                    // Scoring a pod by reference reads it: only for callers who may.
                    self.gate
                        .authorize(
                            Service::Query,
                            who,
                            &ResourceAttributes::get_pod(ns, &r.name),
                            peer,
                        )
                        .await?;
                }
                let resolver = self
                    .resolver
                    .as_ref()
                    .ok_or_else(|| Status::failed_precondition(NO_KUBERNETES))?;
                resolver
                    .resolve(ns, &r.name)
                    .await
                    .map_err(status::from_cluster)
            }
            Some(pb::score_request::Pod::PodJson(json)) => {
                let decoder = self.decoder.as_ref().ok_or_else(|| {
                    Status::unimplemented("this server was built without a Kubernetes pod reader")
                })?;
                let pod = decoder.decode(json).map_err(status::from_cluster)?;
                podspec::check_names(&pod.namespace, &pod.name)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
                Ok(pod)
            }
            None => Err(Status::invalid_argument(
                "set one of `description` (an inline pod), `reference` (a pod in the cluster) \
                 or `pod_json` (a whole core/v1 Pod)",
            )),
        }
    }

    /// Scores a pod: the core of `Score`, also used by the scheduler's `Bind`.
    pub fn score_pod(
        &self,
        pod: &PodInfo,
        profile_name: &str,
        candidates: &[String],
        limit: usize,
        preempt: bool,
    ) -> Result<pb::ScoreResponse, Status> {
        let profile = self
            .profiles
            .get(profile_name)
            .map_err(status::from_profile)?;
        let snap = self.store.snapshot();
        let indices: Option<Vec<usize>> = if candidates.is_empty() {
            None
        } else {
            let mut seen = HashSet::with_capacity(candidates.len().min(self.limits.max_candidates));
            let mut v = Vec::new();
            let mut unknown = Vec::new();
            for c in candidates {
                if !seen.insert(c.as_str()) {
                    continue;
                }
                if seen.len() > self.limits.max_candidates {
                    return Err(Status::invalid_argument(format!(
                        "candidate_nodes has more than {} distinct names, the limit",
                        self.limits.max_candidates
                    )));
                }
                match snap.index.get(c.as_str()) {
                    Some(&i) => v.push(i),
                    None => unknown.push(c.as_str()),
                }
            }
            if !unknown.is_empty() {
                return Err(Status::not_found(format!(
                    "unknown candidate node(s): {}",
                    quote_list(unknown)
                )));
            }
            Some(v)
        };
        let started = Instant::now();
        let mut rng = SmallRng::from_rng(&mut rand::rng());
        let ev = profile.evaluate(&snap, pod, indices.as_deref(), limit, &mut rng);
        self.metrics
            .score_duration
            .observe(started.elapsed().as_secs_f64());
        debug!(summary = %ev.summary(), "scored");
        let best = ev.best().map(|b| snap.nodes()[b.index].name.to_string());
        self.decisions.record(
            Decision::of(
                Source::Score,
                pod,
                &profile.name,
                0,
                &snap,
                &ev,
                self.decisions.limits(),
            ),
            Outcome::Scored { node: best },
        );
        let mut response = to_response(profile, &snap, &ev);
        if preempt && ev.feasible() == 0 {
            let budgets = self
                .budgets
                .as_ref()
                .map(|b| b.disruption_budgets())
                .unwrap_or_default();
            let outcome = profile.preempt(&snap, pod, &ev, &budgets, &mut rng);
            response.preemption = Some(preemption_response(&snap, outcome));
        }
        Ok(response)
    }
}

type NodeEventStream = Pin<Box<dyn Stream<Item = Result<pb::NodeEvent, Status>> + Send>>;

#[tonic::async_trait]
impl pb::scorer_server::Scorer for ScorerService {
    async fn score(
        &self,
        request: Request<pb::ScoreRequest>,
    ) -> Result<Response<pb::ScoreResponse>, Status> {
        let caller = self.gate.query(&request).await?;
        let peer = peer(&request);
        let req = request.into_inner();
        let span = info_span!("score", profile = %req.profile, pod = tracing::field::Empty);
        async move {
            let pod = self
                .pod_of(&req, caller.as_ref().map(|c| (c, peer)))
                .await?;
            tracing::Span::current().record("pod", format!("{}/{}", pod.namespace, pod.name));
            let limit = req.limit as usize;
            self.off_thread(move |s| {
                s.score_pod(&pod, &req.profile, &req.candidate_nodes, limit, req.preempt)
            })
            .await
            .map(Response::new)
        }
        .instrument(span)
        .await
    }

    async fn list_nodes(
        &self,
        request: Request<pb::ListNodesRequest>,
    ) -> Result<Response<pb::ListNodesResponse>, Status> {
        self.gate.query(&request).await?;
        let req = request.into_inner();
        let size = match req.page_size as usize {
            0 => self.limits.default_page_size,
            n => n.min(self.limits.max_page_size),
        };
        let names = self.store.node_names();
        let start = names.partition_point(|n| n.as_ref() <= req.page_token.as_str());
        let mut nodes = Vec::new();
        let mut bytes = 0usize;
        let mut next_page_token = String::new();
        for name in &names[start..] {
            let Some(node) = self.store.node_status(name) else {
                continue;
            };
            let len = node.encoded_len() + 8;
            if nodes.len() == size
                || (!nodes.is_empty() && bytes + len > self.limits.max_page_bytes)
            {
                next_page_token = nodes
                    .last()
                    .map(|n: &pb::NodeStatus| n.node_name.clone())
                    .unwrap_or_default();
                break;
            }
            bytes += len;
            nodes.push(node);
        }
        Ok(Response::new(pb::ListNodesResponse {
            nodes,
            next_page_token,
        }))
    }

    async fn get_node(
        &self,
        request: Request<pb::GetNodeRequest>,
    ) -> Result<Response<pb::NodeStatus>, Status> {
        self.gate.query(&request).await?;
        let name = request.into_inner().node_name;
        self.store
            .node_status(&name)
            .map(Response::new)
            .ok_or_else(|| {
                Status::not_found(format!("node {} is not known to this scorer", quote(&name)))
            })
    }

    type WatchNodesStream = NodeEventStream;

    async fn watch_nodes(
        &self,
        request: Request<pb::WatchNodesRequest>,
    ) -> Result<Response<Self::WatchNodesStream>, Status> {
        let caller = self.gate.query(&request).await?;
        // Authenticated: the user; open (or a review that named no user): the client's
        // address, its port aside.
        let who = match (&caller, peer(&request)) {
            (Some(a), _) if !a.identity.username.is_empty() => {
                format!("user {}", a.identity.username)
            }
            (_, Some(addr)) => format!("address {}", addr.ip()),
            (_, None) => "unknown".to_string(),
        };
        let stream = self.hub.watch(request.into_inner().node_names, &who)?;
        // Ends with the server's shutdown, so a graceful drain is not held open by watchers.
        let stream = stream.take_until(self.closing.clone().cancelled_owned());
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_profiles(
        &self,
        request: Request<pb::ListProfilesRequest>,
    ) -> Result<Response<pb::ListProfilesResponse>, Status> {
        self.gate.query(&request).await?;
        let profiles = self
            .profiles
            .iter()
            .map(|p| {
                let mut plugins: Vec<pb::ProfilePlugin> = p
                    .filters
                    .iter()
                    .map(|f| pb::ProfilePlugin {
                        name: f.name().to_string(),
                        kind: "filter".into(),
                        weight: 0,
                        args_yaml: String::new(),
                    })
                    .collect();
                plugins.extend(p.scores.iter().map(|(s, w)| pb::ProfilePlugin {
                    name: s.name().to_string(),
                    kind: "score".into(),
                    weight: *w,
                    args_yaml: s.args_yaml(),
                }));
                pb::Profile {
                    name: p.name.clone(),
                    plugins,
                    window_seconds: p.window_seconds,
                    stale_policy: p.stale_policy.name().to_string(),
                    percentage_of_nodes_to_score: p.sampling.percentage(),
                }
            })
            .collect();
        Ok(Response::new(pb::ListProfilesResponse { profiles }))
    }

    async fn explain_pod(
        &self,
        request: Request<pb::ExplainPodRequest>,
    ) -> Result<Response<pb::DecisionRecord>, Status> {
        let caller = self.gate.query(&request).await?;
        let peer = peer(&request);
        let Some(pod) = request.into_inner().pod.filter(|p| !p.name.is_empty()) else {
            return Err(Status::invalid_argument("pod.name is required"));
        };
        let ns = if pod.namespace.is_empty() {
            "default"
        } else {
            &pod.namespace
        };
        if let Some(who) = &caller {
            // A decision shows the pod's placement: only for callers who may read the pod.
            self.gate
                .authorize(
                    Service::Query,
                    who,
                    &ResourceAttributes::get_pod(ns, &pod.name),
                    peer,
                )
                .await?;
        }
        match self.decisions.get(ns, &pod.name) {
            Some(r) => Ok(Response::new(decision_record(&r))),
            None => Err(Status::not_found(format!(
                "pod {} was not scheduled or scored by Loadstar (or its record is older \
                 than the {} most recent pods kept)",
                pod_key(ns, &pod.name),
                self.decisions.limits().capacity
            ))),
        }
    }

    async fn list_decisions(
        &self,
        request: Request<pb::ListDecisionsRequest>,
    ) -> Result<Response<pb::ListDecisionsResponse>, Status> {
        let caller = self.gate.query(&request).await?;
        let peer = peer(&request);
        if let Some(who) = &caller {
            // Decisions name pods of every namespace: only for callers who may list them.
            self.gate
                .authorize(Service::Query, who, &ResourceAttributes::list_pods(), peer)
                .await?;
        }
        let req = request.into_inner();
        let limit = match req.limit as usize {
            0 => DEFAULT_DECISIONS,
            n => n.min(MAX_DECISIONS),
        };
        let decisions = self
            .decisions
            .latest(limit, req.after_seq)
            .iter()
            .map(decision_record)
            .collect();
        Ok(Response::new(pb::ListDecisionsResponse { decisions }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_policy::config::ScorerConfig;
    use loadstar_store::StoreConfig;

    fn service() -> ScorerService {
        let profiles = ScorerConfig::embedded_default()
            .build_profiles()
            .expect("embedded default builds");
        ScorerService::new(
            Arc::new(NodeStore::new(StoreConfig::default())),
            Arc::new(Profiles::new(profiles)),
            Metrics::new(),
            None,
        )
    }

    #[test]
    fn score_callers_leave_a_cpu_to_the_rest() {
        assert_eq!(
            [1, 2, 4, 16].map(evaluation_permits),
            [1, 1, 3, 15],
            "one per CPU but one, at least one"
        );
    }

    #[tokio::test]
    async fn an_evaluation_runs_off_the_runtime_and_a_panic_is_an_internal_error() {
        let s = service();
        let here = std::thread::current().id();
        let there = s
            .off_thread(|_| Ok(std::thread::current().id()))
            .await
            .expect("evaluated");
        assert_ne!(here, there, "on a blocking thread");
        let err = s
            .off_thread(|_| -> Result<(), Status> { panic!("secret detail") })
            .await
            .expect_err("a panic is an error");
        assert_eq!(err.code(), tonic::Code::Internal);
        assert!(!err.message().contains("secret"), "{}", err.message());
        // The permit came back: the next evaluation runs.
        assert!(s.off_thread(|_| Ok(())).await.is_ok());
    }
}
