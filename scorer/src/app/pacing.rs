//! The scorer's own CPU use, read from `/proc/self/stat` once a second, drives the ingest
//! [`Pacer`](loadstar_grpc::pacing::Pacer) (`--ingest-cpu-budget`): the I/O half of agent
//! backpressure; the rule is pure, in `loadstar_grpc::pacing`.
use std::sync::Arc;
use std::time::{Duration, Instant};

use loadstar_grpc::pacing::{Pace, Pacer, PacingConfig};
use loadstar_store::metrics::Metrics;
use tracing::{info, warn};

/// `/proc/<pid>/stat` counts CPU time in USER_HZ ticks, 100 per second on every Linux
/// architecture the scorer ships for (`sysconf(_SC_CLK_TCK)`; fixed by the kernel ABI).
const USER_HZ: f64 = 100.0;

/// The process's user + system CPU time in seconds from the text of `/proc/self/stat`.
/// Fields are counted after the command name's closing parenthesis (the name itself may hold
/// spaces and parentheses): utime and stime are fields 14 and 15.
pub fn cpu_seconds(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

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
    fn reads_utime_and_stime_after_the_command_name() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime …; the name may hold spaces and parentheses.
        let stat = "4242 (loadstar (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0";
        assert_eq!(cpu_seconds(stat), Some(3.0));
        assert_eq!(cpu_seconds("4242 (x) S 1"), None);
        assert_eq!(cpu_seconds("garbage"), None);
        let own = read_cpu_seconds().expect("this process's /proc/self/stat");
        assert!(own >= 0.0);
    }
}
