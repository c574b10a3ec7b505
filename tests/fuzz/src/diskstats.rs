//! `diskstats` target: the disk collector's `/proc/diskstats` parser, its whole-disk name
//! heuristic, and the counter-wrap arithmetic applied to parsed counters
//! (agent/sampler/src/collector/{disk,mod}.rs).
//!
//! Properties: parsed device names are non-empty; `counter_delta` of a counter that did not go
//! backwards is the plain difference, and one that went backwards from a 32-bit value wraps.
use loadstar_sampler::collector::counter_delta;
use loadstar_sampler::collector::disk::{looks_like_whole_disk, parse_diskstats};

/// One input.
pub fn fuzz(data: &[u8]) {
    let text = crate::text(data);
    if let Ok(lines) = parse_diskstats(&text) {
        let mut prev: Option<u64> = None;
        for l in &lines {
            assert!(!l.name.is_empty());
            let _ = looks_like_whole_disk(l.name);
            for cur in [
                l.reads,
                l.sectors_read,
                l.writes,
                l.sectors_written,
                l.io_ticks_ms,
            ] {
                if let Some(p) = prev {
                    match counter_delta(p, cur) {
                        Some(d) if cur >= p => assert_eq!(d, cur - p),
                        Some(d) => {
                            assert!(p <= u64::from(u32::MAX) && d <= u64::from(u32::MAX) + 1)
                        }
                        None => assert!(cur < p && p > u64::from(u32::MAX)),
                    }
                }
                prev = Some(cur);
            }
        }
    }
    for line in text.lines() {
        let _ = looks_like_whole_disk(line);
    }
}
