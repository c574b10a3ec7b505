//! Pure conversions of a pod's placement constraints beyond resources — node affinity terms,
//! inter-pod (anti-)affinity, topology spread — and the list of fields that constrain
//! placement but that Loadstar does not implement, so the scheduler refuses such a pod by
//! name instead of binding it in violation. Validation follows `LabelSelectorAsSelector`
//! and kube-scheduler 1.20's `NewPodInfo`.
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, NodeSelectorTerm as KubeTerm, Pod, PodAffinityTerm, PodSpec,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as KubeSelector;
use loadstar_framework::snapshot::{
    AffinityTerm, InlineDisk, LabelSelector, NodeInclusion, NodeSelectorTerm, PodAffinity,
    PodClaim, SelectorOp, SelectorRequirement, SpreadConstraint, WeightedAffinityTerm,
    WhenUnsatisfiable,
};
use thiserror::Error;

/// The only field node selector terms may match.
pub const FIELD_NODE_NAME: &str = "metadata.name";

/// A constraint that cannot be evaluated as written.
#[derive(Debug, Clone, Error, PartialEq)]
#[error("{field}: {reason}")]
pub struct ConstraintError {
    /// Where, e.g. `spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]`.
    pub field: String,
    /// Why.
    pub reason: String,
}

fn error(field: &str, reason: impl Into<String>) -> ConstraintError {
    ConstraintError {
        field: field.to_string(),
        reason: reason.into(),
    }
}

/// Parses a selector operator; `node` allows `Gt`/`Lt` (node selectors only).
fn operator(op: &str, node: bool) -> Option<SelectorOp> {
    Some(match op {
        "In" => SelectorOp::In,
        "NotIn" => SelectorOp::NotIn,
        "Exists" => SelectorOp::Exists,
        "DoesNotExist" => SelectorOp::DoesNotExist,
        "Gt" if node => SelectorOp::Gt,
        "Lt" if node => SelectorOp::Lt,
        _ => return None,
    })
}

/// Checks the values an operator needs and builds the requirement.
fn requirement(
    field: &str,
    key: &str,
    op: &str,
    values: Vec<String>,
    node: bool,
) -> Result<SelectorRequirement, ConstraintError> {
    let parsed =
        operator(op, node).ok_or_else(|| error(field, format!("unknown operator {op:?}")))?;
    match parsed {
        SelectorOp::Gt | SelectorOp::Lt
            if values.len() != 1 || values[0].parse::<i64>().is_err() =>
        {
            return Err(error(
                field,
                format!("operator {op} needs exactly one integer value, got {values:?}"),
            ));
        }
        SelectorOp::In | SelectorOp::NotIn if values.is_empty() => {
            return Err(error(field, format!("operator {op} needs values")));
        }
        SelectorOp::Exists | SelectorOp::DoesNotExist if !node && !values.is_empty() => {
            return Err(error(field, format!("operator {op} takes no values")));
        }
        _ => {}
    }
    Ok(SelectorRequirement {
        key: key.to_string(),
        op: parsed,
        values,
    })
}

fn node_requirement(
    field: &str,
    r: &NodeSelectorRequirement,
) -> Result<SelectorRequirement, ConstraintError> {
    requirement(
        field,
        &r.key,
        &r.operator,
        r.values.clone().unwrap_or_default(),
        true,
    )
}

/// A node selector term (`matchExpressions` and `matchFields`).
pub fn node_term(field: &str, term: &KubeTerm) -> Result<NodeSelectorTerm, ConstraintError> {
    let mut out = NodeSelectorTerm::default();
    for (i, r) in term.match_expressions.iter().flatten().enumerate() {
        out.expressions.push(node_requirement(
            &format!("{field}.matchExpressions[{i}]"),
            r,
        )?);
    }
    for (i, r) in term.match_fields.iter().flatten().enumerate() {
        let f = format!("{field}.matchFields[{i}]");
        if r.key != FIELD_NODE_NAME {
            return Err(error(
                &f,
                format!("unsupported field {:?} (only {FIELD_NODE_NAME})", r.key),
            ));
        }
        let req = node_requirement(&f, r)?;
        if !matches!(req.op, SelectorOp::In | SelectorOp::NotIn) || req.values.len() != 1 {
            // API validation: a field selector takes In/NotIn with exactly one value.
            return Err(error(&f, "matchFields need In or NotIn with one value"));
        }
        out.fields.push(req);
    }
    Ok(out)
}

/// A label selector; `None` stays `None` (it matches nothing).
pub fn label_selector(
    field: &str,
    s: Option<&KubeSelector>,
) -> Result<Option<LabelSelector>, ConstraintError> {
    let Some(s) = s else { return Ok(None) };
    let mut out = LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: Vec::new(),
    };
    for (i, r) in s.match_expressions.iter().flatten().enumerate() {
        out.match_expressions.push(requirement(
            &format!("{field}.matchExpressions[{i}]"),
            &r.key,
            &r.operator,
            r.values.clone().unwrap_or_default(),
            false,
        )?);
    }
    Ok(Some(out))
}

/// `selector` ANDed with `key In (value)` for each of `match_keys` and `key NotIn (value)`
/// for each of `mismatch_keys` that the incoming pod's `labels` carry (keys it lacks are
/// ignored). Since 1.31 (pod affinity) and 1.34 (spreading) the API server merges them into
/// the stored selector when the pod is created; a key the selector already has a
/// requirement on was merged so (upstream's validation forbids writing both) and is left
/// as merged: the pod's labels may have changed since, and merging them again would AND two
/// values. Keys without a selector are invalid, as upstream's validation says.
fn with_label_keys(
    field: &str,
    selector: Option<LabelSelector>,
    labels: &BTreeMap<String, String>,
    match_keys: Option<&Vec<String>>,
    mismatch_keys: Option<&Vec<String>>,
) -> Result<Option<LabelSelector>, ConstraintError> {
    let keys = [
        (match_keys, SelectorOp::In),
        (mismatch_keys, SelectorOp::NotIn),
    ];
    if keys.iter().all(|(k, _)| k.is_none_or(|k| k.is_empty())) {
        return Ok(selector);
    }
    let Some(mut selector) = selector else {
        return Err(error(
            field,
            "matchLabelKeys and mismatchLabelKeys cannot be set when labelSelector isn't set",
        ));
    };
    for (list, op) in keys {
        for key in list.into_iter().flatten() {
            let merged = selector.match_labels.contains_key(key)
                || selector.match_expressions.iter().any(|r| &r.key == key);
            if merged {
                continue;
            }
            if let Some(value) = labels.get(key) {
                selector.match_expressions.push(SelectorRequirement {
                    key: key.clone(),
                    op,
                    values: vec![value.clone()],
                });
            }
        }
    }
    Ok(Some(selector))
}

/// The pod's node affinity: required terms (ORed) and preferred terms with weights.
pub type NodeAffinityTerms = (Vec<NodeSelectorTerm>, Vec<(i32, NodeSelectorTerm)>);

/// Converts `spec.affinity.nodeAffinity`.
pub fn node_affinity(spec: &PodSpec) -> Result<NodeAffinityTerms, ConstraintError> {
    let Some(na) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
    else {
        return Ok((Vec::new(), Vec::new()));
    };
    let mut required = Vec::new();
    if let Some(sel) = &na.required_during_scheduling_ignored_during_execution {
        for (i, t) in sel.node_selector_terms.iter().enumerate() {
            let field = format!(
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.\
                 nodeSelectorTerms[{i}]"
            );
            required.push(node_term(&field, t)?);
        }
    }
    let mut preferred = Vec::new();
    for (i, p) in na
        .preferred_during_scheduling_ignored_during_execution
        .iter()
        .flatten()
        .enumerate()
    {
        let field = format!(
            "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        );
        preferred.push((p.weight, node_term(&field, &p.preference)?));
    }
    Ok((required, preferred))
}

/// The incoming pod's namespace and labels, which affinity terms are resolved against.
#[derive(Debug, Clone, Copy)]
pub struct IncomingPod<'a> {
    /// Its namespace: a term without `namespaces` selects pods of this one.
    pub namespace: &'a str,
    /// Its labels: `matchLabelKeys` and `mismatchLabelKeys` take their values from them.
    pub labels: &'a BTreeMap<String, String>,
}

fn affinity_term(
    field: &str,
    pod: IncomingPod<'_>,
    t: &PodAffinityTerm,
) -> Result<AffinityTerm, ConstraintError> {
    if t.topology_key.is_empty() {
        return Err(error(field, "topologyKey must not be empty"));
    }
    // Upstream (1.22+): the namespaces listed and those the selector picks by label; the
    // owning pod's own namespace only when the term sets neither.
    let namespace_selector = label_selector(
        &format!("{field}.namespaceSelector"),
        t.namespace_selector.as_ref(),
    )?;
    let namespaces = match t.namespaces.as_deref() {
        Some(ns) if !ns.is_empty() => ns.to_vec(),
        _ if namespace_selector.is_some() => Vec::new(),
        _ => vec![pod.namespace.to_string()],
    };
    let selector = label_selector(&format!("{field}.labelSelector"), t.label_selector.as_ref())?;
    Ok(AffinityTerm {
        namespaces,
        namespace_selector,
        selector: with_label_keys(
            field,
            selector,
            pod.labels,
            t.match_label_keys.as_ref(),
            t.mismatch_label_keys.as_ref(),
        )?,
        topology_key: t.topology_key.clone(),
    })
}

fn terms(
    field: &str,
    pod: IncomingPod<'_>,
    ts: Option<&Vec<PodAffinityTerm>>,
) -> Result<Vec<AffinityTerm>, ConstraintError> {
    ts.into_iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| affinity_term(&format!("{field}[{i}]"), pod, t))
        .collect()
}

fn weighted(
    field: &str,
    pod: IncomingPod<'_>,
    ts: Option<&Vec<WeightedPodAffinityTerm>>,
) -> Result<Vec<WeightedAffinityTerm>, ConstraintError> {
    ts.into_iter()
        .flatten()
        .enumerate()
        .map(|(i, w)| {
            let f = format!("{field}[{i}].podAffinityTerm");
            Ok(WeightedAffinityTerm {
                weight: w.weight,
                term: affinity_term(&f, pod, &w.pod_affinity_term)?,
            })
        })
        .collect()
}

/// Converts `spec.affinity.podAffinity` and `podAntiAffinity` (namespaces and label keys
/// resolved against the incoming pod; namespace selectors kept, resolved when matched).
pub fn pod_affinity(
    spec: &PodSpec,
    pod: IncomingPod<'_>,
) -> Result<Arc<PodAffinity>, ConstraintError> {
    let Some(a) = spec.affinity.as_ref() else {
        return Ok(Arc::default());
    };
    let mut out = PodAffinity::default();
    if let Some(pa) = &a.pod_affinity {
        let base = "spec.affinity.podAffinity";
        out.required = terms(
            &format!("{base}.requiredDuringSchedulingIgnoredDuringExecution"),
            pod,
            pa.required_during_scheduling_ignored_during_execution
                .as_ref(),
        )?;
        out.preferred = weighted(
            &format!("{base}.preferredDuringSchedulingIgnoredDuringExecution"),
            pod,
            pa.preferred_during_scheduling_ignored_during_execution
                .as_ref(),
        )?;
    }
    if let Some(pa) = &a.pod_anti_affinity {
        let base = "spec.affinity.podAntiAffinity";
        out.required_anti = terms(
            &format!("{base}.requiredDuringSchedulingIgnoredDuringExecution"),
            pod,
            pa.required_during_scheduling_ignored_during_execution
                .as_ref(),
        )?;
        out.preferred_anti = weighted(
            &format!("{base}.preferredDuringSchedulingIgnoredDuringExecution"),
            pod,
            pa.preferred_during_scheduling_ignored_during_execution
                .as_ref(),
        )?;
    }
    Ok(Arc::new(out))
}

/// Converts `spec.topologySpreadConstraints`, `matchLabelKeys` merged into the selector from
/// the incoming pod's `labels`, `minDomains` and the node inclusion policies (validated as
/// upstream does).
pub fn spread_constraints(
    spec: &PodSpec,
    labels: &BTreeMap<String, String>,
) -> Result<Vec<SpreadConstraint>, ConstraintError> {
    let mut out = Vec::new();
    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        let field = format!("spec.topologySpreadConstraints[{i}]");
        let policy = |set: Option<&str>, name: &str| match set {
            None => Ok(None),
            Some("Honor") => Ok(Some(true)),
            Some("Ignore") => Ok(Some(false)),
            Some(other) => Err(error(
                &format!("{field}.{name}"),
                format!("must be Honor or Ignore, got {other:?}"),
            )),
        };
        let affinity = policy(c.node_affinity_policy.as_deref(), "nodeAffinityPolicy")?;
        let taints = policy(c.node_taints_policy.as_deref(), "nodeTaintsPolicy")?;
        let inclusion = (affinity.is_some() || taints.is_some()).then(|| NodeInclusion {
            honor_affinity: affinity.unwrap_or(true),
            honor_taints: taints.unwrap_or(false),
        });

        if c.max_skew <= 0 {
            return Err(error(&field, "maxSkew must be greater than zero"));
        }
        if c.topology_key.is_empty() {
            return Err(error(&field, "topologyKey must not be empty"));
        }
        let when_unsatisfiable = match c.when_unsatisfiable.as_str() {
            "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
            "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
            other => {
                return Err(error(
                    &field,
                    format!("unknown whenUnsatisfiable {other:?}"),
                ));
            }
        };
        out.push(SpreadConstraint {
            max_skew: c.max_skew,
            topology_key: c.topology_key.clone(),
            when_unsatisfiable,
            selector: with_label_keys(
                &field,
                label_selector(&format!("{field}.labelSelector"), c.label_selector.as_ref())?,
                labels,
                c.match_label_keys.as_ref(),
                None,
            )?,
            min_domains: match c.min_domains {
                None => 0,
                Some(m) if m <= 0 => {
                    return Err(error(
                        &format!("{field}.minDomains"),
                        format!("must be greater than zero, got {m}"),
                    ));
                }
                Some(_) if when_unsatisfiable != WhenUnsatisfiable::DoNotSchedule => {
                    return Err(error(
                        &format!("{field}.minDomains"),
                        "can only be set when whenUnsatisfiable is DoNotSchedule",
                    ));
                }
                Some(m) => m,
            },
            inclusion,
        });
    }
    Ok(out)
}

/// How the scheduler treats each `PodSpec` field (Kubernetes 1.33's list, which the tests
/// read from `k8s-openapi` itself, so a new upstream field fails them until it is classed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldHandling {
    /// Checked by the named filter(s) (or used by the queue).
    Implemented(&'static str),
    /// Constrains placement in ways Loadstar does not implement: a pod that sets it is
    /// refused on every node, naming it.
    Refused,
    /// Does not affect where the pod may run.
    Irrelevant(&'static str),
}

/// Every `PodSpec` field and how the scheduler treats it.
pub const POD_SPEC_FIELDS: &[(&str, FieldHandling)] = &[
    (
        "activeDeadlineSeconds",
        FieldHandling::Irrelevant("runtime deadline"),
    ),
    (
        "affinity",
        FieldHandling::Implemented(
            "NodeAffinity (required node affinity), InterPodAffinity (required pod affinity \
             and anti-affinity); preferred terms are soft",
        ),
    ),
    (
        "automountServiceAccountToken",
        FieldHandling::Irrelevant("kubelet"),
    ),
    (
        "containers",
        FieldHandling::Implemented("NodeResourcesFit (requests), NodePorts (hostPort)"),
    ),
    ("dnsConfig", FieldHandling::Irrelevant("kubelet")),
    ("dnsPolicy", FieldHandling::Irrelevant("kubelet")),
    ("enableServiceLinks", FieldHandling::Irrelevant("kubelet")),
    (
        "ephemeralContainers",
        FieldHandling::Irrelevant("added to running pods only"),
    ),
    ("hostAliases", FieldHandling::Irrelevant("kubelet")),
    ("hostIPC", FieldHandling::Irrelevant("kubelet")),
    (
        "hostNetwork",
        FieldHandling::Implemented("NodePorts (the API server sets hostPort = containerPort)"),
    ),
    ("hostPID", FieldHandling::Irrelevant("kubelet")),
    ("hostUsers", FieldHandling::Irrelevant("kubelet")),
    ("hostname", FieldHandling::Irrelevant("kubelet")),
    ("imagePullSecrets", FieldHandling::Irrelevant("kubelet")),
    (
        "initContainers",
        FieldHandling::Implemented(
            "NodeResourcesFit (max with the sum; native sidecars, restartPolicy Always, are \
             added to the sum and to later init containers), NodePorts (sidecars' hostPorts)",
        ),
    ),
    (
        "nodeName",
        FieldHandling::Implemented("a pod with it set is bound: never queued"),
    ),
    ("nodeSelector", FieldHandling::Implemented("NodeAffinity")),
    (
        "os",
        FieldHandling::Irrelevant("validation only; no scheduler plugin reads it"),
    ),
    (
        "overhead",
        FieldHandling::Implemented("NodeResourcesFit (added to requests)"),
    ),
    (
        "preemptionPolicy",
        FieldHandling::Implemented("DefaultPreemption (a pod with Never does not preempt)"),
    ),
    (
        "priority",
        FieldHandling::Implemented("the scheduling queue's order"),
    ),
    (
        "priorityClassName",
        FieldHandling::Irrelevant("admission resolves it into priority"),
    ),
    ("readinessGates", FieldHandling::Irrelevant("kubelet")),
    ("resourceClaims", FieldHandling::Refused),
    (
        "resources",
        FieldHandling::Implemented(
            "NodeResourcesFit and the scores (pod-level requests replace the containers' for \
             cpu, memory and hugepages)",
        ),
    ),
    ("restartPolicy", FieldHandling::Irrelevant("kubelet")),
    (
        "runtimeClassName",
        FieldHandling::Irrelevant("admission turns it into overhead, nodeSelector, tolerations"),
    ),
    (
        "schedulerName",
        FieldHandling::Implemented("which profile schedules the pod"),
    ),
    (
        "schedulingGates",
        FieldHandling::Implemented("the scheduling queue holds the pod until they are removed"),
    ),
    ("securityContext", FieldHandling::Irrelevant("kubelet")),
    ("serviceAccount", FieldHandling::Irrelevant("kubelet")),
    ("serviceAccountName", FieldHandling::Irrelevant("kubelet")),
    ("setHostnameAsFQDN", FieldHandling::Irrelevant("kubelet")),
    (
        "shareProcessNamespace",
        FieldHandling::Irrelevant("kubelet"),
    ),
    ("subdomain", FieldHandling::Irrelevant("kubelet")),
    (
        "terminationGracePeriodSeconds",
        FieldHandling::Irrelevant("kubelet"),
    ),
    (
        "tolerations",
        FieldHandling::Implemented("TaintToleration, NodeReady"),
    ),
    (
        "topologySpreadConstraints",
        FieldHandling::Implemented("PodTopologySpread"),
    ),
    (
        "volumes",
        FieldHandling::Implemented(
            "claims (persistentVolumeClaim, and generic ephemeral volumes' once the ephemeral \
             volume controller created them for the pod) are checked by VolumeBinding (bound, \
             and WaitForFirstConsumer claims it binds), VolumeZone (persistentVolumeClaim \
             volumes only, as upstream) and the attach limits (NodeVolumeLimits for CSI, \
             EBSLimits, GCEPDLimits, AzureDiskLimits, CinderLimits), ReadWriteOncePod \
             claims by VolumeRestrictions; inline cloud disks by VolumeRestrictions and the \
             attach limits",
        ),
    ),
];

/// Fields of `spec` (and its containers) that constrain placement in ways Loadstar does not
/// implement: dynamic resource claims. (Scheduling gates say when, not where: the queue
/// holds a gated pod.)
pub fn refused_fields(pod: &Pod) -> Vec<String> {
    let mut out = Vec::new();
    let Some(spec) = pod.spec.as_ref() else {
        return out;
    };
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        out.push("spec.resourceClaims".to_string());
    }
    for (kind, list) in [
        ("containers", Some(&spec.containers)),
        ("initContainers", spec.init_containers.as_ref()),
    ] {
        for c in list.into_iter().flatten() {
            if c.resources
                .as_ref()
                .and_then(|r| r.claims.as_ref())
                .is_some_and(|cl| !cl.is_empty())
            {
                out.push(format!("spec.{kind}[{}].resources.claims", c.name));
            }
        }
    }
    out
}

/// The pod's inline disks VolumeRestrictions compares.
pub fn inline_disks(spec: &PodSpec) -> Vec<InlineDisk> {
    let mut out = Vec::new();
    for v in spec.volumes.iter().flatten() {
        if let Some(d) = &v.gce_persistent_disk {
            out.push(InlineDisk::GcePd {
                name: d.pd_name.clone(),
                read_only: d.read_only == Some(true),
            });
        }
        if let Some(d) = &v.aws_elastic_block_store {
            out.push(InlineDisk::AwsEbs {
                volume_id: d.volume_id.clone(),
            });
        }
        if let Some(d) = &v.iscsi {
            out.push(InlineDisk::Iscsi {
                iqn: d.iqn.clone(),
                read_only: d.read_only == Some(true),
            });
        }
        if let Some(d) = &v.rbd {
            out.push(InlineDisk::Rbd {
                monitors: d.monitors.clone(),
                // The API server's default (`SetDefaults_RBDVolumeSource`), for pods sent
                // whole that never went through it.
                pool: d
                    .pool
                    .clone()
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| "rbd".into()),
                image: d.image.clone(),
                read_only: d.read_only == Some(true),
            });
        }
    }
    out
}

/// The claims the pod's volumes mount, in volume order: `persistentVolumeClaim` volumes'
/// by their `claimName`, generic `ephemeral` volumes' by the name the ephemeral volume
/// controller gives the claim it creates, `<pod>-<volume>` (upstream's
/// `ephemeral.VolumeClaimName`). Every other source (emptyDir, configMap, secret,
/// projected, downwardAPI, hostPath, nfs, inline CSI, ...) needs no claim; GCE, EBS, iSCSI
/// and RBD disks are checked by VolumeRestrictions ([`inline_disks`]) and GCE, EBS, Azure
/// and Cinder disks count against the attach limits (`crate::attach`); inline CSI volumes
/// are placed anywhere, as 1.20 places them (its CSI limit counts claims only).
pub fn claims(pod: &Pod) -> Vec<PodClaim> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes
        .into_iter()
        .flatten()
        .filter_map(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some(PodClaim::from(c.claim_name.as_str()))
            } else {
                v.ephemeral.as_ref().map(|_| PodClaim {
                    name: format!("{pod_name}-{}", v.name),
                    ephemeral: true,
                })
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A deserializer that only records the field list a struct's `Deserialize` announces.
    struct FieldNames(Vec<&'static str>);

    #[derive(Debug)]
    struct Stop;
    impl std::fmt::Display for Stop {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("stop")
        }
    }
    impl std::error::Error for Stop {}
    impl serde::de::Error for Stop {
        fn custom<T: std::fmt::Display>(_: T) -> Self {
            Stop
        }
    }

    impl<'de> serde::Deserializer<'de> for &mut FieldNames {
        type Error = Stop;
        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            self.0.extend_from_slice(fields);
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 u8 u16 u32 u64 f32 f64 char str string bytes byte_buf option
            unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }

    #[test]
    fn every_pod_spec_field_is_implemented_refused_or_irrelevant() {
        use serde::Deserialize;
        let mut names = FieldNames(Vec::new());
        assert!(PodSpec::deserialize(&mut names).is_err());
        let upstream: Vec<&str> = names.0;
        assert!(upstream.len() > 30, "read the field list: {upstream:?}");
        let classed: Vec<&str> = POD_SPEC_FIELDS.iter().map(|(f, _)| *f).collect();
        let missing: Vec<&&str> = upstream.iter().filter(|f| !classed.contains(f)).collect();
        let stale: Vec<&&str> = classed.iter().filter(|f| !upstream.contains(f)).collect();
        assert!(
            missing.is_empty(),
            "PodSpec fields nobody classed: {missing:?}"
        );
        assert!(
            stale.is_empty(),
            "classed fields PodSpec no longer has: {stale:?}"
        );
    }

    #[test]
    fn every_refused_field_refuses_the_pod() {
        let base = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}});
        let set = |field: &str, value: serde_json::Value| {
            let mut v = base.clone();
            v["spec"][field] = value;
            pod(v)
        };
        let samples = [(
            "resourceClaims",
            json!([{"name": "gpu", "resourceClaimName": "x"}]),
        )];
        for (field, handling) in POD_SPEC_FIELDS {
            if !matches!(handling, FieldHandling::Refused) {
                continue;
            }
            let (_, value) = samples
                .iter()
                .find(|(f, _)| f == field)
                .unwrap_or_else(|| panic!("no sample for refused field {field}"));
            let refused = refused_fields(&set(field, value.clone()));
            assert_eq!(refused.len(), 1, "{field}: {refused:?}");
            assert!(
                refused[0].starts_with(&format!("spec.{field}")),
                "{refused:?}"
            );
        }
        // Gates say when, not where: the queue holds such a pod, the filters do not refuse it.
        assert!(refused_fields(&set("schedulingGates", json!([{"name": "wait"}]))).is_empty());
        // Pod-level resources are counted (`crate::requests`), not refused.
        assert!(refused_fields(&set("resources", json!({"requests": {"cpu": "1"}}))).is_empty());
        assert!(refused_fields(&pod(base)).is_empty());
        let claims = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "c", "resources": {"claims": [{"name": "gpu"}]}}]}}));
        assert_eq!(
            refused_fields(&claims),
            vec!["spec.containers[c].resources.claims"]
        );
    }

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    #[test]
    fn inline_disks_are_placed_with_their_conflict_keys_and_no_volume_is_refused() {
        let p = pod(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}],
            "volumes": [
                {"name": "r", "rbd": {"monitors": ["10.0.0.1:6789"], "image": "img"}},
                {"name": "i", "iscsi": {"targetPortal": "10.0.0.2:3260",
                                        "iqn": "iqn.2001-04.com.example:disk", "lun": 0,
                                        "readOnly": true}},
                {"name": "g", "gcePersistentDisk": {"pdName": "pd-1"}},
                {"name": "s", "csi": {"driver": "inline.example.com"}},
                {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
            ]}}),
        );
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(
            inline_disks(spec),
            vec![
                InlineDisk::Rbd {
                    monitors: vec!["10.0.0.1:6789".into()],
                    pool: "rbd".into(),
                    image: "img".into(),
                    read_only: false
                },
                InlineDisk::Iscsi {
                    iqn: "iqn.2001-04.com.example:disk".into(),
                    read_only: true
                },
                InlineDisk::GcePd {
                    name: "pd-1".into(),
                    read_only: false
                },
            ]
        );
        assert!(refused_fields(&p).is_empty());
    }

    #[test]
    fn pod_affinity_resolves_namespaces_and_keeps_nil_selectors() {
        let p = pod(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], "affinity": {
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "db"}}},
                    {"topologyKey": "zone", "namespaces": ["a", "b"]}
                ]},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "podAffinityTerm": {"topologyKey": "host",
                      "labelSelector": {"matchExpressions": [{"key": "x", "operator": "Exists"}]}}}
                ]}
            }}
        }));
        let a = pod_affinity(p.spec.as_ref().expect("spec"), incoming("ns")).expect("converts");
        assert_eq!(a.required[0].namespaces, vec!["ns".to_string()]);
        assert_eq!(a.required[0].namespace_selector, None);
        assert!(a.required[0].selector.is_some());
        assert_eq!(a.required[1].namespaces, vec!["a".to_string(), "b".into()]);
        assert_eq!(a.required[1].selector, None, "no selector matches nothing");
        assert_eq!(a.preferred_anti[0].weight, 5);
        assert_eq!(a.preferred_anti[0].term.topology_key, "host");
    }

    #[test]
    fn namespace_selectors_are_kept_beside_the_listed_namespaces() {
        let p = pod(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], "affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "zone", "labelSelector": {},
                     "namespaceSelector": {"matchLabels": {"team": "a"}}},
                    {"topologyKey": "zone", "labelSelector": {},
                     "namespaces": ["x"], "namespaceSelector": {}}
                ]},
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"topologyKey": "zone",
                      "namespaceSelector": {"matchExpressions": [
                        {"key": "team", "operator": "In", "values": []}]}}}
                ]}
            }}
        }));
        let spec = p.spec.as_ref().expect("spec");
        // An operator without the values it needs is an error naming the field.
        let err = pod_affinity(spec, incoming("ns")).expect_err("invalid selector");
        assert!(
            err.field
                .ends_with("podAffinityTerm.namespaceSelector.matchExpressions[0]"),
            "{err}"
        );
        let mut spec = spec.clone();
        if let Some(a) = spec.affinity.as_mut() {
            a.pod_affinity = None;
        }
        let a = pod_affinity(&spec, incoming("ns")).expect("converts");
        // A selector alone: no namespace listed, not even the pod's own.
        assert!(a.required_anti[0].namespaces.is_empty());
        let team_a = a.required_anti[0]
            .namespace_selector
            .as_ref()
            .expect("kept");
        assert_eq!(
            team_a.match_labels.get("team").map(String::as_str),
            Some("a")
        );
        // The list stays beside the empty selector (every namespace).
        assert_eq!(a.required_anti[1].namespaces, vec!["x".to_string()]);
        assert_eq!(
            a.required_anti[1].namespace_selector,
            Some(LabelSelector::default())
        );
    }

    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

    fn incoming(namespace: &str) -> IncomingPod<'_> {
        IncomingPod {
            namespace,
            labels: &NO_LABELS,
        }
    }

    fn requirements(s: &Option<LabelSelector>) -> Vec<(String, SelectorOp, Vec<String>)> {
        s.as_ref()
            .expect("a selector")
            .match_expressions
            .iter()
            .map(|r| (r.key.clone(), r.op, r.values.clone()))
            .collect()
    }

    #[test]
    fn label_keys_take_the_incoming_pods_values_into_the_selector() {
        let p = pod(json!({
            "metadata": {"name": "p", "namespace": "ns",
                         "labels": {"app": "web", "pod-template-hash": "abc", "tenant": "t1"}},
            "spec": {"containers": [],
              "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"app": "web"}},
                 "matchLabelKeys": ["pod-template-hash", "absent"],
                 "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Ignore"}],
              "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "host", "labelSelector": {"matchLabels": {"app": "web"}},
                 "matchLabelKeys": ["pod-template-hash"], "mismatchLabelKeys": ["tenant"]}]}}}
        }));
        let spec = p.spec.as_ref().expect("spec");
        let labels = p.metadata.labels.as_ref().expect("labels");
        let spread = spread_constraints(spec, labels).expect("converts");
        // The policies, stated (as their defaults): counted as the releases with them count.
        assert_eq!(
            spread[0].inclusion,
            Some(NodeInclusion {
                honor_affinity: true,
                honor_taints: false
            })
        );
        // A key the pod does not carry is ignored.
        assert_eq!(
            requirements(&spread[0].selector),
            [(
                "pod-template-hash".into(),
                SelectorOp::In,
                vec!["abc".into()]
            )]
        );
        let sel = spread[0].selector.as_ref().expect("selector");
        let with = |hash: &str| -> BTreeMap<String, String> {
            [("app", "web"), ("pod-template-hash", hash)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(sel.matches(&with("abc")));
        assert!(
            !sel.matches(&with("old")),
            "another revision's pods do not count"
        );
        let incoming = IncomingPod {
            namespace: "ns",
            labels,
        };
        let a = pod_affinity(spec, incoming).expect("converts");
        assert_eq!(
            requirements(&a.required_anti[0].selector),
            [
                (
                    "pod-template-hash".into(),
                    SelectorOp::In,
                    vec!["abc".into()]
                ),
                ("tenant".into(), SelectorOp::NotIn, vec!["t1".into()]),
            ]
        );
        // A selector the API server already merged a key into keeps it as merged, even
        // after the pod's labels changed.
        let merged = pod(
            json!({"metadata": {"name": "p", "labels": {"pod-template-hash": "new"}},
            "spec": {"containers": [], "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchExpressions": [
                     {"key": "pod-template-hash", "operator": "In", "values": ["old"]}]},
                 "matchLabelKeys": ["pod-template-hash"]}]}}),
        );
        let c = spread_constraints(
            merged.spec.as_ref().expect("spec"),
            merged.metadata.labels.as_ref().expect("labels"),
        )
        .expect("converts");
        assert_eq!(
            requirements(&c[0].selector),
            [(
                "pod-template-hash".into(),
                SelectorOp::In,
                vec!["old".into()]
            )]
        );
        // Keys without a selector are invalid; policies other than the defaults are refused
        // by name, and unknown ones are errors.
        let bad = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [],
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                 "matchLabelKeys": ["app"]}]}}));
        let e =
            spread_constraints(bad.spec.as_ref().expect("spec"), labels).expect_err("no selector");
        assert_eq!(e.field, "spec.topologySpreadConstraints[0]");
        let policies = |affinity: &str, taints: &str| {
            pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [],
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                     "nodeAffinityPolicy": affinity, "nodeTaintsPolicy": taints}]}}))
        };
        let p = policies("Ignore", "Honor");
        let c = spread_constraints(p.spec.as_ref().expect("spec"), labels).expect("converts");
        assert_eq!(
            c[0].inclusion,
            Some(NodeInclusion {
                honor_affinity: false,
                honor_taints: true
            })
        );
        // Neither stated: 1.20's counting.
        let p = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule"}]}}));
        let c = spread_constraints(p.spec.as_ref().expect("spec"), labels).expect("converts");
        assert_eq!(c[0].inclusion, None);
        let p = policies("Honor", "Sometimes");
        let e =
            spread_constraints(p.spec.as_ref().expect("spec"), labels).expect_err("unknown policy");
        assert_eq!(
            e.to_string(),
            "spec.topologySpreadConstraints[0].nodeTaintsPolicy: must be Honor or Ignore, got \"Sometimes\""
        );
    }

    #[test]
    fn bad_selectors_and_spread_are_errors_with_paths() {
        let p = pod(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}
            ]}
        }));
        let err = spread_constraints(p.spec.as_ref().expect("spec"), &NO_LABELS)
            .expect_err("In without values");
        assert_eq!(
            err.field,
            "spec.topologySpreadConstraints[0].labelSelector.matchExpressions[0]"
        );
        let with_min_domains = |when: &str, min: i32| {
            pod(json!({
                "metadata": {"name": "p"},
                "spec": {"containers": [], "topologySpreadConstraints": [
                    {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": when,
                     "minDomains": min}
                ]}
            }))
        };
        let p = with_min_domains("DoNotSchedule", 3);
        let c = spread_constraints(p.spec.as_ref().expect("spec"), &NO_LABELS).expect("converts");
        assert_eq!(c[0].min_domains, 3);
        for (when, min, message) in [
            (
                "ScheduleAnyway",
                2,
                "can only be set when whenUnsatisfiable is DoNotSchedule",
            ),
            ("DoNotSchedule", 0, "must be greater than zero, got 0"),
        ] {
            let p = with_min_domains(when, min);
            let e = spread_constraints(p.spec.as_ref().expect("spec"), &NO_LABELS)
                .expect_err("invalid minDomains");
            assert_eq!(
                e.to_string(),
                format!("spec.topologySpreadConstraints[0].minDomains: {message}")
            );
        }
    }

    #[test]
    fn claims_are_the_pods_claim_volumes_and_its_ephemeral_volumes_claims_in_order() {
        let p = pod(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "volumes": [
                {"name": "cache", "emptyDir": {}},
                {"name": "tmp", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "c"}},
                {"name": "cfg", "configMap": {"name": "x"}},
                {"name": "disk", "gcePersistentDisk": {"pdName": "d"}}
            ]}
        }));
        assert_eq!(
            claims(&p),
            vec![
                PodClaim {
                    name: "p-tmp".into(),
                    ephemeral: true
                },
                PodClaim::from("c")
            ]
        );
        assert!(refused_fields(&p).is_empty());
    }
}
