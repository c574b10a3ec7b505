//! The StepScaler control loop: watches every StepScaler, and while this scorer holds the
//! StepScaler Lease polls each one at its period (and at once when its spec changes): reads
//! the target's `scale`, lists its pods by the scale's selector, averages their usage from
//! the book over the period, runs [`loadstar_autoscale::poll::poll`], writes the replica count
//! through `/scale` (unless dry-run), records an Event on every scaling and on every change of
//! condition, and writes the status. One bad StepScaler (invalid spec, missing target, no
//! `/scale`) only sets its own conditions; the loop goes on.
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use loadstar_autoscale::poll::{Outcome, PodView, PollSettings, poll};
use loadstar_autoscale::spec::{DEFAULT_POLL_PERIOD_S, StepScalerSpec};
use loadstar_autoscale::step::StepTolerance;
use loadstar_common::quantity;
use loadstar_kube_client::leader::Leadership;
use loadstar_store::metrics::{Metrics, ResultLabel};
use serde_json::{Value, json};
use tokio::sync::watch;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::feed::unix_now_s;
use crate::status::{ABLE_TO_SCALE, SCALING_ACTIVE, StepScalerStatus, VALID, rfc3339, unix_s};
use crate::target::Targets;
use crate::{SharedBook, lock};

/// The StepScaler resource.
pub fn api_resource() -> ApiResource {
    ApiResource {
        group: "loadstar.io".into(),
        version: "v1alpha1".into(),
        api_version: "loadstar.io/v1alpha1".into(),
        kind: "StepScaler".into(),
        plural: "stepscalers".into(),
    }
}

/// The controller's settings.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// A pod whose newest usage sample is older than this is unmeasured (default 10 s: ten
    /// missed 1 Hz reports, or a scorer-paced agent well past its interval).
    pub stale_s: f64,
    /// How often due StepScalers are looked for (default 1 s).
    pub tick: Duration,
    /// `source.component` of its Events and the status field manager.
    pub component: String,
    /// `reportingInstance` of its Events (the scorer's identity).
    pub instance: String,
}

impl ControllerConfig {
    /// Defaults for `instance`.
    pub fn new(instance: &str) -> ControllerConfig {
        ControllerConfig {
            stale_s: 10.0,
            tick: Duration::from_secs(1),
            component: "loadstar-stepscaler".into(),
            instance: instance.into(),
        }
    }
}

/// How soon a StepScaler whose `/scale` write met a conflict is polled again, seconds (at
/// most its period).
const CONFLICT_RETRY_S: f64 = 2.0;

/// Writes of one decision to `/scale` at most, when others keep writing the target without
/// changing its count.
const SCALE_WRITE_ATTEMPTS: u32 = 3;

/// How a decision's `/scale` write ended.
#[derive(Debug)]
enum Written {
    /// The count was written.
    Applied,
    /// The replica is stopping or lost the Lease: nothing (more) written.
    Stopped,
    /// Someone else changed the count (to this) or the selector since the poll read it: not
    /// overwritten.
    Moved(u32),
    /// The write failed, or kept conflicting: why.
    Failed(String),
}

/// When each StepScaler is next due, and the spec generation last polled.
#[derive(Debug, Clone, Copy)]
struct Due {
    at_s: f64,
    generation: Option<i64>,
}

/// When each StepScaler (by UID) last scaled out and in, as this process decided.
type History = HashMap<String, (Option<f64>, Option<f64>)>;

struct Controller {
    client: Client,
    book: SharedBook,
    targets: Targets,
    config: ControllerConfig,
    metrics: Arc<Metrics>,
    history: std::sync::Mutex<History>,
    writes: WriteGate,
}

/// Whether this replica may still scale: not stopping and still holding the Lease. Read just
/// before each `/scale` write, so that a pass under way when the replica stops or loses the
/// Lease (after which another replica may poll and scale the same targets) writes no
/// decision made before.
struct WriteGate {
    stop: watch::Receiver<bool>,
    leadership: watch::Receiver<Leadership>,
}

impl WriteGate {
    fn open(&self) -> bool {
        !*self.stop.borrow() && self.leadership.borrow().is_leader
    }
}

/// Runs the controller until `shutdown` resolves; polls only while `leadership` says so.
pub async fn run(
    client: Client,
    book: SharedBook,
    mut leadership: watch::Receiver<Leadership>,
    config: ControllerConfig,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let ar = api_resource();
    let writer: Writer<DynamicObject> = Writer::new(ar.clone());
    let reader = writer.as_reader();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let watch = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    let watching = tokio::spawn(async move {
        futures::pin_mut!(watch);
        let mut failing = false;
        while let Some(ev) = watch.next().await {
            match ev {
                Ok(_) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    warn!(error = %e, "watching StepScalers failed (is the CRD installed? \
                          deploy/helm/loadstar/crds; RBAC: list/watch stepscalers.loadstar.io); \
                          retrying with backoff");
                }
                Err(_) => {}
            }
        }
    });
    // The stop as a flag the pass and each write can read, as well as wait for.
    let (stopped_tx, mut stop) = watch::channel(false);
    let stopping = tokio::spawn(async move {
        shutdown.await;
        let _ = stopped_tx.send(true);
    });
    let c = Controller {
        targets: Targets::new(client.clone()),
        client,
        book,
        config,
        metrics,
        history: std::sync::Mutex::new(HashMap::new()),
        writes: WriteGate {
            stop: stop.clone(),
            leadership: leadership.clone(),
        },
    };
    let mut due: HashMap<String, Due> = HashMap::new();
    let mut tick = tokio::time::interval(c.config.tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    info!("StepScaler controller started");
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            _ = tick.tick() => {}
        }
        if !leadership.borrow_and_update().is_leader {
            // A new leader polls everything at once: its predecessor's schedule is unknown.
            due.clear();
            continue;
        }
        let now_s = unix_now_s();
        let objects = reader.state();
        due.retain(|k, _| objects.iter().any(|o| key(o) == *k));
        c.forget_missing(&objects);
        for obj in objects {
            // A stop or a lost Lease ends the pass before the next StepScaler: once the Lease
            // is released or taken, another replica may be polling (and scaling) them all.
            if !c.writes.open() {
                break;
            }
            let k = key(&obj);
            let generation = obj.metadata.generation;
            if due
                .get(&k)
                .is_some_and(|d| d.at_s > now_s && d.generation == generation)
            {
                continue;
            }
            let span = info_span!("stepscaler", scaler = %k);
            let (period, outcome) = c.reconcile(&obj, now_s).instrument(span).await;
            c.metrics
                .stepscaler_polls
                .get_or_create(&ResultLabel {
                    result: outcome.into(),
                })
                .inc();
            due.insert(
                k,
                Due {
                    at_s: now_s + period,
                    generation,
                },
            );
        }
    }
    watching.abort();
    stopping.abort();
    info!("StepScaler controller stopped");
}

fn key(o: &DynamicObject) -> String {
    format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any())
}

/// The pod's request for `resource` (cores or bytes), as the HPA counts it: the pod-level
/// request when set, else the sum over the containers and native sidecars (init containers
/// with `restartPolicy: Always`, counted since 1.29, kubernetes#120001: they run, and are
/// measured, beside the containers). 0 when any of those containers requests none, which
/// the poll reports as a missing request, as the HPA does.
pub fn pod_request(pod: &Pod, resource: &str) -> f64 {
    let Some(spec) = &pod.spec else { return 0.0 };
    let parse = |q: &str| {
        if resource == "cpu" {
            quantity::parse_nonneg_millis(q).map_or(0.0, |m| m as f64 / 1000.0)
        } else {
            quantity::parse_nonneg_units(q).map_or(0.0, |b| b as f64)
        }
    };
    // A pod-level request stands for the pod's containers, as in the HPA since 1.34
    // (kubernetes#132430).
    if let Some(q) = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref()?.get(resource))
    {
        return parse(&q.0);
    }
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let mut sum = 0.0;
    for c in spec.containers.iter().chain(sidecars) {
        let request = c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref()?.get(resource))
            .map_or(0.0, |q| parse(&q.0));
        if request <= 0.0 {
            // The HPA refuses a pod one of whose containers requests none ("missing
            // request"): its utilisation is undefined, not that of the others.
            return 0.0;
        }
        sum += request;
    }
    sum
}

/// The pod as a poll sees it; `None` for pods that no longer count (finished, deleting).
pub fn pod_view(pod: &Pod, resource: &str) -> Option<PodView> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if pod.metadata.deletion_timestamp.is_some() || matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    Some(PodView {
        name: format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()),
        uid: pod.uid().unwrap_or_default(),
        running: phase == Some("Running"),
        request: pod_request(pod, resource),
    })
}

impl Controller {
    fn history(&self, uid: &str) -> (Option<f64>, Option<f64>) {
        self.history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
            .copied()
            .unwrap_or_default()
    }

    fn remember(&self, uid: &str, times: (Option<f64>, Option<f64>)) {
        if !uid.is_empty() {
            self.history
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(uid.to_string(), times);
        }
    }

    /// Drops the memory of StepScalers that are gone.
    fn forget_missing(&self, objects: &[Arc<DynamicObject>]) {
        self.history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|uid, _| {
                objects
                    .iter()
                    .any(|o| o.uid().as_deref() == Some(uid.as_str()))
            });
    }

    /// Polls one StepScaler; returns the seconds until its next poll and the outcome
    /// (`scaled`, `held`, `dry_run`, `invalid`, `unable`, `failed`, `conflict`, `stopped`)
    /// for the poll counter.
    async fn reconcile(&self, obj: &DynamicObject, now_s: f64) -> (f64, &'static str) {
        let ns = obj.namespace().unwrap_or_default();
        let mut status: StepScalerStatus = obj
            .data
            .get("status")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default();
        status.observed_generation = obj.metadata.generation;
        status.last_poll_time = Some(rfc3339(now_s));
        let spec = obj.data.get("spec").cloned().unwrap_or(Value::Null);
        let (spec, config) =
            match StepScalerSpec::from_json(&spec).and_then(|s| s.config().map(|c| (s, c))) {
                Ok(x) => x,
                Err(e) => {
                    let msg = e.to_string();
                    warn!(error = %msg, "invalid StepScaler spec");
                    if status.set_condition(VALID, false, "InvalidSpec", &msg, now_s) {
                        self.event(obj, "Warning", "InvalidSpec", &msg).await;
                    }
                    self.write_status(obj, &status).await;
                    return (DEFAULT_POLL_PERIOD_S, "invalid");
                }
            };
        let period = spec.poll_period_s();
        let retain = lock(&self.book).limits().retain_s;
        if period > retain {
            let msg = format!(
                "pollPeriodSeconds {period} is longer than the usage this scorer keeps \
                 (--pod-usage-retain-seconds {retain})"
            );
            if status.set_condition(VALID, false, "PeriodTooLong", &msg, now_s) {
                self.event(obj, "Warning", "PeriodTooLong", &msg).await;
            }
            self.write_status(obj, &status).await;
            return (period, "invalid");
        }
        status.set_condition(VALID, true, "ValidSpec", "the spec is valid", now_s);
        let r = &spec.scale_target_ref;
        status.reference = Some(format!("{}/{}", r.kind, r.name));
        let ar = match self.targets.resolve(&r.api_version, &r.kind).await {
            Ok(ar) => ar,
            Err(e) => {
                self.unable(obj, &mut status, e.reason(), &e.to_string(), now_s)
                    .await;
                return (period, "unable");
            }
        };
        let target: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &ns, &ar);
        let scale = match target.get_scale(&r.name).await {
            Ok(s) => s,
            Err(e) => {
                let msg = format!("reading the scale of {}/{}: {}", r.kind, r.name, brief(&e));
                self.unable(obj, &mut status, "FailedGetScale", &msg, now_s)
                    .await;
                return (period, "unable");
            }
        };
        let current = replicas(&scale);
        let Some(selector) = scale
            .status
            .as_ref()
            .and_then(|s| s.selector.clone())
            .filter(|s| !s.is_empty())
        else {
            let msg = format!(
                "the scale of {}/{} has no selector: its pods cannot be found",
                r.kind, r.name
            );
            self.unable(obj, &mut status, "InvalidSelector", &msg, now_s)
                .await;
            return (period, "unable");
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let pods = match pods.list(&ListParams::default().labels(&selector)).await {
            Ok(l) => l.items,
            Err(e) => {
                let msg = format!("listing pods by {selector:?}: {}", brief(&e));
                if status.set_condition(SCALING_ACTIVE, false, "FailedGetPods", &msg, now_s) {
                    self.event(obj, "Warning", "FailedGetPods", &msg).await;
                }
                self.write_status(obj, &status).await;
                return (period, "failed");
            }
        };
        let resource = spec.metric.resource();
        let views: Vec<PodView> = pods.iter().filter_map(|p| pod_view(p, resource)).collect();
        // The later of the status and this process's memory: a status write that failed, or a
        // watch that lags behind it, must not lose a cool-down.
        let uid = obj.uid().unwrap_or_default();
        let remembered = self.history(&uid);
        let later = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(x), Some(y)) => Some(x.max(y)),
            (x, y) => x.or(y),
        };
        let last_out = later(
            status.last_scale_out_time.as_deref().and_then(unix_s),
            remembered.0,
        );
        let last_in = later(
            status.last_scale_in_time.as_deref().and_then(unix_s),
            remembered.1,
        );
        let mut alg = match StepTolerance::with_history(config, last_out, last_in) {
            Ok(a) => a,
            // config() validated it; keep the loop alive regardless.
            Err(e) => {
                status.set_condition(VALID, false, "InvalidSpec", &e.to_string(), now_s);
                self.write_status(obj, &status).await;
                return (period, "invalid");
            }
        };
        let settings = PollSettings {
            now_s,
            window_s: period,
            stale_s: self.config.stale_s,
            metric: spec.metric,
        };
        let p = {
            let book = lock(&self.book);
            poll(&mut alg, settings, current, &views, &book)
        };
        let d = &p.decision;
        debug!(current, desired = d.desired, reason = %d.reason, "polled");
        let (active, reason, msg) = match &p.outcome {
            Outcome::Decided if p.measured > 0 => (
                true,
                "ValidMetricFound",
                format!(
                    "{:.1} % of the {resource} request over {period:.0} s ({} of {} pods measured)",
                    p.mean.unwrap_or(0.0) * 100.0,
                    p.measured,
                    p.pods
                ),
            ),
            Outcome::Decided => (
                false,
                "NoFreshMetrics",
                format!(
                    "none of {} pods has a fresh usage reading from the agents",
                    p.pods
                ),
            ),
            Outcome::Bounded => (true, "OutOfRange", d.reason.clone()),
            Outcome::ScaledToZero => (false, "ScalingDisabled", d.reason.clone()),
            Outcome::MissingRequest(_) => (false, "MissingRequest", d.reason.clone()),
        };
        if status.set_condition(SCALING_ACTIVE, active, reason, &msg, now_s) && !active {
            self.event(obj, "Warning", reason, &msg).await;
        }
        let mut applied = false;
        let mut outcome = "held";
        // The count found when a write met someone else's (`conflict`).
        let mut moved_to = None;
        if d.scales() {
            let what = format!("{}/{}", r.kind, r.name);
            if spec.dry_run {
                let msg = format!(
                    "dry run: would scale {what} from {} to {}: {}",
                    d.current, d.desired, d.reason
                );
                // Once per decision: a dry run outside the replica bounds has no cool-down
                // and would otherwise repeat the same Event every poll.
                let repeated = status
                    .last_decision
                    .as_ref()
                    .is_some_and(|l| (l.from, l.to, l.applied) == (d.current, d.desired, false));
                if !repeated {
                    self.event(obj, "Normal", "DryRunRescale", &msg).await;
                }
                outcome = "dry_run";
                status.set_condition(ABLE_TO_SCALE, true, "DryRun", &msg, now_s);
            } else {
                let written = match self.write_scale(&target, &r.name, &scale, d.desired).await {
                    // A write that landed is recorded whatever came after it; anything else
                    // is not, once the replica is stopping or has lost the Lease: its status
                    // write could land over the next leader's (its cool-down times included).
                    Written::Applied => Written::Applied,
                    _ if !self.writes.open() => Written::Stopped,
                    other => other,
                };
                match written {
                    Written::Applied => {
                        applied = true;
                        outcome = "scaled";
                        let msg = format!("New size: {}; reason: {}", d.desired, d.reason);
                        info!(target = %what, from = d.current, to = d.desired, reason = %d.reason, "rescaled");
                        self.event(obj, "Normal", "SuccessfulRescale", &msg).await;
                        status.set_condition(
                            ABLE_TO_SCALE,
                            true,
                            "SucceededRescale",
                            &format!("scaled {what} from {} to {}", d.current, d.desired),
                            now_s,
                        );
                    }
                    Written::Stopped => {
                        // Stopped, or the Lease lost, since this poll began: the decision is
                        // left to the next leader, and nothing of this poll is written.
                        info!(target = %what, from = d.current, to = d.desired,
                              "not rescaled: stopping or no longer the leader");
                        return (period, "stopped");
                    }
                    Written::Moved(now) => {
                        // Someone else set the count (a user, another autoscaler, a replica
                        // that has just lost the Lease) after this poll read it: it is not
                        // overwritten, and the next poll decides from it.
                        let msg = format!(
                            "the replica count or selector of {what} changed after this poll \
                             read it (count {} then, {now} now; it would have gone to {}): not \
                             overwritten, the next poll decides again",
                            d.current, d.desired
                        );
                        info!(target = %what, read = d.current, now, to = d.desired,
                              "not rescaled: the replica count or selector changed since it was read");
                        outcome = "conflict";
                        moved_to = Some(now);
                        status.set_condition(ABLE_TO_SCALE, true, "ScaleChanged", &msg, now_s);
                    }
                    Written::Failed(e) => {
                        let msg =
                            format!("scaling {what} from {} to {}: {e}", d.current, d.desired);
                        warn!(error = %msg, "rescale failed");
                        outcome = "failed";
                        self.event(obj, "Warning", "FailedRescale", &msg).await;
                        status.set_condition(
                            ABLE_TO_SCALE,
                            false,
                            "FailedUpdateScale",
                            &msg,
                            now_s,
                        );
                    }
                }
            }
        } else {
            status.set_condition(
                ABLE_TO_SCALE,
                true,
                "SucceededGetScale",
                "the target's scale was read",
                now_s,
            );
        }
        // A failed or refused update did not scale: its cool-down must not start (the next
        // poll retries).
        let (out_s, in_s) = if matches!(outcome, "failed" | "conflict") {
            (last_out, last_in)
        } else {
            alg.history()
        };
        self.remember(&uid, (out_s, in_s));
        status.last_scale_out_time = out_s.map(rfc3339);
        status.last_scale_in_time = in_s.map(rfc3339);
        status.current_replicas = Some(moved_to.unwrap_or(current));
        status.desired_replicas = Some(d.desired);
        status.current_utilization_percent = p.mean.map(|m| (m * 1000.0).round() / 10.0);
        status.measured_pods = Some(p.measured as u32);
        status.pods = Some(p.pods as u32);
        status.last_decision = Some(crate::status::LastDecision {
            time: rfc3339(now_s),
            from: d.current,
            to: d.desired,
            reason: d.reason.clone(),
            applied,
        });
        self.write_status(obj, &status).await;
        let next = if outcome == "conflict" {
            period.min(CONFLICT_RETRY_S)
        } else {
            period
        };
        (next, outcome)
    }

    /// Writes `desired` replicas through `/scale`, conditional on the resourceVersion of
    /// `read`, the scale the decision was made from. A conflict is looked into: when the
    /// target's count and selector are still as read (only its status or metadata were
    /// written since), the decision stands and is written again on the new version, up to
    /// [`SCALE_WRITE_ATTEMPTS`] writes in all; when the count moved, nothing is written over
    /// it. The write gate is read before every write.
    async fn write_scale(
        &self,
        target: &Api<DynamicObject>,
        name: &str,
        read: &Scale,
        desired: u32,
    ) -> Written {
        let shape = |s: &Scale| {
            (
                s.spec.as_ref().and_then(|s| s.replicas),
                s.status.as_ref().and_then(|s| s.selector.clone()),
            )
        };
        let known = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
        let mut version = known(&read.metadata.resource_version);
        for attempt in 1..=SCALE_WRITE_ATTEMPTS {
            if !self.writes.open() {
                return Written::Stopped;
            }
            let conditional = version.is_some();
            let patch = scale_patch(version.as_deref(), desired);
            let e = match target
                .patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Written::Applied,
                // Only a conditional write's 409 says the target changed (a webhook's 409,
                // or one to an unconditional write, is a failure like any other).
                Err(kube::Error::Api(e)) if e.code == 409 && conditional => e,
                Err(e) => return Written::Failed(brief(&e)),
            };
            let now = match target.get_scale(name).await {
                Ok(now) => now,
                Err(r) => {
                    return Written::Failed(format!(
                        "{} ({}), then reading the scale again: {}",
                        e.message,
                        e.code,
                        brief(&r)
                    ));
                }
            };
            if shape(&now) != shape(read) {
                return Written::Moved(replicas(&now));
            }
            if attempt == SCALE_WRITE_ATTEMPTS {
                return Written::Failed(format!(
                    "the target was written by others {attempt} times while this write was \
                     tried (its count unchanged): {} ({})",
                    e.message, e.code
                ));
            }
            debug!(
                attempt,
                "the target was written since it was read, its count unchanged: writing again"
            );
            version = known(&now.metadata.resource_version);
            if version.is_none() {
                // Written again without it, the write would no longer be conditional.
                return Written::Failed(format!(
                    "{} ({}), and the scale read again carries no resourceVersion",
                    e.message, e.code
                ));
            }
        }
        Written::Failed("no write was tried".into())
    }

    async fn unable(
        &self,
        obj: &DynamicObject,
        status: &mut StepScalerStatus,
        reason: &str,
        msg: &str,
        now_s: f64,
    ) {
        warn!(reason, error = %msg, "cannot scale the target");
        // Figures of an earlier poll would read as current.
        status.current_utilization_percent = None;
        if status.set_condition(ABLE_TO_SCALE, false, reason, msg, now_s) {
            self.event(obj, "Warning", reason, msg).await;
        }
        self.write_status(obj, status).await;
    }

    async fn write_status(&self, obj: &DynamicObject, status: &StepScalerStatus) {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &obj.namespace().unwrap_or_default(),
            &api_resource(),
        );
        // A merge patch keeps fields it does not mention: clear the optional ones explicitly.
        let mut v = serde_json::to_value(status).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut v {
            for k in [
                "currentUtilizationPercent",
                "lastScaleOutTime",
                "lastScaleInTime",
                "reference",
            ] {
                m.entry(k).or_insert(Value::Null);
            }
        }
        let pp = PatchParams::default();
        if let Err(e) = api
            .patch_status(&obj.name_any(), &pp, &Patch::Merge(json!({"status": v})))
            .await
        {
            warn!(error = %brief(&e), "writing the StepScaler status failed");
        }
    }

    async fn event(&self, obj: &DynamicObject, type_: &str, reason: &str, message: &str) {
        let ns = obj.namespace().unwrap_or_default();
        let now = Time(Timestamp::now());
        let ev = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", obj.name_any())),
                namespace: Some(ns.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some(api_resource().api_version),
                kind: Some("StepScaler".into()),
                name: Some(obj.name_any()),
                namespace: Some(ns.clone()),
                uid: obj.uid(),
                ..ObjectReference::default()
            },
            reason: Some(reason.into()),
            // Event messages are capped at 1 KiB by the API server.
            message: Some(message.chars().take(1000).collect()),
            type_: Some(type_.into()),
            source: Some(EventSource {
                component: Some(self.config.component.clone()),
                host: None,
            }),
            reporting_component: Some(self.config.component.clone()),
            reporting_instance: Some(self.config.instance.clone()),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        if let Err(e) = api.create(&PostParams::default(), &ev).await {
            debug!(error = %brief(&e), reason, "recording a StepScaler Event failed");
        }
    }
}

/// The `/scale` merge patch of a decision: the replica count, on the condition that the
/// target is still at `read_version`, the resourceVersion of the scale the decision was made
/// from (the API server answers 409 Conflict otherwise, as to the HPA's update). The version
/// is the whole target's, so any write to it (its status too) makes the patch conflict; the
/// controller then reads the scale again and writes again unless the count moved, so a
/// decision never overwrites a count someone else set in between (a user, another
/// autoscaler, a stopped replica's write that landed after the next leader's).
pub fn scale_patch(read_version: Option<&str>, replicas: u32) -> Value {
    let mut patch = json!({"spec": {"replicas": replicas}});
    if let Some(rv) = read_version.filter(|v| !v.is_empty()) {
        patch["metadata"] = json!({"resourceVersion": rv});
    }
    patch
}

/// A scale's replica count (0 when it states none).
fn replicas(scale: &Scale) -> u32 {
    scale
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(0)
        .max(0) as u32
}

/// A client error without the Debug dump kube's `Display` of an API error carries.
fn brief(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}

/// Starts the controller on its own task.
pub fn spawn(
    client: Client,
    book: SharedBook,
    leadership: watch::Receiver<Leadership>,
    config: ControllerConfig,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(client, book, leadership, config, metrics, shutdown))
}

#[cfg(test)]
mod tests;
