//! `profile_yaml` target: the scorer's configuration file (scorer/policy/src/config.rs:
//! `ScorerConfig::from_yaml`, YAML through serde_norway, then strict validation of every
//! profile, plugin and argument), and the profiles it builds, evaluated on a fixed snapshot.
//!
//! Properties: a configuration that validates also builds (`build_profiles` cannot fail
//! after `from_yaml` succeeded); its stale threshold converts to a `Duration` without
//! panicking; every built profile scores a plain pod within 0–100 on every node.
use loadstar_framework::snapshot::PodInfo;
use loadstar_policy::config::ScorerConfig;

fn plain_pod() -> PodInfo {
    let mut p = PodInfo {
        uid: "uid-fuzz".into(),
        namespace: "default".into(),
        name: "fuzz".into(),
        nonzero_cpu_millis: 500,
        nonzero_memory_bytes: 256 << 20,
        ..Default::default()
    };
    p.requests.cpu_millis = 500;
    p.requests.memory_bytes = 256 << 20;
    p.labels.insert("app".into(), "web".into());
    p
}

/// One input.
pub fn fuzz(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let config = match ScorerConfig::from_yaml(text) {
        Ok(c) => c,
        Err(e) => {
            let _ = (e.path().to_string(), e.to_string());
            return;
        }
    };
    let _ = config.stale_after();
    let _ = config.inflight();
    let _ = config.eviction_thresholds();
    let profiles = config
        .build_profiles()
        .unwrap_or_else(|e| panic!("validated configuration does not build: {e}"));
    assert_eq!(profiles.len(), config.profiles().len());
    let pod = plain_pod();
    for p in &profiles {
        crate::fixtures::evaluate_and_check(p, &pod);
    }
}
