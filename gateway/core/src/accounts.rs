//! People's own upstream accounts (`userOAuth`, issue 37), the pure part: what is sealed on the
//! way from a call that needs an account to the account held in the shared store, and what the
//! store holds. The exchanges with the upstream's authorization server live in the upstream
//! plane (`accounts.rs` there), the pages at the edge (`connect.rs`).
//!
//! **Whose account.** A caller's [`Caller::tag`]: a signed-in person's (the same however they
//! signed in), else the key's. A key may hold one account of its own, connected by whoever
//! holds the key (the connect page asks for it): a workload has no browser, but its owner does,
//! and a shared service account is what such a key would otherwise need.
//!
//! **Bound to the caller.** The connect URL carries a sealed [`ConnectTicket`] naming the caller
//! and the server, for [`TICKET_TTL`]. The page connects nothing until the browser proves it is
//! that caller: a person signs in at their identity provider in that browser (the tag must be
//! the ticket's), a key's holder types the key. A link sent to someone else connects nothing.
//! Every later step is bound to that browser by a cookie nonce, as brokered sign-in is.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::broker::{Expiring, Record, unix};
use crate::scope::Caller;
use crate::table::{Server, base_url};

/// How long a connect URL works.
pub const TICKET_TTL: Duration = Duration::from_secs(15 * 60);
/// How long a browser stays known as a caller after proving it (the cookie).
pub const BROWSER_TTL: Duration = Duration::from_secs(12 * 3600);
/// How long a step in the browser (a sign-in, an authorization) may take.
pub const STEP_TTL: Duration = Duration::from_secs(10 * 60);

/// Who a ticket is for, as the pages show it and check it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "k", rename_all = "camelCase")]
pub enum Who {
    /// A person of identity provider `provider` (its id).
    Person { provider: String, subject: String },
    /// The holder of a key (`<namespace>/<name>`).
    Key { key: String },
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Who::Person { subject, .. } => write!(f, "{subject}"),
            Who::Key { key } => write!(f, "the holder of key {key}"),
        }
    }
}

/// The connect URL's ticket: this caller, this server, until `exp`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ConnectTicket {
    /// The caller's tag, hex.
    #[serde(rename = "t")]
    pub tag: String,
    #[serde(rename = "s")]
    pub server: String,
    #[serde(rename = "w")]
    pub who: Who,
    #[serde(rename = "e")]
    pub exp: u64,
}

/// A browser that proved it is a caller (its cookie).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct BrowserCaller {
    #[serde(rename = "t")]
    pub tag: String,
    #[serde(rename = "w")]
    pub who: Who,
    #[serde(rename = "e")]
    pub exp: u64,
}

/// A sign-in at the identity provider under way, for the ticket it will let through.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SignInState {
    /// The ticket's text (where the browser goes back to).
    #[serde(rename = "k")]
    pub ticket: String,
    /// The gateway's PKCE verifier towards the provider.
    #[serde(rename = "v")]
    pub verifier: String,
    /// `digest` of the browser's cookie nonce.
    #[serde(rename = "b")]
    pub browser: String,
    #[serde(rename = "e")]
    pub exp: u64,
}

/// The answer of a consent page: connect this ticket's account, from this browser.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnectConsent {
    #[serde(rename = "k")]
    pub ticket: String,
    #[serde(rename = "b")]
    pub browser: String,
    #[serde(rename = "e")]
    pub exp: u64,
}

/// An authorization at the upstream's server under way (its `state`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnectState {
    #[serde(rename = "t")]
    pub tag: String,
    #[serde(rename = "s")]
    pub server: String,
    #[serde(rename = "v")]
    pub verifier: String,
    #[serde(rename = "b")]
    pub browser: String,
    #[serde(rename = "e")]
    pub exp: u64,
}

macro_rules! expiring {
    ($($t:ty),*) => {$(impl Expiring for $t { fn expires_at(&self) -> u64 { self.exp } })*};
}
expiring!(
    ConnectTicket,
    BrowserCaller,
    SignInState,
    ConnectConsent,
    ConnectState
);

/// What the store holds for one account (sealed there; never shown, logged or sent to a
/// client).
#[derive(Clone, Serialize, Deserialize)]
pub struct AccountRecord {
    #[serde(rename = "a")]
    pub access_token: String,
    /// Unix seconds; 0 when the server did not say (then refreshed only on a 401).
    #[serde(rename = "x")]
    pub access_exp: u64,
    /// When the access token was obtained (Unix seconds): its lifetime sets how early it is
    /// refreshed.
    #[serde(rename = "g", default)]
    pub obtained_at: u64,
    #[serde(rename = "r", default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    #[serde(rename = "sc", default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// When it was connected (Unix seconds), for the connections page.
    #[serde(rename = "c")]
    pub connected_at: u64,
}

impl std::fmt::Debug for AccountRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccountRecord")
            .field("access_exp", &self.access_exp)
            .field("refreshable", &self.refresh_token.is_some())
            .finish_non_exhaustive()
    }
}

/// Who `caller` is, as a ticket names them.
pub fn who(caller: &Caller) -> Who {
    match &caller.person {
        Some(person) => Who::Person {
            provider: person.provider.clone(),
            subject: person.subject.clone(),
        },
        None => Who::Key {
            key: caller.key.id.clone(),
        },
    }
}

/// The URL `caller` opens to connect their account for `server`: the gateway's connect page
/// with a ticket sealed for them. `None` when the table seals no accounts (no `userOAuth`
/// server), which a `userOAuth` server's call never meets.
pub fn connect_url(caller: &Caller, server: &Server, now: SystemTime) -> Option<String> {
    let sealer = caller.table.account_sealer.as_ref()?;
    let ticket = ConnectTicket {
        tag: hex::encode(caller.tag()),
        server: server.id().to_string(),
        who: who(caller),
        exp: unix(now) + TICKET_TTL.as_secs(),
    };
    let sealed = sealer.seal(Record::ConnectTicket, &ticket, now);
    let base = base_url(&caller.table.settings, &caller.headers);
    Some(format!("{base}/connect?ticket={sealed}"))
}
