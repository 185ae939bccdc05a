//! Every error the LLM endpoints answer themselves, and the one place where each becomes the
//! status and body a client of that wire format expects (Anthropic's `{"type":"error",...}` or
//! OpenAI's `{"error":{...}}`). A provider's own errors are not here: they are relayed as sent.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::format::Format;
use switchboard_core::errors::GatewayError;

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("{0}")]
    Unauthenticated(&'static str),
    /// Where people sign in: the 401 says where (`challenge`, the WWW-Authenticate value).
    #[error("{reason}")]
    SignIn {
        reason: &'static str,
        challenge: String,
    },
    /// A JWT from an issuer the gateway does not know (`challenge`: `invalid_token`, naming it).
    #[error("token issuer {issuer} is not an identity provider of this gateway")]
    UnknownIssuer { issuer: String, challenge: String },
    /// A signed-in person no key grants anything: 403 `insufficient_scope`.
    #[error("{person} is signed in but granted no scope here")]
    NotGranted { person: String, challenge: String },
    #[error("model {0:?} does not exist")]
    ModelNotFound(String),
    /// A model the key does not reach: `name` as the client sent it, `model` the route's id.
    #[error("the key may not use model {name:?}")]
    ModelForbidden { name: String, model: String },
    #[error("ServiceAccount {0} is bound to no key")]
    NotBound(String),
    #[error("{field}: {message}")]
    InvalidRequest { field: String, message: String },
    #[error("{field}: the key may not use MCP server {server:?}")]
    McpServerForbidden { field: String, server: String },
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("model {model:?} did not answer within {}", humantime::format_duration(*budget))]
    ProviderTimeout { model: String, budget: Duration },
    #[error("model {model:?} is unavailable: {detail}")]
    ProviderUnavailable { model: String, detail: String },
    /// A key's limits refused the request (the MCP error's own words).
    #[error("{message}")]
    Limited {
        message: String,
        retry_after: axum::http::HeaderValue,
    },
    /// The replica shed the request (`admission`), in the MCP error's own words.
    #[error("{message}")]
    Overloaded {
        message: String,
        retry_after: axum::http::HeaderValue,
    },
}

impl LlmError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> LlmError {
        LlmError::InvalidRequest {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            LlmError::Unauthenticated(_)
            | LlmError::SignIn { .. }
            | LlmError::UnknownIssuer { .. } => StatusCode::UNAUTHORIZED,
            LlmError::ModelNotFound(_) => StatusCode::NOT_FOUND,
            LlmError::NotGranted { .. }
            | LlmError::ModelForbidden { .. }
            | LlmError::McpServerForbidden { .. }
            | LlmError::NotBound(_) => StatusCode::FORBIDDEN,
            LlmError::InvalidRequest { .. } => StatusCode::BAD_REQUEST,
            LlmError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            LlmError::ProviderTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            LlmError::ProviderUnavailable { .. } => StatusCode::BAD_GATEWAY,
            LlmError::Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
            LlmError::Overloaded { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// Bounded label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::Unauthenticated(_) | LlmError::SignIn { .. } => "unauthenticated",
            LlmError::UnknownIssuer { .. } => "unknown_issuer",
            LlmError::NotGranted { .. } => "person_not_granted",
            LlmError::ModelNotFound(_) => "model_not_found",
            LlmError::ModelForbidden { .. } => "model_forbidden",
            LlmError::NotBound(_) => "service_account_not_bound",
            LlmError::InvalidRequest { .. } => "invalid_request",
            LlmError::McpServerForbidden { .. } => "mcp_server_forbidden",
            LlmError::PayloadTooLarge { .. } => "payload_too_large",
            LlmError::ProviderTimeout { .. } => "provider_timeout",
            LlmError::ProviderUnavailable { .. } => "provider_unavailable",
            LlmError::Limited { .. } => "rate_limited",
            LlmError::Overloaded { .. } => "overloaded",
        }
    }

    /// What the request's audit record says of this error: its outcome (a refusal for scope
    /// is `access_denied`, as on every face, naming the model or server refused), and the
    /// issuer a refused token named.
    pub fn note_in(&self, noted: &mut switchboard_core::audit::Noted) {
        noted.outcome = Some(match self {
            LlmError::ModelForbidden { model, .. } => {
                noted.model = Some(model.clone());
                "access_denied"
            }
            LlmError::McpServerForbidden { server, .. } => {
                noted.server = Some(server.clone());
                "access_denied"
            }
            LlmError::UnknownIssuer { issuer, .. } => {
                noted.token_issuer = Some(switchboard_core::audit::name(issuer));
                self.kind()
            }
            _ => self.kind(),
        });
    }

    /// Anthropic's error `type` for this error.
    fn anthropic_type(&self) -> &'static str {
        match self {
            LlmError::Unauthenticated(_)
            | LlmError::SignIn { .. }
            | LlmError::UnknownIssuer { .. } => "authentication_error",
            LlmError::ModelNotFound(_) => "not_found_error",
            LlmError::NotGranted { .. }
            | LlmError::ModelForbidden { .. }
            | LlmError::McpServerForbidden { .. }
            | LlmError::NotBound(_) => "permission_error",
            LlmError::InvalidRequest { .. } => "invalid_request_error",
            LlmError::PayloadTooLarge { .. } => "request_too_large",
            LlmError::ProviderTimeout { .. } => "timeout_error",
            LlmError::ProviderUnavailable { .. } => "api_error",
            LlmError::Limited { .. } => "rate_limit_error",
            LlmError::Overloaded { .. } => "overloaded_error",
        }
    }

    /// OpenAI's error `type` and `code` for this error.
    fn openai_type_and_code(&self) -> (&'static str, &'static str) {
        match self {
            LlmError::Unauthenticated(_)
            | LlmError::SignIn { .. }
            | LlmError::UnknownIssuer { .. } => ("invalid_request_error", "invalid_api_key"),
            LlmError::ModelNotFound(_) => ("invalid_request_error", "model_not_found"),
            LlmError::NotGranted { .. }
            | LlmError::ModelForbidden { .. }
            | LlmError::McpServerForbidden { .. }
            | LlmError::NotBound(_) => ("invalid_request_error", "permission_denied"),
            LlmError::InvalidRequest { .. } => ("invalid_request_error", "invalid_request"),
            LlmError::PayloadTooLarge { .. } => ("invalid_request_error", "request_too_large"),
            LlmError::ProviderTimeout { .. } => ("server_error", "timeout"),
            LlmError::ProviderUnavailable { .. } => ("server_error", "upstream_unavailable"),
            LlmError::Limited { .. } => ("requests", "rate_limit_exceeded"),
            LlmError::Overloaded { .. } => ("server_error", "overloaded"),
        }
    }

    /// The error as one JSON body of `format`.
    pub fn body(&self, format: Format) -> serde_json::Value {
        let message = self.to_string();
        match format {
            Format::Anthropic => json!({
                "type": "error",
                "error": {"type": self.anthropic_type(), "message": message},
            }),
            Format::OpenAi => {
                let (kind, code) = self.openai_type_and_code();
                let param = match self {
                    LlmError::InvalidRequest { field, .. }
                    | LlmError::McpServerForbidden { field, .. } => Some(field.clone()),
                    _ => None,
                };
                json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
            }
        }
    }

    pub fn into_response(self, format: Format) -> Response {
        let mut response = (self.status(), axum::Json(self.body(format))).into_response();
        match self {
            LlmError::Unauthenticated(_) => {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"switchboard\""),
                );
            }
            LlmError::SignIn { challenge, .. }
            | LlmError::NotGranted { challenge, .. }
            | LlmError::UnknownIssuer { challenge, .. } => {
                if let Ok(value) = HeaderValue::from_str(&challenge) {
                    response
                        .headers_mut()
                        .insert(header::WWW_AUTHENTICATE, value);
                }
            }
            LlmError::Limited { retry_after, .. } | LlmError::Overloaded { retry_after, .. } => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, retry_after);
            }
            _ => {}
        }
        response
    }
}

impl From<GatewayError> for LlmError {
    /// Errors of the MCP side met while preparing a request (a listing that fails is not
    /// one: the model then goes without that server's tools).
    fn from(e: GatewayError) -> LlmError {
        match e {
            GatewayError::Unauthenticated(m) => LlmError::Unauthenticated(m),
            GatewayError::UnknownIssuer {
                issuer,
                www_authenticate,
            } => LlmError::UnknownIssuer {
                issuer,
                challenge: www_authenticate,
            },
            GatewayError::SignInRequired {
                reason,
                www_authenticate,
            } => LlmError::SignIn {
                reason,
                challenge: www_authenticate,
            },
            GatewayError::PersonNotGranted {
                person,
                www_authenticate,
            } => LlmError::NotGranted {
                person,
                challenge: www_authenticate,
            },
            GatewayError::ServiceAccountNotBound { account } => LlmError::NotBound(account),
            GatewayError::PayloadTooLarge { limit } => LlmError::PayloadTooLarge { limit },
            limited @ GatewayError::Limited { .. } => LlmError::Limited {
                message: limited.to_string(),
                retry_after: limited
                    .retry_after()
                    .unwrap_or(HeaderValue::from_static("1")),
            },
            overloaded @ GatewayError::Overloaded(_) => LlmError::Overloaded {
                message: overloaded.to_string(),
                retry_after: overloaded
                    .retry_after()
                    .unwrap_or(HeaderValue::from_static("1")),
            },
            other => LlmError::invalid("request", other.to_string()),
        }
    }
}
