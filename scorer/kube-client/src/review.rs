//! The API server's verdicts on callers: TokenReview (who holds this token?) and
//! SubjectAccessReview (may they do this?), `authentication.k8s.io/v1` and
//! `authorization.k8s.io/v1` (both served since 1.6; the scorer's RBAC needs `create` on
//! each, as in `system:auth-delegator`). Requests go through their own rate-limited client,
//! so a storm of logins cannot starve scheduling.
use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes as KubeAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use loadstar_auth::Identity;
use loadstar_auth::identity::Source;
use loadstar_auth::review::{
    AccessReviewer, AccessVerdict, ResourceAttributes, ReviewError, TokenReviewer, TokenVerdict,
};

/// Token and access reviews against the API server.
#[derive(Clone)]
pub struct KubeReviews {
    client: Client,
}

impl std::fmt::Debug for KubeReviews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KubeReviews")
    }
}

impl KubeReviews {
    /// Reviews through `client`.
    pub fn new(client: Client) -> KubeReviews {
        KubeReviews { client }
    }
}

fn review_error(e: kube::Error) -> ReviewError {
    ReviewError(loadstar_common::text::truncate(&e.to_string(), 512))
}

/// The identity in a TokenReview's status, as the API server returned it.
pub fn identity_of(review: &TokenReview) -> Option<(Identity, Vec<String>)> {
    let status = review.status.as_ref()?;
    if status.authenticated != Some(true) {
        return None;
    }
    let user = status.user.as_ref()?;
    let identity = Identity {
        username: user.username.clone().unwrap_or_default(),
        uid: user.uid.clone().unwrap_or_default(),
        groups: user.groups.clone().unwrap_or_default(),
        extra: user
            .extra
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect::<BTreeMap<_, _>>(),
        source: Source::Token,
    };
    Some((identity, status.audiences.clone().unwrap_or_default()))
}

#[async_trait::async_trait]
impl TokenReviewer for KubeReviews {
    async fn review_token(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<TokenVerdict, ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: (!audiences.is_empty()).then(|| audiences.to_vec()),
            },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(review_error)?;
        Ok(match identity_of(&answer) {
            Some((identity, audiences)) => TokenVerdict::Authenticated {
                identity,
                audiences,
            },
            None => TokenVerdict::Rejected {
                reason: answer.status.and_then(|s| s.error).unwrap_or_default(),
            },
        })
    }
}

#[async_trait::async_trait]
impl AccessReviewer for KubeReviews {
    async fn review_access(
        &self,
        identity: &Identity,
        attributes: &ResourceAttributes,
    ) -> Result<AccessVerdict, ReviewError> {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(identity.username.clone()),
                uid: some(&identity.uid),
                groups: (!identity.groups.is_empty()).then(|| identity.groups.clone()),
                extra: (!identity.extra.is_empty())
                    .then(|| identity.extra.clone().into_iter().collect()),
                resource_attributes: Some(KubeAttributes {
                    namespace: some(&attributes.namespace),
                    verb: some(&attributes.verb),
                    group: Some(attributes.group.clone()),
                    resource: some(&attributes.resource),
                    subresource: some(&attributes.subresource),
                    name: some(&attributes.name),
                    ..KubeAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(review_error)?;
        let status = answer.status.unwrap_or_default();
        Ok(if status.allowed && status.denied != Some(true) {
            AccessVerdict::Allowed
        } else {
            AccessVerdict::Denied {
                reason: status
                    .reason
                    .or(status.evaluation_error)
                    .unwrap_or_default(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn identities_come_from_authenticated_reviews_only() {
        // As kube-apiserver 1.20 answers for a projected token bound to a pod.
        let review: TokenReview = serde_json::from_value(json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {},
            "status": {
                "authenticated": true,
                "audiences": ["loadstar"],
                "user": {
                    "username": "system:serviceaccount:loadstar:loadstar-agent",
                    "uid": "sa-uid",
                    "groups": ["system:serviceaccounts", "system:serviceaccounts:loadstar",
                               "system:authenticated"],
                    "extra": {
                        "authentication.kubernetes.io/pod-name": ["agent-x"],
                        "authentication.kubernetes.io/pod-uid": ["pod-uid"]
                    }
                }
            }
        }))
        .expect("review");
        let (id, audiences) = identity_of(&review).expect("authenticated");
        assert_eq!(audiences, vec!["loadstar".to_string()]);
        assert_eq!(id.bound_pod().map(|p| p.name), Some("agent-x".into()));
        assert_eq!(
            id.service_account().map(|s| s.to_string()),
            Some("loadstar/loadstar-agent".into())
        );
        let refused: TokenReview = serde_json::from_value(json!({
            "spec": {}, "status": {"authenticated": false, "error": "invalid bearer token"}
        }))
        .expect("review");
        assert_eq!(identity_of(&refused), None);
    }
}
