//! The snapshot schema: what a gateway needs to serve, and nothing it has to ask anyone for.
//!
//! The operator renders this from `McpServer`/`McpKey` resources with secrets resolved; a person
//! writes the same schema as a standalone config file, with secrets inline or taken from the
//! environment or files (see [`crate::secret::SecretSource`]).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::names::default_namespace;
use crate::secret::SecretSource;

/// The schema version this crate reads and writes. Bumped on incompatible changes only.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Snapshot {
    /// Schema version; must be [`SCHEMA_VERSION`].
    #[serde(default = "default_schema_version")]
    pub version: u32,
    /// Monotonic revision set by whoever produced the snapshot (the operator, or 0 for a file).
    #[serde(default)]
    pub generation: u64,
    #[serde(default)]
    pub gateway: GatewaySettings,
    #[serde(default)]
    pub servers: Vec<ServerSpec>,
    #[serde(default)]
    pub keys: Vec<KeySpec>,
    /// LLM models the gateway fronts on `/v1/messages` and `/v1/chat/completions`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelSpec>,
    /// OpenID Connect providers whose people sign in (`keys[].people` says with which scope).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub identity_providers: Vec<crate::identity::IdentityProviderSpec>,
    /// Tools of several servers presented as one endpoint (`/mcp/<path>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub virtual_servers: Vec<VirtualServerSpec>,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            version: SCHEMA_VERSION,
            generation: 0,
            gateway: GatewaySettings::default(),
            servers: Vec::new(),
            keys: Vec::new(),
            models: Vec::new(),
            identity_providers: Vec::new(),
            virtual_servers: Vec::new(),
        }
    }
}

fn default_schema_version() -> u32 {
    SCHEMA_VERSION
}

/// The `gateway:` section: what every replica applies, whatever it serves.
// Its JSON Schema is what the chart's values schema checks `gateway.settings` with (the
// operator's `chart_schema`): the bounds `validate` enforces are stated in `#[schemars]` too,
// so Helm refuses what the operator would refuse at start.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GatewaySettings {
    /// Key that seals legacy-era `Mcp-Session-Id` values. Every replica that shares it accepts
    /// the others' sessions. Any string; it is stretched with SHA-256 to a 256-bit key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<SecretSource>,
    /// How long a sealed legacy session stays valid.
    #[serde(default = "default_session_ttl", with = "humantime_serde")]
    #[schemars(schema_with = "crate::schema::duration")]
    pub session_ttl: Duration,
    /// Largest request body accepted from a client, in bytes.
    #[serde(default = "default_max_body_bytes")]
    #[schemars(range(min = 1))]
    pub max_body_bytes: usize,
    /// Most pages one upstream listing walk follows before it stops with what it has.
    #[serde(default = "default_listing_page_cap")]
    #[schemars(range(min = 1))]
    pub listing_page_cap: u32,
    /// `Host` names (with optional port) accepted besides loopback; protects against DNS rebinding.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted from browsers besides loopback origins.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// The gateway's external base URL (e.g. `https://mcp.example.com`), used in the
    /// `WWW-Authenticate` challenges and protected-resource metadata it serves. Without it, the
    /// request's `Host` is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::schema::HTTP_URL))]
    pub public_url: Option<String>,
    /// How long a tool listing of one server stays fresh before a list request refreshes it.
    #[serde(default = "default_listing_ttl", with = "humantime_serde")]
    #[schemars(schema_with = "crate::schema::duration")]
    pub listing_ttl: Duration,
    /// Kubernetes ServiceAccount tokens accepted in place of a key, for the keys that bind
    /// ServiceAccounts (`keys[].serviceAccounts`). Verified offline against these issuer keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_tokens: Option<ServiceAccountTokens>,
    /// Which addresses upstreams (servers, token endpoints, models) may have; by default
    /// link-local and cloud metadata addresses are refused (`networks.rs`).
    #[serde(default)]
    pub upstream_networks: crate::networks::UpstreamNetworks,
    /// What every upstream connection trusts besides the public roots (`tls.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_tls: Option<crate::tls::GatewayTls>,
    /// Where the little state that must be shared lives (people's upstream accounts, limits
    /// counted across replicas, single-use codes): in this process by default, in Redis for
    /// several replicas.
    #[serde(default, skip_serializing_if = "StoreSettings::is_default")]
    pub store: StoreSettings,
    /// The policy service every server's tool calls are checked with, unless the server names
    /// its own (`servers[].policy`). Never on a call's path unless configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyHook>,
}

/// `gateway.store`: one backend (`memory`, the default, or `redis`) and the key its values are
/// sealed with. Everything else the gateway keeps stays in what clients hold.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoreSettings {
    /// The embedded store: this process only (one replica). With `file`, written there (sealed)
    /// so a restart keeps what it held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStoreSettings>,
    /// A Redis 7 (or Valkey) every replica shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<RedisStoreSettings>,
    /// What values are sealed with (ChaCha20-Poly1305; any string of 16 characters or more,
    /// stretched with SHA-256). Without it, derived from `gateway.sessionKey`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<SecretSource>,
    /// Keys values sealed before a rotation are still opened with (never sealed with).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_keys: Vec<SecretSource>,
    /// How long a replica keeps a person's upstream access token it read from the store before
    /// reading it again (a disconnect on another replica reaches this one within it); 0 reads
    /// the store on every call.
    #[serde(default = "default_account_cache", with = "humantime_serde")]
    #[schemars(schema_with = "crate::schema::duration")]
    pub account_cache: Duration,
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            memory: None,
            redis: None,
            key: None,
            previous_keys: Vec::new(),
            account_cache: default_account_cache(),
        }
    }
}

fn default_account_cache() -> Duration {
    Duration::from_secs(30)
}

impl StoreSettings {
    fn is_default(&self) -> bool {
        self == &StoreSettings::default()
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryStoreSettings {
    /// A file the store is written to (sealed values only, at most twice a second) and read
    /// from at start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RedisStoreSettings {
    /// `redis://host:port/db`, `rediss://` for TLS (the public roots and the system's), or
    /// `unix:///path/to/socket`. No password here: `password` keeps it out of logs.
    #[schemars(regex(pattern = r"^(redis|rediss|unix)://"))]
    pub url: String,
    /// The ACL user (`AUTH username password`); without it, the default user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<SecretSource>,
    /// `rediss://` only: PEM of the CA that signed Redis's certificate, trusted instead of the
    /// public web roots compiled in (the images have no system roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<SecretSource>,
    /// How long one operation may take before the store counts as down for it.
    #[serde(default = "default_store_timeout", with = "humantime_serde")]
    #[schemars(schema_with = "crate::schema::duration")]
    pub timeout: Duration,
}

fn default_store_timeout() -> Duration {
    Duration::from_millis(500)
}

/// How ServiceAccount tokens are verified: the cluster's issuer, the audiences a token must be
/// for, and the issuer's public signing keys. The operator reads the last two from the API
/// server (`/.well-known/openid-configuration`, `/openid/v1/jwks`) and keeps them current; a
/// standalone file gives them inline (`kubectl get --raw /openid/v1/jwks`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceAccountTokens {
    /// The `iss` tokens carry (the API server's `--service-account-issuer`).
    pub issuer: String,
    /// A token must be for one of these (`kubectl create token <sa> --audience switchboard`,
    /// or a projected token with that audience).
    #[serde(default = "default_token_audiences")]
    pub audiences: Vec<String>,
    /// The issuer's JSON Web Key Set (`{"keys": [...]}`).
    pub jwks: serde_json::Value,
}

fn default_token_audiences() -> Vec<String> {
    vec!["switchboard".to_string()]
}

impl Default for GatewaySettings {
    fn default() -> Self {
        GatewaySettings {
            session_key: None,
            session_ttl: default_session_ttl(),
            max_body_bytes: default_max_body_bytes(),
            listing_page_cap: default_listing_page_cap(),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            public_url: None,
            listing_ttl: default_listing_ttl(),
            service_account_tokens: None,
            upstream_networks: Default::default(),
            upstream_tls: None,
            store: StoreSettings::default(),
            policy: None,
        }
    }
}

/// An external policy service called on tool calls: before the upstream is asked (it may
/// allow, deny with a reason, or rewrite the arguments) and after it answered (allow, deny,
/// or replace the result, e.g. redacted). It receives the caller, the server, the tool, the
/// arguments and the result: it is trusted with them as the upstream is.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyHook {
    /// Where each check is POSTed (JSON): an http or https URL (in the gateway's
    /// `upstreamNetworks`, as upstreams are).
    pub url: String,
    /// How long one check may take.
    #[serde(default = "default_policy_timeout", with = "humantime_serde")]
    #[schemars(schema_with = "crate::schema::duration")]
    pub timeout: Duration,
    /// What a check that fails (no answer in time, an error, an answer that is not one) does:
    /// `closed` refuses the call, `open` lets it through as it is.
    #[serde(default)]
    pub failure: PolicyFailure,
    /// Which checks: `request` (before the upstream), `response` (after). Default both. A
    /// `response` check needs the whole result, so the call's answer is not streamed.
    #[serde(default = "default_policy_phases")]
    pub phases: Vec<PolicyPhase>,
}

fn default_policy_timeout() -> Duration {
    Duration::from_secs(2)
}

fn default_policy_phases() -> Vec<PolicyPhase> {
    vec![PolicyPhase::Request, PolicyPhase::Response]
}

#[derive(
    Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum PolicyFailure {
    #[default]
    Closed,
    Open,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PolicyPhase {
    Request,
    Response,
}

impl PolicyHook {
    pub fn checks(&self, phase: PolicyPhase) -> bool {
        self.phases.contains(&phase)
    }
}

fn default_session_ttl() -> Duration {
    Duration::from_secs(24 * 3600)
}
fn default_max_body_bytes() -> usize {
    4 * 1024 * 1024
}
fn default_listing_page_cap() -> u32 {
    100
}
fn default_listing_ttl() -> Duration {
    Duration::from_secs(60)
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerSpec {
    /// Name, unique within the namespace; a DNS-1123 label.
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Identity used for routing and scope. The operator sets `<namespace>/<name>`; a file may
    /// leave it out, and it then is the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Streamable HTTP endpoint of the upstream MCP server.
    pub url: String,
    /// Prefix of this server's names on the aggregate endpoint; defaults to the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Bound on every single upstream request, the handshake included.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Bound on a whole paginated listing; the effective budget is `max(timeout, listingTimeout)`.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub listing_timeout: Option<Duration>,
    #[serde(default)]
    pub access_groups: Vec<String>,
    /// Namespaces besides its own whose keys this server admits (`*` admits every namespace).
    #[serde(default)]
    pub allowed_namespaces: Vec<String>,
    /// Every admitted key reaches this server, whatever its `servers`/`accessGroups` say.
    #[serde(default)]
    pub allow_all_keys: bool,
    #[serde(default)]
    pub tools: ServerTools,
    #[serde(default)]
    pub headers: HeaderSettings,
    #[serde(default)]
    pub auth: UpstreamAuth,
    /// Limits on the calls this replica forwards to the upstream, across all keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<RequestLimits>,
    /// The policy service this server's tool calls are checked with (instead of
    /// `gateway.policy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyHook>,
    /// The hosts and networks this server may reach, within `gateway.upstreamNetworks` (the
    /// operator sets it from the namespace's annotations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_policy: Option<crate::networks::ServerAddressPolicy>,
    /// TLS towards this upstream and its token endpoint and metadata (`tls.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::tls::UpstreamTls>,
    /// Which era the gateway speaks to this upstream (default `auto`).
    #[serde(default, skip_serializing_if = "UpstreamEra::is_auto")]
    pub upstream_era: UpstreamEra,
    /// The upstream is a REST API described by an OpenAPI document, not an MCP server: `url`
    /// is its base URL, and the selected operations are this server's tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openapi: Option<crate::openapi::OpenApiSpec>,
}

/// How the gateway picks the era it speaks to an upstream.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum UpstreamEra {
    /// Found out by the first request (2026-07-28 first, legacy sessions after a 4xx without a
    /// 2026-07-28 error code), then the same for every client.
    #[default]
    Auto,
    /// The upstream serves both eras and keeps state per legacy session (the stdio bridge runs
    /// a process per session): a legacy client's session gets a legacy upstream session of its
    /// own, a 2026-07-28 client's request goes out stateless.
    ByClient,
}

impl UpstreamEra {
    fn is_auto(&self) -> bool {
        *self == UpstreamEra::Auto
    }
}

/// Request limits, enforced by each replica on its own (N replicas admit up to N times the
/// figures). A request over a limit is answered 429 with `Retry-After` before any upstream I/O.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestLimits {
    /// Requests in flight at once; a streamed answer counts until it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent_requests: Option<u32>,
    /// Sustained rate: `<count>/s`, `<count>/m` or `<count>/h` (e.g. `50/s`, `600/m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    /// Requests admitted at once after a quiet spell; defaults to the rate's count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

/// A parsed `rate`: `count` requests per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u32,
    pub period: Duration,
}

impl RequestLimits {
    /// `rate` parsed; `Some(Err)` names what is wrong with it.
    pub fn parsed_rate(&self) -> Option<Result<Rate, String>> {
        self.rate.as_deref().map(parse_rate)
    }
}

/// Parses `50/s`, `600/m` or `10/h`.
pub(crate) fn parse_rate(text: &str) -> Result<Rate, String> {
    let wrong = || format!("{text:?} is not <count>/s, <count>/m or <count>/h (e.g. 50/s)");
    let (count, unit) = text.trim().split_once('/').ok_or_else(wrong)?;
    let count: u32 = count.trim().parse().map_err(|_| wrong())?;
    if count == 0 {
        return Err(format!("{text:?}: the count must be at least 1"));
    }
    let period = match unit.trim() {
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        _ => return Err(wrong()),
    };
    Ok(Rate { count, period })
}

fn default_timeout() -> Duration {
    Duration::from_secs(30)
}

impl ServerSpec {
    /// The routing identity (docs/architecture.md, invariant 1).
    pub fn id(&self) -> &str {
        self.id.as_deref().unwrap_or(&self.name)
    }
    pub fn prefix(&self) -> &str {
        self.tool_prefix.as_deref().unwrap_or(&self.name)
    }
    /// Every URL the gateway connects to for this server, with its field: the upstream, for
    /// the minted-token kinds the token endpoint, and an absolute OpenAPI document URL.
    pub fn connect_urls(&self) -> Vec<(&'static str, &str)> {
        let mut urls = vec![("url", self.url.as_str())];
        match &self.auth {
            UpstreamAuth::Oauth2ClientCredentials { token_url, .. }
            | UpstreamAuth::TokenExchange { token_url, .. } => {
                urls.push(("auth.tokenUrl", token_url.as_str()))
            }
            UpstreamAuth::UserOauth {
                authorization_server: Some(issuer),
                ..
            } => urls.push(("auth.authorizationServer", issuer.as_str())),
            _ => {}
        }
        // An absolute document URL is a connection of its own (a path is relative to `url`).
        if let Some(document) = self
            .openapi
            .as_ref()
            .and_then(|o| o.document_url.as_deref())
            && url::Url::parse(document).is_ok()
        {
            urls.push(("openapi.documentUrl", document));
        }
        urls
    }
    /// The one deadline a full paginated listing of this server gets.
    pub fn listing_budget(&self) -> Duration {
        self.listing_timeout
            .map_or(self.timeout, |l| l.max(self.timeout))
    }
}

/// A rule over the arguments of some tools, as a key grants them (or a virtual server presents
/// them): a CEL expression that must
/// hold (over `args`, the call's arguments, and `caller`), and arguments set from the caller
/// that the model cannot set (`${caller.subject}`, `${caller.namespace}`, `${caller.key}`,
/// `${caller.claims.<claim>}` in a text).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArgumentRule {
    /// The tools the rule is for, globs with `*`: prefixed names (`<prefix>__<tool>`) in a key,
    /// presented names in a virtual server.
    pub tools: Vec<String>,
    /// A CEL expression that must be true for the call to go upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// What a refused caller is told (default: the rule itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Argument name → the value it takes from the caller (a text with `${caller...}`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bind: BTreeMap<String, String>,
}

impl ArgumentRule {
    /// Whether the rule is for `tool` (a prefixed name).
    pub fn covers(&self, tool: &str) -> bool {
        self.tools.iter().any(|p| glob_match(p, tool))
    }
}

/// Names a filter admits: `allow` empty means everything; `deny` always wins. Entries are exact
/// names or globs with `*`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolFilter {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl ToolFilter {
    pub fn admits(&self, name: &str) -> bool {
        admits(&self.allow, &self.deny, name)
    }
}

/// A server's tools: which it serves (a [`ToolFilter`]'s `allow`/`deny`), and how their
/// definitions are trusted (docs/architecture.md, invariant 14).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerTools {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// What a definition that is not the approved one gets.
    #[serde(default, skip_serializing_if = "Pinning::is_default")]
    pub pinning: Pinning,
    /// Tool name → its approved definition's digest (`v1:...`, as the review prints it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub approved: BTreeMap<String, String>,
    /// Tool name (exact, or a glob with `*`; `*` is every tool) → the OAuth scopes a signed-in
    /// person's token must hold to call it; a tool matched by several needs all of them. A
    /// token without them gets 403 `insufficient_scope` naming every scope the call needs
    /// (SEP-2350). Keys and workloads are not asked: their reach is the key's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub required_scopes: BTreeMap<String, Vec<String>>,
}

impl ServerTools {
    pub fn admits(&self, name: &str) -> bool {
        admits(&self.allow, &self.deny, name)
    }

    /// The scopes a call of `tool` (the upstream's own name) needs, each once, in name order.
    pub fn required_scopes(&self, tool: &str) -> Vec<&str> {
        let mut scopes: Vec<&str> = self
            .required_scopes
            .iter()
            .filter(|(pattern, _)| glob_match(pattern, tool))
            .flat_map(|(_, scopes)| scopes.iter().map(String::as_str))
            .collect();
        scopes.sort_unstable();
        scopes.dedup();
        scopes
    }

    /// The names this server serves, as a key's filter would be written.
    pub fn filter(&self) -> ToolFilter {
        ToolFilter {
            allow: self.allow.clone(),
            deny: self.deny.clone(),
        }
    }
}

/// What a server's tool definitions that are not the approved ones get (and whether they are
/// looked at at all).
#[derive(
    Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum Pinning {
    /// Served as listed and not looked at (no digests, no checks: nothing on the listing's path).
    Off,
    /// Served, and flagged: changed or new definitions against the approvals, and what the
    /// poisoning and shadowing checks find, in logs, metrics and audit records.
    #[default]
    Warn,
    /// Only approved definitions are served: a changed or new tool is neither listed nor
    /// callable until its digest is approved. Flagged as under `warn`.
    Hold,
}

impl Pinning {
    pub fn is_default(&self) -> bool {
        *self == Pinning::Warn
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Pinning::Off => "off",
            Pinning::Warn => "warn",
            Pinning::Hold => "hold",
        }
    }
}

fn admits(allow: &[String], deny: &[String], name: &str) -> bool {
    let allowed = allow.is_empty() || allow.iter().any(|p| glob_match(p, name));
    allowed && !deny.iter().any(|p| glob_match(p, name))
}

/// `*` matches any run of characters; everything else matches itself.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let Some((head, rest)) = pattern.split_once('*') else {
        return pattern == name;
    };
    let Some(mut remaining) = name.strip_prefix(head) else {
        return false;
    };
    let mut parts = rest.split('*').peekable();
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            return remaining.ends_with(part);
        }
        match remaining.find(part) {
            Some(at) => remaining = &remaining[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderSettings {
    /// Headers the gateway adds to every upstream request of this server.
    #[serde(default, rename = "static", skip_serializing_if = "Vec::is_empty")]
    pub static_headers: Vec<StaticHeader>,
    /// Caller request headers copied upstream by name (never the gateway key's header).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forward: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StaticHeader {
    pub name: String,
    pub value: SecretSource,
}

/// How the gateway authenticates to the upstream.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum UpstreamAuth {
    #[default]
    None,
    /// `<header>: <prefix><secret>`; header defaults to `X-API-Key`, prefix to none.
    #[serde(rename_all = "camelCase")]
    ApiKey {
        secret: SecretSource,
        #[serde(default = "default_api_key_header")]
        header: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefix: Option<String>,
    },
    /// `Authorization: Bearer <secret>` (a secret that already says `Bearer` is not prefixed again).
    #[serde(rename_all = "camelCase")]
    Bearer {
        secret: SecretSource,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upstream_token_header: Option<String>,
    },
    /// `Authorization: Basic <base64(user:pass)>`; the secret is `user:pass` or already encoded.
    Basic { secret: SecretSource },
    /// `Authorization: Token <secret>`.
    #[serde(rename_all = "camelCase")]
    Token {
        secret: SecretSource,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upstream_token_header: Option<String>,
    },
    /// `Authorization: <secret>`, verbatim.
    Authorization { secret: SecretSource },
    /// The caller's own `Authorization` goes upstream verbatim; the caller then presents the
    /// gateway key in `X-Switchboard-Key`. RISKY: the MCP specification calls token
    /// passthrough an anti-pattern (the upstream sees a token minted for someone else, and
    /// cannot tell the gateway from the caller). Prefer `oauthDelegate` or `tokenExchange`.
    #[serde(rename_all = "camelCase")]
    Passthrough {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upstream_token_header: Option<String>,
    },
    /// The caller sends a credential for this server alone in `X-MCP-<prefix>-Authorization`
    /// (or `header`), next to the gateway key; it goes to this server and no other.
    #[serde(rename_all = "camelCase")]
    OauthDelegate {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        header: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upstream_token_header: Option<String>,
    },
    /// The gateway fetches its own token (OAuth 2.0 client credentials) and caches it until
    /// shortly before it expires; an upstream 401 refreshes it once.
    #[serde(rename_all = "camelCase")]
    Oauth2ClientCredentials {
        token_url: String,
        client_id: SecretSource,
        client_secret: SecretSource,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        scopes: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        audience: Option<String>,
        /// `clientSecretPost` (in the form) or `clientSecretBasic` (HTTP Basic).
        #[serde(default)]
        client_auth: ClientAuthMethod,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upstream_token_header: Option<String>,
    },
    /// RFC 8693: the caller's token (in `Authorization`, gateway key in `X-Switchboard-Key`)
    /// is exchanged for an upstream token, cached per caller token and server.
    #[serde(rename_all = "camelCase")]
    TokenExchange {
        token_url: String,
        client_id: SecretSource,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_secret: Option<SecretSource>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        audience: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        scopes: Vec<String>,
        #[serde(default = "default_subject_token_type")]
        subject_token_type: String,
        #[serde(default)]
        client_auth: ClientAuthMethod,
        /// Most exchanged tokens kept (per server).
        #[serde(default = "default_exchange_cache_size")]
        cache_size: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upstream_token_header: Option<String>,
    },
    /// Each caller connects an account of their own at the upstream's authorization server
    /// (a third party such as GitHub or Atlassian), once, in a browser; the gateway holds their
    /// tokens in the shared store, refreshes them, and sends the caller's access token with each
    /// request (issue 37). A caller with no account connected is asked to connect one (URL
    /// elicitation), never sent upstream without it.
    #[serde(rename = "userOAuth", rename_all = "camelCase")]
    UserOauth {
        /// The authorization server's issuer (RFC 8414 metadata read from it). Without it, the
        /// first of the upstream's protected-resource metadata (RFC 9728).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        authorization_server: Option<String>,
        /// The gateway's OAuth client at that server (one for every person).
        client_id: SecretSource,
        /// Without it, a public client (PKCE alone).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_secret: Option<SecretSource>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        scopes: Vec<String>,
        /// RFC 8707 `resource` asked for; default: the server's `url`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resource: Option<String>,
        #[serde(default)]
        client_auth: ClientAuthMethod,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upstream_token_header: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum ClientAuthMethod {
    #[default]
    ClientSecretPost,
    ClientSecretBasic,
}

fn default_subject_token_type() -> String {
    "urn:ietf:params:oauth:token-type:access_token".to_string()
}
fn default_exchange_cache_size() -> usize {
    10_000
}

fn default_api_key_header() -> String {
    "X-API-Key".to_string()
}

impl UpstreamAuth {
    /// Whether what the upstream serves depends on the caller's own credential: then a 401
    /// is the caller's to answer (relayed), and listings are cached per caller credential.
    pub fn uses_caller_credential(&self) -> bool {
        matches!(
            self,
            UpstreamAuth::Passthrough { .. }
                | UpstreamAuth::OauthDelegate { .. }
                | UpstreamAuth::TokenExchange { .. }
        )
    }

    /// Whether the credential is found per request (the caller's, or a token the gateway
    /// obtains); a static one (or none) is in the server's headers already.
    pub fn resolved_per_request(&self) -> bool {
        match self {
            UpstreamAuth::None
            | UpstreamAuth::ApiKey { .. }
            | UpstreamAuth::Bearer { .. }
            | UpstreamAuth::Basic { .. }
            | UpstreamAuth::Token { .. }
            | UpstreamAuth::Authorization { .. } => false,
            UpstreamAuth::Passthrough { .. }
            | UpstreamAuth::OauthDelegate { .. }
            | UpstreamAuth::Oauth2ClientCredentials { .. }
            | UpstreamAuth::TokenExchange { .. }
            | UpstreamAuth::UserOauth { .. } => true,
        }
    }

    /// Whether each caller brings an account of their own (`userOAuth`).
    pub fn is_user_account(&self) -> bool {
        matches!(self, UpstreamAuth::UserOauth { .. })
    }

    /// The header a custom credential slot names, if the arm has one.
    pub fn upstream_token_header(&self) -> Option<&str> {
        match self {
            UpstreamAuth::Bearer {
                upstream_token_header,
                ..
            }
            | UpstreamAuth::Token {
                upstream_token_header,
                ..
            }
            | UpstreamAuth::Passthrough {
                upstream_token_header,
            }
            | UpstreamAuth::OauthDelegate {
                upstream_token_header,
                ..
            }
            | UpstreamAuth::Oauth2ClientCredentials {
                upstream_token_header,
                ..
            }
            | UpstreamAuth::TokenExchange {
                upstream_token_header,
                ..
            }
            | UpstreamAuth::UserOauth {
                upstream_token_header,
                ..
            } => upstream_token_header.as_deref(),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeySpec {
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// `sha256:<hex>` of the key. The operator writes only this; a file may give `secret`
    /// instead and it is hashed on load (the secret itself is never kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretSource>,
    /// Server ids (or names within the key's namespace) this key reaches.
    #[serde(default)]
    pub servers: Vec<String>,
    /// Reaches every server and model sharing one of these groups.
    #[serde(default)]
    pub access_groups: Vec<String>,
    /// Model ids (or names within the key's namespace) this key reaches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// ServiceAccounts whose tokens act as this key: `<namespace>/<name>`, or `<namespace>/*`
    /// for every ServiceAccount of a namespace (see `gateway.serviceAccountTokens`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_accounts: Vec<String>,
    /// People signed in with an identity provider of this namespace who act with this key's
    /// scope (`identityProviders`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub people: Vec<crate::identity::PeopleBinding>,
    /// Filter over prefixed tool names (`<prefix>__<tool>`).
    #[serde(default)]
    pub tools: ToolFilter,
    /// Rules over the arguments of the tools this key admits, and arguments it binds to the
    /// caller (docs/architecture.md, invariant 14).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<ArgumentRule>,
    /// RFC 3339 instant after which the key is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Limits on this key's requests (MCP, REST and LLM alike).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<RequestLimits>,
}

impl KeySpec {
    /// `expires_at` as an instant: `None` when unset, `Some(Err)` when it is not RFC 3339
    /// (any UTC offset is accepted).
    pub fn expiry(&self) -> Option<Result<std::time::SystemTime, String>> {
        self.expires_at.as_deref().map(parse_instant)
    }
}

/// Parses an RFC 3339 instant such as `2027-01-01T00:00:00Z` or `2027-01-01T02:00:00+02:00`.
pub fn parse_instant(text: &str) -> Result<std::time::SystemTime, String> {
    text.parse::<jiff::Timestamp>()
        .map(std::time::SystemTime::from)
        .map_err(|_| format!("{text:?} is not an RFC 3339 time (e.g. 2027-01-01T00:00:00Z)"))
}

/// An LLM model behind the gateway: what clients call it, where it is served, and the gateway
/// tools attached to it (run by the gateway itself, see docs/llm.md).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelSpec {
    /// Name, unique within the namespace; a DNS-1123 label.
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Identity used for scope. The operator sets `<namespace>/<name>`; a file may leave it
    /// out, and it then is the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The `model` values clients send for this model; defaults to the name. Unique across
    /// the snapshot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_names: Vec<String>,
    pub provider: ModelProvider,
    /// `anthropic`: the API root (`https://api.anthropic.com`; requests go to
    /// `<baseUrl>/v1/messages`). `openai`: the OpenAI base URL including its version
    /// (`https://api.openai.com/v1`, `http://vllm:8000/v1`; requests go to
    /// `<baseUrl>/chat/completions`), as the providers' own SDKs take it.
    pub base_url: String,
    /// The model id the provider gets; defaults to what the client sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_model: Option<String>,
    /// The provider credential: `x-api-key` for `anthropic`, `Authorization: Bearer` for
    /// `openai`. None for a provider that needs none (a local vLLM or Ollama).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<SecretSource>,
    /// Bound on every single provider call (a whole stream included).
    #[serde(default = "default_model_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Most model calls one client request may cause while gateway tools run.
    #[serde(default = "default_max_iterations")]
    pub max_iterations: u32,
    /// Gateway tools attached to this model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ModelTools>,
    #[serde(default)]
    pub access_groups: Vec<String>,
    /// Namespaces besides its own whose keys may use this model (`*` admits every namespace).
    #[serde(default)]
    pub allowed_namespaces: Vec<String>,
    /// Every admitted key may use this model.
    #[serde(default)]
    pub allow_all_keys: bool,
    /// TLS towards the provider (`tls.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::tls::UpstreamTls>,
}

impl ModelSpec {
    pub fn id(&self) -> &str {
        self.id.as_deref().unwrap_or(&self.name)
    }

    /// Whether `reference` (a `tools[].server`) names `server`: its id, or its name when both
    /// live in this model's namespace.
    pub fn names_server(&self, reference: &str, server: &ServerSpec) -> bool {
        reference == server.id() || (server.namespace == self.namespace && reference == server.name)
    }

    /// Whether `reference` (a `tools[].server`) names virtual server `vs`, by the same rule.
    pub fn names_virtual_server(&self, reference: &str, vs: &VirtualServerSpec) -> bool {
        reference == vs.id() || (vs.namespace == self.namespace && reference == vs.name)
    }

    /// The names clients may send: `modelNames`, else the name.
    pub fn client_names(&self) -> impl Iterator<Item = &str> {
        let own = self.model_names.is_empty().then_some(self.name.as_str());
        self.model_names.iter().map(String::as_str).chain(own)
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum ModelProvider {
    /// The Anthropic Messages API.
    Anthropic,
    /// The OpenAI Chat Completions API, and servers compatible with it (vLLM, Ollama, ...).
    Openai,
}

impl ModelProvider {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelProvider::Anthropic => "anthropic",
            ModelProvider::Openai => "openai",
        }
    }
}

/// Tools of one server attached to a model.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelTools {
    /// Server id, or a name in the model's namespace.
    pub server: String,
    /// Filter over the server's own tool names.
    #[serde(default)]
    pub tools: ToolFilter,
    #[serde(default)]
    pub require_approval: RequireApproval,
    #[serde(default)]
    pub visibility: ToolVisibility,
}

/// `never`: the gateway runs the model's calls itself. `always`: the calls go to the client as
/// ordinary visible tool calls, for it to run (or refuse).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum RequireApproval {
    #[default]
    Never,
    Always,
}

/// `hidden`: the client never sees the tool, its calls or its results. `visible`: they are
/// shown the way the provider shows server-side tools.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum ToolVisibility {
    #[default]
    Hidden,
    Visible,
}

fn default_model_timeout() -> Duration {
    Duration::from_secs(600)
}
fn default_max_iterations() -> u32 {
    8
}

// ---- Virtual servers --------------------------------------------------------------------
// Virtual servers: tools (and prompts and resources) of several servers presented as one
// endpoint, selected, renamed and reshaped by the platform team. A virtual server narrows what
// its callers see and never widens what they reach (docs/architecture.md, invariant 12): each
// tool stays a tool of its server, under that server's scope and filters.

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VirtualServerSpec {
    /// Name, unique within the namespace; a DNS-1123 label. Served at `/mcp/<path>`.
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Identity used for scope (keys name it in `servers`). The operator sets
    /// `<namespace>/<name>`; a file may leave it out, and it then is the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The endpoint's path segment (`/mcp/<path>`); defaults to the name. Shares one space
    /// with the servers' `toolPrefix`es.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where its tools come from, in order: a name two sources select is the first one's.
    pub sources: Vec<VirtualSource>,
    #[serde(default)]
    pub access_groups: Vec<String>,
    /// Namespaces besides its own whose keys may use it (`*` admits every namespace).
    #[serde(default)]
    pub allowed_namespaces: Vec<String>,
    /// Every admitted key reaches it (each tool still only where its server is reached).
    #[serde(default)]
    pub allow_all_keys: bool,
    /// Rules over the arguments of its tools (`tools`: presented names, globs with `*`) and
    /// arguments bound to the caller, as a key's `arguments`, for every caller that calls
    /// through it (on top of the caller's key's own). A bound argument is left out of the
    /// presented input schema: the model never sees it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<ArgumentRule>,
    /// Search mode: the virtual server lists two tools to find and call its tools (and the
    /// tools pinned here) instead of every tool it presents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<ToolSearch>,
}

/// The tool of a search-mode virtual server that finds its tools by what they do.
pub const FIND_TOOLS: &str = "find_tools";
/// The tool of a search-mode virtual server that calls a tool it found (by the name found).
pub const CALL_TOOL: &str = "call_tool";

/// How a search-mode virtual server presents its tools: [`FIND_TOOLS`] and [`CALL_TOOL`] plus
/// the pinned tools are listed; every other tool it presents is found by a search and called
/// through [`CALL_TOOL`] (or by its presented name), under the same scope, filters and rules.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolSearch {
    /// Presented names listed beside the two search tools, always visible.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pinned: Vec<String>,
    /// How many tools a search answers when the model asks for no number (1-50).
    #[serde(default = "default_search_results")]
    pub results: u32,
}

fn default_search_results() -> u32 {
    5
}

impl Default for ToolSearch {
    fn default() -> ToolSearch {
        ToolSearch {
            pinned: Vec::new(),
            results: default_search_results(),
        }
    }
}

impl VirtualServerSpec {
    pub fn id(&self) -> &str {
        self.id.as_deref().unwrap_or(&self.name)
    }
    pub fn path(&self) -> &str {
        self.path.as_deref().unwrap_or(&self.name)
    }
    /// Whether `reference` (a `sources[].server`) names `server`: its id, or its name when both
    /// live in this virtual server's namespace.
    pub fn names_server(&self, reference: &str, server: &ServerSpec) -> bool {
        reference == server.id() || (server.namespace == self.namespace && reference == server.name)
    }
}

/// One server's share of a virtual server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VirtualSource {
    /// Server id, or a name in the virtual server's namespace.
    pub server: String,
    /// Which of the server's tools (its own names); none when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolFilter>,
    /// Which of its prompts (their names); none when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<ToolFilter>,
    /// Which of its resources (their URIs, globs with `*`); none when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ToolFilter>,
    /// How selected tools are presented, by their own name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<ToolOverride>,
}

impl VirtualSource {
    /// Whether the source selects `name` of this kind (`tools`, `prompts`, `resources`).
    pub fn selects(&self, filter: &Option<ToolFilter>, name: &str) -> bool {
        filter.as_ref().is_some_and(|f| f.admits(name))
    }
}

/// How one tool is presented.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolOverride {
    /// The server's own name of the tool (it must be selected by `tools`).
    pub tool: String,
    /// The name clients see and call; the upstream still gets `tool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Replaces the server's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Appended to the (server's or replaced) description, after a blank line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description_suffix: Option<String>,
    /// Per parameter (a top-level property of the input schema).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, ParameterOverride>,
}

/// How one parameter is narrowed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParameterOverride {
    /// The parameter is hidden from clients and always sent with this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<Value>,
    /// Only these values are offered and accepted (a subset of the server's own `enum`, when it
    /// has one).
    #[serde(default, rename = "enum", skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Vec<Value>>,
    /// Replaces the parameter's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}
