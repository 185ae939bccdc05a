//! Brokered sign-in, the provider side: the gateway redeems the code the provider sent back to
//! `/oauth/callback`, and refreshes a person's login, at the provider's token endpoint, as the
//! confidential client `identityProviders[].brokered` names (client_secret_post), with the
//! provider's TLS settings and under the address policy. Errors name the cause and the
//! provider's error code, never a token or the URL.

use serde::Deserialize;
use switchboard_snapshot::{IdentityProviderSpec, TlsMaterial};

use crate::client::Upstreams;
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

/// Redeems the provider's authorization code (with the gateway's PKCE verifier).
pub async fn redeem_code(
    upstreams: &Upstreams,
    spec: &IdentityProviderSpec,
    tls: Option<&TlsMaterial>,
    token_url: &str,
    code: &str,
    redirect_uri: &str,
    verifier: &str,
) -> Result<ProviderGrant, String> {
    let form = vec![
        ("grant_type", "authorization_code".to_string()),
        ("code", code.to_string()),
        ("redirect_uri", redirect_uri.to_string()),
        ("code_verifier", verifier.to_string()),
    ];
    token_request(upstreams, spec, tls, token_url, form).await
}

/// Refreshes a person's login at the provider with the refresh token it gave.
pub async fn refresh(
    upstreams: &Upstreams,
    spec: &IdentityProviderSpec,
    tls: Option<&TlsMaterial>,
    token_url: &str,
    refresh_token: &str,
) -> Result<ProviderGrant, String> {
    let form = vec![
        ("grant_type", "refresh_token".to_string()),
        ("refresh_token", refresh_token.to_string()),
    ];
    token_request(upstreams, spec, tls, token_url, form).await
}

async fn token_request(
    upstreams: &Upstreams,
    spec: &IdentityProviderSpec,
    tls: Option<&TlsMaterial>,
    token_url: &str,
    mut form: Vec<(&'static str, String)>,
) -> Result<ProviderGrant, String> {
    let Some(brokered) = &spec.brokered else {
        return Err("the identity provider is not brokered".into());
    };
    let url =
        url::Url::parse(token_url).map_err(|_| "the token endpoint is not a URL".to_string())?;
    upstreams
        .allows_url(&url)
        .map_err(|denied| format!("{denied}"))?;
    let http = upstreams.http_for_tls(tls)?;
    form.push(("client_id", brokered.client_id.clone()));
    form.push(("client_secret", secret(&brokered.client_secret).to_string()));
    let exchange = async {
        let response = http
            .post(&url)
            .form(&form)
            .send()
            .await
            .map_err(|e| format!("token endpoint: {e}"))?;
        let status = response.status();
        let body = read_limited(response.into_body(), MAX_ANSWER)
            .await
            .map_err(|e| format!("token endpoint: {e}"))?;
        Ok::<_, String>((status, body))
    };
    let (status, body) = tokio::time::timeout(TIMEOUT, exchange)
        .await
        .map_err(|_| format!("token endpoint: no answer within {}s", TIMEOUT.as_secs()))??;
    if !status.is_success() {
        let code = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
            .unwrap_or_default();
        return Err(format!("token endpoint: HTTP {} {code}", status.as_u16()));
    }
    serde_json::from_slice(&body)
        .map_err(|_| "token endpoint: no access_token in the answer".into())
}

/// The largest client metadata document read (the draft recommends 5 KB).
const MAX_CLIENT_DOCUMENT: usize = 5 * 1024;
/// How long a client metadata document is kept before it is fetched again.
const CLIENT_DOCUMENT_TTL: std::time::Duration = std::time::Duration::from_secs(300);

/// Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document): a client whose
/// `client_id` is an https URL is described by the JSON document at that URL. Fetched by the
/// gateway under the address policy with its TLS roots, bounded in size, and kept a few
/// minutes in a bounded cache (entries expire; a document that could not be read is not kept).
pub struct ClientDocuments {
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
    ) -> Result<std::sync::Arc<Vec<String>>, String> {
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
) -> Result<Vec<String>, String> {
    #[derive(Deserialize)]
    struct Document {
        client_id: String,
        #[serde(default)]
        redirect_uris: Vec<String>,
        #[serde(default)]
        token_endpoint_auth_method: Option<String>,
    }
    let url = url::Url::parse(client_id).map_err(|_| "the client_id is not a URL".to_string())?;
    if url.scheme() != "https" || url.path() == "/" || url.fragment().is_some() {
        return Err("a client_id URL is https with a path and no fragment".into());
    }
    let fetched =
        tokio::time::timeout(TIMEOUT, upstreams.get_json(&url, None, MAX_CLIENT_DOCUMENT))
            .await
            .map_err(|_| {
                format!(
                    "client metadata document: no answer within {}s",
                    TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| format!("client metadata document: {e}"))?;
    let document: Document = serde_json::from_value(fetched)
        .map_err(|_| "client metadata document: not a JSON client description".to_string())?;
    if document.client_id != client_id {
        return Err(
            "client metadata document: its client_id is not the URL it was read from".into(),
        );
    }
    if document
        .token_endpoint_auth_method
        .as_deref()
        .is_some_and(|m| m != "none")
    {
        return Err(
            "client metadata document: only public clients (token_endpoint_auth_method none)"
                .into(),
        );
    }
    Ok(document.redirect_uris)
}
