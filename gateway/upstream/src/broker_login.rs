//! Brokered sign-in, the provider side: the gateway redeems the code the provider sent back to
//! `/oauth/callback`, and refreshes a person's login, at the provider's token endpoint, as the
//! confidential client `identityProviders[].brokered` names (client_secret_post), with the
//! provider's TLS settings and under the address policy. Errors name the cause and the
//! provider's error code, never a token or the URL.

use serde::Deserialize;
use switchboard_snapshot::{IdentityProviderSpec, TlsMaterial};

use crate::client::Upstreams;
use crate::error::{ClientDocumentError, TokenEndpointError};
use crate::http_client::HttpError;
use crate::http_client::read_limited;
use crate::tokens::secret;

/// The largest token answer read.
const MAX_ANSWER: usize = 1024 * 1024;
/// One exchange with the token endpoint gives up after this.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What the provider's token endpoint answered (no `Debug`: it is all tokens).
#[derive(Deserialize)]
pub struct ProviderGrant {
    pub access_token: String,
    #[serde(default)]
    pub refresh_token: Option<String>,
    #[serde(default)]
    pub expires_in: Option<u64>,
}

/// One exchange at a brokered provider's token endpoint: `form` (the grant and its fields)
/// plus the gateway's client credentials (client_secret_post), with the provider's TLS settings
/// and under the address policy. The plane's `redeem_login_code` and `refresh_login` say which
/// grant.
pub(crate) async fn token_request(
    upstreams: &Upstreams,
    spec: &IdentityProviderSpec,
    tls: Option<&TlsMaterial>,
    token_url: &str,
    mut form: Vec<(&'static str, String)>,
) -> Result<ProviderGrant, TokenEndpointError> {
    let Some(brokered) = &spec.brokered else {
        return Err(TokenEndpointError::NotBrokered);
    };
    let url = url::Url::parse(token_url).map_err(|_| TokenEndpointError::NotAUrl)?;
    upstreams
        .allows_url(&url)
        .map_err(TokenEndpointError::AddressDenied)?;
    let http = upstreams.http_for_tls(tls)?;
    form.push(("client_id", brokered.client_id.clone()));
    form.push(("client_secret", secret(&brokered.client_secret).to_string()));
    let exchange = async {
        let response = http
            .post(&url)
            .form(&form)
            .send()
            .await
            .map_err(|e| match e {
                HttpError::Denied(denied) => TokenEndpointError::AddressDenied(denied),
                other => TokenEndpointError::Transport(other.to_string()),
            })?;
        let status = response.status();
        let body = read_limited(response.into_body(), MAX_ANSWER)
            .await
            .map_err(|e| TokenEndpointError::Transport(e.to_string()))?;
        Ok::<_, TokenEndpointError>((status, body))
    };
    let (status, body) = tokio::time::timeout(TIMEOUT, exchange)
        .await
        .map_err(|_| TokenEndpointError::Timeout(TIMEOUT))??;
    if !status.is_success() {
        let code = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
            .unwrap_or_default();
        return Err(TokenEndpointError::Refused {
            status: status.as_u16(),
            code,
        });
    }
    serde_json::from_slice(&body).map_err(|_| TokenEndpointError::NoAccessToken)
}

/// The largest client metadata document read (the draft recommends 5 KB).
const MAX_CLIENT_DOCUMENT: usize = 5 * 1024;
/// How long a client metadata document is kept before it is fetched again.
const CLIENT_DOCUMENT_TTL: std::time::Duration = std::time::Duration::from_secs(300);

/// Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document): a client whose
/// `client_id` is an https URL is described by the JSON document at that URL. Fetched by the
/// gateway under the address policy with its TLS roots, bounded in size, and kept a few
/// minutes in a bounded cache (entries expire; a document that could not be read is not kept).
pub(crate) struct ClientDocuments {
    cache: moka::sync::Cache<String, std::sync::Arc<Vec<String>>>,
}

impl Default for ClientDocuments {
    fn default() -> Self {
        ClientDocuments {
            cache: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(CLIENT_DOCUMENT_TTL)
                .build(),
        }
    }
}

impl ClientDocuments {
    /// The redirect URIs of the client whose id is `url`, or why it cannot be used.
    pub async fn redirect_uris(
        &self,
        upstreams: &Upstreams,
        url: &str,
    ) -> Result<std::sync::Arc<Vec<String>>, ClientDocumentError> {
        if let Some(held) = self.cache.get(url) {
            return Ok(held);
        }
        let uris = std::sync::Arc::new(fetch_client_document(upstreams, url).await?);
        self.cache.insert(url.to_string(), uris.clone());
        Ok(uris)
    }
}

async fn fetch_client_document(
    upstreams: &Upstreams,
    client_id: &str,
) -> Result<Vec<String>, ClientDocumentError> {
    #[derive(Deserialize)]
    struct Document {
        client_id: String,
        #[serde(default)]
        redirect_uris: Vec<String>,
        #[serde(default)]
        token_endpoint_auth_method: Option<String>,
    }
    let url = url::Url::parse(client_id).map_err(|_| ClientDocumentError::NotAUrl)?;
    if url.scheme() != "https" || url.path() == "/" || url.fragment().is_some() {
        return Err(ClientDocumentError::NotHttpsWithPath);
    }
    let fetched =
        tokio::time::timeout(TIMEOUT, upstreams.get_json(&url, None, MAX_CLIENT_DOCUMENT))
            .await
            .map_err(|_| ClientDocumentError::Timeout(TIMEOUT))?
            .map_err(ClientDocumentError::Fetch)?;
    let document: Document =
        serde_json::from_value(fetched).map_err(|_| ClientDocumentError::NotADescription)?;
    if document.client_id != client_id {
        return Err(ClientDocumentError::ClientIdMismatch);
    }
    if document
        .token_endpoint_auth_method
        .as_deref()
        .is_some_and(|m| m != "none")
    {
        return Err(ClientDocumentError::NotPublic);
    }
    Ok(document.redirect_uris)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `client_id` that cannot name a Client ID Metadata Document is refused before any
    /// fetch, by kind (what the authorization endpoint answers `invalid_client` with).
    #[tokio::test]
    async fn a_client_id_that_is_no_https_url_with_a_path_is_refused_unfetched() {
        let upstreams = Upstreams::new();
        for (client_id, expected) in [
            ("not a url", ClientDocumentError::NotAUrl),
            (
                "http://client.example/cimd",
                ClientDocumentError::NotHttpsWithPath,
            ),
            (
                "https://client.example/",
                ClientDocumentError::NotHttpsWithPath,
            ),
            (
                "https://client.example/cimd#frag",
                ClientDocumentError::NotHttpsWithPath,
            ),
        ] {
            let e = fetch_client_document(&upstreams, client_id)
                .await
                .expect_err(client_id);
            assert_eq!(
                std::mem::discriminant(&e),
                std::mem::discriminant(&expected),
                "{client_id}: {e}"
            );
        }
        assert_eq!(
            ClientDocumentError::NotHttpsWithPath.to_string(),
            "a client_id URL is https with a path and no fragment"
        );
    }
}
