//! Tables of a comparison: text for the terminal and the docs, CSV (one row per profile, and
//! one per node and profile) and JSON (everything).
use std::fmt::Write as _;

use serde::Serialize;

use super::measure::{ProfileSummary, RunSeries};

/// The results of one scenario: every profile's measures over the same trace.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Scenario name.
    pub scenario: String,
    /// What it shows.
    pub description: String,
    /// Seed of the run.
    pub seed: u64,
    /// The profile the others are compared with.
    pub baseline: String,
    /// One summary per profile, in run order.
    pub results: Vec<ProfileSummary>,
    /// Time series per profile (same order), for plots; not serialised.
    #[serde(skip)]
    pub series: Vec<RunSeries>,
}

fn pct_change(new: f64, base: f64) -> String {
    if base.abs() < 1e-12 {
        if new.abs() < 1e-12 {
            "±0%".into()
        } else {
            "n/a".into()
        }
    } else {
        format!("{:+.0}%", (new / base - 1.0) * 100.0)
    }
}

fn stat(s: &ProfileSummary, r: &str, f: fn(&super::measure::ResourceStats) -> f64) -> f64 {
    s.resource(r).map_or(0.0, f)
}

impl Comparison {
    /// The baseline's summary.
    pub fn baseline(&self) -> Option<&ProfileSummary> {
        self.results.iter().find(|r| r.profile == self.baseline)
    }

    /// The text tables (what `simulate` prints).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let first = self.results.first();
        let _ = writeln!(
            out,
            "scenario {}: {} nodes, {} pods, {:.0} s simulated in {} s steps, seed {}, hot > {:.0} %",
            self.scenario,
            first.map_or(0, |r| r.nodes),
            first.map_or(0, |r| r.pods),
            first.map_or(0.0, |r| r.duration_s),
            first.map_or(0.0, |r| r.step_s),
            self.seed,
            first.map_or(0.0, |r| r.hot_threshold * 100.0)
        );
        let _ = writeln!(out, "{}\n", self.description);
        let _ = writeln!(
            out,
            "Utilisation spread (σ = stddev of node utilisation across nodes, mean over time; percentage points):"
        );
        let name_w = self
            .results
            .iter()
            .map(|r| r.profile.len())
            .max()
            .unwrap_or(7)
            .max(7);
        let _ = writeln!(
            out,
            "{:<name_w$} | {:>6} {:>6} {:>6} {:>7} | {:>6} {:>6} {:>6} | {:>8} {:>9} {:>9} | {:>6} {:>7} {:>8} | {:>6}",
            "profile",
            "cpu σ",
            "σ max",
            "max",
            "vs base",
            "mem σ",
            "net σ",
            "disk σ",
            "hot cpu",
            "hot any",
            "overload",
            "placed",
            "pending",
            "wait s",
            "H dev"
        );
        let _ = writeln!(
            out,
            "{:<name_w$} | {:>6} {:>6} {:>6} {:>7} | {:>6} {:>6} {:>6} | {:>8} {:>9} {:>9} | {:>6} {:>7} {:>8} | {:>6}",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "node-min",
            "node-min",
            "node-min",
            "",
            "at end",
            "mean",
            "max"
        );
        let base = self.baseline();
        for r in &self.results {
            let cpu_std = stat(r, "cpu", |s| s.std_mean);
            let vs = base.map_or("".into(), |b| {
                if b.profile == r.profile {
                    "base".into()
                } else {
                    pct_change(cpu_std, stat(b, "cpu", |s| s.std_mean))
                }
            });
            let _ = writeln!(
                out,
                "{:<name_w$} | {:>6.2} {:>6.2} {:>6.1} {:>7} | {:>6.2} {:>6.2} {:>6.2} | {:>8.0} {:>9.0} {:>9.0} | {:>6} {:>7} {:>8.1} | {:>6.3}",
                r.profile,
                cpu_std * 100.0,
                stat(r, "cpu", |s| s.std_max) * 100.0,
                stat(r, "cpu", |s| s.util_max) * 100.0,
                vs,
                stat(r, "memory", |s| s.std_mean) * 100.0,
                stat(r, "network", |s| s.std_mean) * 100.0,
                stat(r, "disk", |s| s.std_mean) * 100.0,
                stat(r, "cpu", |s| s.hot_node_minutes),
                r.hot_node_minutes_any,
                r.overload_node_minutes,
                r.pods_placed,
                r.pods_pending,
                r.wait_mean_s,
                r.h_max_deviation
            );
        }
        if let Some(b) = base {
            let _ = writeln!(out, "\nAgainst the baseline {}:", b.profile);
            for r in self.results.iter().filter(|r| r.profile != b.profile) {
                let _ = writeln!(
                    out,
                    "  {:<name_w$}  cpu σ {}  cpu hot-node-minutes {}  any hot-node-minutes {}  overload {}",
                    r.profile,
                    pct_change(
                        stat(r, "cpu", |s| s.std_mean),
                        stat(b, "cpu", |s| s.std_mean)
                    ),
                    pct_change(
                        stat(r, "cpu", |s| s.hot_node_minutes),
                        stat(b, "cpu", |s| s.hot_node_minutes)
                    ),
                    pct_change(r.hot_node_minutes_any, b.hot_node_minutes_any),
                    pct_change(r.overload_node_minutes, b.overload_node_minutes),
                );
            }
        }
        if self.results.iter().any(|r| r.gpu.is_some()) {
            let _ = writeln!(out, "\nGPUs:");
            let _ = writeln!(
                out,
                "{:<name_w$} | {:>5} {:>6} {:>6} | {:>7} {:>7} {:>9} | {:>10} {:>9} | {:>8} {:>8} | {:>6} {:>8}",
                "profile",
                "GPUs",
                "pods",
                "placed",
                "pending",
                "pending",
                "pending",
                "fragmented",
                "fragm.",
                "stranded",
                "stranded",
                "alloc",
                "wait s"
            );
            let _ = writeln!(
                out,
                "{:<name_w$} | {:>5} {:>6} {:>6} | {:>7} {:>7} {:>9} | {:>10} {:>9} | {:>8} {:>8} | {:>6} {:>8}",
                "",
                "",
                "",
                "",
                "at end",
                "max",
                "pod-min",
                "pod-min",
                "max pods",
                "mean",
                "max",
                "mean",
                "mean"
            );
            for r in &self.results {
                if let Some(g) = &r.gpu {
                    let _ = writeln!(
                        out,
                        "{:<name_w$} | {:>5} {:>6} {:>6} | {:>7} {:>7} {:>9.0} | {:>10.0} {:>9} | {:>8.2} {:>8} | {:>5.1}% {:>8.0}",
                        r.profile,
                        g.gpus,
                        g.gpu_pods,
                        g.gpu_pods_placed,
                        g.gpu_pods_pending_at_end,
                        g.gpu_pods_pending_max,
                        g.gpu_pending_pod_minutes,
                        g.fragmented_pod_minutes,
                        g.fragmented_pods_max,
                        g.stranded_gpus_mean,
                        g.stranded_gpus_max,
                        g.allocated_mean * 100.0,
                        g.wait_mean_s
                    );
                }
            }
        }
        if first.is_some_and(|r| r.nodes <= 12) {
            let _ = writeln!(
                out,
                "\nBalance efficiency H(i) = (L(i)/L̄)/(S(i)/S̄) per node (1 = load proportional to capacity), placements, mean CPU utilisation:"
            );
            let cell_w = name_w.max(34);
            let mut header = format!("{:<10} {:<8}", "node", "class");
            for r in &self.results {
                let _ = write!(header, " | {:>cell_w$}", r.profile);
            }
            let _ = writeln!(out, "{header}");
            if let Some(f) = first {
                for (i, n) in f.per_node.iter().enumerate() {
                    let mut line = format!("{:<10} {:<8}", n.name, n.class);
                    for r in &self.results {
                        let ns = &r.per_node[i];
                        let cell = format!(
                            "H {} cpu {} pods {:>2} util {:>3.0}%",
                            fmt_h(ns.h),
                            fmt_h(ns.h_per_resource[0]),
                            ns.placements,
                            ns.util_mean[0] * 100.0
                        );
                        let _ = write!(line, " | {cell:>cell_w$}");
                    }
                    let _ = writeln!(out, "{line}");
                }
            }
        }
        let _ = writeln!(out, "\nPending pods and why:");
        for r in &self.results {
            if r.failed_attempts == 0 && r.pods_pending == 0 {
                let _ = writeln!(out, "  {}: none", r.profile);
                continue;
            }
            let _ = writeln!(
                out,
                "  {}: {} pending at end, {:.0} pod-minutes pending, {} failed attempts",
                r.profile, r.pods_pending, r.pending_pod_minutes, r.failed_attempts
            );
            for (reason, c) in r.pending_reasons.iter().take(4) {
                let _ = writeln!(out, "      {c:>8} node rejections: {reason}");
            }
            for (summary, c) in r.pending_at_end.iter().take(2) {
                let _ = writeln!(out, "      at end, {c} pod(s): {summary}");
            }
        }
        out
    }

    /// One CSV row per profile.
    pub fn summary_csv(&self) -> String {
        let mut out = String::from(
            "scenario,profile,nodes,pods,duration_s,cpu_std_mean,cpu_std_max,cpu_util_mean,cpu_util_max,cpu_hot_node_minutes,memory_std_mean,memory_util_max,memory_hot_node_minutes,network_std_mean,network_hot_node_minutes,disk_std_mean,disk_hot_node_minutes,hot_node_minutes_any,overload_node_minutes,pods_placed,pods_finished,pods_running,pods_pending,wait_mean_s,wait_p95_s,pending_pod_minutes,failed_attempts,h_max_deviation,h_std,gpu_pods_pending_at_end,gpu_pending_pod_minutes,fragmented_pod_minutes,stranded_gpus_mean,stranded_gpus_max\n",
        );
        for r in &self.results {
            let s = |res: &str, f: fn(&super::measure::ResourceStats) -> f64| stat(r, res, f);
            let g = r.gpu.clone().unwrap_or_default();
            let _ = writeln!(
                out,
                "{},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.2},{:.6},{:.6},{:.2},{:.6},{:.2},{:.6},{:.2},{:.2},{:.2},{},{},{},{},{:.2},{:.2},{:.2},{},{:.6},{:.6},{},{:.2},{:.2},{:.4},{}",
                self.scenario,
                r.profile,
                r.nodes,
                r.pods,
                r.duration_s,
                s("cpu", |x| x.std_mean),
                s("cpu", |x| x.std_max),
                s("cpu", |x| x.util_mean),
                s("cpu", |x| x.util_max),
                s("cpu", |x| x.hot_node_minutes),
                s("memory", |x| x.std_mean),
                s("memory", |x| x.util_max),
                s("memory", |x| x.hot_node_minutes),
                s("network", |x| x.std_mean),
                s("network", |x| x.hot_node_minutes),
                s("disk", |x| x.std_mean),
                s("disk", |x| x.hot_node_minutes),
                r.hot_node_minutes_any,
                r.overload_node_minutes,
                r.pods_placed,
                r.pods_finished,
                r.pods_running,
                r.pods_pending,
                r.wait_mean_s,
                r.wait_p95_s,
                r.pending_pod_minutes,
                r.failed_attempts,
                r.h_max_deviation,
                r.h_std,
                g.gpu_pods_pending_at_end,
                g.gpu_pending_pod_minutes,
                g.fragmented_pod_minutes,
                g.stranded_gpus_mean,
                g.stranded_gpus_max
            );
        }
        out
    }

    /// One CSV row per node and profile.
    pub fn nodes_csv(&self) -> String {
        let mut out = String::from(
            "profile,node,class,placements,cpu_mean,memory_mean,network_mean,disk_mean,gpu_mean,cpu_max,hot_cpu_minutes,h,h_cpu,h_memory,h_network,h_disk\n",
        );
        let opt = |h: Option<f64>| h.map_or(String::new(), |x| format!("{x:.4}"));
        for r in &self.results {
            for n in &r.per_node {
                let _ = writeln!(
                    out,
                    "{},{},{},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.2},{},{},{},{},{}",
                    r.profile,
                    n.name,
                    n.class,
                    n.placements,
                    n.util_mean[0],
                    n.util_mean[1],
                    n.util_mean[2],
                    n.util_mean[3],
                    n.util_mean[4],
                    n.cpu_max,
                    n.hot_cpu_minutes,
                    opt(n.h),
                    opt(n.h_per_resource[0]),
                    opt(n.h_per_resource[1]),
                    opt(n.h_per_resource[2]),
                    opt(n.h_per_resource[3])
                );
            }
        }
        out
    }

    /// Everything, as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

fn fmt_h(h: Option<f64>) -> String {
    h.map_or("  -  ".into(), |x| format!("{x:.2}"))
}
