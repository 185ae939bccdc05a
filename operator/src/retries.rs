//! Per-object retries of status writes. One object whose status write fails (a conflict, a
//! webhook, an object deleted meanwhile) is retried on its own backoff while every other
//! object's status is written in the same pass; before this, one failure ended the pass and the
//! objects after it waited for the whole pass to be retried.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

const FIRST_DELAY: Duration = Duration::from_millis(500);
const MAX_DELAY: Duration = Duration::from_secs(60);

/// `(kind, namespace, name)`.
pub(crate) type ObjectKey = (&'static str, String, String);

#[derive(Default)]
pub(crate) struct StatusRetries {
    failing: HashMap<ObjectKey, (u32, Instant)>,
}

impl StatusRetries {
    /// Whether a write for this object may be tried now.
    pub fn due(&self, key: &ObjectKey, now: Instant) -> bool {
        self.failing.get(key).is_none_or(|(_, next)| now >= *next)
    }

    /// Records a failed write; returns how long until the next try (doubling, at most a minute).
    pub fn failed(&mut self, key: ObjectKey, now: Instant) -> Duration {
        let entry = self.failing.entry(key).or_insert((0, now));
        entry.0 = entry.0.saturating_add(1);
        let delay = FIRST_DELAY
            .saturating_mul(1u32 << (entry.0 - 1).min(16))
            .min(MAX_DELAY);
        entry.1 = now + delay;
        delay
    }

    pub(crate) fn succeeded(&mut self, key: &ObjectKey) {
        self.failing.remove(key);
    }

    /// Forgets objects that no longer exist.
    pub fn retain(&mut self, exists: impl Fn(&ObjectKey) -> bool) {
        self.failing.retain(|k, _| exists(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ("McpServer", "default".into(), name.into())
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_object_backs_off_alone() {
        let mut retries = StatusRetries::default();
        let now = Instant::now();
        assert!(retries.due(&key("a"), now));
        let delays: Vec<Duration> = (0..9).map(|_| retries.failed(key("a"), now)).collect();
        assert_eq!(delays[0], Duration::from_millis(500));
        assert_eq!(delays[1], Duration::from_secs(1));
        assert_eq!(delays[3], Duration::from_secs(4));
        assert_eq!(delays[8], MAX_DELAY, "capped");
        assert!(!retries.due(&key("a"), now));
        assert!(
            retries.due(&key("b"), now),
            "other objects are not held back"
        );
        tokio::time::advance(MAX_DELAY).await;
        assert!(retries.due(&key("a"), Instant::now()));
        retries.succeeded(&key("a"));
        assert_eq!(
            retries.failed(key("a"), Instant::now()),
            FIRST_DELAY,
            "success resets"
        );
        retries.retain(|k| k.2 != "a");
        assert!(retries.due(&key("a"), Instant::now()));
    }
}
