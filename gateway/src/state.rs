//! The gateway's shared state: the current routing table (swapped whole on every snapshot) and
//! the caches that hang off it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use serde_json::Value;
use tokio::time::Instant;

use crate::catalog::Catalog;
use crate::errors::GatewayError;
use crate::mcp::era::{Era, HEADER_MISMATCH};
use crate::metrics::Metrics;
use crate::protected_resource::{ProtectedResources, auth_challenge};
use crate::scope::Caller;
use crate::table::{RoutingTable, Server};
use crate::upstream::client::{RpcCall, RpcOutcome, Upstreams};
use crate::upstream::listing::{ListKind, Listing, ListingRequest};
use crate::upstream::param_headers;
use crate::upstream::request_credential::{self, RequestCredential, SHARED_PARTITION};
use crate::upstream::tokens::Tokens;
use axum::http::{HeaderMap, HeaderValue};
use std::time::Duration;
use switchboard_snapshot::{GatewaySettings, UpstreamAuth};

pub struct Gateway {
    table: ArcSwap<RoutingTable>,
    loaded: AtomicBool,
    pub upstreams: Upstreams,
    pub catalog: Catalog,
    pub metrics: Metrics,
    pub tokens: Tokens,
    pub protected_resources: ProtectedResources,
    /// Settings of this deployment rather than of the snapshot (its Service names, its public
    /// URL), merged into every table applied.
    local: LocalSettings,
}

/// Per-deployment settings given on the command line.
#[derive(Debug, Clone, Default)]
pub struct LocalSettings {
    pub allowed_hosts: Vec<String>,
    pub public_url: Option<String>,
}

impl Gateway {
    /// A gateway with an empty table; not ready until the first snapshot is applied.
    pub fn new() -> Gateway {
        let empty = RoutingTable::build(&Default::default())
            .unwrap_or_else(|_| unreachable!("the empty snapshot is valid"));
        Gateway {
            table: ArcSwap::from_pointee(empty),
            loaded: AtomicBool::new(false),
            upstreams: Upstreams::new(),
            catalog: Catalog::default(),
            metrics: Metrics::default(),
            tokens: Tokens::default(),
            protected_resources: ProtectedResources::default(),
            local: LocalSettings::default(),
        }
    }

    pub fn table(&self) -> Arc<RoutingTable> {
        self.table.load_full()
    }

    pub fn is_ready(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// Swaps in a new table. In-flight requests keep the table they started with; caches
    /// forget servers that left or changed.
    /// A gateway whose deployment adds `local` to every snapshot's settings.
    pub fn with_local_settings(local: LocalSettings) -> Gateway {
        Gateway {
            local,
            ..Gateway::new()
        }
    }

    pub fn apply(&self, mut table: RoutingTable) {
        let settings = &mut table.settings;
        settings
            .allowed_hosts
            .extend(self.local.allowed_hosts.iter().cloned());
        if self.local.public_url.is_some() {
            settings.public_url = self.local.public_url.clone();
        }
        let live: std::collections::HashMap<String, u64> = table
            .servers
            .iter()
            .map(|s| (s.id().to_string(), s.revision))
            .collect();
        self.metrics.snapshot_applied(&table);
        self.table.store(Arc::new(table));
        self.loaded.store(true, Ordering::Release);
        let is_live = |id: &str, rev: u64| live.get(id) == Some(&rev);
        self.catalog.retain(is_live);
        self.upstreams.retain(is_live);
        self.tokens.retain(is_live);
        self.protected_resources.retain(is_live);
    }

    /// One request to a server's upstream under its `timeout`, with the server's credential.
    ///
    /// A gateway-held token the upstream refuses (401) is renewed once and the request
    /// repeats; a 401 on a caller's own credential is relayed (DESIGN.md invariant 6).
    pub async fn forward(
        &self,
        caller: &Caller,
        server: &Server,
        method: &str,
        params: Option<Value>,
    ) -> Result<RpcOutcome, GatewayError> {
        let mut rejected = None;
        loop {
            let credential = self.credential(caller, server, rejected.as_ref()).await?;
            let result = self
                .forward_with(caller, server, method, params.clone(), credential.as_ref())
                .await;
            match result {
                Err(e) if renews(server, &e, &rejected, &credential) => {
                    rejected = credential.map(|c| c.value);
                }
                other => return other.map_err(|e| self.relay_auth(caller, server, e)),
            }
        }
    }

    /// The per-request credential of a server whose credential is not static.
    async fn credential(
        &self,
        caller: &Caller,
        server: &Server,
        rejected: Option<&HeaderValue>,
    ) -> Result<Option<RequestCredential>, GatewayError> {
        request_credential::resolve(
            &self.tokens,
            self.upstreams.http(),
            caller,
            server,
            rejected,
        )
        .await
    }

    /// Sends a request with its credential. A tool call from a caller that sent no
    /// `Mcp-Param-*` headers gets the ones the tool's schema calls for; if the upstream still
    /// answers HeaderMismatch (its schema changed, or this replica never listed it), the
    /// tools are listed afresh and the call repeats once.
    async fn forward_with(
        &self,
        caller: &Caller,
        server: &Server,
        method: &str,
        params: Option<Value>,
        credential: Option<&RequestCredential>,
    ) -> Result<RpcOutcome, GatewayError> {
        // Only a 2026-07-28 upstream reads Mcp-Param-* headers; a caller that sent its own keeps
        // them as sent.
        let derive = method == "tools/call"
            && self.upstreams.era_of(server) != Some(Era::Legacy)
            && !param_headers::caller_sent_any(&caller.headers);
        if !derive {
            return self
                .send(caller, server, method, params, credential, None)
                .await;
        }
        let partition = credential.map_or(SHARED_PARTITION, |c| c.partition);
        let tool = params
            .as_ref()
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let derived = || {
            let arguments = params.as_ref().and_then(|p| p.get("arguments"));
            self.catalog
                .tool_schema(server, partition, &tool)
                .map(|schema| param_headers::derive(&schema, arguments))
        };
        let headers = derived();
        let outcome = self
            .send(
                caller,
                server,
                method,
                params.clone(),
                credential,
                headers.as_ref(),
            )
            .await;
        let mismatch = matches!(&outcome, Ok(RpcOutcome::Error(e))
            if e.get("code").and_then(Value::as_i64) == Some(HEADER_MISMATCH));
        if !mismatch {
            return outcome;
        }
        let settings = &caller.table.settings;
        let relisted = self
            .catalog
            .listing(
                &self.upstreams,
                &ListingRequest {
                    server,
                    caller_headers: &caller.headers,
                    credential,
                    kind: ListKind::Tools,
                },
                Duration::ZERO,
                settings.listing_page_cap,
            )
            .await;
        match relisted {
            Ok(_) => {
                let headers = derived();
                self.send(caller, server, method, params, credential, headers.as_ref())
                    .await
            }
            Err(_) => outcome,
        }
    }

    async fn send(
        &self,
        caller: &Caller,
        server: &Server,
        method: &str,
        params: Option<Value>,
        credential: Option<&RequestCredential>,
        param_headers: Option<&HeaderMap>,
    ) -> Result<RpcOutcome, GatewayError> {
        let budget = server.spec.timeout;
        let started = Instant::now();
        let outcome = self
            .upstreams
            .call(RpcCall {
                server,
                caller_headers: &caller.headers,
                param_headers,
                credential,
                method,
                params,
                deadline: started + budget,
                budget,
            })
            .await;
        self.metrics
            .upstream_call(&server.metric_name, &outcome, started.elapsed());
        outcome
    }

    /// A server's listing of one kind for the caller's credential partition, cached or
    /// walked afresh (with the same renew-once rule as [`Gateway::forward`]).
    pub async fn listing(
        &self,
        caller: &Caller,
        server: &Server,
        kind: ListKind,
    ) -> Result<Arc<Listing>, GatewayError> {
        self.listing_fresher_than(caller, server, kind, caller.table.settings.listing_ttl)
            .await
    }

    /// Lists a server's tools now with the gateway's own credential, as no caller: the
    /// readiness probe the operator runs. Servers whose catalog depends on the caller's
    /// credential cannot be probed this way (the caller has none to give).
    pub async fn probe(&self, server_id: &str) -> Result<Arc<Listing>, GatewayError> {
        let table = self.table();
        let server =
            table
                .server_by_id(server_id)
                .cloned()
                .ok_or_else(|| GatewayError::ServerNotFound {
                    server: server_id.to_string(),
                })?;
        let caller = Caller::probe(table, &server);
        self.listing_fresher_than(&caller, &server, ListKind::Tools, Duration::ZERO)
            .await
    }

    async fn listing_fresher_than(
        &self,
        caller: &Caller,
        server: &Server,
        kind: ListKind,
        ttl: Duration,
    ) -> Result<Arc<Listing>, GatewayError> {
        let settings = &caller.table.settings;
        let mut rejected = None;
        let result = loop {
            let credential = match self.credential(caller, server, rejected.as_ref()).await {
                Ok(c) => c,
                Err(e) => break Err(e),
            };
            let result = self
                .catalog
                .listing(
                    &self.upstreams,
                    &ListingRequest {
                        server,
                        caller_headers: &caller.headers,
                        credential: credential.as_ref(),
                        kind,
                    },
                    ttl,
                    settings.listing_page_cap,
                )
                .await;
            match result {
                Err(e) if renews(server, &e, &rejected, &credential) => {
                    rejected = credential.map(|c| c.value);
                }
                other => break other.map_err(|e| self.relay_auth(caller, server, e)),
            }
        };
        if let Err(e) = &result {
            self.metrics.listing_failed(&server.metric_name);
            if !matches!(e, GatewayError::UpstreamAuthRequired { .. }) {
                tracing::warn!(server = server.id(), kind = kind.method(), error = %e, "upstream listing failed");
            }
        }
        result
    }

    /// A 401 from an upstream that uses the caller's own credential becomes the caller's 401,
    /// with a challenge that points at the gateway's protected-resource metadata for the
    /// server (whose authorization servers are the upstream's). An expected re-auth, so it
    /// logs at info.
    fn relay_auth(&self, caller: &Caller, server: &Server, error: GatewayError) -> GatewayError {
        let GatewayError::UpstreamUnauthorized { challenge, .. } = &error else {
            return error;
        };
        if !server.spec.auth.uses_caller_credential() {
            return error;
        }
        let upstream = challenge
            .as_deref()
            .map(auth_challenge::parse)
            .unwrap_or_default();
        if let Some(url) = upstream.get("resource_metadata") {
            self.protected_resources.remember_source(server, url);
        }
        let base = base_url(&caller.table.settings, &caller.headers);
        let resource_metadata = format!(
            "{base}/.well-known/oauth-protected-resource/mcp/{}",
            server.prefix()
        );
        let mut www = format!("Bearer resource_metadata=\"{resource_metadata}\"");
        for field in ["error", "scope", "error_description"] {
            if let Some(v) = upstream.get(field) {
                www.push_str(&format!(", {field}=\"{}\"", v.replace('"', "")));
            }
        }
        tracing::info!(
            server = server.id(),
            "upstream asked the caller to authenticate (HTTP 401 relayed)"
        );
        self.metrics.auth_relayed(&server.metric_name);
        GatewayError::UpstreamAuthRequired {
            server: server.id().to_string(),
            www_authenticate: www,
        }
    }
}

/// Whether an attempt that failed with `error` is repeated with a renewed token: only a 401
/// on a token the gateway obtained itself, and only once.
fn renews(
    server: &Server,
    error: &GatewayError,
    rejected: &Option<HeaderValue>,
    credential: &Option<RequestCredential>,
) -> bool {
    matches!(error, GatewayError::UpstreamUnauthorized { .. })
        && rejected.is_none()
        && credential.is_some()
        && mints_tokens(server)
}

/// Whether the gateway obtains this server's token itself (and may renew it on a 401).
fn mints_tokens(server: &Server) -> bool {
    matches!(
        server.spec.auth,
        UpstreamAuth::Oauth2ClientCredentials { .. } | UpstreamAuth::TokenExchange { .. }
    )
}

/// The gateway's base URL as clients reach it: `gateway.publicUrl`, else from `Host`.
pub fn base_url(settings: &GatewaySettings, headers: &HeaderMap) -> String {
    if let Some(url) = &settings.public_url {
        return url.trim_end_matches('/').to_string();
    }
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    format!("http://{host}")
}

impl Default for Gateway {
    fn default() -> Self {
        Self::new()
    }
}
