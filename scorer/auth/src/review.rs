//! The seams to the API server's reviews and the pod cache, in domain terms: the Kubernetes
//! crates implement them (TokenReview and SubjectAccessReview in `loadstar-kube-client`, the
//! pod reflector in `loadstar-kube`); the auth logic and the tests use them without a cluster.
use std::fmt::Debug;

use crate::identity::Identity;

/// What a TokenReview said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenVerdict {
    /// The token is valid for (some of) the audiences asked for.
    Authenticated {
        /// Who it is.
        identity: Identity,
        /// The audiences the token is valid for, of those asked.
        audiences: Vec<String>,
    },
    /// The token is not valid; the API server's reason, if it gave one.
    Rejected {
        /// The reason (TokenReview `status.error`).
        reason: String,
    },
}

/// The review could not be carried out (the API server unreachable, throttled, or the
/// scorer's RBAC missing `tokenreviews`/`subjectaccessreviews` create).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the API server could not review the request: {0}")]
pub struct ReviewError(pub String);

/// Asks the API server who a token belongs to (`authentication.k8s.io/v1` TokenReview).
#[async_trait::async_trait]
pub trait TokenReviewer: Send + Sync + Debug {
    /// Reviews `token` for `audiences` (empty: the API server's own).
    async fn review_token(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<TokenVerdict, ReviewError>;
}

/// One SubjectAccessReview's resource attributes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceAttributes {
    /// Namespace.
    pub namespace: String,
    /// Verb (`create`, `get`).
    pub verb: String,
    /// API group (`""` for core).
    pub group: String,
    /// Resource (`pods`).
    pub resource: String,
    /// Subresource (`binding`), or empty.
    pub subresource: String,
    /// Object name, or empty.
    pub name: String,
}

impl ResourceAttributes {
    /// `create pods/binding` on pod `namespace/name`: what binding a pod takes.
    pub fn bind_pod(namespace: &str, name: &str) -> ResourceAttributes {
        ResourceAttributes {
            namespace: namespace.to_string(),
            verb: "create".into(),
            group: String::new(),
            resource: "pods".into(),
            subresource: "binding".into(),
            name: name.to_string(),
        }
    }

    /// `get pods` on pod `namespace/name`: what reading a pod takes.
    pub fn get_pod(namespace: &str, name: &str) -> ResourceAttributes {
        ResourceAttributes {
            namespace: namespace.to_string(),
            verb: "get".into(),
            group: String::new(),
            resource: "pods".into(),
            subresource: String::new(),
            name: name.to_string(),
        }
    }

    /// `list pods` in every namespace: what reading every pod's decision takes.
    pub fn list_pods() -> ResourceAttributes {
        ResourceAttributes {
            namespace: String::new(),
            verb: "list".into(),
            group: String::new(),
            resource: "pods".into(),
            subresource: String::new(),
            name: String::new(),
        }
    }

    /// `verb resource[/subresource]` in `namespace`, for messages; the namespace (a
    /// client's) quoted bounded.
    pub fn describe(&self) -> String {
        let resource = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        format!(
            "{} {resource} in namespace {}",
            self.verb,
            loadstar_common::text::quote(&self.namespace)
        )
    }
}

/// What a SubjectAccessReview said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessVerdict {
    /// Allowed.
    Allowed,
    /// Denied (or no opinion), with the authoriser's reason if any.
    Denied {
        /// The reason.
        reason: String,
    },
}

/// Asks the API server whether a user may do something (`authorization.k8s.io/v1`
/// SubjectAccessReview).
#[async_trait::async_trait]
pub trait AccessReviewer: Send + Sync + Debug {
    /// May `identity` do `attributes`?
    async fn review_access(
        &self,
        identity: &Identity,
        attributes: &ResourceAttributes,
    ) -> Result<AccessVerdict, ReviewError>;
}

/// What the cluster cache knows of the pod an agent token was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPod {
    /// metadata.uid.
    pub uid: String,
    /// spec.nodeName.
    pub node_name: Option<String>,
    /// status.phase is Running and no deletion is pending.
    pub running: bool,
}

/// A pod lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodLookup {
    /// The pod as last seen.
    Found(AgentPod),
    /// No such pod.
    Missing,
    /// The cache has not finished its first list.
    NotSynced,
}

/// The cluster's pods, as the scorer's reflector sees them.
pub trait AgentPods: Send + Sync + Debug {
    /// The pod `namespace/name`.
    fn agent_pod(&self, namespace: &str, name: &str) -> PodLookup;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_quote_the_namespace_briefly() {
        assert_eq!(
            ResourceAttributes::bind_pod("team", "web").describe(),
            "create pods/binding in namespace \"team\""
        );
        let huge = "n".repeat(1_000_000);
        let d = ResourceAttributes::get_pod(&huge, "web").describe();
        assert!(d.len() < 1024, "{} bytes", d.len());
        assert!(
            d.starts_with("get pods in namespace \"nnnnnnnnnnnnnnnn"),
            "{d}"
        );
        assert!(d.contains("(1000000 bytes)"), "{d}");
    }
}
