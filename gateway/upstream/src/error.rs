//! What can go wrong between the gateway and an upstream. The upstream plane returns only
//! this; the client faces turn it into their `GatewayError` once (the `From` below), and the
//! operator's probe reads it directly for a server's condition, without knowing any client face.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::Value;
use switchboard_core::errors::{GatewayError, ScopeChallenge};
use switchboard_core::limits::Refused;

pub use crate::http_client::ClientBuildError;
use crate::http_client::HttpError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream {server:?} did not answer within {}", humantime::format_duration(*budget))]
    Timeout { server: String, budget: Duration },
    #[error("upstream {server:?} is unavailable: {detail}")]
    Unavailable { server: String, detail: String },
    /// The upstream's address (or a redirect's, or what its name resolved to) is one
    /// `gateway.upstreamNetworks` refuses.
    #[error("upstream {server:?} is at an address the gateway may not connect to: {denied}")]
    AddressDenied {
        server: String,
        denied: switchboard_snapshot::Denied,
    },
    #[error("upstream {server:?} rejected the gateway's credential (HTTP 401)")]
    Unauthorized {
        server: String,
        /// The upstream's `WWW-Authenticate`, kept for relaying (caller-credential servers).
        challenge: Option<String>,
    },
    /// A 401 on the caller's own credential, turned into the caller's challenge.
    #[error("upstream {server:?} requires the caller to authenticate")]
    AuthRequired {
        server: String,
        /// The challenge the gateway sends: it points at the gateway's own metadata.
        www_authenticate: String,
    },
    #[error("upstream {server:?} refused the request (HTTP 403)")]
    Forbidden {
        server: String,
        /// The upstream's `WWW-Authenticate`, kept for relaying a scope challenge
        /// (caller-credential servers).
        challenge: Option<String>,
    },
    /// A person's token lacks a scope the call needs: the gateway's own challenge, or an
    /// upstream's 403 `insufficient_scope` on the caller's own credential, pointed at the
    /// gateway.
    #[error("{}", .0.description)]
    ScopeRequired(ScopeChallenge),
    /// The upstream answered with a JSON-RPC error (its error object kept for the caller).
    #[error("upstream {server:?} returned an error: {message}")]
    Rpc {
        server: String,
        code: i64,
        message: String,
        error: Value,
    },
    /// The upstream does not know the tool (it answered "unknown tool").
    #[error("unknown tool: {name}")]
    ToolNotFound { name: String },
    /// The tool's definition is not approved and its server holds such tools.
    #[error("tool {name} of {server:?} is held: {why}")]
    ToolHeld {
        server: String,
        name: String,
        why: String,
    },
    /// The call's arguments break the caller's key's rules (no I/O happened).
    #[error(transparent)]
    ArgumentRefused(switchboard_core::arguments::RefusedArguments),
    /// The policy service denied the call, or its result.
    #[error("tool {tool} of {server:?} is denied by policy: {reason}")]
    PolicyDenied {
        server: String,
        tool: String,
        reason: String,
    },
    /// The policy service could not check the call (failure: closed).
    #[error("the policy check of {server:?} failed: {detail}")]
    PolicyUnavailable { server: String, detail: String },
    /// No server with this id in the table (the probe asks by id).
    #[error("unknown server {server:?}")]
    ServerNotFound { server: String },
    /// A `byClient` upstream no longer has the client session's own session: the process that
    /// held its state is gone, and a new one would not have it (the client re-initializes).
    #[error(
        "upstream {server:?} no longer has this session's state (the server process that held it is gone)"
    )]
    SessionGone { server: String },
    /// The server's own limits refused the request before any I/O.
    #[error("{} {:?} is over its limit", .0.scope, .0.id)]
    Limited(Refused),
    /// The call needs the caller's own account at this upstream and none is connected: `url`
    /// is where they connect one (left out of the message, which logs print).
    #[error("the caller has no account connected for {server:?}")]
    AccountNotConnected { server: String, url: String },
    /// The shared store did not answer a call that needs the caller's account.
    #[error("the state store did not answer for {server:?}")]
    StoreUnavailable { server: String },
    /// A token exchange for a person who signed in with an identity assertion: the gateway
    /// holds none of the provider's tokens for them to exchange.
    #[error(
        "{server:?} exchanges the person's identity provider token, which the gateway does not hold"
    )]
    ProviderTokenNotHeld { server: String },
}

impl UpstreamError {
    /// An exchange with `server` (or its token endpoint or metadata) that failed at the HTTP
    /// level, named by cause.
    pub fn http(server: &switchboard_core::table::Server, error: HttpError) -> UpstreamError {
        let presents_certificate = server.tls.as_ref().is_some_and(|t| t.client.is_some());
        UpstreamError::http_of(server.id(), presents_certificate, error)
    }

    /// [`UpstreamError::http`] where only the server's id is at hand (and whether the gateway
    /// presents it a client certificate).
    pub(crate) fn http_of(
        server: &str,
        presents_certificate: bool,
        error: HttpError,
    ) -> UpstreamError {
        match error {
            HttpError::Denied(denied) => UpstreamError::AddressDenied {
                server: server.to_string(),
                denied,
            },
            other => UpstreamError::Unavailable {
                server: server.to_string(),
                detail: other.detail(presents_certificate),
            },
        }
    }

    /// The outcome label of the upstream-call metric (the client-facing error's code).
    pub fn outcome(&self) -> &'static str {
        match self {
            UpstreamError::Timeout { .. } => "upstream_timeout",
            UpstreamError::Unavailable { .. } => "upstream_unavailable",
            UpstreamError::AddressDenied { .. } => "upstream_address_denied",
            UpstreamError::Unauthorized { .. } => "upstream_auth_failed",
            UpstreamError::AuthRequired { .. } => "upstream_auth_required",
            UpstreamError::Forbidden { .. } => "upstream_forbidden",
            UpstreamError::ScopeRequired(_) => "insufficient_scope",
            UpstreamError::Rpc { .. } => "bad_request",
            UpstreamError::ToolNotFound { .. } => "tool_not_found",
            UpstreamError::ToolHeld { .. } => "tool_held",
            UpstreamError::ArgumentRefused(_) => "argument_refused",
            UpstreamError::PolicyDenied { .. } => "policy_denied",
            UpstreamError::PolicyUnavailable { .. } => "policy_unavailable",
            UpstreamError::ServerNotFound { .. } => "server_not_found",
            UpstreamError::SessionGone { .. } => "session_not_found",
            UpstreamError::Limited(_) => "rate_limited",
            UpstreamError::AccountNotConnected { .. } => "account_not_connected",
            UpstreamError::ProviderTokenNotHeld { .. } => "provider_token_not_held",
            UpstreamError::StoreUnavailable { .. } => "store_unavailable",
        }
    }
}

impl From<Refused> for UpstreamError {
    fn from(refused: Refused) -> Self {
        UpstreamError::Limited(refused)
    }
}

/// The one mapping to what clients see.
impl From<UpstreamError> for GatewayError {
    fn from(e: UpstreamError) -> Self {
        match e {
            UpstreamError::Timeout { server, budget } => {
                GatewayError::UpstreamTimeout { server, budget }
            }
            UpstreamError::Unavailable { server, detail } => {
                GatewayError::UpstreamUnavailable { server, detail }
            }
            UpstreamError::AddressDenied { server, denied } => {
                GatewayError::UpstreamAddressDenied { server, denied }
            }
            UpstreamError::Unauthorized { server, challenge } => {
                GatewayError::UpstreamUnauthorized { server, challenge }
            }
            UpstreamError::AuthRequired {
                server,
                www_authenticate,
            } => GatewayError::UpstreamAuthRequired {
                server,
                www_authenticate,
            },
            UpstreamError::Forbidden { server, .. } => GatewayError::UpstreamForbidden { server },
            UpstreamError::ScopeRequired(challenge) => GatewayError::ScopeRequired(challenge),
            UpstreamError::Rpc {
                server,
                code,
                message,
                error,
            } => GatewayError::Protocol {
                code,
                message: format!("upstream {server:?} returned an error: {message}"),
                status: StatusCode::BAD_GATEWAY,
                data: Some(error),
            },
            UpstreamError::ToolNotFound { name } => GatewayError::ToolNotFound { name },
            UpstreamError::ArgumentRefused(refused) => GatewayError::ArgumentRefused(refused),
            UpstreamError::PolicyDenied {
                server,
                tool,
                reason,
            } => GatewayError::PolicyDenied {
                server,
                tool,
                reason,
            },
            UpstreamError::PolicyUnavailable { server, detail } => {
                GatewayError::PolicyUnavailable { server, detail }
            }
            UpstreamError::ToolHeld { server, name, why } => {
                GatewayError::ToolHeld { server, name, why }
            }
            UpstreamError::ServerNotFound { server } => GatewayError::ServerNotFound { server },
            UpstreamError::SessionGone { server } => GatewayError::UpstreamSessionGone { server },
            UpstreamError::Limited(refused) => refused.into(),
            UpstreamError::AccountNotConnected { server, url } => {
                GatewayError::AccountNotConnected { server, url }
            }
            UpstreamError::StoreUnavailable { server } => GatewayError::StoreUnavailable { server },
            UpstreamError::ProviderTokenNotHeld { server } => {
                GatewayError::ProviderTokenNotHeld { server }
            }
        }
    }
}

/// A document the gateway reads for itself (an identity provider's discovery or key set, a
/// client's metadata document) could not be had. The message never names the URL.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    #[error(transparent)]
    Client(#[from] ClientBuildError),
    /// `gateway.upstreamNetworks` refuses the document's address.
    #[error("{0}")]
    AddressDenied(switchboard_snapshot::Denied),
    /// No answer: the connection, TLS or the transfer failed (the cause, in words).
    #[error("{0}")]
    Transport(String),
    #[error("HTTP {0}")]
    Status(u16),
    #[error("not a JSON document")]
    NotJson,
}

/// Why an identity provider's signing keys (and, from its discovery, its login endpoints)
/// were not loaded. The operator's probe tells a discovery failure from a key-set failure by
/// [`KeysError::in_discovery`].
#[derive(Debug, Clone, thiserror::Error)]
pub enum KeysError {
    #[error("issuer: {0}")]
    IssuerUrl(url::ParseError),
    #[error("discovery: {0}")]
    Discovery(FetchError),
    /// The discovery document was read but does not say what is needed.
    #[error("discovery: {0}")]
    DiscoveryContent(&'static str),
    #[error("jwks_uri: {0}")]
    KeysUrl(url::ParseError),
    #[error("key set: {0}")]
    KeySet(FetchError),
    /// The key set was read but holds no key this gateway can verify with (why, in words).
    #[error("key set: {0}")]
    KeySetContent(String),
    #[error("no answer within {}s", .0.as_secs())]
    Timeout(Duration),
}

impl KeysError {
    /// Whether the provider's discovery (rather than its key set) is what failed.
    pub fn in_discovery(&self) -> bool {
        matches!(
            self,
            KeysError::IssuerUrl(_) | KeysError::Discovery(_) | KeysError::DiscoveryContent(_)
        )
    }
}

/// Why an exchange at a brokered identity provider's token endpoint (a code redeemed, a login
/// refreshed) failed. Names the cause and the provider's error code, never a token or the URL.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TokenEndpointError {
    #[error("the identity provider is not brokered")]
    NotBrokered,
    #[error("the token endpoint is not a URL")]
    NotAUrl,
    #[error("{0}")]
    AddressDenied(switchboard_snapshot::Denied),
    #[error(transparent)]
    Client(#[from] ClientBuildError),
    #[error("token endpoint: {0}")]
    Transport(String),
    #[error("token endpoint: no answer within {}s", .0.as_secs())]
    Timeout(Duration),
    /// The endpoint refused: its status and its `error` code (empty when it gave none).
    #[error("token endpoint: HTTP {status} {code}")]
    Refused { status: u16, code: String },
    #[error("token endpoint: no access_token in the answer")]
    NoAccessToken,
}

/// Why a client whose `client_id` is an https URL cannot be used (its Client ID Metadata
/// Document, draft-ietf-oauth-client-id-metadata-document).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientDocumentError {
    #[error("the client_id is not a URL")]
    NotAUrl,
    #[error("a client_id URL is https with a path and no fragment")]
    NotHttpsWithPath,
    #[error("client metadata document: {0}")]
    Fetch(FetchError),
    #[error("client metadata document: no answer within {}s", .0.as_secs())]
    Timeout(Duration),
    #[error("client metadata document: not a JSON client description")]
    NotADescription,
    #[error("client metadata document: its client_id is not the URL it was read from")]
    ClientIdMismatch,
    #[error("client metadata document: only public clients (token_endpoint_auth_method none)")]
    NotPublic,
}
