//! A StepScaler's `status` as the controller writes it: replicas, the last poll's decision and
//! why, when it last scaled each way (so cool-downs survive a restart or a new leader), and
//! the conditions (`Valid`, `AbleToScale`, `ScalingActive`), each keeping its
//! `lastTransitionTime` until its status changes. Pure: times are passed in.
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The last poll's decision.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastDecision {
    /// When, RFC 3339.
    pub time: String,
    /// Replicas before.
    pub from: u32,
    /// Replicas decided.
    pub to: u32,
    /// Why.
    pub reason: String,
    /// Whether the replica count was changed (false when holding, in dry-run, or when the
    /// update failed).
    pub applied: bool,
}

/// One condition.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Valid`, `AbleToScale` or `ScalingActive`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason.
    #[serde(default)]
    pub reason: String,
    /// Human-readable details.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// `status` of a StepScaler.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepScalerStatus {
    /// The spec generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Kind/name` of the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Replicas at the last poll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_replicas: Option<u32>,
    /// Replicas decided at the last poll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<u32>,
    /// Mean utilisation of the measured pods, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_utilization_percent: Option<f64>,
    /// Pods with a fresh measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_pods: Option<u32>,
    /// Pods of the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<u32>,
    /// The last poll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_poll_time: Option<String>,
    /// The last scale-out (also in dry-run: the cool-downs run as if it had happened).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_out_time: Option<String>,
    /// The last scale-in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_in_time: Option<String>,
    /// The last poll's decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_decision: Option<LastDecision>,
    /// Conditions.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// The spec can be acted on.
pub const VALID: &str = "Valid";
/// The target was found and its scale read and written.
pub const ABLE_TO_SCALE: &str = "AbleToScale";
/// Utilisation could be measured and the algorithm ran.
pub const SCALING_ACTIVE: &str = "ScalingActive";

/// RFC 3339 of Unix seconds, whole seconds (as Kubernetes writes times).
pub fn rfc3339(unix_s: f64) -> String {
    Timestamp::from_second(unix_s.floor() as i64)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_string()
}

/// Unix seconds of an RFC 3339 time; `None` if it does not parse.
pub fn unix_s(rfc3339: &str) -> Option<f64> {
    rfc3339
        .parse::<Timestamp>()
        .ok()
        .map(|t| t.as_millisecond() as f64 / 1000.0)
}

impl StepScalerStatus {
    /// Sets condition `type_`; its transition time moves only when its status changes.
    /// Returns whether the status changed (a transition worth an Event).
    pub fn set_condition(
        &mut self,
        type_: &str,
        ok: bool,
        reason: &str,
        message: &str,
        now_s: f64,
    ) -> bool {
        let status = if ok { "True" } else { "False" };
        let at = Some(rfc3339(now_s));
        match self.conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) => {
                let changed = c.status != status;
                if changed {
                    c.last_transition_time = at;
                }
                let reason_changed = c.reason != reason;
                c.status = status.into();
                c.reason = reason.into();
                c.message = message.into();
                changed || reason_changed
            }
            None => {
                self.conditions.push(Condition {
                    type_: type_.into(),
                    status: status.into(),
                    reason: reason.into(),
                    message: message.into(),
                    last_transition_time: at,
                });
                true
            }
        }
    }

    /// The condition `type_`, if set.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        assert_eq!(rfc3339(1_700_000_000.7), "2023-11-14T22:13:20Z");
        assert_eq!(unix_s("2023-11-14T22:13:20Z"), Some(1_700_000_000.0));
        assert_eq!(unix_s("yesterday"), None);
    }

    #[test]
    fn transitions_move_only_on_status_changes() {
        let mut s = StepScalerStatus::default();
        assert!(s.set_condition(VALID, true, "ValidSpec", "ok", 100.0));
        assert!(!s.set_condition(VALID, true, "ValidSpec", "still ok", 200.0));
        let c = s.condition(VALID).expect("set");
        assert_eq!(
            c.last_transition_time.as_deref(),
            Some("1970-01-01T00:01:40Z")
        );
        assert_eq!(c.message, "still ok");
        assert!(s.set_condition(VALID, false, "InvalidSpec", "bad", 300.0));
        let c = s.condition(VALID).expect("set");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "InvalidSpec")
        );
        assert_eq!(
            c.last_transition_time.as_deref(),
            Some("1970-01-01T00:05:00Z")
        );
        // A new reason with the same status is worth an Event, not a transition.
        assert!(s.set_condition(VALID, false, "Other", "bad", 400.0));
        assert_eq!(
            s.condition(VALID)
                .and_then(|c| c.last_transition_time.clone())
                .as_deref(),
            Some("1970-01-01T00:05:00Z")
        );
    }

    #[test]
    fn status_serialises_as_the_crd_declares() {
        let mut s = StepScalerStatus {
            current_replicas: Some(3),
            current_utilization_percent: Some(76.7),
            ..StepScalerStatus::default()
        };
        s.set_condition(ABLE_TO_SCALE, true, "SucceededGetScale", "", 0.0);
        let v = serde_json::to_value(&s).expect("json");
        assert_eq!(v["currentReplicas"], 3);
        assert_eq!(v["conditions"][0]["type"], "AbleToScale");
        assert_eq!(
            v["conditions"][0]["lastTransitionTime"],
            "1970-01-01T00:00:00Z"
        );
        assert!(v.get("desiredReplicas").is_none());
        let back: StepScalerStatus = serde_json::from_value(v).expect("back");
        assert_eq!(back, s);
    }
}
