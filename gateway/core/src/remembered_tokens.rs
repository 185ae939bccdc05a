//! Tokens verified lately, with what they proved: a client sends the same bearer token for
//! minutes, and a signature check costs more than the rest of a request. One cache for every
//! kind of token the gateway verifies (ServiceAccount tokens, people's access tokens).
//!
//! Kept under a fast hash of the token together with the token itself, compared whole on a hit
//! (in constant time): a collision only costs a verification, it never finds what another token
//! proved. (SHA-256 of a 1 KB token would cost more than the rest of the call.)

use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

/// Most tokens remembered, and for how long at most (never past a token's expiry).
const CAPACITY: u64 = 10_000;
const REMEMBERED_FOR: Duration = Duration::from_secs(60);

pub(crate) struct RememberedTokens<T> {
    cache: moka::sync::Cache<u64, Arc<Entry<T>>, foldhash::fast::RandomState>,
    hasher: foldhash::fast::RandomState,
}

struct Entry<T> {
    token: Box<str>,
    proved: T,
    /// The token's `exp` (Unix seconds).
    exp: u64,
}

impl<T: Clone + Send + Sync + 'static> Default for RememberedTokens<T> {
    fn default() -> Self {
        RememberedTokens {
            cache: moka::sync::Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(REMEMBERED_FOR)
                .build_with_hasher(foldhash::fast::RandomState::default()),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

impl<T: Clone + Send + Sync + 'static> RememberedTokens<T> {
    /// What `token` proved when it was verified, while it has not expired.
    pub fn get(&self, token: &str) -> Option<T> {
        let hit = self.cache.get(&self.hasher.hash_one(token))?;
        let same = subtle::ConstantTimeEq::ct_eq(hit.token.as_bytes(), token.as_bytes());
        (bool::from(same) && unix_now() < hit.exp).then(|| hit.proved.clone())
    }

    /// Remembers what a verified `token` proved, until `exp` at most.
    pub fn insert(&self, token: &str, proved: T, exp: u64) {
        let entry = Entry {
            token: token.into(),
            proved,
            exp,
        };
        self.cache
            .insert(self.hasher.hash_one(token), Arc::new(entry));
    }
}

/// Now, in Unix seconds (a token's `exp` and `nbf` are).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
