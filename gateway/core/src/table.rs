//! The routing table: an immutable, indexed view of one snapshot. A new snapshot builds a new
//! table that is swapped in whole; a request keeps the table it started with until it ends.

// The table's maps are looked up on every call by keys the snapshot chose (not the caller):
// foldhash, not SipHash, which costs several thousand instructions per call for nothing here.
use foldhash::HashMap;
use std::sync::Arc;

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use switchboard_snapshot::TlsMaterial;
use switchboard_snapshot::{
    FieldError, GatewaySettings, ModelProvider, ModelSpec, NetworkPolicy, ScopedPolicy, ServerSpec,
    Snapshot, SnapshotError, key_hash, resolved_value,
};

use crate::address_policy::ServerScope;
use crate::credentials::UpstreamHeaders;
pub use crate::key::Key;
use crate::limits::Limiters;
use crate::memo::TextMemo;
use crate::metrics::{ServerName, UpstreamSeries};
use crate::people::{IdentityKeys, People};
use crate::session::SessionSealer;
use crate::virtual_server::VirtualServer;
use crate::workload_identity::{Bindings, TokenVerifier};

pub use crate::server::{Endpoint, OpenApiTools, Server};

/// How many keys the table's memo holds at most (a table's keys, unless it has more).
const PRESENTED_KEYS: usize = 65_536;

pub struct RoutingTable {
    pub generation: u64,
    pub settings: GatewaySettings,
    /// In the snapshot's order, which is the deterministic order of merged listings.
    pub servers: Vec<Arc<Server>>,
    by_prefix: HashMap<String, usize>,
    by_id: HashMap<String, usize>,
    keys: HashMap<[u8; 32], Arc<Key>>,
    /// The keys callers presented and the table found, so a key presented again skips SHA-256
    /// (about 3,500 instructions a call where the CPU has no SHA extensions, and under
    /// callgrind, which never uses them; the memo's lookup costs about 300). An entry exists
    /// only for a key of this table: a key has one text.
    presented: TextMemo<Arc<Key>>,
    pub sealer: SessionSealer,
    /// LLM models, in the snapshot's order (the order `/v1/models` lists them in).
    pub models: Vec<Arc<Model>>,
    /// Every name a client may send, to its model.
    model_by_name: HashMap<String, usize>,
    /// ServiceAccount tokens in place of keys, when the snapshot accepts them.
    pub(crate) service_accounts: Option<ServiceAccountAuth>,
    /// People signed in with an identity provider, when the snapshot names one.
    pub people: Option<People>,
    /// The identity providers' signing keys. A table built alone has a store of its own; the
    /// gateway gives every table it serves the one store its fetcher fills (`Gateway::apply`),
    /// which outlives snapshots.
    pub identity_keys: Arc<IdentityKeys>,
    /// Seals what the gateway issues as the authorization server of a brokered provider.
    pub broker: Option<crate::broker::BrokerSealer>,
    /// Seals the connect flow of people's own accounts and the connections page's steps, when a
    /// server is `userOAuth` or people sign in through the gateway (brokered).
    pub account_sealer: Option<crate::broker::BrokerSealer>,
    /// People's sign-outs read lately from the shared store (`sign_out.rs`).
    pub sign_outs: crate::sign_out::SignOuts,
    /// The limiters of keys and servers that have limits (taken over from the table before
    /// where the limits did not change, see `Gateway::apply` in the gateway crate).
    pub limiters: Limiters,
    /// The shared store (`gateway.store`). A table built alone has an empty embedded one; the
    /// gateway gives every table the store its settings name, kept across tables with the same
    /// settings (`Gateway::apply`), so a reload loses nothing it holds.
    pub store: Arc<switchboard_store::Store>,
    /// Which addresses upstreams may have (`gateway.upstreamNetworks`), checked at connect time.
    pub networks: NetworkPolicy,
    /// `gateway.upstreamTls`, parsed: authorities every upstream connection trusts.
    pub upstream_roots: UpstreamRoots,
    /// Virtual servers, in the snapshot's order.
    pub virtual_servers: Vec<Arc<VirtualServer>>,
    virtual_by_path: HashMap<String, usize>,
}

/// How ServiceAccount tokens authenticate: the issuer's verifier, and which key each
/// ServiceAccount's token stands for.
#[derive(Debug)]
pub(crate) struct ServiceAccountAuth {
    pub verifier: TokenVerifier,
    pub bindings: Bindings<Arc<Key>>,
}

/// An LLM model as the gateway calls it.
#[derive(Debug)]
pub struct Model {
    pub spec: ModelSpec,
    /// Where requests of the model's wire format go (`.../v1/messages`, `.../chat/completions`).
    pub endpoint: url::Url,
    /// The provider's cheap listing (`.../v1/models`, `.../models`), for probes.
    pub models_url: url::Url,
    /// The provider credential as a header, composed once.
    pub credential: Option<(http::HeaderName, http::HeaderValue)>,
    /// The id as a metric label.
    pub metric_name: ServerName,
    /// Its `tls`, parsed.
    pub tls: Option<Arc<TlsMaterial>>,
}

impl Model {
    pub fn id(&self) -> &str {
        self.spec.id()
    }
}

impl std::fmt::Debug for RoutingTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoutingTable")
            .field("generation", &self.generation)
            .field("servers", &self.servers.len())
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl RoutingTable {
    /// Builds the table from a snapshot that has passed `switchboard_snapshot::validate`; what
    /// only composing the upstream headers can find (e.g. a `basic` secret without `:`) is
    /// reported with the field path too.
    pub fn build(snapshot: &Snapshot) -> Result<RoutingTable, SnapshotError> {
        let mut errors = Vec::new();
        let mut servers: Vec<Arc<Server>> = Vec::with_capacity(snapshot.servers.len());
        for (i, spec) in snapshot.servers.iter().enumerate() {
            let url = url::Url::parse(&spec.url);
            let headers = UpstreamHeaders::for_server(spec);
            let scope = match spec.upstream_policy.as_ref().map(ScopedPolicy::parse) {
                Some(Ok(policy)) => Some(ServerScope {
                    key: hash_of(&spec.upstream_policy),
                    policy: Arc::new(policy),
                }),
                Some(Err(e)) => {
                    errors.extend(e.into_iter().map(|(field, message)| FieldError {
                        path: format!("servers[{i}].upstreamPolicy.{field}"),
                        message,
                    }));
                    None
                }
                None => None,
            };
            let tls = spec.tls.as_ref().and_then(|tls| {
                TlsMaterial::parse(tls, &format!("servers[{i}].tls"))
                    .map_err(|e| errors.extend(e))
                    .ok()
                    .map(Arc::new)
            });
            let openapi = spec.openapi.as_ref().and_then(|o| {
                openapi_tools(o, &spec.url, &format!("servers[{i}].openapi"))
                    .map_err(|e| errors.push(e))
                    .ok()
            });
            let metric_name = ServerName(spec.id().into());
            match (url, headers) {
                (Ok(url), Ok(headers)) => servers.push(Arc::new(Server {
                    tls,
                    openapi,
                    upstream_series: UpstreamSeries::new(metric_name.clone()),
                    metric_name,
                    revision: spec_revision(spec),
                    spec: spec.clone(),
                    endpoint: Endpoint::of(&url),
                    url,
                    headers,
                    scope,
                })),
                (Err(e), _) => errors.push(FieldError {
                    path: format!("servers[{i}].url"),
                    message: e.to_string(),
                }),
                (_, Err(e)) => errors.push(FieldError {
                    path: format!("servers[{i}].{}", e.field),
                    message: e.message,
                }),
            }
        }
        let networks = NetworkPolicy::parse(&snapshot.gateway.upstream_networks).map_err(|e| {
            e.into_iter()
                .map(|(field, message)| FieldError {
                    path: format!("gateway.upstreamNetworks.{field}"),
                    message,
                })
                .collect::<Vec<_>>()
        });
        let networks = match networks {
            Ok(networks) => networks,
            Err(e) => {
                errors.extend(e);
                NetworkPolicy::default()
            }
        };
        let upstream_roots = UpstreamRoots::parse(&snapshot.gateway).unwrap_or_else(|e| {
            errors.push(e);
            UpstreamRoots::default()
        });
        if !errors.is_empty() {
            return Err(SnapshotError { errors });
        }
        let by_prefix = servers
            .iter()
            .enumerate()
            .map(|(i, s)| (s.prefix().to_string(), i))
            .collect();
        let by_id = servers
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id().to_string(), i))
            .collect();
        let keys: HashMap<[u8; 32], Arc<Key>> = snapshot
            .keys
            .iter()
            .filter_map(Key::from_spec)
            .map(|k| (k.digest, Arc::new(k)))
            .collect();
        let virtual_servers: Vec<Arc<VirtualServer>> = snapshot
            .virtual_servers
            .iter()
            .filter_map(|spec| VirtualServer::build(spec, &servers).map(Arc::new))
            .collect();
        let virtual_by_path = virtual_servers
            .iter()
            .enumerate()
            .map(|(i, v)| (v.spec.path().to_string(), i))
            .collect();
        let service_accounts = service_account_auth(snapshot, &keys)?;
        let people = People::build(snapshot, &keys).map_err(|errors| SnapshotError { errors })?;
        let models = build_models(snapshot)?;
        let model_by_name = models
            .iter()
            .enumerate()
            .flat_map(|(i, m)| m.spec.client_names().map(move |n| (n.to_string(), i)))
            .collect();
        let session_secret = snapshot
            .gateway
            .session_key
            .as_ref()
            .and_then(resolved_value)
            .map(str::to_owned);
        // The connect flow of people's own accounts (`accounts.rs`), where a server takes them,
        // and the connections page, where people signed in through the gateway also sign out.
        let brokered = people.as_ref().and_then(People::brokered).is_some();
        let account_sealer = (brokered || servers.iter().any(|s| s.spec.auth.is_user_account()))
            .then(|| crate::broker::BrokerSealer::new(session_secret.as_deref()));
        Ok(RoutingTable {
            networks,
            upstream_roots,
            generation: snapshot.generation,
            settings: snapshot.gateway.clone(),
            servers,
            by_prefix,
            by_id,
            keys,
            presented: TextMemo::new(PRESENTED_KEYS),
            sealer: SessionSealer::new(session_secret.as_deref(), snapshot.gateway.session_ttl),
            broker: people
                .as_ref()
                .and_then(People::brokered)
                .map(|_| crate::broker::BrokerSealer::new(session_secret.as_deref())),
            account_sealer,
            sign_outs: crate::sign_out::SignOuts::default(),
            models,
            model_by_name,
            service_accounts,
            people,
            identity_keys: Arc::default(),
            limiters: Limiters::for_snapshot(snapshot),
            store: Arc::new(switchboard_store::Store::in_memory()),
            virtual_servers,
            virtual_by_path,
        })
    }

    /// The virtual server served at `/mcp/<path>`.
    pub(crate) fn virtual_by_path(&self, path: &str) -> Option<&Arc<VirtualServer>> {
        self.virtual_by_path
            .get(path)
            .map(|&i| &self.virtual_servers[i])
    }

    /// The model a client's `model` value names.
    pub fn model_by_name(&self, name: &str) -> Option<&Arc<Model>> {
        self.model_by_name.get(name).map(|&i| &self.models[i])
    }

    pub fn server_by_prefix(&self, prefix: &str) -> Option<&Arc<Server>> {
        self.by_prefix.get(prefix).map(|&i| &self.servers[i])
    }

    pub fn server_by_id(&self, id: &str) -> Option<&Arc<Server>> {
        self.by_id.get(id).map(|&i| &self.servers[i])
    }

    /// Finds the key a caller presented. The map lookup is by SHA-256 digest, so timing reveals
    /// nothing about stored keys; the final comparison is constant-time all the same. A key
    /// found once is found again through `presented` without the digest.
    pub fn authenticate(&self, presented: &str) -> Option<Arc<Key>> {
        self.presented
            .found_or_check(presented, || {
                let digest = key_hash::key_digest(presented);
                let key = self.keys.get(&digest).ok_or(())?;
                bool::from(key.digest.ct_eq(&digest))
                    .then(|| key.clone())
                    .ok_or(())
            })
            .ok()
    }

    pub fn key_count(&self) -> usize {
        self.keys.len()
    }
}

fn service_account_auth(
    snapshot: &Snapshot,
    keys: &HashMap<[u8; 32], Arc<Key>>,
) -> Result<Option<ServiceAccountAuth>, SnapshotError> {
    let Some(settings) = &snapshot.gateway.service_account_tokens else {
        return Ok(None);
    };
    let verifier = TokenVerifier::new(settings).map_err(|e| SnapshotError {
        errors: vec![FieldError {
            path: "gateway.serviceAccountTokens.jwks".into(),
            message: e.to_string(),
        }],
    })?;
    let mut bindings = Bindings::default();
    for spec in &snapshot.keys {
        let key = spec
            .hash
            .as_deref()
            .and_then(key_hash::parse_hash)
            .and_then(|digest| keys.get(&digest));
        if let Some(key) = key {
            for account in &spec.service_accounts {
                bindings.bind(account, key.clone());
            }
        }
    }
    Ok(Some(ServiceAccountAuth { verifier, bindings }))
}

fn build_models(snapshot: &Snapshot) -> Result<Vec<Arc<Model>>, SnapshotError> {
    let mut errors = Vec::new();
    let mut models = Vec::with_capacity(snapshot.models.len());
    for (i, spec) in snapshot.models.iter().enumerate() {
        let tls = spec.tls.as_ref().and_then(|tls| {
            TlsMaterial::parse(tls, &format!("models[{i}].tls"))
                .map_err(|e| errors.extend(e))
                .ok()
                .map(Arc::new)
        });
        match model_urls(spec) {
            Ok((endpoint, models_url)) => {
                let credential = spec
                    .api_key
                    .as_ref()
                    .and_then(resolved_value)
                    .and_then(|key| provider_credential(spec.provider, key));
                models.push(Arc::new(Model {
                    metric_name: ServerName(spec.id().into()),
                    spec: spec.clone(),
                    endpoint,
                    models_url,
                    credential,
                    tls,
                }));
            }
            Err(e) => errors.push(FieldError {
                path: format!("models[{i}].baseUrl"),
                message: format!("not a valid URL: {e}"),
            }),
        }
    }
    if errors.is_empty() {
        Ok(models)
    } else {
        Err(SnapshotError { errors })
    }
}

/// `gateway.upstreamTls.caBundle`, parsed; `key` identifies it (0: none).
#[derive(Debug, Clone, Default)]
pub struct UpstreamRoots {
    pub certificates: Vec<rustls_pki_types::CertificateDer<'static>>,
    pub key: u64,
}

impl UpstreamRoots {
    fn parse(settings: &GatewaySettings) -> Result<UpstreamRoots, FieldError> {
        let Some(bundle) = settings
            .upstream_tls
            .as_ref()
            .and_then(|t| t.ca_bundle.as_ref())
        else {
            return Ok(UpstreamRoots::default());
        };
        let mut hash = Sha256::new();
        let certificates = switchboard_snapshot::tls::certificates(
            bundle,
            "gateway.upstreamTls.caBundle",
            &mut hash,
        )?;
        let digest = hash.finalize();
        Ok(UpstreamRoots {
            certificates,
            key: u64::from_le_bytes(digest[..8].try_into().unwrap_or([1; 8])).max(1),
        })
    }
}

/// The provider's endpoints under a base URL, as the providers' own SDKs compose them.
fn model_urls(spec: &ModelSpec) -> Result<(url::Url, url::Url), url::ParseError> {
    let base = spec.base_url.trim_end_matches('/');
    let (endpoint, models) = match spec.provider {
        ModelProvider::Anthropic => (format!("{base}/v1/messages"), format!("{base}/v1/models")),
        ModelProvider::Openai => (format!("{base}/chat/completions"), format!("{base}/models")),
    };
    Ok((url::Url::parse(&endpoint)?, url::Url::parse(&models)?))
}

/// `x-api-key: <key>` for Anthropic, `Authorization: Bearer <key>` for OpenAI.
fn provider_credential(
    provider: ModelProvider,
    key: &str,
) -> Option<(http::HeaderName, http::HeaderValue)> {
    let (name, value) = match provider {
        ModelProvider::Anthropic => (http::HeaderName::from_static("x-api-key"), key.to_string()),
        ModelProvider::Openai => (http::header::AUTHORIZATION, format!("Bearer {key}")),
    };
    let mut value = http::HeaderValue::from_str(&value).ok()?;
    value.set_sensitive(true);
    Some((name, value))
}

/// An OpenAPI server's tools: an inline document compiled now (a document that cannot be read
/// refuses the snapshot, naming the document path), a fetched one later.
fn openapi_tools(
    spec: &switchboard_snapshot::OpenApiSpec,
    base: &str,
    field: &str,
) -> Result<OpenApiTools, FieldError> {
    if let Some(url) = &spec.document_url {
        let joined = url::Url::parse(base).and_then(|b| b.join(url));
        return joined.map(OpenApiTools::Fetched).map_err(|e| FieldError {
            path: format!("{field}.documentUrl"),
            message: format!("not a valid URL: {e}"),
        });
    }
    let text = spec
        .document
        .as_ref()
        .and_then(resolved_value)
        .unwrap_or_default();
    let compiled = switchboard_openapi::compile(text, spec).map_err(|e| FieldError {
        path: format!("{field}.document"),
        message: e.to_string(),
    })?;
    for problem in &compiled.problems {
        tracing::warn!(field, %problem, "an OpenAPI operation is left out");
    }
    Ok(OpenApiTools::Compiled(Arc::new(compiled)))
}

/// A hash of everything in a server's spec: two specs with equal revisions talk to the upstream
/// identically.
fn spec_revision(spec: &ServerSpec) -> u64 {
    hash_of(spec)
}

fn hash_of(value: &impl serde::Serialize) -> u64 {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    u64::from_le_bytes(digest[..8].try_into().unwrap_or([0; 8]))
}

/// The gateway's base URL as clients reach it: `gateway.publicUrl`, else from `Host`.
pub fn base_url(settings: &GatewaySettings, headers: &HeaderMap) -> String {
    if let Some(url) = &settings.public_url {
        return url.trim_end_matches('/').to_string();
    }
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    format!("http://{host}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;
    use switchboard_snapshot::{SystemLookup, load};

    fn table(yaml: &str) -> RoutingTable {
        RoutingTable::build(&load(yaml, &SystemLookup).expect("valid test config")).unwrap()
    }

    const TENANCY: &str = r#"
servers:
- {name: own, namespace: team-a, url: "http://x/mcp", accessGroups: [g]}
- {name: shared, namespace: team-b, url: "http://x/mcp", allowedNamespaces: [team-a], allowAllKeys: true}
- {name: closed, namespace: team-b, url: "http://x/mcp", allowAllKeys: true}
- {name: grouped, namespace: team-b, url: "http://x/mcp", accessGroups: [g]}
keys:
- {name: a, namespace: team-a, secret: key-a, accessGroups: [g]}
"#;

    #[test]
    fn tenancy_admits_own_namespace_and_listed_ones_only() {
        let t = table(TENANCY);
        let key = t.authenticate("key-a").expect("key-a authenticates");
        let reach = |id: &str| key.reaches(&t.server_by_id(id).unwrap().spec);
        assert!(reach("own"), "own namespace, shared group");
        assert!(reach("shared"), "other namespace that admits team-a");
        assert!(
            !reach("closed"),
            "other namespace that does not admit team-a"
        );
        assert!(!reach("grouped"), "shared group does not override tenancy");
    }

    #[test]
    fn keys_reach_models_by_name_group_or_openness_under_tenancy() {
        let t = table(
            r#"
models:
- {name: named, namespace: team-a, provider: anthropic, baseUrl: "http://p"}
- {name: grouped, namespace: team-a, provider: openai, baseUrl: "http://p/v1", accessGroups: [g]}
- {name: open, namespace: team-b, provider: anthropic, baseUrl: "http://p", allowAllKeys: true, allowedNamespaces: [team-a]}
- {name: closed, namespace: team-b, provider: anthropic, baseUrl: "http://p", allowAllKeys: true}
- {name: other, namespace: team-a, provider: anthropic, baseUrl: "http://p"}
keys:
- {name: a, namespace: team-a, secret: key-a, accessGroups: [g], models: [named]}
"#,
        );
        let key = t.authenticate("key-a").unwrap();
        let reach = |name: &str| key.reaches_model(&t.model_by_name(name).unwrap().spec);
        assert!(reach("named") && reach("grouped") && reach("open"));
        assert!(
            !reach("closed"),
            "another namespace that does not admit team-a"
        );
        assert!(!reach("other"), "neither named nor grouped");
        let grouped = t.model_by_name("grouped").unwrap();
        assert_eq!(grouped.endpoint.as_str(), "http://p/v1/chat/completions");
        assert_eq!(
            t.model_by_name("named").unwrap().endpoint.as_str(),
            "http://p/v1/messages"
        );
    }

    #[test]
    fn unknown_and_expired_keys() {
        let t = table(
            "keys:\n- {name: old, secret: k-old, expiresAt: '2001-01-01T00:00:00Z'}\n- {name: new, secret: k-new}\n",
        );
        assert!(t.authenticate("nope").is_none());
        assert!(
            t.authenticate("k-old")
                .unwrap()
                .is_expired(SystemTime::now())
        );
        assert!(
            !t.authenticate("k-new")
                .unwrap()
                .is_expired(SystemTime::now())
        );
    }

    #[test]
    fn a_key_found_once_is_found_again_from_the_memo_and_only_found_keys_are_kept() {
        let t = table("keys:\n- {name: a, secret: k-a}\n- {name: b, secret: k-b}\n");
        let kept = |t: &RoutingTable| t.presented.len();
        assert!(t.authenticate("nope").is_none());
        assert_eq!(kept(&t), 0, "a text that matched no key is not kept");
        let first = t.authenticate("k-a").expect("k-a authenticates");
        assert_eq!((first.name.as_str(), kept(&t)), ("a", 1));
        let again = t.authenticate("k-a").expect("k-a again");
        assert!(Arc::ptr_eq(&first, &again));
        assert!(
            t.authenticate("k-a ").is_none(),
            "another text is another key"
        );
        assert!(t.authenticate("nope").is_none());
        assert_eq!(
            t.authenticate("k-b").map(|k| k.name.clone()),
            Some("b".into())
        );
        assert_eq!(kept(&t), 2);
        // The memo is what answers a text found before: an entry put there by hand is found
        // without any digest matching.
        t.presented.plant("planted", first.clone());
        assert!(
            t.authenticate("planted")
                .is_some_and(|k| Arc::ptr_eq(&k, &first))
        );
        // Each table draws its own hash key, so ids from one table mean nothing in another.
        let other = table("keys:\n- {name: a, secret: k-a}\n");
        assert!(!other.presented.same_id(&t.presented, "k-a"));
        assert!(other.authenticate("planted").is_none());
    }

    #[test]
    fn key_tool_filter_sees_prefixed_names() {
        let t = table(
            "servers:\n- {name: w, url: 'http://x/mcp', allowAllKeys: true}\nkeys:\n- {name: k, secret: s, tools: {allow: ['w__get_*']}}\n",
        );
        let key = t.authenticate("s").unwrap();
        let w = &t.server_by_prefix("w").unwrap().spec;
        assert!(key.admits_tool(w, "get_weather"));
        assert!(!key.admits_tool(w, "set_weather"));
    }

    #[test]
    fn revision_changes_with_the_spec() {
        let a = table("servers:\n- {name: w, url: 'http://x/mcp'}\n");
        let b = table("servers:\n- {name: w, url: 'http://y/mcp'}\n");
        assert_ne!(
            a.server_by_id("w").unwrap().revision,
            b.server_by_id("w").unwrap().revision
        );
    }
}
