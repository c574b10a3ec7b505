//! A dedicated real kube-scheduler v1.20.2 for the differential test: one profile
//! (`diff-kube`, kube-scheduler's default plugins), no leader election, every node evaluated
//! (`percentageOfNodesToScore: 100`), one-second backoffs, and the recording extender
//! ([`super::extender`]) as its filter extender. It runs under the admin kubeconfig and binds
//! nothing: the extender rejects every node.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};

use super::extender::FILTER_VERB;
use super::scenario::SCHEDULER_NAME;

/// The running kube-scheduler.
pub struct KubeScheduler {
    child: Option<Child>,
    /// Its stdout and stderr.
    pub log: PathBuf,
}

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

impl KubeScheduler {
    /// Writes the configuration into `dir` and starts `bin` (no serving ports).
    pub fn start(
        bin: &Path,
        kubeconfig: &Path,
        extender_url: &str,
        dir: &Path,
    ) -> Result<KubeScheduler> {
        let cfg = dir.join("diff-kube-scheduler.yaml");
        std::fs::write(&cfg, config(kubeconfig, extender_url))
            .with_context(|| format!("writing {}", cfg.display()))?;
        let log = dir.join("diff-kube-scheduler.log");
        let out = std::fs::File::create(&log)?;
        let child = Command::new(bin)
            .arg(format!("--config={}", cfg.display()))
            .args(["--port=0", "--secure-port=0", "--logtostderr=true", "--v=2"])
            .stdout(out.try_clone()?)
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(KubeScheduler {
            child: Some(child),
            log,
        })
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for KubeScheduler {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
