//! What the Helm chart installs is enough to run, against a real kube-apiserver 1.20.2:
//! `tests/e2e/run.sh` has `helm install`ed the chart; here the scorer *image* runs under
//! podman with exactly what the chart's Deployment gives its pod — its arguments, its
//! profiles ConfigMap, its security context and a token of its ServiceAccount mounted where
//! the kubelet mounts it — and schedules and binds pods; and a scorer whose ClusterRole lacks
//! one permission says which, in its log and on `/readyz`.
mod e2e_support;

/// The script that runs this suite and sets its environment.
const RUNNER: &str = "tests/e2e/run.sh";

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use e2e_support::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Where the chart was installed by tests/e2e/run.sh (release `loadstar`).
const NS: &str = "loadstar";
const DEPLOYMENT: &str = "loadstar-scorer";
const CLUSTER_ROLE: &str = "loadstar-scorer";
/// The API server's audience for ServiceAccount tokens (tests/e2e/cluster.sh).
const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
/// Where the kubelet mounts a pod's ServiceAccount token, CA and namespace.
const SA_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// `GET path` over HTTP/1.0: status and body. (One GET does not justify an HTTP client
/// dependency in the test crate.)
async fn http_get(addr: std::net::SocketAddr, path: &str) -> Result<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).await?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no status line in {head:?}"))?;
    Ok((code, body.to_string()))
}

fn free_addr() -> Result<std::net::SocketAddr> {
    Ok(format!("127.0.0.1:{}", e2e_support::free_port()?).parse()?)
}

/// podman flags for what the kubelet would apply from the pod's and container's security
/// contexts (the chart sets user, read-only root, dropped capabilities, no escalation).
fn security_flags(pod: &PodSpec, c: &Container) -> Result<Vec<String>> {
    let psc = pod.security_context.clone().unwrap_or_default();
    let csc = c.security_context.clone().unwrap_or_default();
    let mut flags = Vec::new();
    if let Some(uid) = csc.run_as_user.or(psc.run_as_user) {
        let gid = csc.run_as_group.or(psc.run_as_group).unwrap_or(uid);
        flags.push(format!("--user={uid}:{gid}"));
    }
    if csc.read_only_root_filesystem == Some(true) {
        flags.push("--read-only".into());
    }
    if csc.allow_privilege_escalation == Some(false) {
        flags.push("--security-opt=no-new-privileges".into());
    }
    if csc.privileged == Some(true) {
        bail!("the chart's scorer asks for a privileged container");
    }
    if let Some(caps) = &csc.capabilities {
        for cap in caps.drop.iter().flatten() {
            flags.push(format!("--cap-drop={cap}"));
        }
        for cap in caps.add.iter().flatten() {
            flags.push(format!("--cap-add={cap}"));
        }
    }
    Ok(flags)
}

/// The scorer image under podman, as the chart's pod would run it.
struct ScorerContainer {
    name: String,
    child: Option<Child>,
    log: PathBuf,
    http: std::net::SocketAddr,
    _files: tempfile::TempDir,
}

impl ScorerContainer {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for ScorerContainer {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args([
                "--runtime",
                "/usr/sbin/runc",
                "rm",
                "-f",
                "-t",
                "5",
                &self.name,
            ])
            .output();
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Writes `files` into a fresh directory readable by the container's non-root user.
fn files_dir(parent: &Path, files: &BTreeMap<String, String>) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("mount-")
        .tempdir_in(parent)?;
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text)?;
        std::fs::set_permissions(
            dir.path().join(name),
            std::fs::Permissions::from_mode(0o644),
        )?;
    }
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    Ok(dir.keep())
}

/// Starts the scorer image with the installed Deployment's arguments, environment, ConfigMap
/// volumes and security context, and a token of its ServiceAccount in the kubelet's place.
/// Host networking reaches the API server on loopback, so the listen addresses are moved to
/// free ports.
async fn run_chart_scorer(admin: &Client, env: &E2eEnv, image: &str) -> Result<ScorerContainer> {
    let deploy = Api::<Deployment>::namespaced(admin.clone(), NS)
        .get(DEPLOYMENT)
        .await
        .context("the chart's Deployment (did tests/e2e/run.sh helm install it?)")?;
    let pod = deploy
        .spec
        .and_then(|s| s.template.spec)
        .context("Deployment without a pod spec")?;
    let c = pod.containers.first().context("no container")?.clone();
    let account = pod
        .service_account_name
        .clone()
        .context("the chart's pod names no ServiceAccount")?;
    let files = tempfile::Builder::new()
        .prefix("e2e-install-")
        .tempdir_in(&env.logs)?;
    std::fs::set_permissions(
        files.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;

    // The ServiceAccount's credentials, where the kubelet puts them.
    let token = loadstar_tests::token_request(admin, NS, &account, &[API_AUDIENCE], None, 3600)
        .await
        .with_context(|| format!("a token for {NS}/{account}"))?;
    let ca = std::fs::read_to_string(required("LOADSTAR_E2E_KUBE_CA", RUNNER)?)?;
    let sa_dir = files_dir(
        files.path(),
        &BTreeMap::from([
            ("token".to_string(), token),
            ("ca.crt".to_string(), ca),
            ("namespace".to_string(), NS.to_string()),
        ]),
    )?;
    let mut mounts = vec![format!("--volume={}:{SA_MOUNT}:ro", sa_dir.display())];
    // ConfigMap volumes (the profiles), with the ConfigMap's data as files.
    let volumes: BTreeMap<String, _> = pod
        .volumes
        .iter()
        .flatten()
        .map(|v| (v.name.clone(), v.clone()))
        .collect();
    for m in c.volume_mounts.iter().flatten() {
        let v = volumes
            .get(&m.name)
            .with_context(|| format!("mount {} without a volume", m.name))?;
        let Some(cm) = &v.config_map else {
            // Optional volumes the chart leaves off by default (TLS Secrets) are not mounted.
            bail!(
                "volume {} is not a ConfigMap; this test mounts only ConfigMaps",
                m.name
            );
        };
        let data = Api::<ConfigMap>::namespaced(admin.clone(), NS)
            .get(&cm.name)
            .await
            .with_context(|| format!("ConfigMap {}", cm.name))?
            .data
            .unwrap_or_default();
        let dir = files_dir(files.path(), &data)?;
        mounts.push(format!("--volume={}:{}:ro", dir.display(), m.mount_path));
    }

    let api_url = url_host_port(&required("LOADSTAR_E2E_API_URL", RUNNER)?)?;
    let grpc = free_addr()?;
    let http = free_addr()?;
    let extender = free_addr()?;
    let name = format!("loadstar-e2e-scorer-{:06x}", rand_u32() & 0xff_ffff);
    let mut args: Vec<String> = c
        .command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .filter(|a| {
            !["--listen", "--metrics-listen", "--extender-listen"]
                .iter()
                .any(|flag| a.starts_with(flag))
        })
        .cloned()
        .collect();
    args.push(format!("--listen={grpc}"));
    args.push(format!("--metrics-listen={http}"));
    args.push(format!("--extender-listen={extender}"));

    let mut cmd = Command::new("podman");
    cmd.args([
        "--runtime",
        "/usr/sbin/runc",
        "run",
        "--rm",
        "--name",
        &name,
    ])
    .args([
        "--network=host",
        "--ulimit=nofile=20000:20000",
        "--ulimit=nproc=4096:4096",
    ])
    .args(security_flags(&pod, &c)?)
    .args(&mounts)
    .arg(format!("--env=KUBERNETES_SERVICE_HOST={}", api_url.0))
    .arg(format!("--env=KUBERNETES_SERVICE_PORT={}", api_url.1))
    .arg(format!("--env=POD_NAME={name}"))
    .arg(format!("--env=POD_NAMESPACE={NS}"));
    for e in c.env.iter().flatten() {
        if let Some(v) = &e.value {
            cmd.arg(format!("--env={}={v}", e.name));
        }
    }
    let log = env.logs.join(format!("{name}.log"));
    let out = std::fs::File::create(&log)?;
    cmd.arg(image)
        .args(&args)
        .stdout(out.try_clone()?)
        .stderr(out)
        .stdin(Stdio::null());
    eprintln!("podman run {image} {}", args.join(" "));
    let child = cmd.spawn().context("starting podman")?;
    Ok(ScorerContainer {
        name,
        child: Some(child),
        log,
        http,
        _files: files,
    })
}

/// `https://127.0.0.1:6443` → ("127.0.0.1", "6443").
fn url_host_port(url: &str) -> Result<(String, String)> {
    let rest = url
        .strip_prefix("https://")
        .context("API URL is not https")?;
    let (host, port) = rest
        .trim_end_matches('/')
        .rsplit_once(':')
        .context("API URL without a port")?;
    Ok((host.to_string(), port.to_string()))
}

#[tokio::test]
#[ignore = "needs the e2e cluster with the chart installed and the scorer image: tests/e2e/run.sh"]
async fn the_scorer_image_schedules_pods_with_exactly_the_charts_credentials() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let image = required("LOADSTAR_E2E_SCORER_IMAGE", RUNNER)?;
    let admin = env.admin().await?;
    let scorer = run_chart_scorer(&admin, &env, &image).await?;
    let ready = eventually(
        "the containerised scorer's /readyz",
        Duration::from_secs(60),
        || async {
            match http_get(scorer.http, "/readyz").await {
                Ok((200, body)) => Ok(Ok(body)),
                Ok((code, body)) => Ok(Err(format!("{code} {body}"))),
                Err(e) => Ok(Err(e.to_string())),
            }
        },
    )
    .await
    .with_context(|| scorer.log_tail())?;
    eprintln!("containerised scorer ready: {}", ready.trim());

    let tag = format!("{:06x}", rand_u32() & 0xff_ffff);
    let nodes: Vec<String> = (0..2).map(|i| format!("install-{tag}-{i}")).collect();
    for n in &nodes {
        create_node(&admin, n, "4", "8Gi").await?;
    }
    let ns = namespace(&admin, "install").await?;
    let pods: Vec<_> = (0..4)
        .map(|i| pod(&format!("p{i}"), Some("loadstar"), "500m", "256Mi"))
        .collect();
    create_pods(&admin, &ns, pods).await?;
    let bound = wait_bound(&admin, &ns, 4, Duration::from_secs(60))
        .await
        .with_context(|| scorer.log_tail())?;
    for (pod, node) in &bound {
        assert!(
            nodes.contains(node),
            "{pod} bound to {node}, not a test node"
        );
    }
    // The binding Events name the scorer as their reporter: the chart's account wrote them.
    let scheduled = eventually("Scheduled Events", Duration::from_secs(30), || async {
        let evs = events(&admin, &ns).await?;
        let n = evs
            .iter()
            .filter(|e| e.reason.as_deref() == Some("Scheduled"))
            .count();
        Ok(if n >= 4 {
            Ok(n)
        } else {
            Err(format!("{n} Scheduled Events"))
        })
    })
    .await?;
    eprintln!("bound {bound:?}; {scheduled} Scheduled Events");
    let log = std::fs::read_to_string(&scorer.log)?;
    assert!(
        !log.contains("forbidden"),
        "the chart's RBAC refused something:\n{}",
        scorer.log_tail()
    );
    delete_pods_now(&admin, &ns).await;
    delete_nodes(&admin, &nodes).await;
    Ok(())
}

/// A ServiceAccount bound to the chart's ClusterRole minus list/watch on pods.
async fn account_without_pod_list(admin: &Client, name: &str) -> Result<String> {
    let role = Api::<ClusterRole>::all(admin.clone())
        .get(CLUSTER_ROLE)
        .await
        .context("the chart's ClusterRole")?;
    let mut rules = role.rules.unwrap_or_default();
    let mut removed = false;
    for r in &mut rules {
        let core = r.api_groups.iter().flatten().any(|g| g.is_empty());
        if core && r.resources.iter().flatten().any(|x| x == "pods") {
            let before = r.verbs.len();
            r.verbs.retain(|v| v != "list" && v != "watch");
            removed |= r.verbs.len() != before;
        }
    }
    assert!(
        removed,
        "the chart's ClusterRole never allowed listing pods"
    );
    rules.retain(|r| !r.verbs.is_empty());
    let post = PostParams::default();
    let cr: ClusterRole =
        serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules}))?;
    Api::<ClusterRole>::all(admin.clone())
        .create(&post, &cr)
        .await?;
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<ServiceAccount>::namespaced(admin.clone(), NS)
        .create(&post, &sa)
        .await?;
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}]
    }))?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&post, &crb)
        .await?;
    loadstar_tests::token_request(admin, NS, name, &[API_AUDIENCE], None, 3600).await
}

async fn delete_account(admin: &Client, name: &str) {
    let dp = DeleteParams::default();
    let _ = Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(name, &dp)
        .await;
    let _ = Api::<ClusterRole>::all(admin.clone())
        .delete(name, &dp)
        .await;
    let _ = Api::<ServiceAccount>::namespaced(admin.clone(), NS)
        .delete(name, &dp)
        .await;
}

#[tokio::test]
#[ignore = "needs the e2e cluster with the chart installed: tests/e2e/run.sh"]
async fn a_missing_permission_is_named_in_the_log_and_on_readyz() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let admin = env.admin().await?;
    let name = format!("loadstar-e2e-no-pod-list-{:06x}", rand_u32() & 0xff_ffff);
    let token = account_without_pod_list(&admin, &name).await?;
    // The suite's scorer kubeconfig with this account's token instead.
    let mut kc: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(&env.scorer_kubeconfig)?)?;
    kc["users"][0]["user"]["token"] = serde_norway::Value::String(token);
    let path = env.logs.join(format!("{name}.kubeconfig"));
    std::fs::write(&path, serde_norway::to_string(&kc)?)?;

    let result = async {
        let scorer = Scorer::start_as(
            &env,
            &path,
            &name,
            &name,
            &["--insecure-allow-unauthenticated", "--leader-elect=false"],
        )
        .await?;
        let body = eventually(
            "/readyz naming the refused watch",
            Duration::from_secs(30),
            || async {
                let (code, body) = http_get(scorer.http, "/readyz").await?;
                Ok(if code == 503 && body.contains("pods watch: forbidden") {
                    Ok(body)
                } else {
                    Err(format!("{code} {body}"))
                })
            },
        )
        .await
        .with_context(|| scorer.log_tail())?;
        eprintln!("/readyz: {body}");
        assert!(body.starts_with("not ready\n"), "{body}");
        assert!(
            body.contains(r#"cannot list resource "pods""#) && body.contains(&name),
            "/readyz does not say which permission and which account: {body}"
        );
        assert!(
            !body.contains("nodes watch"),
            "the nodes watch is allowed, yet reported: {body}"
        );
        let log = std::fs::read_to_string(&scorer.log)?;
        let line = log
            .lines()
            .find(|l| l.contains("watch failed") && l.contains("pods watch"))
            .with_context(|| format!("no watch failure logged:\n{}", scorer.log_tail()))?;
        assert!(
            line.contains(r#"cannot list resource \"pods\""#)
                || line.contains(r#"cannot list resource "pods""#),
            "the log line does not name the permission: {line}"
        );
        assert!(line.contains("ClusterRole"), "no RBAC hint: {line}");
        eprintln!("log: {line}");
        Ok::<_, anyhow::Error>(())
    }
    .await;
    delete_account(&admin, &name).await;
    result
}
