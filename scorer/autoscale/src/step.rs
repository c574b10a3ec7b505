//! The step-tolerance autoscaler of the research (seed paper 002): nothing happens inside a
//! tolerance band around the target utilisation; above it, scale out at once to
//! `ceil(Σ U_i / target + step)` pods and then hold scale-outs for a cool-down; below it,
//! remove `step` pods per decision down to a floor, with a longer cool-down. Pure: the caller
//! polls with the time, the replica count and each pod's measured utilisation.
//!
//! Where the paper is loose, the rules chosen here (each configurable where it matters):
//! - **Tolerance** is a ratio by default: out of band when `mean / target > 1.15` (above) or
//!   `target / mean > 1.15` (below). The paper also writes it as "±15 points"
//!   ([`Tolerance::Points`]); with points its own scale-in example (mean 46.2 % against
//!   60 % ± 15) would be inside the band, with the ratio it is below it, as the paper scales
//!   it in. Both examples are tests below.
//! - **Active pods** are the pods with a fresh measurement. A pod not measured yet (just
//!   started: the paper's start-up reservation) adds no load to `Σ U_i` and is not averaged;
//!   the scale-out it triggered already counted on it, and the cool-down keeps the next
//!   decision from counting it twice.
//! - **Missing data never scales in**: if any pod lacks a fresh measurement, a decision below
//!   the band holds.
//! - **Scale-out has priority**: it is checked first, and a scale-in also waits out the
//!   scale-out cool-down (the new pods must settle before their load is judged low).
//! - The paper's "59.25 %" after its scale-in example does not follow from its numbers
//!   (277 / 4 = 69.25 %); nothing here depends on it.
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// An invalid configuration.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ConfigError {
    /// A field is out of its range.
    #[error("{field}: {message}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

fn field(field: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Field {
        field,
        message: message.into(),
    }
}

/// How far from the target the mean utilisation may be before anything happens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Tolerance {
    /// Out of band when `mean / target` (above) or `target / mean` (below) exceeds this
    /// ratio, e.g. 1.15.
    Ratio(f64),
    /// Out of band when the mean is more than this many utilisation points (as a ratio,
    /// 0.15 = 15 points) above or below the target.
    Points(f64),
}

/// The step-tolerance settings; [`StepConfig::default`] is the paper's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepConfig {
    /// Target utilisation of the pods' requests, as a ratio (0.6 = 60 %).
    pub target: f64,
    /// The band around it.
    pub tolerance: Tolerance,
    /// Pods added on top of the load's need when scaling out, and removed per scale-in.
    pub step: u32,
    /// Fewest replicas.
    pub floor: u32,
    /// Most replicas.
    pub ceiling: u32,
    /// No further scale-out for this long after one, seconds.
    pub scale_out_cooldown_s: f64,
    /// No further scale-in for this long after one, seconds.
    pub scale_in_cooldown_s: f64,
    /// Remove fewer than `step` pods (or none) when the remaining ones would run above the
    /// band. Off by default, as in the paper (whose own scale-in example ends at 69.25 %,
    /// just above a 69 % band); the simulator shows what it changes.
    #[serde(default)]
    pub scale_in_guard: bool,
}

impl Default for StepConfig {
    /// Target 60 %, tolerance ratio 1.15, step 2, floor 2, ceiling 100, cool-downs 3 min
    /// (out) and 5 min (in), no scale-in guard.
    fn default() -> Self {
        StepConfig {
            target: 0.6,
            tolerance: Tolerance::Ratio(1.15),
            step: 2,
            floor: 2,
            ceiling: 100,
            scale_out_cooldown_s: 180.0,
            scale_in_cooldown_s: 300.0,
            scale_in_guard: false,
        }
    }
}

impl StepConfig {
    /// Checks every field's range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.target.is_finite() && self.target > 0.0) {
            return Err(field(
                "target",
                format!("must be above 0, got {}", self.target),
            ));
        }
        match self.tolerance {
            Tolerance::Ratio(r) if !(r.is_finite() && r >= 1.0) => {
                return Err(field("tolerance.ratio", format!("must be ≥ 1, got {r}")));
            }
            Tolerance::Points(p) if !(p.is_finite() && p >= 0.0 && p < self.target) => {
                return Err(field(
                    "tolerance.points",
                    format!("must be in [0, target), got {p}"),
                ));
            }
            _ => {}
        }
        if self.step == 0 {
            return Err(field("step", "must be ≥ 1"));
        }
        if self.floor == 0 {
            return Err(field("floor", "must be ≥ 1"));
        }
        if self.floor > self.ceiling {
            return Err(field(
                "floor",
                format!("{} is above the ceiling {}", self.floor, self.ceiling),
            ));
        }
        for (name, v) in [
            ("scaleOutCooldownS", self.scale_out_cooldown_s),
            ("scaleInCooldownS", self.scale_in_cooldown_s),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(field(name, format!("must be ≥ 0, got {v}")));
            }
        }
        Ok(())
    }
}

/// What a poll decided, with the reason an operator reads in the status.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Replicas before.
    pub current: u32,
    /// Replicas wanted (equal to `current` when holding).
    pub desired: u32,
    /// Why.
    pub reason: String,
}

impl Decision {
    fn hold(current: u32, reason: impl Into<String>) -> Decision {
        Decision {
            current,
            desired: current,
            reason: reason.into(),
        }
    }

    /// Whether the replica count changes.
    pub fn scales(&self) -> bool {
        self.desired != self.current
    }
}

/// The step-tolerance controller's memory: when it last scaled each way.
#[derive(Debug, Clone, PartialEq)]
pub struct StepTolerance {
    config: StepConfig,
    last_out_s: Option<f64>,
    last_in_s: Option<f64>,
}

impl StepTolerance {
    /// A controller with `config` (validated).
    pub fn new(config: StepConfig) -> Result<StepTolerance, ConfigError> {
        config.validate()?;
        Ok(StepTolerance {
            config,
            last_out_s: None,
            last_in_s: None,
        })
    }

    /// A controller with `config` (validated) that last scaled out at `last_out_s` and in at
    /// `last_in_s`: the cool-downs survive a restart or a change of leader when the caller
    /// keeps these times (the StepScaler controller keeps them in the object's status).
    pub fn with_history(
        config: StepConfig,
        last_out_s: Option<f64>,
        last_in_s: Option<f64>,
    ) -> Result<StepTolerance, ConfigError> {
        let mut s = StepTolerance::new(config)?;
        s.last_out_s = last_out_s;
        s.last_in_s = last_in_s;
        Ok(s)
    }

    /// When it last scaled out and in (seconds, the callers' clock).
    pub fn history(&self) -> (Option<f64>, Option<f64>) {
        (self.last_out_s, self.last_in_s)
    }

    /// The settings.
    pub fn config(&self) -> &StepConfig {
        &self.config
    }

    fn cooling(last: Option<f64>, cooldown: f64, now: f64) -> Option<f64> {
        last.map(|t| t + cooldown).filter(|until| now < *until)
    }

    /// One poll at `now_s` seconds: `current` replicas, and each pod's utilisation of its
    /// request over the last poll period (`None`: not measured yet, or no fresh reading).
    pub fn decide(&mut self, now_s: f64, current: u32, pods: &[Option<f64>]) -> Decision {
        let c = self.config;
        let measured: Vec<f64> = pods.iter().flatten().copied().collect();
        if measured.is_empty() {
            return Decision::hold(current, "no pod has a fresh measurement");
        }
        let sum: f64 = measured.iter().sum();
        let mean = sum / measured.len() as f64;
        let upper = match c.tolerance {
            Tolerance::Ratio(r) => c.target * r,
            Tolerance::Points(p) => c.target + p,
        };
        let (above, below) = match c.tolerance {
            Tolerance::Ratio(r) => (mean > upper, mean * r < c.target),
            Tolerance::Points(p) => (mean > upper, mean < c.target - p),
        };
        let pct = |x: f64| format!("{:.1} %", x * 100.0);
        if above {
            if let Some(until) = Self::cooling(self.last_out_s, c.scale_out_cooldown_s, now_s) {
                return Decision::hold(
                    current,
                    format!(
                        "mean {} above the band; scale-out cooling down for {:.0} s",
                        pct(mean),
                        until - now_s
                    ),
                );
            }
            let need = (sum / c.target + f64::from(c.step)).ceil();
            let desired = (need.min(f64::from(c.ceiling)) as u32)
                .max(current)
                .clamp(c.floor, c.ceiling);
            if desired <= current {
                let why = if current >= c.ceiling {
                    "at the ceiling".to_string()
                } else {
                    format!("the measured pods need only {need} (the others are starting)")
                };
                return Decision::hold(
                    current,
                    format!("mean {} above the band, {why}", pct(mean)),
                );
            }
            self.last_out_s = Some(now_s);
            return Decision {
                current,
                desired,
                reason: format!(
                    "mean {} above the band: ceil({} / {} + {}) = {} pods",
                    pct(mean),
                    pct(sum),
                    pct(c.target),
                    c.step,
                    need
                ),
            };
        }
        if below {
            if measured.len() < pods.len() {
                return Decision::hold(
                    current,
                    format!(
                        "mean {} below the band, but {} of {} pods have no fresh measurement",
                        pct(mean),
                        pods.len() - measured.len(),
                        pods.len()
                    ),
                );
            }
            for (last, cooldown, what) in [
                (self.last_in_s, c.scale_in_cooldown_s, "scale-in"),
                (
                    self.last_out_s,
                    c.scale_out_cooldown_s,
                    "the last scale-out",
                ),
            ] {
                if let Some(until) = Self::cooling(last, cooldown, now_s) {
                    return Decision::hold(
                        current,
                        format!(
                            "mean {} below the band; {what} cooling down for {:.0} s",
                            pct(mean),
                            until - now_s
                        ),
                    );
                }
            }
            let mut desired = current.saturating_sub(c.step).max(c.floor);
            if desired >= current {
                return Decision::hold(
                    current,
                    format!("mean {} below the band, at the floor", pct(mean)),
                );
            }
            if c.scale_in_guard {
                while desired < current && sum / f64::from(desired) > upper {
                    desired += 1;
                }
                if desired >= current {
                    return Decision::hold(
                        current,
                        format!(
                            "mean {} below the band, but {} fewer pods would run above it",
                            pct(mean),
                            c.step.min(current - c.floor)
                        ),
                    );
                }
            }
            self.last_in_s = Some(now_s);
            return Decision {
                current,
                desired,
                reason: format!(
                    "mean {} below the band: {} − {} pods",
                    pct(mean),
                    current,
                    current - desired
                ),
            };
        }
        Decision::hold(current, format!("mean {} within the band", pct(mean)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods(xs: &[f64]) -> Vec<Option<f64>> {
        xs.iter().map(|x| Some(x / 100.0)).collect()
    }

    #[test]
    fn the_papers_scale_out_example() {
        // T = 60 %, three pods at 73, 75, 82 %: ceil(230/60 + 2) = ceil(5.83) = 6.
        let mut s = StepTolerance::new(StepConfig::default()).expect("valid");
        let d = s.decide(0.0, 3, &pods(&[73.0, 75.0, 82.0]));
        assert_eq!(d.desired, 6, "{d:?}");
        // Expected per-pod utilisation afterwards: 230 / 6 = 38.33 %.
        assert!((230.0 / f64::from(d.desired) - 38.33).abs() < 0.01);
        // The same with the tolerance in points (76.7 % > 75 %).
        let mut p = StepTolerance::new(StepConfig {
            tolerance: Tolerance::Points(0.15),
            ..StepConfig::default()
        })
        .expect("valid");
        assert_eq!(p.decide(0.0, 3, &pods(&[73.0, 75.0, 82.0])).desired, 6);
    }

    #[test]
    fn the_papers_scale_in_example_needs_the_ratio_tolerance() {
        // Six pods at 50, 45, 47, 52, 43, 40 % (mean 46.2 %): the paper removes 2 → 4.
        let six = pods(&[50.0, 45.0, 47.0, 52.0, 43.0, 40.0]);
        let mut s = StepTolerance::new(StepConfig::default()).expect("valid");
        let d = s.decide(0.0, 6, &six);
        assert_eq!(d.desired, 4, "{d:?}");
        // With "±15 points" the mean is inside [45 %, 75 %]: nothing happens.
        let mut p = StepTolerance::new(StepConfig {
            tolerance: Tolerance::Points(0.15),
            ..StepConfig::default()
        })
        .expect("valid");
        let d = p.decide(0.0, 6, &six);
        assert!(!d.scales(), "{d:?}");
        assert!(d.reason.contains("within the band"), "{d:?}");
    }

    #[test]
    fn the_guard_removes_only_what_keeps_the_rest_in_the_band() {
        let guarded = StepConfig {
            scale_in_guard: true,
            ..StepConfig::default()
        };
        // The paper's six pods (277 %): 4 pods would run at 69.25 % > 69 %, 5 at 55.4 %.
        let mut s = StepTolerance::new(guarded).expect("valid");
        let six = pods(&[50.0, 45.0, 47.0, 52.0, 43.0, 40.0]);
        assert_eq!(s.decide(0.0, 6, &six).desired, 5);
        // Four pods at 50 % (200 %): 2 would run at 100 %, 3 at 66.7 %: one goes.
        let mut s = StepTolerance::new(guarded).expect("valid");
        assert_eq!(s.decide(0.0, 4, &pods(&[50.0; 4])).desired, 3);
        // Without the guard both go, and the two left run at 100 %.
        let mut s = StepTolerance::new(StepConfig::default()).expect("valid");
        assert_eq!(s.decide(0.0, 4, &pods(&[50.0; 4])).desired, 2);
        // Three at 51 %: 2 would run at 76.5 %: nothing goes.
        let mut s = StepTolerance::new(guarded).expect("valid");
        let d = s.decide(0.0, 3, &pods(&[51.0; 3]));
        assert!(!d.scales() && d.reason.contains("would run above"), "{d:?}");
    }

    #[test]
    fn cooldowns_floor_ceiling_and_priority() {
        let mut s = StepTolerance::new(StepConfig {
            ceiling: 8,
            ..StepConfig::default()
        })
        .expect("valid");
        let hot = pods(&[90.0, 90.0, 90.0, 90.0]);
        // ceil(360/60 + 2) = 8.
        assert_eq!(s.decide(0.0, 4, &hot).desired, 8);
        // Still hot one poll later: cooling down.
        let d = s.decide(30.0, 8, &pods(&[95.0; 8]));
        assert!(!d.scales() && d.reason.contains("cooling down"), "{d:?}");
        // After the cool-down, at the ceiling.
        let d = s.decide(200.0, 8, &pods(&[95.0; 8]));
        assert!(!d.scales() && d.reason.contains("ceiling"), "{d:?}");
        // Cold right after a scale-out: waits for the scale-out cool-down too.
        let mut s = StepTolerance::new(StepConfig::default()).expect("valid");
        s.decide(0.0, 4, &hot);
        let d = s.decide(60.0, 8, &pods(&[10.0; 8]));
        assert!(!d.scales() && d.reason.contains("scale-out"), "{d:?}");
        // Then 2 per scale-in, 5 min apart, never below the floor.
        assert_eq!(s.decide(181.0, 8, &pods(&[10.0; 8])).desired, 6);
        assert!(!s.decide(300.0, 6, &pods(&[10.0; 6])).scales());
        assert_eq!(s.decide(482.0, 6, &pods(&[10.0; 6])).desired, 4);
        assert_eq!(s.decide(783.0, 4, &pods(&[10.0; 4])).desired, 2);
        let d = s.decide(1084.0, 2, &pods(&[10.0; 2]));
        assert!(!d.scales() && d.reason.contains("floor"), "{d:?}");
    }

    #[test]
    fn missing_metrics_never_scale_in_and_do_not_count_as_load() {
        let mut s = StepTolerance::new(StepConfig::default()).expect("valid");
        let mut cold = pods(&[10.0, 10.0, 10.0]);
        cold.push(None);
        let d = s.decide(0.0, 4, &cold);
        assert!(
            !d.scales() && d.reason.contains("no fresh measurement"),
            "{d:?}"
        );
        // Hot with one pod unmeasured: the load of the measured ones decides.
        let mut hot = pods(&[90.0, 90.0]);
        hot.push(None);
        // ceil(180/60 + 2) = 5.
        assert_eq!(s.decide(0.0, 3, &hot).desired, 5);
        // Hot, but the measured pods' need is covered by the pods still starting.
        let mut s = StepTolerance::new(StepConfig::default()).expect("valid");
        let mut starting = pods(&[80.0]);
        starting.extend([None; 5]);
        let d = s.decide(0.0, 6, &starting);
        assert!(!d.scales() && d.reason.contains("need only 4"), "{d:?}");
        let d = s.decide(0.0, 3, &[None, None]);
        assert!(!d.scales(), "{d:?}");
    }

    #[test]
    fn invalid_settings_are_named() {
        let bad = [
            (
                StepConfig {
                    target: 0.0,
                    ..StepConfig::default()
                },
                "target",
            ),
            (
                StepConfig {
                    floor: 5,
                    ceiling: 4,
                    ..StepConfig::default()
                },
                "floor",
            ),
            (
                StepConfig {
                    tolerance: Tolerance::Ratio(0.9),
                    ..StepConfig::default()
                },
                "tolerance.ratio",
            ),
            (
                StepConfig {
                    step: 0,
                    ..StepConfig::default()
                },
                "step",
            ),
        ];
        for (c, name) in bad {
            let e = StepTolerance::new(c).expect_err(name);
            assert!(e.to_string().starts_with(name), "{e}");
        }
    }
}
