//! `VolumeRestrictions` filter: volumes that only one pod (or only readers) may use.
//!
//! - Inline disks on a node, as kube-scheduler 1.20's `volumerestrictions` plugin: a GCE
//!   persistent disk or an iSCSI target used read-write, an EBS volume, or an RBD image
//!   (overlapping monitors, same pool and image) used read-write by a pod already on the
//!   node. Reason, as upstream: `node(s) had no available disk`.
//! - `ReadWriteOncePod` claims across the cluster, as the plugin does since 1.22 (GA in
//!   1.29): while any placed pod (bound or assumed, on any node) mounts one of the pod's
//!   `ReadWriteOncePod` claims, every node refuses it with upstream's
//!   `node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod
//!   access mode`. Its PreFilter counts those uses once per pod and cycle; preemption's
//!   updates follow each victim's uses. Upstream's PreFilter counts each claim in use once
//!   while its updates count each pod's use; both count uses here, so that removing then
//!   adding a pod gives back the same state, and a victim counts only in the pod's
//!   namespace.
//!
//! Evicting the other pod lifts either (upstream: `Unschedulable`; preemption may help).
use std::collections::BTreeSet;

use loadstar_framework::snapshot::{NodeView, PodInfo, PodOnNode};
use loadstar_framework::{CycleContext, FilterPlugin, PreFilterState, Reason};

use crate::args::{NoArgs, PluginError, parse_args};

/// Plugin name.
pub const NAME: &str = "VolumeRestrictions";
/// Upstream's reason (`ErrReasonDiskConflict`).
pub const REASON: &str = "node(s) had no available disk";
/// Upstream's reason for a `ReadWriteOncePod` claim in use (`ErrReasonReadWriteOncePodConflict`).
pub const REASON_READ_WRITE_ONCE_POD: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";

/// The inline-disk and `ReadWriteOncePod` conflict filter.
#[derive(Debug, Clone, Default)]
pub struct VolumeRestrictions;

impl VolumeRestrictions {
    /// Builds it; it takes no arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        parse_args::<NoArgs>(NAME, args)?;
        Ok(VolumeRestrictions)
    }
}

/// The pod's `ReadWriteOncePod` claims and how many placed pods' volumes use them now.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ReadWriteOncePodState {
    claims: BTreeSet<String>,
    uses: i64,
}

impl ReadWriteOncePodState {
    /// How many of `existing`'s volumes mount one of the claims.
    fn uses_by(&self, namespace: &str, existing: &PodOnNode) -> i64 {
        if existing.namespace != namespace {
            return 0;
        }
        existing
            .claims
            .iter()
            .filter(|c| self.claims.contains(*c))
            .count() as i64
    }
}

/// The pod's `ReadWriteOncePod` claims (resolved with its volumes).
fn read_write_once_pod(pod: &PodInfo) -> &[String] {
    pod.volumes
        .as_ref()
        .map_or(&[], |v| v.read_write_once_pod.as_slice())
}

/// The state for `pod` over every node of the snapshot; `None` when it has no such claim.
fn prefilter_state(nodes: &[NodeView], pod: &PodInfo) -> Option<ReadWriteOncePodState> {
    let claims = read_write_once_pod(pod);
    if claims.is_empty() {
        return None;
    }
    let mut state = ReadWriteOncePodState {
        claims: claims.iter().cloned().collect(),
        uses: 0,
    };
    state.uses = nodes
        .iter()
        .flat_map(|n| n.alloc.pods.iter())
        .filter(|p| p.uid != pod.uid)
        .map(|p| state.uses_by(&pod.namespace, p))
        .sum();
    Some(state)
}

/// The inline-disk check on one node.
fn disks_fit(pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
    if pod.disks.is_empty() {
        return Ok(());
    }
    let used = node.alloc.pods.iter().flat_map(|p| &p.disks);
    for u in used {
        if pod.disks.iter().any(|d| d.conflicts(u)) {
            return Err(REASON.into());
        }
    }
    Ok(())
}

/// Both checks, given the `ReadWriteOncePod` state.
fn check(
    state: Option<&ReadWriteOncePodState>,
    pod: &PodInfo,
    node: &NodeView,
) -> Result<(), Reason> {
    disks_fit(pod, node)?;
    match state {
        Some(s) if s.uses > 0 => Err(REASON_READ_WRITE_ONCE_POD.into()),
        _ => Ok(()),
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }

    fn prefilter(&self, ctx: &CycleContext<'_>, pod: &PodInfo) -> Option<PreFilterState> {
        prefilter_state(ctx.snapshot.nodes(), pod).map(|s| Box::new(s) as PreFilterState)
    }

    /// As upstream's PreFilter `Skip`: no inline disk, and no `ReadWriteOncePod` claim in
    /// use.
    fn skips(&self, state: Option<&PreFilterState>, pod: &PodInfo) -> bool {
        pod.disks.is_empty()
            && state
                .and_then(|s| s.downcast_ref::<ReadWriteOncePodState>())
                .is_none_or(|s| s.uses == 0)
    }

    /// Evicting the pod that holds the disk or the claim frees it (upstream:
    /// `Unschedulable`).
    fn preemption_may_help(&self, _reason: &str) -> bool {
        true
    }

    fn filter_prepared(
        &self,
        ctx: &CycleContext<'_>,
        state: Option<&PreFilterState>,
        pod: &PodInfo,
        node: &NodeView,
    ) -> Result<(), Reason> {
        match state.and_then(|s| s.downcast_ref::<ReadWriteOncePodState>()) {
            Some(s) => check(Some(s), pod, node),
            None => self.filter(ctx, pod, node),
        }
    }

    fn prefilter_update(
        &self,
        state: &mut PreFilterState,
        pod: &PodInfo,
        existing: &PodOnNode,
        _node: &NodeView,
        delta: i64,
    ) {
        if let Some(s) = state.downcast_mut::<ReadWriteOncePodState>() {
            s.uses += delta * s.uses_by(&pod.namespace, existing);
        }
    }

    /// Without a PreFilter state (a single-node check), counts the claims' uses on the spot.
    fn filter(&self, ctx: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        let state = prefilter_state(ctx.snapshot.nodes(), pod);
        check(state.as_ref(), pod, node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::{InlineDisk, VolumeNeeds};
    use loadstar_testkit::snapshot::*;

    fn rbd(monitors: &[&str], image: &str, read_only: bool) -> InlineDisk {
        InlineDisk::Rbd {
            monitors: monitors.iter().map(|m| m.to_string()).collect(),
            pool: "rbd".into(),
            image: image.into(),
            read_only,
        }
    }

    #[test]
    fn conflict_rules_follow_upstream() {
        let gce = |ro| InlineDisk::GcePd {
            name: "d".into(),
            read_only: ro,
        };
        assert!(gce(false).conflicts(&gce(true)));
        assert!(!gce(true).conflicts(&gce(true)), "readers share a disk");
        let ebs = InlineDisk::AwsEbs {
            volume_id: "vol-1".into(),
        };
        assert!(
            ebs.conflicts(&ebs.clone()),
            "EBS: even two readers conflict"
        );
        assert!(rbd(&["a", "b"], "img", false).conflicts(&rbd(&["b", "c"], "img", true)));
        assert!(!rbd(&["a"], "img", false).conflicts(&rbd(&["c"], "img", false)));
        assert!(!rbd(&["a"], "img", true).conflicts(&rbd(&["a"], "img", true)));
        let iscsi = |iqn: &str, ro| InlineDisk::Iscsi {
            iqn: iqn.into(),
            read_only: ro,
        };
        assert!(
            iscsi("iqn.2001-04.com.example:x", false)
                .conflicts(&iscsi("iqn.2001-04.com.example:x", false))
        );
        assert!(
            !iscsi("iqn.2001-04.com.example:x", false)
                .conflicts(&iscsi("iqn.2001-04.com.example:y", false))
        );
        assert!(
            !gce(false).conflicts(&ebs),
            "different kinds never conflict"
        );
    }

    /// A placed pod `name` in `namespace` mounting `claims`.
    fn claiming(name: &str, namespace: &str, claims: &[&str]) -> PodOnNode {
        PodOnNode {
            uid: name.into(),
            name: name.into(),
            namespace: namespace.into(),
            claims: claims.iter().map(|c| c.to_string()).collect(),
            ..Default::default()
        }
    }

    /// The new pod (namespace `default`) with these `ReadWriteOncePod` claims.
    fn wanting(claims: &[&str]) -> PodInfo {
        let mut p = pod(100, MIB);
        p.volumes = Some(VolumeNeeds {
            read_write_once_pod: claims.iter().map(|c| c.to_string()).collect(),
            ..Default::default()
        });
        p
    }

    #[test]
    fn a_read_write_once_pod_claim_in_use_anywhere_refuses_every_node_until_its_pod_goes() {
        let holder = claiming("holder", "default", &["data", "data"]);
        let snap = snapshot(vec![
            with_pod(kube_node("n1", 1000, GIB), holder.clone()),
            with_pod(
                kube_node("n2", 1000, GIB),
                claiming("elsewhere", "other", &["data"]),
            ),
            kube_node("n3", 1000, GIB),
        ]);
        let c = ctx(&snap);
        let plugin = VolumeRestrictions;
        let verdicts = |state: Option<&PreFilterState>, p: &PodInfo| -> Vec<Result<(), Reason>> {
            snap.nodes()
                .iter()
                .map(|n| plugin.filter_prepared(&c, state, p, n))
                .collect()
        };
        let refused = vec![Err(Reason::from(REASON_READ_WRITE_ONCE_POD)); 3];
        let p = wanting(&["data"]);
        let mut state = plugin.prefilter(&c, &p).expect("a state");
        assert!(!plugin.skips(Some(&state), &p));
        assert_eq!(verdicts(Some(&state), &p), refused);
        // Without the PreFilter's state, the single-node check counts the same.
        let alone: Vec<_> = snap
            .nodes()
            .iter()
            .map(|n| plugin.filter(&c, &p, n))
            .collect();
        assert_eq!(alone, refused);
        assert!(plugin.preemption_may_help(REASON_READ_WRITE_ONCE_POD));
        // Preemption removing the holder (both its volumes mount the claim) frees it
        // everywhere; adding it back gives the state back.
        let before = state
            .downcast_ref::<ReadWriteOncePodState>()
            .expect("ours")
            .clone();
        plugin.prefilter_update(&mut state, &p, &holder, &snap.nodes()[0], -1);
        assert_eq!(verdicts(Some(&state), &p), vec![Ok(()); 3]);
        // A pod of another namespace using a claim of the same name is not a victim that
        // counts.
        let elsewhere = claiming("elsewhere", "other", &["data"]);
        plugin.prefilter_update(&mut state, &p, &elsewhere, &snap.nodes()[1], -1);
        assert_eq!(verdicts(Some(&state), &p), vec![Ok(()); 3]);
        plugin.prefilter_update(&mut state, &p, &elsewhere, &snap.nodes()[1], 1);
        plugin.prefilter_update(&mut state, &p, &holder, &snap.nodes()[0], 1);
        assert_eq!(state.downcast_ref::<ReadWriteOncePodState>(), Some(&before));
        // A claim nobody uses, or none of that mode: nothing to check (the PreFilter skips).
        for p in [wanting(&["logs"]), pod(100, MIB)] {
            let state = plugin.prefilter(&c, &p);
            assert!(plugin.skips(state.as_ref(), &p), "{:?}", p.volumes);
            assert_eq!(verdicts(state.as_ref(), &p), vec![Ok(()); 3]);
        }
        // The pod itself, placed already (a `Score` of a bound pod), is not its own rival.
        let mut itself = claiming("uid-new", "default", &["data"]);
        itself.uid = wanting(&[]).uid;
        let alone = snapshot(vec![with_pod(kube_node("n1", 1000, GIB), itself)]);
        let state = plugin.prefilter(&ctx(&alone), &p);
        assert!(plugin.skips(state.as_ref(), &p));
    }

    /// Preemption evicts the lower-priority holder of the claim, on its node, and keeps the
    /// pod of another namespace whose claim only shares the name.
    #[test]
    fn preemption_evicts_the_holder_of_a_read_write_once_pod_claim() {
        use loadstar_framework::preemption::{PreemptionArgs, PreemptionOutcome};
        use loadstar_framework::{Profile, StalePolicy};
        use rand::SeedableRng;
        let placed = |name: &str, namespace: &str, priority: i32| PodOnNode {
            priority,
            ..claiming(name, namespace, &["data"])
        };
        let snap = snapshot(vec![
            with_pod(kube_node("n1", 1000, GIB), placed("holder", "default", 1)),
            with_pod(kube_node("n2", 1000, GIB), placed("stranger", "other", 1)),
        ]);
        let profile = Profile {
            name: "t".into(),
            filters: vec![Box::new(VolumeRestrictions)],
            scores: vec![],
            window_seconds: 60,
            stale_policy: StalePolicy::Fallback,
            stale_penalty: 1.0,
            preemption: Some(PreemptionArgs::default()),
            sampling: loadstar_framework::NodeSampling::ALL,
        };
        let mut p = wanting(&["data"]);
        p.priority = 10;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        let ev = profile.evaluate(&snap, &p, None, 0, &mut rng);
        assert!(ev.ranked.is_empty());
        let PreemptionOutcome::Proposal(pr) = profile.preempt(&snap, &p, &ev, &[], &mut rng) else {
            panic!("a proposal");
        };
        // Evicting the stranger would free nothing: n2 is no candidate.
        assert_eq!(pr.candidates.len(), 1, "{:?}", pr.candidates);
        let chosen = pr.chosen().expect("a candidate");
        let victims: Vec<&str> = chosen.victims.iter().map(|v| v.uid.as_str()).collect();
        assert_eq!(
            (&*snap.nodes()[chosen.index].name, victims),
            ("n1", vec!["holder"])
        );
    }

    #[test]
    fn filter_rejects_nodes_where_the_disk_is_in_use() {
        let node = with_pod(
            kube_node("n", 1000, GIB),
            PodOnNode {
                uid: "a".into(),
                disks: vec![rbd(&["m1"], "img", false)],
                ..Default::default()
            },
        );
        let mut p = pod(100, MIB);
        assert_eq!(filter_one(&VolumeRestrictions, node.clone(), &p), Ok(()));
        p.disks = vec![rbd(&["m1", "m2"], "img", true)];
        assert_eq!(
            filter_one(&VolumeRestrictions, node.clone(), &p),
            Err(REASON.into())
        );
        p.disks = vec![rbd(&["m1"], "other", false)];
        assert_eq!(filter_one(&VolumeRestrictions, node, &p), Ok(()));
    }
}
