//! `IdentityProvider`: an OpenID Connect issuer whose people sign in to the gateway with their
//! own access tokens (`McpKey.spec.people` says with which scope).

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Condition, SecretKeyRef, UpstreamTls};

/// An identity provider whose access tokens the gateway accepts. The gateway reads its OIDC
/// discovery document and signing keys itself and verifies tokens offline; the operator reads
/// them too, to say in status whether it can. McpKeys of this namespace name it in
/// `spec.people[].provider`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "switchboard.dev",
    version = "v1alpha1",
    kind = "IdentityProvider",
    doc = "An OpenID Connect identity provider whose access tokens, issued for this gateway, sign people in (McpKey `people` grant them scope).",
    namespaced,
    status = "IdentityProviderStatus",
    shortname = "idp",
    category = "switchboard",
    printcolumn = r#"{"name":"Issuer","type":"string","jsonPath":".spec.issuer"}"#,
    printcolumn = r#"{"name":"Keys","type":"integer","jsonPath":".status.signingKeys"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    // Why it is not Ready, with `kubectl get -o wide`.
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct IdentityProviderSpec {
    /// The `iss` of its tokens, exactly (`https://login.example.com/realms/corp`); discovery is
    /// read at `<issuer>/.well-known/openid-configuration`. https (http only on loopback).
    #[schemars(
        regex(pattern = r"^https?://[^\s/?#]+(/[^\s?#]*)?$"),
        length(max = 2048)
    )]
    pub issuer: String,
    /// A token must be for one of these (its `aud`): Keycloak, the audience an audience mapper
    /// adds; Entra ID, the application ID URI.
    #[schemars(length(min = 1, max = 16), inner(length(min = 1, max = 512)))]
    pub audiences: Vec<String>,
    /// Signature algorithms accepted (default `RS256`, `ES256`). Never `none`, never HMAC.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 9))]
    #[schemars(extend("default" = ["RS256", "ES256"]))]
    pub algorithms: Vec<SigningAlgorithm>,
    /// How far the gateway's clock may be from the provider's for `exp` and `nbf` (default
    /// `60s`, at most `10m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(ms|s|m)$"))]
    #[schemars(extend("default" = "60s"))]
    pub clock_skew: Option<String>,
    /// Which claims name the person and their groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<IdentityClaims>,
    /// Claims a token must carry with exactly these string values (e.g. `azp: mcp-cli`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(length(max = 16))]
    pub required_claims: BTreeMap<String, String>,
    /// The provider's JWKS, when not the discovery document's `jwks_uri`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^https?://\S+$"), length(max = 2048))]
    pub jwks_url: Option<String>,
    /// What MCP clients ask for (the protected-resource metadata's `scopes_supported`): for
    /// Keycloak, the client scope that puts the gateway in the token's audience.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(regex(pattern = r"^[!#-\[\]-~]+$")))]
    pub scopes: Vec<String>,
    /// TLS for discovery and the key set (a private CA, a client certificate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<UpstreamTls>,
    /// Brokered mode: the gateway is the authorization server MCP clients see and sends people
    /// here to log in (for a provider without dynamic registration or resource indicators).
    /// At most one IdentityProvider is brokered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brokered: Option<Brokered>,
}

/// The gateway's own confidential client at the provider.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Brokered {
    /// The client id; its redirect URI at the provider is `<gateway public URL>/oauth/callback`.
    #[schemars(length(min = 1, max = 256))]
    pub client_id: String,
    /// Its secret, from a Secret in this namespace.
    pub client_secret_ref: SecretKeyRef,
    /// Scopes asked of the provider (default `openid`; must include it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[schemars(extend("default" = ["openid"]))]
    pub scopes: Vec<String>,
    /// Lifetime of the gateway's access tokens (default `5m`, 30s to 1h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(s|m|h)$"))]
    #[schemars(extend("default" = "5m"))]
    pub access_token_ttl: Option<String>,
    /// How long a login lasts without logging in again (default `8h`, at most 24h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(s|m|h)$"))]
    #[schemars(extend("default" = "8h"))]
    pub refresh_token_ttl: Option<String>,
    /// Enterprise-managed authorization: clients trade an identity assertion (ID-JAG) the
    /// company's identity provider issued for the gateway at its token endpoint, with no browser
    /// round trip (`{}`: signed by this provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_assertions: Option<IdentityAssertions>,
}

/// Who signs the identity assertions the gateway's token endpoint takes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityAssertions {
    /// Another IdentityProvider in this namespace whose issuer and keys sign them (default:
    /// this one). The person they name is this provider's, with a browser login's grants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub provider: Option<String>,
}

/// The signature algorithms a provider's keys may use.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[allow(clippy::upper_case_acronyms)]
pub enum SigningAlgorithm {
    RS256,
    RS384,
    RS512,
    PS256,
    PS384,
    PS512,
    ES256,
    ES384,
    EdDSA,
}

impl SigningAlgorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            SigningAlgorithm::RS256 => "RS256",
            SigningAlgorithm::RS384 => "RS384",
            SigningAlgorithm::RS512 => "RS512",
            SigningAlgorithm::PS256 => "PS256",
            SigningAlgorithm::PS384 => "PS384",
            SigningAlgorithm::PS512 => "PS512",
            SigningAlgorithm::ES256 => "ES256",
            SigningAlgorithm::ES384 => "ES384",
            SigningAlgorithm::EdDSA => "EdDSA",
        }
    }
}

/// Claim names, as dotted paths into the token (`realm_access.roles` is Keycloak's realm roles).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityClaims {
    /// The person (default `sub`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[^.\s]+(\.[^.\s]+)*$"), length(max = 256))]
    #[schemars(extend("default" = "sub"))]
    pub subject: Option<String>,
    /// Their groups: a string or an array of strings (default `groups`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[^.\s]+(\.[^.\s]+)*$"), length(max = 256))]
    #[schemars(extend("default" = "groups"))]
    pub groups: Option<String>,
}

/// What the operator observed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityProviderStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// How many signing keys the operator loaded from the provider the last time it looked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_keys: Option<i64>,
    /// `Accepted` (in the snapshot), `KeysLoaded` (discovery and the key set read, with the
    /// reason when not), `Ready` (both, and every gateway replica serves it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // A map keyed by type: server-side apply merges each writer's conditions, so one the
    // operator does not own survives its writes.
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}
