//! Authentication and authorisation against a real kube-apiserver 1.20.2 (TokenRequest,
//! TokenReview, SubjectAccessReview, RBAC): agents bound to their pod's node by projected
//! tokens, other accounts', expired and wrong-audience tokens refused, `Bind` only for
//! callers who may `create pods/binding` and only for the scorer's own pods. Run by
//! `tests/e2e/run.sh`.
mod e2e_support;

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use base64::Engine;
use e2e_support::*;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use loadstar_proto::pb;
use loadstar_proto::pb::ingest_client::IngestClient;
use loadstar_proto::pb::scheduler_client::SchedulerClient;
use loadstar_proto::pb::scorer_client::ScorerClient;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::Channel;

const AGENT_NS: &str = "loadstar";

async fn service_account(client: &Client, ns: &str, name: &str) -> Result<()> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    match api.create(&PostParams::default(), &sa).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).context("creating service account"),
    }
}

/// A pod of `sa` bound to `node` and marked Running (there is no kubelet): what a DaemonSet
/// pod looks like to the API server once it runs. Returns its UID.
async fn running_pod(
    client: &Client,
    ns: &str,
    name: &str,
    sa: &str,
    node: &str,
) -> Result<String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": sa,
            // No token controller runs here, so no Secret token could be mounted.
            "automountServiceAccountToken": false,
            "nodeName": node,
            "containers": [{"name": "agent", "image": "registry.invalid/loadstar-agent:e2e"}]
        }
    }))?;
    let created = api
        .create(&PostParams::default(), &pod)
        .await
        .context("creating pod")?;
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .context("marking the pod Running")?;
    created.metadata.uid.context("pod without uid")
}

/// A 10-minute TokenRequest token of `sa` for `audiences`, bound to pod `name`/`uid` if
/// given.
async fn token(
    client: &Client,
    ns: &str,
    sa: &str,
    audiences: &[&str],
    pod: Option<(&str, &str)>,
) -> Result<String> {
    loadstar_tests::token_request(client, ns, sa, audiences, pod, 600).await
}

/// A bound agent token exactly as the API server issues them, but expired an hour ago,
/// signed with the cluster's service-account key (`LOADSTAR_E2E_SA_SIGNING_KEY`).
fn expired_agent_token(pod: &str, uid: &str) -> Result<String> {
    let key = std::env::var("LOADSTAR_E2E_SA_SIGNING_KEY")
        .context("LOADSTAR_E2E_SA_SIGNING_KEY (set by tests/e2e/run.sh)")?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let enc = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = enc.encode(json!({"alg": "RS256", "typ": "JWT"}).to_string());
    let claims = enc.encode(
        json!({
            "iss": "https://kubernetes.default.svc.cluster.local",
            "sub": "system:serviceaccount:loadstar:loadstar-agent",
            "aud": ["loadstar"],
            "iat": now - 7200, "nbf": now - 7200, "exp": now - 3600,
            "kubernetes.io": {
                "namespace": AGENT_NS,
                "pod": {"name": pod, "uid": uid},
                "serviceaccount": {"name": "loadstar-agent", "uid": "unknown"}
            }
        })
        .to_string(),
    );
    let signing_input = format!("{header}.{claims}");
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("input");
    std::fs::write(&input, &signing_input)?;
    let out = Command::new("openssl")
        .args(["dgst", "-sha256", "-sign", &key])
        .arg(&input)
        .output()
        .context("openssl")?;
    if !out.status.success() {
        bail!("openssl: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(format!("{signing_input}.{}", enc.encode(out.stdout)))
}

fn bearer<T>(msg: T, token: Option<&str>) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    if let Some(t) = token {
        r.metadata_mut().insert(
            "authorization",
            format!("Bearer {t}").parse().expect("ascii header"),
        );
    }
    r
}

/// Sends one report for `node` with `token` on a new stream: the ack, or the status the
/// stream (or its opening) ended with.
async fn report_once(
    channel: Channel,
    token: Option<&str>,
    node: &str,
) -> std::result::Result<pb::ReportAck, tonic::Status> {
    let (tx, rx) = mpsc::channel(1);
    let mut r = loadstar_testkit::agent::fixed_report(node, 1, 0.2, 0.3);
    r.agent_instance = format!("e2e-auth-{:x}", rand_u32());
    tx.send(r).await.expect("send");
    let mut acks = IngestClient::new(channel)
        .report(bearer(ReceiverStream::new(rx), token))
        .await?
        .into_inner();
    let ack = acks
        .message()
        .await?
        .ok_or_else(|| tonic::Status::internal("no ack"))?;
    if ack.accepted {
        Ok(ack)
    } else {
        // A refused report ends the stream with the reason as its status.
        Err(match acks.message().await {
            Err(s) => s,
            _ => tonic::Status::unknown(ack.reject_reason),
        })
    }
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn agents_are_bound_to_their_pods_node_by_projected_tokens() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let suffix = format!("{:04x}", rand_u32() & 0xffff);
    let (node_a, node_b) = (format!("auth-a-{suffix}"), format!("auth-b-{suffix}"));
    create_node(&client, &node_a, "8", "32Gi").await?;
    create_node(&client, &node_b, "8", "32Gi").await?;
    service_account(&client, AGENT_NS, "loadstar-agent").await?;
    service_account(&client, AGENT_NS, "intruder").await?;
    let agent_pod = format!("agent-{suffix}");
    let uid = running_pod(&client, AGENT_NS, &agent_pod, "loadstar-agent", &node_a).await?;
    let intruder_pod = format!("intruder-{suffix}");
    let intruder_uid = running_pod(&client, AGENT_NS, &intruder_pod, "intruder", &node_b).await?;
    let good = token(
        &client,
        AGENT_NS,
        "loadstar-agent",
        &["loadstar"],
        Some((&agent_pod, &uid)),
    )
    .await?;
    let other_account = token(
        &client,
        AGENT_NS,
        "intruder",
        &["loadstar"],
        Some((&intruder_pod, &intruder_uid)),
    )
    .await?;
    let wrong_audience = token(
        &client,
        AGENT_NS,
        "loadstar-agent",
        &["elsewhere"],
        Some((&agent_pod, &uid)),
    )
    .await?;
    let unbound = token(&client, AGENT_NS, "loadstar-agent", &["loadstar"], None).await?;
    let expired = expired_agent_token(&agent_pod, &uid)?;

    // The API server itself refuses the expired token for its expiry (so the signature
    // and claims are those of a real token).
    let reviews: Api<TokenReview> = Api::all(client.clone());
    let verdict = reviews
        .create(
            &PostParams::default(),
            &TokenReview {
                spec: TokenReviewSpec {
                    token: Some(expired.clone()),
                    audiences: Some(vec!["loadstar".into()]),
                },
                ..TokenReview::default()
            },
        )
        .await?
        .status
        .unwrap_or_default();
    // `authenticated: false` is omitted from the answer.
    assert_ne!(verdict.authenticated, Some(true), "{verdict:?}");
    assert!(
        verdict.error.as_deref().unwrap_or("").contains("expired"),
        "{verdict:?}"
    );

    let scorer = Scorer::start_authenticated(&env, "auth-agents", "lease-auth-agents", &[]).await?;
    let channel = Channel::from_shared(scorer.endpoint())?.connect().await?;
    // Accepted for its own node once the scorer has listed the pods.
    eventually(
        "the agent's report for its own node",
        Duration::from_secs(20),
        || {
            let (channel, good, node) = (channel.clone(), good.clone(), node_a.clone());
            async move {
                Ok(match report_once(channel, Some(&good), &node).await {
                    Ok(_) => Ok(()),
                    Err(s) => Err(format!("{:?}: {}", s.code(), s.message())),
                })
            }
        },
    )
    .await?;

    let cases: [(&str, Option<&str>, &str, Code, &str); 7] = [
        (
            "the same token for another node",
            Some(&good),
            &node_b,
            Code::PermissionDenied,
            "wrong_node",
        ),
        (
            "no token",
            None,
            &node_a,
            Code::Unauthenticated,
            "missing_credentials",
        ),
        (
            "another service account's token",
            Some(&other_account),
            &node_b,
            Code::PermissionDenied,
            "wrong_service_account",
        ),
        (
            "a token for another audience",
            Some(&wrong_audience),
            &node_a,
            Code::Unauthenticated,
            "invalid_token",
        ),
        (
            "a token bound to no pod",
            Some(&unbound),
            &node_a,
            Code::PermissionDenied,
            "not_bound_to_pod",
        ),
        (
            "an expired token",
            Some(&expired),
            &node_a,
            Code::Unauthenticated,
            "invalid_token",
        ),
        (
            "garbage",
            Some("not-a-token"),
            &node_a,
            Code::Unauthenticated,
            "invalid_token",
        ),
    ];
    for (what, tok, node, code, reason) in cases {
        let status = report_once(channel.clone(), tok, node)
            .await
            .err()
            .with_context(|| format!("{what} was accepted"))?;
        assert_eq!(status.code(), code, "{what}: {status:?}");
        assert!(
            status.message().starts_with(reason),
            "{what}: {:?}",
            status.message()
        );
    }
    // An agent's token is for reports only (its audience is not the API server's).
    let mut q = ScorerClient::new(channel.clone());
    let status = q
        .get_node(bearer(
            pb::GetNodeRequest {
                node_name: node_a.clone(),
            },
            Some(&good),
        ))
        .await
        .err()
        .context("an agent token must not query")?;
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    let client_token = token(&client, AGENT_NS, "intruder", &[], None).await?;
    let a = q
        .get_node(bearer(
            pb::GetNodeRequest {
                node_name: node_a.clone(),
            },
            Some(&client_token),
        ))
        .await?
        .into_inner();
    assert!(
        a.last_report.is_some() && a.reports_accepted >= 1,
        "node A has its agent's load"
    );
    // Node B is known from Kubernetes only: no report for it was ever stored.
    let b = q
        .get_node(bearer(
            pb::GetNodeRequest {
                node_name: node_b.clone(),
            },
            Some(&client_token),
        ))
        .await?
        .into_inner();
    assert!(b.last_report.is_none() && b.reports_accepted == 0, "{b:?}");

    // The pod goes away: its token no longer reports (the API server invalidates it, and
    // the scorer's pod cache no longer has the pod).
    let pods: Api<Pod> = Api::namespaced(client.clone(), AGENT_NS);
    pods.delete(
        &agent_pod,
        &kube::api::DeleteParams::default().grace_period(0),
    )
    .await?;
    eventually(
        "the deleted pod's token refused",
        Duration::from_secs(20),
        || {
            let (channel, good, node) = (channel.clone(), good.clone(), node_a.clone());
            async move {
                Ok(match report_once(channel, Some(&good), &node).await {
                    Ok(_) => Err("still accepted".to_string()),
                    Err(s)
                        if s.code() == Code::PermissionDenied
                            || s.code() == Code::Unauthenticated =>
                    {
                        Ok(())
                    }
                    Err(s) => Err(format!("{:?}: {}", s.code(), s.message())),
                })
            }
        },
    )
    .await?;
    let metrics_log = scorer.log_tail();
    assert!(
        metrics_log.contains("caller refused"),
        "refusals are logged: {metrics_log}"
    );
    let _ = pods
        .delete(
            &intruder_pod,
            &kube::api::DeleteParams::default().grace_period(0),
        )
        .await;
    delete_nodes(&client, &[node_a, node_b]).await;
    Ok(())
}

/// Retries `call` (the scorer may still be listing the cluster) until it answers
/// `PERMISSION_DENIED`; that status.
async fn denied<T, F, Fut>(what: &str, mut call: F) -> Result<tonic::Status>
where
    T: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
{
    eventually(what, Duration::from_secs(20), || {
        let answer = call();
        async move {
            Ok(match answer.await {
                Err(s) if s.code() == Code::PermissionDenied => Ok(s),
                other => Err(format!("{other:?}")),
            })
        }
    })
    .await
}

async fn rbac_binder(client: &Client, ns: &str) -> Result<()> {
    let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::namespaced(client.clone(), ns);
    roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "binder"},
                "rules": [{"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}]
            }))?,
        )
        .await?;
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(client.clone(), ns);
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "binder"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "binder"},
                "subjects": [{"kind": "ServiceAccount", "name": "binder", "namespace": ns}]
            }))?,
        )
        .await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn bind_needs_the_callers_own_right_and_the_scorers_own_pods() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let ns = namespace(&client, "authbind").await?;
    let node = format!("authbind-{:04x}", rand_u32() & 0xffff);
    create_node(&client, &node, "8", "32Gi").await?;
    service_account(&client, &ns, "binder").await?;
    service_account(&client, &ns, "reader").await?;
    rbac_binder(&client, &ns).await?;
    // Client tokens for the API server's own audience (as `kubectl create token` makes).
    let binder = token(&client, &ns, "binder", &[], None).await?;
    let reader = token(&client, &ns, "reader", &[], None).await?;
    create_pod(
        &client,
        &ns,
        pod("delegated", Some("someone-else"), "1", "64Mi"),
    )
    .await?;
    let bind = |name: &str, tok: Option<&str>| {
        bearer(
            pb::BindRequest {
                pod: Some(pb::PodReference {
                    namespace: ns.clone(),
                    name: name.into(),
                }),
                ..pb::BindRequest::default()
            },
            tok,
        )
    };

    // As deployed: pods of another scheduler are not the scorer's to bind.
    let strict = Scorer::start_authenticated(&env, "auth-strict", "lease-auth-strict", &[]).await?;
    let mut sched = SchedulerClient::connect(strict.endpoint()).await?;
    let mut q = ScorerClient::connect(strict.endpoint()).await?;
    let e = q
        .list_nodes(pb::ListNodesRequest::default())
        .await
        .expect_err("anonymous query");
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    q.list_nodes(bearer(pb::ListNodesRequest::default(), Some(&reader)))
        .await
        .context("a reader's query")?;
    // Scoring a pod by reference reads it: the reader may not read pods here.
    let e = denied("Score by reference answers", || {
        let mut q = q.clone();
        let req = bearer(
            pb::ScoreRequest {
                pod: Some(pb::score_request::Pod::Reference(pb::PodReference {
                    namespace: ns.clone(),
                    name: "delegated".into(),
                })),
                ..pb::ScoreRequest::default()
            },
            Some(&reader),
        );
        async move { q.score(req).await }
    })
    .await?;
    assert!(
        e.message().contains("may not get pods"),
        "{:?}",
        e.message()
    );
    let e = sched
        .bind(bind("delegated", None))
        .await
        .expect_err("anonymous");
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    let e = denied("Bind answers for a caller without pods/binding", || {
        let mut sched = sched.clone();
        let req = bind("delegated", Some(&reader));
        async move { sched.bind(req).await }
    })
    .await?;
    assert!(
        e.message().contains("may not create pods/binding"),
        "{:?}",
        e.message()
    );
    let e = denied("Bind refuses another scheduler's pod", || {
        let mut sched = sched.clone();
        let req = bind("delegated", Some(&binder));
        async move { sched.bind(req).await }
    })
    .await?;
    assert!(
        e.message().contains("another scheduler's"),
        "{:?}",
        e.message()
    );
    drop(strict);

    // Configured to take other schedulers' pods: the caller with the right binds it.
    let open = Scorer::start_authenticated(
        &env,
        "auth-other",
        "lease-auth-other",
        &["--bind-other-schedulers"],
    )
    .await?;
    let mut sched = SchedulerClient::connect(open.endpoint()).await?;
    let e = sched
        .bind(bind("delegated", Some(&reader)))
        .await
        .expect_err("reader");
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let resp = eventually("Bind by the binder", Duration::from_secs(30), || {
        let mut sched = sched.clone();
        let req = bind("delegated", Some(&binder));
        async move {
            Ok(match sched.bind(req).await {
                Ok(r) => Ok(r.into_inner()),
                Err(s) => Err(format!("{:?}: {}", s.code(), s.message())),
            })
        }
    })
    .await?;
    let bound = wait_bound(&client, &ns, 1, Duration::from_secs(10)).await?;
    assert_eq!(bound.get("delegated"), Some(&resp.node_name), "{bound:?}");
    delete_pods_now(&client, &ns).await;
    delete_nodes(&client, &[node]).await;
    Ok(())
}
