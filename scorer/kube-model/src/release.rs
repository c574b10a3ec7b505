//! Which kube-scheduler release Loadstar follows where releases differ, read from the API
//! server's version (`/version`): a cluster schedules as the kube-scheduler of its release,
//! so Loadstar counts as that release counts.
use loadstar_framework::snapshot::NodeInclusion;

/// The release `(major, minor)` of an API server's `/version` fields. Providers append to
/// the minor (`"27+"` on GKE and EKS); `None` when either field has no leading number.
pub fn release(major: &str, minor: &str) -> Option<(u32, u32)> {
    let number = |s: &str| -> Option<u32> {
        let digits: String = s.trim().chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    Some((number(major)?, number(minor)?))
}

/// The node inclusion a topology spread constraint that states no policy counts with in
/// that release (see `ClusterSnapshot::spread_default_inclusion`): before 1.24 every pod of
/// an eligible domain counts (`None`); from 1.24 (kubernetes#107009) only pods on nodes the
/// pod's node affinity admits, which 1.26's policies keep as their defaults. An unknown
/// release counts as current ones do.
pub fn spread_default_inclusion(release: Option<(u32, u32)>) -> Option<NodeInclusion> {
    match release {
        Some(r) if r < (1, 24) => None,
        _ => Some(NodeInclusion::CURRENT_DEFAULT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_providers_write_them() {
        assert_eq!(release("1", "20"), Some((1, 20)));
        assert_eq!(release("1", "27+"), Some((1, 27)));
        assert_eq!(release(" 1", "30.2"), Some((1, 30)));
        assert_eq!(release("", "20"), None);
        assert_eq!(release("1", "x"), None);
    }

    #[test]
    fn releases_before_1_24_count_every_pod_of_an_eligible_domain() {
        assert_eq!(spread_default_inclusion(Some((1, 20))), None);
        assert_eq!(spread_default_inclusion(Some((1, 23))), None);
        let current = Some(NodeInclusion::CURRENT_DEFAULT);
        assert_eq!(spread_default_inclusion(Some((1, 24))), current);
        assert_eq!(spread_default_inclusion(Some((1, 35))), current);
        assert_eq!(spread_default_inclusion(Some((2, 0))), current);
        assert_eq!(spread_default_inclusion(None), current);
    }
}
