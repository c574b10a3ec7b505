//! The simulator's contract: runs are deterministic for a seed; every pod is placed, pending,
//! finished or not yet arrived, never lost or duplicated; the node it picks is the one the
//! scorer's own `Profile::evaluate` ranks best on the same snapshot; and a small scenario
//! computed by hand comes out exactly.
use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

use loadstar_sim::cluster::{Cluster, NodeMix, NodeSpec};
use loadstar_sim::engine::{PodOutcome, SimSettings, Simulation, simulate};
use loadstar_sim::scenario::Profiles;
use loadstar_sim::trace::{PodSpec, Trace, TraceMix, Usage, UsageModel};
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;

fn profiles() -> Profiles {
    Profiles::load(None).expect("embedded config builds")
}

fn settings(profiles: &Profiles, seed: u64) -> SimSettings {
    let mut s = SimSettings {
        seed,
        ..SimSettings::default()
    };
    profiles.apply(&mut s);
    s
}

fn small(seed: u64, pods: usize) -> (Cluster, Trace) {
    let cluster = Cluster::generate(8, &NodeMix::default(), seed).expect("cluster");
    let trace = Trace::generate(pods, &TraceMix::default(), 1800.0, seed);
    (cluster, trace)
}

fn quiet(_: u64) {}

/// Per scheduling attempt: pod UID, the node the simulator's evaluation chose, and the
/// nodes an independent `Profile::evaluate` ranks best.
type Attempts = Rc<RefCell<Vec<(String, Option<usize>, Vec<usize>)>>>;

#[test]
fn same_seed_same_output_for_every_profile() {
    let p = profiles();
    let (cluster, trace) = small(5, 150);
    for name in ["loadstar", "loadstar-requests", "loadstar-min-variance"] {
        let profile = p.get(name).expect("profile");
        let a = simulate(profile, &cluster, &trace, &settings(&p, 9), &quiet).expect("run");
        let b = simulate(profile, &cluster, &trace, &settings(&p, 9), &quiet).expect("run");
        assert_eq!(a.decisions, b.decisions, "{name}: decisions differ");
        assert_eq!(a.outcomes, b.outcomes);
        assert_eq!(
            serde_json::to_string(&a.summary).expect("json"),
            serde_json::to_string(&b.summary).expect("json"),
            "{name}: summaries differ"
        );
        assert_eq!(a.series, b.series);
        assert_eq!(a.heatmap, b.heatmap);
    }
}

fn check_conservation(seed: u64, pods: usize, duration_s: Option<f64>) {
    let p = profiles();
    let (cluster, trace) = small(seed, pods);
    let mut s = settings(&p, seed);
    s.duration_s = duration_s;
    let r = simulate(
        p.get("loadstar").expect("profile"),
        &cluster,
        &trace,
        &s,
        &quiet,
    )
    .expect("run");
    assert_eq!(r.outcomes.len(), trace.len());
    let placed: Vec<usize> = r.decisions.iter().map(|d| d.pod).collect();
    let unique: HashSet<usize> = placed.iter().copied().collect();
    assert_eq!(unique.len(), placed.len(), "a pod was placed twice");
    for (j, o) in r.outcomes.iter().enumerate() {
        let decided = r.decisions.iter().find(|d| d.pod == j);
        match (o, decided) {
            (PodOutcome::Running { node } | PodOutcome::Finished { node }, Some(d)) => {
                assert_eq!(*node, d.node, "pod {j} ran elsewhere than bound")
            }
            (PodOutcome::Pending | PodOutcome::NotArrived, None) => {}
            other => panic!("pod {j}: inconsistent {other:?}"),
        }
    }
    let sm = &r.summary;
    assert_eq!(
        sm.pods_placed + sm.pods_pending + sm.pods_not_arrived,
        trace.len() as u64
    );
    assert_eq!(sm.pods_placed, sm.pods_running + sm.pods_finished);
    assert_eq!(sm.pods_placed, r.decisions.len() as u64);
    let per_node: u64 = sm.per_node.iter().map(|n| n.placements).sum();
    assert_eq!(per_node, sm.pods_placed);
}

#[test]
fn every_pod_is_accounted_for() {
    check_conservation(1, 200, None);
    // Cut short: some pods have not arrived.
    check_conservation(2, 200, Some(600.0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]
    #[test]
    fn conservation_holds_for_any_trace(seed in 0u64..1000, pods in 1usize..120) {
        check_conservation(seed, pods, None);
    }
}

#[test]
fn the_simulator_picks_what_profile_evaluate_ranks_best() {
    let p = profiles();
    let (cluster, trace) = small(3, 120);
    let s = settings(&p, 4);
    for name in ["loadstar", "loadstar-requests", "loadstar-load-ratio"] {
        let profile = p.get(name).expect("profile");
        let mut sim = Simulation::new(profile, &cluster, &trace, &s).expect("sim");
        // For every attempt: the best score the sim's evaluation found, and the indices an
        // independent call of the scorer's Profile::evaluate ranks best (ties included).
        let seen: Attempts = Rc::default();
        let log = seen.clone();
        let mut rng = StdRng::seed_from_u64(77);
        sim.set_observer(Box::new(move |snap, pod, eval| {
            let again = profile.evaluate(snap, pod, None, 0, &mut rng);
            let best = again.best().map(|b| b.total);
            let tied: Vec<usize> = again
                .ranked
                .iter()
                .filter(|r| Some(r.total) == best)
                .map(|r| r.index)
                .collect();
            assert_eq!(
                eval.best().map(|b| b.total),
                best,
                "{}: totals differ",
                pod.name
            );
            assert_eq!(
                eval.filtered, again.filtered,
                "{}: filters differ",
                pod.name
            );
            log.borrow_mut()
                .push((pod.uid.clone(), eval.best().map(|b| b.index), tied));
        }));
        while sim.step().expect("step") {}
        let r = sim.finish();
        let seen = seen.borrow();
        for d in &r.decisions {
            let uid = &trace.pods[d.pod].id;
            let (_, chosen, tied) = seen
                .iter()
                .rev()
                .find(|(u, c, _)| u == uid && c.is_some())
                .expect("the placement was evaluated");
            assert_eq!(
                *chosen,
                Some(d.node),
                "{name}: bound elsewhere than evaluated"
            );
            assert!(
                tied.contains(&d.node),
                "{name}: {uid} not on a best-ranked node"
            );
        }
        assert!(!r.decisions.is_empty());
    }
}

fn node(name: &str) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        cpus: 4,
        cpu_ghz: 2.5,
        memory_gib: 16.0,
        nic_gbps: 10.0,
        disk_mb_per_second: 1000.0,
        gpus: 0,
        gpu_memory_gib: 80.0,
        zone: String::new(),
        class: "test".into(),
    }
}

fn pod(id: &str, request_m: i64, usage_m: f64) -> PodSpec {
    PodSpec {
        id: id.into(),
        arrival_s: 0.0,
        duration_s: 0.0,
        class: "test".into(),
        owner: id.into(),
        cpu_request_m: request_m,
        memory_request_mib: 1024,
        cpu_limit_m: 0,
        memory_limit_mib: 0,
        gpus: 0,
        usage: UsageModel::flat(Usage {
            cpu_m: usage_m,
            memory_mib: 1024.0,
            ..Default::default()
        }),
    }
}

/// Two identical 4-core nodes; two pods arrive at t = 0 requesting 1 core each, one using
/// 1 core and one 3.4 cores, flat. kube-scheduler's scoring puts the second pod on the
/// other node (fewer requests), so from step 1 on the nodes run at 25 % and 85 % CPU.
/// Over 13 steps (0…60 s) with all-idle step 0: CPU σ = 0.3 for 12 steps, hot minutes =
/// 12 × 5 s = 1, and H = (L/L̄)/(S/S̄) with equal capacities is each node's load over the
/// mean.
#[test]
fn hand_computed_two_node_scenario() {
    let p = profiles();
    let cluster = Cluster::new(vec![node("a"), node("b")]).expect("cluster");
    let trace =
        Trace::new(vec![pod("light", 1000, 1000.0), pod("heavy", 1000, 3400.0)]).expect("trace");
    let mut s = settings(&p, 1);
    s.duration_s = Some(60.0);
    let r = simulate(
        p.get("loadstar-requests").expect("profile"),
        &cluster,
        &trace,
        &s,
        &quiet,
    )
    .expect("run");
    let sm = &r.summary;
    assert_eq!(r.decisions.len(), 2);
    assert_ne!(
        r.decisions[0].node, r.decisions[1].node,
        "requests spread the pods"
    );
    assert_eq!((sm.pods_running, sm.pods_pending), (2, 0));
    assert_eq!(sm.wait_mean_s, 0.0);
    let cpu = sm.resource("cpu").expect("cpu");
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(close(cpu.std_mean, 0.3 * 12.0 / 13.0), "σ̄ {}", cpu.std_mean);
    assert!(close(cpu.std_max, 0.3));
    assert!(close(cpu.util_max, 0.85));
    assert!(close(cpu.util_mean, 0.55 * 12.0 / 13.0));
    assert!(close(cpu.hot_node_minutes, 1.0));
    assert!(close(sm.hot_node_minutes_any, 1.0));
    assert_eq!(sm.overload_node_minutes, 0.0);
    let mem = sm.resource("memory").expect("memory");
    assert!(close(mem.std_mean, 0.0));
    let heavy = r.decisions[1].node;
    let light = r.decisions[0].node;
    let h = |i: usize| sm.per_node[i].h.expect("h");
    let h_cpu = |i: usize| sm.per_node[i].h_per_resource[0].expect("h cpu");
    assert!(close(h_cpu(heavy), 0.85 / 0.55));
    assert!(close(h_cpu(light), 0.25 / 0.55));
    // Combined: each resource normalised by its mean capacity (equal here), so
    // L(i) = cpu(i) + memory(i) in utilisation, S(i) = 4 for both.
    let mean_l = (0.85 + 0.25 + 2.0 * 0.0625) / 2.0;
    assert!(close(h(heavy), (0.85 + 0.0625) / mean_l), "H {}", h(heavy));
    assert!(close(h(light), (0.25 + 0.0625) / mean_l));
    assert!(close(sm.h_max_deviation, (0.85 + 0.0625) / mean_l - 1.0));
    assert_eq!(sm.per_node[heavy].placements, 1);
    assert!(close(sm.per_node[heavy].hot_cpu_minutes, 1.0));
}

/// A pod that fits nowhere stays pending with the filter's reason; in-flight estimates
/// keep a burst from piling onto the node that looked idlest.
#[test]
fn pending_reasons_and_inflight_burst() {
    let p = profiles();
    let cluster = Cluster::new(vec![node("a"), node("b")]).expect("cluster");
    let mut pods: Vec<PodSpec> = (0..6)
        .map(|i| pod(&format!("burst-{i}"), 0, 500.0))
        .collect();
    pods.push(pod("huge", 8000, 100.0));
    let trace = Trace::new(pods).expect("trace");
    let mut s = settings(&p, 1);
    s.duration_s = Some(30.0);
    let r = simulate(
        p.get("loadstar").expect("profile"),
        &cluster,
        &trace,
        &s,
        &quiet,
    )
    .expect("run");
    let sm = &r.summary;
    assert_eq!(sm.pods_pending, 1);
    assert_eq!(
        sm.pending_at_end[0].0,
        "0/2 nodes are available: 2 Insufficient cpu."
    );
    // Six BestEffort pods in one step: the in-flight estimate (250m fallback each) makes
    // the real-load profile alternate instead of sending all six to one idle node.
    let on_a = r.decisions.iter().filter(|d| d.node == 0).count();
    assert_eq!(on_a, 3, "{:?}", r.decisions);
}

#[test]
fn a_study_over_seeds_reports_every_profile_with_intervals_and_paired_changes() {
    use loadstar_sim::cli::{SimArgs, run_seeds};
    let args = SimArgs {
        nodes: 4,
        pods: 40,
        arrival_window_s: 600.0,
        seeds: 3,
        seed: 7,
        no_plots: true,
        jobs: Some(1),
        ..SimArgs::default()
    };
    let study = run_seeds(&args).expect("runs");
    assert_eq!(study.seeds, vec![7, 8, 9]);
    assert_eq!(study.baseline, "loadstar-requests");
    let names: Vec<&str> = study.profiles.iter().map(|p| p.profile.as_str()).collect();
    assert_eq!(names, ["loadstar-requests", "loadstar"]);
    for p in &study.profiles {
        let cpu = p.figures[0];
        assert!(
            cpu.mean.is_finite() && cpu.ci95.is_finite() && cpu.ci95 >= 0.0,
            "{p:?}"
        );
    }
    // The baseline against itself changes nothing, in every seed.
    let base = &study.profiles[0];
    assert_eq!(base.vs_baseline_pct[0].mean, 0.0);
    assert_eq!(base.vs_baseline_pct[0].ci95, 0.0);
    // The same seeds give the same study (every run is deterministic; compared as text,
    // since NaN marks changes against a zero baseline).
    assert_eq!(run_seeds(&args).expect("runs").to_csv(), study.to_csv());
    let text = study.to_text();
    assert!(
        text.starts_with("scenario custom over 3 seeds (7–9)"),
        "{text}"
    );
    assert!(text.contains("Against the baseline loadstar-requests, paired by seed"));
    assert!(study.to_csv().lines().count() == 1 + 2 * loadstar_sim::seeds::FIGURES.len());
}

#[test]
fn the_simulator_samples_nodes_as_the_scheduler_does() {
    // The embedded config with kube-scheduler's `percentageOfNodesToScore: 30`.
    let dir = std::env::temp_dir().join(format!("loadstar-sim-sampling-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "percentageOfNodesToScore: 30\n{}",
            loadstar_policy::config::DEFAULT_CONFIG_YAML
        ),
    )
    .expect("config written");
    let p = Profiles::load(Some(&path)).expect("config builds");
    let profile = p.get("loadstar").expect("profile");
    let cluster = Cluster::generate(400, &NodeMix::default(), 9).expect("cluster");
    let trace = Trace::generate(60, &TraceMix::default(), 600.0, 9);
    let mut sim = Simulation::new(profile, &cluster, &trace, &settings(&p, 9)).expect("sim");
    let seen: Rc<RefCell<Vec<(usize, usize)>>> = Rc::default();
    let log = seen.clone();
    sim.set_observer(Box::new(move |snap, _, eval| {
        log.borrow_mut().push((eval.evaluated, snap.nodes().len()));
    }));
    while sim.step().expect("step") {}
    let seen = seen.borrow();
    assert!(!seen.is_empty());
    for &(evaluated, nodes) in seen.iter() {
        assert_eq!(nodes, 400);
        // 30 % of 400 feasible nodes wanted: at least 120 examined, every node only when
        // too few fit.
        assert!((120..=400).contains(&evaluated), "{evaluated} of {nodes}");
    }
    assert!(
        seen.iter().any(|&(evaluated, _)| evaluated < 400),
        "no cycle stopped early: {:?}",
        &seen[..seen.len().min(10)]
    );
    std::fs::remove_dir_all(&dir).ok();
}
