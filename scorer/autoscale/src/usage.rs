//! Each pod's recent usage as the agents measured it (their per-pod cgroup readings, one
//! sample per report), kept for a bounded time so the StepScaler can average a pod over its
//! poll period and `metrics.k8s.io` can serve a short window. Pure: the caller feeds samples
//! with its clock and reads windows at the same clock.
use std::collections::{HashMap, VecDeque};

/// How much the book keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BookLimits {
    /// Samples older than this are dropped, seconds (default 120: four paper poll periods).
    pub retain_s: f64,
    /// Most pods tracked; a new pod beyond it is not recorded (default 200 000).
    pub max_pods: usize,
    /// Most samples per pod (default 600: five per second over the default retention).
    pub max_samples: usize,
}

impl Default for BookLimits {
    fn default() -> Self {
        BookLimits {
            retain_s: 120.0,
            max_pods: 200_000,
            max_samples: 600,
        }
    }
}

/// One reading of a pod. Stored compactly (16 bytes): f32 keeps CPU to 10⁻⁷ of a core's
/// magnitude and memory to 1 part in 10⁷, far below what scaling decisions resolve.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    at_s: f64,
    cpu_cores: f32,
    memory_bytes: f32,
}

#[derive(Debug, Default)]
struct Series {
    node: String,
    /// Time between the node's reports, seconds (its agent's, or the scorer-paced one).
    interval_s: f32,
    samples: VecDeque<Sample>,
}

/// One reading of a pod, as the caller hands it in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// When, on the caller's clock, seconds.
    pub at_s: f64,
    /// CPU, cores.
    pub cpu_cores: f64,
    /// Memory working set, bytes.
    pub memory_bytes: f64,
}

impl Reading {
    /// A reading at `at_s`.
    pub fn new(at_s: f64, cpu_cores: f64, memory_bytes: f64) -> Reading {
        Reading {
            at_s,
            cpu_cores,
            memory_bytes,
        }
    }
}

/// A pod's usage averaged over a window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowUsage {
    /// Mean CPU, cores.
    pub cpu_cores: f64,
    /// Mean memory working set, bytes.
    pub memory_bytes: f64,
    /// Samples averaged.
    pub samples: usize,
    /// Time of the oldest and newest sample averaged (the caller's clock).
    pub first_s: f64,
    /// Time of the newest sample averaged.
    pub last_s: f64,
    /// The node that reported the newest sample.
    pub node: String,
    /// Time between that node's reports, seconds: a reader judges staleness against it.
    pub interval_s: f64,
}

/// Per-pod usage, keyed by pod UID.
#[derive(Debug, Default)]
pub struct PodUsageBook {
    limits: BookLimits,
    pods: HashMap<String, Series>,
    refused: u64,
}

impl PodUsageBook {
    /// An empty book.
    pub fn new(limits: BookLimits) -> PodUsageBook {
        PodUsageBook {
            limits,
            pods: HashMap::new(),
            refused: 0,
        }
    }

    /// The limits.
    pub fn limits(&self) -> &BookLimits {
        &self.limits
    }

    /// Records pod `uid`'s reading from `node` (reporting every `interval_s`) at `at_s`. A
    /// reading not newer than the pod's last is ignored (a replayed report); a new pod beyond
    /// `max_pods` is refused and counted. Returns whether it was recorded.
    pub fn record(&mut self, node: &str, interval_s: f64, uid: &str, reading: Reading) -> bool {
        let Reading {
            at_s,
            cpu_cores,
            memory_bytes,
        } = reading;
        if !(at_s.is_finite() && cpu_cores.is_finite() && memory_bytes.is_finite()) {
            return false;
        }
        if !self.pods.contains_key(uid) && self.pods.len() >= self.limits.max_pods {
            self.refused += 1;
            return false;
        }
        let series = self.pods.entry(uid.to_string()).or_default();
        if series.samples.back().is_some_and(|s| s.at_s >= at_s) {
            return false;
        }
        if series.node != node {
            series.node = node.to_string();
        }
        series.interval_s = interval_s.max(0.0) as f32;
        if series.samples.len() >= self.limits.max_samples.max(1) {
            series.samples.pop_front();
        }
        series.samples.push_back(Sample {
            at_s,
            cpu_cores: cpu_cores.max(0.0) as f32,
            memory_bytes: memory_bytes.max(0.0) as f32,
        });
        true
    }

    /// Drops samples older than the retention at `now_s`, and pods left with none. Returns
    /// how many pods were dropped.
    pub fn prune(&mut self, now_s: f64) -> usize {
        let oldest = now_s - self.limits.retain_s;
        let before = self.pods.len();
        self.pods.retain(|_, s| {
            while s.samples.front().is_some_and(|x| x.at_s < oldest) {
                s.samples.pop_front();
            }
            !s.samples.is_empty()
        });
        before - self.pods.len()
    }

    /// Pod `uid`'s mean usage over the samples in `(now_s − span_s, now_s]`; `None` when it
    /// has none there.
    pub fn window(&self, uid: &str, now_s: f64, span_s: f64) -> Option<WindowUsage> {
        let series = self.pods.get(uid)?;
        let from = now_s - span_s;
        let mut n = 0usize;
        let (mut cpu, mut mem) = (0.0f64, 0.0f64);
        let (mut first, mut last) = (f64::INFINITY, f64::NEG_INFINITY);
        for s in series.samples.iter().rev() {
            if s.at_s > now_s {
                continue;
            }
            if s.at_s <= from {
                break;
            }
            n += 1;
            cpu += f64::from(s.cpu_cores);
            mem += f64::from(s.memory_bytes);
            first = first.min(s.at_s);
            last = last.max(s.at_s);
        }
        (n > 0).then(|| WindowUsage {
            cpu_cores: cpu / n as f64,
            memory_bytes: mem / n as f64,
            samples: n,
            first_s: first,
            last_s: last,
            node: series.node.clone(),
            interval_s: f64::from(series.interval_s),
        })
    }

    /// UIDs of the pods with at least one sample.
    pub fn uids(&self) -> impl Iterator<Item = &str> {
        self.pods.keys().map(String::as_str)
    }

    /// Pods tracked.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Whether no pod is tracked.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// New pods refused because the book was full, since it was created.
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_average_only_their_span() {
        let mut b = PodUsageBook::new(BookLimits::default());
        for t in 0..60 {
            let cpu = if t < 30 { 0.2 } else { 0.8 };
            assert!(b.record(
                "n1",
                1.0,
                "u",
                Reading::new(f64::from(t), cpu, 100.0 * f64::from(t))
            ));
        }
        // The last 30 s (t = 30..59) all ran at 0.8.
        let w = b.window("u", 59.0, 30.0).expect("samples");
        assert_eq!(w.samples, 30);
        assert!((w.cpu_cores - 0.8).abs() < 1e-6, "{w:?}");
        assert_eq!((w.first_s, w.last_s), (30.0, 59.0));
        assert!((w.memory_bytes - 100.0 * 44.5).abs() < 1e-3);
        assert_eq!(w.node, "n1");
        // The whole minute averages both halves.
        let w = b.window("u", 59.0, 60.0).expect("samples");
        assert!((w.cpu_cores - 0.5).abs() < 1e-6);
        // Nothing in the window: None, not zero.
        assert!(b.window("u", 200.0, 30.0).is_none());
        assert!(b.window("other", 59.0, 30.0).is_none());
    }

    #[test]
    fn replays_and_garbage_are_ignored() {
        let mut b = PodUsageBook::new(BookLimits::default());
        assert!(b.record("n", 1.0, "u", Reading::new(10.0, 1.0, 1.0)));
        assert!(
            !b.record("n", 1.0, "u", Reading::new(10.0, 9.0, 9.0)),
            "same time"
        );
        assert!(
            !b.record("n", 1.0, "u", Reading::new(5.0, 9.0, 9.0)),
            "older"
        );
        assert!(!b.record("n", 1.0, "u", Reading::new(11.0, f64::NAN, 1.0)));
        assert!(!b.record("n", 1.0, "u", Reading::new(f64::INFINITY, 1.0, 1.0)));
        assert_eq!(b.window("u", 11.0, 30.0).expect("one").samples, 1);
    }

    #[test]
    fn bounded_in_pods_samples_and_time() {
        let mut b = PodUsageBook::new(BookLimits {
            retain_s: 10.0,
            max_pods: 2,
            max_samples: 5,
        });
        assert!(b.record("n", 1.0, "a", Reading::new(0.0, 1.0, 1.0)));
        assert!(b.record("n", 1.0, "b", Reading::new(0.0, 1.0, 1.0)));
        assert!(!b.record("n", 1.0, "c", Reading::new(0.0, 1.0, 1.0)));
        assert_eq!(b.refused(), 1);
        for t in 1..20 {
            b.record("n", 1.0, "a", Reading::new(f64::from(t), 1.0, 1.0));
        }
        assert_eq!(b.window("a", 19.0, 100.0).expect("a").samples, 5);
        // At t = 19 b's only sample (t = 0) is past the 10 s retention.
        assert_eq!(b.prune(19.0), 1);
        assert_eq!(b.len(), 1);
        assert!(
            b.record("n", 1.0, "c", Reading::new(19.0, 1.0, 1.0)),
            "room again"
        );
    }

    #[test]
    fn a_pod_moving_node_follows_the_newest_report() {
        let mut b = PodUsageBook::new(BookLimits::default());
        b.record("n1", 1.0, "u", Reading::new(1.0, 1.0, 1.0));
        b.record("n2", 1.0, "u", Reading::new(2.0, 1.0, 1.0));
        assert_eq!(b.window("u", 2.0, 10.0).expect("u").node, "n2");
    }
}
