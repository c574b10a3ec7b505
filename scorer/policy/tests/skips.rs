//! `FilterPlugin::skips` is exact: a filter that says it has nothing to check for a pod
//! passes every node, whatever the nodes hold, and one that has something to check is not
//! skipped. Run over every filter of every profile of the embedded default config.
use std::collections::BTreeMap;
use std::sync::Arc;

use loadstar_framework::snapshot::{AffinityTerm, HostPort, LabelSelector, PodAffinity, PodOnNode};
use loadstar_policy::config::ScorerConfig;
use loadstar_testkit::snapshot::{ctx, edit_kube, kube_node, pod, snapshot, with_pod};

fn port(p: u16) -> HostPort {
    HostPort {
        protocol: "TCP".into(),
        host_ip: String::new(),
        port: p,
    }
}

#[test]
fn skipped_filters_pass_every_node_and_needed_ones_run() {
    let gib = 1i64 << 30;
    let busy = with_pod(
        kube_node("busy", 4000, 8 * gib),
        PodOnNode {
            uid: "web".into(),
            namespace: "default".into(),
            host_ports: vec![port(80)],
            ..Default::default()
        },
    );
    // An HA replica: one per host, against pods labelled `ha=web` (a plain pod is not).
    let ha = |k: &str| BTreeMap::from([(k.to_string(), "web".to_string())]);
    let busy = with_pod(
        busy,
        PodOnNode {
            uid: "ha-1".into(),
            namespace: "default".into(),
            labels: ha("ha"),
            pod_affinity: Arc::new(PodAffinity {
                required_anti: vec![AffinityTerm {
                    namespaces: vec!["default".into()],
                    selector: Some(LabelSelector {
                        match_labels: ha("ha"),
                        ..Default::default()
                    }),
                    topology_key: "kubernetes.io/hostname".into(),
                    namespace_selector: None,
                }],
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    let busy = edit_kube(busy, |k| {
        k.labels
            .insert("kubernetes.io/hostname".into(), "busy".into());
    });
    let snap = snapshot(vec![
        kube_node("a", 4000, 8 * gib),
        busy,
        kube_node("c", 500, gib),
    ]);
    let ctx = ctx(&snap);
    let profiles = ScorerConfig::embedded_default()
        .build_profiles()
        .expect("embedded profiles");
    let plain = pod(100, 64 << 20);
    let mut skipped = std::collections::BTreeSet::new();
    for profile in &profiles {
        for f in &profile.filters {
            let state = f.prefilter(&ctx, &plain);
            if !f.skips(state.as_ref(), &plain) {
                continue;
            }
            skipped.insert(f.name());
            for node in snap.nodes() {
                assert_eq!(
                    f.filter_prepared(&ctx, state.as_ref(), &plain, node),
                    Ok(()),
                    "{} skipped but refuses {}",
                    f.name(),
                    node.name
                );
            }
        }
    }
    for name in [
        "NodePorts",
        "VolumeRestrictions",
        "VolumeBinding",
        "VolumeZone",
        "NodeVolumeLimits",
        "EBSLimits",
        "PodTopologySpread",
        "InterPodAffinity",
        "NodeAffinity",
    ] {
        assert!(
            skipped.contains(name),
            "{name} not skipped for a plain pod: {skipped:?}"
        );
    }
    // A pod asking for host port 80: NodePorts runs, and refuses the node that holds it.
    let mut wants_80 = pod(100, 64 << 20);
    wants_80.host_ports = vec![port(80)];
    let ports = profiles
        .iter()
        .flat_map(|p| &p.filters)
        .find(|f| f.name() == "NodePorts")
        .expect("NodePorts in the default profiles");
    assert!(!ports.skips(None, &wants_80));
    assert!(ports.filter(&ctx, &wants_80, &snap.nodes()[1]).is_err());
    // A pod with a node selector: NodeAffinity runs, and refuses nodes without the label.
    let mut picky = pod(100, 64 << 20);
    picky.node_selector = BTreeMap::from([("disk".to_string(), "ssd".to_string())]);
    let node_affinity = profiles
        .iter()
        .flat_map(|p| &p.filters)
        .find(|f| f.name() == "NodeAffinity")
        .expect("NodeAffinity in the default profiles");
    assert!(!node_affinity.skips(None, &picky));
    assert!(
        node_affinity
            .filter(&ctx, &picky, &snap.nodes()[0])
            .is_err()
    );
    // A pod labelled `ha=web`: the existing replica's anti-affinity matches it, so
    // InterPodAffinity runs and refuses the replica's node.
    let mut replica = pod(100, 64 << 20);
    replica.labels = ha("ha");
    let affinity = profiles
        .iter()
        .flat_map(|p| &p.filters)
        .find(|f| f.name() == "InterPodAffinity")
        .expect("InterPodAffinity in the default profiles");
    let state = affinity.prefilter(&ctx, &replica);
    assert!(!affinity.skips(state.as_ref(), &replica));
    assert!(
        affinity
            .filter_prepared(&ctx, state.as_ref(), &replica, &snap.nodes()[1])
            .is_err()
    );
}
