//! Fresh identifiers (`msg_…`, `toolu_…`, `chatcmpl-…`, `call_…`) and timestamps.

use std::time::{SystemTime, UNIX_EPOCH};

use rand::Rng as _;
use rand::distr::Alphanumeric;

/// `prefix` followed by 24 random ASCII letters and digits.
pub fn fresh(prefix: &str) -> String {
    let mut id = String::with_capacity(prefix.len() + 24);
    id.push_str(prefix);
    id.extend(
        rand::rng()
            .sample_iter(Alphanumeric)
            .take(24)
            .map(char::from),
    );
    id
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn fresh_ids() {
        let id = super::fresh("toolu_");
        assert_eq!(id.len(), 30);
        assert!(
            id["toolu_".len()..]
                .chars()
                .all(|c| c.is_ascii_alphanumeric())
        );
        assert_ne!(id, super::fresh("toolu_"));
    }
}
