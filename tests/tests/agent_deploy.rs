//! The agent's DaemonSet manifest matches the agent: its arguments parse with the agent's own
//! flag parser into the host-mounted roots and the host network namespace; every host mount
//! is read-only; NODE_NAME comes from the downward API; it tolerates every taint, runs at the
//! manifest's own priority class, and probes the port the metrics server listens on. The
//! manifest is the Helm chart rendered with its default values into the kustomize base
//! (deploy/generate.sh; tests/tests/chart.rs checks that the two agree).
use clap::Parser;
use loadstar_agent::config::AgentConfig;
use serde::Deserialize;
use serde_norway::Value;

fn manifest() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/kustomize/loadstar.yaml"
    );
    let text = std::fs::read_to_string(path).expect("deploy/kustomize/loadstar.yaml");
    serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).expect("valid YAML"))
        .collect()
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} in the manifest"))
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

#[test]
fn daemonset_matches_the_agent() {
    let docs = manifest();
    let ds = kind(&docs, "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    let c = &pod["containers"][0];

    // Arguments parse, and point at the host's filesystems.
    let mut args = vec!["loadstar-agent".to_string()];
    args.extend(
        c["args"]
            .as_sequence()
            .expect("args")
            .iter()
            .map(|a| str_of(a).to_string()),
    );
    let config = AgentConfig::try_parse_from(&args).expect("the manifest's args parse");
    let s = config.sampler_config();
    assert_eq!(s.proc_root.to_str(), Some("/host/proc"));
    assert_eq!(s.sys_root.to_str(), Some("/host/sys"));
    assert_eq!(s.cgroup_root.to_str(), Some("/host/cgroup"));
    assert_eq!(s.rootfs.to_str(), Some("/host/root"));
    // No hostNetwork: the host's namespace is read through /host/proc/1/net/dev.
    assert_eq!(pod["hostNetwork"].as_bool(), Some(false));
    assert_eq!(s.net_namespace_pid, Some(1));
    assert_eq!(s.net_dev_path().to_str(), Some("/host/proc/1/net/dev"));
    assert!(config.scorers[0].contains("loadstar-scorer-agents.loadstar.svc"));

    // Host mounts are read-only and land where the arguments point.
    let mounts = c["volumeMounts"].as_sequence().expect("mounts");
    let volumes = pod["volumes"].as_sequence().expect("volumes");
    for (host, path) in [
        ("/proc", "/host/proc"),
        ("/sys", "/host/sys"),
        ("/sys/fs/cgroup", "/host/cgroup"),
        ("/", "/host/root"),
    ] {
        let vol = volumes
            .iter()
            .find(|v| v["hostPath"]["path"].as_str() == Some(host))
            .unwrap_or_else(|| panic!("hostPath {host}"));
        let m = mounts
            .iter()
            .find(|m| m["name"] == vol["name"])
            .unwrap_or_else(|| panic!("mount of {host}"));
        assert_eq!(str_of(&m["mountPath"]), path);
        assert_eq!(m["readOnly"].as_bool(), Some(true), "{host} read-only");
    }
    let token = mounts
        .iter()
        .find(|m| m["name"].as_str() == Some("scorer-token"))
        .expect("token mount");
    assert!(
        config
            .token_file
            .as_ref()
            .expect("token file")
            .starts_with(str_of(&token["mountPath"]))
    );

    // Identity, placement and priority.
    let env = c["env"].as_sequence().expect("env");
    let node = env
        .iter()
        .find(|e| e["name"].as_str() == Some("NODE_NAME"))
        .expect("NODE_NAME");
    assert_eq!(
        node["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("spec.nodeName")
    );
    let tolerations = pod["tolerations"].as_sequence().expect("tolerations");
    assert!(
        tolerations
            .iter()
            .any(|t| t["operator"].as_str() == Some("Exists") && t.get("key").is_none()),
        "tolerates every taint"
    );
    let pc = kind(&docs, "PriorityClass");
    assert_eq!(pod["priorityClassName"], pc["metadata"]["name"]);
    assert!(pc["value"].as_i64().expect("value") >= 100_000_000);

    // Probes hit the metrics server's port; shutdown fits the grace period.
    let port = config.metrics_addr.0.expect("metrics on").port();
    let ports = c["ports"].as_sequence().expect("ports");
    let metrics = ports
        .iter()
        .find(|p| p["containerPort"].as_u64() == Some(u64::from(port)))
        .expect("metrics port declared");
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["path"].as_str(), Some("/healthz"));
        assert_eq!(c[probe]["httpGet"]["port"], metrics["name"]);
    }
    assert!(
        config.shutdown_timeout.as_secs()
            < pod["terminationGracePeriodSeconds"]
                .as_u64()
                .expect("grace")
    );
    assert_eq!(
        c["resources"]["limits"]["memory"]
            .as_str()
            .map(|m| m.ends_with("Mi")),
        Some(true)
    );
}
