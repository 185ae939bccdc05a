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

    /// The text's id in this memo (and in no other: each draws its own key).
    pub(crate) fn id(&self, text: &str) -> u128 {
        self.hasher.hash(text.as_bytes()).as_u128()
    }

    pub(crate) fn get(&self, id: u128) -> Option<V> {
        // A panic while the lock was held left nothing half-written (an insert is one step).
        let found = self.found.read().unwrap_or_else(PoisonError::into_inner);
        found.get(&id).cloned()
    }

    /// Keeps what the check found for the text `id` stands for: call it only after the check
    /// passed.
    pub(crate) fn insert(&self, id: u128, value: V) {
        let mut found = self.found.write().unwrap_or_else(PoisonError::into_inner);
        if found.len() >= self.capacity {
            found.clear();
        }
        found.insert(id, value);
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
        let a = memo.id("a");
        assert_eq!(memo.get(a), None);
        memo.insert(a, 1);
        assert_eq!(memo.get(memo.id("a")), Some(1));
        assert_eq!(memo.get(memo.id("b")), None);
        let other: TextMemo<i32> = TextMemo::new(3);
        assert_ne!(other.id("a"), a, "each memo draws its own key");
        for (i, text) in ["b", "c"].into_iter().enumerate() {
            memo.insert(memo.id(text), i32::try_from(i).unwrap_or(0) + 2);
        }
        assert_eq!(memo.len(), 3);
        // Full: everything is forgotten before the next entry goes in.
        memo.insert(memo.id("d"), 4);
        assert_eq!(
            (memo.len(), memo.get(a), memo.get(memo.id("d"))),
            (1, None, Some(4))
        );
    }
}
