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

    /// One request against a key's limits at once (one round trip): a slot among `slots`
    /// while fewer than its limit are held, then the rate (a request refused by the rate takes
    /// no slot, one refused for a slot spends no rate).
    fn admit(
        &self,
        rate: Option<(&str, Rate)>,
        slots: Option<Slots<'_>>,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send;

    /// Extends a held slot to `lease` from now: `false` when it had already lapsed (and is
    /// gone).
    fn renew(
        &self,
        key: &str,
        id: &[u8],
        lease: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Gives a slot back.
    fn release(&self, key: &str, id: &[u8]) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Concurrency slots: at most `limit` held under `key` at once, each `id` held for `lease`
/// unless renewed (a replica that dies holding slots gives them back when their leases lapse).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slots<'a> {
    pub key: &'a str,
    pub limit: u32,
    pub lease: Duration,
    pub id: &'a [u8],
}

/// What a key's limits said of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    Admitted,
    /// Every slot is held.
    Busy,
    /// Over the rate; the next request would be admitted after this.
    Limited {
        retry_after: Duration,
    },
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
