//! Issue #19 on the real node: the chart with the StepScaler controller and `metrics.k8s.io`
//! enabled; two twin workloads of burners sharing one stepped demand each (as replicas behind
//! a load balancer: `loadstar-burner --share-dir`), one scaled by a StepScaler, the other by
//! the real HPA of kube-controller-manager 1.20.2 reading Loadstar's `metrics.k8s.io`; both
//! replica timelines recorded; `kubectl top`, the printer columns, dry-run and invalid specs
//! checked.
use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{DynamicObject, PostParams};
use kube::core::ApiResource;

use super::*;

fn step_scalers() -> ApiResource {
    ApiResource {
        group: "loadstar.io".into(),
        version: "v1alpha1".into(),
        api_version: "loadstar.io/v1alpha1".into(),
        kind: "StepScaler".into(),
        plural: "stepscalers".into(),
    }
}

/// A Deployment of burners sharing the demand in `dir` (a host directory).
fn shared_burners(env: &NodeEnv, name: &str, dir: &Path) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "schedulerName": "loadstar",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "burn", "image": env.burner, "imagePullPolicy": "Never",
                        "args": ["--share-dir=/share", "--memory-mib=16"],
                        "resources": {"requests": {"cpu": "100m", "memory": "48Mi"}},
                        "volumeMounts": [{"name": "share", "mountPath": "/share"}]
                    }],
                    "volumes": [{"name": "share",
                                 "hostPath": {"path": dir.to_string_lossy(), "type": "Directory"}}]
                }
            }
        }
    })
}

fn scaler(name: &str, target: &str, extra: serde_json::Value) -> Result<DynamicObject> {
    let mut spec = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
        "targetUtilizationPercent": 60,
        "minReplicas": 2, "maxReplicas": 10, "step": 2,
        "pollPeriodSeconds": 15, "scaleOutCooldownSeconds": 30, "scaleInCooldownSeconds": 30
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "loadstar.io/v1alpha1", "kind": "StepScaler",
        "metadata": {"name": name}, "spec": spec
    }))?)
}

fn condition(o: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
    o.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("status"), s("reason"), s("message"))
        })
}

fn kubectl(args: &[&str], kubeconfig: &Path) -> Result<String> {
    let bin = required("LOADSTAR_E2E_KUBECTL", RUNNER)?;
    cluster_tool(Path::new(&bin), args, kubeconfig)
}

async fn replicas(api: &Api<Deployment>, name: &str) -> Result<i32> {
    Ok(api
        .get(name)
        .await?
        .spec
        .and_then(|s| s.replicas)
        .unwrap_or(0))
}

/// The "New size: N" of each SuccessfulRescale Event of StepScaler `name`, oldest first.
async fn rescales(admin: &Client, ns: &str, name: &str, reason: &str) -> Result<Vec<String>> {
    let mut evs: Vec<_> = events(admin, ns)
        .await?
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("StepScaler")
                && e.involved_object.name.as_deref() == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .collect();
    evs.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
    Ok(evs.into_iter().filter_map(|e| e.message).collect())
}

#[tokio::test]
#[ignore = "needs a real node: tests/e2e/node-run.sh"]
async fn the_step_scaler_and_the_hpa_on_a_real_node() -> Result<()> {
    let Some(env) = node_env()? else {
        return Ok(());
    };
    let admin = env.e2e.admin().await?;
    let chart = env.chart.to_string_lossy().to_string();
    let values = node_values(&env)?;

    // 1. The chart with the StepScaler controller and metrics.k8s.io (install, or upgrade
    // the release the other test installed: the CRD comes with the first install).
    helm(
        &env,
        &[
            "upgrade",
            "--install",
            "loadstar",
            &chart,
            "--namespace",
            NS,
            "--create-namespace",
            "-f",
            &values,
            "--set",
            "scorer.stepScalers.enabled=true",
            "--set",
            "scorer.metricsApi.enabled=true",
        ],
    )?;
    let t0 = Instant::now();
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), NS);
    eventually(
        "the upgraded scorer rolled out",
        Duration::from_secs(180),
        || async {
            let d = deployments.get("loadstar-scorer").await?;
            let (g, s) = (d.metadata.generation, d.status.unwrap_or_default());
            Ok(
                if s.observed_generation >= g
                    && s.updated_replicas == Some(1)
                    && s.available_replicas == Some(1)
                    && s.replicas == Some(1)
                {
                    Ok(())
                } else {
                    Err(format!("{s:?}"))
                },
            )
        },
    )
    .await?;
    let services: Api<APIService> = Api::all(admin.clone());
    eventually(
        "APIService v1beta1.metrics.k8s.io Available",
        Duration::from_secs(120),
        || async {
            let a = services.get("v1beta1.metrics.k8s.io").await?;
            let c = a
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "Available");
            Ok(match c {
                Some(c) if c.status == "True" => Ok(()),
                other => Err(format!("{other:?}")),
            })
        },
    )
    .await?;
    eprintln!(
        "FIGURE helm upgrade → metrics.k8s.io Available {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    // 2. Bad input: the schema refuses what it can express, the admission webhook what it
    // cannot; a target that is not there or cannot scale is a condition, not a crash loop.
    let ns = namespace(&admin, "autoscale").await?;
    let scalers: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &step_scalers());
    let pp = PostParams::default();
    for (name, extra, field) in [
        (
            "zero-target",
            json!({"targetUtilizationPercent": 0}),
            "targetUtilizationPercent",
        ),
        (
            "lower-kind",
            json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "deployment", "name": "x"}}),
            "kind",
        ),
        ("no-max", json!({"maxReplicas": null}), "maxReplicas"),
        // Not expressible in a 1.20 schema: the scorer's admission webhook refuses it.
        (
            "floor-above-ceiling",
            json!({"minReplicas": 5, "maxReplicas": 3}),
            "spec.minReplicas: 5 is above maxReplicas 3",
        ),
    ] {
        let mut obj = scaler(name, "x", extra)?;
        if let Some(s) = obj.data["spec"].as_object_mut() {
            s.retain(|_, v| !v.is_null());
        }
        let err = scalers
            .create(&pp, &obj)
            .await
            .err()
            .with_context(|| format!("the API server accepted StepScaler {name}"))?;
        let msg = err.to_string();
        assert!(
            msg.contains(field),
            "{name} refused without naming {field}: {msg}"
        );
        eprintln!(
            "refused {name}: {}",
            msg.chars().take(200).collect::<String>()
        );
    }
    let invalid = [
        (
            "unknown-kind",
            json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deploymnet", "name": "x"}}),
            "AbleToScale",
            "UnknownKind",
        ),
        (
            "no-scale",
            json!({"scaleTargetRef": {"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}}),
            "AbleToScale",
            "NoScaleSubresource",
        ),
    ];
    for (name, extra, _, _) in &invalid {
        scalers
            .create(&pp, &scaler(name, "x", extra.clone())?)
            .await
            .with_context(|| format!("creating StepScaler {name}"))?;
    }
    for (name, _, type_, reason) in &invalid {
        let (status, got, msg) = eventually(
            &format!("StepScaler {name}'s {type_} condition"),
            Duration::from_secs(60),
            || async {
                let o = scalers.get(name).await?;
                Ok(condition(&o, type_).ok_or_else(|| format!("{:?}", o.data)))
            },
        )
        .await?;
        assert_eq!(
            (status.as_str(), got.as_str()),
            ("False", *reason),
            "{name}: {msg}"
        );
        eprintln!("StepScaler {name}: {type_}=False {reason}: {msg}");
    }
    for (name, ..) in &invalid {
        let _ = scalers.delete(name, &DeleteParams::default()).await;
    }

    // 3. Two twin workloads, each sharing one demand through a host directory.
    let root = env
        .e2e
        .logs
        .join(format!("autoscale-{}", std::process::id()));
    let demand = |which: &str, m: u32| -> Result<()> {
        std::fs::write(root.join(which).join("demand"), format!("{m}\n"))?;
        Ok(())
    };
    for which in ["step", "hpa"] {
        let dir = root.join(which);
        std::fs::create_dir_all(dir.join("peers"))?;
        for d in [dir.clone(), dir.join("peers")] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777))?;
        }
        demand(which, 100)?;
        std::fs::set_permissions(dir.join("demand"), std::fs::Permissions::from_mode(0o666))?;
    }
    let apps: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    for (name, which) in [("step-web", "step"), ("hpa-web", "hpa")] {
        let d: Deployment = serde_json::from_value(shared_burners(&env, name, &root.join(which)))?;
        apps.create(&pp, &d).await?;
    }
    scalers
        .create(&pp, &scaler("step-web", "step-web", json!({}))?)
        .await?;
    // A dry-run StepScaler on the HPA's workload: it reports what it would do, changes nothing.
    scalers
        .create(
            &pp,
            &scaler("hpa-web-shadow", "hpa-web", json!({"dryRun": true}))?,
        )
        .await?;
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "hpa-web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "hpa-web"},
                 "minReplicas": 2, "maxReplicas": 10, "targetCPUUtilizationPercentage": 60}
    }))?;
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(admin.clone(), &ns);
    hpas.create(&pp, &hpa).await?;
    let pods_api: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    eventually("4 burners running", Duration::from_secs(120), || async {
        let running = pods_api
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        Ok(if running >= 4 {
            Ok(())
        } else {
            Err(format!("{running} running"))
        })
    })
    .await?;

    // 4. kubectl top and the printer columns, on Loadstar's data.
    let kc = env.e2e.admin_kubeconfig.clone();
    let top = eventually(
        "kubectl top pod lists the burners",
        Duration::from_secs(60),
        || {
            let (kc, ns) = (kc.clone(), ns.clone());
            async move {
                Ok(match kubectl(&["top", "pod", "-n", &ns], &kc) {
                    Ok(out) if out.contains("step-web-") && out.contains("hpa-web-") => Ok(out),
                    Ok(out) => Err(out),
                    Err(e) => Err(e.to_string()),
                })
            }
        },
    )
    .await?;
    eprintln!("kubectl top pod -n {ns}:\n{top}");
    let nodes = kubectl(&["top", "node"], &kc)?;
    assert!(nodes.contains(&env.node), "kubectl top node: {nodes}");
    eprintln!("kubectl top node:\n{nodes}");

    // 5. The stepped demand; both replica counts sampled every 5 s.
    let phases: [(u32, u64); 3] = [(100, 30), (420, 150), (100, 210)];
    let mut csv = String::from(
        "t_s,demand_m,stepscaler_replicas,stepscaler_util_pct,hpa_replicas,hpa_util_pct\n",
    );
    let start = Instant::now();
    let mut timeline: Vec<(f64, u32, i32, i32)> = Vec::new();
    let mut phase_end = 0u64;
    for (m, secs) in phases {
        demand("step", m)?;
        demand("hpa", m)?;
        phase_end += secs;
        while start.elapsed() < Duration::from_secs(phase_end) {
            let t = start.elapsed().as_secs_f64();
            let (s, h) = (
                replicas(&apps, "step-web").await?,
                replicas(&apps, "hpa-web").await?,
            );
            let su =
                scalers.get("step-web").await?.data["status"]["currentUtilizationPercent"].as_f64();
            let hu = hpas
                .get("hpa-web")
                .await?
                .status
                .and_then(|s| s.current_cpu_utilization_percentage);
            let _ = writeln!(
                csv,
                "{t:.0},{m},{s},{},{h},{}",
                su.map(|u| format!("{u:.1}")).unwrap_or_default(),
                hu.map(|u| u.to_string()).unwrap_or_default()
            );
            timeline.push((t, m, s, h));
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }
    let csv_path = env.e2e.logs.join("autoscale-timeline.csv");
    std::fs::write(&csv_path, &csv)?;
    eprintln!("replica timelines ({}):\n{csv}", csv_path.display());

    // 6. What the timelines must show.
    let high = |t: f64| (30.0..180.0).contains(&t);
    let peak = |pick: fn(&(f64, u32, i32, i32)) -> i32| {
        timeline
            .iter()
            .filter(|r| high(r.0))
            .map(pick)
            .max()
            .unwrap_or(0)
    };
    let first_above = |pick: fn(&(f64, u32, i32, i32)) -> i32| {
        timeline
            .iter()
            .find(|r| high(r.0) && pick(r) > 2)
            .map(|r| r.0 - 30.0)
    };
    let (step_peak, hpa_peak) = (peak(|r| r.2), peak(|r| r.3));
    let (step_out, hpa_out) = (first_above(|r| r.2), first_above(|r| r.3));
    assert!(
        step_peak > 2,
        "the StepScaler never scaled out under 420m over 2 × 100m pods"
    );
    assert!(
        hpa_peak > 2,
        "the HPA on Loadstar's metrics.k8s.io never scaled out"
    );
    let last = timeline.last().context("no samples")?;
    assert_eq!(
        last.2, 2,
        "the StepScaler did not return to its floor after the load fell"
    );
    assert_eq!(
        last.3, 2,
        "the HPA did not return to minReplicas after the load fell"
    );
    let actions = |pick: fn(&(f64, u32, i32, i32)) -> i32| {
        timeline
            .windows(2)
            .filter(|w| pick(&w[0]) != pick(&w[1]))
            .count()
    };
    let replica_minutes = |pick: fn(&(f64, u32, i32, i32)) -> i32| {
        timeline
            .windows(2)
            .map(|w| f64::from(pick(&w[0])) * (w[1].0 - w[0].0) / 60.0)
            .sum::<f64>()
    };
    // Every scale-in of the StepScaler removes `step` pods (2) or stops at the floor.
    let sizes = rescales(&admin, &ns, "step-web", "SuccessfulRescale").await?;
    assert!(!sizes.is_empty(), "no SuccessfulRescale Event for step-web");
    let news: Vec<i32> = sizes
        .iter()
        .filter_map(|m| {
            m.strip_prefix("New size: ")?
                .split(';')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    for w in news.windows(2) {
        if w[1] < w[0] {
            assert!(
                w[0] - w[1] == 2 || w[1] == 2,
                "a scale-in from {} to {}: {sizes:?}",
                w[0],
                w[1]
            );
        }
    }
    let shadow = rescales(&admin, &ns, "hpa-web-shadow", "DryRunRescale").await?;
    assert!(
        !shadow.is_empty(),
        "the dry-run StepScaler recorded no DryRunRescale Event"
    );
    let shadow_obj = scalers.get("hpa-web-shadow").await?;
    assert_eq!(
        shadow_obj.data["status"]["lastDecision"]["applied"].as_bool(),
        Some(false),
        "{:?}",
        shadow_obj.data["status"]
    );
    let table = kubectl(&["get", "stepscalers", "-n", &ns], &kc)?;
    for col in ["REFERENCE", "TARGET", "UTILIZATION", "REPLICAS", "DESIRED"] {
        assert!(
            table.contains(col),
            "kubectl get stepscalers lacks {col}:\n{table}"
        );
    }
    eprintln!("kubectl get stepscalers -n {ns}:\n{table}");
    eprintln!("StepScaler Events: {sizes:?}\ndry-run Events on the HPA's twin: {shadow:?}");
    eprintln!(
        "FIGURE autoscaling on a real node (demand 100m → 420m for 150 s → 100m, pods request \
         100m, target 60 %): StepScaler first scale-out {:.0} s after the step, peak {step_peak}, \
         {} changes, {:.1} replica-min; HPA (kube-controller-manager 1.20.2 on Loadstar's \
         metrics.k8s.io) first scale-out {:.0} s, peak {hpa_peak}, {} changes, {:.1} replica-min",
        step_out.unwrap_or(f64::NAN),
        actions(|r| r.2),
        replica_minutes(|r| r.2),
        hpa_out.unwrap_or(f64::NAN),
        actions(|r| r.3),
        replica_minutes(|r| r.3),
    );
    for name in ["step-web", "hpa-web"] {
        let _ = apps.delete(name, &DeleteParams::default()).await;
    }
    delete_pods_now(&admin, &ns).await;
    Ok(())
}
