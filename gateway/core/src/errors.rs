//! Every error a client can see, and the one place where each becomes an HTTP status, a REST
//! body, or a JSON-RPC error (the table is in docs/architecture.md, "Errors").

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::limits::{LimitKind, Refused, retry_after_seconds};
use switchboard_protocol::{Era, modern_error_status};

pub use switchboard_protocol::codes;

/// What a refusal for scope refused: the audit record names it, whatever the client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutOfScope {
    /// A server (its id) the caller's keys do not reach, or one whose tool they do not admit.
    Server(String),
    /// A virtual server (its id) the caller's keys do not reach.
    VirtualServer(String),
}

/// A 403 `insufficient_scope` (RFC 6750; SEP-2350 for MCP): every scope the call needs, in one
/// challenge so a client steps up in one round, and the protected-resource metadata of the
/// endpoint the client called (where it learns how to get them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeChallenge {
    /// The server the call was for.
    pub server: String,
    /// Every scope the call needs, space-separated (the challenge's `scope`).
    pub scope: String,
    /// Why, in words (the message clients see; the challenge's `error_description`).
    pub description: String,
    /// The `WWW-Authenticate` value.
    pub www_authenticate: String,
}

impl ScopeChallenge {
    pub fn new(server: &str, scope: String, description: String, metadata: &str) -> Self {
        let www_authenticate = format!(
            "Bearer error=\"insufficient_scope\", scope={}, resource_metadata={}, error_description={}",
            quoted(&scope),
            quoted(metadata),
            quoted(&description),
        );
        ScopeChallenge {
            server: server.to_string(),
            scope,
            description,
            www_authenticate,
        }
    }
}

/// An RFC 9110 quoted-string: `"` and `\` escaped, control characters left out (a header
/// value cannot hold them).
fn quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars().filter(|c| !c.is_control()) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum GatewayError {
    #[error("{0}")]
    Unauthenticated(&'static str),
    /// A JWT whose `iss` is neither an identity provider of this gateway nor the issuer of its
    /// cluster's ServiceAccount tokens (the issuer as `shown_issuer` makes it safe to show).
    #[error("token issuer {issuer} is not an identity provider of this gateway")]
    UnknownIssuer {
        issuer: String,
        /// The challenge: `invalid_token` with this reason, and where people sign in, the
        /// gateway's protected-resource metadata.
        www_authenticate: String,
    },
    /// A 401 on an endpoint people sign in to: the challenge points at the gateway's
    /// protected-resource metadata, from which an MCP client starts the OAuth flow.
    #[error("{reason}")]
    SignInRequired {
        reason: &'static str,
        www_authenticate: String,
    },
    /// A signed-in person no key grants anything (403 `insufficient_scope`).
    #[error("{person} is granted no scope on this gateway")]
    PersonNotGranted {
        person: String,
        www_authenticate: String,
    },
    /// A person's token lacks a scope the call needs (403 `insufficient_scope`, SEP-2350):
    /// the gateway's own refusal (`tools.requiredScopes`), or an upstream's relayed.
    #[error("{}", .0.description)]
    ScopeRequired(ScopeChallenge),
    #[error("the key may not use server {server:?}")]
    AccessDenied { server: String },
    #[error("unknown server {server:?}")]
    ServerNotFound { server: String },
    #[error("unknown tool: {name}")]
    ToolNotFound { name: String },
    /// The policy service denied the call (before the upstream, or its result after).
    #[error("tool {tool} of server {server:?} is denied by policy: {reason}")]
    PolicyDenied {
        server: String,
        tool: String,
        reason: String,
    },
    /// The policy service could not check the call and its failure mode is closed.
    #[error(
        "the policy check of server {server:?} failed ({detail}); the call is refused (failure: closed)"
    )]
    PolicyUnavailable { server: String, detail: String },
    /// The call's arguments break a rule of the caller's key, or set an argument it binds.
    #[error("{0}")]
    ArgumentRefused(crate::arguments::RefusedArguments),
    /// The tool's definition is not the one the platform team approved, and its server holds
    /// such tools (`tools.pinning: hold`): a refusal, named as one.
    #[error(
        "tool {name} is held ({why}): server {server:?} serves only the definitions its tools.approved names"
    )]
    ToolHeld {
        server: String,
        name: String,
        why: String,
    },
    #[error("tool name {name:?} is served by several servers; use one of the prefixed names")]
    AmbiguousTool {
        name: String,
        candidates: Vec<String>,
    },
    #[error("unknown {kind}: {name}")]
    NotFound { kind: &'static str, name: String },
    #[error("upstream {server:?} did not answer within {}", humantime::format_duration(*budget))]
    UpstreamTimeout { server: String, budget: Duration },
    #[error("upstream {server:?} is unavailable: {detail}")]
    UpstreamUnavailable { server: String, detail: String },
    /// The upstream's address (or a redirect's, or what its name resolved to) is one
    /// `gateway.upstreamNetworks` refuses.
    #[error("upstream {server:?} is at an address the gateway may not connect to: {denied}")]
    UpstreamAddressDenied {
        server: String,
        denied: switchboard_snapshot::Denied,
    },
    #[error("upstream {server:?} rejected the gateway's credential (HTTP 401)")]
    UpstreamUnauthorized {
        server: String,
        /// The upstream's `WWW-Authenticate`, kept for relaying (caller-credential servers).
        challenge: Option<String>,
    },
    #[error("upstream {server:?} requires the caller to authenticate")]
    UpstreamAuthRequired {
        server: String,
        /// The challenge the gateway sends: it points at the gateway's own metadata.
        www_authenticate: String,
    },
    #[error("upstream {server:?} refused the request (HTTP 403)")]
    UpstreamForbidden { server: String },
    /// A call that needs the caller's own account at `server`'s upstream, with none connected
    /// (or its grant ended): the caller opens `url` in a browser and retries (URL elicitation).
    /// The message leaves the URL out (it carries a sealed ticket; logs print messages): the
    /// answers put it where clients read it.
    #[error("connect your account for {server:?} first: open the connect URL, then retry")]
    AccountNotConnected { server: String, url: String },
    /// The shared store did not answer a call that needs it: the caller's upstream account is
    /// kept there (never another account instead).
    #[error(
        "the gateway's state store is unavailable: {server:?} needs the caller's own account, kept there; retry shortly"
    )]
    StoreUnavailable { server: String },
    /// A server that exchanges the person's identity provider token, called by a person who
    /// signed in with an identity assertion (enterprise-managed authorization): the gateway
    /// holds no token of theirs to exchange. A refusal, not an upstream's failure.
    #[error(
        "server {server:?} exchanges the person's identity provider token, which a sign-in with an identity assertion does not give the gateway: sign in through the browser to use it"
    )]
    ProviderTokenNotHeld { server: String },
    #[error("parse error: {0}")]
    Parse(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("invalid params: {0}")]
    InvalidParams(String),
    #[error("method not found: {0}")]
    MethodNotFound(String),
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("session not found; initialize a new session")]
    SessionNotFound,
    /// The client session's own session on a `byClient` upstream (a process of a stdio server)
    /// is gone, and its state with it: the client session ends (404), so that the client starts
    /// a new one rather than go on without that state.
    #[error(
        "session not found: upstream {server:?} no longer has this session's state (the server process that held it is gone); initialize a new session"
    )]
    UpstreamSessionGone { server: String },
    #[error("session belongs to another key")]
    SessionForbidden,
    #[error("ServiceAccount {account} is bound to no key")]
    ServiceAccountNotBound { account: String },
    #[error("host or origin not allowed")]
    ForbiddenOrigin,
    #[error("the gateway is overloaded: {0}")]
    Overloaded(String),
    #[error("{scope} {id:?} is over its {} limit; retry after {}s", kind.label(), retry_after_seconds(*retry_after))]
    Limited {
        /// `key` or `server`.
        scope: &'static str,
        id: String,
        kind: LimitKind,
        retry_after: Duration,
    },
    /// A refusal for scope on a face where what the caller may not reach is invisible
    /// (invariant 4): the client gets `answer` exactly (an unknown server, tool, prompt, ...),
    /// the audit record and the request metrics `access_denied` naming what was `refused`.
    #[error("{answer}")]
    Invisible {
        refused: OutOfScope,
        answer: Box<GatewayError>,
    },
    #[error("{message}")]
    Protocol {
        /// A code the MCP specification assigns (e.g. the 2026-07-28 header mismatch codes).
        code: i64,
        message: String,
        status: StatusCode,
        data: Option<Value>,
    },
}

impl GatewayError {
    /// A refusal for scope answered as `answer` (what the client would get for a thing that
    /// does not exist), recorded as the refusal it is.
    pub fn invisible(refused: OutOfScope, answer: GatewayError) -> GatewayError {
        GatewayError::Invisible {
            refused,
            answer: Box::new(answer),
        }
    }

    /// The refusal of a JWT whose issuer `iss` (unverified, as the token names it) this gateway
    /// does not know.
    pub(crate) fn unknown_issuer(iss: &str) -> GatewayError {
        let issuer = shown_issuer(iss);
        let www_authenticate = format!(
            "Bearer realm=\"switchboard\", error=\"invalid_token\", error_description=\"token issuer {issuer} is not an identity provider of this gateway\""
        );
        GatewayError::UnknownIssuer {
            issuer,
            www_authenticate,
        }
    }

    pub(crate) fn http_status(&self) -> StatusCode {
        use GatewayError::*;
        match self {
            Unauthenticated(_)
            | UnknownIssuer { .. }
            | SignInRequired { .. }
            | UpstreamAuthRequired { .. } => StatusCode::UNAUTHORIZED,
            Invisible { answer, .. } => answer.http_status(),
            AccessDenied { .. }
            | ToolHeld { .. }
            | PolicyDenied { .. }
            | ArgumentRefused(_)
            | PersonNotGranted { .. }
            | ScopeRequired(_)
            | AccountNotConnected { .. }
            | ProviderTokenNotHeld { .. }
            | SessionForbidden
            | ForbiddenOrigin
            | ServiceAccountNotBound { .. } => StatusCode::FORBIDDEN,
            ServerNotFound { .. }
            | ToolNotFound { .. }
            | NotFound { .. }
            | SessionNotFound
            | UpstreamSessionGone { .. } => StatusCode::NOT_FOUND,
            AmbiguousTool { .. } => StatusCode::CONFLICT,
            UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            UpstreamUnavailable { .. }
            | UpstreamAddressDenied { .. }
            | UpstreamUnauthorized { .. }
            | UpstreamForbidden { .. } => StatusCode::BAD_GATEWAY,
            Parse(_) | InvalidRequest(_) | InvalidParams(_) | MethodNotFound(_) => {
                StatusCode::BAD_REQUEST
            }
            PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Overloaded(_) | StoreUnavailable { .. } | PolicyUnavailable { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Protocol { status, .. } => *status,
        }
    }

    /// The stable string code of the REST API.
    pub fn rest_code(&self) -> &'static str {
        use GatewayError::*;
        match self {
            Unauthenticated(_) | UnknownIssuer { .. } | SignInRequired { .. } => "unauthenticated",
            Invisible { answer, .. } => answer.rest_code(),
            PersonNotGranted { .. } | ScopeRequired(_) => "insufficient_scope",
            AccessDenied { .. } => "access_denied",
            ServerNotFound { .. } => "server_not_found",
            ToolNotFound { .. } => "tool_not_found",
            ToolHeld { .. } => "tool_held",
            ArgumentRefused(_) => "argument_refused",
            PolicyDenied { .. } => "policy_denied",
            PolicyUnavailable { .. } => "policy_unavailable",
            AmbiguousTool { .. } => "ambiguous_tool",
            NotFound { .. } => "not_found",
            UpstreamTimeout { .. } => "upstream_timeout",
            UpstreamUnavailable { .. } => "upstream_unavailable",
            UpstreamAddressDenied { .. } => "upstream_address_denied",
            UpstreamUnauthorized { .. } => "upstream_auth_failed",
            UpstreamAuthRequired { .. } => "upstream_auth_required",
            UpstreamForbidden { .. } => "upstream_forbidden",
            AccountNotConnected { .. } => "account_not_connected",
            ProviderTokenNotHeld { .. } => "provider_token_not_held",
            StoreUnavailable { .. } => "store_unavailable",
            Parse(_)
            | InvalidRequest(_)
            | InvalidParams(_)
            | MethodNotFound(_)
            | Protocol { .. } => "bad_request",
            PayloadTooLarge { .. } => "payload_too_large",
            SessionNotFound | UpstreamSessionGone { .. } => "session_not_found",
            SessionForbidden | ForbiddenOrigin => "forbidden",
            ServiceAccountNotBound { .. } => "service_account_not_bound",
            Overloaded(_) => "overloaded",
            Limited { .. } => "rate_limited",
        }
    }

    /// The JSON-RPC `error` object for MCP clients.
    pub fn jsonrpc_error(&self) -> Value {
        use GatewayError::*;
        let (code, data) = match self {
            Invisible { answer, .. } => return answer.jsonrpc_error(),
            Unauthenticated(_)
            | UnknownIssuer { .. }
            | SignInRequired { .. }
            | PersonNotGranted { .. }
            | SessionForbidden
            | ForbiddenOrigin
            | ServiceAccountNotBound { .. } => (codes::INVALID_REQUEST, None),
            ScopeRequired(challenge) => (
                codes::INVALID_REQUEST,
                Some(json!({ "server": challenge.server, "scope": challenge.scope })),
            ),
            // On MCP a server the caller cannot reach is invisible: the same answer as a tool
            // that does not exist (invariant 4). Callers map AccessDenied to ToolNotFound first;
            // this arm only guards against a path that forgets to.
            AccessDenied { .. } | ServerNotFound { .. } => (codes::INVALID_PARAMS, None),
            ToolNotFound { .. } | NotFound { .. } => (codes::INVALID_PARAMS, None),
            PolicyDenied { server, reason, .. } => (
                codes::INVALID_PARAMS,
                Some(json!({ "server": server, "policy": reason })),
            ),
            PolicyUnavailable { server, .. } => (
                codes::UPSTREAM_UNAVAILABLE,
                Some(json!({ "server": server, "policy": "unavailable" })),
            ),
            ArgumentRefused(refused) => (
                codes::INVALID_PARAMS,
                Some(json!({ "tool": refused.tool, "refused": refused.refusal.to_string() })),
            ),
            ToolHeld { server, why, .. } => (
                codes::INVALID_PARAMS,
                Some(json!({ "server": server, "held": why })),
            ),
            AmbiguousTool { candidates, .. } => (
                codes::INVALID_PARAMS,
                Some(json!({ "candidates": candidates })),
            ),
            UpstreamTimeout { server, budget } => (
                codes::UPSTREAM_TIMEOUT,
                Some(json!({ "server": server, "timeoutMs": budget.as_millis() as u64 })),
            ),
            UpstreamUnavailable { server, .. } | UpstreamAddressDenied { server, .. } => (
                codes::UPSTREAM_UNAVAILABLE,
                Some(json!({ "server": server })),
            ),
            UpstreamUnauthorized { server, .. }
            | UpstreamForbidden { server }
            | UpstreamAuthRequired { server, .. } => {
                (codes::UPSTREAM_AUTH, Some(json!({ "server": server })))
            }
            AccountNotConnected { server, url } => {
                let message = self.connect_message(server, url);
                return json!({
                    "code": codes::URL_ELICITATION_REQUIRED,
                    "message": message,
                    "data": { "elicitations": [url_elicitation(server, url, &message, true)] },
                });
            }
            StoreUnavailable { server } => (
                codes::UPSTREAM_UNAVAILABLE,
                Some(json!({ "server": server, "store": "unavailable" })),
            ),
            // Refused like a policy's denial: the call, not the session or the sign-in.
            ProviderTokenNotHeld { server } => (
                codes::INVALID_PARAMS,
                Some(json!({ "server": server, "signIn": "browser" })),
            ),
            Parse(_) => (codes::PARSE_ERROR, None),
            InvalidRequest(_) | PayloadTooLarge { .. } => (codes::INVALID_REQUEST, None),
            InvalidParams(_) => (codes::INVALID_PARAMS, None),
            MethodNotFound(_) => (codes::METHOD_NOT_FOUND, None),
            Overloaded(_) => (codes::INTERNAL_ERROR, None),
            Limited {
                scope,
                id,
                kind,
                retry_after,
            } => (
                codes::LIMITED,
                Some(json!({
                    (*scope): id,
                    "limit": kind.label(),
                    "retryAfterSeconds": retry_after_seconds(*retry_after),
                })),
            ),
            // The HTTP status (404) is what clients act on to re-initialize.
            SessionNotFound => (codes::INVALID_REQUEST, None),
            UpstreamSessionGone { server } => {
                (codes::INVALID_REQUEST, Some(json!({ "server": server })))
            }
            Protocol { code, data, .. } => (*code, data.clone()),
        };
        let mut error = json!({ "code": code, "message": self.to_string() });
        if let Some(data) = data {
            error["data"] = data;
        }
        error
    }

    /// The HTTP status an MCP response carrying this error gets. JSON-RPC-level failures ride
    /// on 200 (the request itself was fine); transport-level ones keep their HTTP meaning so
    /// clients act on them (401 re-authenticates, 404 re-initializes a session, 413 shrinks).
    pub fn mcp_http_status(&self) -> StatusCode {
        use GatewayError::*;
        match self {
            Invisible { answer, .. } => answer.mcp_http_status(),
            Unauthenticated(_)
            | UnknownIssuer { .. }
            | SignInRequired { .. }
            | PersonNotGranted { .. }
            | ScopeRequired(_)
            | UpstreamAuthRequired { .. }
            | SessionNotFound
            | UpstreamSessionGone { .. }
            | SessionForbidden
            | ForbiddenOrigin
            | ServiceAccountNotBound { .. }
            | PayloadTooLarge { .. }
            | Overloaded(_)
            | Limited { .. }
            | Parse(_)
            | InvalidRequest(_)
            | Protocol { .. } => self.http_status(),
            _ => StatusCode::OK,
        }
    }

    /// The REST body: `{"error": {"code", "message", ...}}`.
    pub(crate) fn rest_body(&self) -> Value {
        if let GatewayError::Invisible { answer, .. } = self {
            return answer.rest_body();
        }
        let mut body =
            json!({ "error": { "code": self.rest_code(), "message": self.to_string() } });
        match self {
            GatewayError::AmbiguousTool { candidates, .. } => {
                body["error"]["candidates"] = json!(candidates);
            }
            GatewayError::UpstreamTimeout { server, budget } => {
                body["error"]["server"] = json!(server);
                body["error"]["timeoutMs"] = json!(budget.as_millis() as u64);
            }
            GatewayError::UpstreamUnavailable { server, .. }
            | GatewayError::UpstreamAddressDenied { server, .. }
            | GatewayError::UpstreamUnauthorized { server, .. }
            | GatewayError::UpstreamForbidden { server }
            | GatewayError::UpstreamAuthRequired { server, .. }
            | GatewayError::AccessDenied { server }
            | GatewayError::ServerNotFound { server }
            | GatewayError::UpstreamSessionGone { server }
            | GatewayError::StoreUnavailable { server } => {
                body["error"]["server"] = json!(server);
            }
            GatewayError::ScopeRequired(challenge) => {
                body["error"]["server"] = json!(challenge.server);
                body["error"]["scope"] = json!(challenge.scope);
            }
            GatewayError::AccountNotConnected { server, url } => {
                body["error"]["server"] = json!(server);
                body["error"]["connectUrl"] = json!(url);
                body["error"]["message"] = json!(self.connect_message(server, url));
            }
            GatewayError::Limited {
                scope,
                id,
                kind,
                retry_after,
            } => {
                body["error"][*scope] = json!(id);
                body["error"]["limit"] = json!(kind.label());
                body["error"]["retryAfterSeconds"] = json!(retry_after_seconds(*retry_after));
            }
            _ => {}
        }
        body
    }

    /// What the `WWW-Authenticate` header says when this error is a 401 from the gateway itself.
    pub fn www_authenticate(&self) -> Option<HeaderValue> {
        match self {
            GatewayError::Unauthenticated(_) => Some(HeaderValue::from_static(
                "Bearer realm=\"switchboard\", error=\"invalid_token\"",
            )),
            GatewayError::Invisible { answer, .. } => answer.www_authenticate(),
            GatewayError::UnknownIssuer {
                www_authenticate, ..
            }
            | GatewayError::UpstreamAuthRequired {
                www_authenticate, ..
            }
            | GatewayError::SignInRequired {
                www_authenticate, ..
            }
            | GatewayError::PersonNotGranted {
                www_authenticate, ..
            } => HeaderValue::from_str(www_authenticate).ok(),
            GatewayError::ScopeRequired(challenge) => {
                HeaderValue::from_str(&challenge.www_authenticate).ok()
            }
            _ => None,
        }
    }

    /// The `Retry-After` header (whole seconds) of a refusal that says when to come back.
    pub fn retry_after(&self) -> Option<HeaderValue> {
        match self {
            GatewayError::Limited { retry_after, .. } => {
                Some(HeaderValue::from(retry_after_seconds(*retry_after)))
            }
            // A busy replica asks for a short pause; a retry may well land on another replica.
            GatewayError::Overloaded(_) => Some(HeaderValue::from_static("1")),
            GatewayError::Invisible { answer, .. } => answer.retry_after(),
            _ => None,
        }
    }

    /// The headers an answer carrying this error gets besides its body.
    fn add_headers(&self, response: &mut Response) {
        if let Some(value) = self.www_authenticate() {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        if let Some(value) = self.retry_after() {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
    }

    /// A short label for metrics and the audit record (never a payload, never a secret): the
    /// REST code, except where the record must say what the client is not told (a refusal for
    /// scope that the client sees as absence) or more than the code (an unknown issuer).
    /// What a person reads when asked to connect an account: the server, and the URL.
    fn connect_message(&self, server: &str, url: &str) -> String {
        format!("Connect your account for {server} to use its tools: open {url}, then retry.")
    }

    /// A 2026-07-28 client's answer to a tool call that needs an account: the revision's own
    /// way to ask for a URL (an input-required result whose request is a URL elicitation). The
    /// `requestState` names the server only; the retry that echoes it is a fresh call
    /// (`is_connect_retry`). `None` for every other error.
    pub fn input_required_result(&self) -> Option<Value> {
        let GatewayError::AccountNotConnected { server, url } = self else {
            return None;
        };
        let message = self.connect_message(server, url);
        Some(json!({
            "resultType": "input_required",
            "inputRequests": {
                "connect": {
                    "method": "elicitation/create",
                    "params": url_elicitation(server, url, &message, false),
                }
            },
            "requestState": format!("{CONNECT_STATE_PREFIX}{server}"),
        }))
    }

    pub fn outcome(&self) -> &'static str {
        match self {
            GatewayError::Invisible { .. } => "access_denied",
            GatewayError::UnknownIssuer { .. } => "unknown_issuer",
            other => other.rest_code(),
        }
    }

    /// What the request's audit record says of this error: its outcome, and what a refusal
    /// refused (the server or virtual server a refusal for scope is about, the issuer a token
    /// named) — also where the client's answer does not name it.
    pub fn note_in(&self, noted: &mut crate::audit::Noted) {
        noted.outcome = Some(self.outcome());
        match self {
            GatewayError::AccessDenied { server }
            | GatewayError::Invisible {
                refused: OutOfScope::Server(server),
                ..
            } => noted.server = Some(server.clone()),
            GatewayError::Invisible {
                refused: OutOfScope::VirtualServer(id),
                ..
            } => noted.virtual_server = Some(id.clone()),
            GatewayError::UnknownIssuer { issuer, .. } => {
                noted.token_issuer = Some(crate::audit::name(issuer))
            }
            _ => {}
        }
    }
}

/// How the `requestState` of an account's input-required answer begins.
const CONNECT_STATE_PREFIX: &str = "switchboard.connect:";

/// Whether a 2026-07-28 retry echoes the `requestState` of an account's input-required answer:
/// the gateway asked, not the upstream, so the retry goes upstream as a fresh call (without
/// the state and the answers the upstream never asked for).
pub fn is_connect_retry(request_state: Option<&Value>) -> bool {
    request_state
        .and_then(Value::as_str)
        .is_some_and(|s| s.starts_with(CONNECT_STATE_PREFIX))
}

/// A URL-mode elicitation (SEP-1036): 2025-11-25 wants an `elicitationId` (derived from the
/// URL: the same ask, the same id), 2026-07-28 has none.
fn url_elicitation(server: &str, url: &str, message: &str, with_id: bool) -> Value {
    let mut params = json!({ "mode": "url", "message": message, "url": url });
    if with_id {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(url.as_bytes());
        params["elicitationId"] = json!(format!("connect-{server}-{}", hex::encode(&digest[..8])));
    }
    params
}

/// Longest issuer a refusal shows.
const ISSUER_CAP: usize = 200;

/// An unverified issuer as a refusal shows it (its message, its `WWW-Authenticate`, the log,
/// the audit record): at most `ISSUER_CAP` bytes of printable ASCII, anything else (quotes,
/// backslashes, control characters, non-ASCII) as `?`, so that a token cannot write into a
/// header or a log line what its issuer says.
fn shown_issuer(iss: &str) -> String {
    iss.chars()
        .take(ISSUER_CAP)
        .map(|c| match c {
            ' '..='~' if c != '"' && c != '\\' => c,
            _ => '?',
        })
        .collect()
}

/// Wraps an error for the REST endpoints.
impl From<Refused> for GatewayError {
    fn from(r: Refused) -> Self {
        GatewayError::Limited {
            scope: r.scope,
            id: r.id,
            kind: r.kind,
            retry_after: r.retry_after,
        }
    }
}

pub struct RestError(pub GatewayError);

impl From<GatewayError> for RestError {
    fn from(e: GatewayError) -> Self {
        RestError(e)
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        crate::audit::note(|n| self.0.note_in(n));
        let mut response = (self.0.http_status(), axum::Json(self.0.rest_body())).into_response();
        self.0.add_headers(&mut response);
        response
    }
}

/// An MCP JSON-RPC error response for request `id` (`null` when the request had none).
pub fn jsonrpc_error_response(id: &Value, error: &GatewayError) -> Response {
    jsonrpc_error_response_in(id, error, Era::Rev2025)
}

/// The same, for a client of `era`: a 2026-07-28 client gets the revision's status for the
/// code where the legacy rule says 200 (404 for -32601, 400 for -32602 and the like).
pub fn jsonrpc_error_response_in(id: &Value, error: &GatewayError, era: Era) -> Response {
    if era == Era::Rev2026
        && let Some(result) = error.input_required_result()
    {
        crate::audit::note(|n| error.note_in(n));
        let body = json!({ "jsonrpc": "2.0", "id": id, "result": result });
        return (StatusCode::OK, axum::Json(body)).into_response();
    }
    let rpc = error.jsonrpc_error();
    crate::audit::note(|n| {
        error.note_in(n);
        n.rpc_error_code = rpc["code"].as_i64();
    });
    let mut status = error.mcp_http_status();
    if era == Era::Rev2026 && status == StatusCode::OK {
        status = modern_error_status(rpc["code"].as_i64().unwrap_or(0));
    }
    let body = json!({ "jsonrpc": "2.0", "id": id, "error": rpc });
    let mut response = (status, axum::Json(body)).into_response();
    error.add_headers(&mut response);
    response
}

/// A plain-text answer carrying `error` (its status and message): what a path that names no
/// endpoint answers (`/mcp/{prefix}` for a server that is not there, or not there for the caller).
pub fn plain_error_response(error: &GatewayError) -> Response {
    crate::audit::note(|n| error.note_in(n));
    let mut response = (error.http_status(), error.to_string()).into_response();
    error.add_headers(&mut response);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_table_statuses() {
        let cases: Vec<(GatewayError, u16, &str)> = vec![
            (
                GatewayError::Unauthenticated("no key"),
                401,
                "unauthenticated",
            ),
            (
                GatewayError::AccessDenied { server: "a".into() },
                403,
                "access_denied",
            ),
            (
                GatewayError::ServerNotFound { server: "a".into() },
                404,
                "server_not_found",
            ),
            (
                GatewayError::UpstreamAddressDenied {
                    server: "a".into(),
                    denied: switchboard_snapshot::Denied {
                        address: "169.254.169.254".into(),
                        rule: "deny 169.254.0.0/16".into(),
                        policy: "gateway.upstreamNetworks",
                    },
                },
                502,
                "upstream_address_denied",
            ),
            (
                GatewayError::ToolNotFound { name: "t".into() },
                404,
                "tool_not_found",
            ),
            (
                GatewayError::AmbiguousTool {
                    name: "t".into(),
                    candidates: vec!["a__t".into()],
                },
                409,
                "ambiguous_tool",
            ),
            (
                GatewayError::UpstreamTimeout {
                    server: "a".into(),
                    budget: Duration::from_secs(1),
                },
                504,
                "upstream_timeout",
            ),
            (
                GatewayError::UpstreamUnavailable {
                    server: "a".into(),
                    detail: "x".into(),
                },
                502,
                "upstream_unavailable",
            ),
            (
                GatewayError::PayloadTooLarge { limit: 1 },
                413,
                "payload_too_large",
            ),
        ];
        for (error, status, code) in cases {
            assert_eq!(error.http_status().as_u16(), status, "{error}");
            assert_eq!(error.rest_code(), code);
        }
    }

    #[test]
    fn mcp_errors_name_what_the_caller_sent() {
        let e = GatewayError::ToolNotFound {
            name: "w__nope".into(),
        };
        assert_eq!(e.jsonrpc_error()["code"], -32602);
        assert!(
            e.jsonrpc_error()["message"]
                .as_str()
                .unwrap()
                .contains("w__nope")
        );
        let t = GatewayError::UpstreamTimeout {
            server: "slow".into(),
            budget: Duration::from_secs(1),
        };
        assert_eq!(
            t.jsonrpc_error()["message"],
            "upstream \"slow\" did not answer within 1s"
        );
        assert_eq!(t.jsonrpc_error()["data"]["timeoutMs"], 1000);
        assert_eq!(t.mcp_http_status(), StatusCode::OK);
        let relayed = GatewayError::UpstreamAuthRequired {
            server: "pt".into(),
            www_authenticate: "Bearer resource_metadata=\"http://gw/x\"".into(),
        };
        assert_eq!(
            relayed.mcp_http_status(),
            StatusCode::UNAUTHORIZED,
            "a relayed 401 stays a 401 on MCP"
        );
        assert!(relayed.www_authenticate().is_some());
    }

    /// A call that needs the caller's own account: each face's answer carries the connect URL
    /// where its clients read it (never in the message logs print), and a 2026-07-28 retry of
    /// the gateway's own input-required answer is told apart from an upstream's.
    #[test]
    fn an_account_to_connect_is_a_url_elicitation_in_every_era() {
        let url = "https://gw.example/connect?ticket=sbx.abc";
        let e = GatewayError::AccountNotConnected {
            server: "github".into(),
            url: url.into(),
        };
        assert!(!e.to_string().contains("sbx."), "{e}");
        let rpc = e.jsonrpc_error();
        assert_eq!(rpc["code"], -32042);
        let elicitation = &rpc["data"]["elicitations"][0];
        assert_eq!(elicitation["mode"], "url");
        assert_eq!(elicitation["url"], url);
        assert!(
            elicitation["elicitationId"]
                .as_str()
                .is_some_and(|id| !id.is_empty())
        );
        assert!(rpc["message"].as_str().unwrap_or_default().contains(url));
        assert_eq!(e.http_status(), StatusCode::FORBIDDEN);
        assert_eq!(e.mcp_http_status(), StatusCode::OK);
        let rest = e.rest_body();
        assert_eq!(rest["error"]["code"], "account_not_connected");
        assert_eq!(rest["error"]["connectUrl"], url);

        let modern = e
            .input_required_result()
            .expect("2026-07-28 asks by input request");
        assert_eq!(modern["resultType"], "input_required");
        let asked = &modern["inputRequests"]["connect"];
        assert_eq!(asked["method"], "elicitation/create");
        assert_eq!(asked["params"]["mode"], "url");
        assert_eq!(asked["params"]["url"], url);
        assert!(
            asked["params"].get("elicitationId").is_none(),
            "none at 2026-07-28"
        );
        assert!(is_connect_retry(modern.get("requestState")));
        assert!(!is_connect_retry(Some(&json!("an upstream's own state"))));
        assert!(!is_connect_retry(None));
        assert!(
            GatewayError::SessionNotFound
                .input_required_result()
                .is_none()
        );

        let down = GatewayError::StoreUnavailable {
            server: "github".into(),
        };
        assert_eq!(down.http_status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(down.rest_code(), "store_unavailable");
        assert!(down.to_string().contains("state store"));
    }
}
