//! The fuzz targets' bodies, one module per parser family, kept in a library so that the AFL
//! binaries (`fuzz_targets/*.rs`, built by `cargo afl build --features afl`) and the plain
//! `cargo test` replay of the committed corpus and crash inputs (`tests/replay.rs`) run the
//! same code. Every function takes raw bytes, must never panic, and asserts the cheap
//! properties noted on it; a failed assertion is a finding just like a panic.
pub mod fixtures;

pub mod cgroup;
pub mod cpu;
pub mod diskstats;
pub mod extender;
pub mod meminfo;
pub mod net_dev;
pub mod node_report;
pub mod pod_json;
pub mod profile_yaml;
pub mod quantity;
pub mod sampler_values;
pub mod score_request;

/// Every target by name, for the corpus replay test and the `run.sh` target list.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("cpu", cpu::fuzz),
    ("meminfo", meminfo::fuzz),
    ("net_dev", net_dev::fuzz),
    ("diskstats", diskstats::fuzz),
    ("cgroup", cgroup::fuzz),
    ("sampler_values", sampler_values::fuzz),
    ("quantity", quantity::fuzz),
    ("node_report", node_report::fuzz),
    ("profile_yaml", profile_yaml::fuzz),
    ("pod_json", pod_json::fuzz),
    ("score_request", score_request::fuzz),
    ("extender", extender::fuzz),
];

/// The input as text, the way the agent and the scorer would see it: invalid UTF-8 is
/// replaced rather than rejected, so byte-level mutations still reach the parsers.
pub fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// Asserts that `x` is a ratio fit for the wire: finite and within [0, 1].
#[track_caller]
pub fn assert_ratio(what: &str, x: f64) {
    assert!(
        x.is_finite() && (0.0..=1.0).contains(&x),
        "{what}: {x} is not a ratio in [0, 1]"
    );
}
