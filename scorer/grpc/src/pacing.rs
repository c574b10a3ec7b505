//! Backpressure on agents: the report interval the scorer asks for in every ack
//! (`ReportAck.desired_interval_seconds`). With a CPU budget, a [`Pacer`] raises it while the
//! scorer's own CPU use is above the budget's high mark (doubling, up to a maximum) and lowers
//! it again, halving, once it has stayed below the low mark; without one the interval is the
//! configured constant. It doubles at every observation above the mark (an overloaded scorer
//! acks late, so agents hear of the new interval late too; waiting for them would keep it
//! overloaded for tens of seconds), but halves only after two intervals (at least
//! `calm_observations`) of calm: agents adopt a new interval with their next report, and a
//! pacer judging the agents' old pace would swing between the extremes. Agents keep the
//! interval their last report stated, so a fast rise never makes a node stale. Agents keep
//! sampling at their own interval and send their latest report this often, each at its own
//! phase of it (`loadstar_common::pace`: told together, they do not report together), so the
//! scorer's ingest cost falls in proportion, without bursts, while every node stays fresh by
//! its (longer) report interval.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

/// The interval in the acks, shared between the pacer and every ingest stream.
#[derive(Debug, Clone, Default)]
pub struct Pace(Arc<AtomicU64>);

impl Pace {
    /// A pace that stays at `seconds` unless set (0: no preference).
    pub fn fixed(seconds: f64) -> Pace {
        let p = Pace::default();
        p.set(seconds);
        p
    }

    /// The interval now, seconds.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }

    /// Sets the interval.
    pub fn set(&self, seconds: f64) {
        self.0.store(seconds.to_bits(), Ordering::Relaxed);
    }
}

/// An invalid pacing setting.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PacingError {
    /// A field is out of range.
    #[error("ingest pacing: {field} {message}")]
    Field {
        /// The flag.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// How the pacer reacts; [`PacingConfig::new`] documents the defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PacingConfig {
    /// The interval asked for when the scorer is not loaded, seconds (0: no preference).
    pub base_s: f64,
    /// The longest interval it asks for, seconds.
    pub max_s: f64,
    /// Cores the scorer may use before it slows agents down.
    pub cpu_budget_cores: f64,
    /// Above this share of the budget the interval doubles (at each observation).
    pub high: f64,
    /// Below this share, for two intervals (and `calm_observations`) in a row, the
    /// interval halves.
    pub low: f64,
    /// Fewest observations below `low` before a halving.
    pub calm_observations: u32,
}

impl PacingConfig {
    /// Budget `cpu_budget_cores`, base `base_s`, at most `max_s`; doubles above 90 % of the
    /// budget, halves after 5 observations below 60 %.
    pub fn new(cpu_budget_cores: f64, base_s: f64, max_s: f64) -> Result<Self, PacingError> {
        let bad = |field, message: String| Err(PacingError::Field { field, message });
        if !(cpu_budget_cores.is_finite() && cpu_budget_cores > 0.0) {
            return bad(
                "--ingest-cpu-budget",
                format!("must be above 0, got {cpu_budget_cores}"),
            );
        }
        if !(base_s.is_finite() && base_s >= 0.0) {
            return bad(
                "--desired-interval-seconds",
                format!("must be ≥ 0, got {base_s}"),
            );
        }
        if !(max_s.is_finite() && max_s >= base_s.max(1.0) && max_s <= 300.0) {
            return bad(
                "--max-desired-interval-seconds",
                format!("must be in [max(1, base), 300], got {max_s}"),
            );
        }
        Ok(PacingConfig {
            base_s,
            max_s,
            cpu_budget_cores,
            high: 0.9,
            low: 0.6,
            calm_observations: 5,
        })
    }
}

/// The pacing state: the interval now and how long the scorer has been calm.
#[derive(Debug, Clone, PartialEq)]
pub struct Pacer {
    config: PacingConfig,
    current_s: f64,
    calm: u32,
}

impl Pacer {
    /// A pacer at its base interval.
    pub fn new(config: PacingConfig) -> Pacer {
        Pacer {
            config,
            current_s: config.base_s,
            calm: 0,
        }
    }

    /// The interval now, seconds.
    pub fn current(&self) -> f64 {
        self.current_s
    }

    /// One observation of the scorer's CPU use (cores, averaged over about a second since
    /// the last one); returns the interval to ask for from now on.
    pub fn observe(&mut self, cpu_cores: f64) -> f64 {
        let c = self.config;
        let load = cpu_cores / c.cpu_budget_cores;
        // Never paces below 1 s (agents sample once a second by default) or the base.
        let floor = c.base_s.max(1.0);
        if load > c.high {
            self.calm = 0;
            self.current_s = (self.current_s.max(floor / 2.0) * 2.0).min(c.max_s);
        } else if load < c.low {
            self.calm = self.calm.saturating_add(1);
            let needed = c
                .calm_observations
                .max((2.0 * self.current_s).ceil() as u32);
            if self.calm >= needed && self.current_s > c.base_s {
                self.calm = 0;
                let half = self.current_s / 2.0;
                self.current_s = if half < floor { c.base_s } else { half };
            }
        } else {
            self.calm = 0;
        }
        self.current_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raises_under_load_and_recovers_when_calm() {
        let mut p = Pacer::new(PacingConfig::new(0.5, 0.0, 16.0).expect("valid"));
        assert_eq!(p.current(), 0.0, "no preference while calm");
        // Over 90 % of half a core: doubles at every observation, 1 → 2 → 4 … capped at 16.
        let raised: Vec<f64> = (0..6).map(|_| p.observe(0.6)).collect();
        assert_eq!(raised, [1.0, 2.0, 4.0, 8.0, 16.0, 16.0]);
        // Between the marks: holds, and resets the calm count.
        assert_eq!(p.observe(0.4), 16.0);
        // Calm (below 60 %) for two intervals: 16 → 8 after 32 s, → 4 after 16 more, then
        // every 8 s (at least 5 observations) down to no preference.
        let calm: Vec<f64> = (0..80).map(|_| p.observe(0.1)).collect();
        assert_eq!(calm[30], 16.0);
        assert_eq!(calm[31], 8.0);
        assert_eq!(calm[46], 8.0);
        assert_eq!(calm[47], 4.0);
        assert_eq!(*calm.last().expect("calm"), 0.0);
    }

    #[test]
    fn a_base_interval_is_the_floor() {
        let mut p = Pacer::new(PacingConfig::new(1.0, 3.0, 30.0).expect("valid"));
        assert_eq!(p.observe(2.0), 6.0);
        for _ in 0..12 {
            p.observe(0.0);
        }
        assert_eq!(p.current(), 3.0);
        for _ in 0..20 {
            p.observe(0.0);
        }
        assert_eq!(p.current(), 3.0, "never below the base");
    }

    #[test]
    fn bad_settings_name_their_flag() {
        for (budget, base, max, flag) in [
            (0.0, 0.0, 30.0, "--ingest-cpu-budget"),
            (1.0, -1.0, 30.0, "--desired-interval-seconds"),
            (1.0, 0.0, 0.5, "--max-desired-interval-seconds"),
            (1.0, 0.0, 1000.0, "--max-desired-interval-seconds"),
        ] {
            let e = PacingConfig::new(budget, base, max).expect_err(flag);
            assert!(e.to_string().contains(flag), "{e}");
        }
        let pace = Pace::fixed(2.5);
        assert_eq!(pace.clone().get(), 2.5);
    }
}
