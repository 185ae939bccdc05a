//! A small OAuth 2.0 authorization server for credential tests: `POST /oauth/token` with the
//! `client_credentials` grant and RFC 8693 token exchange, plus RFC 8414 metadata. Any client
//! whose secret is `secret-<client_id>` is accepted; tokens are predictable strings with a
//! counter so tests can see a refresh. Secrets are never logged, and `client_secret` is
//! redacted from `/_requests`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::http::{App, origin};
use crate::percent;

pub const CLIENT_CREDENTIALS: &str = "client_credentials";
pub const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
pub const TOKEN_PATH: &str = "/oauth/token";
pub const DEFAULT_TTL_SECS: u64 = 3600;

/// Beyond this many counters they are all cleared (numbering restarts at 1).
const MAX_COUNTERS: usize = 100_000;

/// Mints tokens; counts per client (`client_credentials`) and per subject token (exchange).
pub struct Issuer {
    counters: Mutex<HashMap<String, u64>>,
    ttl_secs: u64,
}

/// An OAuth error answer (RFC 6749 §5.2).
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub error: &'static str,
    pub description: String,
    /// The client tried HTTP Basic: a 401 then carries `WWW-Authenticate: Basic`.
    pub basic: bool,
}

impl Refusal {
    fn invalid_request(description: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            error: "invalid_request",
            description: description.into(),
            basic: false,
        }
    }

    fn invalid_client(basic: bool) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            error: "invalid_client",
            description: "client authentication failed".to_owned(),
            basic,
        }
    }

    fn response(self) -> Response {
        let body = json!({ "error": self.error, "error_description": self.description });
        let mut resp = token_json(self.status, &body);
        if self.basic && self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"oauth\""),
            );
        }
        resp
    }
}

impl Issuer {
    pub fn new(ttl_secs: u64) -> Self {
        Self {
            counters: Mutex::default(),
            ttl_secs,
        }
    }

    /// The next number for `key`, starting at 1.
    fn next(&self, key: String) -> u64 {
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        if counters.len() >= MAX_COUNTERS && !counters.contains_key(&key) {
            counters.clear();
        }
        let n = counters.entry(key).or_insert(0);
        *n += 1;
        *n
    }

    /// Answers one token request whose form is already parsed: parameters appear once,
    /// the client authenticates, then the grant is served.
    pub fn grant(&self, headers: &HeaderMap, form: &[(String, String)]) -> Result<Value, Refusal> {
        let mut params: HashMap<&str, &str> = HashMap::new();
        for (name, value) in form {
            if params.insert(name, value).is_some() {
                return Err(Refusal::invalid_request(format!(
                    "parameter `{name}` is repeated"
                )));
            }
        }
        let client_id = authenticate(headers, &params)?;
        let scope = params.get("scope").copied();
        let mut answer = match params.get("grant_type").copied() {
            None | Some("") => return Err(Refusal::invalid_request("missing grant_type")),
            Some(CLIENT_CREDENTIALS) => {
                let n = self.next(format!("at:{client_id}"));
                json!({ "access_token": format!("at-{client_id}-{n}"), "token_type": "Bearer",
                        "expires_in": self.ttl_secs })
            }
            Some(TOKEN_EXCHANGE) => {
                let subject = match params.get("subject_token") {
                    Some(s) if !s.is_empty() => *s,
                    _ => return Err(Refusal::invalid_request("missing subject_token")),
                };
                if params
                    .get("subject_token_type")
                    .is_none_or(|t| t.is_empty())
                {
                    return Err(Refusal::invalid_request("missing subject_token_type"));
                }
                let n = self.next(format!("xt:{subject}"));
                json!({ "access_token": format!("xt-{subject}-{n}"),
                        "issued_token_type": ACCESS_TOKEN_TYPE, "token_type": "Bearer",
                        "expires_in": self.ttl_secs })
            }
            Some(other) => {
                return Err(Refusal {
                    status: StatusCode::BAD_REQUEST,
                    error: "unsupported_grant_type",
                    description: format!("grant_type `{other}` is not supported"),
                    basic: false,
                });
            }
        };
        if let Some(scope) = scope {
            answer["scope"] = json!(scope);
        }
        Ok(answer)
    }
}

/// Client authentication by `client_secret_basic` or `client_secret_post` (not both); the
/// authenticated `client_id`.
fn authenticate(headers: &HeaderMap, params: &HashMap<&str, &str>) -> Result<String, Refusal> {
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
        .map(|(_, credentials)| credentials.trim());
    let (id, secret) = match basic {
        Some(credentials) => {
            if params.contains_key("client_secret") {
                return Err(Refusal::invalid_request(
                    "more than one client authentication method",
                ));
            }
            let (id, secret) =
                basic_credentials(credentials).ok_or(Refusal::invalid_client(true))?;
            if params
                .get("client_id")
                .is_some_and(|form_id| *form_id != id)
            {
                return Err(Refusal::invalid_request(
                    "client_id differs from the HTTP Basic user",
                ));
            }
            (id, secret)
        }
        None => match (params.get("client_id"), params.get("client_secret")) {
            (Some(id), Some(secret)) => ((*id).to_owned(), (*secret).to_owned()),
            _ => return Err(Refusal::invalid_client(false)),
        },
    };
    if id.is_empty() || secret != format!("secret-{id}") {
        return Err(Refusal::invalid_client(basic.is_some()));
    }
    Ok(id)
}

/// `base64(urlencode(id) ":" urlencode(secret))` (RFC 6749 §2.3.1) → (id, secret).
fn basic_credentials(credentials: &str) -> Option<(String, String)> {
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(credentials)
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (id, secret) = text.split_once(':')?;
    Some((percent::decode(id, true)?, percent::decode(secret, true)?))
}

/// The form for `/_requests`: an object (a repeated name holds an array), `client_secret`
/// redacted.
fn redacted(form: &[(String, String)]) -> Value {
    let mut out = Map::new();
    for (name, value) in form {
        let value = if name == "client_secret" {
            json!("<redacted>")
        } else {
            json!(value)
        };
        match out.get_mut(name) {
            Some(Value::Array(values)) => values.push(value),
            Some(prev) => *prev = json!([prev.take(), value]),
            None => {
                out.insert(name.clone(), value);
            }
        }
    }
    Value::Object(out)
}

fn token_json(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
            (header::PRAGMA, "no-cache"),
        ],
        body.to_string(),
    )
        .into_response()
}

/// `POST /oauth/token`: recorded (as method `oauth/token:<grant_type>`) before any check.
pub async fn token_endpoint(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = percent::form(&body);
    let grant = match &form {
        None => "<invalid>",
        Some(f) => f
            .iter()
            .find(|(k, _)| k == "grant_type")
            .map_or("<none>", |(_, v)| v.as_str()),
    };
    app.stats.record_with_form(
        TOKEN_PATH,
        Some(&format!("oauth/token:{grant}")),
        None,
        &headers,
        form.as_deref().map(redacted),
    );
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.split(';').next())
        .is_some_and(|m| {
            m.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    let result = match form {
        _ if !is_form => Err(Refusal::invalid_request(
            "Content-Type must be application/x-www-form-urlencoded",
        )),
        None => Err(Refusal::invalid_request("malformed form body")),
        Some(form) => app.oauth.grant(&headers, &form),
    };
    match result {
        Ok(answer) => token_json(StatusCode::OK, &answer),
        Err(refusal) => refusal.response(),
    }
}

/// RFC 8414 metadata for the issuer `http://HOST/oauth`.
pub async fn metadata(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let origin = origin(&app, &headers);
    axum::Json(json!({
        "issuer": format!("{origin}/oauth"),
        "token_endpoint": format!("{origin}{TOKEN_PATH}"),
        "grant_types_supported": [CLIENT_CREDENTIALS, TOKEN_EXCHANGE],
        "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
        "response_types_supported": [],
        "scopes_supported": ["mcp"],
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn basic(user_pass: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        let value = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_pass)
        );
        h.insert(header::AUTHORIZATION, value.parse().unwrap());
        h
    }

    fn code(r: Result<Value, Refusal>) -> (u16, &'static str) {
        let e = r.unwrap_err();
        (e.status.as_u16(), e.error)
    }

    #[test]
    fn client_credentials_by_post_and_basic_count_per_client() {
        let issuer = Issuer::new(60);
        let none = HeaderMap::new();
        let post = form(&[
            ("grant_type", CLIENT_CREDENTIALS),
            ("client_id", "c1"),
            ("client_secret", "secret-c1"),
            ("scope", "mcp"),
            ("audience", "api"),
        ]);
        let first = issuer.grant(&none, &post).unwrap();
        assert_eq!(
            first,
            json!({ "access_token": "at-c1-1", "token_type": "Bearer", "expires_in": 60, "scope": "mcp" })
        );
        let by_basic = form(&[("grant_type", CLIENT_CREDENTIALS)]);
        let second = issuer.grant(&basic("c1:secret-c1"), &by_basic).unwrap();
        assert_eq!(second["access_token"], "at-c1-2");
        assert!(second.get("scope").is_none());
        let other = issuer.grant(&basic("c2:secret-c2"), &by_basic).unwrap();
        assert_eq!(other["access_token"], "at-c2-1");
        // Basic credentials are form-urlencoded before base64 (RFC 6749 §2.3.1)
        let odd = issuer
            .grant(&basic("a%3Ab+c:secret-a%3Ab+c"), &by_basic)
            .unwrap();
        assert_eq!(odd["access_token"], "at-a:b c-1");
        // the client id may also be repeated in the form, if it agrees
        let both = form(&[("grant_type", CLIENT_CREDENTIALS), ("client_id", "c1")]);
        assert_eq!(
            issuer.grant(&basic("c1:secret-c1"), &both).unwrap()["access_token"],
            "at-c1-3"
        );
    }

    #[test]
    fn client_authentication_failures() {
        let issuer = Issuer::new(DEFAULT_TTL_SECS);
        let none = HeaderMap::new();
        let cc = |extra: &[(&str, &str)]| {
            let mut f = form(&[("grant_type", CLIENT_CREDENTIALS)]);
            f.extend(form(extra));
            f
        };
        let wrong = issuer
            .grant(
                &none,
                &cc(&[("client_id", "c1"), ("client_secret", "nope")]),
            )
            .unwrap_err();
        assert_eq!(
            (wrong.status.as_u16(), wrong.error, wrong.basic),
            (401, "invalid_client", false)
        );
        let wrong = issuer.grant(&basic("c1:nope"), &cc(&[])).unwrap_err();
        assert_eq!((wrong.status.as_u16(), wrong.basic), (401, true));
        assert_eq!(
            code(issuer.grant(&none, &cc(&[("client_id", "c1")]))),
            (401, "invalid_client")
        );
        assert_eq!(code(issuer.grant(&none, &cc(&[]))), (401, "invalid_client"));
        assert_eq!(
            code(issuer.grant(&basic("nocolon"), &cc(&[]))),
            (401, "invalid_client")
        );
        assert_eq!(
            code(issuer.grant(&basic(":secret-"), &cc(&[]))),
            (401, "invalid_client")
        );
        assert_eq!(
            code(issuer.grant(
                &basic("c1:secret-c1"),
                &cc(&[("client_secret", "secret-c1")])
            )),
            (400, "invalid_request"),
            "two authentication methods"
        );
        assert_eq!(
            code(issuer.grant(&basic("c1:secret-c1"), &cc(&[("client_id", "c2")]))),
            (400, "invalid_request")
        );
        assert_eq!(
            code(issuer.grant(
                &none,
                &cc(&[
                    ("client_id", "c1"),
                    ("client_secret", "secret-c1"),
                    ("client_id", "c1")
                ])
            )),
            (400, "invalid_request"),
            "repeated parameter"
        );
        // failures mint nothing
        let ok = issuer
            .grant(
                &none,
                &cc(&[("client_id", "c1"), ("client_secret", "secret-c1")]),
            )
            .unwrap();
        assert_eq!(ok["access_token"], "at-c1-1");
        assert_eq!(ok["expires_in"], DEFAULT_TTL_SECS);
    }

    #[test]
    fn token_exchange_and_grant_errors() {
        let issuer = Issuer::new(10);
        let auth = basic("gw:secret-gw");
        let exchange = |extra: &[(&str, &str)]| {
            let mut f = form(&[("grant_type", TOKEN_EXCHANGE)]);
            f.extend(form(extra));
            issuer.grant(&auth, &f)
        };
        let subject = [
            ("subject_token", "user-a"),
            ("subject_token_type", ACCESS_TOKEN_TYPE),
            ("audience", "mcp"),
            ("resource", "http://x/mcp"),
        ];
        assert_eq!(
            exchange(&subject).unwrap(),
            json!({ "access_token": "xt-user-a-1", "issued_token_type": ACCESS_TOKEN_TYPE,
                    "token_type": "Bearer", "expires_in": 10 })
        );
        assert_eq!(exchange(&subject).unwrap()["access_token"], "xt-user-a-2");
        assert_eq!(
            exchange(&[
                ("subject_token", "user-b"),
                ("subject_token_type", ACCESS_TOKEN_TYPE),
                ("scope", "s")
            ])
            .unwrap()["access_token"],
            "xt-user-b-1"
        );
        assert_eq!(
            code(exchange(&[("subject_token_type", ACCESS_TOKEN_TYPE)])),
            (400, "invalid_request")
        );
        assert_eq!(
            code(exchange(&[
                ("subject_token", ""),
                ("subject_token_type", ACCESS_TOKEN_TYPE)
            ])),
            (400, "invalid_request")
        );
        assert_eq!(
            code(exchange(&[("subject_token", "u")])),
            (400, "invalid_request")
        );
        assert_eq!(code(issuer.grant(&auth, &[])), (400, "invalid_request"));
        assert_eq!(
            code(issuer.grant(&auth, &form(&[("grant_type", "password")]))),
            (400, "unsupported_grant_type")
        );
        // exchange also needs client authentication
        let f = form(&[
            ("grant_type", TOKEN_EXCHANGE),
            ("subject_token", "u"),
            ("subject_token_type", ACCESS_TOKEN_TYPE),
        ]);
        assert_eq!(
            code(issuer.grant(&HeaderMap::new(), &f)),
            (401, "invalid_client")
        );
    }

    #[test]
    fn recorded_form_hides_the_secret() {
        let f = form(&[
            ("client_id", "c1"),
            ("client_secret", "secret-c1"),
            ("scope", "a"),
            ("scope", "b"),
        ]);
        assert_eq!(
            redacted(&f),
            json!({ "client_id": "c1", "client_secret": "<redacted>", "scope": ["a", "b"] })
        );
    }
}
