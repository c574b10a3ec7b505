//! Why a caller was turned away: a closed set of reasons (the metric's label values), each
//! with the kind of refusal it is (the gRPC layer maps kinds to status codes) and a message
//! for the caller.
use std::fmt;

/// The kind of refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenialKind {
    /// Who is calling is not established (`UNAUTHENTICATED`).
    Unauthenticated,
    /// The caller is known but may not do this (`PERMISSION_DENIED`).
    PermissionDenied,
    /// The check itself could not run now (`UNAVAILABLE`; retry).
    Unavailable,
}

/// Why; each is one label value of `loadstar_scorer_auth_failures_total{reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// No token and no client certificate.
    MissingCredentials,
    /// The header is not `Bearer <token>`, or the token has impossible characters or length.
    MalformedToken,
    /// The API server did not authenticate the token (bad signature, expired, wrong
    /// audience, deleted pod or service account).
    InvalidToken,
    /// A client certificate that names no user.
    InvalidCertificate,
    /// The API server could not be asked.
    ReviewUnavailable,
    /// Too many reviews in flight; the caller should retry.
    Busy,
    /// Not one of the agent service accounts.
    WrongServiceAccount,
    /// An agent token not bound to a pod (a legacy Secret token).
    NotBoundToPod,
    /// The pod the token was issued for does not exist (or was replaced).
    PodNotFound,
    /// The pod is not Running, or is being deleted.
    PodNotRunning,
    /// The pod cache has not synced yet.
    PodsNotSynced,
    /// The report names another node than the agent pod's.
    WrongNode,
    /// The token a stream was opened with has expired.
    TokenExpired,
    /// A SubjectAccessReview said no.
    Forbidden,
}

impl Reason {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::MissingCredentials => "missing_credentials",
            Reason::MalformedToken => "malformed_token",
            Reason::InvalidToken => "invalid_token",
            Reason::InvalidCertificate => "invalid_certificate",
            Reason::ReviewUnavailable => "review_unavailable",
            Reason::Busy => "busy",
            Reason::WrongServiceAccount => "wrong_service_account",
            Reason::NotBoundToPod => "not_bound_to_pod",
            Reason::PodNotFound => "pod_not_found",
            Reason::PodNotRunning => "pod_not_running",
            Reason::PodsNotSynced => "pods_not_synced",
            Reason::WrongNode => "wrong_node",
            Reason::TokenExpired => "token_expired",
            Reason::Forbidden => "forbidden",
        }
    }

    /// The kind of refusal this reason is.
    pub fn kind(self) -> DenialKind {
        match self {
            Reason::MissingCredentials
            | Reason::MalformedToken
            | Reason::InvalidToken
            | Reason::InvalidCertificate
            | Reason::TokenExpired => DenialKind::Unauthenticated,
            Reason::ReviewUnavailable | Reason::Busy | Reason::PodsNotSynced => {
                DenialKind::Unavailable
            }
            Reason::WrongServiceAccount
            | Reason::NotBoundToPod
            | Reason::PodNotFound
            | Reason::PodNotRunning
            | Reason::WrongNode
            | Reason::Forbidden => DenialKind::PermissionDenied,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal: the reason and what the caller is told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Denial {
    /// Why.
    pub reason: Reason,
    /// The message for the caller (never echoes a token).
    pub message: String,
}

impl Denial {
    /// A denial for `reason` saying `message`.
    pub fn new(reason: Reason, message: impl Into<String>) -> Denial {
        Denial {
            reason,
            message: message.into(),
        }
    }

    /// The kind of refusal.
    pub fn kind(&self) -> DenialKind {
        self.reason.kind()
    }
}
