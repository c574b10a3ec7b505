//! Storage capacity as `VolumeBinding` reads it (`CSIStorageCapacity`: alpha in 1.19, GA
//! in 1.24): one object converted from its JSON (every served version has the same fields),
//! and the cluster's capacities kept per storage class as the framework's [`ClassCapacity`]
//! tables the volume filter checks per node, each built once per change of its class. The
//! watch that feeds them is `loadstar-kube`'s `capacity`.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use loadstar_common::quantity::parse_units;
use loadstar_framework::snapshot::{ClassCapacity, LabelSelector};
use loadstar_framework::volumes::NO_PROVISIONER;

use crate::constraints;
use crate::listing::{Listed, Listing};
use crate::volume_lookup::VolumeLookup;

/// Why a claim to provision waits while the scorer starts: it cannot tell yet whether its
/// CSI driver tracks capacity, nor how much there is.
pub const CAPACITY_UNKNOWN: &str =
    "waiting for the CSIDriver and CSIStorageCapacity lists (storage capacity not known yet)";

/// What `hasEnoughCapacity` checks for `claim`, a claim to bind of the class `class_name`:
/// the class's capacities for a claim that requests storage, of a class whose CSI driver
/// opts in, once the API server serves them; `None`: nothing to check. Until the drivers
/// and capacities are listed, a claim that requests storage of a class that provisions
/// waits (`Err`, the reason): it fails closed, as every other volume fact not known yet,
/// since provisioning on a node without room would only be undone by the provisioner.
pub fn claim_capacity(
    claim: &PersistentVolumeClaim,
    class_name: &str,
    class: &StorageClass,
    lookup: &impl VolumeLookup,
) -> Result<Option<Arc<ClassCapacity>>, String> {
    let requests_storage = claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .is_some_and(|r| r.contains_key("storage"));
    let provisions = !class.provisioner.is_empty() && class.provisioner != NO_PROVISIONER;
    if requests_storage && provisions && !lookup.capacity_known() {
        return Err(CAPACITY_UNKNOWN.to_string());
    }
    Ok(
        (requests_storage && lookup.tracks_capacity(&class.provisioner))
            .then(|| lookup.class_capacity(class_name))
            .flatten(),
    )
}

/// Why a `CSIStorageCapacity` could not be read (it then offers nothing).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CapacityError {
    /// The object does not have the `CSIStorageCapacity` shape.
    #[error("CSIStorageCapacity {key}: malformed: {reason}")]
    Malformed {
        /// namespace/name.
        key: String,
        /// The decoder's message.
        reason: String,
    },
    /// Its `nodeTopology` or a size does not parse.
    #[error("CSIStorageCapacity {key}: {reason}")]
    Field {
        /// namespace/name.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

/// One capacity as the volume filter reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capacity {
    /// `storageClassName`.
    pub class: String,
    /// `nodeTopology` (`None`: no node reaches it).
    pub topology: Option<LabelSelector>,
    /// The largest volume it can take: `maximumVolumeSize`, else `capacity` (upstream's
    /// `volumeLimit`); `None`: unknown, so it offers nothing.
    pub limit_bytes: Option<i64>,
}

/// Converts the object `key` (`namespace/name`) from its fields (`storageClassName`,
/// `nodeTopology`, `capacity`, `maximumVolumeSize`).
pub fn capacity(key: &str, fields: &serde_json::Value) -> Result<Capacity, CapacityError> {
    let field = |reason: String| CapacityError::Field {
        key: key.to_string(),
        reason,
    };
    let c: CSIStorageCapacity =
        serde_json::from_value(fields.clone()).map_err(|e| CapacityError::Malformed {
            key: key.to_string(),
            reason: e.to_string(),
        })?;
    let topology = c
        .node_topology
        .as_ref()
        .map(|t| constraints::label_selector("nodeTopology", Some(t)))
        .transpose()
        .map_err(|e| field(e.to_string()))?
        .flatten();
    let size = |name: &str, q: Option<&Quantity>| {
        q.map(|q| parse_units(&q.0).map_err(|e| field(format!("{name}: {e}"))))
            .transpose()
    };
    let limit_bytes = match size("maximumVolumeSize", c.maximum_volume_size.as_ref())? {
        Some(max) => Some(max),
        None => size("capacity", c.capacity.as_ref())?,
    };
    Ok(Capacity {
        class: c.storage_class_name,
        topology,
        limit_bytes,
    })
}

/// The cluster's capacities, by `namespace/name`, as the watch last saw them, with each
/// class's table built once per change of that class.
#[derive(Debug, Default)]
pub struct Capacities {
    inner: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Whether the API server serves a version and it was listed (until then, and without
    /// one, capacity is not checked).
    served: bool,
    /// Whether it is known yet how capacity is checked: the CSIDrivers and the capacities
    /// listed, or no capacity version served.
    known: bool,
    listing: Listing<Capacity>,
    /// Each class's table, dropped when one of its capacities changes.
    tables: HashMap<String, Arc<ClassCapacity>>,
}

impl Capacities {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The capacities of a served version were listed (with the CSIDrivers): capacity is
    /// checked from now on.
    pub fn set_served(&self) {
        let mut s = self.lock();
        s.served = true;
        s.known = true;
    }

    /// No capacity version is served (and the CSIDrivers were listed): capacity is not
    /// checked.
    pub fn set_unserved(&self) {
        let mut s = self.lock();
        s.served = false;
        s.known = true;
    }

    /// Whether it is known yet whether and how capacity is checked; until then a claim that
    /// may need it waits, rather than be provisioned where there may be no room.
    pub fn known(&self) -> bool {
        self.lock().known
    }

    /// What the capacities of `class` offer; `None` while no version is served.
    pub fn class(&self, class: &str) -> Option<Arc<ClassCapacity>> {
        let mut s = self.lock();
        if !s.served {
            return None;
        }
        if let Some(t) = s.tables.get(class) {
            return Some(t.clone());
        }
        let mut table = ClassCapacity::default();
        for c in s.listing.values().filter(|c| c.class == class) {
            table.add(c.topology.clone(), c.limit_bytes);
        }
        let table = Arc::new(table);
        s.tables.insert(class.to_string(), table.clone());
        Some(table)
    }

    /// Applies one watch event; the tables of the classes it touches are built again
    /// when next asked for.
    pub fn apply(&self, ev: Listed<Capacity>) {
        let mut s = self.lock();
        match &ev {
            Listed::Done => s.tables.clear(),
            Listed::Put(_, Some(c)) => {
                s.tables.remove(&c.class);
            }
            _ => {}
        }
        if let Some(old) = s.listing.apply(ev) {
            s.tables.remove(&old.class);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(class: &str, node: &str, capacity: &str) -> serde_json::Value {
        json!({
            "storageClassName": class,
            "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": node}},
            "capacity": capacity
        })
    }

    fn read(v: serde_json::Value) -> Option<Capacity> {
        capacity("kube-system/x", &v).ok()
    }

    fn host(n: &str) -> std::collections::BTreeMap<String, String> {
        [("kubernetes.io/hostname".to_string(), n.to_string())].into()
    }

    #[test]
    fn reads_sizes_topology_and_the_maximum_volume_size_first() {
        let c = capacity("ns/a", &pool("lvm", "n1", "10Gi")).expect("capacity");
        assert_eq!(c.class, "lvm");
        assert_eq!(c.limit_bytes, Some(10 << 30));
        assert!(c.topology.expect("topology").matches(&host("n1")));
        let mut capped = pool("lvm", "n1", "10Gi");
        capped["maximumVolumeSize"] = json!("2Gi");
        assert_eq!(
            capacity("ns/b", &capped).expect("capped").limit_bytes,
            Some(2 << 30)
        );
        assert_eq!(
            capacity("ns/c", &json!({"storageClassName": "lvm"})).expect("unknown"),
            Capacity {
                class: "lvm".into(),
                topology: None,
                limit_bytes: None
            }
        );
        // Garbage never panics: a clear error naming the object.
        let mut bad = pool("lvm", "n1", "1Gi");
        bad["capacity"] = json!("lots");
        assert!(
            capacity("ns/d", &bad)
                .expect_err("bad size")
                .to_string()
                .starts_with("CSIStorageCapacity ns/d: capacity:")
        );
        bad["capacity"] = json!({"a": 1});
        assert!(matches!(
            capacity("ns/d", &bad),
            Err(CapacityError::Malformed { .. })
        ));
        let mut selector = pool("lvm", "n1", "1Gi");
        selector["nodeTopology"] = json!({"matchExpressions": [{"key": "k", "operator": "Bogus"}]});
        assert!(matches!(
            capacity("ns/e", &selector),
            Err(CapacityError::Field { .. })
        ));
    }

    #[test]
    fn tables_follow_the_watch_per_class_and_only_once_served() {
        let caps = Capacities::default();
        caps.apply(Listed::Started);
        caps.apply(Listed::One("a".into(), read(pool("lvm", "n1", "10Gi"))));
        caps.apply(Listed::One("b".into(), read(pool("other", "n2", "10Gi"))));
        caps.apply(Listed::Done);
        assert_eq!(caps.class("lvm"), None, "not served yet: not checked");
        assert!(!caps.known());
        caps.set_served();
        assert!(caps.known());
        let lvm = caps.class("lvm").expect("served");
        assert!(lvm.has_room(5 << 30, &host("n1")));
        assert!(!lvm.has_room(5 << 30, &host("n2")), "another class's pool");
        // The table is kept until one of its class's capacities changes.
        assert!(Arc::ptr_eq(&lvm, &caps.class("lvm").expect("cached")));
        caps.apply(Listed::Put("a".into(), read(pool("lvm", "n1", "1Gi"))));
        let room = |class: &str, bytes: i64, node: &str| {
            caps.class(class)
                .expect("served")
                .has_room(bytes, &host(node))
        };
        assert!(!room("lvm", 5 << 30, "n1"));
        // A capacity moved to another class leaves the old one.
        caps.apply(Listed::Put("a".into(), read(pool("other", "n1", "10Gi"))));
        assert!(!room("lvm", 1, "n1"));
        assert!(room("other", 5 << 30, "n1"));
        caps.apply(Listed::Gone("a".into()));
        assert!(!room("other", 5 << 30, "n1"));
        // An unreadable update drops the object rather than keep a stale size.
        let mut bad = pool("other", "n2", "10Gi");
        bad["capacity"] = json!("lots");
        caps.apply(Listed::Put("b".into(), read(bad)));
        assert!(!room("other", 1, "n2"));
        // A relist replaces everything: what it does not list is gone.
        caps.apply(Listed::Put("c".into(), read(pool("lvm", "n3", "1Gi"))));
        assert!(room("lvm", 1, "n3"));
        caps.apply(Listed::Started);
        caps.apply(Listed::One("z".into(), read(pool("lvm", "n9", "1Ti"))));
        assert!(
            room("lvm", 1, "n3"),
            "the old list serves until the new one is complete"
        );
        caps.apply(Listed::Done);
        assert!(room("lvm", 1 << 40, "n9"));
        assert!(!room("lvm", 1, "n3"));
    }
}
