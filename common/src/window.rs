//! Sliding-window statistics (mean, population stddev, min, max, p95, count) over the last W
//! samples of one stream, for several window lengths at once, with the samples stored once.
//!
//! Why hand-written: no maintained crate offers several exact sliding windows over one shared
//! sample buffer without subtract-on-evict drift. The design is the "two stacks" sliding-window
//! aggregation: each window keeps a *front* stack of suffix aggregates of its oldest samples and
//! a *back* aggregate of the samples pushed since the last flip. Aggregates are merged with Chan
//! et al.'s parallel formula (count, mean, M2, min, max) — a merge never subtracts, so there is
//! no running-sum drift no matter how many samples pass. When the front stack runs empty it is
//! rebuilt from the shared ring buffer in O(W), once per W pushes: O(1) amortised per sample.
//! The p95 (nearest rank) is computed on demand in O(W) from the shared buffer.
use std::collections::VecDeque;

use thiserror::Error;

/// Errors of the window module.
#[derive(Debug, Error, PartialEq)]
pub enum WindowError {
    /// A sample was NaN or infinite; it was not recorded.
    #[error("non-finite sample {value} rejected")]
    NonFinite {
        /// The rejected value.
        value: f64,
    },
    /// A window length of zero samples, or no windows at all.
    #[error("invalid window configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
}

/// Mergeable summary of a multiset of samples: count, mean, sum of squared deviations (M2),
/// minimum and maximum. Merging two summaries gives exactly the summary of the union.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moments {
    /// Number of samples.
    pub count: u64,
    /// Mean of the samples (0 when empty).
    pub mean: f64,
    /// Sum of squared deviations from the mean.
    pub m2: f64,
    /// Smallest sample (+∞ when empty).
    pub min: f64,
    /// Largest sample (−∞ when empty).
    pub max: f64,
}

impl Moments {
    /// The summary of no samples.
    pub const EMPTY: Moments = Moments {
        count: 0,
        mean: 0.0,
        m2: 0.0,
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
    };

    /// The summary of a single sample.
    pub fn of(x: f64) -> Moments {
        Moments {
            count: 1,
            mean: x,
            m2: 0.0,
            min: x,
            max: x,
        }
    }

    /// The summary of the union of `self` and `other` (Chan, Golub & LeVeque 1979).
    pub fn merge(&self, other: &Moments) -> Moments {
        if self.count == 0 {
            return *other;
        }
        if other.count == 0 {
            return *self;
        }
        let na = self.count as f64;
        let nb = other.count as f64;
        let n = na + nb;
        let delta = other.mean - self.mean;
        Moments {
            count: self.count + other.count,
            mean: self.mean + delta * (nb / n),
            m2: self.m2 + other.m2 + delta * delta * (na * nb / n),
            min: self.min.min(other.min),
            max: self.max.max(other.max),
        }
    }

    /// Population variance (0 when empty).
    pub fn variance(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            (self.m2 / self.count as f64).max(0.0)
        }
    }

    /// Population standard deviation (0 when empty).
    pub fn stddev(&self) -> f64 {
        self.variance().sqrt()
    }
}

/// Statistics of one window at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WindowSummary {
    /// The window's nominal length in seconds (a label given at construction).
    pub window_seconds: u32,
    /// Mean of the samples.
    pub mean: f64,
    /// Population standard deviation.
    pub stddev: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// 95th percentile, nearest-rank definition: the ⌈0.95·n⌉-th smallest sample.
    pub p95: f64,
    /// Number of samples covered (less than the window length while it fills). 32 bits,
    /// beside `window_seconds`: the summary is 48 bytes, not 56, and a node's store entry
    /// holds a dozen of them.
    pub count: u32,
}

/// One window's two-stack state; the samples themselves live in the shared ring.
#[derive(Debug, Clone)]
struct WindowState {
    label_seconds: u32,
    len: usize,
    /// Suffix aggregates of the oldest samples; the top (last) covers all of them.
    front: Vec<Moments>,
    /// Aggregate of the samples pushed since the last flip.
    back: Moments,
}

impl WindowState {
    fn size(&self) -> usize {
        self.front.len() + self.back.count as usize
    }

    fn total(&self) -> Moments {
        self.front
            .last()
            .copied()
            .unwrap_or(Moments::EMPTY)
            .merge(&self.back)
    }
}

/// Several sliding windows of different lengths over one sample stream.
#[derive(Debug, Clone)]
pub struct WindowSet {
    ring: VecDeque<f64>,
    capacity: usize,
    windows: Vec<WindowState>,
    latest: Option<f64>,
    scratch: Vec<f64>,
}

impl WindowSet {
    /// Creates windows from `(label_seconds, length_in_samples)` pairs. Lengths must be ≥ 1.
    pub fn new(windows: &[(u32, usize)]) -> Result<Self, WindowError> {
        if windows.is_empty() {
            return Err(WindowError::InvalidConfig {
                reason: "at least one window is needed".into(),
            });
        }
        if let Some((label, _)) = windows.iter().find(|(_, len)| *len == 0) {
            return Err(WindowError::InvalidConfig {
                reason: format!("window of {label}s holds zero samples"),
            });
        }
        let capacity = windows.iter().map(|(_, l)| *l).max().unwrap_or(1);
        Ok(WindowSet {
            ring: VecDeque::with_capacity(capacity + 1),
            capacity,
            windows: windows
                .iter()
                .map(|&(label_seconds, len)| WindowState {
                    label_seconds,
                    len,
                    front: Vec::with_capacity(len),
                    back: Moments::EMPTY,
                })
                .collect(),
            latest: None,
            scratch: Vec::with_capacity(capacity),
        })
    }

    /// Windows of the given lengths in seconds at one sample per `interval_seconds`.
    pub fn for_interval(
        window_seconds: &[u32],
        interval_seconds: f64,
    ) -> Result<Self, WindowError> {
        if !(interval_seconds.is_finite() && interval_seconds > 0.0) {
            return Err(WindowError::InvalidConfig {
                reason: format!("sample interval {interval_seconds}s must be positive"),
            });
        }
        let specs: Vec<(u32, usize)> = window_seconds
            .iter()
            .map(|&s| (s, ((s as f64) / interval_seconds).round().max(1.0) as usize))
            .collect();
        Self::new(&specs)
    }

    /// Records one sample in every window. NaN and ±∞ are rejected and change nothing.
    pub fn push(&mut self, x: f64) -> Result<(), WindowError> {
        if !x.is_finite() {
            return Err(WindowError::NonFinite { value: x });
        }
        self.ring.push_back(x);
        let ring_len = self.ring.len();
        for w in &mut self.windows {
            w.back = w.back.merge(&Moments::of(x));
            if w.size() > w.len {
                if w.front.is_empty() {
                    // Flip: rebuild suffix aggregates of the back samples, newest first, so
                    // that the top of the stack covers every one of them.
                    let n = w.back.count as usize;
                    let mut acc = Moments::EMPTY;
                    for i in (ring_len - n..ring_len).rev() {
                        acc = Moments::of(self.ring[i]).merge(&acc);
                        w.front.push(acc);
                    }
                    w.back = Moments::EMPTY;
                }
                w.front.pop();
            }
        }
        if self.ring.len() > self.capacity {
            self.ring.pop_front();
        }
        self.latest = Some(x);
        Ok(())
    }

    /// The most recent sample.
    pub fn latest(&self) -> Option<f64> {
        self.latest
    }

    /// Number of windows.
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    /// True when there are no windows (never, by construction).
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// Mean, stddev, min, max and count of window `i` in O(1) (no p95).
    pub fn moments(&self, i: usize) -> Option<Moments> {
        self.windows.get(i).map(WindowState::total)
    }

    /// Full statistics of window `i`, including the p95 (O(W)).
    pub fn summary(&mut self, i: usize) -> Option<WindowSummary> {
        let w = self.windows.get(i)?;
        let m = w.total();
        let n = w.size();
        let p95 = if n == 0 {
            0.0
        } else {
            self.scratch.clear();
            self.scratch
                .extend(self.ring.iter().skip(self.ring.len() - n).copied());
            nearest_rank(&mut self.scratch, 0.95)
        };
        Some(WindowSummary {
            window_seconds: w.label_seconds,
            mean: m.mean,
            stddev: m.stddev(),
            min: if n == 0 { 0.0 } else { m.min },
            max: if n == 0 { 0.0 } else { m.max },
            p95,
            // A window never holds 2^32 samples (its ring is bounded far below).
            count: u32::try_from(m.count).unwrap_or(u32::MAX),
        })
    }

    /// Full statistics of every window, in construction order.
    pub fn summaries(&mut self) -> Vec<WindowSummary> {
        (0..self.windows.len())
            .filter_map(|i| self.summary(i))
            .collect()
    }
}

/// The nearest-rank quantile `q` of `xs` (reorders `xs`); 0 for an empty slice.
pub fn nearest_rank(xs: &mut [f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let rank = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
    let (_, v, _) = xs.select_nth_unstable_by(rank - 1, f64::total_cmp);
    *v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Two-pass reference statistics of a slice.
    fn naive(xs: &[f64]) -> (f64, f64, f64, f64, f64) {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut sorted = xs.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank = ((0.95 * n).ceil() as usize).max(1);
        (mean, var.sqrt(), min, max, sorted[rank - 1])
    }

    fn check(set: &mut WindowSet, history: &[f64], lens: &[usize], tol: f64) {
        for (i, &len) in lens.iter().enumerate() {
            let tail = &history[history.len().saturating_sub(len)..];
            let s = set.summary(i).expect("window exists");
            let (mean, sd, min, max, p95) = naive(tail);
            assert_eq!(s.count as usize, tail.len());
            let scale = mean.abs() + sd + 1.0;
            assert!(
                (s.mean - mean).abs() <= tol * scale,
                "mean {} vs {}",
                s.mean,
                mean
            );
            assert!(
                (s.stddev - sd).abs() <= tol * scale,
                "stddev {} vs {} (window {len})",
                s.stddev,
                sd
            );
            assert_eq!(s.min, min);
            assert_eq!(s.max, max);
            assert_eq!(s.p95, p95);
        }
    }

    #[test]
    fn worked_example() {
        let mut w = WindowSet::new(&[(3, 3), (5, 5)]).expect("valid");
        for x in [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] {
            w.push(x).expect("finite");
        }
        let short = w.summary(0).expect("window");
        assert_eq!(short.count, 3);
        assert_eq!(short.mean, 5.0);
        assert!((short.stddev - (2.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!((short.min, short.max, short.p95), (4.0, 6.0, 6.0));
        let long = w.summary(1).expect("window");
        assert_eq!(long.count, 5);
        assert_eq!(long.mean, 4.0);
        assert_eq!(long.stddev, 2.0f64.sqrt());
        assert_eq!(w.latest(), Some(6.0));
    }

    #[test]
    fn rejects_non_finite_and_keeps_state() {
        let mut w = WindowSet::new(&[(2, 2)]).expect("valid");
        w.push(1.0).expect("finite");
        assert_eq!(
            w.push(f64::NAN).expect_err("NaN").to_string(),
            "non-finite sample NaN rejected"
        );
        assert!(w.push(f64::INFINITY).is_err());
        let s = w.summary(0).expect("window");
        assert_eq!((s.count, s.mean), (1, 1.0));
    }

    #[test]
    fn empty_window_is_zero_not_nan() {
        let mut w = WindowSet::new(&[(60, 60)]).expect("valid");
        let s = w.summary(0).expect("window");
        assert_eq!(
            s,
            WindowSummary {
                window_seconds: 60,
                ..Default::default()
            }
        );
    }

    #[test]
    fn invalid_configs() {
        assert!(WindowSet::new(&[]).is_err());
        assert!(WindowSet::new(&[(10, 0)]).is_err());
        assert!(WindowSet::for_interval(&[60], 0.0).is_err());
        let w = WindowSet::for_interval(&[60, 300, 900], 1.0).expect("valid");
        assert_eq!(w.capacity, 900);
    }

    #[test]
    fn nearest_rank_definition() {
        let mut xs: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(nearest_rank(&mut xs, 0.95), 19.0);
        let mut one = [7.0];
        assert_eq!(nearest_rank(&mut one, 0.95), 7.0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any stream, any window lengths: identical to a naive recomputation at every step.
        #[test]
        fn matches_naive_recomputation(
            xs in prop::collection::vec(-1e6f64..1e6, 1..400),
            lens in prop::collection::vec(1usize..50, 1..4),
        ) {
            let specs: Vec<(u32, usize)> = lens.iter().map(|&l| (l as u32, l)).collect();
            let mut set = WindowSet::new(&specs).expect("valid");
            for (i, &x) in xs.iter().enumerate() {
                set.push(x).expect("finite");
                check(&mut set, &xs[..=i], &lens, 1e-9);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3))]
        /// 10^6 large, near-equal samples: no drift against a naive two-pass recomputation.
        #[test]
        fn no_drift_after_a_million_samples(
            base in 1e8f64..1e12,
            seed in any::<u64>(),
        ) {
            let lens = [60usize, 300, 900];
            let mut set = WindowSet::new(&[(60, 60), (300, 300), (900, 900)]).expect("valid");
            let mut history = std::collections::VecDeque::with_capacity(1000);
            // xorshift noise in [0, 1): large offset, tiny spread, the worst case for sums.
            let mut s = seed | 1;
            for _ in 0..1_000_000 {
                s ^= s << 13; s ^= s >> 7; s ^= s << 17;
                let x = base + (s >> 11) as f64 / (1u64 << 53) as f64;
                set.push(x).expect("finite");
                history.push_back(x);
                if history.len() > 900 { history.pop_front(); }
            }
            let h: Vec<f64> = history.into_iter().collect();
            for (i, &len) in lens.iter().enumerate() {
                let tail = &h[h.len() - len..];
                let (mean, sd, min, max, p95) = naive(tail);
                let s = set.summary(i).expect("window");
                prop_assert!((s.mean - mean).abs() <= 1e-12 * mean, "mean drift {} vs {}", s.mean, mean);
                // Noise is uniform on [0,1): stddev ≈ 0.2887; f64 resolution at 1e12 is ~1e-4.
                prop_assert!((s.stddev - sd).abs() <= 1e-3 * sd.max(1e-3), "stddev drift {} vs {}", s.stddev, sd);
                prop_assert_eq!(s.min, min);
                prop_assert_eq!(s.max, max);
                prop_assert_eq!(s.p95, p95);
            }
        }
    }
}
