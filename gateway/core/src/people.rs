//! People signed in with an identity provider (`identityProviders`, `keys[].people`): an
//! access token verified against its provider's signing keys, and the keys whose scope the
//! person acts with.
//!
//! Verification is offline, like ServiceAccount tokens: signature, issuer, audience, expiry and
//! not-before (with the provider's clock skew), algorithm, required claims. The signing keys
//! come from the provider (discovery, then its JWKS), fetched by the upstream plane into an
//! [`IdentityKeys`] store that outlives snapshots: a provider that is down does not take the
//! keys already fetched with it. A token signed with a key the store does not hold (a key the
//! provider has just published), or one that arrives before its provider's keys were ever
//! fetched, asks for a fetch and waits for it (one fetch serves every token waiting, and the
//! fetcher bounds how often tokens can ask), then is verified again: it is refused only when the
//! key is still unknown after that fetch.
//!
//! Precedence when several keys name a person (by subject or by a group): the person gets the
//! union of what those keys reach, and every one of their limits applies, so that being in a
//! second group never lifts the first group's budget. Subjects and groups are compared exactly.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use base64::Engine;
use jsonwebtoken::{Algorithm, Validation, decode, decode_header};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use switchboard_snapshot::{FieldError, IdentityProviderSpec, Snapshot, TlsMaterial};

use crate::broker::{AccessRecord, BrokerSealer, Record};
use crate::jwks::SigningKeys;
use crate::key::Key;
use crate::remembered_tokens::{RememberedTokens, unix_now};

/// A verified person.
#[derive(Clone, PartialEq, Eq)]
pub struct Person {
    /// The identity provider's id (`<namespace>/<name>`).
    pub provider: String,
    pub issuer: String,
    pub subject: String,
    pub groups: Vec<String>,
    /// The OAuth scopes their token was granted (its `scope`, or `scp`): what tools with
    /// `requiredScopes` ask for.
    pub scopes: Vec<String>,
    /// What sessions and exchanges opened by this person are bound to (never a key's digest:
    /// two people acting with one key do not share sessions).
    pub tag: [u8; 32],
    /// Signed in through the gateway (brokered mode): the provider's access token the gateway
    /// holds for them, the subject of a token exchange on their behalf.
    pub provider_token: Option<String>,
    /// Signed in through the gateway: when that login happened (unix milliseconds), which a
    /// sign-out after it ends (`sign_out.rs`).
    pub signed_in: Option<u64>,
}

impl Person {
    /// Signed in through the gateway with an identity assertion: nothing of the provider's is
    /// held for them (no exchange on their behalf), and their token is the gateway's own.
    pub fn holds_no_provider_token(&self) -> bool {
        self.signed_in.is_some() && self.provider_token.is_none()
    }
}

impl std::fmt::Debug for Person {
    /// Never the provider's token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Person")
            .field("provider", &self.provider)
            .field("issuer", &self.issuer)
            .field("subject", &self.subject)
            .field("groups", &self.groups)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Display for Person {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.issuer, self.subject)
    }
}

/// A person and the keys that grant them their scope (none: the person is refused with 403).
#[derive(Debug, Clone)]
pub(crate) struct Signed {
    pub person: Arc<Person>,
    pub grants: Vec<Arc<Key>>,
}

/// Why a token was refused: a 401 with this reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Malformed,
    UnknownIssuer,
    /// The provider's keys were never fetched (the provider has been unreachable so far).
    KeysNotLoaded,
    UnknownSigningKey,
    AlgorithmNotAccepted,
    BadSignature,
    Expired,
    NotYetValid,
    WrongAudience,
    MissingSubject,
    RequiredClaim,
    /// A brokered token the gateway cannot open: not its own, tampered with, or expired.
    NotIssuedHere,
    /// A brokered token issued for another resource (another gateway's URL).
    OtherResource,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Malformed => "the access token is not a well-formed JWT",
            Refusal::UnknownIssuer => {
                "the access token's issuer is not an identity provider of this gateway"
            }
            Refusal::KeysNotLoaded => {
                "the identity provider's signing keys could not be fetched yet"
            }
            Refusal::UnknownSigningKey => {
                "the access token is signed with a key its identity provider does not publish"
            }
            Refusal::AlgorithmNotAccepted => {
                "the access token's signature algorithm is not accepted for its identity provider"
            }
            Refusal::BadSignature => "the access token's signature does not verify",
            Refusal::Expired => "the access token has expired",
            Refusal::NotYetValid => "the access token is not valid yet",
            Refusal::WrongAudience => "the access token is not for this gateway (its audience)",
            Refusal::MissingSubject => "the access token names no subject",
            Refusal::RequiredClaim => {
                "the access token lacks a claim its identity provider requires"
            }
            Refusal::NotIssuedHere => {
                "the access token was not issued by this gateway, or it has expired"
            }
            Refusal::OtherResource => "the access token was issued for another resource",
        }
    }

    /// A refusal a fetch of the provider's keys may turn around: the keys never came yet, or
    /// the token names a key they do not have (the provider may have just published it).
    fn awaits_keys(self) -> bool {
        matches!(self, Refusal::KeysNotLoaded | Refusal::UnknownSigningKey)
    }

    /// The outcome label of the sign-in metric.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::UnknownIssuer => "unknown_issuer",
            Refusal::KeysNotLoaded => "keys_not_loaded",
            Refusal::UnknownSigningKey => "unknown_signing_key",
            Refusal::AlgorithmNotAccepted => "algorithm_not_accepted",
            Refusal::BadSignature => "bad_signature",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not_yet_valid",
            Refusal::WrongAudience => "wrong_audience",
            Refusal::MissingSubject => "missing_subject",
            Refusal::RequiredClaim => "required_claim",
            Refusal::NotIssuedHere => "not_issued_here",
            Refusal::OtherResource => "other_resource",
        }
    }
}

/// The `typ` of an identity assertion (draft-ietf-oauth-identity-assertion-authz-grant).
const ASSERTION_TYPE: &str = "oauth-id-jag+jwt";

/// The longest an identity assertion may still live when presented: they are minutes long,
/// and their `jti` is remembered (the shared store) until they expire.
const MAX_ASSERTION_LIFE: u64 = 3600;

/// A verified identity assertion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assertion {
    /// The person, by the signer's claims mapping.
    pub subject: String,
    pub groups: Vec<String>,
    /// The client at the gateway it was issued to (the one that must present it).
    pub client_id: String,
    /// Its id: it is taken once.
    pub jti: String,
    /// Its signer's issuer.
    pub issuer: String,
    pub exp: u64,
    /// When the person signed in at the provider (`auth_time`, else `iat`), unix seconds.
    pub signed_in: u64,
    /// The resources it is for (`resource`: none when it names none).
    pub resources: Vec<String>,
    /// The scopes it allows (`scope`), when it limits them.
    pub scope: Option<Vec<String>>,
}

/// Why an identity assertion was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssertionRefusal {
    /// Its `typ` is not `oauth-id-jag+jwt` (an ID token or an access token is not a grant).
    NotAnAssertion,
    /// As a token: its signature, issuer, audience, lifetime or subject.
    Token(Refusal),
    /// A claim the grant needs is missing.
    Missing(&'static str),
    /// It lives longer than an hour from now (`MAX_ASSERTION_LIFE`).
    TooLong,
}

/// A provider's authorization and token endpoints, from its discovery document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginEndpoints {
    pub authorization: String,
    pub token: String,
}

/// The longest a token waits for its provider's keys to be fetched (an unknown key id, or keys
/// never fetched yet) before it is refused: longer than the fetcher takes to start a fetch a
/// token asked for (`MIN_INTERVAL` after the last such fetch, in `identity_keys.rs`) and to
/// finish it (its timeout), so that the wait ends with the fetch, not before it.
pub const KEY_WAIT: Duration = Duration::from_secs(25);

/// The signing keys of every identity provider, fetched by the upstream plane, kept across
/// snapshots and through a provider's outage.
#[derive(Default)]
pub struct IdentityKeys {
    keys: RwLock<HashMap<String, Arc<SigningKeys>>>,
    /// Where people log in at each provider (its discovery document), for brokered mode.
    login: RwLock<HashMap<String, Arc<LoginEndpoints>>>,
    /// Providers a token asked to be fetched again (an unknown key id).
    wanted: Mutex<HashSet<String>>,
    /// Wakes the fetcher when something is wanted.
    pub wake: tokio::sync::Notify,
    /// Fetches finished per provider (keys found or not), counted: a token waiting for a fetch
    /// waits for its provider's count to pass the one it saw.
    rounds: Mutex<HashMap<String, u64>>,
    /// Wakes the tokens waiting for a fetch when one finishes.
    fetched: tokio::sync::Notify,
}

impl IdentityKeys {
    pub fn get(&self, provider: &str) -> Option<Arc<SigningKeys>> {
        self.keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(provider)
            .cloned()
    }

    pub fn set(&self, provider: &str, keys: SigningKeys) {
        self.keys
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(provider.to_string(), Arc::new(keys));
    }

    /// Forgets the keys of providers no snapshot names any more.
    pub fn retain(&self, live: &HashSet<String>) {
        self.keys
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|id, _| live.contains(id));
        self.login
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|id, _| live.contains(id));
    }

    pub fn login(&self, provider: &str) -> Option<Arc<LoginEndpoints>> {
        self.login
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(provider)
            .cloned()
    }

    pub fn set_login(&self, provider: &str, endpoints: LoginEndpoints) {
        self.login
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(provider.to_string(), Arc::new(endpoints));
    }

    /// Asks the fetcher to fetch a provider's keys again.
    pub fn want(&self, provider: &str) {
        let new = self
            .wanted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(provider.to_string());
        if new {
            self.wake.notify_one();
        }
    }

    /// What was asked for since the last call.
    pub fn take_wanted(&self) -> HashSet<String> {
        std::mem::take(&mut *self.wanted.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The fetcher finished a fetch of `provider`'s keys (whether it found keys or not):
    /// the tokens waiting for one are verified again.
    pub fn fetch_done(&self, provider: &str) {
        *self
            .rounds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(provider.to_string())
            .or_default() += 1;
        self.fetched.notify_waiters();
    }

    /// How many fetches of each of `providers` have finished.
    fn rounds(&self, providers: &[&str]) -> Vec<u64> {
        let rounds = self.rounds.lock().unwrap_or_else(|p| p.into_inner());
        providers
            .iter()
            .map(|id| rounds.get(*id).copied().unwrap_or(0))
            .collect()
    }

    /// Asks for a fetch of each of `providers` and waits until each has finished a fetch
    /// since their counts were `seen` (one fetch serves every waiting token), or `within`.
    async fn refetched(&self, providers: &[&str], seen: &[u64], within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        for id in providers {
            self.want(id);
        }
        loop {
            // Registered before the counts are read: a fetch that finishes in between still
            // wakes this wait.
            let finished = self.fetched.notified();
            let now = self.rounds(providers);
            if now.iter().zip(seen).all(|(now, seen)| now > seen) {
                return;
            }
            if tokio::time::timeout_at(deadline, finished).await.is_err() {
                return;
            }
        }
    }
}

/// The snapshot's identity providers with their grants: part of the routing table.
pub struct People {
    providers: Vec<Provider>,
    /// Tokens verified lately, with their person (`remembered_tokens.rs` says why and how).
    verified: RememberedTokens<Arc<Person>>,
}

impl std::fmt::Debug for People {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<_> = self.providers.iter().map(|p| &p.id).collect();
        f.debug_struct("People").field("providers", &ids).finish()
    }
}

struct Provider {
    id: String,
    spec: IdentityProviderSpec,
    /// `tls`, parsed: discovery and the JWKS are fetched with it.
    tls: Option<Arc<TlsMaterial>>,
    algorithms: Vec<Algorithm>,
    by_subject: HashMap<String, Vec<Arc<Key>>>,
    by_group: HashMap<String, Vec<Arc<Key>>>,
}

impl People {
    /// The snapshot's providers, each with the keys that bind its people (`keys` by digest,
    /// as the table holds them). `None` when the snapshot has no identity provider; an error
    /// names a provider's unusable TLS settings.
    pub fn build(
        snapshot: &Snapshot,
        keys: &foldhash::HashMap<[u8; 32], Arc<Key>>,
    ) -> Result<Option<People>, Vec<FieldError>> {
        if snapshot.identity_providers.is_empty() {
            return Ok(None);
        }
        let mut errors = Vec::new();
        let mut providers: Vec<Provider> = snapshot
            .identity_providers
            .iter()
            .enumerate()
            .map(|(i, spec)| Provider {
                id: spec.id(),
                tls: spec.tls.as_ref().and_then(|tls| {
                    TlsMaterial::parse(tls, &format!("identityProviders[{i}].tls"))
                        .map_err(|e| errors.extend(e))
                        .ok()
                        .map(Arc::new)
                }),
                algorithms: spec
                    .algorithms
                    .iter()
                    .filter_map(|a| a.parse::<Algorithm>().ok())
                    .collect(),
                spec: spec.clone(),
                by_subject: HashMap::new(),
                by_group: HashMap::new(),
            })
            .collect();
        for spec in &snapshot.keys {
            let Some(key) = spec
                .hash
                .as_deref()
                .and_then(switchboard_snapshot::key_hash::parse_hash)
                .and_then(|digest| keys.get(&digest))
            else {
                continue;
            };
            for binding in &spec.people {
                let Some(provider) = providers.iter_mut().find(|p| {
                    p.spec.namespace == spec.namespace && p.spec.name == binding.provider
                }) else {
                    continue;
                };
                let bind = |by: &mut HashMap<String, Vec<Arc<Key>>>, names: &[String]| {
                    for name in names {
                        by.entry(name.clone()).or_default().push(key.clone());
                    }
                };
                bind(&mut provider.by_subject, &binding.subjects);
                bind(&mut provider.by_group, &binding.groups);
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Some(People {
            providers,
            verified: RememberedTokens::default(),
        }))
    }

    /// The issuer a token names (unverified), when it is one of these providers': only then is
    /// it a person's token rather than a ServiceAccount's or a key.
    pub(crate) fn issuer_of(&self, token: &str) -> Option<String> {
        unverified_issuer(token).filter(|iss| self.providers.iter().any(|p| p.spec.issuer == *iss))
    }

    /// Each provider: its id, its settings and its parsed TLS material.
    pub fn providers(
        &self,
    ) -> impl Iterator<Item = (&str, &IdentityProviderSpec, Option<&Arc<TlsMaterial>>)> {
        self.providers
            .iter()
            .map(|p| (p.id.as_str(), &p.spec, p.tls.as_ref()))
    }

    /// The person a token verified lately proves, with the keys that grant them scope: the
    /// path of every call but a token's first (no signature check, no parsing).
    pub(crate) fn remembered(&self, token: &str) -> Option<Signed> {
        let person = self.verified.get(token)?;
        let grants = self.grants(&person);
        Some(Signed { person, grants })
    }

    /// The person a token `issuer_of` named `issuer` proves, and the keys that grant them
    /// scope, or why not; the token is remembered. (Callers ask `remembered` first.)
    ///
    /// A token its provider's keys cannot verify yet (an unknown key id, or no keys fetched so
    /// far) waits for a fetch of them, at most [`KEY_WAIT`], and is verified again with what
    /// that fetch found: a key the provider has just published works on its first use.
    pub(crate) async fn verify(
        &self,
        keys: &IdentityKeys,
        token: &str,
        issuer: &str,
    ) -> Result<Signed, Refusal> {
        let providers: Vec<&str> = self
            .providers
            .iter()
            .filter(|p| p.spec.issuer == issuer)
            .map(|p| p.id.as_str())
            .collect();
        // Counted before the first try, so a fetch that finishes during it is not waited for
        // again.
        let seen = keys.rounds(&providers);
        let verified = match self.verify_signed(keys, token, issuer, unix_now()) {
            Err(refusal) if refusal.awaits_keys() && !providers.is_empty() => {
                keys.refetched(&providers, &seen, KEY_WAIT).await;
                self.verify_signed(keys, token, issuer, unix_now())
            }
            other => other,
        };
        let (person, exp) = verified?;
        let person = Arc::new(person);
        self.verified.insert(token, person.clone(), exp);
        let grants = self.grants(&person);
        Ok(Signed { person, grants })
    }

    /// The brokered provider (at most one): the gateway is the authorization server for it.
    pub fn brokered(&self) -> Option<&IdentityProviderSpec> {
        self.providers
            .iter()
            .map(|p| &p.spec)
            .find(|spec| spec.brokered.is_some())
    }

    /// The brokered provider's id (`<namespace>/<name>`), as identities carry it.
    pub fn brokered_id(&self) -> Option<&str> {
        self.providers
            .iter()
            .find(|p| p.spec.brokered.is_some())
            .map(|p| p.id.as_str())
    }

    /// Who a token of `provider` (by id) names, and until when it holds: the brokered login
    /// reads the token the provider gave the gateway, verified by that provider alone as any
    /// person's token is (a key it has just published waits for a fetch, as in `Self::verify`).
    pub async fn identify(
        &self,
        keys: &IdentityKeys,
        provider: &str,
        token: &str,
    ) -> Result<(Person, u64), Refusal> {
        let header = decode_header(token).map_err(|_| Refusal::Malformed)?;
        let found = self
            .providers
            .iter()
            .find(|p| p.id == provider)
            .ok_or(Refusal::UnknownIssuer)?;
        let seen = keys.rounds(&[provider]);
        match found.verify(keys, token, &header, unix_now()) {
            Err(refusal) if refusal.awaits_keys() => {
                keys.refetched(&[provider], &seen, KEY_WAIT).await;
                found.verify(keys, token, &header, unix_now())
            }
            verified => verified,
        }
    }

    /// What an identity assertion (an ID-JAG: draft-ietf-oauth-identity-assertion-authz-grant,
    /// the MCP enterprise-managed authorization extension) says, verified as provider
    /// `signer`'s (by id): its `typ`, its signature with that provider's keys and algorithms,
    /// its issuer, its audience (`audience`: the gateway's issuer), its lifetime, and the claims
    /// the grant needs. The person is read with the signer's claims mapping.
    pub async fn verify_assertion(
        &self,
        keys: &IdentityKeys,
        signer: &str,
        token: &str,
        audience: &str,
    ) -> Result<Assertion, AssertionRefusal> {
        let header =
            decode_header(token).map_err(|_| AssertionRefusal::Token(Refusal::Malformed))?;
        // RFC 7515 section 4.1.9: a media type, its `application/` prefix optional.
        let typ = header
            .typ
            .as_deref()
            .unwrap_or_default()
            .to_ascii_lowercase();
        if typ.strip_prefix("application/").unwrap_or(&typ) != ASSERTION_TYPE {
            return Err(AssertionRefusal::NotAnAssertion);
        }
        let found = self
            .providers
            .iter()
            .find(|p| p.id == signer)
            .ok_or(AssertionRefusal::Token(Refusal::UnknownIssuer))?;
        let seen = keys.rounds(&[signer]);
        match found.verify_assertion(keys, token, &header, audience, unix_now()) {
            Err(AssertionRefusal::Token(refusal)) if refusal.awaits_keys() => {
                keys.refetched(&[signer], &seen, KEY_WAIT).await;
                found.verify_assertion(keys, token, &header, audience, unix_now())
            }
            verified => verified,
        }
    }

    /// The person an access token the gateway issued proves (brokered mode), and the keys that
    /// grant them scope: opened (never parsed as a JWT), its resource under `base`, and
    /// remembered like a verified token.
    pub(crate) fn verify_brokered(
        &self,
        sealer: &BrokerSealer,
        token: &str,
        base: &str,
    ) -> Result<Signed, Refusal> {
        let record: AccessRecord = sealer
            .open(Record::Access, token, std::time::SystemTime::now())
            .ok_or(Refusal::NotIssuedHere)?;
        let under_base = record
            .audience
            .strip_prefix(base)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
        if !under_base {
            return Err(Refusal::OtherResource);
        }
        let provider = self
            .providers
            .iter()
            .find(|p| p.id == record.identity.provider && p.spec.brokered.is_some())
            .ok_or(Refusal::UnknownIssuer)?;
        let person = Arc::new(Person {
            signed_in: Some(record.signed_in),
            ..provider.person_named(
                record.identity.subject,
                record.identity.groups,
                record.scope.as_deref().map(scope_list).unwrap_or_default(),
                Some(record.provider_access).filter(|t| !t.is_empty()),
            )
        });
        self.verified.insert(token, person.clone(), record.exp);
        let grants = self.grants(&person);
        Ok(Signed { person, grants })
    }

    /// Every key that names the person or one of their groups, each once, in key order.
    fn grants(&self, person: &Person) -> Vec<Arc<Key>> {
        let Some(provider) = self.providers.iter().find(|p| p.id == person.provider) else {
            return Vec::new();
        };
        let mut grants: Vec<Arc<Key>> = Vec::new();
        let by_groups = person
            .groups
            .iter()
            .filter_map(|g| provider.by_group.get(g))
            .flatten();
        for key in provider
            .by_subject
            .get(&person.subject)
            .into_iter()
            .flatten()
            .chain(by_groups)
        {
            if !grants.iter().any(|k| Arc::ptr_eq(k, key)) {
                grants.push(key.clone());
            }
        }
        grants.sort_by(|a, b| a.id.cmp(&b.id));
        grants
    }

    fn verify_signed(
        &self,
        store: &IdentityKeys,
        token: &str,
        issuer: &str,
        now: u64,
    ) -> Result<(Person, u64), Refusal> {
        let header = decode_header(token).map_err(|_| Refusal::Malformed)?;
        let mut outcome = Err(Refusal::UnknownIssuer);
        // Several providers may share an issuer (another namespace, other audiences): the
        // first that accepts the token decides.
        for provider in self.providers.iter().filter(|p| p.spec.issuer == issuer) {
            match provider.verify(store, token, &header, now) {
                Ok(verified) => return Ok(verified),
                Err(refusal) => outcome = Err(refusal),
            }
        }
        outcome
    }
}

impl Provider {
    fn verify_assertion(
        &self,
        store: &IdentityKeys,
        token: &str,
        header: &jsonwebtoken::Header,
        audience: &str,
        now: u64,
    ) -> Result<Assertion, AssertionRefusal> {
        let refused = AssertionRefusal::Token;
        if !self.algorithms.contains(&header.alg) {
            return Err(refused(Refusal::AlgorithmNotAccepted));
        }
        let keys = store.get(&self.id).ok_or(refused(Refusal::KeysNotLoaded))?;
        let mut outcome = Err(refused(Refusal::UnknownSigningKey));
        for (alg, key) in keys.candidates(header) {
            let mut validation = Validation::new(alg);
            validation.set_issuer(&[&self.spec.issuer]);
            validation.set_audience(&[audience]);
            validation.leeway = self.spec.clock_skew.as_secs();
            validation.validate_nbf = true;
            validation.set_required_spec_claims(&["exp", "iss", "aud"]);
            match decode::<Value>(token, key, &validation) {
                Ok(data) => return self.assertion(&data.claims, now),
                Err(e) => {
                    outcome = Err(refused(refusal(e.kind())));
                    if outcome != Err(refused(Refusal::BadSignature)) {
                        return outcome;
                    }
                }
            }
        }
        outcome
    }

    fn assertion(&self, claims: &Value, now: u64) -> Result<Assertion, AssertionRefusal> {
        let text = |name: &'static str| {
            claims
                .get(name)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .ok_or(AssertionRefusal::Missing(name))
        };
        // Required of every assertion, whichever claim names the person here.
        text("sub")?;
        let subject = claim(claims, &self.spec.claims.subject)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or(AssertionRefusal::Token(Refusal::MissingSubject))?
            .to_string();
        let issued_at = claims
            .get("iat")
            .and_then(Value::as_u64)
            .ok_or(AssertionRefusal::Missing("iat"))?;
        if issued_at > now + self.spec.clock_skew.as_secs() {
            return Err(AssertionRefusal::Token(Refusal::NotYetValid));
        }
        let exp = claims.get("exp").and_then(Value::as_u64).unwrap_or(now);
        if exp > now + MAX_ASSERTION_LIFE {
            return Err(AssertionRefusal::TooLong);
        }
        Ok(Assertion {
            subject,
            groups: strings_of(claim(claims, &self.spec.claims.groups), false),
            client_id: text("client_id")?,
            jti: text("jti")?,
            issuer: self.spec.issuer.clone(),
            exp,
            signed_in: claims
                .get("auth_time")
                .and_then(Value::as_u64)
                .unwrap_or(issued_at),
            // RFC 8707: one resource or several.
            resources: strings_of(claims.get("resource"), false),
            scope: claims
                .get("scope")
                .map(|scope| strings_of(Some(scope), true)),
        })
    }

    fn verify(
        &self,
        store: &IdentityKeys,
        token: &str,
        header: &jsonwebtoken::Header,
        now: u64,
    ) -> Result<(Person, u64), Refusal> {
        if !self.algorithms.contains(&header.alg) {
            return Err(Refusal::AlgorithmNotAccepted);
        }
        let Some(keys) = store.get(&self.id) else {
            return Err(Refusal::KeysNotLoaded);
        };
        let mut outcome = Err(Refusal::UnknownSigningKey);
        for (alg, key) in keys.candidates(header) {
            let mut validation = Validation::new(alg);
            validation.set_issuer(&[&self.spec.issuer]);
            validation.set_audience(&self.spec.audiences);
            validation.leeway = self.spec.clock_skew.as_secs();
            validation.validate_nbf = true;
            validation.set_required_spec_claims(&["exp", "iss", "aud"]);
            match decode::<Value>(token, key, &validation) {
                Ok(data) => return self.person(&data.claims, now),
                Err(e) => {
                    outcome = Err(refusal(e.kind()));
                    if outcome != Err(Refusal::BadSignature) {
                        // The signature verified: another key would not change the verdict.
                        return outcome;
                    }
                }
            }
        }
        outcome
    }

    fn person(&self, claims: &Value, now: u64) -> Result<(Person, u64), Refusal> {
        for (name, want) in &self.spec.required_claims {
            if claim(claims, name).and_then(Value::as_str) != Some(want.as_str()) {
                return Err(Refusal::RequiredClaim);
            }
        }
        let subject = claim(claims, &self.spec.claims.subject)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or(Refusal::MissingSubject)?
            .to_string();
        let groups = strings_of(claim(claims, &self.spec.claims.groups), false);
        let exp = claims.get("exp").and_then(Value::as_u64).unwrap_or(now);
        // `scope` (RFC 9068: one space-separated string), or `scp` (Entra ID and others: an
        // array, or a string like `scope`).
        let scopes = strings_of(claims.get("scope").or_else(|| claims.get("scp")), true);
        Ok((self.person_named(subject, groups, scopes, None), exp))
    }

    /// The person a provider's subject and groups make (the tag is the same however they
    /// signed in: directly or through the gateway).
    fn person_named(
        &self,
        subject: String,
        groups: Vec<String>,
        scopes: Vec<String>,
        provider_token: Option<String>,
    ) -> Person {
        let tag = person_tag(&self.id, &subject);
        Person {
            provider: self.id.clone(),
            issuer: self.spec.issuer.clone(),
            subject,
            groups,
            scopes,
            tag,
            provider_token,
            signed_in: None,
        }
    }
}

/// A claim's strings: an array of strings, or one string (a space-separated list when `split`);
/// anything else (missing) is none.
fn strings_of(claim: Option<&Value>, split: bool) -> Vec<String> {
    match claim {
        Some(Value::String(s)) if split => scope_list(s),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// A space-separated scope list (RFC 6749 section 3.3) as its scopes.
fn scope_list(scope: &str) -> Vec<String> {
    scope.split_ascii_whitespace().map(str::to_owned).collect()
}

/// What a person of provider `provider` (its id) is known by ([`Person::tag`]).
pub(crate) fn person_tag(provider: &str, subject: &str) -> [u8; 32] {
    Sha256::new()
        .chain_update(b"person\0")
        .chain_update(provider.as_bytes())
        .chain_update(b"\0")
        .chain_update(subject.as_bytes())
        .finalize()
        .into()
}

/// A claim by dotted path (`realm_access.roles`).
pub(crate) fn claim<'a>(claims: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(claims, |value, part| value.get(part))
}

/// The `iss` of a token, read before any verification only to pick the provider whose keys
/// verify it, or to name it in a refusal (nothing else of an unverified token is used).
pub(crate) fn unverified_issuer(token: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Iss {
        iss: String,
    }
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    serde_json::from_slice::<Iss>(&bytes).ok().map(|i| i.iss)
}

fn refusal(kind: &jsonwebtoken::errors::ErrorKind) -> Refusal {
    use jsonwebtoken::errors::ErrorKind;
    match kind {
        ErrorKind::ExpiredSignature => Refusal::Expired,
        ErrorKind::ImmatureSignature => Refusal::NotYetValid,
        ErrorKind::InvalidAudience => Refusal::WrongAudience,
        ErrorKind::InvalidIssuer => Refusal::UnknownIssuer,
        ErrorKind::InvalidSignature => Refusal::BadSignature,
        // A token without an audience is not for this gateway either.
        ErrorKind::MissingRequiredClaim(claim) if claim == "aud" => Refusal::WrongAudience,
        ErrorKind::MissingRequiredClaim(_) => Refusal::RequiredClaim,
        _ => Refusal::Malformed,
    }
}
