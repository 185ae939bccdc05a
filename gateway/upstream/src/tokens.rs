//! Tokens the gateway obtains for upstreams: OAuth 2.0 client credentials (one token per
//! server, shared) and RFC 8693 token exchange (one token per caller token and server, in a
//! bounded cache). Concurrent callers wait for one token request rather than sending one each.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use moka::sync::Cache;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use switchboard_snapshot::{ClientAuthMethod, resolved_value};
use tokio::time::Instant;

use crate::error::UpstreamError;
use crate::http_client::{HttpClient, HttpError, Outgoing, read_limited};
use http::HeaderValue;
use switchboard_core::table::Server;

/// A token is renewed this long before it expires, so no request goes out with one about to.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// Lifetime assumed when the token endpoint gives no `expires_in`.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);
/// A token is taken to expire this much before its `expires_in` says (at most a quarter of its
/// life): the clock started when the answer arrived, not when the endpoint issued it.
const EXPIRY_SKEW: Duration = Duration::from_secs(5);
/// After a renewal failed while the token in hand is still valid, the next attempt waits this
/// long; the token keeps serving meanwhile, so a token endpoint that is down (or hangs) is not
/// asked, and waited for, on every request.
/// Largest token endpoint answer read (a token answer is a few KiB).
const MAX_TOKEN_ANSWER: usize = 1024 * 1024;
const RENEW_RETRY: Duration = Duration::from_secs(2);

#[derive(Clone)]
struct Minted {
    token: String,
    renew_at: Instant,
    expires_at: Instant,
}

/// One token's place: the token (behind a lock: concurrent callers wait for one request) and
/// how long the cache keeps the place (the token's life, known once it is minted).
#[derive(Default)]
struct SlotInner {
    minted: tokio::sync::Mutex<Option<Minted>>,
    keep_ms: AtomicU64,
}

type Slot = Arc<SlotInner>;

/// A place is kept while its token lives (plus the margin a renewal needs); an empty one, a
/// minute.
struct SlotExpiry;

impl moka::Expiry<u64, Slot> for SlotExpiry {
    fn expire_after_create(&self, _: &u64, slot: &Slot, _: std::time::Instant) -> Option<Duration> {
        Some(slot.keep())
    }

    fn expire_after_update(
        &self,
        _: &u64,
        slot: &Slot,
        _: std::time::Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(slot.keep())
    }
}

impl SlotInner {
    fn keep(&self) -> Duration {
        match self.keep_ms.load(Ordering::Relaxed) {
            0 => Duration::from_secs(60),
            ms => Duration::from_millis(ms) + EXPIRY_MARGIN,
        }
    }
}

/// The tokens of each server (by id and revision): by caller-token hash (0 for client
/// credentials), at most the server's `cacheSize` of them (the least used go first; never all
/// at once), each until it expires.
#[derive(Default)]
pub struct Tokens {
    servers: RwLock<HashMap<(String, u64), Cache<u64, Slot>>>,
    pub requests: AtomicU64,
}

/// What one token request asks for.
pub struct Grant<'a> {
    pub token_url: &'a str,
    pub client_id: &'a str,
    pub client_secret: Option<&'a str>,
    pub client_auth: ClientAuthMethod,
    pub form: Vec<(&'static str, String)>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

impl Tokens {
    fn of_server(&self, server: &Server, cache_size: usize) -> Cache<u64, Slot> {
        let key = (server.id().to_string(), server.revision);
        if let Some(cache) = self
            .servers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return cache.clone();
        }
        self.servers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_insert_with(|| {
                Cache::builder()
                    .max_capacity(cache_size.max(1) as u64)
                    .expire_after(SlotExpiry)
                    .build()
            })
            .clone()
    }

    fn slot(&self, server: &Server, caller: u64, cache_size: usize) -> (Cache<u64, Slot>, Slot) {
        let cache = self.of_server(server, cache_size);
        let slot = cache.get_with(caller, Slot::default);
        (cache, slot)
    }

    /// Forgets servers that left the routing table or changed.
    pub fn retain(&self, live: impl Fn(&str, u64) -> bool) {
        let mut servers = self.servers.write().unwrap_or_else(|p| p.into_inner());
        servers.retain(|(id, rev), _| live(id, *rev));
    }

    /// Tokens held now, over every server.
    pub fn size(&self) -> u64 {
        let servers = self.servers.read().unwrap_or_else(|p| p.into_inner());
        servers
            .values()
            .map(|c| {
                c.run_pending_tasks();
                c.entry_count()
            })
            .sum()
    }

    /// The cached token for (server, caller), or a fresh one from `grant`. `renew` forces a
    /// new token (after an upstream 401), unless another caller renewed it meanwhile.
    pub async fn token<'g>(
        &self,
        http: &HttpClient,
        server: &Server,
        caller: u64,
        cache_size: usize,
        renew: Option<&str>,
        grant: impl FnOnce() -> Grant<'g>,
    ) -> Result<String, UpstreamError> {
        let (cache, slot) = self.slot(server, caller, cache_size);
        let mut current = slot.minted.lock().await;
        let rejected = current
            .as_ref()
            .is_some_and(|minted| renew.is_some_and(|bad| bad == minted.token));
        if let Some(minted) = current.as_ref()
            && !rejected
            && Instant::now() < minted.renew_at
        {
            return Ok(minted.token.clone());
        }
        match self.request(http, server, grant()).await {
            Ok(minted) => {
                // The cache keeps the place as long as the token lives (stored again, so the
                // cache reads the new lifetime).
                let life = minted.expires_at.saturating_duration_since(Instant::now());
                slot.keep_ms
                    .store(life.as_millis().max(1) as u64, Ordering::Relaxed);
                cache.insert(caller, slot.clone());
                *current = Some(minted.clone());
                Ok(minted.token)
            }
            // Renewal ahead of expiry failed (the endpoint is down, hangs or refuses): the
            // token in hand is still good, so it keeps serving until it expires.
            Err(e) => match current.as_mut() {
                Some(minted) if !rejected && Instant::now() < minted.expires_at => {
                    minted.renew_at = (Instant::now() + RENEW_RETRY).min(minted.expires_at);
                    tracing::warn!(server = server.id(), error = %e,
                        "token renewal failed; the current token serves until it expires");
                    Ok(minted.token.clone())
                }
                _ => {
                    if rejected {
                        *current = None; // never offered again
                    }
                    Err(e)
                }
            },
        }
    }

    async fn request(
        &self,
        http: &HttpClient,
        server: &Server,
        grant: Grant<'_>,
    ) -> Result<Minted, UpstreamError> {
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let failed = |detail: String| UpstreamError::Unavailable {
            server: server.id().to_string(),
            detail: format!("token endpoint: {detail}"),
        };
        let mut form = grant.form;
        let token_url = url::Url::parse(grant.token_url)
            .map_err(|_| failed("the token URL is not a URL".into()))?;
        let request = authenticate_client(
            http.post(&token_url),
            &mut form,
            grant.client_id,
            grant.client_secret,
            grant.client_auth,
        );
        // One deadline for the exchange, the answer's body included.
        let deadline = server.spec.timeout;
        let exchange = async {
            let response = request.form(&form).send().await?;
            let status = response.status();
            let body = read_limited(response.into_body(), MAX_TOKEN_ANSWER).await?;
            Ok::<_, HttpError>((status, body))
        };
        let (status, body) = tokio::time::timeout(deadline, exchange)
            .await
            .map_err(|_| UpstreamError::Timeout {
                server: server.id().to_string(),
                budget: deadline,
            })?
            // A refused certificate says why (the token endpoint uses its server's TLS).
            .map_err(|e| match UpstreamError::http(server, e) {
                UpstreamError::Unavailable { detail, .. } => failed(detail),
                other => other,
            })?;
        if !status.is_success() {
            // The endpoint's error code only (invalid_client, ...): bodies may echo inputs.
            let code = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
                .unwrap_or_default();
            return Err(failed(format!("HTTP {} {code}", status.as_u16())));
        }
        let parsed: TokenResponse = serde_json::from_slice(&body)
            .map_err(|_| failed("no access_token in the answer".into()))?;
        let lifetime = parsed
            .expires_in
            .map_or(DEFAULT_LIFETIME, Duration::from_secs);
        let now = Instant::now();
        Ok(Minted {
            token: parsed.access_token,
            renew_at: now + lifetime.saturating_sub(EXPIRY_MARGIN.min(lifetime / 2)),
            expires_at: now + lifetime.saturating_sub(EXPIRY_SKEW.min(lifetime / 4)),
        })
    }
}

/// The gateway's client authentication at a token endpoint (RFC 6749 section 2.3.1): HTTP
/// Basic (each part form-encoded before the pair is encoded), or the credentials in the form.
pub(crate) fn authenticate_client<'a>(
    mut request: Outgoing<'a>,
    form: &mut Vec<(&'static str, String)>,
    client_id: &str,
    client_secret: Option<&str>,
    method: ClientAuthMethod,
) -> Outgoing<'a> {
    match method {
        ClientAuthMethod::ClientSecretBasic => {
            let encode =
                |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            let pair = format!(
                "{}:{}",
                encode(client_id),
                encode(client_secret.unwrap_or_default())
            );
            if let Ok(value) = HeaderValue::from_str(&format!("Basic {}", STANDARD.encode(pair))) {
                request = request.header(http::header::AUTHORIZATION, value);
            }
        }
        ClientAuthMethod::ClientSecretPost => {
            form.push(("client_id", client_id.to_string()));
            if let Some(secret) = client_secret {
                form.push(("client_secret", secret.to_string()));
            }
        }
    }
    request
}

/// A resolved secret of the snapshot (resolution happened at load).
pub fn secret(source: &switchboard_snapshot::SecretSource) -> &str {
    resolved_value(source).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use switchboard_core::table::RoutingTable;
    use switchboard_snapshot::{SystemLookup, load};

    fn test_client() -> HttpClient {
        HttpClient::plain().unwrap()
    }

    /// A token endpoint on its own thread and runtime (its clock is not the test's paused one)
    /// minting `t-1`, `t-2`, ... valid for an hour; while `down` is set it answers 503.
    fn token_endpoint(down: Arc<AtomicBool>) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let minted = Arc::new(AtomicU64::new(0));
                let app = axum::Router::new().route(
                    "/token",
                    axum::routing::post(move || {
                        let answer = if down.load(Ordering::Relaxed) {
                            Err(axum::http::StatusCode::SERVICE_UNAVAILABLE)
                        } else {
                            let n = minted.fetch_add(1, Ordering::Relaxed) + 1;
                            Ok(axum::Json(
                                serde_json::json!({"access_token": format!("t-{n}"), "expires_in": 3600}),
                            ))
                        };
                        async move { answer }
                    }),
                );
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        format!("http://{address}/token")
    }

    /// Renewal on tokio's clock: the token is reused until 30 s before it expires, then a new
    /// one is requested; a token the upstream rejected is renewed at once.
    fn one_server() -> RoutingTable {
        RoutingTable::build(
            &load(
                "servers:\n- {name: a, url: 'http://x/mcp'}\n",
                &SystemLookup,
            )
            .unwrap(),
        )
        .unwrap()
    }

    fn grant(url: &str) -> Grant<'_> {
        Grant {
            token_url: url,
            client_id: "c1",
            client_secret: Some("secret-c1"),
            client_auth: ClientAuthMethod::ClientSecretPost,
            form: vec![("grant_type", "client_credentials".into())],
        }
    }

    #[tokio::test]
    async fn a_token_is_reused_until_its_expiry_margin_then_renewed() {
        let url = token_endpoint(Arc::default());
        let table = one_server();
        let server = table.server_by_id("a").unwrap();
        let http = test_client();
        let tokens = Tokens::default();
        let token = |renew| tokens.token(&http, server, 0, 8, renew, || grant(&url));
        assert_eq!(token(None).await.unwrap(), "t-1");

        tokio::time::pause();
        let renew_in = Duration::from_secs(3600) - EXPIRY_MARGIN;
        tokio::time::advance(renew_in - Duration::from_secs(1)).await;
        assert_eq!(token(None).await.unwrap(), "t-1", "reused inside its life");
        assert_eq!(tokens.requests.load(Ordering::Relaxed), 1);
        tokio::time::advance(Duration::from_secs(1)).await;
        tokio::time::resume();
        assert_eq!(token(None).await.unwrap(), "t-2", "renewed at the margin");
        assert_eq!(
            token(Some("t-1")).await.unwrap(),
            "t-2",
            "another caller renewed it"
        );
        assert_eq!(
            token(Some("t-2")).await.unwrap(),
            "t-3",
            "a rejected token is renewed"
        );
        assert_eq!(tokens.requests.load(Ordering::Relaxed), 3);
    }

    /// More callers than the server's cacheSize: the cache stays at its bound by letting the
    /// least used go, never by forgetting everyone (the earlier callers' tokens that stay are
    /// reused without a new request).
    #[tokio::test]
    async fn the_token_cache_is_bounded_without_forgetting_everyone() {
        let url = token_endpoint(Arc::default());
        let table = one_server();
        let server = table.server_by_id("a").unwrap();
        let http = test_client();
        let tokens = Tokens::default();
        // The first caller is used often; then 20 callers come once each, over a bound of 8.
        for _ in 0..5 {
            tokens
                .token(&http, server, 1, 8, None, || grant(&url))
                .await
                .unwrap();
        }
        for caller in 100..120 {
            tokens
                .token(&http, server, caller, 8, None, || grant(&url))
                .await
                .unwrap();
        }
        assert!(tokens.size() <= 8, "held {}", tokens.size());
        assert!(tokens.size() >= 1);
        let before = tokens.requests.load(Ordering::Relaxed);
        assert_eq!(before, 21, "one request per caller");
        tokens
            .token(&http, server, 1, 8, None, || grant(&url))
            .await
            .unwrap();
        assert_eq!(
            tokens.requests.load(Ordering::Relaxed),
            before,
            "the frequent caller's token survived the newcomers"
        );
    }

    /// A token endpoint that is down when a renewal is due: the token in hand keeps serving
    /// until it expires (one attempt per RENEW_RETRY, not one per request), never after the
    /// upstream rejected it, and never past its expiry.
    #[tokio::test]
    async fn a_failed_renewal_keeps_the_valid_token_until_it_expires() {
        let down = Arc::new(AtomicBool::new(false));
        let url = token_endpoint(down.clone());
        let table = one_server();
        let server = table.server_by_id("a").unwrap();
        let http = test_client();
        let tokens = Tokens::default();
        let token = |renew| tokens.token(&http, server, 0, 8, renew, || grant(&url));
        let asked = || tokens.requests.load(Ordering::Relaxed);
        assert_eq!(token(None).await.unwrap(), "t-1");
        down.store(true, Ordering::Relaxed);

        tokio::time::pause();
        tokio::time::advance(Duration::from_secs(3600) - EXPIRY_MARGIN).await;
        tokio::time::resume();
        assert_eq!(token(None).await.unwrap(), "t-1", "renewal failed: kept");
        assert_eq!(asked(), 2);
        assert_eq!(token(None).await.unwrap(), "t-1");
        assert_eq!(asked(), 2, "not asked again before RENEW_RETRY");

        tokio::time::pause();
        tokio::time::advance(RENEW_RETRY).await;
        tokio::time::resume();
        assert_eq!(token(None).await.unwrap(), "t-1");
        assert_eq!(asked(), 3, "asked again after RENEW_RETRY");

        tokio::time::pause();
        tokio::time::advance(EXPIRY_MARGIN - EXPIRY_SKEW).await;
        tokio::time::resume();
        let expired = token(None).await;
        assert!(
            matches!(&expired, Err(UpstreamError::Unavailable { detail, .. }) if detail.contains("HTTP 503")),
            "expired: {expired:?}"
        );
        assert_eq!(asked(), 4);
        down.store(false, Ordering::Relaxed);
        assert_eq!(token(None).await.unwrap(), "t-2", "the endpoint is back");

        down.store(true, Ordering::Relaxed);
        assert!(
            token(Some("t-2")).await.is_err(),
            "a token the upstream rejected is not kept"
        );
        assert!(token(None).await.is_err(), "nor offered to the next caller");
        assert_eq!(asked(), 7);
    }
}
