//! Brokered sign-in, the pure part: the gateway as the OAuth authorization server MCP clients
//! see, for an identity provider that lacks what they need (issue 21, item 4). The HTTP
//! exchanges with the provider live in the upstream plane, the endpoints at the edge.
//!
//! **Stateless across replicas.** Nothing is stored: a client's registration, the state of a
//! login in progress, an authorization code, an access token and a refresh token are each a
//! record sealed (ChaCha20-Poly1305) under a key every replica derives from `gateway.sessionKey`,
//! so a login started on one replica completes on any other. The key rotates: each day (UTC)
//! has its own, derived from the session key and the day's number; a record is sealed under
//! today's key and opened under today's or yesterday's, so nothing lives longer than its own
//! expiry and never more than two days. Every record carries its own expiry and kind (the
//! associated data), so one kind never passes for another.
//!
//! **What revocation means.** An authorization code lives 60 s and is bound to the client's PKCE
//! verifier (only the client that started the login can redeem it), and is redeemed once: the
//! one thing a record cannot say is kept in the shared store (the token endpoint's
//! `spend_refresh` and `redeem`: codes and refresh tokens single use, a reuse revoking the grant). An access token lives
//! `accessTokenTtl` (5 min by default) and no longer than the provider's token inside it. A
//! refresh asks the provider again with its refresh token: a person disabled or logged out at
//! the provider, or moved out of a group, is refused or narrowed at the next refresh, so within
//! one access-token lifetime. Changing `gateway.sessionKey` revokes every record at once.
//!
//! Redirect URIs are checked as RFC 8252 and OAuth 2.1 want: https, or http on a loopback
//! address (any port, for native clients), or a private-use scheme (`cursor://...`); matched
//! exactly against the registration, the port of a loopback one aside. Nothing is redirected to
//! before the client and its redirect URI are known to match.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The store's record of a person's sign-out (`StoreKey::new(SIGNED_OUT, [provider, subject])`,
/// the time in unix milliseconds as text): every gateway token of a login before it is refused.
pub(crate) const SIGNED_OUT: &str = "signed-out";

/// What a sealed record is; also its associated data and the prefix of its text form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// A registered client (its `client_id`).
    Client,
    /// A login on its way through the provider (the `state` sent to it).
    Login,
    /// An authorization code.
    Code,
    /// An access token.
    Access,
    /// A refresh token.
    Refresh,
    /// A consent page's question, answered by the browser it was shown in.
    Consent,
    /// A connect URL's ticket (`accounts.rs`: a caller, a server).
    ConnectTicket,
    /// A browser's sign-in at the identity provider for a connect page.
    ConnectSignIn,
    /// A browser that proved which caller it is (its cookie).
    BrowserCaller,
    /// A connect page's answer.
    ConnectConsent,
    /// An authorization at a `userOAuth` upstream's server (its `state`).
    ConnectState,
}

impl Record {
    fn prefix(self) -> &'static str {
        match self {
            Record::Client => "sbc.",
            Record::Login => "sbl.",
            Record::Code => "sbk.",
            Record::Access => ACCESS_PREFIX,
            Record::Refresh => "sbr.",
            Record::Consent => "sbn.",
            Record::ConnectTicket => "sbx.",
            Record::ConnectSignIn => "sbw.",
            Record::BrowserCaller => "sbv.",
            Record::ConnectConsent => "sbq.",
            Record::ConnectState => "sbu.",
        }
    }

    fn aad(self) -> &'static [u8] {
        match self {
            Record::Client => b"switchboard broker client v1",
            Record::Login => b"switchboard broker login v1",
            Record::Code => b"switchboard broker code v1",
            Record::Access => b"switchboard broker access v1",
            Record::Refresh => b"switchboard broker refresh v1",
            Record::Consent => b"switchboard broker consent v1",
            Record::ConnectTicket => b"switchboard connect ticket v1",
            Record::ConnectSignIn => b"switchboard connect sign-in v1",
            Record::BrowserCaller => b"switchboard connect browser v1",
            Record::ConnectConsent => b"switchboard connect consent v1",
            Record::ConnectState => b"switchboard connect state v1",
        }
    }
}

/// How the gateway's access tokens begin (how a caller's credential is told to be one).
pub(crate) const ACCESS_PREFIX: &str = "sbt.";

/// The longest sealed record read (an access token carries the provider's token).
const MAX_RECORD: usize = 16 * 1024;
const NONCE_LEN: usize = 12;
const DAY: u64 = 86_400;

/// Seals and opens the broker's records under the day's key.
pub struct BrokerSealer {
    secret: [u8; 32],
}

impl BrokerSealer {
    /// `secret` is `gateway.sessionKey`; without one, a random key this process keeps for its
    /// life (across configuration changes) is used, and logins only complete on this process.
    pub fn new(secret: Option<&str>) -> BrokerSealer {
        static PROCESS_SECRET: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
        let secret = match secret {
            Some(s) => Sha256::new()
                .chain_update(b"switchboard broker key v1\0")
                .chain_update(s.as_bytes())
                .finalize()
                .into(),
            None => *PROCESS_SECRET.get_or_init(rand::random),
        };
        BrokerSealer { secret }
    }

    /// The key of `day`. Client registrations are sealed under one that does not rotate
    /// (`day` 0): MCP clients keep their `client_id` for good, and RFC 7591 has no way to
    /// tell them it lapsed.
    fn cipher(&self, day: u64) -> ChaCha20Poly1305 {
        let key: [u8; 32] = Sha256::new()
            .chain_update(self.secret)
            .chain_update(day.to_be_bytes())
            .finalize()
            .into();
        ChaCha20Poly1305::new(Key::from_slice(&key))
    }

    /// `record` sealed as `kind`, valid until `expires_at` (Unix seconds).
    pub fn seal<T: Serialize>(&self, kind: Record, record: &T, now: SystemTime) -> String {
        let day = if kind == Record::Client {
            0
        } else {
            unix(now) / DAY
        };
        let body = serde_json::to_vec(record).unwrap_or_default();
        let nonce: [u8; NONCE_LEN] = rand::random();
        let sealed = self
            .cipher(day)
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: &body,
                    aad: kind.aad(),
                },
            )
            .unwrap_or_default();
        let mut raw = Vec::with_capacity(1 + NONCE_LEN + sealed.len());
        raw.push((day % 256) as u8);
        raw.extend_from_slice(&nonce);
        raw.extend_from_slice(&sealed);
        format!("{}{}", kind.prefix(), URL_SAFE_NO_PAD.encode(raw))
    }

    /// The secret of the confidential client `client_id` (a registration this gateway sealed):
    /// derived from the session key, so no replica stores it and every replica checks it. A
    /// new `gateway.sessionKey` ends it with the registration.
    pub fn client_secret(&self, client_id: &str) -> String {
        let secret: [u8; 32] = Sha256::new()
            .chain_update(self.secret)
            .chain_update(b"switchboard broker client secret v1\0")
            .chain_update(client_id.as_bytes())
            .finalize()
            .into();
        URL_SAFE_NO_PAD.encode(secret)
    }

    /// Whether `presented` is the secret of `client_id`, compared as digests (the time taken
    /// says nothing of the secret).
    pub fn client_secret_ok(&self, client_id: &str, presented: &str) -> bool {
        digest(&self.client_secret(client_id)) == digest(presented)
    }

    /// A record of `kind`, if `text` is one this gateway sealed today or yesterday and it has
    /// not expired (`exp` of the record).
    pub fn open<T: DeserializeOwned + Expiring>(
        &self,
        kind: Record,
        text: &str,
        now: SystemTime,
    ) -> Option<T> {
        let encoded = text.strip_prefix(kind.prefix())?;
        if encoded.len() > MAX_RECORD {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(encoded).ok()?;
        if raw.len() <= 1 + NONCE_LEN {
            return None;
        }
        let today = if kind == Record::Client {
            0
        } else {
            unix(now) / DAY
        };
        let day = [today, today.saturating_sub(1)]
            .into_iter()
            .find(|d| (d % 256) as u8 == raw[0])?;
        let body = self
            .cipher(day)
            .decrypt(
                Nonce::from_slice(&raw[1..1 + NONCE_LEN]),
                Payload {
                    msg: &raw[1 + NONCE_LEN..],
                    aad: kind.aad(),
                },
            )
            .ok()?;
        let record: T = serde_json::from_slice(&body).ok()?;
        (record.expires_at() > unix(now)).then_some(record)
    }
}

/// A record that says until when it holds.
pub trait Expiring {
    fn expires_at(&self) -> u64;
}

/// A registered client: its redirect URIs (what `client_id` carries).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ClientRecord {
    #[serde(rename = "r")]
    pub redirect_uris: Vec<String>,
    #[serde(rename = "n", default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A confidential client (`client_secret_basic` or `client_secret_post`): it authenticates
    /// at the token endpoint with the secret [`BrokerSealer::client_secret`] derives.
    #[serde(rename = "k", default, skip_serializing_if = "std::ops::Not::not")]
    pub confidential: bool,
    /// The grant types it registered for (empty in registrations made before they were kept:
    /// `authorization_code` and `refresh_token`).
    #[serde(rename = "g", default, skip_serializing_if = "Vec::is_empty")]
    pub grant_types: Vec<String>,
    #[serde(rename = "e")]
    pub exp: u64,
}

/// A login on its way through the provider.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LoginRecord {
    /// [`digest`] of the nonce the browser the login started in holds (a cookie).
    #[serde(rename = "b")]
    pub browser: String,
    /// [`digest`] of the `client_id` (which may be long: a registration, a URL).
    #[serde(rename = "c")]
    pub client: String,
    #[serde(rename = "r")]
    pub redirect_uri: String,
    /// The client's own `state`, given back to it.
    #[serde(rename = "s", default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The client's PKCE challenge (S256).
    #[serde(rename = "cc")]
    pub code_challenge: String,
    #[serde(rename = "res")]
    pub resource: String,
    #[serde(rename = "sc", default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The gateway's own PKCE verifier towards the provider.
    #[serde(rename = "v")]
    pub verifier: String,
    #[serde(rename = "e")]
    pub exp: u64,
}

/// A login waiting for the person's yes: the sealed login (which says which browser may
/// answer).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ConsentRecord {
    #[serde(rename = "l")]
    pub login: String,
    #[serde(rename = "e")]
    pub exp: u64,
}

/// Who signed in, as the provider's token said (what codes, access and refresh tokens carry).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Identity {
    /// The identity provider's id (`<namespace>/<name>`).
    #[serde(rename = "p")]
    pub provider: String,
    #[serde(rename = "u")]
    pub subject: String,
    #[serde(rename = "g", default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

/// An authorization code.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CodeRecord {
    /// [`digest`] of the `client_id` (which may be long: a registration, a URL).
    #[serde(rename = "c")]
    pub client: String,
    #[serde(rename = "r")]
    pub redirect_uri: String,
    #[serde(rename = "cc")]
    pub code_challenge: String,
    #[serde(rename = "res")]
    pub resource: String,
    #[serde(rename = "sc", default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(rename = "i")]
    pub identity: Identity,
    #[serde(rename = "t")]
    pub provider_token: ProviderTokens,
    /// When the person signed in at the provider, unix milliseconds.
    #[serde(rename = "si", default)]
    pub signed_in: u64,
    #[serde(rename = "e")]
    pub exp: u64,
}

/// The provider's tokens for the person, held for them (token exchange, refresh).
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProviderTokens {
    #[serde(rename = "a")]
    pub access: String,
    #[serde(rename = "ae")]
    pub access_exp: u64,
    #[serde(rename = "r", default, skip_serializing_if = "Option::is_none")]
    pub refresh: Option<String>,
}

/// An access token: who, for which resource, and the provider's token held for them.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AccessRecord {
    #[serde(rename = "i")]
    pub identity: Identity,
    /// The resource it was issued for (`<gateway>/mcp`, `/mcp/<prefix>`, `/mcp-rest`).
    #[serde(rename = "aud")]
    pub audience: String,
    /// [`digest`] of the `client_id` (which may be long: a registration, a URL).
    #[serde(rename = "c")]
    pub client: String,
    /// Empty when the person signed in with an identity assertion (nothing of the provider's
    /// is held: no exchange on their behalf).
    #[serde(rename = "t", default, skip_serializing_if = "String::is_empty")]
    pub provider_access: String,
    /// The scopes granted (space-separated, as the token answer said them).
    #[serde(rename = "sc", default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// When the person signed in (the login it descends from), unix milliseconds: a sign-out
    /// after it ends the token (`SIGNED_OUT`). 0 in tokens issued before logins were dated.
    #[serde(rename = "si", default)]
    pub signed_in: u64,
    #[serde(rename = "e")]
    pub exp: u64,
}

/// A refresh token.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RefreshRecord {
    /// [`digest`] of the `client_id` (which may be long: a registration, a URL).
    #[serde(rename = "c")]
    pub client: String,
    #[serde(rename = "res")]
    pub resource: String,
    #[serde(rename = "sc", default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(rename = "p")]
    pub provider: String,
    /// The provider's refresh token: a refresh asks the provider again.
    #[serde(rename = "t")]
    pub provider_refresh: String,
    /// The login this token descends from (a digest of its code): what a reuse revokes.
    /// Empty in tokens issued before grants were named.
    #[serde(rename = "g", default, skip_serializing_if = "String::is_empty")]
    pub grant: String,
    /// When the person signed in, unix milliseconds, carried from login to every refresh.
    #[serde(rename = "si", default)]
    pub signed_in: u64,
    #[serde(rename = "e")]
    pub exp: u64,
}

impl std::fmt::Debug for ProviderTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderTokens")
            .field("access_exp", &self.access_exp)
            .finish_non_exhaustive()
    }
}

macro_rules! expiring {
    ($($t:ty),*) => {$(impl Expiring for $t { fn expires_at(&self) -> u64 { self.exp } })*};
}
expiring!(
    ConsentRecord,
    ClientRecord,
    LoginRecord,
    CodeRecord,
    AccessRecord,
    RefreshRecord
);

/// An OAuth error answer (RFC 6749 section 5.2, RFC 7591 section 3.2.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthError {
    pub status: u16,
    pub error: &'static str,
    pub description: String,
}

impl OAuthError {
    pub fn new(status: u16, error: &'static str, description: impl Into<String>) -> OAuthError {
        OAuthError {
            status,
            error,
            description: description.into(),
        }
    }
}

/// How long a client registration holds: for good in practice (a new `gateway.sessionKey`
/// ends every registration at once).
pub const CLIENT_TTL: Duration = Duration::from_secs(10 * 365 * DAY);
/// How long a login may take at the provider.
pub const LOGIN_TTL: Duration = Duration::from_secs(600);
/// How long an authorization code holds.
pub const CODE_TTL: Duration = Duration::from_secs(60);

/// A registration request's redirect URIs, checked (RFC 7591 `redirect_uris`).
pub fn registered_redirects(uris: &[String]) -> Result<Vec<String>, OAuthError> {
    if uris.is_empty() || uris.len() > 10 || uris.iter().map(String::len).sum::<usize>() > 4096 {
        return Err(OAuthError::new(
            400,
            "invalid_redirect_uri",
            "redirect_uris must name 1 to 10 URIs, 4 KB in all",
        ));
    }
    for uri in uris {
        redirect_allowed(uri)
            .map_err(|why| OAuthError::new(400, "invalid_redirect_uri", format!("{uri}: {why}")))?;
    }
    Ok(uris.to_vec())
}

/// Whether a redirect URI may be registered at all.
pub fn redirect_allowed(uri: &str) -> Result<(), &'static str> {
    if uri.len() > 2048 {
        return Err("too long");
    }
    let url = url::Url::parse(uri).map_err(|_| "not an absolute URI")?;
    if url.fragment().is_some() {
        return Err("a redirect URI has no fragment");
    }
    match url.scheme() {
        "https" => Ok(()),
        "http" if is_loopback(&url) => Ok(()),
        "http" => Err("http only on a loopback address (127.0.0.1, [::1], localhost)"),
        "javascript" | "data" | "file" | "vbscript" | "about" | "blob" | "ws" | "wss" | "ftp" => {
            Err("not a redirect scheme")
        }
        // RFC 8252 7.1: a private-use scheme (a reverse domain name, `com.example.app:/cb`,
        // or an application's own, `cursor://...`, `vscode://...`).
        _ => Ok(()),
    }
}

fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// Whether `asked` is one of the client's registered redirect URIs: exactly, except that a
/// loopback http URI may come with any port (RFC 8252 section 7.3).
pub fn redirect_matches(client: &ClientRecord, asked: &str) -> bool {
    if client.redirect_uris.iter().any(|r| r == asked) {
        return true;
    }
    let Ok(asked_url) = url::Url::parse(asked) else {
        return false;
    };
    if asked_url.scheme() != "http" || !is_loopback(&asked_url) {
        return false;
    }
    client.redirect_uris.iter().any(|registered| {
        url::Url::parse(registered).is_ok_and(|mut r| {
            let mut a = asked_url.clone();
            let same_host = r.host_str() == a.host_str();
            let _ = r.set_port(None);
            let _ = a.set_port(None);
            same_host && r == a
        })
    })
}

/// What records hold of a value they must recognise but need not carry: its SHA-256,
/// base64url (a `client_id`, which a sealed registration makes kilobytes long; a browser's
/// cookie nonce, which must not travel in the URL).
pub fn digest(value: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(value.as_bytes()))
}

/// The S256 challenge of a PKCE verifier (RFC 7636).
pub fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Whether a PKCE verifier is well formed (43 to 128 unreserved characters) and answers the
/// challenge.
pub fn pkce_ok(verifier: &str, challenge: &str) -> bool {
    let well_formed = (43..=128).contains(&verifier.len())
        && verifier
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
    well_formed
        && subtle::ConstantTimeEq::ct_eq(s256(verifier).as_bytes(), challenge.as_bytes()).into()
}

/// A fresh PKCE verifier (the gateway's own, towards the provider).
pub fn new_verifier() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}

/// Seconds since the epoch.
/// Unix milliseconds (sign-in and sign-out times: a sign-out and a new login may share a second).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(uris: &[&str]) -> ClientRecord {
        ClientRecord {
            redirect_uris: uris.iter().map(|u| u.to_string()).collect(),
            name: None,
            confidential: false,
            grant_types: Vec::new(),
            exp: u64::MAX,
        }
    }

    #[test]
    fn redirect_uris_follow_rfc_8252() {
        for ok in [
            "https://app.example/cb",
            "http://127.0.0.1:3000/callback",
            "http://[::1]/cb",
            "http://localhost:8080/cb",
            "cursor://anysphere.cursor-retrieval/oauth/callback",
            "com.example.app:/oauth2redirect",
        ] {
            assert!(redirect_allowed(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://app.example/cb",
            "https://app.example/cb#frag",
            "javascript:alert(1)",
            "data:text/html,x",
            "/relative",
        ] {
            assert!(redirect_allowed(bad).is_err(), "{bad}");
        }
        assert!(registered_redirects(&[]).is_err());
    }

    #[test]
    fn a_redirect_matches_exactly_but_for_a_loopback_port() {
        let c = client(&["http://127.0.0.1:3000/callback", "https://app.example/cb"]);
        assert!(redirect_matches(&c, "http://127.0.0.1:3000/callback"));
        assert!(
            redirect_matches(&c, "http://127.0.0.1:49152/callback"),
            "any loopback port"
        );
        assert!(redirect_matches(&c, "https://app.example/cb"));
        for no in [
            "http://127.0.0.1:3000/other",
            "http://localhost:3000/callback",
            "https://app.example/cb/",
            "https://app.example:8443/cb",
            "https://evil.example/cb",
            "http://127.0.0.1:3000/callback?x=1",
        ] {
            assert!(!redirect_matches(&c, no), "{no}");
        }
    }

    #[test]
    fn pkce_s256() {
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        // RFC 7636, appendix B.
        assert_eq!(
            s256(verifier),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        assert!(pkce_ok(
            verifier,
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        ));
        assert!(!pkce_ok(
            "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXK",
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        ));
        assert!(
            !pkce_ok("short", &s256("short")),
            "a verifier shorter than 43 characters"
        );
        let fresh = new_verifier();
        assert!(pkce_ok(&fresh, &s256(&fresh)));
    }

    /// Records open on another replica (same session key) within their life, under today's or
    /// yesterday's key; never expired, never as another kind, never under another session key,
    /// never tampered with.
    #[test]
    fn sealed_records_open_anywhere_the_key_is_and_nowhere_else() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let (a, b) = (
            BrokerSealer::new(Some("shared")),
            BrokerSealer::new(Some("shared")),
        );
        let record = client(&["https://app.example/cb"]);
        let mut expiring = record.clone();
        expiring.exp = unix(now) + 3 * DAY;
        let text = a.seal(Record::Client, &expiring, now);
        assert!(text.starts_with("sbc."));
        assert_eq!(
            b.open::<ClientRecord>(Record::Client, &text, now),
            Some(expiring.clone())
        );
        // Registrations do not rotate; every other record does, daily.
        let later = now + Duration::from_secs(2 * DAY);
        assert!(
            b.open::<ClientRecord>(Record::Client, &text, later)
                .is_some(),
            "a registration lasts"
        );
        let login = a.seal(Record::Login, &expiring, now);
        let tomorrow = now + Duration::from_secs(DAY);
        assert!(
            b.open::<ClientRecord>(Record::Login, &login, tomorrow)
                .is_some(),
            "yesterday's key"
        );
        assert!(
            b.open::<ClientRecord>(Record::Login, &login, later)
                .is_none(),
            "the key rotated away"
        );
        let other = BrokerSealer::new(Some("another"));
        assert!(
            other
                .open::<ClientRecord>(Record::Client, &text, now)
                .is_none()
        );
        let as_code = text.replacen("sbc.", "sbk.", 1);
        assert!(
            b.open::<ClientRecord>(Record::Code, &as_code, now)
                .is_none(),
            "another kind"
        );
        let mut tampered = text.clone().into_bytes();
        let last = tampered.len() - 2;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).unwrap();
        assert!(
            b.open::<ClientRecord>(Record::Client, &tampered, now)
                .is_none()
        );
        let mut short = record;
        short.exp = unix(now) + 10;
        let text = a.seal(Record::Client, &short, now);
        assert!(
            b.open::<ClientRecord>(Record::Client, &text, now + Duration::from_secs(11))
                .is_none(),
            "expired"
        );
    }
}
