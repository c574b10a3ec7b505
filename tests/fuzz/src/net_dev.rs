//! `net_dev` target: the network collector's parsers of `/proc/net/dev` and
//! `/sys/class/net/<if>/speed`, its `*`/`?` glob matcher and NIC filter, and the rate
//! arithmetic fed by parsed counters (agent/sampler/src/collector/{network,mod}.rs).
//!
//! Properties: parsed interface names are non-empty path components without spaces; a known
//! speed is positive; every string matches itself and `*` as a pattern; utilisations are
//! ratios.
use loadstar_sampler::collector::glob_match;
use loadstar_sampler::collector::network::{
    NicFilter, NicRate, node_utilization, parse_net_dev, parse_speed,
};

/// One input.
pub fn fuzz(data: &[u8]) {
    let text = crate::text(data);
    let mut nics = Vec::new();
    if let Ok(lines) = parse_net_dev(&text) {
        for l in &lines {
            assert!(
                !l.name.is_empty()
                    && l.name != "."
                    && l.name != ".."
                    && !l.name.contains(['/', ' ']),
                "bad interface name {:?}",
                l.name
            );
            let nic = NicRate {
                name: l.name.to_string(),
                speed_bits_per_second: l.tx_bytes ^ l.rx_bytes,
                speed_assumed: false,
                rx_bytes_per_second: Some(l.rx_bytes as f64),
                tx_bytes_per_second: Some(l.tx_bytes as f64),
            };
            crate::assert_ratio("nic utilization", nic.utilization());
            nics.push(nic);
        }
    }
    if let Some(u) = node_utilization(&nics) {
        crate::assert_ratio("node utilization", u);
    }
    if let Ok(Some(bps)) = parse_speed(&text) {
        assert!(bps > 0);
    }
    // Glob patterns: first line the pattern, the rest the name.
    let (pattern, name) = text.split_once('\n').unwrap_or((&text, ""));
    let _ = glob_match(pattern, name);
    assert!(glob_match(name, name), "{name:?} must match itself");
    assert!(glob_match("*", name));
    let filter = NicFilter {
        include: vec![pattern.to_string()],
        exclude: vec![name.to_string()],
    };
    assert!(!filter.selects(name, || true), "exclude wins");
    let _ = filter.selects(pattern, || false);
}
