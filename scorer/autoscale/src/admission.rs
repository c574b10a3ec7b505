//! The StepScaler validating admission webhook's verdict, pure: an `AdmissionReview`
//! (`admission.k8s.io/v1` or `v1beta1`) in, the answer out. It refuses what the CRD's OpenAPI
//! schema cannot express on every API server — `minReplicas` above `maxReplicas`, a points
//! tolerance not below the target — with the same messages the controller would put in the
//! `Valid` condition, so a bad spec is refused at `kubectl apply` on Kubernetes 1.20 too.
use serde_json::{Value, json};

use crate::spec::StepScalerSpec;

/// Why a review could not be answered at all (not a StepScaler verdict).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// The body is not an `AdmissionReview` with a request.
    #[error("not an AdmissionReview request: {0}")]
    NotAReview(String),
}

/// The answer to an `AdmissionReview` body: allowed, or refused naming the field. Deletes and
/// objects without a spec are allowed (the schema already requires `spec`).
pub fn review(body: &[u8]) -> Result<Value, AdmissionError> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| AdmissionError::NotAReview(e.to_string()))?;
    let request = v
        .get("request")
        .filter(|r| r.is_object())
        .ok_or_else(|| AdmissionError::NotAReview("no request".into()))?;
    let uid = request
        .get("uid")
        .and_then(Value::as_str)
        .ok_or_else(|| AdmissionError::NotAReview("request without a uid".into()))?;
    let api_version = v
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("admission.k8s.io/v1");
    let spec = request.get("object").and_then(|o| o.get("spec"));
    let old_spec = request.get("oldObject").and_then(|o| o.get("spec"));
    // An update that leaves the spec as it was (labels, finalizers) passes: an object
    // admitted while the webhook was down must stay editable.
    let unchanged = spec.is_some() && spec == old_spec;
    let verdict = match spec {
        Some(spec) if !unchanged => StepScalerSpec::from_json(spec)
            .and_then(|s| s.config())
            .err(),
        _ => None,
    };
    let response = match verdict {
        None => json!({"uid": uid, "allowed": true}),
        Some(e) => json!({"uid": uid, "allowed": false, "status": {
            "status": "Failure", "code": 422, "reason": "Invalid",
            "message": format!("StepScaler {e}")
        }}),
    };
    Ok(json!({"apiVersion": api_version, "kind": "AdmissionReview", "response": response}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(api_version: &str, spec: Value) -> Vec<u8> {
        json!({"apiVersion": api_version, "kind": "AdmissionReview", "request": {
            "uid": "u-1", "operation": "CREATE",
            "object": {"apiVersion": "loadstar.io/v1alpha1", "kind": "StepScaler", "spec": spec}
        }})
        .to_string()
        .into_bytes()
    }

    fn spec(min: u32, max: u32) -> Value {
        json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w"},
               "targetUtilizationPercent": 60, "minReplicas": min, "maxReplicas": max})
    }

    #[test]
    fn floor_above_ceiling_is_refused_naming_the_field() {
        let r = review(&body("admission.k8s.io/v1", spec(5, 3))).expect("answered");
        assert_eq!(r["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(r["response"]["uid"], "u-1");
        assert_eq!(r["response"]["allowed"], false);
        assert_eq!(r["response"]["status"]["code"], 422);
        let msg = r["response"]["status"]["message"]
            .as_str()
            .expect("message");
        assert!(
            msg.contains("spec.minReplicas: 5 is above maxReplicas 3"),
            "{msg}"
        );
    }

    #[test]
    fn valid_specs_and_deletes_pass_in_both_versions() {
        let r = review(&body("admission.k8s.io/v1beta1", spec(2, 3))).expect("answered");
        assert_eq!(r["apiVersion"], "admission.k8s.io/v1beta1");
        assert_eq!(r["response"]["allowed"], true);
        let delete = json!({"apiVersion": "admission.k8s.io/v1", "request": {"uid": "d",
            "operation": "DELETE", "object": null}});
        let r = review(delete.to_string().as_bytes()).expect("answered");
        assert_eq!(r["response"]["allowed"], true);
    }

    #[test]
    fn updates_that_keep_an_invalid_spec_pass() {
        let bad = spec(5, 3);
        let review_of = |old: Value| {
            json!({"apiVersion": "admission.k8s.io/v1", "request": {"uid": "x",
                "operation": "UPDATE", "object": {"metadata": {"labels": {"a": "b"}}, "spec": bad},
                "oldObject": {"spec": old}}})
            .to_string()
        };
        let r = review(review_of(spec(5, 3)).as_bytes()).expect("answered");
        assert_eq!(r["response"]["allowed"], true, "a label change");
        let r = review(review_of(spec(2, 3)).as_bytes()).expect("answered");
        assert_eq!(r["response"]["allowed"], false, "a spec made invalid");
    }

    #[test]
    fn garbage_is_not_a_review() {
        for b in [
            &b"{"[..],
            b"[]",
            br#"{"request": {}}"#,
            br#"{"request": 3}"#,
        ] {
            assert!(review(b).is_err(), "{}", String::from_utf8_lossy(b));
        }
    }
}
