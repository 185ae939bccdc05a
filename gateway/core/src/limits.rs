//! Request limits per key and per server (`limits` in the snapshot).
//!
//! A key's **rate and concurrency** are counted in the shared store when the store is shared
//! (Redis): every replica counts against one budget, both in one round trip (GCRA on the
//! store's clock; a slot is a lease in the store, renewed while its request goes on and given
//! back when it ends, off the request's path). While the store does not answer, each replica
//! falls back to its own count of the same figures, so R replicas then admit at most R times
//! them until the store is back (docs/architecture.md, "Limits"). Servers' limits are each
//! replica's own: they protect an upstream from this replica.
//!
//! A request over a limit is refused before any upstream I/O, with a `Retry-After`. The
//! limiters' state outlives a snapshot: a new table takes over the limiter of every key and
//! server whose limits did not change, so a config reload neither refills a rate nor forgets the
//! requests in flight.

// Looked up on every call by names from the snapshot: foldhash, not SipHash (see table.rs).
use foldhash::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use switchboard_snapshot::{KeySpec, RequestLimits, Snapshot};
use switchboard_store::{Admission, LEASE, Rate, Slot, Store, StoreKey};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::Metrics;

/// What a concurrency refusal asks the client to wait: in-flight requests of a gateway end in
/// well under a second as a rule, and a client should not hammer.
const CONCURRENCY_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Which limit refused a request (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    Concurrency,
    Rate,
}

impl LimitKind {
    pub fn label(self) -> &'static str {
        match self {
            LimitKind::Concurrency => "concurrency",
            LimitKind::Rate => "rate",
        }
    }
}

/// The limiter of one key or one server.
struct Limiter {
    spec: RequestLimits,
    in_flight: Option<Arc<Semaphore>>,
    /// This replica's count: the rate itself where the store is not shared, the fallback while
    /// a shared store does not answer.
    rate: Option<DefaultDirectRateLimiter>,
    /// The same rate as the shared store counts it.
    shared_rate: Option<Rate>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter").field("spec", &self.spec).finish()
    }
}

impl Limiter {
    fn new(spec: &RequestLimits) -> Limiter {
        let in_flight = spec
            .concurrent_requests
            .map(|n| Arc::new(Semaphore::new(n.max(1) as usize)));
        // Validation refused a rate that does not parse before a table is built.
        let shared_rate = spec.parsed_rate().and_then(Result::ok).map(|rate| {
            let count = NonZeroU32::new(rate.count).unwrap_or(NonZeroU32::MIN);
            let burst = spec.burst.and_then(NonZeroU32::new).unwrap_or(count);
            Rate {
                interval: rate.period / count.get(),
                burst: burst.get(),
            }
        });
        let rate = shared_rate.map(|rate| {
            let burst = NonZeroU32::new(rate.burst).unwrap_or(NonZeroU32::MIN);
            let quota = Quota::with_period(rate.interval)
                .unwrap_or_else(|| Quota::per_second(burst))
                .allow_burst(burst);
            RateLimiter::direct(quota)
        });
        Limiter {
            spec: spec.clone(),
            in_flight,
            rate,
            shared_rate,
        }
    }

    /// The concurrency slot, taken first, so a request refused for it spends none of the rate.
    fn slot(&self) -> Result<LimitPermit, (LimitKind, Duration)> {
        let permit = match &self.in_flight {
            Some(slots) => Some(
                slots
                    .clone()
                    .try_acquire_owned()
                    .map_err(|_| (LimitKind::Concurrency, CONCURRENCY_RETRY_AFTER))?,
            ),
            None => None,
        };
        Ok(LimitPermit {
            _permit: permit,
            _slot: None,
        })
    }

    /// This replica's count of the rate.
    fn local_rate(&self) -> Result<(), (LimitKind, Duration)> {
        if let Some(rate) = &self.rate
            && let Err(not_until) = rate.check()
        {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            return Err((LimitKind::Rate, wait));
        }
        Ok(())
    }

    /// Admits one request, counted by this replica alone, or says which limit refused it and
    /// how long to wait.
    fn admit(&self) -> Result<LimitPermit, (LimitKind, Duration)> {
        let permit = self.slot()?;
        self.local_rate()?;
        Ok(permit)
    }

    /// Admits one request with its rate and concurrency counted in `store` by every replica
    /// (under `id`); this replica's own count while the store does not answer.
    async fn admit_shared(
        &self,
        store: &Arc<Store>,
        id: &str,
    ) -> Result<LimitPermit, (LimitKind, Duration)> {
        let slots = self.spec.concurrent_requests.map(|n| n.max(1));
        if slots.is_none() && self.shared_rate.is_none() {
            return Ok(LimitPermit::default());
        }
        // (Names hashed only for the limits the key has.)
        let rate_key = self
            .shared_rate
            .map(|rate| (StoreKey::new("rate", &[id.as_bytes()]), rate));
        let slots_key = slots.map(|limit| (StoreKey::new("in-flight", &[id.as_bytes()]), limit));
        let asked = store
            .admit(
                rate_key.as_ref().map(|(key, rate)| (key, *rate)),
                slots_key.as_ref().map(|(key, limit)| (key, *limit)),
            )
            .await;
        match asked {
            Ok(Admission::Admitted(slot)) => Ok(LimitPermit {
                _permit: None,
                _slot: slot.map(|slot| HeldSlot::new(store.clone(), slot)),
            }),
            Ok(Admission::Busy) => Err((LimitKind::Concurrency, CONCURRENCY_RETRY_AFTER)),
            Ok(Admission::Limited { retry_after }) => Err((LimitKind::Rate, retry_after)),
            Err(e) => {
                tracing::debug!(error = %e, "a key's limits are counted locally while the store is down");
                self.admit()
            }
        }
    }
}

/// A request admitted under a limit: holds its concurrency slot (this replica's, or one in the
/// shared store) until dropped (with the caller or the relayed stream that holds it).
#[derive(Debug, Default)]
pub struct LimitPermit {
    _permit: Option<OwnedSemaphorePermit>,
    _slot: Option<HeldSlot>,
}

/// A slot held in the shared store: renewed every third of its lease while the request goes
/// on (a long stream stays counted), given back when it ends. Both off the request's path.
#[derive(Debug)]
struct HeldSlot {
    held: Option<(Arc<Store>, Slot)>,
    renewing: Option<tokio::task::JoinHandle<()>>,
}

impl HeldSlot {
    fn new(store: Arc<Store>, slot: Slot) -> HeldSlot {
        let renewing = tokio::runtime::Handle::try_current().ok().map(|runtime| {
            let (store, slot) = (store.clone(), slot.clone());
            runtime.spawn(async move {
                loop {
                    tokio::time::sleep(LEASE / 3).await;
                    // Lapsed (the store lost it, or was down a whole lease): no longer counted.
                    if let Ok(false) = store.renew(&slot).await {
                        return;
                    }
                }
            })
        });
        HeldSlot {
            held: Some((store, slot)),
            renewing,
        }
    }
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        if let Some(renewing) = self.renewing.take() {
            renewing.abort();
        }
        if let (Some((store, slot)), Ok(runtime)) =
            (self.held.take(), tokio::runtime::Handle::try_current())
        {
            // Not given back (the store down): it lapses after its lease.
            runtime.spawn(async move {
                let _ = store.release(slot).await;
            });
        }
    }
}

/// The limiters of one routing table, by key id (`<namespace>/<name>`) and by server id.
#[derive(Debug, Default)]
pub struct Limiters {
    keys: HashMap<String, Arc<Limiter>>,
    servers: HashMap<String, Arc<Limiter>>,
}

impl Limiters {
    /// Fresh limiters for every key and server of `snapshot` that has limits.
    pub(crate) fn for_snapshot(snapshot: &Snapshot) -> Limiters {
        let fresh = |limits: &Option<RequestLimits>| limits.as_ref().map(Limiter::new);
        Limiters {
            keys: snapshot
                .keys
                .iter()
                .filter_map(|k| Some((key_id(k), Arc::new(fresh(&k.limits)?))))
                .collect(),
            servers: snapshot
                .servers
                .iter()
                .filter_map(|s| Some((s.id().to_string(), Arc::new(fresh(&s.limits)?))))
                .collect(),
        }
    }

    /// Takes over `previous`'s limiter wherever the limits are the same.
    pub fn carry_over(&mut self, previous: &Limiters) {
        fn take(new: &mut HashMap<String, Arc<Limiter>>, old: &HashMap<String, Arc<Limiter>>) {
            for (id, limiter) in new.iter_mut() {
                if let Some(old) = old.get(id)
                    && old.spec == limiter.spec
                {
                    *limiter = old.clone();
                }
            }
        }
        take(&mut self.keys, &previous.keys);
        take(&mut self.servers, &previous.servers);
    }

    /// Admits a request of key `key_id`; `Ok(None)` when the key has no limits. Its rate and
    /// concurrency are counted in `store` when the store is shared.
    pub(crate) async fn admit_key(
        &self,
        key_id: &str,
        store: &Arc<Store>,
        metrics: &Metrics,
    ) -> Result<Option<LimitPermit>, Refused> {
        if !store.is_shared() {
            return admit(&self.keys, "key", key_id, metrics);
        }
        let Some(limiter) = self.keys.get(key_id) else {
            return Ok(None);
        };
        limiter
            .admit_shared(store, key_id)
            .await
            .map(Some)
            .map_err(|refused| refusal("key", key_id, refused, metrics))
    }

    /// Admits a request to server `server_id`'s upstream; `Ok(None)` when it has no limits.
    pub fn admit_server(
        &self,
        server_id: &str,
        metrics: &Metrics,
    ) -> Result<Option<LimitPermit>, Refused> {
        admit(&self.servers, "server", server_id, metrics)
    }
}

fn admit(
    limiters: &HashMap<String, Arc<Limiter>>,
    scope: &'static str,
    id: &str,
    metrics: &Metrics,
) -> Result<Option<LimitPermit>, Refused> {
    if limiters.is_empty() {
        return Ok(None);
    }
    let Some(limiter) = limiters.get(id) else {
        return Ok(None);
    };
    limiter
        .admit()
        .map(Some)
        .map_err(|refused| refusal(scope, id, refused, metrics))
}

fn refusal(
    scope: &'static str,
    id: &str,
    (kind, wait): (LimitKind, Duration),
    metrics: &Metrics,
) -> Refused {
    metrics.limited(scope, id, kind.label());
    Refused {
        scope,
        id: id.to_string(),
        kind,
        retry_after: wait,
    }
}

/// A limit refused a request: this module's own error, which the client-facing error wraps
/// (`GatewayError::Limited`, HTTP 429 with `Retry-After`).
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    /// `key` or `server`.
    pub scope: &'static str,
    pub id: String,
    pub(crate) kind: LimitKind,
    pub retry_after: Duration,
}

/// The identity a key's limiter is kept under across snapshots.
pub(crate) fn key_id(spec: &KeySpec) -> String {
    format!("{}/{}", spec.namespace, spec.name)
}

/// Whole seconds for `Retry-After`, at least 1 (a client reading 0 would retry at once).
pub(crate) fn retry_after_seconds(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(concurrent: Option<u32>, rate: Option<&str>, burst: Option<u32>) -> RequestLimits {
        RequestLimits {
            concurrent_requests: concurrent,
            rate: rate.map(str::to_string),
            burst,
        }
    }

    #[test]
    fn concurrency_is_held_by_the_admission_and_released_with_it() {
        let limiter = Limiter::new(&limits(Some(2), None, None));
        let a = limiter.admit().expect("first");
        let _b = limiter.admit().expect("second");
        let refused = limiter.admit().expect_err("third is over the limit");
        assert_eq!(refused.0, LimitKind::Concurrency);
        drop(a);
        limiter.admit().expect("a slot came back");
    }

    #[test]
    fn rate_admits_the_burst_then_refuses_with_a_wait() {
        let limiter = Limiter::new(&limits(None, Some("2/s"), Some(3)));
        for i in 0..3 {
            limiter
                .admit()
                .unwrap_or_else(|_| panic!("request {i} is within the burst"));
        }
        let (kind, wait) = limiter.admit().expect_err("the burst is spent");
        assert_eq!(kind, LimitKind::Rate);
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(500),
            "{wait:?}"
        );
    }

    #[test]
    fn a_concurrency_refusal_spends_no_rate() {
        let limiter = Limiter::new(&limits(Some(1), Some("1/h"), None));
        let held = limiter.admit().expect("first");
        assert_eq!(limiter.admit().expect_err("busy").0, LimitKind::Concurrency);
        drop(held);
        assert_eq!(limiter.admit().expect_err("rate spent").0, LimitKind::Rate);
    }

    #[tokio::test]
    async fn a_reload_keeps_the_state_of_unchanged_limits() {
        let text = |rate: &str| {
            format!(
                "keys:\n- name: a\n  secret: s1\n  limits: {{rate: 1/h}}\n- name: b\n  secret: s2\n  limits: {{rate: {rate}}}\n"
            )
        };
        let first = switchboard_snapshot::parse(&text("1/h")).expect("parses");
        let limiters = Limiters::for_snapshot(&first);
        let metrics = Metrics::default();
        let store = Arc::new(Store::in_memory());
        limiters
            .admit_key("default/a", &store, &metrics)
            .await
            .expect("a's one request");
        limiters
            .admit_key("default/b", &store, &metrics)
            .await
            .expect("b's one request");

        let second = switchboard_snapshot::parse(&text("2/h")).expect("parses");
        let mut reloaded = Limiters::for_snapshot(&second);
        reloaded.carry_over(&limiters);
        assert!(
            reloaded
                .admit_key("default/a", &store, &metrics)
                .await
                .is_err(),
            "a's limits did not change: its spent rate stays spent"
        );
        reloaded
            .admit_key("default/b", &store, &metrics)
            .await
            .expect("b's limits changed: a fresh limiter");
        assert!(
            reloaded
                .admit_key("default/none", &store, &metrics)
                .await
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_seconds(Duration::ZERO), 1);
        assert_eq!(retry_after_seconds(Duration::from_millis(10)), 1);
        assert_eq!(retry_after_seconds(Duration::from_secs(1)), 1);
        assert_eq!(retry_after_seconds(Duration::from_millis(1500)), 2);
    }
}
