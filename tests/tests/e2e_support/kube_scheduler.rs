//! Real Kubernetes v1.20.2 control-plane processes for the end-to-end suite: a
//! kube-scheduler run with a given `KubeSchedulerConfiguration`, or a kube-controller-manager
//! running chosen controllers (no serving ports, no leader election), each with its log kept
//! for failure reports.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};

/// A running kube-scheduler or kube-controller-manager.
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
        Self::spawn(
            bin,
            &[
                format!("--config={}", cfg.display()),
                "--port=0".into(),
                "--secure-port=0".into(),
                "--logtostderr=true".into(),
                "--v=2".into(),
            ],
            dir,
            name,
        )
    }

    /// Starts kube-controller-manager `bin` with only `controllers` (e.g.
    /// `persistentvolume-binder`) and the flags `extra` (e.g. `--feature-gates=…`), as the
    /// admin of `kubeconfig`, logging to `dir/{name}.log`.
    pub fn controller_manager(
        bin: &Path,
        kubeconfig: &Path,
        controllers: &str,
        extra: &[&str],
        dir: &Path,
        name: &str,
    ) -> Result<KubeScheduler> {
        let mut args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--controllers={controllers}"),
            "--leader-elect=false".into(),
            "--use-service-account-credentials=false".into(),
            "--port=0".into(),
            "--secure-port=0".into(),
            "--logtostderr=true".into(),
            "--v=2".into(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        Self::spawn(bin, &args, dir, name)
    }

    fn spawn(bin: &Path, args: &[String], dir: &Path, name: &str) -> Result<KubeScheduler> {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log)?;
        let child = Command::new(bin)
            .args(args)
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
