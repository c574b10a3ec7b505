//! The plugin registry: every filter and score plugin by name, built from its YAML `args`.
use loadstar_framework::{FilterPlugin, ScorePlugin};

use crate::{
    eviction, gpu_bin_pack, load_aware_scheduling, load_ratio, load_variation_risk_balancing,
    min_variance, target_load_packing, usage_threshold,
};
use loadstar_parity::args::PluginError;
use loadstar_parity::{
    balanced_allocation, image_locality, inter_pod_affinity, least_allocated, most_allocated,
    node_affinity, node_ports, node_ready, node_resources_fit, node_volume_limits,
    pod_topology_spread, selector_spread, taint_toleration, volume_binding, volume_restrictions,
    volume_zone,
};

/// Names of the filter plugins [`build_filter`] knows, in the order a profile usually runs
/// them (cheap Kubernetes checks first, load checks last).
pub const FILTER_NAMES: &[&str] = &[
    node_ready::NAME,
    taint_toleration::NAME,
    node_affinity::NAME,
    node_resources_fit::NAME,
    node_ports::NAME,
    volume_restrictions::NAME,
    node_volume_limits::EBS_NAME,
    node_volume_limits::GCE_PD_NAME,
    node_volume_limits::CSI_NAME,
    node_volume_limits::AZURE_DISK_NAME,
    node_volume_limits::CINDER_NAME,
    volume_binding::NAME,
    volume_zone::NAME,
    pod_topology_spread::NAME,
    inter_pod_affinity::NAME,
    eviction::NAME,
    usage_threshold::NAME,
    load_aware_scheduling::NAME,
];

/// Names of the score plugins [`build_score`] knows.
pub const SCORE_NAMES: &[&str] = &[
    load_ratio::NAME,
    least_allocated::NAME,
    balanced_allocation::NAME,
    most_allocated::NAME,
    target_load_packing::NAME,
    load_variation_risk_balancing::NAME,
    min_variance::NAME,
    gpu_bin_pack::NAME,
    selector_spread::NAME,
    taint_toleration::NAME,
    node_affinity::NAME,
    inter_pod_affinity::NAME,
    pod_topology_spread::NAME,
    image_locality::NAME,
    load_aware_scheduling::NAME,
];

/// Plugins re-implemented from peer schedulers for comparison (Koordinator's
/// `LoadAwareScheduling`): known to every profile, run by none of Loadstar's defaults.
pub const PEER_PLUGINS: &[&str] = &[load_aware_scheduling::NAME];

/// Filters that read real load (or pressure) rather than what Kubernetes declares: what a
/// kube-scheduler extender adds on top of kube-scheduler's own filters.
pub const LOAD_AWARE_FILTERS: &[&str] = &[
    eviction::NAME,
    usage_threshold::NAME,
    load_aware_scheduling::NAME,
];

/// Scores that read real load: what a kube-scheduler extender adds on top of
/// kube-scheduler's own (requests, affinity, taints and spreading it scores itself).
pub const LOAD_AWARE_SCORES: &[&str] = &[
    load_ratio::NAME,
    target_load_packing::NAME,
    load_variation_risk_balancing::NAME,
    min_variance::NAME,
    gpu_bin_pack::NAME,
    load_aware_scheduling::NAME,
];

/// Builds the filter plugin `name` with `args` (null = defaults).
pub fn build_filter(
    name: &str,
    args: &serde_norway::Value,
) -> Result<Box<dyn FilterPlugin>, PluginError> {
    Ok(match name {
        node_ready::NAME => Box::new(node_ready::NodeReady::from_args(args)?),
        taint_toleration::NAME => Box::new(taint_toleration::TaintToleration::from_args(args)?),
        node_affinity::NAME => Box::new(node_affinity::NodeAffinity::from_args(args)?),
        node_resources_fit::NAME => {
            Box::new(node_resources_fit::NodeResourcesFit::from_args(args)?)
        }
        node_ports::NAME => Box::new(node_ports::NodePorts::from_args(args)?),
        pod_topology_spread::NAME => {
            Box::new(pod_topology_spread::PodTopologySpread::from_args(args)?)
        }
        inter_pod_affinity::NAME => {
            Box::new(inter_pod_affinity::InterPodAffinity::from_args(args)?)
        }
        volume_restrictions::NAME => {
            Box::new(volume_restrictions::VolumeRestrictions::from_args(args)?)
        }
        node_volume_limits::CSI_NAME => {
            Box::new(node_volume_limits::NodeVolumeLimits::from_args(args)?)
        }
        node_volume_limits::EBS_NAME => in_tree_limits(node_volume_limits::EBS_NAME, args)?,
        node_volume_limits::GCE_PD_NAME => in_tree_limits(node_volume_limits::GCE_PD_NAME, args)?,
        node_volume_limits::AZURE_DISK_NAME => {
            in_tree_limits(node_volume_limits::AZURE_DISK_NAME, args)?
        }
        node_volume_limits::CINDER_NAME => in_tree_limits(node_volume_limits::CINDER_NAME, args)?,
        volume_binding::NAME => Box::new(volume_binding::VolumeBinding::from_args(args)?),
        volume_zone::NAME => Box::new(volume_zone::VolumeZone::from_args(args)?),
        eviction::NAME => Box::new(eviction::EvictionPressure::from_args(args)?),
        usage_threshold::NAME => Box::new(usage_threshold::UsageThreshold::from_args(args)?),
        load_aware_scheduling::NAME => {
            Box::new(load_aware_scheduling::LoadAwareScheduling::from_args(args)?)
        }
        _ => {
            return Err(PluginError::Unknown {
                kind: "filter",
                name: name.into(),
                known: FILTER_NAMES.join(", "),
            });
        }
    })
}

fn in_tree_limits(
    name: &'static str,
    args: &serde_norway::Value,
) -> Result<Box<dyn FilterPlugin>, PluginError> {
    Ok(Box::new(node_volume_limits::InTreeVolumeLimits::from_args(
        name, args,
    )?))
}

/// Builds the score plugin `name` with `args` (null = defaults).
pub fn build_score(
    name: &str,
    args: &serde_norway::Value,
) -> Result<Box<dyn ScorePlugin>, PluginError> {
    Ok(match name {
        load_ratio::NAME => Box::new(load_ratio::LoadRatio::from_args(args)?),
        least_allocated::NAME => Box::new(least_allocated::LeastAllocated::from_args(args)?),
        balanced_allocation::NAME => {
            Box::new(balanced_allocation::BalancedAllocation::from_args(args)?)
        }
        most_allocated::NAME => Box::new(most_allocated::MostAllocated::from_args(args)?),
        target_load_packing::NAME => {
            Box::new(target_load_packing::TargetLoadPacking::from_args(args)?)
        }
        load_variation_risk_balancing::NAME => {
            Box::new(load_variation_risk_balancing::LoadVariationRiskBalancing::from_args(args)?)
        }
        min_variance::NAME => Box::new(min_variance::MinVariance::from_args(args)?),
        gpu_bin_pack::NAME => Box::new(gpu_bin_pack::GpuBinPack::from_args(args)?),
        load_aware_scheduling::NAME => {
            Box::new(load_aware_scheduling::LoadAwareScheduling::from_args(args)?)
        }
        selector_spread::NAME => Box::new(selector_spread::SelectorSpread::from_args(args)?),
        taint_toleration::NAME => Box::new(taint_toleration::TaintToleration::from_args(args)?),
        node_affinity::NAME => Box::new(node_affinity::NodeAffinity::from_args(args)?),
        inter_pod_affinity::NAME => {
            Box::new(inter_pod_affinity::InterPodAffinity::from_args(args)?)
        }
        pod_topology_spread::NAME => {
            Box::new(pod_topology_spread::PodTopologySpread::from_args(args)?)
        }
        image_locality::NAME => Box::new(image_locality::ImageLocality::from_args(args)?),
        _ => {
            return Err(PluginError::Unknown {
                kind: "score",
                name: name.into(),
                known: SCORE_NAMES.join(", "),
            });
        }
    })
}
