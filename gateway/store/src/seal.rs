//! Values at rest are sealed: ChaCha20-Poly1305 under a key the gateway derives from its
//! configuration, with the store key as associated data (a value copied to another key does not
//! open). Each sealed value begins with the id of the key that sealed it, so the key can rotate:
//! new values are sealed with `gateway.store.key`, old ones still open with a key of
//! `gateway.store.previousKeys` until they expire or are written again.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use sha2::{Digest, Sha256};

use crate::StoreError;

const KEY_ID_LEN: usize = 4;
const NONCE_LEN: usize = 12;

/// The keys values are sealed with (the first) and opened with (any, by key id).
pub(crate) struct Sealing {
    current: SealingKey,
    previous: Vec<SealingKey>,
}

struct SealingKey {
    id: [u8; KEY_ID_LEN],
    cipher: ChaCha20Poly1305,
}

impl SealingKey {
    fn from_secret(secret: &[u8]) -> SealingKey {
        let key: [u8; 32] = Sha256::new()
            .chain_update(b"switchboard store v1\0")
            .chain_update(secret)
            .finalize()
            .into();
        SealingKey::from_key(key)
    }

    fn from_key(key: [u8; 32]) -> SealingKey {
        // The id names the key without saying anything about it: a hash under its own label.
        let digest = Sha256::new()
            .chain_update(b"switchboard store key id\0")
            .chain_update(key)
            .finalize();
        let mut id = [0u8; KEY_ID_LEN];
        id.copy_from_slice(&digest[..KEY_ID_LEN]);
        SealingKey {
            id,
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
        }
    }
}

impl Sealing {
    /// Keys from secrets: the first seals, every one opens.
    pub(crate) fn new(current: &[u8], previous: &[&[u8]]) -> Sealing {
        Sealing {
            current: SealingKey::from_secret(current),
            previous: previous
                .iter()
                .map(|s| SealingKey::from_secret(s))
                .collect(),
        }
    }

    /// A key of this process alone (a memory store that nothing outlives).
    pub(crate) fn ephemeral() -> Sealing {
        Sealing {
            current: SealingKey::from_key(rand::random()),
            previous: Vec::new(),
        }
    }

    pub(crate) fn seal(&self, aad: &str, plain: &[u8]) -> Vec<u8> {
        let nonce: [u8; NONCE_LEN] = rand::random();
        let payload = Payload {
            msg: plain,
            aad: aad.as_bytes(),
        };
        // Encryption fails only for a message beyond ChaCha20's 256 GiB.
        let sealed = self
            .current
            .cipher
            .encrypt(Nonce::from_slice(&nonce), payload)
            .unwrap_or_default();
        let mut out = Vec::with_capacity(KEY_ID_LEN + NONCE_LEN + sealed.len());
        out.extend_from_slice(&self.current.id);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    pub(crate) fn open(&self, aad: &str, sealed: &[u8]) -> Result<Vec<u8>, StoreError> {
        if sealed.len() < KEY_ID_LEN + NONCE_LEN {
            return Err(StoreError::Sealed);
        }
        let (id, rest) = sealed.split_at(KEY_ID_LEN);
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let key = std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id == id)
            .ok_or(StoreError::Sealed)?;
        key.cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: body,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| StoreError::Sealed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_opens_under_its_key_and_store_key_only() {
        let sealing = Sealing::new(b"first key of sixteen", &[]);
        let sealed = sealing.seal("sb:a:1", b"token");
        assert_eq!(sealing.open("sb:a:1", &sealed).expect("opens"), b"token");
        assert!(matches!(
            sealing.open("sb:a:2", &sealed),
            Err(StoreError::Sealed)
        ));
        let other = Sealing::new(b"another key of sixteen", &[]);
        assert!(matches!(
            other.open("sb:a:1", &sealed),
            Err(StoreError::Sealed)
        ));
        let mut altered = sealed.clone();
        let last = altered.len() - 1;
        altered[last] ^= 1;
        assert!(sealing.open("sb:a:1", &altered).is_err());
        assert!(sealing.open("sb:a:1", &sealed[..10]).is_err());
    }

    #[test]
    fn a_rotated_key_still_opens_what_it_sealed_and_no_longer_seals() {
        let before = Sealing::new(b"first key of sixteen", &[]);
        let sealed = before.seal("k", b"v");
        let after = Sealing::new(b"second key of sixteen", &[b"first key of sixteen"]);
        assert_eq!(after.open("k", &sealed).expect("previous key opens"), b"v");
        let resealed = after.seal("k", b"v");
        assert!(
            before.open("k", &resealed).is_err(),
            "sealed with the new key"
        );
        assert_ne!(sealed[..KEY_ID_LEN], resealed[..KEY_ID_LEN]);
    }
}
