//! Per-pod usage collector: CPU cores and memory working set of every pod under the kubelet's
//! `kubepods` cgroup, for cgroup v2 (unified) and v1, with the systemd and cgroupfs drivers.
//!
//! Layouts (paths relative to the cgroup root, or to its `cpuacct`/`memory` hierarchies on v1):
//! - systemd: `kubepods.slice/kubepods-pod<uid>.slice` (Guaranteed),
//!   `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`,
//!   `…/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice`; the UID's dashes are
//!   underscores in the unit name.
//! - cgroupfs: `kubepods/pod<uid>`, `kubepods/burstable/pod<uid>`, `kubepods/besteffort/pod<uid>`.
//!
//! Figures, as cAdvisor/the kubelet compute them:
//! - CPU cores = Δ CPU time / Δt, from `cpu.stat` `usage_usec` (v2) or `cpuacct.usage` ns (v1).
//!   A pod appears in reports from its second observation on (its first has no delta).
//! - Working set = usage − inactive file pages, from `memory.current` and `memory.stat`
//!   `inactive_file` (v2), or `memory.usage_in_bytes` and `total_inactive_file` (v1).
//!
//! A hybrid host (v1 controllers plus a v2 mount at `unified/`) is read as v1. One pod's
//! unreadable file is reported and that pod skipped; a pod that vanished mid-read is skipped
//! silently.
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{FileError, ParseError, parse_u64, read_optional, truncate};

/// Where the CPU and memory controllers are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupLayout {
    /// cgroup v2: one unified hierarchy.
    V2 {
        /// The hierarchy root.
        root: PathBuf,
    },
    /// cgroup v1: one hierarchy per controller.
    V1 {
        /// The `cpuacct` hierarchy (possibly co-mounted as `cpu,cpuacct`).
        cpuacct: PathBuf,
        /// The `memory` hierarchy.
        memory: PathBuf,
    },
}

impl CgroupLayout {
    /// Detects the layout under `root`; `None` when neither version is there.
    pub fn detect(root: &Path) -> Option<CgroupLayout> {
        if root.join("cgroup.controllers").is_file() {
            return Some(CgroupLayout::V2 {
                root: root.to_path_buf(),
            });
        }
        let memory = root.join("memory");
        let cpuacct = ["cpu,cpuacct", "cpuacct,cpu", "cpuacct"]
            .iter()
            .map(|d| root.join(d))
            .find(|p| p.is_dir())?;
        memory
            .is_dir()
            .then_some(CgroupLayout::V1 { cpuacct, memory })
    }

    /// `v1` or `v2`.
    pub fn version(&self) -> &'static str {
        match self {
            CgroupLayout::V2 { .. } => "v2",
            CgroupLayout::V1 { .. } => "v1",
        }
    }

    /// The hierarchy in which pods are enumerated and CPU is read.
    fn cpu_base(&self) -> &Path {
        match self {
            CgroupLayout::V2 { root } => root,
            CgroupLayout::V1 { cpuacct, .. } => cpuacct,
        }
    }

    fn memory_base(&self) -> &Path {
        match self {
            CgroupLayout::V2 { root } => root,
            CgroupLayout::V1 { memory, .. } => memory,
        }
    }
}

/// The pod UID a kubelet pod cgroup directory name stands for; `None` for anything else.
pub fn pod_uid_from_dir(name: &str) -> Option<String> {
    let uid = if let Some(unit) = name.strip_suffix(".slice") {
        // kubepods-pod<uid>, kubepods-burstable-pod<uid>, kubepods-besteffort-pod<uid>
        let (_, uid) = unit.rsplit_once("-pod")?;
        uid.replace('_', "-")
    } else {
        name.strip_prefix("pod")?.to_string()
    };
    let valid = !uid.is_empty() && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    valid.then_some(uid)
}

/// The value of `key` in a flat-keyed cgroup file (`key value` lines, e.g. `cpu.stat`,
/// `memory.stat`); `Ok(None)` when the key is absent.
pub fn parse_keyed(text: &str, key: &str) -> Result<Option<u64>, ParseError> {
    for (i, line) in text.lines().enumerate() {
        let mut toks = line.split_ascii_whitespace();
        if toks.next() != Some(key) {
            continue;
        }
        let v = toks
            .next()
            .ok_or_else(|| ParseError::new(i + 1, format!("{key}: no value")))?;
        return parse_u64(v, i + 1, key).map(Some);
    }
    Ok(None)
}

/// A single-value cgroup file (`memory.current`, `cpuacct.usage`, …). `max` is not accepted:
/// the files read here are usages, never limits.
pub fn parse_single(text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(ParseError::new(1, "empty file"));
    }
    if t.contains(char::is_whitespace) {
        return Err(ParseError::new(
            1,
            format!("expected one value, got {:?}", truncate(t)),
        ));
    }
    parse_u64(t, 1, "value")
}

/// One pod's measured usage.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSample {
    /// metadata.uid.
    pub uid: String,
    /// CPU cores over the last interval.
    pub cpu_cores: f64,
    /// Memory working set, bytes.
    pub memory_working_set_bytes: u64,
}

/// One cgroup sample.
#[derive(Debug, Default)]
pub struct CgroupSample {
    /// `v1` or `v2`.
    pub version: &'static str,
    /// Pods with a CPU delta, sorted by UID.
    pub pods: Vec<PodSample>,
    /// Per-pod failures; those pods are missing from `pods`.
    pub errors: Vec<FileError>,
}

#[derive(Debug)]
struct PodState {
    cpu_ns: u64,
    at: Instant,
    seen: u64,
}

/// Walks the kubepods hierarchy and reads each pod's CPU and memory files.
#[derive(Debug)]
pub struct CgroupCollector {
    root: PathBuf,
    state: HashMap<String, PodState>,
    epoch: u64,
}

impl CgroupCollector {
    /// A collector for the cgroup filesystem mounted at `root` (normally `/sys/fs/cgroup`).
    pub fn new(root: &Path) -> Self {
        CgroupCollector {
            root: root.to_path_buf(),
            state: HashMap::new(),
            epoch: 0,
        }
    }

    /// Takes one sample; `Ok(None)` when there is no cgroup filesystem or no kubepods cgroup
    /// (not a Kubernetes node, or the cgroup root is not mounted). Each pod's rate is over
    /// the time between its own two reads, not the sample's start: the reads come after the
    /// other collectors (NVML can take milliseconds) and after the pods before it, and a pod
    /// using every core would otherwise read more cores than the node has.
    pub fn collect(&mut self) -> Result<Option<CgroupSample>, FileError> {
        let Some(layout) = CgroupLayout::detect(&self.root) else {
            return Ok(None);
        };
        let Some(kubepods) = ["kubepods.slice", "kubepods"]
            .iter()
            .find(|d| layout.cpu_base().join(d).is_dir())
        else {
            return Ok(None);
        };
        let mut dirs: Vec<(String, PathBuf)> = Vec::new();
        let top = PathBuf::from(kubepods);
        for (name, rel) in list_dirs(&layout.cpu_base().join(&top), &top)? {
            if let Some(uid) = pod_uid_from_dir(&name) {
                dirs.push((uid, rel));
            } else if matches!(
                name.as_str(),
                "burstable"
                    | "besteffort"
                    | "kubepods-burstable.slice"
                    | "kubepods-besteffort.slice"
            ) {
                for (pod, prel) in list_dirs(&layout.cpu_base().join(&rel), &rel)? {
                    if let Some(uid) = pod_uid_from_dir(&pod) {
                        dirs.push((uid, prel));
                    }
                }
            }
        }
        self.epoch += 1;
        let mut sample = CgroupSample {
            version: layout.version(),
            ..CgroupSample::default()
        };
        for (uid, rel) in dirs {
            match read_pod(&layout, &rel) {
                Ok(Some((cpu_ns, ws))) => {
                    let now = Instant::now();
                    let prev = self.state.insert(
                        uid.clone(),
                        PodState {
                            cpu_ns,
                            at: now,
                            seen: self.epoch,
                        },
                    );
                    if let Some(prev) = prev {
                        let dt = now.saturating_duration_since(prev.at).as_secs_f64();
                        if dt > 0.0 && cpu_ns >= prev.cpu_ns {
                            sample.pods.push(PodSample {
                                uid,
                                cpu_cores: (cpu_ns - prev.cpu_ns) as f64 / 1e9 / dt,
                                memory_working_set_bytes: ws,
                            });
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => sample.errors.push(e),
            }
        }
        let epoch = self.epoch;
        self.state.retain(|_, s| s.seen == epoch);
        sample.pods.sort_by(|a, b| a.uid.cmp(&b.uid));
        Ok(Some(sample))
    }
}

/// Subdirectories of `dir` as (name, `rel`/name); a vanished directory is empty.
fn list_dirs(dir: &Path, rel: &Path) -> Result<Vec<(String, PathBuf)>, FileError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(FileError::List {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir())
            && let Ok(name) = entry.file_name().into_string()
        {
            let r = rel.join(&name);
            out.push((name, r));
        }
    }
    Ok(out)
}

/// (CPU ns, working set bytes) of one pod; `Ok(None)` when the pod vanished mid-read.
fn read_pod(layout: &CgroupLayout, rel: &Path) -> Result<Option<(u64, u64)>, FileError> {
    let read = |path: PathBuf| -> Result<Option<(String, PathBuf)>, FileError> {
        match read_optional(&path) {
            Ok(Some(t)) => Ok(Some((t, path))),
            Ok(None) => Ok(None),
            Err(source) => Err(FileError::Read { path, source }),
        }
    };
    let parse_err = |path: PathBuf| move |source| FileError::Parse { path, source };
    let cpu_dir = layout.cpu_base().join(rel);
    let mem_dir = layout.memory_base().join(rel);
    let (cpu_file, usage_file, inactive_key) = match layout {
        CgroupLayout::V2 { .. } => ("cpu.stat", "memory.current", "inactive_file"),
        CgroupLayout::V1 { .. } => (
            "cpuacct.usage",
            "memory.usage_in_bytes",
            "total_inactive_file",
        ),
    };
    let Some((text, path)) = read(cpu_dir.join(cpu_file))? else {
        return Ok(None);
    };
    let cpu_ns = match layout {
        CgroupLayout::V2 { .. } => parse_keyed(&text, "usage_usec")
            .map_err(parse_err(path.clone()))?
            .ok_or_else(|| FileError::Parse {
                path,
                source: ParseError::new(0, "usage_usec missing"),
            })?
            .saturating_mul(1000),
        CgroupLayout::V1 { .. } => parse_single(&text).map_err(parse_err(path))?,
    };
    let Some((text, path)) = read(mem_dir.join(usage_file))? else {
        return Ok(None);
    };
    let usage = parse_single(&text).map_err(parse_err(path))?;
    let Some((text, path)) = read(mem_dir.join("memory.stat"))? else {
        return Ok(None);
    };
    let inactive = parse_keyed(&text, inactive_key)
        .map_err(parse_err(path))?
        .unwrap_or(0);
    Ok(Some((cpu_ns, usage.saturating_sub(inactive))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pod_dir_names() {
        let uid = "0f5e3c1a-1b2c-4d5e-8f90-123456789abc";
        let systemd = "0f5e3c1a_1b2c_4d5e_8f90_123456789abc";
        assert_eq!(pod_uid_from_dir(&format!("pod{uid}")).as_deref(), Some(uid));
        for qos in ["kubepods", "kubepods-burstable", "kubepods-besteffort"] {
            assert_eq!(
                pod_uid_from_dir(&format!("{qos}-pod{systemd}.slice")).as_deref(),
                Some(uid)
            );
        }
        for other in [
            "burstable",
            "kubepods-burstable.slice",
            "pod",
            "podxyz",
            "cri-containerd-abc.scope",
        ] {
            assert_eq!(pod_uid_from_dir(other), None, "{other}");
        }
    }

    #[test]
    fn keyed_and_single() {
        let stat = "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n";
        assert_eq!(parse_keyed(stat, "usage_usec"), Ok(Some(1500)));
        assert_eq!(parse_keyed(stat, "nr_periods"), Ok(None));
        assert_eq!(
            parse_keyed("usage_usec x\n", "usage_usec")
                .expect_err("garbage")
                .to_string(),
            "line 1: usage_usec: \"x\" is not an unsigned integer"
        );
        assert_eq!(parse_single("123\n"), Ok(123));
        assert!(parse_single("").is_err());
        assert!(parse_single("max\n").is_err());
        assert!(parse_single("1 2\n").is_err());
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC*") {
            let _ = parse_keyed(&s, "usage_usec");
            let _ = parse_single(&s);
            let _ = pod_uid_from_dir(&s);
        }
    }
}
