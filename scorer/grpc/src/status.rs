//! Domain errors → gRPC status codes, in one place: the lower layers return typed errors and
//! never a `tonic::Status`.
use loadstar_auth::{Denial, DenialKind};
use loadstar_policy::profiles::ProfileError;
use loadstar_store::cluster::ClusterError;
use tonic::Status;

/// The status for a failed profile lookup.
pub fn from_profile(e: ProfileError) -> Status {
    match e {
        ProfileError::NoneConfigured => Status::failed_precondition(e.to_string()),
        ProfileError::Unknown { .. } => Status::not_found(e.to_string()),
    }
}

/// The status for a failed call into the cluster integration.
pub fn from_cluster(e: ClusterError) -> Status {
    let message = e.to_string();
    match e {
        ClusterError::Unavailable(_) => Status::unavailable(message),
        ClusterError::NotFound(_) => Status::not_found(message),
        ClusterError::FailedPrecondition(_) => Status::failed_precondition(message),
        ClusterError::Conflict(_) => Status::already_exists(message),
        ClusterError::Aborted(_) => Status::aborted(message),
        ClusterError::Invalid(_) => Status::invalid_argument(message),
        ClusterError::PermissionDenied(_) => Status::permission_denied(message),
    }
}

/// The status for a refused caller: `UNAUTHENTICATED`, `PERMISSION_DENIED` or (the check
/// could not run) `UNAVAILABLE`, with the reason's label in front of the message.
pub fn from_denial(d: &Denial) -> Status {
    let message = format!("{}: {}", d.reason, d.message);
    match d.kind() {
        DenialKind::Unauthenticated => Status::unauthenticated(message),
        DenialKind::PermissionDenied => Status::permission_denied(message),
        DenialKind::Unavailable => Status::unavailable(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_error_kind() {
        assert_eq!(
            from_profile(ProfileError::NoneConfigured).code(),
            tonic::Code::FailedPrecondition
        );
        let unknown = from_profile(ProfileError::Unknown {
            name: "\"x\"".into(),
            configured: "loadstar".into(),
        });
        assert_eq!(unknown.code(), tonic::Code::NotFound);
        assert_eq!(
            unknown.message(),
            "unknown profile \"x\"; configured profiles: loadstar"
        );
        let cases = [
            (
                ClusterError::Unavailable("u".into()),
                tonic::Code::Unavailable,
            ),
            (ClusterError::NotFound("n".into()), tonic::Code::NotFound),
            (
                ClusterError::FailedPrecondition("f".into()),
                tonic::Code::FailedPrecondition,
            ),
            (
                ClusterError::Conflict("c".into()),
                tonic::Code::AlreadyExists,
            ),
            (ClusterError::Aborted("a".into()), tonic::Code::Aborted),
            (
                ClusterError::PermissionDenied("p".into()),
                tonic::Code::PermissionDenied,
            ),
        ];
        for (e, code) in cases {
            let text = e.to_string();
            let s = from_cluster(e);
            assert_eq!(s.code(), code);
            assert_eq!(s.message(), text);
        }
    }

    #[test]
    fn refusals_map_to_their_kind_with_the_reason_first() {
        use loadstar_auth::Reason;
        for (reason, code) in [
            (Reason::MissingCredentials, tonic::Code::Unauthenticated),
            (Reason::TokenExpired, tonic::Code::Unauthenticated),
            (Reason::WrongNode, tonic::Code::PermissionDenied),
            (Reason::Forbidden, tonic::Code::PermissionDenied),
            (Reason::Busy, tonic::Code::Unavailable),
            (Reason::ReviewUnavailable, tonic::Code::Unavailable),
        ] {
            let s = from_denial(&Denial::new(reason, "why"));
            assert_eq!(s.code(), code, "{reason}");
            assert_eq!(s.message(), format!("{reason}: why"));
        }
    }
}
