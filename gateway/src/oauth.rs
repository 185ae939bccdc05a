//! The gateway as the OAuth authorization server MCP clients see, for a brokered identity
//! provider (`identityProviders[].brokered`): RFC 8414 metadata, dynamic registration
//! (RFC 7591), the authorization endpoint (PKCE S256 only), the callback from the provider, and
//! the token endpoint (authorization code, refresh token). The records it issues are sealed
//! and hold everything (`switchboard_core::broker` says how, and what revocation then means),
//! so any replica answers any step. The provider is asked with the gateway's own confidential
//! client (`UpstreamPlane::redeem_login_code`, `refresh_login`).
//!
//! **Single use** (issue 37, item 4) is the one thing records cannot say, so it is kept in the
//! shared store: a code is redeemed once (a second redemption is refused and revokes what the
//! first was given), and a refresh token is spent once (refresh tokens rotate; a spent one
//! presented again revokes its whole grant, RFC 9700 section 4.14.2). Across replicas when the
//! store is shared; within the replica on the embedded store. While a shared store does not
//! answer, a code is refused (503: the person signs in again shortly) but a refresh goes ahead
//! unchecked, so people already signed in are not signed out by an outage.
//!
//! Until a client and its redirect URI are known to match, errors are answered here, never
//! redirected (no open redirect); after that, they go back to the client's redirect URI. Each
//! login asks the person first (a consent page naming the client and where the sign-in goes,
//! answered from the same browser), as the MCP specification requires of a proxy whose own
//! client at the provider is shared by every MCP client.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::Deserialize;
use serde_json::json;
use switchboard_core::broker::{
    AccessRecord, BrokerSealer, CLIENT_TTL, CODE_TTL, ClientRecord, CodeRecord, ConsentRecord,
    Identity, LOGIN_TTL, LoginRecord, OAuthError, ProviderTokens, Record, RefreshRecord, digest,
    new_verifier, pkce_ok, redirect_matches, registered_redirects, s256, unix, unix_ms,
};
use switchboard_core::people::{AssertionRefusal, People, Refusal};
use switchboard_core::table::{RoutingTable, base_url};
use switchboard_snapshot::{IdentityProviderSpec, TlsMaterial};
use switchboard_store::{Store, StoreKey};
use switchboard_upstream::ProviderGrant;

use crate::sign_in::SignInContext;

/// What a brokered request needs of the table: the people, the brokered provider with its TLS,
/// and the sealer. `None`: nobody signs in through the gateway here (404).
struct Broker<'a> {
    table: &'a RoutingTable,
    people: &'a People,
    provider_id: &'a str,
    spec: &'a IdentityProviderSpec,
    tls: Option<&'a TlsMaterial>,
    sealer: &'a BrokerSealer,
}

impl<'a> Broker<'a> {
    /// The broker of `table`, or the answer when there is none: 404 without a brokered
    /// provider, 503 without `gateway.publicUrl` (the issuer, the callback and the resources
    /// tokens are bound to must not follow a request's Host header).
    fn of(table: &'a RoutingTable) -> Result<Broker<'a>, Box<Response>> {
        let found =
            table
                .people
                .as_ref()
                .zip(table.broker.as_ref())
                .and_then(|(people, sealer)| {
                    let (provider_id, spec, tls) = people
                        .providers()
                        .find(|(_, spec, _)| spec.brokered.is_some())?;
                    Some(Broker {
                        table,
                        people,
                        provider_id,
                        spec,
                        tls: tls.map(|t| &**t),
                        sealer,
                    })
                });
        match found {
            None => Err(Box::new(StatusCode::NOT_FOUND.into_response())),
            Some(_) if table.settings.public_url.is_none() => {
                Err(Box::new(oauth_error(OAuthError::new(
                    503,
                    "temporarily_unavailable",
                    "brokered sign-in needs the gateway's public URL (gateway.publicUrl, or --public-url)",
                ))))
            }
            Some(broker) => Ok(broker),
        }
    }
}

impl Broker<'_> {
    /// The provider (by id) whose identity assertions the token endpoint takes, if any.
    fn assertion_signer(&self) -> Option<String> {
        let assertions = self.spec.brokered.as_ref()?.identity_assertions.as_ref()?;
        Some(match &assertions.provider {
            Some(name) => format!("{}/{name}", self.spec.namespace),
            None => self.provider_id.to_string(),
        })
    }

    /// Whether the person `subject` signed out after `signed_in` (unix ms): what they were
    /// given then is over.
    async fn signed_out_since(&self, subject: &str, signed_in: u64) -> bool {
        self.table
            .sign_outs
            .login_ended(&self.table.store, self.provider_id, subject, signed_in)
            .await
    }

    /// The grant types the token endpoint takes.
    fn grant_types(&self) -> Vec<&'static str> {
        let mut grants = vec!["authorization_code", "refresh_token"];
        if self.assertion_signer().is_some() {
            grants.push(JWT_BEARER);
        }
        grants
    }
}

/// How clients authenticate at the token and revocation endpoints: public clients not at all.
const CLIENT_AUTH_METHODS: [&str; 3] = ["none", "client_secret_basic", "client_secret_post"];

/// The JWT bearer grant (RFC 7523), which carries an identity assertion.
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// The identity assertion grant profile (draft-ietf-oauth-identity-assertion-authz-grant).
const ID_JAG_PROFILE: &str = "urn:ietf:params:oauth:grant-profile:id-jag";

fn oauth_error(e: OAuthError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = (
        status,
        Json(json!({"error": e.error, "error_description": e.description})),
    )
        .into_response();
    no_store(&mut response);
    response
}

pub(crate) fn no_store(response: &mut Response) {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

pub(crate) fn redirect(to: &str) -> Response {
    let mut response = StatusCode::FOUND.into_response();
    if let Ok(value) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    no_store(&mut response);
    response
}

/// `to` with `pairs` added to its query.
pub(crate) fn with_query(to: &str, pairs: &[(&str, &str)]) -> String {
    match url::Url::parse(to) {
        Ok(mut url) => {
            url.query_pairs_mut().extend_pairs(pairs);
            url.to_string()
        }
        Err(_) => to.to_string(),
    }
}

/// `GET /.well-known/oauth-authorization-server` (RFC 8414).
pub async fn metadata(State(cx): State<Arc<SignInContext>>, headers: HeaderMap) -> Response {
    let table = cx.table();
    let broker = match Broker::of(&table) {
        Ok(broker) => broker,
        Err(answer) => return *answer,
    };
    let base = base_url(&table.settings, &headers);
    let mut body = json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/oauth/authorize"),
        "token_endpoint": format!("{base}/oauth/token"),
        "registration_endpoint": format!("{base}/oauth/register"),
        "revocation_endpoint": format!("{base}/oauth/revoke"),
        "revocation_endpoint_auth_methods_supported": CLIENT_AUTH_METHODS,
        "response_types_supported": ["code"],
        "grant_types_supported": broker.grant_types(),
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": CLIENT_AUTH_METHODS,
        "scopes_supported": broker.spec.scopes,
        "authorization_response_iss_parameter_supported": true,
        "client_id_metadata_document_supported": true,
    });
    if broker.assertion_signer().is_some() {
        // The identity assertion profile (draft-ietf-oauth-identity-assertion-authz-grant).
        body["authorization_grant_profiles_supported"] = json!([ID_JAG_PROFILE]);
    }
    Json(body).into_response()
}

#[derive(Deserialize)]
pub(crate) struct Registration {
    #[serde(default)]
    redirect_uris: Vec<String>,
    #[serde(default)]
    client_name: Option<String>,
    #[serde(default)]
    grant_types: Option<Vec<String>>,
    #[serde(default)]
    token_endpoint_auth_method: Option<String>,
}

/// `POST /oauth/register` (RFC 7591): public clients (PKCE), and confidential ones
/// (`client_secret_basic`, `client_secret_post`: what the identity assertion grant needs); the
/// `client_id` is the sealed registration itself, the secret derived from it
/// ([`BrokerSealer::client_secret`]), so nothing is stored.
pub async fn register(
    State(cx): State<Arc<SignInContext>>,
    body: Result<Json<Registration>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let table = cx.table();
    let broker = match Broker::of(&table) {
        Ok(broker) => broker,
        Err(answer) => return *answer,
    };
    let Ok(Json(asked)) = body else {
        return oauth_error(OAuthError::new(
            400,
            "invalid_client_metadata",
            "the body is not a JSON client registration",
        ));
    };
    let method = asked
        .token_endpoint_auth_method
        .unwrap_or_else(|| "none".into());
    let confidential = match method.as_str() {
        "none" => false,
        "client_secret_basic" | "client_secret_post" => true,
        _ => {
            return oauth_error(OAuthError::new(
                400,
                "invalid_client_metadata",
                "token_endpoint_auth_method: none, client_secret_basic or client_secret_post",
            ));
        }
    };
    let grants = asked
        .grant_types
        .unwrap_or_else(|| vec!["authorization_code".into()]);
    let offered = broker.grant_types();
    if let Some(other) = grants.iter().find(|g| !offered.contains(&g.as_str())) {
        return oauth_error(OAuthError::new(
            400,
            "invalid_client_metadata",
            format!(
                "grant_types: {other:?} is not one of {}",
                offered.join(", ")
            ),
        ));
    }
    if !confidential && grants.iter().any(|g| g == JWT_BEARER) {
        return oauth_error(OAuthError::new(
            400,
            "invalid_client_metadata",
            "grant_types: the identity assertion grant is for confidential clients \
             (token_endpoint_auth_method client_secret_basic or client_secret_post)",
        ));
    }
    // A client that signs people in through the browser needs its redirect URIs; one that
    // only trades identity assertions has none.
    let browser = grants.iter().any(|g| g == "authorization_code");
    let redirect_uris = if browser || !asked.redirect_uris.is_empty() {
        match registered_redirects(&asked.redirect_uris) {
            Ok(uris) => uris,
            Err(e) => return oauth_error(e),
        }
    } else {
        Vec::new()
    };
    let now = SystemTime::now();
    let name = asked.client_name.map(|n| n.chars().take(200).collect());
    let record = ClientRecord {
        redirect_uris: redirect_uris.clone(),
        name: name.clone(),
        confidential,
        grant_types: grants.clone(),
        exp: unix(now) + CLIENT_TTL.as_secs(),
    };
    let client_id = broker.sealer.seal(Record::Client, &record, now);
    tracing::info!(
        client = name.as_deref().unwrap_or("-"),
        confidential,
        "brokered client registered"
    );
    let mut answer = json!({
        "client_id": client_id,
        "client_id_issued_at": unix(now),
        "client_name": name,
        "redirect_uris": redirect_uris,
        "grant_types": grants,
        "response_types": if browser { vec!["code"] } else { Vec::new() },
        "token_endpoint_auth_method": method,
    });
    if confidential {
        answer["client_secret"] = json!(broker.sealer.client_secret(&client_id));
        // It lasts as long as the registration: until `gateway.sessionKey` changes.
        answer["client_secret_expires_at"] = json!(0);
    }
    let mut response = (StatusCode::CREATED, Json(answer)).into_response();
    no_store(&mut response);
    response
}

/// `GET /oauth/authorize`: checks the client, its redirect URI and PKCE, then asks the person
/// (the consent page); [`consent`] sends them on to the provider's login with a sealed record
/// of the request as `state`.
pub(crate) async fn authorize(
    State(cx): State<Arc<SignInContext>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let table = cx.table();
    let broker = match Broker::of(&table) {
        Ok(broker) => broker,
        Err(answer) => return *answer,
    };
    let now = SystemTime::now();
    let get = |name: &str| q.get(name).map(String::as_str).filter(|v| !v.is_empty());
    let Some(client_id) = get("client_id") else {
        return oauth_error(OAuthError::new(
            400,
            "invalid_request",
            "client_id is missing",
        ));
    };
    let client = if client_id.starts_with("https://") {
        // A Client ID Metadata Document: the client is described at its id's URL.
        match cx.upstream.client_redirect_uris(client_id).await {
            Ok(uris) => ClientRecord {
                redirect_uris: uris.to_vec(),
                name: None,
                confidential: false,
                grant_types: Vec::new(),
                exp: u64::MAX,
            },
            Err(detail) => {
                tracing::info!(%detail, "brokered login refused: the client metadata document is unusable");
                return oauth_error(OAuthError::new(400, "invalid_client", detail.to_string()));
            }
        }
    } else {
        match broker
            .sealer
            .open::<ClientRecord>(Record::Client, client_id, now)
        {
            Some(client) => client,
            None => {
                return oauth_error(OAuthError::new(
                    400,
                    "invalid_client",
                    "unknown or expired client_id (register again)",
                ));
            }
        }
    };
    // Redirect URIs a document lists are held to the rules registration applies.
    if client
        .redirect_uris
        .iter()
        .any(|uri| switchboard_core::broker::redirect_allowed(uri).is_err())
    {
        return oauth_error(OAuthError::new(
            400,
            "invalid_client",
            "the client's redirect_uris include one that is not allowed (http off loopback, a fragment)",
        ));
    }
    let Some(redirect_uri) = get("redirect_uri").filter(|r| redirect_matches(&client, r)) else {
        tracing::info!("brokered login refused: redirect_uri not registered for the client");
        return oauth_error(OAuthError::new(
            400,
            "invalid_request",
            "redirect_uri is missing or not registered for this client",
        ));
    };
    // From here on, errors go back to the client.
    let state = get("state");
    if state.is_some_and(|s| s.len() > 1024) || get("scope").is_some_and(|s| s.len() > 1024) {
        return oauth_error(OAuthError::new(
            400,
            "invalid_request",
            "state and scope are at most 1 KB each",
        ));
    }
    let base = base_url(&table.settings, &headers);
    let back = |error: &str, description: &str| {
        let mut pairs = vec![
            ("error", error),
            ("error_description", description),
            ("iss", base.as_str()),
        ];
        if let Some(state) = state {
            pairs.push(("state", state));
        }
        redirect(&with_query(redirect_uri, &pairs))
    };
    if get("response_type") != Some("code") {
        return back("unsupported_response_type", "response_type must be code");
    }
    let Some(challenge) = get("code_challenge").filter(|c| (43..=128).contains(&c.len())) else {
        return back("invalid_request", "code_challenge (PKCE) is required");
    };
    if get("code_challenge_method") != Some("S256") {
        return back("invalid_request", "code_challenge_method must be S256");
    }
    let resource = get("resource").map_or_else(|| format!("{base}/mcp"), str::to_owned);
    if !under(&resource, &base) {
        return back(
            "invalid_target",
            "resource is not a resource of this gateway",
        );
    }
    if broker
        .table
        .identity_keys
        .login(broker.provider_id)
        .is_none()
    {
        return back(
            "temporarily_unavailable",
            "the identity provider's discovery document could not be read yet",
        );
    }
    // The browser this starts in: the consent's answer and the provider's redirect back must
    // come from it (a cookie), or a login approved in one browser could complete in another's
    // session at the provider.
    let nonce = new_verifier();
    let verifier = new_verifier();
    let record = LoginRecord {
        browser: digest(&nonce),
        client: digest(client_id),
        redirect_uri: redirect_uri.to_string(),
        state: state.map(str::to_owned),
        code_challenge: challenge.to_string(),
        resource,
        scope: granted_scope(broker.table, &broker.spec.scopes, get("scope")),
        verifier,
        exp: unix(now) + LOGIN_TTL.as_secs(),
    };
    let sealed_state = broker.sealer.seal(Record::Login, &record, now);
    // The person says yes to this client first (the MCP specification's rule for a proxy with
    // one client at the provider: otherwise a registered client could take a code from anyone
    // already logged in there). The answer is bound to this browser by the cookie.
    let consent = ConsentRecord {
        login: sealed_state,
        exp: unix(now) + LOGIN_TTL.as_secs(),
    };
    let sealed_consent = broker.sealer.seal(Record::Consent, &consent, now);
    let who = match &client.name {
        Some(name) => name.clone(),
        None if client_id.starts_with("https://") => client_id.to_string(),
        None => "An MCP client".to_string(),
    };
    let to = url::Url::parse(redirect_uri)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_else(|| redirect_uri.to_string());
    consent_page(&base, &who, &to, &sealed_consent, &nonce)
}

/// The consent page: who asks, where the sign-in goes, one form (approve or deny). Not to be
/// framed; never cached.
fn consent_page(base: &str, who: &str, to: &str, consent: &str, nonce: &str) -> Response {
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Sign in</title></head><body>\
         <h1>Sign in to {base}</h1><p><strong>{who}</strong> asks to act for you at {base}, with \
         what your groups are granted there. The sign-in goes back to <strong>{to}</strong>.</p>\
         <form method=\"post\" action=\"{base}/oauth/consent\">\
         <input type=\"hidden\" name=\"consent\" value=\"{consent}\">\
         <button type=\"submit\" name=\"answer\" value=\"approve\">Continue to sign in</button> \
         <button type=\"submit\" name=\"answer\" value=\"deny\">Deny</button></form></body></html>",
        base = escape(base),
        who = escape(who),
        to = escape(to),
        consent = escape(consent),
    );
    let secure = if base.starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    let mut response = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html,
    )
        .into_response();
    let headers = response.headers_mut();
    if let Ok(cookie) = HeaderValue::from_str(&format!(
        "{BROWSER_COOKIE}={nonce}; Path=/oauth; HttpOnly; SameSite=Lax; Max-Age=600{secure}"
    )) {
        headers.insert(header::SET_COOKIE, cookie);
    }
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; form-action 'self'; frame-ancestors 'none'"),
    );
    no_store(&mut response);
    response
}

/// The cookie that binds a login to the browser it started in: the consent's answer (a
/// same-site POST) and the provider's redirect back (a top-level GET, which is why `Lax`:
/// `Strict` is not sent on a navigation coming from the provider's site) must carry it.
const BROWSER_COOKIE: &str = "switchboard_login";

pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

#[derive(Deserialize)]
pub(crate) struct ConsentAnswer {
    pub(crate) consent: String,
    pub(crate) answer: String,
}

/// `POST /oauth/consent`: the person's answer. Approved, the login goes on to the provider;
/// denied, the client hears `access_denied`. An answer from another browser (no cookie, or
/// another's) is refused: a page elsewhere cannot approve for the person.
pub(crate) async fn consent(
    State(cx): State<Arc<SignInContext>>,
    headers: HeaderMap,
    form: Result<Form<ConsentAnswer>, axum::extract::rejection::FormRejection>,
) -> Response {
    let table = cx.table();
    let broker = match Broker::of(&table) {
        Ok(broker) => broker,
        Err(answer) => return *answer,
    };
    let now = SystemTime::now();
    let refused = |why: &str| oauth_error(OAuthError::new(400, "invalid_request", why));
    let Ok(Form(answer)) = form else {
        return refused("not a consent form");
    };
    let Some(consent) = broker
        .sealer
        .open::<ConsentRecord>(Record::Consent, &answer.consent, now)
    else {
        return refused("the sign-in expired or was not started here; start it again");
    };
    let Some(login) = broker
        .sealer
        .open::<LoginRecord>(Record::Login, &consent.login, now)
    else {
        return refused("the sign-in expired; start it again");
    };
    if !started_in(&headers, &login) {
        tracing::info!("brokered login refused: a consent answer from another browser");
        return refused("the answer did not come from the browser the page was shown in");
    }
    let base = base_url(&table.settings, &headers);
    if answer.answer != "approve" {
        let mut pairs = vec![
            ("error", "access_denied"),
            (
                "error_description",
                "the person did not let the client sign in",
            ),
            ("iss", base.as_str()),
        ];
        if let Some(state) = login.state.as_deref() {
            pairs.push(("state", state));
        }
        return redirect(&with_query(&login.redirect_uri, &pairs));
    }
    let (Some(brokered), Some(endpoints)) = (
        &broker.spec.brokered,
        broker.table.identity_keys.login(broker.provider_id),
    ) else {
        return oauth_error(OAuthError::new(
            503,
            "temporarily_unavailable",
            "the identity provider's discovery document could not be read yet",
        ));
    };
    let callback = format!("{base}/oauth/callback");
    let scopes = brokered.scopes.join(" ");
    let challenge_to_provider = s256(&login.verifier);
    tracing::info!(provider = broker.provider_id, "brokered login started");
    redirect(&with_query(
        &endpoints.authorization,
        &[
            ("response_type", "code"),
            ("client_id", &brokered.client_id),
            ("redirect_uri", &callback),
            ("scope", &scopes),
            ("state", &consent.login),
            ("code_challenge", &challenge_to_provider),
            ("code_challenge_method", "S256"),
        ],
    ))
}

/// Whether the request comes from the browser `login` started in (its cookie's nonce).
fn started_in(headers: &HeaderMap, login: &LoginRecord) -> bool {
    cookie(headers, BROWSER_COOKIE).is_some_and(|nonce| digest(nonce) == login.browser)
}

/// A cookie's value from the request's `Cookie` headers.
pub(crate) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Whether `resource` is `base` or a path under it.
/// The scopes of a request the gateway grants: those it knows (the provider's `scopes`, what
/// its metadata lists, and every scope a server's tool requires), each once, in the order
/// asked; others are left out rather than refused (RFC 6749 section 3.3: the token answer says
/// what was granted). `None` when none is left.
fn granted_scope(table: &RoutingTable, provider: &[String], asked: Option<&str>) -> Option<String> {
    let known = |scope: &str| {
        provider.iter().any(|s| s == scope)
            || table.servers.iter().any(|server| {
                server
                    .spec
                    .tools
                    .required_scopes
                    .values()
                    .any(|scopes| scopes.iter().any(|s| s == scope))
            })
    };
    let mut granted: Vec<&str> = Vec::new();
    for scope in asked?.split_ascii_whitespace() {
        if known(scope) && !granted.contains(&scope) {
            granted.push(scope);
        }
    }
    (!granted.is_empty()).then(|| granted.join(" "))
}

fn under(resource: &str, base: &str) -> bool {
    resource
        .strip_prefix(base)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// `GET /oauth/callback`: the provider's answer. The code is redeemed, the provider's token
/// verified as a person's token is, and the client gets a code of the gateway's own.
pub(crate) async fn callback(
    State(cx): State<Arc<SignInContext>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let table = cx.table();
    let broker = match Broker::of(&table) {
        Ok(broker) => broker,
        Err(answer) => return *answer,
    };
    let now = SystemTime::now();
    let Some(login) = q
        .get("state")
        .and_then(|s| broker.sealer.open::<LoginRecord>(Record::Login, s, now))
    else {
        return oauth_error(OAuthError::new(
            400,
            "invalid_request",
            "the login expired or was not started by this gateway",
        ));
    };
    if !started_in(&headers, &login) {
        tracing::info!("brokered login refused: the provider's answer came to another browser");
        return oauth_error(OAuthError::new(
            400,
            "invalid_request",
            "the sign-in did not come back to the browser that started it",
        ));
    }
    let base = base_url(&table.settings, &headers);
    let back = |pairs: &[(&str, &str)]| {
        let mut all = pairs.to_vec();
        all.push(("iss", base.as_str()));
        if let Some(state) = login.state.as_deref() {
            all.push(("state", state));
        }
        redirect(&with_query(&login.redirect_uri, &all))
    };
    let denied = |why: &str| back(&[("error", "access_denied"), ("error_description", why)]);
    if q.contains_key("error") {
        tracing::info!(
            provider = broker.provider_id,
            "brokered login: the identity provider refused"
        );
        return denied("the identity provider did not sign the person in");
    }
    let (Some(code), Some(endpoints)) = (
        q.get("code"),
        broker.table.identity_keys.login(broker.provider_id),
    ) else {
        return denied("no code from the identity provider");
    };
    let callback = format!("{base}/oauth/callback");
    let redeemed = cx
        .upstream
        .redeem_login_code(
            broker.spec,
            broker.tls,
            &endpoints.token,
            code,
            &callback,
            &login.verifier,
        )
        .await;
    let grant = match redeemed {
        Ok(grant) => grant,
        Err(detail) => {
            tracing::warn!(provider = broker.provider_id, %detail, "brokered login: redeeming the code failed");
            return denied("the identity provider did not accept the login");
        }
    };
    let (identity, tokens) = match identity_of(&broker, grant, None, now).await {
        Ok(found) => found,
        Err(reason) => {
            tracing::info!(
                provider = broker.provider_id,
                reason,
                "brokered login refused"
            );
            return denied(reason);
        }
    };
    let code = CodeRecord {
        client: login.client.clone(),
        redirect_uri: login.redirect_uri.clone(),
        code_challenge: login.code_challenge.clone(),
        resource: login.resource.clone(),
        scope: login.scope.clone(),
        identity,
        provider_token: tokens,
        signed_in: unix_ms(now),
        exp: unix(now) + CODE_TTL.as_secs(),
    };
    let sealed = broker.sealer.seal(Record::Code, &code, now);
    tracing::info!(provider = broker.provider_id, "brokered login completed");
    back(&[("code", &sealed)])
}

/// Who the provider's token names (verified with the provider's keys, its audience among the
/// provider's `audiences`), and the provider's tokens to hold for them.
async fn identity_of(
    broker: &Broker<'_>,
    grant: ProviderGrant,
    kept_refresh: Option<String>,
    now: SystemTime,
) -> Result<(Identity, ProviderTokens), &'static str> {
    let (person, token_exp) = broker
        .people
        .identify(
            &broker.table.identity_keys,
            broker.provider_id,
            &grant.access_token,
        )
        .await
        .map_err(|refusal| refusal.reason())?;
    let identity = Identity {
        provider: person.provider.clone(),
        subject: person.subject.clone(),
        groups: person.groups.clone(),
    };
    let tokens = ProviderTokens {
        // The token's own `exp`, or sooner if the answer said so.
        access_exp: token_exp.min(unix(now) + grant.expires_in.unwrap_or(u64::MAX / 2)),
        access: grant.access_token,
        refresh: grant.refresh_token.or(kept_refresh),
    };
    Ok((identity, tokens))
}

#[derive(Deserialize)]
pub(crate) struct TokenRequest {
    grant_type: String,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    redirect_uri: Option<String>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    code_verifier: Option<String>,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    client_secret: Option<String>,
    /// The identity assertion of the JWT bearer grant.
    #[serde(default)]
    assertion: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    resource: Option<String>,
}

/// The client a token or revocation request comes from: the id it gave (in the form or
/// `Authorization: Basic`), and whether it proved it with its secret (a confidential client
/// must; a public one has none).
struct TokenClient {
    id: Option<String>,
    /// The registration of a confidential client that authenticated.
    authenticated: Option<ClientRecord>,
}

/// Authenticates the client of a token or revocation request (RFC 6749 section 2.3.1):
/// `client_secret_basic` or `client_secret_post` (`client_id`, `client_secret` of the form) for
/// a confidential registration, nothing for a public client.
fn token_client(
    broker: &Broker<'_>,
    headers: &HeaderMap,
    client_id: Option<&str>,
    client_secret: Option<&str>,
    now: SystemTime,
) -> Result<TokenClient, OAuthError> {
    let invalid_client = |why: &str| OAuthError::new(401, "invalid_client", why);
    // Another scheme (a client that sends its bearer token everywhere) says nothing of the
    // client here and is left alone, as before clients authenticated; a Basic one must parse.
    let basic = match headers.get(header::AUTHORIZATION) {
        Some(value) if tried_basic(value) => Some(
            basic_credentials(value)
                .ok_or_else(|| invalid_client("Authorization: Basic is not client credentials"))?,
        ),
        _ => None,
    };
    let (id, secret) = match (basic, client_id) {
        (Some((id, _)), Some(form)) if id != form => {
            return Err(OAuthError::new(
                400,
                "invalid_request",
                "client_id differs from the client authenticated",
            ));
        }
        (Some((id, secret)), _) => (Some(id), Some(secret)),
        (None, id) => (id.map(str::to_owned), client_secret.map(str::to_owned)),
    };
    let secret = secret.filter(|s| !s.is_empty());
    let record = id
        .as_deref()
        .and_then(|id| broker.sealer.open::<ClientRecord>(Record::Client, id, now));
    let authenticated = match (record, secret, id.as_deref()) {
        (Some(record), Some(secret), Some(id)) if record.confidential => {
            if !broker.sealer.client_secret_ok(id, &secret) {
                return Err(invalid_client("the client secret is wrong"));
            }
            Some(record)
        }
        (Some(record), None, _) if record.confidential => {
            return Err(invalid_client(
                "a confidential client authenticates (client_secret_basic or client_secret_post)",
            ));
        }
        (_, Some(_), _) => {
            return Err(invalid_client(
                "the client is not a confidential client of this gateway",
            ));
        }
        _ => None,
    };
    Ok(TokenClient { id, authenticated })
}

/// An OAuth error answer at an endpoint where clients authenticate: a 401 after a Basic
/// attempt challenges for Basic (RFC 6749 section 5.2).
fn client_error(e: OAuthError, headers: &HeaderMap) -> Response {
    let challenge = e.status == 401 && headers.get(header::AUTHORIZATION).is_some_and(tried_basic);
    let mut response = oauth_error(e);
    if challenge {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"switchboard\""),
        );
    }
    response
}

/// Whether `Authorization` is the Basic scheme (case-insensitive, RFC 9110 section 11.1).
fn tried_basic(value: &HeaderValue) -> bool {
    value
        .as_bytes()
        .get(..6)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case(b"basic "))
}

/// The client id and secret of `Authorization: Basic` (each form-urlencoded, RFC 6749
/// section 2.3.1).
fn basic_credentials(value: &HeaderValue) -> Option<(String, String)> {
    let encoded = value.to_str().ok()?.get(6..)?.trim();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let (id, secret) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    let unescape = |part: &str| {
        url::form_urlencoded::parse(format!("v={part}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
    };
    Some((unescape(id)?, unescape(secret)?))
}

/// `POST /oauth/token`: `authorization_code` (with the PKCE verifier), `refresh_token`, and,
/// when the brokered provider takes identity assertions, the JWT bearer grant.
pub async fn token(
    State(cx): State<Arc<SignInContext>>,
    headers: HeaderMap,
    form: Result<Form<TokenRequest>, axum::extract::rejection::FormRejection>,
) -> Response {
    let table = cx.table();
    let broker = match Broker::of(&table) {
        Ok(broker) => broker,
        Err(answer) => return *answer,
    };
    let Ok(Form(request)) = form else {
        return oauth_error(OAuthError::new(
            400,
            "invalid_request",
            "not a token request form",
        ));
    };
    let now = SystemTime::now();
    let client = token_client(
        &broker,
        &headers,
        request.client_id.as_deref(),
        request.client_secret.as_deref(),
        now,
    );
    let grant = match request.grant_type.as_str() {
        "authorization_code" => "authorization_code",
        "refresh_token" => "refresh_token",
        JWT_BEARER => "identity_assertion",
        _ => "other",
    };
    let answer = match client {
        Err(e) => Err(e),
        Ok(client) => match request.grant_type.as_str() {
            "authorization_code" => redeem(&broker, &client, &request, now).await,
            "refresh_token" => refresh(&cx, &broker, &client, &request, now).await,
            JWT_BEARER if broker.assertion_signer().is_some() => {
                let base = base_url(&table.settings, &headers);
                assertion_grant(&broker, client, &base, &request, now).await
            }
            _ => Err(OAuthError::new(
                400,
                "unsupported_grant_type",
                broker.grant_types().join(", "),
            )),
        },
    };
    cx.metrics
        .brokered_token(grant, answer.as_ref().map_or_else(|e| e.error, |_| "ok"));
    match answer {
        Ok(body) => {
            let mut response = Json(body).into_response();
            no_store(&mut response);
            response
        }
        Err(e) => {
            tracing::info!(grant, error = e.error, reason = %e.description, "brokered token request refused");
            client_error(e, &headers)
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct RevocationRequest {
    token: String,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    client_secret: Option<String>,
}

/// `POST /oauth/revoke` (RFC 7009), for the client a token was issued to. A refresh token ends
/// its whole grant (every refresh token of that login, on every replica: the shared store's
/// revoked grants). An access token is not kept anywhere to be ended: it lives out its own
/// `accessTokenTtl` (5 minutes by default); a person ends all of theirs at once by signing out
/// (`/connections`). An unknown or expired token is answered 200, as RFC 7009 says.
pub async fn revoke(
    State(cx): State<Arc<SignInContext>>,
    headers: HeaderMap,
    form: Result<Form<RevocationRequest>, axum::extract::rejection::FormRejection>,
) -> Response {
    let table = cx.table();
    let broker = match Broker::of(&table) {
        Ok(broker) => broker,
        Err(answer) => return *answer,
    };
    let Ok(Form(request)) = form else {
        return oauth_error(OAuthError::new(
            400,
            "invalid_request",
            "not a revocation request form (token, client_id)",
        ));
    };
    let now = SystemTime::now();
    // A confidential client authenticates here as at the token endpoint (RFC 7009 section 2.1).
    let client = match token_client(
        &broker,
        &headers,
        request.client_id.as_deref(),
        request.client_secret.as_deref(),
        now,
    ) {
        Ok(client) => client,
        Err(e) => return client_error(e, &headers),
    };
    if let Some(record) = broker
        .sealer
        .open::<RefreshRecord>(Record::Refresh, &request.token, now)
    {
        if client.id.as_deref().map(digest).as_ref() != Some(&record.client) {
            return oauth_error(OAuthError::new(
                400,
                "invalid_request",
                "the token was issued to another client",
            ));
        }
        if !record.grant.is_empty() {
            let ttl = Duration::from_secs(record.exp.saturating_sub(unix(now)));
            if !revoke_grant(&broker.table.store, &record.grant, ttl).await {
                return oauth_error(store_unavailable("try again shortly"));
            }
            tracing::info!(
                provider = broker.provider_id,
                "a brokered grant was revoked by its client"
            );
        }
    }
    let mut response = StatusCode::OK.into_response();
    no_store(&mut response);
    response
}

/// The answer while the shared store does not answer what a request needs of it (single
/// use), `then` saying what the client does.
fn store_unavailable(then: &str) -> OAuthError {
    OAuthError::new(
        503,
        "temporarily_unavailable",
        format!("the gateway's state store does not answer; {then}"),
    )
}

fn invalid_grant(why: &str) -> OAuthError {
    OAuthError::new(400, "invalid_grant", why)
}

/// How long a redeemed code is remembered: past its own 60 s life, whatever the clocks say.
const CODE_REMEMBERED: Duration = Duration::from_secs(300);

async fn redeem(
    broker: &Broker<'_>,
    client: &TokenClient,
    request: &TokenRequest,
    now: SystemTime,
) -> Result<serde_json::Value, OAuthError> {
    let code_text = request.code.as_deref().unwrap_or_default();
    let code: CodeRecord = broker
        .sealer
        .open(Record::Code, code_text, now)
        .ok_or_else(|| invalid_grant("the code is unknown or expired"))?;
    if client.id.as_deref().map(digest).as_ref() != Some(&code.client) {
        return Err(invalid_grant("the code was issued to another client"));
    }
    if request.redirect_uri.as_deref() != Some(code.redirect_uri.as_str()) {
        return Err(invalid_grant(
            "redirect_uri differs from the authorization request's",
        ));
    }
    let verifier = request.code_verifier.as_deref().unwrap_or_default();
    if !pkce_ok(verifier, &code.code_challenge) {
        return Err(invalid_grant(
            "code_verifier does not answer the code_challenge",
        ));
    }
    let refresh_ttl = broker
        .spec
        .brokered
        .as_ref()
        .map_or(Duration::ZERO, |b| b.refresh_token_ttl);
    // The grant is named after its code: a second redemption revokes what the first was given.
    let grant = digest(code_text);
    let store = &broker.table.store;
    match store
        .first_use(
            &StoreKey::new("used-code", &[grant.as_bytes()]),
            CODE_REMEMBERED,
        )
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            revoke_grant(store, &grant, refresh_ttl).await;
            return Err(invalid_grant(
                "the code was already redeemed; what it was given is revoked",
            ));
        }
        Err(e) => {
            tracing::warn!(error = %e, "a brokered code was refused: its single use cannot be checked");
            return Err(store_unavailable("sign in again shortly"));
        }
    }
    Ok(issue(
        broker,
        &code.client,
        &code.resource,
        code.scope.as_deref(),
        code.identity,
        code.provider_token,
        Grant {
            id: grant,
            exp: unix(now) + refresh_ttl.as_secs(),
            signed_in: code.signed_in,
        },
        now,
    ))
}

/// The family of refresh tokens one login began (named after its code), when they end, and
/// when the person signed in (a sign-out after it ends them all).
struct Grant {
    id: String,
    exp: u64,
    signed_in: u64,
}

fn revoked_grant_key(grant: &str) -> StoreKey {
    StoreKey::new("revoked-grant", &[grant.as_bytes()])
}

/// Revokes `grant` on every replica for `ttl`; `false` when the store did not take it (logged).
async fn revoke_grant(store: &Store, grant: &str, ttl: Duration) -> bool {
    let ttl = ttl.max(Duration::from_secs(1));
    match store.put(&revoked_grant_key(grant), b"revoked", ttl).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "a grant to revoke could not be written to the state store");
            false
        }
    }
}

/// Refuses a refresh token whose grant was revoked (a code or a refresh token used twice).
/// Unchecked while the store does not answer.
async fn refuse_revoked(store: &Store, record: &RefreshRecord) -> Result<(), OAuthError> {
    if record.grant.is_empty() {
        return Ok(());
    }
    match store.get(&revoked_grant_key(&record.grant)).await {
        Ok(Some(_)) => Err(invalid_grant(
            "the grant was revoked (a code or refresh token was used twice)",
        )),
        Ok(None) => Ok(()),
        Err(e) => {
            tracing::warn!(error = %e, "a refresh went ahead unchecked: the state store does not answer");
            Ok(())
        }
    }
}

/// Spends refresh token `token` of `record` once: a second spending revokes the grant.
/// Unchecked while the store does not answer.
async fn spend_refresh(
    store: &Store,
    record: &RefreshRecord,
    token: &str,
    now: SystemTime,
) -> Result<(), OAuthError> {
    let ttl = Duration::from_secs(record.exp.saturating_sub(unix(now)).max(1));
    let spent = StoreKey::new("used-refresh", &[digest(token).as_bytes()]);
    match store.first_use(&spent, ttl).await {
        Ok(true) => Ok(()),
        Ok(false) => {
            if !record.grant.is_empty() {
                revoke_grant(store, &record.grant, ttl).await;
            }
            Err(invalid_grant(
                "the refresh token was already used; its grant is revoked",
            ))
        }
        Err(e) => {
            tracing::warn!(error = %e, "a refresh went ahead unchecked: the state store does not answer");
            Ok(())
        }
    }
}

async fn refresh(
    cx: &SignInContext,
    broker: &Broker<'_>,
    client: &TokenClient,
    request: &TokenRequest,
    now: SystemTime,
) -> Result<serde_json::Value, OAuthError> {
    let token = request.refresh_token.as_deref().unwrap_or_default();
    let record: RefreshRecord = broker
        .sealer
        .open(Record::Refresh, token, now)
        .ok_or_else(|| invalid_grant("the refresh token is unknown or expired"))?;
    if client.id.as_deref().map(digest).as_ref() != Some(&record.client) {
        return Err(invalid_grant(
            "the refresh token was issued to another client",
        ));
    }
    if record.provider != broker.provider_id {
        return Err(invalid_grant(
            "the refresh token is another identity provider's",
        ));
    }
    refuse_revoked(&broker.table.store, &record).await?;
    let endpoints = broker
        .table
        .identity_keys
        .login(broker.provider_id)
        .ok_or_else(|| {
            OAuthError::new(
                503,
                "temporarily_unavailable",
                "the identity provider's discovery could not be read",
            )
        })?;
    // Spent only once the gateway can go on (a refresh refused for a passing reason can be
    // presented again), and before the provider is asked (two presentations at once: one wins).
    spend_refresh(&broker.table.store, &record, token, now).await?;
    // The provider is asked again: a person logged out or disabled there is refused here.
    let grant = cx.upstream.refresh_login(
        broker.spec,
        broker.tls,
        &endpoints.token,
        &record.provider_refresh,
    )
    .await
    .map_err(|detail| {
        tracing::info!(provider = broker.provider_id, %detail, "brokered refresh refused by the identity provider");
        invalid_grant("the identity provider refused the refresh (logged out, disabled or expired)")
    })?;
    let (identity, tokens) = identity_of(broker, grant, Some(record.provider_refresh.clone()), now)
        .await
        .map_err(invalid_grant)?;
    if broker
        .signed_out_since(&identity.subject, record.signed_in)
        .await
    {
        return Err(invalid_grant("the person signed out since this login"));
    }
    Ok(issue(
        broker,
        &record.client,
        &record.resource,
        record.scope.as_deref(),
        identity,
        tokens,
        Grant {
            id: record.grant.clone(),
            exp: record.exp,
            signed_in: record.signed_in,
        },
        now,
    ))
}

/// The JWT bearer grant with an identity assertion (an ID-JAG, RFC 7523 and
/// draft-ietf-oauth-identity-assertion-authz-grant section 4.4): a confidential client that
/// registered for it presents an assertion the company's identity provider issued for this
/// gateway and for it; the person it names gets an access token with a browser login's grants
/// (their keys, the scopes the gateway knows, within what the assertion allows), and no refresh
/// token (the client presents a new assertion). Each assertion is taken once (its `jti`, in the
/// shared store until it expires).
async fn assertion_grant(
    broker: &Broker<'_>,
    client: TokenClient,
    issuer: &str,
    request: &TokenRequest,
    now: SystemTime,
) -> Result<serde_json::Value, OAuthError> {
    let (Some(client_id), Some(registration)) = (client.id, client.authenticated) else {
        return Err(OAuthError::new(
            401,
            "invalid_client",
            "the identity assertion grant is for confidential clients, authenticated \
             (client_secret_basic or client_secret_post)",
        ));
    };
    if !registration.grant_types.iter().any(|g| g == JWT_BEARER) {
        return Err(OAuthError::new(
            400,
            "unauthorized_client",
            "the client did not register for the JWT bearer grant",
        ));
    }
    let assertion = request
        .assertion
        .as_deref()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| OAuthError::new(400, "invalid_request", "assertion is missing"))?;
    let signer = broker.assertion_signer().unwrap_or_default();
    let verified = broker
        .people
        .verify_assertion(&broker.table.identity_keys, &signer, assertion, issuer)
        .await
        .map_err(|refusal| invalid_grant(&assertion_refused(refusal)))?;
    if verified.client_id != client_id {
        return Err(invalid_grant("the assertion was issued to another client"));
    }
    let resource = assertion_resource(&verified.resources, request.resource.as_deref(), issuer)?;
    // Taken once, on every replica (while the store does not answer, refused: the client asks
    // its identity provider again shortly).
    let ttl = Duration::from_secs(verified.exp.saturating_sub(unix(now)) + 60);
    let taken = StoreKey::new(
        "used-assertion",
        &[verified.issuer.as_bytes(), verified.jti.as_bytes()],
    );
    match broker.table.store.first_use(&taken, ttl).await {
        Ok(true) => {}
        Ok(false) => return Err(invalid_grant("the assertion was already used")),
        Err(e) => {
            tracing::warn!(error = %e, "an identity assertion was refused: its single use cannot be checked");
            return Err(store_unavailable("try again shortly"));
        }
    }
    let signed_in = verified.signed_in.saturating_mul(1000);
    if broker.signed_out_since(&verified.subject, signed_in).await {
        return Err(invalid_grant(
            "the person signed out after the assertion's sign-in",
        ));
    }
    // The scopes asked (else those the assertion carries), within what the assertion allows.
    let asked = request
        .scope
        .clone()
        .or_else(|| verified.scope.as_ref().map(|allowed| allowed.join(" ")));
    let asked = asked.map(|asked| {
        asked
            .split_ascii_whitespace()
            .filter(|s| {
                verified
                    .scope
                    .as_ref()
                    .is_none_or(|allowed| allowed.iter().any(|a| a == s))
            })
            .collect::<Vec<_>>()
            .join(" ")
    });
    let scope = granted_scope(broker.table, &broker.spec.scopes, asked.as_deref());
    tracing::info!(
        provider = broker.provider_id,
        client = registration.name.as_deref().unwrap_or("-"),
        "brokered identity assertion accepted"
    );
    Ok(issue(
        broker,
        &digest(&client_id),
        &resource,
        scope.as_deref(),
        Identity {
            provider: broker.provider_id.to_string(),
            subject: verified.subject,
            groups: verified.groups,
        },
        // Nothing of the provider's is held: no exchange on the person's behalf, no refresh.
        ProviderTokens {
            access: String::new(),
            access_exp: u64::MAX,
            refresh: None,
        },
        Grant {
            id: String::new(),
            exp: 0,
            signed_in,
        },
        now,
    ))
}

/// What an assertion's refusal says to the client.
fn assertion_refused(refusal: AssertionRefusal) -> String {
    let why = match refusal {
        AssertionRefusal::NotAnAssertion => {
            "the assertion is not an identity assertion (its typ is not oauth-id-jag+jwt)"
        }
        AssertionRefusal::Missing(claim) => {
            return format!("the assertion has no {claim} (an ID-JAG's claims are required)");
        }
        AssertionRefusal::TooLong => "the assertion lives longer than an hour",
        AssertionRefusal::Token(refusal) => match refusal {
            Refusal::Malformed => "the assertion is not a well-formed JWT",
            Refusal::UnknownIssuer => {
                "the assertion's issuer is not the identity provider whose assertions this gateway takes"
            }
            Refusal::KeysNotLoaded => {
                "the assertion's identity provider's keys could not be fetched yet"
            }
            Refusal::UnknownSigningKey => {
                "the assertion is signed with a key its identity provider does not publish"
            }
            Refusal::AlgorithmNotAccepted => {
                "the assertion's signature algorithm is not accepted for its identity provider"
            }
            Refusal::BadSignature => "the assertion's signature does not verify",
            Refusal::Expired => "the assertion has expired",
            Refusal::NotYetValid => "the assertion is not valid yet",
            Refusal::WrongAudience => "the assertion is not for this gateway (its aud)",
            Refusal::MissingSubject => "the assertion names no subject",
            Refusal::RequiredClaim | Refusal::NotIssuedHere | Refusal::OtherResource => {
                "the assertion was refused"
            }
        },
    };
    why.to_string()
}

/// The resource an assertion grant's token is for: the one asked (`resource`), which the
/// assertion must name when it names any; else the first it names under the gateway; else the
/// gateway's `/mcp`.
fn assertion_resource(
    named: &[String],
    asked: Option<&str>,
    base: &str,
) -> Result<String, OAuthError> {
    let resource = match asked {
        Some(asked) => {
            if !named.is_empty() && !named.iter().any(|n| n == asked) {
                return Err(invalid_grant("the assertion is not for the resource asked"));
            }
            asked.to_string()
        }
        None if named.is_empty() => format!("{base}/mcp"),
        None => named
            .iter()
            .find(|n| under(n, base))
            .cloned()
            .ok_or_else(|| invalid_grant("the assertion is for another resource"))?,
    };
    if !under(&resource, base) {
        return Err(OAuthError::new(
            400,
            "invalid_target",
            "the resource is not this gateway's",
        ));
    }
    Ok(resource)
}

/// An access token (and a refresh token when the provider gave one to hold).
#[allow(clippy::too_many_arguments)]
fn issue(
    broker: &Broker<'_>,
    client: &str,
    resource: &str,
    scope: Option<&str>,
    identity: Identity,
    provider: ProviderTokens,
    grant: Grant,
    now: SystemTime,
) -> serde_json::Value {
    let ttl = broker
        .spec
        .brokered
        .as_ref()
        .map_or(Duration::from_secs(300), |b| b.access_token_ttl);
    // Never past the provider's token it carries (the subject of exchanges on their behalf).
    let exp = (unix(now) + ttl.as_secs()).min(provider.access_exp);
    let access = AccessRecord {
        identity: identity.clone(),
        audience: resource.to_string(),
        client: client.to_string(),
        provider_access: provider.access,
        scope: scope.map(str::to_owned),
        signed_in: grant.signed_in,
        exp,
    };
    let mut body = json!({
        "access_token": broker.sealer.seal(Record::Access, &access, now),
        "token_type": "Bearer",
        "expires_in": exp.saturating_sub(unix(now)),
    });
    if let Some(scope) = scope {
        body["scope"] = json!(scope);
    }
    if let Some(provider_refresh) = provider.refresh
        && grant.exp > unix(now)
    {
        let refresh = RefreshRecord {
            client: client.to_string(),
            resource: resource.to_string(),
            scope: scope.map(str::to_owned),
            provider: identity.provider,
            provider_refresh,
            grant: grant.id,
            signed_in: grant.signed_in,
            exp: grant.exp,
        };
        body["refresh_token"] = json!(broker.sealer.seal(Record::Refresh, &refresh, now));
    }
    body
}

#[cfg(test)]
mod tests {
    //! The authorization server's handlers in process, with their own context over a table
    //! built from a snapshot (no listener, no network: the refusals here happen before any
    //! fetch or redirect).
    use super::*;
    use crate::sign_in::tests::{body, context};
    use serde_json::Value;

    /// A refusal of the token endpoint: 400 with OAuth's `error` code and a description that
    /// says why.
    fn refused(status: StatusCode, answer: &Value, error: &str, why: &str) {
        assert_eq!(
            (status, answer["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some(error)),
            "{answer}"
        );
        let description = answer["error_description"].as_str().unwrap_or_default();
        assert!(description.contains(why), "{description}");
    }

    const BROKERED: &str = r#"
gateway: {publicUrl: "https://gw.example", sessionKey: a-session-key-for-tests}
identityProviders:
- name: corp
  issuer: https://login.example/realms/corp
  audiences: [switchboard]
  scopes: [mcp-tools]
  brokered: {clientId: gw, clientSecret: s, scopes: [openid, email]}
servers:
- {name: a, url: 'http://a/mcp'}
keys:
- {name: alice, secret: s-alice, servers: [a], people: [{provider: corp, subjects: [alice]}]}
"#;

    #[test]
    fn the_scopes_granted_are_those_the_gateway_knows_each_once_in_the_order_asked() {
        let yaml = BROKERED.replace(
            "- {name: a, url: 'http://a/mcp'}",
            "- {name: a, url: 'http://a/mcp', tools: {requiredScopes: {add: ['a:write']}}}",
        );
        let snapshot = switchboard_snapshot::parse(&yaml).unwrap();
        let table = RoutingTable::build(&snapshot).unwrap();
        let provider = ["mcp-tools".to_string()];
        let granted = |asked| granted_scope(&table, &provider, asked);
        assert_eq!(
            granted(Some("a:write offline_access mcp-tools a:write")).as_deref(),
            Some("a:write mcp-tools")
        );
        assert_eq!(granted(Some("offline_access other")), None);
        assert_eq!(granted(None), None);
    }

    fn query(pairs: &[(&str, &str)]) -> Query<HashMap<String, String>> {
        Query(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[tokio::test]
    async fn the_metadata_names_the_gateways_endpoints_only_when_a_provider_is_brokered() {
        let plain = BROKERED.replace(
            "  brokered: {clientId: gw, clientSecret: s, scopes: [openid, email]}\n",
            "",
        );
        let (status, _) = body(metadata(State(context(&plain)), HeaderMap::new()).await).await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        let (status, doc) = body(metadata(State(context(BROKERED)), HeaderMap::new()).await).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(doc["issuer"], "https://gw.example");
        assert_eq!(
            doc["authorization_endpoint"],
            "https://gw.example/oauth/authorize"
        );
        assert_eq!(doc["token_endpoint"], "https://gw.example/oauth/token");
        assert_eq!(
            doc["revocation_endpoint"],
            "https://gw.example/oauth/revoke"
        );
        // What clients ask for (the provider's `scopes`), not what the gateway asks the provider.
        assert_eq!(doc["scopes_supported"], json!(["mcp-tools"]));
        assert_eq!(doc["code_challenge_methods_supported"], json!(["S256"]));
    }

    /// Each refusal before the browser leaves: no client, a client id that is no registration
    /// of this gateway, a metadata-document URL that cannot be one (refused unfetched), and an
    /// unregistered redirect URI of a registered client.
    #[tokio::test]
    async fn authorize_refuses_unknown_clients_and_redirects_naming_why() {
        let cx = context(BROKERED);
        let authorize_with = |pairs: &[(&str, &str)]| {
            let cx = cx.clone();
            let q = query(pairs);
            async move { body(authorize(State(cx), HeaderMap::new(), q).await).await }
        };
        let (status, e) = authorize_with(&[]).await;
        assert_eq!(
            (status, e["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_request"))
        );
        let (status, e) = authorize_with(&[("client_id", "forged")]).await;
        assert_eq!(
            (status, e["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_client"))
        );
        let (status, e) = authorize_with(&[("client_id", "https://client.example/")]).await;
        assert_eq!(
            (status, e["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_client"))
        );
        assert_eq!(
            e["error_description"],
            "a client_id URL is https with a path and no fragment"
        );

        let registered = register(
            State(cx.clone()),
            Ok(Json(Registration {
                redirect_uris: vec!["http://127.0.0.1:9/cb".into()],
                client_name: Some("test".into()),
                grant_types: None,
                token_endpoint_auth_method: None,
            })),
        )
        .await;
        let (status, client) = body(registered).await;
        assert_eq!(status, StatusCode::CREATED, "{client}");
        let client_id = client["client_id"]
            .as_str()
            .expect("a client_id")
            .to_string();
        let (status, e) = authorize_with(&[
            ("client_id", &client_id),
            ("redirect_uri", "http://127.0.0.1:9/elsewhere"),
        ])
        .await;
        assert_eq!(
            (status, e["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_request"))
        );
    }

    /// Where a redirect goes, and its query.
    fn location(response: &Response) -> (String, HashMap<String, String>) {
        assert_eq!(response.status(), StatusCode::FOUND);
        let to = response
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .expect("a Location");
        let url = url::Url::parse(to).expect("an absolute Location");
        let query = url.query_pairs().into_owned().collect();
        let mut bare = url.clone();
        bare.set_query(None);
        (bare.to_string(), query)
    }

    fn sealer(cx: &SignInContext) -> (Arc<RoutingTable>, SystemTime) {
        (cx.table(), SystemTime::now())
    }

    async fn registered(cx: &Arc<SignInContext>, redirect: &str) -> String {
        let (status, client) = body(
            register(
                State(cx.clone()),
                Ok(Json(Registration {
                    redirect_uris: vec![redirect.into()],
                    client_name: None,
                    grant_types: None,
                    token_endpoint_auth_method: None,
                })),
            )
            .await,
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{client}");
        client["client_id"]
            .as_str()
            .expect("a client_id")
            .to_string()
    }

    /// Without `gateway.publicUrl` the issuer would follow the Host header: brokered sign-in
    /// is unavailable rather than answered under a name a request chose.
    #[tokio::test]
    async fn brokered_sign_in_without_the_public_url_is_unavailable() {
        let cx = context(&BROKERED.replace("publicUrl: \"https://gw.example\", ", ""));
        let response = metadata(State(cx.clone()), HeaderMap::new()).await;
        assert_eq!(
            response
                .headers()
                .get(header::CACHE_CONTROL)
                .and_then(|v| v.to_str().ok()),
            Some("no-store")
        );
        let (status, e) = body(response).await;
        assert_eq!(
            (status, e["error"].as_str()),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Some("temporarily_unavailable")
            )
        );
        let (status, _) = body(
            token(
                State(cx),
                HeaderMap::new(),
                Ok(Form(token_request("refresh_token"))),
            )
            .await,
        )
        .await;
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "every endpoint alike"
        );
    }

    #[tokio::test]
    async fn registration_is_public_clients_with_allowed_redirects_only() {
        let cx = context(BROKERED);
        let refused = |redirect_uris: Vec<&str>, grant_types: Option<Vec<&str>>| {
            let cx = cx.clone();
            let asked = Registration {
                redirect_uris: redirect_uris.into_iter().map(String::from).collect(),
                client_name: None,
                grant_types: grant_types.map(|g| g.into_iter().map(String::from).collect()),
                token_endpoint_auth_method: None,
            };
            async move { body(register(State(cx), Ok(Json(asked))).await).await }
        };
        for (uris, grants) in [
            (vec![], None),
            // Plain http only to loopback (RFC 8252).
            (vec!["http://client.example/cb"], None),
            (vec!["https://client.example/cb#frag"], None),
            (
                vec!["http://127.0.0.1:9/cb"],
                Some(vec!["client_credentials"]),
            ),
        ] {
            let (status, e) = refused(uris.clone(), grants).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{uris:?}: {e}");
            assert!(
                e["error"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("invalid_")),
                "{e}"
            );
        }
        let (status, client) =
            refused(vec!["http://127.0.0.1:9/cb"], Some(vec!["refresh_token"])).await;
        assert_eq!(status, StatusCode::CREATED, "{client}");
        assert_eq!(client["token_endpoint_auth_method"], "none");
        assert!(
            client.get("client_secret").is_none(),
            "a public client holds no secret"
        );
    }

    /// Once the client and its redirect URI match, a bad request goes back to the client (with
    /// its state and the issuer, RFC 9207), each naming why; state too long stays here.
    #[tokio::test]
    async fn authorize_sends_later_refusals_back_to_the_clients_redirect() {
        let cx = context(BROKERED);
        let client_id = registered(&cx, "http://127.0.0.1:9/cb").await;
        let challenge = "a".repeat(43);
        let good = [
            ("client_id", client_id.as_str()),
            ("redirect_uri", "http://127.0.0.1:9/cb"),
            ("state", "st-1"),
            ("response_type", "code"),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ];
        let with = |change: &[(&'static str, &str)]| {
            let mut pairs: Vec<(&str, String)> =
                good.iter().map(|(k, v)| (*k, v.to_string())).collect();
            for (k, v) in change {
                pairs.retain(|(key, _)| key != k);
                if !v.is_empty() {
                    pairs.push((k, v.to_string()));
                }
            }
            let q: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            query(&q)
        };
        let short = "a".repeat(42);
        for (change, error) in [
            (
                vec![("response_type", "token")],
                "unsupported_response_type",
            ),
            (vec![("code_challenge", "")], "invalid_request"),
            (vec![("code_challenge", short.as_str())], "invalid_request"),
            (vec![("code_challenge_method", "plain")], "invalid_request"),
            (
                vec![("resource", "https://elsewhere.example/mcp")],
                "invalid_target",
            ),
            // A name that merely starts with the gateway's is not under it.
            (
                vec![("resource", "https://gw.example.evil/mcp")],
                "invalid_target",
            ),
            // All well asked, but the provider's discovery has not been read (no I/O here).
            (vec![], "temporarily_unavailable"),
        ] {
            let response = authorize(State(cx.clone()), HeaderMap::new(), with(&change)).await;
            let (to, q) = location(&response);
            assert_eq!(to, "http://127.0.0.1:9/cb", "{change:?}");
            assert_eq!(
                q.get("error").map(String::as_str),
                Some(error),
                "{change:?}: {q:?}"
            );
            assert_eq!(q.get("state").map(String::as_str), Some("st-1"));
            assert_eq!(q.get("iss").map(String::as_str), Some("https://gw.example"));
        }
        let long = "s".repeat(1025);
        let (status, e) = body(
            authorize(
                State(cx.clone()),
                HeaderMap::new(),
                with(&[("state", &long)]),
            )
            .await,
        )
        .await;
        assert_eq!(
            (status, e["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_request")),
            "not echoed to the client"
        );
    }

    fn token_request(grant_type: &str) -> TokenRequest {
        TokenRequest {
            grant_type: grant_type.into(),
            code: None,
            redirect_uri: None,
            client_id: None,
            code_verifier: None,
            refresh_token: None,
            client_secret: None,
            assertion: None,
            scope: None,
            resource: None,
        }
    }

    async fn token_answer(cx: &Arc<SignInContext>, request: TokenRequest) -> (StatusCode, Value) {
        body(token(State(cx.clone()), HeaderMap::new(), Ok(Form(request))).await).await
    }

    async fn register_as(
        cx: &Arc<SignInContext>,
        method: Option<&str>,
        grants: &[&str],
        redirects: &[&str],
    ) -> (StatusCode, Value) {
        let asked = Registration {
            redirect_uris: redirects.iter().map(|r| r.to_string()).collect(),
            client_name: Some("agent".into()),
            grant_types: Some(grants.iter().map(|g| g.to_string()).collect()),
            token_endpoint_auth_method: method.map(str::to_owned),
        };
        body(register(State(cx.clone()), Ok(Json(asked))).await).await
    }

    /// Enterprise-managed authorization's client side at the gateway: confidential clients
    /// register (their secret derived, never stored), authenticate by `client_secret_basic` or
    /// `client_secret_post`, and only they, registered for it, present identity assertions;
    /// without `identityAssertions` the grant is neither offered nor taken.
    #[tokio::test]
    async fn only_authenticated_confidential_clients_present_identity_assertions() {
        let without = context(BROKERED);
        let (_, meta) = body(metadata(State(without.clone()), HeaderMap::new()).await).await;
        assert_eq!(
            meta["grant_types_supported"],
            json!(["authorization_code", "refresh_token"])
        );
        assert!(meta.get("authorization_grant_profiles_supported").is_none());
        let (status, e) =
            register_as(&without, Some("client_secret_post"), &[JWT_BEARER], &[]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");
        let mut request = token_request(JWT_BEARER);
        request.assertion = Some("x.y.z".into());
        let (status, e) = token_answer(&without, request).await;
        assert_eq!(
            (status, e["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("unsupported_grant_type"))
        );

        let cx = context(&BROKERED.replace(
            "scopes: [openid, email]}",
            "scopes: [openid, email], identityAssertions: {}}",
        ));
        let (_, meta) = body(metadata(State(cx.clone()), HeaderMap::new()).await).await;
        assert_eq!(
            meta["grant_types_supported"],
            json!(["authorization_code", "refresh_token", JWT_BEARER])
        );
        assert_eq!(
            meta["authorization_grant_profiles_supported"],
            json!([ID_JAG_PROFILE])
        );
        assert_eq!(
            meta["token_endpoint_auth_methods_supported"],
            json!(["none", "client_secret_basic", "client_secret_post"])
        );
        // Registration: a public client cannot ask for the grant, nor anyone for another method.
        for (method, why) in [
            (None, "public"),
            (Some("private_key_jwt"), "a method not offered"),
        ] {
            let (status, e) = register_as(&cx, method, &[JWT_BEARER], &[]).await;
            assert_eq!(
                (status, e["error"].as_str()),
                (StatusCode::BAD_REQUEST, Some("invalid_client_metadata")),
                "{why}: {e}"
            );
        }
        let (status, agent) =
            register_as(&cx, Some("client_secret_basic"), &[JWT_BEARER], &[]).await;
        assert_eq!(status, StatusCode::CREATED, "{agent}");
        assert_eq!(agent["token_endpoint_auth_method"], "client_secret_basic");
        assert_eq!(agent["redirect_uris"], json!([]), "no browser, no redirect");
        let id = agent["client_id"].as_str().unwrap().to_string();
        let secret = agent["client_secret"].as_str().unwrap().to_string();
        assert_ne!(id, secret);

        let presented = |id: &str, secret: Option<&str>, basic: bool, assertion: Option<&str>| {
            let cx = cx.clone();
            let mut request = token_request(JWT_BEARER);
            request.assertion = assertion.map(str::to_owned);
            let mut headers = HeaderMap::new();
            if basic {
                let pair = format!("{id}:{}", secret.unwrap_or_default());
                let value = format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                );
                headers.insert(header::AUTHORIZATION, value.parse().unwrap());
            } else {
                request.client_id = Some(id.to_string());
                request.client_secret = secret.map(str::to_owned);
            }
            async move {
                let response = token(State(cx), headers, Ok(Form(request))).await;
                let challenge = response.headers().get(header::WWW_AUTHENTICATE).cloned();
                let (status, e) = body(response).await;
                (status, e["error"].as_str().map(str::to_owned), challenge)
            }
        };
        let invalid_client = Some("invalid_client".to_string());
        // A wrong secret, by Basic (challenged) and in the form.
        let (status, error, challenge) = presented(&id, Some("guess"), true, Some("x")).await;
        assert_eq!(
            (status, &error),
            (StatusCode::UNAUTHORIZED, &invalid_client)
        );
        assert_eq!(
            challenge.as_ref().and_then(|v| v.to_str().ok()),
            Some("Basic realm=\"switchboard\"")
        );
        let (status, error, challenge) = presented(&id, Some("guess"), false, Some("x")).await;
        assert_eq!(
            (status, &error, challenge),
            (StatusCode::UNAUTHORIZED, &invalid_client, None)
        );
        // No secret at all: a confidential client authenticates.
        let (status, error, _) = presented(&id, None, false, Some("x")).await;
        assert_eq!(
            (status, &error),
            (StatusCode::UNAUTHORIZED, &invalid_client)
        );
        // Authenticated, either way: then the assertion is what is judged.
        for basic in [true, false] {
            let (status, error, _) = presented(&id, Some(&secret), basic, None).await;
            assert_eq!(
                (status, error.as_deref()),
                (StatusCode::BAD_REQUEST, Some("invalid_request")),
                "no assertion"
            );
            let (status, error, _) = presented(&id, Some(&secret), basic, Some("x.y.z")).await;
            assert_eq!(
                (status, error.as_deref()),
                (StatusCode::BAD_REQUEST, Some("invalid_grant")),
                "not a JWT"
            );
        }
        // Another client's secret is not this one's.
        let (_, other) = register_as(
            &cx,
            Some("client_secret_post"),
            &["authorization_code"],
            &["http://127.0.0.1:9/cb"],
        )
        .await;
        let other_secret = other["client_secret"].as_str().unwrap();
        let (status, error, _) = presented(&id, Some(other_secret), false, Some("x")).await;
        assert_eq!(
            (status, &error),
            (StatusCode::UNAUTHORIZED, &invalid_client)
        );
        // A confidential client that did not register for the grant, and a public one.
        let other_id = other["client_id"].as_str().unwrap();
        let (status, error, _) = presented(other_id, Some(other_secret), false, Some("x")).await;
        assert_eq!(
            (status, error.as_deref()),
            (StatusCode::BAD_REQUEST, Some("unauthorized_client"))
        );
        let public = registered(&cx, "http://127.0.0.1:9/cb").await;
        let (status, error, _) = presented(&public, None, false, Some("x")).await;
        assert_eq!(
            (status, &error),
            (StatusCode::UNAUTHORIZED, &invalid_client)
        );
        let (status, error, _) = presented(&public, Some("anything"), false, Some("x")).await;
        assert_eq!(
            (status, &error),
            (StatusCode::UNAUTHORIZED, &invalid_client),
            "a public client has no secret"
        );
        // Another scheme says nothing of the client (left alone, not challenged); the Basic
        // scheme's name is case-insensitive.
        let with_header = |value: String, client_id: Option<String>| {
            let cx = cx.clone();
            let mut request = token_request(JWT_BEARER);
            request.assertion = Some("x.y.z".into());
            request.client_id = client_id;
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, value.parse().unwrap());
            async move {
                let response = token(State(cx), headers, Ok(Form(request))).await;
                let challenged = response.headers().contains_key(header::WWW_AUTHENTICATE);
                let (status, e) = body(response).await;
                (status, e, challenged)
            }
        };
        let (status, e, challenged) =
            with_header("Bearer sbt.anything".into(), Some(public.clone())).await;
        assert_eq!(
            (status, e["error"].as_str(), challenged),
            (StatusCode::UNAUTHORIZED, Some("invalid_client"), false)
        );
        assert!(
            e["error_description"]
                .as_str()
                .is_some_and(|d| d.contains("confidential clients")),
            "{e}"
        );
        let lower = format!(
            "basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}"))
        );
        let (status, e, _) = with_header(lower, None).await;
        assert_eq!(
            (status, e["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_grant")),
            "authenticated: {e}"
        );
        // Each answer counted by grant and outcome.
        let scraped = cx.metrics.encode();
        for (outcome, count) in [
            ("invalid_client", 7),
            ("invalid_grant", 3),
            ("invalid_request", 2),
            ("unauthorized_client", 1),
        ] {
            let line = format!(
                "switchboard_gateway_brokered_tokens_total{{grant=\"identity_assertion\",outcome=\"{outcome}\"}} {count}"
            );
            assert!(scraped.contains(&line), "{line} not in\n{scraped}");
        }
    }

    /// Each refusal of an assertion says its own cause: an issuer that is not the signer's is
    /// not "keys not fetched", nor a missing claim another.
    #[test]
    fn an_assertions_refusal_names_its_cause() {
        let said = |r| assertion_refused(r);
        assert!(said(AssertionRefusal::Token(Refusal::UnknownIssuer)).contains("issuer"));
        assert!(said(AssertionRefusal::Token(Refusal::KeysNotLoaded)).contains("keys"));
        assert!(said(AssertionRefusal::Missing("jti")).contains("no jti"));
        let all = [
            AssertionRefusal::NotAnAssertion,
            AssertionRefusal::TooLong,
            AssertionRefusal::Missing("client_id"),
            AssertionRefusal::Token(Refusal::Malformed),
            AssertionRefusal::Token(Refusal::UnknownIssuer),
            AssertionRefusal::Token(Refusal::KeysNotLoaded),
            AssertionRefusal::Token(Refusal::UnknownSigningKey),
            AssertionRefusal::Token(Refusal::AlgorithmNotAccepted),
            AssertionRefusal::Token(Refusal::BadSignature),
            AssertionRefusal::Token(Refusal::Expired),
            AssertionRefusal::Token(Refusal::NotYetValid),
            AssertionRefusal::Token(Refusal::WrongAudience),
            AssertionRefusal::Token(Refusal::MissingSubject),
        ];
        let distinct: std::collections::HashSet<String> = all.into_iter().map(said).collect();
        assert_eq!(distinct.len(), all.len(), "{distinct:?}");
    }

    fn alice() -> Identity {
        Identity {
            provider: "corp".into(),
            subject: "alice".into(),
            groups: vec!["eng".into()],
        }
    }

    #[tokio::test]
    async fn the_token_endpoint_refuses_other_grants_and_unknown_codes_and_tokens() {
        let cx = context(BROKERED);
        let (status, e) = token_answer(&cx, token_request("password")).await;
        assert_eq!(
            (status, e["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("unsupported_grant_type"))
        );
        let forged = TokenRequest {
            code: Some("forged".into()),
            refresh_token: Some("forged".into()),
            ..token_request("authorization_code")
        };
        let (status, e) = token_answer(&cx, forged).await;
        assert_eq!(
            (status, e["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_grant"))
        );
        let forged = TokenRequest {
            refresh_token: Some("forged".into()),
            ..token_request("refresh_token")
        };
        let (status, e) = token_answer(&cx, forged).await;
        assert_eq!(
            (status, e["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_grant"))
        );
    }

    /// A code is the client's, for its redirect URI, against its PKCE challenge: each refused
    /// in turn, naming which; then redeemed, the access token bound to the code's resource and
    /// never outliving the provider's token it carries.
    #[tokio::test]
    async fn a_code_is_redeemed_only_by_its_client_with_its_redirect_and_verifier() {
        let cx = context(BROKERED);
        let (table, now) = sealer(&cx);
        let sealer = table
            .broker
            .as_ref()
            .expect("a brokered table has a sealer");
        let verifier = new_verifier();
        let provider_exp = unix(now) + 120;
        let code = sealer.seal(
            Record::Code,
            &CodeRecord {
                client: digest("client-a"),
                redirect_uri: "http://127.0.0.1:9/cb".into(),
                code_challenge: s256(&verifier),
                resource: "https://gw.example/mcp".into(),
                scope: Some("mcp-tools".into()),
                identity: alice(),
                provider_token: ProviderTokens {
                    access: "provider-access".into(),
                    access_exp: provider_exp,
                    refresh: Some("provider-refresh".into()),
                },
                signed_in: unix_ms(now) - 1_000,
                exp: unix(now) + 60,
            },
            now,
        );
        let asked = |client: &str, redirect: &str, verifier: &str| TokenRequest {
            code: Some(code.clone()),
            client_id: Some(client.into()),
            redirect_uri: Some(redirect.into()),
            code_verifier: Some(verifier.into()),
            ..token_request("authorization_code")
        };
        let other = new_verifier();
        for (request, why) in [
            (
                asked("client-b", "http://127.0.0.1:9/cb", &verifier),
                "another client",
            ),
            (
                asked("client-a", "http://127.0.0.1:9/other", &verifier),
                "redirect_uri",
            ),
            (
                asked("client-a", "http://127.0.0.1:9/cb", &other),
                "code_verifier",
            ),
        ] {
            let (status, e) = token_answer(&cx, request).await;
            refused(status, &e, "invalid_grant", why);
        }
        let (status, grant) =
            token_answer(&cx, asked("client-a", "http://127.0.0.1:9/cb", &verifier)).await;
        assert_eq!(status, StatusCode::OK, "{grant}");
        assert_eq!(grant["token_type"], "Bearer");
        assert_eq!(grant["scope"], "mcp-tools");
        let expires_in = grant["expires_in"].as_u64().expect("expires_in");
        assert!(
            expires_in <= 120,
            "capped by the provider's token: {expires_in}"
        );
        let access: AccessRecord = sealer
            .open(Record::Access, grant["access_token"].as_str().unwrap(), now)
            .expect("an access token of this gateway's");
        assert_eq!(access.audience, "https://gw.example/mcp");
        assert_eq!(access.identity, alice());
        assert_eq!(access.provider_access, "provider-access");
        assert_eq!(access.signed_in, unix_ms(now) - 1_000, "dated by its login");
        assert!(
            grant["refresh_token"].is_string(),
            "the provider gave one to hold"
        );

        // Once: a second redemption is refused, and revokes the refresh token the first got.
        let (status, e) =
            token_answer(&cx, asked("client-a", "http://127.0.0.1:9/cb", &verifier)).await;
        refused(status, &e, "invalid_grant", "already redeemed");
        let first_refresh: RefreshRecord = sealer
            .open(
                Record::Refresh,
                grant["refresh_token"].as_str().unwrap(),
                now,
            )
            .expect("a refresh token of this gateway's");
        assert_eq!(first_refresh.grant, digest(&code), "named after its code");
        assert_eq!(first_refresh.signed_in, access.signed_in);
        let revoked = table
            .store
            .get(&revoked_grant_key(&first_refresh.grant))
            .await;
        assert!(matches!(revoked, Ok(Some(_))), "{revoked:?}");
    }

    #[tokio::test]
    async fn a_refresh_token_is_refused_to_another_client_or_provider_before_the_provider_is_asked()
    {
        let cx = context(BROKERED);
        let (table, now) = sealer(&cx);
        let sealer = table.broker.as_ref().expect("a sealer");
        // The brokered provider's id, as its people's identities carry it.
        let people = table.people.as_ref().expect("people sign in");
        let (provider, _, _) = people
            .providers()
            .find(|(_, spec, _)| spec.brokered.is_some())
            .expect("a brokered provider");
        let refresh = |provider: &str| {
            sealer.seal(
                Record::Refresh,
                &RefreshRecord {
                    client: digest("client-a"),
                    resource: "https://gw.example/mcp".into(),
                    scope: None,
                    provider: provider.into(),
                    provider_refresh: "provider-refresh".into(),
                    grant: "grant-1".into(),
                    signed_in: unix_ms(now),
                    exp: unix(now) + 600,
                },
                now,
            )
        };
        let asked = |token: String, client: &str| TokenRequest {
            refresh_token: Some(token),
            client_id: Some(client.into()),
            ..token_request("refresh_token")
        };
        let (status, e) = token_answer(&cx, asked(refresh(provider), "client-b")).await;
        refused(status, &e, "invalid_grant", "another client");
        let (status, e) = token_answer(&cx, asked(refresh("elsewhere"), "client-a")).await;
        refused(status, &e, "invalid_grant", "another identity provider's");
        // Its own: the provider must be asked, whose discovery was never read here: a passing
        // refusal, which spends nothing (the same token works again once the provider can be).
        let token = refresh(provider);
        for _ in 0..2 {
            let (status, e) = token_answer(&cx, asked(token.clone(), "client-a")).await;
            assert_eq!(
                (status, e["error"].as_str()),
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    Some("temporarily_unavailable")
                )
            );
        }
        // Spent once (as a refresh the provider answered spends it): presented again, refused,
        // and its grant with it (a token of the same login never used is refused too).
        let record: RefreshRecord = sealer
            .open(Record::Refresh, &token, now)
            .expect("a refresh token of this gateway's");
        spend_refresh(&table.store, &record, &token, now)
            .await
            .expect("spent once");
        let again = spend_refresh(&table.store, &record, &token, now).await;
        assert!(
            again
                .as_ref()
                .is_err_and(|e| e.description.contains("already used")),
            "{again:?}"
        );
        let (status, e) = token_answer(&cx, asked(token, "client-a")).await;
        refused(status, &e, "invalid_grant", "revoked");
        let (status, e) = token_answer(&cx, asked(refresh(provider), "client-a")).await;
        refused(status, &e, "invalid_grant", "revoked");
    }

    /// RFC 7009: the client a refresh token was issued to revokes its grant (every refresh
    /// token of that login); another client cannot; an unknown token is answered 200.
    #[tokio::test]
    async fn a_client_revokes_its_own_refresh_tokens_grant_only() {
        let cx = context(BROKERED);
        let (table, now) = sealer(&cx);
        let sealer = table.broker.as_ref().expect("a sealer");
        let people = table.people.as_ref().expect("people sign in");
        let (provider, _, _) = people
            .providers()
            .find(|(_, spec, _)| spec.brokered.is_some())
            .expect("a brokered provider");
        let token = sealer.seal(
            Record::Refresh,
            &RefreshRecord {
                client: digest("client-a"),
                resource: "https://gw.example/mcp".into(),
                scope: None,
                provider: provider.into(),
                provider_refresh: "provider-refresh".into(),
                grant: "grant-9".into(),
                signed_in: unix_ms(now),
                exp: unix(now) + 600,
            },
            now,
        );
        let revoked = || async {
            matches!(
                table.store.get(&revoked_grant_key("grant-9")).await,
                Ok(Some(_))
            )
        };
        let revoking = |client: &str, token: &str| {
            revoke(
                State(cx.clone()),
                HeaderMap::new(),
                Ok(Form(RevocationRequest {
                    token: token.into(),
                    client_id: Some(client.into()),
                    client_secret: None,
                })),
            )
        };
        let (status, e) = body(revoking("client-b", &token).await).await;
        refused(status, &e, "invalid_request", "another client");
        assert!(!revoked().await, "another client revoked nothing");
        let (status, _) = body(revoking("client-a", &token).await).await;
        assert_eq!(status, StatusCode::OK);
        assert!(revoked().await, "its grant is revoked in the shared store");
        let (status, e) = token_answer(
            &cx,
            TokenRequest {
                refresh_token: Some(token),
                client_id: Some("client-a".into()),
                ..token_request("refresh_token")
            },
        )
        .await;
        refused(status, &e, "invalid_grant", "revoked");
        let (status, _) = body(revoking("client-a", "sbr.unknown").await).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "RFC 7009: unknown tokens are answered 200"
        );
    }

    /// A login sealed as `authorize` seals it, started in the browser holding `nonce`.
    fn login(sealer: &BrokerSealer, nonce: &str, now: SystemTime) -> String {
        sealer.seal(
            Record::Login,
            &LoginRecord {
                browser: digest(nonce),
                client: digest("client-a"),
                redirect_uri: "http://127.0.0.1:9/cb".into(),
                state: Some("st-1".into()),
                code_challenge: "a".repeat(43),
                resource: "https://gw.example/mcp".into(),
                scope: None,
                verifier: new_verifier(),
                exp: unix(now) + 600,
            },
            now,
        )
    }

    fn browser(nonce: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("other=1; {BROWSER_COOKIE}={nonce}")).unwrap(),
        );
        headers
    }

    /// The consent answer counts only from the browser the page was shown in; a denial goes
    /// back to the client as `access_denied`.
    #[tokio::test]
    async fn consent_is_answered_only_from_the_browser_that_started_the_login() {
        let cx = context(BROKERED);
        let (table, now) = sealer(&cx);
        let sealer = table.broker.as_ref().expect("a sealer");
        let consent_of = sealer.seal(
            Record::Consent,
            &ConsentRecord {
                login: login(sealer, "nonce-1", now),
                exp: unix(now) + 600,
            },
            now,
        );
        let answer = |headers: HeaderMap, consent: &str, answer: &str| {
            let form = Form(ConsentAnswer {
                consent: consent.into(),
                answer: answer.into(),
            });
            consent_handler(cx.clone(), headers, form)
        };
        for (headers, sealed) in [
            (browser("nonce-1"), "forged"),
            (HeaderMap::new(), consent_of.as_str()),
            (browser("nonce-2"), consent_of.as_str()),
        ] {
            let (status, e) = body(answer(headers, sealed, "approve").await).await;
            assert_eq!(
                (status, e["error"].as_str()),
                (StatusCode::BAD_REQUEST, Some("invalid_request"))
            );
        }
        let denied = answer(browser("nonce-1"), &consent_of, "deny").await;
        let (to, q) = location(&denied);
        assert_eq!(to, "http://127.0.0.1:9/cb");
        assert_eq!(q.get("error").map(String::as_str), Some("access_denied"));
        assert_eq!(q.get("state").map(String::as_str), Some("st-1"));
        // Approved, but the provider's endpoints are not known yet: said, not redirected.
        let (status, _) = body(answer(browser("nonce-1"), &consent_of, "approve").await).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    }

    async fn consent_handler(
        cx: Arc<SignInContext>,
        headers: HeaderMap,
        form: Form<ConsentAnswer>,
    ) -> Response {
        consent(State(cx), headers, Ok(form)).await
    }

    /// The provider's answer comes back to the browser that started the login, or not at all;
    /// the provider's refusal, or no code, is the client's `access_denied`.
    #[tokio::test]
    async fn the_callback_checks_the_login_and_the_browser_before_the_code() {
        let cx = context(BROKERED);
        let (table, now) = sealer(&cx);
        let sealer = table.broker.as_ref().expect("a sealer");
        let state = login(sealer, "nonce-1", now);
        let back = |headers: HeaderMap, pairs: &[(&str, &str)]| {
            callback(State(cx.clone()), headers, query(pairs))
        };
        let (status, _) =
            body(back(browser("nonce-1"), &[("state", "forged"), ("code", "c")]).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let (status, e) =
            body(back(HeaderMap::new(), &[("state", &state), ("code", "c")]).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");
        for pairs in [
            vec![("state", state.as_str()), ("error", "access_denied")],
            // Without the provider's endpoints there is nowhere to redeem a code.
            vec![("state", state.as_str()), ("code", "c")],
        ] {
            let (to, q) = location(&back(browser("nonce-1"), &pairs).await);
            assert_eq!(to, "http://127.0.0.1:9/cb");
            assert_eq!(
                q.get("error").map(String::as_str),
                Some("access_denied"),
                "{pairs:?}"
            );
            assert_eq!(q.get("state").map(String::as_str), Some("st-1"));
            assert!(!q.contains_key("code"));
        }
    }
}
