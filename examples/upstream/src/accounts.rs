//! "Example Accounts": a third-party service of its own, for trying and testing people's own
//! accounts (`userOAuth`): an OAuth 2.0 authorization server under `/accounts` (RFC 8414
//! metadata, a sign-in page, authorization code with PKCE S256 only, short-lived access tokens,
//! rotating refresh tokens with reuse detection, RFC 7009 revocation) in front of an MCP
//! endpoint, `/accounts/mcp`, whose `whoami` tool answers with the account its token belongs
//! to (and whose other tools are the example's). It knows nothing of the gateway's identity
//! provider, as GitHub or Atlassian would not.
//!
//! Sign-in: any user name (letters, digits, `-`), password `demo`. The client is any `client_id`
//! whose secret is `secret-<client_id>` (the example's convention), or a public client (PKCE
//! alone) when no secret is sent. `GET /accounts/_stats` counts what happened;
//! `POST /accounts/_forget` ends every grant (as a person removing the app at the service).
//! Tokens are never logged.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::http::{App, origin};

/// Where the account server lives under the example's origin (its issuer's path).
pub const PREFIX: &str = "/accounts";
/// The header `/accounts/mcp` hands the example's tools: whose account the token is.
pub const ACCOUNT_HEADER: &str = "x-example-account";
pub const DEFAULT_ACCESS_TTL_SECS: u64 = 300;
const CODE_TTL: Duration = Duration::from_secs(60);
const REFRESH_TTL: Duration = Duration::from_secs(30 * 86_400);

struct Code {
    user: String,
    client_id: String,
    redirect_uri: String,
    challenge: String,
    expires: Instant,
}

struct Access {
    user: String,
    family: u64,
    expires: Instant,
}

struct Refresh {
    user: String,
    client_id: String,
    family: u64,
    used: bool,
    expires: Instant,
}

#[derive(Default)]
struct Counts {
    codes_redeemed: u64,
    refreshes: u64,
    reuse_detected: u64,
    revocations: u64,
    calls: u64,
}

#[derive(Default)]
struct Grants {
    codes: HashMap<String, Code>,
    access: HashMap<String, Access>,
    refresh: HashMap<String, Refresh>,
    revoked: HashSet<u64>,
    next_family: u64,
    counts: Counts,
}

pub struct AccountServer {
    grants: Mutex<Grants>,
    access_ttl: Duration,
    /// How long a refresh takes to answer (tests: wide enough for two replicas to race).
    refresh_delay: Duration,
}

fn random() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; 24]>())
}

fn error(status: StatusCode, code: &str, description: &str) -> Response {
    let mut response = (
        status,
        axum::Json(json!({ "error": code, "error_description": description })),
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn form_of(body: &[u8]) -> HashMap<String, String> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

impl AccountServer {
    pub fn new(access_ttl_secs: u64, refresh_delay_ms: u64) -> AccountServer {
        AccountServer {
            grants: Mutex::default(),
            access_ttl: Duration::from_secs(access_ttl_secs.max(1)),
            refresh_delay: Duration::from_millis(refresh_delay_ms),
        }
    }

    fn grants(&self) -> std::sync::MutexGuard<'_, Grants> {
        self.grants.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whose account a bearer token is, while it lives.
    fn account_of(&self, headers: &HeaderMap) -> Option<String> {
        let token = headers
            .get(header::AUTHORIZATION)?
            .to_str()
            .ok()?
            .strip_prefix("Bearer ")?;
        let grants = self.grants();
        let access = grants.access.get(token)?;
        (access.expires > Instant::now() && !grants.revoked.contains(&access.family))
            .then(|| access.user.clone())
    }

    fn issue(&self, grants: &mut Grants, user: &str, client_id: &str, family: u64) -> Value {
        let access = random();
        let refresh = random();
        let now = Instant::now();
        grants.access.insert(
            access.clone(),
            Access {
                user: user.to_string(),
                family,
                expires: now + self.access_ttl,
            },
        );
        grants.refresh.insert(
            refresh.clone(),
            Refresh {
                user: user.to_string(),
                client_id: client_id.to_string(),
                family,
                used: false,
                expires: now + REFRESH_TTL,
            },
        );
        // Expired entries go on every issue: the map stays the size of what lives.
        grants.codes.retain(|_, c| c.expires > now);
        grants.access.retain(|_, a| a.expires > now);
        json!({
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.access_ttl.as_secs(),
            "refresh_token": refresh,
            "scope": "whoami",
        })
    }
}

/// The client a token request authenticates as: `client_secret_basic` or `_post` with the
/// example's convention, or a public client (its `client_id` alone).
fn client_of(headers: &HeaderMap, form: &HashMap<String, String>) -> Option<String> {
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Basic "))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok());
    let (id, secret) = match basic {
        Some(pair) => {
            let (id, secret) = pair.split_once(':').unwrap_or((pair.as_str(), ""));
            (
                crate::percent::decode(id, true).unwrap_or_default(),
                Some(crate::percent::decode(secret, true).unwrap_or_default()),
            )
        }
        None => (
            form.get("client_id").cloned().unwrap_or_default(),
            form.get("client_secret").cloned(),
        ),
    };
    (!id.is_empty() && secret.is_none_or(|s| s == format!("secret-{id}"))).then_some(id)
}

fn invalid_client() -> Response {
    error(
        StatusCode::UNAUTHORIZED,
        "invalid_client",
        "client authentication failed",
    )
}

/// `GET /.well-known/oauth-authorization-server/accounts` (RFC 8414).
pub async fn metadata(State(app): State<std::sync::Arc<App>>, headers: HeaderMap) -> Response {
    let issuer = format!("{}{PREFIX}", origin(&app, &headers));
    axum::Json(json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "revocation_endpoint": format!("{issuer}/revoke"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic", "none"],
        "scopes_supported": ["whoami"],
    }))
    .into_response()
}

/// The protected-resource metadata of `/accounts/mcp` (RFC 9728).
pub fn resource_document(origin: &str) -> Value {
    json!({
        "resource": format!("{origin}{PREFIX}/mcp"),
        "authorization_servers": [format!("{origin}{PREFIX}")],
        "scopes_supported": ["whoami"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Example Accounts",
    })
}

/// `GET /accounts/authorize`: the service's own sign-in page.
pub async fn authorize_page(Query(q): Query<HashMap<String, String>>) -> Response {
    if q.get("response_type").map(String::as_str) != Some("code")
        || q.get("code_challenge_method").map(String::as_str) != Some("S256")
        || q.get("code_challenge").is_none_or(String::is_empty)
        || q.get("redirect_uri").is_none_or(String::is_empty)
        || q.get("client_id").is_none_or(String::is_empty)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "response_type=code, a client_id, a redirect_uri and PKCE S256 are required",
        );
    }
    let hidden: String = [
        "client_id",
        "redirect_uri",
        "state",
        "code_challenge",
        "scope",
        "resource",
    ]
    .iter()
    .filter_map(|k| q.get(*k).map(|v| (k, v)))
    .map(|(k, v)| {
        format!(
            "<input type=\"hidden\" name=\"{k}\" value=\"{}\">",
            escape(v)
        )
    })
    .collect();
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Example Accounts</title></head>\
         <body><h1>Example Accounts</h1><p><strong>{client}</strong> asks to use your Example \
         Accounts account.</p><form method=\"post\" action=\"{PREFIX}/authorize\">{hidden}\
         <label>User name <input name=\"username\" autocomplete=\"username\"></label> \
         <label>Password <input name=\"password\" type=\"password\"></label> \
         <button type=\"submit\">Sign in and allow</button></form>\
         <p>(Any user name; the password is <code>demo</code>.)</p></body></html>",
        client = escape(q.get("client_id").map_or("", String::as_str)),
    );
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html,
    )
        .into_response()
}

/// `POST /accounts/authorize`: signed in and allowed; back to the client with a code.
pub async fn authorize(
    State(app): State<std::sync::Arc<App>>,
    body: axum::body::Bytes,
) -> Response {
    let form = form_of(&body);
    let get = |k: &str| form.get(k).map(String::as_str).unwrap_or_default();
    let user = get("username");
    let valid_user = !user.is_empty()
        && user.len() <= 64
        && user.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !valid_user || get("password") != "demo" {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            "<!doctype html><p>Wrong user name or password.</p>",
        )
            .into_response();
    }
    let code = random();
    app.accounts.grants().codes.insert(
        code.clone(),
        Code {
            user: user.to_string(),
            client_id: get("client_id").to_string(),
            redirect_uri: get("redirect_uri").to_string(),
            challenge: get("code_challenge").to_string(),
            expires: Instant::now() + CODE_TTL,
        },
    );
    let Ok(mut back) = url::Url::parse(get("redirect_uri")) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "redirect_uri is not a URL",
        );
    };
    back.query_pairs_mut().append_pair("code", &code);
    if !get("state").is_empty() {
        back.query_pairs_mut().append_pair("state", get("state"));
    }
    let mut response = StatusCode::FOUND.into_response();
    if let Ok(location) = HeaderValue::from_str(back.as_str()) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

/// `POST /accounts/token`: `authorization_code` (PKCE S256) and `refresh_token` (rotating; a
/// refresh token used twice ends its whole grant).
pub async fn token(
    State(app): State<std::sync::Arc<App>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let form = form_of(&body);
    let Some(client) = client_of(&headers, &form) else {
        return invalid_client();
    };
    let get = |k: &str| form.get(k).map(String::as_str).unwrap_or_default();
    let server = &app.accounts;
    if get("grant_type") == "refresh_token" && !server.refresh_delay.is_zero() {
        tokio::time::sleep(server.refresh_delay).await;
    }
    let mut grants = server.grants();
    let answer = match get("grant_type") {
        "authorization_code" => {
            let Some(code) = grants.codes.remove(get("code")) else {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_grant",
                    "unknown or used code",
                );
            };
            let verifier = URL_SAFE_NO_PAD.encode(Sha256::digest(get("code_verifier").as_bytes()));
            if code.expires < Instant::now()
                || code.client_id != client
                || code.redirect_uri != get("redirect_uri")
                || verifier != code.challenge
            {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_grant",
                    "the code is expired, another client's, or its verifier does not match",
                );
            }
            grants.counts.codes_redeemed += 1;
            grants.next_family += 1;
            let family = grants.next_family;
            server.issue(&mut grants, &code.user, &client, family)
        }
        "refresh_token" => {
            let presented = get("refresh_token").to_string();
            let Some(refresh) = grants.refresh.get_mut(&presented) else {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_grant",
                    "unknown refresh token",
                );
            };
            if refresh.used {
                // Reuse: the grant is compromised; it ends (RFC 9700 4.14.2).
                let family = refresh.family;
                grants.revoked.insert(family);
                grants.counts.reuse_detected += 1;
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_grant",
                    "refresh token reused",
                );
            }
            refresh.used = true;
            let (user, family, owner, expires) = (
                refresh.user.clone(),
                refresh.family,
                refresh.client_id.clone(),
                refresh.expires,
            );
            if grants.revoked.contains(&family) || owner != client || expires < Instant::now() {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_grant",
                    "the grant has ended",
                );
            }
            grants.counts.refreshes += 1;
            server.issue(&mut grants, &user, &client, family)
        }
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                "authorization_code or refresh_token",
            );
        }
    };
    let mut response = axum::Json(answer).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `POST /accounts/revoke` (RFC 7009): the grant the token belongs to ends. An unknown token
/// is answered 200 as the RFC says.
pub async fn revoke(
    State(app): State<std::sync::Arc<App>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let form = form_of(&body);
    if client_of(&headers, &form).is_none() {
        return invalid_client();
    }
    let token = form.get("token").cloned().unwrap_or_default();
    let mut grants = app.accounts.grants();
    let family = grants
        .refresh
        .get(&token)
        .map(|r| r.family)
        .or_else(|| grants.access.get(&token).map(|a| a.family));
    if let Some(family) = family {
        grants.revoked.insert(family);
        grants.counts.revocations += 1;
    }
    StatusCode::OK.into_response()
}

/// `GET /accounts/_stats`.
pub async fn stats(State(app): State<std::sync::Arc<App>>) -> Response {
    let grants = app.accounts.grants();
    let c = &grants.counts;
    axum::Json(json!({
        "codes_redeemed": c.codes_redeemed,
        "refreshes": c.refreshes,
        "reuse_detected": c.reuse_detected,
        "revocations": c.revocations,
        "calls": c.calls,
        "live_grants": grants.refresh.values().filter(|r| !r.used && !grants.revoked.contains(&r.family)).count(),
    }))
    .into_response()
}

/// `POST /accounts/_forget`: every grant ends (the next refresh gets `invalid_grant`).
pub async fn forget(State(app): State<std::sync::Arc<App>>) -> Response {
    let mut grants = app.accounts.grants();
    let families: Vec<u64> = grants.refresh.values().map(|r| r.family).collect();
    grants.revoked.extend(families);
    StatusCode::NO_CONTENT.into_response()
}

/// `/accounts/mcp`: the example's MCP server for the account a valid token names (its
/// `whoami` tool says which); no token or a dead one gets 401 with the resource's metadata.
pub async fn mcp(
    State(app): State<std::sync::Arc<App>>,
    method: Method,
    uri: Uri,
    mut headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let Some(user) = app.accounts.account_of(&headers) else {
        let challenge = format!(
            "Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource{PREFIX}/mcp\", error=\"invalid_token\"",
            origin(&app, &headers)
        );
        let mut response = (
            StatusCode::UNAUTHORIZED,
            "a valid Example Accounts token is required",
        )
            .into_response();
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        return response;
    };
    app.accounts.grants().counts.calls += 1;
    if let Ok(value) = HeaderValue::from_str(&user) {
        headers.insert(ACCOUNT_HEADER, value);
    }
    let variant = app.accounts_variant.clone();
    crate::http::serve(app, variant, uri, method, headers, body).await
}
