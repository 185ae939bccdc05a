//! People's own upstream accounts (`userOAuth`, issue 37), the plane's part: the upstream's
//! authorization server (its RFC 8414 metadata), its token endpoint (a code redeemed, a token
//! refreshed), RFC 7009 revocation, and each caller's access token, read from the shared store
//! and **refreshed on read**.
//!
//! A refresh happens once across every replica: under a lock in the store, after reading the
//! account again (another replica may have refreshed it meanwhile); a replica that finds the
//! lock taken reads again shortly. A rotated refresh token replaces the old one in the same
//! write. `invalid_grant` deletes the account: the caller's next call asks them to connect again.
//! Within a replica, concurrent calls of one caller wait for one read (a lock per account).
//!
//! An access token read is kept in this replica for at most `gateway.store.accountCache` (and
//! never past its refresh margin), so a disconnect on another replica reaches this one within
//! that; 0 reads the store on every call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use moka::sync::Cache;
use serde::Deserialize;
use serde_json::Value;
use switchboard_core::accounts::AccountRecord;
use switchboard_core::broker::unix;
use switchboard_core::table::Server;
use switchboard_snapshot::{ClientAuthMethod, UpstreamAuth};
use switchboard_store::{Store, StoreError, StoreKey};

use crate::client::Upstreams;
use crate::http_client::{HttpError, read_limited};
use crate::protected_resource::ProtectedResources;
use crate::tokens::{authenticate_client, secret};

/// An access token is refreshed this long before it expires.
const REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// How long the places of accounts no call asked for lately are kept.
const PLACE_IDLE: Duration = Duration::from_secs(120);
/// How long a token the server gave no expiry is good for (until a 401 says otherwise).
const NEVER_EXPIRES: Duration = Duration::from_secs(86_400);
/// How long an account stays in the store without being refreshed or connected again.
const ACCOUNT_TTL: Duration = Duration::from_secs(90 * 86_400);
/// The lock a refresh holds; a refresh that takes longer lets another replica try.
const REFRESH_LOCK: Duration = Duration::from_secs(15);
/// How long a replica waits for another's refresh before it gives up on the call.
const REFRESH_WAIT: Duration = Duration::from_secs(12);
/// How long the authorization server's metadata is kept.
const METADATA_TTL: Duration = Duration::from_secs(600);
/// Largest answer of the authorization server read.
const MAX_ANSWER: usize = 1024 * 1024;

/// The authorization server's endpoints (RFC 8414).
#[derive(Debug, Clone)]
pub(crate) struct ServerMetadata {
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub revocation_endpoint: Option<String>,
}

/// Why a caller's account could not give a token.
#[derive(Debug)]
pub(crate) enum AccountError {
    /// No account (never connected, disconnected, or its grant ended).
    NotConnected,
    /// The store did not answer (or holds what this gateway cannot open).
    Store(StoreError),
    /// The authorization server failed (the detail names how, never a token).
    Server(String),
}

impl From<StoreError> for AccountError {
    fn from(e: StoreError) -> Self {
        AccountError::Store(e)
    }
}

type AccountId = ([u8; 32], String);

#[derive(Clone)]
struct Held {
    token: String,
    until: Instant,
}

#[derive(Default)]
struct Place {
    held: tokio::sync::Mutex<Option<Held>>,
}

pub(crate) struct Accounts {
    upstreams: Arc<Upstreams>,
    resources: Arc<ProtectedResources>,
    places: Cache<AccountId, Arc<Place>>,
    metadata: Cache<(String, u64), (Instant, Arc<ServerMetadata>)>,
    refreshes: AtomicU64,
}

impl Accounts {
    pub(crate) fn new(upstreams: Arc<Upstreams>, resources: Arc<ProtectedResources>) -> Self {
        Accounts {
            upstreams,
            resources,
            places: Cache::builder()
                .max_capacity(100_000)
                .time_to_idle(PLACE_IDLE)
                .build(),
            metadata: Cache::builder().max_capacity(1_000).build(),
            refreshes: AtomicU64::new(0),
        }
    }
}

/// The store's name for an account, and for the lock its refresh holds.
fn account_key(tag: &[u8; 32], server: &Server) -> StoreKey {
    StoreKey::new("account", &[tag, server.id().as_bytes()])
}

fn refresh_lock_key(tag: &[u8; 32], server: &Server) -> StoreKey {
    StoreKey::new("account-refresh", &[tag, server.id().as_bytes()])
}

/// The `userOAuth` arm's fields.
struct Client<'a> {
    issuer: Option<&'a str>,
    client_id: &'a str,
    client_secret: Option<&'a str>,
    scopes: &'a [String],
    resource: Option<&'a str>,
    client_auth: ClientAuthMethod,
}

fn client_of(server: &Server) -> Option<Client<'_>> {
    match &server.spec.auth {
        UpstreamAuth::UserOauth {
            authorization_server,
            client_id,
            client_secret,
            scopes,
            resource,
            client_auth,
            ..
        } => Some(Client {
            issuer: authorization_server.as_deref(),
            client_id: secret(client_id),
            client_secret: client_secret.as_ref().map(secret),
            scopes,
            resource: resource.as_deref(),
            client_auth: *client_auth,
        }),
        _ => None,
    }
}

/// What a token endpoint answered.
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
    #[serde(default)]
    scope: Option<String>,
}

/// A token endpoint's refusal: its status and OAuth error code (never its body).
struct Refusal {
    status: u16,
    code: String,
}

enum Exchange {
    Answered(TokenAnswer),
    Refused(Refusal),
}

impl Accounts {
    /// How many refreshes this replica did (tests, metrics).
    pub(crate) fn refreshes(&self) -> u64 {
        self.refreshes.load(Ordering::Relaxed)
    }

    /// Forgets what this replica holds of an account (it was connected again or disconnected).
    pub(crate) fn forget(&self, tag: &[u8; 32], server: &Server) {
        self.places.invalidate(&(*tag, server.id().to_string()));
    }

    /// The caller's access token for `server`: held here, else read from the store and
    /// refreshed there when it is about to expire (or is `rejected`, the token the upstream
    /// just refused).
    pub(crate) async fn access_token(
        &self,
        store: &Store,
        tag: &[u8; 32],
        server: &Server,
        rejected: Option<&str>,
        hold: Duration,
    ) -> Result<String, AccountError> {
        let place = self
            .places
            .get_with((*tag, server.id().to_string()), Arc::default);
        let mut held = place.held.lock().await;
        if let Some(h) = held.as_ref()
            && h.until > Instant::now()
            && Some(h.token.as_str()) != rejected
        {
            return Ok(h.token.clone());
        }
        *held = None;
        let fresh = self.read_or_refresh(store, tag, server, rejected).await?;
        let token = fresh.token.clone();
        let until = fresh.until.min(Instant::now() + hold);
        *held = Some(Held { until, ..fresh });
        Ok(token)
    }

    async fn read_or_refresh(
        &self,
        store: &Store,
        tag: &[u8; 32],
        server: &Server,
        rejected: Option<&str>,
    ) -> Result<Held, AccountError> {
        let key = account_key(tag, server);
        let waited_until = Instant::now() + REFRESH_WAIT;
        loop {
            let record = read(store, &key).await?.ok_or(AccountError::NotConnected)?;
            if let Some(held) = usable(&record, rejected) {
                return Ok(held);
            }
            if record.refresh_token.is_none() {
                // Expired (or refused) with nothing to refresh it with: connect again.
                store.delete(&key).await?;
                return Err(AccountError::NotConnected);
            }
            if let Some(lock) = store
                .lock(&refresh_lock_key(tag, server), REFRESH_LOCK)
                .await?
            {
                let outcome = self.refresh_locked(store, &key, server, rejected).await;
                if let Err(e) = store.unlock(lock).await {
                    tracing::debug!(error = %e, "an account's refresh lock is left to expire");
                }
                return outcome;
            }
            // Another replica refreshes: read again shortly.
            if Instant::now() > waited_until {
                return Err(AccountError::Server(
                    "another replica's refresh of this account did not finish in time".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Under the account's refresh lock: read again, and refresh only if still needed.
    async fn refresh_locked(
        &self,
        store: &Store,
        key: &StoreKey,
        server: &Server,
        rejected: Option<&str>,
    ) -> Result<Held, AccountError> {
        let record = read(store, key).await?.ok_or(AccountError::NotConnected)?;
        if let Some(held) = usable(&record, rejected) {
            return Ok(held);
        }
        let Some(refresh_token) = record.refresh_token.clone() else {
            store.delete(key).await?;
            return Err(AccountError::NotConnected);
        };
        let form = vec![
            ("grant_type", "refresh_token".to_string()),
            ("refresh_token", refresh_token.clone()),
        ];
        self.refreshes.fetch_add(1, Ordering::Relaxed);
        match self.exchange(server, form).await? {
            Exchange::Answered(answer) => {
                let now = unix(SystemTime::now());
                let renewed = AccountRecord {
                    access_token: answer.access_token,
                    access_exp: answer.expires_in.map_or(0, |s| now + s),
                    obtained_at: now,
                    // A rotated refresh token replaces the old one; else the old one stays.
                    refresh_token: answer.refresh_token.or(Some(refresh_token)),
                    scope: answer.scope.or(record.scope),
                    connected_at: record.connected_at,
                };
                write(store, key, &renewed).await?;
                tracing::info!(
                    server = server.id(),
                    "a person's upstream account was refreshed"
                );
                usable(&renewed, None).ok_or_else(|| {
                    AccountError::Server("the refreshed token expires at once".into())
                })
            }
            Exchange::Refused(refusal) if refusal.code == "invalid_grant" => {
                store.delete(key).await?;
                tracing::info!(
                    server = server.id(),
                    "a person's upstream grant ended (invalid_grant): they connect again"
                );
                Err(AccountError::NotConnected)
            }
            Exchange::Refused(refusal) => Err(AccountError::Server(format!(
                "the token endpoint refused a refresh: HTTP {} {}",
                refusal.status, refusal.code
            ))),
        }
    }

    /// The authorization server's endpoints: from its metadata (RFC 8414, else OpenID
    /// discovery), at the configured issuer or the first the upstream's protected-resource
    /// metadata names; kept a while.
    pub(crate) async fn metadata(
        &self,
        server: &Server,
    ) -> Result<Arc<ServerMetadata>, AccountError> {
        let id = (server.id().to_string(), server.revision);
        if let Some((at, metadata)) = self.metadata.get(&id)
            && at.elapsed() < METADATA_TTL
        {
            return Ok(metadata);
        }
        let client = client_of(server)
            .ok_or_else(|| AccountError::Server("not a userOAuth server".into()))?;
        let issuer = match client.issuer {
            Some(issuer) => issuer.trim_end_matches('/').to_string(),
            None => self
                .resources
                .upstream_document(&self.upstreams, server)
                .await
                .and_then(|d| d["authorization_servers"][0].as_str().map(str::to_owned))
                .ok_or_else(|| {
                    AccountError::Server(
                        "no authorizationServer configured and none in the upstream's protected-resource metadata".into(),
                    )
                })?
                .trim_end_matches('/')
                .to_string(),
        };
        let document = discover(&self.upstreams, &issuer).await?;
        let endpoint = |name: &str| {
            document
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let metadata = Arc::new(ServerMetadata {
            authorization_endpoint: endpoint("authorization_endpoint").ok_or_else(|| {
                AccountError::Server("the metadata names no authorization_endpoint".into())
            })?,
            token_endpoint: endpoint("token_endpoint").ok_or_else(|| {
                AccountError::Server("the metadata names no token_endpoint".into())
            })?,
            revocation_endpoint: endpoint("revocation_endpoint"),
        });
        self.metadata.insert(id, (Instant::now(), metadata.clone()));
        Ok(metadata)
    }

    /// Where a browser is sent to authorize the gateway at the upstream's server (PKCE S256,
    /// the resource asked for, the scopes).
    pub(crate) async fn authorization_url(
        &self,
        server: &Server,
        redirect_uri: &str,
        state: &str,
        challenge: &str,
    ) -> Result<String, AccountError> {
        let metadata = self.metadata(server).await?;
        let client = client_of(server)
            .ok_or_else(|| AccountError::Server("not a userOAuth server".into()))?;
        let mut url = url::Url::parse(&metadata.authorization_endpoint)
            .map_err(|_| AccountError::Server("the authorization_endpoint is not a URL".into()))?;
        {
            let mut query = url.query_pairs_mut();
            query
                .append_pair("response_type", "code")
                .append_pair("client_id", client.client_id)
                .append_pair("redirect_uri", redirect_uri)
                .append_pair("state", state)
                .append_pair("code_challenge", challenge)
                .append_pair("code_challenge_method", "S256")
                .append_pair("resource", client.resource.unwrap_or(server.url.as_str()));
            if !client.scopes.is_empty() {
                query.append_pair("scope", &client.scopes.join(" "));
            }
        }
        Ok(url.into())
    }

    /// Redeems the code the upstream's server sent back, and keeps the account in the store.
    pub(crate) async fn connect(
        &self,
        store: &Store,
        tag: &[u8; 32],
        server: &Server,
        code: &str,
        redirect_uri: &str,
        verifier: &str,
    ) -> Result<(), AccountError> {
        let form = vec![
            ("grant_type", "authorization_code".to_string()),
            ("code", code.to_string()),
            ("redirect_uri", redirect_uri.to_string()),
            ("code_verifier", verifier.to_string()),
        ];
        let answer = match self.exchange(server, form).await? {
            Exchange::Answered(answer) => answer,
            Exchange::Refused(refusal) => {
                return Err(AccountError::Server(format!(
                    "the token endpoint refused the code: HTTP {} {}",
                    refusal.status, refusal.code
                )));
            }
        };
        let now = unix(SystemTime::now());
        let record = AccountRecord {
            access_token: answer.access_token,
            access_exp: answer.expires_in.map_or(0, |s| now + s),
            obtained_at: now,
            refresh_token: answer.refresh_token,
            scope: answer.scope,
            connected_at: now,
        };
        write(store, &account_key(tag, server), &record).await?;
        self.forget(tag, server);
        Ok(())
    }

    /// The account `tag` holds for `server`, if any (nothing refreshed).
    pub(crate) async fn connected(
        &self,
        store: &Store,
        tag: &[u8; 32],
        server: &Server,
    ) -> Result<Option<AccountRecord>, AccountError> {
        Ok(read(store, &account_key(tag, server)).await?)
    }

    /// Deletes the account, revoking its refresh token (else its access token) at the
    /// upstream's server where it has a revocation endpoint (RFC 7009). `Ok(true)` when the
    /// server took the revocation.
    pub(crate) async fn disconnect(
        &self,
        store: &Store,
        tag: &[u8; 32],
        server: &Server,
    ) -> Result<bool, AccountError> {
        let key = account_key(tag, server);
        let Some(record) = read(store, &key).await? else {
            return Ok(false);
        };
        store.delete(&key).await?;
        self.forget(tag, server);
        let metadata = match self.metadata(server).await {
            Ok(metadata) => metadata,
            Err(e) => {
                tracing::warn!(server = server.id(), error = ?e, "an account was disconnected without revocation");
                return Ok(false);
            }
        };
        let Some(endpoint) = metadata.revocation_endpoint.clone() else {
            return Ok(false);
        };
        let (token, hint) = match record.refresh_token {
            Some(refresh) => (refresh, "refresh_token"),
            None => (record.access_token, "access_token"),
        };
        let form = vec![("token", token), ("token_type_hint", hint.to_string())];
        match post_form(&self.upstreams, server, &endpoint, form).await {
            Ok((status, _)) if (200..300).contains(&status) => Ok(true),
            Ok((status, _)) => {
                tracing::warn!(
                    server = server.id(),
                    status,
                    "the upstream refused a revocation"
                );
                Ok(false)
            }
            Err(e) => {
                tracing::warn!(server = server.id(), error = ?e, "a revocation did not reach the upstream");
                Ok(false)
            }
        }
    }

    /// One exchange at the token endpoint, with the gateway's client credentials and the
    /// resource asked for.
    async fn exchange(
        &self,
        server: &Server,
        mut form: Vec<(&'static str, String)>,
    ) -> Result<Exchange, AccountError> {
        let metadata = self.metadata(server).await?;
        let client = client_of(server)
            .ok_or_else(|| AccountError::Server("not a userOAuth server".into()))?;
        form.push((
            "resource",
            client.resource.unwrap_or(server.url.as_str()).to_string(),
        ));
        let (status, body) =
            post_form(&self.upstreams, server, &metadata.token_endpoint, form).await?;
        if !(200..300).contains(&status) {
            let code = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_default();
            return Ok(Exchange::Refused(Refusal { status, code }));
        }
        serde_json::from_slice(&body)
            .map(Exchange::Answered)
            .map_err(|_| {
                AccountError::Server("the token endpoint's answer has no access_token".into())
            })
    }
}

/// An account as the store holds it, opened.
async fn read(store: &Store, key: &StoreKey) -> Result<Option<AccountRecord>, StoreError> {
    match store.get(key).await? {
        Some(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
        None => Ok(None),
    }
}

async fn write(store: &Store, key: &StoreKey, record: &AccountRecord) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec(record).unwrap_or_default();
    store.put(key, &bytes, ACCOUNT_TTL).await
}

/// The record's access token while it is good for a while, and how long this replica keeps it.
fn usable(record: &AccountRecord, rejected: Option<&str>) -> Option<Held> {
    if Some(record.access_token.as_str()) == rejected {
        return None;
    }
    let now = unix(SystemTime::now());
    let held_for = if record.access_exp == 0 {
        NEVER_EXPIRES
    } else {
        let lifetime = record.access_exp.saturating_sub(record.obtained_at);
        let margin = REFRESH_MARGIN.as_secs().min(lifetime / 4);
        let left = record.access_exp.checked_sub(now + margin)?;
        Duration::from_secs(left)
    };
    if held_for.is_zero() {
        return None;
    }
    Some(Held {
        token: record.access_token.clone(),
        until: Instant::now() + held_for,
    })
}

/// The authorization server's metadata document: RFC 8414's well-known location (the issuer's
/// path after it), else OpenID discovery's (the path before it); its `issuer` must be the one
/// asked for (RFC 8414 section 3.3).
async fn discover(upstreams: &Upstreams, issuer: &str) -> Result<Value, AccountError> {
    let parsed = url::Url::parse(issuer)
        .map_err(|_| AccountError::Server("the authorization server is not a URL".into()))?;
    let origin = parsed.origin().ascii_serialization();
    let path = parsed.path().trim_end_matches('/');
    let candidates = [
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}{path}/.well-known/openid-configuration"),
    ];
    let mut last = String::new();
    for candidate in candidates {
        let Ok(url) = url::Url::parse(&candidate) else {
            continue;
        };
        match upstreams.get_json(&url, None, MAX_ANSWER).await {
            Ok(document) => {
                let named = document.get("issuer").and_then(Value::as_str);
                if named.map(|n| n.trim_end_matches('/')) == Some(issuer) {
                    return Ok(document);
                }
                last = "its metadata names another issuer".into();
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(AccountError::Server(format!(
        "the authorization server's metadata could not be read: {last}"
    )))
}

/// A form POST to the authorization server with the gateway's client authentication, under
/// the address policy and the server's timeout. Returns the status and the body (bounded).
async fn post_form(
    upstreams: &Upstreams,
    server: &Server,
    endpoint: &str,
    mut form: Vec<(&'static str, String)>,
) -> Result<(u16, bytes::Bytes), AccountError> {
    let client =
        client_of(server).ok_or_else(|| AccountError::Server("not a userOAuth server".into()))?;
    let url = url::Url::parse(endpoint)
        .map_err(|_| AccountError::Server("an endpoint is not a URL".into()))?;
    upstreams
        .allows_url(&url)
        .map_err(|denied| AccountError::Server(denied.to_string()))?;
    let http = upstreams
        .http()
        .map_err(|e| AccountError::Server(e.to_string()))?;
    let request = authenticate_client(
        http.post(&url),
        &mut form,
        client.client_id,
        client.client_secret,
        client.client_auth,
    );
    let exchange = async {
        let response = request.form(&form).send().await?;
        let status = response.status().as_u16();
        let body = read_limited(response.into_body(), MAX_ANSWER).await?;
        Ok::<_, HttpError>((status, body))
    };
    match tokio::time::timeout(server.spec.timeout, exchange).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(AccountError::Server(e.to_string())),
        Err(_) => Err(AccountError::Server(format!(
            "no answer within {:?}",
            server.spec.timeout
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(lifetime: u64, left: u64) -> AccountRecord {
        let now = unix(SystemTime::now());
        AccountRecord {
            access_token: "token".into(),
            access_exp: now + left,
            obtained_at: (now + left).saturating_sub(lifetime),
            refresh_token: Some("refresh".into()),
            scope: None,
            connected_at: now,
        }
    }

    /// A token is refreshed within a quarter of its life of expiry, at most a minute: a short
    /// token is not refreshed on every read, a long one a minute ahead; the token the upstream
    /// just refused never counts as usable.
    #[test]
    fn a_token_is_usable_until_its_refresh_margin_and_never_once_refused() {
        assert!(usable(&record(8, 7), None).is_some(), "8 s token, 7 s left");
        assert!(
            usable(&record(8, 1), None).is_none(),
            "inside its 2 s margin"
        );
        assert!(usable(&record(3600, 120), None).is_some());
        assert!(
            usable(&record(3600, 50), None).is_none(),
            "a minute at most"
        );
        assert!(
            usable(&record(3600, 3000), Some("token")).is_none(),
            "refused upstream"
        );
        let held = usable(&record(8, 7), None).expect("usable");
        assert!(held.until <= Instant::now() + Duration::from_secs(6));
        let no_expiry = AccountRecord {
            access_exp: 0,
            ..record(0, 0)
        };
        assert!(
            usable(&no_expiry, None).is_some(),
            "no expiry said: good until a 401"
        );
    }
}
