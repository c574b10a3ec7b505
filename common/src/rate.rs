//! A token bucket, the rate limiter client-go and kube-scheduler use (`qps` tokens a second,
//! up to `burst` saved): paces the Kubernetes clients and the agent streams. Pure: the caller
//! passes the time, so tests drive it without a clock.
use std::time::{Duration, Instant};

/// A rate: `qps` tokens per second, `burst` at most saved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Sustained requests per second (≤ 0: unlimited).
    pub qps: f64,
    /// Bucket size.
    pub burst: u32,
}

impl Default for RateLimit {
    /// kube-scheduler's defaults: 50 QPS, burst 100.
    fn default() -> Self {
        RateLimit {
            qps: 50.0,
            burst: 100,
        }
    }
}

/// A token bucket. Pure: the caller passes the time.
///
/// Hand-written on purpose rather than taken from `governor` (the well-kept GCRA crate):
/// governor reads its own clock (`quanta`), which tokio's paused test time does not drive, so
/// the Kubernetes clients' pacing (`loadstar-kube`'s `RateLimitLayer`) and the agent streams' could no longer be tested deterministically without a custom
/// `Clock` adapter larger than this bucket; and it needs a whole-number rate per period where
/// `--kube-api-qps` is fractional like client-go's. The tower layer around it would stay
/// either way, and `tower::limit::RateLimit` is a fixed window, not client-go's bucket.
#[derive(Debug)]
pub struct TokenBucket {
    limit: RateLimit,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(limit: RateLimit, now: Instant) -> TokenBucket {
        TokenBucket {
            limit,
            tokens: f64::from(limit.burst.max(1)),
            at: now,
        }
    }

    /// Takes a token at `now`, or says how long to wait for one.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        if self.limit.qps.is_nan() || self.limit.qps <= 0.0 {
            return Ok(());
        }
        let burst = f64::from(self.limit.burst.max(1));
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.limit.qps).min(burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                ((1.0 - self.tokens) / self.limit.qps).max(1e-6),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_burst_then_qps() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(
            RateLimit {
                qps: 10.0,
                burst: 3,
            },
            t0,
        );
        for _ in 0..3 {
            assert_eq!(b.try_take(t0), Ok(()));
        }
        let wait = b.try_take(t0).expect_err("empty");
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-6, "{wait:?}");
        assert_eq!(b.try_take(t0 + Duration::from_millis(100)), Ok(()));
        // Never more than the burst, however long idle.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(b.try_take(later), Ok(()));
        }
        assert!(b.try_take(later).is_err());
        let mut unlimited = TokenBucket::new(RateLimit { qps: 0.0, burst: 0 }, t0);
        for _ in 0..1000 {
            assert_eq!(unlimited.try_take(t0), Ok(()));
        }
    }
}
