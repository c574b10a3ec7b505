//! Issue #13's proof: a differential test of Loadstar's filters against the real
//! kube-scheduler v1.20.2 on the e2e API server (started by `tests/e2e/run.sh`; the long run
//! is `tests/e2e/diff.sh`). A seeded generator produces scenarios — nodes, bound pods, one
//! incoming pod, in some PersistentVolumes and claims — and for each one both schedulers say
//! which nodes the pod may go to: kube-scheduler through a recording filter extender,
//! Loadstar through `Scorer.Score` by reference (and by `pod_json`, which must agree). The
//! feasible sets must be identical in every scenario; each disagreement is printed with
//! everything needed to turn it into a named regression case.
//!
//! What Loadstar refuses on purpose cannot be compared: a second test checks that promise on
//! a fixed case (a DRA resource claim).
//!
//! Environment: `LOADSTAR_DIFF_SCENARIOS` (default 100), `LOADSTAR_DIFF_SEED` (decimal or
//! `0x…`, default [`DEFAULT_SEED`]), `LOADSTAR_DIFF_ONLY=<index>` (that one scenario of the
//! seed, without the regressions), `LOADSTAR_DIFF_VERBOSE=1` (one line per scenario, agreeing
//! ones too), `LOADSTAR_E2E_KUBE_SCHEDULER_BIN` (set by the scripts).
//! The generator's own tests run in plain `cargo test`.
mod diff_support;
mod e2e_support;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use diff_support::extender::Extender;
use diff_support::generator::{generate, generate_preemption};
use diff_support::runner::{Harness, Outcome, create_priority_classes, probe_namespace};
use diff_support::scenario::{
    BIND_COMPLETED, DELETE_GRACEFULLY, Feature, Scenario, after_create, claim_names, str_at,
};
use e2e_support::{Scorer, env_or_skip, eventually, rand_u32};
use loadstar_proto::pb;
use loadstar_proto::pb::scorer_client::ScorerClient;
use serde_json::{Value, json};

/// Named regression cases `(name, seed, index)`: scenarios that once disagreed. They run
/// first in every run, whatever the seed. They name generator output, so the generator must
/// keep producing the same scenarios: [`GENERATOR_FINGERPRINT`] guards that.
const REGRESSIONS: &[(&str, u64, usize)] = &[
    // kube-scheduler 1.20's NodeResourcesFit compares `allocatable < request + requested`
    // for cpu, memory and ephemeral-storage even when the pod requests 0 of that resource
    // (it skips the checks only when the pod requests nothing at all): node n5 carries
    // 2.5 cores of requests on 2, and the incoming pod, requesting 128Mi of memory and no
    // cpu, is "Insufficient cpu" there. Loadstar skips dimensions the pod does not request.
    (
        "zero cpu request on a cpu-overcommitted node",
        0x10AD_57A2,
        65,
    ),
    // The same with ephemeral-storage: n4 has none allocatable and a bound pod requesting
    // 5Gi, so every pod that requests anything is "Insufficient ephemeral-storage" there.
    (
        "no ephemeral-storage request on an ephemeral-overcommitted node",
        0x10AD_57A2,
        77,
    ),
    // Loadstar's store: a node deleted before its pods (the normal order in a cluster, where
    // the pod garbage collector removes a deleted node's pods afterwards) is removed from the
    // store, then each pod's removal re-creates the entry through `update_allocation` and
    // subtracts its requests: an entry with no Node behind it and negative requests (here
    // −4 cores, −6Gi from h0 and h1). Node n0, registering again under that name, inherits
    // them: full (e1 + filler), it looks 4 cores and 6Gi emptier than it is, so for the
    // incoming pod (2 cores) kube-scheduler says "Insufficient cpu, Insufficient memory" and
    // Loadstar admits it.
    (
        "node re-created under the name of a node deleted before its pods",
        0xBEEF,
        4,
    ),
];

/// FNV-1a of the first 20 scenarios of [`DEFAULT_SEED`]: changes when the generator's
/// output does. Then every `(seed, index)` in [`REGRESSIONS`] may name a different scenario:
/// re-find the cases (their names say what to look for) and update this value.
///
/// Volumes and claims come from their own random stream: adding them changed this value
/// (from `0x599A_343C_69DF_6FC6`, which the 20 scenarios still give with their volumes,
/// claims and mounts removed) but no other object, and the regression cases draw none.
/// Inline disks, a third stream, changed it again (from `0x2B96_B456_1F51_774C`) in the same
/// way, and so did attach limits, claims to bind and default spreading, three more (from
/// `0x17D2_067E_E2A3_288B`); the regression cases draw from none of them (checked).
const GENERATOR_FINGERPRINT: u64 = 0x99DE_F5CE_E2BA_62B3;

/// Loadstar's side of the comparison: one profile (so the default one) with kube-scheduler
/// 1.20's filters in its order and the same hard default spread constraints as the
/// dedicated kube-scheduler's profile.
fn diff_scorer_config() -> String {
    format!(
        "profiles:
  - schedulerName: diff
    filters:
      - NodeReady
      - TaintToleration
      - NodeAffinity
      - NodeResourcesFit
      - NodePorts
      - VolumeRestrictions
      - EBSLimits
      - GCEPDLimits
      - NodeVolumeLimits
      - AzureDiskLimits
      - VolumeBinding
      - VolumeZone
      - name: PodTopologySpread
        args:
          defaultingType: List
          defaultConstraints: {}
      - InterPodAffinity
    scores:
      - name: LeastAllocated
",
        diff_support::generator::spreading::DEFAULT_CONSTRAINTS
    )
}

/// The seed when `LOADSTAR_DIFF_SEED` is unset.
const DEFAULT_SEED: u64 = 0x10AD_57A2;
/// Scenarios when `LOADSTAR_DIFF_SCENARIOS` is unset.
const DEFAULT_SCENARIOS: usize = 100;
/// Preemption scenarios when `LOADSTAR_DIFF_PREEMPTION` is unset.
const DEFAULT_PREEMPTION_SCENARIOS: usize = 30;

/// Which generator a case comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// [`generate`]: feasible sets.
    Filters,
    /// [`generate_preemption`]: feasible sets, nominated node and victims.
    Preemption,
}

impl Kind {
    fn generate(self, seed: u64, index: usize, prefix: &str) -> Scenario {
        match self {
            Kind::Filters => generate(seed, index, prefix),
            Kind::Preemption => generate_preemption(seed, index, prefix),
        }
    }

    /// The environment variable that picks one scenario of this kind.
    fn only_hint(self) -> &'static str {
        match self {
            Kind::Filters => "LOADSTAR_DIFF_ONLY",
            Kind::Preemption => "LOADSTAR_DIFF_ONLY_PREEMPTION",
        }
    }
}

/// What to run, from the environment.
#[derive(Debug)]
struct Plan {
    seed: u64,
    /// `(regression name, seed, index, kind)`, in order.
    cases: Vec<(Option<&'static str>, u64, usize, Kind)>,
}

fn parse_u64(s: &str) -> Result<u64> {
    let s = s.trim().replace('_', "");
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    }
    .with_context(|| format!("{s:?} is not a number"))
}

impl Plan {
    fn from_env() -> Result<Plan> {
        let get = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let seed = match get("LOADSTAR_DIFF_SEED") {
            Some(s) => parse_u64(&s).context("LOADSTAR_DIFF_SEED")?,
            None => DEFAULT_SEED,
        };
        for kind in [Kind::Filters, Kind::Preemption] {
            if let Some(only) = get(kind.only_hint()) {
                let index = parse_u64(&only).context(kind.only_hint())? as usize;
                return Ok(Plan {
                    seed,
                    cases: vec![(None, seed, index, kind)],
                });
            }
        }
        let count = |var: &str, default: usize| -> Result<usize> {
            Ok(match get(var) {
                Some(s) => parse_u64(&s).context(var.to_string())? as usize,
                None => default,
            })
        };
        let n = count("LOADSTAR_DIFF_SCENARIOS", DEFAULT_SCENARIOS)?;
        let p = count("LOADSTAR_DIFF_PREEMPTION", DEFAULT_PREEMPTION_SCENARIOS)?;
        let mut cases: Vec<_> = REGRESSIONS
            .iter()
            .map(|&(name, seed, index)| (Some(name), seed, index, Kind::Filters))
            .collect();
        cases.extend((0..n).map(|i| (None, seed, i, Kind::Filters)));
        cases.extend((0..p).map(|i| (None, seed, i, Kind::Preemption)));
        Ok(Plan { seed, cases })
    }
}

fn list(set: &BTreeSet<String>) -> String {
    format!(
        "{} [{}]",
        set.len(),
        set.iter().cloned().collect::<Vec<_>>().join(", ")
    )
}

/// Everything about one disagreement: how to rerun it, both answers, the objects.
fn disagreement_report(name: Option<&str>, kind: Kind, sc: &Scenario, o: &Outcome) -> String {
    let mut s = String::new();
    let title = name
        .map(|n| format!(" (regression {n:?})"))
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "=== DISAGREEMENT: scenario {} of seed {:#x}{title}",
        sc.index, sc.seed
    );
    let _ = writeln!(
        s,
        "rerun it alone: LOADSTAR_DIFF_SEED={:#x} {}={} bash tests/e2e/diff.sh",
        sc.seed,
        kind.only_hint(),
        sc.index
    );
    let features: Vec<&str> = sc.features.iter().map(|f| f.name()).collect();
    let _ = writeln!(s, "features: {}", features.join("; "));
    let _ = writeln!(s, "kube-scheduler feasible: {}", list(&o.kube_feasible));
    let _ = writeln!(s, "  PodScheduled: {}", o.kube_message);
    for c in &o.kube_unstable {
        let _ = writeln!(s, "  (a later filter call differed: {c:?})");
    }
    match &o.loadstar_error {
        Some(e) => {
            let _ = writeln!(s, "Loadstar: Score failed: {e}");
        }
        None => {
            let _ = writeln!(s, "Loadstar feasible:       {}", list(&o.loadstar_feasible));
            for (node, plugin, reason) in &o.loadstar_filtered {
                let _ = writeln!(s, "  filtered {node}: {plugin}: {reason}");
            }
            let _ = writeln!(s, "  summary: {}", o.loadstar_summary);
        }
    }
    let only_kube: BTreeSet<String> = o
        .kube_feasible
        .difference(&o.loadstar_feasible)
        .cloned()
        .collect();
    let only_loadstar: BTreeSet<String> = o
        .loadstar_feasible
        .difference(&o.kube_feasible)
        .cloned()
        .collect();
    if let Some(k) = &o.kube_preempted {
        let _ = writeln!(
            s,
            "kube-scheduler preempted: node {:?}, victims {:?}",
            k.node, k.victims
        );
        let _ = writeln!(s, "Loadstar's preemption: {}", o.loadstar_preemption_note);
        for c in &o.loadstar_preempted {
            let _ = writeln!(s, "  best: node {:?}, victims {:?}", c.node, c.victims);
        }
    }
    let _ = writeln!(s, "only kube-scheduler: {}", list(&only_kube));
    let _ = writeln!(s, "only Loadstar:       {}", list(&only_loadstar));
    let _ = writeln!(s, "scenario (kubectl apply -f -):\n{}", sc.to_yaml());
    s
}

/// Per feature: scenarios that have it, and how many of those disagreed; and which way
/// the disagreements go.
#[derive(Default)]
struct Tally {
    by_feature: BTreeMap<Feature, (usize, usize)>,
    /// Scenarios without any inter-pod feature (only filters Loadstar implements).
    basic: (usize, usize),
    /// Scenarios where Loadstar admitted a node kube-scheduler rejected.
    loadstar_admits_more: usize,
    /// Per Loadstar plugin: scenarios where it rejected a node kube-scheduler admitted.
    loadstar_rejects_more: BTreeMap<String, usize>,
    /// Scenarios where Score failed.
    loadstar_errors: usize,
}

impl Tally {
    fn add(&mut self, sc: &Scenario, o: &Outcome) {
        let identical = o.identical();
        let bad = usize::from(!identical);
        for f in &sc.features {
            let e = self.by_feature.entry(*f).or_default();
            e.0 += 1;
            e.1 += bad;
        }
        if !sc.needs_inter_pod_filters() {
            self.basic.0 += 1;
            self.basic.1 += bad;
        }
        if o.loadstar_error.is_some() {
            self.loadstar_errors += 1;
            return;
        }
        if !o.loadstar_feasible.is_subset(&o.kube_feasible) {
            self.loadstar_admits_more += 1;
        }
        let plugins: BTreeSet<&str> = o
            .loadstar_filtered
            .iter()
            .filter(|(node, _, _)| o.kube_feasible.contains(node))
            .map(|(_, plugin, _)| plugin.as_str())
            .collect();
        for p in plugins {
            *self.loadstar_rejects_more.entry(p.to_string()).or_default() += 1;
        }
    }

    fn render(&self) -> String {
        let mut s = String::from(
            "disagreements by feature (a scenario counts under each feature it has):\n",
        );
        for f in Feature::ALL {
            let (n, bad) = self.by_feature.get(f).copied().unwrap_or_default();
            let _ = writeln!(s, "  {:<52} {bad:>4} of {n:>4}", f.name());
        }
        let _ = writeln!(
            s,
            "  {:<52} {:>4} of {:>4}",
            "none of the 4 InterPodAffinity/PodTopologySpread ones", self.basic.1, self.basic.0
        );
        let _ = writeln!(
            s,
            "which way: Loadstar admits a node kube-scheduler rejects in {} scenario(s); \
             Loadstar rejects a node kube-scheduler admits, by plugin: {:?}; Score failed in {}",
            self.loadstar_admits_more, self.loadstar_rejects_more, self.loadstar_errors
        );
        s
    }
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn kube_scheduler_and_loadstar_agree_on_feasible_nodes() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let kube_bin: PathBuf = std::env::var("LOADSTAR_E2E_KUBE_SCHEDULER_BIN")
        .context("LOADSTAR_E2E_KUBE_SCHEDULER_BIN (set by tests/e2e/run.sh) is needed")?
        .into();
    let plan = Plan::from_env()?;
    let client = env.admin().await?;
    let extender = Extender::start().await?;
    let kube = diff_support::kube_scheduler::start(
        &kube_bin,
        &env.admin_kubeconfig,
        &extender.url_prefix(),
        &env.logs,
    )?;
    let config = env.logs.join("diff-scorer-config.yaml");
    std::fs::write(&config, diff_scorer_config())?;
    let config_flag = format!("--config={}", config.display());
    let scorer_proc = Scorer::start(&env, "diff", "lease-diff", &[&config_flag]).await?;
    let scorer = ScorerClient::connect(scorer_proc.endpoint()).await?;
    let nonce = format!("{:05x}", rand_u32() & 0xf_ffff);
    let probe_ns = format!("diff-probes-{nonce}");
    probe_namespace(&client, &probe_ns).await?;
    create_priority_classes(&client).await?;
    let mut h = Harness {
        client,
        scorer,
        extender,
        kube,
        probe_ns,
    };

    let total = plan.cases.len();
    let verbose = std::env::var_os("LOADSTAR_DIFF_VERBOSE").is_some_and(|v| !v.is_empty());
    eprintln!(
        "[diff] {total} scenario(s), seed {:#x}, {} regression case(s) first",
        plan.seed,
        plan.cases.iter().filter(|c| c.0.is_some()).count()
    );
    let started = Instant::now();
    let mut tally = Tally::default();
    let mut identical = 0;
    let mut disagreed: Vec<String> = Vec::new();
    let mut preemptions = (0usize, 0usize);
    for (k, &(name, seed, index, kind)) in plan.cases.iter().enumerate() {
        let prefix = format!("d{nonce}-{k}");
        let sc = kind.generate(seed, index, &prefix);
        let outcome = h
            .run(&sc, &prefix)
            .await
            .with_context(|| format!("scenario {index} of seed {seed:#x}"))
            .with_context(|| scorer_proc.log_tail())?;
        tally.add(&sc, &outcome);
        if verbose {
            eprintln!(
                "[diff] scenario {index}: kube-scheduler {}; Loadstar {}; {}",
                list(&outcome.kube_feasible),
                list(&outcome.loadstar_feasible),
                outcome.kube_message
            );
        }
        if let Some(p) = &outcome.kube_preempted {
            preemptions.0 += 1;
            preemptions.1 += usize::from(p.node.is_some());
            if verbose {
                eprintln!(
                    "[diff]   preemption: kube-scheduler {:?} {:?}; Loadstar {}",
                    p.node, p.victims, outcome.loadstar_preemption_note
                );
            }
        }
        if outcome.identical() {
            identical += 1;
        } else {
            eprintln!("{}", disagreement_report(name, kind, &sc, &outcome));
            disagreed.push(format!("{index}@{seed:#x}"));
        }
        if (k + 1) % 25 == 0 && k + 1 < total {
            eprintln!(
                "[diff] {}/{total} run, {identical} identical, {:.1?}",
                k + 1,
                started.elapsed()
            );
        }
    }
    let took = started.elapsed();
    eprintln!("{}", tally.render());
    let ghosts: Vec<String> = h
        .loadstar_nodes()
        .await?
        .into_iter()
        .filter_map(|(n, backed)| (!backed).then_some(n))
        .collect();
    if !ghosts.is_empty() {
        let shown: Vec<&str> = ghosts.iter().take(12).map(String::as_str).collect();
        eprintln!(
            "[diff] note: Loadstar lists {} node(s) with neither a Node object nor an agent \
             behind them (deleted while pods were bound to them): {}{}",
            ghosts.len(),
            shown.join(" "),
            if ghosts.len() > shown.len() {
                " …"
            } else {
                ""
            }
        );
    }
    eprintln!(
        "[diff] {total} scenarios in {took:.1?} ({:.2?} each)",
        took / total.max(1) as u32
    );
    eprintln!(
        "[diff] {} preemption scenario(s), kube-scheduler preempted in {}",
        preemptions.0, preemptions.1
    );
    eprintln!("{identical}/{total} scenarios identical");
    ensure!(
        identical == total,
        "{identical}/{total} scenarios identical; disagreeing (index@seed): {}",
        disagreed.join(" ")
    );
    Ok(())
}

// --- what Loadstar refuses on purpose ----------------------------------------------------

/// The plugin Loadstar names on every node for a pod it refuses.
const UNSUPPORTED: &str = "UnsupportedConstraints";

/// Whether Loadstar's answer is what `expect` says for `nodes`: refused on every node by
/// [`UNSUPPORTED`] with a reason containing the text (`Some`), or every node ranked (`None`).
/// `Err` says what it was instead.
fn answer_is(
    r: &pb::ScoreResponse,
    nodes: &BTreeSet<String>,
    expect: Option<&str>,
) -> Result<(), String> {
    let ranked: BTreeSet<String> = r.ranked.iter().map(|n| n.node_name.clone()).collect();
    let refused: BTreeSet<String> = r
        .filtered
        .iter()
        .filter(|f| f.plugin == UNSUPPORTED && expect.is_some_and(|e| f.reason.contains(e)))
        .map(|f| f.node_name.clone())
        .collect();
    let ok = match expect {
        Some(_) => ranked.is_empty() && &refused == nodes,
        None => &ranked == nodes,
    };
    if ok {
        return Ok(());
    }
    let filtered: Vec<String> = r
        .filtered
        .iter()
        .map(|f| format!("{}: {}: {}", f.node_name, f.plugin, f.reason))
        .collect();
    Err(format!(
        "ranked {ranked:?}; filtered {filtered:?}; {}",
        r.summary
    ))
}

/// Loadstar's promise for a constraint it cannot honour: a DRA resource claim (1.26+; the
/// 1.20 API server drops the field, so only a pod sent whole can carry it) is refused on
/// every node with plugin `UnsupportedConstraints` naming it, instead of being placed
/// blindly; the same pod without it is placed everywhere. Claims to bind, CSI and
/// cloud-disk volumes, which this test used to check were refused, are now implemented and
/// compared in the differential run; generic ephemeral volumes, refused here until
/// 2026-11-30, are read as upstream reads them (`e2e_scheduler.rs`,
/// `ephemeral_volumes_wait_for_their_claim_then_bind_with_it`).
#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn loadstar_refuses_constraints_it_cannot_honour() -> Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, DeleteParams};
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let client = env.admin().await?;
    let scorer_proc = Scorer::start(&env, "diff-refusals", "lease-diff-refusals", &[]).await?;
    let scorer = ScorerClient::connect(scorer_proc.endpoint()).await?;
    let ns = e2e_support::namespace(&client, "diff-refusals").await?;
    let nodes: BTreeSet<String> = (0..2).map(|i| format!("{ns}-n{i}")).collect();
    let pod = |claims: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": ns, "uid": "u-1"},
               "spec": {"schedulerName": "diff-nobody", "resourceClaims": claims,
                        "volumes": [{"name": "scratch", "emptyDir": {}}],
                        "containers": [{"name": "c", "image": "registry.invalid/pause:3"}]}})
    };
    let cases = [
        (
            pod(json!([{"name": "gpu", "resourceClaimName": "gpu-claim"}])),
            Some("spec.resourceClaims"),
        ),
        (pod(json!([])), None),
    ];
    let run = async {
        for n in &nodes {
            e2e_support::create_node(&client, n, "4", "8Gi").await?;
        }
        for (whole, expect) in &cases {
            let request = pb::ScoreRequest {
                pod: Some(pb::score_request::Pod::PodJson(whole.to_string())),
                candidate_nodes: nodes.iter().cloned().collect(),
                ..Default::default()
            };
            // Until Loadstar has the nodes.
            eventually(
                &format!("Loadstar's answer ({expect:?})"),
                std::time::Duration::from_secs(30),
                || {
                    let mut s = scorer.clone();
                    let req = request.clone();
                    let nodes = &nodes;
                    async move {
                        Ok(match s.score(req).await {
                            Ok(r) => answer_is(&r.into_inner(), nodes, *expect),
                            Err(st) => Err(format!("Score failed: {st}")),
                        })
                    }
                },
            )
            .await?;
        }
        anyhow::Ok(())
    }
    .await;
    e2e_support::delete_nodes(&client, &nodes.iter().cloned().collect::<Vec<_>>()).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    run.with_context(|| scorer_proc.log_tail())
}

#[path = "diff_support/checks.rs"]
mod checks;
