//! Legacy-era `Mcp-Session-Id` sessions: minted by `initialize`, scoped to the endpoint path
//! that minted them (for `session-auth` variants the scope also holds the `Authorization`
//! value, see `http::session_scope`), forgotten on DELETE.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};

/// Beyond this many live sessions the store is cleared; clients then get 404 and re-initialize.
const MAX_SESSIONS: usize = 100_000;

#[derive(Default)]
pub struct Sessions {
    /// session id → scope (endpoint path, maybe with a credential binding) it belongs to.
    map: RwLock<HashMap<String, String>>,
    keys: RandomState,
    counter: AtomicU64,
}

impl Sessions {
    /// Mints a new session for `scope` (the endpoint path).
    pub fn create(&self, scope: &str) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let id = format!(
            "{:016x}{:016x}",
            self.keys.hash_one(n),
            self.keys.hash_one(!n)
        );
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= MAX_SESSIONS {
            map.clear();
        }
        map.insert(id.clone(), scope.to_owned());
        id
    }

    pub fn contains(&self, id: &str, scope: &str) -> bool {
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        map.get(id).is_some_and(|s| s == scope)
    }

    /// Forgets a session; false if it was unknown (for this scope).
    pub fn remove(&self, id: &str, scope: &str) -> bool {
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        if map.get(id).is_some_and(|s| s == scope) {
            map.remove(id);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_scoped_and_forgotten() {
        let s = Sessions::default();
        let a = s.create("/mcp");
        let b = s.create("/mcp");
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(s.contains(&a, "/mcp"));
        assert!(!s.contains(&a, "/v/sse/mcp"));
        assert!(!s.remove(&a, "/v/sse/mcp"));
        assert!(s.remove(&a, "/mcp"));
        assert!(!s.contains(&a, "/mcp"));
    }
}
