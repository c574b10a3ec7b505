//! `score_request` target: the gRPC `Score` call's request — protobuf decoding of
//! `loadstar.v1.ScoreRequest` (prost), the inline `PodDescription` conversion
//! (scorer/grpc/src/podspec.rs `from_description`) or the `pod_json` path (`JsonPodDecoder`),
//! and the resulting pod scored by the embedded default profile on a fixed snapshot.
//!
//! Properties: a converted description never has negative requests; the default profile
//! scores it within 0–100 on every node.
use loadstar_grpc::podspec::from_description;
use loadstar_kube::convert::JsonPodDecoder;
use loadstar_proto::pb;
use loadstar_store::cluster::PodDecoder;
use prost::Message;

/// One input.
pub fn fuzz(data: &[u8]) {
    let Ok(req) = pb::ScoreRequest::decode(data) else {
        return;
    };
    let pod = match &req.pod {
        Some(pb::score_request::Pod::Description(d)) => match from_description(d) {
            Ok(p) => p,
            Err(e) => {
                let _ = e.to_string();
                return;
            }
        },
        Some(pb::score_request::Pod::PodJson(json)) => match JsonPodDecoder.decode(json) {
            Ok(p) => p,
            Err(_) => return,
        },
        _ => return,
    };
    let r = &pod.requests;
    assert!(
        r.cpu_millis >= 0 && r.memory_bytes >= 0 && r.gpus >= 0 && r.pods >= 0,
        "negative requests {r:?}"
    );
    assert!(pod.nonzero_cpu_millis >= 0 && pod.nonzero_memory_bytes >= 0);
    let profiles = crate::fixtures::default_profiles();
    crate::fixtures::evaluate_and_check(&profiles[0], &pod);
}
