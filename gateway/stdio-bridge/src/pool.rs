//! The processes of one replica: a pool of initialized processes that 2026-07-28 requests lease
//! one at a time, and one process per legacy session for that session's life.
//!
//! Bounded: at most `max_processes` alive at once, pooled and sessions together; a request that
//! finds none idle and no room waits up to `queue_timeout` for one to come back. A pooled
//! process that exits is replaced (its requests in flight got an error from
//! `Process`); pooled processes beyond `pool_size` idle longer than
//! `process_idle`, and sessions idle longer than `session_idle`, are stopped.
//!
//! A session that ended (its process exited, it idled out, the client or the drain ended it) is
//! remembered as ended for a while, by name: a gateway that asks for it again by its affinity
//! (see [`crate::peers`]) is told it is gone, instead of getting a new process without the
//! state the old one had.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::process::{Gone, Launch, Process};

#[derive(Clone, Debug)]
pub struct Settings {
    /// Initialized processes kept for 2026-07-28 requests (at least 1: readiness waits for one).
    pub pool_size: usize,
    pub max_processes: usize,
    pub process_idle: Duration,
    pub session_idle: Duration,
    pub init_timeout: Duration,
    pub queue_timeout: Duration,
}

/// Why no process could be had.
#[derive(Debug)]
pub(crate) enum Refused {
    /// Every process is busy and there is no room for another.
    Busy(Duration),
    /// Starting or initializing one failed.
    Failed(Gone),
}

pub struct Processes {
    launch: Launch,
    replica: String,
    settings: Settings,
    next_id: AtomicU64,
    /// Alive (or starting), pooled and sessions alike.
    alive: AtomicUsize,
    /// Pooled processes alive or starting (idle or leased).
    pooled: AtomicUsize,
    idle: Mutex<Vec<Arc<Process>>>,
    sessions: Mutex<HashMap<String, Arc<Process>>>,
    /// Sessions that ended here, or on a replica that drained (it told the others).
    ended: Mutex<Ended>,
    /// A process came back to the pool, or one exited (room for another).
    freed: Notify,
    /// A pooled process exited or went: the maintenance loop refills.
    changed: Notify,
    ready: AtomicBool,
    stopping: AtomicBool,
    /// Set when the server cannot be started at all (see [`Processes::maintain`]).
    fatal: tokio::sync::watch::Sender<Option<String>>,
}

/// Starts in a row that fail before any process ever answered `initialize` make the bridge
/// give up (and exit, so the pod's status shows the crash and its reason).
const STARTUP_ATTEMPTS: u32 = 3;

/// What a replica knows of a session by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holding {
    /// Its process runs here (or is being initialized).
    Held,
    /// It ended: its process is gone, and with it the session's state.
    Ended,
    Unknown,
}

/// Names of ended sessions, oldest first: kept [`ENDED_KEPT`], at most [`ENDED_MAX`] of them
/// (about 100 bytes each).
#[derive(Default)]
struct Ended {
    at: HashMap<String, Instant>,
    order: VecDeque<(String, Instant)>,
}

/// As long as a gateway's session may come back (the gateway's `sessionTtl` is 24 h by default).
const ENDED_KEPT: Duration = Duration::from_secs(24 * 3600);
const ENDED_MAX: usize = 65_536;

impl Ended {
    fn insert(&mut self, name: String) {
        let now = Instant::now();
        self.at.insert(name.clone(), now);
        self.order.push_back((name, now));
        while self.order.len() > ENDED_MAX {
            self.pop_oldest();
        }
    }

    fn forget(&mut self, name: &str) {
        self.at.remove(name);
    }

    fn contains(&self, name: &str) -> bool {
        self.at.contains_key(name)
    }

    fn prune(&mut self) {
        while self
            .order
            .front()
            .is_some_and(|(_, at)| at.elapsed() >= ENDED_KEPT)
        {
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((name, at)) = self.order.pop_front()
            && self.at.get(&name) == Some(&at)
        {
            self.at.remove(&name);
        }
    }
}

impl Processes {
    pub fn new(launch: Launch, replica: String, settings: Settings) -> Arc<Processes> {
        Arc::new(Processes {
            launch,
            replica,
            settings,
            next_id: AtomicU64::new(1),
            alive: AtomicUsize::new(0),
            pooled: AtomicUsize::new(0),
            idle: Mutex::new(Vec::new()),
            sessions: Mutex::new(HashMap::new()),
            ended: Mutex::new(Ended::default()),
            freed: Notify::new(),
            changed: Notify::new(),
            ready: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            fatal: tokio::sync::watch::channel(None).0,
        })
    }

    /// Whether a process has answered `initialize` (readiness).
    pub(crate) fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    pub(crate) fn counts(&self) -> (usize, usize, usize) {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).len();
        let sessions = self
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len();
        (self.alive.load(Ordering::Relaxed), idle, sessions)
    }

    /// Takes a slot for one more process, if there is room.
    fn reserve(&self) -> bool {
        self.alive
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.settings.max_processes).then_some(n + 1)
            })
            .is_ok()
    }

    /// Starts a process in a reserved slot; the slot is given back when it exits.
    fn start(self: &Arc<Self>, pooled: bool) -> Result<Arc<Process>, Gone> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let label = format!("{}/{id}", self.replica);
        let process = match Process::spawn(&self.launch, id, label, pooled) {
            Ok(p) => p,
            Err(e) => {
                self.alive.fetch_sub(1, Ordering::AcqRel);
                if pooled {
                    self.pooled.fetch_sub(1, Ordering::AcqRel);
                }
                self.freed.notify_waiters();
                return Err(e);
            }
        };
        let pool = Arc::downgrade(self);
        let watched = process.clone();
        tokio::spawn(async move {
            watched.exited().await;
            if let Some(pool) = pool.upgrade() {
                pool.alive.fetch_sub(1, Ordering::AcqRel);
                if watched.pooled {
                    pool.pooled.fetch_sub(1, Ordering::AcqRel);
                    pool.idle
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .retain(|p| p.id != watched.id);
                    pool.changed.notify_one();
                } else {
                    pool.end_sessions_of(&watched);
                }
                pool.freed.notify_waiters();
            }
        });
        Ok(process)
    }

    /// Starts and initializes one pooled process in a reserved slot.
    async fn start_pooled(self: &Arc<Self>) -> Result<Arc<Process>, Gone> {
        self.pooled.fetch_add(1, Ordering::AcqRel);
        let process = self.start(true)?;
        match process.initialize(self.settings.init_timeout).await {
            Ok(_) => {
                self.ready.store(true, Ordering::Relaxed);
                Ok(process)
            }
            Err(e) => {
                tracing::warn!(process = %process.label, error = %e, "a pooled process failed to initialize");
                process.kill();
                Err(e)
            }
        }
    }

    /// An idle pooled process for one 2026-07-28 request, started when none is idle and there
    /// is room; else waits for one.
    pub(crate) async fn lease(self: &Arc<Self>) -> Result<Lease, Refused> {
        let deadline = tokio::time::Instant::now() + self.settings.queue_timeout;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(process) = self.pop_idle() {
                return Ok(Lease {
                    pool: self.clone(),
                    process: Some(process),
                });
            }
            if self.reserve() {
                return match self.start_pooled().await {
                    Ok(process) => Ok(Lease {
                        pool: self.clone(),
                        process: Some(process),
                    }),
                    Err(e) => Err(Refused::Failed(e)),
                };
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(Refused::Busy(self.settings.queue_timeout));
            }
        }
    }

    fn pop_idle(&self) -> Option<Arc<Process>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(p) = idle.pop() {
            if p.exit().is_none() {
                return Some(p);
            }
        }
        None
    }

    fn give_back(&self, process: Arc<Process>) {
        if self.stopping.load(Ordering::Relaxed) {
            process.kill();
        } else if process.exit().is_none() {
            self.idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(process);
        }
        self.freed.notify_waiters();
    }

    /// A process of its own for a new legacy session (not initialized: the client's
    /// `initialize` goes to it).
    pub(crate) fn open_session(self: &Arc<Self>, session: &str) -> Result<Arc<Process>, Refused> {
        if !self.reserve() {
            return Err(Refused::Busy(Duration::ZERO));
        }
        let process = self.start(false).map_err(Refused::Failed)?;
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session.to_string(), process.clone());
        Ok(process)
    }

    /// A session's process, while it runs.
    pub(crate) fn session(&self, session: &str) -> Option<Arc<Process>> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        match sessions.get(session) {
            Some(p) if p.exit().is_none() => Some(p.clone()),
            Some(_) => {
                sessions.remove(session);
                drop(sessions);
                self.mark_ended([session.to_string()]);
                None
            }
            None => None,
        }
    }

    /// Ends a session: its process stops.
    pub(crate) fn close_session(&self, session: &str) -> bool {
        let removed = self
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session);
        if let Some(p) = &removed {
            p.kill();
            self.mark_ended([session.to_string()]);
        }
        removed.is_some()
    }

    /// Forgets a session whose initialize failed: it never had a state to lose, so a later
    /// handshake for its name may open it again.
    pub(crate) fn discard_session(&self, session: &str) {
        let removed = self
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session);
        if let Some(p) = removed {
            p.kill();
        }
        self.ended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .forget(session);
    }

    /// What this replica knows of the session `name`.
    pub(crate) fn holding(&self, name: &str) -> Holding {
        if self.session(name).is_some() {
            return Holding::Held;
        }
        if self
            .ended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(name)
        {
            return Holding::Ended;
        }
        Holding::Unknown
    }

    /// Remembers sessions as ended (here, or on a replica that drained and said so).
    pub(crate) fn mark_ended(&self, names: impl IntoIterator<Item = String>) {
        let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        for name in names {
            ended.insert(name);
        }
    }

    /// The names of the sessions held here.
    pub(crate) fn session_names(&self) -> Vec<String> {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// A session's process exited: the session ended with it.
    fn end_sessions_of(&self, process: &Process) {
        let mut gone = Vec::new();
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|name, p| {
                let keep = p.id != process.id;
                if !keep {
                    gone.push(name.clone());
                }
                keep
            });
        self.mark_ended(gone);
    }

    /// Keeps the pool at `pool_size`, replaces what exits, stops what idles too long. Runs
    /// until [`Processes::stop_all`].
    pub async fn maintain(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failed_starts = 0;
        loop {
            if self.stopping.load(Ordering::Relaxed) {
                return;
            }
            while self.pooled.load(Ordering::Acquire) < self.settings.pool_size && self.reserve() {
                match self.start_pooled().await {
                    Ok(p) => {
                        failed_starts = 0;
                        self.give_back(p);
                    }
                    Err(e) => {
                        failed_starts += 1;
                        if !self.ready() && failed_starts >= STARTUP_ATTEMPTS {
                            let why = format!(
                                "{e} ({failed_starts} starts in a row; none ever answered initialize)"
                            );
                            tracing::error!("giving up: {why}");
                            self.fatal.send_replace(Some(why));
                            return;
                        }
                        tracing::warn!(error = %e, "could not start a pooled process; trying again");
                        break;
                    }
                }
            }
            self.reap();
            tokio::select! {
                _ = tick.tick() => {}
                _ = self.changed.notified() => {}
            }
        }
    }

    fn reap(&self) {
        let surplus = self
            .pooled
            .load(Ordering::Acquire)
            .saturating_sub(self.settings.pool_size);
        if surplus > 0 {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            let mut stopped = 0;
            idle.retain(|p| {
                if stopped < surplus && p.idle_for() >= self.settings.process_idle {
                    stopped += 1;
                    tracing::info!(process = %p.label, "stopping an idle pooled process");
                    p.kill();
                    false
                } else {
                    true
                }
            });
        }
        let mut ended = Vec::new();
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|name, p| {
                let keep = p.exit().is_none()
                    && (p.in_flight() > 0 || p.idle_for() < self.settings.session_idle);
                if !keep {
                    tracing::info!(process = %p.label, "ending an idle session");
                    p.kill();
                    ended.push(name.clone());
                }
                keep
            });
        let mut known = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        for name in ended {
            known.insert(name);
        }
        known.prune();
    }

    /// Resolves with the reason when the server cannot be started at all.
    pub async fn failed(&self) -> String {
        let mut rx = self.fatal.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(why) => why.clone().unwrap_or_default(),
            Err(_) => std::future::pending().await,
        }
    }

    /// Stops every process (the end of a drain) and waits for them, bounded.
    pub async fn stop_all(&self, grace: Duration) {
        self.stopping.store(true, Ordering::Relaxed);
        let all: Vec<Arc<Process>> = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
            idle.drain(..)
                .chain(sessions.drain().map(|(name, p)| {
                    ended.insert(name);
                    p
                }))
                .collect()
        };
        for p in &all {
            p.kill();
        }
        let _ = tokio::time::timeout(
            grace,
            futures_util::future::join_all(all.iter().map(|p| p.exited())),
        )
        .await;
    }
}

/// A pooled process held for one request; back in the pool when dropped (if it still runs).
pub(crate) struct Lease {
    pool: Arc<Processes>,
    process: Option<Arc<Process>>,
}

impl Lease {
    pub fn process(&self) -> &Arc<Process> {
        self.process
            .as_ref()
            .expect("a lease holds its process until dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(p) = self.process.take() {
            self.pool.give_back(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            pool_size: 1,
            max_processes: 4,
            process_idle: Duration::from_secs(60),
            session_idle: Duration::from_secs(60),
            init_timeout: Duration::from_secs(20),
            queue_timeout: Duration::from_secs(1),
        }
    }

    /// What the bridge exits with (the pod's termination message, which the Running condition
    /// shows) for a server that exits at once: its exit code and its stderr, every time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_that_cannot_start_gives_up_with_its_exit_code_and_stderr() {
        for _ in 0..5 {
            let launch = Launch {
                program: "sh".into(),
                args: vec!["-c".into(), "echo 'Error: no config' >&2; exit 3".into()],
            };
            let processes = Processes::new(launch, "test".into(), settings());
            tokio::spawn(processes.clone().maintain());
            let why = tokio::time::timeout(Duration::from_secs(60), processes.failed())
                .await
                .expect("the pool gives up within a minute");
            assert_eq!(
                why,
                "the server process did not initialize: the server process exited with code 3 \
                 before answering; its stderr last said: Error: no config \
                 (3 starts in a row; none ever answered initialize)"
            );
            processes.stop_all(Duration::from_secs(2)).await;
        }
    }

    /// A session whose process exits, or that is closed, is remembered as ended (a gateway
    /// asking for it again hears so); one whose handshake failed never had a state to lose.
    #[tokio::test]
    async fn sessions_that_end_are_remembered_and_failed_handshakes_are_not() {
        let launch = Launch {
            program: "sh".into(),
            args: vec!["-c".into(), "exec cat >/dev/null".into()],
        };
        let processes = Processes::new(launch, "test".into(), settings());
        let [crashed, closed, failed] = ["a", "b", "c"].map(|n| n.repeat(32));
        let process = processes
            .open_session(&crashed)
            .expect("room for a session");
        assert_eq!(processes.holding(&crashed), Holding::Held);
        process.kill();
        process.exited().await;
        assert_eq!(processes.holding(&crashed), Holding::Ended);
        assert!(processes.session(&crashed).is_none());

        processes.open_session(&closed).expect("room for a session");
        assert!(processes.close_session(&closed));
        assert_eq!(processes.holding(&closed), Holding::Ended);

        let process = processes.open_session(&failed).expect("room for a session");
        processes.discard_session(&failed);
        process.exited().await;
        assert_eq!(processes.holding(&failed), Holding::Unknown);

        processes.mark_ended(["d".repeat(32)]);
        assert_eq!(processes.holding(&"d".repeat(32)), Holding::Ended);
        assert_eq!(processes.holding(&"e".repeat(32)), Holding::Unknown);
        processes.stop_all(Duration::from_secs(2)).await;
    }
}
