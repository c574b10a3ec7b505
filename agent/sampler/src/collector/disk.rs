//! Disk I/O collector: per whole disk read/write bytes/s, IOPS and busy ratio from
//! `/proc/diskstats` deltas, and the node's disk utilisation (the busiest disk).
//!
//! Whole disks: devices listed in `<sys>/block/` that have a `device` entry (real hardware,
//! virtio, NVMe namespaces). Partitions are not in `/sys/block`; loop, ram, zram,
//! device-mapper and md devices have no `device` and are stacked on the real disks, so
//! counting them would count the same I/O twice. Without a `<sys>/block` directory a name
//! heuristic is used instead ([`looks_like_whole_disk`]).
//!
//! Busy ratio = Δio_ticks (ms the device had I/O in flight) / Δt — iostat's `%util`.
//! Sectors in diskstats are always 512 bytes, whatever the device's block size.
//!
//! Disk performance (computeS's S(d), `max_bytes_per_second` in the capacity): the operator's
//! `--disk-max-bps` when given (rate source CONFIGURED), else the highest read + write rate
//! observed on that disk since the agent started (OBSERVED; 0 until there is I/O).
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use loadstar_proto::limits::{capacity::MAX_DISK_BYTES_PER_SECOND, rates::MAX_IOPS};

use super::{
    FileError, ParseError, counter_delta, parse_u64, read_into, software_counter_delta, truncate,
};

/// Bytes per diskstats sector.
pub const SECTOR_BYTES: u64 = 512;

/// One device's counters from `/proc/diskstats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskStatLine<'a> {
    /// Device name, e.g. `nvme0n1`.
    pub name: &'a str,
    /// Reads completed.
    pub reads: u64,
    /// Sectors read.
    pub sectors_read: u64,
    /// Writes completed.
    pub writes: u64,
    /// Sectors written.
    pub sectors_written: u64,
    /// Milliseconds spent doing I/O (io_ticks).
    pub io_ticks_ms: u64,
}

/// Parses `/proc/diskstats`: `major minor name` then at least 11 counters (4.18+ kernels
/// add discard and flush fields, which are validated and ignored).
pub fn parse_diskstats(text: &str) -> Result<Vec<DiskStatLine<'_>>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let mut toks = line.split_ascii_whitespace();
        let (Some(major), Some(minor), Some(name)) = (toks.next(), toks.next(), toks.next()) else {
            return Err(ParseError::new(
                n,
                format!("truncated line {:?}", truncate(line.trim())),
            ));
        };
        parse_u64(major, n, "major")?;
        parse_u64(minor, n, "minor")?;
        let mut v = [0u64; 11];
        let mut count = 0;
        for (j, tok) in toks.enumerate() {
            let x = parse_u64(tok, n, name)?;
            if j < 11 {
                v[j] = x;
            }
            count = j + 1;
        }
        if count < 11 {
            return Err(ParseError::new(
                n,
                format!("{name}: {count} counters, expected at least 11"),
            ));
        }
        out.push(DiskStatLine {
            name,
            reads: v[0],
            sectors_read: v[2],
            writes: v[4],
            sectors_written: v[6],
            io_ticks_ms: v[9],
        });
    }
    Ok(out)
}

/// Name heuristic for a whole, non-virtual disk, used when `<sys>/block` is unavailable.
pub fn looks_like_whole_disk(name: &str) -> bool {
    const VIRTUAL: [&str; 8] = ["loop", "ram", "zram", "dm-", "md", "sr", "fd", "nbd"];
    if VIRTUAL.iter().any(|p| name.starts_with(p)) {
        return false;
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = name.strip_prefix("nvme") {
        // nvme<ctrl>n<ns> is whole; nvme<ctrl>n<ns>p<part> is a partition; nvme<c>c<ctl>n<ns>
        // are hidden multipath paths.
        return match rest.split_once('n') {
            Some((ctrl, ns)) => digits(ctrl) && digits(ns),
            None => false,
        };
    }
    if let Some(rest) = name.strip_prefix("mmcblk") {
        return digits(rest);
    }
    for prefix in ["xvd", "sd", "hd", "vd"] {
        if let Some(rest) = name.strip_prefix(prefix) {
            return !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_lowercase());
        }
    }
    true
}

/// Latest state of one whole disk.
#[derive(Debug, Clone, PartialEq)]
pub struct DiskRate {
    /// Device name.
    pub name: String,
    /// Bytes read per second; `None` on the disk's first sample.
    pub read_bytes_per_second: Option<f64>,
    /// Bytes written per second.
    pub write_bytes_per_second: Option<f64>,
    /// Reads completed per second.
    pub read_iops: Option<f64>,
    /// Writes completed per second.
    pub write_iops: Option<f64>,
    /// Δio_ticks / Δt, clamped to [0, 1].
    pub utilization: Option<f64>,
    /// Configured or highest observed read + write rate, bytes per second.
    pub max_bytes_per_second: u64,
    /// True when `max_bytes_per_second` is the configured value.
    pub configured: bool,
}

/// One disk sample.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DiskSample {
    /// Whole disks, sorted by name.
    pub disks: Vec<DiskRate>,
    /// The busiest disk's utilisation; `None` when no disk has a rate yet.
    pub utilization: Option<f64>,
}

const REFRESH_SAMPLES: u32 = 60;

#[derive(Debug)]
struct DiskState {
    whole: bool,
    prev: Option<(DiskCounters, Instant)>,
    observed_max: f64,
    seen: u64,
}

#[derive(Debug, Clone, Copy)]
struct DiskCounters {
    reads: u64,
    sectors_read: u64,
    writes: u64,
    sectors_written: u64,
    io_ticks_ms: u64,
}

/// Reads `<proc>/diskstats` and classifies devices with `<sys>/block`.
#[derive(Debug)]
pub struct DiskCollector {
    path: PathBuf,
    sys_block: PathBuf,
    configured_max: Option<u64>,
    state: HashMap<String, DiskState>,
    epoch: u64,
    since_refresh: u32,
    buf: String,
}

impl DiskCollector {
    /// A collector reading `<proc_root>/diskstats` and `<sys_root>/block`;
    /// `disk_max_bytes_per_second` is the configured performance of every disk, if any.
    pub fn new(proc_root: &Path, sys_root: &Path, disk_max_bytes_per_second: Option<u64>) -> Self {
        DiskCollector {
            path: proc_root.join("diskstats"),
            sys_block: sys_root.join("block"),
            configured_max: disk_max_bytes_per_second,
            state: HashMap::new(),
            epoch: 0,
            since_refresh: 0,
            buf: String::with_capacity(4096),
        }
    }

    fn is_whole(&self, name: &str) -> bool {
        if self.sys_block.is_dir() {
            // Names with '/' (cciss/c0d0) appear in sysfs with '!'.
            let sys_name = name.replace('/', "!");
            self.sys_block
                .join(sys_name)
                .join("device")
                .symlink_metadata()
                .is_ok()
        } else {
            looks_like_whole_disk(name)
        }
    }

    /// Takes one sample at `now`; `Ok(None)` when diskstats does not exist.
    pub fn collect(&mut self, now: Instant) -> Result<Option<DiskSample>, FileError> {
        let path = &self.path;
        if !read_into(path, &mut self.buf).map_err(|e| FileError::read(path, e))? {
            return Ok(None);
        }
        let buf = std::mem::take(&mut self.buf);
        let result = self.process(&buf, now);
        self.buf = buf;
        result.map(Some)
    }

    fn process(&mut self, text: &str, now: Instant) -> Result<DiskSample, FileError> {
        let lines = parse_diskstats(text).map_err(|e| FileError::parse(&self.path, e))?;
        self.epoch += 1;
        let refresh = self.since_refresh >= REFRESH_SAMPLES;
        self.since_refresh = if refresh { 0 } else { self.since_refresh + 1 };
        let mut disks = Vec::new();
        for line in &lines {
            if refresh || !self.state.contains_key(line.name) {
                let whole = self.is_whole(line.name);
                self.state
                    .entry(line.name.to_string())
                    .or_insert(DiskState {
                        whole,
                        prev: None,
                        observed_max: 0.0,
                        seen: 0,
                    })
                    .whole = whole;
            }
            let Some(st) = self.state.get_mut(line.name) else {
                continue;
            };
            st.seen = self.epoch;
            if !st.whole {
                continue;
            }
            let cur = DiskCounters {
                reads: line.reads,
                sectors_read: line.sectors_read,
                writes: line.writes,
                sectors_written: line.sectors_written,
                io_ticks_ms: line.io_ticks_ms,
            };
            let mut rate = DiskRate {
                name: line.name.to_string(),
                read_bytes_per_second: None,
                write_bytes_per_second: None,
                read_iops: None,
                write_iops: None,
                utilization: None,
                max_bytes_per_second: 0,
                configured: self.configured_max.is_some(),
            };
            if let Some((prev, then)) = st.prev {
                let dt = now.saturating_duration_since(then).as_secs_f64();
                let deltas = (
                    software_counter_delta(prev.reads, cur.reads),
                    software_counter_delta(prev.sectors_read, cur.sectors_read),
                    software_counter_delta(prev.writes, cur.writes),
                    software_counter_delta(prev.sectors_written, cur.sectors_written),
                    // Printed as a 32-bit `%u` whatever the kernel: it really wraps.
                    counter_delta(prev.io_ticks_ms, cur.io_ticks_ms),
                );
                let rates = match deltas {
                    (Some(r), Some(sr), Some(w), Some(sw), Some(t)) if dt > 0.0 => Some((
                        r as f64 / dt,
                        sr as f64 * SECTOR_BYTES as f64 / dt,
                        w as f64 / dt,
                        sw as f64 * SECTOR_BYTES as f64 / dt,
                        t,
                    )),
                    _ => None,
                };
                // More than any disk can do (the scorer's bound) is a counter reset that
                // looked like progress: no rate, and the observed maximum stays as it was.
                let plausible = |&(r, rb, w, wb, _): &(f64, f64, f64, f64, u64)| {
                    rb + wb <= MAX_DISK_BYTES_PER_SECOND as f64 && r + w <= MAX_IOPS
                };
                if let Some((r, rb, w, wb, t)) = rates.filter(plausible) {
                    rate.read_bytes_per_second = Some(rb);
                    rate.write_bytes_per_second = Some(wb);
                    rate.read_iops = Some(r);
                    rate.write_iops = Some(w);
                    rate.utilization = super::clamp_ratio(t as f64 / (dt * 1000.0));
                    st.observed_max = st.observed_max.max(rb + wb);
                }
            }
            st.prev = Some((cur, now));
            rate.max_bytes_per_second = self.configured_max.unwrap_or(st.observed_max as u64);
            disks.push(rate);
        }
        let epoch = self.epoch;
        self.state.retain(|_, s| s.seen == epoch);
        disks.sort_by(|a, b| a.name.cmp(&b.name));
        let utilization = disks
            .iter()
            .filter_map(|d| d.utilization)
            .fold(None, |acc: Option<f64>, u| {
                Some(acc.map_or(u, |a| a.max(u)))
            });
        Ok(DiskSample { disks, utilization })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const STATS: &str = " 254       0 vda 65254 12572 5122634 22696 18648 62624 5482016 20269 0 10804 43512 4709 42 377368 530 337 15
 254       1 vda1 100 0 800 5 0 0 0 0 0 5 5
   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0
";

    #[test]
    fn parses_diskstats() {
        let l = parse_diskstats(STATS).expect("valid");
        assert_eq!(l.len(), 3);
        assert_eq!(
            l[0],
            DiskStatLine {
                name: "vda",
                reads: 65254,
                sectors_read: 5122634,
                writes: 18648,
                sectors_written: 5482016,
                io_ticks_ms: 10804
            }
        );
    }

    #[test]
    fn diskstats_errors() {
        assert_eq!(
            parse_diskstats(" 8 0 sda 1 2 3\n")
                .expect_err("truncated")
                .to_string(),
            "line 1: sda: 3 counters, expected at least 11"
        );
        assert_eq!(
            parse_diskstats(" 8 0\n").expect_err("short").to_string(),
            "line 1: truncated line \"8 0\""
        );
        assert!(parse_diskstats(" 8 0 sda 1 2 3 4 5 6 7 8 9 10 -11\n").is_err());
    }

    #[test]
    fn whole_disk_heuristic() {
        for whole in [
            "sda", "vda", "xvdb", "nvme0n1", "nvme12n3", "mmcblk0", "sdaa",
        ] {
            assert!(looks_like_whole_disk(whole), "{whole}");
        }
        for part in [
            "sda1",
            "vda15",
            "nvme0n1p2",
            "nvme0c0n1",
            "mmcblk0p1",
            "loop0",
            "dm-0",
            "md127",
            "zram0",
            "ram0",
            "sr0",
        ] {
            assert!(!looks_like_whole_disk(part), "{part}");
        }
    }

    #[test]
    fn rates_from_deltas_with_heuristic_classification() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = DiskCollector::new(dir.path(), &dir.path().join("nosys"), None);
        let t0 = Instant::now();
        let s = c
            .process(
                " 8 0 sda 10 0 100 0 20 0 200 0 0 1000 0\n 8 1 sda1 1 0 1 0 1 0 1 0 0 1 0\n",
                t0,
            )
            .expect("valid");
        assert_eq!(s.disks.len(), 1);
        assert_eq!(s.utilization, None);
        let t1 = t0 + std::time::Duration::from_secs(2);
        let s = c
            .process(
                " 8 0 sda 30 0 2148 0 60 0 4296 0 0 2500 0\n 8 1 sda1 1 0 1 0 1 0 1 0 0 1 0\n",
                t1,
            )
            .expect("valid");
        let d = &s.disks[0];
        assert_eq!(d.read_bytes_per_second, Some(2048.0 * 512.0 / 2.0));
        assert_eq!(d.write_bytes_per_second, Some(4096.0 * 512.0 / 2.0));
        assert_eq!(d.read_iops, Some(10.0));
        assert_eq!(d.write_iops, Some(20.0));
        assert_eq!(d.utilization, Some(0.75));
        assert_eq!(s.utilization, Some(0.75));
        assert_eq!(d.max_bytes_per_second, 3 * 1024 * 512);
        assert!(!d.configured);
    }

    #[test]
    fn a_disk_recreated_between_samples_gives_no_rate_and_keeps_its_maximum() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = DiskCollector::new(dir.path(), &dir.path().join("nosys"), None);
        let t0 = Instant::now();
        let at = |s: u64| t0 + std::time::Duration::from_secs(s);
        for (line, t) in [
            (" 8 0 sda 10 0 100 0 20 0 200 0 0 1000 0\n", 0),
            (" 8 0 sda 30 0 2148 0 60 0 4296 0 0 2500 0\n", 2),
        ] {
            c.process(line, at(t)).expect("valid");
        }
        // Re-created: every counter starts again from a smaller value.
        let s = c
            .process(" 8 0 sda 2 0 16 0 1 0 8 0 0 10 0\n", at(3))
            .expect("valid");
        let d = &s.disks[0];
        assert_eq!(
            d.read_bytes_per_second, None,
            "a reset is not a 32-bit wrap"
        );
        assert_eq!(
            d.max_bytes_per_second,
            3 * 1024 * 512,
            "the maximum is not poisoned"
        );
        // Rates resume from the new counters.
        let s = c
            .process(" 8 0 sda 4 0 32 0 1 0 8 0 0 20 0\n", at(4))
            .expect("valid");
        assert_eq!(s.disks[0].read_bytes_per_second, Some(16.0 * 512.0));
        // A jump no disk could make is no rate either, and no new maximum.
        let s = c
            .process(" 8 0 sda 5 0 4000000000032 0 1 0 8 0 0 30 0\n", at(5))
            .expect("valid");
        assert_eq!(s.disks[0].read_bytes_per_second, None);
        assert_eq!(s.disks[0].max_bytes_per_second, 3 * 1024 * 512);
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC*") {
            let _ = parse_diskstats(&s);
            let _ = looks_like_whole_disk(&s);
        }

        #[test]
        fn stats_like_input_never_panics(lines in prop::collection::vec("( ?[0-9a-z]{0,8}){0,20}", 0..6)) {
            let _ = parse_diskstats(&lines.join("\n"));
        }
    }
}
