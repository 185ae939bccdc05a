//! Tokens the gateway obtains for upstreams: OAuth 2.0 client credentials (one token per
//! server, shared) and RFC 8693 token exchange (one token per caller token and server, in a
//! bounded cache). Concurrent callers wait for one token request rather than sending one each.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use switchboard_snapshot::{ClientAuthMethod, resolved_value};
use tokio::time::Instant;

use switchboard_core::errors::GatewayError;
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
const RENEW_RETRY: Duration = Duration::from_secs(2);

#[derive(Clone)]
struct Minted {
    token: String,
    renew_at: Instant,
    expires_at: Instant,
}

type Slot = Arc<tokio::sync::Mutex<Option<Minted>>>;

#[derive(Default)]
pub struct Tokens {
    /// Keyed by (server id, revision, caller-token hash; 0 for client credentials).
    slots: Mutex<HashMap<(String, u64, u64), Slot>>,
    pub requests: std::sync::atomic::AtomicU64,
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
    fn slot(&self, server: &Server, caller: u64, cache_size: usize) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let key = (server.id().to_string(), server.revision, caller);
        if !slots.contains_key(&key) {
            let of_server = slots
                .keys()
                .filter(|(id, rev, _)| id == server.id() && *rev == server.revision)
                .count();
            if of_server >= cache_size {
                // Bounded: forget this server's exchanged tokens (they are re-obtained on use).
                slots.retain(|(id, rev, c), _| {
                    !(id == server.id() && *rev == server.revision && *c != 0)
                });
            }
        }
        slots.entry(key).or_default().clone()
    }

    /// Forgets servers that left the routing table or changed.
    pub fn retain(&self, live: impl Fn(&str, u64) -> bool) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.retain(|(id, rev, _), _| live(id, *rev));
    }

    /// The cached token for (server, caller), or a fresh one from `grant`. `renew` forces a
    /// new token (after an upstream 401), unless another caller renewed it meanwhile.
    pub async fn token<'g>(
        &self,
        http: &reqwest::Client,
        server: &Server,
        caller: u64,
        cache_size: usize,
        renew: Option<&str>,
        grant: impl FnOnce() -> Grant<'g>,
    ) -> Result<String, GatewayError> {
        let slot = self.slot(server, caller, cache_size);
        let mut current = slot.lock().await;
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
        http: &reqwest::Client,
        server: &Server,
        grant: Grant<'_>,
    ) -> Result<Minted, GatewayError> {
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let failed = |detail: String| GatewayError::UpstreamUnavailable {
            server: server.id().to_string(),
            detail: format!("token endpoint: {detail}"),
        };
        let mut form = grant.form;
        let mut request = http.post(grant.token_url);
        match grant.client_auth {
            ClientAuthMethod::ClientSecretBasic => {
                // RFC 6749 section 2.3.1: each part is form-encoded before the pair is encoded.
                let encode = |s: &str| {
                    url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>()
                };
                let pair = format!(
                    "{}:{}",
                    encode(grant.client_id),
                    encode(grant.client_secret.unwrap_or_default())
                );
                request =
                    request.header("authorization", format!("Basic {}", STANDARD.encode(pair)));
            }
            ClientAuthMethod::ClientSecretPost => {
                form.push(("client_id", grant.client_id.to_string()));
                if let Some(secret) = grant.client_secret {
                    form.push(("client_secret", secret.to_string()));
                }
            }
        }
        let deadline = server.spec.timeout;
        let response = tokio::time::timeout(deadline, request.form(&form).send())
            .await
            .map_err(|_| GatewayError::UpstreamTimeout {
                server: server.id().to_string(),
                budget: deadline,
            })?
            .map_err(|_| failed("unreachable".into()))?;
        let status = response.status();
        let body = tokio::time::timeout(deadline, response.bytes())
            .await
            .map_err(|_| GatewayError::UpstreamTimeout {
                server: server.id().to_string(),
                budget: deadline,
            })?
            .map_err(|_| failed("broken response".into()))?;
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
        let http = reqwest::Client::new();
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

    /// A token endpoint that is down when a renewal is due: the token in hand keeps serving
    /// until it expires (one attempt per RENEW_RETRY, not one per request), never after the
    /// upstream rejected it, and never past its expiry.
    #[tokio::test]
    async fn a_failed_renewal_keeps_the_valid_token_until_it_expires() {
        let down = Arc::new(AtomicBool::new(false));
        let url = token_endpoint(down.clone());
        let table = one_server();
        let server = table.server_by_id("a").unwrap();
        let http = reqwest::Client::new();
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
            matches!(&expired, Err(GatewayError::UpstreamUnavailable { detail, .. }) if detail.contains("HTTP 503")),
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
