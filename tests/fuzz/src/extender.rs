//! `extender` target: a kube-scheduler extender request as the extender's HTTP handlers read
//! it (scorer/extender/src/server.rs `read`, without the HTTP layer): `ExtenderArgs` JSON
//! (scorer/extender/src/wire.rs), the candidate names (`take_names`), the pod through
//! `JsonPodDecoder` and `load_view`, then the `filter` and `prioritize` verdicts
//! (scorer/extender/src/verdict.rs) of the default profile's load-aware plugins on a fixed
//! snapshot, and the JSON answers.
//!
//! Properties: passing positions index the request's names, in order, without repeats;
//! failed nodes are request names; priorities are 0–10, one per name, in request order;
//! `scale` maps every f64 into 0–10.
use loadstar_extender::verdict::{filter, load_profile, load_view, prioritize, scale};
use loadstar_extender::wire::{
    ExtenderArgs, ExtenderFilterResult, HostPriority, MAX_EXTENDER_PRIORITY, NodeList,
};
use loadstar_kube::convert::JsonPodDecoder;
use loadstar_store::cluster::PodDecoder;

/// One input.
pub fn fuzz(data: &[u8]) {
    for chunk in data.chunks_exact(8).take(4) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        let s = scale(f64::from_le_bytes(b));
        assert!((0..=MAX_EXTENDER_PRIORITY).contains(&s));
    }
    let Ok(mut args) = serde_json::from_slice::<ExtenderArgs>(data) else {
        return;
    };
    let sent_names = args.node_names.is_some();
    let Ok(names) = args.take_names() else {
        return;
    };
    if sent_names {
        args.node_names = Some(Vec::new());
    }
    if args.pod.is_null() {
        return;
    }
    let Ok(pod) = JsonPodDecoder.decode(&args.pod.to_string()) else {
        return;
    };
    let pod = load_view(pod);

    // As `Extender::new` splits each profile: filters alone, and scores alone.
    let mut profiles = crate::fixtures::default_profiles();
    let mut filter_profile = load_profile(profiles.remove(0));
    filter_profile.scores.clear();
    let mut score_profile = load_profile(crate::fixtures::default_profiles().remove(0));
    score_profile.filters.clear();

    let snap = crate::fixtures::snapshot();
    let mut rng = crate::fixtures::rng();
    let v = filter(&filter_profile, &snap, &pod, &names, &mut rng);
    assert!(
        v.passed.windows(2).all(|w| w[0] < w[1]),
        "passed out of order"
    );
    assert!(v.passed.iter().all(|&i| i < names.len()));
    for failed in v.failed.keys() {
        assert!(
            names.contains(failed),
            "failed node {failed:?} was not asked about"
        );
    }
    let result = match args.nodes {
        Some(list) if args.node_names.is_none() => ExtenderFilterResult {
            nodes: Some(NodeList {
                items: v
                    .passed
                    .iter()
                    .filter_map(|&i| list.items.get(i).cloned())
                    .collect(),
            }),
            node_names: None,
            failed_nodes: v.failed.clone(),
            error: String::new(),
        },
        _ => ExtenderFilterResult {
            nodes: None,
            node_names: Some(v.passed.iter().map(|&i| names[i].as_str()).collect()),
            failed_nodes: v.failed.clone(),
            error: String::new(),
        },
    };
    let _ = serde_json::to_vec(&result).map_err(|e| panic!("filter answer: {e}"));

    let scores = prioritize(&score_profile, &snap, &pod, &names, &mut rng);
    assert_eq!(scores.len(), names.len());
    for ((host, score), name) in scores.iter().zip(&names) {
        assert_eq!(host, name);
        assert!(
            (0..=MAX_EXTENDER_PRIORITY).contains(score),
            "{host}: {score}"
        );
    }
    let list: Vec<HostPriority> = scores
        .into_iter()
        .map(|(host, score)| HostPriority { host, score })
        .collect();
    let _ = serde_json::to_vec(&list).map_err(|e| panic!("prioritize answer: {e}"));
}
