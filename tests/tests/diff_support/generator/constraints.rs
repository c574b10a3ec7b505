//! The generator's draws for placement constraints — node selectors and node-affinity
//! terms, tolerations, label selectors, inter-pod affinity terms, topology spread
//! constraints — one function per field family, over the vocabulary of [`super::scenario`].
use std::collections::BTreeSet;

use rand::Rng;
use serde_json::{Map, Value, json};

use super::Gen;
use crate::diff_support::scenario::*;

impl Gen {
    // --- node selection ------------------------------------------------------------------

    pub(super) fn node_selector(&mut self) -> Value {
        let mut sel = Map::new();
        let n = self.rng.random_range(1..=2);
        for _ in 0..n {
            match self.rng.random_range(0..4) {
                0 => sel.insert(DISK.into(), json!(self.pick(&["ssd", "hdd"]))),
                1 => sel.insert(TIER.into(), json!(self.pick(&["a", "b"]))),
                2 => sel.insert(ZONE.into(), json!(self.pick(&self.zones.clone()))),
                _ => sel.insert(OLD_ZONE.into(), json!(self.pick(&self.zones.clone()))),
            };
        }
        Value::Object(sel)
    }

    pub(super) fn node_selector_terms(&mut self) -> Value {
        let n = self.rng.random_range(1..=2);
        let terms: Vec<Value> = (0..n).map(|_| self.node_selector_term()).collect();
        json!({"nodeSelectorTerms": terms})
    }

    pub(super) fn node_selector_term(&mut self) -> Value {
        if self.chance(0.08) {
            // DaemonSet-style: pinned to one node by name.
            let node = self.pick_node();
            return json!({"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}
            ]});
        }
        let n = self.rng.random_range(1..=2);
        let exprs: Vec<Value> = (0..n).map(|_| self.node_requirement()).collect();
        json!({"matchExpressions": exprs})
    }

    pub(super) fn node_requirement(&mut self) -> Value {
        let zones = self.zones.clone();
        match self.rng.random_range(0..9) {
            0 => json!({"key": ZONE, "operator": "In", "values": self.some(&zones, 1, 2)}),
            1 => json!({"key": ZONE, "operator": "NotIn", "values": self.some(&zones, 1, 1)}),
            2 => json!({"key": OLD_ZONE, "operator": "In", "values": self.some(&zones, 1, 2)}),
            3 => json!({"key": DISK, "operator": self.pick(&["Exists", "DoesNotExist"])}),
            4 => json!({"key": TIER, "operator": "In", "values": [self.pick(&["a", "b"])]}),
            5 => json!({"key": TIER, "operator": "NotIn", "values": ["b"]}),
            6 => json!({"key": GEN, "operator": self.pick(&["Gt", "Lt"]),
                        "values": [self.pick(&["1", "2", "3"])]}),
            7 => {
                let names = self.node_names.clone();
                json!({"key": HOSTNAME, "operator": "In", "values": self.some(&names, 1, 3)})
            }
            _ => json!({"key": ZONE, "operator": "Exists"}),
        }
    }

    pub(super) fn tolerations(&mut self) -> Value {
        let n = self.rng.random_range(1..=3);
        let mut out = Vec::new();
        for _ in 0..n {
            let t = match self.rng.random_range(0..10) {
                0 => json!({"operator": "Exists"}),
                1 => json!({"key": UNSCHEDULABLE_TAINT, "operator": "Exists",
                            "effect": self.pick(&["NoSchedule", "NoExecute"])}),
                2 | 3 => json!({"key": self.pick(TAINT_KEYS), "operator": "Exists"}),
                4 => json!({"key": self.pick(TAINT_KEYS), "operator": "Exists",
                            "effect": self.pick(EFFECTS)}),
                5 => json!({"key": self.pick(TAINT_KEYS), "operator": "Equal",
                            "value": self.pick(&["x", "y", ""])}),
                6 => json!({"key": self.pick(TAINT_KEYS), "operator": "Equal", "value": "x",
                            "effect": "NoExecute", "tolerationSeconds": 30}),
                _ => json!({"key": self.pick(TAINT_KEYS), "operator": "Equal",
                            "value": self.pick(&["x", "y", ""]), "effect": self.pick(EFFECTS)}),
            };
            out.push(t);
        }
        Value::Array(out)
    }

    // --- inter-pod ------------------------------------------------------------------------

    /// A label selector over the pod vocabulary: matchLabels and/or matchExpressions, and
    /// rarely the empty selector (matches every pod).
    pub(super) fn label_selector(&mut self) -> Value {
        if self.chance(0.04) {
            return json!({});
        }
        let mut sel = Map::new();
        let with_labels = self.chance(0.7);
        if with_labels {
            let mut m = Map::new();
            m.insert("app".into(), json!(self.pick(APPS)));
            if self.chance(0.3) {
                m.insert("team".into(), json!(self.pick(TEAMS)));
            }
            sel.insert("matchLabels".into(), Value::Object(m));
        }
        if !with_labels || self.chance(0.4) {
            let n = self.rng.random_range(1..=2);
            let exprs: Vec<Value> = (0..n)
                .map(|_| match self.rng.random_range(0..6) {
                    0 => json!({"key": "app", "operator": "In", "values": self.some(APPS, 1, 2)}),
                    1 => {
                        json!({"key": "app", "operator": "NotIn", "values": self.some(APPS, 1, 2)})
                    }
                    2 => json!({"key": "team", "operator": "Exists"}),
                    3 => json!({"key": "team", "operator": "DoesNotExist"}),
                    4 => json!({"key": "app", "operator": "Exists"}),
                    _ => json!({"key": "team", "operator": "In", "values": [self.pick(TEAMS)]}),
                })
                .collect();
            sel.insert("matchExpressions".into(), Value::Array(exprs));
        }
        Value::Object(sel)
    }

    /// A required (anti-)affinity term of a pod in `own_ns`: topology key hostname, zone, or
    /// one that some nodes lack; sometimes explicit namespaces.
    pub(super) fn pod_affinity_term(&mut self, own_ns: &str) -> Value {
        let key = self.pick(&[HOSTNAME, HOSTNAME, ZONE, ZONE, OLD_ZONE, DISK]);
        let mut term = json!({"topologyKey": key});
        // Rarely no selector at all: it matches no pod (unlike the empty one).
        if !self.chance(0.03) {
            term["labelSelector"] = self.label_selector();
        }
        if self.chance(0.25) {
            let other = self
                .namespaces
                .iter()
                .find(|n| n.as_str() != own_ns)
                .cloned()
                .unwrap_or_default();
            term["namespaces"] = match self.rng.random_range(0..3) {
                0 => json!([own_ns]),
                1 => json!([other]),
                _ => json!([own_ns, other]),
            };
        }
        term
    }

    /// One or two constraints, unique by (topologyKey, whenUnsatisfiable) as the API
    /// requires; also says whether any is `DoNotSchedule`.
    pub(super) fn spread_constraints(&mut self) -> (Value, bool) {
        let n = self.rng.random_range(1..=2);
        let mut seen = BTreeSet::new();
        let mut hard = false;
        let mut out = Vec::new();
        for _ in 0..n {
            let key = self.pick(&[ZONE, ZONE, HOSTNAME, HOSTNAME, OLD_ZONE, DISK]);
            let when = self.pick(&["DoNotSchedule", "DoNotSchedule", "ScheduleAnyway"]);
            if !seen.insert((key, when)) {
                continue;
            }
            hard |= when == "DoNotSchedule";
            let mut c = json!({
                "maxSkew": self.rng.random_range(1..=2),
                "topologyKey": key,
                "whenUnsatisfiable": when
            });
            if !self.chance(0.04) {
                c["labelSelector"] = self.label_selector();
            }
            out.push(c);
        }
        (Value::Array(out), hard)
    }
}
