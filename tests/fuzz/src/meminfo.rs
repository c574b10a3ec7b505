//! `meminfo` target: the memory collector's `/proc/meminfo` parser
//! (agent/sampler/src/collector/memory.rs).
//!
//! Properties: available never exceeds total (so `used_bytes` cannot underflow) and the used
//! ratio is in [0, 1].
use loadstar_sampler::collector::memory::parse_meminfo;

/// One input.
pub fn fuzz(data: &[u8]) {
    let text = crate::text(data);
    if let Ok(m) = parse_meminfo(&text) {
        assert!(m.available_bytes <= m.total_bytes, "{m:?}");
        assert_eq!(m.used_bytes() + m.available_bytes, m.total_bytes);
        if let Some(r) = m.used_ratio() {
            crate::assert_ratio("used ratio", r);
        }
    }
}
