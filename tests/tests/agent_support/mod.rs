//! Helpers shared by the agent's integration tests: fixture trees copied into a temporary
//! directory (with their `next/` overlay applied on demand), time bounds for rate checks,
//! and report accessors.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use loadstar_proto::pb;
use loadstar_sampler::sampler::SamplerConfig;

/// `tests/fixtures/agent/<rel>`.
pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/agent")
        .join(rel)
}

/// Copies `src` into `dst` recursively, leaving out a top-level `next` directory.
pub fn copy_tree(src: &Path, dst: &Path) {
    copy_dir(src, dst, true);
}

fn copy_dir(src: &Path, dst: &Path, top: bool) {
    std::fs::create_dir_all(dst).expect("mkdir");
    for entry in std::fs::read_dir(src).expect("read fixture dir") {
        let entry = entry.expect("entry");
        let name = entry.file_name();
        if top && name == "next" {
            continue;
        }
        let to = dst.join(&name);
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &to, false);
        } else {
            std::fs::copy(entry.path(), &to).expect("copy");
        }
    }
}

/// A fixture node (proc + sys) and cgroup tree in a temporary directory.
pub struct FixtureNode {
    pub dir: tempfile::TempDir,
    node_src: PathBuf,
    cgroup_src: Option<PathBuf>,
}

impl FixtureNode {
    /// Copies `node/<node>` and, if given, `cgroup/<cgroup>`.
    pub fn new(node: &str, cgroup: Option<&str>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let node_src = fixture(&format!("node/{node}"));
        copy_tree(&node_src, &dir.path().join("node"));
        let cgroup_src = cgroup.map(|c| fixture(&format!("cgroup/{c}")));
        match &cgroup_src {
            Some(src) => copy_tree(src, &dir.path().join("cgroup")),
            None => std::fs::create_dir_all(dir.path().join("cgroup")).expect("mkdir"),
        }
        FixtureNode {
            dir,
            node_src,
            cgroup_src,
        }
    }

    pub fn proc_root(&self) -> PathBuf {
        self.dir.path().join("node/proc")
    }

    pub fn sys_root(&self) -> PathBuf {
        self.dir.path().join("node/sys")
    }

    pub fn cgroup_root(&self) -> PathBuf {
        self.dir.path().join("cgroup")
    }

    /// A sampler configuration reading this tree (GPU off, 1 s interval).
    pub fn config(&self) -> SamplerConfig {
        SamplerConfig {
            node_name: "fixture-node".into(),
            proc_root: self.proc_root(),
            sys_root: self.sys_root(),
            rootfs: self.dir.path().to_path_buf(),
            cgroup_root: self.cgroup_root(),
            gpu: false,
            ..SamplerConfig::default()
        }
    }

    /// Applies the `next/` overlays: counters one sample later.
    pub fn advance(&self) {
        copy_dir(
            &self.node_src.join("next"),
            &self.dir.path().join("node"),
            false,
        );
        if let Some(c) = &self.cgroup_src {
            copy_dir(&c.join("next"), &self.dir.path().join("cgroup"), false);
        }
    }

    /// Replaces a file of the node tree (path relative to the node root, e.g. `proc/stat`).
    pub fn replace(&self, rel: &str, from: &Path) {
        std::fs::copy(from, self.dir.path().join("node").join(rel)).expect("replace");
    }

    /// Writes a file of the node tree.
    pub fn write(&self, rel: &str, text: &str) {
        let p = self.dir.path().join("node").join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
}

/// Bounds on the interval a collector measured between two samples: the first sample took
/// place within [a0, a1] and the second within [b0, b1].
#[derive(Debug, Clone, Copy)]
pub struct Interval {
    pub min: f64,
    pub max: f64,
}

impl Interval {
    pub fn between(a0: Instant, a1: Instant, b0: Instant, b1: Instant) -> Self {
        Interval {
            min: b0.duration_since(a1).as_secs_f64(),
            max: b1.duration_since(a0).as_secs_f64(),
        }
    }

    /// Asserts that `value` is `amount / dt` for some dt in the interval (relative slack 1e-9).
    pub fn assert_rate(&self, what: &str, value: f64, amount: f64) {
        let lo = amount / self.max * (1.0 - 1e-9);
        let hi = amount / self.min * (1.0 + 1e-9);
        assert!(
            (lo..=hi).contains(&value),
            "{what}: {value} not in [{lo}, {hi}] (= {amount} over {:?})",
            self
        );
    }
}

/// Runs `f` and returns its result and the instants just before and after.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Instant, Instant) {
    let a = Instant::now();
    let v = f();
    (v, a, Instant::now())
}

/// The usage entry of a resource.
pub fn usage(report: &pb::NodeReport, r: pb::Resource) -> Option<&pb::ResourceUsage> {
    report.usage.iter().find(|u| u.resource == r as i32)
}

/// The resources present in a report.
pub fn resources(report: &pb::NodeReport) -> Vec<pb::Resource> {
    report
        .usage
        .iter()
        .filter_map(|u| pb::Resource::try_from(u.resource).ok())
        .collect()
}

/// Asserts every ratio of a report is finite and in [0, 1] and that the common crate's
/// validating conversions accept it (what the scorer does on ingest).
pub fn assert_valid(report: &pb::NodeReport) {
    loadstar_proto::convert::load_from_proto(&report.usage).expect("usage validates");
    loadstar_proto::convert::capacity_from_proto(report.capacity.as_ref().expect("capacity"))
        .expect("capacity validates");
    let ratio = |what: &str, v: f64| {
        assert!(v.is_finite() && (0.0..=1.0).contains(&v), "{what} = {v}");
    };
    for u in &report.usage {
        ratio("latest", u.latest_ratio);
        for w in &u.windows {
            for v in [
                w.mean_ratio,
                w.min_ratio,
                w.max_ratio,
                w.p95_ratio,
                w.stddev_ratio,
            ] {
                ratio("window", v);
            }
        }
    }
    for n in &report.nics {
        ratio("nic", n.utilization_ratio);
        assert!(n.rx_bytes_per_second.is_finite() && n.tx_bytes_per_second.is_finite());
    }
    for d in &report.disks {
        ratio("disk", d.utilization_ratio);
    }
    for g in &report.gpus {
        ratio("gpu", g.utilization_ratio);
    }
    if let Some(e) = &report.eviction {
        for v in [e.nodefs_available_ratio, e.nodefs_inodes_free_ratio]
            .into_iter()
            .flatten()
        {
            ratio("eviction", v);
        }
    }
    for p in &report.pods {
        assert!(p.cpu_cores.is_finite() && p.cpu_cores >= 0.0);
    }
}

/// Polls `f` until it returns `Some`, or panics after `timeout` with `what` and the last
/// observation.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}
