//! The identity a token review or a client certificate established, and what it says about
//! service accounts and the pod a bound token was issued for.
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use x509_parser::prelude::{FromDer, X509Certificate};

/// Extra key the API server sets on bound service-account tokens: the pod's name (1.11+).
pub const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// Extra key with the pod's UID.
pub const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";
/// Extra key with the pod's node (1.30+; 1.20 does not set it, so the pod's `spec.nodeName`
/// is what binds an agent to its node).
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";

const SA_PREFIX: &str = "system:serviceaccount:";

/// Where an identity came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Source {
    /// A bearer token the API server reviewed.
    #[default]
    Token,
    /// A client certificate the TLS handshake verified (CN: user, O: groups).
    Certificate,
}

/// An authenticated caller, as Kubernetes' `UserInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    /// User name (`system:serviceaccount:<ns>:<name>` for service accounts).
    pub username: String,
    /// User UID (empty for certificates).
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes (bound tokens: the pod's name and UID).
    pub extra: BTreeMap<String, Vec<String>>,
    /// Token or certificate.
    pub source: Source,
}

/// A service account, `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServiceAccount {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl fmt::Display for ServiceAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Why a `namespace/name` service account could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// Not `namespace/name` with two non-empty parts.
    #[error("service account {0:?} is not namespace/name")]
    ServiceAccount(String),
    /// A client certificate that cannot be read or names no user.
    #[error("client certificate: {0}")]
    Certificate(String),
}

impl FromStr for ServiceAccount {
    type Err = IdentityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(ServiceAccount {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                })
            }
            _ => Err(IdentityError::ServiceAccount(s.to_string())),
        }
    }
}

/// The pod a bound service-account token was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundPod {
    /// The pod's name (in the service account's namespace).
    pub name: String,
    /// The pod's UID.
    pub uid: String,
}

impl Identity {
    /// The service account this identity is, if it is one.
    pub fn service_account(&self) -> Option<ServiceAccount> {
        let rest = self.username.strip_prefix(SA_PREFIX)?;
        let (ns, name) = rest.split_once(':')?;
        (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then(|| ServiceAccount {
            namespace: ns.to_string(),
            name: name.to_string(),
        })
    }

    fn extra_one(&self, key: &str) -> Option<&str> {
        match self.extra.get(key).map(Vec::as_slice) {
            Some([one]) if !one.is_empty() => Some(one),
            _ => None,
        }
    }

    /// The pod a bound token was issued for (both name and UID, exactly one of each).
    pub fn bound_pod(&self) -> Option<BoundPod> {
        Some(BoundPod {
            name: self.extra_one(POD_NAME_EXTRA)?.to_string(),
            uid: self.extra_one(POD_UID_EXTRA)?.to_string(),
        })
    }

    /// The node a bound token names (API servers from 1.30 on).
    pub fn bound_node(&self) -> Option<&str> {
        self.extra_one(NODE_NAME_EXTRA)
    }

    /// The identity a verified client certificate (DER) carries, as the API server reads
    /// one: the subject's common name is the user, each organisation a group.
    pub fn from_certificate(der: &[u8]) -> Result<Identity, IdentityError> {
        let (_, cert) = X509Certificate::from_der(der)
            .map_err(|e| IdentityError::Certificate(format!("not X.509 DER: {e}")))?;
        let subject = cert.subject();
        let username = subject
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .filter(|cn| !cn.is_empty())
            .ok_or_else(|| IdentityError::Certificate("the subject has no common name".into()))?
            .to_string();
        let groups = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_string))
            .collect();
        Ok(Identity {
            username,
            groups,
            source: Source::Certificate,
            ..Identity::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(username: &str) -> Identity {
        Identity {
            username: username.into(),
            ..Identity::default()
        }
    }

    #[test]
    fn service_accounts_are_read_from_user_names() {
        assert_eq!(
            sa("system:serviceaccount:loadstar:loadstar-agent").service_account(),
            Some(ServiceAccount {
                namespace: "loadstar".into(),
                name: "loadstar-agent".into()
            })
        );
        for not in [
            "alice",
            "system:serviceaccount:",
            "system:serviceaccount:ns",
            "system:serviceaccount::name",
            "system:serviceaccount:ns:",
            "system:serviceaccount:ns:a:b",
            "system:serviceaccounts:ns:name",
        ] {
            assert_eq!(sa(not).service_account(), None, "{not}");
        }
        assert_eq!(
            "loadstar/agent"
                .parse::<ServiceAccount>()
                .map(|s| s.to_string()),
            Ok("loadstar/agent".to_string())
        );
        for bad in ["", "a", "/b", "a/", "a/b/c"] {
            assert!(bad.parse::<ServiceAccount>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_bound_pod_needs_exactly_one_name_and_uid() {
        let mut id = sa("system:serviceaccount:ns:sa");
        assert_eq!(id.bound_pod(), None);
        id.extra
            .insert(POD_NAME_EXTRA.into(), vec!["agent-x".into()]);
        assert_eq!(id.bound_pod(), None, "no uid");
        id.extra.insert(POD_UID_EXTRA.into(), vec!["u1".into()]);
        assert_eq!(
            id.bound_pod(),
            Some(BoundPod {
                name: "agent-x".into(),
                uid: "u1".into()
            })
        );
        id.extra
            .insert(POD_UID_EXTRA.into(), vec!["u1".into(), "u2".into()]);
        assert_eq!(id.bound_pod(), None, "two uids");
    }

    #[test]
    fn certificates_give_cn_and_organisations() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = loadstar_testkit::pki::client_cert(dir.path(), "alice", &["team-a", "ops"])
            .expect("openssl");
        let pem = std::fs::read(&pki.cert).expect("cert");
        use rustls_pki_types::pem::PemObject;
        let der = rustls_pki_types::CertificateDer::from_pem_slice(&pem).expect("pem");
        let id = Identity::from_certificate(&der).expect("identity");
        assert_eq!(id.username, "alice");
        assert_eq!(id.groups, vec!["team-a".to_string(), "ops".to_string()]);
        assert_eq!(id.source, Source::Certificate);
        assert!(Identity::from_certificate(b"garbage").is_err());
    }
}
