//! Binding a pod's `WaitForFirstConsumer` claims before the pod (kube-scheduler's
//! VolumeBinding `PreBind`, `BindPodVolumes`): write each chosen volume's `claimRef` and
//! each provisioned claim's `selected-node` annotation, then wait until the PV controller
//! (or the provisioner) has bound every claim, as the watch shows them, for at most the
//! bind timeout (upstream's `bindTimeoutSeconds`, 600 s). [`progress`] is the pure check of
//! one moment (`checkBindings`): done, still waiting, or failed for good (a volume's claim
//! reference reset or taken, a claim's selected node changed, a claim or volume deleted).
use std::time::Duration;

use tokio::time::Instant;

use crate::api::{ApiError, KubeApi};
use crate::reservations::VolumeWrites;
use crate::volumes::{SELECTED_NODE, VolumeLookup, fully_bound};

/// How often the wait re-reads the watch-fed stores (upstream polls every second).
pub const POLL: Duration = Duration::from_millis(250);

/// Why a pod's volumes could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum VolumeBindError {
    /// A write was refused or failed.
    #[error("binding volumes: {0}")]
    Write(#[from] ApiError),
    /// The cluster moved against the binding.
    #[error("binding volumes: {0}")]
    Failed(String),
    /// Not bound within the timeout.
    #[error("binding volumes: timed out after {0:?} waiting for the claims to be bound")]
    TimedOut(Duration),
}

/// Where the binding of one pod's claims stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Every claim is bound.
    Done,
    /// Something is not visible or not bound yet.
    Waiting,
    /// It cannot succeed.
    Failed(String),
}

/// The `resourceVersion`s the writes produced, in `w`'s order (bindings, then provisions):
/// the watch must have reached them before a missing reference counts as a reset.
pub type Written = Vec<u64>;

fn version(meta: &kube::api::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// `checkBindings` for `w` on `node`, with the versions the writes returned.
pub fn progress(
    w: &VolumeWrites,
    written: &[u64],
    node: &str,
    lookup: &impl VolumeLookup,
) -> Progress {
    let mut waiting = false;
    for (i, b) in w.bindings.iter().enumerate() {
        let (ns, name, uid) = &b.claim;
        let Some(pv) = lookup.volume(&b.volume) else {
            return Progress::Failed(format!("persistentvolume {:?} was deleted", b.volume));
        };
        if version(&pv.metadata) < written.get(i).copied().unwrap_or(0) {
            waiting = true;
            continue;
        }
        let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        match claim_ref {
            Some(r)
                if r.namespace.as_deref() == Some(ns.as_str())
                    && r.name.as_deref() == Some(name.as_str())
                    && r.uid.as_deref().is_some_and(|u| !u.is_empty()) =>
            {
                if r.uid.as_deref() != Some(uid.as_str()) {
                    return Progress::Failed(format!(
                        "persistentvolume {:?} is bound to another claim {ns}/{name}",
                        b.volume
                    ));
                }
            }
            Some(r) if r.name.is_some() && r.name.as_deref() != Some(name.as_str()) => {
                return Progress::Failed(format!(
                    "persistentvolume {:?} was taken by claim {}/{}",
                    b.volume,
                    r.namespace.as_deref().unwrap_or_default(),
                    r.name.as_deref().unwrap_or_default()
                ));
            }
            _ => {
                return Progress::Failed(format!(
                    "ClaimRef got reset for persistentvolume {:?}",
                    b.volume
                ));
            }
        }
        match lookup.claim(ns, name) {
            None => {
                return Progress::Failed(format!("persistentvolumeclaim {ns}/{name} was deleted"));
            }
            Some(c) if !fully_bound(&c) => waiting = true,
            Some(_) => {}
        }
    }
    let offset = w.bindings.len();
    for (i, p) in w.provisions.iter().enumerate() {
        let (ns, name, _) = &p.claim;
        let Some(c) = lookup.claim(ns, name) else {
            return Progress::Failed(format!("persistentvolumeclaim {ns}/{name} was deleted"));
        };
        if version(&c.metadata) < written.get(offset + i).copied().unwrap_or(0) {
            waiting = true;
            continue;
        }
        let selected = c
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SELECTED_NODE));
        if selected.map(String::as_str) != Some(node) {
            return Progress::Failed(format!(
                "provisioning failed for persistentvolumeclaim {ns}/{name} (its selected \
                 node is now {selected:?})"
            ));
        }
        if !fully_bound(&c) {
            waiting = true;
        }
    }
    if waiting {
        Progress::Waiting
    } else {
        Progress::Done
    }
}

/// Writes `w` for the pod `pod` (`namespace/name`) and waits until its claims are bound on
/// `node`, reading the watch-fed stores through `lookup` (called anew at each poll), for at
/// most `timeout`.
pub async fn bind_volumes<L: VolumeLookup>(
    api: &KubeApi,
    pod: &str,
    node: &str,
    w: &VolumeWrites,
    timeout: Duration,
    lookup: impl Fn() -> Option<L>,
) -> Result<(), VolumeBindError> {
    let mut written: Written = Vec::with_capacity(w.bindings.len() + w.provisions.len());
    for b in &w.bindings {
        let v = api.bind_volume(pod, b).await?;
        written.push(v.parse().unwrap_or(0));
    }
    for p in &w.provisions {
        let v = api.select_node(pod, p).await?;
        written.push(v.parse().unwrap_or(0));
    }
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(l) = lookup() {
            match progress(w, &written, node, &l) {
                Progress::Done => return Ok(()),
                Progress::Failed(why) => return Err(VolumeBindError::Failed(why)),
                Progress::Waiting => {}
            }
        }
        if Instant::now() >= deadline {
            return Err(VolumeBindError::TimedOut(timeout));
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservations::{Provision, StaticBinding};
    use crate::volume_lookup::fake::Fake;
    use crate::volumes::{BIND_COMPLETED, SELECTED_NODE};
    use serde_json::json;

    fn writes() -> VolumeWrites {
        VolumeWrites {
            bindings: vec![StaticBinding {
                volume: "pv1".into(),
                volume_version: "10".into(),
                claim: ("ns".into(), "data".into(), "u1".into()),
                claim_version: "5".into(),
                pre_bound: false,
            }],
            provisions: vec![Provision {
                claim: ("ns".into(), "logs".into(), "u2".into()),
                claim_version: "6".into(),
                node: "n1".into(),
            }],
        }
    }

    fn pv(rv: &str, claim_ref: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"name": "pv1", "resourceVersion": rv},
               "spec": {"claimRef": claim_ref, "hostPath": {"path": "/x"}}})
    }

    fn claim(name: &str, rv: &str, bound: bool, selected: Option<&str>) -> serde_json::Value {
        let mut annotations = serde_json::Map::new();
        if bound {
            annotations.insert(BIND_COMPLETED.into(), json!("yes"));
        }
        if let Some(n) = selected {
            annotations.insert(SELECTED_NODE.into(), json!(n));
        }
        let mut c = json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv,
                                        "annotations": annotations}, "spec": {}});
        if bound {
            c["spec"]["volumeName"] = json!("pv-x");
        }
        c
    }

    fn ours() -> serde_json::Value {
        json!({"namespace": "ns", "name": "data", "uid": "u1"})
    }

    #[test]
    fn waits_for_the_watch_then_for_the_controllers() {
        let w = writes();
        let written = vec![11, 7];
        let mut f = Fake::default();
        // The watch has not caught up with our writes.
        f.add_volume(pv("10", json!(null)));
        f.add_claim(claim("data", "5", false, None));
        f.add_claim(claim("logs", "6", false, None));
        assert_eq!(progress(&w, &written, "n1", &f), Progress::Waiting);
        // Our writes are visible; the controllers have not bound the claims yet.
        f.add_volume(pv("11", ours()));
        f.add_claim(claim("logs", "7", false, Some("n1")));
        assert_eq!(progress(&w, &written, "n1", &f), Progress::Waiting);
        f.add_claim(claim("data", "8", true, None));
        f.add_claim(claim("logs", "9", true, Some("n1")));
        assert_eq!(progress(&w, &written, "n1", &f), Progress::Done);
    }

    #[test]
    fn resets_thefts_and_deletions_fail_for_good() {
        let w = writes();
        let written = vec![11, 7];
        let base = || {
            let mut f = Fake::default();
            f.add_volume(pv("11", ours()));
            f.add_claim(claim("data", "8", true, None));
            f.add_claim(claim("logs", "9", true, Some("n1")));
            f
        };
        assert_eq!(progress(&w, &written, "n1", &base()), Progress::Done);
        let failed = |f: &Fake| matches!(progress(&w, &written, "n1", f), Progress::Failed(_));
        let mut f = base();
        f.add_volume(pv("12", json!(null)));
        assert!(failed(&f), "claimRef reset");
        let mut f = base();
        f.add_volume(pv(
            "12",
            json!({"namespace": "ns", "name": "other", "uid": "u9"}),
        ));
        assert!(failed(&f), "taken by another claim");
        let mut f = base();
        f.volumes.clear();
        assert!(failed(&f), "volume deleted");
        let mut f = base();
        f.add_claim(claim("logs", "10", false, Some("n2")));
        assert!(failed(&f), "selected node changed");
        let mut f = base();
        f.claims.remove("ns/data");
        assert!(failed(&f), "claim deleted");
    }
}
