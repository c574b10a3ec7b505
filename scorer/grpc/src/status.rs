//! Domain errors → gRPC status codes, in one place: the lower layers return typed errors and
//! never a `tonic::Status`. Every status built here carries at most
//! [`MAX_STATUS_MESSAGE_BYTES`] of message, whatever the error quotes.
use loadstar_auth::{Denial, DenialKind};
use loadstar_common::text::truncate;
use loadstar_policy::profiles::ProfileError;
use loadstar_store::cluster::ClusterError;
use tonic::Status;

/// The longest message a status built here carries; longer ones are cut (marked `…`).
///
/// The message travels in the `grpc-message` trailer, percent-encoded (up to 3 bytes on
/// the wire per byte of message), and C-core based clients (C++, Python, Ruby, C#) refuse
/// the whole response when its metadata passes 16 KiB: they then report
/// `RESOURCE_EXHAUSTED` instead of the real status. 4 KiB stays under that limit even fully
/// escaped (12 KiB), with room for the other trailers. The errors quote client input
/// bounded already (`loadstar_common::text`); this is the safety net for any that does not.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 4 * 1024;
// Fully percent-encoded, the message still fits the 16 KiB metadata limit.
const _: () = assert!(MAX_STATUS_MESSAGE_BYTES * 3 < 16 * 1024);

/// `message` cut to [`MAX_STATUS_MESSAGE_BYTES`].
fn capped(message: String) -> String {
    if message.len() <= MAX_STATUS_MESSAGE_BYTES {
        message
    } else {
        truncate(&message, MAX_STATUS_MESSAGE_BYTES)
    }
}

/// The status for a failed profile lookup.
pub fn from_profile(e: ProfileError) -> Status {
    let message = capped(e.to_string());
    match e {
        ProfileError::NoneConfigured => Status::failed_precondition(message),
        ProfileError::Unknown { .. } => Status::not_found(message),
    }
}

/// The status for a failed call into the cluster integration.
pub fn from_cluster(e: ClusterError) -> Status {
    let message = capped(e.to_string());
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
    let message = capped(format!("{}: {}", d.reason, d.message));
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

    #[test]
    fn every_message_is_capped_whatever_the_error_quotes() {
        use loadstar_auth::Reason;
        let huge = "é".repeat(500_000);
        let statuses = [
            from_cluster(ClusterError::NotFound(format!(
                "pod {huge} is not in the cluster"
            ))),
            from_cluster(ClusterError::Invalid(huge.clone())),
            from_profile(ProfileError::Unknown {
                name: huge.clone(),
                configured: "loadstar".into(),
            }),
            from_denial(&Denial::new(Reason::Forbidden, huge.clone())),
        ];
        for s in statuses {
            let m = s.message();
            assert!(m.len() <= MAX_STATUS_MESSAGE_BYTES, "{} bytes", m.len());
            assert!(m.ends_with('…'), "the cut is marked");
            assert!(m.contains("éééééééé"), "a prefix of the input is kept");
        }
    }
}
