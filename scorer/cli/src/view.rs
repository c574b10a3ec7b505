//! What each command prints, as serialisable models built from the scorer's answers (the
//! same model feeds the table, `-o json` and `-o yaml`), and the tables themselves: pure.
use std::collections::BTreeMap;

use loadstar_proto::pb;
use serde::Serialize;

use crate::table::{Cell, Table, Tone};

/// The resources `top` shows, with their column titles.
const RESOURCES: [(pb::Resource, &str); 5] = [
    (pb::Resource::Cpu, "cpu"),
    (pb::Resource::Memory, "memory"),
    (pb::Resource::Network, "network"),
    (pb::Resource::DiskIo, "disk_io"),
    (pb::Resource::Gpu, "gpu"),
];

/// One resource of one node: the latest sample and the windows, as ratios.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Usage {
    /// Latest sample.
    pub now: f64,
    /// Mean over each window the agent keeps, by length in seconds.
    pub mean: BTreeMap<u32, f64>,
    /// Standard deviation over the shortest window.
    pub stddev: Option<f64>,
    /// 95th percentile over the shortest window.
    pub p95: Option<f64>,
}

/// A `top` row.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TopRow {
    /// Node.
    pub node: String,
    /// No fresh report.
    pub stale: bool,
    /// Seconds since the latest report (None: never reported).
    pub report_age_seconds: Option<f64>,
    /// Pods the agent measures.
    pub measured_pods: usize,
    /// Requests placed on the node, as quantities.
    pub requested: BTreeMap<String, String>,
    /// Allocatable, as quantities.
    pub allocatable: BTreeMap<String, String>,
    /// Per resource (`cpu`, `memory`, `network`, `disk_io`, `gpu`), when reported.
    pub usage: BTreeMap<&'static str, Usage>,
}

/// How `top` orders its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SortBy {
    /// By name.
    Name,
    /// Hottest CPU first.
    Cpu,
    /// Most memory in use first.
    Memory,
    /// Busiest network first.
    Network,
    /// Busiest disk first.
    Disk,
    /// Busiest GPU first.
    Gpu,
}

impl SortBy {
    fn resource(self) -> Option<&'static str> {
        match self {
            SortBy::Name => None,
            SortBy::Cpu => Some("cpu"),
            SortBy::Memory => Some("memory"),
            SortBy::Network => Some("network"),
            SortBy::Disk => Some("disk_io"),
            SortBy::Gpu => Some("gpu"),
        }
    }
}

/// The `top` rows of `nodes`, sorted by `sort` over `window`'s mean (the latest sample when
/// the node has no such window), names breaking ties.
pub fn top_rows(nodes: &[pb::NodeStatus], sort: SortBy, window: u32) -> Vec<TopRow> {
    let mut rows: Vec<TopRow> = nodes.iter().map(top_row).collect();
    if let Some(r) = sort.resource() {
        let key = |row: &TopRow| {
            row.usage
                .get(r)
                .map(|u| u.mean.get(&window).copied().unwrap_or(u.now))
                .unwrap_or(-1.0)
        };
        rows.sort_by(|a, b| key(b).total_cmp(&key(a)).then(a.node.cmp(&b.node)));
    } else {
        rows.sort_by(|a, b| a.node.cmp(&b.node));
    }
    rows
}

fn top_row(n: &pb::NodeStatus) -> TopRow {
    let mut usage = BTreeMap::new();
    let report = n.last_report.as_ref();
    if let Some(r) = report {
        for u in &r.usage {
            let Some((_, name)) = RESOURCES.iter().find(|(k, _)| *k as i32 == u.resource) else {
                continue;
            };
            let shortest = u.windows.iter().min_by_key(|w| w.window_seconds);
            usage.insert(
                *name,
                Usage {
                    now: u.latest_ratio,
                    mean: u
                        .windows
                        .iter()
                        .map(|w| (w.window_seconds, w.mean_ratio))
                        .collect(),
                    stddev: shortest.map(|w| w.stddev_ratio),
                    p95: shortest.map(|w| w.p95_ratio),
                },
            );
        }
    }
    TopRow {
        node: n.node_name.clone(),
        stale: n.stale,
        report_age_seconds: report.map(|_| n.report_age_seconds),
        measured_pods: report.map_or(0, |r| r.pods.len()),
        requested: n.requested.clone().into_iter().collect(),
        allocatable: n.allocatable.clone().into_iter().collect(),
        usage,
    }
}

/// Green below 50 %, yellow below 80 %, red from 80 %.
fn tone(ratio: f64) -> Tone {
    if ratio >= 0.8 {
        Tone::Bad
    } else if ratio >= 0.5 {
        Tone::Warn
    } else {
        Tone::Good
    }
}

fn pct_cell(v: Option<f64>) -> Cell {
    match v {
        Some(r) => Cell::toned(format!("{:.0}%", r * 100.0), tone(r)),
        None => Cell::plain("-"),
    }
}

/// The `top` table: the latest sample, the 60/300/900 s means and the short window's p95
/// for CPU and memory; the latest network, disk and GPU; requests; the report's age.
pub fn top_table(rows: &[TopRow]) -> Table {
    let mut t = Table::new(&[
        "NODE",
        "CPU",
        "CPU(60s)",
        "CPU(300s)",
        "CPU(900s)",
        "CPU(p95)",
        "MEMORY",
        "MEM(60s)",
        "MEM(300s)",
        "MEM(900s)",
        "NETWORK",
        "DISK",
        "GPU",
        "REQ(cpu)",
        "PODS",
        "REPORT",
    ]);
    for r in rows {
        let u = |name: &str| r.usage.get(name);
        let mean = |name: &str, w: u32| u(name).and_then(|x| x.mean.get(&w).copied());
        let report = match r.report_age_seconds {
            None => Cell::toned("never", Tone::Bad),
            Some(age) if r.stale => Cell::toned(format!("{age:.0}s STALE"), Tone::Bad),
            Some(age) => Cell::plain(format!("{age:.1}s")),
        };
        t.push(vec![
            Cell::plain(r.node.clone()),
            pct_cell(u("cpu").map(|x| x.now)),
            pct_cell(mean("cpu", 60)),
            pct_cell(mean("cpu", 300)),
            pct_cell(mean("cpu", 900)),
            pct_cell(u("cpu").and_then(|x| x.p95)),
            pct_cell(u("memory").map(|x| x.now)),
            pct_cell(mean("memory", 60)),
            pct_cell(mean("memory", 300)),
            pct_cell(mean("memory", 900)),
            pct_cell(u("network").map(|x| x.now)),
            pct_cell(u("disk_io").map(|x| x.now)),
            pct_cell(u("gpu").map(|x| x.now)),
            Cell::plain(match (r.requested.get("cpu"), r.allocatable.get("cpu")) {
                (Some(q), Some(a)) => format!("{q}/{a}"),
                (Some(q), None) => q.clone(),
                (None, Some(a)) => format!("0/{a}"),
                (None, None) => "-".into(),
            }),
            Cell::plain(r.measured_pods.to_string()),
            report,
        ]);
    }
    t
}

/// A ranked node with each plugin's part.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Candidate {
    /// Node.
    pub node: String,
    /// Weighted total, 0–100.
    pub total: f64,
    /// Its load was stale.
    pub stale: bool,
    /// Plugin → (score, weight).
    pub plugins: Vec<PluginPart>,
}

/// One plugin's score of a node.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PluginPart {
    /// Plugin.
    pub plugin: String,
    /// Score 0–100.
    pub score: i64,
    /// Weight in the profile.
    pub weight: i64,
}

/// Nodes one filter rejected for one reason.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Rejection {
    /// Filter plugin.
    pub filter: String,
    /// Reason.
    pub reason: String,
    /// Nodes rejected.
    pub count: u32,
    /// Some of them by name.
    pub nodes: Vec<String>,
}

/// `explain`'s model.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Explanation {
    /// `namespace/name`.
    pub pod: String,
    /// UID.
    pub uid: String,
    /// `scheduler` or `score`.
    pub decided_by: String,
    /// Profile.
    pub profile: String,
    /// When, Unix ms.
    pub decided_at_unix_ms: i64,
    /// Attempt (0 for Score calls).
    pub attempt: u32,
    /// `bound`, `assumed`, `unschedulable`, …
    pub outcome: String,
    /// The node the outcome names.
    pub node: Option<String>,
    /// A failed binding's error.
    pub error: Option<String>,
    /// kube-scheduler's summary.
    pub summary: String,
    /// Nodes evaluated.
    pub nodes_evaluated: u32,
    /// Nodes feasible.
    pub nodes_feasible: u32,
    /// Best first.
    pub candidates: Vec<Candidate>,
    /// Rejections, largest group first.
    pub rejected: Vec<Rejection>,
}

fn candidates(ranked: &[pb::NodeScore]) -> Vec<Candidate> {
    ranked
        .iter()
        .map(|n| Candidate {
            node: n.node_name.clone(),
            total: (n.total_score * 100.0).round() / 100.0,
            stale: n.stale,
            plugins: n
                .plugins
                .iter()
                .map(|p| PluginPart {
                    plugin: p.plugin.clone(),
                    score: p.score,
                    weight: p.weight,
                })
                .collect(),
        })
        .collect()
}

/// The explanation of a decision record.
pub fn explanation(d: &pb::DecisionRecord) -> Explanation {
    let pod = d
        .pod
        .as_ref()
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .unwrap_or_default();
    let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
    Explanation {
        pod,
        uid: d.uid.clone(),
        decided_by: d.source.clone(),
        profile: d.profile.clone(),
        decided_at_unix_ms: d.decided_at_unix_ms,
        attempt: d.attempt,
        outcome: d.outcome.clone(),
        node: some(&d.node_name),
        error: some(&d.error),
        summary: d.summary.clone(),
        nodes_evaluated: d.nodes_evaluated,
        nodes_feasible: d.nodes_feasible,
        candidates: candidates(&d.ranked),
        rejected: d
            .filtered
            .iter()
            .map(|g| Rejection {
                filter: g.plugin.clone(),
                reason: g.reason.clone(),
                count: g.count,
                nodes: g.node_names.clone(),
            })
            .collect(),
    }
}

/// The candidates table: node, total, then one column per plugin (`Name×weight`).
pub fn candidates_table(c: &[Candidate]) -> Table {
    let mut headers = vec!["NODE".to_string(), "TOTAL".to_string()];
    if let Some(first) = c.first() {
        headers.extend(
            first
                .plugins
                .iter()
                .map(|p| format!("{}×{}", p.plugin, p.weight)),
        );
    }
    let refs: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut t = Table::new(&refs);
    for (i, n) in c.iter().enumerate() {
        let mut row = vec![
            if i == 0 {
                Cell::toned(n.node.clone(), Tone::Good)
            } else {
                Cell::plain(n.node.clone())
            },
            Cell::plain(format!(
                "{:.2}{}",
                n.total,
                if n.stale { " (stale)" } else { "" }
            )),
        ];
        row.extend(n.plugins.iter().map(|p| Cell::plain(p.score.to_string())));
        t.push(row);
    }
    t
}

/// The rejections table; at most `names` node names per line, the rest counted.
pub fn rejections_table(r: &[Rejection], names: usize) -> Table {
    let mut t = Table::new(&["FILTER", "NODES", "REASON", "WHICH"]);
    for g in r {
        let shown: Vec<&str> = g.nodes.iter().take(names).map(String::as_str).collect();
        let more = g.count as usize - shown.len().min(g.count as usize);
        let mut which = shown.join(",");
        if more > 0 {
            which.push_str(&format!(" +{more} more"));
        }
        t.push(vec![
            Cell::plain(g.filter.clone()),
            Cell::plain(g.count.to_string()),
            Cell::plain(g.reason.clone()),
            Cell::plain(which),
        ]);
    }
    t
}

/// `explain` as text.
pub fn explanation_text(e: &Explanation, colour: bool) -> String {
    let mut out = String::new();
    let when = format_time(e.decided_at_unix_ms);
    out.push_str(&format!("Pod:       {}\n", e.pod));
    let attempt = if e.attempt > 0 {
        format!(", attempt {}", e.attempt)
    } else {
        String::new()
    };
    let by = match e.decided_by.as_str() {
        "scheduler" => "Loadstar's scheduler".to_string(),
        "score" => "a Score call (nothing was bound)".to_string(),
        other => other.to_string(),
    };
    out.push_str(&format!(
        "Decided:   {when} by {by}, profile {}{attempt}\n",
        e.profile
    ));
    let outcome = match (&e.node, e.outcome.as_str()) {
        (Some(n), "bound") => format!("bound to {n}"),
        (Some(n), "assumed") => format!("assumed on {n}, binding in flight"),
        (Some(n), "scored") => format!("best node {n}"),
        (Some(n), "nominated") => format!("no node fits; preemption nominated {n}"),
        (Some(n), "bind_failed") => format!(
            "binding to {n} failed: {} (retried)",
            e.error.as_deref().unwrap_or("")
        ),
        (_, "unschedulable") => "unschedulable: no node fits".to_string(),
        (None, "scored") => "no node fits".to_string(),
        (_, other) => other.to_string(),
    };
    let outcome = if colour {
        let tone = match e.outcome.as_str() {
            "bound" | "scored" | "assumed" => Tone::Good,
            "nominated" => Tone::Warn,
            _ => Tone::Bad,
        };
        tone.paint(&outcome)
    } else {
        outcome
    };
    out.push_str(&format!("Outcome:   {outcome}\n"));
    out.push_str(&format!("Summary:   {}\n", e.summary));
    if !e.candidates.is_empty() {
        let rest = e.nodes_feasible as usize - e.candidates.len().min(e.nodes_feasible as usize);
        out.push_str(&format!(
            "\nBest {} of {} feasible nodes{}:\n",
            e.candidates.len(),
            e.nodes_feasible,
            if rest > 0 {
                format!(" ({rest} scored lower, not kept)")
            } else {
                String::new()
            }
        ));
        out.push_str(&candidates_table(&e.candidates).render(colour));
    }
    if !e.rejected.is_empty() {
        let n: u32 = e.rejected.iter().map(|g| g.count).sum();
        out.push_str(&format!("\n{n} of {} nodes rejected:\n", e.nodes_evaluated));
        out.push_str(&rejections_table(&e.rejected, 8).render(colour));
    }
    out
}

/// `score`'s model.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ScoreView {
    /// Profile used.
    pub profile: String,
    /// kube-scheduler's summary.
    pub summary: String,
    /// Nodes evaluated.
    pub nodes_evaluated: u32,
    /// Best first.
    pub ranked: Vec<Candidate>,
    /// Rejections, grouped.
    pub rejected: Vec<Rejection>,
    /// What preemption would do, when asked and nothing fits.
    pub preemption: Option<PreemptionView>,
}

/// Preemption's answer.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PreemptionView {
    /// `proposed`, `ineligible`, `no_candidates`.
    pub outcome: String,
    /// Why not.
    pub reason: String,
    /// The node to clear, and the pods it would delete.
    pub node: Option<String>,
    /// `namespace/name` of each victim.
    pub victims: Vec<String>,
}

/// The model of a Score answer (rejections grouped as the decision log groups them).
pub fn score_view(r: &pb::ScoreResponse) -> ScoreView {
    let mut groups: BTreeMap<(String, String), Rejection> = BTreeMap::new();
    for f in &r.filtered {
        let g = groups
            .entry((f.plugin.clone(), f.reason.clone()))
            .or_insert_with(|| Rejection {
                filter: f.plugin.clone(),
                reason: f.reason.clone(),
                count: 0,
                nodes: Vec::new(),
            });
        g.count += 1;
        g.nodes.push(f.node_name.clone());
    }
    let mut rejected: Vec<Rejection> = groups.into_values().collect();
    rejected.sort_by(|a, b| b.count.cmp(&a.count).then(a.filter.cmp(&b.filter)));
    ScoreView {
        profile: r.profile.clone(),
        summary: r.summary.clone(),
        nodes_evaluated: r.nodes_evaluated,
        ranked: candidates(&r.ranked),
        rejected,
        preemption: r.preemption.as_ref().map(|p| {
            let outcome = match pb::PreemptionOutcome::try_from(p.outcome) {
                Ok(pb::PreemptionOutcome::Proposed) => "proposed",
                Ok(pb::PreemptionOutcome::Ineligible) => "ineligible",
                Ok(pb::PreemptionOutcome::NoCandidates) => "no_candidates",
                _ => "unspecified",
            };
            let first = p.candidates.first();
            PreemptionView {
                outcome: outcome.into(),
                reason: p.reason.clone(),
                node: first.map(|c| c.node_name.clone()),
                victims: first
                    .map(|c| {
                        c.victims
                            .iter()
                            .map(|v| format!("{}/{}", v.namespace, v.name))
                            .collect()
                    })
                    .unwrap_or_default(),
            }
        }),
    }
}

/// `score` as text.
pub fn score_text(s: &ScoreView, colour: bool) -> String {
    let mut out = format!("Profile:   {}\nSummary:   {}\n", s.profile, s.summary);
    if !s.ranked.is_empty() {
        out.push_str(&format!("\nWould go to {}:\n", s.ranked[0].node));
        out.push_str(&candidates_table(&s.ranked).render(colour));
    }
    if !s.rejected.is_empty() {
        out.push('\n');
        out.push_str(&rejections_table(&s.rejected, 8).render(colour));
    }
    if let Some(p) = &s.preemption {
        out.push_str(&format!("\nPreemption: {}", p.outcome));
        if let Some(n) = &p.node {
            out.push_str(&format!(" on {n}, deleting {}", p.victims.join(", ")));
        }
        if !p.reason.is_empty() {
            out.push_str(&format!(" ({})", p.reason));
        }
        out.push('\n');
    }
    out
}

/// A profile for `profiles`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProfileView {
    /// Name.
    pub name: String,
    /// Window, seconds.
    pub window_seconds: u32,
    /// Stale policy.
    pub stale_policy: String,
    /// `percentageOfNodesToScore` (100: every node; 0: adaptive).
    pub percentage_of_nodes_to_score: u32,
    /// Filters.
    pub filters: Vec<String>,
    /// Scores with weights.
    pub scores: Vec<(String, i64)>,
}

/// The profiles' models.
pub fn profile_views(r: &pb::ListProfilesResponse) -> Vec<ProfileView> {
    r.profiles
        .iter()
        .map(|p| ProfileView {
            name: p.name.clone(),
            window_seconds: p.window_seconds,
            stale_policy: p.stale_policy.clone(),
            percentage_of_nodes_to_score: p.percentage_of_nodes_to_score,
            filters: p
                .plugins
                .iter()
                .filter(|x| x.kind == "filter")
                .map(|x| x.name.clone())
                .collect(),
            scores: p
                .plugins
                .iter()
                .filter(|x| x.kind == "score")
                .map(|x| (x.name.clone(), x.weight))
                .collect(),
        })
        .collect()
}

/// The profiles table.
pub fn profiles_table(p: &[ProfileView]) -> Table {
    let mut t = Table::new(&["NAME", "WINDOW", "STALE", "NODES", "SCORES", "FILTERS"]);
    for (i, v) in p.iter().enumerate() {
        t.push(vec![
            Cell::plain(if i == 0 {
                format!("{} (default)", v.name)
            } else {
                v.name.clone()
            }),
            Cell::plain(format!("{}s", v.window_seconds)),
            Cell::plain(v.stale_policy.clone()),
            Cell::plain(match v.percentage_of_nodes_to_score {
                0 => "adaptive".to_string(),
                p => format!("{p}%"),
            }),
            Cell::plain(
                v.scores
                    .iter()
                    .map(|(n, w)| format!("{n}×{w}"))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            Cell::plain(v.filters.len().to_string()),
        ]);
    }
    t
}

/// `2026-11-25 12:00:00Z` from Unix ms (UTC; no time-zone database needed).
pub fn format_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(resource: pb::Resource, now: f64, means: &[(u32, f64)]) -> pb::ResourceUsage {
        pb::ResourceUsage {
            resource: resource as i32,
            latest_ratio: now,
            windows: means
                .iter()
                .map(|(w, m)| pb::WindowStats {
                    window_seconds: *w,
                    mean_ratio: *m,
                    stddev_ratio: 0.01,
                    p95_ratio: m + 0.05,
                    ..Default::default()
                })
                .collect(),
        }
    }

    fn node(name: &str, cpu: f64, stale: bool) -> pb::NodeStatus {
        pb::NodeStatus {
            node_name: name.into(),
            stale,
            report_age_seconds: 1.5,
            last_report: Some(pb::NodeReport {
                usage: vec![
                    usage(
                        pb::Resource::Cpu,
                        cpu,
                        &[(60, cpu), (300, cpu / 2.0), (900, 0.1)],
                    ),
                    usage(pb::Resource::Memory, 0.5, &[(60, 0.5)]),
                ],
                ..Default::default()
            }),
            requested: [("cpu".to_string(), "500m".to_string())].into(),
            allocatable: [("cpu".to_string(), "4".to_string())].into(),
            ..Default::default()
        }
    }

    #[test]
    fn top_sorts_by_the_chosen_window_and_shows_every_window() {
        let nodes = vec![
            node("a", 0.2, false),
            node("b", 0.9, true),
            node("c", 0.5, false),
        ];
        let rows = top_rows(&nodes, SortBy::Cpu, 60);
        let names: Vec<&str> = rows.iter().map(|r| r.node.as_str()).collect();
        assert_eq!(names, ["b", "c", "a"]);
        assert_eq!(rows[0].usage["cpu"].mean[&300], 0.45);
        let text = top_table(&rows).render(false);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("NODE  CPU  CPU(60s)"), "{}", lines[0]);
        assert!(lines[1].starts_with("b "), "{text}");
        assert!(lines[1].contains("90%") && lines[1].contains("45%") && lines[1].contains("95%"));
        assert!(lines[1].contains("STALE"), "{text}");
        assert!(lines[1].contains("500m/4"));
        let by_name = top_rows(&nodes, SortBy::Name, 60);
        assert_eq!(by_name[0].node, "a");
        // Colour only where asked.
        assert!(top_table(&rows).render(true).contains("\u{1b}[31m"));
        assert!(!text.contains('\u{1b}'));
    }

    #[test]
    fn explain_names_the_outcome_the_plugins_and_the_rejections() {
        let d = pb::DecisionRecord {
            pod: Some(pb::PodReference {
                namespace: "shop".into(),
                name: "web".into(),
            }),
            source: "scheduler".into(),
            profile: "loadstar".into(),
            decided_at_unix_ms: 1_795_608_412_832,
            attempt: 2,
            outcome: "bound".into(),
            node_name: "n1".into(),
            summary: "2/3 nodes are available: 1 Insufficient cpu.".into(),
            nodes_evaluated: 3,
            nodes_feasible: 2,
            ranked: vec![pb::NodeScore {
                node_name: "n1".into(),
                total_score: 77.777,
                plugins: vec![pb::PluginScore {
                    plugin: "TargetLoadPacking".into(),
                    score: 80,
                    weight: 2,
                }],
                stale: false,
            }],
            filtered: vec![pb::FilteredGroup {
                plugin: "NodeResourcesFit".into(),
                reason: "Insufficient cpu".into(),
                node_names: vec!["n3".into()],
                count: 1,
            }],
            ..Default::default()
        };
        let e = explanation(&d);
        let text = explanation_text(&e, false);
        assert!(text.contains("Pod:       shop/web"), "{text}");
        assert!(
            text.contains(
                "2026-11-25 12:06:52Z by Loadstar's scheduler, profile loadstar, attempt 2"
            ),
            "{text}"
        );
        assert!(text.contains("Outcome:   bound to n1"));
        assert!(text.contains("Best 1 of 2 feasible nodes (1 scored lower, not kept)"));
        assert!(text.contains("TargetLoadPacking×2"));
        assert!(text.contains("77.78"));
        assert!(
            text.contains("NodeResourcesFit  1      Insufficient cpu  n3"),
            "{text}"
        );
        let json = serde_json::to_value(&e).expect("serialises");
        assert_eq!(json["candidates"][0]["plugins"][0]["score"], 80);
    }

    #[test]
    fn score_groups_rejections_and_reports_preemption() {
        let r = pb::ScoreResponse {
            profile: "p".into(),
            filtered: ["a", "b", "c"]
                .iter()
                .map(|n| pb::FilteredNode {
                    node_name: (*n).into(),
                    plugin: "NodeResourcesFit".into(),
                    reason: "Insufficient cpu".into(),
                })
                .collect(),
            summary: "0/3 nodes are available: 3 Insufficient cpu.".into(),
            nodes_evaluated: 3,
            preemption: Some(pb::Preemption {
                outcome: pb::PreemptionOutcome::Proposed as i32,
                candidates: vec![pb::PreemptionCandidate {
                    node_name: "b".into(),
                    victims: vec![pb::PreemptionVictim {
                        namespace: "x".into(),
                        name: "low".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let v = score_view(&r);
        assert_eq!(v.rejected.len(), 1);
        assert_eq!(v.rejected[0].count, 3);
        let text = score_text(&v, false);
        assert!(
            text.contains("Preemption: proposed on b, deleting x/low"),
            "{text}"
        );
    }

    #[test]
    fn times_are_utc_civil_dates() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00Z");
        assert_eq!(format_time(951_782_400_000), "2000-02-29 00:00:00Z");
        assert_eq!(format_time(1_795_608_412_832), "2026-11-25 12:06:52Z");
    }
}
