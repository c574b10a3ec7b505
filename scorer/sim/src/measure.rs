//! The measures of one run, accumulated step by step from the nodes' *true* utilisation (not
//! the lagged windows the scorer sees):
//!
//! - per resource (CPU, memory, network, disk, GPU on GPU nodes): the stddev of node
//!   utilisation across nodes at each step, its mean and max over time; the mean and max
//!   utilisation; hot-node-minutes (node-steps above the hot threshold × step);
//! - overload-node-minutes: CPU or memory *demand* above capacity (CPU throttled, memory
//!   over-committed — in a cluster, OOM kills and evictions);
//! - the seed paper's balance efficiency per node, H(i) = (L(i)/L̄)/(S(i)/S̄), where L(i) is
//!   the node's time-mean absolute load and S(i) its capacity; per resource, and combined
//!   with each resource's terms normalised by the cluster-mean capacity of that resource
//!   (L(i) = Σ_r L_r(i)/S̄_r, S(i) = Σ_r S_r(i)/S̄_r). H = 1 everywhere is perfect balance
//!   (load proportional to capacity);
//! - pods: placed, finished, running, pending at the end and why (the filter summary), wait
//!   times; placements per node;
//! - GPUs: pending GPU pods, *fragmented* pending pods (enough free GPUs in the cluster, but
//!   not on one node) and *stranded* GPUs (free GPUs on nodes that have fewer free GPUs than
//!   the smallest pending GPU pod needs, counted while a GPU pod is pending).
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::agent::NodeSample;
use super::cluster::Cluster;
use super::settings::{PodOutcome, SimSettings};
use super::trace::Trace;

/// Resources measured, in table order.
pub const RESOURCES: [&str; 5] = ["cpu", "memory", "network", "disk", "gpu"];
/// Points kept per time series for plots.
pub const SERIES_POINTS: usize = 1000;
/// Pending-reason entries kept in a summary.
pub const TOP_REASONS: usize = 8;

/// A node's true state at one step.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NodeTruth {
    /// Utilisation ratios (capped at 1).
    pub sample: NodeSample,
    /// CPU demand over capacity (may exceed 1).
    pub cpu_demand: f64,
    /// Memory demand over capacity (may exceed 1).
    pub memory_demand: f64,
}

fn ratios(s: &NodeSample) -> [f64; 5] {
    [s.cpu, s.memory, s.network, s.disk, s.gpu]
}

/// Statistics of one resource over the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResourceStats {
    /// Resource name.
    pub resource: &'static str,
    /// Mean over time of the stddev of node utilisation (ratio).
    pub std_mean: f64,
    /// Max over time of that stddev.
    pub std_max: f64,
    /// Mean utilisation over nodes and time.
    pub util_mean: f64,
    /// Highest utilisation of any node at any step.
    pub util_max: f64,
    /// Node-minutes above the hot threshold.
    pub hot_node_minutes: f64,
}

/// One node's measures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeStats {
    /// Node name.
    pub name: String,
    /// Size class.
    pub class: String,
    /// Pods placed on it.
    pub placements: u64,
    /// Mean utilisation per resource ([`RESOURCES`] order).
    pub util_mean: [f64; 5],
    /// Max CPU utilisation.
    pub cpu_max: f64,
    /// Minutes with CPU above the hot threshold.
    pub hot_cpu_minutes: f64,
    /// Balance efficiency, combined over CPU, memory, network and disk (null: no load).
    pub h: Option<f64>,
    /// Balance efficiency per resource (CPU, memory, network, disk).
    pub h_per_resource: [Option<f64>; 4],
}

/// GPU measures (clusters with GPUs).
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct GpuStats {
    /// GPUs in the cluster.
    pub gpus: i64,
    /// Pods requesting GPUs in the trace that arrived.
    pub gpu_pods: u64,
    /// Of them placed.
    pub gpu_pods_placed: u64,
    /// Of them pending at the end.
    pub gpu_pods_pending_at_end: u64,
    /// Most GPU pods pending at once.
    pub gpu_pods_pending_max: u64,
    /// Pod-minutes GPU pods spent pending.
    pub gpu_pending_pod_minutes: f64,
    /// Pod-minutes GPU pods were pending while enough GPUs were free in the cluster, but not
    /// on one node (fragmentation).
    pub fragmented_pod_minutes: f64,
    /// Most fragmented pending GPU pods at once.
    pub fragmented_pods_max: u64,
    /// Mean stranded GPUs over time.
    pub stranded_gpus_mean: f64,
    /// Most stranded GPUs at once.
    pub stranded_gpus_max: i64,
    /// Mean fraction of GPUs allocated.
    pub allocated_mean: f64,
    /// Mean wait of placed GPU pods, seconds.
    pub wait_mean_s: f64,
}

/// Everything measured in one run of one profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfileSummary {
    /// Profile name.
    pub profile: String,
    /// Nodes.
    pub nodes: usize,
    /// Pods in the trace.
    pub pods: usize,
    /// Simulated seconds.
    pub duration_s: f64,
    /// Step, seconds.
    pub step_s: f64,
    /// Hot threshold used.
    pub hot_threshold: f64,
    /// Per resource.
    pub resources: Vec<ResourceStats>,
    /// Node-minutes with any of CPU, memory, network or disk above the hot threshold.
    pub hot_node_minutes_any: f64,
    /// Node-minutes with CPU or memory demand above capacity.
    pub overload_node_minutes: f64,
    /// Pods placed (running or finished).
    pub pods_placed: u64,
    /// Pods finished.
    pub pods_finished: u64,
    /// Pods running at the end.
    pub pods_running: u64,
    /// Pods pending at the end.
    pub pods_pending: u64,
    /// Pods that had not arrived at the end.
    pub pods_not_arrived: u64,
    /// Mean wait of placed pods, seconds.
    pub wait_mean_s: f64,
    /// p95 wait of placed pods, seconds.
    pub wait_p95_s: f64,
    /// Pod-minutes spent pending (placed and still pending pods).
    pub pending_pod_minutes: f64,
    /// Scheduling attempts that found no feasible node.
    pub failed_attempts: u64,
    /// Node rejections by reason over all failed attempts, most frequent first.
    pub pending_reasons: Vec<(String, u64)>,
    /// Last filter summary of each pod pending at the end (by count, most frequent first).
    pub pending_at_end: Vec<(String, u64)>,
    /// Max over nodes of |H(i) − 1| (combined H; 0 is perfect).
    pub h_max_deviation: f64,
    /// Stddev of the combined H(i) over nodes.
    pub h_std: f64,
    /// GPU measures (None without GPUs).
    pub gpu: Option<GpuStats>,
    /// Per node.
    pub per_node: Vec<NodeStats>,
}

impl ProfileSummary {
    /// The stats of `resource`.
    pub fn resource(&self, resource: &str) -> Option<&ResourceStats> {
        self.resources.iter().find(|r| r.resource == resource)
    }
}

/// Time series of a run for plots, down-sampled to at most [`SERIES_POINTS`].
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct RunSeries {
    /// Time, seconds.
    pub t: Vec<f64>,
    /// Stddev of node utilisation per resource ([`RESOURCES`] order).
    pub std: [Vec<f64>; 5],
    /// Mean node utilisation per resource.
    pub mean: [Vec<f64>; 5],
    /// Hottest node's CPU utilisation.
    pub cpu_max: Vec<f64>,
    /// Pods pending.
    pub pending: Vec<f64>,
    /// GPU pods pending.
    pub gpu_pending: Vec<f64>,
    /// Fragmented pending GPU pods.
    pub fragmented: Vec<f64>,
    /// Stranded GPUs.
    pub stranded: Vec<f64>,
}

/// Per-node CPU utilisation over time: `values[node * columns + column]`, each the mean over
/// a time bucket.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Heatmap {
    /// Node names (rows).
    pub nodes: Vec<String>,
    /// Time buckets (columns).
    pub columns: usize,
    /// Simulated seconds covered.
    pub duration_s: f64,
    /// Values, row-major.
    pub values: Vec<f32>,
}

#[derive(Debug, Clone, Copy, Default)]
struct StepPoint {
    std: [f64; 5],
    mean: [f64; 5],
    cpu_max: f64,
    pending: u64,
    gpu_pending: u64,
    fragmented: u64,
    stranded: i64,
}

/// Accumulates the measures of a run.
#[derive(Debug)]
pub struct Recorder {
    profile: String,
    names: Vec<String>,
    classes: Vec<String>,
    caps: Vec<[f64; 4]>,
    gpu_node: Vec<bool>,
    total_gpus: i64,
    pod_gpus: Vec<i64>,
    step_s: f64,
    hot: f64,
    heat_columns: usize,
    steps_expected: u64,
    steps: u64,
    std_sum: [f64; 5],
    std_max: [f64; 5],
    mean_sum: [f64; 5],
    util_max: [f64; 5],
    hot_steps: [u64; 5],
    hot_any_steps: u64,
    overload_steps: u64,
    node_util_sum: Vec<[f64; 5]>,
    node_cpu_max: Vec<f64>,
    node_hot_steps: Vec<u64>,
    placements: Vec<u64>,
    waits: Vec<(usize, f64)>,
    failed_attempts: u64,
    reasons: BTreeMap<String, u64>,
    last_summary: HashMap<usize, String>,
    pending_steps: u64,
    gpu_pending_steps: u64,
    gpu_pending_max: u64,
    fragmented_steps: u64,
    fragmented_max: u64,
    stranded_sum: f64,
    stranded_max: i64,
    allocated_sum: f64,
    points: Vec<StepPoint>,
    heat: Vec<Vec<f32>>,
}

impl Recorder {
    /// A recorder for a run of `profile` over `trace` on `cluster` lasting `steps` steps.
    pub fn new(
        profile: &str,
        cluster: &Cluster,
        trace: &Trace,
        settings: &SimSettings,
        steps: u64,
    ) -> Recorder {
        let n = cluster.len();
        Recorder {
            profile: profile.to_string(),
            names: cluster.nodes.iter().map(|s| s.name.clone()).collect(),
            classes: cluster.nodes.iter().map(|s| s.class.clone()).collect(),
            caps: cluster
                .nodes
                .iter()
                .map(|s| {
                    [
                        f64::from(s.cpus) * s.cpu_ghz,
                        s.memory_gib,
                        s.nic_gbps,
                        s.disk_mb_per_second,
                    ]
                })
                .collect(),
            gpu_node: cluster.nodes.iter().map(|s| s.gpus > 0).collect(),
            total_gpus: cluster.nodes.iter().map(|s| i64::from(s.gpus)).sum(),
            pod_gpus: trace.pods.iter().map(|p| p.gpus).collect(),
            step_s: settings.step_s,
            hot: settings.hot_threshold,
            heat_columns: settings.heatmap_columns.max(1),
            steps_expected: steps,
            steps: 0,
            std_sum: [0.0; 5],
            std_max: [0.0; 5],
            mean_sum: [0.0; 5],
            util_max: [0.0; 5],
            hot_steps: [0; 5],
            hot_any_steps: 0,
            overload_steps: 0,
            node_util_sum: vec![[0.0; 5]; n],
            node_cpu_max: vec![0.0; n],
            node_hot_steps: vec![0; n],
            placements: vec![0; n],
            waits: Vec::new(),
            failed_attempts: 0,
            reasons: BTreeMap::new(),
            last_summary: HashMap::new(),
            pending_steps: 0,
            gpu_pending_steps: 0,
            gpu_pending_max: 0,
            fragmented_steps: 0,
            fragmented_max: 0,
            stranded_sum: 0.0,
            stranded_max: 0,
            allocated_sum: 0.0,
            points: Vec::with_capacity(steps as usize),
            heat: vec![Vec::with_capacity(steps as usize); n],
        }
    }

    /// Records every node's true state at one step.
    pub fn record_nodes(&mut self, _step: u64, truths: &[NodeTruth]) {
        let mut point = StepPoint::default();
        for r in 0..5 {
            // GPU statistics cover GPU nodes only.
            let vals = truths
                .iter()
                .zip(&self.gpu_node)
                .filter(|(_, g)| r < 4 || **g)
                .map(|(t, _)| ratios(&t.sample)[r]);
            let (mut n, mut sum, mut sq) = (0.0, 0.0, 0.0);
            for v in vals {
                n += 1.0;
                sum += v;
                sq += v * v;
            }
            if n == 0.0 {
                continue;
            }
            let mean = sum / n;
            let std = (sq / n - mean * mean).max(0.0).sqrt();
            point.std[r] = std;
            point.mean[r] = mean;
            self.std_sum[r] += std;
            self.std_max[r] = self.std_max[r].max(std);
            self.mean_sum[r] += mean;
        }
        for (i, t) in truths.iter().enumerate() {
            let u = ratios(&t.sample);
            let mut any = false;
            // r indexes five parallel per-resource tables.
            #[allow(clippy::needless_range_loop)]
            for r in 0..5 {
                if r == 4 && !self.gpu_node[i] {
                    continue;
                }
                self.util_max[r] = self.util_max[r].max(u[r]);
                self.node_util_sum[i][r] += u[r];
                if u[r] > self.hot {
                    self.hot_steps[r] += 1;
                    any |= r < 4;
                }
            }
            if any {
                self.hot_any_steps += 1;
            }
            if u[0] > self.hot {
                self.node_hot_steps[i] += 1;
            }
            self.node_cpu_max[i] = self.node_cpu_max[i].max(u[0]);
            point.cpu_max = point.cpu_max.max(u[0]);
            if t.cpu_demand > 1.0 || t.memory_demand > 1.0 {
                self.overload_steps += 1;
            }
            self.heat[i].push(u[0] as f32);
        }
        self.points.push(point);
        self.steps += 1;
    }

    /// Records the queue after scheduling: pods pending, GPU requests of the pending GPU
    /// pods, and free GPUs per node (by requests).
    pub fn record_queue(&mut self, _step: u64, pending: usize, pending_gpus: &[i64], free: &[i64]) {
        let total_free: i64 = free.iter().sum();
        let max_free = free.iter().copied().max().unwrap_or(0);
        let fragmented = pending_gpus
            .iter()
            .filter(|&&g| g <= total_free && g > max_free)
            .count() as u64;
        let stranded = match pending_gpus.iter().min() {
            Some(&smallest) => free.iter().filter(|&&f| f < smallest).sum(),
            None => 0,
        };
        self.pending_steps += pending as u64;
        self.gpu_pending_steps += pending_gpus.len() as u64;
        self.gpu_pending_max = self.gpu_pending_max.max(pending_gpus.len() as u64);
        self.fragmented_steps += fragmented;
        self.fragmented_max = self.fragmented_max.max(fragmented);
        self.stranded_sum += stranded as f64;
        self.stranded_max = self.stranded_max.max(stranded);
        if self.total_gpus > 0 {
            self.allocated_sum += 1.0 - total_free as f64 / self.total_gpus as f64;
        }
        if let Some(p) = self.points.last_mut() {
            p.pending = pending as u64;
            p.gpu_pending = pending_gpus.len() as u64;
            p.fragmented = fragmented;
            p.stranded = stranded;
        }
    }

    /// Records a placement of pod `pod` on `node` after waiting `wait_s`.
    pub fn record_placement(&mut self, pod: usize, node: usize, wait_s: f64) {
        self.placements[node] += 1;
        self.waits.push((pod, wait_s));
        self.last_summary.remove(&pod);
    }

    /// Records a failed attempt: node rejections by reason and the filter summary.
    pub fn record_failure(&mut self, pod: usize, reasons: &BTreeMap<&str, u64>, summary: String) {
        self.failed_attempts += 1;
        for (r, c) in reasons {
            *self.reasons.entry((*r).to_string()).or_default() += c;
        }
        self.last_summary.insert(pod, summary);
    }

    /// The measures, the plot series and the heatmap.
    pub fn finish(self, outcomes: &[PodOutcome]) -> (ProfileSummary, RunSeries, Heatmap) {
        let steps = self.steps.max(1) as f64;
        let minutes = self.step_s / 60.0;
        let has_gpu = self.total_gpus > 0;
        let resources = (0..5)
            .filter(|&r| r < 4 || has_gpu)
            .map(|r| ResourceStats {
                resource: RESOURCES[r],
                std_mean: self.std_sum[r] / steps,
                std_max: self.std_max[r],
                util_mean: self.mean_sum[r] / steps,
                util_max: self.util_max[r],
                hot_node_minutes: self.hot_steps[r] as f64 * minutes,
            })
            .collect();
        // Balance efficiency from time-mean absolute loads.
        let n = self.names.len();
        let mean_util: Vec<[f64; 5]> = self
            .node_util_sum
            .iter()
            .map(|u| u.map(|x| x / steps))
            .collect();
        let load: Vec<[f64; 4]> = mean_util
            .iter()
            .zip(&self.caps)
            .map(|(u, c)| [u[0] * c[0], u[1] * c[1], u[2] * c[2], u[3] * c[3]])
            .collect();
        let avg = |xs: &[[f64; 4]], r: usize| xs.iter().map(|x| x[r]).sum::<f64>() / n as f64;
        let s_avg: [f64; 4] = std::array::from_fn(|r| avg(&self.caps, r));
        let l_avg: [f64; 4] = std::array::from_fn(|r| avg(&load, r));
        let h_r = |i: usize, r: usize| -> Option<f64> {
            (l_avg[r] > 0.0 && s_avg[r] > 0.0)
                .then(|| (load[i][r] / l_avg[r]) / (self.caps[i][r] / s_avg[r]))
        };
        let comb_l: Vec<f64> = (0..n)
            .map(|i| (0..4).map(|r| load[i][r] / s_avg[r]).sum())
            .collect();
        let comb_s: Vec<f64> = (0..n)
            .map(|i| (0..4).map(|r| self.caps[i][r] / s_avg[r]).sum())
            .collect();
        let cl_avg = comb_l.iter().sum::<f64>() / n as f64;
        let cs_avg = comb_s.iter().sum::<f64>() / n as f64;
        let h: Vec<Option<f64>> = (0..n)
            .map(|i| (cl_avg > 0.0).then(|| (comb_l[i] / cl_avg) / (comb_s[i] / cs_avg)))
            .collect();
        let hs: Vec<f64> = h.iter().flatten().copied().collect();
        let h_max_deviation = hs.iter().map(|x| (x - 1.0).abs()).fold(0.0, f64::max);
        let h_std = if hs.is_empty() {
            0.0
        } else {
            let m = hs.iter().sum::<f64>() / hs.len() as f64;
            (hs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / hs.len() as f64).sqrt()
        };
        let per_node = (0..n)
            .map(|i| NodeStats {
                name: self.names[i].clone(),
                class: self.classes[i].clone(),
                placements: self.placements[i],
                util_mean: mean_util[i],
                cpu_max: self.node_cpu_max[i],
                hot_cpu_minutes: self.node_hot_steps[i] as f64 * minutes,
                h: h[i],
                h_per_resource: std::array::from_fn(|r| h_r(i, r)),
            })
            .collect();
        // Pods.
        let count =
            |f: &dyn Fn(&PodOutcome) -> bool| outcomes.iter().filter(|o| f(o)).count() as u64;
        let pods_running = count(&|o| matches!(o, PodOutcome::Running { .. }));
        let pods_finished = count(&|o| matches!(o, PodOutcome::Finished { .. }));
        let pods_pending = count(&|o| matches!(o, PodOutcome::Pending));
        let pods_not_arrived = count(&|o| matches!(o, PodOutcome::NotArrived));
        let mut waits: Vec<f64> = self.waits.iter().map(|w| w.1).collect();
        let wait_mean_s = if waits.is_empty() {
            0.0
        } else {
            waits.iter().sum::<f64>() / waits.len() as f64
        };
        let wait_p95_s = loadstar_common::window::nearest_rank(&mut waits, 0.95);
        let mut pending_reasons: Vec<(String, u64)> = self.reasons.into_iter().collect();
        pending_reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        pending_reasons.truncate(TOP_REASONS);
        let mut at_end: BTreeMap<String, u64> = BTreeMap::new();
        for (j, o) in outcomes.iter().enumerate() {
            if *o == PodOutcome::Pending {
                let s = self
                    .last_summary
                    .get(&j)
                    .cloned()
                    .unwrap_or_else(|| "not attempted yet".to_string());
                *at_end.entry(s).or_default() += 1;
            }
        }
        let mut pending_at_end: Vec<(String, u64)> = at_end.into_iter().collect();
        pending_at_end.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        pending_at_end.truncate(TOP_REASONS);
        let gpu = has_gpu.then(|| {
            let is_gpu = |j: usize| self.pod_gpus[j] > 0;
            let gpu_waits: Vec<f64> = self
                .waits
                .iter()
                .filter(|(j, _)| is_gpu(*j))
                .map(|w| w.1)
                .collect();
            GpuStats {
                gpus: self.total_gpus,
                gpu_pods: outcomes
                    .iter()
                    .enumerate()
                    .filter(|(j, o)| is_gpu(*j) && **o != PodOutcome::NotArrived)
                    .count() as u64,
                gpu_pods_placed: gpu_waits.len() as u64,
                gpu_pods_pending_at_end: outcomes
                    .iter()
                    .enumerate()
                    .filter(|(j, o)| is_gpu(*j) && **o == PodOutcome::Pending)
                    .count() as u64,
                gpu_pods_pending_max: self.gpu_pending_max,
                gpu_pending_pod_minutes: self.gpu_pending_steps as f64 * minutes,
                fragmented_pod_minutes: self.fragmented_steps as f64 * minutes,
                fragmented_pods_max: self.fragmented_max,
                stranded_gpus_mean: self.stranded_sum / steps,
                stranded_gpus_max: self.stranded_max,
                allocated_mean: self.allocated_sum / steps,
                wait_mean_s: if gpu_waits.is_empty() {
                    0.0
                } else {
                    gpu_waits.iter().sum::<f64>() / gpu_waits.len() as f64
                },
            }
        });
        let summary = ProfileSummary {
            profile: self.profile,
            nodes: n,
            pods: outcomes.len(),
            duration_s: self.steps_expected.saturating_sub(1) as f64 * self.step_s,
            step_s: self.step_s,
            hot_threshold: self.hot,
            resources,
            hot_node_minutes_any: self.hot_any_steps as f64 * minutes,
            overload_node_minutes: self.overload_steps as f64 * minutes,
            pods_placed: pods_running + pods_finished,
            pods_finished,
            pods_running,
            pods_pending,
            pods_not_arrived,
            wait_mean_s,
            wait_p95_s,
            pending_pod_minutes: self.pending_steps as f64 * minutes,
            failed_attempts: self.failed_attempts,
            pending_reasons,
            pending_at_end,
            h_max_deviation,
            h_std,
            gpu,
            per_node,
        };
        // Series, down-sampled by taking every k-th point (max and counts are kept as the
        // max over the bucket so spikes survive).
        let k = self.points.len().div_ceil(SERIES_POINTS).max(1);
        let mut series = RunSeries::default();
        for (b, chunk) in self.points.chunks(k).enumerate() {
            series.t.push((b * k) as f64 * self.step_s);
            let len = chunk.len() as f64;
            for r in 0..5 {
                series.std[r].push(chunk.iter().map(|p| p.std[r]).sum::<f64>() / len);
                series.mean[r].push(chunk.iter().map(|p| p.mean[r]).sum::<f64>() / len);
            }
            let max = |f: &dyn Fn(&StepPoint) -> f64| chunk.iter().map(f).fold(0.0, f64::max);
            series.cpu_max.push(max(&|p| p.cpu_max));
            series.pending.push(max(&|p| p.pending as f64));
            series.gpu_pending.push(max(&|p| p.gpu_pending as f64));
            series.fragmented.push(max(&|p| p.fragmented as f64));
            series.stranded.push(max(&|p| p.stranded as f64));
        }
        let columns = self.heat_columns.min(self.steps.max(1) as usize);
        let mut values = Vec::with_capacity(n * columns);
        for row in &self.heat {
            for c in 0..columns {
                let lo = c * row.len() / columns;
                let hi = ((c + 1) * row.len() / columns).max(lo + 1).min(row.len());
                let cell = &row[lo.min(row.len())..hi];
                values.push(if cell.is_empty() {
                    0.0
                } else {
                    cell.iter().sum::<f32>() / cell.len() as f32
                });
            }
        }
        let heatmap = Heatmap {
            nodes: self.names,
            columns,
            duration_s: summary.duration_s,
            values,
        };
        (summary, series, heatmap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Cluster, NodeMix};

    #[test]
    fn fragmentation_and_stranded_gpus() {
        let cluster = Cluster::generate(4, &NodeMix::parse("gpu8").expect("mix"), 1).expect("c");
        let trace = Trace::new(Vec::new()).expect("trace");
        let settings = SimSettings::default();
        let mut r = Recorder::new("p", &cluster, &trace, &settings, 2);
        r.record_nodes(0, &[NodeTruth::default(); 4]);
        // 4 free GPUs, one on each node: a 2-GPU pod is fragmented, all 4 GPUs stranded; a
        // 5-GPU pod is not fragmented (not enough GPUs in the whole cluster).
        r.record_queue(0, 2, &[2, 5], &[1, 1, 1, 1]);
        r.record_nodes(1, &[NodeTruth::default(); 4]);
        // A 1-GPU pod pending with free [0, 0, 0, 0]: nothing fragmented or stranded.
        r.record_queue(1, 1, &[1], &[0, 0, 0, 0]);
        let (s, series, _) = r.finish(&[]);
        let g = s.gpu.expect("gpu cluster");
        assert_eq!(g.gpus, 32);
        assert_eq!(g.fragmented_pods_max, 1);
        assert_eq!(g.stranded_gpus_max, 4);
        assert!((g.stranded_gpus_mean - 2.0).abs() < 1e-12);
        assert!((g.fragmented_pod_minutes - 5.0 / 60.0).abs() < 1e-12);
        assert!((g.allocated_mean - (28.0 / 32.0 + 1.0) / 2.0).abs() < 1e-12);
        assert_eq!(series.fragmented, vec![1.0, 0.0]);
        assert_eq!(series.stranded, vec![4.0, 0.0]);
    }
}
