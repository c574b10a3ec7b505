//! The scorer's own CPU use, read from `/proc/self/stat` once a second, drives the ingest
//! [`Pacer`](loadstar_grpc::pacing::Pacer) (`--ingest-cpu-budget`): the I/O half of agent
//! backpressure; the rule is pure, in `loadstar_grpc::pacing`.
use std::sync::Arc;
use std::time::{Duration, Instant};

use loadstar_common::procstat::cpu_seconds;
use loadstar_grpc::pacing::{Pace, Pacer, PacingConfig};
use loadstar_store::metrics::Metrics;
use tracing::{info, warn};

/// This process's CPU seconds so far.
fn read_cpu_seconds() -> Option<f64> {
    cpu_seconds(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// Observes the scorer's CPU use every second until `stop` resolves, moving `pace` by the
/// pacer's rule and publishing it as `loadstar_scorer_desired_interval_seconds`.
pub fn spawn(
    config: PacingConfig,
    pace: Pace,
    metrics: Arc<Metrics>,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    tokio::spawn(async move {
        tokio::pin!(stop);
        let mut pacer = Pacer::new(config);
        pace.set(pacer.current());
        metrics.desired_interval.set(pacer.current());
        let Some(mut last_cpu) = read_cpu_seconds() else {
            warn!("cannot read /proc/self/stat: ingest pacing is off");
            return;
        };
        let mut last = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        // After a stall (what overload looks like) ticks are delayed, not fired in a burst.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = &mut stop => return,
            }
            let Some(cpu) = read_cpu_seconds() else {
                continue;
            };
            let now = Instant::now();
            let span = now.duration_since(last).as_secs_f64();
            if span < 0.5 {
                // Too short to measure in 10 ms ticks.
                continue;
            }
            let cores = (cpu - last_cpu) / span;
            (last_cpu, last) = (cpu, now);
            let before = pacer.current();
            let after = pacer.observe(cores);
            if after != before {
                info!(
                    cpu_cores = cores,
                    interval_s = after,
                    was_s = before,
                    "asking agents for another report interval"
                );
                pace.set(after);
                metrics.desired_interval.set(after);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_cpu_time() {
        let own = read_cpu_seconds().expect("this process's /proc/self/stat");
        assert!(own >= 0.0);
    }
}
