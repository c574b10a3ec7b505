//! Loadstar's load-aware filter and score plugins (one file per policy), the registry that
//! builds every plugin by name (these and kube-scheduler's, from `loadstar-parity`) from a
//! profile's config, and profiles from YAML.
//!
//! Every plugin is a pure function of the [`CycleContext`](loadstar_framework::CycleContext)'s
//! snapshot and the pod: no I/O, no clocks except the eviction filter's transition period.
//! Plugins are built from their YAML `args` (a [`serde_norway::Value`]) into typed argument
//! structs that reject unknown fields; errors carry the path of the offending field inside
//! `args`, which the profile config prefixes with the plugin's own path.
//!
//! Load comes from [`CycleContext::usage`](loadstar_framework::CycleContext::usage) (the
//! profile's window plus in-flight estimates); when it is `None` (no agent, or stale under
//! the `fallback` policy) each load-aware plugin falls back to requests as documented on it.
// kube-scheduler's plugins live in `loadstar-parity`; re-exported under this crate's paths.
pub use loadstar_parity::{
    args, balanced_allocation, image_locality, inter_pod_affinity, least_allocated, most_allocated,
    node_affinity, node_ports, node_ready, node_resources_fit, node_volume_limits,
    pod_topology_spread, resource_allocation, selector_spread, taint_toleration, volume_binding,
    volume_restrictions, volume_zone,
};

pub mod config;
pub mod eviction;
pub mod gpu_bin_pack;
pub mod inflight;
pub mod load_aware_scheduling;
pub mod load_ratio;
pub mod load_variation_risk_balancing;
pub mod min_variance;
pub mod profiles;
pub mod registry;
pub mod target_load_packing;
pub mod usage_threshold;
pub mod util;

pub use args::{NoArgs, PluginError};
pub use registry::{FILTER_NAMES, SCORE_NAMES, build_filter, build_score};

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(s: &str) -> serde_norway::Value {
        serde_norway::from_str(s).expect("yaml")
    }

    #[test]
    fn every_name_builds_with_defaults() {
        for name in FILTER_NAMES {
            let f = build_filter(name, &serde_norway::Value::Null).expect(name);
            assert_eq!(f.name(), *name);
        }
        for name in SCORE_NAMES {
            let s = build_score(name, &serde_norway::Value::Null).expect(name);
            assert_eq!(s.name(), *name);
        }
    }

    #[test]
    fn digest_rows_give_the_same_verdicts_and_track_edits() {
        use loadstar_testkit::snapshot::batch_verdicts;
        use std::borrow::Cow;

        use loadstar_common::model::ResourceKind;
        use loadstar_framework::snapshot::raw_usage;
        use loadstar_framework::{CycleContext, StalePolicy};
        use loadstar_testkit::snapshot::*;

        let loaded = |name: &str, cpu: f64, mem: f64| {
            let n = with_capacity(kube_node(name, 8000, 32 * GIB), 8, 32 * GIB);
            with_load(
                with_load(n, ResourceKind::Cpu, cpu, 0.1),
                ResourceKind::Memory,
                mem,
                0.05,
            )
        };
        let mut stale = loaded("d", 0.3, 0.3);
        stale.stale = true;
        let mut snap = snapshot(vec![
            loaded("a", 0.2, 0.4),
            with_requested(loaded("b", 0.7, 0.2), 4000, 8 * GIB),
            kube_node("c", 4000, 16 * GIB),
            stale,
        ]);
        let table = snap.digests(60);
        let p = pod(1500, 2 * GIB);
        let mut buf = Vec::new();
        for policy in [StalePolicy::Fallback, StalePolicy::Penalize] {
            let plain = CycleContext::new(&snap, 60, policy);
            let fast = CycleContext {
                digests: Some(&table),
                ..plain
            };
            // As `Profile::evaluate` runs them: rows checked once, and memos allowed.
            let checked = CycleContext {
                current: Some(table.current_rows(snap.nodes(), &mut buf)),
                ..fast
            };
            assert!(checked.current.is_some_and(|c| c.all()));
            let nodes: Vec<&loadstar_framework::snapshot::NodeView> = snap.nodes().iter().collect();
            for n in &nodes {
                assert!(matches!(fast.digest(n), Cow::Borrowed(_)));
                assert!(matches!(checked.digest(n), Cow::Borrowed(_)));
                assert!(matches!(plain.digest(n), Cow::Owned(_)));
                for kind in ResourceKind::ALL {
                    assert_eq!(fast.usage(n, kind), plain.usage(n, kind));
                    assert_eq!(checked.usage(n, kind), plain.usage(n, kind));
                }
            }
            for name in SCORE_NAMES {
                let plugin = build_score(name, &serde_norway::Value::Null).expect(name);
                let mut want = vec![0; nodes.len()];
                plugin.score(&plain, &p, &nodes, &mut want);
                // Twice with the checked context: the second reads what the first memoised.
                let all: Vec<usize> = (0..nodes.len()).collect();
                for ctx in [&fast, &checked, &checked] {
                    // Filled with a value no plugin gives: every entry must be written
                    // (evaluation does not clear the columns between pods).
                    let mut got = vec![i64::MIN; nodes.len()];
                    plugin.score(ctx, &p, &nodes, &mut got);
                    assert_eq!(got, want, "{name}");
                    got.fill(i64::MIN);
                    // By index, as evaluation calls it.
                    plugin.score_indexed(ctx, &p, &nodes, &all, &mut got);
                    assert_eq!(got, want, "{name} by index");
                }
            }
            for name in FILTER_NAMES {
                let plugin = build_filter(name, &serde_norway::Value::Null).expect(name);
                let mut want = Vec::new();
                for n in &nodes {
                    want.push(plugin.filter(&plain, &p, n));
                    assert_eq!(plugin.filter(&fast, &p, n), want[want.len() - 1], "{name}");
                    assert_eq!(
                        plugin.filter(&checked, &p, n),
                        want[want.len() - 1],
                        "{name}"
                    );
                }
                // Batched, as evaluation runs them (twice: the second reads the memos).
                for ctx in [&plain, &fast, &checked, &checked] {
                    assert_eq!(batch_verdicts(&*plugin, ctx, &p), want, "{name}");
                }
            }
        }
        // MinVariance memoised its cluster pass on the table (once per stale policy).
        let min_variance = build_score("MinVariance", &serde_norway::Value::Null).expect("mv");
        let score_with = |snap: &loadstar_framework::snapshot::ClusterSnapshot,
                          table: Option<&loadstar_framework::snapshot::DigestTable>,
                          buf: &mut Vec<bool>| {
            let nodes: Vec<&loadstar_framework::snapshot::NodeView> = snap.nodes().iter().collect();
            let ctx = CycleContext {
                digests: table,
                current: table.map(|t| t.current_rows(snap.nodes(), buf)),
                ..CycleContext::new(snap, 60, StalePolicy::Fallback)
            };
            let mut out = vec![0; nodes.len()];
            min_variance.score(&ctx, &p, &nodes, &mut out);
            out
        };
        assert_eq!(
            score_with(&snap, Some(&table), &mut buf),
            score_with(&snap, None, &mut buf)
        );
        // A row patched in place (`set_alloc` on a table nobody else holds, as the scheduler
        // assumes a pod): MinVariance's memo follows the new requests of node c (no agent:
        // MinVariance reads its requests) and is used, not built again; LoadRatio's is
        // dropped.
        drop(table);
        let before = score_with(&snap, Some(&snap.digests(60)), &mut buf);
        let held = snap.digests(60).memos();
        let edited = with_requested(snap.nodes()[2].clone(), 3500, 0);
        snap.set_alloc(2, edited.alloc.clone());
        let table = snap.digests(60);
        assert!(
            table.current_rows(snap.nodes(), &mut buf).all(),
            "the row was patched"
        );
        let kept = table.memos();
        assert!((1..held).contains(&kept), "{kept} of {held} memos kept");
        let after = score_with(&snap, Some(&table), &mut buf);
        assert_eq!(table.memos(), kept, "the patched memo was used");
        assert_eq!(after, score_with(&snap, None, &mut buf));
        assert_ne!(after, before, "node c's requests change the scores");
        // Every plugin, as evaluation runs it, reads what the patched memos hold.
        {
            let plain = CycleContext::new(&snap, 60, StalePolicy::Fallback);
            let checked = CycleContext {
                digests: Some(&table),
                current: Some(table.current_rows(snap.nodes(), &mut buf)),
                ..plain
            };
            let nodes: Vec<&loadstar_framework::snapshot::NodeView> = snap.nodes().iter().collect();
            let all: Vec<usize> = (0..nodes.len()).collect();
            for name in SCORE_NAMES {
                let plugin = build_score(name, &serde_norway::Value::Null).expect(name);
                let (mut want, mut got) = (vec![0; nodes.len()], vec![0; nodes.len()]);
                plugin.score(&plain, &p, &nodes, &mut want);
                plugin.score_indexed(&checked, &p, &nodes, &all, &mut got);
                assert_eq!(got, want, "{name} after a patch");
            }
            for name in FILTER_NAMES {
                let plugin = build_filter(name, &serde_norway::Value::Null).expect(name);
                let want: Vec<_> = nodes.iter().map(|n| plugin.filter(&plain, &p, n)).collect();
                assert_eq!(
                    batch_verdicts(&*plugin, &checked, &p),
                    want,
                    "{name} after a patch"
                );
            }
        }
        drop(table);
        // An edit that leaves rows behind (node a's view replaced in place, load and all):
        // not every row is current, so nothing memoised is read.
        snap.nodes_mut()[0] = loaded("a", 0.9, 0.4);
        let table = snap.digests(60);
        assert!(!table.current_rows(snap.nodes(), &mut buf).all());
        assert_eq!(
            score_with(&snap, Some(&table), &mut buf),
            score_with(&snap, None, &mut buf)
        );
        drop(table);
        // Staleness flipped in place (as the simulator does), nothing else changed: node d's
        // row was computed stale, so it is not current, and every plugin reads the node's
        // load again under `fallback`.
        let table = snap.digests(60);
        snap.nodes_mut()[3].stale = false;
        let plain = CycleContext::new(&snap, 60, StalePolicy::Fallback);
        let checked = CycleContext {
            digests: Some(&table),
            current: Some(table.current_rows(snap.nodes(), &mut buf)),
            ..plain
        };
        assert!(checked.row_at(3).is_none());
        assert!(!checked.current.is_some_and(|c| c.all()));
        let nodes: Vec<&loadstar_framework::snapshot::NodeView> = snap.nodes().iter().collect();
        assert!(plain.usage(nodes[3], ResourceKind::Cpu).is_some());
        for name in SCORE_NAMES {
            let plugin = build_score(name, &serde_norway::Value::Null).expect(name);
            let (mut want, mut got) = (vec![0; nodes.len()], vec![0; nodes.len()]);
            plugin.score(&plain, &p, &nodes, &mut want);
            plugin.score(&checked, &p, &nodes, &mut got);
            assert_eq!(got, want, "{name}");
            let all: Vec<usize> = (0..nodes.len()).collect();
            plugin.score_indexed(&checked, &p, &nodes, &all, &mut got);
            assert_eq!(got, want, "{name} by index");
        }
        for name in FILTER_NAMES {
            let plugin = build_filter(name, &serde_norway::Value::Null).expect(name);
            let mut want = Vec::new();
            for n in &nodes {
                want.push(plugin.filter(&plain, &p, n));
                assert_eq!(plugin.filter(&checked, &p, n), want[want.len() - 1]);
            }
            assert_eq!(batch_verdicts(&*plugin, &checked, &p), want, "{name}");
        }
        drop(nodes);
        drop(table);
        snap.nodes_mut()[3].stale = true;
        let table = snap.digests(60);
        // A node edited after the table was built (its allocation `Arc` replaced) is read
        // from the view, not from its stale row.
        snap.nodes_mut()[0] = with_requested(snap.nodes()[0].clone(), 7000, 0);
        let fast = CycleContext {
            digests: Some(&table),
            ..CycleContext::new(&snap, 60, StalePolicy::Fallback)
        };
        let d = fast.digest(&snap.nodes()[0]);
        assert!(matches!(d, Cow::Owned(_)));
        assert_eq!(d.requested_cpu_millis, 7000);
        assert_eq!(
            fast.usage(&snap.nodes()[0], ResourceKind::Cpu),
            raw_usage(&snap.nodes()[0], ResourceKind::Cpu, 60)
        );
        // A new generation gets a new table; the same one is shared.
        assert!(std::sync::Arc::ptr_eq(&table, &snap.digests(60)));
        snap.generation += 1;
        assert_eq!(snap.digests(60).generation, snap.generation);
    }

    #[test]
    fn unknown_names_and_fields_are_rejected_with_paths() {
        let err = build_score("Nope", &serde_norway::Value::Null).expect_err("unknown");
        assert!(err.to_string().starts_with("unknown score plugin \"Nope\""));
        let err = build_filter("NodePorts", &yaml("{foo: 1}")).expect_err("no args");
        assert!(matches!(&err, PluginError::InvalidArgs { path, .. } if path == "foo"));
        assert!(err.to_string().contains("unknown field `foo`"), "{err}");
        let err =
            build_score("TargetLoadPacking", &yaml("{targetUtilization: 120}")).expect_err("range");
        assert_eq!(
            err,
            PluginError::invalid(
                "TargetLoadPacking",
                "targetUtilization",
                "must be between 1 and 99, got 120"
            )
        );
        let err = build_score(
            "LeastAllocated",
            &yaml("{resources: [{name: cpu, weight: 1}, {name: memory, weight: nope}]}"),
        )
        .expect_err("type");
        assert!(
            matches!(&err, PluginError::InvalidArgs { path, .. } if path == "resources[1].weight"),
            "{err:?}"
        );
    }
}
