//! The differential test's scenario generator: a pure function of `(seed, index)` that
//! returns a [`Scenario`] — so any scenario can be regenerated from the two numbers a failure
//! prints. One function per object kind here (`node`, `existing_pod`, `incoming_pod`,
//! `history`, `container`), one per placement-constraint family in [`constraints`], volumes
//! and claims in [`volumes`]; extend the vocabulary and every run covers it.
//!
//! Names are the only input besides `(seed, index)`: a `prefix` that makes this run's
//! namespaces, nodes and volumes unique, and changes nothing else.
pub mod attach;
mod binding;
mod constraints;
mod disks;
pub mod preemption;
pub mod spreading;
mod volumes;

pub use preemption::generate_preemption;

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};

use super::scenario::*;

/// SplitMix64's finaliser: spreads `(seed, index)` over the whole seed space.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Which scenario a stream draws for, and how it names its objects.
pub(super) struct DrawFor<'a> {
    pub seed: u64,
    pub index: usize,
    /// Names cluster-scoped objects.
    pub prefix: &'a str,
    /// The incoming pod's namespace.
    pub namespace: &'a str,
}

impl DrawFor<'_> {
    /// The stream salted with `salt`.
    pub fn rng(&self, salt: u64) -> StdRng {
        StdRng::seed_from_u64(mix(self.seed ^ mix(self.index as u64) ^ salt))
    }
}

/// Salt of the volumes' random stream (see [`generate`]). Chosen so that none of
/// `e2e_diff`'s regression cases carries volumes: they stay what their comments describe.
const VOLUME_STREAM: u64 = 0x766F_6C75_6D65_0001;

/// Generates scenario `index` of `seed`; `prefix` names its namespaces, nodes and volumes.
///
/// Volumes and claims come from a second random stream, drawn after everything else: adding
/// them changed no scenario's other objects, and a scenario that draws none is exactly what
/// it was before.
pub fn generate(seed: u64, index: usize, prefix: &str) -> Scenario {
    let rng = StdRng::seed_from_u64(mix(seed ^ mix(index as u64)));
    let mut g = Gen {
        rng,
        features: BTreeSet::new(),
        namespaces: vec![prefix.to_string(), format!("{prefix}-b")],
        node_names: Vec::new(),
        zones: Vec::new(),
    };
    let zone_count = g.rng.random_range(2..=3);
    g.zones = ZONES[..zone_count].to_vec();
    let node_count = g.rng.random_range(4..=8);
    g.node_names = (0..node_count).map(|i| format!("{prefix}-n{i}")).collect();
    // Four scenarios in ten use no inter-pod feature at all: plenty that Loadstar's current
    // filters must get exactly right.
    let inter_pod = g.rng.random_bool(0.6);
    let few_pod_slots = g.rng.random_bool(0.3);
    let mut nodes: Vec<Value> = (0..node_count)
        .map(|i| g.node(i, few_pod_slots && i < 2))
        .collect();
    let pod_count = g.rng.random_range(0..=10);
    let mut pods: Vec<Value> = (0..pod_count)
        .map(|i| g.existing_pod(i, inter_pod))
        .collect();
    let mut incoming = g.incoming_pod(inter_pod);
    if overcommitted(&nodes, &pods) {
        g.features.insert(Feature::Overcommitted);
    }
    // Drawn last, so adding it left every earlier scenario as it was.
    let history = g.history();
    if let Some(h) = history.first() {
        pods.extend(filler(
            &str_at(h, "/spec/nodeName"),
            &nodes,
            &pods,
            &g.namespaces[1],
        ));
    }
    let mut v = Gen {
        rng: StdRng::seed_from_u64(mix(seed ^ mix(index as u64) ^ VOLUME_STREAM)),
        features: BTreeSet::new(),
        namespaces: g.namespaces.clone(),
        node_names: g.node_names.clone(),
        zones: g.zones.clone(),
    };
    let storage = v.storage(prefix, &mut pods, &mut incoming);
    g.features.extend(v.features);
    // Inline disks: a third stream, drawn last.
    disks::draw(seed, index, &mut pods, &mut incoming, &mut g.features);
    // Attach limits, claims to bind and default spreading: three more streams, each drawn
    // after the ones before.
    let ns = g.namespaces[0].clone();
    let at = DrawFor {
        seed,
        index,
        prefix,
        namespace: &ns,
    };
    let attach = attach::draw(&at, &mut nodes, &mut pods, &mut incoming, &mut g.features);
    let binding = binding::draw(&at, &nodes, &g.zones, &mut incoming, &mut g.features);
    let selectors = spreading::draw(&at, &incoming, &mut g.features);
    let mut volumes = storage.volumes;
    volumes.extend(attach.volumes);
    volumes.extend(binding.volumes);
    let mut claims = storage.claims;
    claims.extend(attach.claims);
    claims.extend(binding.claims);
    if !volumes.is_empty() || !claims.is_empty() {
        g.features.insert(Feature::Volumes);
    }
    let mut classes = attach.classes;
    classes.extend(binding.classes);
    Scenario {
        seed,
        index,
        namespaces: g.namespaces,
        nodes,
        history,
        pods,
        incoming,
        volumes,
        claims,
        budgets: Vec::new(),
        priority_classes: BTreeMap::new(),
        features: g.features,
        classes,
        csinodes: attach.csinodes,
        selectors,
    }
}

/// A quantity of the generator's vocabulary in base units (bytes; millicores for `cpu`).
fn quantity(resource: &str, q: &str) -> i64 {
    let (digits, factor) = if let Some(d) = q.strip_suffix("Gi") {
        (d, 1 << 30)
    } else if let Some(d) = q.strip_suffix("Mi") {
        (d, 1 << 20)
    } else if let Some(d) = q.strip_suffix('m') {
        (d, 1)
    } else if resource == "cpu" {
        (q, 1000)
    } else {
        (q, 1)
    };
    digits.parse::<i64>().unwrap_or(0) * factor
}

/// A pod that takes what is left of `node`'s cpu and memory, so that any pod requesting
/// either does not fit there — unless a scheduler still counts requests of pods that were
/// bound to a previous node of that name.
fn filler(node: &str, nodes: &[Value], pods: &[Value], namespace: &str) -> Option<Value> {
    let object = nodes.iter().find(|n| str_at(n, "/metadata/name") == node)?;
    let mut requests = Map::new();
    for r in ["cpu", "memory"] {
        let have = quantity(r, &str_at(object, &format!("/status/allocatable/{r}")));
        let used: i64 = pods
            .iter()
            .filter(|p| str_at(p, "/spec/nodeName") == node)
            .filter(|p| after_create(p) != Some(MARK_SUCCEEDED))
            .flat_map(|p| {
                p.pointer("/spec/containers")
                    .and_then(Value::as_array)
                    .cloned()
            })
            .flatten()
            .filter_map(|c| {
                let res = c
                    .pointer("/resources/requests")
                    .or_else(|| c.pointer("/resources/limits"))?;
                res.get(r).and_then(Value::as_str).map(|q| quantity(r, q))
            })
            .sum();
        if have > used {
            let left = have - used;
            let q = if r == "cpu" {
                format!("{left}m")
            } else {
                left.to_string()
            };
            requests.insert(r.into(), json!(q));
        }
    }
    (!requests.is_empty()).then(|| {
        json!({
            "metadata": {"name": "filler", "namespace": namespace},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "registry.invalid/pause:3",
                                "resources": {"requests": requests}}]
            }
        })
    })
}

/// Whether some node carries more cpu, memory or ephemeral-storage requests (of pods that
/// have not finished) than it has allocatable.
fn overcommitted(nodes: &[Value], pods: &[Value]) -> bool {
    let mut used: BTreeMap<(String, &str), i64> = BTreeMap::new();
    for p in pods
        .iter()
        .filter(|p| after_create(p) != Some(MARK_SUCCEEDED))
    {
        let node = str_at(p, "/spec/nodeName");
        for c in p
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let res = c
                .pointer("/resources/requests")
                .or_else(|| c.pointer("/resources/limits"));
            for r in ["cpu", "memory", "ephemeral-storage"] {
                if let Some(q) = res.and_then(|m| m.get(r)).and_then(Value::as_str) {
                    *used.entry((node.clone(), r)).or_default() += quantity(r, q);
                }
            }
        }
    }
    nodes.iter().any(|n| {
        let name = str_at(n, "/metadata/name");
        ["cpu", "memory", "ephemeral-storage"].iter().any(|r| {
            let have = n
                .pointer("/status/allocatable")
                .and_then(|a| a.get(*r))
                .and_then(Value::as_str)
                .map_or(0, |q| quantity(r, q));
            used.get(&(name.clone(), *r)).copied().unwrap_or(0) > have
        })
    })
}

struct Gen {
    rng: StdRng,
    features: BTreeSet<Feature>,
    namespaces: Vec<String>,
    node_names: Vec<String>,
    zones: Vec<&'static str>,
}

impl Gen {
    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items
            .choose(&mut self.rng)
            .expect("non-empty vocabulary")
            .clone()
    }

    fn pick_node(&mut self) -> String {
        let i = self.rng.random_range(0..self.node_names.len());
        self.node_names[i].clone()
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    /// A distinct subset of `items`, between `min` and `max` long.
    fn some<T: Clone>(&mut self, items: &[T], min: usize, max: usize) -> Vec<T> {
        let mut v = items.to_vec();
        v.shuffle(&mut self.rng);
        let n = self.rng.random_range(min..=max.min(items.len()));
        v.truncate(n);
        v
    }

    // --- nodes ----------------------------------------------------------------------------

    fn node(&mut self, i: usize, few_pod_slots: bool) -> Value {
        let name = self.node_names[i].clone();
        let mut labels = Map::new();
        labels.insert(HOSTNAME.into(), json!(name));
        let zone = self.pick(&self.zones.clone());
        if self.chance(0.85) {
            labels.insert(ZONE.into(), json!(zone));
        }
        if self.chance(0.3) {
            labels.insert(OLD_ZONE.into(), json!(zone));
        }
        if self.chance(0.6) {
            // An empty value is a value: its domain is also where nodes without the label
            // count their pods in kube-scheduler 1.20's spreading.
            labels.insert(
                DISK.into(),
                json!(self.pick(&["ssd", "hdd", "ssd", "hdd", ""])),
            );
        }
        if self.chance(0.5) {
            labels.insert(TIER.into(), json!(self.pick(&["a", "b"])));
        }
        if self.chance(0.4) {
            labels.insert(GEN.into(), json!(self.pick(&["1", "2", "3", "4"])));
        }
        let pods = if few_pod_slots {
            self.features.insert(Feature::PodCount);
            self.pick(&["1", "2", "3"])
        } else {
            "110"
        };
        let mut allocatable = Map::new();
        allocatable.insert("cpu".into(), json!(self.pick(&["2", "4", "3500m", "8"])));
        allocatable.insert("memory".into(), json!(self.pick(&["4Gi", "8Gi", "16Gi"])));
        allocatable.insert("pods".into(), json!(pods));
        if self.chance(0.6) {
            allocatable.insert(
                "ephemeral-storage".into(),
                json!(self.pick(&["1Gi", "20Gi"])),
            );
        }
        if self.chance(0.4) {
            allocatable.insert(DONGLE.into(), json!(self.pick(&["1", "2"])));
        }
        let mut spec = Map::new();
        if self.chance(0.25) {
            self.features.insert(Feature::Taints);
            spec.insert("taints".into(), self.taints());
        }
        if self.chance(0.08) {
            self.features.insert(Feature::Unschedulable);
            spec.insert("unschedulable".into(), json!(true));
        }
        json!({
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
            "status": {
                "capacity": allocatable.clone(),
                "allocatable": allocatable,
                "conditions": [{
                    "type": "Ready", "status": "True", "reason": "SimulatedKubelet",
                    "message": "node object without a kubelet (loadstar diff test)"
                }]
            }
        })
    }

    /// One or two taints, unique by (key, effect) as the API requires.
    fn taints(&mut self) -> Value {
        let n = self.rng.random_range(1..=2);
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for _ in 0..n {
            let key = self.pick(TAINT_KEYS);
            let effect = self.pick(EFFECTS);
            if !seen.insert((key, effect)) {
                continue;
            }
            let value = self.pick(&["x", "y", ""]);
            out.push(json!({"key": key, "value": value, "effect": effect}));
        }
        Value::Array(out)
    }

    // --- pods -----------------------------------------------------------------------------

    /// Sometimes one or two pods of a previous incarnation of one node (see
    /// [`Scenario::history`]).
    fn history(&mut self) -> Vec<Value> {
        if !self.chance(0.12) {
            return Vec::new();
        }
        self.features.insert(Feature::RecycledNode);
        let node = self.pick_node();
        let ns = self.namespaces[0].clone();
        (0..self.rng.random_range(1..=2))
            .map(|i| {
                // Large, so a scheduler that still subtracts them shows it.
                let cpu = self.pick(&["1", "2", "3"]);
                let memory = self.pick(&["2Gi", "4Gi"]);
                json!({
                    "metadata": {
                        "name": format!("h{i}"), "namespace": ns, "labels": {"app": "web"},
                        "annotations": {HISTORY: "bound to the node's previous incarnation; \
                            deleted after that node was"}
                    },
                    "spec": {
                        "nodeName": node,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "c", "image": "registry.invalid/pause:3",
                            "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
                    }
                })
            })
            .collect()
    }

    fn pod_labels(&mut self, p_app: f64) -> Map<String, Value> {
        let mut labels = Map::new();
        if self.chance(p_app) {
            labels.insert("app".into(), json!(self.pick(APPS)));
        }
        if self.chance(0.5) {
            labels.insert("team".into(), json!(self.pick(TEAMS)));
        }
        labels
    }

    fn existing_pod(&mut self, i: usize, inter_pod: bool) -> Value {
        let ns = if self.chance(0.2) {
            self.namespaces[1].clone()
        } else {
            self.namespaces[0].clone()
        };
        let node = self.pick_node();
        let labels = self.pod_labels(0.85);
        let mut container = self.container("c", false);
        if self.chance(0.15) {
            container["ports"] = self.host_ports();
        }
        let mut spec = json!({
            "nodeName": node,
            "containers": [container],
            "terminationGracePeriodSeconds": 0
        });
        let mut annotations = Map::new();
        if self.chance(0.08) {
            self.features.insert(Feature::TerminatingPods);
            annotations.insert(AFTER_CREATE.into(), json!(DELETE_GRACEFULLY));
            // A grace period keeps it Terminating: no kubelet ever confirms.
            spec["terminationGracePeriodSeconds"] = json!(300);
        } else if self.chance(0.06) {
            self.features.insert(Feature::FinishedPods);
            annotations.insert(AFTER_CREATE.into(), json!(MARK_SUCCEEDED));
        }
        if inter_pod {
            let mut affinity = Map::new();
            if self.chance(0.2) {
                self.features.insert(Feature::ExistingAntiAffinity);
                let term = self.pod_affinity_term(&ns);
                affinity.insert(
                    "podAntiAffinity".into(),
                    json!({"requiredDuringSchedulingIgnoredDuringExecution": [term]}),
                );
            }
            if self.chance(0.15) {
                let term = self.pod_affinity_term(&ns);
                affinity.insert(
                    "podAffinity".into(),
                    json!({"requiredDuringSchedulingIgnoredDuringExecution": [term]}),
                );
            }
            if !affinity.is_empty() {
                spec["affinity"] = Value::Object(affinity);
            }
            if self.chance(0.15) {
                let (constraints, _) = self.spread_constraints();
                spec["topologySpreadConstraints"] = constraints;
            }
        }
        let mut metadata = json!({"name": format!("e{i}"), "namespace": ns, "labels": labels});
        if !annotations.is_empty() {
            metadata["annotations"] = Value::Object(annotations);
        }
        json!({"metadata": metadata, "spec": spec})
    }

    fn incoming_pod(&mut self, inter_pod: bool) -> Value {
        let ns = self.namespaces[0].clone();
        let labels = self.pod_labels(0.8);
        let mut container = self.container("c", true);
        let mut spec = Map::new();
        spec.insert("schedulerName".into(), json!(SCHEDULER_NAME));
        spec.insert("terminationGracePeriodSeconds".into(), json!(0));
        if self.chance(0.2) {
            self.features.insert(Feature::HostPorts);
            container["ports"] = self.host_ports();
        }
        if self.chance(0.1) {
            self.features.insert(Feature::InitContainers);
            let mut init = self.container("init", false);
            init["resources"] = json!({"requests": {
                "cpu": self.pick(&["1", "3", "5"]), "memory": self.pick(&["1Gi", "6Gi"])
            }});
            // kube-scheduler's NodePorts reads regular containers only.
            if self.chance(0.3) {
                init["ports"] = self.host_ports();
            }
            spec.insert("initContainers".into(), json!([init]));
        }
        spec.insert("containers".into(), json!([container]));
        if self.chance(0.2) {
            self.features.insert(Feature::NodeSelector);
            spec.insert("nodeSelector".into(), self.node_selector());
        }
        let mut affinity = Map::new();
        let mut node_affinity = Map::new();
        if self.chance(0.25) {
            self.features.insert(Feature::NodeAffinity);
            node_affinity.insert(
                "requiredDuringSchedulingIgnoredDuringExecution".into(),
                self.node_selector_terms(),
            );
        }
        let preferred = self.chance(0.3);
        if preferred {
            self.features.insert(Feature::Preferred);
            let terms: Vec<Value> = (0..self.rng.random_range(1..=2))
                .map(|_| {
                    let pref = self.node_selector_term();
                    json!({"weight": self.rng.random_range(1..=100), "preference": pref})
                })
                .collect();
            node_affinity.insert(
                "preferredDuringSchedulingIgnoredDuringExecution".into(),
                Value::Array(terms),
            );
        }
        if !node_affinity.is_empty() {
            affinity.insert("nodeAffinity".into(), Value::Object(node_affinity));
        }
        if self.chance(0.45) {
            self.features.insert(Feature::Tolerations);
            spec.insert("tolerations".into(), self.tolerations());
        }
        for (kind, feature) in [
            ("podAffinity", Feature::PodAffinity),
            ("podAntiAffinity", Feature::PodAntiAffinity),
        ] {
            let mut block = Map::new();
            if inter_pod && self.chance(0.35) {
                self.features.insert(feature);
                let n = self.rng.random_range(1..=2);
                let terms: Vec<Value> = (0..n).map(|_| self.pod_affinity_term(&ns)).collect();
                block.insert(
                    "requiredDuringSchedulingIgnoredDuringExecution".into(),
                    Value::Array(terms),
                );
            }
            if preferred && self.chance(0.5) {
                let term = self.pod_affinity_term(&ns);
                block.insert(
                    "preferredDuringSchedulingIgnoredDuringExecution".into(),
                    json!([{"weight": self.rng.random_range(1..=100), "podAffinityTerm": term}]),
                );
            }
            if !block.is_empty() {
                affinity.insert(kind.into(), Value::Object(block));
            }
        }
        if !affinity.is_empty() {
            spec.insert("affinity".into(), Value::Object(affinity));
        }
        if inter_pod && self.chance(0.45) {
            let (constraints, hard) = self.spread_constraints();
            self.features.insert(if hard {
                Feature::SpreadDoNotSchedule
            } else {
                Feature::SpreadScheduleAnyway
            });
            spec.insert("topologySpreadConstraints".into(), constraints);
        }
        json!({
            "metadata": {"name": "incoming", "namespace": ns, "labels": labels},
            "spec": spec
        })
    }

    /// A container with requests: sometimes none, sometimes only CPU or only memory (a
    /// dimension the pod does not request still meets an overcommitted node), sometimes
    /// limits only (the API server copies them into requests); existing pods sometimes use
    /// ephemeral storage, the incoming pod sometimes asks for scalar resources.
    fn container(&mut self, name: &str, incoming: bool) -> Value {
        let cpus: &[&str] = if incoming {
            &["100m", "250m", "500m", "1", "2", "3"]
        } else {
            &["100m", "250m", "500m", "1", "2"]
        };
        let mems: &[&str] = if incoming {
            &["128Mi", "512Mi", "1Gi", "2Gi", "6Gi"]
        } else {
            &["128Mi", "512Mi", "1Gi", "2Gi"]
        };
        let mut c = json!({"name": name, "image": "registry.invalid/pause:3"});
        if self.chance(0.1) {
            return c;
        }
        let mut requests = Map::new();
        let cpu = self.chance(0.8);
        if cpu {
            requests.insert("cpu".into(), json!(self.pick(cpus)));
        }
        let memory = self.chance(0.8);
        if memory {
            requests.insert("memory".into(), json!(self.pick(mems)));
        }
        if incoming && cpu != memory {
            self.features.insert(Feature::PartialRequests);
        }
        let mut limits = Map::new();
        if self.chance(if incoming { 0.1 } else { 0.12 }) {
            if incoming {
                self.features.insert(Feature::ScalarResources);
            }
            requests.insert(
                "ephemeral-storage".into(),
                json!(self.pick(&["500Mi", "5Gi"])),
            );
        }
        if incoming && self.chance(0.12) {
            self.features.insert(Feature::ScalarResources);
            // Extended resources cannot be overcommitted: limits must equal requests. Zero
            // is a request too (kube-scheduler then checks every dimension).
            let n = self.pick(&["1", "1", "2", "0"]);
            requests.insert(DONGLE.into(), json!(n));
            limits.insert(DONGLE.into(), json!(n));
        }
        if limits.is_empty() && self.chance(0.06) {
            // Limits only: the API server defaults the requests to them.
            c["resources"] = json!({"limits": requests});
            return c;
        }
        c["resources"] = if limits.is_empty() {
            json!({"requests": requests})
        } else {
            json!({"requests": requests, "limits": limits})
        };
        c
    }

    /// One or two host ports, distinct within the pod (the API rejects duplicates).
    fn host_ports(&mut self) -> Value {
        let choices: &[(u16, &str)] = &[(8080, "TCP"), (8080, "UDP"), (9090, "TCP")];
        let picked = self.some(choices, 1, 2);
        let ports: Vec<Value> = picked
            .into_iter()
            .map(|(port, proto)| {
                let mut p = json!({"containerPort": port, "hostPort": port, "protocol": proto});
                let ip = self.pick(&["", "", "0.0.0.0", "127.0.0.1", "10.0.0.1"]);
                if !ip.is_empty() {
                    p["hostIP"] = json!(ip);
                }
                p
            })
            .collect();
        Value::Array(ports)
    }
}
