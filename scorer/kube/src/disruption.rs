//! PodDisruptionBudgets for preemption: a watch over whichever `policy` version the API
//! server serves (`policy/v1` from Kubernetes 1.21 on, `policy/v1beta1` before — the e2e
//! server is 1.20, and k8s-openapi no longer carries v1beta1, so objects are read as
//! [`DynamicObject`]s), kept as the framework's [`DisruptionBudget`]s.
use std::sync::{Arc, Mutex};

use ::kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use ::kube::runtime::watcher::Event;
use ::kube::{Client, ResourceExt};
use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
use loadstar_framework::preemption::DisruptionBudget;
use loadstar_kube_model::listing::Listing;
use tracing::{debug, info, warn};

use super::constraints;

/// Why a budget could not be read (it is then left out, as kube-scheduler skips budgets
/// whose selector does not parse).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BudgetError {
    /// `spec` or `status` does not have the PodDisruptionBudget shape.
    #[error("PodDisruptionBudget {key}: {field} is malformed: {reason}")]
    Malformed {
        /// namespace/name.
        key: String,
        /// `spec` or `status`.
        field: &'static str,
        /// The decoder's message.
        reason: String,
    },
    /// The selector has an invalid requirement.
    #[error("PodDisruptionBudget {key}: {reason}")]
    Selector {
        /// namespace/name.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

/// Converts one PodDisruptionBudget object.
pub fn budget(obj: &DynamicObject) -> Result<DisruptionBudget, BudgetError> {
    let namespace = obj.namespace().unwrap_or_default();
    let key = format!("{namespace}/{}", obj.name_any());
    let part = |field: &'static str| obj.data.get(field).cloned().unwrap_or_default();
    let malformed = |field: &'static str, e: serde_json::Error| BudgetError::Malformed {
        key: key.clone(),
        field,
        reason: e.to_string(),
    };
    let spec: Option<PodDisruptionBudgetSpec> =
        serde_json::from_value(part("spec")).map_err(|e| malformed("spec", e))?;
    let status: Option<PodDisruptionBudgetStatus> =
        serde_json::from_value(part("status")).map_err(|e| malformed("status", e))?;
    let selector = constraints::label_selector(
        "spec.selector",
        spec.as_ref().and_then(|s| s.selector.as_ref()),
    )
    .map_err(|e| BudgetError::Selector {
        key: key.clone(),
        reason: e.to_string(),
    })?;
    Ok(DisruptionBudget {
        namespace,
        selector,
        disruptions_allowed: status.as_ref().map_or(0, |s| s.disruptions_allowed),
        disrupted_pods: status
            .and_then(|s| s.disrupted_pods)
            .map(|m| m.into_keys().collect())
            .unwrap_or_default(),
    })
}

/// The cluster's budgets, by `namespace/name`, as the watch last saw them.
#[derive(Debug, Default)]
pub struct Budgets {
    inner: Mutex<Listing<DisruptionBudget>>,
}

impl Budgets {
    fn lock(&self) -> std::sync::MutexGuard<'_, Listing<DisruptionBudget>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every budget, for one preemption.
    pub fn all(&self) -> Vec<DisruptionBudget> {
        self.lock().values().cloned().collect()
    }

    /// Applies one watch event.
    pub fn apply(&self, ev: Event<DynamicObject>) {
        self.lock()
            .apply(super::watch_health::listed(ev, |_, o| checked(o)));
    }
}

/// A budget, or `None` with a warning when it cannot be read.
fn checked(o: &DynamicObject) -> Option<DisruptionBudget> {
    budget(o)
        .map_err(|e| warn!(error = %e, "ignoring a PodDisruptionBudget preemption cannot read"))
        .ok()
}

/// The served PodDisruptionBudget resource: `policy/v1`, else `policy/v1beta1`.
async fn served(client: &Client) -> ApiResource {
    let v1 = client.list_api_group_resources("policy/v1").await;
    let version = match v1 {
        Ok(list)
            if list
                .resources
                .iter()
                .any(|r| r.name == "poddisruptionbudgets") =>
        {
            "v1"
        }
        Ok(_) | Err(_) => "v1beta1",
    };
    debug!(version, "PodDisruptionBudget version");
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "policy",
        version,
        "PodDisruptionBudget",
    ))
}

/// Watches the budgets into `budgets` until aborted.
pub(crate) async fn reflect(
    client: Client,
    budgets: Arc<Budgets>,
    status: super::watch_health::WatchStatus,
) {
    let resource = served(&client).await;
    info!(api_version = %resource.api_version, "watching PodDisruptionBudgets");
    super::watch_health::watch_dynamic(client, &resource, status, |ev| budgets.apply(ev)).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).expect("a dynamic object")
    }

    #[test]
    fn reads_v1beta1_objects_and_skips_broken_ones() {
        let ok = object(json!({
            "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "db", "namespace": "ns"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
            "status": {"disruptionsAllowed": 2, "currentHealthy": 3, "desiredHealthy": 1,
                       "expectedPods": 3, "observedGeneration": 1,
                       "disruptedPods": {"db-0": "2026-11-23T10:00:00Z"}}
        }));
        let b = budget(&ok).expect("readable");
        assert_eq!(b.namespace, "ns");
        assert_eq!(b.disruptions_allowed, 2);
        assert!(b.disrupted_pods.contains("db-0"));
        assert_eq!(b.selector.expect("selector").match_labels["app"], "db");
        // No status yet (no disruption controller): nothing may be disrupted.
        let fresh = object(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
        }));
        assert_eq!(budget(&fresh).expect("readable").disruptions_allowed, 0);
        let bad = object(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "bad", "namespace": "ns"},
            "spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}
        }));
        assert!(matches!(budget(&bad), Err(BudgetError::Selector { .. })));
        let budgets = Budgets::default();
        budgets.apply(Event::Init);
        budgets.apply(Event::InitApply(ok.clone()));
        budgets.apply(Event::InitApply(bad));
        assert!(
            budgets.all().is_empty(),
            "a relist shows only when complete"
        );
        budgets.apply(Event::InitDone);
        assert_eq!(budgets.all().len(), 1);
        budgets.apply(Event::Apply(fresh));
        budgets.apply(Event::Delete(ok));
        assert_eq!(budgets.all()[0].disruptions_allowed, 0);
    }
}
