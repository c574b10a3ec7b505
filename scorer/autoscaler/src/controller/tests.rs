//! The controller's tests: requests and pod views, and polls over a fake API server (a
//! write, someone else's write between the read and it, a refusal, a stop).
use super::*;

fn pod(phase: &str, cpu: &[&str], deleting: bool) -> Pod {
    let containers: Vec<Value> = cpu
        .iter()
        .enumerate()
        .map(|(i, c)| json!({"name": format!("c{i}"), "resources": {"requests": {"cpu": c, "memory": "64Mi"}}}))
        .collect();
    let mut v = json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"containers": containers},
        "status": {"phase": phase}
    });
    if deleting {
        v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    }
    serde_json::from_value(v).expect("pod")
}

#[test]
fn requests_sum_over_containers() {
    let p = pod("Running", &["250m", "0.5"], false);
    assert!((pod_request(&p, "cpu") - 0.75).abs() < 1e-9);
    assert_eq!(pod_request(&p, "memory"), 2.0 * 64.0 * 1024.0 * 1024.0);
    assert_eq!(pod_request(&p, "nvidia.com/gpu"), 0.0);
    // A native sidecar counts; an ordinary init container, which has exited, does not.
    let mut p = pod("Running", &["250m"], false);
    p.spec.as_mut().expect("spec").init_containers = Some(
        serde_json::from_value(json!([
            {"name": "setup", "resources": {"requests": {"cpu": "2"}}},
            {"name": "proxy", "restartPolicy": "Always",
             "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}}}
        ]))
        .expect("init containers"),
    );
    assert!((pod_request(&p, "cpu") - 0.75).abs() < 1e-9);
    // A pod-level request stands for the containers; other resources still sum them.
    p.spec.as_mut().expect("spec").resources =
        Some(serde_json::from_value(json!({"requests": {"cpu": "2"}})).expect("resources"));
    assert!((pod_request(&p, "cpu") - 2.0).abs() < 1e-9);
    assert_eq!(pod_request(&p, "memory"), 2.0 * 64.0 * 1024.0 * 1024.0);
    // One container without a request leaves the pod's undefined (0: missing).
    let mut p = pod("Running", &["250m"], false);
    p.spec
        .as_mut()
        .expect("spec")
        .containers
        .push(serde_json::from_value(json!({"name": "bare"})).expect("container"));
    assert_eq!(pod_request(&p, "cpu"), 0.0);
}

/// A fake API server for one Deployment `ns/web` with two Running pods requesting 1 CPU
/// each. A fake only to place writes by others between the controller's read and its
/// write, which against the real API server is a race; `scale_patch`'s precondition is
/// checked against the real one in the e2e suite (`a_stale_scale_write_is_refused`).
#[derive(Default)]
struct Fake {
    /// The target's (resourceVersion, replicas) as each read of its scale finds it, the
    /// last repeated: after the n-th read the target is at entry n, as if someone wrote
    /// it just after the controller read it.
    versions: Vec<(&'static str, i32)>,
    reads: usize,
    /// The answer to every `/scale` write, instead of the precondition's.
    refuse: Option<u16>,
    /// What it was asked: method, path and query, JSON body.
    seen: Vec<(String, String, Value)>,
    /// Run when a `/scale` write is refused for its version (e.g. the controller stops).
    on_conflict: Option<Box<dyn Fn() + Send>>,
}

type Shared = Arc<std::sync::Mutex<Fake>>;

fn fake(versions: Vec<(&'static str, i32)>, refuse: Option<u16>) -> Shared {
    Arc::new(std::sync::Mutex::new(Fake {
        versions,
        refuse,
        ..Fake::default()
    }))
}

fn asked(f: &Shared) -> Vec<(String, String, Value)> {
    f.lock().expect("fake").seen.clone()
}

fn status_reply(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
           "code": code, "message": format!("{reason} (fake)")})
}

/// The API server's answer to `method path` with `body`.
fn answer(f: &mut Fake, method: &str, path: &str, body: Value) -> (u16, Value) {
    let scale = |(rv, replicas): (&str, i32)| {
        json!({
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": "web", "namespace": "ns", "resourceVersion": rv},
            "spec": {"replicas": replicas},
            "status": {"replicas": replicas, "selector": "app=web"}
        })
    };
    let at = |i: usize, v: &[(&'static str, i32)]| v[i.min(v.len() - 1)];
    let pod = |uid: &str| {
        json!({
            "metadata": {"name": uid, "namespace": "ns", "uid": uid},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"}
        })
    };
    match (method, path) {
        ("GET", "/apis/apps/v1") => (
            200,
            json!({
                "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1",
                "resources": [
                    {"name": "deployments", "singularName": "", "namespaced": true,
                     "kind": "Deployment", "verbs": ["get", "list", "patch"]},
                    {"name": "deployments/scale", "singularName": "", "namespaced": true,
                     "group": "autoscaling", "version": "v1", "kind": "Scale",
                     "verbs": ["get", "patch", "update"]}
                ]
            }),
        ),
        ("GET", "/apis/apps/v1/namespaces/ns/deployments/web/scale") => {
            let found = at(f.reads, &f.versions);
            f.reads += 1;
            (200, scale(found))
        }
        ("PATCH", "/apis/apps/v1/namespaces/ns/deployments/web/scale") => {
            let (current, _) = at(f.reads, &f.versions);
            let asked = body["metadata"]["resourceVersion"].as_str();
            match f.refuse {
                Some(code) => (code, status_reply(code, "Refused")),
                None if asked.is_some_and(|v| v != current) => {
                    if let Some(hook) = &f.on_conflict {
                        hook();
                    }
                    (409, status_reply(409, "Conflict"))
                }
                None => {
                    let replicas = body["spec"]["replicas"].as_i64().unwrap_or(0) as i32;
                    (200, scale((current, replicas)))
                }
            }
        }
        ("GET", "/api/v1/namespaces/ns/pods") => (
            200,
            json!({"kind": "PodList", "apiVersion": "v1", "metadata": {},
                   "items": [pod("p1"), pod("p2")]}),
        ),
        ("POST", "/api/v1/namespaces/ns/events") => (201, body),
        ("PATCH", "/apis/loadstar.io/v1alpha1/namespaces/ns/stepscalers/s/status") => {
            (200, scaler())
        }
        _ => (404, status_reply(404, "NotFound")),
    }
}

fn fake_api(f: Shared) -> Client {
    let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let f = f.clone();
        async move {
            use http_body_util::BodyExt;
            let method = req.method().to_string();
            let path = req.uri().path().to_string();
            let uri = req.uri().to_string();
            let body = req.into_body().collect().await?.to_bytes();
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let (code, reply) = {
                let mut f = f.lock().expect("fake");
                f.seen.push((method.clone(), uri, body.clone()));
                answer(&mut f, &method, &path, body)
            };
            let reply = http::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(kube::client::Body::from(serde_json::to_vec(&reply)?))?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(reply)
        }
    });
    Client::new(svc, "default")
}

fn scaler() -> Value {
    json!({
        "apiVersion": "loadstar.io/v1alpha1", "kind": "StepScaler",
        "metadata": {"name": "s", "namespace": "ns", "uid": "u-s", "generation": 1},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "targetUtilizationPercent": 60, "minReplicas": 2, "maxReplicas": 10, "step": 2,
            "pollPeriodSeconds": 15, "scaleOutCooldownSeconds": 30
        }
    })
}

const NOW_S: f64 = 1_000.0;

/// A controller over the fake, both pods at 95 % of their request for the last 15 s, and
/// the stop flag's sender (the leadership is held).
fn controller(client: Client) -> (Controller, watch::Sender<bool>) {
    let book: SharedBook = Arc::new(std::sync::Mutex::new(
        loadstar_autoscale::usage::PodUsageBook::new(Default::default()),
    ));
    for uid in ["p1", "p2"] {
        for t in 0..15 {
            let r = loadstar_autoscale::usage::Reading::new(NOW_S - f64::from(t), 0.95, 1e6);
            lock(&book).record("n1", 1.0, uid, r);
        }
    }
    let (stop_tx, stop) = watch::channel(false);
    let c = Controller {
        targets: Targets::new(client.clone()),
        client,
        book,
        config: ControllerConfig::new("test"),
        metrics: Metrics::new(),
        history: std::sync::Mutex::new(HashMap::new()),
        writes: WriteGate {
            stop,
            leadership: loadstar_kube_client::leader::always_leader("test"),
        },
    };
    (c, stop_tx)
}

fn obj() -> DynamicObject {
    serde_json::from_value(scaler()).expect("StepScaler")
}

fn writes_to<'a>(seen: &'a [(String, String, Value)], suffix: &str) -> Vec<&'a Value> {
    seen.iter()
        .filter(|(m, u, _)| {
            m == "PATCH" && u.split('?').next().is_some_and(|p| p.ends_with(suffix))
        })
        .map(|(_, _, b)| b)
        .collect()
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

fn warnings(seen: &[(String, String, Value)]) -> Vec<&Value> {
    seen.iter()
        .filter(|(m, _, b)| m == "POST" && b["type"] == "Warning")
        .map(|(_, _, b)| &b["reason"])
        .collect()
}

#[tokio::test]
async fn a_scale_write_names_the_version_it_was_decided_from() {
    let f = fake(vec![("41", 2)], None);
    let (c, _stop) = controller(fake_api(f.clone()));
    let (next, outcome) = c.reconcile(&obj(), NOW_S).await;
    assert_eq!((next, outcome), (15.0, "scaled"));
    let seen = asked(&f);
    // 95 % of 2 × 1 CPU against 60 %: ceil(1.9 / 0.6 + 2) = 6.
    assert_eq!(
        writes_to(&seen, "/scale"),
        [&json!({"metadata": {"resourceVersion": "41"}, "spec": {"replicas": 6}})]
    );
    // The scale-out's cool-down started.
    assert_eq!(c.history("u-s").0, Some(NOW_S));
    let status = writes_to(&seen, "/status");
    assert_eq!(status.len(), 1);
    assert_eq!(status[0]["status"]["lastDecision"]["applied"], json!(true));
}

#[tokio::test]
async fn a_target_written_since_the_read_with_its_count_unchanged_is_scaled_still() {
    // Its status (say) was written just after the read: same count, new version.
    let f = fake(vec![("41", 2), ("42", 2)], None);
    let (c, _stop) = controller(fake_api(f.clone()));
    assert_eq!(c.reconcile(&obj(), NOW_S).await, (15.0, "scaled"));
    let seen = asked(&f);
    assert_eq!(
        writes_to(&seen, "/scale"),
        [
            &json!({"metadata": {"resourceVersion": "41"}, "spec": {"replicas": 6}}),
            &json!({"metadata": {"resourceVersion": "42"}, "spec": {"replicas": 6}})
        ]
    );
    assert_eq!(c.history("u-s").0, Some(NOW_S));
    // Written over at every try: a failure after three writes, with its Warning.
    let f = fake(vec![("41", 2), ("42", 2), ("43", 2), ("44", 2)], None);
    let (c, _stop) = controller(fake_api(f.clone()));
    assert_eq!(c.reconcile(&obj(), NOW_S).await, (15.0, "failed"));
    let seen = asked(&f);
    assert_eq!(
        writes_to(&seen, "/scale").len(),
        SCALE_WRITE_ATTEMPTS as usize
    );
    assert_eq!(warnings(&seen), [&json!("FailedRescale")]);
    assert_eq!(
        c.history("u-s"),
        (None, None),
        "no cool-down without a write"
    );
}

#[tokio::test]
async fn a_count_changed_since_the_read_is_not_overwritten() {
    // Someone scaled it to 3 just after the read.
    let f = fake(vec![("41", 2), ("42", 3)], None);
    let (c, _stop) = controller(fake_api(f.clone()));
    let (next, outcome) = c.reconcile(&obj(), NOW_S).await;
    assert_eq!((next, outcome), (CONFLICT_RETRY_S, "conflict"));
    assert_eq!(
        c.history("u-s"),
        (None, None),
        "no cool-down after a refused write"
    );
    let seen = asked(&f);
    assert_eq!(writes_to(&seen, "/scale").len(), 1, "one write, refused");
    let status = writes_to(&seen, "/status");
    assert_eq!(status.len(), 1);
    let s = &status[0]["status"];
    assert_eq!(s["lastDecision"]["applied"], json!(false));
    assert_eq!(
        s["currentReplicas"],
        json!(3),
        "the count found, not the stale one"
    );
    assert_eq!(s["lastScaleOutTime"], Value::Null);
    let able = condition(s, ABLE_TO_SCALE);
    assert_eq!(
        (&able["status"], &able["reason"]),
        (&json!("True"), &json!("ScaleChanged"))
    );
    // No Warning for it: someone else's write is not a failure.
    assert!(warnings(&seen).is_empty(), "{seen:?}");
}

#[tokio::test]
async fn other_refusals_are_failures() {
    for (versions, refuse) in [
        (vec![("41", 2)], 403),
        // A 409 to an unconditional write (a scale without a version) did not come from
        // a stale read: a failure, not a retry.
        (vec![("", 2)], 409),
    ] {
        let f = fake(versions, Some(refuse));
        let (c, _stop) = controller(fake_api(f.clone()));
        assert_eq!(c.reconcile(&obj(), NOW_S).await, (15.0, "failed"));
        assert_eq!(c.history("u-s"), (None, None));
        let seen = asked(&f);
        assert_eq!(writes_to(&seen, "/scale").len(), 1);
        assert_eq!(warnings(&seen), [&json!("FailedRescale")]);
        let status = writes_to(&seen, "/status");
        let able = condition(&status[0]["status"], ABLE_TO_SCALE);
        assert_eq!(able["reason"], json!("FailedUpdateScale"));
    }
}

#[tokio::test]
async fn a_stopping_controller_writes_no_decision() {
    let f = fake(vec![("41", 2)], None);
    let (c, stop) = controller(fake_api(f.clone()));
    stop.send_replace(true);
    assert_eq!(c.reconcile(&obj(), NOW_S).await, (15.0, "stopped"));
    let seen = asked(&f);
    // It read the target and its pods, and wrote nothing: no scale, no status.
    assert!(
        seen.iter()
            .any(|(m, u, _)| m == "GET" && u.ends_with("/scale"))
    );
    assert!(!seen.iter().any(|(m, _, _)| m == "PATCH"), "{seen:?}");
}

#[tokio::test]
async fn a_replica_that_stops_during_its_write_leaves_the_status_to_the_next_leader() {
    // Its write is refused because the count moved (the next leader scaled), and it stopped
    // (lost the Lease) meanwhile: it must not write its status over the next leader's.
    let f = fake(vec![("41", 2), ("42", 4)], None);
    let (c, stop) = controller(fake_api(f.clone()));
    f.lock().expect("fake").on_conflict = Some(Box::new(move || {
        stop.send_replace(true);
    }));
    assert_eq!(c.reconcile(&obj(), NOW_S).await, (15.0, "stopped"));
    let seen = asked(&f);
    assert_eq!(writes_to(&seen, "/scale").len(), 1);
    assert!(writes_to(&seen, "/status").is_empty(), "{seen:?}");
    assert!(warnings(&seen).is_empty(), "{seen:?}");
}

#[test]
fn the_scale_patch_is_conditional_when_the_version_is_known() {
    assert_eq!(
        scale_patch(Some("7"), 3),
        json!({"metadata": {"resourceVersion": "7"}, "spec": {"replicas": 3}})
    );
    assert_eq!(scale_patch(None, 3), json!({"spec": {"replicas": 3}}));
    assert_eq!(scale_patch(Some(""), 3), json!({"spec": {"replicas": 3}}));
}

#[test]
fn finished_and_deleting_pods_do_not_count() {
    let v = pod_view(&pod("Running", &["1"], false), "cpu").expect("counts");
    assert!(v.running);
    assert_eq!((v.name.as_str(), v.uid.as_str()), ("ns/p", "u1"));
    assert!(
        !pod_view(&pod("Pending", &["1"], false), "cpu")
            .expect("counts")
            .running
    );
    assert!(pod_view(&pod("Succeeded", &["1"], false), "cpu").is_none());
    assert!(pod_view(&pod("Failed", &["1"], false), "cpu").is_none());
    assert!(pod_view(&pod("Running", &["1"], true), "cpu").is_none());
}
