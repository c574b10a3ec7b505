//! `score -f FILE`: the pod a manifest describes, as the `pod_json` the scorer reads. A Pod
//! is taken as it is; a workload (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job,
//! CronJob, ReplicationController) gives its pod template, so "where would one more replica
//! go" is one command. YAML or JSON, the first matching document of a multi-document file.
use serde_json::{Value, json};

/// Why a manifest gives no pod.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ManifestError {
    /// Not YAML or JSON.
    #[error("not a YAML or JSON manifest: {0}")]
    Parse(String),
    /// No document is a pod or has a pod template.
    #[error(
        "no Pod and no workload with a pod template in the manifest (kinds found: {0}); \
         give a Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob or \
         ReplicationController"
    )]
    NoPod(String),
}

/// The pod (as JSON text) of the first document of `text` that is or templates one, in
/// `namespace` unless the manifest names its own.
pub fn pod_json(text: &str, namespace: Option<&str>) -> Result<String, ManifestError> {
    let mut kinds = Vec::new();
    for doc in serde_norway::Deserializer::from_str(text) {
        let v: Value = serde::Deserialize::deserialize(doc)
            .map_err(|e: serde_norway::Error| ManifestError::Parse(e.to_string()))?;
        if v.is_null() {
            continue;
        }
        let kind = v["kind"].as_str().unwrap_or("<no kind>").to_string();
        if let Some(pod) = pod_of(&v, &kind) {
            let mut pod = pod;
            let ns = v["metadata"]["namespace"]
                .as_str()
                .map(str::to_string)
                .or_else(|| namespace.map(str::to_string))
                .unwrap_or_else(|| "default".into());
            pod["metadata"]["namespace"] = json!(ns);
            return serde_json::to_string(&pod).map_err(|e| ManifestError::Parse(e.to_string()));
        }
        kinds.push(kind);
    }
    Err(ManifestError::NoPod(if kinds.is_empty() {
        "none".into()
    } else {
        kinds.join(", ")
    }))
}

fn pod_of(v: &Value, kind: &str) -> Option<Value> {
    let template = match kind {
        "Pod" => return Some(v.clone()),
        "Deployment"
        | "ReplicaSet"
        | "StatefulSet"
        | "DaemonSet"
        | "Job"
        | "ReplicationController" => &v["spec"]["template"],
        "CronJob" => &v["spec"]["jobTemplate"]["spec"]["template"],
        _ => return None,
    };
    if !template.is_object() {
        return None;
    }
    let owner = v["metadata"]["name"].as_str().unwrap_or("workload");
    let mut metadata = template["metadata"].clone();
    if !metadata.is_object() {
        metadata = json!({});
    }
    if metadata["name"].is_null() {
        metadata["name"] = json!(format!("{owner}-template"));
    }
    Some(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": template["spec"].clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_taken_as_it_is_in_the_given_namespace() {
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: x\n";
        let v: Value =
            serde_json::from_str(&pod_json(yaml, Some("shop")).expect("a pod")).expect("json");
        assert_eq!(v["metadata"]["name"], "web");
        assert_eq!(v["metadata"]["namespace"], "shop");
        assert_eq!(v["spec"]["containers"][0]["image"], "x");
    }

    #[test]
    fn a_deployment_gives_its_template_and_other_documents_are_skipped() {
        let yaml = "kind: Service\nmetadata: {name: s}\n---\nkind: Deployment\nmetadata:\n  name: api\n  namespace: prod\nspec:\n  template:\n    metadata:\n      labels: {app: api}\n    spec:\n      containers: [{name: c, image: x}]\n";
        let v: Value =
            serde_json::from_str(&pod_json(yaml, Some("ignored")).expect("a pod")).expect("json");
        assert_eq!(v["kind"], "Pod");
        assert_eq!(v["metadata"]["name"], "api-template");
        assert_eq!(v["metadata"]["namespace"], "prod");
        assert_eq!(v["metadata"]["labels"]["app"], "api");
    }

    #[test]
    fn manifests_without_a_pod_say_what_they_hold() {
        assert_eq!(
            pod_json("kind: Service\n---\nkind: ConfigMap\n", None),
            Err(ManifestError::NoPod("Service, ConfigMap".into()))
        );
        assert!(matches!(
            pod_json("kind: [unclosed", None),
            Err(ManifestError::Parse(_))
        ));
        let json = r#"{"kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[]}}"#;
        assert!(pod_json(json, None).is_ok(), "JSON is YAML");
    }
}
