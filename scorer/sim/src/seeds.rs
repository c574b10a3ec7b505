//! The same scenario over several seeds (cluster, trace and tie-breaks all re-drawn): each
//! figure's mean and 95 % confidence interval per profile, and each profile's change
//! against the baseline paired seed by seed — so that a claim holds across seeds, not for
//! one lucky draw. Pure: summaries in, a table and CSV out.
use std::fmt::Write as _;

use serde::Serialize;

use crate::measure::ProfileSummary;

/// Two-sided 97.5 % quantiles of Student's t for 1–30 degrees of freedom (then 1.96):
/// a table, not a statistics crate, for the one number this needs.
const T_975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// Mean and 95 % half-interval of a sample (interval 0 for a single value).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    /// Sample mean.
    pub mean: f64,
    /// Half-width of the 95 % confidence interval of the mean (Student t).
    pub ci95: f64,
}

impl Estimate {
    /// From a sample.
    pub fn of(xs: &[f64]) -> Estimate {
        let n = xs.len();
        if n == 0 {
            return Estimate {
                mean: f64::NAN,
                ci95: f64::NAN,
            };
        }
        let mean = xs.iter().sum::<f64>() / n as f64;
        if n == 1 {
            return Estimate { mean, ci95: 0.0 };
        }
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let t = T_975.get(n - 2).copied().unwrap_or(1.96);
        Estimate {
            mean,
            ci95: t * (var / n as f64).sqrt(),
        }
    }

    /// Whether the whole interval lies below `x`.
    pub fn below(&self, x: f64) -> bool {
        self.mean + self.ci95 < x
    }
}

/// The figures compared, as (name, unit, getter).
type Figure = (&'static str, fn(&ProfileSummary) -> f64);

fn sigma(s: &ProfileSummary, r: &str) -> f64 {
    s.resource(r).map_or(f64::NAN, |x| x.std_mean * 100.0)
}

/// The figures of each run that the table reports.
pub const FIGURES: [Figure; 8] = [
    ("cpu_sigma_pp", |s| sigma(s, "cpu")),
    ("memory_sigma_pp", |s| sigma(s, "memory")),
    ("network_sigma_pp", |s| sigma(s, "network")),
    ("disk_sigma_pp", |s| sigma(s, "disk")),
    ("hot_cpu_node_minutes", |s| {
        s.resource("cpu").map_or(f64::NAN, |x| x.hot_node_minutes)
    }),
    ("hot_any_node_minutes", |s| s.hot_node_minutes_any),
    ("overload_node_minutes", |s| s.overload_node_minutes),
    ("pending_at_end", |s| s.pods_pending as f64),
];

/// One profile over every seed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfileSeeds {
    /// Profile.
    pub profile: String,
    /// Per figure ([`FIGURES`] order).
    pub figures: Vec<Estimate>,
    /// Change of each figure against the baseline in the same seed, percent (NaN where the
    /// baseline's figure is 0).
    pub vs_baseline_pct: Vec<Estimate>,
}

/// A scenario over several seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedStudy {
    /// Scenario.
    pub scenario: String,
    /// The seeds, in order.
    pub seeds: Vec<u64>,
    /// The baseline profile.
    pub baseline: String,
    /// Per profile, in run order.
    pub profiles: Vec<ProfileSeeds>,
}

impl SeedStudy {
    /// From `runs[i]`: every profile's summary (same order each time) for `seeds[i]`.
    pub fn of(
        scenario: &str,
        seeds: &[u64],
        baseline: &str,
        runs: &[Vec<ProfileSummary>],
    ) -> SeedStudy {
        let names: Vec<String> = runs
            .first()
            .map(|r| r.iter().map(|s| s.profile.clone()).collect())
            .unwrap_or_default();
        let base = names.iter().position(|n| n == baseline);
        let profiles = names
            .iter()
            .enumerate()
            .map(|(p, name)| {
                let figures = FIGURES
                    .iter()
                    .map(|(_, get)| {
                        let xs: Vec<f64> = runs.iter().filter_map(|r| r.get(p)).map(get).collect();
                        Estimate::of(&xs)
                    })
                    .collect();
                let vs_baseline_pct = FIGURES
                    .iter()
                    .map(|(_, get)| {
                        let xs: Vec<f64> = runs
                            .iter()
                            .filter_map(|r| {
                                let b = get(r.get(base?)?);
                                let x = get(r.get(p)?);
                                (b != 0.0).then(|| 100.0 * (x - b) / b)
                            })
                            .collect();
                        Estimate::of(&xs)
                    })
                    .collect();
                ProfileSeeds {
                    profile: name.clone(),
                    figures,
                    vs_baseline_pct,
                }
            })
            .collect();
        SeedStudy {
            scenario: scenario.to_string(),
            seeds: seeds.to_vec(),
            baseline: baseline.to_string(),
            profiles,
        }
    }

    /// The table: each figure's mean ± 95 % interval, then the paired changes against the
    /// baseline for CPU σ, network σ, disk σ and hot node-minutes in any resource.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let first = self.seeds.first().copied().unwrap_or(0);
        let last = self.seeds.last().copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "scenario {} over {} seeds ({first}–{last}): mean ± 95 % interval (Student t); σ in percentage points, hot/overload in node-minutes",
            self.scenario,
            self.seeds.len()
        );
        let width = self
            .profiles
            .iter()
            .map(|p| p.profile.len())
            .max()
            .unwrap_or(7)
            .max(7);
        let _ = writeln!(
            out,
            "{:width$} | {:>13} {:>13} {:>13} {:>13} | {:>15} {:>15} {:>13} | {:>11}",
            "profile",
            "cpu σ",
            "mem σ",
            "net σ",
            "disk σ",
            "hot cpu",
            "hot any",
            "overload",
            "pending"
        );
        for p in &self.profiles {
            let f = |i: usize, prec: usize| {
                let e = p.figures[i];
                format!("{:.prec$} ± {:.prec$}", e.mean, e.ci95)
            };
            let _ = writeln!(
                out,
                "{:width$} | {:>13} {:>13} {:>13} {:>13} | {:>15} {:>15} {:>13} | {:>11}",
                p.profile,
                f(0, 2),
                f(1, 2),
                f(2, 2),
                f(3, 2),
                f(4, 0),
                f(5, 0),
                f(6, 0),
                f(7, 1)
            );
        }
        let _ = writeln!(
            out,
            "\nAgainst the baseline {}, paired by seed (percent; the change holds across seeds when the interval excludes 0):",
            self.baseline
        );
        let _ = writeln!(
            out,
            "{:width$} | {:>16} {:>16} {:>16} {:>16} {:>16}",
            "profile", "cpu σ", "mem σ", "net σ", "disk σ", "hot any"
        );
        for p in self.profiles.iter().filter(|p| p.profile != self.baseline) {
            let d = |i: usize| {
                let e = p.vs_baseline_pct[i];
                if e.mean.is_nan() {
                    "n/a".to_string()
                } else {
                    format!("{:+.1} ± {:.1}", e.mean, e.ci95)
                }
            };
            let _ = writeln!(
                out,
                "{:width$} | {:>16} {:>16} {:>16} {:>16} {:>16}",
                p.profile,
                d(0),
                d(1),
                d(2),
                d(3),
                d(5)
            );
        }
        out
    }

    /// One row per profile and figure: mean, interval, change against the baseline.
    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "scenario,seeds,profile,figure,mean,ci95,vs_baseline_pct_mean,vs_baseline_pct_ci95\n",
        );
        for p in &self.profiles {
            for (i, (name, _)) in FIGURES.iter().enumerate() {
                let (e, d) = (p.figures[i], p.vs_baseline_pct[i]);
                let _ = writeln!(
                    out,
                    "{},{},{},{},{:.4},{:.4},{:.4},{:.4}",
                    self.scenario,
                    self.seeds.len(),
                    p.profile,
                    name,
                    e.mean,
                    e.ci95,
                    d.mean,
                    d.ci95
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_interval_follow_student_t() {
        let e = Estimate::of(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(e.mean, 2.5);
        // s = 1.291, s/√4 = 0.6455, t(3) = 3.182 → 2.054.
        assert!((e.ci95 - 2.054).abs() < 1e-3, "{e:?}");
        assert_eq!(
            Estimate::of(&[7.0]),
            Estimate {
                mean: 7.0,
                ci95: 0.0
            }
        );
        assert!(Estimate::of(&[]).mean.is_nan());
        assert!(
            Estimate {
                mean: 1.0,
                ci95: 0.5
            }
            .below(1.6)
        );
        assert!(
            !Estimate {
                mean: 1.0,
                ci95: 0.5
            }
            .below(1.4)
        );
    }
}
