//! `pod_json` target: whole core/v1 Pods and Nodes as JSON, read the way the scorer reads
//! them — `JsonPodDecoder` (the `PodDecoder` behind the gRPC `Score` call's `pod_json` and the
//! extender's `Pod`), `pod_facts` (cluster pods) and `kube_node` (cluster nodes), all in
//! scorer/kube/src/convert.rs with the constraint parsing of scorer/kube/src/constraints.rs —
//! and the decoded pod scored by the embedded default profile on a fixed snapshot.
//!
//! Properties: the decoder and `pod_facts` agree; effective requests are never negative;
//! the default profile scores the pod within 0–100 on every node.
use k8s_openapi::api::core::v1::{Node, Pod};
use loadstar_kube::convert::{JsonPodDecoder, kube_node, pod_facts};
use loadstar_store::cluster::PodDecoder;

/// One input.
pub fn fuzz(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let decoded = JsonPodDecoder.decode(text);
    if let Ok(pod) = serde_json::from_str::<Pod>(text) {
        let facts = pod_facts(&pod);
        let _ = facts.key();
        assert_eq!(
            facts.info.is_ok(),
            decoded.is_ok(),
            "JsonPodDecoder and pod_facts disagree"
        );
    } else {
        assert!(decoded.is_err());
    }
    if let Ok(info) = &decoded {
        let r = &info.requests;
        assert!(
            r.cpu_millis >= 0
                && r.memory_bytes >= 0
                && r.ephemeral_storage_bytes >= 0
                && r.pods >= 0
                && r.gpus >= 0
                && r.extended.values().all(|v| *v >= 0),
            "negative requests {r:?}"
        );
        assert!(info.nonzero_cpu_millis >= 0 && info.nonzero_memory_bytes >= 0);
        let profiles = crate::fixtures::default_profiles();
        crate::fixtures::evaluate_and_check(&profiles[0], info);
    }
    if let Ok(node) = serde_json::from_str::<Node>(text)
        && let Ok(k) = kube_node(&node)
    {
        assert!(k.allocatable.cpu_millis >= 0 && k.allocatable.memory_bytes >= 0);
    }
}
