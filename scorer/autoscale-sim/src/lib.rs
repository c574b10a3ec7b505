//! `simulate --scenario autoscale`: the step-tolerance autoscaler (`loadstar-autoscale`'s
//! [`StepTolerance`]) against Kubernetes 1.20's HPA ([`Hpa`]) on one workload whose demand
//! varies — bursty, diurnal and spiky traces — with a pod start-up delay. Each algorithm sees
//! what it would see in a cluster: the step-tolerance controller polls every 30 s with each
//! pod's utilisation from the agents' windows (fresh, one poll period long); the HPA syncs
//! every 15 s with metrics-server's (scraped once a minute, a minute long). Placement is not
//! modelled (the cluster has room); the load balancer spreads demand evenly over ready pods.
//! Model and figures: `docs/simulator.md` ("Autoscaling"). Apart from `loadstar-sim`, whose
//! plots and interval estimates it uses, because it models a workload, not placements.
use std::fmt::Write as _;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use loadstar_autoscale::hpa::{Hpa, HpaConfig, HpaPod};
use loadstar_autoscale::step::{ConfigError, StepConfig, StepTolerance, Tolerance};

use loadstar_sim::cli::{SimArgs, SimError, write_files};
use loadstar_sim::plot::{self, PlotError, Timeline};
use loadstar_sim::seeds::Estimate;
use thiserror::Error;

/// Errors of the comparison.
#[derive(Debug, Error)]
pub enum AutoscaleSimError {
    /// The controllers' settings are invalid.
    #[error("autoscale: {0}")]
    Config(#[from] ConfigError),
    /// An output could not be written.
    #[error(transparent)]
    Output(#[from] SimError),
    /// A plot could not be drawn.
    #[error(transparent)]
    Plot(#[from] PlotError),
}

/// `simulate --scenario autoscale`: every load with every algorithm for seeds `--seed` …
/// (`--seeds`); prints the table and writes `autoscale.txt`, `autoscale.csv` and (unless
/// `--no-plots`) the first seed's timelines into `--out`.
pub fn execute(args: &SimArgs) -> Result<Study, AutoscaleSimError> {
    let seeds: Vec<u64> = (0..args.seeds.max(1))
        .map(|i| args.seed.saturating_add(i))
        .collect();
    let study = study(&seeds, &AutoscaleSettings::default())?;
    let text = study.to_text();
    print!("{text}");
    if let Some(dir) = &args.out {
        write_files(
            dir,
            &[("autoscale.txt", &text), ("autoscale.csv", &study.to_csv())],
        )?;
        if args.no_plots {
            println!(
                "\nwrote autoscale.txt and autoscale.csv to {}",
                dir.display()
            );
        } else {
            let n = study.write_plots(dir)?;
            println!(
                "\nwrote autoscale.txt, autoscale.csv and {n} plot files to {}",
                dir.display()
            );
        }
    }
    Ok(study)
}

/// The demand shapes compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Load {
    /// 6 h at about 3 cores with eight bursts of 3–5× lasting 5–20 min.
    Bursty,
    /// A day between 2 and 16 cores, peaking at midday.
    Diurnal,
    /// 6 h at about 5 cores with a 30–120 s spike of 2.5–3.5× every 10–20 min.
    Spiky,
}

/// Every load, in report order.
pub const LOADS: [Load; 3] = [Load::Bursty, Load::Diurnal, Load::Spiky];

impl Load {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Load::Bursty => "bursty",
            Load::Diurnal => "diurnal",
            Load::Spiky => "spiky",
        }
    }

    /// Demand in cores for every second, deterministic for `seed`.
    pub fn demand(self, seed: u64) -> Vec<f64> {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x6175_746f_7363);
        let (seconds, base): (usize, f64) = match self {
            Load::Bursty => (6 * 3600, 3.0),
            Load::Diurnal => (24 * 3600, 2.0),
            Load::Spiky => (6 * 3600, 5.0),
        };
        let mut d = vec![base; seconds];
        match self {
            Load::Bursty => {
                for _ in 0..8 {
                    let start = rng.random_range(600..seconds - 1800);
                    let len = rng.random_range(300..1200);
                    let factor = rng.random_range(3.0..5.0);
                    for (i, x) in d.iter_mut().enumerate().skip(start).take(len) {
                        // 30 s ramp up.
                        let ramp = ((i - start) as f64 / 30.0).min(1.0);
                        *x = x.max(base * (1.0 + (factor - 1.0) * ramp));
                    }
                }
            }
            Load::Diurnal => {
                for (i, x) in d.iter_mut().enumerate() {
                    let day = i as f64 / seconds as f64;
                    *x = base + 14.0 * (1.0 - (2.0 * std::f64::consts::PI * day).cos()) / 2.0;
                }
            }
            Load::Spiky => {
                let mut t = rng.random_range(300..900);
                while t < seconds {
                    let len = rng.random_range(30..120);
                    let factor = rng.random_range(2.5..3.5);
                    for x in d.iter_mut().skip(t).take(len) {
                        *x = base * factor;
                    }
                    t += rng.random_range(600..1200);
                }
            }
        }
        // ±10 % noise, redrawn every 5 s.
        let mut noise = 1.0;
        for (i, x) in d.iter_mut().enumerate() {
            if i % 5 == 0 {
                noise = rng.random_range(0.9..1.1);
            }
            *x *= noise;
        }
        d
    }
}

/// The autoscalers compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Algorithm {
    /// Kubernetes 1.20's HPA at its defaults.
    Hpa,
    /// Step-tolerance with the ratio tolerance (Loadstar's default).
    StepTolerance,
    /// Step-tolerance with the tolerance in points (the paper's other reading).
    StepTolerancePoints,
    /// Step-tolerance (ratio) whose scale-in keeps the remaining pods inside the band.
    StepToleranceGuarded,
}

/// Every algorithm, in report order.
pub const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::Hpa,
    Algorithm::StepTolerance,
    Algorithm::StepTolerancePoints,
    Algorithm::StepToleranceGuarded,
];

impl Algorithm {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Hpa => "hpa-1.20",
            Algorithm::StepTolerance => "step-tolerance",
            Algorithm::StepTolerancePoints => "step-tolerance-points",
            Algorithm::StepToleranceGuarded => "step-tolerance-guarded",
        }
    }
}

/// How the workload and the controllers run; [`AutoscaleSettings::default`] documents each.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoscaleSettings {
    /// Target utilisation of requests, both algorithms (0.6).
    pub target: f64,
    /// A pod is `Pending` this long after it is created (10 s: scheduling, image present).
    pub pending_s: usize,
    /// …and ready (serving) this long after it is created (60 s).
    pub startup_s: usize,
    /// A ready pod serves at most this many cores: its request = limit (1).
    pub pod_cores: f64,
    /// Per-pod utilisation above which the SLO counts as missed (0.9).
    pub slo_utilisation: f64,
    /// Fewest and most replicas, both algorithms (2, 60).
    pub min_replicas: u32,
    /// Most replicas.
    pub max_replicas: u32,
    /// The step-tolerance controller's poll period = the agents' window (30 s).
    pub step_poll_s: usize,
    /// The HPA's sync period (15 s).
    pub hpa_sync_s: usize,
    /// metrics-server's scrape interval and window (60 s).
    pub metrics_server_s: usize,
}

impl Default for AutoscaleSettings {
    fn default() -> Self {
        AutoscaleSettings {
            target: 0.6,
            pending_s: 10,
            startup_s: 60,
            pod_cores: 1.0,
            slo_utilisation: 0.9,
            min_replicas: 2,
            max_replicas: 60,
            step_poll_s: 30,
            hpa_sync_s: 15,
            metrics_server_s: 60,
        }
    }
}

/// One run's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// The load.
    pub load: Load,
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Minutes in which ready pods ran above the SLO utilisation or demand exceeded what
    /// they could serve.
    pub over_slo_minutes: f64,
    /// Demand not served (above the ready pods' capacity), core-minutes.
    pub unserved_core_minutes: f64,
    /// Cost: replicas (starting ones included) × time, replica-hours.
    pub replica_hours: f64,
    /// Scaling actions (each change of the replica count).
    pub actions: u32,
    /// Most replicas at once.
    pub max_replicas: u32,
    /// Every 30 s: (seconds, demand, replicas, per-pod utilisation of ready pods).
    #[serde(skip)]
    pub series: Vec<(f64, f64, f64, f64)>,
}

struct Pod {
    created: usize,
}

/// Runs one algorithm on one demand trace.
pub fn run(
    load: Load,
    algorithm: Algorithm,
    demand: &[f64],
    s: &AutoscaleSettings,
) -> Result<Outcome, ConfigError> {
    let mut step = StepTolerance::new(StepConfig {
        target: s.target,
        tolerance: match algorithm {
            Algorithm::StepTolerancePoints => Tolerance::Points(0.15),
            _ => Tolerance::Ratio(1.15),
        },
        floor: s.min_replicas,
        ceiling: s.max_replicas,
        scale_in_guard: algorithm == Algorithm::StepToleranceGuarded,
        ..StepConfig::default()
    })?;
    let mut hpa = Hpa::new(HpaConfig {
        target: s.target,
        min_replicas: s.min_replicas,
        max_replicas: s.max_replicas,
        ..HpaConfig::default()
    });
    // Sized for the first second's demand at the target, all ready from the start.
    let initial = ((demand.first().copied().unwrap_or(0.0) / (s.target * s.pod_cores)).ceil()
        as u32)
        .clamp(s.min_replicas, s.max_replicas);
    let mut pods: Vec<Pod> = (0..initial).map(|_| Pod { created: 0 }).collect::<Vec<_>>();
    let pre = s.startup_s;
    // Utilisation of each ready pod per second (all ready pods share the load evenly), as a
    // prefix sum for window means; pods that existed at 0 count as ready since -startup.
    let mut prefix = vec![0.0f64; demand.len() + 1];
    let mut out = Outcome {
        load,
        algorithm,
        over_slo_minutes: 0.0,
        unserved_core_minutes: 0.0,
        replica_hours: 0.0,
        actions: 0,
        max_replicas: initial,
        series: Vec::new(),
    };
    let ready_at = |p: &Pod| if p.created == 0 { 0 } else { p.created + pre };
    for (t, &d) in demand.iter().enumerate() {
        let ready = pods.iter().filter(|p| ready_at(p) <= t).count();
        let capacity = ready as f64 * s.pod_cores;
        let u = if ready == 0 {
            1.0
        } else {
            (d / capacity).min(1.0)
        };
        prefix[t + 1] = prefix[t] + u;
        if d > capacity || u > s.slo_utilisation {
            out.over_slo_minutes += 1.0 / 60.0;
        }
        out.unserved_core_minutes += (d - capacity).max(0.0) / 60.0;
        out.replica_hours += pods.len() as f64 / 3600.0;
        if t % 30 == 0 {
            out.series.push((t as f64, d, pods.len() as f64, u));
        }
        // The mean utilisation of a pod over [from, t], counting only its ready seconds.
        let window = |from: usize, p: &Pod| -> Option<f64> {
            let a = from.max(ready_at(p));
            (a < t + 1).then(|| (prefix[t + 1] - prefix[a]) / (t + 1 - a) as f64)
        };
        let current = pods.len() as u32;
        let desired = match algorithm {
            Algorithm::StepTolerance
            | Algorithm::StepTolerancePoints
            | Algorithm::StepToleranceGuarded
                if t > 0 && t % s.step_poll_s == 0 =>
            {
                // A pod is measured once it has served a whole agent window.
                let samples: Vec<Option<f64>> = pods
                    .iter()
                    .map(|p| {
                        let from = t + 1 - s.step_poll_s;
                        (ready_at(p) <= from).then(|| window(from, p)).flatten()
                    })
                    .collect();
                Some(step.decide(t as f64, current, &samples).desired)
            }
            Algorithm::Hpa if t > 0 && t % s.hpa_sync_s == 0 => {
                // metrics-server's latest scrape: the minute before it.
                let scrape = t - t % s.metrics_server_s;
                let from = scrape.saturating_sub(s.metrics_server_s);
                let samples: Vec<HpaPod> = pods
                    .iter()
                    .map(|p| {
                        let age =
                            (t - p.created) as f64 + if p.created == 0 { 3600.0 } else { 0.0 };
                        let r = ready_at(p);
                        let is_ready = r <= t;
                        // Running (past Pending) pods have a metric once scraped: what they
                        // served while ready, 0 while starting.
                        let running = if p.created == 0 {
                            0
                        } else {
                            p.created + s.pending_s
                        };
                        let metric = (running < scrape).then(|| {
                            let a = from.max(running);
                            let served = if r < scrape {
                                prefix[scrape] - prefix[from.max(r)]
                            } else {
                                0.0
                            };
                            served / (scrape - a) as f64
                        });
                        HpaPod {
                            utilisation: metric,
                            pending: t < p.created + s.pending_s && p.created != 0,
                            age_s: age,
                            ready: is_ready,
                            since_transition_s: if is_ready {
                                (t - r) as f64 + if p.created == 0 { 3600.0 } else { 0.0 }
                            } else {
                                (t - p.created - s.pending_s.min(t - p.created)) as f64
                            },
                            metric_span_s: (t - from) as f64,
                        }
                    })
                    .collect();
                Some(hpa.decide(t as f64, current, &samples).desired)
            }
            _ => None,
        };
        if let Some(n) = desired.filter(|n| *n != current) {
            out.actions += 1;
            if n > current {
                pods.extend((current..n).map(|_| Pod { created: t.max(1) }));
            } else {
                // The newest go first (ReplicaSets delete unready and young pods first).
                pods.truncate(n as usize);
            }
            out.max_replicas = out.max_replicas.max(n);
        }
    }
    Ok(out)
}

/// The comparison over seeds: per load and algorithm, each figure's runs.
#[derive(Debug, Clone, Default)]
pub struct Study {
    /// Seeds run.
    pub seeds: Vec<u64>,
    /// Every run.
    pub runs: Vec<Outcome>,
}

/// Runs every load with every algorithm for each seed.
pub fn study(seeds: &[u64], s: &AutoscaleSettings) -> Result<Study, ConfigError> {
    let mut runs = Vec::new();
    for &seed in seeds {
        for load in LOADS {
            let demand = load.demand(seed);
            for algorithm in ALGORITHMS {
                runs.push(run(load, algorithm, &demand, s)?);
            }
        }
    }
    Ok(Study {
        seeds: seeds.to_vec(),
        runs,
    })
}

type Figure = (&'static str, fn(&Outcome) -> f64);

const FIGURES: [Figure; 5] = [
    ("min over SLO", |o| o.over_slo_minutes),
    ("unserved core-min", |o| o.unserved_core_minutes),
    ("replica-hours", |o| o.replica_hours),
    ("actions", |o| f64::from(o.actions)),
    ("max replicas", |o| f64::from(o.max_replicas)),
];

impl Study {
    fn values(&self, load: Load, algorithm: Algorithm, f: fn(&Outcome) -> f64) -> Vec<f64> {
        self.runs
            .iter()
            .filter(|o| o.load == load && o.algorithm == algorithm)
            .map(f)
            .collect()
    }

    /// The table: per load, each algorithm's figures (mean ± 95 % interval over seeds).
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let seeds = match self.seeds.as_slice() {
            [one] => format!("seed {one}"),
            [first, .., last] => format!(
                "{} seeds ({first}–{last}), mean ± 95 % interval",
                self.seeds.len()
            ),
            [] => "no seeds".into(),
        };
        let _ = writeln!(s, "autoscaling: step-tolerance vs HPA 1.20, {seeds}");
        for load in LOADS {
            let _ = write!(s, "\n{:<22}", load.name());
            for (name, _) in FIGURES {
                let _ = write!(s, " | {name:>17}");
            }
            s.push('\n');
            for algorithm in ALGORITHMS {
                let _ = write!(s, "{:<22}", algorithm.name());
                for (_, f) in FIGURES {
                    let e = Estimate::of(&self.values(load, algorithm, f));
                    let cell = if self.seeds.len() > 1 {
                        format!("{:.1} ± {:.1}", e.mean, e.ci95)
                    } else {
                        format!("{:.1}", e.mean)
                    };
                    let _ = write!(s, " | {cell:>17}");
                }
                s.push('\n');
            }
        }
        s
    }

    /// One row per run: seed order, load, algorithm, figures.
    pub fn to_csv(&self) -> String {
        let mut s = String::from(
            "load,algorithm,over_slo_minutes,unserved_core_minutes,replica_hours,actions,max_replicas\n",
        );
        for o in &self.runs {
            let _ = writeln!(
                s,
                "{},{},{:.2},{:.2},{:.3},{},{}",
                o.load.name(),
                o.algorithm.name(),
                o.over_slo_minutes,
                o.unserved_core_minutes,
                o.replica_hours,
                o.actions,
                o.max_replicas
            );
        }
        s
    }

    /// Per load, the first seed's timelines: demand and replicas, and per-pod utilisation.
    pub fn write_plots(&self, dir: &Path) -> Result<usize, PlotError> {
        let mut files = 0;
        for load in LOADS {
            let runs: Vec<&Outcome> = ALGORITHMS
                .iter()
                .filter_map(|a| {
                    self.runs
                        .iter()
                        .find(|o| o.load == load && o.algorithm == *a)
                })
                .collect();
            let Some(first) = runs.first() else { continue };
            let t: Vec<f64> = first.series.iter().map(|p| p.0).collect();
            // The algorithms first in both panels, so each keeps its colour.
            let mut capacity: Vec<(String, Vec<f64>)> = runs
                .iter()
                .map(|o| {
                    (
                        format!("{} replicas", o.algorithm.name()),
                        o.series.iter().map(|p| p.2).collect(),
                    )
                })
                .collect();
            capacity.push((
                "demand (cores)".to_string(),
                first.series.iter().map(|p| p.1).collect(),
            ));
            let utilisation = runs
                .iter()
                .map(|o| {
                    (
                        o.algorithm.name().to_string(),
                        o.series.iter().map(|p| p.3 * 100.0).collect(),
                    )
                })
                .collect();
            let timeline = Timeline {
                title: format!("autoscaling, {} load", load.name()),
                t,
                panels: vec![
                    ("demand (cores) and replicas".into(), capacity),
                    ("per-pod utilisation of requests (%)".into(), utilisation),
                ],
            };
            files +=
                plot::write_timeline(dir, &format!("timeline-{}", load.name()), &timeline)?.len();
        }
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_are_deterministic_and_shaped() {
        for load in LOADS {
            assert_eq!(load.demand(3), load.demand(3), "{}", load.name());
            assert_ne!(load.demand(3), load.demand(4), "{}", load.name());
        }
        let d = Load::Diurnal.demand(1);
        let (night, noon) = (d[600], d[d.len() / 2]);
        assert!(noon > 5.0 * night, "{night} {noon}");
        let b = Load::Bursty.demand(1);
        let max = b.iter().fold(0.0f64, |a, x| a.max(*x));
        assert!(max > 8.0, "bursts reach 3–5× the 3-core base: {max}");
    }

    #[test]
    fn a_step_of_demand_is_followed_and_accounted() {
        // 1 h at 3 cores, then 1 h at 12.
        let mut demand = vec![3.0; 3600];
        demand.extend(vec![12.0; 3600]);
        let s = AutoscaleSettings::default();
        for algorithm in ALGORITHMS {
            let o = run(Load::Bursty, algorithm, &demand, &s).expect("valid settings");
            // Starts at ceil(3 / 0.6) = 5 and ends near 12 / 0.6 = 20 (±band).
            let last = o.series.last().expect("series").2;
            assert!(
                (14.0..=24.0).contains(&last),
                "{}: {last}",
                algorithm.name()
            );
            assert!(o.actions >= 1, "{}", algorithm.name());
            // Some SLO minutes right after the step: new pods take a minute to start.
            assert!(
                o.over_slo_minutes > 0.5,
                "{}: {}",
                algorithm.name(),
                o.over_slo_minutes
            );
            assert!(
                o.over_slo_minutes < 30.0,
                "{}: {}",
                algorithm.name(),
                o.over_slo_minutes
            );
            // Cost lies between always-5 and always-24 replicas for 2 h.
            assert!(
                (10.0..48.0).contains(&o.replica_hours),
                "{}",
                o.replica_hours
            );
        }
    }

    #[test]
    fn the_study_table_names_every_load_and_algorithm() {
        let st = study(&[1], &AutoscaleSettings::default()).expect("valid settings");
        assert_eq!(st.runs.len(), LOADS.len() * ALGORITHMS.len());
        let text = st.to_text();
        for name in LOADS
            .iter()
            .map(|l| l.name())
            .chain(ALGORITHMS.iter().map(|a| a.name()))
        {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
        assert_eq!(st.to_csv().lines().count(), 1 + st.runs.len());
    }
}
