//! Gateway keys are stored and compared as hashes; operator and gateway hash the same way here.

use sha2::{Digest, Sha256};

const HASH_PREFIX: &str = "sha256:";

/// `sha256:<hex>` of a key: what the snapshot holds instead of the key.
pub fn hash_key(secret: &str) -> String {
    format!(
        "{HASH_PREFIX}{}",
        hex::encode(Sha256::digest(secret.as_bytes()))
    )
}

/// The raw 32 digest bytes of a key, for the gateway's lookup on each request.
pub fn key_digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Parses `sha256:<64 hex>` into digest bytes.
pub fn parse_hash(hash: &str) -> Option<[u8; 32]> {
    let hex_part = hash.strip_prefix(HASH_PREFIX)?;
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_part, &mut out).ok()?;
    Some(out)
}

/// A short, non-reversible label for a key: safe for logs, status and metrics.
pub fn fingerprint(digest: &[u8; 32]) -> String {
    hex::encode(&digest[..6])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_round_trips() {
        let h = hash_key("sk-test");
        assert!(h.starts_with("sha256:"));
        assert_eq!(parse_hash(&h), Some(key_digest("sk-test")));
        assert_eq!(parse_hash("sha256:zz"), None);
        assert_eq!(parse_hash("md5:00"), None);
    }
}
