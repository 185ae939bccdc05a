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
pub(crate) async fn protected_resource_metadata(
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
pub(crate) async fn gateway_metadata(
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

#[cfg(test)]
mod tests {
    //! The protected-resource metadata in process, with its own context over a table built
    //! from a config; the one document read from an upstream comes from the in-process test
    //! upstream (`switchboard_upstream::test_upstream`, on a loopback port).
    use super::*;
    use crate::sign_in::tests::{body, context};
    use axum::http::Uri;
    use serde_json::Value;
    use switchboard_upstream::test_upstream::{TestUpstream, Upstream};

    const PEOPLE: &str = r#"
gateway: {publicUrl: "https://gw.example", sessionKey: a-session-key-for-tests}
identityProviders:
- name: corp
  issuer: https://login.example/realms/corp
  audiences: [switchboard]
  scopes: [mcp-tools]
- name: partners
  issuer: https://partners.example
  audiences: [switchboard]
  scopes: [mcp-tools, partner]
servers:
- {name: a, url: 'http://a/mcp'}
keys:
- {name: alice, secret: s-alice, servers: [a], people: [{provider: corp, subjects: [alice]}]}
"#;

    async fn gateway_doc(cx: Arc<SignInContext>, path: &str) -> (StatusCode, Value) {
        let uri: Uri = format!("/.well-known/oauth-protected-resource{path}")
            .parse()
            .expect("a path");
        body(gateway_metadata(State(cx), uri, HeaderMap::new()).await).await
    }

    #[tokio::test]
    async fn without_people_signing_in_there_is_no_gateway_metadata() {
        let config = "servers:\n- {name: a, url: 'http://a/mcp'}\n";
        let (status, _) = gateway_doc(context(config), "/mcp").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }

    /// Each endpoint's document names itself as the resource, and every identity provider
    /// once, with their scopes merged without repeats.
    #[tokio::test]
    async fn the_gateway_metadata_names_the_resource_and_every_provider() {
        let cx = context(PEOPLE);
        let (status, doc) = gateway_doc(cx.clone(), "/mcp-rest").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(doc["resource"], "https://gw.example/mcp-rest");
        assert_eq!(
            doc["authorization_servers"],
            json!([
                "https://login.example/realms/corp",
                "https://partners.example"
            ])
        );
        assert_eq!(doc["scopes_supported"], json!(["mcp-tools", "partner"]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
        let (_, doc) = gateway_doc(cx, "/mcp").await;
        assert_eq!(doc["resource"], "https://gw.example/mcp");
    }

    /// A brokered provider's people sign in at the gateway itself: the gateway comes first
    /// (clients take the first), and that provider's own issuer is not offered.
    #[tokio::test]
    async fn a_brokered_provider_makes_the_gateway_the_first_authorization_server() {
        let brokered = PEOPLE.replace(
            "  scopes: [mcp-tools]\n- name: partners",
            "  scopes: [mcp-tools]\n  brokered: {clientId: gw, clientSecret: s}\n- name: partners",
        );
        let (_, doc) = gateway_doc(context(&brokered), "/mcp").await;
        assert_eq!(
            doc["authorization_servers"],
            json!(["https://gw.example", "https://partners.example"])
        );
    }

    /// A server that does not use the caller's credential is one of the gateway's resources:
    /// its document is the gateway's, for its own path.
    #[tokio::test]
    async fn a_server_with_the_gateways_credential_gets_the_gateway_document() {
        let (status, doc) = body(
            protected_resource_metadata(
                State(context(PEOPLE)),
                Path("a".to_string()),
                HeaderMap::new(),
            )
            .await,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(doc["resource"], "https://gw.example/mcp/a");
        assert_eq!(doc["resource_name"], "switchboard");
    }

    fn passthrough(up: &TestUpstream) -> String {
        format!(
            "gateway: {{publicUrl: \"https://gw.example\"}}\nservers:\n- name: up\n  url: {}\n  timeout: 5s\n  auth: {{type: passthrough}}\n",
            up.mcp_url()
        )
    }

    /// A caller-credential server: the gateway is the resource, the upstream's authorization
    /// servers and scopes are where the client gets a token the upstream accepts.
    #[tokio::test]
    async fn a_caller_credential_server_relays_the_upstreams_authorization_servers() {
        let up = Upstream {
            resource_document: Some(json!({
                "resource": "https://upstream.example/mcp",
                "authorization_servers": ["https://idp.example"],
                "scopes_supported": ["tools"],
            })),
            ..Upstream::default()
        }
        .serve()
        .await;
        let cx = context(&passthrough(&up));
        let (status, doc) = body(
            protected_resource_metadata(State(cx), Path("up".to_string()), HeaderMap::new()).await,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{doc}");
        assert_eq!(
            doc["resource"], "https://gw.example/mcp/up",
            "the gateway, not the upstream"
        );
        assert_eq!(doc["authorization_servers"], json!(["https://idp.example"]));
        assert_eq!(doc["scopes_supported"], json!(["tools"]));
        // Path-suffixed first (RFC 9728).
        assert_eq!(
            up.gets()[0].path,
            "/.well-known/oauth-protected-resource/mcp"
        );
    }

    #[tokio::test]
    async fn a_caller_credential_server_without_upstream_metadata_is_a_bad_gateway() {
        let up = TestUpstream::modern().await;
        let (status, e) = body(
            protected_resource_metadata(
                State(context(&passthrough(&up))),
                Path("up".to_string()),
                HeaderMap::new(),
            )
            .await,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert_eq!(e["error"], "upstream_metadata_unavailable");
        assert_eq!(e["server"], "up");
        assert_eq!(up.gets().len(), 2, "both well-known places tried");
    }
}
