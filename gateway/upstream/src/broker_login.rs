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

/// What the provider's token endpoint answered.
#[derive(Debug, Deserialize)]
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
