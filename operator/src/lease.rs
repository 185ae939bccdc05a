//! Leader election on a coordination.k8s.io Lease: one operator replica holds it, serves the
//! snapshot stream and writes status; the others stay warm (watching and rendering) and take
//! over when the holder stops renewing.
//!
//! Expiry follows client-go's rule and never compares clocks across pods: a standby remembers
//! the lease record it last saw and *when, by its own clock,* it saw it change. The lease has
//! expired when the record has not changed for `duration` of local time. The times written into
//! the record (`renewTime`) only mark a change; a holder whose clock runs 30 s ahead or behind
//! changes nothing. The holder, for its part, counts itself leader only while its renewals
//! succeed: a renewal that fails or does not answer within a renew interval ends its leadership
//! at once, two renew intervals (2/3 of `duration`) before a standby may take over.
//!
//! Who takes over: only a warm replica contends (one that has rendered the world once), and a
//! standby watches the Lease, so a lease its holder hands back on the way out is taken at once
//! by the replica that was standing by, not by the holder's replacement pod starting up (which
//! would have to sync its caches first, while the gateways had no one to follow).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a holder that stopped renewing keeps the lease.
    pub duration: Duration,
}

/// The fields of a Lease the election reads and writes. Any change of them is a renewal.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Record {
    pub holder: String,
    pub renew_time: Option<Timestamp>,
    pub acquire_time: Option<Timestamp>,
    pub duration_seconds: i32,
    pub transitions: i32,
}

/// The API the election needs; writes are conditional on the version read (optimistic
/// concurrency), so two contenders' writes are exclusive. `Ok(false)`: lost the race.
trait LeaseStore {
    /// The record and its version, if the lease exists.
    fn get(&self) -> impl Future<Output = Result<Option<(Record, String)>, kube::Error>> + Send;
    fn create(&self, record: Record) -> impl Future<Output = Result<bool, kube::Error>> + Send;
    fn replace(
        &self,
        record: Record,
        version: String,
    ) -> impl Future<Output = Result<bool, kube::Error>> + Send;
}

/// What this replica last saw of the lease and when, by its own monotonic clock.
#[derive(Debug, Default)]
struct Observation {
    seen: Option<(Record, Instant)>,
}

#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// This replica holds the lease: renew it.
    Renew,
    /// Free (released) or unchanged for its whole duration: take it.
    TakeOver,
    /// Another replica holds it.
    Wait,
}

impl Observation {
    pub(crate) fn decide(&mut self, record: &Record, me: &str, now: Instant) -> Decision {
        let changed_at = match &self.seen {
            Some((seen, at)) if seen == record => *at,
            _ => {
                self.seen = Some((record.clone(), now));
                now
            }
        };
        let duration = Duration::from_secs(record.duration_seconds.max(1) as u64);
        if record.holder == me {
            Decision::Renew
        } else if record.holder.is_empty() || now.duration_since(changed_at) >= duration {
            Decision::TakeOver
        } else {
            Decision::Wait
        }
    }
}

/// What the election waits for besides its timer.
struct Signals {
    /// Turns true when `stop`s the election (SIGTERM).
    pub stop: watch::Receiver<bool>,
    /// Turns true once this replica has rendered the world: a cold replica never contends.
    pub warm: watch::Receiver<bool>,
    /// Notified when the Lease object changes: a standby looks again at once (a release).
    pub lease_changed: Arc<Notify>,
}

/// Runs the election loop, publishing whether this replica holds the lease, until `stop`
/// turns true: then it steps down (publishes `false` first, so nothing more is written as
/// leader) and hands the lease back, which the standby's watch of the Lease sees at once.
pub async fn run(
    client: kube::Client,
    config: LeaseConfig,
    leader: watch::Sender<bool>,
    stop: watch::Receiver<bool>,
    warm: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let lease_changed = Arc::new(Notify::new());
    let watching = tokio::spawn(watch_lease(
        api.clone(),
        config.name.clone(),
        lease_changed.clone(),
    ));
    let store = KubeLease {
        api,
        name: config.name.clone(),
    };
    let signals = Signals {
        stop,
        warm,
        lease_changed,
    };
    elect(&store, &config, Timestamp::now, leader, signals).await;
    watching.abort();
}

/// Wakes the election on every change of the Lease (a watch of that one object).
async fn watch_lease(api: Api<Lease>, name: String, changed: Arc<Notify>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let events = watcher(api, config).default_backoff().touched_objects();
    futures_util::pin_mut!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(_) => changed.notify_one(),
            Err(e) => tracing::debug!(error = %e, "lease watch error (retrying)"),
        }
    }
}

/// The election over any store, with the wall clock it writes into the record (tests skew it).
async fn elect<S: LeaseStore>(
    store: &S,
    config: &LeaseConfig,
    wall_clock: impl Fn() -> Timestamp,
    leader: watch::Sender<bool>,
    signals: Signals,
) {
    let Signals {
        mut stop,
        mut warm,
        lease_changed,
    } = signals;
    let renew_every = config.duration / 3;
    let mut observation = Observation::default();
    while !*stop.borrow() {
        if !*warm.borrow() {
            tokio::select! {
                // (the guard wait_for returns must not live across the next await)
                closed = async { warm.wait_for(|w| *w).await.is_err() } => if closed {
                    // The controller is gone without ever rendering: never contend.
                    let _ = stop.wait_for(|s| *s).await;
                },
                _ = stop.changed() => {}
            }
            continue;
        }
        // A round that does not finish within a renew interval counts as a failed renewal.
        let round = try_acquire(store, config, &wall_clock, &mut observation);
        let holding = match tokio::time::timeout(renew_every, round).await {
            Ok(Ok(holding)) => holding,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "lease update failed");
                false
            }
            Err(_) => {
                tracing::warn!("lease update did not answer within a renew interval");
                false
            }
        };
        if *leader.borrow() != holding {
            tracing::info!(identity = %config.identity, holding, "leadership changed");
            leader.send_replace(holding);
        }
        tokio::select! {
            () = tokio::time::sleep(renew_every) => {}
            _ = stop.changed() => {}
            // (the holder's own renewals change the Lease too: only a standby listens)
            () = lease_changed.notified(), if !holding => {}
        }
    }
    let held = leader.send_replace(false);
    if held {
        match release(store, config, &wall_clock).await {
            Ok(()) => tracing::info!(identity = %config.identity, "stepped down: lease released"),
            Err(e) => {
                tracing::warn!(error = %e, "stepping down: could not release the lease; it expires instead")
            }
        }
    }
}

/// Hands the lease back if this replica holds it: no holder, renewed now, for one second (what
/// client-go's ReleaseOnCancel writes).
async fn release<S: LeaseStore>(
    store: &S,
    config: &LeaseConfig,
    wall_clock: &impl Fn() -> Timestamp,
) -> Result<(), kube::Error> {
    let Some((mut record, version)) = store.get().await? else {
        return Ok(());
    };
    if record.holder != config.identity {
        return Ok(());
    }
    record.holder = String::new();
    record.duration_seconds = 1;
    record.renew_time = Some(wall_clock());
    store.replace(record, version).await.map(|_| ())
}

/// One round: create, renew, or take over a released or expired lease.
async fn try_acquire<S: LeaseStore>(
    store: &S,
    config: &LeaseConfig,
    wall_clock: &impl Fn() -> Timestamp,
    observation: &mut Observation,
) -> Result<bool, kube::Error> {
    let seconds = config.duration.as_secs().max(1) as i32;
    let Some((mut record, version)) = store.get().await? else {
        return store
            .create(Record {
                holder: config.identity.clone(),
                renew_time: Some(wall_clock()),
                acquire_time: Some(wall_clock()),
                duration_seconds: seconds,
                transitions: 0,
            })
            .await;
    };
    match observation.decide(&record, &config.identity, Instant::now()) {
        Decision::Wait => return Ok(false),
        Decision::Renew => {}
        Decision::TakeOver => {
            record.holder = config.identity.clone();
            record.acquire_time = Some(wall_clock());
            record.transitions += 1;
        }
    }
    record.renew_time = Some(wall_clock());
    record.duration_seconds = seconds;
    store.replace(record, version).await
}

/// The Lease object in the API server.
struct KubeLease {
    api: Api<Lease>,
    name: String,
}

impl LeaseStore for KubeLease {
    async fn get(&self) -> Result<Option<(Record, String)>, kube::Error> {
        Ok(self.api.get_opt(&self.name).await?.map(|lease| {
            let spec = lease.spec.unwrap_or_default();
            let record = Record {
                holder: spec.holder_identity.unwrap_or_default(),
                renew_time: spec.renew_time.map(|t| t.0),
                acquire_time: spec.acquire_time.map(|t| t.0),
                duration_seconds: spec.lease_duration_seconds.unwrap_or(1),
                transitions: spec.lease_transitions.unwrap_or(0),
            };
            (record, lease.metadata.resource_version.unwrap_or_default())
        }))
    }

    async fn create(&self, record: Record) -> Result<bool, kube::Error> {
        let lease = self.lease(record, None);
        conflict_is_false(self.api.create(&PostParams::default(), &lease).await)
    }

    async fn replace(&self, record: Record, version: String) -> Result<bool, kube::Error> {
        let lease = self.lease(record, Some(version));
        conflict_is_false(
            self.api
                .replace(&self.name, &PostParams::default(), &lease)
                .await,
        )
    }
}

impl KubeLease {
    fn lease(&self, record: Record, version: Option<String>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version: version,
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(record.holder).filter(|h| !h.is_empty()),
                lease_duration_seconds: Some(record.duration_seconds),
                acquire_time: record.acquire_time.map(MicroTime),
                renew_time: record.renew_time.map(MicroTime),
                lease_transitions: Some(record.transitions),
                ..Default::default()
            }),
        }
    }
}

fn conflict_is_false<T>(result: Result<T, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use super::*;

    /// An in-memory Lease with resourceVersion semantics, and a switch that makes every call
    /// hang (a holder cut off from the API server).
    #[derive(Default)]
    struct MemoryLease {
        state: Mutex<Option<(Record, u64)>>,
        /// Every candidate's `lease_changed`, notified on each write (the Lease watch).
        watchers: Mutex<Vec<Arc<Notify>>>,
    }

    impl MemoryLease {
        fn changed(&self) {
            for watcher in self.watchers.lock().unwrap().iter() {
                watcher.notify_one();
            }
        }
    }

    #[derive(Clone)]
    struct Client {
        lease: Arc<MemoryLease>,
        cut_off: Arc<AtomicBool>,
    }

    impl Client {
        async fn reachable(&self) {
            if self.cut_off.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            tokio::task::yield_now().await;
        }
    }

    impl LeaseStore for Client {
        async fn get(&self) -> Result<Option<(Record, String)>, kube::Error> {
            self.reachable().await;
            let state = self.lease.state.lock().unwrap();
            Ok(state.as_ref().map(|(r, v)| (r.clone(), v.to_string())))
        }
        async fn create(&self, record: Record) -> Result<bool, kube::Error> {
            self.reachable().await;
            let mut state = self.lease.state.lock().unwrap();
            if state.is_some() {
                return Ok(false);
            }
            *state = Some((record, 1));
            self.lease.changed();
            Ok(true)
        }
        async fn replace(&self, record: Record, version: String) -> Result<bool, kube::Error> {
            self.reachable().await;
            let mut state = self.lease.state.lock().unwrap();
            match state.as_mut() {
                Some((current, v)) if v.to_string() == version => {
                    *current = record;
                    *v += 1;
                    self.lease.changed();
                    Ok(true)
                }
                _ => Ok(false),
            }
        }
    }

    struct Candidate {
        leader: watch::Receiver<bool>,
        stop: watch::Sender<bool>,
        warm: watch::Sender<bool>,
        client: Client,
        task: tokio::task::JoinHandle<()>,
    }

    const DURATION: Duration = Duration::from_secs(15);

    fn candidate(lease: &Arc<MemoryLease>, name: &str, skew_seconds: i64) -> Candidate {
        cold_candidate(lease, name, skew_seconds, true)
    }

    fn cold_candidate(
        lease: &Arc<MemoryLease>,
        name: &str,
        skew_seconds: i64,
        warm: bool,
    ) -> Candidate {
        let (leader_tx, leader) = watch::channel(false);
        let (stop, stop_rx) = watch::channel(false);
        let (warm, warm_rx) = watch::channel(warm);
        let lease_changed = Arc::new(Notify::new());
        lease.watchers.lock().unwrap().push(lease_changed.clone());
        let signals = Signals {
            stop: stop_rx,
            warm: warm_rx,
            lease_changed,
        };
        let client = Client {
            lease: lease.clone(),
            cut_off: Arc::default(),
        };
        let config = LeaseConfig {
            namespace: "switchboard".into(),
            name: "lease".into(),
            identity: name.into(),
            duration: DURATION,
        };
        let store = client.clone();
        // A wall clock skewed against the others; paused tokio time drives it forward.
        let started = Instant::now();
        let base = Timestamp::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let clock = move || {
            let elapsed = Instant::now().duration_since(started);
            base + elapsed + k8s_openapi::jiff::SignedDuration::from_secs(skew_seconds)
        };
        let task = tokio::spawn(async move {
            elect(&store, &config, clock, leader_tx, signals).await;
        });
        Candidate {
            leader,
            stop,
            warm,
            client,
            task,
        }
    }

    /// Steps paused time in small increments for `total`, checking after each that no two
    /// candidates lead at once; returns when `until` first held (and the time it took).
    async fn watch_for(
        candidates: &[&Candidate],
        total: Duration,
        until: impl Fn() -> bool,
    ) -> Option<Duration> {
        let step = Duration::from_millis(100);
        let started = Instant::now();
        while started.elapsed() < total {
            tokio::time::sleep(step).await;
            let leaders = candidates.iter().filter(|c| *c.leader.borrow()).count();
            assert!(
                leaders <= 1,
                "{leaders} candidates lead at once after {:?}",
                started.elapsed()
            );
            if until() {
                return Some(started.elapsed());
            }
        }
        None
    }

    #[tokio::test(start_paused = true)]
    async fn skewed_clocks_never_make_two_leaders() {
        for (a_skew, b_skew) in [(30, -30), (-30, 30), (0, 30), (30, 0)] {
            let lease = Arc::new(MemoryLease::default());
            let a = candidate(&lease, "a", a_skew);
            // Let `a` take the lease before `b` starts.
            watch_for(&[&a], DURATION, || *a.leader.borrow()).await;
            assert!(*a.leader.borrow(), "a never took a free lease");
            let b = candidate(&lease, "b", b_skew);
            // Many lease durations: `a` renews; `b` must never take over, whatever the clocks.
            let took = watch_for(&[&a, &b], DURATION * 8, || *b.leader.borrow()).await;
            assert_eq!(
                took, None,
                "b took a renewed lease (skew a {a_skew}, b {b_skew})"
            );
            assert!(*a.leader.borrow());

            // `a` is cut off from the API server (renewals hang): it steps down on its own,
            // and only then may `b` lead, once the record has not changed for DURATION.
            a.client.cut_off.store(true, Ordering::SeqCst);
            let took = watch_for(&[&a, &b], DURATION * 3, || *b.leader.borrow()).await;
            let took = took.expect("b never took over from a cut-off holder");
            assert!(!*a.leader.borrow());
            assert!(
                took >= DURATION - DURATION / 3,
                "b took over after only {took:?}"
            );
            assert!(took <= DURATION * 2, "b took over only after {took:?}");
            for c in [a, b] {
                c.task.abort();
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_that_stops_hands_over_to_the_warm_standby_at_once() {
        let lease = Arc::new(MemoryLease::default());
        let a = candidate(&lease, "a", 30);
        watch_for(&[&a], DURATION, || *a.leader.borrow()).await;
        let b = candidate(&lease, "b", -30);
        watch_for(&[&a, &b], DURATION * 2, || false).await;
        // `a`'s replacement starts while `a` steps down; it has not rendered yet.
        let c = cold_candidate(&lease, "c", 0, false);
        a.stop.send_replace(true); // what SIGTERM does in main
        let took = watch_for(&[&a, &b, &c], DURATION, || *b.leader.borrow())
            .await
            .expect("b never took over after a stepped down");
        // The watch, not b's next round: one step of watch_for (its renew interval is 5 s).
        assert!(took <= Duration::from_millis(100), "handover took {took:?}");
        assert!(a.task.await.is_ok(), "a's election ended");
        let record = lease.state.lock().unwrap().clone().unwrap().0;
        assert_eq!((record.holder.as_str(), record.transitions), ("b", 1));
        // Warm or not, the newcomer waits while b renews.
        c.warm.send_replace(true);
        assert_eq!(
            watch_for(&[&b, &c], DURATION * 2, || *c.leader.borrow()).await,
            None
        );
        b.stop.send_replace(true);
        watch_for(&[&b, &c], DURATION, || *c.leader.borrow())
            .await
            .expect("the newcomer, warm now, never took a released lease");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cold_replica_never_takes_a_free_lease() {
        let lease = Arc::new(MemoryLease::default());
        let cold = cold_candidate(&lease, "cold", 0, false);
        let took = watch_for(&[&cold], DURATION * 3, || *cold.leader.borrow()).await;
        assert_eq!(took, None, "a replica that never rendered took the lease");
        assert!(lease.state.lock().unwrap().is_none(), "it even created it");
        cold.warm.send_replace(true);
        watch_for(&[&cold], DURATION, || *cold.leader.borrow())
            .await
            .expect("warm now, it never took the free lease");
    }

    #[test]
    fn expiry_is_local_time_since_the_record_last_changed() {
        let mut seen = Observation::default();
        let t0 = Instant::now();
        let record = |renew: i64| Record {
            holder: "a".into(),
            // A renew time far in the past by our clock: must not matter.
            renew_time: Some(Timestamp::UNIX_EPOCH + Duration::from_secs(renew as u64)),
            duration_seconds: 15,
            ..Record::default()
        };
        assert_eq!(seen.decide(&record(1), "b", t0), Decision::Wait);
        assert_eq!(
            seen.decide(&record(1), "b", t0 + Duration::from_secs(14)),
            Decision::Wait
        );
        assert_eq!(
            seen.decide(&record(2), "b", t0 + Duration::from_secs(14)),
            Decision::Wait
        );
        assert_eq!(
            seen.decide(&record(2), "b", t0 + Duration::from_secs(28)),
            Decision::Wait
        );
        assert_eq!(
            seen.decide(&record(2), "b", t0 + Duration::from_secs(29)),
            Decision::TakeOver
        );
        let released = Record {
            holder: String::new(),
            ..record(3)
        };
        assert_eq!(
            Observation::default().decide(&released, "b", t0),
            Decision::TakeOver
        );
        assert_eq!(
            Observation::default().decide(&record(3), "a", t0),
            Decision::Renew
        );
    }
}
