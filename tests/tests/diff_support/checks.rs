//! The differential test's generator checked without a cluster (plain `cargo test`): it is a
//! pure function of seed and index, covers every feature, produces valid Kubernetes objects,
//! and still produces the scenarios the named regression cases were found with.
use super::*;

#[test]
fn generator_is_a_pure_function_of_seed_and_index() {
    for index in 0..50 {
        let a = generate(DEFAULT_SEED, index, "pfxone");
        assert_eq!(a, generate(DEFAULT_SEED, index, "pfxone"), "index {index}");
        // The prefix only names things.
        let b = generate(DEFAULT_SEED, index, "pfxtwo");
        assert_eq!(a.features, b.features);
        assert_eq!(a.to_yaml().replace("pfxone", "pfxtwo"), b.to_yaml());
    }
    let distinct: BTreeSet<String> = (0..50)
        .map(|i| generate(DEFAULT_SEED, i, "p").to_yaml())
        .collect();
    assert_eq!(distinct.len(), 50, "every index gives its own scenario");
    assert_ne!(
        generate(DEFAULT_SEED, 0, "p"),
        generate(DEFAULT_SEED + 1, 0, "p"),
        "the seed matters"
    );
}

#[test]
fn generator_covers_every_feature_and_many_scenarios_without_inter_pod_filters() {
    // What a CI run draws: the filter scenarios, then the preemption ones.
    let scenarios: Vec<Scenario> = (0..DEFAULT_SCENARIOS)
        .map(|i| generate(DEFAULT_SEED, i, "p"))
        .chain((0..DEFAULT_PREEMPTION_SCENARIOS).map(|i| generate_preemption(DEFAULT_SEED, i, "p")))
        .collect();
    for f in Feature::ALL {
        let n = scenarios.iter().filter(|s| s.features.contains(f)).count();
        assert!(n >= 3, "{} in only {n} of a CI run's scenarios", f.name());
    }
    let basic = scenarios[..DEFAULT_SCENARIOS]
        .iter()
        .filter(|s| !s.needs_inter_pod_filters())
        .count();
    assert!(
        basic >= 30,
        "only {basic} of 100 scenarios avoid the inter-pod filters"
    );
}

#[test]
fn generated_objects_are_kubernetes_objects_the_probe_can_rely_on() -> Result<()> {
    use k8s_openapi::api::core::v1::{Node, Pod};
    for index in 0..300 {
        let sc = generate(DEFAULT_SEED, index, "p");
        ensure!(
            (4..=8).contains(&sc.nodes.len()),
            "scenario {index}: node count"
        );
        // Up to 10, plus the filler of a recycled node.
        ensure!(sc.pods.len() <= 11, "scenario {index}: pod count");
        for n in &sc.nodes {
            let node: Node = serde_json::from_value(n.clone())?;
            let name = node.metadata.name.unwrap_or_default();
            let labels = node.metadata.labels.unwrap_or_default();
            ensure!(labels.get("kubernetes.io/hostname") == Some(&name));
        }
        let names: BTreeSet<String> = sc.node_names().into_iter().collect();
        for p in sc.pods.iter().chain(&sc.history).chain([&sc.incoming]) {
            let pod: Pod = serde_json::from_value(p.clone())?;
            let spec = pod.spec.context("pod spec")?;
            ensure!(spec.priority.is_none() && spec.priority_class_name.is_none());
            let ns = pod.metadata.namespace.unwrap_or_default();
            ensure!(
                sc.namespaces.contains(&ns),
                "scenario {index}: namespace {ns}"
            );
            // Claims, each one of the scenario's (the incoming pod may name a missing one),
            // and inline disks: iSCSI, RBD, GCE and EBS.
            let volumes = spec.volumes.unwrap_or_default();
            ensure!(volumes.iter().all(|v| {
                v.persistent_volume_claim.is_some()
                    || v.iscsi.is_some()
                    || v.rbd.is_some()
                    || v.gce_persistent_disk.is_some()
                    || v.aws_elastic_block_store.is_some()
            }));
            let names: BTreeSet<String> = volumes.iter().map(|v| v.name.clone()).collect();
            ensure!(
                names.len() == volumes.len(),
                "scenario {index}: volume names repeat"
            );
            for c in claim_names(p) {
                let known = sc.claims.iter().any(|k| {
                    str_at(k, "/metadata/name") == c && str_at(k, "/metadata/namespace") == ns
                });
                ensure!(
                    known || (c == "missing" && std::ptr::eq(p, &sc.incoming)),
                    "scenario {index}: claim {ns}/{c}"
                );
            }
        }
        check_storage(&sc).with_context(|| format!("scenario {index}"))?;
        for o in &sc.selectors {
            check_selector_object(o)
                .with_context(|| format!("scenario {index}: {}", str_at(o, "/metadata/name")))?;
        }
        for p in sc.pods.iter().chain(&sc.history) {
            ensure!(names.contains(&str_at(p, "/spec/nodeName")));
        }
        ensure!(
            sc.history.is_empty() != sc.features.contains(&Feature::RecycledNode),
            "scenario {index}: history and its feature go together"
        );
        ensure!(
            str_at(&sc.incoming, "/spec/nodeName").is_empty()
                && str_at(&sc.incoming, "/spec/schedulerName") == "diff-kube"
        );
        if sc.nodes_with_a_free_pod_slot().is_empty() {
            bail!("scenario {index}: the probe would have no feasible node to wait for");
        }
    }
    Ok(())
}

/// A Service, or a controller whose template the API server accepts: its selector (labels,
/// or labels and `Exists`/`DoesNotExist` expressions) selects its template's labels.
fn check_selector_object(o: &Value) -> Result<()> {
    let Some(template) = o.pointer("/spec/template/metadata/labels") else {
        ensure!(
            str_at(o, "/kind") == "Service",
            "a controller without a template"
        );
        return Ok(());
    };
    let template = template.as_object().context("template labels")?;
    let selector = o.pointer("/spec/selector").context("selector")?;
    let (labels, expressions) = match selector.get("matchLabels") {
        Some(l) => (l, selector.get("matchExpressions")),
        None => (selector, None),
    };
    for (k, v) in labels.as_object().context("selector labels")? {
        ensure!(
            template.get(k) == Some(v),
            "selector {k}={v} vs template {template:?}"
        );
    }
    for e in expressions.and_then(Value::as_array).into_iter().flatten() {
        let key = str_at(e, "/key");
        let present = template.contains_key(&key);
        match str_at(e, "/operator").as_str() {
            "Exists" => ensure!(present, "{key} must exist in {template:?}"),
            "DoesNotExist" => ensure!(!present, "{key} must not exist in {template:?}"),
            op => bail!("operator {op}"),
        }
    }
    Ok(())
}

/// Volumes and claims are objects the API server takes, bound as the PV controller would
/// bind them, and nothing the runner cannot clean up or that makes kube-scheduler fail.
fn check_storage(sc: &Scenario) -> Result<()> {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    ensure!(sc.has_storage() == sc.features.contains(&Feature::Volumes));
    let mut volumes = BTreeMap::new();
    for v in &sc.volumes {
        let pv: PersistentVolume = serde_json::from_value(v.clone())?;
        let name = pv.metadata.name.clone().unwrap_or_default();
        ensure!(
            name.starts_with(&sc.namespaces[0]),
            "volume {name}: named after the prefix"
        );
        let spec = pv.spec.clone().context("volume spec")?;
        let sources = [
            spec.host_path.is_some(),
            spec.local.is_some(),
            spec.csi.is_some(),
        ];
        ensure!(
            sources.iter().filter(|s| **s).count() == 1,
            "{name}: hostPath, local or csi"
        );
        if let Some(c) = &spec.csi {
            ensure!(c.driver == crate::diff_support::generator::attach::DRIVER);
        }
        let class = pv
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class").cloned())
            .or(spec.storage_class_name.clone());
        if let Some(class) = class {
            ensure!(
                sc.classes
                    .iter()
                    .any(|c| str_at(c, "/metadata/name") == class),
                "{name}: class {class} is the scenario's"
            );
        }
        if spec.local.is_some() {
            ensure!(
                spec.node_affinity.is_some(),
                "{name}: a local volume needs node affinity"
            );
        }
        volumes.insert(name, pv);
    }
    for c in &sc.claims {
        let pvc: PersistentVolumeClaim = serde_json::from_value(c.clone())?;
        let name = pvc.metadata.name.clone().unwrap_or_default();
        let ns = pvc.metadata.namespace.clone().unwrap_or_default();
        ensure!(ns == sc.namespaces[0], "claim {name} in {ns}");
        if after_create(c).is_some() {
            ensure!(
                after_create(c) == Some(DELETE_GRACEFULLY)
                    && pvc.metadata.finalizers.is_some_and(|f| !f.is_empty()),
                "claim {name}: deleted, and kept Terminating by a finalizer"
            );
        }
        let spec = pvc.spec.context("claim spec")?;
        // No class, or one of the scenario's (kube-scheduler fails, rather than filters, on
        // a claim to bind whose class is missing).
        let class = spec.storage_class_name.clone().unwrap_or_default();
        ensure!(
            class.is_empty()
                || sc
                    .classes
                    .iter()
                    .any(|c| str_at(c, "/metadata/name") == class),
            "claim {name}: class {class:?}"
        );
        let completed = pvc
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(BIND_COMPLETED));
        let Some(volume) = spec.volume_name.filter(|_| completed) else {
            continue;
        };
        match volumes.get(&volume) {
            Some(pv) => {
                let r = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
                ensure!(
                    r.is_some_and(
                        |r| r.name.as_deref() == Some(&name) && r.namespace.as_deref() == Some(&ns)
                    ),
                    "volume {volume} is claimed by {name}"
                );
            }
            None => ensure!(
                name == "dangling",
                "claim {name}: volume {volume} is missing"
            ),
        }
    }
    Ok(())
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[test]
fn generator_output_is_what_the_regression_cases_were_found_with() {
    let text: String = (0..20)
        .map(|i| generate(DEFAULT_SEED, i, "p").to_yaml())
        .collect();
    assert_eq!(
        fnv1a(text.as_bytes()),
        GENERATOR_FINGERPRINT,
        "the generator's output changed: the (seed, index) pairs in REGRESSIONS now name \
         other scenarios; re-find those cases, then update GENERATOR_FINGERPRINT"
    );
}

#[test]
fn the_regression_cases_carry_no_volumes_and_a_share_of_scenarios_does() {
    // Volumes, disks, attach limits, claims to bind and default spreading come from their
    // own random streams (`generator::VOLUME_STREAM`, …): the cases stay the scenarios their
    // comments describe.
    for &(name, seed, index) in REGRESSIONS {
        let sc = generate(seed, index, "p");
        assert!(!sc.has_storage(), "regression {name:?} now has volumes");
        for f in [
            Feature::InlineDisks,
            Feature::AttachLimits,
            Feature::ClaimsToBind,
            Feature::DefaultSpread,
        ] {
            assert!(
                !sc.features.contains(&f),
                "regression {name:?} now has {f:?}"
            );
        }
        assert!(sc.classes.is_empty() && sc.csinodes.is_empty() && sc.selectors.is_empty());
    }
    let with = (0..DEFAULT_SCENARIOS)
        .filter(|&i| generate(DEFAULT_SEED, i, "p").has_storage())
        .count();
    assert!(
        (30..=75).contains(&with),
        "{with} of 100 scenarios have volumes"
    );
}

#[test]
fn plan_numbers_parse_in_decimal_and_hex() -> Result<()> {
    assert_eq!(parse_u64("0x10AD_57A2")?, DEFAULT_SEED);
    assert_eq!(parse_u64("42")?, 42);
    assert!(parse_u64("forty").is_err());
    Ok(())
}

#[test]
fn preemption_scenarios_are_valid_objects_where_the_incoming_pod_fits_nowhere() -> Result<()> {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::DynamicObject;
    for index in 0..200 {
        let sc = generate_preemption(DEFAULT_SEED, index, "p");
        let mut free: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for n in &sc.nodes {
            let node: Node = serde_json::from_value(n.clone())?;
            let a = node.status.and_then(|s| s.allocatable).unwrap_or_default();
            let cpu = loadstar_common::quantity::parse_nonneg_millis(&a["cpu"].0)?;
            let slots: i64 = a["pods"].0.parse()?;
            free.insert(node.metadata.name.unwrap_or_default(), (cpu, slots));
        }
        for p in &sc.pods {
            let pod: Pod = serde_json::from_value(p.clone())?;
            let spec = pod.spec.context("spec")?;
            ensure!(spec.termination_grace_period_seconds == Some(0));
            let cpu = &spec.containers[0]
                .resources
                .as_ref()
                .context("resources")?
                .requests
                .as_ref()
                .context("requests")?["cpu"];
            let node = spec.node_name.context("bound")?;
            let f = free.get_mut(&node).context("a scenario node")?;
            f.0 -= loadstar_common::quantity::parse_nonneg_millis(&cpu.0)?;
            f.1 -= 1;
        }
        let incoming: Pod = serde_json::from_value(sc.incoming.clone())?;
        let want = loadstar_common::quantity::parse_nonneg_millis(
            &incoming.spec.context("spec")?.containers[0]
                .resources
                .as_ref()
                .context("resources")?
                .requests
                .as_ref()
                .context("requests")?["cpu"]
                .0,
        )?;
        for (node, (cpu, slots)) in &free {
            ensure!(
                *cpu < want || *slots <= 0,
                "scenario {index}: the incoming pod fits {node} as generated"
            );
        }
        for b in &sc.budgets {
            let _: DynamicObject = serde_json::from_value(b.clone())?;
        }
    }
    Ok(())
}

/// Whether two inline disks (pod JSON volumes) conflict, as kube-scheduler's
/// `VolumeRestrictions` says; only the kinds the incoming pod may carry.
fn disks_conflict(a: &Value, b: &Value) -> bool {
    let ro = |v: &Value, kind: &str| v.pointer(&format!("/{kind}/readOnly")) == Some(&json!(true));
    if a.get("iscsi").is_some() && b.get("iscsi").is_some() {
        return str_at(a, "/iscsi/iqn") == str_at(b, "/iscsi/iqn")
            && !(ro(a, "iscsi") && ro(b, "iscsi"));
    }
    if a.get("rbd").is_some() && b.get("rbd").is_some() {
        let pool = |v: &Value| match str_at(v, "/rbd/pool").as_str() {
            "" => "rbd".to_string(),
            p => p.to_string(),
        };
        let mons = |v: &Value| -> BTreeSet<String> {
            v.pointer("/rbd/monitors")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        };
        return !mons(a).is_disjoint(&mons(b))
            && pool(a) == pool(b)
            && str_at(a, "/rbd/image") == str_at(b, "/rbd/image")
            && !(ro(a, "rbd") && ro(b, "rbd"));
    }
    false
}

#[test]
fn a_share_of_disk_scenarios_has_a_conflict_to_find() {
    let vols = |p: &Value| {
        p.pointer("/spec/volumes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (mut with, mut conflicting) = (0, 0);
    for i in 0..DEFAULT_SCENARIOS {
        let sc = generate(DEFAULT_SEED, i, "p");
        if !sc.features.contains(&Feature::InlineDisks) {
            continue;
        }
        with += 1;
        let mine = vols(&sc.incoming);
        if sc.pods.iter().any(|p| {
            vols(p)
                .iter()
                .any(|v| mine.iter().any(|m| disks_conflict(m, v)))
        }) {
            conflicting += 1;
            eprintln!("scenario {i}: the incoming pod's disk conflicts with a bound pod's");
        }
    }
    eprintln!("{conflicting} of {with} disk scenarios have a conflicting pod");
    assert!(with >= 10 && conflicting >= 5, "{conflicting} of {with}");
}
