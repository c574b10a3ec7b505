//! The simulation loop for one profile over one trace. Time advances in fixed steps; at each
//! step, in this order:
//!
//! 1. pods whose run time is over finish and release their requests and GPUs;
//! 2. every node's true utilisation is computed from its running pods' usage and sampled into
//!    its agent's windows; every report interval the agent's report replaces what the
//!    scorer sees (in-flight estimates of pods the report now measures, or older than their
//!    max age, are dropped — the store's semantics);
//! 3. pods that arrived join the queue (FIFO by arrival);
//! 4. each queued pod is evaluated with [`Profile::evaluate_sampled`] on the cluster snapshot,
//!    exactly as the scorer's scheduler would (with the profile's `percentageOfNodesToScore`),
//!    and bound to the best node: its requests are added to the node's
//!    allocation and an in-flight estimate ([`inflight::estimate`]) until the agent measures
//!    it — so a burst of pods in one step sees the earlier ones. A pod that fits nowhere
//!    stays pending and is retried when a pod finishes or after the retry interval.
//!
//! Everything is deterministic for a seed: the trace's usage is a pure function, the
//! tie-break RNG is seeded, nodes are in name order, and instants are a fixed base plus
//! simulated seconds.
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use loadstar_common::model::ResourceList;
use rand::SeedableRng;
use rand::rngs::StdRng;
use thiserror::Error;

use super::agent::{AgentError, NodeSample, SimAgent};
use super::cluster::{Cluster, GIB};
use super::measure::{Heatmap, NodeTruth, ProfileSummary, Recorder, RunSeries};
pub use super::settings::{PodOutcome, SimSettings};
use super::trace::{PodSpec, REFERENCE_GHZ, Trace, stable_hash};
use loadstar_framework::snapshot::{
    ClusterSnapshot, DEFAULT_NONZERO_CPU_MILLIS, DEFAULT_NONZERO_MEMORY_BYTES, GpuState, Inflight,
    MeasuredPod, NodeAllocation, NodeView, Owner, PodInfo, PodOnNode, retire_inflight,
};
use loadstar_framework::{Evaluation, Profile, REASON_SEPARATOR, SampleCursor};
use loadstar_policy::eviction;
use loadstar_policy::inflight;

/// Bytes in a MiB.
const MIB: f64 = 1024.0 * 1024.0;
/// How long a measured pod's in-flight usage fades: the store's default, the longest window.
const INFLIGHT_FADE: Duration = Duration::from_secs(900);
/// A node is stale after this many report intervals without a report (the store's default).
pub const STALE_INTERVALS: f64 = 3.0;

/// Errors of a simulation run.
#[derive(Debug, Error)]
pub enum EngineError {
    /// The settings are invalid.
    #[error("simulation settings: {0}")]
    Settings(String),
    /// A simulated agent failed.
    #[error(transparent)]
    Agent(#[from] AgentError),
}

/// One placement decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Decision {
    /// Step at which it was made.
    pub step: u64,
    /// Pod index in the trace.
    pub pod: usize,
    /// Node index.
    pub node: usize,
}

/// Everything one run produced.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The measures.
    pub summary: ProfileSummary,
    /// Time series for plots.
    pub series: RunSeries,
    /// Per-node CPU utilisation over time.
    pub heatmap: Heatmap,
    /// Every placement, in order.
    pub decisions: Vec<Decision>,
    /// Each pod's fate, by trace index.
    pub outcomes: Vec<PodOutcome>,
}

/// Called with the snapshot, pod and verdict of every scheduling attempt, before binding.
pub type Observer<'a> = Box<dyn FnMut(&ClusterSnapshot, &PodInfo, &Evaluation) + 'a>;

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Waiting,
    Queued { last_attempt: Option<(u64, u64)> },
    Running { node: usize, start_s: f64 },
    Finished { node: usize },
}

struct NodeState {
    agent: SimAgent,
    running: Vec<usize>,
    gpu_owner: Vec<Option<usize>>,
    last_report_s: f64,
    last_pressure_s: Option<f64>,
}

/// The scheduler's view of a pod: effective requests, limits, owner and labels.
pub fn pod_info(p: &PodSpec) -> PodInfo {
    let requests = ResourceList {
        cpu_millis: p.cpu_request_m,
        memory_bytes: p.memory_request_mib * (1 << 20),
        gpus: p.gpus,
        ..Default::default()
    };
    let limits = ResourceList {
        cpu_millis: p.cpu_limit_m,
        memory_bytes: p.memory_limit_mib * (1 << 20),
        gpus: p.gpus,
        ..Default::default()
    };
    let mut labels = BTreeMap::new();
    labels.insert("app".to_string(), p.owner.clone());
    labels.insert("loadstar.io/sim-class".to_string(), p.class.clone());
    PodInfo {
        uid: p.id.clone(),
        namespace: "default".into(),
        name: p.id.clone(),
        labels,
        owner: Some(Owner {
            kind: "ReplicaSet".into(),
            name: p.owner.clone(),
        }),
        nonzero_cpu_millis: if p.cpu_request_m == 0 {
            DEFAULT_NONZERO_CPU_MILLIS
        } else {
            p.cpu_request_m
        },
        nonzero_memory_bytes: if p.memory_request_mib == 0 {
            DEFAULT_NONZERO_MEMORY_BYTES
        } else {
            requests.memory_bytes
        },
        requests,
        limits,
        ..Default::default()
    }
}

/// A simulation of one profile over one trace, advanced step by step.
pub struct Simulation<'a> {
    profile: &'a Profile,
    cluster: Cluster,
    trace: Trace,
    settings: SimSettings,
    infos: Vec<PodInfo>,
    keys: Vec<u64>,
    states: Vec<State>,
    queue: Vec<usize>,
    next_arrival: usize,
    ends: BinaryHeap<Reverse<(u64, usize)>>,
    nodes: Vec<NodeState>,
    snapshot: ClusterSnapshot,
    rng: StdRng,
    /// Where the next cycle starts under the profile's `percentageOfNodesToScore`.
    cursor: SampleCursor,
    base: Instant,
    step: u64,
    steps: u64,
    report_every: u64,
    releases: u64,
    recorder: Recorder,
    decisions: Vec<Decision>,
    observer: Option<Observer<'a>>,
}

impl std::fmt::Debug for Simulation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation")
            .field("profile", &self.profile.name)
            .field("step", &self.step)
            .field("steps", &self.steps)
            .finish_non_exhaustive()
    }
}

impl<'a> Simulation<'a> {
    /// Prepares a run of `profile` over `trace` on `cluster`.
    pub fn new(
        profile: &'a Profile,
        cluster: &Cluster,
        trace: &Trace,
        settings: &SimSettings,
    ) -> Result<Simulation<'a>, EngineError> {
        let s = settings;
        if !(s.step_s.is_finite() && s.step_s > 0.0) {
            return Err(EngineError::Settings(format!(
                "step {}s must be positive",
                s.step_s
            )));
        }
        if !(s.hot_threshold.is_finite() && s.hot_threshold > 0.0) {
            return Err(EngineError::Settings(format!(
                "hot threshold {} must be positive",
                s.hot_threshold
            )));
        }
        let last_arrival = trace.pods.last().map_or(0.0, |p| p.arrival_s);
        let duration = s.duration_s.unwrap_or(last_arrival);
        if !(duration.is_finite() && duration >= 0.0) {
            return Err(EngineError::Settings(format!(
                "duration {duration}s must be ≥ 0"
            )));
        }
        let steps = (duration / s.step_s).ceil() as u64 + 1;
        let report_every = ((s.report_interval_s / s.step_s).round() as u64).max(1);
        let base = Instant::now();
        let mut nodes = Vec::with_capacity(cluster.len());
        let mut views = Vec::with_capacity(cluster.len());
        for spec in cluster.nodes.iter() {
            nodes.push(NodeState {
                agent: SimAgent::new(&spec.name, spec.capacity(), &s.window_seconds, s.step_s)?,
                running: Vec::new(),
                gpu_owner: vec![None; spec.gpus as usize],
                last_report_s: f64::NEG_INFINITY,
                last_pressure_s: None,
            });
            views.push(NodeView {
                name: Arc::from(spec.name.as_str()),
                agent: None,
                kube: Some(Arc::new(spec.kube_node())),
                alloc: Arc::new(NodeAllocation::default()),
                stale: true,
                report_age_seconds: None,
            });
        }
        let snapshot = ClusterSnapshot::new(views, 0);
        let recorder = Recorder::new(&profile.name, cluster, trace, s, steps);
        Ok(Simulation {
            profile,
            cluster: cluster.clone(),
            trace: trace.clone(),
            settings: s.clone(),
            infos: trace.pods.iter().map(pod_info).collect(),
            keys: trace.pods.iter().map(|p| stable_hash(&p.id)).collect(),
            states: vec![State::Waiting; trace.len()],
            queue: Vec::new(),
            next_arrival: 0,
            ends: BinaryHeap::new(),
            nodes,
            snapshot,
            rng: StdRng::seed_from_u64(s.seed),
            cursor: SampleCursor::default(),
            base,
            step: 0,
            steps,
            report_every,
            releases: 0,
            recorder,
            decisions: Vec::new(),
            observer: None,
        })
    }

    /// Calls `observer` with every scheduling attempt's snapshot, pod and verdict.
    pub fn set_observer(&mut self, observer: Observer<'a>) {
        self.observer = Some(observer);
    }

    /// Total number of steps.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Steps done so far.
    pub fn done(&self) -> u64 {
        self.step
    }

    /// The snapshot the scorer would see now.
    pub fn snapshot(&self) -> &ClusterSnapshot {
        &self.snapshot
    }

    fn now(&self) -> f64 {
        self.step as f64 * self.settings.step_s
    }

    fn instant(&self, t: f64) -> Instant {
        self.base + Duration::from_secs_f64(t.max(0.0))
    }

    /// Runs one step; returns false when the run is over.
    pub fn step(&mut self) -> Result<bool, EngineError> {
        if self.step >= self.steps {
            return Ok(false);
        }
        let t = self.now();
        self.finish_pods();
        self.sample_and_report(t)?;
        while let Some(p) = self.trace.pods.get(self.next_arrival) {
            if p.arrival_s > t {
                break;
            }
            self.states[self.next_arrival] = State::Queued { last_attempt: None };
            self.queue.push(self.next_arrival);
            self.next_arrival += 1;
        }
        self.schedule(t);
        self.record_queue();
        self.step += 1;
        Ok(self.step < self.steps)
    }

    /// Runs to the end, calling `progress` with the number of steps done every so often.
    pub fn run(mut self, progress: &(dyn Fn(u64) + Sync)) -> Result<RunResult, EngineError> {
        let mut reported = 0;
        while self.step()? {
            if self.step - reported >= 200 {
                progress(self.step - reported);
                reported = self.step;
            }
        }
        progress(self.step - reported);
        Ok(self.finish())
    }

    fn finish_pods(&mut self) {
        while let Some(&Reverse((end, j))) = self.ends.peek() {
            if end > self.step {
                break;
            }
            self.ends.pop();
            if let State::Running { node, .. } = self.states[j] {
                self.release(j, node);
                self.states[j] = State::Finished { node };
            }
        }
    }

    fn release(&mut self, j: usize, node: usize) {
        let info = &self.infos[j];
        let alloc = Arc::make_mut(&mut self.snapshot.nodes_mut()[node].alloc);
        alloc.requested.sub(&info.requests);
        alloc.requested.pods -= 1;
        alloc.nonzero_cpu_millis -= info.nonzero_cpu_millis;
        alloc.nonzero_memory_bytes -= info.nonzero_memory_bytes;
        alloc.remove_pod(&info.uid);
        alloc.inflight.retain(|e| e.uid != info.uid);
        let n = &mut self.nodes[node];
        n.running.retain(|&p| p != j);
        for g in &mut n.gpu_owner {
            if *g == Some(j) {
                *g = None;
            }
        }
        self.releases += 1;
        self.snapshot.generation += 1;
    }

    /// Usage of pod `j` at time `t` on a node of `ghz`, capped by its limits:
    /// (CPU millicores of that node, memory bytes, Mbit/s, MB/s, GPU utilisation).
    fn pod_usage(&self, j: usize, start_s: f64, t: f64, ghz: f64) -> (f64, f64, f64, f64, f64) {
        let p = &self.trace.pods[j];
        let u = p.usage.at(t - start_s, self.keys[j]);
        let mut cpu = u.cpu_m * REFERENCE_GHZ / ghz;
        if p.cpu_limit_m > 0 {
            cpu = cpu.min(p.cpu_limit_m as f64);
        }
        let mut mem = u.memory_mib * MIB;
        if p.memory_limit_mib > 0 {
            mem = mem.min(p.memory_limit_mib as f64 * MIB);
        }
        (cpu, mem, u.net_mbps, u.disk_mbps, u.gpu_util)
    }

    fn sample_and_report(&mut self, t: f64) -> Result<(), EngineError> {
        let report_now = self.step.is_multiple_of(self.report_every);
        let at = self.instant(t);
        let measure_delay = self.settings.measure_delay_s;
        let max_age = Duration::from_secs_f64(self.settings.inflight.max_age_seconds);
        let mut truths = Vec::with_capacity(self.nodes.len());
        for i in 0..self.nodes.len() {
            let spec = &self.cluster.nodes[i];
            let (mut cpu, mut mem, mut net, mut disk) = (0.0, 0.0, 0.0, 0.0);
            let mut gpu_util = vec![0.0f64; spec.gpus as usize];
            let mut measured = HashMap::new();
            for &j in &self.nodes[i].running {
                let State::Running { start_s, .. } = self.states[j] else {
                    continue;
                };
                let (c, m, n, d, g) = self.pod_usage(j, start_s, t, spec.cpu_ghz);
                cpu += c;
                mem += m;
                net += n;
                disk += d;
                for (k, owner) in self.nodes[i].gpu_owner.iter().enumerate() {
                    if *owner == Some(j) {
                        gpu_util[k] += g;
                    }
                }
                if report_now && t - start_s >= measure_delay {
                    measured.insert(
                        self.infos[j].uid.clone(),
                        MeasuredPod {
                            cpu_millis: c,
                            memory_bytes: m,
                        },
                    );
                }
            }
            let cpu_demand = cpu / spec.cpu_millis();
            let mem_demand = mem / spec.memory_bytes();
            let gpus_busy = self.nodes[i]
                .gpu_owner
                .iter()
                .filter(|g| g.is_some())
                .count();
            let sample = NodeSample {
                cpu: cpu_demand.min(1.0),
                memory: mem_demand.min(1.0),
                network: (net / spec.nic_mbps()).min(1.0),
                disk: (disk / spec.disk_mb_per_second).min(1.0),
                gpu: if spec.gpus > 0 {
                    gpu_util.iter().map(|u| u.min(1.0)).sum::<f64>() / f64::from(spec.gpus)
                } else {
                    0.0
                },
                gpu_memory: if spec.gpus > 0 {
                    0.8 * gpus_busy as f64 / f64::from(spec.gpus)
                } else {
                    0.0
                },
            };
            self.nodes[i].agent.sample(&sample)?;
            truths.push(NodeTruth {
                sample,
                cpu_demand,
                memory_demand: mem_demand,
            });
            if report_now {
                let gpus: Vec<GpuState> = (0..spec.gpus as usize)
                    .map(|k| {
                        let running = self.nodes[i].gpu_owner[k].is_some_and(|j| {
                            matches!(self.states[j], State::Running { start_s, .. } if t - start_s >= measure_delay)
                        });
                        let total = (spec.gpu_memory_gib * GIB) as u64;
                        GpuState {
                            index: k as u32,
                            utilization: gpu_util[k].min(1.0),
                            memory_used_bytes: if running { (0.8 * total as f64) as u64 } else { 0 },
                            memory_total_bytes: total,
                            process_count: u32::from(running),
                            healthy: true,
                        }
                    })
                    .collect();
                let mut report =
                    self.nodes[i]
                        .agent
                        .report(mem.min(spec.memory_bytes()), measured, gpus, at);
                let th = &self.settings.eviction;
                if eviction::under_pressure(&report, th).is_some() {
                    self.nodes[i].last_pressure_s = Some(t);
                }
                // EvictionPressure compares `last_pressure_at` with the wall clock
                // (`Instant::elapsed`), so simulated time cannot be expressed as an instant
                // there: a pressure within the transition period (in simulated time) is
                // reported as "just now", an older one as none. The filter's verdict is the
                // same as in a cluster, and deterministic.
                report.last_pressure_at = self.nodes[i].last_pressure_s.and_then(|p| {
                    (t - p < th.pressure_transition_period.as_secs_f64()).then(Instant::now)
                });
                let view = &mut self.snapshot.nodes_mut()[i];
                // The store's own rule: measured pods fade their estimates over the window.
                retire_inflight(&mut view.alloc, &report.pods, at, max_age, INFLIGHT_FADE);
                view.agent = Some(Arc::new(report));
                self.nodes[i].last_report_s = t;
                self.snapshot.generation += 1;
            }
            let age = t - self.nodes[i].last_report_s;
            let view = &mut self.snapshot.nodes_mut()[i];
            view.report_age_seconds = age.is_finite().then_some(age);
            view.stale = !(age.is_finite()
                && age <= STALE_INTERVALS * self.report_every as f64 * self.settings.step_s);
        }
        self.recorder.record_nodes(self.step, &truths);
        Ok(())
    }

    fn schedule(&mut self, t: f64) {
        let retry_steps =
            ((self.settings.retry_interval_s / self.settings.step_s).ceil() as u64).max(1);
        let queue = std::mem::take(&mut self.queue);
        let mut still = Vec::with_capacity(queue.len());
        for j in queue {
            let State::Queued { last_attempt } = self.states[j] else {
                continue;
            };
            if let Some((step, releases)) = last_attempt
                && releases == self.releases
                && self.step < step + retry_steps
            {
                still.push(j);
                continue;
            }
            // As the scheduler runs a cycle: with the profile's percentageOfNodesToScore.
            let eval = self.profile.evaluate_sampled(
                &self.snapshot,
                &self.infos[j],
                None,
                1,
                &mut self.rng,
                &mut self.cursor,
            );
            if let Some(obs) = &mut self.observer {
                obs(&self.snapshot, &self.infos[j], &eval);
            }
            match eval.best() {
                Some(best) => {
                    let node = best.index;
                    self.bind(j, node, t);
                }
                None => {
                    let mut reasons: BTreeMap<&str, u64> = BTreeMap::new();
                    for f in &eval.filtered {
                        for r in f.reason.split(REASON_SEPARATOR) {
                            *reasons.entry(r).or_default() += 1;
                        }
                    }
                    self.recorder.record_failure(j, &reasons, eval.summary());
                    self.states[j] = State::Queued {
                        last_attempt: Some((self.step, self.releases)),
                    };
                    still.push(j);
                }
            }
        }
        self.queue = still;
    }

    fn bind(&mut self, j: usize, node: usize, t: f64) {
        let info = &self.infos[j];
        let (cpu, mem) = inflight::estimate(info, &self.settings.inflight);
        let added_at = self.instant(t);
        let alloc = Arc::make_mut(&mut self.snapshot.nodes_mut()[node].alloc);
        alloc.requested.add(&info.requests);
        alloc.requested.pods += 1;
        alloc.nonzero_cpu_millis += info.nonzero_cpu_millis;
        alloc.nonzero_memory_bytes += info.nonzero_memory_bytes;
        alloc.put_pod(PodOnNode::of(info));
        alloc
            .inflight
            .push(Inflight::new(info.uid.clone(), cpu, mem, added_at));
        self.snapshot.generation += 1;
        let n = &mut self.nodes[node];
        n.running.push(j);
        let mut want = self.trace.pods[j].gpus;
        for g in &mut n.gpu_owner {
            if want <= 0 {
                break;
            }
            if g.is_none() {
                *g = Some(j);
                want -= 1;
            }
        }
        self.states[j] = State::Running { node, start_s: t };
        let d = self.trace.pods[j].duration_s;
        if d > 0.0 {
            let end = ((t + d) / self.settings.step_s).ceil() as u64;
            self.ends.push(Reverse((end.max(self.step + 1), j)));
        }
        let arrival = self.trace.pods[j].arrival_s;
        self.recorder.record_placement(j, node, t - arrival);
        self.decisions.push(Decision {
            step: self.step,
            pod: j,
            node,
        });
    }

    fn record_queue(&mut self) {
        let free: Vec<i64> = self
            .cluster
            .nodes
            .iter()
            .zip(self.snapshot.nodes())
            .map(|(s, v)| (i64::from(s.gpus) - v.alloc.requested.gpus).max(0))
            .collect();
        let pending_gpus: Vec<i64> = self
            .queue
            .iter()
            .map(|&j| self.trace.pods[j].gpus)
            .filter(|&g| g > 0)
            .collect();
        self.recorder
            .record_queue(self.step, self.queue.len(), &pending_gpus, &free);
    }

    /// Ends the run and returns its results.
    pub fn finish(self) -> RunResult {
        let outcomes: Vec<PodOutcome> = self
            .states
            .iter()
            .map(|s| match *s {
                State::Waiting => PodOutcome::NotArrived,
                State::Queued { .. } => PodOutcome::Pending,
                State::Running { node, .. } => PodOutcome::Running { node },
                State::Finished { node } => PodOutcome::Finished { node },
            })
            .collect();
        let (summary, series, heatmap) = self.recorder.finish(&outcomes);
        RunResult {
            summary,
            series,
            heatmap,
            decisions: self.decisions,
            outcomes,
        }
    }
}

/// Runs `profile` over `trace` on `cluster` to the end.
pub fn simulate(
    profile: &Profile,
    cluster: &Cluster,
    trace: &Trace,
    settings: &SimSettings,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<RunResult, EngineError> {
    Simulation::new(profile, cluster, trace, settings)?.run(progress)
}
