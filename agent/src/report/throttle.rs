//! Rate-limited logging of a failure that repeats: a scorer that is down is retried every
//! few seconds, and each retry must not print a warning.
use tracing::{debug, warn};

/// A failure that repeats unchanged is logged at warn level again after this many attempts.
const RELOG_ATTEMPTS: u32 = 30;

/// Logs a repeating failure at warn level when it starts, changes, or every
/// [`RELOG_ATTEMPTS`] repeats; at debug level otherwise.
#[derive(Default)]
pub(super) struct Throttle {
    last: Option<String>,
    repeats: u32,
}

impl Throttle {
    /// Logs `message` as the latest failure.
    pub(super) fn log(&mut self, message: &str) {
        if self.last.as_deref() == Some(message) {
            self.repeats += 1;
            if self.repeats.is_multiple_of(RELOG_ATTEMPTS) {
                warn!(error = message, repeats = self.repeats, "still failing");
            } else {
                debug!(error = message, "failed again");
            }
        } else {
            warn!(error = message, "failed");
            self.last = Some(message.to_string());
            self.repeats = 0;
        }
    }

    /// Forgets the failure (after a success).
    pub(super) fn clear(&mut self) {
        self.last = None;
        self.repeats = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_repeats_of_the_same_failure_only() {
        let mut t = Throttle::default();
        t.log("refused");
        t.log("refused");
        t.log("refused");
        assert_eq!((t.last.as_deref(), t.repeats), (Some("refused"), 2));
        t.log("timed out");
        assert_eq!((t.last.as_deref(), t.repeats), (Some("timed out"), 0));
        t.clear();
        assert_eq!((t.last, t.repeats), (None, 0));
    }
}
