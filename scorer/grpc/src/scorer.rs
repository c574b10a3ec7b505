//! The `loadstar.v1.Scorer` gRPC service: scores (with per-plugin breakdown and filter
//! reasons), node listings, a node-change watch, and the configured profiles.
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures::Stream;
use loadstar_proto::pb;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::{Instrument, debug, info_span};

use loadstar_framework::{Evaluation, Profile};
use loadstar_policy::profiles::Profiles;
use loadstar_store::cluster::PodResolver;
use loadstar_store::metrics::Metrics;

use crate::shutdown::closed;
use crate::{NO_KUBERNETES, podspec, status};
use loadstar_framework::snapshot::{ClusterSnapshot, PodInfo};
use loadstar_store::{ChangeKind, NodeStore};

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
            .map(|r| pb::NodeScore {
                node_name: snap.nodes[r.index].name.to_string(),
                total_score: r.total,
                plugins: r
                    .plugins
                    .iter()
                    .map(|(name, score, weight)| pb::PluginScore {
                        plugin: (*name).to_string(),
                        score: *score,
                        weight: *weight,
                    })
                    .collect(),
                stale: r.stale,
            })
            .collect(),
        filtered: ev
            .filtered
            .iter()
            .map(|f| pb::FilteredNode {
                node_name: snap.nodes[f.index].name.to_string(),
                plugin: f.plugin.to_string(),
                reason: f.reason.clone(),
            })
            .collect(),
        summary: ev.summary(),
        nodes_evaluated: ev.evaluated as u32,
    }
}

/// The Scorer service.
#[derive(Debug, Clone)]
pub struct ScorerService {
    store: Arc<NodeStore>,
    profiles: Arc<Profiles>,
    metrics: Arc<Metrics>,
    resolver: Option<Arc<dyn PodResolver>>,
    closing: Option<watch::Receiver<bool>>,
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
        ScorerService {
            store,
            profiles,
            metrics,
            resolver,
            closing: None,
        }
    }

    /// Ends server streams (`WatchNodes`) when `closing` turns true, so a graceful shutdown
    /// is not held open by watchers.
    pub fn with_closing(mut self, closing: watch::Receiver<bool>) -> Self {
        self.closing = Some(closing);
        self
    }

    async fn pod_of(&self, req: &pb::ScoreRequest) -> Result<PodInfo, Status> {
        match &req.pod {
            Some(pb::score_request::Pod::Description(d)) => {
                podspec::from_description(d).map_err(|e| Status::invalid_argument(e.to_string()))
            }
            Some(pb::score_request::Pod::Reference(r)) => {
                let resolver = self
                    .resolver
                    .as_ref()
                    .ok_or_else(|| Status::failed_precondition(NO_KUBERNETES))?;
                if r.name.is_empty() {
                    return Err(Status::invalid_argument("reference.name is empty"));
                }
                let ns = if r.namespace.is_empty() {
                    "default"
                } else {
                    &r.namespace
                };
                resolver
                    .resolve(ns, &r.name)
                    .await
                    .map_err(status::from_cluster)
            }
            None => Err(Status::invalid_argument(
                "set either `description` (an inline pod) or `reference` (a pod in the cluster)",
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
    ) -> Result<pb::ScoreResponse, Status> {
        let profile = self
            .profiles
            .get(profile_name)
            .map_err(status::from_profile)?;
        let snap = self.store.snapshot();
        let indices: Option<Vec<usize>> = if candidates.is_empty() {
            None
        } else {
            let mut v = Vec::with_capacity(candidates.len());
            let mut unknown = Vec::new();
            for c in candidates {
                match snap.index.get(c.as_str()) {
                    Some(&i) => v.push(i),
                    None => unknown.push(c.as_str()),
                }
            }
            if !unknown.is_empty() {
                return Err(Status::not_found(format!(
                    "unknown candidate node(s): {}",
                    unknown.join(", ")
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
        Ok(to_response(profile, &snap, &ev))
    }
}

type NodeEventStream = Pin<Box<dyn Stream<Item = Result<pb::NodeEvent, Status>> + Send>>;

#[tonic::async_trait]
impl pb::scorer_server::Scorer for ScorerService {
    async fn score(
        &self,
        request: Request<pb::ScoreRequest>,
    ) -> Result<Response<pb::ScoreResponse>, Status> {
        let req = request.into_inner();
        let span = info_span!("score", profile = %req.profile, pod = tracing::field::Empty);
        async move {
            let pod = self.pod_of(&req).await?;
            tracing::Span::current().record("pod", format!("{}/{}", pod.namespace, pod.name));
            self.score_pod(&pod, &req.profile, &req.candidate_nodes, req.limit as usize)
                .map(Response::new)
        }
        .instrument(span)
        .await
    }

    async fn list_nodes(
        &self,
        _request: Request<pb::ListNodesRequest>,
    ) -> Result<Response<pb::ListNodesResponse>, Status> {
        Ok(Response::new(pb::ListNodesResponse {
            nodes: self.store.list_status(),
        }))
    }

    async fn get_node(
        &self,
        request: Request<pb::GetNodeRequest>,
    ) -> Result<Response<pb::NodeStatus>, Status> {
        let name = request.into_inner().node_name;
        self.store
            .node_status(&name)
            .map(Response::new)
            .ok_or_else(|| Status::not_found(format!("node {name:?} is not known to this scorer")))
    }

    type WatchNodesStream = NodeEventStream;

    async fn watch_nodes(
        &self,
        request: Request<pb::WatchNodesRequest>,
    ) -> Result<Response<Self::WatchNodesStream>, Status> {
        let filter: Vec<String> = request.into_inner().node_names;
        let wanted = move |n: &str| filter.is_empty() || filter.iter().any(|f| f == n);
        let store = self.store.clone();
        let mut changes = store.subscribe();
        let (tx, rx) = mpsc::channel(256);
        let closing = self.closing.clone();
        let task = tokio::spawn(async move {
            let initial = |tx: mpsc::Sender<Result<pb::NodeEvent, Status>>| {
                let store = store.clone();
                let wanted = wanted.clone();
                async move {
                    for node in store.list_status() {
                        if wanted(&node.node_name) {
                            let ev = pb::NodeEvent {
                                kind: pb::node_event::Kind::Added as i32,
                                node: Some(node),
                            };
                            if tx.send(Ok(ev)).await.is_err() {
                                return false;
                            }
                        }
                    }
                    true
                }
            };
            if !initial(tx.clone()).await {
                return;
            }
            loop {
                match changes.recv().await {
                    Ok(change) => {
                        if !wanted(&change.node) {
                            continue;
                        }
                        let kind = match change.kind {
                            ChangeKind::Added => pb::node_event::Kind::Added,
                            ChangeKind::Updated => pb::node_event::Kind::Updated,
                            ChangeKind::Stale => pb::node_event::Kind::Stale,
                            ChangeKind::Removed => pb::node_event::Kind::Removed,
                        };
                        let node = store.node_status(&change.node).unwrap_or(pb::NodeStatus {
                            node_name: change.node.to_string(),
                            ..Default::default()
                        });
                        let ev = pb::NodeEvent {
                            kind: kind as i32,
                            node: Some(node),
                        };
                        if tx.send(Ok(ev)).await.is_err() {
                            return;
                        }
                    }
                    // The watcher fell behind: resend the whole state, as a reflector would
                    // relist.
                    Err(RecvError::Lagged(_)) => {
                        if !initial(tx.clone()).await {
                            return;
                        }
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        });
        tokio::spawn(async move {
            closed(closing).await;
            task.abort();
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn list_profiles(
        &self,
        _request: Request<pb::ListProfilesRequest>,
    ) -> Result<Response<pb::ListProfilesResponse>, Status> {
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
                }
            })
            .collect();
        Ok(Response::new(pb::ListProfilesResponse { profiles }))
    }
}
