//! A dedicated real kube-scheduler v1.20.2 for the differential test: one profile
//! (`diff-kube`, kube-scheduler's default plugins, PodTopologySpread with the diff's hard
//! default constraints), no leader election, every node evaluated
//! (`percentageOfNodesToScore: 100`), one-second backoffs, and the recording extender
//! ([`super::extender`]) as its filter extender. It runs under the admin kubeconfig and binds
//! nothing: the extender rejects every node.
use std::path::Path;

use anyhow::Result;

pub use crate::e2e_support::kube_scheduler::KubeScheduler;

use super::extender::FILTER_VERB;
use super::generator::spreading::DEFAULT_CONSTRAINTS;
use super::scenario::SCHEDULER_NAME;

/// The `KubeSchedulerConfiguration` it runs with.
pub fn config(kubeconfig: &Path, extender_url: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1beta1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: {kubeconfig}
  qps: 200
  burst: 400
percentageOfNodesToScore: 100
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 1
profiles:
- schedulerName: {SCHEDULER_NAME}
  pluginConfig:
  - name: PodTopologySpread
    args:
      defaultingType: List
      defaultConstraints: {DEFAULT_CONSTRAINTS}
extenders:
- urlPrefix: {extender_url}
  filterVerb: {FILTER_VERB}
  enableHTTPS: false
  nodeCacheCapable: false
  httpTimeout: 10s
",
        kubeconfig = kubeconfig.display(),
    )
}

/// Starts the dedicated kube-scheduler of the differential test, calling the recording
/// extender at `extender_url`.
pub fn start(
    bin: &Path,
    kubeconfig: &Path,
    extender_url: &str,
    dir: &Path,
) -> Result<KubeScheduler> {
    KubeScheduler::start_with(
        bin,
        &config(kubeconfig, extender_url),
        dir,
        "diff-kube-scheduler",
    )
}
