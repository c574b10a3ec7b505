//! End-to-end tests of the Loadstar scheduler against a real kube-apiserver v1.20.2 and etcd
//! (started by `tests/e2e/run.sh`), with the scorer binary running under its
//! ServiceAccount's token (so missing RBAC fails here) and simulated agents reporting
//! controlled loads. `#[ignore]`d in plain `cargo test`.
mod e2e_support;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use e2e_support::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use loadstar_proto::pb;
use loadstar_proto::pb::scheduler_client::SchedulerClient;
use loadstar_proto::pb::scorer_client::ScorerClient;
use serde_json::json;

const SCHEDULER: &str = "loadstar";
const MI: &str = "128Mi";

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Scheduled events per pod name, and their reporting instances.
async fn scheduled_events(
    client: &kube::Client,
    ns: &str,
) -> Result<(HashMap<String, usize>, HashMap<String, String>)> {
    let mut count = HashMap::new();
    let mut by = HashMap::new();
    for e in events(client, ns).await? {
        if e.reason.as_deref() == Some("Scheduled") {
            let pod = e.involved_object.name.clone().unwrap_or_default();
            *count.entry(pod.clone()).or_default() += 1;
            by.insert(pod, e.reporting_instance.clone().unwrap_or_default());
        }
    }
    Ok((count, by))
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn hot_node_is_avoided_though_its_requests_are_low() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let ns = namespace(&client, "hot").await?;
    let nodes = vec![
        "hot-idle-requests".to_string(),
        "cool-busy-requests".to_string(),
    ];
    for n in &nodes {
        create_node(&client, n, "8", "32Gi").await?;
    }
    // The cool node already carries 4 cores of requests from default-scheduler pods that
    // were placed there by hand; the hot node carries none but runs at 95 % CPU.
    for i in 0..2 {
        let mut p = pod(&format!("existing-{i}"), None, "2", MI);
        p["spec"]["nodeName"] = json!("cool-busy-requests");
        create_pod(&client, &ns, p).await?;
    }
    let scorer = Scorer::start(&env, "hot-1", "lease-hot", &[]).await?;
    let _agents = Agents::start(
        &[scorer.endpoint()],
        &[
            (nodes[0].clone(), load(0.95, 0.5)),
            (nodes[1].clone(), load(0.15, 0.3)),
        ],
        Duration::from_secs(1),
    )
    .await?;
    // Wait until the scorer has both nodes' reports.
    reports_visible(&scorer, &nodes).await?;
    let sc = ScorerClient::connect(scorer.endpoint()).await?;
    for i in 0..3 {
        create_pod(
            &client,
            &ns,
            pod(&format!("web-{i}"), Some(SCHEDULER), "500m", MI),
        )
        .await?;
    }
    let bound = wait_bound(&client, &ns, 5, Duration::from_secs(30))
        .await
        .with_context(|| scorer.log_tail())?;
    for i in 0..3 {
        assert_eq!(
            bound[&format!("web-{i}")],
            "cool-busy-requests",
            "the hot node must be avoided: {bound:?}"
        );
    }
    // Score by reference explains why (the Kubernetes cache resolves the pod).
    create_pod(&client, &ns, pod("probe", Some("nobody"), "100m", MI)).await?;
    let resp = eventually("score by reference", Duration::from_secs(10), || {
        let mut sc = sc.clone();
        let ns = ns.clone();
        async move {
            match sc
                .score(pb::ScoreRequest {
                    pod: Some(pb::score_request::Pod::Reference(pb::PodReference {
                        namespace: ns,
                        name: "probe".into(),
                    })),
                    candidate_nodes: vec!["hot-idle-requests".into(), "cool-busy-requests".into()],
                    ..Default::default()
                })
                .await
            {
                Ok(r) => Ok(Ok(r.into_inner())),
                Err(e) => Ok(Err(e.to_string())),
            }
        }
    })
    .await?;
    let hot = resp
        .filtered
        .iter()
        .find(|f| f.node_name == "hot-idle-requests")
        .context("hot node should be filtered")?;
    assert!(hot.reason.contains("cpu"), "{hot:?}");
    delete_nodes(&client, &nodes).await;
    Ok(())
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn pods_of_other_schedulers_are_never_touched() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let ns = namespace(&client, "others").await?;
    let nodes = vec!["others-1".to_string()];
    create_node(&client, &nodes[0], "8", "32Gi").await?;
    let scorer = Scorer::start(&env, "others-1", "lease-others", &[]).await?;
    create_pod(&client, &ns, pod("default", None, "100m", MI)).await?;
    create_pod(
        &client,
        &ns,
        pod("other", Some("other-scheduler"), "100m", MI),
    )
    .await?;
    // An impossible pod of another scheduler must not get our condition either.
    create_pod(
        &client,
        &ns,
        pod("huge-other", Some("other-scheduler"), "1000", MI),
    )
    .await?;
    // A pod of ours, created last, as a barrier: once it is bound, the scorer has seen the
    // others.
    create_pod(&client, &ns, pod("ours", Some(SCHEDULER), "100m", MI)).await?;
    let bound = wait_bound(&client, &ns, 1, Duration::from_secs(30))
        .await
        .with_context(|| scorer.log_tail())?;
    assert_eq!(bound.keys().collect::<Vec<_>>(), vec!["ours"]);
    // Give it a few more scheduling rounds, then check nothing else changed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for p in pods(&client, &ns).await? {
        let name = name_of(&p);
        if name == "ours" {
            continue;
        }
        assert_eq!(node_of(&p), None, "{name} must stay unbound");
        assert_eq!(
            scheduled_condition(&p),
            None,
            "{name} must carry no condition of ours"
        );
    }
    let evs = events(&client, &ns).await?;
    for e in evs {
        assert_eq!(
            e.involved_object.name.as_deref(),
            Some("ours"),
            "unexpected event {:?} {:?}",
            e.reason,
            e.message
        );
    }
    delete_nodes(&client, &nodes).await;
    Ok(())
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn unschedulable_pod_gets_condition_and_event_then_binds_when_a_node_appears() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let ns = namespace(&client, "unsched").await?;
    let small = "unsched-small".to_string();
    create_node(&client, &small, "4", "16Gi").await?;
    let scorer = Scorer::start(&env, "unsched-1", "lease-unsched", &[]).await?;
    create_pod(&client, &ns, pod("big", Some(SCHEDULER), "48", "1Gi")).await?;
    let (status, reason, message) = eventually(
        "PodScheduled=False condition",
        Duration::from_secs(30),
        || async {
            let p = pods(&client, &ns).await?;
            Ok(match p.first().and_then(scheduled_condition) {
                Some(c) if c.0 == "False" => Ok(c),
                other => Err(format!("{other:?}")),
            })
        },
    )
    .await
    .with_context(|| scorer.log_tail())?;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Unschedulable")
    );
    assert!(
        message.contains("nodes are available") && message.contains("Insufficient cpu"),
        "{message}"
    );
    let ev = eventually(
        "FailedScheduling event",
        Duration::from_secs(10),
        || async {
            let evs = events(&client, &ns).await?;
            Ok(evs
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("FailedScheduling"))
                .ok_or_else(|| "none yet".to_string()))
        },
    )
    .await?;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert!(
        ev.message
            .as_deref()
            .unwrap_or("")
            .contains("Insufficient cpu")
    );
    // Every field the scheduler writes (a protobuf body) reads back from the API server.
    let listed = pods(&client, &ns).await?;
    let uid = listed.first().and_then(|p| p.metadata.uid.clone());
    let about = &ev.involved_object;
    assert_eq!(
        (about.kind.as_deref(), about.api_version.as_deref()),
        (Some("Pod"), Some("v1"))
    );
    assert_eq!(
        (about.namespace.as_deref(), about.name.as_deref()),
        (Some(ns.as_str()), Some("big"))
    );
    assert!(
        uid.is_some() && about.uid == uid,
        "{:?} vs {uid:?}",
        about.uid
    );
    assert_eq!(ev.count, Some(1));
    assert!(ev.first_timestamp.is_some() && ev.first_timestamp == ev.last_timestamp);
    assert_eq!(ev.reporting_component.as_deref(), Some("loadstar-scorer"));
    assert_eq!(
        ev.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("loadstar-scorer")
    );
    assert!(
        !ev.reporting_instance.as_deref().unwrap_or("").is_empty(),
        "{ev:?}"
    );
    assert!(
        ev.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("big.")),
        "{:?}",
        ev.metadata.name
    );
    // A node that fits appears: the pod is retried early and bound there.
    let big = "unsched-big".to_string();
    let created = Instant::now();
    create_node(&client, &big, "64", "256Gi").await?;
    let bound = wait_bound(&client, &ns, 1, Duration::from_secs(30))
        .await
        .with_context(|| scorer.log_tail())?;
    assert_eq!(bound["big"], big);
    eprintln!("bound {:?} after the node appeared", created.elapsed());
    delete_nodes(&client, &[small, big]).await;
    Ok(())
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn priority_order_is_respected_under_contention() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    priority_classes(&client).await?;
    let ns = namespace(&client, "prio").await?;
    let scorer = Scorer::start(&env, "prio-1", "lease-prio", &[]).await?;
    // No node fits yet. Low-priority pods are created first, high-priority ones last.
    let mk = |name: &str, class: &str| {
        let mut p = pod(name, Some(SCHEDULER), "3", MI);
        p["spec"]["priorityClassName"] = json!(class);
        p
    };
    for i in 0..3 {
        create_pod(&client, &ns, mk(&format!("low-{i}"), "e2e-low")).await?;
    }
    for i in 0..3 {
        create_pod(&client, &ns, mk(&format!("high-{i}"), "e2e-high")).await?;
    }
    eventually(
        "all six pods reported unschedulable",
        Duration::from_secs(30),
        || async {
            let ps = pods(&client, &ns).await?;
            let n = ps
                .iter()
                .filter(|p| scheduled_condition(p).is_some_and(|c| c.0 == "False"))
                .count();
            Ok(if n == 6 {
                Ok(())
            } else {
                Err(format!("{n}/6"))
            })
        },
    )
    .await
    .with_context(|| scorer.log_tail())?;
    // A node with room for exactly three of them appears.
    let node = "prio-node".to_string();
    create_node(&client, &node, "9", "32Gi").await?;
    let bound = wait_bound(&client, &ns, 3, Duration::from_secs(30))
        .await
        .with_context(|| scorer.log_tail())?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let bound_now: BTreeMap<String, String> = pods(&client, &ns)
        .await?
        .iter()
        .filter_map(|p| node_of(p).map(|n| (name_of(p), n)))
        .collect();
    assert_eq!(bound_now.len(), 3, "exactly three fit: {bound_now:?}");
    for name in bound.keys() {
        assert!(
            name.starts_with("high-"),
            "only high-priority pods bind first: {bound:?}"
        );
    }
    delete_nodes(&client, &[node]).await;
    Ok(())
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn scheduler_bind_grpc_places_a_pod_by_reference() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let ns = namespace(&client, "grpcbind").await?;
    let nodes = vec!["grpc-a".to_string(), "grpc-b".to_string()];
    for n in &nodes {
        create_node(&client, n, "8", "32Gi").await?;
    }
    // The pod is another scheduler's: delegating it through Bind takes the flag.
    let scorer = Scorer::start(&env, "grpc-1", "lease-grpc", &["--bind-other-schedulers"]).await?;
    create_pod(
        &client,
        &ns,
        pod("delegated", Some("someone-else"), "1", MI),
    )
    .await?;
    let mut sched = SchedulerClient::connect(scorer.endpoint()).await?;
    let resp = eventually("Bind answered", Duration::from_secs(20), || {
        let mut sched = sched.clone();
        let ns = ns.clone();
        async move {
            match sched
                .bind(pb::BindRequest {
                    node_name: "grpc-b".into(),
                    ..bind_request(&ns, "delegated")
                })
                .await
            {
                Ok(r) => Ok(Ok(r.into_inner())),
                // Leadership or the cache may not be ready in the first moments.
                Err(s) if s.code() == tonic::Code::Unavailable => Ok(Err(s.to_string())),
                Err(s) => Err(anyhow::anyhow!("Bind failed: {s}")),
            }
        }
    })
    .await
    .with_context(|| scorer.log_tail())?;
    assert_eq!(resp.node_name, "grpc-b");
    assert!(resp.decision.is_some_and(|d| d.ranked.len() == 1));
    let bound = wait_bound(&client, &ns, 1, Duration::from_secs(10)).await?;
    assert_eq!(bound["delegated"], "grpc-b");
    // Binding it again is refused with the reason.
    let again = sched
        .bind(bind_request(&ns, "delegated"))
        .await
        .expect_err("already bound");
    assert!(again.message().contains("already bound"), "{again}");
    delete_nodes(&client, &nodes).await;
    Ok(())
}

/// A `Bind` of the pod `ns/name`, the node and profile left to the scorer.
fn bind_request(ns: &str, name: &str) -> pb::BindRequest {
    pb::BindRequest {
        pod: Some(pb::PodReference {
            namespace: ns.to_string(),
            name: name.to_string(),
        }),
        ..Default::default()
    }
}

/// The holder of the Lease `name`, empty when released.
async fn lease_holder(leases: &Api<Lease>, name: &str) -> Result<String> {
    Ok(leases
        .get(name)
        .await?
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default())
}

/// Waits up to 15 s for the Lease `name` to name `holder` (`what` says why, when it does not).
async fn held_by(leases: &Api<Lease>, name: &str, holder: &str, what: &str) -> Result<()> {
    eventually(what, Duration::from_secs(15), || async {
        let seen = lease_holder(leases, name).await?;
        Ok(if seen == holder {
            Ok(())
        } else {
            Err(format!("holder {seen:?}"))
        })
    })
    .await
}

/// Asks the scorer at `endpoint` to bind `ns/ref` until it refuses as a standby naming
/// `leader`, within `timeout`: a standby learns the holder at its first try at the Lease
/// (one that lost the race to create it, at its next), and until then refuses unnamed.
async fn refusal_naming(
    endpoint: &str,
    ns: &str,
    leader: &str,
    timeout: Duration,
) -> Result<tonic::Status> {
    eventually(
        &format!("{endpoint} refusing Bind, naming {leader}"),
        timeout,
        || async {
            let mut c = SchedulerClient::connect(endpoint.to_string()).await?;
            let r = c.bind(bind_request(ns, "ref")).await;
            Ok(match r {
                Err(s)
                    if s.message().contains("not the leader") && s.message().contains(leader) =>
                {
                    Ok(s)
                }
                other => Err(format!("{other:?}")),
            })
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn two_replicas_elect_one_binder_and_fail_over() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let ns = namespace(&client, "ha").await?;
    let nodes = names("ha-node", 4);
    for n in &nodes {
        create_node(&client, n, "16", "64Gi").await?;
    }
    let lease_name = format!("lease-ha-{:x}", rand_u32());
    let mut a = Scorer::start(&env, "ha-a", &lease_name, &[]).await?;
    let mut b = Scorer::start(&env, "ha-b", &lease_name, &[]).await?;
    let node_loads: Vec<_> = nodes.iter().map(|n| (n.clone(), load(0.2, 0.3))).collect();
    let _agents = Agents::start(
        &[a.endpoint(), b.endpoint()],
        &node_loads,
        Duration::from_secs(1),
    )
    .await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "loadstar");
    let leader = eventually("a leader", Duration::from_secs(30), || async {
        let l = leases.get_opt(&lease_name).await?;
        Ok(l.and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty())
            .ok_or_else(|| "no holder".to_string()))
    })
    .await?;
    let (leader_s, standby) = if leader == "ha-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    // The standby answers Score/List but refuses to bind, naming the leader.
    // (Once it has seen the node: a standby that started a moment ago may not have yet.)
    let endpoint = standby.endpoint();
    eventually(
        "the standby listing ha-node-0",
        Duration::from_secs(15),
        || {
            let endpoint = endpoint.clone();
            async move {
                let mut sc = ScorerClient::connect(endpoint).await?;
                let listed = sc
                    .list_nodes(pb::ListNodesRequest::default())
                    .await?
                    .into_inner();
                Ok(if listed.nodes.iter().any(|n| n.node_name == "ha-node-0") {
                    Ok(())
                } else {
                    Err(format!("{} nodes listed", listed.nodes.len()))
                })
            }
        },
    )
    .await?;
    create_pod(&client, &ns, pod("ref", Some("nobody"), "100m", MI)).await?;
    let refused =
        refusal_naming(&standby.endpoint(), &ns, &leader, Duration::from_secs(10)).await?;
    assert_eq!(refused.code(), tonic::Code::Unavailable);
    assert!(refused.message().contains(&leader), "{refused}");

    let first = names("first", 20);
    create_pods(
        &client,
        &ns,
        first
            .iter()
            .map(|n| pod(n, Some(SCHEDULER), "100m", MI))
            .collect(),
    )
    .await?;
    wait_bound(&client, &ns, 20, Duration::from_secs(30))
        .await
        .with_context(|| leader_s.log_tail())?;
    let (_, by) = eventually("Scheduled events", Duration::from_secs(10), || async {
        let (c, by) = scheduled_events(&client, &ns).await?;
        Ok(if first.iter().all(|p| c.contains_key(p)) {
            Ok((c, by))
        } else {
            Err(format!("{} events", c.len()))
        })
    })
    .await?;
    for p in &first {
        assert_eq!(by[p], leader, "only the leader binds ({p})");
    }

    // Kill the leader without a chance to release the lease.
    let killed = Instant::now();
    leader_s.kill();
    let second = names("second", 20);
    create_pods(
        &client,
        &ns,
        second
            .iter()
            .map(|n| pod(n, Some(SCHEDULER), "100m", MI))
            .collect(),
    )
    .await?;
    wait_bound(&client, &ns, 40, Duration::from_secs(40))
        .await
        .with_context(|| standby.log_tail())?;
    let took = killed.elapsed();
    eprintln!("standby took over and bound the second batch {took:?} after the kill");
    ensure!(
        took <= Duration::from_secs(15 + 2 + 3),
        "takeover took {took:?}, more than the lease duration plus a retry period"
    );
    let new_holder = lease_holder(&leases, &lease_name).await?;
    assert_eq!(new_holder, standby.identity);
    let (count, by) = eventually("all Scheduled events", Duration::from_secs(10), || async {
        let (c, by) = scheduled_events(&client, &ns).await?;
        Ok(if c.len() >= 40 {
            Ok((c, by))
        } else {
            Err(format!("{} events", c.len()))
        })
    })
    .await?;
    for p in first.iter().chain(&second) {
        assert_eq!(count.get(p), Some(&1), "{p} bound exactly once");
    }
    for p in &second {
        assert_eq!(by[p], standby.identity);
    }
    // A stopped leader releases the Lease, and a standby watching it takes it at once. This
    // standby tries only every 120 s, and its first try (at its start) found the Lease held, as
    // its refusal naming the leader shows: through its tries alone it could not take the Lease
    // before 120 s, and all of this must end well before.
    // It also runs the StepScaler controller, on a Lease of its own that it alone asks for
    // (the suite's RBAC has no StepScaler access: the controller only warns), to show that
    // Lease released too.
    let third_started = Instant::now();
    let steps_lease = format!("{lease_name}-steps");
    let steps_flag = format!("--step-scaler-lease={steps_lease}");
    let mut third = Scorer::start(
        &env,
        "ha-c",
        &lease_name,
        &[
            "--leader-elect-retry-period=120",
            "--leader-elect-renew-deadline=150",
            "--leader-elect-lease-duration=180",
            "--step-scalers",
            &steps_flag,
        ],
    )
    .await?;
    refusal_naming(
        &third.endpoint(),
        &ns,
        &standby.identity,
        Duration::from_secs(15),
    )
    .await
    .with_context(|| third.log_tail())?;
    let stopped = Instant::now();
    let status = standby.terminate(Duration::from_secs(20)).await?;
    assert!(status.success(), "scorer exited with {status}");
    held_by(
        &leases,
        &lease_name,
        &third.identity,
        "the standby taking the released Lease",
    )
    .await
    .with_context(|| third.log_tail())?;
    ensure!(
        third_started.elapsed() < Duration::from_secs(100),
        "the third replica's takeover came {:?} after its start: its 120 s retry could be near",
        third_started.elapsed()
    );
    eprintln!(
        "the watching standby held the released Lease {:?} after SIGTERM",
        stopped.elapsed()
    );
    held_by(
        &leases,
        &steps_lease,
        &third.identity,
        "the third replica holding the StepScaler Lease",
    )
    .await
    .with_context(|| third.log_tail())?;
    // Graceful shutdown releases both Leases before the process exits: the holders become
    // empty.
    let status = third.terminate(Duration::from_secs(20)).await?;
    assert!(status.success(), "scorer exited with {status}");
    for name in [&lease_name, &steps_lease] {
        let holder = lease_holder(&leases, name).await?;
        ensure!(
            holder.is_empty(),
            "the Lease {name} is released on SIGTERM, but it names {holder:?}; the \
             replica's log:\n{}",
            third.log_tail()
        );
    }
    delete_nodes(&client, &nodes).await;
    Ok(())
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn burst_of_2000_pods_over_200_nodes_binds_each_exactly_once() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let ns = namespace(&client, "burst").await?;
    let nodes = names("burst-node", 200);
    futures::future::try_join_all(nodes.iter().map(|n| create_node(&client, n, "8", "32Gi")))
        .await?;
    let scorer = Scorer::start(
        &env,
        "burst-1",
        "lease-burst",
        &["--kube-api-qps=1000", "--kube-api-burst=1000"],
    )
    .await?;
    let loads: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), load(0.1 + 0.5 * (i % 10) as f64 / 10.0, 0.3)))
        .collect();
    let _agents = Agents::start(&[scorer.endpoint()], &loads, Duration::from_secs(1)).await?;
    let started = Instant::now();
    let all = names("p", 2000);
    create_pods(
        &client,
        &ns,
        all.iter()
            .map(|n| pod(n, Some(SCHEDULER), "100m", MI))
            .collect(),
    )
    .await?;
    let bound = wait_bound(&client, &ns, 2000, Duration::from_secs(120))
        .await
        .with_context(|| scorer.log_tail())?;
    eprintln!(
        "2000 pods bound {:?} after the first was created",
        started.elapsed()
    );
    // Each exactly once: one Scheduled event per pod, and no node over its pod capacity.
    let counts = eventually("2000 Scheduled events", Duration::from_secs(30), || async {
        let (c, _) = scheduled_events(&client, &ns).await?;
        Ok(if c.len() >= 2000 {
            Ok(c)
        } else {
            Err(format!("{} events", c.len()))
        })
    })
    .await?;
    assert!(counts.values().all(|&c| c == 1), "a pod was bound twice");
    let mut per_node: HashMap<&str, usize> = HashMap::new();
    for n in bound.values() {
        *per_node.entry(n.as_str()).or_default() += 1;
    }
    assert!(
        per_node.values().all(|&c| c <= 80),
        "8 cores / 100m = 80 pods at most"
    );
    eprintln!("pods spread over {} nodes", per_node.len());
    delete_nodes(&client, &nodes).await;
    Ok(())
}

/// The PodScheduled=False message of pod `name`, once Loadstar has decided it cannot bind.
async fn refusal(client: &kube::Client, ns: &str, name: &str) -> Result<String> {
    eventually(
        &format!("{name}: PodScheduled=False"),
        Duration::from_secs(30),
        || async {
            let p = pods(client, ns).await?;
            Ok(
                match p
                    .iter()
                    .find(|p| name_of(p) == name)
                    .and_then(scheduled_condition)
                {
                    Some(c) if c.0 == "False" => Ok(c.2),
                    other => Err(format!("{other:?}")),
                },
            )
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn pod_constraints_are_honoured_or_refused_by_name_never_violated() -> Result<()> {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::StorageClass;
    use kube::api::{DeleteParams, PostParams};
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let ns = namespace(&client, "constraints").await?;
    let nodes = vec!["cons-a".to_string(), "cons-b".to_string()];
    for n in &nodes {
        create_node(&client, n, "8", "32Gi").await?;
    }
    let scorer = Scorer::start(&env, "cons-1", "lease-cons", &[]).await?;
    let create = |kind: &str, v: serde_json::Value| {
        let client = client.clone();
        let ns = ns.clone();
        let kind = kind.to_string();
        async move {
            let pp = PostParams::default();
            match kind.as_str() {
                "sc" => {
                    Api::<StorageClass>::all(client)
                        .create(&pp, &serde_json::from_value(v)?)
                        .await?;
                }
                "pv" => {
                    Api::<PersistentVolume>::all(client)
                        .create(&pp, &serde_json::from_value(v)?)
                        .await?;
                }
                _ => {
                    Api::<PersistentVolumeClaim>::namespaced(client, &ns)
                        .create(&pp, &serde_json::from_value(v)?)
                        .await?;
                }
            }
            anyhow::Ok(())
        }
    };
    // A volume only node cons-b can mount, its claim bound to it. (Claims that wait for
    // their first consumer: `wait_for_first_consumer_claims_are_bound_before_their_pod`.)
    let pv = format!("{ns}-pv");
    create(
        "pv",
        json!({"metadata": {"name": pv}, "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": "/tmp/e2e"},
            "claimRef": {"namespace": ns, "name": "data"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["cons-b"]}]}]}}}}),
    )
    .await?;
    create(
        "pvc",
        json!({"metadata": {"name": "data",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": pv,
                "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await?;
    let with = |name: &str, patch: serde_json::Value| {
        let mut p = pod(name, Some(SCHEDULER), "100m", MI);
        for (k, v) in patch.as_object().into_iter().flatten() {
            p["spec"][k] = v.clone();
        }
        p
    };
    let hosts = |value: &str| {
        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname",
             "labelSelector": {"matchLabels": {"ha": value}}}]}})
    };
    // Bound volume: only cons-b. Anti-affinity: three replicas, two hosts.
    create_pod(
        &client,
        &ns,
        with(
            "mounts",
            json!({"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}),
        ),
    )
    .await?;
    for i in 0..3 {
        let mut p = with(&format!("ha-{i}"), json!({"affinity": hosts("web")}));
        p["metadata"]["labels"]["ha"] = json!("web");
        create_pod(&client, &ns, p).await?;
        // One at a time, so which replica is left over is deterministic.
        if i < 2 {
            wait_bound(&client, &ns, 2 + i, Duration::from_secs(30))
                .await
                .with_context(|| scorer.log_tail())?;
        }
    }
    create_pod(
        &client,
        &ns,
        with(
            "cloud",
            json!({"volumes": [{"name": "d", "gcePersistentDisk": {"pdName": "x"}}]}),
        ),
    )
    .await?;
    let anti = refusal(&client, &ns, "ha-2")
        .await
        .with_context(|| scorer.log_tail())?;
    assert!(
        anti.contains("didn't match pod anti-affinity rules"),
        "{anti}"
    );
    // A GCE disk counts against GCEPDLimits (16 per node when the node reports no limit).
    wait_bound(&client, &ns, 4, Duration::from_secs(30))
        .await
        .with_context(|| scorer.log_tail())?;
    let placed: BTreeMap<String, String> = pods(&client, &ns)
        .await?
        .iter()
        .filter_map(|p| node_of(p).map(|n| (name_of(p), n)))
        .collect();
    assert_eq!(
        placed.get("mounts").map(String::as_str),
        Some("cons-b"),
        "{placed:?}"
    );
    assert_ne!(placed.get("ha-0"), placed.get("ha-1"), "{placed:?}");
    assert!(placed.contains_key("cloud"), "{placed:?}");
    assert!(!placed.contains_key("ha-2"), "ha-2 bound: {placed:?}");
    eprintln!("placed {placed:?}; refused: {anti}");
    let _ = Api::<PersistentVolume>::all(client.clone())
        .delete(&pv, &DeleteParams::default())
        .await;
    delete_nodes(&client, &nodes).await;
    Ok(())
}

/// A pending Loadstar pod `name` mounting `volumes`, kept to the test's own `nodes`: other
/// tests create nodes in the same cluster meanwhile (CI saw a provisioned claim's pod placed
/// on another test's node).
fn pod_with_volumes(name: &str, volumes: serde_json::Value, nodes: &[String]) -> serde_json::Value {
    let mut p = pod(name, Some(SCHEDULER), "100m", MI);
    p["spec"]["volumes"] = volumes;
    p["spec"]["affinity"] = json!({"nodeAffinity": {"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                               "values": nodes}]}]}}});
    p
}

/// Claims of a `WaitForFirstConsumer` class, with a real PV controller
/// (kube-controller-manager's `persistentvolume-binder`) completing what Loadstar starts, as
/// it does for kube-scheduler: a static local volume that only one node can mount is chosen
/// for the claim (its `claimRef` written), the controller binds the claim, and only then is
/// the pod bound — to that node. A claim of a class that provisions gets the
/// `volume.kubernetes.io/selected-node` annotation and its pod waits; the test then plays the
/// external provisioner (a volume on the selected node, pre-bound to the claim) and the pod
/// is bound there.
#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn wait_for_first_consumer_claims_are_bound_before_their_pod() -> Result<()> {
    use e2e_support::kube_scheduler::KubeScheduler;
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::StorageClass;
    use kube::api::{DeleteParams, PostParams};
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let bin = e2e_support::required(
        "LOADSTAR_E2E_KUBE_CONTROLLER_MANAGER_BIN",
        "tests/e2e/run.sh",
    )?;
    let _controller = KubeScheduler::controller_manager(
        bin.as_ref(),
        &env.admin_kubeconfig,
        "persistentvolume-binder",
        &[],
        &env.logs,
        "kube-controller-manager-wffc",
    )?;
    let client = env.admin().await?;
    let ns = namespace(&client, "wffc").await?;
    let nodes = vec![format!("{ns}-a"), format!("{ns}-b")];
    for n in &nodes {
        create_node(&client, n, "8", "32Gi").await?;
    }
    let scorer = Scorer::start(&env, "wffc-1", "lease-wffc", &[]).await?;
    let pp = PostParams::default();
    let classes: Api<StorageClass> = Api::all(client.clone());
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let (local, dynamic) = (format!("{ns}-local"), format!("{ns}-dynamic"));
    for (name, provisioner) in [
        (&local, "kubernetes.io/no-provisioner"),
        (&dynamic, "example.com/e2e"),
    ] {
        classes
            .create(
                &pp,
                &serde_json::from_value(json!({"metadata": {"name": name},
                    "provisioner": provisioner, "volumeBindingMode": "WaitForFirstConsumer"}))?,
            )
            .await?;
    }
    let local_volume = |name: &str, node: &str, class: &str, claim: serde_json::Value| {
        json!({"metadata": {"name": name}, "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": class, "local": {"path": "/mnt/e2e"}, "claimRef": claim,
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}})
    };
    let pv_b = format!("{ns}-pv-b");
    volumes
        .create(
            &pp,
            &serde_json::from_value(local_volume(&pv_b, &nodes[1], &local, json!(null)))?,
        )
        .await?;
    for (claim, class) in [("data", &local), ("scratch", &dynamic)] {
        claims
            .create(
                &pp,
                &serde_json::from_value(json!({"metadata": {"name": claim},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                             "resources": {"requests": {"storage": "1Gi"}}}}))?,
            )
            .await?;
    }
    let run = async {
        let with_claim = |name: &str, claim: &str| {
            let d = json!([{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]);
            pod_with_volumes(name, d, &nodes)
        };
        create_pod(&client, &ns, with_claim("db", "data")).await?;
        create_pod(&client, &ns, with_claim("cache", "scratch")).await?;
        // The static volume: the claim is bound by the PV controller, then the pod, to the
        // only node that can mount it.
        let placed = wait_bound(&client, &ns, 1, Duration::from_secs(60))
            .await
            .with_context(|| scorer.log_tail())?;
        assert_eq!(placed.get("db"), Some(&nodes[1]), "{placed:?}");
        let data = claims.get("data").await?;
        let status = data.status.as_ref().and_then(|s| s.phase.clone());
        assert_eq!(status.as_deref(), Some("Bound"), "{data:?}");
        assert_eq!(
            data.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
            Some(pv_b.as_str())
        );
        // The provisioned claim: annotated with a node, its pod held back meanwhile.
        let selected = eventually(
            "the selected-node annotation on claim scratch",
            Duration::from_secs(30),
            || async {
                let c = claims.get("scratch").await?;
                let node = c
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("volume.kubernetes.io/selected-node").cloned());
                Ok(node.ok_or_else(|| "not annotated yet".to_string()))
            },
        )
        .await
        .with_context(|| scorer.log_tail())?;
        assert!(nodes.contains(&selected), "{selected}");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cache = pods(&client, &ns).await?;
        let cache = cache.iter().find(|p| name_of(p) == "cache");
        assert_eq!(cache.and_then(node_of), None, "bound before its claim");
        // The provisioner's part: a volume on the selected node, pre-bound to the claim.
        let uid = claims
            .get("scratch")
            .await?
            .metadata
            .uid
            .unwrap_or_default();
        let provisioned = format!("{ns}-pv-provisioned");
        volumes
            .create(
                &pp,
                &serde_json::from_value(local_volume(
                    &provisioned,
                    &selected,
                    &dynamic,
                    json!({"namespace": ns, "name": "scratch", "uid": uid}),
                ))?,
            )
            .await?;
        let placed = wait_bound(&client, &ns, 2, Duration::from_secs(60))
            .await
            .with_context(|| scorer.log_tail())?;
        assert_eq!(placed.get("cache"), Some(&selected), "{placed:?}");
        eprintln!("placed {placed:?}; claim data on {pv_b}, scratch provisioned on {selected}");
        anyhow::Ok(provisioned)
    }
    .await;
    delete_pods_now(&client, &ns).await;
    let mut pvs = vec![pv_b];
    if let Ok(p) = &run {
        pvs.push(p.clone());
    }
    for pv in pvs {
        let _ = volumes.delete(&pv, &DeleteParams::default()).await;
    }
    for c in [&local, &dynamic] {
        let _ = classes.delete(c, &DeleteParams::default()).await;
    }
    delete_nodes(&client, &nodes).await;
    run.map(|_| ())
}

/// Generic ephemeral volumes, with the real kube-controller-manager's `ephemeral-volume`
/// controller creating each pod's claim and its `persistentvolume-binder` binding it (the
/// feature is alpha in 1.20: the API server and the controller run with its gate on). A pod
/// whose claim is not there yet waits for the controller, in upstream's words; a claim of
/// the right name that the pod does not control is refused; once the controller has created
/// the pod's claim, Loadstar binds it (`WaitForFirstConsumer`) to the only static volume
/// that fits, then the pod to that volume's node.
#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn ephemeral_volumes_wait_for_their_claim_then_bind_with_it() -> Result<()> {
    use e2e_support::kube_scheduler::KubeScheduler;
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::StorageClass;
    use kube::api::{DeleteParams, PostParams};
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let bin = e2e_support::required(
        "LOADSTAR_E2E_KUBE_CONTROLLER_MANAGER_BIN",
        "tests/e2e/run.sh",
    )?;
    let client = env.admin().await?;
    let ns = namespace(&client, "ephemeral").await?;
    let nodes = vec![format!("{ns}-a"), format!("{ns}-b")];
    for n in &nodes {
        create_node(&client, n, "8", "32Gi").await?;
    }
    let scorer = Scorer::start(&env, "ephemeral-1", "lease-ephemeral", &[]).await?;
    let pp = PostParams::default();
    let classes: Api<StorageClass> = Api::all(client.clone());
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let class = format!("{ns}-local");
    classes
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": class},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer"}))?,
        )
        .await?;
    let pv = format!("{ns}-pv-b");
    volumes
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": pv}, "spec": {
                "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "storageClassName": class, "local": {"path": "/mnt/e2e"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In",
                     "values": [nodes[1]]}]}]}}}}))?,
        )
        .await?;
    let run = async {
        let with_scratch = |name: &str| {
            let scratch = json!([{"name": "scratch", "ephemeral": {
                "volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"],
                    "storageClassName": class,
                    "resources": {"requests": {"storage": "1Gi"}}}}}}]);
            pod_with_volumes(name, scratch, &nodes)
        };
        // A claim named as `squat`'s ephemeral claim would be, created by someone else.
        claims
            .create(
                &pp,
                &serde_json::from_value(json!({"metadata": {"name": "squat-scratch"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                             "resources": {"requests": {"storage": "1Gi"}}}}))?,
            )
            .await?;
        let created = create_pod(&client, &ns, with_scratch("app")).await?;
        ensure!(
            created
                .spec
                .as_ref()
                .and_then(|s| s.volumes.as_ref())
                .is_some_and(|v| v.iter().any(|v| v.ephemeral.is_some())),
            "the API server dropped the ephemeral volume (is GenericEphemeralVolume on?)"
        );
        create_pod(&client, &ns, with_scratch("squat")).await?;
        let waiting = refusal(&client, &ns, "app")
            .await
            .with_context(|| scorer.log_tail())?;
        assert!(
            waiting.contains(
                "waiting for ephemeral volume controller to create the persistentvolumeclaim \
                 \"app-scratch\""
            ),
            "{waiting}"
        );
        let squatted = refusal(&client, &ns, "squat").await?;
        assert!(
            squatted.contains(&format!(
                "PVC {ns}/squat-scratch was not created for pod {ns}/squat (pod is not owner)"
            )),
            "{squatted}"
        );
        // The controllers: `app-scratch` created for `app`, then bound with it.
        let _controller = KubeScheduler::controller_manager(
            bin.as_ref(),
            &env.admin_kubeconfig,
            "ephemeral-volume,persistentvolume-binder",
            &["--feature-gates=GenericEphemeralVolume=true"],
            &env.logs,
            "kube-controller-manager-ephemeral",
        )?;
        let placed = wait_bound(&client, &ns, 1, Duration::from_secs(60))
            .await
            .with_context(|| scorer.log_tail())?;
        assert_eq!(placed.get("app"), Some(&nodes[1]), "{placed:?}");
        let claim = claims.get("app-scratch").await?;
        let owner = claim
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| (o.kind.clone(), o.uid.clone()));
        assert_eq!(
            owner,
            Some((
                "Pod".to_string(),
                created.metadata.uid.clone().unwrap_or_default()
            )),
            "{claim:?}"
        );
        assert_eq!(
            claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
            Some(pv.as_str())
        );
        // `squat` stays refused: the controller does not take over a claim it did not make.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let squat = pods(&client, &ns).await?;
        let squat = squat.iter().find(|p| name_of(p) == "squat");
        assert_eq!(squat.and_then(node_of), None);
        eprintln!("placed {placed:?}; claim app-scratch on {pv}");
        anyhow::Ok(())
    }
    .await;
    delete_pods_now(&client, &ns).await;
    let _ = volumes.delete(&pv, &DeleteParams::default()).await;
    let _ = classes.delete(&class, &DeleteParams::default()).await;
    delete_nodes(&client, &nodes).await;
    run
}

/// Storage capacity (`CSIStorageCapacity`, alpha in 1.20: the API server runs with the
/// gate and `storage.k8s.io/v1alpha1` on): a claim of a class whose CSI driver tracks
/// capacity is provisioned only on a node that reaches a pool with room for it — Loadstar
/// writes that node into the claim's `selected-node` for the provisioner. A claim no pool
/// can take leaves the pod unschedulable in upstream's words, until a pool grows (the watch
/// follows the change).
#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn storage_capacity_steers_provisioning_to_a_node_with_room() -> Result<()> {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
    use kube::api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
    };
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let ns = namespace(&client, "capacity").await?;
    let nodes = vec![format!("{ns}-a"), format!("{ns}-b")];
    for n in &nodes {
        create_node(&client, n, "8", "32Gi").await?;
    }
    let pp = PostParams::default();
    let driver = format!("{ns}.csi.example.com");
    let drivers: Api<CSIDriver> = Api::all(client.clone());
    drivers
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": driver},
                "spec": {"attachRequired": false, "storageCapacity": true}}))?,
        )
        .await?;
    let stored = drivers.get(&driver).await?;
    ensure!(
        stored.spec.storage_capacity == Some(true),
        "the API server dropped storageCapacity (is CSIStorageCapacity on?): {stored:?}"
    );
    let classes: Api<StorageClass> = Api::all(client.clone());
    let class = format!("{ns}-lvm");
    classes
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": class},
                "provisioner": driver, "volumeBindingMode": "WaitForFirstConsumer"}))?,
        )
        .await?;
    let pools: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "storage.k8s.io",
            "v1alpha1",
            "CSIStorageCapacity",
        )),
    );
    for (name, node, size) in [("pool-a", &nodes[0], "2Gi"), ("pool-b", &nodes[1], "10Gi")] {
        pools
            .create(
                &pp,
                &serde_json::from_value(json!({
                    "apiVersion": "storage.k8s.io/v1alpha1", "kind": "CSIStorageCapacity",
                    "metadata": {"name": name}, "storageClassName": class,
                    "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": node}},
                    "capacity": size}))?,
            )
            .await?;
    }
    let scorer = Scorer::start(&env, "capacity-1", "lease-capacity", &[]).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let run = async {
        for (claim, size) in [("big", "5Gi"), ("huge", "50Gi")] {
            claims
                .create(
                    &pp,
                    &serde_json::from_value(json!({"metadata": {"name": claim},
                        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                                 "resources": {"requests": {"storage": size}}}}))?,
                )
                .await?;
            let d = json!([{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]);
            create_pod(&client, &ns, pod_with_volumes(claim, d, &nodes)).await?;
        }
        let selected_node = |claim: &'static str| {
            let claims = claims.clone();
            move || {
                let claims = claims.clone();
                async move {
                    let c = claims.get(claim).await?;
                    let node = c
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get("volume.kubernetes.io/selected-node").cloned());
                    Ok(node.ok_or_else(|| "not annotated yet".to_string()))
                }
            }
        };
        // 5Gi: only b's pool has room.
        let big = eventually(
            "the selected-node annotation on claim big",
            Duration::from_secs(30),
            selected_node("big"),
        )
        .await
        .with_context(|| scorer.log_tail())?;
        assert_eq!(big, nodes[1]);
        // 50Gi: no pool has room.
        let why = refusal(&client, &ns, "huge")
            .await
            .with_context(|| scorer.log_tail())?;
        assert!(
            why.contains("node(s) did not have enough free storage"),
            "{why}"
        );
        let huge = claims.get("huge").await?;
        assert!(
            huge.metadata
                .annotations
                .as_ref()
                .is_none_or(|a| !a.contains_key("volume.kubernetes.io/selected-node")),
            "{huge:?}"
        );
        // a's pool grows: the watch follows, and the claim goes to a.
        pools
            .patch(
                "pool-a",
                &PatchParams::default(),
                &Patch::Merge(json!({"capacity": "100Gi"})),
            )
            .await?;
        let huge = eventually(
            "the selected-node annotation on claim huge",
            Duration::from_secs(30),
            selected_node("huge"),
        )
        .await
        .with_context(|| scorer.log_tail())?;
        assert_eq!(huge, nodes[0]);
        eprintln!("claim big provisioned on {big}, huge on {huge}");
        anyhow::Ok(())
    }
    .await;
    delete_pods_now(&client, &ns).await;
    let _ = classes.delete(&class, &DeleteParams::default()).await;
    let _ = drivers.delete(&driver, &DeleteParams::default()).await;
    delete_nodes(&client, &nodes).await;
    run
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn preemption_evicts_the_fewest_lower_priority_pods_spares_budgets_and_binds() -> Result<()> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    priority_classes(&client).await?;
    let ns = namespace(&client, "preempt").await?;
    let nodes = vec!["pre-a".to_string(), "pre-b".to_string()];
    for n in &nodes {
        create_node(&client, n, "4", "16Gi").await?;
    }
    // A budget with no disruption left (no disruption controller runs here: status unset
    // reads as 0 allowed) over the `guarded` pod.
    let budgets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "policy",
            "v1beta1",
            "PodDisruptionBudget",
        )),
    );
    let pdb: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "guard"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
    }))?;
    budgets.create(&PostParams::default(), &pdb).await?;
    // Both nodes full. pre-a: a mid- and a low-priority pod; pre-b: a high-priority pod and
    // a low-priority one under the budget. Victims go at once (grace 0: no kubelet here).
    let bound = |name: &str, node: &str, class: &str, app: &str| {
        let mut p = pod(name, Some("default-scheduler"), "2", MI);
        p["metadata"]["labels"]["app"] = json!(app);
        p["spec"]["nodeName"] = json!(node);
        p["spec"]["priorityClassName"] = json!(class);
        p["spec"]["terminationGracePeriodSeconds"] = json!(0);
        p
    };
    create_pods(
        &client,
        &ns,
        vec![
            bound("a-mid", "pre-a", "e2e-mid", "x"),
            bound("a-low", "pre-a", "e2e-low", "x"),
            bound("b-high", "pre-b", "e2e-high", "x"),
            bound("b-low", "pre-b", "e2e-low", "guarded"),
        ],
    )
    .await?;
    let scorer = Scorer::start(&env, "preempt-1", "lease-preempt", &[]).await?;
    let mut hi = pod("hi", Some(SCHEDULER), "2", MI);
    hi["spec"]["priorityClassName"] = json!("e2e-high");
    create_pod(&client, &ns, hi).await?;
    // Evicting a-low alone makes room on pre-a; pre-b would break the budget.
    let placed = eventually(
        "hi bound after preempting",
        Duration::from_secs(60),
        || async {
            let ps = pods(&client, &ns).await?;
            let names: Vec<String> = ps.iter().map(name_of).collect();
            Ok(
                match ps.iter().find(|p| name_of(p) == "hi").and_then(node_of) {
                    Some(n) => Ok((n, names)),
                    None => Err(format!("pods now: {names:?}")),
                },
            )
        },
    )
    .await
    .with_context(|| scorer.log_tail())?;
    assert_eq!(placed.0, "pre-a");
    let mut left = placed.1;
    left.sort();
    assert_eq!(
        left,
        vec!["a-mid", "b-high", "b-low", "hi"],
        "only a-low is evicted"
    );
    // Events go out through the scheduler's write queue, after the victim's delete: the
    // pod may bind before its victim's event is written, so wait for it.
    let expected = vec![format!("a-low: Preempted by {ns}/hi on node pre-a")];
    eventually("the Preempted event", Duration::from_secs(15), || async {
        let preempted: Vec<String> = events(&client, &ns)
            .await?
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("Preempted"))
            .map(|e| {
                format!(
                    "{}: {}",
                    e.involved_object.name.unwrap_or_default(),
                    e.message.unwrap_or_default()
                )
            })
            .collect();
        Ok(if preempted == expected {
            Ok(())
        } else {
            Err(format!("Preempted events now: {preempted:?}"))
        })
    })
    .await?;
    eventually(
        "hi's nominatedNodeName",
        Duration::from_secs(10),
        || async {
            let ps = pods(&client, &ns).await?;
            let nominated = ps
                .iter()
                .find(|p| name_of(p) == "hi")
                .and_then(|p| p.status.as_ref()?.nominated_node_name.clone());
            Ok(if nominated.as_deref() == Some("pre-a") {
                Ok(())
            } else {
                Err(format!("{nominated:?}"))
            })
        },
    )
    .await?;
    // A pod that may not preempt waits, and evicts nobody.
    let mut never = pod("never", Some(SCHEDULER), "2", MI);
    never["spec"]["priorityClassName"] = json!("e2e-high-never");
    create_pod(&client, &ns, never).await?;
    let reason = refusal(&client, &ns, "never").await?;
    ensure!(reason.contains("Insufficient cpu"), "{reason}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut now: Vec<String> = pods(&client, &ns).await?.iter().map(name_of).collect();
    now.sort();
    assert_eq!(now, vec!["a-mid", "b-high", "b-low", "hi", "never"]);
    // The pending high-priority pod must not take room in later tests' nodes.
    delete_pods_now(&client, &ns).await;
    delete_nodes(&client, &nodes).await;
    Ok(())
}

/// Affinity terms' `namespaceSelector` read the cluster's Namespace labels, and follow them
/// as they change. The 1.20 API server drops the field from stored pods (it came in 1.21),
/// so the pod carrying it is asked about through `Scorer.Score`'s `pod_json`; the pods it
/// selects are real pods Loadstar bound, and the labels come from the scorer's Namespace
/// watch (under the chart's RBAC).
#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn namespace_selectors_follow_the_clusters_namespace_labels() -> Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Patch, PatchParams};
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let team = namespace(&client, "nsel-team").await?;
    let other = namespace(&client, "nsel-other").await?;
    let tag = format!("t{:06x}", rand_u32() & 0xff_ffff);
    let label = |ns: String, value: Option<String>| {
        let client = client.clone();
        async move {
            Api::<Namespace>::all(client)
                .patch(
                    &ns,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {"e2e-team": value}}})),
                )
                .await
                .with_context(|| format!("labelling namespace {ns}"))
        }
    };
    label(team.clone(), Some(tag.clone())).await?;
    let nodes = vec![format!("nsel-{tag}-a"), format!("nsel-{tag}-b")];
    for n in &nodes {
        create_node(&client, n, "8", "32Gi").await?;
    }
    let scorer = Scorer::start(&env, "nsel-1", "lease-nsel", &[]).await?;
    // One web pod per namespace: the team's on node a, the other's on node b.
    for (ns, node) in [(&team, &nodes[0]), (&other, &nodes[1])] {
        let mut p = pod("web", Some(SCHEDULER), "100m", MI);
        p["metadata"]["labels"]["app"] = json!(tag);
        p["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": node});
        create_pod(&client, ns, p).await?;
        wait_bound(&client, ns, 1, Duration::from_secs(30))
            .await
            .with_context(|| scorer.log_tail())?;
    }
    // A pod of a third namespace that keeps off hosts running the team's web pods.
    let asking = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "asking", "namespace": "default", "uid": "nsel-u"},
        "spec": {"schedulerName": "nsel-nobody",
            "containers": [{"name": "c", "image": "registry.invalid/pause:3"}],
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname",
                 "labelSelector": {"matchLabels": {"app": tag}},
                 "namespaceSelector": {"matchLabels": {"e2e-team": tag}}}]}}}});
    let request = pb::ScoreRequest {
        pod: Some(pb::score_request::Pod::PodJson(asking.to_string())),
        candidate_nodes: nodes.clone(),
        ..Default::default()
    };
    let scorer_client = ScorerClient::connect(scorer.endpoint()).await?;
    let ranked_is = |want: Vec<&'static str>| {
        let request = request.clone();
        let scorer_client = scorer_client.clone();
        let nodes = nodes.clone();
        async move {
            let want: Vec<String> = want
                .iter()
                .map(|s| nodes[usize::from(*s == "b")].clone())
                .collect();
            eventually(
                &format!("Score ranks {want:?}"),
                Duration::from_secs(30),
                || {
                    let mut s = scorer_client.clone();
                    let req = request.clone();
                    let want = want.clone();
                    async move {
                        let r = match s.score(req).await {
                            Ok(r) => r.into_inner(),
                            Err(st) => return Ok(Err(format!("Score failed: {st}"))),
                        };
                        let mut ranked: Vec<String> =
                            r.ranked.iter().map(|n| n.node_name.clone()).collect();
                        ranked.sort();
                        let filtered: Vec<String> = r
                            .filtered
                            .iter()
                            .map(|f| format!("{}: {}: {}", f.node_name, f.plugin, f.reason))
                            .collect();
                        Ok(if ranked == want {
                            Ok(filtered)
                        } else {
                            Err(format!("ranked {ranked:?}; filtered {filtered:?}"))
                        })
                    }
                },
            )
            .await
        }
    };
    let run = async {
        // Only the team's namespace is labelled: node a is refused, by anti-affinity.
        let filtered = ranked_is(vec!["b"]).await?;
        ensure!(
            filtered
                .iter()
                .any(|f| f.starts_with(&nodes[0]) && f.contains("anti-affinity")),
            "{filtered:?}"
        );
        // The label moves to the other namespace: node b is refused instead.
        label(team.clone(), None).await?;
        label(other.clone(), Some(tag.clone())).await?;
        ranked_is(vec!["a"]).await?;
        // Both labelled: neither host, each for the anti-affinity.
        label(team.clone(), Some(tag.clone())).await?;
        let filtered = ranked_is(vec![]).await?;
        for node in &nodes {
            ensure!(
                filtered
                    .iter()
                    .any(|f| f.starts_with(node.as_str()) && f.contains("anti-affinity")),
                "{node}: {filtered:?}"
            );
        }
        anyhow::Ok(())
    };
    let result = run.await.with_context(|| scorer.log_tail());
    delete_nodes(&client, &nodes).await;
    result
}

/// Native sidecars (init containers with `restartPolicy: Always`) and pod-level
/// `spec.resources` count as upstream counts them: a sidecar's requests add to the
/// containers', a pod-level request replaces theirs. The 1.20 API server drops both fields
/// from stored pods (they came in 1.28 and 1.32), so the pods go through `Scorer.Score`'s
/// `pod_json`, against a real Node Loadstar watches.
#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn sidecars_and_pod_level_requests_count_as_upstream_counts_them() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let node = format!("side-{:06x}", rand_u32() & 0xff_ffff);
    create_node(&client, &node, "8", "32Gi").await?;
    let scorer = Scorer::start(&env, "side-1", "lease-side", &[]).await?;
    let scorer_client = ScorerClient::connect(scorer.endpoint()).await?;
    let cpu = |v: &str| json!({"requests": {"cpu": v}});
    let asking = |init: serde_json::Value, resources: Option<serde_json::Value>| {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "asking", "namespace": "default", "uid": "side-u"},
            "spec": {"schedulerName": "side-nobody",
                "containers": [{"name": "app", "image": "registry.invalid/app:1",
                                "resources": cpu("4")}],
                "initContainers": [init]}});
        if let Some(r) = resources {
            p["spec"]["resources"] = r;
        }
        p.to_string()
    };
    // On 8 CPUs: app 4 + a 5-CPU sidecar is 9 (1.20's max(4, 5) would fit); the same
    // container as an ordinary init container fits; a pod-level request of 9 (valid: at
    // least the containers' 5) does not.
    let sidecar = json!({"name": "proxy", "image": "registry.invalid/proxy:1",
        "restartPolicy": "Always", "resources": cpu("5")});
    let mut ordinary = sidecar.clone();
    ordinary
        .as_object_mut()
        .expect("object")
        .remove("restartPolicy");
    let cases = [
        ("sidecar", asking(sidecar, None), false),
        (
            "ordinary init container",
            asking(ordinary.clone(), None),
            true,
        ),
        (
            "pod-level request",
            asking(ordinary, Some(json!({"requests": {"cpu": "9"}}))),
            false,
        ),
    ];
    let run = async {
        for (what, pod_json, fits) in cases {
            score_until(
                &scorer_client,
                what,
                &pod_json,
                std::slice::from_ref(&node),
                |r| {
                    let ranked = r.ranked.iter().any(|n| n.node_name == node);
                    let insufficient = r.filtered.iter().any(|f| {
                        f.node_name == node
                            && f.plugin == "NodeResourcesFit"
                            && f.reason.contains("Insufficient cpu")
                    });
                    (fits && ranked) || (!fits && insufficient)
                },
            )
            .await?;
        }
        anyhow::Ok(())
    };
    let result = run.await.with_context(|| scorer.log_tail());
    delete_nodes(&client, &[node]).await;
    result
}

/// Adds `labels` to node `name`.
async fn label_node(client: &kube::Client, name: &str, labels: serde_json::Value) -> Result<()> {
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .with_context(|| format!("labelling node {name}"))?;
    Ok(())
}

/// The nodes a `Score` answer ranks, by name.
fn ranked_names(r: &pb::ScoreResponse) -> Vec<String> {
    let mut v: Vec<String> = r.ranked.iter().map(|n| n.node_name.clone()).collect();
    v.sort();
    v
}

/// Asks `Score` about `pod_json` over `nodes` until `accept` takes the answer (30 s); on a
/// timeout the error shows the last answer's ranked nodes and refusals.
async fn score_until(
    scorer: &ScorerClient<tonic::transport::Channel>,
    what: &str,
    pod_json: &str,
    nodes: &[String],
    accept: impl Fn(&pb::ScoreResponse) -> bool,
) -> Result<()> {
    let accept = &accept;
    eventually(what, Duration::from_secs(30), || {
        let mut s = scorer.clone();
        let req = pb::ScoreRequest {
            pod: Some(pb::score_request::Pod::PodJson(pod_json.to_string())),
            candidate_nodes: nodes.to_vec(),
            ..Default::default()
        };
        async move {
            let r = match s.score(req).await {
                Ok(r) => r.into_inner(),
                Err(st) => return Ok(Err(format!("Score failed: {st}"))),
            };
            if accept(&r) {
                return Ok(Ok(()));
            }
            let ranked: Vec<&str> = r.ranked.iter().map(|n| n.node_name.as_str()).collect();
            let filtered: Vec<String> = r
                .filtered
                .iter()
                .map(|f| format!("{}: {}: {}", f.node_name, f.plugin, f.reason))
                .collect();
            Ok(Err(format!("ranked {ranked:?}; filtered {filtered:?}")))
        }
    })
    .await
}

/// A spread constraint's `nodeTaintsPolicy: Honor` (1.26+) leaves out the domains of nodes
/// whose taints the pod does not tolerate. The 1.20 API server drops the field, so the
/// spreading pod goes through `Score`'s `pod_json`; the pods it counts are real pods Loadstar
/// bound, on real Nodes with a real taint.
#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn a_spread_constraints_taint_policy_leaves_out_untolerated_domains() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let ns = namespace(&client, "spread-policy").await?;
    let tag = format!("{:06x}", rand_u32() & 0xff_ffff);
    let zone_key = format!("e2e-zone-{tag}");
    let nodes: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|z| format!("pol-{tag}-{z}"))
        .collect();
    // Zone c's only node is tainted.
    for (i, n) in nodes.iter().enumerate() {
        let spec = if i == 2 {
            json!({"taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]})
        } else {
            json!({})
        };
        create_node_with(&client, n, "8", "32Gi", spec).await?;
        let zone = ["a", "b", "c"][i];
        label_node(&client, n, json!({zone_key.as_str(): zone})).await?;
    }
    let scorer = Scorer::start(&env, "pol-1", "lease-pol", &[]).await?;
    let scorer_client = ScorerClient::connect(scorer.endpoint()).await?;
    let run = async {
        // One web pod in zone a and one in zone b; zone c holds none.
        for node in &nodes[..2] {
            let mut p = pod(&format!("web-{node}"), Some(SCHEDULER), "100m", MI);
            p["metadata"]["labels"]["app"] = json!(tag);
            p["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": node});
            create_pod(&client, &ns, p).await?;
        }
        wait_bound(&client, &ns, 2, Duration::from_secs(30)).await?;
        let asking = |policy: Option<&str>| {
            let mut c = json!({"maxSkew": 1, "topologyKey": zone_key,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": tag}}});
            if let Some(p) = policy {
                c["nodeTaintsPolicy"] = json!(p);
            }
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "asking", "namespace": ns, "uid": "pol-u",
                             "labels": {"app": tag}},
                "spec": {"schedulerName": "pol-nobody",
                    "containers": [{"name": "c", "image": "registry.invalid/pause:3"}],
                    "topologySpreadConstraints": [c]}})
            .to_string()
        };
        let skewed = |r: &pb::ScoreResponse, node: &str| {
            r.filtered
                .iter()
                .any(|f| f.node_name == node && f.plugin == "PodTopologySpread")
        };
        // Ignore (the default, stated or not): zone c's 0 is the minimum, so a and b
        // (1 + 1 − 0 > 1) are refused for the skew; c is refused for its taint.
        for policy in [None, Some("Ignore")] {
            score_until(
                &scorer_client,
                &format!("{policy:?}: none fits"),
                &asking(policy),
                &nodes,
                |r| ranked_names(r).is_empty() && skewed(r, &nodes[0]) && skewed(r, &nodes[1]),
            )
            .await?;
        }
        // Honor: zone c does not count, the minimum is 1, a and b fit.
        score_until(
            &scorer_client,
            "Honor: a and b fit",
            &asking(Some("Honor")),
            &nodes,
            |r| ranked_names(r) == nodes[..2],
        )
        .await?;
        anyhow::Ok(())
    };
    let result = run.await.with_context(|| scorer.log_tail());
    delete_pods_now(&client, &ns).await;
    delete_nodes(&client, &nodes).await;
    result
}

/// `ImageLocality` (kube-scheduler's default score, in Loadstar's profiles since this
/// commit) against real Nodes whose `status.images` say where an image is: Loadstar's
/// `loadstar-requests` profile and kube-scheduler 1.20's default one both place a pod on
/// the node holding its image (written without a tag, listed by the node as `:latest`);
/// when the image moves to the other node (a status update, as a kubelet's after a pull and
/// an image garbage collection), Loadstar's next pod follows it.
#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn image_locality_places_pods_where_their_image_already_is() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let ns = namespace(&client, "img").await?;
    let nodes = [format!("{ns}-a"), format!("{ns}-b")];
    for n in &nodes {
        create_node(&client, n, "8", "32Gi").await?;
    }
    let node_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    // 100 GiB: whatever nodes earlier tests left in the cluster, the image's share of it
    // stays far above the plugin's 23 MiB floor.
    let set_images = |node: String, names: &'static [&'static str]| {
        let api = node_api.clone();
        async move {
            let images: Vec<serde_json::Value> = if names.is_empty() {
                vec![]
            } else {
                vec![json!({"names": names, "sizeBytes": 100i64 << 30})]
            };
            let patch = json!({"status": {"images": images}});
            api.patch_status(
                &node,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .with_context(|| format!("setting {node}'s images"))
        }
    };
    const MODEL: &[&str] = &["e2e.invalid/model:latest", "e2e.invalid/model@sha256:00"];
    set_images(nodes[1].clone(), MODEL).await?;
    let pod = |name: &str, scheduler: &str| {
        json!({"metadata": {"name": name}, "spec": {
            "schedulerName": scheduler,
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname",
                    "operator": "In", "values": &nodes}]}]}}},
            "containers": [{"name": "c", "image": "e2e.invalid/model",
                "resources": {"requests": {"cpu": "100m", "memory": MI}}}]}})
    };
    let peer = format!("{ns}-kube-scheduler");
    let bin = e2e_support::required("LOADSTAR_E2E_KUBE_SCHEDULER_BIN", "tests/e2e/run.sh")?;
    let config = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1beta1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: {}
profiles:
- schedulerName: {peer}
",
        env.admin_kubeconfig.display()
    );
    let scorer = Scorer::start(&env, "img-1", "lease-img", &[]).await?;
    let run = async {
        {
            let kube = e2e_support::kube_scheduler::KubeScheduler::start_with(
                bin.as_ref(),
                &config,
                &env.logs,
                "kube-scheduler-img",
            )?;
            create_pod(&client, &ns, pod("by-kube-scheduler", &peer)).await?;
            create_pod(&client, &ns, pod("by-loadstar", "loadstar-requests")).await?;
            let bound = wait_bound(&client, &ns, 2, Duration::from_secs(60))
                .await
                .with_context(|| kube.log_tail())?;
            for name in ["by-kube-scheduler", "by-loadstar"] {
                ensure!(
                    bound.get(name) == Some(&nodes[1]),
                    "{name} should be on {} (it holds the image): {bound:?}",
                    nodes[1]
                );
            }
        }
        // The image moves: Loadstar sees it through its Node watch before the next pod.
        set_images(nodes[1].clone(), &[]).await?;
        set_images(nodes[0].clone(), MODEL).await?;
        let scorer_client = ScorerClient::connect(scorer.endpoint()).await?;
        let image_score = |r: &pb::ScoreResponse, node: &str| {
            r.ranked
                .iter()
                .find(|n| n.node_name == node)
                .and_then(|n| n.plugins.iter().find(|p| p.plugin == "ImageLocality"))
                .map(|p| p.score)
        };
        let probe = serde_json::to_string(&json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "probe", "namespace": &ns, "uid": "img-probe"},
        "spec": {"containers": [{"name": "c", "image": "e2e.invalid/model"}]}}))?;
        score_until(
            &scorer_client,
            "the image's move seen",
            &probe,
            &nodes,
            |r| {
                image_score(r, &nodes[0]).is_some_and(|s| s > 0)
                    && image_score(r, &nodes[1]) == Some(0)
            },
        )
        .await?;
        create_pod(&client, &ns, pod("after-the-move", "loadstar-requests")).await?;
        let bound = wait_bound(&client, &ns, 3, Duration::from_secs(30)).await?;
        ensure!(
            bound.get("after-the-move") == Some(&nodes[0]),
            "after-the-move should follow the image to {}: {bound:?}",
            nodes[0]
        );
        anyhow::Ok(())
    };
    let result = run.await.with_context(|| scorer.log_tail());
    delete_pods_now(&client, &ns).await;
    delete_nodes(&client, &nodes).await;
    result
}

/// Topology spread counts as the cluster's own kube-scheduler release does, read from the
/// API server's `/version`: on this 1.20 server, a constraint that states no node inclusion
/// policy counts the pods of a node the pod's node affinity excludes when that node's
/// domain is eligible (releases from 1.24 would not); one that states
/// `nodeAffinityPolicy: Honor` leaves them out. Zone b: an SSD node (empty) and a plain
/// node with two web pods Loadstar bound; zone c: an empty SSD node. The pod needs an SSD.
#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn spread_counts_as_the_clusters_release_does() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let ns = namespace(&client, "release").await?;
    let tag = format!("{:06x}", rand_u32() & 0xff_ffff);
    let zone_key = format!("e2e-zone-{tag}");
    let nodes: Vec<String> = ["b1", "b2", "c1"]
        .iter()
        .map(|n| format!("rel-{tag}-{n}"))
        .collect();
    for (n, (zone, ssd)) in nodes.iter().zip([("b", true), ("b", false), ("c", true)]) {
        create_node(&client, n, "8", "32Gi").await?;
        let mut labels = json!({zone_key.as_str(): zone});
        if ssd {
            labels["disk"] = json!(format!("ssd-{tag}"));
        }
        label_node(&client, n, labels).await?;
    }
    let scorer = Scorer::start(&env, "rel-1", "lease-rel", &[]).await?;
    let scorer_client = ScorerClient::connect(scorer.endpoint()).await?;
    let run = async {
        for i in 0..2 {
            let mut p = pod(&format!("web-{i}"), Some(SCHEDULER), "100m", MI);
            p["metadata"]["labels"]["app"] = json!(tag);
            p["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": nodes[1]});
            create_pod(&client, &ns, p).await?;
        }
        wait_bound(&client, &ns, 2, Duration::from_secs(30)).await?;
        let asking = |policy: Option<&str>| {
            let mut c = json!({"maxSkew": 1, "topologyKey": zone_key,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": tag}}});
            if let Some(p) = policy {
                c["nodeAffinityPolicy"] = json!(p);
            }
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "asking", "namespace": ns, "uid": "rel-u",
                             "labels": {"app": tag}},
                "spec": {"schedulerName": "rel-nobody",
                    "nodeSelector": {"disk": format!("ssd-{tag}")},
                    "containers": [{"name": "c", "image": "registry.invalid/pause:3"}],
                    "topologySpreadConstraints": [c]}})
            .to_string()
        };
        // 1.20: zone b counts b2's 2 pods, zone c 0: b1 is refused for the skew.
        score_until(
            &scorer_client,
            "unstated, as 1.20: only c1 fits",
            &asking(None),
            &nodes,
            |r| {
                ranked_names(r) == [nodes[2].clone()]
                    && r.filtered
                        .iter()
                        .any(|f| f.node_name == nodes[0] && f.plugin == "PodTopologySpread")
            },
        )
        .await?;
        // Stated Honor: b2's pods are left out, zone b is 0, b1 fits too.
        score_until(
            &scorer_client,
            "Honor: b1 and c1 fit",
            &asking(Some("Honor")),
            &nodes,
            |r| ranked_names(r) == [nodes[0].clone(), nodes[2].clone()],
        )
        .await?;
        anyhow::Ok(())
    };
    let result = run.await.with_context(|| scorer.log_tail());
    delete_pods_now(&client, &ns).await;
    delete_nodes(&client, &nodes).await;
    result
}

/// The StepScaler's `/scale` write (`loadstar_autoscaler::controller::scale_patch`) is
/// conditional on the resourceVersion its poll read: the real API server applies it while
/// the target is unchanged and refuses it with 409 once anything has written the target
/// since, so a decision never overwrites a newer replica count (the controller's handling
/// of that 409 is a unit test beside it). Deterministic because nothing else writes the
/// Deployment here: this suite runs no Deployment controller, whose status writes would also
/// move its resourceVersion.
#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn a_stale_scale_write_is_refused() -> Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Patch, PatchParams, PostParams};
    use loadstar_autoscaler::controller::scale_patch;

    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let ns = namespace(&client, "scale").await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "loadstar/none"}]}
            }
        }
    }))?;
    deployments.create(&PostParams::default(), &d).await?;
    let read = deployments.get_scale("web").await?;
    let read_version = read.metadata.resource_version.clone();
    ensure!(read_version.is_some(), "the scale has no resourceVersion");
    let pp = PatchParams::default();
    // Unchanged since the read: applied.
    let written = deployments
        .patch_scale(
            "web",
            &pp,
            &Patch::Merge(scale_patch(read_version.as_deref(), 4)),
        )
        .await?;
    ensure!(
        written.spec.and_then(|s| s.replicas) == Some(4),
        "the conditional write was not applied"
    );
    // A second decision from the same read, now stale: refused, the count kept.
    match deployments
        .patch_scale(
            "web",
            &pp,
            &Patch::Merge(scale_patch(read_version.as_deref(), 6)),
        )
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        other => anyhow::bail!("a stale /scale write was not refused with 409: {other:?}"),
    }
    let now = deployments.get_scale("web").await?;
    ensure!(
        now.spec.and_then(|s| s.replicas) == Some(4),
        "the refused write changed the replica count"
    );
    // Without a version (a scale that carries none) the write is unconditional.
    deployments
        .patch_scale("web", &pp, &Patch::Merge(scale_patch(None, 5)))
        .await?;
    ensure!(
        deployments
            .get_scale("web")
            .await?
            .spec
            .and_then(|s| s.replicas)
            == Some(5),
        "the unconditional write was not applied"
    );
    Ok(())
}
