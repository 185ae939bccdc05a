//! The edge's OAuth protected-resource metadata (RFC 9728) for each server that uses the
//! caller's own credential; the upstream's own document comes from the upstream plane
//! ([`switchboard_upstream::protected_resource`]).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::state::Gateway;

/// `GET /.well-known/oauth-protected-resource/mcp/{prefix}`: public metadata, no key needed
/// (clients fetch it before they hold any credential).
pub async fn protected_resource_metadata(
    State(gw): State<Arc<Gateway>>,
    Path(prefix): Path<String>,
    headers: HeaderMap,
) -> Response {
    let table = gw.table();
    let Some(server) = table
        .server_by_prefix(&prefix)
        .filter(|s| s.spec.auth.uses_caller_credential())
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let Some(upstream) = gw
        .upstream
        .protected_resources
        .upstream_document(&gw.upstream.upstreams, server)
        .await
    else {
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
