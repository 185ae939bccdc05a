//! The upstream credential of one request, for the auth arms whose credential is not static:
//! the caller's own (`passthrough`, `oauthDelegate`), minted by the gateway
//! (`oauth2ClientCredentials`) or exchanged for the caller's (`tokenExchange`).
//!
//! Each credential comes with a partition: caches whose content depends on the credential
//! (upstream sessions, listings) are kept per partition, so two callers with different
//! catalogs never see each other's (0 is the one shared partition).

use axum::http::{HeaderMap, HeaderValue};
use sha2::{Digest, Sha256};
use switchboard_snapshot::UpstreamAuth;

use crate::error::UpstreamError;
use crate::tokens::{Grant, Tokens, secret};
use switchboard_core::credentials::{credential_value, strip_scheme};
use switchboard_core::scope::CredentialContext;
use switchboard_core::table::Server;

pub const SHARED_PARTITION: u64 = 0;

#[derive(Debug, Clone)]
pub struct RequestCredential {
    pub value: HeaderValue,
    pub partition: u64,
}

/// A partition for a caller credential: a hash, never the shared partition.
pub fn partition_of(credential: &[u8]) -> u64 {
    let digest = Sha256::digest(credential);
    u64::from_le_bytes(digest[..8].try_into().unwrap_or([1; 8])).max(1)
}

/// The delegated-credential header for a server: `X-MCP-<prefix>-Authorization` unless set.
pub fn delegate_header(server: &Server, configured: Option<&str>) -> String {
    configured.map_or_else(
        || format!("x-mcp-{}-authorization", server.prefix()),
        str::to_ascii_lowercase,
    )
}

/// The partition a caller's requests to `server` use (no token request needed to know it):
/// per credential of the caller's own, except that what is exchanged for a signed-in person is
/// theirs whichever of their tokens they present.
pub fn partition(caller: CredentialContext<'_>, server: &Server) -> u64 {
    match (&server.spec.auth, caller.person) {
        (UpstreamAuth::TokenExchange { .. }, Some((tag, _))) => partition_of(tag),
        // What a caller's own account sees is theirs.
        (UpstreamAuth::UserOauth { .. }, _) => partition_of(caller.tag),
        _ => caller_credential(caller, server)
            .map_or(SHARED_PARTITION, |own| partition_of(own.as_bytes())),
    }
}

/// The credential of the caller's own that `server`'s arm uses, if the caller sent one.
fn caller_credential<'a>(
    caller: CredentialContext<'a>,
    server: &Server,
) -> Option<&'a HeaderValue> {
    match &server.spec.auth {
        UpstreamAuth::Passthrough { .. } => caller.own_authorization,
        // A signed-in person's own credential, else the one beside the gateway key.
        UpstreamAuth::TokenExchange { .. } => caller
            .person
            .map(|(_, subject)| subject)
            .or(caller.own_authorization),
        UpstreamAuth::OauthDelegate { header, .. } => {
            header_value(caller.headers, &delegate_header(server, header.as_deref()))
        }
        _ => None,
    }
}

fn header_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a HeaderValue> {
    headers.get(name).filter(|v| !v.is_empty())
}

/// Resolves the credential for one request. `None` when the arm has a static credential (or
/// none), or when the caller sent no credential of its own (the upstream then answers 401,
/// which is relayed). `rejected` is a token the upstream just refused: it is renewed.
pub async fn resolve(
    tokens: &Tokens,
    http: &crate::http_client::HttpClient,
    caller: CredentialContext<'_>,
    server: &Server,
    rejected: Option<&HeaderValue>,
) -> Result<Option<RequestCredential>, UpstreamError> {
    let rejected_token = rejected
        .and_then(|v| v.to_str().ok())
        .map(|v| strip_scheme(v, "Bearer").to_string());
    let bearer =
        |token: &str| credential_value(&format!("Bearer {}", strip_scheme(token, "Bearer")));
    let value = match &server.spec.auth {
        UpstreamAuth::Passthrough { .. } => caller_credential(caller, server).cloned(),
        UpstreamAuth::OauthDelegate { .. } => caller_credential(caller, server)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer),
        UpstreamAuth::Oauth2ClientCredentials {
            token_url,
            client_id,
            client_secret,
            scopes,
            audience,
            client_auth,
            ..
        } => {
            let token = tokens
                .token(
                    http,
                    server,
                    SHARED_PARTITION,
                    1,
                    rejected_token.as_deref(),
                    || {
                        let mut form = vec![("grant_type", "client_credentials".to_string())];
                        if !scopes.is_empty() {
                            form.push(("scope", scopes.join(" ")));
                        }
                        if let Some(a) = audience {
                            form.push(("audience", a.clone()));
                        }
                        Grant {
                            token_url,
                            client_id: secret(client_id),
                            client_secret: Some(secret(client_secret)),
                            client_auth: *client_auth,
                            form,
                        }
                    },
                )
                .await?;
            bearer(&token)
        }
        UpstreamAuth::TokenExchange {
            token_url,
            client_id,
            client_secret,
            audience,
            scopes,
            subject_token_type,
            client_auth,
            cache_size,
            ..
        } => {
            let Some(subject) = caller_credential(caller, server).and_then(|v| v.to_str().ok())
            else {
                if caller.holds_no_provider_token {
                    return Err(UpstreamError::ProviderTokenNotHeld {
                        server: server.id().to_string(),
                    });
                }
                return Ok(None);
            };
            let subject = strip_scheme(subject, "Bearer").to_string();
            let token = tokens
                .token(
                    http,
                    server,
                    partition(caller, server),
                    *cache_size,
                    rejected_token.as_deref(),
                    || {
                        let mut form = vec![
                            (
                                "grant_type",
                                "urn:ietf:params:oauth:grant-type:token-exchange".to_string(),
                            ),
                            ("subject_token", subject.clone()),
                            ("subject_token_type", subject_token_type.clone()),
                        ];
                        if let Some(a) = audience {
                            form.push(("audience", a.clone()));
                        }
                        if !scopes.is_empty() {
                            form.push(("scope", scopes.join(" ")));
                        }
                        Grant {
                            token_url,
                            client_id: secret(client_id),
                            client_secret: client_secret.as_ref().map(secret),
                            client_auth: *client_auth,
                            form,
                        }
                    },
                )
                .await?;
            bearer(&token)
        }
        // A caller's own account is the plane's to read (`accounts.rs`: the shared store).
        UpstreamAuth::UserOauth { .. } => return Ok(None),
        _ => return Ok(None),
    };
    Ok(value.map(|value| RequestCredential {
        value,
        partition: partition(caller, server),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_core::table::RoutingTable;
    use switchboard_snapshot::{SystemLookup, load};

    fn table() -> RoutingTable {
        let exchange =
            "{type: tokenExchange, tokenUrl: 'http://idp/token', clientId: c, clientSecret: s}";
        let yaml = format!(
            "servers:\n- {{name: ex, url: 'http://x/mcp', auth: {exchange}}}\n- {{name: pass, url: 'http://y/mcp', auth: {{type: passthrough}}}}\n"
        );
        RoutingTable::build(&load(&yaml, &SystemLookup).unwrap()).unwrap()
    }

    /// The tag of a caller who is a key, not a person.
    const KEY_TAG: [u8; 32] = [9; 32];

    /// A person presents `token` as their one credential; anyone else beside a gateway key.
    fn context<'a>(
        headers: &'a HeaderMap,
        token: &'a HeaderValue,
        person: Option<&'a [u8; 32]>,
    ) -> CredentialContext<'a> {
        CredentialContext {
            tag: person.unwrap_or(&KEY_TAG),
            headers,
            own_authorization: person.is_none().then_some(token),
            person: person.map(|tag| (tag, token)),
            holds_no_provider_token: false,
        }
    }

    /// What is exchanged for a person is theirs whichever token they present (a refreshed token
    /// does not start over), and never another person's; a caller that is not a person
    /// partitions by the credential itself; a passthrough server never gets a person's token.
    #[test]
    fn exchanges_are_kept_per_person_and_passthrough_per_credential() {
        let table = table();
        let (ex, pass) = (
            table.server_by_id("ex").unwrap(),
            table.server_by_id("pass").unwrap(),
        );
        let headers = HeaderMap::new();
        let (first, refreshed) = (
            HeaderValue::from_static("Bearer first"),
            HeaderValue::from_static("Bearer refreshed"),
        );
        let (alice, bob) = ([1u8; 32], [2u8; 32]);
        let of = |token, person, server| partition(context(&headers, token, person), server);
        assert_eq!(
            of(&first, Some(&alice), ex),
            of(&refreshed, Some(&alice), ex)
        );
        assert_ne!(of(&first, Some(&alice), ex), of(&first, Some(&bob), ex));
        assert_ne!(of(&first, None, ex), of(&refreshed, None, ex));
        assert_ne!(of(&first, None, pass), of(&refreshed, None, pass));
        for p in [of(&first, Some(&alice), ex), of(&first, None, pass)] {
            assert_ne!(p, SHARED_PARTITION);
        }
        // A person's token is never a passthrough server's credential.
        assert_eq!(of(&first, Some(&alice), pass), SHARED_PARTITION);
        let none = CredentialContext {
            tag: &KEY_TAG,
            headers: &headers,
            own_authorization: None,
            person: None,
            holds_no_provider_token: false,
        };
        assert_eq!(partition(none, ex), SHARED_PARTITION);
    }

    /// A person who signed in with an identity assertion has no token to exchange: a
    /// `tokenExchange` server refuses them as such, before any request; a caller with no
    /// credential at all is sent on without one (the upstream's 401 is relayed).
    #[tokio::test]
    async fn an_exchange_for_a_person_whose_provider_token_is_not_held_is_refused_as_such() {
        let table = table();
        let ex = table.server_by_id("ex").unwrap();
        let headers = HeaderMap::new();
        let tokens = Tokens::default();
        let http = crate::http_client::HttpClient::plain().unwrap();
        let caller = |holds_no_provider_token| CredentialContext {
            tag: &KEY_TAG,
            headers: &headers,
            own_authorization: None,
            person: None,
            holds_no_provider_token,
        };
        let refused = resolve(&tokens, &http, caller(true), ex, None).await;
        assert!(
            matches!(&refused, Err(UpstreamError::ProviderTokenNotHeld { server }) if server == "ex"),
            "{refused:?}"
        );
        assert!(matches!(
            resolve(&tokens, &http, caller(false), ex, None).await,
            Ok(None)
        ));
    }
}
