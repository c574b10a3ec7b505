//! Leader election's pure decisions over a `coordination.k8s.io/v1` Lease, apart from the
//! elector's client and timers (`loadstar-kube-client`'s `leader`).
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;

/// Whether `identity` may take or keep a Lease naming `holder` whose record has not changed
/// for `unchanged_for` (by this process's clock, so clock skew does not matter): free when it
/// names no holder, names this candidate, or has expired.
pub fn may_acquire(
    identity: &str,
    holder: &str,
    unchanged_for: Duration,
    lease_duration: Duration,
) -> bool {
    holder.is_empty() || holder == identity || unchanged_for >= lease_duration
}

/// The Lease's holder, empty when it names none (released).
pub fn holder_of(lease: &Lease) -> &str {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_is_free_when_empty_mine_or_expired() {
        let d = Duration::from_secs(15);
        assert!(may_acquire("me", "", Duration::ZERO, d));
        assert!(may_acquire("me", "me", Duration::ZERO, d));
        assert!(!may_acquire("me", "other", Duration::from_secs(14), d));
        assert!(may_acquire("me", "other", Duration::from_secs(15), d));
    }

    #[test]
    fn a_lease_without_a_spec_or_holder_names_none() {
        assert_eq!(holder_of(&Lease::default()), "");
        let mut lease = Lease {
            spec: Some(Default::default()),
            ..Default::default()
        };
        assert_eq!(holder_of(&lease), "");
        lease.spec.as_mut().expect("spec").holder_identity = Some("a".into());
        assert_eq!(holder_of(&lease), "a");
    }
}
