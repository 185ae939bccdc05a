//! The edge's OAuth protected-resource metadata (RFC 9728), at the path-specific well-known
//! URLs of its client faces:
//!
//! - a server that uses the caller's own credential: the upstream's authorization servers
//!   (the upstream's own document, from [`switchboard_upstream::UpstreamPlane::upstream_resource_document`]): the
//!   client needs a token the upstream accepts;
//! - every other endpoint, when people sign in (`identityProviders`): the gateway's identity
//!   providers, from which an MCP client starts the OAuth flow after the gateway's 401 (for a
//!   brokered provider, the gateway itself: `crate::oauth`).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::sign_in::SignInContext;

/// `GET /.well-known/oauth-protected-resource/mcp/{prefix}`: public metadata, no key needed
/// (clients fetch it before they hold any credential).
pub async fn protected_resource_metadata(
    State(cx): State<Arc<SignInContext>>,
    Path(prefix): Path<String>,
    headers: HeaderMap,
) -> Response {
    let table = cx.table();
    let Some(server) = table
        .server_by_prefix(&prefix)
        .filter(|s| s.spec.auth.uses_caller_credential())
    else {
        return gateway_document(&table, &headers, &format!("/mcp/{prefix}"));
    };
    let Some(upstream) = cx.upstream.upstream_resource_document(server).await else {
        return (
            StatusCode::BAD_GATEWAY,
            Json(json!({"error": "upstream_metadata_unavailable", "server": server.id()})),
        )
            .into_response();
    };
    let base = switchboard_core::table::base_url(&table.settings, &headers);
    let mut document = json!({
        "resource": format!("{base}/mcp/{prefix}"),
        "authorization_servers": upstream["authorization_servers"],
        "bearer_methods_supported": ["header"],
        "resource_name": format!("switchboard: {prefix}"),
    });
    if let Some(scopes) = upstream.get("scopes_supported") {
        document["scopes_supported"] = scopes.clone();
    }
    Json(document).into_response()
}

/// `GET /.well-known/oauth-protected-resource/mcp` (and `/mcp-rest`): the aggregate endpoint's
/// and REST's metadata, where people sign in.
pub async fn gateway_metadata(
    State(cx): State<Arc<SignInContext>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    let resource = uri
        .path()
        .strip_prefix("/.well-known/oauth-protected-resource")
        .unwrap_or("/mcp");
    gateway_document(&cx.table(), &headers, resource)
}

/// The metadata of one of the gateway's own resources: its identity providers as the
/// authorization servers (404 when nobody signs in here).
fn gateway_document(
    table: &switchboard_core::table::RoutingTable,
    headers: &HeaderMap,
    resource: &str,
) -> Response {
    let Some(people) = &table.people else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let base = switchboard_core::table::base_url(&table.settings, headers);
    // A brokered provider's people sign in at the gateway itself, listed first (clients take
    // the first authorization server); only at its public URL (`crate::oauth` says why).
    let mut issuers: Vec<&str> = Vec::new();
    if people.brokered().is_some() && table.settings.public_url.is_some() {
        issuers.push(&base);
    }
    let mut scopes: Vec<&str> = Vec::new();
    for (_, spec, _) in people.providers() {
        if spec.brokered.is_none() && !issuers.contains(&spec.issuer.as_str()) {
            issuers.push(&spec.issuer);
        }
        for scope in &spec.scopes {
            if !scopes.contains(&scope.as_str()) {
                scopes.push(scope);
            }
        }
    }
    let mut document = json!({
        "resource": format!("{base}{resource}"),
        "authorization_servers": issuers,
        "bearer_methods_supported": ["header"],
        "resource_name": "switchboard",
    });
    if !scopes.is_empty() {
        document["scopes_supported"] = json!(scopes);
    }
    Json(document).into_response()
}
