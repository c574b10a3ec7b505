//! How long to wait before retrying — the agent reconnecting to a scorer or resolving its
//! name again, the scorer re-opening a failed Kubernetes watch: a capped exponential backoff
//! with jitter, pure so that its bounds are property-tested.
//!
//! Why not a crate. The candidates were checked against what this must do:
//! - `backon`'s `ExponentialBuilder` adds its jitter *on top of* the capped delay, so a delay
//!   can exceed `max_delay` (`--backoff-max` would no longer be a bound) and is never shorter
//!   than the exponential value (no "equal jitter" below it); it stops after 3 attempts unless
//!   told otherwise, takes an `f32` factor, has no reset (a new iterator must be built), and
//!   draws its own random numbers.
//! - `exponential-backoff` takes an integer factor, jitters both ways and then clamps to
//!   `[min, max]` (so the shortest delay is `--backoff-initial` itself, not half of it),
//!   counts down a required number of attempts, and draws its own random numbers too.
//!
//! Either would change when the agent reconnects (the first delay, the floor, or the cap),
//! and neither takes the random number from the caller, which is what lets the tests below
//! pin exact delays. The whole policy is the one formula in [`Backoff::next_delay`].
use std::time::Duration;

/// Default first retry delay.
pub const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_millis(500);
/// Default cap of the retry delay.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Exponential backoff parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffConfig {
    /// Delay before the first retry.
    pub initial: Duration,
    /// Largest delay.
    pub max: Duration,
    /// Growth factor per failed attempt (≥ 1).
    pub multiplier: f64,
    /// Fraction of each delay that is randomised away: the delay is uniform in
    /// [(1 − jitter)·d, d] ("equal jitter" at 0.5).
    pub jitter: f64,
}

impl Default for BackoffConfig {
    /// 0.5 s doubling to 30 s, jitter 0.5.
    fn default() -> Self {
        BackoffConfig {
            initial: DEFAULT_BACKOFF_INITIAL,
            max: DEFAULT_BACKOFF_MAX,
            multiplier: 2.0,
            jitter: 0.5,
        }
    }
}

/// Capped exponential backoff with jitter. Pure: the caller supplies the random number.
#[derive(Debug, Clone)]
pub struct Backoff {
    config: BackoffConfig,
    attempt: u32,
}

impl Backoff {
    /// A backoff at its first attempt.
    pub fn new(config: BackoffConfig) -> Self {
        Backoff { config, attempt: 0 }
    }

    /// The delay before the next attempt, given a uniform random `unit` in [0, 1).
    /// Never more than `max`; never less than `(1 − jitter)·min(initial, max)`.
    pub fn next_delay(&mut self, unit: f64) -> Duration {
        let c = &self.config;
        let max = c.max.as_secs_f64();
        let exp = c.multiplier.max(1.0).powi(self.attempt.min(1024) as i32);
        let base = (c.initial.as_secs_f64() * exp).min(max);
        let base = if base.is_finite() { base } else { max };
        self.attempt = self.attempt.saturating_add(1);
        let jitter = if c.jitter.is_finite() {
            c.jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.0
        };
        Duration::from_secs_f64((base * (1.0 - jitter * unit)).clamp(0.0, max))
    }

    /// Back to the first attempt (after a success).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// Failed attempts since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn backoff_grows_caps_and_resets() {
        let mut b = Backoff::new(BackoffConfig {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            multiplier: 2.0,
            jitter: 0.5,
        });
        let d: Vec<u128> = (0..6).map(|_| b.next_delay(0.0).as_millis()).collect();
        assert_eq!(d, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.next_delay(0.999_999).as_millis(), 500);
        b.reset();
        assert_eq!(b.next_delay(0.0).as_millis(), 100);
    }

    proptest! {
        #[test]
        fn backoff_bounds(
            initial_ms in 1u64..10_000,
            max_ms in 1u64..120_000,
            multiplier in 1.0f64..10.0,
            jitter in 0.0f64..1.0,
            units in prop::collection::vec(0.0f64..1.0, 1..200),
        ) {
            let config = BackoffConfig {
                initial: Duration::from_millis(initial_ms),
                max: Duration::from_millis(max_ms),
                multiplier,
                jitter,
            };
            let mut b = Backoff::new(config);
            let floor = Duration::from_millis(initial_ms.min(max_ms)).as_secs_f64() * (1.0 - jitter);
            for u in units {
                let d = b.next_delay(u);
                prop_assert!(d <= config.max, "{d:?} > max");
                prop_assert!(d.as_secs_f64() >= floor - 1e-9, "{d:?} below floor {floor}");
            }
        }
    }
}
