//! Authentication and authorisation on the real gRPC port (in process, on 127.0.0.1), with
//! the API server's reviews and the pod cache replaced by an in-memory cluster: agents are
//! bound to their pod's node, a token is checked before any report is read, queries need a
//! caller, a bind needs the caller's own `create pods/binding`, and TLS certificates and
//! client CAs reload without a restart. The same rules against a real kube-apiserver:
//! `tests/tests/e2e_auth.rs`.
mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loadstar_auth::identity::{POD_NAME_EXTRA, POD_UID_EXTRA};
use loadstar_auth::review::{
    AccessReviewer, AccessVerdict, AgentPod, AgentPods, PodLookup, ResourceAttributes, ReviewError,
    TokenReviewer, TokenVerdict,
};
use loadstar_auth::tls::{ServerTls, TlsFiles};
use loadstar_auth::{AuthConfig, Authenticator, AuthenticatorConfig, Identity, QueryAccess};
use loadstar_grpc::gate::{Gate, GateParts};
use loadstar_grpc::server::ServerLimits;
use loadstar_proto::pb;
use loadstar_proto::pb::ingest_client::IngestClient;
use loadstar_proto::pb::scheduler_client::SchedulerClient;
use loadstar_proto::pb::scorer_client::ScorerClient;
use loadstar_store::metrics::Metrics;
use loadstar_testkit::agent::fixed_report as report;
use support::TestServer;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

const AGENT_SA: &str = "system:serviceaccount:loadstar:loadstar-agent";

/// An in-memory cluster: tokens, pods, and who may do what.
#[derive(Debug, Default)]
struct Cluster {
    tokens: Mutex<HashMap<String, Identity>>,
    pods: Mutex<HashMap<String, AgentPod>>,
    /// (user, verb resource/subresource) pairs allowed.
    allowed: Mutex<HashSet<(String, String)>>,
    token_reviews: AtomicUsize,
    access_reviews: Mutex<Vec<(String, ResourceAttributes)>>,
}

impl Cluster {
    /// An agent pod `name` (uid `uid`) running on `node`, with token `token`.
    fn agent(&self, token: &str, name: &str, uid: &str, node: &str) {
        let mut id = Identity {
            username: AGENT_SA.into(),
            ..Identity::default()
        };
        id.extra.insert(POD_NAME_EXTRA.into(), vec![name.into()]);
        id.extra.insert(POD_UID_EXTRA.into(), vec![uid.into()]);
        self.tokens.lock().expect("lock").insert(token.into(), id);
        self.pods.lock().expect("lock").insert(
            format!("loadstar/{name}"),
            AgentPod {
                uid: uid.into(),
                node_name: Some(node.into()),
                running: true,
            },
        );
    }

    fn user(&self, token: &str, username: &str) {
        self.tokens.lock().expect("lock").insert(
            token.into(),
            Identity {
                username: username.into(),
                ..Identity::default()
            },
        );
    }

    fn allow(&self, user: &str, what: &str) {
        self.allowed
            .lock()
            .expect("lock")
            .insert((user.into(), what.into()));
    }
}

#[async_trait::async_trait]
impl TokenReviewer for Cluster {
    async fn review_token(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<TokenVerdict, ReviewError> {
        self.token_reviews.fetch_add(1, Ordering::SeqCst);
        Ok(match self.tokens.lock().expect("lock").get(token) {
            Some(id) => TokenVerdict::Authenticated {
                identity: id.clone(),
                audiences: audiences.to_vec(),
            },
            None => TokenVerdict::Rejected {
                reason: "invalid bearer token".into(),
            },
        })
    }
}

#[async_trait::async_trait]
impl AccessReviewer for Cluster {
    async fn review_access(
        &self,
        identity: &Identity,
        a: &ResourceAttributes,
    ) -> Result<AccessVerdict, ReviewError> {
        self.access_reviews
            .lock()
            .expect("lock")
            .push((identity.username.clone(), a.clone()));
        let what = format!("{} {}/{}", a.verb, a.resource, a.subresource);
        Ok(
            if self
                .allowed
                .lock()
                .expect("lock")
                .contains(&(identity.username.clone(), what))
            {
                AccessVerdict::Allowed
            } else {
                AccessVerdict::Denied {
                    reason: "no RBAC policy matched".into(),
                }
            },
        )
    }
}

impl AgentPods for Cluster {
    fn agent_pod(&self, namespace: &str, name: &str) -> PodLookup {
        match self
            .pods
            .lock()
            .expect("lock")
            .get(&format!("{namespace}/{name}"))
        {
            Some(p) => PodLookup::Found(p.clone()),
            None => PodLookup::Missing,
        }
    }
}

fn gate(cluster: &Arc<Cluster>, metrics: &Arc<Metrics>, queries: QueryAccess) -> Gate {
    Gate::new(
        GateParts {
            config: AuthConfig {
                queries,
                ..AuthConfig::default()
            },
            authenticator: Arc::new(Authenticator::new(
                cluster.clone(),
                AuthenticatorConfig::default(),
                metrics.clone(),
            )),
            access: cluster.clone(),
            pods: cluster.clone(),
        },
        metrics.clone(),
    )
}

async fn server(cluster: &Arc<Cluster>, queries: QueryAccess) -> TestServer {
    let metrics = Metrics::new();
    let g = gate(cluster, &metrics, queries);
    TestServer::start_with(ServerLimits::default(), metrics, g, None).await
}

/// An open agent stream: the sender and the acks.
struct Agent {
    tx: mpsc::Sender<pb::NodeReport>,
    acks: tonic::Streaming<pb::ReportAck>,
}

async fn open(channel: Channel, token: Option<&str>) -> Result<Agent, tonic::Status> {
    let (tx, rx) = mpsc::channel(8);
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    if let Some(t) = token {
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {t}").parse().expect("header"),
        );
    }
    let acks = IngestClient::new(channel)
        .report(request)
        .await?
        .into_inner();
    Ok(Agent { tx, acks })
}

impl Agent {
    async fn send(&mut self, r: pb::NodeReport) -> Result<pb::ReportAck, tonic::Status> {
        self.tx.send(r).await.expect("send");
        match self.acks.message().await? {
            Some(a) => Ok(a),
            None => Err(tonic::Status::internal("stream ended")),
        }
    }

    /// The status the stream ends with after its last ack.
    async fn end(&mut self) -> tonic::Status {
        loop {
            match self.acks.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => return tonic::Status::ok(""),
                Err(s) => return s,
            }
        }
    }
}

/// `msg` with `authorization: <header>` (a bare token becomes `Bearer <token>`).
fn with<T>(header: Option<&str>, msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    if let Some(h) = header {
        let h = if h.contains(' ') {
            h.to_string()
        } else {
            format!("Bearer {h}")
        };
        r.metadata_mut()
            .insert("authorization", h.parse().expect("header"));
    }
    r
}

fn failures(metrics: &Metrics, service: &str, reason: &str) -> u64 {
    let text = metrics.encode();
    let needle = format!(
        "loadstar_scorer_auth_failures_total{{service=\"{service}\",reason=\"{reason}\"}} "
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&needle))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn agents_report_only_for_the_node_their_pod_runs_on() {
    let cluster = Arc::new(Cluster::default());
    cluster.agent("tok-a", "agent-a", "uid-a", "node-a");
    cluster.user("tok-user", "system:serviceaccount:default:default");
    let s = server(&cluster, QueryAccess::Authenticated).await;

    // No token, a bad token, another account: refused before any report is read.
    for (token, code, reason) in [
        (None, Code::Unauthenticated, "missing_credentials"),
        (Some("forged"), Code::Unauthenticated, "invalid_token"),
        (
            Some("tok-user"),
            Code::PermissionDenied,
            "wrong_service_account",
        ),
    ] {
        let status = match open(s.channel().await, token).await {
            Err(st) => st,
            Ok(mut a) => a
                .send(report("node-a", 1, 0.1, 0.1))
                .await
                .expect_err("refused"),
        };
        assert_eq!(status.code(), code, "{token:?}: {status:?}");
        assert!(status.message().starts_with(reason), "{status:?}");
        assert_eq!(failures(&s.metrics, "ingest", reason), 1, "{reason}");
    }
    assert!(s.store.node_status("node-a").is_none(), "nothing stored");

    // The agent on node-a may report for node-a...
    let mut a = open(s.channel().await, Some("tok-a")).await.expect("open");
    assert!(
        a.send(report("node-a", 1, 0.1, 0.1))
            .await
            .expect("ack")
            .accepted
    );
    // ...never for node-b: the report is refused, the stream ends with the reason.
    let mut b = open(s.channel().await, Some("tok-a")).await.expect("open");
    let ack = b.send(report("node-b", 1, 0.9, 0.9)).await.expect("ack");
    assert!(!ack.accepted);
    assert_eq!(
        ack.reject_reason,
        "wrong_node: agent pod loadstar/agent-a runs on node \"node-a\", so it may not report for node \"node-b\""
    );
    let end = b.end().await;
    assert_eq!(end.code(), Code::PermissionDenied, "{end:?}");
    assert!(s.store.node_status("node-b").is_none());
    assert_eq!(failures(&s.metrics, "ingest", "wrong_node"), 1);
    // The token was reviewed once for all of this (cached).
    assert_eq!(
        cluster.token_reviews.load(Ordering::SeqCst),
        3,
        "forged, tok-user and tok-a once each"
    );

    // The pod stops running: its stream ends at the next report.
    cluster
        .pods
        .lock()
        .expect("lock")
        .get_mut("loadstar/agent-a")
        .expect("pod")
        .running = false;
    let ack = a.send(report("node-a", 2, 0.1, 0.1)).await.expect("ack");
    assert!(!ack.accepted);
    assert!(ack.reject_reason.starts_with("pod_not_running"), "{ack:?}");
    assert_eq!(a.end().await.code(), Code::PermissionDenied);
    s.stop().await;
}

#[tokio::test]
async fn the_same_pod_may_reconnect_but_another_waits_for_the_owner() {
    let cluster = Arc::new(Cluster::default());
    cluster.agent("tok-1", "agent-1", "uid-1", "node-a");
    cluster.agent("tok-1b", "agent-1", "uid-1", "node-a");
    let s = server(&cluster, QueryAccess::Authenticated).await;
    let mut first = open(s.channel().await, Some("tok-1")).await.expect("open");
    assert!(
        first
            .send(report("node-a", 1, 0.1, 0.1))
            .await
            .expect("ack")
            .accepted
    );
    // The same pod with its rotated token, before the old stream ended: takes over.
    let mut rotated = open(s.channel().await, Some("tok-1b")).await.expect("open");
    let mut r = report("node-a", 2, 0.2, 0.2);
    r.agent_instance = "agent-1-restarted".into();
    assert!(rotated.send(r).await.expect("ack").accepted);

    // A second agent pod scheduled to the same node (a DaemonSet rollout overlap) waits.
    cluster.agent("tok-2", "agent-2", "uid-2", "node-a");
    let mut second = open(s.channel().await, Some("tok-2")).await.expect("open");
    let mut r = report("node-a", 1, 0.3, 0.3);
    r.agent_instance = "agent-2".into();
    let ack = second.send(r).await.expect("ack");
    assert!(!ack.accepted, "{ack:?}");
    assert_eq!(second.end().await.code(), Code::AlreadyExists);
    s.stop().await;
}

#[tokio::test]
async fn queries_need_a_caller_and_bind_needs_the_callers_own_right() {
    let cluster = Arc::new(Cluster::default());
    cluster.user("tok-alice", "alice");
    cluster.user("tok-bob", "bob");
    cluster.allow("bob", "create pods/binding");
    let s = server(&cluster, QueryAccess::Authenticated).await;
    let mut q = ScorerClient::new(s.channel().await);
    let e = q
        .list_nodes(with(None, pb::ListNodesRequest::default()))
        .await
        .expect_err("anonymous");
    assert_eq!(e.code(), Code::Unauthenticated);
    let e = q
        .get_node(with(Some("Basic eA=="), pb::GetNodeRequest::default()))
        .await
        .expect_err("not a token");
    assert_eq!(e.code(), Code::Unauthenticated);
    q.list_nodes(with(Some("tok-alice"), pb::ListNodesRequest::default()))
        .await
        .expect("alice may list");
    q.list_profiles(with(Some("tok-alice"), pb::ListProfilesRequest::default()))
        .await
        .expect("alice may list profiles");

    let bind = |token: Option<&str>| {
        with(
            token,
            pb::BindRequest {
                pod: Some(pb::PodReference {
                    namespace: "team".into(),
                    name: "web".into(),
                }),
                ..pb::BindRequest::default()
            },
        )
    };
    let mut sched = SchedulerClient::new(s.channel().await);
    let e = sched.bind(bind(None)).await.expect_err("anonymous");
    assert_eq!(e.code(), Code::Unauthenticated);
    let e = sched
        .bind(bind(Some("tok-alice")))
        .await
        .expect_err("alice");
    assert_eq!(e.code(), Code::PermissionDenied);
    assert_eq!(
        e.message(),
        "forbidden: \"alice\" may not create pods/binding in namespace \"team\" (pod \"web\"): no RBAC policy matched"
    );
    // Bob may: the call passes the gate and reaches the binder (none here).
    let e = sched
        .bind(bind(Some("tok-bob")))
        .await
        .expect_err("no cluster");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let reviews = cluster.access_reviews.lock().expect("lock").clone();
    assert_eq!(
        reviews,
        vec![
            (
                "alice".to_string(),
                ResourceAttributes::bind_pod("team", "web")
            ),
            (
                "bob".to_string(),
                ResourceAttributes::bind_pod("team", "web")
            ),
        ]
    );
    assert_eq!(failures(&s.metrics, "bind", "forbidden"), 1);
    assert_eq!(failures(&s.metrics, "query", "missing_credentials"), 1);
    s.stop().await;

    // Open queries: no credentials needed; Bind still checks.
    let open_server = server(&cluster, QueryAccess::Open).await;
    let mut q = ScorerClient::new(open_server.channel().await);
    q.list_nodes(pb::ListNodesRequest::default())
        .await
        .expect("open");
    let mut sched = SchedulerClient::new(open_server.channel().await);
    assert_eq!(
        sched.bind(bind(None)).await.expect_err("anonymous").code(),
        Code::Unauthenticated
    );
    open_server.stop().await;
}

#[tokio::test]
async fn denials_quote_a_megabyte_namespace_briefly() {
    let cluster = Arc::new(Cluster::default());
    cluster.user("tok-alice", "alice");
    let s = server(&cluster, QueryAccess::Authenticated).await;
    // ~1 MB, under the 1 MiB message limit once framed.
    let huge = "y".repeat(1_000_000);
    let pod = || {
        Some(pb::PodReference {
            namespace: huge.clone(),
            name: "web".into(),
        })
    };
    let check = |e: tonic::Status| {
        assert_eq!(e.code(), Code::PermissionDenied);
        assert!(
            e.message().len() < 1024,
            "{} bytes: {}",
            e.message().len(),
            &e.message()[..200]
        );
        assert!(
            e.message().starts_with(
                "forbidden: \"alice\" may not get pods in namespace \"yyyyyyyyyyyyyyyy"
            ) || e.message().starts_with(
                "forbidden: \"alice\" may not create pods/binding in namespace \"yyyyyyyyyyyyyyyy"
            ),
            "{}",
            e.message()
        );
    };
    let mut q = ScorerClient::new(s.channel().await);
    let e = q
        .explain_pod(with(
            Some("tok-alice"),
            pb::ExplainPodRequest { pod: pod() },
        ))
        .await
        .expect_err("alice may not read it");
    check(e);
    let mut sched = SchedulerClient::new(s.channel().await);
    let e = sched
        .bind(with(
            Some("tok-alice"),
            pb::BindRequest {
                pod: pod(),
                ..pb::BindRequest::default()
            },
        ))
        .await
        .expect_err("alice may not bind it");
    check(e);
    s.stop().await;
}

#[tokio::test]
async fn tls_reloads_rotated_certificates_and_client_certificates_authenticate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let live = dir.path().join("live");
    std::fs::create_dir(&live).expect("dir");
    let old = dir.path().join("old");
    let new = dir.path().join("new");
    std::fs::create_dir(&old).expect("dir");
    std::fs::create_dir(&new).expect("dir");
    let first = loadstar_testkit::pki::server_cert(&old, "DNS:localhost").expect("pki");
    let second = loadstar_testkit::pki::server_cert(&new, "DNS:localhost").expect("pki");
    let carol = loadstar_testkit::pki::client_cert(&old, "carol", &["ops"]).expect("pki");
    for (from, to) in [
        (&first.cert, "tls.crt"),
        (&first.key, "tls.key"),
        (&first.ca, "ca.crt"),
    ] {
        std::fs::copy(from, live.join(to)).expect("copy");
    }
    let cluster = Arc::new(Cluster::default());
    cluster.allow("carol", "create pods/binding");
    let metrics = Metrics::new();
    let tls = Arc::new(
        ServerTls::load(
            TlsFiles {
                cert: live.join("tls.crt"),
                key: live.join("tls.key"),
                client_ca: Some(live.join("ca.crt")),
                require_client_cert: false,
            },
            &[b"h2"],
            metrics.clone(),
        )
        .expect("tls"),
    );
    let g = gate(&cluster, &metrics, QueryAccess::Authenticated);
    let s = TestServer::start_with(ServerLimits::default(), metrics, g, Some(tls.clone())).await;
    let connect = |ca: std::path::PathBuf,
                   client: Option<(std::path::PathBuf, std::path::PathBuf)>| {
        let addr = s.addr.clone();
        async move {
            let mut cfg = ClientTlsConfig::new()
                .domain_name("localhost")
                .ca_certificate(Certificate::from_pem(std::fs::read(ca).expect("ca")));
            if let Some((cert, key)) = client {
                cfg = cfg.identity(tonic::transport::Identity::from_pem(
                    std::fs::read(cert).expect("cert"),
                    std::fs::read(key).expect("key"),
                ));
            }
            Channel::from_shared(addr)
                .expect("uri")
                .tls_config(cfg)
                .expect("tls config")
                .connect_timeout(Duration::from_secs(5))
                .connect()
                .await
        }
    };
    // Plaintext is refused; TLS with the first CA works; a client certificate is an
    // identity the bind check asks about.
    let plain = Channel::from_shared(s.addr.replace("https", "http"))
        .expect("uri")
        .connect()
        .await;
    if let Ok(ch) = plain {
        let r = ScorerClient::new(ch)
            .list_profiles(pb::ListProfilesRequest::default())
            .await;
        assert!(r.is_err(), "plaintext must not be served");
    }
    let ch = connect(
        first.ca.clone(),
        Some((carol.cert.clone(), carol.key.clone())),
    )
    .await
    .expect("TLS with the first CA");
    let mut q = ScorerClient::new(ch.clone());
    q.list_profiles(pb::ListProfilesRequest::default())
        .await
        .expect("carol's certificate authenticates queries");
    let e = SchedulerClient::new(ch)
        .bind(pb::BindRequest {
            pod: Some(pb::PodReference {
                namespace: "team".into(),
                name: "web".into(),
            }),
            ..pb::BindRequest::default()
        })
        .await
        .expect_err("no cluster behind the gate");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert_eq!(
        cluster.access_reviews.lock().expect("lock")[0].0,
        "carol",
        "the certificate's CN is the user"
    );
    // A client certificate from another CA is refused in the handshake (or on first use:
    // TLS 1.3 clients learn of it after their handshake completes).
    let mallory = loadstar_testkit::pki::client_cert(&new, "mallory", &[]).expect("pki");
    let refused = match connect(first.ca.clone(), Some((mallory.cert, mallory.key))).await {
        Err(_) => true,
        Ok(ch) => ScorerClient::new(ch)
            .list_profiles(pb::ListProfilesRequest::default())
            .await
            .is_err(),
    };
    assert!(
        refused,
        "a certificate the client CA did not sign must not be accepted"
    );
    assert!(
        !cluster
            .access_reviews
            .lock()
            .expect("lock")
            .iter()
            .any(|(u, _)| u == "mallory")
    );
    // A client trusting only the second CA cannot connect yet.
    assert!(connect(second.ca.clone(), None).await.is_err());

    // Rotate: the Secret's files change; the next reload serves the new pair.
    std::fs::copy(&second.cert, live.join("tls.crt")).expect("copy");
    std::fs::copy(&second.key, live.join("tls.key")).expect("copy");
    assert_eq!(tls.reload(), Ok(true));
    let ch = connect(second.ca.clone(), None)
        .await
        .expect("TLS with the rotated certificate");
    let e = ScorerClient::new(ch)
        .list_profiles(pb::ListProfilesRequest::default())
        .await
        .expect_err("no certificate, no token");
    assert_eq!(e.code(), Code::Unauthenticated);
    assert!(
        connect(first.ca.clone(), None).await.is_err(),
        "old CA no longer matches"
    );
    s.stop().await;
}

#[tokio::test]
async fn streams_without_credentials_are_refused_before_any_message_is_decoded() {
    let cluster = Arc::new(Cluster::default());
    let s = server(&cluster, QueryAccess::Authenticated).await;
    // Undecodable bytes: an authenticated stream would end with a decode error.
    let garbage: Vec<Vec<u8>> = vec![vec![0x0a, 0x64, b'a'], vec![0xff; 64]];
    let request = with(Some("forged"), tokio_stream::iter(garbage));
    let status = match support::raw::ingest(s.channel().await, request).await {
        Err(st) => st,
        Ok(resp) => resp.into_inner().message().await.expect_err("refused"),
    };
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert!(status.message().starts_with("invalid_token"), "{status:?}");
    let text = s.metrics.encode();
    assert!(
        text.contains(
            "loadstar_scorer_auth_failures_total{service=\"ingest\",reason=\"invalid_token\"} 1"
        ),
        "{text}"
    );
    assert!(
        !text.contains("loadstar_scorer_reports_rejected_total{reason=\"stream\"}"),
        "nothing was decoded: {text}"
    );
    s.stop().await;
}
