//! The selector `PodTopologySpread` gives a profile's default constraints for a pod, as
//! kube-scheduler 1.20's `helper.DefaultSelector` builds it from the Services,
//! ReplicationControllers, ReplicaSets and StatefulSets of the pod's namespace that select
//! it: the Services' and ReplicationControllers' selectors merged (a later one's value wins
//! on a shared key), then every selecting ReplicaSet's and StatefulSet's requirements
//! added. An object with an empty selector selects nothing; a pod without labels is
//! selected by no controller; one ReplicaSet (or StatefulSet) with an invalid selector
//! makes upstream's lister fail, and then no ReplicaSet (StatefulSet) counts. Pure over a
//! [`Controllers`] lookup; the live one is four reflector stores, trimmed to what this
//! reads.
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ReplicationController, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as KubeSelector;
use kube::runtime::reflector::Store;
use loadstar_framework::snapshot::{LabelSelector, SelectorOp, SelectorRequirement};

use crate::constraints::label_selector;

/// The selecting objects of a namespace.
pub trait Controllers {
    /// Services' `spec.selector`s.
    fn services(&self, namespace: &str) -> Vec<BTreeMap<String, String>>;
    /// ReplicationControllers' `spec.selector`s.
    fn replication_controllers(&self, namespace: &str) -> Vec<BTreeMap<String, String>>;
    /// ReplicaSets' `spec.selector`s.
    fn replica_sets(&self, namespace: &str) -> Vec<Option<KubeSelector>>;
    /// StatefulSets' `spec.selector`s.
    fn stateful_sets(&self, namespace: &str) -> Vec<Option<KubeSelector>>;
}

fn map_matches(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// `LabelSelectorAsSelector` of every object, or `None` when one is invalid (upstream's
/// lister then errs and none counts); `nil` selectors become `None` entries.
fn converted(selectors: &[Option<KubeSelector>]) -> Option<Vec<Option<LabelSelector>>> {
    selectors
        .iter()
        .map(|s| label_selector("selector", s.as_ref()).ok())
        .collect()
}

/// The requirements of a selector, `matchLabels` as `In [value]`.
fn requirements(s: &LabelSelector) -> impl Iterator<Item = SelectorRequirement> + '_ {
    s.match_labels
        .iter()
        .map(|(k, v)| SelectorRequirement {
            key: k.clone(),
            op: SelectorOp::In,
            values: vec![v.clone()],
        })
        .chain(s.match_expressions.iter().cloned())
}

fn is_empty(s: &LabelSelector) -> bool {
    s.match_labels.is_empty() && s.match_expressions.is_empty()
}

/// The default selector of a pod in `namespace` with `labels` (`None`: nothing selects it).
pub fn default_selector(
    namespace: &str,
    labels: &BTreeMap<String, String>,
    lookup: &impl Controllers,
) -> Option<LabelSelector> {
    let mut set: BTreeMap<String, String> = BTreeMap::new();
    for s in lookup.services(namespace) {
        if !s.is_empty() && map_matches(&s, labels) {
            set.extend(s);
        }
    }
    let mut expressions = Vec::new();
    if !labels.is_empty() {
        for s in lookup.replication_controllers(namespace) {
            if !s.is_empty() && map_matches(&s, labels) {
                set.extend(s);
            }
        }
        for group in [
            lookup.replica_sets(namespace),
            lookup.stateful_sets(namespace),
        ] {
            for s in converted(&group).into_iter().flatten().flatten() {
                if !is_empty(&s) && s.matches(labels) {
                    expressions.extend(requirements(&s));
                }
            }
        }
    }
    let out = LabelSelector {
        match_labels: set,
        match_expressions: expressions,
    };
    (!is_empty(&out)).then_some(out)
}

/// The live stores (trimmed: templates dropped on the way in).
#[derive(Clone)]
pub struct ControllerStores {
    /// Services.
    pub services: Store<Service>,
    /// ReplicationControllers.
    pub replication_controllers: Store<ReplicationController>,
    /// ReplicaSets.
    pub replica_sets: Store<ReplicaSet>,
    /// StatefulSets.
    pub stateful_sets: Store<StatefulSet>,
}

impl std::fmt::Debug for ControllerStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerStores")
            .field("services", &self.services.state().len())
            .field("replica_sets", &self.replica_sets.state().len())
            .finish_non_exhaustive()
    }
}

fn in_namespace<K, T>(store: &Store<K>, namespace: &str, get: impl Fn(&K) -> T) -> Vec<T>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store
        .state()
        .iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(namespace))
        .map(|o| get(o))
        .collect()
}

impl Controllers for ControllerStores {
    fn services(&self, namespace: &str) -> Vec<BTreeMap<String, String>> {
        in_namespace(&self.services, namespace, |s| {
            s.spec
                .as_ref()
                .and_then(|s| s.selector.clone())
                .unwrap_or_default()
        })
    }
    fn replication_controllers(&self, namespace: &str) -> Vec<BTreeMap<String, String>> {
        in_namespace(&self.replication_controllers, namespace, |r| {
            r.spec
                .as_ref()
                .and_then(|s| s.selector.clone())
                .unwrap_or_default()
        })
    }
    fn replica_sets(&self, namespace: &str) -> Vec<Option<KubeSelector>> {
        in_namespace(&self.replica_sets, namespace, |r| {
            r.spec.as_ref().map(|s| s.selector.clone())
        })
    }
    fn stateful_sets(&self, namespace: &str) -> Vec<Option<KubeSelector>> {
        in_namespace(&self.stateful_sets, namespace, |r| {
            r.spec.as_ref().map(|s| s.selector.clone())
        })
    }
}

/// Drops what a reflected ReplicaSet carries beyond its selector (its pod template).
pub fn trim_replica_set(rs: &mut ReplicaSet) {
    rs.metadata.managed_fields = None;
    if let Some(s) = rs.spec.as_mut() {
        s.template = None;
    }
    rs.status = None;
}

/// Drops a StatefulSet's template and claim templates.
pub fn trim_stateful_set(ss: &mut StatefulSet) {
    ss.metadata.managed_fields = None;
    if let Some(s) = ss.spec.as_mut() {
        s.template = Default::default();
        s.volume_claim_templates = None;
    }
    ss.status = None;
}

/// Drops a ReplicationController's template.
pub fn trim_replication_controller(rc: &mut ReplicationController) {
    rc.metadata.managed_fields = None;
    if let Some(s) = rc.spec.as_mut() {
        s.template = None;
    }
    rc.status = None;
}

/// Drops a Service's status and managed fields.
pub fn trim_service(s: &mut Service) {
    s.metadata.managed_fields = None;
    s.status = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Default)]
    struct Fake {
        services: Vec<BTreeMap<String, String>>,
        rcs: Vec<BTreeMap<String, String>>,
        rss: Vec<Option<KubeSelector>>,
        sss: Vec<Option<KubeSelector>>,
    }

    impl Controllers for Fake {
        fn services(&self, _: &str) -> Vec<BTreeMap<String, String>> {
            self.services.clone()
        }
        fn replication_controllers(&self, _: &str) -> Vec<BTreeMap<String, String>> {
            self.rcs.clone()
        }
        fn replica_sets(&self, _: &str) -> Vec<Option<KubeSelector>> {
            self.rss.clone()
        }
        fn stateful_sets(&self, _: &str) -> Vec<Option<KubeSelector>> {
            self.sss.clone()
        }
    }

    fn m(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn sel(v: serde_json::Value) -> Option<KubeSelector> {
        Some(serde_json::from_value(v).expect("selector"))
    }

    #[test]
    fn services_and_controllers_selecting_the_pod_make_its_selector() {
        let pod = m(&[("app", "web"), ("tier", "front")]);
        let f = Fake {
            services: vec![m(&[("app", "web")]), m(&[("app", "db")]), m(&[])],
            rcs: vec![m(&[("tier", "front")])],
            rss: vec![
                sel(json!({"matchLabels": {"app": "web"},
                    "matchExpressions": [{"key": "tier", "operator": "Exists"}]})),
                sel(json!({"matchLabels": {"app": "other"}})),
                sel(json!({})),
                None,
            ],
            sss: vec![],
        };
        let s = default_selector("ns", &pod, &f).expect("selected");
        assert_eq!(s.match_labels, m(&[("app", "web"), ("tier", "front")]));
        let keys: Vec<(&str, SelectorOp)> = s
            .match_expressions
            .iter()
            .map(|r| (r.key.as_str(), r.op))
            .collect();
        assert_eq!(
            keys,
            vec![("app", SelectorOp::In), ("tier", SelectorOp::Exists)]
        );
        assert!(s.matches(&pod));
        assert!(!s.matches(&m(&[("app", "web")])));
    }

    #[test]
    fn nothing_selecting_the_pod_gives_no_selector() {
        let f = Fake {
            services: vec![m(&[("app", "db")])],
            ..Default::default()
        };
        assert_eq!(default_selector("ns", &m(&[("app", "web")]), &f), None);
        // A pod without labels is selected by no controller (services with selectors
        // need labels too).
        let f = Fake {
            rss: vec![sel(
                json!({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}),
            )],
            ..Default::default()
        };
        assert_eq!(default_selector("ns", &m(&[]), &f), None);
    }

    #[test]
    fn one_invalid_replica_set_selector_discards_every_replica_set() {
        let pod = m(&[("app", "web")]);
        let f = Fake {
            rss: vec![
                sel(json!({"matchLabels": {"app": "web"}})),
                sel(json!({"matchExpressions": [{"key": "app", "operator": "Bogus"}]})),
            ],
            ..Default::default()
        };
        assert_eq!(default_selector("ns", &pod, &f), None);
        let f = Fake {
            rss: vec![sel(json!({"matchLabels": {"app": "web"}}))],
            ..Default::default()
        };
        assert!(default_selector("ns", &pod, &f).is_some());
    }
}
