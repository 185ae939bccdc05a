//! The one trait both backends implement, on raw bytes (sealing is the [`crate::Store`]'s), and
//! the rate rule they share.

use std::future::Future;
use std::time::Duration;

use crate::StoreError;

/// What a backend does, each operation atomic on its own (one round trip to Redis).
pub(crate) trait Backend: Send + Sync {
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send;

    fn put(
        &self,
        key: &str,
        value: &[u8],
        ttl: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Writes only where nothing is: `true` when this call wrote (SET NX).
    fn put_new(
        &self,
        key: &str,
        value: &[u8],
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    fn delete(&self, key: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Reads and deletes at once (GETDEL): what one caller takes, no other sees.
    fn take(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send;

    /// Deletes only while the value is still `value` (a lock released by its holder alone).
    fn delete_if(
        &self,
        key: &str,
        value: &[u8],
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// One request against a rate (GCRA over the store's clock).
    fn rate(
        &self,
        key: &str,
        rate: Rate,
    ) -> impl Future<Output = Result<RateDecision, StoreError>> + Send;
}

/// A rate: one request per `interval`, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub interval: Duration,
    pub burst: u32,
}

/// What the rate said of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateDecision {
    Admitted,
    /// Refused; the next request would be admitted after this.
    Refused {
        retry_after: Duration,
    },
}

/// The generic cell rate algorithm on a theoretical arrival time (`tat`, in milliseconds of the
/// store's clock): the same arithmetic the Redis script does. Returns the decision and the new
/// `tat` to keep when admitted.
pub(crate) fn gcra(tat: Option<f64>, now: f64, rate: Rate) -> (RateDecision, Option<f64>) {
    let interval = rate.interval.as_secs_f64() * 1000.0;
    let tolerance = interval * f64::from(rate.burst.max(1) - 1);
    let tat = tat.unwrap_or(now).max(now);
    if tat - now > tolerance {
        let wait = (tat - now - tolerance).ceil();
        let retry_after = Duration::from_millis(wait as u64);
        return (RateDecision::Refused { retry_after }, None);
    }
    (RateDecision::Admitted, Some(tat + interval))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcra_admits_the_burst_then_one_per_interval() {
        let rate = Rate {
            interval: Duration::from_millis(100),
            burst: 3,
        };
        let mut tat = None;
        for i in 0..3 {
            let (decision, next) = gcra(tat, 0.0, rate);
            assert_eq!(decision, RateDecision::Admitted, "request {i}");
            tat = next;
        }
        let (decision, next) = gcra(tat, 0.0, rate);
        assert_eq!(
            decision,
            RateDecision::Refused {
                retry_after: Duration::from_millis(100)
            }
        );
        assert_eq!(next, None);
        assert_eq!(gcra(tat, 100.0, rate).0, RateDecision::Admitted);
    }
}
