//! What a costly check found for a text a caller presents on every call (a key, whose SHA-256
//! digest the table looks up; a sealed session id, which is decrypted and authenticated), kept
//! so the same text presented again skips the check.
//!
//! The memo is keyed by SipHash-2-4 of the text with 128 bits out, under a key drawn for each
//! memo: a pseudo-random function, so without that key no one can make a text land on an entry,
//! and landing on one is as good as the check passing. Only what passed the check is kept, so a
//! caller cannot fill the memo with texts that fail it; it holds at most `capacity` entries and
//! forgets them all when full (what it held is found again the costly way). The memo never
//! holds the text itself.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{PoisonError, RwLock};

use siphasher::sip128::SipHasher24;

pub(crate) struct TextMemo<V> {
    hasher: SipHasher24,
    found: RwLock<HashMap<u128, V, BuildHasherDefault<Prehashed>>>,
    capacity: usize,
}

impl<V: Clone> TextMemo<V> {
    pub(crate) fn new(capacity: usize) -> TextMemo<V> {
        TextMemo {
            hasher: SipHasher24::new_with_keys(rand::random(), rand::random()),
            found: RwLock::default(),
            capacity,
        }
    }

    /// What `check` finds for `text`: from the memo when it found it before, else `check`'s
    /// answer, kept only when it found something (so nothing that failed is ever kept).
    pub(crate) fn found_or_check<E>(
        &self,
        text: &str,
        check: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        let id = self.id(text);
        if let Some(found) = self.get(id) {
            return Ok(found);
        }
        let found = check()?;
        self.insert(id, found.clone());
        Ok(found)
    }

    /// The text's id in this memo (and in no other: each draws its own key).
    fn id(&self, text: &str) -> u128 {
        self.hasher.hash(text.as_bytes()).as_u128()
    }

    fn get(&self, id: u128) -> Option<V> {
        // A panic while the lock was held left nothing half-written (an insert is one step).
        let found = self.found.read().unwrap_or_else(PoisonError::into_inner);
        found.get(&id).cloned()
    }

    fn insert(&self, id: u128, value: V) {
        let mut found = self.found.write().unwrap_or_else(PoisonError::into_inner);
        if found.len() >= self.capacity {
            found.clear();
        }
        found.insert(id, value);
    }

    /// Puts `value` in for `text` without any check: for tests that show the memo is what
    /// answers.
    #[cfg(test)]
    pub(crate) fn plant(&self, text: &str, value: V) {
        self.insert(self.id(text), value);
    }

    /// Whether `text` has the same id here as in `other` (never, but by a 2^-128 chance).
    #[cfg(test)]
    pub(crate) fn same_id(&self, other: &TextMemo<V>, text: &str) -> bool {
        self.id(text) == other.id(text)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.found.read().map_or(0, |found| found.len())
    }
}

/// The memo's ids are SipHash outputs already: its map takes their low 64 bits as they are.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u128` is called for a `u128` key; anything else is folded in all the same.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, id: u128) {
        self.0 = id as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_again_by_its_text_only_in_its_own_memo_and_bounded() {
        let memo = TextMemo::new(3);
        let found = |text: &str, value: i32| memo.found_or_check(text, || Ok::<_, ()>(value));
        assert_eq!(
            memo.found_or_check("a", || Err::<i32, _>("refused")),
            Err("refused")
        );
        assert_eq!(memo.len(), 0, "what failed its check is not kept");
        assert_eq!(found("a", 1), Ok(1));
        assert_eq!(found("a", 9), Ok(1), "found again without its check");
        assert_eq!(found("b", 2), Ok(2));
        let other: TextMemo<i32> = TextMemo::new(3);
        assert!(!memo.same_id(&other, "a"), "each memo draws its own key");
        assert_eq!(found("c", 3), Ok(3));
        assert_eq!(memo.len(), 3);
        // Full: everything is forgotten before the next entry goes in.
        assert_eq!(found("d", 4), Ok(4));
        assert_eq!((memo.len(), found("a", 5)), (1, Ok(5)));
    }
}
