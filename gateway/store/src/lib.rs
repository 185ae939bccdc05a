//! The shared store (issue 37): the little state that cannot live in what clients hold.
//!
//! The gateway keeps sessions, hand-offs and logins sealed in what the client holds, which is
//! why any replica answers any request. Three things cannot live there: a person's upstream
//! refresh token (the client must never hold it), a budget every replica counts against, and
//! single use (a code redeemed once across replicas). They, and only they, live here.
//!
//! One [`Store`] over one of two backends that implement the same trait (and pass the same
//! tests): `memory` (`memory.rs`) for one replica (optionally written to a file), and
//! `redis` (`redis_store.rs`) for several. Values are sealed at rest (`seal.rs`); keys are
//! hashes, so neither a person's name nor a token id appears in the store.
//!
//! **When the store is down** every operation fails with [`StoreError::Unavailable`] within the
//! configured timeout, and [`Store::is_up`] says so until an operation succeeds again; what
//! each caller does then is its own (limits count locally, an account call is refused with a
//! 503 naming the store). Nothing here retries: Redis's connection manager reconnects behind.

mod backend;
mod memory;
mod redis_store;
mod seal;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use switchboard_snapshot::{StoreSettings, resolved_value};

use backend::Backend;
pub use backend::Rate;
use backend::{Decision, Slots};

/// What went wrong with the store: the one error of this boundary.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store did not answer (down, unreachable, refused our credentials, too slow).
    #[error("the state store is unavailable: {reason}")]
    Unavailable { reason: String },
    /// A value did not open: sealed under a key this gateway does not hold, or altered.
    #[error("a value in the state store does not open with this gateway's store keys")]
    Sealed,
    /// The embedded store's file cannot be read or written.
    #[error("the state store's file {path}: {reason}")]
    File { path: String, reason: String },
    /// Settings the store cannot work with (checked at validation; named by field).
    #[error("{0}")]
    Settings(String),
}

/// A name in the store: its kind (what it holds) and a hash of what it is about, so the store
/// never names a person, a server or a token in clear.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoreKey(String);

impl StoreKey {
    /// `sb:<kind>:<first 16 bytes of SHA-256(parts, each length-prefixed)>`.
    pub fn new(kind: &str, parts: &[&[u8]]) -> StoreKey {
        let mut hash = Sha256::new();
        for part in parts {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part);
        }
        let digest = hash.finalize();
        StoreKey(format!("sb:{kind}:{}", hex::encode(&digest[..16])))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Told of every operation (the gateway's metrics count them by operation and outcome).
pub trait StoreObserver: Send + Sync {
    /// `operation` is `get`, `put`, `put_new`, `delete`, `take`, `unlock`, `admit`, `renew`,
    /// `release` or `ping`.
    fn operation(&self, backend: &'static str, operation: &'static str, error: Option<&StoreError>);
}

enum Backends {
    Memory(memory::Memory),
    // Boxed: the client's settings are large beside a map's handle.
    Redis(Box<redis_store::Redis>),
}

/// A lock held in the store until [`Store::unlock`] or its expiry.
#[derive(Debug)]
pub struct Lock {
    key: StoreKey,
    token: [u8; 16],
}

/// The store one gateway process uses, whichever backend.
pub struct Store {
    backend: Backends,
    sealing: seal::Sealing,
    /// What it was made from: a table whose settings are the same keeps this store.
    settings: StoreSettings,
    session_key: Option<[u8; 32]>,
    up: AtomicBool,
    observer: Option<Arc<dyn StoreObserver>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend_name())
            .field("up", &self.is_up())
            .finish()
    }
}

fn key_digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

macro_rules! on_backend {
    ($self:ident, $b:ident => $call:expr) => {
        match &$self.backend {
            Backends::Memory($b) => $call.await,
            Backends::Redis($b) => $call.await,
        }
    };
}

impl Store {
    /// The store `settings` (secrets resolved) describe; its sealing key is `settings.key`, else
    /// derived from `session_key`, else (a memory store nothing outlives) this process's own.
    pub fn from_settings(
        settings: &StoreSettings,
        session_key: Option<&str>,
    ) -> Result<Store, StoreError> {
        let key = settings
            .key
            .as_ref()
            .and_then(resolved_value)
            .or(session_key);
        let previous: Vec<&[u8]> = settings
            .previous_keys
            .iter()
            .filter_map(resolved_value)
            .map(str::as_bytes)
            .collect();
        let sealing = match key {
            Some(key) => seal::Sealing::new(key.as_bytes(), &previous),
            None => seal::Sealing::ephemeral(),
        };
        let backend = match &settings.redis {
            Some(redis) => Backends::Redis(Box::new(redis_store::Redis::new(
                &redis.url,
                redis.username.as_deref(),
                redis.password.as_ref().and_then(resolved_value),
                redis.ca_bundle.as_ref().and_then(resolved_value),
                redis.timeout,
            )?)),
            None => {
                let file = settings
                    .memory
                    .as_ref()
                    .and_then(|m| m.file.as_ref())
                    .map(PathBuf::from);
                Backends::Memory(memory::Memory::new(file)?)
            }
        };
        Ok(Store {
            backend,
            sealing,
            settings: settings.clone(),
            session_key: session_key.map(key_digest),
            up: AtomicBool::new(true),
            observer: None,
        })
    }

    /// An embedded store of this process alone (tests, tables built without a gateway).
    pub fn in_memory() -> Store {
        Store {
            backend: Backends::Memory(memory::Memory::empty()),
            sealing: seal::Sealing::ephemeral(),
            settings: StoreSettings::default(),
            session_key: None,
            up: AtomicBool::new(true),
            observer: None,
        }
    }

    /// Whether this store was made from `settings` and `session_key` (and can serve a table
    /// that has them).
    pub fn serves(&self, settings: &StoreSettings, session_key: Option<&str>) -> bool {
        &self.settings == settings && self.session_key == session_key.map(key_digest)
    }

    /// Whether other replicas see what this one writes (Redis): only then are limits counted
    /// here rather than in each replica.
    pub fn is_shared(&self) -> bool {
        matches!(self.backend, Backends::Redis(_))
    }

    /// `memory` or `redis` (a metric label, the readiness detail).
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backends::Memory(_) => "memory",
            Backends::Redis(_) => "redis",
        }
    }

    /// Whether the last operation succeeded.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Has `observer` told of every operation from now on (the gateway's metrics).
    pub fn observed_by(mut self, observer: Arc<dyn StoreObserver>) -> Store {
        self.observer = Some(observer);
        self
    }

    fn noted<T>(
        &self,
        operation: &'static str,
        result: Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let failed = matches!(result, Err(StoreError::Unavailable { .. }));
        self.up.store(!failed, Ordering::Relaxed);
        if let Some(observer) = &self.observer {
            observer.operation(self.backend_name(), operation, result.as_ref().err());
        }
        if let Err(e) = &result {
            tracing::debug!(operation, error = %e, "store operation failed");
        }
        result
    }

    /// The value under `key`, opened.
    pub async fn get(&self, key: &StoreKey) -> Result<Option<Vec<u8>>, StoreError> {
        let raw = on_backend!(self, b => b.get(key.as_str()));
        let opened = raw.and_then(|raw| match raw {
            Some(sealed) => self.sealing.open(key.as_str(), &sealed).map(Some),
            None => Ok(None),
        });
        self.noted("get", opened)
    }

    /// Writes `value` (sealed) under `key` for `ttl`.
    pub async fn put(&self, key: &StoreKey, value: &[u8], ttl: Duration) -> Result<(), StoreError> {
        let sealed = self.sealing.seal(key.as_str(), value);
        let result = on_backend!(self, b => b.put(key.as_str(), &sealed, ttl));
        self.noted("put", result)
    }

    /// Marks `key` used for `ttl`: `true` the first time across every replica, `false` after.
    pub async fn first_use(&self, key: &StoreKey, ttl: Duration) -> Result<bool, StoreError> {
        let result = on_backend!(self, b => b.put_new(key.as_str(), b"1", ttl));
        self.noted("put_new", result)
    }

    pub async fn delete(&self, key: &StoreKey) -> Result<(), StoreError> {
        let result = on_backend!(self, b => b.delete(key.as_str()));
        self.noted("delete", result)
    }

    /// The value under `key`, removed at once: one caller across the replicas gets it.
    pub async fn take(&self, key: &StoreKey) -> Result<Option<Vec<u8>>, StoreError> {
        let raw = on_backend!(self, b => b.take(key.as_str()));
        let opened = raw.and_then(|raw| match raw {
            Some(sealed) => self.sealing.open(key.as_str(), &sealed).map(Some),
            None => Ok(None),
        });
        self.noted("take", opened)
    }

    /// Takes the lock `key` for at most `ttl`; `None` while another holds it.
    pub async fn lock(&self, key: &StoreKey, ttl: Duration) -> Result<Option<Lock>, StoreError> {
        let token: [u8; 16] = rand::random();
        let result = on_backend!(self, b => b.put_new(key.as_str(), &token, ttl));
        let taken = self.noted("put_new", result)?;
        Ok(taken.then(|| Lock {
            key: key.clone(),
            token,
        }))
    }

    /// Releases `lock` if it is still this holder's (not expired and taken by another).
    pub async fn unlock(&self, lock: Lock) -> Result<(), StoreError> {
        let result = on_backend!(self, b => b.delete_if(lock.key.as_str(), &lock.token));
        self.noted("unlock", result).map(drop)
    }

    /// Asks the store whether it answers (a read of a key nothing writes): what `/readyz` says
    /// of a shared store, and how a replica notices it is back before any call needs it.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let result = on_backend!(self, b => b.get("sb:ping")).map(drop);
        self.noted("ping", result)
    }

    /// One request against a key's limits (`rate` under its key; at most `slots.1` in flight
    /// under `slots.0`), counted by every replica that shares the store, in one round trip. An
    /// admitted request holding a slot gets it back as [`Slot`]: renew it every third of
    /// [`LEASE`] while the request goes on, release it when it ends.
    pub async fn admit(
        &self,
        rate: Option<(&StoreKey, Rate)>,
        slots: Option<(&StoreKey, u32)>,
    ) -> Result<Admission, StoreError> {
        // A lease id only where a slot is asked (the rate alone draws nothing).
        let id: [u8; 16] = if slots.is_some() {
            rand::random()
        } else {
            [0; 16]
        };
        let asked = slots.map(|(key, limit)| Slots {
            key: key.as_str(),
            limit,
            lease: LEASE,
            id: &id,
        });
        let rate = rate.map(|(key, rate)| (key.as_str(), rate));
        let result = on_backend!(self, b => b.admit(rate, asked));
        Ok(match self.noted("admit", result)? {
            Decision::Admitted => Admission::Admitted(slots.map(|(key, _)| Slot {
                key: key.clone(),
                id,
            })),
            Decision::Busy => Admission::Busy,
            Decision::Limited { retry_after } => Admission::Limited { retry_after },
        })
    }

    /// Extends `slot` to a [`LEASE`] from now; `false` when it had lapsed already (it no longer
    /// counts: the request holding it goes on uncounted).
    pub async fn renew(&self, slot: &Slot) -> Result<bool, StoreError> {
        let result = on_backend!(self, b => b.renew(slot.key.as_str(), &slot.id, LEASE));
        self.noted("renew", result)
    }

    /// Gives `slot` back.
    pub async fn release(&self, slot: Slot) -> Result<(), StoreError> {
        let result = on_backend!(self, b => b.release(slot.key.as_str(), &slot.id));
        self.noted("release", result)
    }
}

/// How long a concurrency slot counts unless its holder renews it: a replica that dies holding
/// slots gives them back within this.
pub const LEASE: Duration = Duration::from_secs(30);

/// What a key's limits said of one request.
#[derive(Debug)]
pub enum Admission {
    /// Admitted, holding this slot when a concurrency limit was asked.
    Admitted(Option<Slot>),
    /// Every slot is held (by requests on any replica).
    Busy,
    /// Over the rate; the next request would be admitted after this.
    Limited { retry_after: Duration },
}

/// A concurrency slot a request holds in the store (see [`Store::admit`]).
#[derive(Debug, Clone)]
pub struct Slot {
    key: StoreKey,
    id: [u8; 16],
}

#[cfg(test)]
mod tests;
