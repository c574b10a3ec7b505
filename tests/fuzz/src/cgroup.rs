//! `cgroup` target: the per-pod cgroup collector's parsers: kubelet pod directory names
//! (systemd and cgroupfs drivers), flat-keyed files (`cpu.stat`, `memory.stat`) and
//! single-value files (`memory.current`, `cpuacct.usage`)
//! (agent/sampler/src/collector/cgroup.rs).
//!
//! Properties: a recognised pod UID is non-empty hex and dashes.
use loadstar_sampler::collector::cgroup::{parse_keyed, parse_single, pod_uid_from_dir};

/// Keys the collector reads.
const KEYS: [&str; 4] = ["usage_usec", "inactive_file", "total_inactive_file", "file"];

/// One input.
pub fn fuzz(data: &[u8]) {
    let text = crate::text(data);
    for line in text.lines() {
        if let Some(uid) = pod_uid_from_dir(line) {
            assert!(
                !uid.is_empty() && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'),
                "{line:?} -> {uid:?}"
            );
        }
    }
    for key in KEYS {
        let _ = parse_keyed(&text, key);
    }
    // The key itself from the input: its first token.
    if let Some(key) = text.split_ascii_whitespace().next() {
        let _ = parse_keyed(&text, key);
    }
    let _ = parse_single(&text);
}
