//! The simulated cluster: heterogeneous nodes (cores, CPU frequency, memory, NIC speed, disk
//! rate, GPUs) read from YAML or CSV, or generated from a documented size mix.
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use loadstar_common::model::{Disk, Gpu, Nic, NodeCapacity, ResourceList};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::csv::{CsvError, Table};
use super::mix;
use loadstar_framework::snapshot::KubeNode;

/// Bytes in a GiB.
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
/// Pods a simulated node accepts (the kubelet's default `maxPods`).
pub const MAX_PODS: i64 = 110;

/// Errors describing or generating a cluster.
#[derive(Debug, Error)]
pub enum ClusterError {
    /// The node file could not be read.
    #[error("node file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The YAML node file is malformed.
    #[error("node file {path}: {message}")]
    Yaml {
        /// The file.
        path: String,
        /// What is wrong, with the field path.
        message: String,
    },
    /// The CSV node file is malformed.
    #[error(transparent)]
    Csv(#[from] CsvError),
    /// A node's figures are out of range.
    #[error("node {node:?}: {message}")]
    Invalid {
        /// The node.
        node: String,
        /// What is wrong.
        message: String,
    },
    /// A generator mix names an unknown class or has no positive weight.
    #[error("node mix {mix:?}: {message}")]
    Mix {
        /// The mix as given.
        mix: String,
        /// What is wrong.
        message: String,
    },
}

fn default_nic_gbps() -> f64 {
    10.0
}
fn default_disk() -> f64 {
    1000.0
}
fn default_gpu_memory() -> f64 {
    80.0
}

/// One node's hardware.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Node name (unique).
    pub name: String,
    /// Logical CPUs.
    pub cpus: u32,
    /// Max CPU frequency, GHz.
    pub cpu_ghz: f64,
    /// Memory, GiB.
    pub memory_gib: f64,
    /// Summed NIC link speed, Gbit/s (default 10).
    #[serde(default = "default_nic_gbps")]
    pub nic_gbps: f64,
    /// Summed disk throughput, MB/s (10^6 bytes; default 1000).
    #[serde(default = "default_disk")]
    pub disk_mb_per_second: f64,
    /// GPUs (default 0).
    #[serde(default)]
    pub gpus: u32,
    /// Memory per GPU, GiB (default 80).
    #[serde(default = "default_gpu_memory")]
    pub gpu_memory_gib: f64,
    /// Zone label `topology.kubernetes.io/zone` (default: none).
    #[serde(default)]
    pub zone: String,
    /// Size class (instance type label; informational).
    #[serde(default)]
    pub class: String,
}

impl NodeSpec {
    /// Checks that every figure is finite and positive where it must be.
    pub fn validate(&self) -> Result<(), ClusterError> {
        let bad = |message: String| ClusterError::Invalid {
            node: self.name.clone(),
            message,
        };
        if self.name.is_empty() {
            return Err(bad("empty name".into()));
        }
        if self.cpus == 0 {
            return Err(bad("cpus must be ≥ 1".into()));
        }
        for (field, v) in [
            ("cpu_ghz", self.cpu_ghz),
            ("memory_gib", self.memory_gib),
            ("nic_gbps", self.nic_gbps),
            ("disk_mb_per_second", self.disk_mb_per_second),
            ("gpu_memory_gib", self.gpu_memory_gib),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(bad(format!("{field} must be a positive number, got {v}")));
            }
        }
        Ok(())
    }

    /// CPU capacity in millicores.
    pub fn cpu_millis(&self) -> f64 {
        f64::from(self.cpus) * 1000.0
    }

    /// Memory capacity in bytes.
    pub fn memory_bytes(&self) -> f64 {
        (self.memory_gib * GIB).round()
    }

    /// NIC capacity in Mbit/s.
    pub fn nic_mbps(&self) -> f64 {
        self.nic_gbps * 1000.0
    }

    /// What the agent reports as the node's capacity (computeS).
    pub fn capacity(&self) -> NodeCapacity {
        NodeCapacity {
            logical_cpus: self.cpus,
            cpu_max_frequency_hz: self.cpu_ghz * 1e9,
            memory_bytes: self.memory_bytes() as u64,
            nics: vec![Nic {
                name: "eth0".into(),
                speed_bits_per_second: (self.nic_gbps * 1e9).round() as u64,
                speed_assumed: false,
            }],
            disks: vec![Disk {
                name: "nvme0n1".into(),
                max_bytes_per_second: (self.disk_mb_per_second * 1e6).round() as u64,
                configured: true,
            }],
            gpus: (0..self.gpus)
                .map(|i| Gpu {
                    index: i,
                    uuid: format!("GPU-{}-{i}", self.name),
                    model: "SimGPU".into(),
                    memory_bytes: (self.gpu_memory_gib * GIB).round() as u64,
                })
                .collect(),
        }
    }

    /// What Kubernetes says about the node: allocatable = capacity (no reservations), Ready.
    pub fn kube_node(&self) -> KubeNode {
        let mut labels = BTreeMap::new();
        labels.insert("kubernetes.io/hostname".to_string(), self.name.clone());
        if !self.zone.is_empty() {
            labels.insert("topology.kubernetes.io/zone".to_string(), self.zone.clone());
        }
        if !self.class.is_empty() {
            labels.insert(
                "node.kubernetes.io/instance-type".to_string(),
                self.class.clone(),
            );
        }
        KubeNode {
            allocatable: ResourceList {
                cpu_millis: i64::from(self.cpus) * 1000,
                memory_bytes: self.memory_bytes() as i64,
                ephemeral_storage_bytes: 100 * (1 << 30),
                pods: MAX_PODS,
                gpus: i64::from(self.gpus),
                ..Default::default()
            },
            labels,
            taints: Vec::new(),
            unschedulable: false,
            ready: true,
            volume_limits: Default::default(),
            images: Default::default(),
        }
    }
}

/// The simulated cluster: its nodes, sorted by name.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The nodes, sorted by name (the snapshot's order).
    pub nodes: Arc<Vec<NodeSpec>>,
}

impl Cluster {
    /// A cluster of these nodes (sorted by name; names must be unique; figures valid).
    pub fn new(mut nodes: Vec<NodeSpec>) -> Result<Cluster, ClusterError> {
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        for n in &nodes {
            n.validate()?;
        }
        if let Some(w) = nodes.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(ClusterError::Invalid {
                node: w[0].name.clone(),
                message: "name appears twice".into(),
            });
        }
        if nodes.is_empty() {
            return Err(ClusterError::Invalid {
                node: String::new(),
                message: "the cluster has no nodes".into(),
            });
        }
        Ok(Cluster {
            nodes: Arc::new(nodes),
        })
    }

    /// Reads a node file: `.csv` by extension, else YAML.
    pub fn from_file(path: &Path) -> Result<Cluster, ClusterError> {
        let text = std::fs::read_to_string(path).map_err(|source| ClusterError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let name = path.display().to_string();
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
        {
            Cluster::from_csv(&name, &text)
        } else {
            Cluster::from_yaml(&name, &text)
        }
    }

    /// Parses YAML: `nodes:` a list of [`NodeSpec`]s, each with an optional `count` that
    /// repeats it as `NAME-0 … NAME-(count−1)`.
    pub fn from_yaml(path: &str, text: &str) -> Result<Cluster, ClusterError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            nodes: Vec<Entry>,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Entry {
            #[serde(default)]
            count: Option<u32>,
            name: String,
            cpus: u32,
            cpu_ghz: f64,
            memory_gib: f64,
            #[serde(default = "default_nic_gbps")]
            nic_gbps: f64,
            #[serde(default = "default_disk")]
            disk_mb_per_second: f64,
            #[serde(default)]
            gpus: u32,
            #[serde(default = "default_gpu_memory")]
            gpu_memory_gib: f64,
            #[serde(default)]
            zone: String,
            #[serde(default)]
            class: String,
        }
        let de = serde_norway::Deserializer::from_str(text);
        let file: File = serde_path_to_error::deserialize(de).map_err(|e| ClusterError::Yaml {
            path: path.to_string(),
            message: format!("{}: {}", e.path(), e.inner()),
        })?;
        let mut nodes = Vec::new();
        for e in file.nodes {
            let spec = NodeSpec {
                name: e.name.clone(),
                cpus: e.cpus,
                cpu_ghz: e.cpu_ghz,
                memory_gib: e.memory_gib,
                nic_gbps: e.nic_gbps,
                disk_mb_per_second: e.disk_mb_per_second,
                gpus: e.gpus,
                gpu_memory_gib: e.gpu_memory_gib,
                zone: e.zone,
                class: e.class,
            };
            match e.count {
                None => nodes.push(spec),
                Some(c) => {
                    let width = c.saturating_sub(1).to_string().len();
                    for i in 0..c {
                        nodes.push(NodeSpec {
                            name: format!("{}-{i:0width$}", e.name),
                            ..spec.clone()
                        });
                    }
                }
            }
        }
        Cluster::new(nodes)
    }

    /// Column names of the node CSV.
    pub const CSV_COLUMNS: &'static [&'static str] = &[
        "name",
        "cpus",
        "cpu_ghz",
        "memory_gib",
        "nic_gbps",
        "disk_mb_per_second",
        "gpus",
        "gpu_memory_gib",
        "zone",
        "class",
    ];

    /// Parses CSV with the [`Cluster::CSV_COLUMNS`] (name, cpus, cpu_ghz, memory_gib
    /// required).
    pub fn from_csv(path: &str, text: &str) -> Result<Cluster, ClusterError> {
        let t = Table::parse(
            path,
            text,
            Self::CSV_COLUMNS,
            &["name", "cpus", "cpu_ghz", "memory_gib"],
        )?;
        let mut nodes = Vec::with_capacity(t.len());
        for r in t.rows() {
            nodes.push(NodeSpec {
                name: r.get("name")?,
                cpus: r.get("cpus")?,
                cpu_ghz: r.nonneg("cpu_ghz")?,
                memory_gib: r.nonneg("memory_gib")?,
                nic_gbps: r.nonneg_or("nic_gbps", default_nic_gbps())?,
                disk_mb_per_second: r.nonneg_or("disk_mb_per_second", default_disk())?,
                gpus: r.get_or("gpus", 0)?,
                gpu_memory_gib: r.nonneg_or("gpu_memory_gib", default_gpu_memory())?,
                zone: r.get_or("zone", String::new())?,
                class: r.get_or("class", String::new())?,
            });
        }
        Cluster::new(nodes)
    }

    /// The nodes as CSV (the format [`Cluster::from_csv`] reads).
    pub fn to_csv(&self) -> String {
        let mut out = Self::CSV_COLUMNS.join(",");
        out.push('\n');
        for n in self.nodes.iter() {
            out.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{}\n",
                n.name,
                n.cpus,
                n.cpu_ghz,
                n.memory_gib,
                n.nic_gbps,
                n.disk_mb_per_second,
                n.gpus,
                n.gpu_memory_gib,
                n.zone,
                n.class
            ));
        }
        out
    }

    /// Generates `count` nodes from `mix`, deterministically for `seed`: each class gets its
    /// share by largest remainder, positions are shuffled with the seed, names are
    /// `node-000…`, zones `zone-a/b/c` round-robin.
    pub fn generate(count: usize, mix: &NodeMix, seed: u64) -> Result<Cluster, ClusterError> {
        let counts = largest_remainder(count, &mix.weights());
        let mut classes: Vec<&NodeClass> = Vec::with_capacity(count);
        for ((class, _), c) in mix.entries.iter().zip(counts) {
            classes.extend(std::iter::repeat_n(class, c));
        }
        let mut rng = StdRng::seed_from_u64(seed ^ 0x6e6f_6465);
        classes.shuffle(&mut rng);
        let width = count.saturating_sub(1).to_string().len().max(3);
        let nodes = classes
            .into_iter()
            .enumerate()
            .map(|(i, c)| NodeSpec {
                name: format!("node-{i:0width$}"),
                cpus: c.cpus,
                cpu_ghz: c.cpu_ghz,
                memory_gib: c.memory_gib,
                nic_gbps: c.nic_gbps,
                disk_mb_per_second: c.disk_mb_per_second,
                gpus: c.gpus,
                gpu_memory_gib: c.gpu_memory_gib,
                zone: ["zone-a", "zone-b", "zone-c"][i % 3].to_string(),
                class: c.name.to_string(),
            })
            .collect();
        Cluster::new(nodes)
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when there are no nodes (never: [`Cluster::new`] rejects that).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// Splits `total` into integer parts proportional to `weights` (largest remainder; ties to
/// the earlier entry).
pub fn largest_remainder(total: usize, weights: &[f64]) -> Vec<usize> {
    let sum: f64 = weights.iter().sum();
    if sum <= 0.0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<f64> = weights.iter().map(|w| total as f64 * w / sum).collect();
    let mut parts: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
    let mut left = total - parts.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| {
        let fa = exact[a] - exact[a].floor();
        let fb = exact[b] - exact[b].floor();
        fb.total_cmp(&fa).then(a.cmp(&b))
    });
    for i in order {
        if left == 0 {
            break;
        }
        parts[i] += 1;
        left -= 1;
    }
    parts
}

/// A node size the generator can produce.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeClass {
    /// Class name (`small`, `medium`, …).
    pub name: &'static str,
    /// Logical CPUs.
    pub cpus: u32,
    /// GHz.
    pub cpu_ghz: f64,
    /// GiB.
    pub memory_gib: f64,
    /// Gbit/s.
    pub nic_gbps: f64,
    /// MB/s.
    pub disk_mb_per_second: f64,
    /// GPUs.
    pub gpus: u32,
    /// GiB per GPU.
    pub gpu_memory_gib: f64,
}

/// The generator's node classes (documented in `docs/simulator.md`).
pub const NODE_CLASSES: &[NodeClass] = &[
    NodeClass {
        name: "small",
        cpus: 8,
        cpu_ghz: 2.2,
        memory_gib: 32.0,
        nic_gbps: 10.0,
        disk_mb_per_second: 500.0,
        gpus: 0,
        gpu_memory_gib: 80.0,
    },
    NodeClass {
        name: "medium",
        cpus: 16,
        cpu_ghz: 2.6,
        memory_gib: 64.0,
        nic_gbps: 10.0,
        disk_mb_per_second: 1000.0,
        gpus: 0,
        gpu_memory_gib: 80.0,
    },
    NodeClass {
        name: "large",
        cpus: 32,
        cpu_ghz: 3.0,
        memory_gib: 128.0,
        nic_gbps: 25.0,
        disk_mb_per_second: 2000.0,
        gpus: 0,
        gpu_memory_gib: 80.0,
    },
    NodeClass {
        name: "highmem",
        cpus: 16,
        cpu_ghz: 2.4,
        memory_gib: 256.0,
        nic_gbps: 25.0,
        disk_mb_per_second: 1000.0,
        gpus: 0,
        gpu_memory_gib: 80.0,
    },
    NodeClass {
        name: "gpu8",
        cpus: 96,
        cpu_ghz: 2.8,
        memory_gib: 1024.0,
        nic_gbps: 100.0,
        disk_mb_per_second: 4000.0,
        gpus: 8,
        gpu_memory_gib: 80.0,
    },
];

/// A weighted mix of node classes.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeMix {
    /// (class, weight) pairs.
    pub entries: Vec<(NodeClass, f64)>,
}

impl Default for NodeMix {
    /// small 30 %, medium 40 %, large 20 %, highmem 10 %.
    fn default() -> Self {
        NodeMix::parse("small=30,medium=40,large=20,highmem=10").unwrap_or(NodeMix {
            entries: Vec::new(),
        })
    }
}

impl NodeMix {
    /// Parses `class=weight,…` (class names from [`NODE_CLASSES`]).
    pub fn parse(spec: &str) -> Result<NodeMix, ClusterError> {
        let entries =
            mix::parse(spec, NODE_CLASSES, |c| c.name).map_err(|message| ClusterError::Mix {
                mix: spec.to_string(),
                message,
            })?;
        Ok(NodeMix { entries })
    }

    fn weights(&self) -> Vec<f64> {
        self.entries.iter().map(|(_, w)| *w).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generator_follows_the_mix_and_the_seed() {
        let c = Cluster::generate(100, &NodeMix::default(), 7).expect("valid");
        let count = |class: &str| c.nodes.iter().filter(|n| n.class == class).count();
        assert_eq!(
            (
                count("small"),
                count("medium"),
                count("large"),
                count("highmem")
            ),
            (30, 40, 20, 10)
        );
        assert_eq!(c.nodes[0].name, "node-000");
        let again = Cluster::generate(100, &NodeMix::default(), 7).expect("valid");
        assert_eq!(c.nodes, again.nodes);
        let other = Cluster::generate(100, &NodeMix::default(), 8).expect("valid");
        assert_ne!(c.nodes, other.nodes);
    }

    #[test]
    fn largest_remainder_sums_to_total() {
        assert_eq!(largest_remainder(10, &[1.0, 1.0, 1.0]), vec![4, 3, 3]);
        assert_eq!(largest_remainder(7, &[0.0, 2.0]), vec![0, 7]);
    }

    #[test]
    fn yaml_and_csv_round_trip() {
        let y = "nodes:\n  - {name: w, count: 2, cpus: 4, cpu_ghz: 2.0, memory_gib: 8}\n  - {name: big, cpus: 16, cpu_ghz: 3.2, memory_gib: 64, gpus: 8}\n";
        let c = Cluster::from_yaml("t.yaml", y).expect("valid");
        let names: Vec<&str> = c.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["big", "w-0", "w-1"]);
        let back = Cluster::from_csv("t.csv", &c.to_csv()).expect("csv");
        assert_eq!(back.nodes, c.nodes);
        let err = Cluster::from_yaml(
            "t.yaml",
            "nodes:\n  - {name: w, cpus: 4, cpu_ghz: 2.0, memory_gib: 8, bogus: 1}\n",
        )
        .expect_err("unknown field");
        assert!(err.to_string().contains("bogus"), "{err}");
        let err = Cluster::from_csv("t.csv", "name,cpus,cpu_ghz,memory_gib\na,0,2,8\n")
            .expect_err("zero cpus");
        assert!(err.to_string().contains("cpus must be ≥ 1"), "{err}");
    }

    #[test]
    fn mix_rejects_unknown_classes() {
        assert!(NodeMix::parse("tiny=1").is_err());
        assert!(NodeMix::parse("small=0").is_err());
        assert_eq!(NodeMix::parse("gpu8").expect("ok").entries.len(), 1);
    }
}
