//! What can go wrong between the gateway and an upstream. The upstream plane returns only
//! this; the client faces turn it into their `GatewayError` once (the `From` below), and the
//! operator's probe reads it directly for a server's condition, without knowing any client face.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::Value;
use switchboard_core::errors::GatewayError;
use switchboard_core::limits::Refused;

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
    Forbidden { server: String },
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
            UpstreamError::Rpc { .. } => "bad_request",
            UpstreamError::ToolNotFound { .. } => "tool_not_found",
            UpstreamError::ServerNotFound { .. } => "server_not_found",
            UpstreamError::SessionGone { .. } => "session_not_found",
            UpstreamError::Limited(_) => "rate_limited",
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
            UpstreamError::Forbidden { server } => GatewayError::UpstreamForbidden { server },
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
            UpstreamError::ServerNotFound { server } => GatewayError::ServerNotFound { server },
            UpstreamError::SessionGone { server } => GatewayError::UpstreamSessionGone { server },
            UpstreamError::Limited(refused) => refused.into(),
        }
    }
}
