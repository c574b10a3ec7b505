//! The Helm chart (deploy/helm/loadstar) is how Loadstar is installed, and the kustomize base
//! is generated from it: these tests keep the two in step (`deploy/generate.sh --check`), lint
//! the chart with default and non-default values, check that every value does what it says in
//! the rendered objects, that bad values fail at install time naming the field, that the
//! rendered profiles config is one the scorer's own parser accepts (the default one equal to
//! the embedded default), and that kustomize v2 (kubectl 1.20) and v5 (kubectl 1.29) both build
//! the base into the chart's objects.
//!
//! All but the schema-against-registry check need helm (and the two kubectls), so they are
//! `#[ignore]`d; CI installs the tools with tests/e2e/install-deps.sh and runs
//! `cargo test -p loadstar-tests --test chart -- --ignored`. A missing tool fails the test,
//! naming where it was looked for.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine as _;
use clap::Parser;
use loadstar_agent::config::AgentConfig;
use loadstar_policy::config::ScorerConfig;
use serde::Deserialize;
use serde_norway::Value;

const CHART: &str = "deploy/helm/loadstar";
const NONDEFAULT: &str = "deploy/helm/loadstar/ci/nondefault-values.yaml";
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn cache() -> PathBuf {
    std::env::var_os("LOADSTAR_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/loadstar")
        })
}

/// A tool from `env` if set, else the first of `candidates` that exists, else `name` on PATH;
/// panics naming every place looked at.
fn tool(env: &str, candidates: &[PathBuf], name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    if let Some(p) = candidates.iter().find(|p| p.is_file()) {
        return p.clone();
    }
    if !name.is_empty()
        && let Some(dir) = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .find(|d| d.join(name).is_file())
    {
        return dir.join(name);
    }
    panic!(
        "{name}: not found (${env} unset, not at {candidates:?}{}); install it with \
         tests/e2e/install-deps.sh",
        if name.is_empty() { "" } else { ", not on PATH" }
    );
}

fn helm() -> PathBuf {
    tool("LOADSTAR_HELM", &[cache().join("bin/helm")], "helm")
}

/// kubectl 1.20.2 (kustomize v2.0.3), built by tests/e2e/install-deps.sh.
fn kubectl_1_20() -> PathBuf {
    tool(
        "LOADSTAR_KUBECTL_1_20",
        &[cache().join("k8s-1.20.2/bin/kubectl")],
        "",
    )
}

/// kubectl 1.29 (kustomize v5), from tests/e2e/install-deps.sh.
fn kubectl_1_29() -> PathBuf {
    tool(
        "LOADSTAR_KUBECTL_1_29",
        &[cache().join("bin/kubectl-1.29")],
        "kubectl-1.29",
    )
}

fn run(program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(root())
        .env("LOADSTAR_HELM", helm())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()))
}

fn ok(program: &Path, args: &[&str]) -> String {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{} {} exited {}:\n{}{}",
        program.display(),
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn docs(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("valid YAML"))
        .filter(|d| !d.is_null())
        .collect()
}

/// `helm template RELEASE` in namespace loadstar with `args` (e.g. `-f FILE`).
fn render(release: &str, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["template", release, CHART, "--namespace", "loadstar"];
    all.extend_from_slice(args);
    docs(&ok(&helm(), &all))
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name} in {:?}", identities(docs)))
}

fn identities(docs: &[Value]) -> BTreeSet<(String, String, String)> {
    docs.iter()
        .map(|d| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                s(&d["kind"]),
                s(&d["metadata"]["namespace"]),
                s(&d["metadata"]["name"]),
            )
        })
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("not a list: {v:?}"))
        .iter()
        .map(|a| a.as_str().expect("a string").to_string())
        .collect()
}

fn named<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list.as_sequence()?
        .iter()
        .find(|x| x["name"].as_str() == Some(name))
}

fn agent_config(daemonset: &Value) -> AgentConfig {
    let mut args = vec!["loadstar-agent".to_string()];
    args.extend(strings(
        &daemonset["spec"]["template"]["spec"]["containers"][0]["args"],
    ));
    AgentConfig::try_parse_from(&args).unwrap_or_else(|e| panic!("agent args {args:?}: {e}"))
}

/// The profiles config a rendered chart gives the scorer, parsed by the scorer's own parser
/// (after checking that the Deployment's `--config` points at the ConfigMap's key).
fn scorer_config(docs: &[Value], fullname: &str) -> ScorerConfig {
    let deploy = find(docs, "Deployment", &format!("{fullname}-scorer"));
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let volume = named(&pod["volumes"], "config").expect("config volume");
    let cm_name = volume["configMap"]["name"].as_str().expect("a ConfigMap");
    let mount = named(&c["volumeMounts"], "config").expect("config mount");
    let path = format!(
        "--config={}/config.yaml",
        mount["mountPath"].as_str().expect("mountPath")
    );
    assert!(strings(&c["args"]).contains(&path), "{path} in the args");
    let cm = find(docs, "ConfigMap", cm_name);
    let text = cm["data"]["config.yaml"].as_str().expect("config.yaml");
    let config = ScorerConfig::from_yaml(text)
        .unwrap_or_else(|e| panic!("the rendered config does not parse: {e}\n{text}"));
    config
        .build_profiles()
        .unwrap_or_else(|e| panic!("the rendered config builds no profiles: {e}"));
    config
}

// --- (a) the generated files agree with the chart ---------------------------------------------

#[test]
#[ignore = "needs helm (tests/e2e/install-deps.sh)"]
fn generated_files_agree_with_the_chart() {
    let out = run(Path::new("bash"), &["deploy/generate.sh", "--check"]);
    assert!(
        out.status.success(),
        "deploy/generate.sh --check: the kustomize base or the README's values table is stale \
         (run deploy/generate.sh):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// --- (b) lint --------------------------------------------------------------------------------

#[test]
#[ignore = "needs helm (tests/e2e/install-deps.sh)"]
fn lint_is_clean_with_default_and_nondefault_values() {
    for extra in [&[][..], &["--values", NONDEFAULT][..]] {
        let mut args = vec!["lint", "--strict", CHART];
        args.extend_from_slice(extra);
        let out = ok(&helm(), &args);
        assert!(out.contains("0 chart(s) failed"), "{out}");
        assert!(
            !out.contains("[WARNING]") && !out.contains("[ERROR]"),
            "{out}"
        );
    }
}

// --- (c) rendered objects --------------------------------------------------------------------

#[test]
#[ignore = "needs helm (tests/e2e/install-deps.sh)"]
fn default_values_render_the_documented_objects() {
    let chart: Value = serde_norway::from_str(
        &std::fs::read_to_string(root().join(CHART).join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml parses");
    assert_eq!(chart["version"].as_str(), Some(VERSION), "chart version");
    assert_eq!(chart["appVersion"].as_str(), Some(VERSION), "appVersion");

    let docs = render("loadstar", &[]);
    let ns = "loadstar".to_string();
    let want: BTreeSet<(String, String, String)> = [
        ("ServiceAccount", &ns, "loadstar-scorer"),
        ("ServiceAccount", &ns, "loadstar-agent"),
        ("ClusterRole", &String::new(), "loadstar-scorer"),
        ("ClusterRoleBinding", &String::new(), "loadstar-scorer"),
        ("Role", &ns, "loadstar-scorer-leader-election"),
        ("RoleBinding", &ns, "loadstar-scorer-leader-election"),
        ("ConfigMap", &ns, "loadstar-scorer-config"),
        ("Deployment", &ns, "loadstar-scorer"),
        ("PodDisruptionBudget", &ns, "loadstar-scorer"),
        ("Service", &ns, "loadstar-scorer"),
        ("Service", &ns, "loadstar-scorer-agents"),
        ("DaemonSet", &ns, "loadstar-agent"),
        ("PriorityClass", &String::new(), "loadstar-agent"),
    ]
    .into_iter()
    .map(|(k, n, name)| (k.to_string(), n.clone(), name.to_string()))
    .collect();
    assert_eq!(identities(&docs), want);

    let deploy = find(&docs, "Deployment", "loadstar-scorer");
    assert_eq!(deploy["spec"]["replicas"].as_u64(), Some(2));
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"].as_str(),
        Some(format!("loadstar/loadstar-scorer:{VERSION}").as_str())
    );
    let args = strings(&c["args"]);
    for want in [
        "--leader-elect=true",
        "--extender-listen=0.0.0.0:8888",
        "--agent-service-account=loadstar/loadstar-agent",
        "--agent-audience=loadstar",
        "--query-access=authenticated",
        "--ui-access=loopback",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
    }
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--tls-") || a.starts_with("--insecure"))
    );
    assert_eq!(
        deploy["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"].as_u64(),
        Some(0),
        "capacity never drops in a rollout"
    );
    let anti = &pod["affinity"]["podAntiAffinity"];
    assert!(anti["requiredDuringSchedulingIgnoredDuringExecution"].is_null());
    let term = &anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"];
    assert_eq!(term["topologyKey"].as_str(), Some("kubernetes.io/hostname"));
    assert_eq!(
        term["labelSelector"]["matchLabels"],
        deploy["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    let http = named(&c["ports"], "http").expect("http port");
    assert_eq!(http["containerPort"].as_u64(), Some(9090));
    assert!(named(&c["ports"], "extender").is_some());
    assert!(
        named(
            &find(&docs, "Service", "loadstar-scorer")["spec"]["ports"],
            "extender"
        )
        .is_some()
    );
    assert_eq!(
        c["securityContext"]["readOnlyRootFilesystem"].as_bool(),
        Some(true)
    );
    assert_eq!(c["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(
        pod["serviceAccountName"].as_str(),
        Some("loadstar-scorer"),
        "the account the RBAC binds"
    );
    // Offline renders target current clusters (policy/v1); --kube-version 1.20 gets v1beta1.
    let pdb = find(&docs, "PodDisruptionBudget", "loadstar-scorer");
    assert_eq!(pdb["apiVersion"].as_str(), Some("policy/v1"));
    assert_eq!(pdb["spec"]["minAvailable"].as_u64(), Some(1));
    assert_eq!(pdb["spec"]["selector"], deploy["spec"]["selector"]);
    let old = render(
        "loadstar",
        &[
            "--kube-version",
            "1.20.2",
            "--show-only",
            "templates/scorer-pdb.yaml",
        ],
    );
    assert_eq!(old[0]["apiVersion"].as_str(), Some("policy/v1beta1"));

    let ds = find(&docs, "DaemonSet", "loadstar-agent");
    let config = agent_config(ds);
    assert_eq!(
        config.scorers,
        vec!["http://loadstar-scorer-agents.loadstar.svc.cluster.local:50051".to_string()]
    );
    let dpod = &ds["spec"]["template"]["spec"];
    assert_eq!(
        dpod["containers"][0]["image"].as_str(),
        Some(format!("loadstar/loadstar-agent:{VERSION}").as_str())
    );
    assert_eq!(dpod["priorityClassName"].as_str(), Some("loadstar-agent"));
    assert_eq!(
        ds["spec"]["updateStrategy"]["type"].as_str(),
        Some("RollingUpdate")
    );

    // Another release name prefixes every name, and the scorer still trusts its own agents.
    let prod = render("prod", &[]);
    let ds = find(&prod, "DaemonSet", "prod-loadstar-agent");
    let sa = ds["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("agent SA");
    let args = strings(
        &find(&prod, "Deployment", "prod-loadstar-scorer")["spec"]["template"]["spec"]["containers"]
            [0]["args"],
    );
    assert!(
        args.contains(&format!("--agent-service-account=loadstar/{sa}")),
        "{args:?}"
    );
    assert!(
        agent_config(ds).scorers[0].starts_with("http://prod-loadstar-scorer-agents.loadstar.svc")
    );
    assert!(
        identities(&prod)
            .iter()
            .all(|(_, _, name)| name.starts_with("prod-loadstar-")),
        "{:?}",
        identities(&prod)
    );
}

#[test]
#[ignore = "needs helm (tests/e2e/install-deps.sh)"]
fn nondefault_values_render_what_they_ask() {
    let docs = render("loadstar", &["--values", NONDEFAULT]);
    let deploy = find(&docs, "Deployment", "ls-scorer");
    assert_eq!(deploy["spec"]["replicas"].as_u64(), Some(3));
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"].as_str(),
        Some("registry.example.com:5000/platform/loadstar-scorer:0.1.0-ci.7")
    );
    assert_eq!(c["imagePullPolicy"].as_str(), Some("Always"));
    assert_eq!(pod["imagePullSecrets"][0]["name"].as_str(), Some("regcred"));

    // TLS from the Secret, mounted where the flags point.
    let args = strings(&c["args"]);
    for want in [
        "--tls-cert=/etc/loadstar/tls/tls.crt",
        "--tls-key=/etc/loadstar/tls/tls.key",
        "--query-access=open",
        "--ui-access=open",
        "--agent-service-account=loadstar/ls-agent,gpu/gpu-agent",
        "--agent-audience=loadstar-ci",
        "--kube-api-qps=20.5",
        "--kube-api-burst=40",
        "--leader-elect-name=ls-scorer",
        "--bind-concurrency=128",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
    }
    let tls = named(&pod["volumes"], "tls").expect("tls volume");
    assert_eq!(tls["secret"]["secretName"].as_str(), Some("scorer-cert"));
    let mount = named(&c["volumeMounts"], "tls").expect("tls mount");
    assert_eq!(mount["mountPath"].as_str(), Some("/etc/loadstar/tls"));
    assert_eq!(mount["readOnly"].as_bool(), Some(true));

    // Required anti-affinity, and nothing preferred; rollouts then free a node first.
    assert_eq!(
        deploy["spec"]["strategy"]["rollingUpdate"]["maxSurge"].as_u64(),
        Some(0)
    );
    let anti = &pod["affinity"]["podAntiAffinity"];
    assert!(anti["preferredDuringSchedulingIgnoredDuringExecution"].is_null());
    let term = &anti["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(term["topologyKey"].as_str(), Some("kubernetes.io/hostname"));
    assert_eq!(
        term["labelSelector"]["matchLabels"],
        deploy["spec"]["selector"]["matchLabels"]
    );

    // Extender off: no flag, no container port, no Service port.
    assert!(
        !args.iter().any(|a| a.starts_with("--extender")),
        "{args:?}"
    );
    assert!(named(&c["ports"], "extender").is_none());
    assert!(
        named(
            &find(&docs, "Service", "ls-scorer")["spec"]["ports"],
            "extender"
        )
        .is_none()
    );

    // Scheduling knobs, annotations, env.
    assert_eq!(
        pod["nodeSelector"]["node-role.kubernetes.io/control-plane"].as_str(),
        Some("")
    );
    assert_eq!(pod["tolerations"][0]["effect"].as_str(), Some("NoSchedule"));
    let ann = &deploy["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(ann["example.com/team"].as_str(), Some("scheduling"));
    assert!(
        ann["checksum/config"]
            .as_str()
            .is_some_and(|s| s.len() == 64)
    );
    assert_eq!(c["resources"]["limits"]["memory"].as_str(), Some("2Gi"));
    assert_eq!(
        named(&c["env"], "RUST_LOG").expect("RUST_LOG")["value"].as_str(),
        Some("debug")
    );
    assert!(named(&c["env"], "LOADSTAR_LOG_FORMAT").is_some());
    let pdb = find(&docs, "PodDisruptionBudget", "ls-scorer");
    assert_eq!(pdb["spec"]["minAvailable"].as_u64(), Some(2));

    // Agents: https to the scorer, verified with the Secret's CA only, and every agent value.
    let ds = find(&docs, "DaemonSet", "ls-agent");
    let dpod = &ds["spec"]["template"]["spec"];
    let dc = &dpod["containers"][0];
    assert_eq!(
        dc["image"].as_str(),
        Some("registry.example.com:5000/platform/loadstar-agent:0.1.0-ci.7")
    );
    let config = agent_config(ds);
    assert_eq!(
        config.scorers,
        vec!["https://ls-scorer-agents.loadstar.svc.k8s.example:50051".to_string()]
    );
    let ca = config.tls_ca.as_ref().expect("--tls-ca");
    let ca_mount = named(&dc["volumeMounts"], "scorer-ca").expect("CA mount");
    assert!(ca.starts_with(ca_mount["mountPath"].as_str().expect("path")));
    let ca_vol = named(&dpod["volumes"], "scorer-ca").expect("CA volume");
    assert_eq!(ca_vol["secret"]["secretName"].as_str(), Some("scorer-cert"));
    assert_eq!(
        ca_vol["secret"]["items"]
            .as_sequence()
            .expect("items: only the CA, never the key")
            .len(),
        1
    );
    let s = config.sampler_config();
    assert_eq!(s.interval, std::time::Duration::from_millis(500));
    assert_eq!(s.windows, vec![60, 300]);
    let dargs = strings(&dc["args"]);
    assert!(
        dargs.contains(&"--net-exclude=cali*".to_string()),
        "{dargs:?}"
    );
    assert_eq!(
        dpod["priorityClassName"].as_str(),
        Some("system-node-critical")
    );
    assert_eq!(dpod["runtimeClassName"].as_str(), Some("nvidia"));
    assert_eq!(
        ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"].as_u64(),
        Some(2)
    );
    let token = named(&dpod["volumes"], "scorer-token").expect("token volume");
    let projected = &token["projected"]["sources"][0]["serviceAccountToken"];
    assert_eq!(projected["audience"].as_str(), Some("loadstar-ci"));
    assert_eq!(projected["expirationSeconds"].as_u64(), Some(7200));
    assert!(
        !docs
            .iter()
            .any(|d| d["kind"].as_str() == Some("PriorityClass")),
        "an existing PriorityClass is used, none created"
    );

    // ServiceMonitors for both, with the Prometheus selector label, and the agents' Service.
    for (name, port) in [("ls-scorer", "http"), ("ls-agent", "metrics")] {
        let sm = find(&docs, "ServiceMonitor", name);
        assert_eq!(sm["apiVersion"].as_str(), Some("monitoring.coreos.com/v1"));
        assert_eq!(
            sm["metadata"]["labels"]["release"].as_str(),
            Some("kube-prometheus-stack")
        );
        assert_eq!(sm["spec"]["endpoints"][0]["port"].as_str(), Some(port));
        assert_eq!(sm["spec"]["endpoints"][0]["interval"].as_str(), Some("15s"));
        // It selects exactly one Service, which has the port.
        let want = sm["spec"]["selector"]["matchLabels"]
            .as_mapping()
            .expect("matchLabels");
        let services: Vec<&Value> = docs
            .iter()
            .filter(|d| d["kind"].as_str() == Some("Service"))
            .filter(|d| {
                want.iter()
                    .all(|(k, v)| d["metadata"]["labels"].get(k.as_str().unwrap_or("")) == Some(v))
            })
            .collect();
        assert_eq!(services.len(), 1, "{name} selects {services:?}");
        assert!(named(&services[0]["spec"]["ports"], port).is_some());
    }

    // The rules as a PrometheusRule: the very groups of files/prometheus-rules.yaml.
    let rule = find(&docs, "PrometheusRule", "ls");
    assert_eq!(
        rule["metadata"]["labels"]["release"].as_str(),
        Some("kube-prometheus-stack")
    );
    let shipped: Value = serde_norway::from_str(
        &std::fs::read_to_string(root().join("deploy/helm/loadstar/files/prometheus-rules.yaml"))
            .expect("rules file"),
    )
    .expect("rules YAML");
    assert_eq!(rule["spec"]["groups"], shipped["groups"]);
    // The dashboard for Grafana's sidecar: its label, namespace, folder and the JSON itself.
    let cm = docs
        .iter()
        .find(|d| {
            d["kind"].as_str() == Some("ConfigMap")
                && d["metadata"]["name"].as_str() == Some("ls-dashboard")
        })
        .expect("dashboard ConfigMap");
    assert_eq!(cm["metadata"]["namespace"].as_str(), Some("monitoring"));
    assert_eq!(
        cm["metadata"]["labels"]["grafana_dashboard"].as_str(),
        Some("yes")
    );
    assert_eq!(
        cm["metadata"]["annotations"]["grafana_folder"].as_str(),
        Some("Scheduling")
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(cm["data"]["loadstar.json"].as_str().unwrap_or_default())
            .expect("dashboard JSON");
    assert_eq!(dashboard["uid"].as_str(), Some("loadstar-overview"));

    // The StepScaler controller on its own Lease, with RBAC on stepscalers and every /scale.
    for want in [
        "--step-scalers",
        "--step-scaler-lease=ls-scorer-stepscaler",
        "--metrics-api-listen=0.0.0.0:4443",
        "--metrics-api-window-seconds=30",
        "--metrics-api-ca-dir=/var/run/loadstar/metrics-api",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
    }
    let rules = &find(&docs, "ClusterRole", "ls-scorer")["rules"];
    let grants = |resource: &str, verb: &str| {
        rules.as_sequence().into_iter().flatten().any(|r| {
            strings(&r["resources"]).iter().any(|x| x == resource)
                && strings(&r["verbs"]).iter().any(|x| x == verb)
        })
    };
    for (resource, verb) in [
        ("stepscalers", "watch"),
        ("stepscalers/status", "patch"),
        ("*/scale", "patch"),
        ("namespaces", "list"),
        ("namespaces", "watch"),
    ] {
        assert!(grants(resource, verb), "{verb} {resource} in {rules:?}");
    }
    // metrics.k8s.io and the admission webhook: the APIService and the webhook name the
    // Service, whose ports reach the container's, and trust the CA that signed the mounted
    // serving certificate.
    for want in [
        "--admission-listen=0.0.0.0:8443",
        "--admission-tls-cert=/etc/loadstar/https/tls.crt",
        "--metrics-api-tls-cert=/etc/loadstar/https/tls.crt",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
    }
    let api = find(&docs, "APIService", "v1beta1.metrics.k8s.io");
    assert_eq!(
        api["spec"]["service"]["name"].as_str(),
        Some("ls-scorer-https")
    );
    assert_eq!(
        api["spec"]["service"]["namespace"].as_str(),
        Some("loadstar")
    );
    let secret = find(&docs, "Secret", "ls-scorer-https-tls");
    assert_eq!(api["spec"]["caBundle"], secret["data"]["ca.crt"]);
    // That CA really signs the serving certificate, which names the Service.
    let dir = tempfile::tempdir().expect("temp dir");
    let pem = |key: &str| {
        let b64 = secret["data"][key].as_str().unwrap_or_default();
        let path = dir.path().join(key);
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("base64 in the Secret");
        std::fs::write(&path, der).expect("write");
        path.to_string_lossy().into_owned()
    };
    let (ca, crt) = (pem("ca.crt"), pem("tls.crt"));
    let openssl = Path::new("openssl");
    let verified = ok(openssl, &["verify", "-CAfile", &ca, &crt]);
    assert!(verified.contains(": OK"), "{verified}");
    let sans = ok(
        openssl,
        &["x509", "-in", &crt, "-noout", "-ext", "subjectAltName"],
    );
    assert!(sans.contains("DNS:ls-scorer-https.loadstar.svc"), "{sans}");
    let hook = &find(
        &docs,
        "ValidatingWebhookConfiguration",
        "ls-scorer-stepscalers",
    )["webhooks"][0];
    assert_eq!(hook["clientConfig"]["caBundle"], secret["data"]["ca.crt"]);
    assert_eq!(
        hook["clientConfig"]["service"]["path"].as_str(),
        Some("/validate-stepscaler")
    );
    let svc = find(&docs, "Service", "ls-scorer-https");
    for (port, target, container) in [(443, "metrics-api", 4443), (8443, "webhook", 8443)] {
        let p = named(&svc["spec"]["ports"], target).expect("service port");
        assert_eq!(p["port"].as_u64(), Some(port));
        assert_eq!(p["targetPort"].as_str(), Some(target));
        let c = named(&c["ports"], target).expect("container port");
        assert_eq!(c["containerPort"].as_u64(), Some(container));
    }
    assert_eq!(
        hook["clientConfig"]["service"]["port"].as_u64(),
        Some(8443),
        "the webhook port"
    );
    let vol = named(&pod["volumes"], "https-tls").expect("serving certificate volume");
    assert_eq!(
        vol["secret"]["secretName"].as_str(),
        Some("ls-scorer-https-tls")
    );
    let reader = find(&docs, "RoleBinding", "ls-scorer-auth-reader");
    assert_eq!(
        reader["metadata"]["namespace"].as_str(),
        Some("kube-system")
    );
    assert_eq!(
        reader["roleRef"]["name"].as_str(),
        Some("extension-apiserver-authentication-reader")
    );
}

// --- (d) bad values fail, naming the field ---------------------------------------------------

#[test]
#[ignore = "needs helm (tests/e2e/install-deps.sh)"]
fn bad_values_fail_naming_the_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Messages as helm 3.17's schema validator (the version install-deps.sh pins) words them.
    // (values, what the error must say, whether `helm lint` fails too: a rule across fields
    // that only a template's `fail` can state is reported by lint as [INFO] and exit 0).
    let cases: &[(&str, &[&str], bool)] = &[
        (
            "scorer: {replicas: -1}",
            &["scorer.replicas", "greater than or equal to 1"],
            true,
        ),
        (
            "scorer: {replicas: two}",
            &["scorer.replicas", "Invalid type", "integer"],
            true,
        ),
        (
            "scorer: {queryAccess: open}",
            &["scorer", "queryAccess", "not allowed"],
            true,
        ),
        (
            "scorer: {auth: {queryAccess: bogus}}",
            &["scorer.auth.queryAccess", "open", "authenticated"],
            true,
        ),
        (
            "agent: {bogus: 1}",
            &["agent", "bogus", "not allowed"],
            true,
        ),
        (
            "scorer: {antiAffinity: sometimes}",
            &["scorer.antiAffinity", "preferred", "required"],
            true,
        ),
        (
            "scorer: {tls: {enabled: yes-please}}",
            &["scorer.tls.enabled", "boolean"],
            true,
        ),
        (
            "agent: {interval: fast}",
            &["agent.interval", "pattern"],
            true,
        ),
        (
            "scorer: {resources: {requests: {cpu: lots}}}",
            &["scorer.resources.requests.cpu"],
            true,
        ),
        (
            "scorer: {config: {profiles: [{schedulerName: x, scores: [{name: Nope}]}]}}",
            &[
                "scorer.config.profiles.0.scores.0.name",
                "LoadVariationRiskBalancing",
            ],
            true,
        ),
        (
            "scorer: {config: {profiles: [{schedulerName: x, scores: [{name: MinVariance, weight: 0}]}]}}",
            &["scorer.config.profiles.0.scores.0.weight"],
            true,
        ),
        (
            "scorer: {config: {profiles: []}}",
            &["scorer.config.profiles", "1"],
            true,
        ),
        // Rules across fields.
        (
            "scorer: {leaderElection: {enabled: false}}",
            &["scorer.replicas", "less than or equal to 1"],
            true,
        ),
        (
            "agent: {priorityClass: {create: false}}",
            &["agent.priorityClass.name"],
            true,
        ),
        (
            "scorer: {replicas: 1}",
            &["scorer.podDisruptionBudget.minAvailable (1) must be below scorer.replicas (1)"],
            false,
        ),
    ];
    for (i, (values, want, lint_fails)) in cases.iter().enumerate() {
        let file = dir.path().join(format!("bad-{i}.yaml"));
        std::fs::write(&file, values).expect("write values");
        let file = file.to_str().expect("UTF-8 path");
        for (cmd, must_fail) in [
            (&["template", "loadstar", CHART][..], true),
            (&["lint", "--strict", CHART][..], *lint_fails),
        ] {
            let mut args = cmd.to_vec();
            args.extend(["--values", file]);
            let out = run(&helm(), &args);
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            );
            assert_eq!(
                out.status.success(),
                !must_fail,
                "helm {cmd:?} with {values}:\n{text}"
            );
            for w in *want {
                assert!(
                    text.contains(w),
                    "helm {cmd:?} with {values}: {w:?} not in:\n{text}"
                );
            }
        }
    }
}

// --- (e) the profiles config is the scorer's ---------------------------------------------------

#[test]
#[ignore = "needs helm (tests/e2e/install-deps.sh)"]
fn rendered_profiles_config_is_one_the_scorer_accepts() {
    // Default values: exactly the embedded default (values.yaml keeps a copy users can edit).
    let config = scorer_config(&render("loadstar", &[]), "loadstar");
    assert_eq!(
        config,
        ScorerConfig::embedded_default(),
        "values.yaml's scorer.config differs from scorer/policy/src/default-config.yaml"
    );

    let config = scorer_config(&render("loadstar", &["--values", NONDEFAULT]), "ls");
    let names: Vec<&str> = config
        .profiles()
        .iter()
        .map(|p| p.scheduler_name.as_str())
        .collect();
    assert_eq!(names, ["loadstar-ci", "loadstar-ci-requests"]);
    let p = &config.profiles()[0];
    assert_eq!(p.window_seconds, 60);
    assert_eq!(p.stale_penalty, 0.25);
    assert_eq!(p.scores[0].name, "TargetLoadPacking");
    assert_eq!(p.scores[0].weight, 2);
    assert_eq!(p.scores[1].weight, 1, "the default weight");
    assert_eq!(
        config.stale_after(),
        Some(std::time::Duration::from_secs(20))
    );
    assert_eq!(config.inflight().cpu_factor, 1.5);
    assert_eq!(config.inflight().cpu_fallback_millis, 500);
}

/// The schema's plugin-name enums are the registry's (no helm needed): a plugin added to the
/// scorer but not to the schema would be refused at install time, and a removed one accepted.
#[test]
fn schema_plugin_names_are_the_registrys() {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join(CHART).join("values.schema.json"))
            .expect("values.schema.json"),
    )
    .expect("values.schema.json is JSON");
    let profile = &schema["properties"]["scorer"]["properties"]["config"]["properties"]["profiles"]
        ["items"]["properties"];
    let names = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("an enum: {v}"))
            .iter()
            .map(|n| n.as_str().expect("a name").to_string())
            .collect()
    };
    let filters = &profile["filters"]["items"]["oneOf"];
    assert_eq!(names(&filters[0]["enum"]), loadstar_policy::FILTER_NAMES);
    assert_eq!(
        names(&filters[1]["properties"]["name"]["enum"]),
        loadstar_policy::FILTER_NAMES
    );
    assert_eq!(
        names(&profile["scores"]["items"]["properties"]["name"]["enum"]),
        loadstar_policy::SCORE_NAMES
    );
    assert_eq!(
        names(&profile["stalePolicy"]["enum"]),
        ["fallback", "filter", "penalize"]
    );
}

// --- (f) kustomize builds the base into the chart's objects ------------------------------------

#[test]
#[ignore = "needs helm, kubectl 1.20 and kubectl-1.29 (tests/e2e/install-deps.sh)"]
fn kustomize_base_builds_the_charts_objects_with_kustomize_v2_and_v5() {
    // The base carries the CRD too (`kubectl apply -k` installs everything).
    let mut chart = render("loadstar", &["--include-crds"]);
    chart.insert(
        0,
        serde_norway::from_str("{apiVersion: v1, kind: Namespace, metadata: {name: loadstar}}")
            .expect("Namespace"),
    );
    let by_id = |docs: &[Value]| -> Vec<((String, String, String), Value)> {
        let mut v: Vec<_> = docs
            .iter()
            .map(|d| {
                (
                    identities(std::slice::from_ref(d)).pop_first().expect("id"),
                    d.clone(),
                )
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let want = by_id(&chart);
    for kubectl in [kubectl_1_20(), kubectl_1_29()] {
        let built = docs(&ok(&kubectl, &["kustomize", "deploy/kustomize"]));
        let got = by_id(&built);
        let ids = |v: &[((String, String, String), Value)]| -> Vec<(String, String, String)> {
            v.iter().map(|(id, _)| id.clone()).collect()
        };
        assert_eq!(ids(&got), ids(&want), "{}: objects", kubectl.display());
        // Not only the names: every object as the chart renders it.
        for ((id, g), (_, w)) in got.iter().zip(&want) {
            assert_eq!(
                g,
                w,
                "{}: {id:?} differs from the chart's",
                kubectl.display()
            );
        }
    }
}
