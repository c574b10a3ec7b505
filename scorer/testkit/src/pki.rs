//! A throwaway CA with serving and client certificates signed by it, made with the `openssl`
//! command (as the e2e cluster script makes its own), for tests of TLS and mTLS endpoints.
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

/// Writes a CA into `dir` (`ca.crt`, `ca.key`), valid for a day, unless one is there.
fn ensure_ca(dir: &Path) -> std::io::Result<()> {
    if dir.join("ca.crt").exists() && dir.join("ca.key").exists() {
        return Ok(());
    }
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
    )
}

/// Signs a new key for `subject` with the CA in `dir`, with the extensions `ext`; writes
/// `<stem>.crt` and `<stem>.key`.
fn issue(dir: &Path, stem: &str, subject: &str, ext: &str) -> std::io::Result<Pki> {
    ensure_ca(dir)?;
    let (key, csr, crt, cnf) = (
        format!("{stem}.key"),
        format!("{stem}.csr"),
        format!("{stem}.crt"),
        format!("{stem}.cnf"),
    );
    openssl(
        dir,
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", &key, "-out", &csr,
        ],
    )?;
    std::fs::write(dir.join(&cnf), ext)?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &cnf,
            "-out",
            &crt,
        ],
    )?;
    Ok(Pki {
        ca: dir.join("ca.crt"),
        cert: dir.join(crt),
        key: dir.join(key),
    })
}

/// Writes into `dir` a CA (`ca.crt`, `ca.key`, unless one is there) and a serving
/// certificate for `subject_alt_name` (e.g. `DNS:localhost`, `IP:127.0.0.1`) signed by it
/// (`tls.crt`, `tls.key`), valid for a day.
pub fn server_cert(dir: &Path, subject_alt_name: &str) -> std::io::Result<Pki> {
    issue(
        dir,
        "tls",
        "/CN=loadstar-test",
        &format!(
            "subjectAltName={subject_alt_name}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
        ),
    )
}

/// Writes into `dir` a client certificate for user `common_name` in groups `organisations`
/// (`client-<cn>.crt`, `.key`), signed by the CA there (made if absent), valid for a day.
pub fn client_cert(dir: &Path, common_name: &str, organisations: &[&str]) -> std::io::Result<Pki> {
    let subject: String = organisations
        .iter()
        .map(|o| format!("/O={o}"))
        .chain(std::iter::once(format!("/CN={common_name}")))
        .collect();
    issue(
        dir,
        &format!("client-{common_name}"),
        &subject,
        "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n",
    )
}
