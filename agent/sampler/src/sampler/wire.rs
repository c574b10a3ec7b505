//! Fits a finished report to the scorer's wire limits ([`loadstar_proto::limits`]) before it
//! leaves: the scorer refuses a whole report for one value out of bounds, so a node with
//! more devices or pods than the limits, a GPU sensor reading garbage or a firmware's
//! impossible CPU frequency would otherwise go stale as long as the condition lasts. What
//! is cut or dropped here is named in one `limits` collector error per kind, so operators
//! see it in `GetNode` and the agent's log; what the node can really have is untouched.
use loadstar_proto::limits::{self, capacity as cap, rates};
use loadstar_proto::pb;

/// The collector name under which the cuts are reported.
pub(super) const LIMITS: &str = "limits";

/// Cuts `v` to `max` entries, noting how many were left out.
fn cut<T>(v: &mut Vec<T>, max: usize, what: &str, notes: &mut Vec<String>) {
    if v.len() > max {
        notes.push(format!(
            "{} {what}, only the first {max} reported (the scorer's limit)",
            v.len()
        ));
        v.truncate(max);
    }
}

/// Caps each of `values` at `max`, noting how many were over.
fn cap_at<'a>(
    values: impl Iterator<Item = &'a mut u64>,
    max: u64,
    what: &str,
    notes: &mut Vec<String>,
) {
    let over = values.filter(|v| **v > max).map(|v| *v = max).count();
    if over > 0 {
        notes.push(format!("{over} {what} over {max}: sent as {max}"));
    }
}

/// Whether `v` is finite and within `[lo, hi]`.
fn within(v: f64, lo: f64, hi: f64) -> bool {
    v.is_finite() && (lo..=hi).contains(&v)
}

/// Fits `report` to the wire limits in place; returns what it changed, one line per kind.
pub(super) fn fit(report: &mut pb::NodeReport) -> Vec<String> {
    let mut notes = Vec::new();
    cut(&mut report.nics, limits::MAX_NICS, "NICs", &mut notes);
    cut(&mut report.disks, limits::MAX_DISKS, "disks", &mut notes);
    cut(&mut report.gpus, limits::MAX_GPUS, "GPUs", &mut notes);
    cut(&mut report.pods, limits::MAX_PODS, "pods", &mut notes);
    let cpus = report.capacity.as_ref().map_or(0, |c| c.logical_cpus);
    if let Some(c) = report.capacity.as_mut() {
        c.nics.truncate(limits::MAX_NICS);
        c.disks.truncate(limits::MAX_DISKS);
        c.gpus.truncate(limits::MAX_GPUS);
        if !within(c.cpu_max_frequency_hz, 0.0, cap::MAX_CPU_FREQUENCY_HZ) {
            notes.push(format!(
                "CPU frequency {:.0} MHz is not plausible: sent as unknown",
                c.cpu_max_frequency_hz / 1e6
            ));
            c.cpu_max_frequency_hz = 0.0;
        }
        cap_at(
            c.nics.iter_mut().map(|n| &mut n.speed_bits_per_second),
            cap::MAX_NIC_BITS_PER_SECOND,
            "NIC speed(s), bit/s,",
            &mut notes,
        );
        cap_at(
            c.disks.iter_mut().map(|d| &mut d.max_bytes_per_second),
            cap::MAX_DISK_BYTES_PER_SECOND,
            "disk maximum(s), B/s,",
            &mut notes,
        );
        for g in &mut c.gpus {
            g.memory_bytes = g.memory_bytes.min(cap::MAX_GPU_MEMORY_BYTES);
        }
    }
    let (lo, hi) = rates::GPU_TEMPERATURE_CELSIUS;
    let mut hot = Vec::new();
    let mut power = Vec::new();
    for g in &mut report.gpus {
        if !within(g.temperature_celsius, lo, hi) {
            hot.push(format!("GPU {} {} °C", g.index, g.temperature_celsius));
            g.temperature_celsius = 0.0;
        }
        if !within(g.power_watts, 0.0, rates::MAX_GPU_POWER_WATTS) {
            power.push(format!("GPU {} {} W", g.index, g.power_watts));
            g.power_watts = 0.0;
        }
    }
    if !hot.is_empty() {
        notes.push(format!(
            "temperature outside [{lo}, {hi}] °C, sent as 0: {}",
            listed(&hot)
        ));
    }
    if !power.is_empty() {
        notes.push(format!(
            "power outside [0, {}] W, sent as 0: {}",
            rates::MAX_GPU_POWER_WATTS,
            listed(&power)
        ));
    }
    // A pod cannot use more cores than the node has: what reads more is timing jitter
    // between two reads of its cgroup (and what is not a number is no reading).
    if cpus > 0 {
        for p in &mut report.pods {
            p.cpu_cores = if p.cpu_cores.is_finite() {
                p.cpu_cores.clamp(0.0, f64::from(cpus))
            } else {
                0.0
            };
        }
    }
    notes
}

/// The first three of `items`, then how many more.
fn listed(items: &[String]) -> String {
    let mut out = items.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > 3 {
        out.push_str(&format!(" and {} more", items.len() - 3));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> pb::NodeReport {
        pb::NodeReport {
            capacity: Some(pb::NodeCapacity {
                logical_cpus: 4,
                cpu_max_frequency_hz: 3e9,
                memory_bytes: 1 << 34,
                nics: (0..100)
                    .map(|i| pb::NicCapacity {
                        name: format!("eth{i}"),
                        speed_bits_per_second: 25_000_000_000,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            nics: (0..100)
                .map(|i| pb::NicUsage {
                    name: format!("eth{i}"),
                    ..Default::default()
                })
                .collect(),
            gpus: vec![pb::GpuUsage {
                index: 0,
                temperature_celsius: 65.0,
                power_watts: 300.0,
                ..Default::default()
            }],
            pods: vec![pb::PodUsage {
                pod_uid: "u".into(),
                cpu_cores: 4.3,
                memory_working_set_bytes: 1,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_node_over_the_limits_is_cut_to_them_and_says_so() {
        let mut r = report();
        let notes = fit(&mut r);
        assert_eq!(r.nics.len(), limits::MAX_NICS);
        assert_eq!(
            r.capacity.as_ref().map(|c| c.nics.len()),
            Some(limits::MAX_NICS)
        );
        assert_eq!(
            notes,
            ["100 NICs, only the first 64 reported (the scorer's limit)"]
        );
        assert_eq!(r.pods[0].cpu_cores, 4.0, "jitter over the node's cores");
        assert_eq!(r.gpus[0].temperature_celsius, 65.0, "sane values untouched");
    }

    #[test]
    fn garbage_readings_are_sent_as_unknown_not_as_a_refused_report() {
        let mut r = report();
        r.nics.truncate(1);
        if let Some(c) = r.capacity.as_mut() {
            c.nics.truncate(1);
            c.cpu_max_frequency_hz = 1e12;
        }
        r.gpus[0].temperature_celsius = 255.0;
        r.gpus[0].power_watts = f64::NAN;
        let notes = fit(&mut r);
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(
            notes[0].starts_with("CPU frequency 1000000 MHz"),
            "{notes:?}"
        );
        assert_eq!(
            notes[1..],
            [
                "temperature outside [-50, 200] °C, sent as 0: GPU 0 255 °C",
                "power outside [0, 10000] W, sent as 0: GPU 0 NaN W"
            ]
        );
        assert_eq!(
            r.capacity.as_ref().map(|c| c.cpu_max_frequency_hz),
            Some(0.0)
        );
        assert_eq!(
            (r.gpus[0].temperature_celsius, r.gpus[0].power_watts),
            (0.0, 0.0)
        );
    }

    #[test]
    fn many_bad_boards_make_one_note_per_kind() {
        let mut r = report();
        r.nics.clear();
        if let Some(c) = r.capacity.as_mut() {
            c.nics.clear();
        }
        r.gpus = (0..64)
            .map(|index| pb::GpuUsage {
                index,
                temperature_celsius: 255.0,
                ..Default::default()
            })
            .collect();
        r.pods[0].cpu_cores = f64::NAN;
        let notes = fit(&mut r);
        assert_eq!(
            notes,
            [
                "temperature outside [-50, 200] °C, sent as 0: GPU 0 255 °C, GPU 1 255 °C, \
              GPU 2 255 °C and 61 more"
            ]
        );
        assert_eq!(r.pods[0].cpu_cores, 0.0);
    }

    #[test]
    fn impossible_speeds_are_capped_at_the_bound() {
        let mut r = report();
        r.nics.truncate(2);
        if let Some(c) = r.capacity.as_mut() {
            c.nics.truncate(2);
            c.nics[1].speed_bits_per_second = u64::MAX;
            c.disks.push(pb::DiskCapacity {
                name: "sda".into(),
                max_bytes_per_second: 3_000_000_000_000,
                ..Default::default()
            });
        }
        let notes = fit(&mut r);
        let c = r.capacity.as_ref().expect("capacity");
        assert_eq!(c.nics[0].speed_bits_per_second, 25_000_000_000, "untouched");
        assert_eq!(
            c.nics[1].speed_bits_per_second,
            cap::MAX_NIC_BITS_PER_SECOND
        );
        assert_eq!(
            c.disks[0].max_bytes_per_second,
            cap::MAX_DISK_BYTES_PER_SECOND
        );
        assert_eq!(
            notes,
            [
                "1 NIC speed(s), bit/s, over 10000000000000: sent as 10000000000000",
                "1 disk maximum(s), B/s, over 1000000000000: sent as 1000000000000"
            ]
        );
    }

    #[test]
    fn a_healthy_report_is_left_alone() {
        let mut r = report();
        r.nics.truncate(2);
        if let Some(c) = r.capacity.as_mut() {
            c.nics.truncate(2);
        }
        r.pods[0].cpu_cores = 1.5;
        let before = r.clone();
        assert!(fit(&mut r).is_empty());
        assert_eq!(r, before);
    }
}
