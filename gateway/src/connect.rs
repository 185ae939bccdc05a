//! The pages where a caller connects (and disconnects) their own account at a `userOAuth`
//! server (issue 37; `switchboard_core::accounts` says what is sealed and why):
//!
//! - `GET /connect?ticket=` — the URL a call's elicitation carries. The browser proves it is the
//!   ticket's caller first (a person signs in at their identity provider, a key's holder types
//!   the key), then is asked plainly whether to connect, then goes to the upstream's server.
//! - `GET /connect/signed-in` — the identity provider's redirect back.
//! - `POST /connect/key` — a key's holder proves it.
//! - `POST /connect/approve` — the answer; on to the upstream's authorization endpoint.
//! - `GET /connect/callback` — the upstream's redirect back: the code is redeemed and the
//!   account kept in the shared store (any replica answers each step).
//! - `GET /connections`, `POST /connections/disconnect` — what a caller has connected (no token
//!   shown), and ending one (revoked at the upstream where it can be). A browser that has not
//!   shown who it is is sent to sign in at the brokered identity provider first.
//! - `POST /connections/sign-out` — a person ends every gateway token of their logins
//!   (`switchboard_core::sign_out`).
//!
//! Every step after the first is bound to the browser by a cookie nonce; the caller the browser
//! proved is a sealed cookie of its own ([`BROWSER_CALLER`]) for a while.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use switchboard_core::accounts::{
    BROWSER_TTL, BrowserCaller, ConnectConsent, ConnectState, ConnectTicket, STEP_TTL, SignInState,
    Who,
};
use switchboard_core::broker::{BrokerSealer, Record, digest, new_verifier, s256, unix, unix_ms};
use switchboard_core::table::{RoutingTable, Server, base_url};
use switchboard_snapshot::key_hash;

use crate::oauth::{ConsentAnswer, cookie, escape, no_store, redirect, with_query};
use crate::sign_in::SignInContext;

/// The browser's nonce: every step after the first must come from the browser that began it.
const BROWSER_NONCE: &str = "switchboard_connect";
/// The caller a browser proved it is (sealed).
const BROWSER_CALLER: &str = "switchboard_caller";

/// One page: a title, paragraphs (already escaped) and an optional form. Not to be framed;
/// never cached; no script.
fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title></head>\
         <body><h1>{title}</h1>{body}</body></html>",
        title = escape(title),
    );
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html,
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; form-action 'self' https: http:; frame-ancestors 'none'",
        ),
    );
    no_store(&mut response);
    response
}

fn problem(status: StatusCode, title: &str, text: &str) -> Response {
    page(status, title, &format!("<p>{}</p>", escape(text)))
}

fn set_cookie(response: &mut Response, base: &str, name: &str, value: &str, max_age: u64) {
    let secure = if base.starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    if let Ok(cookie) = HeaderValue::from_str(&format!(
        "{name}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}"
    )) {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
}

/// The browser's nonce, and whether it is new (to be set on the answer).
fn browser_nonce(headers: &HeaderMap) -> (String, bool) {
    match cookie(headers, BROWSER_NONCE) {
        Some(nonce) if nonce.len() >= 32 => (nonce.to_string(), false),
        _ => (new_verifier(), true),
    }
}

fn from_this_browser(headers: &HeaderMap, bound: &str) -> bool {
    cookie(headers, BROWSER_NONCE).is_some_and(|nonce| digest(nonce) == bound)
}

/// The caller this browser proved it is, if it did.
fn browser_caller(
    headers: &HeaderMap,
    sealer: &BrokerSealer,
    now: SystemTime,
) -> Option<BrowserCaller> {
    sealer.open(Record::BrowserCaller, cookie(headers, BROWSER_CALLER)?, now)
}

/// The table's account sealer and a `userOAuth` server by id, or the page saying why not.
fn account_server<'t>(
    table: &'t RoutingTable,
    id: &str,
) -> Result<(&'t BrokerSealer, &'t Arc<Server>), Box<Response>> {
    let sealer = table.account_sealer.as_ref().ok_or_else(|| {
        Box::new(problem(
            StatusCode::NOT_FOUND,
            "Nothing to connect",
            "No server of this gateway takes people's own accounts.",
        ))
    })?;
    let server = table
        .server_by_id(id)
        .filter(|s| s.spec.auth.is_user_account())
        .ok_or_else(|| {
            Box::new(problem(
                StatusCode::NOT_FOUND,
                "Nothing to connect",
                "The server this link names is no longer on this gateway.",
            ))
        })?;
    Ok((sealer, server))
}

/// The sealed step of `kind` a redirect back carries (its `state`), if it came back to the
/// browser it is bound to (`browser_of`); else the page saying why (`not_here` names the step).
fn returned_step<T: serde::de::DeserializeOwned + switchboard_core::broker::Expiring>(
    sealer: &BrokerSealer,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
    kind: Record,
    browser_of: impl Fn(&T) -> &str,
    not_here: &str,
) -> Result<T, Box<Response>> {
    let step = q
        .get("state")
        .and_then(|s| sealer.open::<T>(kind, s, SystemTime::now()))
        .ok_or_else(|| Box::new(expired_link()))?;
    if !from_this_browser(headers, browser_of(&step)) {
        return Err(Box::new(problem(
            StatusCode::BAD_REQUEST,
            "Not this browser",
            &format!(
                "{not_here} did not come back to the browser that started it. Nothing was connected."
            ),
        )));
    }
    Ok(step)
}

/// The browser proved it is `ticket`'s caller (signed in as that person, or typed that key): it
/// keeps a sealed cookie saying so, and goes back to the connect page, which now asks.
fn proven(
    sealer: &BrokerSealer,
    base: &str,
    ticket_text: &str,
    ticket: &ConnectTicket,
    now: SystemTime,
) -> Response {
    let back = with_query(&format!("{base}/connect"), &[("ticket", ticket_text)]);
    known_as(
        sealer,
        base,
        ticket.tag.clone(),
        ticket.who.clone(),
        &back,
        now,
    )
}

/// The browser is known as caller `who` (its tag, hex) from now on (the sealed cookie), and
/// goes on to `to` (a page of this gateway's, under `base`).
fn known_as(
    sealer: &BrokerSealer,
    base: &str,
    tag: String,
    who: Who,
    to: &str,
    now: SystemTime,
) -> Response {
    let known = BrowserCaller {
        tag,
        who,
        exp: unix(now) + BROWSER_TTL.as_secs(),
    };
    let mut response = redirect(to);
    set_cookie(
        &mut response,
        base,
        BROWSER_CALLER,
        &sealer.seal(Record::BrowserCaller, &known, now),
        BROWSER_TTL.as_secs(),
    );
    response
}

fn tag_of(hex_tag: &str) -> Option<[u8; 32]> {
    hex::decode(hex_tag).ok()?.try_into().ok()
}

fn expired_link() -> Response {
    problem(
        StatusCode::BAD_REQUEST,
        "This link has expired",
        "Connect links work for 15 minutes, for the one who asked. Use the tool again for a new one.",
    )
}

/// `GET /connect?ticket=`.
pub(crate) async fn start(
    State(cx): State<Arc<SignInContext>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let table = cx.table();
    let now = SystemTime::now();
    let Some(ticket_text) = q.get("ticket") else {
        return expired_link();
    };
    let Some(sealer) = table.account_sealer.as_ref() else {
        return expired_link();
    };
    let Some(ticket) = sealer.open::<ConnectTicket>(Record::ConnectTicket, ticket_text, now) else {
        return expired_link();
    };
    let (sealer, server) = match account_server(&table, &ticket.server) {
        Ok(found) => found,
        Err(page) => return *page,
    };
    let base = base_url(&table.settings, &headers);
    let (nonce, new_nonce) = browser_nonce(&headers);
    let mut response = match browser_caller(&headers, sealer, now) {
        Some(known) if known.tag == ticket.tag => {
            consent_page(&base, sealer, server, ticket_text, &ticket, &nonce, now)
        }
        _ => prove(&table, &base, sealer, ticket_text, &ticket, &nonce, now),
    };
    if new_nonce {
        set_cookie(
            &mut response,
            &base,
            BROWSER_NONCE,
            &nonce,
            STEP_TTL.as_secs(),
        );
    }
    response
}

/// The browser proves it is the ticket's caller: a person signs in at their provider, a key's
/// holder types the key.
fn prove(
    table: &RoutingTable,
    base: &str,
    sealer: &BrokerSealer,
    ticket_text: &str,
    ticket: &ConnectTicket,
    nonce: &str,
    now: SystemTime,
) -> Response {
    match &ticket.who {
        Who::Key { key } => {
            // Bound to this browser like every later step: a page elsewhere cannot post a key
            // of its own here and walk this browser into connecting an account to it.
            let proof = ConnectConsent {
                ticket: ticket_text.to_string(),
                browser: digest(nonce),
                exp: unix(now) + STEP_TTL.as_secs(),
            };
            page(
                StatusCode::OK,
                "Connect an account",
                &format!(
                    "<p>This link is for the holder of gateway key <strong>{key}</strong>. Type \
                     the key to go on.</p><form method=\"post\" action=\"{base}/connect/key\">\
                     <input type=\"hidden\" name=\"proof\" value=\"{proof}\">\
                     <input type=\"password\" name=\"key\" autocomplete=\"off\"> \
                     <button type=\"submit\">Continue</button></form>",
                    key = escape(key),
                    base = escape(base),
                    proof = escape(&sealer.seal(Record::ConnectConsent, &proof, now)),
                ),
            )
        }
        Who::Person { provider, .. } => {
            to_identity_provider(table, base, sealer, provider, ticket_text, nonce, now)
        }
    }
}

/// Sends the browser to sign in at identity provider `provider` (brokered: the gateway's
/// client there), coming back to `/connect/signed-in` with `ticket_text` (empty: back to
/// `/connections`, for whoever signs in).
fn to_identity_provider(
    table: &RoutingTable,
    base: &str,
    sealer: &BrokerSealer,
    provider: &str,
    ticket_text: &str,
    nonce: &str,
    now: SystemTime,
) -> Response {
    let Some(brokered) = table.people.as_ref().and_then(|people| {
        people
            .providers()
            .find(|(id, _, _)| *id == provider)
            .and_then(|(_, spec, _)| spec.brokered.as_ref())
    }) else {
        return problem(
            StatusCode::NOT_FOUND,
            "Cannot connect here",
            "Connecting an account asks you to sign in in this browser, which needs the \
             identity provider's client at the gateway (identityProviders[].brokered).",
        );
    };
    let Some(endpoints) = table.identity_keys.login(provider) else {
        return problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "Try again shortly",
            "The identity provider's discovery document could not be read yet.",
        );
    };
    let verifier = new_verifier();
    let state = SignInState {
        ticket: ticket_text.to_string(),
        verifier: verifier.clone(),
        browser: digest(nonce),
        exp: unix(now) + STEP_TTL.as_secs(),
    };
    let sealed = sealer.seal(Record::ConnectSignIn, &state, now);
    let to = with_query(
        &endpoints.authorization,
        &[
            ("response_type", "code"),
            ("client_id", &brokered.client_id),
            ("redirect_uri", &format!("{base}/connect/signed-in")),
            ("scope", &brokered.scopes.join(" ")),
            ("state", &sealed),
            ("code_challenge", &s256(&verifier)),
            ("code_challenge_method", "S256"),
        ],
    );
    redirect(&to)
}

/// The question: connect this account, for this caller, at this server.
fn consent_page(
    base: &str,
    sealer: &BrokerSealer,
    server: &Server,
    ticket_text: &str,
    ticket: &ConnectTicket,
    nonce: &str,
    now: SystemTime,
) -> Response {
    let consent = ConnectConsent {
        ticket: ticket_text.to_string(),
        browser: digest(nonce),
        exp: unix(now) + STEP_TTL.as_secs(),
    };
    let sealed = sealer.seal(Record::ConnectConsent, &consent, now);
    page(
        StatusCode::OK,
        "Connect an account",
        &format!(
            "<p>You are <strong>{who}</strong>. Connecting gives the gateway at {base} a token \
             of your own account at <strong>{server}</strong> ({url}): the tools of that server \
             then act as you there. The gateway keeps the token, never shows it, and you can \
             disconnect at any time at <a href=\"{base}/connections\">{base}/connections</a>.</p>\
             <p>Next, <strong>{server}</strong>'s sign-in page opens; afterwards, return to your \
             MCP client and try again.</p>\
             <form method=\"post\" action=\"{base}/connect/approve\">\
             <input type=\"hidden\" name=\"consent\" value=\"{consent}\">\
             <button type=\"submit\" name=\"answer\" value=\"approve\">Connect</button> \
             <button type=\"submit\" name=\"answer\" value=\"deny\">Cancel</button></form>",
            who = escape(&ticket.who.to_string()),
            base = escape(base),
            server = escape(server.prefix()),
            url = escape(server.url.as_str()),
            consent = escape(&sealed),
        ),
    )
}

/// `GET /connect/signed-in`: the identity provider's answer. The person it signed in must be
/// the ticket's.
pub(crate) async fn signed_in(
    State(cx): State<Arc<SignInContext>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let table = cx.table();
    let now = SystemTime::now();
    let Some(sealer) = table.account_sealer.as_ref() else {
        return expired_link();
    };
    let state: SignInState = match returned_step(
        sealer,
        &headers,
        &q,
        Record::ConnectSignIn,
        |s: &SignInState| &s.browser,
        "The sign-in",
    ) {
        Ok(state) => state,
        Err(page) => return *page,
    };
    let Some(people) = table.people.as_ref() else {
        return expired_link();
    };
    // A ticket's caller must be who signs in; without a ticket (the connections page), whoever
    // signs in at the brokered provider is who the browser shows.
    let ticket = if state.ticket.is_empty() {
        None
    } else {
        match sealer.open::<ConnectTicket>(Record::ConnectTicket, &state.ticket, now) {
            Some(ticket) => Some(ticket),
            None => return expired_link(),
        }
    };
    let provider = match &ticket {
        Some(ConnectTicket {
            who: Who::Person { provider, .. },
            ..
        }) => provider.clone(),
        Some(_) => return expired_link(),
        None => match people.brokered_id() {
            Some(id) => id.to_string(),
            None => return expired_link(),
        },
    };
    let provider = provider.as_str();
    let Some((spec, tls)) = people
        .providers()
        .find(|(id, _, _)| *id == provider)
        .map(|(_, spec, tls)| (spec, tls))
    else {
        return expired_link();
    };
    let (Some(code), Some(endpoints)) = (q.get("code"), table.identity_keys.login(provider)) else {
        return problem(
            StatusCode::FORBIDDEN,
            "Not signed in",
            "The identity provider did not sign you in; nothing was connected.",
        );
    };
    let base = base_url(&table.settings, &headers);
    let redeemed = cx
        .upstream
        .redeem_login_code(
            spec,
            tls.map(|t| t.as_ref()),
            &endpoints.token,
            code,
            &format!("{base}/connect/signed-in"),
            &state.verifier,
        )
        .await;
    let grant = match redeemed {
        Ok(grant) => grant,
        Err(detail) => {
            tracing::warn!(provider, %detail, "connect: the sign-in's code was not redeemed");
            return problem(
                StatusCode::BAD_GATEWAY,
                "Not signed in",
                "The identity provider did not accept the sign-in; nothing was connected.",
            );
        }
    };
    let person = match people
        .identify(&table.identity_keys, provider, &grant.access_token)
        .await
    {
        Ok((person, _)) => person,
        Err(refusal) => {
            tracing::info!(
                provider,
                reason = refusal.reason(),
                "connect: the sign-in's token was refused"
            );
            return problem(
                StatusCode::FORBIDDEN,
                "Not signed in",
                "The identity provider's token was not one this gateway takes; nothing was connected.",
            );
        }
    };
    let Some(ticket) = ticket else {
        let who = Who::Person {
            provider: provider.to_string(),
            subject: person.subject.clone(),
        };
        let to = format!("{base}/connections");
        return known_as(sealer, &base, hex::encode(person.tag), who, &to, now);
    };
    if hex::encode(person.tag) != ticket.tag {
        tracing::info!(
            provider,
            "connect: the browser signed in as someone else than the link's caller"
        );
        return problem(
            StatusCode::FORBIDDEN,
            "This link is someone else's",
            &format!(
                "You signed in as {}, but this link was made for {}. Nothing was connected.",
                person.subject, ticket.who
            ),
        );
    }
    proven(sealer, &base, &state.ticket, &ticket, now)
}

#[derive(Deserialize)]
pub(crate) struct KeyProof {
    proof: String,
    key: String,
}

/// `POST /connect/key`: a key's holder proves it by typing the key.
pub(crate) async fn key_proof(
    State(cx): State<Arc<SignInContext>>,
    headers: HeaderMap,
    form: Result<Form<KeyProof>, axum::extract::rejection::FormRejection>,
) -> Response {
    let table = cx.table();
    let now = SystemTime::now();
    let (Ok(Form(proof)), Some(sealer)) = (form, table.account_sealer.as_ref()) else {
        return expired_link();
    };
    let Some(bound) = sealer.open::<ConnectConsent>(Record::ConnectConsent, &proof.proof, now)
    else {
        return expired_link();
    };
    if !from_this_browser(&headers, &bound.browser) {
        return problem(
            StatusCode::BAD_REQUEST,
            "Not this browser",
            "This answer did not come from the browser the page was shown in.",
        );
    }
    let Some(ticket) = sealer.open::<ConnectTicket>(Record::ConnectTicket, &bound.ticket, now)
    else {
        return expired_link();
    };
    let typed = key_hash::key_digest(proof.key.trim());
    let matches = tag_of(&ticket.tag)
        .is_some_and(|tag| bool::from(subtle::ConstantTimeEq::ct_eq(&tag[..], &typed[..])));
    if !matches || !matches!(ticket.who, Who::Key { .. }) {
        return problem(
            StatusCode::FORBIDDEN,
            "Not this key",
            "That is not the key this link was made for. Nothing was connected.",
        );
    }
    let base = base_url(&table.settings, &headers);
    proven(sealer, &base, &bound.ticket, &ticket, now)
}

/// `POST /connect/approve`: the answer. Approved, the browser goes to the upstream's
/// authorization endpoint.
pub(crate) async fn approve(
    State(cx): State<Arc<SignInContext>>,
    headers: HeaderMap,
    form: Result<Form<ConsentAnswer>, axum::extract::rejection::FormRejection>,
) -> Response {
    let table = cx.table();
    let now = SystemTime::now();
    let (Ok(Form(answer)), Some(sealer)) = (form, table.account_sealer.as_ref()) else {
        return expired_link();
    };
    let Some(consent) = sealer.open::<ConnectConsent>(Record::ConnectConsent, &answer.consent, now)
    else {
        return expired_link();
    };
    let ticket = sealer.open::<ConnectTicket>(Record::ConnectTicket, &consent.ticket, now);
    let known = browser_caller(&headers, sealer, now);
    let (Some(ticket), Some(known)) = (ticket, known) else {
        return expired_link();
    };
    if !from_this_browser(&headers, &consent.browser) || known.tag != ticket.tag {
        return problem(
            StatusCode::BAD_REQUEST,
            "Not this browser",
            "This answer did not come from the browser the question was asked in.",
        );
    }
    if answer.answer != "approve" {
        return problem(
            StatusCode::OK,
            "Nothing was connected",
            "You can close this page.",
        );
    }
    let server = match account_server(&table, &ticket.server) {
        Ok((_, server)) => server,
        Err(page) => return *page,
    };
    let base = base_url(&table.settings, &headers);
    let verifier = new_verifier();
    let state = ConnectState {
        tag: ticket.tag.clone(),
        server: ticket.server.clone(),
        verifier: verifier.clone(),
        browser: consent.browser.clone(),
        exp: unix(now) + STEP_TTL.as_secs(),
    };
    let sealed = sealer.seal(Record::ConnectState, &state, now);
    match cx
        .upstream
        .account_authorization_url(
            server,
            &format!("{base}/connect/callback"),
            &sealed,
            &s256(&verifier),
        )
        .await
    {
        Ok(to) => redirect(&to),
        Err(e) => {
            tracing::warn!(server = server.id(), error = %e, "connect: the upstream's authorization server could not be reached");
            problem(
                StatusCode::BAD_GATEWAY,
                "Cannot connect now",
                &format!(
                    "{}'s authorization server could not be reached. Try again shortly.",
                    server.prefix()
                ),
            )
        }
    }
}

/// `GET /connect/callback`: the upstream's server's answer. The code is redeemed and the
/// account kept.
pub(crate) async fn callback(
    State(cx): State<Arc<SignInContext>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let table = cx.table();
    let Some(sealer) = table.account_sealer.as_ref() else {
        return expired_link();
    };
    let state: ConnectState = match returned_step(
        sealer,
        &headers,
        &q,
        Record::ConnectState,
        |s: &ConnectState| &s.browser,
        "The authorization",
    ) {
        Ok(state) => state,
        Err(page) => return *page,
    };
    let server = match account_server(&table, &state.server) {
        Ok((_, server)) => server,
        Err(page) => return *page,
    };
    let (Some(code), Some(tag)) = (q.get("code"), tag_of(&state.tag)) else {
        return problem(
            StatusCode::OK,
            "Nothing was connected",
            &format!(
                "{} did not authorize the gateway. You can close this page.",
                server.prefix()
            ),
        );
    };
    let base = base_url(&table.settings, &headers);
    let connected = cx
        .upstream
        .connect_account(
            &table.store,
            &tag,
            server,
            code,
            &format!("{base}/connect/callback"),
            &state.verifier,
        )
        .await;
    match connected {
        Ok(()) => {
            tracing::info!(
                server = server.id(),
                "a person's upstream account was connected"
            );
            page(
                StatusCode::OK,
                "Connected",
                &format!(
                    "<p>Your account at <strong>{server}</strong> is connected. Return to your MCP \
                     client and try again; you can close this page.</p>\
                     <p>Your connections: <a href=\"{base}/connections\">{base}/connections</a>.</p>",
                    server = escape(server.prefix()),
                    base = escape(&base),
                ),
            )
        }
        Err(switchboard_upstream::error::UpstreamError::StoreUnavailable { .. }) => problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "Cannot connect now",
            "The gateway's state store does not answer; nothing was connected. Try again shortly.",
        ),
        Err(e) => {
            tracing::warn!(server = server.id(), error = %e, "connect: the code was not redeemed");
            problem(
                StatusCode::BAD_GATEWAY,
                "Not connected",
                &format!(
                    "{} did not give the gateway a token. Nothing was connected.",
                    server.prefix()
                ),
            )
        }
    }
}

/// `GET /connections`: the servers this browser's caller has connected, each with a
/// disconnect button. A browser that proved no caller yet is asked to open a connect link
/// first (a call names who it is; a bare page does not).
pub(crate) async fn connections(
    State(cx): State<Arc<SignInContext>>,
    headers: HeaderMap,
) -> Response {
    let table = cx.table();
    let now = SystemTime::now();
    let base = base_url(&table.settings, &headers);
    let Some(sealer) = table.account_sealer.as_ref() else {
        return problem(
            StatusCode::NOT_FOUND,
            "Your connections",
            "No server of this gateway takes people's own accounts, and nobody signs in through it.",
        );
    };
    let Some(known) = browser_caller(&headers, sealer, now) else {
        // A person signs in at the brokered provider to see who they are; a key's holder
        // shows the key through a connect link (a bare page does not ask for a key).
        let brokered = table
            .people
            .as_ref()
            .and_then(|people| people.brokered_id());
        let Some(provider) = brokered else {
            return problem(
                StatusCode::OK,
                "Your connections",
                "This browser has not shown who you are yet: open a connect link (a tool of a \
                 server that needs your account gives one), then come back here.",
            );
        };
        let (nonce, new_nonce) = browser_nonce(&headers);
        let mut response = to_identity_provider(&table, &base, sealer, provider, "", &nonce, now);
        if new_nonce {
            set_cookie(
                &mut response,
                &base,
                BROWSER_NONCE,
                &nonce,
                STEP_TTL.as_secs(),
            );
        }
        return response;
    };
    let Some(tag) = tag_of(&known.tag) else {
        return expired_link();
    };
    let (nonce, new_nonce) = browser_nonce(&headers);
    let mut rows = String::new();
    for server in table
        .servers
        .iter()
        .filter(|s| s.spec.auth.is_user_account())
    {
        let connected = match cx
            .upstream
            .account_connected_at(&table.store, &tag, server)
            .await
        {
            Ok(connected) => connected,
            Err(_) => {
                return problem(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Your connections",
                    "The gateway's state store does not answer. Try again shortly.",
                );
            }
        };
        let Some(at) = connected else {
            continue;
        };
        let check = ConnectConsent {
            ticket: format!("disconnect:{}", server.id()),
            browser: digest(&nonce),
            exp: unix(now) + STEP_TTL.as_secs(),
        };
        rows.push_str(&format!(
            "<li><strong>{name}</strong> ({url}), connected {when} \
             <form method=\"post\" action=\"{base}/connections/disconnect\" style=\"display:inline\">\
             <input type=\"hidden\" name=\"check\" value=\"{check}\">\
             <button type=\"submit\">Disconnect</button></form></li>",
            name = escape(server.prefix()),
            url = escape(server.url.as_str()),
            when = escape(&humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(at)
            ).to_string()),
            base = escape(&base),
            check = escape(&sealer.seal(Record::ConnectConsent, &check, now)),
        ));
    }
    let mut body = if rows.is_empty() {
        format!(
            "<p>{} has no account connected.</p>",
            escape(&known.who.to_string())
        )
    } else {
        format!(
            "<p>Accounts {} connected (their tokens are never shown):</p><ul>{rows}</ul>",
            escape(&known.who.to_string())
        )
    };
    if matches!(known.who, Who::Person { .. }) {
        let check = ConnectConsent {
            ticket: SIGN_OUT.to_string(),
            browser: digest(&nonce),
            exp: unix(now) + STEP_TTL.as_secs(),
        };
        body.push_str(&format!(
            "<p>Signing out ends every token this gateway gave your MCP clients (they ask you \
             to sign in again); your connected accounts stay connected.</p>\
             <form method=\"post\" action=\"{base}/connections/sign-out\">\
             <input type=\"hidden\" name=\"check\" value=\"{check}\">\
             <button type=\"submit\">Sign out everywhere</button></form>",
            base = escape(&base),
            check = escape(&sealer.seal(Record::ConnectConsent, &check, now)),
        ));
    }
    let mut response = page(StatusCode::OK, "Your connections", &body);
    if new_nonce {
        set_cookie(
            &mut response,
            &base,
            BROWSER_NONCE,
            &nonce,
            STEP_TTL.as_secs(),
        );
    }
    response
}

/// The check of the sign-out form (a `ConnectConsent` whose ticket is this).
const SIGN_OUT: &str = "sign-out";

/// `POST /connections/sign-out`: the person this browser shows ends every gateway token of
/// their logins before now, on every replica (`switchboard_core::sign_out`), and this browser
/// forgets who it showed.
pub(crate) async fn sign_out(
    State(cx): State<Arc<SignInContext>>,
    headers: HeaderMap,
    form: Result<Form<CheckedForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let table = cx.table();
    let now = SystemTime::now();
    let (Ok(Form(answer)), Some(sealer), Some(people)) =
        (form, table.account_sealer.as_ref(), table.people.as_ref())
    else {
        return expired_link();
    };
    let check = sealer.open::<ConnectConsent>(Record::ConnectConsent, &answer.check, now);
    let (Some(check), Some(known)) = (check, browser_caller(&headers, sealer, now)) else {
        return expired_link();
    };
    let Who::Person { provider, subject } = &known.who else {
        return expired_link();
    };
    if check.ticket != SIGN_OUT || !from_this_browser(&headers, &check.browser) {
        return problem(
            StatusCode::BAD_REQUEST,
            "Not this browser",
            "This answer did not come from the browser the page was shown in.",
        );
    }
    // No token of an earlier login outlives its refresh token's lifetime.
    let Some(lasts) = people
        .providers()
        .find(|(id, _, _)| id == provider)
        .and_then(|(_, spec, _)| spec.brokered.as_ref())
        .map(|b| b.refresh_token_ttl + b.access_token_ttl)
    else {
        return expired_link();
    };
    let ended = table
        .sign_outs
        .sign_out(&table.store, provider, subject, unix_ms(now), lasts)
        .await;
    if let Err(e) = ended {
        tracing::warn!(error = %e, "a sign-out could not be recorded: the state store does not answer");
        return problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "Not signed out",
            "The gateway's state store does not answer; nothing was ended. Try again shortly.",
        );
    }
    tracing::info!(
        provider = provider.as_str(),
        "a person signed out everywhere"
    );
    let base = base_url(&table.settings, &headers);
    let mut response = page(
        StatusCode::OK,
        "Signed out",
        &format!(
            "<p>Every token this gateway gave your MCP clients has ended (within {} seconds on \
             every replica); they will ask you to sign in again. Your connected accounts stay \
             connected: <a href=\"{base}/connections\">your connections</a>.</p>",
            switchboard_core::sign_out::SEEN_WITHIN.as_secs(),
            base = escape(&base),
        ),
    );
    set_cookie(&mut response, &base, BROWSER_CALLER, "", 0);
    response
}

/// A form whose one field is its sealed check (a `ConnectConsent` bound to the browser the
/// page was shown in): Disconnect and Sign out.
#[derive(Deserialize)]
pub(crate) struct CheckedForm {
    check: String,
}

/// `POST /connections/disconnect`: ends one account (revoked at the upstream where it can be).
pub(crate) async fn disconnect(
    State(cx): State<Arc<SignInContext>>,
    headers: HeaderMap,
    form: Result<Form<CheckedForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let table = cx.table();
    let now = SystemTime::now();
    let (Ok(Form(answer)), Some(sealer)) = (form, table.account_sealer.as_ref()) else {
        return expired_link();
    };
    let check = sealer.open::<ConnectConsent>(Record::ConnectConsent, &answer.check, now);
    let known = browser_caller(&headers, sealer, now);
    let (Some(check), Some(known)) = (check, known) else {
        return expired_link();
    };
    let Some(server_id) = check.ticket.strip_prefix("disconnect:") else {
        return expired_link();
    };
    if !from_this_browser(&headers, &check.browser) {
        return problem(
            StatusCode::BAD_REQUEST,
            "Not this browser",
            "This answer did not come from the browser the page was shown in.",
        );
    }
    let (server, tag) = match (account_server(&table, server_id), tag_of(&known.tag)) {
        (Ok((_, server)), Some(tag)) => (server, tag),
        (Err(page), _) => return *page,
        (_, None) => return expired_link(),
    };
    match cx
        .upstream
        .disconnect_account(&table.store, &tag, server)
        .await
    {
        Ok(revoked) => {
            tracing::info!(
                server = server.id(),
                revoked,
                "a person's upstream account was disconnected"
            );
            let said = if revoked {
                "and its token was revoked there"
            } else {
                "(the server offers no revocation, or did not take it: its token ends by itself)"
            };
            page(
                StatusCode::OK,
                "Disconnected",
                &format!(
                    "<p>Your account at <strong>{}</strong> is disconnected {}.</p>\
                     <p><a href=\"{base}/connections\">Your connections</a></p>",
                    escape(server.prefix()),
                    escape(said),
                    base = escape(&base_url(&table.settings, &headers)),
                ),
            )
        }
        Err(_) => problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "Not disconnected",
            "The gateway's state store does not answer. Try again shortly.",
        ),
    }
}
