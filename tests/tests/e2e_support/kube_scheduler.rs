//! A real kube-scheduler v1.20.2 process for the end-to-end suite, run with a given
//! `KubeSchedulerConfiguration` (no serving ports), its log kept for failure reports.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};

/// The running kube-scheduler.
pub struct KubeScheduler {
    child: Option<Child>,
    /// Its stdout and stderr.
    pub log: PathBuf,
}

impl KubeScheduler {
    /// Writes `config` to `dir/{name}.yaml` and starts `bin` with it, logging to
    /// `dir/{name}.log`.
    pub fn start_with(bin: &Path, config: &str, dir: &Path, name: &str) -> Result<KubeScheduler> {
        let cfg = dir.join(format!("{name}.yaml"));
        std::fs::write(&cfg, config).with_context(|| format!("writing {}", cfg.display()))?;
        let log = dir.join(format!("{name}.log"));
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
