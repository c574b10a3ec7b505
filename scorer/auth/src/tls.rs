//! Server TLS from PEM files (a Kubernetes TLS Secret mounted as files) that follows
//! rotation without a restart: the files are re-read on an interval and a changed, valid
//! pair replaces the old one for new handshakes (a broken update keeps the old pair and is
//! counted). Optional client certificates (mTLS) are checked against a CA bundle that
//! reloads the same way. Used by the gRPC port and the extender port.
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use loadstar_store::metrics::{Metrics, ResultLabel};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{
    DigitallySignedStruct, DistinguishedName, Error as RustlsError, RootCertStore, ServerConfig,
    SignatureScheme,
};
use tracing::{info, warn};
use x509_parser::prelude::{FromDer, X509Certificate};

/// Why TLS could not be set up (at start: the process does not start; on reload: the old
/// certificate stays).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// The certificate file is unreadable or holds no certificate.
    #[error("TLS certificate {path}: {reason}")]
    Certificate {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The key file is unreadable, holds no private key, or does not match.
    #[error("TLS key {path}: {reason}")]
    Key {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The client CA bundle is unreadable or holds no usable certificate.
    #[error("TLS client CA {path}: {reason}")]
    ClientCa {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// Where the TLS material lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain (leaf first).
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM CA bundle for client certificates (mTLS); none: clients are not asked for one.
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: refuse handshakes without a client certificate (else a client may
    /// still authenticate with a bearer token).
    pub require_client_cert: bool,
}

/// One loaded generation of the files.
struct Loaded {
    key: Arc<CertifiedKey>,
    verifier: Option<Arc<dyn ClientCertVerifier>>,
    not_after: Option<i64>,
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| e.to_string())
}

fn load(files: &TlsFiles, provider: &Arc<CryptoProvider>) -> Result<(Loaded, Vec<u8>), TlsError> {
    let cert_err = |reason: String| TlsError::Certificate {
        path: files.cert.display().to_string(),
        reason,
    };
    let key_err = |reason: String| TlsError::Key {
        path: files.key.display().to_string(),
        reason,
    };
    let cert_pem = read(&files.cert).map_err(cert_err)?;
    let key_pem = read(&files.key).map_err(key_err)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| cert_err(e.to_string()))?;
    let Some(leaf) = certs.first() else {
        return Err(cert_err("no PEM certificate in it".into()));
    };
    let not_after = X509Certificate::from_der(leaf)
        .ok()
        .map(|(_, c)| c.validity().not_after.timestamp());
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| key_err(e.to_string()))?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| key_err(e.to_string()))?;
    let certified = CertifiedKey::new(certs, signing);
    certified
        .keys_match()
        .map_err(|e| key_err(format!("does not match the certificate: {e}")))?;
    let mut seen = cert_pem;
    seen.extend_from_slice(&key_pem);
    let verifier = match &files.client_ca {
        None => None,
        Some(ca) => {
            let ca_err = |reason: String| TlsError::ClientCa {
                path: ca.display().to_string(),
                reason,
            };
            let pem = read(ca).map_err(ca_err)?;
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&pem) {
                roots
                    .add(c.map_err(|e| ca_err(e.to_string()))?)
                    .map_err(|e| ca_err(e.to_string()))?;
            }
            if roots.is_empty() {
                return Err(ca_err("no PEM certificate in it".into()));
            }
            seen.extend_from_slice(&pem);
            let builder =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let builder = if files.require_client_cert {
                builder
            } else {
                builder.allow_unauthenticated()
            };
            Some(builder.build().map_err(|e| ca_err(e.to_string()))?)
        }
    };
    Ok((
        Loaded {
            key: Arc::new(certified),
            verifier,
            not_after,
        },
        seen,
    ))
}

/// Server TLS over files, reloaded by [`ServerTls::reload`] (see [`ServerTls::watch`]).
pub struct ServerTls {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    key: Arc<ArcSwap<CertifiedKey>>,
    verifier: Option<Arc<ArcSwap<Holder>>>,
    seen: Mutex<Vec<u8>>,
    config: Arc<ServerConfig>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Loads the files; `alpn` are the protocols offered (`h2` for gRPC).
    pub fn load(
        files: TlsFiles,
        alpn: &[&[u8]],
        metrics: Arc<Metrics>,
    ) -> Result<ServerTls, TlsError> {
        let provider = Arc::new(ring::default_provider());
        let (loaded, seen) = load(&files, &provider)?;
        let key = Arc::new(ArcSwap::new(loaded.key));
        let verifier = loaded
            .verifier
            .map(|v| Arc::new(ArcSwap::from_pointee(Holder(v))));
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = match &verifier {
            Some(v) => builder.with_client_cert_verifier(Arc::new(Reloading {
                current: v.clone(),
                mandatory: files.require_client_cert,
            })),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(Arc::new(Resolver(key.clone())));
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        if let Some(t) = loaded.not_after {
            metrics.tls_not_after.set(t);
        }
        Ok(ServerTls {
            files,
            provider,
            key,
            verifier,
            seen: Mutex::new(seen),
            config: Arc::new(config),
            metrics,
        })
    }

    /// The acceptor for new connections (always the current certificate).
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config.clone())
    }

    /// Whether client certificates are asked for.
    pub fn client_certs(&self) -> bool {
        self.verifier.is_some()
    }

    /// Re-reads the files: `Ok(true)` if they changed and now serve, `Ok(false)` if
    /// unchanged, `Err` (the old pair stays) if the new files are broken.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let (loaded, seen) = match load(&self.files, &self.provider) {
            Ok(l) => l,
            Err(e) => {
                self.count("error");
                return Err(e);
            }
        };
        let mut last = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if *last == seen {
            return Ok(false);
        }
        self.key.store(loaded.key);
        if let (Some(slot), Some(v)) = (&self.verifier, loaded.verifier) {
            slot.store(Arc::new(Holder(v)));
        }
        if let Some(t) = loaded.not_after {
            self.metrics.tls_not_after.set(t);
        }
        *last = seen;
        self.count("reloaded");
        Ok(true)
    }

    fn count(&self, result: &str) {
        self.metrics
            .tls_reloads
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
    }

    /// Reloads every `every` until the returned task is aborted; logs each change, and each
    /// distinct failure once.
    pub fn watch(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut last_error = None;
            loop {
                tokio::time::sleep(every).await;
                match this.reload() {
                    Ok(true) => {
                        info!(cert = %this.files.cert.display(), "TLS certificate reloaded");
                        last_error = None;
                    }
                    Ok(false) => last_error = None,
                    Err(e) => {
                        let text = e.to_string();
                        if last_error.as_ref() != Some(&text) {
                            warn!(error = %text, "TLS files changed but cannot be used; keeping the previous certificate");
                            last_error = Some(text);
                        }
                    }
                }
            }
        })
    }
}

#[derive(Debug)]
struct Resolver(Arc<ArcSwap<CertifiedKey>>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

struct Holder(Arc<dyn ClientCertVerifier>);

/// Delegates to the current CA's verifier (the CA bundle reloads too).
struct Reloading {
    current: Arc<ArcSwap<Holder>>,
    mandatory: bool,
}

impl std::fmt::Debug for Reloading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading")
            .field("mandatory", &self.mandatory)
            .finish()
    }
}

impl ClientCertVerifier for Reloading {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // The hints would borrow from a verifier that may be swapped; clients choose their
        // certificate without them (TLS 1.3 allows an empty list).
        &[]
    }
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, RustlsError> {
        self.current
            .load()
            .0
            .verify_client_cert(end_entity, intermediates, now)
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, RustlsError> {
        self.current
            .load()
            .0
            .verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, RustlsError> {
        self.current
            .load()
            .0
            .verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current.load().0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_updates_keep_the_old_pair_and_good_ones_replace_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = loadstar_testkit::pki::server_cert(dir.path(), "DNS:localhost").expect("pki");
        let files = TlsFiles {
            cert: first.cert.clone(),
            key: first.key.clone(),
            client_ca: Some(first.ca.clone()),
            require_client_cert: false,
        };
        let metrics = Metrics::new();
        let tls = ServerTls::load(files.clone(), &[b"h2"], metrics.clone()).expect("load");
        assert!(tls.client_certs());
        let leaf = |t: &ServerTls| t.key.load().cert[0].clone();
        let before = leaf(&tls);
        assert_eq!(tls.reload(), Ok(false), "unchanged files");
        // A half-written update (certificate without its key) is refused.
        let other = tempfile::tempdir().expect("tempdir");
        let second =
            loadstar_testkit::pki::server_cert(other.path(), "DNS:localhost").expect("pki");
        std::fs::copy(&second.cert, &first.cert).expect("copy");
        let e = tls.reload().expect_err("mismatched pair");
        assert!(matches!(e, TlsError::Key { .. }), "{e}");
        assert_eq!(leaf(&tls), before);
        std::fs::copy(&second.key, &first.key).expect("copy");
        assert_eq!(tls.reload(), Ok(true));
        assert_ne!(leaf(&tls), before);
        std::fs::write(&first.cert, "not pem").expect("write");
        assert!(tls.reload().is_err());
        let text = metrics.encode();
        assert!(
            text.contains("loadstar_scorer_tls_reloads_total{result=\"reloaded\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("loadstar_scorer_tls_reloads_total{result=\"error\"} 2"),
            "{text}"
        );
        assert!(
            ServerTls::load(
                TlsFiles {
                    client_ca: Some(dir.path().join("missing.crt")),
                    ..files
                },
                &[],
                metrics
            )
            .is_err()
        );
    }
}
