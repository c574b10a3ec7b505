//! One StepScaler poll, pure: the workload's pods (from the API server) and their usage (from
//! the agents, through the [`PodUsageBook`]) become the per-pod utilisations the algorithm
//! reads, with the rules for pods that cannot be measured; the replica bounds apply first.
//!
//! - A pod's utilisation is its mean usage over the last poll period divided by its request
//!   (the sum of its containers' requests for the metric).
//! - **Start-up reservation**: a pod that is not running yet adds no load and is not
//!   averaged; it does not hold back a scale-in either (the ReplicaSet removes unscheduled
//!   and pending pods first, and a pod the node cannot place must not pin the count up).
//! - **Missing metrics**: a running pod with no sample in the window, or whose newest sample
//!   is older than `stale_s` (or three report intervals of its node, when backpressure has
//!   lengthened them), is *unmeasured*: it adds no load, and while any running pod is
//!   unmeasured nothing scales in (see [`crate::step`]).
//! - A running pod without a request for the metric makes utilisation undefined: the poll
//!   holds and says which pod (as the HPA does).
//! - A workload scaled to 0 is left alone (the HPA's convention: autoscaling is off).
//! - Replicas below `minReplicas` or above `maxReplicas` are brought into range at once.
use crate::spec::Metric;
use crate::step::{Decision, StepTolerance};
use crate::usage::PodUsageBook;

/// A pod of the workload as the API server shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodView {
    /// `namespace/name`, for messages.
    pub name: String,
    /// metadata.uid.
    pub uid: String,
    /// Running and not being deleted.
    pub running: bool,
    /// The pod's request for the metric (cores or bytes); 0 when it has none.
    pub request: f64,
}

/// Why a poll ended as it did, for the status conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The algorithm decided (scale or hold).
    Decided,
    /// Brought into `[minReplicas, maxReplicas]`.
    Bounded,
    /// The workload has 0 replicas.
    ScaledToZero,
    /// A running pod has no request for the metric.
    MissingRequest(String),
}

/// What one poll found and decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Poll {
    /// The decision (desired = current when holding).
    pub decision: Decision,
    /// Why.
    pub outcome: Outcome,
    /// Mean utilisation of the measured pods, as a ratio.
    pub mean: Option<f64>,
    /// Pods with a fresh measurement.
    pub measured: usize,
    /// Pods of the workload (running or starting).
    pub pods: usize,
}

/// Inputs of a poll besides the pods.
#[derive(Debug, Clone, Copy)]
pub struct PollSettings {
    /// Now, on the book's clock, seconds.
    pub now_s: f64,
    /// The averaging window (the poll period), seconds.
    pub window_s: f64,
    /// A pod whose newest sample is older than this is unmeasured, seconds.
    pub stale_s: f64,
    /// CPU or memory.
    pub metric: Metric,
}

/// Polls once: `current` replicas of a workload whose pods are `pods`.
pub fn poll(
    alg: &mut StepTolerance,
    settings: PollSettings,
    current: u32,
    pods: &[PodView],
    book: &PodUsageBook,
) -> Poll {
    let c = *alg.config();
    let n = pods.len();
    let hold = |reason: String, outcome: Outcome| Poll {
        decision: Decision {
            current,
            desired: current,
            reason,
        },
        outcome,
        mean: None,
        measured: 0,
        pods: n,
    };
    if current == 0 {
        return hold(
            "the workload has 0 replicas: autoscaling is off until it has some".into(),
            Outcome::ScaledToZero,
        );
    }
    if current < c.floor || current > c.ceiling {
        let desired = current.clamp(c.floor, c.ceiling);
        return Poll {
            decision: Decision {
                current,
                desired,
                reason: format!(
                    "{current} replicas is outside [minReplicas {}, maxReplicas {}]",
                    c.floor, c.ceiling
                ),
            },
            outcome: Outcome::Bounded,
            mean: None,
            measured: 0,
            pods: n,
        };
    }
    if let Some(p) = pods.iter().find(|p| p.running && p.request <= 0.0) {
        return hold(
            format!(
                "pod {} has no {} request: utilisation is undefined",
                p.name,
                settings.metric.resource()
            ),
            Outcome::MissingRequest(p.name.clone()),
        );
    }
    // Pods not running yet are left out: no load, and no hold on scale-in.
    let utils: Vec<Option<f64>> = pods
        .iter()
        .filter(|p| p.running)
        .map(|p| {
            let w = book.window(&p.uid, settings.now_s, settings.window_s)?;
            // Stale after `stale_s`, or after three of its node's report intervals when the
            // scorer has slowed its agents down (backpressure).
            if settings.now_s - w.last_s > settings.stale_s.max(3.0 * w.interval_s) {
                return None;
            }
            let used = match settings.metric {
                Metric::Cpu => w.cpu_cores,
                Metric::Memory => w.memory_bytes,
            };
            Some(used / p.request)
        })
        .collect();
    let measured: Vec<f64> = utils.iter().flatten().copied().collect();
    let mean = (!measured.is_empty()).then(|| measured.iter().sum::<f64>() / measured.len() as f64);
    let decision = alg.decide(settings.now_s, current, &utils);
    Poll {
        decision,
        outcome: Outcome::Decided,
        mean,
        measured: measured.len(),
        pods: n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::StepConfig;
    use crate::usage::{BookLimits, Reading};

    fn pod(i: usize, running: bool, request: f64) -> PodView {
        PodView {
            name: format!("ns/p{i}"),
            uid: format!("u{i}"),
            running,
            request,
        }
    }

    fn settings(now_s: f64) -> PollSettings {
        PollSettings {
            now_s,
            window_s: 30.0,
            stale_s: 10.0,
            metric: Metric::Cpu,
        }
    }

    /// A book where pod i ran at `cores[i]` for the last 30 s, sampled each second.
    fn book(cores: &[f64], now: f64) -> PodUsageBook {
        let mut b = PodUsageBook::new(BookLimits::default());
        for t in 0..30 {
            for (i, c) in cores.iter().enumerate() {
                let r = Reading::new(now - f64::from(t), *c, 1e6);
                b.record("n", 1.0, &format!("u{i}"), r);
            }
        }
        b
    }

    fn alg() -> StepTolerance {
        StepTolerance::new(StepConfig::default()).expect("valid")
    }

    #[test]
    fn the_papers_scale_out_through_the_book() {
        // Requests of 0.5 core; 73, 75, 82 % of it.
        let b = book(&[0.365, 0.375, 0.41], 100.0);
        let pods: Vec<_> = (0..3).map(|i| pod(i, true, 0.5)).collect();
        let p = poll(&mut alg(), settings(100.0), 3, &pods, &b);
        assert_eq!(p.outcome, Outcome::Decided);
        assert_eq!(p.decision.desired, 6, "{p:?}");
        assert_eq!((p.measured, p.pods), (3, 3));
        assert!((p.mean.expect("mean") - 0.7667).abs() < 1e-3);
    }

    #[test]
    fn the_papers_scale_in_through_the_book() {
        let pct = [50.0, 45.0, 47.0, 52.0, 43.0, 40.0];
        let cores: Vec<f64> = pct.iter().map(|p| p / 100.0).collect();
        let b = book(&cores, 1000.0);
        let pods: Vec<_> = (0..6).map(|i| pod(i, true, 1.0)).collect();
        let p = poll(&mut alg(), settings(1000.0), 6, &pods, &b);
        assert_eq!(p.decision.desired, 4, "{p:?}");
    }

    #[test]
    fn starting_stale_and_unmeasured_pods_add_no_load_and_block_scale_in() {
        let b = book(&[0.1, 0.1], 1000.0);
        // Pod 2 is running but has no sample; pod 3 is pending.
        let pods = vec![
            pod(0, true, 1.0),
            pod(1, true, 1.0),
            pod(2, true, 1.0),
            pod(3, false, 1.0),
        ];
        let p = poll(&mut alg(), settings(1000.0), 4, &pods, &b);
        assert_eq!(p.decision.desired, 4, "{p:?}");
        assert!(p.decision.reason.contains("1 of 3 pods"), "{p:?}");
        assert_eq!((p.measured, p.pods), (2, 4));
        // A pending pod alone does not hold the scale-in back (one the node cannot place
        // must not pin the count up): 4 − 2.
        let p = poll(
            &mut alg(),
            settings(1000.0),
            4,
            &[pods[0].clone(), pods[1].clone(), pods[3].clone()],
            &b,
        );
        assert_eq!(p.decision.desired, 2, "{p:?}");
        // 15 s after their last sample (still in the 30 s window): stale past 10 s.
        let p = poll(&mut alg(), settings(1015.0), 4, &pods[..2], &b);
        assert_eq!(p.measured, 0, "{p:?}");
        assert_eq!(p.decision.desired, 4);
        // Unless their node reports every 10 s (paced): then 30 s is the limit.
        let mut slow = PodUsageBook::new(BookLimits::default());
        for i in 0..2 {
            slow.record("n", 10.0, &format!("u{i}"), Reading::new(1000.0, 0.1, 1e6));
        }
        let p = poll(&mut alg(), settings(1015.0), 4, &pods[..2], &slow);
        assert_eq!(p.measured, 2, "{p:?}");
    }

    #[test]
    fn memory_uses_the_memory_request() {
        let b = book(&[0.0], 100.0); // 1e6 bytes each sample
        let pods = [pod(0, true, 4e6), pod(1, true, 4e6)];
        let s = PollSettings {
            metric: Metric::Memory,
            ..settings(100.0)
        };
        let p = poll(&mut alg(), s, 2, &pods[..1], &b);
        assert!((p.mean.expect("mean") - 0.25).abs() < 1e-6);
    }

    #[test]
    fn bounds_zero_and_missing_requests() {
        let b = book(&[0.9], 100.0);
        let p = poll(&mut alg(), settings(100.0), 1, &[pod(0, true, 1.0)], &b);
        assert_eq!((p.outcome, p.decision.desired), (Outcome::Bounded, 2));
        let p = poll(&mut alg(), settings(100.0), 500, &[pod(0, true, 1.0)], &b);
        assert_eq!(p.decision.desired, 100);
        let p = poll(&mut alg(), settings(100.0), 0, &[], &b);
        assert_eq!((p.outcome, p.decision.desired), (Outcome::ScaledToZero, 0));
        let p = poll(
            &mut alg(),
            settings(100.0),
            2,
            &[pod(0, true, 1.0), pod(1, true, 0.0)],
            &b,
        );
        assert_eq!(p.outcome, Outcome::MissingRequest("ns/p1".into()));
        assert!(!p.decision.scales());
        // A pending pod without a request does not block: it is not running yet.
        let p = poll(
            &mut alg(),
            settings(100.0),
            2,
            &[pod(0, true, 1.0), pod(1, false, 0.0)],
            &b,
        );
        assert_eq!(p.outcome, Outcome::Decided);
    }
}
