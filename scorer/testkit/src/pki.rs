//! A throwaway CA and a serving certificate signed by it, made with the `openssl` command
//! (as the e2e cluster script makes its own), for tests of TLS endpoints.
use std::path::{Path, PathBuf};
use std::process::Command;

/// The files [`server_cert`] wrote.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The CA certificate (PEM), for clients.
    pub ca: PathBuf,
    /// The serving certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) -> std::io::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// Writes into `dir` a CA (`ca.crt`, `ca.key`) and a serving certificate for
/// `subject_alt_name` (e.g. `DNS:localhost`, `IP:127.0.0.1`) signed by it (`tls.crt`,
/// `tls.key`), valid for a day.
pub fn server_cert(dir: &Path, subject_alt_name: &str) -> std::io::Result<Pki> {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=loadstar-test-ca",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    )?;
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=loadstar-test",
            "-keyout",
            "tls.key",
            "-out",
            "tls.csr",
        ],
    )?;
    std::fs::write(
        dir.join("ext.cnf"),
        format!(
            "subjectAltName={subject_alt_name}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
        ),
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "ext.cnf",
            "-out",
            "tls.crt",
        ],
    )?;
    Ok(Pki {
        ca: dir.join("ca.crt"),
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    })
}
