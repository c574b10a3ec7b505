//! A simulated node agent: samples the node's true utilisation every step into the same
//! [`WindowSet`]s the real agent keeps, and every report interval builds the
//! [`AgentNode`] the scorer's store would hold after validating a report — windows as of the
//! report (so the scorer lags reality), per-pod usage only for pods running long enough to be
//! measured, and per-GPU state.
use std::collections::HashMap;
use std::time::Instant;

use loadstar_common::model::{LoadSummary, NodeCapacity, ResourceKind, ResourceLoad};
use loadstar_common::window::{WindowError, WindowSet};
use thiserror::Error;

use loadstar_framework::snapshot::{AgentNode, GpuState, MeasuredPod};

/// Errors of a simulated agent.
#[derive(Debug, Error)]
pub enum AgentError {
    /// The window configuration is invalid.
    #[error("node {node}: windows: {source}")]
    Windows {
        /// The node.
        node: String,
        /// The window error.
        #[source]
        source: WindowError,
    },
    /// A sample was not finite (a simulator bug; the sample is named).
    #[error("node {node}: {kind} sample: {source}")]
    Sample {
        /// The node.
        node: String,
        /// The resource.
        kind: &'static str,
        /// The window error.
        #[source]
        source: WindowError,
    },
}

/// A node's true utilisation at one step, as ratios of capacity (0–1).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NodeSample {
    /// CPU busy ratio (demand capped at 1).
    pub cpu: f64,
    /// Memory in use ratio (capped at 1).
    pub memory: f64,
    /// NIC throughput over link speed (capped at 1).
    pub network: f64,
    /// Disk throughput over max rate (capped at 1).
    pub disk: f64,
    /// Mean GPU compute utilisation (GPU nodes only).
    pub gpu: f64,
    /// GPU memory in use ratio (GPU nodes only).
    pub gpu_memory: f64,
}

impl NodeSample {
    /// The ratio of `kind`.
    pub fn get(&self, kind: ResourceKind) -> f64 {
        match kind {
            ResourceKind::Cpu => self.cpu,
            ResourceKind::Memory => self.memory,
            ResourceKind::Network => self.network,
            ResourceKind::DiskIo => self.disk,
            ResourceKind::Gpu => self.gpu,
            ResourceKind::GpuMemory => self.gpu_memory,
        }
    }
}

/// The simulated agent of one node.
#[derive(Debug, Clone)]
pub struct SimAgent {
    node: String,
    capacity: NodeCapacity,
    kinds: Vec<ResourceKind>,
    windows: Vec<WindowSet>,
    latest: NodeSample,
    interval_seconds: f64,
}

impl SimAgent {
    /// An agent for a node of `capacity` sampling every `interval_seconds` into windows of
    /// `window_seconds` (GPU windows only when the node has GPUs).
    pub fn new(
        node: &str,
        capacity: NodeCapacity,
        window_seconds: &[u32],
        interval_seconds: f64,
    ) -> Result<SimAgent, AgentError> {
        let kinds: Vec<ResourceKind> = ResourceKind::ALL
            .into_iter()
            .filter(|k| {
                !matches!(k, ResourceKind::Gpu | ResourceKind::GpuMemory)
                    || !capacity.gpus.is_empty()
            })
            .collect();
        let windows = kinds
            .iter()
            .map(|_| WindowSet::for_interval(window_seconds, interval_seconds))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| AgentError::Windows {
                node: node.to_string(),
                source,
            })?;
        Ok(SimAgent {
            node: node.to_string(),
            capacity,
            kinds,
            windows,
            latest: NodeSample::default(),
            interval_seconds,
        })
    }

    /// Records one sample of every resource.
    pub fn sample(&mut self, s: &NodeSample) -> Result<(), AgentError> {
        for (k, w) in self.kinds.iter().zip(&mut self.windows) {
            w.push(s.get(*k)).map_err(|source| AgentError::Sample {
                node: self.node.clone(),
                kind: k.name(),
                source,
            })?;
        }
        self.latest = *s;
        Ok(())
    }

    /// The report as the store keeps it after validation: capacity, windowed load as of now,
    /// memory available, the measured pods and GPUs, received at `at`.
    pub fn report(
        &mut self,
        memory_used_bytes: f64,
        pods: HashMap<String, MeasuredPod>,
        gpus: Vec<GpuState>,
        at: Instant,
    ) -> AgentNode {
        let mut load = LoadSummary::default();
        for (k, w) in self.kinds.iter().zip(&mut self.windows) {
            load.set(
                *k,
                ResourceLoad {
                    latest: w.latest().unwrap_or(0.0),
                    windows: w.summaries(),
                },
            );
        }
        let mem = self.capacity.memory_bytes as f64;
        AgentNode {
            capacity: self.capacity.clone(),
            load,
            memory_available_bytes: (mem - memory_used_bytes).max(0.0) as u64,
            nodefs_available_ratio: Some(0.5),
            nodefs_inodes_free_ratio: Some(0.9),
            gpus,
            pods,
            interval_seconds: self.interval_seconds,
            report_interval_seconds: 0.0,
            received_at: Some(at),
            last_pressure_at: None,
        }
    }

    /// The latest sample.
    pub fn latest(&self) -> &NodeSample {
        &self.latest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_carries_windows_of_what_was_sampled() {
        let cap = NodeCapacity {
            logical_cpus: 4,
            cpu_max_frequency_hz: 2e9,
            memory_bytes: 1000,
            ..Default::default()
        };
        let mut a = SimAgent::new("n", cap, &[10, 20], 5.0).expect("valid");
        for cpu in [0.2, 0.4, 0.6] {
            a.sample(&NodeSample {
                cpu,
                memory: 0.5,
                ..Default::default()
            })
            .expect("finite");
        }
        let r = a.report(400.0, HashMap::new(), Vec::new(), Instant::now());
        let cpu = r.load.get(ResourceKind::Cpu).expect("cpu");
        assert_eq!(cpu.latest, 0.6);
        assert_eq!(cpu.windows[0].count, 2);
        assert!((cpu.windows[0].mean - 0.5).abs() < 1e-12);
        assert!((cpu.windows[1].mean - 0.4).abs() < 1e-12);
        assert_eq!(r.memory_available_bytes, 600);
        assert!(r.load.get(ResourceKind::Gpu).is_none());
        assert!(
            a.sample(&NodeSample {
                cpu: f64::NAN,
                ..Default::default()
            })
            .is_err()
        );
    }
}
