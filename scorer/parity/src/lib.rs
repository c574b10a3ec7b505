//! kube-scheduler 1.20's filter and score plugins as Loadstar runs them, one file each:
//! node readiness and cordons, taints and tolerations, node affinity, host ports, requests
//! (`NodeResourcesFit`, and the allocation scores `LeastAllocated`, `MostAllocated`,
//! `BalancedAllocation` over [`resource_allocation`]), the images nodes hold
//! (`ImageLocality`), volumes (restrictions, zones, attach
//! limits, binding), topology spreading (`PodTopologySpread`, `SelectorSpread`) and
//! inter-pod affinity; with the plugin arguments' parsing and errors ([`args`]) and the
//! per-node codes the hot passes read ([`rows`]).
//!
//! Each is a pure function of the [`CycleContext`](loadstar_framework::CycleContext)'s
//! snapshot and the pod, checked against upstream's behaviour case by case in its tests.
//! `loadstar-policy` adds the load-aware plugins and the registry that builds all of them by
//! name, and re-exports these modules under its own paths.
pub mod args;
pub mod balanced_allocation;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod least_allocated;
pub mod most_allocated;
pub mod node_affinity;
pub mod node_ports;
pub mod node_ready;
pub mod node_resources_fit;
pub mod node_volume_limits;
pub mod pod_topology_spread;
pub mod resource_allocation;
pub mod rows;
pub mod selector_spread;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

pub use args::{NoArgs, PluginError};
