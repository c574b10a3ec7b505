//! Preemption scenarios, from their own random stream (the filter scenarios of
//! [`super::generate`] stay exactly what they were): nodes filled to the last core by pods of
//! several priorities, sometimes PodDisruptionBudgets over some of them, and an incoming pod
//! that fits nowhere as things stand — so kube-scheduler's DefaultPreemption runs, and its
//! nominated node and victims can be compared with Loadstar's proposal.
//!
//! Three rules keep kube-scheduler's answer a function of the scenario alone:
//! - every existing pod has a distinct `status.startTime` (ties between unstarted pods are
//!   broken by `time.Now()` in 1.20, i.e. at random);
//! - nodes are full by the incoming pod's own filters: no node passes them, so the recording
//!   extender (which rejects every node it is shown) never turns a feasible node into a
//!   preemption candidate without victims — a case real clusters never see;
//! - existing pods have `terminationGracePeriodSeconds: 0`, so victims vanish at once (there
//!   is no kubelet to finish a graceful deletion).
use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};

use super::mix;
use crate::diff_support::scenario::*;

/// Salt of the preemption scenarios' random stream.
const PREEMPTION_STREAM: u64 = 0x7072_6565_6D70_0001;

/// The PriorityClasses preemption scenarios use: name, value, `preemptionPolicy` (which
/// admission copies into the pod; a pod may not set it itself).
pub const CLASSES: &[(&str, i32, &str)] = &[
    ("diff-p100", 100, PREEMPT),
    ("diff-p200", 200, PREEMPT),
    ("diff-p300", 300, PREEMPT),
    ("diff-p400", 400, PREEMPT),
    ("diff-p1000", 1000, PREEMPT),
    ("diff-p1000-never", 1000, "Never"),
];

/// The default `preemptionPolicy`.
const PREEMPT: &str = "PreemptLowerPriority";

/// Start times are this many seconds after 2026-01-01T00:00:00Z, distinct per pod.
fn start_time(offset: u32) -> String {
    let (h, m, s) = (offset / 3600, offset / 60 % 60, offset % 60);
    format!("2026-01-01T{h:02}:{m:02}:{s:02}Z")
}

fn quantity_millis(m: i64) -> String {
    if m % 1000 == 0 {
        format!("{}", m / 1000)
    } else {
        format!("{m}m")
    }
}

struct P {
    rng: StdRng,
    features: BTreeSet<Feature>,
}

impl P {
    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items
            .choose(&mut self.rng)
            .expect("non-empty vocabulary")
            .clone()
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    fn anti_affinity(&mut self, app: &str) -> Value {
        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": app}},
            "topologyKey": HOSTNAME
        }]}})
    }
}

/// Generates preemption scenario `index` of `seed`; `prefix` names its namespaces and nodes.
pub fn generate_preemption(seed: u64, index: usize, prefix: &str) -> Scenario {
    let mut g = P {
        rng: StdRng::seed_from_u64(mix(seed ^ mix(index as u64) ^ PREEMPTION_STREAM)),
        features: BTreeSet::from([Feature::Preemption]),
    };
    let namespaces = vec![prefix.to_string(), format!("{prefix}-b")];
    let node_count = g.rng.random_range(3..=6);
    let mut nodes = Vec::new();
    let mut pods: Vec<Value> = Vec::new();
    // (pod index → distinct start offset), shuffled.
    let mut offsets: Vec<u32> = (0..128).map(|i| i * 97 + 13).collect();
    offsets.shuffle(&mut g.rng);
    for i in 0..node_count {
        let name = format!("{prefix}-n{i}");
        let zone = ZONES[i % 2];
        let few_slots = g.chance(0.15);
        let cpu_millis: i64 = if few_slots {
            4000
        } else {
            g.pick(&[4000, 4000, 3000, 6000])
        };
        let slots = if few_slots { 3 } else { 110 };
        let mut spec = Map::new();
        if g.chance(0.15) {
            g.features.insert(Feature::Taints);
            spec.insert(
                "taints".into(),
                json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
            );
        }
        let allocatable = json!({"cpu": quantity_millis(cpu_millis), "memory": "16Gi",
                                 "pods": slots.to_string()});
        nodes.push(json!({
            "metadata": {"name": name, "labels": {HOSTNAME: name, ZONE: zone}},
            "spec": spec,
            "status": {
                "capacity": allocatable.clone(),
                "allocatable": allocatable,
                "conditions": [{
                    "type": "Ready", "status": "True", "reason": "SimulatedKubelet",
                    "message": "node object without a kubelet (loadstar diff test)"
                }]
            }
        }));
        // Fill the node: to the last 500m, or to its pod slots.
        let mut free = cpu_millis;
        let mut placed = 0;
        while free >= 500 && placed < slots {
            let sizes: Vec<i64> = [500, 1000, 1500, 2000]
                .into_iter()
                .filter(|s| *s <= free)
                .collect();
            let mut cpu = g.pick(&sizes);
            if few_slots && placed == slots - 1 {
                cpu = free;
            }
            free -= cpu;
            placed += 1;
            let k = pods.len();
            if few_slots {
                g.features.insert(Feature::PodCount);
            }
            let class = if g.chance(0.1) {
                CLASSES[4].0
            } else {
                g.pick(&CLASSES[..4]).0
            };
            let app = g.pick(APPS);
            let namespace = if g.chance(0.8) {
                &namespaces[0]
            } else {
                &namespaces[1]
            };
            let mut pod_spec = json!({
                "nodeName": name,
                "priorityClassName": class,
                "terminationGracePeriodSeconds": 0,
                "schedulerName": SCHEDULER_NAME,
                "containers": [{"name": "c", "image": "registry.invalid/pause:3",
                                "resources": {"requests": {"cpu": quantity_millis(cpu),
                                                           "memory": "256Mi"}}}]
            });
            if g.chance(0.12) {
                g.features.insert(Feature::ExistingAntiAffinity);
                let other = g.pick(APPS);
                pod_spec["affinity"] = g.anti_affinity(other);
            }
            pods.push(json!({
                "metadata": {"name": format!("e{k}"), "namespace": namespace,
                             "labels": {"app": app}},
                "spec": pod_spec,
                "status": {"startTime": start_time(offsets[k % offsets.len()])}
            }));
        }
    }
    let mut budgets = Vec::new();
    if g.chance(0.5) {
        g.features.insert(Feature::DisruptionBudgets);
        let n = g.rng.random_range(1..=2);
        for b in 0..n {
            let app = g.pick(APPS);
            let allowed = g.pick(&[0, 0, 1, 2]);
            budgets.push(json!({
                "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
                "metadata": {"name": format!("pdb-{b}"), "namespace": namespaces[0]},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}},
                "status": {"disruptionsAllowed": allowed, "currentHealthy": 0,
                           "desiredHealthy": 0, "expectedPods": 0, "observedGeneration": 1}
            }));
        }
    }
    let mut class = if g.chance(0.75) {
        CLASSES[4].0
    } else {
        CLASSES[2].0
    };
    let cpu = g.pick(&["500m", "1", "1500m", "2", "3"]);
    let mut spec = json!({
        "schedulerName": SCHEDULER_NAME,
        "priorityClassName": class,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "registry.invalid/pause:3",
                        "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]
    });
    if g.chance(0.25) {
        g.features.insert(Feature::PodAntiAffinity);
        let app = g.pick(APPS);
        spec["affinity"] = g.anti_affinity(app);
    }
    if g.chance(0.25) {
        g.features.insert(Feature::SpreadDoNotSchedule);
        let app = g.pick(APPS);
        let key = g.pick(&[ZONE, HOSTNAME]);
        let skew = g.pick(&[1, 1, 2]);
        spec["topologySpreadConstraints"] = json!([{
            "maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}}
        }]);
    }
    if g.chance(0.15) {
        g.features.insert(Feature::Tolerations);
        spec["tolerations"] = json!([{"key": "dedicated", "operator": "Exists"}]);
    }
    if g.chance(0.15) {
        g.features.insert(Feature::PreemptionNever);
        class = CLASSES[5].0;
        spec["priorityClassName"] = json!(class);
    }
    let app = g.pick(APPS);
    let incoming = json!({
        "metadata": {"name": "incoming", "namespace": namespaces[0], "labels": {"app": app},
                     "annotations": {crate::diff_support::extender::ACCEPT: "true"}},
        "spec": spec
    });
    Scenario {
        seed,
        index,
        namespaces,
        nodes,
        pods,
        incoming,
        history: Vec::new(),
        volumes: Vec::new(),
        claims: Vec::new(),
        budgets,
        priority_classes: CLASSES
            .iter()
            .map(|(n, v, policy)| (n.to_string(), (*v, policy.to_string())))
            .collect::<BTreeMap<_, _>>(),
        features: g.features,
        classes: Vec::new(),
        csinodes: Vec::new(),
        selectors: Vec::new(),
    }
}

/// The incoming pod as admission leaves it: `spec.priority` and `spec.preemptionPolicy`
/// from its class — what Loadstar is sent as `pod_json` before the pod exists.
pub fn admitted(incoming: &Value, classes: &BTreeMap<String, (i32, String)>) -> Value {
    let mut pod = incoming.clone();
    let class = str_at(incoming, "/spec/priorityClassName");
    if let Some((value, policy)) = classes.get(&class) {
        pod["spec"]["priority"] = json!(value);
        pod["spec"]["preemptionPolicy"] = json!(policy);
    }
    pod
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preemption_scenarios_are_deterministic_full_and_distinctly_started() {
        for i in 0..50 {
            let a = generate_preemption(7, i, "p");
            assert_eq!(a, generate_preemption(7, i, "p"));
            let starts: BTreeSet<String> = a
                .pods
                .iter()
                .map(|p| str_at(p, "/status/startTime"))
                .collect();
            assert_eq!(
                starts.len(),
                a.pods.len(),
                "scenario {i}: start times repeat"
            );
            assert!(a.is_preemption());
        }
    }
}
