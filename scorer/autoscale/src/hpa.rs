//! Kubernetes 1.20's HorizontalPodAutoscaler for a resource-utilisation metric, re-implemented
//! from `pkg/controller/podautoscaler` (`replica_calculator.go`: `GetResourceReplicas` and
//! `groupPods`; `horizontal.go`: `stabilizeRecommendation` and
//! `convertDesiredReplicasWithRules`, the behaviour-less path) so the simulator can compare the
//! step-tolerance algorithm with the autoscaler users have. Pure, like [`crate::step`].
use std::collections::VecDeque;

use crate::step::Decision;

/// The controller's settings; [`HpaConfig::default`] is kube-controller-manager 1.20's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HpaConfig {
    /// Target utilisation of the pods' requests, as a ratio.
    pub target: f64,
    /// `--horizontal-pod-autoscaler-tolerance` (0.1).
    pub tolerance: f64,
    /// `minReplicas`.
    pub min_replicas: u32,
    /// `maxReplicas`.
    pub max_replicas: u32,
    /// `--horizontal-pod-autoscaler-downscale-stabilization` (5 min), seconds.
    pub downscale_stabilisation_s: f64,
    /// `--horizontal-pod-autoscaler-cpu-initialization-period` (5 min), seconds.
    pub cpu_initialization_period_s: f64,
    /// `--horizontal-pod-autoscaler-initial-readiness-delay` (30 s), seconds.
    pub initial_readiness_delay_s: f64,
}

impl Default for HpaConfig {
    fn default() -> Self {
        HpaConfig {
            target: 0.6,
            tolerance: 0.1,
            min_replicas: 2,
            max_replicas: 100,
            downscale_stabilisation_s: 300.0,
            cpu_initialization_period_s: 300.0,
            initial_readiness_delay_s: 30.0,
        }
    }
}

/// One pod as the HPA sees it at a sync.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HpaPod {
    /// Its utilisation of its request in the metrics API's last window (`None`: no metric).
    pub utilisation: Option<f64>,
    /// Phase `Pending` (not started).
    pub pending: bool,
    /// Seconds since the pod started.
    pub age_s: f64,
    /// Ready now.
    pub ready: bool,
    /// Seconds since its readiness last changed.
    pub since_transition_s: f64,
    /// Seconds from the start of the metric's window to now (its window plus its age).
    pub metric_span_s: f64,
}

/// The CPU rule of `groupPods` for a pod with a metric: unready (ignored) or not.
fn unready(p: &HpaPod, c: &HpaConfig) -> bool {
    if p.age_s < c.cpu_initialization_period_s {
        // Still initialising: ignored if unready, or if its metric's window began before
        // the last readiness transition.
        !p.ready || p.metric_span_s > p.since_transition_s
    } else {
        // Ignored only if it is unready and has never been ready.
        !p.ready && p.age_s - p.since_transition_s < c.initial_readiness_delay_s
    }
}

/// `GetResourceReplicas`: the replica count the metric asks for, or `None` when no ready pod
/// has a metric (the controller then keeps the current count).
pub fn replicas_for(current: u32, pods: &[HpaPod], c: &HpaConfig) -> Option<u32> {
    // (utilisation, counted in the ratio) per pod: requests are equal, so the ratio of sums
    // is the mean.
    let mut metrics: Vec<f64> = Vec::new();
    let (mut ready, mut unready_pods, mut missing) = (0usize, 0usize, 0usize);
    for p in pods {
        if p.pending {
            unready_pods += 1;
            continue;
        }
        let Some(u) = p.utilisation else {
            missing += 1;
            continue;
        };
        if unready(p, c) {
            unready_pods += 1;
            continue;
        }
        ready += 1;
        metrics.push(u);
    }
    if metrics.is_empty() {
        return None;
    }
    // Upstream computes the utilisation as a whole percent (integer division) and divides
    // it by the target percent.
    let target_pct = (c.target * 100.0).round();
    let ratio_of = |xs: &[f64]| {
        let pct = (xs.iter().sum::<f64>() / xs.len() as f64 * 100.0 + 1e-9).floor();
        pct / target_pct
    };
    let ratio = ratio_of(&metrics);
    let rebalance_ignored = unready_pods > 0 && ratio > 1.0;
    if !rebalance_ignored && missing == 0 {
        if (1.0 - ratio).abs() <= c.tolerance {
            return Some(current);
        }
        return Some((ratio * ready as f64).ceil() as u32);
    }
    if missing > 0 {
        // Scale-down: missing pods at 100 % of their request; scale-up: at 0.
        let fill = if ratio < 1.0 { 1.0 } else { 0.0 };
        if ratio != 1.0 {
            metrics.extend(std::iter::repeat_n(fill, missing));
        }
    }
    if rebalance_ignored {
        metrics.extend(std::iter::repeat_n(0.0, unready_pods));
    }
    let new_ratio = ratio_of(&metrics);
    if (1.0 - new_ratio).abs() <= c.tolerance
        || (ratio < 1.0 && new_ratio > 1.0)
        || (ratio > 1.0 && new_ratio < 1.0)
    {
        return Some(current);
    }
    let n = (new_ratio * metrics.len() as f64).ceil() as u32;
    if (new_ratio < 1.0 && n > current) || (new_ratio > 1.0 && n < current) {
        return Some(current);
    }
    Some(n)
}

/// The HPA controller for one target: its recent recommendations.
#[derive(Debug, Clone, PartialEq)]
pub struct Hpa {
    config: HpaConfig,
    recommendations: VecDeque<(f64, u32)>,
}

impl Hpa {
    /// A controller with `config`.
    pub fn new(config: HpaConfig) -> Hpa {
        Hpa {
            config,
            recommendations: VecDeque::new(),
        }
    }

    /// `stabilizeRecommendation`: the highest recommendation of the window, the current one
    /// included; the current one replaces an expired sample, or is appended.
    fn stabilise(&mut self, now_s: f64, recommendation: u32) -> u32 {
        let cutoff = now_s - self.config.downscale_stabilisation_s;
        let mut max = recommendation;
        let mut old = None;
        for (i, (t, r)) in self.recommendations.iter().enumerate() {
            if *t < cutoff {
                old = Some(i);
            } else if *r > max {
                max = *r;
            }
        }
        match old {
            Some(i) => self.recommendations[i] = (now_s, recommendation),
            None => self.recommendations.push_back((now_s, recommendation)),
        }
        max
    }

    /// One sync at `now_s`: the replica count to set.
    pub fn decide(&mut self, now_s: f64, current: u32, pods: &[HpaPod]) -> Decision {
        let c = self.config;
        if current > c.max_replicas || current < c.min_replicas {
            let desired = current.clamp(c.min_replicas, c.max_replicas);
            return Decision {
                current,
                desired,
                reason: "current replicas outside [min, max]".into(),
            };
        }
        let Some(proposed) = replicas_for(current, pods, &c) else {
            return Decision {
                current,
                desired: current,
                reason: "did not receive metrics for any ready pods".into(),
            };
        };
        let stabilised = self.stabilise(now_s, proposed);
        // convertDesiredReplicasWithRules: at most max(2 × current, 4), within [min, max].
        let scale_up_limit = (2 * current).max(4);
        let upper = c.max_replicas.min(scale_up_limit);
        let desired = if stabilised < c.min_replicas {
            c.min_replicas
        } else {
            stabilised.min(upper)
        };
        let reason = if desired != stabilised {
            format!("{stabilised} limited to {desired}")
        } else if stabilised != proposed {
            format!(
                "{proposed} stabilised to {stabilised} (the highest recommendation of the window)"
            )
        } else {
            format!("metric asks for {proposed}")
        };
        Decision {
            current,
            desired,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(u: f64) -> HpaPod {
        HpaPod {
            utilisation: Some(u),
            pending: false,
            age_s: 3600.0,
            ready: true,
            since_transition_s: 3600.0,
            metric_span_s: 60.0,
        }
    }

    #[test]
    fn utilisation_is_a_whole_percent_as_upstream() {
        let c = HpaConfig::default();
        // 72.09 % reads as 72 %: ratio 1.2 → ceil(12.0) = 12 for ten pods (the unrounded
        // 1.2015 would ask for 13).
        assert_eq!(replicas_for(10, &[ready(0.7209); 10], &c), Some(12));
        // 65.9 % reads as 65 %: ratio 1.083, within the tolerance.
        assert_eq!(replicas_for(4, &[ready(0.659); 4], &c), Some(4));
    }

    #[test]
    fn the_replica_formula_and_its_tolerance() {
        let c = HpaConfig::default();
        // 3 pods at 90 % against 60 %: ceil(1.5 × 3) = 5.
        assert_eq!(replicas_for(3, &[ready(0.9); 3], &c), Some(5));
        // Within 10 % of the target: unchanged.
        assert_eq!(replicas_for(3, &[ready(0.65); 3], &c), Some(3));
        // 4 pods at 27 %: ceil(0.45 × 4) = 2.
        assert_eq!(replicas_for(4, &[ready(0.27); 4], &c), Some(2));
        assert_eq!(replicas_for(4, &[], &c), None);
    }

    #[test]
    fn unready_and_missing_pods_follow_upstream() {
        let c = HpaConfig::default();
        let starting = HpaPod {
            utilisation: Some(0.0),
            ready: false,
            age_s: 20.0,
            since_transition_s: 20.0,
            ..ready(0.0)
        };
        // Scale-up with an unready pod: it counts as 0 %: (0.9 + 0.9 + 0) / 3 = 0.6 → hold.
        assert_eq!(
            replicas_for(3, &[ready(0.9), ready(0.9), starting], &c),
            Some(3)
        );
        // With more load the unready pod dampens the scale-up: (1.35 + 1.35 + 0) / 3 = 0.9,
        // ratio 1.5 → ceil(4.5) = 5 (the two ready pods alone would ask for ceil(2.25 × 2) = 5
        // too, but from a ratio of 2.25).
        assert_eq!(
            replicas_for(3, &[ready(1.35), ready(1.35), starting], &c),
            Some(5)
        );
        // Scale-down with a pod missing its metric: it counts as 100 % of its request:
        // (4 × 0.12 + 1) / 5 = 0.296, ratio 0.49 → ceil(2.47) = 3 (not the 1 that the four
        // measured pods alone would give).
        let missing = HpaPod {
            utilisation: None,
            ..ready(0.0)
        };
        let mut five = vec![ready(0.12); 4];
        five.push(missing);
        assert_eq!(replicas_for(5, &five, &c), Some(3));
        // A ready pod whose metric window began before it became ready is still ignored
        // while initialising.
        let fresh = HpaPod {
            utilisation: Some(0.9),
            ready: true,
            age_s: 60.0,
            since_transition_s: 30.0,
            metric_span_s: 60.0,
            pending: false,
        };
        assert!(unready(&fresh, &c));
        assert!(!unready(
            &HpaPod {
                since_transition_s: 90.0,
                age_s: 120.0,
                ..fresh
            },
            &c
        ));
    }

    #[test]
    fn downscale_waits_for_the_stabilisation_window_and_upscale_is_limited() {
        let mut h = Hpa::new(HpaConfig::default());
        // 2 pods at 300 %: the metric asks for 10; at most max(2 × 2, 4) = 4 at once.
        let d = h.decide(0.0, 2, &[ready(3.0); 2]);
        assert_eq!(d.desired, 4, "{d:?}");
        // Load falls and the metric asks for 2, but 10 was recommended within 5 min: the
        // window's highest recommendation still applies, up to the limit (upstream scales
        // *up* here).
        let d = h.decide(60.0, 4, &[ready(0.1); 4]);
        assert_eq!(d.desired, 8, "{d:?}");
        assert!(d.reason.contains("limited"), "{d:?}");
        let d = h.decide(75.0, 8, &[ready(0.1); 8]);
        assert_eq!(d.desired, 10, "{d:?}");
        assert!(d.reason.contains("stabilised"), "{d:?}");
        // Once the window has passed the first recommendation, the low ones win (min 2).
        let mut t = 75.0;
        let mut d = d;
        while t < 400.0 {
            t += 15.0;
            d = h.decide(t, 10, &[ready(0.1); 10]);
        }
        assert_eq!(d.desired, 2, "{d:?}");
    }
}
