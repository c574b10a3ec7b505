//! Network collector: per-NIC receive/transmit rates from `/proc/net/dev` deltas, link speed
//! from `/sys/class/net/<if>/speed`, and the node's network utilisation.
//!
//! Which interfaces count: a NIC is *physical* when `<sys>/class/net/<if>/device` exists
//! (PCI/virtio/USB-backed); loopback, bridges, veths, tunnels and bond masters have none, so
//! a bond's slaves are counted once, not twice. `--net-include` patterns add interfaces,
//! `--net-exclude` patterns remove them; exclude wins over include.
//!
//! `/proc/net/dev` is per network namespace. The agent reads `<proc>/1/net/dev` by default:
//! the namespace of the host's init when the host's `/proc` is mounted at the proc root, so
//! the DaemonSet needs no `hostNetwork` (see `docs/agent.md`). `<sys>` must be the host's
//! sysfs too (sysfs shows the interfaces of the namespace that mounted it).
//!
//! Utilisation of a NIC = max(rx, tx) · 8 / speed (full duplex). The node's utilisation =
//! max(Σ rx, Σ tx) · 8 / Σ speed over the selected NICs that have a rate this sample.
//! Unknown speed (`-1`, `0`, unreadable while the link is down) → `--default-nic-speed`, and
//! the capacity says the speed was assumed. Counter wrap: see [`super::counter_delta`]; a
//! delta implying more than twice a known link speed is taken to be a counter reset (the
//! interface was re-created) and gives no rate for that sample, as does one over the
//! scorer's bound on any rate (an assumed speed bounds nothing).
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use loadstar_proto::limits::rates::MAX_BYTES_PER_SECOND;

use super::{
    FileError, ParseError, counter_delta, glob_match, parse_u64, read_into, read_optional, truncate,
};

/// One interface's counters from `/proc/net/dev`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetDevLine<'a> {
    /// Interface name.
    pub name: &'a str,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
}

/// Parses `/proc/net/dev`: header lines (containing `|`) are skipped; every other non-empty
/// line must be `name: <16 counters>` (at least the 9 up to tx bytes, all numeric).
pub fn parse_net_dev(text: &str) -> Result<Vec<NetDevLine<'_>>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.contains('|') || line.trim().is_empty() {
            continue;
        }
        let (name, counters) = line.split_once(':').ok_or_else(|| {
            ParseError::new(
                n,
                format!("no `name:` separator in {:?}", truncate(line.trim())),
            )
        })?;
        let name = name.trim();
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', ' ']) {
            return Err(ParseError::new(
                n,
                format!("invalid interface name {:?}", truncate(name)),
            ));
        }
        let (mut rx, mut tx, mut count) = (0, 0, 0);
        for (j, tok) in counters.split_ascii_whitespace().enumerate() {
            let v = parse_u64(tok, n, "counter")?;
            match j {
                0 => rx = v,
                8 => tx = v,
                _ => {}
            }
            count = j + 1;
        }
        if count < 9 {
            return Err(ParseError::new(
                n,
                format!("{name}: {count} counters, expected 16"),
            ));
        }
        out.push(NetDevLine {
            name,
            rx_bytes: rx,
            tx_bytes: tx,
        });
    }
    Ok(out)
}

/// Parses `/sys/class/net/<if>/speed` (Mbit/s) into bits per second; `None` when the kernel
/// does not know it (`-1`, `0`, or the historic `65535` of some drivers).
pub fn parse_speed(text: &str) -> Result<Option<u64>, ParseError> {
    let t = text.trim();
    let mbps: i64 = t
        .parse()
        .map_err(|_| ParseError::new(1, format!("speed: {:?} is not an integer", truncate(t))))?;
    Ok(match mbps {
        m if m <= 0 || m == 65535 => None,
        m => Some((m as u64).saturating_mul(1_000_000)),
    })
}

/// Which interfaces the collector counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NicFilter {
    /// Patterns (`*`, `?`) of interfaces to count even when virtual.
    pub include: Vec<String>,
    /// Patterns of interfaces never to count; wins over `include`.
    pub exclude: Vec<String>,
}

impl NicFilter {
    /// Whether `name` is counted, given whether it is physical.
    pub fn selects(&self, name: &str, physical: impl FnOnce() -> bool) -> bool {
        if self.exclude.iter().any(|p| glob_match(p, name)) {
            return false;
        }
        if self.include.iter().any(|p| glob_match(p, name)) {
            return true;
        }
        name != "lo" && physical()
    }
}

/// Latest state of one counted NIC.
#[derive(Debug, Clone, PartialEq)]
pub struct NicRate {
    /// Interface name.
    pub name: String,
    /// Link speed, bits per second (the default when assumed).
    pub speed_bits_per_second: u64,
    /// True when the kernel did not know the speed.
    pub speed_assumed: bool,
    /// Received bytes per second; `None` on the interface's first sample or after a reset.
    pub rx_bytes_per_second: Option<f64>,
    /// Transmitted bytes per second; `None` like `rx_bytes_per_second`.
    pub tx_bytes_per_second: Option<f64>,
}

impl NicRate {
    /// max(rx, tx) · 8 / speed, clamped to [0, 1]; 0 when there is no rate yet.
    pub fn utilization(&self) -> f64 {
        let (Some(rx), Some(tx)) = (self.rx_bytes_per_second, self.tx_bytes_per_second) else {
            return 0.0;
        };
        if self.speed_bits_per_second == 0 {
            return 0.0;
        }
        (rx.max(tx) * 8.0 / self.speed_bits_per_second as f64).clamp(0.0, 1.0)
    }
}

/// One network sample.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NetworkSample {
    /// Counted NICs, sorted by name.
    pub nics: Vec<NicRate>,
    /// max(Σ rx, Σ tx) · 8 / Σ speed over NICs with a rate; `None` when none has one yet.
    pub utilization: Option<f64>,
}

/// Node utilisation over NICs that have a rate.
pub fn node_utilization(nics: &[NicRate]) -> Option<f64> {
    let (mut rx, mut tx, mut speed, mut any) = (0.0f64, 0.0f64, 0.0f64, false);
    for n in nics {
        if let (Some(r), Some(t)) = (n.rx_bytes_per_second, n.tx_bytes_per_second) {
            rx += r;
            tx += t;
            speed += n.speed_bits_per_second as f64;
            any = true;
        }
    }
    if !any || speed <= 0.0 {
        return if any { Some(0.0) } else { None };
    }
    super::clamp_ratio(rx.max(tx) * 8.0 / speed)
}

/// Re-classify interfaces and re-read link speeds once every this many samples.
const REFRESH_SAMPLES: u32 = 60;

#[derive(Debug)]
struct NicState {
    selected: bool,
    speed_bits_per_second: u64,
    speed_assumed: bool,
    prev: Option<(u64, u64, Instant)>,
    seen: u64,
}

/// Reads `/proc/<pid>/net/dev` and `/sys/class/net`, keeping per-interface counters.
#[derive(Debug)]
pub struct NetworkCollector {
    net_dev_path: PathBuf,
    class_net: PathBuf,
    filter: NicFilter,
    default_speed_bits_per_second: u64,
    state: HashMap<String, NicState>,
    epoch: u64,
    since_refresh: u32,
    buf: String,
}

impl NetworkCollector {
    /// A collector reading `net_dev_path` (normally `<proc>/1/net/dev`) and
    /// `<sys_root>/class/net`.
    pub fn new(
        net_dev_path: PathBuf,
        sys_root: &Path,
        filter: NicFilter,
        default_speed_bits_per_second: u64,
    ) -> Self {
        NetworkCollector {
            net_dev_path,
            class_net: sys_root.join("class/net"),
            filter,
            default_speed_bits_per_second,
            state: HashMap::new(),
            epoch: 0,
            since_refresh: 0,
            buf: String::with_capacity(4096),
        }
    }

    /// Takes one sample at `now`; `Ok(None)` when the net/dev file does not exist.
    pub fn collect(&mut self, now: Instant) -> Result<Option<NetworkSample>, FileError> {
        let path = &self.net_dev_path;
        if !read_into(path, &mut self.buf).map_err(|e| FileError::read(path, e))? {
            return Ok(None);
        }
        let lines = parse_net_dev(&self.buf).map_err(|e| FileError::parse(path, e))?;
        self.epoch += 1;
        let refresh = self.since_refresh >= REFRESH_SAMPLES;
        self.since_refresh = if refresh { 0 } else { self.since_refresh + 1 };
        let mut nics = Vec::new();
        for line in &lines {
            if refresh || !self.state.contains_key(line.name) {
                let (selected, speed, assumed) = classify(
                    &self.class_net,
                    &self.filter,
                    self.default_speed_bits_per_second,
                    line.name,
                )?;
                let st = self.state.entry(line.name.to_string()).or_insert(NicState {
                    selected,
                    speed_bits_per_second: speed,
                    speed_assumed: assumed,
                    prev: None,
                    seen: 0,
                });
                st.selected = selected;
                st.speed_bits_per_second = speed;
                st.speed_assumed = assumed;
            }
            let Some(st) = self.state.get_mut(line.name) else {
                continue;
            };
            st.seen = self.epoch;
            if !st.selected {
                continue;
            }
            let (mut rx_rate, mut tx_rate) = (None, None);
            if let Some((prx, ptx, then)) = st.prev {
                let dt = now.saturating_duration_since(then).as_secs_f64();
                if dt > 0.0 {
                    let drx = counter_delta(prx, line.rx_bytes);
                    let dtx = counter_delta(ptx, line.tx_bytes);
                    if let (Some(drx), Some(dtx)) = (drx, dtx) {
                        let (r, t) = (drx as f64 / dt, dtx as f64 / dt);
                        let bound = 2.0 * st.speed_bits_per_second as f64;
                        let plausible = (st.speed_assumed || r.max(t) * 8.0 <= bound)
                            && r.max(t) <= MAX_BYTES_PER_SECOND;
                        if plausible {
                            rx_rate = Some(r);
                            tx_rate = Some(t);
                        }
                    }
                }
            }
            st.prev = Some((line.rx_bytes, line.tx_bytes, now));
            nics.push(NicRate {
                name: line.name.to_string(),
                speed_bits_per_second: st.speed_bits_per_second,
                speed_assumed: st.speed_assumed,
                rx_bytes_per_second: rx_rate,
                tx_bytes_per_second: tx_rate,
            });
        }
        let epoch = self.epoch;
        self.state.retain(|_, s| s.seen == epoch);
        nics.sort_by(|a, b| a.name.cmp(&b.name));
        let utilization = node_utilization(&nics);
        Ok(Some(NetworkSample { nics, utilization }))
    }
}

/// Whether an interface is counted, and its speed (bits/s) and whether that was assumed.
fn classify(
    class_net: &Path,
    filter: &NicFilter,
    default_speed: u64,
    name: &str,
) -> Result<(bool, u64, bool), FileError> {
    let dir = class_net.join(name);
    let selected = filter.selects(name, || dir.join("device").symlink_metadata().is_ok());
    if !selected {
        return Ok((false, 0, false));
    }
    let path = dir.join("speed");
    // Reading `speed` fails (EINVAL) while the link is down, and some virtual drivers do not
    // implement it: the speed is then unknown, which is not an error.
    let text = read_optional(&path).ok().flatten();
    let speed = match text {
        Some(t) => parse_speed(&t).map_err(|e| FileError::parse(&path, e))?,
        None => None,
    };
    Ok(match speed {
        Some(s) => (true, s, false),
        None => (true, default_speed, true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NET_DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    3193      29    0    0    0     0          0         0     3193      29    0    0    0     0       0          0
  eth0:241213009    6790    0    0    0     0          0         0   446822    4304    0    0    0     0       0          0
";

    #[test]
    fn parses_net_dev() {
        let l = parse_net_dev(NET_DEV).expect("valid");
        assert_eq!(l.len(), 2);
        assert_eq!(
            l[1],
            NetDevLine {
                name: "eth0",
                rx_bytes: 241213009,
                tx_bytes: 446822
            }
        );
    }

    #[test]
    fn net_dev_errors() {
        let e = parse_net_dev("  eth0 1 2 3\n").expect_err("no colon");
        assert_eq!(e.line, 1);
        let e = parse_net_dev("  eth0: 1 2 3\n").expect_err("truncated");
        assert_eq!(e.to_string(), "line 1: eth0: 3 counters, expected 16");
        let e = parse_net_dev("  eth0: 1 2 3 4 5 6 7 8 x 10\n").expect_err("garbage");
        assert_eq!(
            e.to_string(),
            "line 1: counter: \"x\" is not an unsigned integer"
        );
        assert!(parse_net_dev(" ../x: 1 2 3 4 5 6 7 8 9\n").is_err());
    }

    #[test]
    fn speed() {
        assert_eq!(parse_speed("10000\n"), Ok(Some(10_000_000_000)));
        assert_eq!(parse_speed("-1\n"), Ok(None));
        assert_eq!(parse_speed("0"), Ok(None));
        assert!(parse_speed("fast").is_err());
    }

    #[test]
    fn filter_precedence() {
        let f = NicFilter {
            include: vec!["veth*".into(), "eth1".into()],
            exclude: vec!["eth1".into(), "eth9*".into()],
        };
        assert!(f.selects("eth0", || true));
        assert!(!f.selects("eth1", || true), "exclude wins over include");
        assert!(!f.selects("eth90", || true));
        assert!(f.selects("veth12", || false));
        assert!(!f.selects("docker0", || false));
        assert!(!f.selects("lo", || true));
    }

    #[test]
    fn node_utilization_sums_directions() {
        let nic = |rx, tx, speed| NicRate {
            name: "x".into(),
            speed_bits_per_second: speed,
            speed_assumed: false,
            rx_bytes_per_second: rx,
            tx_bytes_per_second: tx,
        };
        // 100 MB/s rx on one 1G NIC, 25 MB/s tx on another: max(100, 25)*8 / 2000 Mbit.
        let nics = [
            nic(Some(100e6), Some(0.0), 1_000_000_000),
            nic(Some(0.0), Some(25e6), 1_000_000_000),
            nic(None, None, 1_000_000_000),
        ];
        assert!((node_utilization(&nics).expect("rates") - 0.4).abs() < 1e-12);
        assert_eq!(node_utilization(&nics[2..]), None);
        assert_eq!(nics[0].utilization(), 0.8);
        assert_eq!(nics[2].utilization(), 0.0);
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC*") {
            let _ = parse_net_dev(&s);
            let _ = parse_speed(&s);
        }

        #[test]
        fn dev_like_input_never_panics(lines in prop::collection::vec("[ a-z0-9|:]{0,10}( [0-9a-z]{0,21}){0,18}", 0..6)) {
            let _ = parse_net_dev(&lines.join("\n"));
        }
    }
}
