//! The cluster's ServiceAccount token issuer, for the gateways: its `iss` and public signing
//! keys, read from the API server's OIDC discovery (`/.well-known/openid-configuration`,
//! `/openid/v1/jwks`) and kept current, since the keys rotate. They travel in the snapshot
//! (`gateway.serviceAccountTokens`), so a gateway verifies workload tokens offline and needs no
//! access to the Kubernetes API (docs/architecture.md, "Workload identity").

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use switchboard_snapshot::ServiceAccountTokens;
use tokio::sync::{Notify, watch};

/// Fetches the issuer's keys every `every`; publishes a change and wakes the controller.
pub async fn follow(
    client: kube::Client,
    audiences: Vec<String>,
    every: Duration,
    published: watch::Sender<Option<ServiceAccountTokens>>,
    dirty: Arc<Notify>,
) {
    loop {
        match fetch(&client, &audiences).await {
            Ok(tokens) => {
                if published.borrow().as_ref() != Some(&tokens) {
                    let keys = tokens.jwks["keys"].as_array().map_or(0, Vec::len);
                    tracing::info!(issuer = %tokens.issuer, keys, "ServiceAccount issuer keys for the gateways");
                    published.send_replace(Some(tokens));
                    dirty.notify_one();
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the ServiceAccount issuer's keys (OIDC discovery); workload tokens keep the last keys read")
            }
        }
        tokio::time::sleep(every).await;
    }
}

async fn fetch(
    client: &kube::Client,
    audiences: &[String],
) -> Result<ServiceAccountTokens, String> {
    let get = |path: &str| {
        http::Request::get(path)
            .body(Vec::new())
            .map_err(|e| e.to_string())
    };
    let discovery: Value = client
        .request(get("/.well-known/openid-configuration")?)
        .await
        .map_err(|e| e.to_string())?;
    let issuer = discovery
        .get("issuer")
        .and_then(Value::as_str)
        .ok_or("the discovery document names no issuer")?
        .to_string();
    let jwks: Value = client
        .request(get("/openid/v1/jwks")?)
        .await
        .map_err(|e| e.to_string())?;
    if jwks
        .get("keys")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        return Err("the issuer publishes no keys".into());
    }
    Ok(ServiceAccountTokens {
        issuer,
        audiences: audiences.to_vec(),
        jwks,
    })
}
