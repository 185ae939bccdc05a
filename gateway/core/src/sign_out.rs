//! Sign-out (issue 37): a person signed in through the gateway (brokered mode) ends every token
//! the gateway issued to their logins, in every client, before those tokens expire.
//!
//! The gateway's tokens are sealed records no replica keeps, so one cannot be deleted; what
//! can be kept is the moment the person signed out, in the shared store, under a hashed name
//! (`SIGNED_OUT`). Every gateway token carries when its login happened (`signed_in`, carried
//! from the code to every refresh); a token whose login is not after the person's last
//! sign-out is refused: access tokens when they are presented, refresh tokens when they are
//! spent. A new login after the sign-out works at once.
//!
//! Each replica reads a person's sign-out at most once per [`SEEN_WITHIN`] (a cache): a replica
//! that did not take the sign-out refuses that person's tokens within that time, the one that
//! took it at once. While the store does not answer, a token is accepted (what is not known
//! cannot refuse it): its own expiry (the access token's 5 minutes by default) bounds it, and a
//! refresh then asks the identity provider again. A person's token from the identity provider
//! itself (not the gateway's) is the provider's to end.

use std::time::Duration;

use switchboard_store::{Store, StoreError, StoreKey};

use crate::broker::SIGNED_OUT;
use crate::people::{Person, person_tag};

/// How long a replica may go on accepting a signed-out person's tokens after another replica
/// took the sign-out.
pub const SEEN_WITHIN: Duration = Duration::from_secs(5);
/// People whose sign-out (or its absence) a replica remembers at once.
const CAPACITY: u64 = 50_000;

/// The sign-outs a replica read lately, by person (their tag: no hashing on a call's path).
pub struct SignOuts {
    seen: moka::sync::Cache<[u8; 32], Option<u64>>,
}

impl Default for SignOuts {
    fn default() -> Self {
        SignOuts {
            seen: moka::sync::Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(SEEN_WITHIN)
                .build(),
        }
    }
}

impl SignOuts {
    fn record(provider: &str, subject: &str) -> StoreKey {
        StoreKey::new(SIGNED_OUT, &[provider.as_bytes(), subject.as_bytes()])
    }

    /// Records that the person signed out at `at` (unix milliseconds), kept for `ttl` (no
    /// token of an earlier login lives longer).
    pub async fn sign_out(
        &self,
        store: &Store,
        provider: &str,
        subject: &str,
        at: u64,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let record = Self::record(provider, subject);
        store.put(&record, at.to_string().as_bytes(), ttl).await?;
        self.seen.insert(person_tag(provider, subject), Some(at));
        Ok(())
    }

    /// When the person (`tag`, of `provider` and `subject`) last signed out (unix
    /// milliseconds), if they did.
    async fn signed_out_at(
        &self,
        store: &Store,
        tag: [u8; 32],
        provider: &str,
        subject: &str,
    ) -> Result<Option<u64>, StoreError> {
        if let Some(seen) = self.seen.get(&tag) {
            return Ok(seen);
        }
        let at = store
            .get(&Self::record(provider, subject))
            .await?
            .and_then(|v| std::str::from_utf8(&v).ok()?.parse::<u64>().ok());
        self.seen.insert(tag, at);
        Ok(at)
    }

    /// Whether a token of `person`'s login at `signed_in` has been ended by a sign-out (a
    /// call's path: the person's tag is at hand). While the store does not answer: no (the
    /// module's comment says why).
    pub async fn ended(&self, store: &Store, person: &Person, signed_in: u64) -> bool {
        let at = self
            .signed_out_at(store, person.tag, &person.provider, &person.subject)
            .await;
        Self::ends(at, signed_in)
    }

    /// [`Self::ended`] for a person known by provider and subject (a refresh).
    pub async fn login_ended(
        &self,
        store: &Store,
        provider: &str,
        subject: &str,
        signed_in: u64,
    ) -> bool {
        let tag = person_tag(provider, subject);
        Self::ends(
            self.signed_out_at(store, tag, provider, subject).await,
            signed_in,
        )
    }

    fn ends(signed_out: Result<Option<u64>, StoreError>, signed_in: u64) -> bool {
        match signed_out {
            Ok(Some(at)) => signed_in <= at,
            Ok(None) => false,
            Err(e) => {
                tracing::debug!(error = %e, "a sign-out could not be read: the token is accepted");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn person(provider: &str, subject: &str) -> Person {
        Person {
            scopes: Vec::new(),
            provider: provider.into(),
            issuer: "https://idp.example".into(),
            subject: subject.into(),
            groups: Vec::new(),
            tag: person_tag(provider, subject),
            provider_token: None,
            signed_in: None,
        }
    }

    #[tokio::test]
    async fn a_sign_out_ends_earlier_logins_only_and_other_replicas_see_it_within_the_cache() {
        let store = Store::in_memory();
        let (alice, bob, other) = (
            person("corp", "alice"),
            person("corp", "bob"),
            person("other", "alice"),
        );
        let here = SignOuts::default();
        let there = SignOuts::default();
        // `there` has read alice's (absent) sign-out before she signs out `here`.
        assert!(!there.ended(&store, &alice, 1_000).await);
        here.sign_out(&store, "corp", "alice", 2_000, Duration::from_secs(60))
            .await
            .unwrap();
        // Here at once: a login before (or at) the sign-out is ended, one after is not.
        assert!(here.ended(&store, &alice, 1_000).await);
        assert!(here.ended(&store, &alice, 2_000).await);
        assert!(!here.ended(&store, &alice, 2_001).await);
        // Not another person of the same provider, nor the same subject of another provider.
        assert!(!here.ended(&store, &bob, 1_000).await);
        assert!(!here.ended(&store, &other, 1_000).await);
        // There: still its cached answer, then the store's once the cache let go.
        assert!(!there.ended(&store, &alice, 1_000).await);
        there.seen.invalidate_all();
        assert!(there.ended(&store, &alice, 1_000).await);
        // The store holds the time only, under a hashed name.
        let record = SignOuts::record("corp", "alice");
        assert!(!record.as_str().contains("alice"));
        assert_eq!(
            store.get(&record).await.unwrap().as_deref(),
            Some(&b"2000"[..])
        );
    }
}
