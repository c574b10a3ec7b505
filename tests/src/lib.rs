//! Helpers shared by the integration tests and the benchmark helper (`scheduler-bench`):
//! what both need from a real API server.
use anyhow::{Context, Result};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, PostParams};

/// A TokenRequest token of ServiceAccount `ns/sa` for `audiences` (empty: the API server's),
/// valid `seconds`, bound to pod `name`/`uid` if given (as the kubelet's projected tokens).
pub async fn token_request(
    client: &Client,
    ns: &str,
    sa: &str,
    audiences: &[&str],
    pod: Option<(&str, &str)>,
    seconds: i64,
) -> Result<String> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audiences.iter().map(|a| a.to_string()).collect(),
            expiration_seconds: Some(seconds),
            bound_object_ref: pod.map(|(name, uid)| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
            }),
        },
        ..TokenRequest::default()
    };
    let answer = api
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .context("TokenRequest")?;
    Ok(answer.status.context("TokenRequest without status")?.token)
}
