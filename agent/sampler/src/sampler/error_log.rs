//! Collector failures, by collector name: listed in every report they occur in, but logged
//! only when they start, change, recur after a while, or stop — a collector that fails every
//! second must not flood the log, and the other collectors carry on regardless.
use std::collections::HashMap;

use loadstar_proto::{limits, pb};
use tracing::{info, warn};

/// A collector error that repeats unchanged is logged again after this many samples.
const ERROR_RELOG_SAMPLES: u32 = 300;

/// The last error of each failing collector and how often it repeated since it was logged.
#[derive(Debug, Default)]
pub(super) struct ErrorLog {
    failing: HashMap<&'static str, (String, u32)>,
}

impl ErrorLog {
    /// Notes one sample of `collector`: its `errors` (none when it succeeded) go into `out`
    /// as `collector_errors` entries, and the first of them is logged (rate-limited).
    pub(super) fn note(
        &mut self,
        collector: &'static str,
        errors: impl IntoIterator<Item = String>,
        out: &mut Vec<pb::CollectorError>,
    ) {
        let first = out.len();
        // The scorer refuses longer text (and more entries): cut here, so one verbose
        // kernel error never costs the whole report.
        let room = limits::MAX_COLLECTOR_ERRORS.saturating_sub(first);
        out.extend(
            errors
                .into_iter()
                .take(room)
                .map(|message| pb::CollectorError {
                    collector: collector.to_string(),
                    message: loadstar_common::text::truncate(&message, limits::MAX_TEXT_BYTES),
                }),
        );
        self.record(collector, out.get(first).map(|e| e.message.as_str()));
    }

    /// Logs `collector`'s error when it starts, changes, or recurs for
    /// [`ERROR_RELOG_SAMPLES`] samples, and its recovery.
    fn record(&mut self, collector: &'static str, message: Option<&str>) {
        match (message, self.failing.get_mut(collector)) {
            (None, None) => {}
            (None, Some(_)) => {
                info!(collector, "collector recovered");
                self.failing.remove(collector);
            }
            (Some(m), Some((prev, n))) if prev == m => {
                *n += 1;
                if n.is_multiple_of(ERROR_RELOG_SAMPLES) {
                    warn!(
                        collector,
                        error = m,
                        repeats = *n,
                        "collector still failing"
                    );
                }
            }
            (Some(m), _) => {
                warn!(collector, error = m, "collector failed");
                self.failing.insert(collector, (m.to_string(), 0));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_listed_under_their_collector_and_tracked_by_name() {
        let mut log = ErrorLog::default();
        let mut out = Vec::new();
        log.note(
            "disk",
            Some("parsing /proc/diskstats".to_string()),
            &mut out,
        );
        log.note("cpu", None, &mut out);
        log.note("cgroup", vec!["pod a".into(), "pod b".into()], &mut out);
        let listed: Vec<(&str, &str)> = out
            .iter()
            .map(|e| (e.collector.as_str(), e.message.as_str()))
            .collect();
        assert_eq!(
            listed,
            vec![
                ("disk", "parsing /proc/diskstats"),
                ("cgroup", "pod a"),
                ("cgroup", "pod b")
            ]
        );
        assert_eq!(log.failing.len(), 2);
        assert_eq!(log.failing["cgroup"], ("pod a".to_string(), 0));
        log.note(
            "disk",
            Some("parsing /proc/diskstats".to_string()),
            &mut out,
        );
        assert_eq!(log.failing["disk"].1, 1, "a repeat is counted, not logged");
        log.note("disk", None, &mut out);
        assert!(
            !log.failing.contains_key("disk"),
            "recovery forgets the error"
        );
    }

    #[test]
    fn long_and_numerous_errors_are_cut_to_the_wire_limits() {
        let mut log = ErrorLog::default();
        let mut out = Vec::new();
        let long = "é".repeat(limits::MAX_TEXT_BYTES);
        let many = (0..100).map(|i| format!("{i}: {long}"));
        log.note("cgroup", many, &mut out);
        assert_eq!(out.len(), limits::MAX_COLLECTOR_ERRORS);
        assert!(
            out.iter()
                .all(|e| e.message.len() <= limits::MAX_TEXT_BYTES)
        );
        assert!(out[0].message.starts_with("0: é"));
        assert!(out[0].message.ends_with('…'));
    }
}
