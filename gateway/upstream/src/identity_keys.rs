//! Fetching identity providers' signing keys into the store the routing tables verify people's
//! tokens with ([`switchboard_core::people::IdentityKeys`]).
//!
//! For each provider of the table being served: OIDC discovery (`<issuer>/.well-known/
//! openid-configuration`, whose `issuer` must be the configured one), then its `jwks_uri` (or
//! the provider's `jwksUrl`), with the provider's TLS settings and under the address policy.
//! Keys are fetched when a provider first appears, every [`REFRESH`] after, and when a token
//! names a key id the store does not hold (a rotation), at most once per [`MIN_INTERVAL`] per
//! provider. A failed fetch keeps the keys already held: a provider that is down does not stop
//! people whose tokens it already signed, nor keys and ServiceAccount tokens at all.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use switchboard_core::jwks::SigningKeys;
use switchboard_core::people::{IdentityKeys, LoginEndpoints};
use switchboard_core::table::RoutingTable;
use switchboard_snapshot::{IdentityProviderSpec, TlsMaterial};
use tokio::time::Instant;

use crate::client::Upstreams;

/// How often keys are fetched again when nothing asks sooner.
pub const REFRESH: Duration = Duration::from_secs(300);
/// The least time between two fetches of one provider's keys, whatever asks.
pub const MIN_INTERVAL: Duration = Duration::from_secs(10);
/// One fetch (discovery and the key set) gives up after this.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
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
    /// since the last fetch (kept until then, not dropped).
    wanted: bool,
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
                let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
                let Some(entry) = watched.get_mut(&id) else {
                    continue; // gone from the table meanwhile
                };
                entry.last = Some(Instant::now());
                entry.wanted = false;
                match outcome {
                    Ok(fetched) => {
                        tracing::info!(provider = %id, keys = fetched.keys.len(), "identity provider keys loaded");
                        entry.failing = false;
                        self.store.set(&id, fetched.keys);
                        if let Some(login) = fetched.login {
                            self.store.set_login(&id, login);
                        }
                    }
                    Err(detail) => {
                        entry.failing = true;
                        let held = self.store.get(&id).is_some();
                        tracing::warn!(provider = %id, %detail, keeping_previous_keys = held,
                            "fetching identity provider keys failed");
                    }
                }
            }
            let next = self.next_due();
            tokio::select! {
                () = self.store.wake.notified() => {}
                () = tokio::time::sleep_until(next) => {}
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

    /// Providers to fetch now: never fetched, wanted (a token with an unknown key) or failing
    /// and past the minimum interval, or past their refresh.
    fn due(&self) -> Vec<(String, IdentityProviderSpec, Option<Arc<TlsMaterial>>)> {
        let now = Instant::now();
        let watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        watched
            .iter()
            .filter(|(_, w)| match w.last {
                None => true,
                Some(last) => {
                    let since = now.saturating_duration_since(last);
                    since >= REFRESH || ((w.failing || w.wanted) && since >= MIN_INTERVAL)
                }
            })
            .map(|(id, w)| (id.clone(), w.spec.clone(), w.tls.clone()))
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
                Some(last) if w.failing || w.wanted => last + MIN_INTERVAL,
                Some(last) => last + REFRESH,
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
pub async fn fetch(
    upstreams: &Upstreams,
    spec: &IdentityProviderSpec,
    tls: Option<&TlsMaterial>,
) -> Result<Fetched, String> {
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
                let url = url::Url::parse(&discovery).map_err(|e| format!("issuer: {e}"))?;
                let document = get(url).await.map_err(|e| format!("discovery: {e}"))?;
                // OpenID Connect Discovery 1.0, section 4.3: the document names its issuer.
                if document.get("issuer").and_then(Value::as_str) != Some(spec.issuer.as_str()) {
                    return Err(
                        "discovery: the document's issuer is not the configured issuer".into(),
                    );
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
                    return Err(
                        "discovery: no authorization_endpoint and token_endpoint (brokered mode needs both)"
                            .into(),
                    );
                }
                match configured {
                    Some(url) => url.clone(),
                    None => endpoint("jwks_uri").ok_or("discovery: no jwks_uri")?,
                }
            }
        };
        let url = url::Url::parse(&jwks_url).map_err(|e| format!("jwks_uri: {e}"))?;
        let set = get(url).await.map_err(|e| format!("key set: {e}"))?;
        let keys = SigningKeys::parse(&set, false).map_err(|e| format!("key set: {e}"))?;
        if keys.is_empty() {
            return Err("key set: no signing key this gateway can verify with".into());
        }
        Ok(Fetched { keys, login })
    };
    tokio::time::timeout(FETCH_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no answer within {}s", FETCH_TIMEOUT.as_secs()))?
}
