//! People signing in, end to end inside the core: tokens signed with a test key, verified by a
//! routing table built from a config with identity providers, and the callers they make
//! (`people.rs` and `scope.rs` together; apart so that `people` need not know the table).
use std::sync::Arc;

use base64::Engine;
use serde_json::{Value, json};

use crate::errors::GatewayError;
use crate::jwks::SigningKeys;
use crate::jwks::test_keys::{KEY_PEM, N, OTHER_PEM, token, typed_token};
use crate::people::{Assertion, AssertionRefusal, Refusal, Signed, claim};
use crate::remembered_tokens::unix_now;
use crate::table::RoutingTable;
use switchboard_snapshot::{SystemLookup, load};

const ISSUER: &str = "https://login.example/realms/corp";

const CONFIG: &str = r#"
identityProviders:
- name: corp
  issuer: https://login.example/realms/corp
  audiences: [switchboard]
  requiredClaims: {azp: mcp-cli}
- name: roles
  issuer: https://roles.example
  audiences: [switchboard]
  algorithms: [ES256]
  claims: {groups: realm_access.roles}
servers:
- {name: a, url: 'http://a/mcp'}
- {name: b, url: 'http://b/mcp'}
keys:
- {name: team-a, secret: s-a, servers: [a], tools: {allow: ['a__read*']}, people: [{provider: corp, groups: [team-a]}]}
- {name: team-b, secret: s-b, servers: [b], limits: {concurrentRequests: 1}, people: [{provider: corp, groups: [team-b]}]}
- {name: alice, secret: s-alice, servers: [a], people: [{provider: corp, subjects: [alice]}]}
"#;

fn table() -> RoutingTable {
    let table = RoutingTable::build(&load(CONFIG, &SystemLookup).unwrap()).unwrap();
    let jwks = json!({"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": "k1", "n": N, "e": "AQAB"}]});
    table
        .identity_keys
        .set("default/corp", SigningKeys::parse(&jwks, true).unwrap());
    table
}

fn now() -> i64 {
    unix_now() as i64
}

fn claims(sub: &str, groups: &[&str]) -> Value {
    json!({"iss": ISSUER, "aud": "switchboard", "azp": "mcp-cli", "sub": sub,
           "groups": groups, "exp": now() + 300, "iat": now(), "nbf": now()})
}

/// What `scope` does with a token: its remembered person, else a verification under the
/// issuer it names (none that is configured: refused as an unknown issuer).
fn verify(table: &RoutingTable, token: &str) -> Result<Signed, Refusal> {
    let people = table.people.as_ref().unwrap();
    if let Some(signed) = people.remembered(token) {
        return Ok(signed);
    }
    let issuer = people.issuer_of(token).unwrap_or_default();
    run(people.verify(&table.identity_keys, token, &issuer))
}

/// Runs `work` to its end on a runtime whose clock moves on by itself when nothing else can
/// run (a token waiting for keys no fetcher will bring waits `KEY_WAIT` of that clock).
fn run<F: Future>(work: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(work)
}

fn grant_names(signed: &Signed) -> Vec<&str> {
    signed.grants.iter().map(|k| k.name.as_str()).collect()
}

#[test]
fn a_person_gets_every_key_that_names_them_or_their_groups() {
    let t = table();
    let alice = verify(
        &t,
        &token(KEY_PEM, "k1", claims("alice", &["team-a", "team-b"])),
    )
    .unwrap();
    assert_eq!(alice.person.subject, "alice");
    assert_eq!(alice.person.provider, "default/corp");
    assert_eq!(grant_names(&alice), ["alice", "team-a", "team-b"]);
    let bob = verify(&t, &token(KEY_PEM, "k1", claims("bob", &["team-b"]))).unwrap();
    assert_eq!(grant_names(&bob), ["team-b"]);
    assert_ne!(
        alice.person.tag, bob.person.tag,
        "people do not share sessions"
    );
    let carol = verify(&t, &token(KEY_PEM, "k1", claims("carol", &["elsewhere"]))).unwrap();
    assert!(
        carol.grants.is_empty(),
        "verified, but granted nothing (a 403, not a 401)"
    );
}

#[test]
fn a_verified_token_is_remembered_and_only_that_token() {
    let t = table();
    let people = t.people.as_ref().unwrap();
    let alice = token(KEY_PEM, "k1", claims("alice", &["team-a"]));
    assert!(people.remembered(&alice).is_none(), "not verified yet");
    verify(&t, &alice).unwrap();
    let again = people.remembered(&alice).expect("remembered");
    assert_eq!(again.person.subject, "alice");
    // Another token of the same person is its own entry; a forged one is never remembered.
    let forged = token(OTHER_PEM, "k1", claims("alice", &["team-a"]));
    assert!(people.remembered(&forged).is_none());
    assert_eq!(verify(&t, &forged).unwrap_err(), Refusal::BadSignature);
    assert!(people.remembered(&forged).is_none());
}

#[test]
fn bad_tokens_are_refused_with_their_reason() {
    let t = table();
    let mut wrong_aud = claims("alice", &["team-a"]);
    wrong_aud["aud"] = json!("another-api");
    let mut expired = claims("alice", &["team-a"]);
    expired["exp"] = json!(now() - 3600);
    let mut early = claims("alice", &["team-a"]);
    early["nbf"] = json!(now() + 3600);
    let mut other_client = claims("alice", &["team-a"]);
    other_client["azp"] = json!("some-other-client");
    let mut no_sub = claims("", &["team-a"]);
    no_sub.as_object_mut().unwrap().remove("sub");
    let mut no_aud = claims("alice", &["team-a"]);
    no_aud.as_object_mut().unwrap().remove("aud");
    let cases = [
        (token(KEY_PEM, "k1", wrong_aud), Refusal::WrongAudience),
        (token(KEY_PEM, "k1", no_aud), Refusal::WrongAudience),
        (token(KEY_PEM, "k1", expired), Refusal::Expired),
        (token(KEY_PEM, "k1", early), Refusal::NotYetValid),
        (token(KEY_PEM, "k1", other_client), Refusal::RequiredClaim),
        (token(KEY_PEM, "k1", no_sub), Refusal::MissingSubject),
        // Signed by another key under the same key id: a forgery.
        (
            token(OTHER_PEM, "k1", claims("alice", &["team-a"])),
            Refusal::BadSignature,
        ),
    ];
    for (token, want) in cases {
        assert_eq!(verify(&t, &token).unwrap_err(), want);
    }
    // A tampered payload: the signature no longer verifies.
    let good = token(KEY_PEM, "k1", claims("bob", &["team-b"]));
    let parts: Vec<&str> = good.split('.').collect();
    let forged_claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&claims("bob", &["team-a"])).unwrap());
    let tampered = format!("{}.{}.{}", parts[0], forged_claims, parts[2]);
    assert_eq!(verify(&t, &tampered).unwrap_err(), Refusal::BadSignature);
    // An issuer the gateway does not know is not a person's token at all.
    let mut stranger = claims("alice", &["team-a"]);
    stranger["iss"] = json!("https://evil.example");
    let stranger = token(KEY_PEM, "k1", stranger);
    assert!(t.people.as_ref().unwrap().issuer_of(&stranger).is_none());
    assert_eq!(verify(&t, &stranger).unwrap_err(), Refusal::UnknownIssuer);
}

/// Issue 35: a token signed with a key its provider has just published waits for the fetch it
/// asks for, and is verified with what that fetch found: its first use succeeds. Every token
/// waiting at once is served by one fetch; a key still unknown after it is refused.
#[tokio::test]
async fn a_newly_published_key_verifies_on_its_first_use() {
    use crate::scope::{Resource, authenticate};
    use axum::http::{HeaderMap, HeaderValue, header};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let t = Arc::new(table());
    // The fetcher's part (upstream's `identity_keys.rs`): asked, it fetches the provider's
    // set, which now holds k2 beside k1, and says when it is done.
    let fetches = Arc::new(AtomicUsize::new(0));
    let (keys, counted) = (t.identity_keys.clone(), fetches.clone());
    let fetcher = tokio::spawn(async move {
        loop {
            keys.wake.notified().await;
            if keys.take_wanted().contains("default/corp") {
                let jwks = json!({"keys": [
                    {"kty": "RSA", "alg": "RS256", "kid": "k1", "n": N, "e": "AQAB"},
                    {"kty": "RSA", "alg": "RS256", "kid": "k2", "n": N, "e": "AQAB"}]});
                keys.set("default/corp", SigningKeys::parse(&jwks, false).unwrap());
                counted.fetch_add(1, Ordering::SeqCst);
                keys.fetch_done("default/corp");
            }
        }
    });
    let metrics = crate::metrics::Metrics::default();
    let call = |token: String| {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
        authenticate(t.clone(), headers, &metrics, Resource::Mcp)
    };
    let rotated = token(KEY_PEM, "k2", claims("alice", &["team-a"]));
    let alice = call(rotated).await.expect("the first use of the new key");
    assert_eq!(alice.person.as_ref().unwrap().subject, "alice");
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    drop(alice);
    // Many tokens with key ids nobody publishes, at once: one fetch serves them all, and
    // each is refused only after it.
    let made_up: Vec<_> = (0..50)
        .map(|i| {
            call(token(
                KEY_PEM,
                &format!("made-up-{i}"),
                claims("mallory", &["team-a"]),
            ))
        })
        .collect();
    for refused in futures_util::future::join_all(made_up).await {
        let refused = refused.err().expect("an unknown key stays unknown");
        assert!(
            refused.to_string().contains("does not publish"),
            "{refused}"
        );
    }
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        2,
        "one fetch for 50 waiting tokens"
    );
    fetcher.abort();
}

#[test]
fn an_unknown_key_id_asks_for_the_keys_again_and_a_provider_without_keys_refuses() {
    let t = table();
    let rotated = token(KEY_PEM, "k2", claims("alice", &["team-a"]));
    assert_eq!(
        verify(&t, &rotated).unwrap_err(),
        Refusal::UnknownSigningKey
    );
    assert!(t.identity_keys.take_wanted().contains("default/corp"));
    // The same key, published under its new id: accepted without a new table.
    let jwks = json!({"keys": [{"kty": "RSA", "alg": "RS256", "kid": "k2", "n": N, "e": "AQAB"}]});
    t.identity_keys
        .set("default/corp", SigningKeys::parse(&jwks, false).unwrap());
    assert!(verify(&t, &rotated).is_ok());
    // The other provider's keys were never fetched; its algorithm is refused first.
    let mut roles = claims("alice", &[]);
    roles["iss"] = json!("https://roles.example");
    assert_eq!(
        verify(&t, &token(KEY_PEM, "k1", roles)).unwrap_err(),
        Refusal::AlgorithmNotAccepted
    );
}

#[test]
fn groups_come_from_nested_claims() {
    let value = json!({"realm_access": {"roles": ["admin", "dev"]}, "groups": "solo"});
    assert_eq!(
        claim(&value, "realm_access.roles"),
        Some(&json!(["admin", "dev"]))
    );
    assert_eq!(claim(&value, "groups"), Some(&json!("solo")));
    assert_eq!(claim(&value, "realm_access.missing"), None);
}

#[test]
fn a_person_reaches_the_union_and_each_grant_filters_only_its_own_servers() {
    use crate::scope::{Resource, authenticate};
    use axum::http::{HeaderMap, HeaderValue, header};
    let t = Arc::new(table());
    let mut headers = HeaderMap::new();
    let token = token(KEY_PEM, "k1", claims("dave", &["team-a", "team-b"]));
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    let metrics = crate::metrics::Metrics::default();
    let caller = run(authenticate(t.clone(), headers, &metrics, Resource::Mcp)).unwrap();
    let (a, b) = (
        t.server_by_prefix("a").unwrap(),
        t.server_by_prefix("b").unwrap(),
    );
    assert!(caller.reaches(a) && caller.reaches(b));
    // team-a's filter narrows server a; team-b's lack of one does not widen it.
    assert!(caller.sees_tool(a, "read_file"));
    assert!(!caller.sees_tool(a, "write_file"));
    assert!(caller.sees_tool(b, "write_file"));
    assert_eq!(caller.tag(), &caller.person.as_ref().unwrap().tag);
    // The person's token is their one credential: the subject of a token exchange on their
    // behalf, kept per person.
    let context = caller.credential_context();
    let (tag, subject) = context.person.unwrap();
    assert_eq!(subject.to_str().unwrap(), format!("Bearer {token}"));
    assert_eq!(tag, &caller.person.as_ref().unwrap().tag);
    assert!(
        context.own_authorization.is_none(),
        "never a passthrough credential"
    );
    // Nobody signed in: the 401 says where to sign in.
    let err = run(authenticate(
        t.clone(),
        HeaderMap::new(),
        &metrics,
        Resource::McpServer("a"),
    ))
    .err()
    .unwrap();
    let challenge = err.www_authenticate().unwrap();
    assert_eq!(
        challenge.to_str().unwrap(),
        "Bearer resource_metadata=\"http://localhost/.well-known/oauth-protected-resource/mcp/a\""
    );
    // Signed in, granted nothing: 403 insufficient_scope.
    let mut headers = HeaderMap::new();
    let nobody = token_for("erin", &["elsewhere"]);
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {nobody}")).unwrap(),
    );
    let err = run(authenticate(t, headers, &metrics, Resource::Mcp))
        .err()
        .unwrap();
    assert_eq!(err.http_status(), axum::http::StatusCode::FORBIDDEN);
    assert!(
        err.www_authenticate()
            .unwrap()
            .to_str()
            .unwrap()
            .contains("insufficient_scope")
    );
}

#[test]
fn every_matching_keys_limits_apply() {
    use crate::scope::{Resource, authenticate};
    use axum::http::{HeaderMap, HeaderValue, header};
    let t = Arc::new(table());
    let metrics = crate::metrics::Metrics::default();
    let as_person = |sub: &str, groups: &[&str]| {
        let mut headers = HeaderMap::new();
        let value = format!("Bearer {}", token_for(sub, groups));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&value).unwrap(),
        );
        run(authenticate(t.clone(), headers, &metrics, Resource::Mcp))
    };
    // dave's first key (team-a, by id) has no limit; team-b allows one request at once.
    let first = as_person("dave", &["team-a", "team-b"]).expect("one in flight");
    let second = as_person("dave", &["team-a", "team-b"]);
    assert!(
        matches!(second, Err(GatewayError::Limited { .. })),
        "team-b's bound holds although team-a has none"
    );
    drop(first);
    assert!(
        as_person("dave", &["team-a", "team-b"]).is_ok(),
        "the slot came back"
    );
    // Only in team-a: team-b's bound is not his.
    let _a = as_person("erin", &["team-a"]).unwrap();
    assert!(as_person("erin", &["team-a"]).is_ok());
}

fn token_for(sub: &str, groups: &[&str]) -> String {
    token(KEY_PEM, "k1", claims(sub, groups))
}

/// A token the gateway issued in brokered mode: opened (not parsed as a JWT), its resource
/// under this gateway, the person's grants from their groups, and the provider's token it holds
/// as their credential for a token exchange. Another resource's token, a forged one and one
/// sealed under another session key are refused with their reasons.
#[test]
fn a_brokered_token_is_the_person_it_names_here_and_nowhere_else() {
    use crate::broker::{AccessRecord, BrokerSealer, Identity, Record};
    use crate::scope::{Resource, authenticate};
    use axum::http::{HeaderMap, HeaderValue, header};
    let config = CONFIG.replacen(
        "  requiredClaims: {azp: mcp-cli}\n",
        "  requiredClaims: {azp: mcp-cli}\n  brokered: {clientId: gw, clientSecret: s}\n",
        1,
    ) + "gateway: {sessionKey: shared-session-key}\n";
    let table = RoutingTable::build(&load(&config, &SystemLookup).unwrap()).unwrap();
    let jwks = json!({"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": "k1", "n": N, "e": "AQAB"}]});
    table
        .identity_keys
        .set("default/corp", SigningKeys::parse(&jwks, true).unwrap());
    let t = Arc::new(table);
    let sealer = t
        .broker
        .as_ref()
        .expect("a brokered provider makes a sealer");
    let now = std::time::SystemTime::now();
    let record = |audience: &str| AccessRecord {
        identity: Identity {
            provider: "default/corp".into(),
            subject: "dave".into(),
            groups: vec!["team-b".into()],
        },
        audience: audience.into(),
        client: "digest".into(),
        provider_access: "provider-token".into(),
        scope: Some("mcp-tools a:read".into()),
        signed_in: 1_000,
        exp: unix_now() + 300,
    };
    let metrics = crate::metrics::Metrics::default();
    let call = |token: &str| {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
        run(authenticate(t.clone(), headers, &metrics, Resource::Mcp))
    };
    let token = sealer.seal(Record::Access, &record("http://localhost/mcp"), now);
    let caller = call(&token).expect("the gateway's own token");
    let person = caller.person.as_ref().unwrap();
    // The scopes the gateway granted are the person's, as a provider token's `scope` would be.
    assert_eq!(person.scopes, ["mcp-tools", "a:read"]);
    assert_eq!(
        (person.subject.as_str(), person.provider.as_str()),
        ("dave", "default/corp")
    );
    assert_eq!(caller.key.name, "team-b");
    let context = caller.credential_context();
    assert_eq!(context.person.unwrap().1, "Bearer provider-token");
    assert!(context.own_authorization.is_none());
    // The same person signed in directly has the same tag (sessions and exchanges are theirs).
    let direct = verify(&t, &token_for("dave", &["team-b"])).unwrap();
    assert_eq!(direct.person.tag, person.tag);
    drop(caller);
    let other = sealer.seal(Record::Access, &record("http://elsewhere/mcp"), now);
    let refused = |token: &str| call(token).err().unwrap().to_string();
    assert!(
        refused(&other).contains("issued for another resource"),
        "{}",
        refused(&other)
    );
    assert!(refused("sbt.AAAA").contains("not issued by this gateway"));
    let foreign = BrokerSealer::new(Some("another-session-key")).seal(
        Record::Access,
        &record("http://localhost/mcp"),
        now,
    );
    assert!(refused(&foreign).contains("not issued by this gateway"));

    // dave signs out (at 2 000 ms): this replica refuses his token of the login at 1 000 ms at
    // once, though it remembered the token; a token of a later login works.
    run(t.sign_outs.sign_out(
        &t.store,
        "default/corp",
        "dave",
        2_000,
        std::time::Duration::from_secs(60),
    ))
    .unwrap();
    assert!(
        refused(&token).contains("signed out"),
        "{}",
        refused(&token)
    );
    let later = sealer.seal(
        Record::Access,
        &AccessRecord {
            signed_in: 2_001,
            ..record("http://localhost/mcp")
        },
        now,
    );
    assert!(call(&later).is_ok(), "a login after the sign-out");
}

/// `tools.requiredScopes`: a person's token without a scope a tool needs gets 403
/// `insufficient_scope` naming every scope the call needs (the provider's, then the tool's)
/// and the metadata of the endpoint called (SEP-2350); `scope` (a string) and `scp` (an
/// array) both grant; a key is not asked.
#[test]
fn a_tool_that_requires_scopes_challenges_a_token_without_them() {
    use crate::errors::ScopeChallenge;
    use crate::scope::{Resource, authenticate};
    use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
    const SCOPED: &str = r#"
identityProviders:
- {name: corp, issuer: https://login.example/realms/corp, audiences: [switchboard], scopes: [switchboard]}
servers:
- name: a
  url: 'http://a/mcp'
  tools:
    requiredScopes: {'*': ['a:read'], 'write_*': ['a:write']}
keys:
- {name: team-a, secret: s-a, servers: [a], people: [{provider: corp, groups: [team-a]}]}
"#;
    let table = RoutingTable::build(&load(SCOPED, &SystemLookup).unwrap()).unwrap();
    let jwks = json!({"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": "k1", "n": N, "e": "AQAB"}]});
    table
        .identity_keys
        .set("default/corp", SigningKeys::parse(&jwks, true).unwrap());
    let t = Arc::new(table);
    let metrics = crate::metrics::Metrics::default();
    let caller = |bearer: String, resource| {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {bearer}")).unwrap(),
        );
        run(authenticate(t.clone(), headers, &metrics, resource)).unwrap()
    };
    let with = |name: &str, grant: Value| {
        let mut claims = claims("alice", &["team-a"]);
        claims[name] = grant;
        token(KEY_PEM, "k1", claims)
    };
    let a = t.server_by_prefix("a").unwrap();
    let reader = caller(
        with("scope", json!("openid a:read")),
        Resource::McpServer("a"),
    );
    assert_eq!(reader.person.as_ref().unwrap().scopes, ["openid", "a:read"]);
    assert!(reader.check_scopes(a, "read_file").is_ok());
    let refused = reader.check_scopes(a, "write_file").unwrap_err();
    assert_eq!(
        refused,
        ScopeChallenge::new(
            "a",
            "switchboard a:read a:write".into(),
            "tool write_file needs scope a:write".into(),
            "http://localhost/.well-known/oauth-protected-resource/mcp/a",
        )
    );
    assert_eq!(
        refused.www_authenticate,
        "Bearer error=\"insufficient_scope\", scope=\"switchboard a:read a:write\", \
         resource_metadata=\"http://localhost/.well-known/oauth-protected-resource/mcp/a\", \
         error_description=\"tool write_file needs scope a:write\""
    );
    // What clients get: 403 with the challenge in either era, the scope in the error's data.
    let error = GatewayError::ScopeRequired(refused.clone());
    assert_eq!(error.mcp_http_status(), StatusCode::FORBIDDEN);
    assert_eq!(
        error.www_authenticate().unwrap().to_str().unwrap(),
        refused.www_authenticate
    );
    assert_eq!(
        error.jsonrpc_error()["data"]["scope"],
        "switchboard a:read a:write"
    );
    // `scp` as an array grants as well; no scope at all needs every one, on `/mcp` pointed there.
    let writer = caller(with("scp", json!(["a:read", "a:write"])), Resource::Mcp);
    assert!(writer.check_scopes(a, "write_file").is_ok());
    let bare = caller(token_for("bob", &["team-a"]), Resource::Mcp);
    let refused = bare.check_scopes(a, "read_file").unwrap_err();
    assert_eq!(refused.scope, "switchboard a:read");
    assert!(
        refused.www_authenticate.contains(
            "resource_metadata=\"http://localhost/.well-known/oauth-protected-resource/mcp\""
        ),
        "{}",
        refused.www_authenticate
    );
    // A key's reach is the key's: no scope asked.
    let key = caller("s-a".into(), Resource::Mcp);
    assert!(key.check_scopes(a, "write_file").is_ok());
}

/// An identity assertion (ID-JAG) is verified as its signer's, for the gateway's issuer: its
/// `typ`, signature, issuer, audience, lifetime and the claims the grant needs each refuse it
/// with their own reason; the person is read with the signer's claims mapping.
#[test]
fn an_identity_assertion_is_verified_for_the_gateway_and_read_whole() {
    const GATEWAY: &str = "https://gw.example";
    let table = table();
    let people = table.people.as_ref().unwrap();
    let jag = |claims: Value| typed_token(KEY_PEM, "k1", "oauth-id-jag+jwt", claims);
    let claims = || {
        json!({"iss": ISSUER, "aud": GATEWAY, "sub": "alice", "groups": ["team-a"],
               "client_id": "agent", "jti": "j-1", "iat": now(), "exp": now() + 300,
               "resource": "https://gw.example/mcp", "scope": "openid mcp-tools"})
    };
    let verify = |token: &str| {
        run(people.verify_assertion(&table.identity_keys, "default/corp", token, GATEWAY))
    };
    let verified = verify(&jag(claims())).expect("a good assertion");
    assert_eq!(
        verified,
        Assertion {
            subject: "alice".into(),
            groups: vec!["team-a".into()],
            client_id: "agent".into(),
            jti: "j-1".into(),
            issuer: ISSUER.into(),
            exp: now() as u64 + 300,
            signed_in: now() as u64,
            resources: vec!["https://gw.example/mcp".into()],
            scope: Some(vec!["openid".into(), "mcp-tools".into()]),
        }
    );
    // `application/` may prefix the type, and `auth_time` dates the sign-in.
    let mut dated = claims();
    dated["auth_time"] = json!(now() - 60);
    let prefixed = typed_token(KEY_PEM, "k1", "application/OAUTH-ID-JAG+JWT", dated);
    assert_eq!(verify(&prefixed).unwrap().signed_in, now() as u64 - 60);

    let with = |name: &str, value: Value| {
        let mut c = claims();
        c[name] = value;
        jag(c)
    };
    let without = |name: &str| {
        let mut c = claims();
        c.as_object_mut().unwrap().remove(name);
        jag(c)
    };
    let token_refusal = AssertionRefusal::Token;
    for (assertion, refusal, why) in [
        (
            token(KEY_PEM, "k1", claims()),
            AssertionRefusal::NotAnAssertion,
            "an ordinary JWT",
        ),
        (
            typed_token(KEY_PEM, "k1", "at+jwt", claims()),
            AssertionRefusal::NotAnAssertion,
            "an access token",
        ),
        (
            with("aud", json!("switchboard")),
            token_refusal(Refusal::WrongAudience),
            "the provider's audience",
        ),
        (
            with("iss", json!("https://roles.example")),
            token_refusal(Refusal::UnknownIssuer),
            "another issuer",
        ),
        (
            with("exp", json!(now() - 600)),
            token_refusal(Refusal::Expired),
            "expired",
        ),
        (
            with("exp", json!(now() + 7200)),
            AssertionRefusal::TooLong,
            "two hours",
        ),
        (
            with("iat", json!(now() + 600)),
            token_refusal(Refusal::NotYetValid),
            "issued later",
        ),
        (
            without("client_id"),
            AssertionRefusal::Missing("client_id"),
            "no client",
        ),
        (without("jti"), AssertionRefusal::Missing("jti"), "no jti"),
        (without("iat"), AssertionRefusal::Missing("iat"), "no iat"),
        (
            without("sub"),
            AssertionRefusal::Missing("sub"),
            "no subject",
        ),
        (
            typed_token(OTHER_PEM, "k1", "oauth-id-jag+jwt", claims()),
            token_refusal(Refusal::BadSignature),
            "another key",
        ),
    ] {
        assert_eq!(verify(&assertion), Err(refusal), "{why}");
    }
    // Another provider's keys (none loaded here) never verify it.
    assert_eq!(
        run(people.verify_assertion(
            &table.identity_keys,
            "default/roles",
            &jag(claims()),
            GATEWAY
        )),
        Err(AssertionRefusal::Token(Refusal::AlgorithmNotAccepted))
    );
}
