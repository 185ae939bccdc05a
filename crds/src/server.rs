//! `McpServer`: one upstream MCP server behind the gateway.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Condition, RequestLimits, SecretKeyRef, UpstreamTls};

/// An upstream MCP server the gateway routes to. Its id is `<namespace>/<name>`; its tools
/// appear on the aggregate endpoint as `<toolPrefix>__<tool>`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "switchboard.dev",
    version = "v1alpha1",
    kind = "McpServer",
    doc = "An upstream MCP server, or a REST API described by an OpenAPI document, behind the gateway. Its id is `<namespace>/<name>`; its tools appear on the aggregate endpoint as `<toolPrefix>__<tool>` and on `/mcp/<toolPrefix>` under their own names.",
    namespaced,
    status = "McpServerStatus",
    shortname = "mcps",
    category = "switchboard",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Tools","type":"integer","jsonPath":".status.toolCount"}"#,
    printcolumn = r#"{"name":"Prefix","type":"string","jsonPath":".status.prefix"}"#,
    // Why it is not Ready, with `kubectl get -o wide`.
    printcolumn = r#"{"name":"Reason","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("[has(self.url), has(self.service), has(self.run)].filter(x, x).size() == 1").message("exactly one of spec.url, spec.service and spec.run must be set"))]
#[x_kube(validation = Rule::new("!has(self.openapi) || !has(self.run)").message("spec.openapi describes a REST API at spec.url or spec.service; it cannot be combined with spec.run"))]
#[serde(rename_all = "camelCase")]
pub struct McpServerSpec {
    /// Streamable HTTP endpoint of the upstream, http or https (one of `url`, `service` and `run`);
    /// with `openapi`, the REST API's base URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^https?://[^\s/]+(/\S*)?$"), length(max = 2048))]
    #[x_kube(validation = Rule::new("isURL(self) && url(self).getScheme() in ['http', 'https']").message("spec.url must be an http or https URL"))]
    pub url: Option<String>,
    /// A Service in the same namespace (one of `url`, `service` and `run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceRef>,
    /// A server the operator runs (one of `url`, `service` and `run`): a Deployment and a
    /// Service it owns, the route pointed at them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<crate::run::Run>,
    /// Transport to the upstream. Only Streamable HTTP exists today.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<Transport>,
    /// Which protocol era the gateway speaks to the upstream: `auto` (default; found out by the
    /// first request, then the same for every client) or `byClient` (the upstream serves both
    /// and keeps state per legacy session, as switchboard-stdio-bridge does: a legacy client's
    /// session gets an upstream session of its own, a 2026-07-28 request goes out stateless).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_era: Option<UpstreamEra>,
    /// Prefix of this server's names on the aggregate endpoint (a DNS-1123 label, so it never
    /// contains `_`); defaults to the resource's name. Unique among all servers: the older
    /// resource keeps a contested prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), length(max = 63))]
    pub tool_prefix: Option<String>,
    /// Shown to people; not used for routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Bound on every upstream request, the handshake included (e.g. `30s`, `1m`). Default 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"))]
    #[schemars(extend("default" = "30s"))]
    pub timeout: Option<String>,
    /// Bound on a whole paginated listing; the budget is max(timeout, listingTimeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"))]
    pub listing_timeout: Option<String>,
    /// Keys sharing one of these groups reach this server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_groups: Vec<String>,
    /// Namespaces besides this one whose keys may reach this server (`*`: every namespace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_namespaces: Vec<String>,
    /// Every admitted key reaches this server, whatever its servers and groups say.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_all_keys: bool,
    /// Limits on the calls each gateway replica forwards to this upstream, across all keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("!has(self.burst) || has(self.rate)").message("spec.limits.burst needs spec.limits.rate"))]
    pub limits: Option<RequestLimits>,
    /// Tools of this server that are listed and callable (globs with `*`), and how their
    /// definitions are trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("!has(self.allow) || !has(self.deny) || !self.allow.exists(a, a in self.deny)").message("a tool name cannot be both in spec.tools.allow and spec.tools.deny"))]
    pub tools: Option<ServerTools>,
    /// An external policy service this server's tool calls are checked with, before the
    /// upstream (allow, deny with a reason, rewrite the arguments) and after (allow, deny,
    /// replace the result); instead of the gateway-wide `gateway.settings.policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyHook>,
    /// Headers added to upstream requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<HeaderSettings>,
    /// How the gateway authenticates to the upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<ServerAuth>,
    /// TLS towards the upstream and its token endpoint and metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<UpstreamTls>,
    /// The upstream is a REST API described by an OpenAPI 3.0 or 3.1 document: the gateway
    /// serves its selected operations as MCP tools and makes the REST calls itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openapi: Option<crate::openapi::OpenApi>,
}

/// A server's tools: which are served, and how their definitions are trusted.
///
/// Each tool's definition (name, title, description, input and output schema, annotations) has
/// a digest; `approved` holds the digests the platform team reviewed. The operator reports in
/// the `ToolsChanged` condition which tools differ from their approval and in which parts, and
/// `switchboard-operator tools review` prints the changes and the `approved` block to apply.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerTools {
    /// Names admitted (exact or globs with `*`); empty admits every name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 128)))]
    pub allow: Vec<String>,
    /// Names refused even when allowed (exact or globs with `*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 128)))]
    pub deny: Vec<String>,
    /// What a definition that is not the approved one gets: `hold` (neither listed nor
    /// callable until approved), `warn` (the default: served and flagged) or `off` (not looked
    /// at). Under `warn` and `hold` every listing is also checked for poisoning (hidden
    /// characters, instructions to the model, to other tools, or about local files and
    /// secrets) and shadowing (another server's tool's name or description).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinning: Option<Pinning>,
    /// Tool name → the digest of its approved definition (`v1:<32 hex>:<20 hex>`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 2000, "additionalProperties" = {"type": "string", "maxLength": 64}))]
    #[x_kube(validation = Rule::new("self.all(k, self[k].matches('^v1:[0-9a-f]{32}:[0-9a-f]{20}$'))").message("spec.tools.approved values must be digests as the review prints them: v1:<32 hex>:<20 hex>"))]
    pub approved: BTreeMap<String, String>,
    /// Tool name (exact, or a glob with `*`; `*` is every tool) → the OAuth scopes a signed-in
    /// person's token must hold to call it (a tool several match needs all of them). A token
    /// without them gets 403 `insufficient_scope` naming every scope the call needs, so an MCP
    /// client asks for them and retries (SEP-2350). Keys and workloads are not asked.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 256, "additionalProperties" = {"type": "array", "minItems": 1, "maxItems": 16, "items": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[\\x21\\x23-\\x5b\\x5d-\\x7e]+$"}}))]
    pub required_scopes: BTreeMap<String, Vec<String>>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Pinning {
    Off,
    Warn,
    Hold,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum UpstreamEra {
    Auto,
    ByClient,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub enum Transport {
    #[serde(rename = "streamableHttp")]
    StreamableHttp,
}

/// A Service in the resource's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceRef {
    /// The Service's name (same namespace).
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), length(max = 63))]
    pub name: String,
    /// The Service's port.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// HTTP path of the MCP endpoint. Default `/mcp` (with `openapi`: the REST API's base path,
    /// default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^/\S*$"))]
    pub path: Option<String>,
    /// `http` (default) or `https`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self in ['http', 'https']").message("spec.service.scheme must be http or https"))]
    pub scheme: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderSettings {
    /// Headers the gateway adds to every upstream request of this server.
    #[serde(default, rename = "static", skip_serializing_if = "Vec::is_empty")]
    pub static_headers: Vec<StaticHeader>,
    /// Caller headers copied upstream by name (never Authorization, X-Switchboard-Key or
    /// another server's delegated credential).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(regex(pattern = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"), length(max = 256))
    )]
    pub forward: Vec<String>,
}

/// A header with a literal value or a value from a Secret (exactly one).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.value) != has(self.secretKeyRef)").message("a static header needs exactly one of value and secretKeyRef"))]
pub struct StaticHeader {
    /// Header name (an RFC 7230 token).
    #[schemars(regex(pattern = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"))]
    pub name: String,
    /// The header's literal value (or `secretKeyRef`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,
}

/// Upstream authentication. `type` picks the arm; the arm's fields must be present.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(self.type in ['apiKey', 'bearer', 'basic', 'token', 'authorization']) || has(self.secretRef)").message("spec.auth.secretRef is required for auth types apiKey, bearer, basic, token and authorization"))]
#[x_kube(validation = Rule::new("self.type != 'oauth2ClientCredentials' || has(self.oauth2)").message("spec.auth.oauth2 is required for auth type oauth2ClientCredentials"))]
#[x_kube(validation = Rule::new("self.type != 'tokenExchange' || has(self.tokenExchange)").message("spec.auth.tokenExchange is required for auth type tokenExchange"))]
#[x_kube(validation = Rule::new("self.type != 'userOAuth' || has(self.userOAuth)").message("spec.auth.userOAuth is required for auth type userOAuth"))]
#[x_kube(validation = Rule::new("!has(self.upstreamTokenHeader) || !(self.type in ['none', 'apiKey', 'basic', 'authorization'])").message("spec.auth.upstreamTokenHeader applies to bearer, token, passthrough, oauthDelegate, oauth2ClientCredentials, tokenExchange and userOAuth"))]
pub struct ServerAuth {
    #[serde(rename = "type")]
    pub auth_type: AuthType,
    /// The static credential (apiKey, bearer, basic, token, authorization).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeyRef>,
    /// apiKey: the header carrying the key (default `X-API-Key`); oauthDelegate: the header the
    /// caller sends its credential in (default `X-MCP-<prefix>-Authorization`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"))]
    pub header: Option<String>,
    /// apiKey: text put before the key (e.g. `Key `).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Put the credential on this header instead of `Authorization` (a static Authorization
    /// header then survives).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"))]
    pub upstream_token_header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth2: Option<OAuth2ClientCredentials>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_exchange: Option<TokenExchange>,
    #[serde(default, rename = "userOAuth", skip_serializing_if = "Option::is_none")]
    pub user_oauth: Option<UserOAuth>,
}

/// The auth arms. `passthrough` sends the caller's own Authorization upstream (risky: the MCP
/// specification calls token passthrough an anti-pattern; prefer oauthDelegate or
/// tokenExchange).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AuthType {
    None,
    ApiKey,
    Bearer,
    Basic,
    Token,
    Authorization,
    Passthrough,
    OauthDelegate,
    #[serde(rename = "oauth2ClientCredentials")]
    OAuth2ClientCredentials,
    TokenExchange,
    /// Each person connects an account of their own at the upstream's authorization server.
    #[serde(rename = "userOAuth")]
    UserOAuth,
}

/// OAuth 2.0 client credentials: the gateway gets its own token.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.clientId) != has(self.clientIdRef)").message("spec.auth.oauth2 needs exactly one of clientId and clientIdRef"))]
pub struct OAuth2ClientCredentials {
    /// The token endpoint (`https://idp.example/oauth/token`).
    #[schemars(regex(pattern = r"^https?://\S+$"))]
    pub token_url: String,
    /// The client id (or `clientIdRef` from a Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id_ref: Option<SecretKeyRef>,
    pub client_secret_ref: SecretKeyRef,
    /// Scopes asked for (`scope`, space-joined).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The `audience` parameter of the token request (RFC 8707-style resource indicator some providers need).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// `clientSecretPost` (default) or `clientSecretBasic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "clientSecretPost"))]
    pub client_auth: Option<ClientAuth>,
}

/// RFC 8693 token exchange of the caller's token for an upstream token.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.clientId) != has(self.clientIdRef)").message("spec.auth.tokenExchange needs exactly one of clientId and clientIdRef"))]
pub struct TokenExchange {
    /// The token endpoint that exchanges the caller's token (RFC 8693).
    #[schemars(regex(pattern = r"^https?://\S+$"))]
    pub token_url: String,
    /// The gateway's client id at the token endpoint (or `clientIdRef`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id_ref: Option<SecretKeyRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_ref: Option<SecretKeyRef>,
    /// The `audience` of the exchanged token (the upstream, as the identity provider names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// Scopes asked for in the exchange.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// Default `urn:ietf:params:oauth:token-type:access_token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "urn:ietf:params:oauth:token-type:access_token"))]
    pub subject_token_type: Option<String>,
    /// `clientSecretPost` (default) or `clientSecretBasic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "clientSecretPost"))]
    pub client_auth: Option<ClientAuth>,
    /// Most exchanged tokens kept. Default 10000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    #[schemars(extend("default" = 10000))]
    pub cache_size: Option<i64>,
}

/// People's own accounts at a third-party authorization server (GitHub, Atlassian, Slack...):
/// each connects once in a browser through the gateway, which holds, refreshes and revokes
/// their tokens in its shared store.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.clientId) != has(self.clientIdRef)").message("spec.auth.userOAuth needs exactly one of clientId and clientIdRef"))]
pub struct UserOAuth {
    /// The authorization server's issuer (its RFC 8414 metadata is read). Without it, the
    /// first one the upstream's protected-resource metadata names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^https?://\S+$"))]
    pub authorization_server: Option<String>,
    /// The gateway's client id at that server (or `clientIdRef`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id_ref: Option<SecretKeyRef>,
    /// Its client secret; without it, a public client (PKCE alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_ref: Option<SecretKeyRef>,
    /// Scopes asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The RFC 8707 `resource` asked for (default: spec.url).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// `clientSecretPost` (default) or `clientSecretBasic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "clientSecretPost"))]
    pub client_auth: Option<ClientAuth>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ClientAuth {
    ClientSecretPost,
    ClientSecretBasic,
}

/// What the operator observed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServerStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The prefix in effect (spec.toolPrefix or the name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Tools served from this upstream: what it listed with the gateway's credential, after
    /// the `spec.tools` filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_count: Option<i64>,
    /// When the upstream last answered a listing (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_listed: Option<String>,
    /// `spec.run`: the Deployment's pods, and how many of them are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// `spec.run`: how many of its pods are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// The listed tools whose definitions are not approved as they are, or that the poisoning
    /// and shadowing checks flag (at most 500): what `switchboard-operator tools review`
    /// prints and approves from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_review: Vec<ReviewedTool>,
    /// `Accepted`, `Programmed`, `Ready`, `ToolsChanged`, and with `spec.run` `Running`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // A map keyed by type: server-side apply merges each writer's conditions, so one the
    // operator does not own survives its writes.
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// One tool of a server's last listing as the operator reviewed it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReviewedTool {
    /// The tool's name (the upstream's own).
    pub name: String,
    /// The digest of its definition as listed: the value `spec.tools.approved` takes to
    /// approve it.
    pub digest: String,
    /// `changed` (approved with another definition), `new` (no approval of this name),
    /// `unpinned` (the server has no approvals) or `approved` (approved, but flagged).
    pub state: String,
    /// The parts that differ from the approved definition (`description`, `inputSchema`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// What the poisoning and shadowing checks found (`<kind> in <where> (<what>)`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
    /// Held back from every caller (`spec.tools.pinning: hold`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
}

/// A policy service's address and how it is called.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyHook {
    /// Where each check is POSTed: an http or https URL.
    #[schemars(length(max = 2048))]
    pub url: String,
    /// How long one check may take (default `2s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(ms|s|m)$"), extend("default" = "2s"))]
    pub timeout: Option<String>,
    /// `closed` (the default): a failed check refuses the call; `open`: it goes through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<PolicyFailure>,
    /// `request`, `response` (default both).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<PolicyPhase>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PolicyFailure {
    Closed,
    Open,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PolicyPhase {
    Request,
    Response,
}
