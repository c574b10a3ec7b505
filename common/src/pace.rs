//! When a paced agent sends its next report. The scorer asks every agent for the same
//! interval at the same moment, so agents that simply waited that long after their last
//! report would keep reporting together, in bursts as high as before pacing. Instead each
//! agent sends on a grid of the interval at a phase of its own, from its node's name, as
//! Prometheus spreads scrapes over the interval by a hash of the target: agents told the same
//! interval together spread evenly over it. Pure: the caller keeps the clock and the grid's
//! origin.
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

/// A node's phase in any interval, a fraction in `[0, 1)`, from its name. The same name gives
/// the same phase within a build (`DefaultHasher::new` has fixed keys), different names
/// spread evenly.
pub fn phase_of(node: &str) -> f64 {
    let mut h = DefaultHasher::new();
    node.hash(&mut h);
    // The top 53 bits: a uniform f64 in [0, 1).
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// How long after the last send the next report goes. `last` is the last send's time since
/// the grid's origin, `stated` the interval that report promised (the scorer judges
/// staleness by it), `every` the interval asked for now and `phase` the node's
/// ([`phase_of`]). The next send is the latest point of the node's grid
/// (`(k + phase) · every` after the origin) after the last send and no later than the
/// promise (`min(every, stated)` after it), or the promise itself when no grid point falls
/// between. So an agent never breaks a promise, reports exactly every `every` once on its
/// grid, and reports sooner than `every` only once per change of interval, while it moves
/// onto the new grid. With a zero `every` it sends at once.
pub fn next_send_delay(last: Duration, stated: Duration, every: Duration, phase: f64) -> Duration {
    let limit = every.min(stated);
    let period = every.as_nanos();
    if period == 0 {
        return limit;
    }
    // Truncating to whole nanoseconds is intended: the phase needs no finer grain.
    let offset = (period as f64 * phase.clamp(0.0, 1.0)) as u128 % period;
    let last = last.as_nanos();
    let deadline = last + limit.as_nanos();
    let Some(from_first) = deadline.checked_sub(offset) else {
        return limit; // the grid's first point is past the promise
    };
    let point = from_first / period * period + offset;
    match point.checked_sub(last) {
        Some(delay) if delay > 0 => u64::try_from(delay).map_or(limit, Duration::from_nanos),
        _ => limit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn an_agent_on_its_grid_reports_every_interval() {
        let phase = 0.25;
        // Last sent on its grid (7.5 s = 0.25 · 30 s after the origin): exactly 30 s later.
        assert_eq!(
            next_send_delay(Duration::from_millis(7_500), S(30), S(30), phase),
            S(30)
        );
        // A send a little late on the timer does not drift: the next is back on the grid.
        assert_eq!(
            next_send_delay(Duration::from_millis(7_520), S(30), S(30), phase),
            Duration::from_millis(29_980)
        );
    }

    #[test]
    fn a_new_interval_moves_the_agent_onto_its_grid_within_the_promise() {
        // Sent at 100 s promising 8 s, now asked for 30 s: its grid (phase 0.5: 15 s, 45 s, …,
        // 105 s) has a point within the promise: 5 s later.
        assert_eq!(next_send_delay(S(100), S(8), S(30), 0.5), S(5));
        // Phase 0.9 (27 s, 57 s, 87 s, 117 s): nothing before 108 s, so the promise.
        assert_eq!(next_send_delay(S(100), S(8), S(30), 0.9), S(8));
        // Then it is on its grid: 117 s, then every 30 s.
        assert_eq!(next_send_delay(S(108), S(30), S(30), 0.9), S(9));
        assert_eq!(next_send_delay(S(117), S(30), S(30), 0.9), S(30));
        // Asked for a shorter interval it follows at once: the 4 s grid's next point.
        assert_eq!(next_send_delay(S(117), S(30), S(4), 0.5), S(1));
        // Before the grid's first point, and with no interval, the promise.
        assert_eq!(next_send_delay(S(0), S(2), S(30), 0.9), S(2));
        assert_eq!(
            next_send_delay(S(5), S(2), Duration::ZERO, 0.9),
            Duration::ZERO
        );
    }

    #[test]
    fn agents_told_together_spread_over_the_interval() {
        // 10 000 agents that last reported at the same moment and are on a 30 s grid: their
        // next reports fall evenly over the 30 s, not together.
        let mut buckets = [0u32; 10];
        for i in 0..10_000 {
            let phase = phase_of(&format!("node-{i:05}"));
            let d = next_send_delay(S(1_000), S(30), S(30), phase);
            assert!(d > Duration::ZERO && d <= S(30), "{d:?}");
            buckets[((d.as_secs_f64() / 3.0) as usize).min(9)] += 1;
        }
        assert!(
            buckets.iter().all(|&n| (850..=1_150).contains(&n)),
            "{buckets:?}"
        );
        assert_eq!(phase_of("node-a"), phase_of("node-a"));
        assert_ne!(phase_of("node-a"), phase_of("node-b"));
    }

    proptest! {
        #[test]
        fn never_past_the_promise_and_on_the_grid_after_two_sends(
            last_ms in 0u64..10_000_000,
            stated_ms in 1u64..300_000,
            every_ms in 1u64..300_000,
            phase in 0.0f64..1.0,
        ) {
            let (last, stated, every) = (
                Duration::from_millis(last_ms),
                Duration::from_millis(stated_ms),
                Duration::from_millis(every_ms),
            );
            // Two sends on from any start (the first may be the promise, off the grid), an
            // agent is on its phase's grid: at the same place in the interval whatever its
            // start, and from there it keeps exactly to `every`.
            let on_grid = |last: Duration| -> Result<Duration, TestCaseError> {
                let d = next_send_delay(last, stated, every, phase);
                prop_assert!(d > Duration::ZERO && d <= every.min(stated));
                let next = last + d;
                let again = next_send_delay(next, every, every, phase);
                prop_assert!(again > Duration::ZERO && again <= every);
                let at = next + again;
                prop_assert_eq!(next_send_delay(at, every, every, phase), every);
                Ok(at)
            };
            let a = on_grid(last)?;
            let b = on_grid(last + Duration::from_millis(12_345))?;
            prop_assert_eq!(a.as_nanos() % every.as_nanos(), b.as_nanos() % every.as_nanos());
        }
    }
}
