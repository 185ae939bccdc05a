//! People signing in with the company's OpenID Connect identity provider: which providers the
//! gateway trusts (`identityProviders`), and which people and groups act with a key's scope
//! (`keys[].people`). The gateway fetches each provider's signing keys itself (discovery, then
//! the JWKS), so the snapshot carries only what a platform team writes.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::tls::UpstreamTls;

/// One identity provider (an OIDC issuer) whose access tokens the gateway accepts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IdentityProviderSpec {
    /// Referenced by `keys[].people[].provider`.
    pub name: String,
    #[serde(default = "crate::names::default_namespace")]
    pub namespace: String,
    /// The `iss` of its tokens, exactly; also where discovery is read
    /// (`<issuer>/.well-known/openid-configuration`).
    pub issuer: String,
    /// A token must be for one of these (its `aud`). Keycloak: add an audience mapper for the
    /// gateway's client; Entra ID: the application ID URI.
    pub audiences: Vec<String>,
    /// Signature algorithms accepted (`RS256`, `RS384`, `RS512`, `PS256`, `PS384`, `PS512`,
    /// `ES256`, `ES384`, `EdDSA`). Never `none`, never HMAC: the gateway holds no shared secret.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// How far the gateway's clock may be from the provider's (`exp`, `nbf`, `iat`).
    #[serde(default = "default_clock_skew", with = "humantime_serde")]
    pub clock_skew: Duration,
    /// Which claims name the person and their groups.
    #[serde(default)]
    pub claims: IdentityClaims,
    /// Claims a token must carry with exactly these string values (e.g. `azp: mcp-cli`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub required_claims: BTreeMap<String, String>,
    /// The provider's JWKS, when it should not be taken from discovery's `jwks_uri`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_url: Option<String>,
    /// Scopes a client asks for (the protected-resource metadata's `scopes_supported`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// TLS settings for discovery and the JWKS (a private CA, a client certificate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<UpstreamTls>,
    /// Brokered mode: the gateway is the authorization server MCP clients see and sends people
    /// to this provider to log in, for a provider that lacks what MCP clients need (dynamic
    /// registration, resource indicators, an audience the client can ask for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brokered: Option<Brokered>,
}

/// The gateway's own client at a brokered provider, and the lifetimes of what it issues.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Brokered {
    /// A confidential client of the provider (authorization code flow) whose redirect URI is
    /// `<gateway>/oauth/callback` and whose access tokens are for one of `audiences`.
    pub client_id: String,
    pub client_secret: crate::SecretSource,
    /// Scopes asked of the provider when a person logs in.
    #[serde(default = "default_brokered_scopes")]
    pub scopes: Vec<String>,
    /// How long the gateway's access tokens live (at most 1h): a person's groups are read
    /// again, and a revoked login noticed, when the client refreshes.
    #[serde(default = "default_access_ttl", with = "humantime_serde")]
    pub access_token_ttl: Duration,
    /// How long a login lasts without logging in again (at most 24h), if the provider keeps
    /// refreshing it that long.
    #[serde(default = "default_refresh_ttl", with = "humantime_serde")]
    pub refresh_token_ttl: Duration,
    /// Enterprise-managed authorization: clients trade an identity assertion (an ID-JAG the
    /// company's identity provider issued for the gateway) at the token endpoint for the
    /// gateway's access token, with no browser round trip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_assertions: Option<IdentityAssertions>,
}

/// Who signs the identity assertions (ID-JAGs) the gateway's token endpoint takes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IdentityAssertions {
    /// The identity provider (by `name`, in this one's namespace) whose issuer and keys sign
    /// them, when that is not this one (Okta, say, issues them from its org server while
    /// people's tokens come from another). Its claims mapping reads the person from them; the
    /// person is this provider's, with the grants a browser login gives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

/// `openid`.
pub fn default_brokered_scopes() -> Vec<String> {
    vec!["openid".into()]
}

/// Five minutes.
pub fn default_access_ttl() -> Duration {
    Duration::from_secs(300)
}

/// Eight hours.
pub fn default_refresh_ttl() -> Duration {
    Duration::from_secs(8 * 3600)
}

impl IdentityProviderSpec {
    /// `<namespace>/<name>`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Claim names, as dotted paths into the token's claims (`realm_access.roles` is Keycloak's
/// realm roles; a member name that itself has dots cannot be named).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IdentityClaims {
    /// The person (a string claim).
    #[serde(default = "default_subject_claim")]
    pub subject: String,
    /// Their groups (a string or an array of strings; missing means none).
    #[serde(default = "default_groups_claim")]
    pub groups: String,
}

impl Default for IdentityClaims {
    fn default() -> Self {
        IdentityClaims {
            subject: default_subject_claim(),
            groups: default_groups_claim(),
        }
    }
}

/// People who act with a key's scope: by subject, or by a group they are in. A person matched
/// by several keys gets the union of their reach, under every matching key's limits.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PeopleBinding {
    /// An identity provider of the key's namespace, by name.
    pub provider: String,
    /// Subjects (the provider's subject claim), exactly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subjects: Vec<String>,
    /// Groups (the provider's groups claim), exactly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

/// The algorithms a provider's keys may sign with.
pub(crate) const ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// `RS256` and `ES256` (what a provider that says nothing else signs with).
pub fn default_algorithms() -> Vec<String> {
    vec!["RS256".into(), "ES256".into()]
}

/// A minute.
pub fn default_clock_skew() -> Duration {
    Duration::from_secs(60)
}

fn default_subject_claim() -> String {
    "sub".into()
}

fn default_groups_claim() -> String {
    "groups".into()
}
