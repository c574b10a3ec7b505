//! Converts a client's inline `PodDescription` into the [`PodInfo`] the plugins score, with
//! clear errors for malformed quantities or tolerations.
use loadstar_common::model::ResourceList;
use loadstar_common::text::{
    NAME_MAX, NAMESPACE_MAX, fits_pod_name_limits, pod_key, quote, truncate,
};
use loadstar_proto::pb;
use thiserror::Error;

use loadstar_framework::snapshot::{
    DEFAULT_NONZERO_CPU_MILLIS, DEFAULT_NONZERO_MEMORY_BYTES, Owner, PodInfo, TaintEffect,
    Toleration,
};

/// Errors of the description conversion.
#[derive(Debug, Error, PartialEq)]
pub enum PodSpecError {
    /// The namespace or name is longer than Kubernetes allows.
    #[error(
        "pod {0}: a namespace is at most {NAMESPACE_MAX} bytes and a name at most {NAME_MAX}, \
         as in Kubernetes"
    )]
    NameTooLong(String),
    /// A request or limit did not parse.
    #[error("pod {pod}: {field}: {source}")]
    Quantity {
        /// namespace/name.
        pod: String,
        /// `requests` or `limits`.
        field: &'static str,
        /// The parse error.
        #[source]
        source: loadstar_common::model::ResourceListError,
    },
    /// A toleration is invalid.
    #[error("pod {pod}: tolerations[{index}]: {reason}")]
    Toleration {
        /// namespace/name.
        pod: String,
        /// Index.
        index: usize,
        /// Why.
        reason: String,
    },
}

/// Refuses a pod whose namespace or name no API server would store: the scorer keeps them
/// (the decision log), so a client could otherwise park megabytes under each.
pub fn check_names(namespace: &str, name: &str) -> Result<(), PodSpecError> {
    if fits_pod_name_limits(namespace, name) {
        Ok(())
    } else {
        Err(PodSpecError::NameTooLong(pod_key(namespace, name)))
    }
}

/// Converts a description. The description is one container: requests default to upstream's
/// non-zero scoring values when absent.
pub fn from_description(d: &pb::PodDescription) -> Result<PodInfo, PodSpecError> {
    let namespace = if d.namespace.is_empty() {
        "default".to_string()
    } else {
        d.namespace.clone()
    };
    check_names(&namespace, &d.name)?;
    let pod = format!("{namespace}/{}", d.name);
    // Errors quote the client's names: bounded, unlike the pod's identity below.
    let label = truncate(&pod, 128);
    let parse = |field: &'static str, m: &std::collections::HashMap<String, String>| {
        ResourceList::from_quantities(m.iter().map(|(k, v)| (k.as_str(), v.as_str()))).map_err(
            |source| PodSpecError::Quantity {
                pod: label.clone(),
                field,
                source,
            },
        )
    };
    let requests = parse("requests", &d.requests)?;
    let limits = parse("limits", &d.limits)?;
    let mut tolerations = Vec::with_capacity(d.tolerations.len());
    for (index, t) in d.tolerations.iter().enumerate() {
        let err = |reason: String| PodSpecError::Toleration {
            pod: label.clone(),
            index,
            reason,
        };
        let exists = match t.operator.as_str() {
            "" | "Equal" => false,
            "Exists" => true,
            other => return Err(err(format!("unknown operator {}", quote(other)))),
        };
        let effect = match t.effect.as_str() {
            "" => None,
            e => Some(
                TaintEffect::parse(e).ok_or_else(|| err(format!("unknown effect {}", quote(e))))?,
            ),
        };
        if t.key.is_empty() && !exists {
            return Err(err("an empty key needs operator Exists".into()));
        }
        tolerations.push(Toleration {
            key: t.key.clone(),
            exists,
            value: t.value.clone(),
            effect,
        });
    }
    let nonzero_cpu_millis = if d.requests.contains_key("cpu") {
        requests.cpu_millis
    } else {
        DEFAULT_NONZERO_CPU_MILLIS
    };
    let nonzero_memory_bytes = if d.requests.contains_key("memory") {
        requests.memory_bytes
    } else {
        DEFAULT_NONZERO_MEMORY_BYTES
    };
    Ok(PodInfo {
        uid: if d.name.is_empty() {
            String::new()
        } else {
            format!("described:{pod}")
        },
        namespace,
        name: d.name.clone(),
        labels: d
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        owner: d.owner.as_ref().map(|o| Owner {
            kind: o.kind.clone(),
            name: o.name.clone(),
        }),
        requests,
        limits,
        nonzero_cpu_millis,
        nonzero_memory_bytes,
        node_selector: d
            .node_selector
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        tolerations,
        priority: d.priority,
        images: d.images.clone(),
        ..PodInfo::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn description_converts_with_defaults() {
        let d = pb::PodDescription {
            name: "web".into(),
            requests: [("cpu".to_string(), "500m".to_string())].into(),
            limits: [("nvidia.com/gpu".to_string(), "1".to_string())].into(),
            ..Default::default()
        };
        let p = from_description(&d).expect("valid");
        assert_eq!(p.namespace, "default");
        assert_eq!(p.requests.cpu_millis, 500);
        assert_eq!(p.nonzero_cpu_millis, 500);
        assert_eq!(p.nonzero_memory_bytes, DEFAULT_NONZERO_MEMORY_BYTES);
        assert_eq!(p.limits.gpus, 1);
        assert!(p.images.is_empty());
        let d = pb::PodDescription {
            images: vec!["nginx".into(), "proxy:1".into()],
            ..Default::default()
        };
        assert_eq!(
            from_description(&d).expect("valid").images,
            ["nginx", "proxy:1"]
        );
    }

    #[test]
    fn bad_descriptions_say_where() {
        let d = pb::PodDescription {
            name: "web".into(),
            requests: [("memory".to_string(), "1GB".to_string())].into(),
            ..Default::default()
        };
        assert_eq!(
            from_description(&d).expect_err("bad").to_string(),
            "pod default/web: requests: resource \"memory\": invalid quantity \"1GB\": unknown suffix"
        );
        let d = pb::PodDescription {
            tolerations: vec![pb::Toleration {
                key: "k".into(),
                operator: "Maybe".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(matches!(
            from_description(&d),
            Err(PodSpecError::Toleration { index: 0, .. })
        ));
    }

    #[test]
    fn long_names_are_cut_in_errors_but_not_in_the_identity() {
        let name = "n".repeat(NAME_MAX);
        let ok = from_description(&pb::PodDescription {
            name: name.clone(),
            ..Default::default()
        })
        .expect("valid");
        assert_eq!(ok.uid, format!("described:default/{name}"));
        let bad = from_description(&pb::PodDescription {
            name: name.clone(),
            requests: [("cpu".to_string(), "lots".to_string())].into(),
            ..Default::default()
        })
        .expect_err("bad quantity")
        .to_string();
        assert!(bad.len() < 250, "{bad}");
    }

    #[test]
    fn names_longer_than_kubernetes_allows_are_refused_briefly() {
        for (namespace, name) in [
            ("ns".to_string(), "n".repeat(1 << 20)),
            ("s".repeat(NAMESPACE_MAX + 1), "web".to_string()),
        ] {
            let e = from_description(&pb::PodDescription {
                name,
                namespace,
                ..Default::default()
            })
            .expect_err("too long");
            assert!(matches!(e, PodSpecError::NameTooLong(_)), "{e:?}");
            assert!(e.to_string().len() < 400, "{e}");
        }
    }
}
