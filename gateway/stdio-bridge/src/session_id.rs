//! Legacy session ids that say which replica holds the session: the holder's address and the
//! session's name there, sealed with ChaCha20-Poly1305 under a key every replica shares (a
//! Secret the operator makes per server). Any replica opens an id and either serves it or hands
//! the request to the holder, so no sticky load balancing is needed; an id that does not open
//! (tampered, or sealed under another key) is an unknown session. Sealed rather than signed:
//! pod addresses are no business of a client's, and the address a replica dials comes only
//! from an id a replica made. (The gateway seals its own tokens alike; the bridge keeps its
//! own small sealer so its binary does not link the gateway's core.)

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use sha2::{Digest, Sha256};

const NONCE_LEN: usize = 12;
const AAD: &[u8] = b"switchboard stdio-bridge session v1";
/// What a draining replica tells the others (the names of its sessions, ending): sealed under
/// its own associated data, so it never opens as a session id, nor one as it.
const ENDED_AAD: &[u8] = b"switchboard stdio-bridge ended v1";
/// Longer ids are not ours (an address and a 32-character name seal to about 110).
const MAX_ID_LEN: usize = 512;

pub struct Sealer {
    cipher: ChaCha20Poly1305,
}

impl Sealer {
    /// `secret`: the key every replica shares; `None`: a random one (sessions then live only
    /// on this replica).
    pub fn new(secret: Option<&[u8]>) -> Sealer {
        let key: [u8; 32] = match secret {
            Some(s) => Sha256::new()
                .chain_update(b"switchboard stdio-bridge key v1\0")
                .chain_update(s)
                .finalize()
                .into(),
            None => rand::random(),
        };
        Sealer {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
        }
    }

    /// The session id of session `name` held by the replica at `holder` (`host:port`).
    pub fn seal(&self, holder: &str, name: &str) -> String {
        URL_SAFE_NO_PAD.encode(self.seal_bytes(AAD, format!("{holder}\n{name}").as_bytes()))
    }

    /// `(holder, name)` of an id this key sealed.
    pub fn open(&self, id: &str) -> Option<(String, String)> {
        if id.len() > MAX_ID_LEN {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(id.trim()).ok()?;
        let text = String::from_utf8(self.open_bytes(AAD, &raw)?).ok()?;
        let (holder, name) = text.split_once('\n')?;
        Some((holder.to_string(), name.to_string()))
    }

    /// The names of sessions that end, as one replica tells the others.
    pub(crate) fn seal_ended(&self, names: &[String]) -> Vec<u8> {
        self.seal_bytes(ENDED_AAD, names.join("\n").as_bytes())
    }

    /// The names [`Sealer::seal_ended`] sealed under this key.
    pub(crate) fn open_ended(&self, sealed: &[u8]) -> Option<Vec<String>> {
        let text = String::from_utf8(self.open_bytes(ENDED_AAD, sealed)?).ok()?;
        Some(text.lines().map(str::to_string).collect())
    }

    fn seal_bytes(&self, aad: &[u8], msg: &[u8]) -> Vec<u8> {
        let nonce: [u8; NONCE_LEN] = rand::random();
        // Encrypting a buffer with a valid key cannot fail.
        let sealed = self
            .cipher
            .encrypt(Nonce::from_slice(&nonce), Payload { msg, aad })
            .unwrap_or_default();
        let mut raw = nonce.to_vec();
        raw.extend_from_slice(&sealed);
        raw
    }

    fn open_bytes(&self, aad: &[u8], raw: &[u8]) -> Option<Vec<u8>> {
        if raw.len() <= NONCE_LEN {
            return None;
        }
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        self.cipher
            .decrypt(Nonce::from_slice(nonce), Payload { msg: sealed, aad })
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_opens_on_every_replica_with_the_key_and_nowhere_else() {
        let a = Sealer::new(Some(b"shared"));
        let b = Sealer::new(Some(b"shared"));
        let other = Sealer::new(Some(b"another"));
        let id = a.seal("10.0.0.7:8080", "s1");
        assert_eq!(b.open(&id), Some(("10.0.0.7:8080".into(), "s1".into())));
        assert_eq!(other.open(&id), None);
        assert!(
            !id.contains("10.0.0.7"),
            "the holder's address is not readable in the id"
        );
        // Tampered: one character changed.
        let mut bytes = id.into_bytes();
        bytes[20] = if bytes[20] == b'A' { b'B' } else { b'A' };
        assert_eq!(a.open(&String::from_utf8(bytes).unwrap()), None);
        assert_eq!(a.open("not-an-id"), None);
        assert_eq!(a.open(&"A".repeat(600)), None);
    }

    #[test]
    fn without_a_key_ids_open_only_where_they_were_made() {
        let a = Sealer::new(None);
        let b = Sealer::new(None);
        let id = a.seal("h:1", "n");
        assert!(a.open(&id).is_some());
        assert_eq!(b.open(&id), None);
    }

    #[test]
    fn an_ended_note_opens_only_as_one() {
        let a = Sealer::new(Some(b"shared"));
        let names = vec!["ab".repeat(16), "cd".repeat(16)];
        let note = a.seal_ended(&names);
        assert_eq!(Sealer::new(Some(b"shared")).open_ended(&note), Some(names));
        assert_eq!(Sealer::new(Some(b"another")).open_ended(&note), None);
        // A session id is no note, a note no session id.
        let id = a.seal("h:1", "n");
        assert_eq!(a.open_ended(&URL_SAFE_NO_PAD.decode(&id).unwrap()), None);
        assert_eq!(a.open(&URL_SAFE_NO_PAD.encode(&note)), None);
    }
}
