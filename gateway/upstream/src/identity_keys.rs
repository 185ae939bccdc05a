//! Fetching identity providers' signing keys into the store the routing tables verify people's
//! tokens with ([`switchboard_core::people::IdentityKeys`]).
//!
//! For each provider of the table being served: OIDC discovery (`<issuer>/.well-known/
//! openid-configuration`, whose `issuer` must be the configured one), then its `jwks_uri` (or
//! the provider's `jwksUrl`), with the provider's TLS settings and under the address policy.
//! Keys are fetched when a provider first appears, every [`REFRESH`] after, and when a token
//! names a key id the store does not hold (a rotation): tokens cause at most one fetch per
//! [`MIN_INTERVAL`] per provider, however many ask (a flood of tokens with made-up key ids
//! costs the provider one request per interval), and every token waiting when a fetch ends is
//! verified again with what it found (`switchboard_core::people`, [`KEY_WAIT`]). A failed fetch
//! keeps the keys already held: a provider that is down does not stop people whose tokens it
//! already signed, nor keys and ServiceAccount tokens at all.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use switchboard_core::jwks::SigningKeys;
use switchboard_core::people::{IdentityKeys, KEY_WAIT, LoginEndpoints};
use switchboard_core::table::RoutingTable;
use switchboard_snapshot::{IdentityProviderSpec, TlsMaterial};
use tokio::time::Instant;

use crate::client::Upstreams;
use crate::error::KeysError;

/// How often keys are fetched again when nothing asks sooner.
pub const REFRESH: Duration = Duration::from_secs(300);
/// The least time between two fetches of one provider's keys that tokens asked for (and between
/// two tries of a provider that is failing).
pub const MIN_INTERVAL: Duration = Duration::from_secs(10);
/// One fetch (discovery and the key set) gives up after this.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

// A token that asked for a fetch waits for it to start and to end.
const _: () = assert!(KEY_WAIT.as_secs() > MIN_INTERVAL.as_secs() + FETCH_TIMEOUT.as_secs());
/// Largest discovery document or key set read.
const MAX_DOCUMENT: usize = 1024 * 1024;

/// What the fetcher knows of one provider.
struct Watched {
    spec: IdentityProviderSpec,
    tls: Option<Arc<TlsMaterial>>,
    /// When its keys were last fetched (or tried), `None` before the first try.
    last: Option<Instant>,
    /// Whether the last try failed (then the next comes after [`MIN_INTERVAL`]).
    failing: bool,
    /// A token named a key id the store does not hold: fetch once [`MIN_INTERVAL`] has passed
    /// since the last fetch a token asked for (kept until then, not dropped).
    wanted: bool,
    /// When the last fetch a token asked for started: what bounds how often tokens can make
    /// the gateway fetch (fetches due anyway, the first and the refresh, do not count).
    asked: Option<Instant>,
}

/// The providers of the table being served, and the store their keys go to.
pub struct KeyFetcher {
    pub store: Arc<IdentityKeys>,
    watched: Mutex<HashMap<String, Watched>>,
    started: std::sync::Once,
}

impl Default for KeyFetcher {
    fn default() -> Self {
        KeyFetcher {
            store: Arc::default(),
            watched: Mutex::new(HashMap::new()),
            started: std::sync::Once::new(),
        }
    }
}

impl KeyFetcher {
    /// Takes a new table's providers: new or changed ones are fetched at once, gone ones are
    /// forgotten (with their keys).
    pub fn set_table(self: &Arc<Self>, table: &RoutingTable, upstreams: Arc<Upstreams>) {
        let mut live = HashSet::new();
        {
            let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
            for (id, spec, tls) in table.people.iter().flat_map(|p| p.providers()) {
                live.insert(id.to_string());
                let unchanged = watched
                    .get(id)
                    .is_some_and(|w| w.spec == *spec && same_tls(w.tls.as_ref(), tls));
                if !unchanged {
                    watched.insert(
                        id.to_string(),
                        Watched {
                            spec: spec.clone(),
                            tls: tls.cloned(),
                            last: None,
                            failing: false,
                            wanted: false,
                            asked: None,
                        },
                    );
                }
            }
            watched.retain(|id, _| live.contains(id));
        }
        self.store.retain(&live);
        if live.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.started.call_once(|| {
            let fetcher = self.clone();
            runtime.spawn(async move { fetcher.run(upstreams).await });
        });
        self.store.wake.notify_one();
    }

    /// Fetches what is due, then waits for the next due time or for a token to ask.
    async fn run(self: Arc<Self>, upstreams: Arc<Upstreams>) {
        loop {
            self.mark_wanted(self.store.take_wanted());
            let due = self.due();
            for (id, spec, tls) in due {
                let outcome = fetch(&upstreams, &spec, tls.as_deref()).await;
                self.finished(&id, outcome);
                // Whatever it found: the tokens waiting for it are verified again.
                self.store.fetch_done(&id);
            }
            let next = self.next_due();
            tokio::select! {
                () = self.store.wake.notified() => {}
                () = tokio::time::sleep_until(next) => {}
            }
        }
    }

    /// What a fetch of provider `id` found goes to the store (a failure keeps what it holds).
    fn finished(&self, id: &str, outcome: Result<Fetched, KeysError>) {
        let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        let Some(entry) = watched.get_mut(id) else {
            return; // gone from the table meanwhile
        };
        entry.last = Some(Instant::now());
        entry.wanted = false;
        match outcome {
            Ok(fetched) => {
                tracing::info!(provider = %id, keys = fetched.keys.len(), "identity provider keys loaded");
                entry.failing = false;
                self.store.set(id, fetched.keys);
                if let Some(login) = fetched.login {
                    self.store.set_login(id, login);
                }
            }
            Err(e) => {
                let detail = e.to_string();
                entry.failing = true;
                let held = self.store.get(id).is_some();
                tracing::warn!(provider = %id, %detail, keeping_previous_keys = held,
                    "fetching identity provider keys failed");
            }
        }
    }

    /// Remembers which providers tokens asked to be fetched again.
    fn mark_wanted(&self, wanted: HashSet<String>) {
        let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        for id in wanted {
            if let Some(entry) = watched.get_mut(&id) {
                entry.wanted = true;
            }
        }
    }

    /// Providers to fetch now: never fetched, past their refresh, failing and past the
    /// minimum interval since the last try, or wanted (a token with an unknown key) and past
    /// the minimum interval since the last fetch tokens alone made due (then this one is).
    fn due(&self) -> Vec<(String, IdentityProviderSpec, Option<Arc<TlsMaterial>>)> {
        let now = Instant::now();
        let past = |at: Option<Instant>, interval| {
            at.is_none_or(|at| now.saturating_duration_since(at) >= interval)
        };
        let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        watched
            .iter_mut()
            .filter_map(|(id, w)| {
                let routine = w.last.is_none()
                    || past(w.last, REFRESH)
                    || (w.failing && past(w.last, MIN_INTERVAL));
                // Only a fetch tokens alone made due counts against them.
                let asked = !routine && w.wanted && past(w.asked, MIN_INTERVAL);
                if asked {
                    w.asked = Some(now);
                }
                (routine || asked).then(|| (id.clone(), w.spec.clone(), w.tls.clone()))
            })
            .collect()
    }

    /// When the next fetch falls due without anyone asking.
    fn next_due(&self) -> Instant {
        let now = Instant::now();
        let watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        watched
            .values()
            .map(|w| match w.last {
                None => now,
                Some(last) => {
                    let mut next = last + REFRESH;
                    if w.failing {
                        next = next.min(last + MIN_INTERVAL);
                    }
                    if w.wanted {
                        next = next.min(w.asked.map_or(now, |asked| asked + MIN_INTERVAL));
                    }
                    next
                }
            })
            .min()
            .unwrap_or(now + REFRESH)
            .max(now + Duration::from_millis(10))
    }
}

fn same_tls(a: Option<&Arc<TlsMaterial>>, b: Option<&Arc<TlsMaterial>>) -> bool {
    a.map(|t| t.key) == b.map(|t| t.key)
}

/// What one fetch of a provider found.
pub struct Fetched {
    pub keys: SigningKeys,
    /// Its authorization and token endpoints, when discovery was read and names both.
    pub login: Option<LoginEndpoints>,
}

/// One provider's signing keys: discovery (unless `jwksUrl` is given and the provider is not
/// brokered), then the key set.
pub(crate) async fn fetch(
    upstreams: &Upstreams,
    spec: &IdentityProviderSpec,
    tls: Option<&TlsMaterial>,
) -> Result<Fetched, KeysError> {
    let get = |url: url::Url| async move { upstreams.get_json(&url, tls, MAX_DOCUMENT).await };
    let exchange = async {
        let mut login = None;
        let jwks_url = match &spec.jwks_url {
            Some(url) if spec.brokered.is_none() => url.clone(),
            configured => {
                let discovery = format!(
                    "{}/.well-known/openid-configuration",
                    spec.issuer.trim_end_matches('/')
                );
                let url = url::Url::parse(&discovery).map_err(KeysError::IssuerUrl)?;
                let document = get(url).await.map_err(KeysError::Discovery)?;
                // OpenID Connect Discovery 1.0, section 4.3: the document names its issuer.
                if document.get("issuer").and_then(Value::as_str) != Some(spec.issuer.as_str()) {
                    return Err(KeysError::DiscoveryContent(
                        "the document's issuer is not the configured issuer",
                    ));
                }
                let endpoint = |name: &str| {
                    document
                        .get(name)
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                };
                if let (Some(authorization), Some(token)) = (
                    endpoint("authorization_endpoint"),
                    endpoint("token_endpoint"),
                ) {
                    login = Some(LoginEndpoints {
                        authorization,
                        token,
                    });
                } else if spec.brokered.is_some() {
                    return Err(KeysError::DiscoveryContent(
                        "no authorization_endpoint and token_endpoint (brokered mode needs both)",
                    ));
                }
                match configured {
                    Some(url) => url.clone(),
                    None => {
                        endpoint("jwks_uri").ok_or(KeysError::DiscoveryContent("no jwks_uri"))?
                    }
                }
            }
        };
        let url = url::Url::parse(&jwks_url).map_err(KeysError::KeysUrl)?;
        let set = get(url).await.map_err(KeysError::KeySet)?;
        let keys =
            SigningKeys::parse(&set, false).map_err(|e| KeysError::KeySetContent(e.to_string()))?;
        if keys.is_empty() {
            return Err(KeysError::KeySetContent(
                "no signing key this gateway can verify with".into(),
            ));
        }
        Ok(Fetched { keys, login })
    };
    tokio::time::timeout(FETCH_TIMEOUT, exchange)
        .await
        .map_err(|_| KeysError::Timeout(FETCH_TIMEOUT))?
}

#[cfg(test)]
mod tests {
    //! The fetcher against a provider's key set served over HTTP, with keys made for the test,
    //! and tokens verified as every request verifies them (`scope::authenticate`).
    use super::*;
    use axum::http::{HeaderMap, HeaderValue, header};
    use base64::Engine;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use switchboard_core::metrics::Metrics;
    use switchboard_core::scope::{Resource, authenticate};
    use switchboard_snapshot::{SystemLookup, load};

    use crate::error::FetchError;

    /// A provider's key set on its own thread and runtime: serves what `published` holds (the
    /// test publishes a key as a provider does) and counts the fetches.
    struct Provider {
        url: String,
        published: Arc<Mutex<Value>>,
        fetches: Arc<AtomicUsize>,
    }

    fn provider(keys: Vec<Value>) -> Provider {
        let published = Arc::new(Mutex::new(json!({ "keys": keys })));
        let fetches = Arc::new(AtomicUsize::new(0));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}/jwks", listener.local_addr().unwrap());
        let (set, counted) = (published.clone(), fetches.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let app = axum::Router::new().route(
                    "/jwks",
                    axum::routing::get(move || {
                        counted.fetch_add(1, Ordering::SeqCst);
                        let set = set.lock().unwrap().clone();
                        async move { axum::Json(set) }
                    }),
                );
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        Provider {
            url,
            published,
            fetches,
        }
    }

    /// An ES256 key pair made for the test: its signing key and its public JWK under `kid`.
    fn key_pair(kid: &str) -> (jsonwebtoken::EncodingKey, Value) {
        let pair = rcgen::KeyPair::generate().unwrap();
        let point = pair.public_key_raw(); // 0x04 | x | y
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let jwk = json!({"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid,
                         "x": b64(&point[1..33]), "y": b64(&point[33..65])});
        let signing = jsonwebtoken::EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes());
        (signing.unwrap(), jwk)
    }

    fn token(key: &jsonwebtoken::EncodingKey, kid: &str, subject: &str) -> String {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(kid.into());
        let now = switchboard_core::remembered_tokens::unix_now();
        let claims = json!({"iss": "https://login.example/realms/corp", "aud": "switchboard",
                            "sub": subject, "exp": now + 300, "iat": now});
        jsonwebtoken::encode(&header, &claims, key).unwrap()
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let value = HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
        headers.insert(header::AUTHORIZATION, value);
        headers
    }

    /// A routing table with one provider whose keys are at `jwks_url`, and the fetcher that
    /// keeps them (as the upstream plane sets them up for each snapshot).
    fn served(jwks_url: &str) -> (Arc<RoutingTable>, Arc<KeyFetcher>) {
        let config = format!(
            r#"
identityProviders:
- {{name: corp, issuer: "https://login.example/realms/corp", audiences: [switchboard], jwksUrl: "{jwks_url}", algorithms: [ES256]}}
servers:
- {{name: a, url: "http://a/mcp"}}
keys:
- {{name: alice, secret: s-alice, servers: [a], people: [{{provider: corp, subjects: [alice]}}]}}
"#
        );
        let mut table = RoutingTable::build(&load(&config, &SystemLookup).unwrap()).unwrap();
        let fetcher = Arc::new(KeyFetcher::default());
        table.identity_keys = fetcher.store.clone();
        let upstreams = Arc::new(Upstreams::new());
        upstreams.set_table(&table);
        fetcher.set_table(&table, upstreams);
        (Arc::new(table), fetcher)
    }

    /// What failed is told by the error's kind, never read back from its words (the operator's
    /// probe reports `DiscoveryFailed` or `KeysNotLoaded` by [`KeysError::in_discovery`]).
    #[tokio::test]
    async fn a_failed_fetch_says_whether_discovery_or_the_key_set_failed() {
        let empty = provider(vec![]);
        let (table, _) = served(&empty.url);
        let upstreams = Upstreams::new();
        upstreams.set_table(&table);
        let providers: Vec<_> = table.people.iter().flat_map(|p| p.providers()).collect();
        let (_, spec, _) = providers.first().expect("the table's provider");
        // `jwksUrl` without brokering: no discovery, so an empty key set is the key set's fault.
        let e = fetch(&upstreams, spec, None)
            .await
            .err()
            .expect("no usable key");
        assert!(matches!(e, KeysError::KeySetContent(_)), "{e}");
        assert!(!e.in_discovery());
        assert_eq!(
            e.to_string(),
            "key set: no signing key this gateway can verify with"
        );
        // Without `jwksUrl` the discovery document is read first; nobody serves it.
        let mut discovering = (*spec).clone();
        discovering.jwks_url = None;
        discovering.issuer = empty.url.trim_end_matches("/jwks").to_string();
        let e = fetch(&upstreams, &discovering, None)
            .await
            .err()
            .expect("no discovery");
        assert!(
            matches!(e, KeysError::Discovery(FetchError::Status(404))),
            "{e:?}"
        );
        assert!(e.in_discovery());
        assert_eq!(e.to_string(), "discovery: HTTP 404");
    }

    /// Issue 35: a key the provider has just published works on its first use (the token waits
    /// for the fetch its unknown key id asks for); tokens naming keys nobody publishes cost the
    /// provider one fetch per `MIN_INTERVAL` however many arrive, each refused after it.
    #[tokio::test]
    async fn a_newly_published_key_works_at_once_and_made_up_ones_are_fetched_for_once() {
        let (first, first_jwk) = key_pair("k1");
        let provider = provider(vec![first_jwk.clone()]);
        let (table, fetcher) = served(&provider.url);
        let metrics = Metrics::default();
        let call =
            |token: String| authenticate(table.clone(), bearer(&token), &metrics, Resource::Mcp);
        // The first call waits for the first fetch (no keys yet) rather than being refused.
        let alice = call(token(&first, "k1", "alice")).await;
        assert_eq!(alice.unwrap().person.unwrap().subject, "alice");
        assert_eq!(provider.fetches.load(Ordering::SeqCst), 1);

        // The provider publishes a second key and signs with it.
        let (second, second_jwk) = key_pair("k2");
        *provider.published.lock().unwrap() = json!({ "keys": [first_jwk, second_jwk] });
        let alice = call(token(&second, "k2", "alice")).await;
        assert!(
            alice.is_ok(),
            "the new key on its first use: {:?}",
            alice.err()
        );
        assert_eq!(
            provider.fetches.load(Ordering::SeqCst),
            2,
            "one fetch for it"
        );

        // A flood of tokens with made-up key ids, right after a fetch a token asked for: they
        // wait for the next fetch tokens may cause (one MIN_INTERVAL later), all for the same
        // one, and are refused after it.
        let (forger, _) = key_pair("unused");
        let made_up: Vec<_> = (0..200)
            .map(|i| call(token(&forger, &format!("made-up-{i}"), "alice")))
            .collect();
        for refused in futures_util::future::join_all(made_up).await {
            let refused = refused.err().expect("a key nobody publishes stays unknown");
            assert!(
                refused.to_string().contains("does not publish"),
                "{refused}"
            );
        }
        assert_eq!(
            provider.fetches.load(Ordering::SeqCst),
            3,
            "200 made-up key ids cost one fetch"
        );
        assert!(fetcher.store.take_wanted().is_empty());
    }
}
