//! Storage capacity for `VolumeBinding` (`CSIStorageCapacity`: alpha in 1.19, GA in 1.24):
//! a watch over whichever `storage.k8s.io` version the API server serves (`v1` from 1.24,
//! `v1beta1` from 1.21, `v1alpha1` when a 1.19–1.23 server has it on; none: capacity is not
//! checked, as upstream with the feature off), read as [`DynamicObject`]s since k8s-openapi
//! carries `v1` only, into `loadstar-kube-model`'s per-class [`Capacities`].
use std::sync::Arc;

use ::kube::Client;
use ::kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use ::kube::runtime::reflector::Store;
use ::kube::runtime::watcher::Event;
use k8s_openapi::api::storage::v1::CSIDriver;
use tracing::{info, warn};

pub use loadstar_kube_model::capacity::{
    CAPACITY_UNKNOWN, Capacities, Capacity, CapacityError, capacity, claim_capacity,
};

/// Applies one watch event to `capacities`.
pub fn apply(capacities: &Capacities, ev: Event<DynamicObject>) {
    capacities.apply(super::watch_health::listed(ev, |key, o| {
        capacity(key, &o.data)
            .map_err(|e| warn!(error = %e, "ignoring a CSIStorageCapacity that cannot be read"))
            .ok()
    }));
}

/// The served `CSIStorageCapacity` resource, newest version first; `None` when none is.
/// Discovery that fails other than with "not found" (the API server unreachable at start)
/// is retried with the watches' backoff, so an outage at start does not turn the check off.
async fn served(client: &Client) -> Option<ApiResource> {
    let mut backoff = super::watch_health::watch_backoff();
    loop {
        let mut unsure = None;
        for version in ["v1", "v1beta1", "v1alpha1"] {
            match client
                .list_api_group_resources(&format!("storage.k8s.io/{version}"))
                .await
            {
                Ok(list)
                    if list
                        .resources
                        .iter()
                        .any(|r| r.name == "csistoragecapacities") =>
                {
                    return Some(ApiResource::from_gvk(&GroupVersionKind::gvk(
                        "storage.k8s.io",
                        version,
                        "CSIStorageCapacity",
                    )));
                }
                Ok(_) => {}
                Err(::kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => unsure = Some(e),
            }
        }
        let e = unsure?;
        let delay = backoff
            .next()
            .unwrap_or(super::watch_health::WATCH_BACKOFF_MAX);
        warn!(error = %e, ?delay, "cannot tell which CSIStorageCapacity version is served; retrying");
        tokio::time::sleep(delay).await;
    }
}

/// Watches the capacities into `capacities` until aborted, calling `changed` when capacity
/// becomes known and after each change. Capacity is known once the CSIDrivers (`drivers`)
/// are listed and the capacities too, or no version is served (then, logged, it is not
/// checked and this returns).
pub(crate) async fn reflect(
    client: Client,
    capacities: Arc<Capacities>,
    drivers: Store<CSIDriver>,
    status: super::watch_health::WatchStatus,
    changed: impl Fn() + Send + 'static,
) {
    let resource = served(&client).await;
    // Until the drivers are listed, whether a driver tracks capacity is not known. An error
    // means the store's writer is gone (the scorer is stopping).
    if drivers.wait_until_ready().await.is_err() {
        return;
    }
    let Some(resource) = resource else {
        info!(
            "the API server serves no CSIStorageCapacity version: storage capacity is not \
             checked (as kube-scheduler with the feature off)"
        );
        capacities.set_unserved();
        changed();
        return;
    };
    info!(api_version = %resource.api_version, "watching CSIStorageCapacities");
    super::watch_health::watch_dynamic(client, &resource, status, |ev| {
        let listed = matches!(ev, Event::InitDone);
        let change = matches!(ev, Event::Apply(_) | Event::Delete(_));
        apply(&capacities, ev);
        if listed {
            capacities.set_served();
        }
        if listed || change {
            changed();
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(name: &str, capacity: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1alpha1", "kind": "CSIStorageCapacity",
            "metadata": {"name": name, "namespace": "kube-system"},
            "storageClassName": "lvm",
            "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": "n1"}},
            "capacity": capacity
        }))
        .expect("object")
    }

    #[test]
    fn watch_events_reach_the_tables_by_namespace_and_name() {
        let caps = Capacities::default();
        caps.set_served();
        let n1 = [("kubernetes.io/hostname".to_string(), "n1".to_string())].into();
        let room = |bytes: i64| caps.class("lvm").expect("served").has_room(bytes, &n1);
        apply(&caps, Event::Init);
        apply(&caps, Event::InitApply(pool("a", "1Gi")));
        apply(&caps, Event::InitDone);
        assert!(room(1 << 30) && !room(2 << 30));
        apply(&caps, Event::Apply(pool("b", "4Gi")));
        assert!(room(4 << 30));
        apply(&caps, Event::Delete(pool("b", "4Gi")));
        assert!(!room(2 << 30));
        // Unreadable: dropped, with a warning, never a panic.
        apply(&caps, Event::Apply(pool("a", "lots")));
        assert!(!room(1));
    }
}
