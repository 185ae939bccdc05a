//! Legacy-era MCP sessions live in the `Mcp-Session-Id` itself, sealed with a key from the
//! snapshot, so any replica that holds the same snapshot serves any session (no replica keeps
//! a request-critical state of its own; see docs/architecture.md, "Sealing"). The sealed id is
//! small: 12-byte nonce + 18-byte payload + 16-byte tag, in unpadded base64url: 62 characters.
//!
//! The same key seals other small tokens the gateway hands to clients and must read back on any
//! replica (the ids of relayed server-to-client requests); each kind is sealed under its own
//! associated data, so a token of one kind never opens as another.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use sha2::{Digest, Sha256};

use crate::memo::TextMemo;

/// What a session id carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// First 8 bytes of the opening key's digest: a session only continues with that key.
    pub key_tag: [u8; 8],
    /// Index into [`switchboard_protocol::LEGACY_VERSIONS`] of the negotiated protocol version.
    pub version_index: u8,
    /// Unix seconds after which the session is refused.
    pub expires_at: u64,
    /// The client's capabilities from `initialize` ([`switchboard_protocol::capabilities`] bits).
    pub capabilities: u8,
    /// Unique per `initialize` (from the nonce): names the upstream sessions opened for it.
    pub tag: u64,
}

const PAYLOAD_LEN: usize = 8 + 1 + 8 + 1;
const NONCE_LEN: usize = 12;
/// Longest token accepted for opening (a larger one is refused before any decoding).
const MAX_TOKEN_LEN: usize = 1024;

/// What a sealed token is; sealed as associated data so kinds never mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// An `Mcp-Session-Id`.
    Session,
    /// The id of a server-to-client request relayed to a client: routes the client's reply.
    ReplyRoute,
    /// An exchange held open by one replica (see the `exchange` module of switchboard-mcp).
    Exchange,
    /// A client's message handed from one replica to another, headers included: only a
    /// replica can read it (the address it goes to is a pod IP that may have changed hands).
    Handoff,
    /// What a model's gateway tools did in one turn, carried in an id the client echoes back
    /// (see the `carry` module of switchboard-llm).
    Carry,
}

impl TokenKind {
    fn aad(self) -> &'static [u8] {
        match self {
            // Session ids were sealed without associated data before other kinds existed.
            TokenKind::Session => b"",
            TokenKind::ReplyRoute => b"switchboard reply route v1",
            TokenKind::Exchange => b"switchboard exchange v1",
            TokenKind::Handoff => b"switchboard handoff v1",
            TokenKind::Carry => b"switchboard carry v1",
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum UnsealError {
    /// Not ours, tampered with, sealed under another key, or expired: the client re-initializes.
    Invalid,
    /// Valid, but opened with another gateway key.
    WrongKey,
}

pub struct SessionSealer {
    cipher: ChaCha20Poly1305,
    ttl: Duration,
    /// Sessions opened, by their id: a legacy client presents its id on every call, and
    /// opening it (base64, ChaCha20-Poly1305) costs about 3,700 instructions; the memo's lookup
    /// about 300. What opening checks against the call (expiry, the key) is checked on every
    /// call all the same.
    opened: TextMemo<Session>,
}

/// How many sessions a sealer's memo holds at most.
const OPENED_SESSIONS: usize = 16_384;

impl SessionSealer {
    /// `secret` is `gateway.sessionKey`. Without one, a random key made once per process:
    /// sessions (and everything else sealed with it) survive a reload of the config but not a
    /// restart, and no other replica opens them (the gateway warns about it).
    pub fn new(secret: Option<&str>, ttl: Duration) -> SessionSealer {
        static PROCESS_KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
        let key_bytes: [u8; 32] = match secret {
            Some(s) => Sha256::new()
                .chain_update(b"switchboard session key v1\0")
                .chain_update(s.as_bytes())
                .finalize()
                .into(),
            None => *PROCESS_KEY.get_or_init(rand::random),
        };
        SessionSealer {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key_bytes)),
            ttl,
            opened: TextMemo::new(OPENED_SESSIONS),
        }
    }

    /// A new session id, and the tag [`SessionSealer::unseal`] will read back from it.
    pub fn seal(
        &self,
        key_digest: &[u8; 32],
        version_index: u8,
        capabilities: u8,
        now: SystemTime,
    ) -> (String, u64) {
        let mut payload = [0u8; PAYLOAD_LEN];
        payload[..8].copy_from_slice(&key_digest[..8]);
        payload[8] = version_index;
        let expires_at = unix_secs(now) + self.ttl.as_secs();
        payload[9..17].copy_from_slice(&expires_at.to_be_bytes());
        payload[17] = capabilities;
        let sealed = self.seal_bytes(TokenKind::Session, &payload);
        (URL_SAFE_NO_PAD.encode(&sealed), session_tag(&sealed))
    }

    /// Seals `payload` as a token of `kind` (nonce, ciphertext and tag in base64url).
    pub fn seal_token(&self, kind: TokenKind, payload: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(self.seal_bytes(kind, payload))
    }

    /// Opens a token of `kind`: its nonce and payload, or `None` if it is not a genuine one.
    pub fn open_token(&self, kind: TokenKind, token: &str) -> Option<([u8; NONCE_LEN], Vec<u8>)> {
        if token.len() > MAX_TOKEN_LEN {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(token).ok()?;
        let payload = self.open_bytes(kind, &raw)?;
        Some((raw[..NONCE_LEN].try_into().ok()?, payload))
    }

    /// Seals `payload` of any size: nonce, then ciphertext and tag, as bytes.
    pub fn seal_bytes(&self, kind: TokenKind, payload: &[u8]) -> Vec<u8> {
        let nonce: [u8; NONCE_LEN] = rand::random();
        // Encrypting a buffer with a valid key cannot fail.
        let sealed = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: payload,
                    aad: kind.aad(),
                },
            )
            .unwrap_or_default();
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    /// Opens what [`SessionSealer::seal_bytes`] sealed as `kind`.
    pub fn open_bytes(&self, kind: TokenKind, sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() <= NONCE_LEN {
            return None;
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
        self.cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: kind.aad(),
                },
            )
            .ok()
    }

    pub fn unseal(
        &self,
        id: &str,
        key_digest: &[u8; 32],
        now: SystemTime,
    ) -> Result<Session, UnsealError> {
        if id.len() > 128 {
            return Err(UnsealError::Invalid);
        }
        let session = self.opened.found_or_check(id, || self.open(id))?;
        if unix_secs(now) >= session.expires_at {
            return Err(UnsealError::Invalid);
        }
        if session.key_tag != key_digest[..8] {
            return Err(UnsealError::WrongKey);
        }
        Ok(session)
    }

    /// The session a sealed id holds, if the sealer sealed it (before checking it is still
    /// good for the call).
    fn open(&self, id: &str) -> Result<Session, UnsealError> {
        let (nonce, payload) = self
            .open_token(TokenKind::Session, id)
            .ok_or(UnsealError::Invalid)?;
        if payload.len() != PAYLOAD_LEN {
            return Err(UnsealError::Invalid);
        }
        let mut expires = [0u8; 8];
        expires.copy_from_slice(&payload[9..17]);
        let session = Session {
            key_tag: payload[..8].try_into().map_err(|_| UnsealError::Invalid)?,
            version_index: payload[8],
            expires_at: u64::from_be_bytes(expires),
            capabilities: payload[17],
            tag: session_tag(&nonce),
        };
        Ok(session)
    }
}

/// A session's tag: the first 8 bytes of its nonce (random, so unique per `initialize`).
fn session_tag(nonce: &[u8]) -> u64 {
    let mut tag = [0u8; 8];
    tag.copy_from_slice(&nonce[..8]);
    u64::from_le_bytes(tag)
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: [u8; 32] = [1; 32];
    const BOB: [u8; 32] = [2; 32];

    fn sealer() -> SessionSealer {
        SessionSealer::new(Some("a shared session key"), Duration::from_secs(60))
    }

    #[test]
    fn another_replica_with_the_same_key_opens_it() {
        let now = SystemTime::now();
        let (id, tag) = sealer().seal(&ALICE, 2, 5, now);
        assert!(id.len() < 200, "{} bytes", id.len());
        let session = sealer().unseal(&id, &ALICE, now).unwrap();
        assert_eq!(session.version_index, 2);
        assert_eq!(session.capabilities, 5);
        assert_eq!(session.tag, tag);
    }

    #[test]
    fn tokens_of_one_kind_never_open_as_another() {
        let token = sealer().seal_token(TokenKind::ReplyRoute, b"route");
        assert_eq!(
            sealer()
                .open_token(TokenKind::ReplyRoute, &token)
                .unwrap()
                .1,
            b"route"
        );
        assert!(sealer().open_token(TokenKind::Session, &token).is_none());
        let (session, _) = sealer().seal(&ALICE, 0, 0, SystemTime::now());
        assert!(
            sealer()
                .open_token(TokenKind::ReplyRoute, &session)
                .is_none()
        );
    }

    #[test]
    fn without_a_session_key_a_rebuilt_sealer_still_opens_this_processs_sessions() {
        // A reload builds a new table and sealer: without `sessionKey` they must keep the key.
        let now = SystemTime::now();
        let ttl = Duration::from_secs(60);
        let (id, _) = SessionSealer::new(None, ttl).seal(&ALICE, 1, 0, now);
        assert!(
            SessionSealer::new(None, ttl)
                .unseal(&id, &ALICE, now)
                .is_ok()
        );
        // Control: a configured key is another key.
        assert!(sealer().unseal(&id, &ALICE, now).is_err());
    }

    #[test]
    fn a_session_opened_once_is_found_again_and_still_checked_against_each_call() {
        let now = SystemTime::now();
        let sealer = sealer();
        let (id, tag) = sealer.seal(&ALICE, 1, 3, now);
        let first = sealer.unseal(&id, &ALICE, now);
        assert_eq!(first.as_ref().map(|s| s.tag), Ok(tag));
        assert_eq!(sealer.opened.len(), 1);
        // From the memo now: the same session, and the call's own checks still made.
        assert_eq!(sealer.unseal(&id, &ALICE, now), first);
        assert_eq!(sealer.unseal(&id, &BOB, now), Err(UnsealError::WrongKey));
        let later = now + Duration::from_secs(61);
        assert_eq!(sealer.unseal(&id, &ALICE, later), Err(UnsealError::Invalid));
        // What fails to open is never kept.
        assert_eq!(
            sealer.unseal("not sealed", &ALICE, now),
            Err(UnsealError::Invalid)
        );
        assert_eq!(sealer.opened.len(), 1);
        // The memo is what answers a session opened before: an entry put there by hand is
        // found without opening anything.
        let planted = Session {
            tag: 7,
            ..first
                .as_ref()
                .map_or_else(|e| panic!("{e:?}"), Session::clone)
        };
        sealer.opened.plant("planted", planted.clone());
        assert_eq!(sealer.unseal("planted", &ALICE, now), Ok(planted));
    }

    #[test]
    fn another_gateway_key_is_refused() {
        let now = SystemTime::now();
        let (id, _) = sealer().seal(&ALICE, 0, 0, now);
        assert_eq!(sealer().unseal(&id, &BOB, now), Err(UnsealError::WrongKey));
    }

    #[test]
    fn tampered_foreign_and_expired_ids_are_invalid() {
        let now = SystemTime::now();
        let (id, _) = sealer().seal(&ALICE, 0, 0, now);
        let mut bytes = id.clone().into_bytes();
        bytes[20] = if bytes[20] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        assert_eq!(
            sealer().unseal(&tampered, &ALICE, now),
            Err(UnsealError::Invalid)
        );
        let other = SessionSealer::new(Some("another session key!!"), Duration::from_secs(60));
        assert_eq!(other.unseal(&id, &ALICE, now), Err(UnsealError::Invalid));
        let later = now + Duration::from_secs(61);
        assert_eq!(
            sealer().unseal(&id, &ALICE, later),
            Err(UnsealError::Invalid)
        );
        assert_eq!(
            sealer().unseal("not base64!", &ALICE, now),
            Err(UnsealError::Invalid)
        );
    }
}
