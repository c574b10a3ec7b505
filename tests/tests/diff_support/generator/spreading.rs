//! The generator's draws for default topology spreading (`PodTopologySpread`'s
//! `defaultConstraints`, which both schedulers' diff profiles set — see
//! [`DEFAULT_CONSTRAINTS`]): Services, ReplicationControllers, ReplicaSets and StatefulSets
//! in the incoming pod's namespace whose selectors select it or not, so that a pod without
//! constraints of its own is spread by the selector they make (kube-scheduler's
//! `DefaultSelector`). Only for incoming pods without `topologySpreadConstraints`. Drawn
//! from their own random stream after everything else, so a scenario without them is
//! exactly what it was before.
use std::collections::BTreeSet;

use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use serde_json::{Map, Value, json};

use super::DrawFor;
use crate::diff_support::scenario::*;

/// Salt of the spreading's random stream (chosen so that no regression case of
/// `e2e_diff` draws from it).
pub const SPREAD_STREAM: u64 = 0x7370_7265_6164_0008;
/// Share of scenarios with selecting objects.
const SPREAD_SHARE: f64 = 0.25;

/// The default constraints both schedulers' diff profiles set (as YAML flow, valid in both
/// configs): hard, by zone and by node.
pub const DEFAULT_CONSTRAINTS: &str = "[{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, \
     whenUnsatisfiable: DoNotSchedule}, {maxSkew: 2, topologyKey: kubernetes.io/hostname, \
     whenUnsatisfiable: DoNotSchedule}]";

fn pick<T: Clone>(rng: &mut StdRng, items: &[T]) -> T {
    items.choose(rng).expect("non-empty vocabulary").clone()
}

/// A label selector of the vocabulary: `app` (sometimes the incoming pod's), `team`, or an
/// expression.
fn selector(rng: &mut StdRng, incoming_app: Option<&str>) -> (Map<String, Value>, Option<Value>) {
    let mut labels = Map::new();
    let app = match incoming_app {
        Some(a) if rng.random_bool(0.7) => a.to_string(),
        _ => pick(rng, APPS).to_string(),
    };
    labels.insert("app".into(), json!(app));
    if rng.random_bool(0.3) {
        labels.insert("team".into(), json!(pick(rng, TEAMS)));
    }
    let expression = rng
        .random_bool(0.2)
        .then(|| json!({"key": "team", "operator": pick(rng, &["Exists", "DoesNotExist"])}));
    // `team` required and absent at once would be a selector no template can match, which
    // the API server refuses for the controllers.
    if expression
        .as_ref()
        .is_some_and(|e| e["operator"] == "DoesNotExist")
    {
        labels.remove("team");
    }
    (labels, expression)
}

/// Sometimes objects that select pods in `namespace`; empty when the incoming pod spreads
/// itself.
pub(super) fn draw(
    at: &DrawFor<'_>,
    incoming: &Value,
    features: &mut BTreeSet<Feature>,
) -> Vec<Value> {
    let namespace = at.namespace;
    let mut rng = at.rng(SPREAD_STREAM);
    if !rng.random_bool(SPREAD_SHARE)
        || incoming
            .pointer("/spec/topologySpreadConstraints")
            .is_some()
    {
        return Vec::new();
    }
    features.insert(Feature::DefaultSpread);
    let app = incoming
        .pointer("/metadata/labels/app")
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut out = Vec::new();
    for i in 0..rng.random_range(1..=3) {
        let (labels, expression) = selector(&mut rng, app.as_deref());
        let name = format!("sel{i}");
        let template_labels = {
            let mut t = labels.clone();
            if let Some(e) = &expression
                && e["operator"] == "Exists"
            {
                t.entry("team").or_insert_with(|| json!("x"));
            }
            if expression
                .as_ref()
                .is_some_and(|e| e["operator"] == "DoesNotExist")
            {
                t.remove("team");
            }
            t
        };
        let template = json!({"metadata": {"labels": template_labels},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause:3"}]}});
        let object = match rng.random_range(0..4) {
            0 => json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"selector": labels, "ports": [{"port": 80}]}}),
            1 => json!({"apiVersion": "v1", "kind": "ReplicationController",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"replicas": 0, "selector": labels, "template": template}}),
            2 => {
                let mut sel = json!({"matchLabels": labels});
                if let Some(e) = &expression {
                    sel["matchExpressions"] = json!([e]);
                }
                json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {"replicas": 0, "selector": sel, "template": template}})
            }
            _ => {
                let mut sel = json!({"matchLabels": labels});
                if let Some(e) = &expression {
                    sel["matchExpressions"] = json!([e]);
                }
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {"replicas": 0, "serviceName": name, "selector": sel,
                             "template": template}})
            }
        };
        out.push(object);
    }
    out
}
