//! End-to-end tests of Loadstar as a kube-scheduler extender (issue #18): the real
//! kube-scheduler v1.20.2 on the e2e API server, configured to call the scorer's extender
//! (`filter` and `prioritize`, `nodeCacheCapable: true`), schedules pods with its own default
//! plugins, while simulated agents make one node hot. The profile is named `extender-kube`
//! rather than `default-scheduler` only so that it does not pick up other tests' pending
//! `default-scheduler` pods; its plugins are kube-scheduler's defaults. `#[ignore]`d in plain
//! `cargo test`; `tests/e2e/run.sh` runs them.
mod e2e_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e_support::kube_scheduler::KubeScheduler;
use e2e_support::*;
use serde_json::json;

const PROFILE: &str = "extender-kube";
const MI: &str = "128Mi";

/// A kube-scheduler configuration with one default-plugins profile and Loadstar's extender.
fn config(kubeconfig: &Path, extender: &str, ignorable: bool) -> String {
    config_with(
        kubeconfig,
        &format!("http://{extender}"),
        ignorable,
        true,
        "",
    )
}

/// [`config`] with the extender at `base` (`http://…` or `https://…`), names only or whole
/// nodes (`cache_capable`), and extra extender keys (`tls`, indented as list-item fields).
fn config_with(
    kubeconfig: &Path,
    base: &str,
    ignorable: bool,
    cache_capable: bool,
    tls: &str,
) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1beta1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: {kubeconfig}
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 1
profiles:
- schedulerName: {PROFILE}
extenders:
- urlPrefix: {base}/extender/v1/loadstar
  filterVerb: filter
  prioritizeVerb: prioritize
  weight: 5
  nodeCacheCapable: {cache_capable}
  ignorable: {ignorable}
  httpTimeout: 5s
{tls}",
        kubeconfig = kubeconfig.display(),
    )
}

fn kube_scheduler_bin() -> Result<std::path::PathBuf> {
    Ok(std::env::var("LOADSTAR_E2E_KUBE_SCHEDULER_BIN")
        .context("LOADSTAR_E2E_KUBE_SCHEDULER_BIN (set by tests/e2e/run.sh) is needed")?
        .into())
}

fn free_extender_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn kube_scheduler_avoids_the_hot_node_and_keeps_its_own_constraints() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let ns = namespace(&client, "ext").await?;
    let nodes: Vec<String> = ["ext-hot", "ext-a", "ext-b"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for n in &nodes {
        create_node(&client, n, "8", "32Gi").await?;
    }
    // ext-b is tainted: only tolerating pods may go there.
    taint(&client, "ext-b").await?;
    let port = free_extender_port()?;
    let extender = format!("127.0.0.1:{port}");
    let scorer = Scorer::start(
        &env,
        "ext-1",
        "lease-ext",
        &[&format!("--extender-listen={extender}")],
    )
    .await?;
    let _agents = Agents::start(
        &[scorer.endpoint()],
        &[
            (nodes[0].clone(), load(0.95, 0.5)),
            (nodes[1].clone(), load(0.2, 0.3)),
            (nodes[2].clone(), load(0.2, 0.3)),
        ],
        Duration::from_secs(1),
    )
    .await?;
    reports_visible(&scorer, &nodes).await?;
    let kube = KubeScheduler::start_with(
        &kube_scheduler_bin()?,
        &config(&env.admin_kubeconfig, &extender, false),
        &env.logs,
        "extender-kube-scheduler",
    )?;
    let tolerate = json!([{"key": "dedicated", "operator": "Exists"}]);
    let mut pods = Vec::new();
    for i in 0..3 {
        pods.push(pod(&format!("plain-{i}"), Some(PROFILE), "500m", MI));
    }
    let mut tol = pod("tolerating", Some(PROFILE), "500m", MI);
    tol["spec"]["tolerations"] = tolerate.clone();
    pods.push(tol);
    for i in 0..2 {
        let mut p = pod(&format!("anti-{i}"), Some(PROFILE), "500m", MI);
        p["metadata"]["labels"] = json!({"app": "anti"});
        p["spec"]["tolerations"] = tolerate.clone();
        p["spec"]["affinity"] = json!({"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app": "anti"}},
                "topologyKey": "kubernetes.io/hostname"}]}});
        pods.push(p);
    }
    create_pods(&client, &ns, pods).await?;
    let bound: BTreeMap<String, String> = wait_bound(&client, &ns, 6, Duration::from_secs(60))
        .await
        .with_context(|| format!("{}\n{}", scorer.log_tail(), kube.log_tail()))?;
    // The hot node is the emptiest by requests (kube-scheduler alone would favour it), yet
    // Loadstar's UsageThreshold filter keeps everything off it.
    ensure!(
        bound.values().all(|n| n != "ext-hot"),
        "a pod landed on the hot node: {bound:?}"
    );
    for i in 0..3 {
        ensure!(
            bound[&format!("plain-{i}")] == "ext-a",
            "untolerating pods only fit ext-a: {bound:?}"
        );
    }
    ensure!(
        bound["anti-0"] != bound["anti-1"],
        "anti-affinity kept: {bound:?}"
    );
    delete_nodes(&client, &nodes).await;
    Ok(())
}

/// Taints `node` with `dedicated=x:NoSchedule`.
async fn taint(client: &kube::Client, node: &str) -> Result<()> {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, Patch, PatchParams};
    let patch =
        json!({"spec": {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}});
    Api::<Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .context("tainting")?;
    Ok(())
}

/// Touches a node's labels: a cluster event that makes kube-scheduler retry waiting pods.
async fn touch(client: &kube::Client, node: &str, value: &str) -> Result<()> {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, Patch, PatchParams};
    let patch = json!({"metadata": {"labels": {"loadstar-e2e/touch": value}}});
    Api::<Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .context("touching the node")?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn an_ignorable_extender_down_never_stops_scheduling_a_required_one_holds_pods_until_back()
-> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let ns = namespace(&client, "extdown").await?;
    let node = "extdown-a".to_string();
    create_node(&client, &node, "8", "32Gi").await?;
    let port = free_extender_port()?;
    let extender = format!("127.0.0.1:{port}");
    let flag = format!("--extender-listen={extender}");
    let mut scorer = Scorer::start(&env, "extdown-1", "lease-extdown", &[&flag]).await?;
    scorer.kill();
    // Ignorable: kube-scheduler goes on without it.
    {
        let _kube = KubeScheduler::start_with(
            &kube_scheduler_bin()?,
            &config(&env.admin_kubeconfig, &extender, true),
            &env.logs,
            "extender-kube-scheduler-ignorable",
        )?;
        create_pod(&client, &ns, pod("while-down", Some(PROFILE), "100m", MI)).await?;
        wait_bound(&client, &ns, 1, Duration::from_secs(30)).await?;
    }
    // Required: the pod waits, failing on the extender...
    let kube = KubeScheduler::start_with(
        &kube_scheduler_bin()?,
        &config(&env.admin_kubeconfig, &extender, false),
        &env.logs,
        "extender-kube-scheduler-required",
    )?;
    create_pod(&client, &ns, pod("waits", Some(PROFILE), "100m", MI)).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let waiting = pods(&client, &ns).await?;
    let p = waiting
        .iter()
        .find(|p| name_of(p) == "waits")
        .context("the pod")?;
    ensure!(
        node_of(p).is_none(),
        "bound although the required extender is down: {p:?}"
    );
    let failed: Vec<String> = events(&client, &ns)
        .await?
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FailedScheduling"))
        .filter_map(|e| e.message)
        .collect();
    ensure!(
        failed.iter().any(|m| m.contains("extender")),
        "FailedScheduling names the extender: {failed:?}"
    );
    // ...and binds once the scorer is back (on its next try: a cluster event or the
    // periodic flush of unschedulable pods).
    let _scorer = Scorer::start(&env, "extdown-2", "lease-extdown", &[&flag]).await?;
    touch(&client, &node, "1").await?;
    wait_bound(&client, &ns, 2, Duration::from_secs(90))
        .await
        .with_context(|| kube.log_tail())?;
    delete_nodes(&client, &[node]).await;
    Ok(())
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn kube_scheduler_calls_the_extender_over_https_with_whole_nodes() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    // A CA and a serving certificate for 127.0.0.1, as a TLS Secret would hold them.
    let pki = env.logs.join("extender-pki");
    std::fs::create_dir_all(&pki)?;
    let certs = loadstar_testkit::pki::server_cert(&pki, "IP:127.0.0.1")?;
    let client = env.admin().await?;
    let ns = namespace(&client, "exttls").await?;
    let nodes: Vec<String> = ["exttls-hot", "exttls-cool"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for n in &nodes {
        create_node(&client, n, "8", "32Gi").await?;
    }
    let port = free_extender_port()?;
    let cert = certs.cert.display().to_string();
    let key = certs.key.display().to_string();
    let scorer = Scorer::start(
        &env,
        "exttls-1",
        "lease-exttls",
        &[
            &format!("--extender-listen=127.0.0.1:{port}"),
            &format!("--extender-tls-cert={cert}"),
            &format!("--extender-tls-key={key}"),
        ],
    )
    .await?;
    let _agents = Agents::start(
        &[scorer.endpoint()],
        &[
            (nodes[0].clone(), load(0.95, 0.5)),
            (nodes[1].clone(), load(0.2, 0.3)),
        ],
        Duration::from_secs(1),
    )
    .await?;
    reports_visible(&scorer, &nodes).await?;
    // Required (not ignorable): the pods bind only if the HTTPS calls succeed. Whole Node
    // objects this time (`nodeCacheCapable: false`): the passing ones go back as sent.
    let tls = format!(
        "  enableHTTPS: true\n  tlsConfig:\n    caFile: {}\n",
        certs.ca.display()
    );
    let kube = KubeScheduler::start_with(
        &kube_scheduler_bin()?,
        &config_with(
            &env.admin_kubeconfig,
            &format!("https://127.0.0.1:{port}"),
            false,
            false,
            &tls,
        ),
        &env.logs,
        "extender-kube-scheduler-https",
    )?;
    let pods: Vec<serde_json::Value> = (0..3)
        .map(|i| pod(&format!("tls-{i}"), Some(PROFILE), "500m", MI))
        .collect();
    create_pods(&client, &ns, pods).await?;
    let bound = wait_bound(&client, &ns, 3, Duration::from_secs(60))
        .await
        .with_context(|| format!("{}\n{}", scorer.log_tail(), kube.log_tail()))?;
    ensure!(
        bound.values().all(|n| n == "exttls-cool"),
        "the hot node is filtered over HTTPS too: {bound:?}"
    );
    delete_nodes(&client, &nodes).await;
    Ok(())
}
