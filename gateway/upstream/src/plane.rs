//! The upstream plane: everything the gateway keeps about its upstreams (clients and their
//! sessions, listings, tokens, protected-resource metadata) behind one type, and the forwarding
//! pipeline of one client request to one upstream: resolve the credential, compose the headers,
//! send, renew a refused gateway-held token once, relay a refused caller credential as the
//! caller's 401. One deadline covers the whole request, renewals and retries included. The
//! renew-once rule is written once (`UpstreamPlane::renewing`) for calls and listings alike.

use crate::identity_keys::KeyFetcher;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::Value;
use switchboard_snapshot::{IdentityProviderSpec, Pinning, TlsMaterial, UpstreamAuth};
use tokio::time::Instant;

use crate::broker_login::{ProviderGrant, token_request};
use crate::call::{SessionScope, UpstreamCall};
use crate::call_span;
use crate::catalog::Catalog;
use crate::client::{RpcCall, RpcOutcome, RpcResult, Upstreams};
use crate::error::{
    ClientBuildError, ClientDocumentError, KeysError, TokenEndpointError, UpstreamError,
};
use crate::http_client::HttpClient;
use crate::identity_keys::Fetched;
use crate::listing::{ListKind, Listing, ListingRequest};
use crate::policy;
use crate::protected_resource::{ProtectedResources, auth_challenge};
use crate::request_credential::{self, RequestCredential, SHARED_PARTITION};
use crate::tokens::Tokens;
use crate::trust;
use switchboard_core::errors::ScopeChallenge;
use switchboard_core::metrics::Metrics;
use switchboard_core::scope::Caller;
use switchboard_core::table::{Model, RoutingTable, Server, base_url};
use switchboard_protocol::param_headers;
use switchboard_protocol::{Era, HEADER_MISMATCH};

/// The one tool a `userOAuth` server lists to a caller who has not connected an account there
/// (its other tools need the account to be listed at all). A model that sees only listings
/// learns the server is there and how to reach it: calling the tool gives the person the link
/// to connect (the URL elicitation any of the server's tools would give); once connected, the
/// server's own tools are listed instead.
pub const CONNECT_TOOL: &str = "connect_account";

fn connect_listing(server: &Server) -> Listing {
    let prefix = server.prefix();
    let tool = serde_json::json!({
        "name": CONNECT_TOOL,
        "title": format!("Connect your {prefix} account"),
        "description": format!(
            "Connects your own account at {prefix} ({}) to this gateway; the tools of {prefix} \
             are listed once it is connected. Calling it asks the person to open a link in \
             their browser.",
            server.url.as_str()
        ),
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": true, "openWorldHint": true},
    });
    Listing {
        items: vec![crate::listing::Item::new(ListKind::Tools, &tool)],
        warnings: Vec::new(),
        ttl_ms: None,
        // The caller's own state: never served to another.
        private: true,
        said_private: true,
        // The gateway's own tool: nothing of the upstream's to review.
        review: None,
    }
}

/// What the gateway keeps about its upstreams. Every part is a cache a replica rebuilds on
/// demand (invariant 2); [`UpstreamPlane::forget_all_but`] forgets servers that left or changed.
///
/// Its parts are its own: a face asks the plane (the methods below), never a part.
pub struct UpstreamPlane {
    upstreams: Arc<Upstreams>,
    /// Identity providers' signing keys, fetched for the tables this plane serves.
    identity_keys: Arc<KeyFetcher>,
    catalog: Catalog,
    tokens: Tokens,
    protected_resources: Arc<ProtectedResources>,
    /// Client ID Metadata Documents of brokered sign-in's clients.
    client_documents: crate::broker_login::ClientDocuments,
    /// People's own accounts (`userOAuth`): their tokens, read from the shared store.
    accounts: crate::accounts::Accounts,
    /// Search indexes over listings (`tool_search`), one per set of listings searched.
    tool_indexes: crate::tool_search::ToolIndexes,
    metrics: Arc<Metrics>,
}

impl UpstreamPlane {
    pub fn new(metrics: Arc<Metrics>) -> UpstreamPlane {
        let upstreams = Arc::new(Upstreams::new());
        let protected_resources = Arc::new(ProtectedResources::default());
        UpstreamPlane {
            accounts: crate::accounts::Accounts::new(
                upstreams.clone(),
                protected_resources.clone(),
            ),
            upstreams,
            identity_keys: Arc::default(),
            catalog: Catalog::default(),
            tokens: Tokens::default(),
            protected_resources,
            client_documents: Default::default(),
            tool_indexes: Default::default(),
            metrics,
        }
    }

    /// Takes a new table's address policy and TLS roots: called before the table serves.
    pub fn prepare(&self, table: &RoutingTable) {
        self.upstreams.set_table(table);
    }

    /// Gives a table the gateway is about to serve the one store of identity providers' keys
    /// this plane's fetcher fills (keys outlive snapshots), and has its providers fetched.
    pub fn serve_people(&self, table: &mut RoutingTable) {
        table.identity_keys = self.identity_keys.store.clone();
        self.identity_keys.set_table(table, self.upstreams.clone());
    }

    /// Forgets what belongs to servers that left `table` or changed: called once it serves, so
    /// an entry a request of the previous table adds meanwhile is gone too.
    pub fn forget_all_but(&self, table: &RoutingTable) {
        let live: std::collections::HashMap<&str, u64> =
            table.servers.iter().map(|s| (s.id(), s.revision)).collect();
        let is_live = |id: &str, rev: u64| live.get(id) == Some(&rev);
        self.catalog.retain(is_live);
        self.upstreams.retain(is_live);
        self.tokens.retain(is_live);
        self.protected_resources.retain(is_live);
    }

    /// Puts the caches' sizes into the metrics (called when metrics are scraped).
    pub fn report_cache_sizes(&self) {
        let (shared, callers, _) = self.catalog.sizes();
        self.metrics.cache_entries("listings_shared", shared);
        self.metrics.cache_entries("listings_callers", callers);
        self.metrics.cache_entries("tokens", self.tokens.size());
    }

    /// The era an upstream was found to speak, once a request has told (a `byClient` upstream
    /// counts as legacy).
    pub fn era_of(&self, server: &Server) -> Option<Era> {
        self.upstreams.era_of(server)
    }

    /// The HTTP client for a model's provider, with the model's TLS settings (the LLM face's
    /// provider calls, the operator's model probe).
    pub fn http_for_model(&self, model: &Model) -> Result<HttpClient, ClientBuildError> {
        self.upstreams.http_for_model(model)
    }

    /// The pooled HTTP client for what has no TLS settings of its own: the gateway's other
    /// replicas (hand-offs of legacy sessions and pending input).
    pub fn http_to_replicas(&self) -> Result<HttpClient, ClientBuildError> {
        self.upstreams.http()
    }

    /// The servers whose shared listing offers a tool called `name` (listings read so far).
    pub fn tool_owners(&self, name: &str) -> BTreeSet<String> {
        self.catalog.owners_of(name)
    }

    /// Whether the server's tools are known from a shared listing (one not read with a
    /// caller's own credential) cached on this replica.
    pub fn knows_shared_tools_of(&self, server: &Server) -> bool {
        self.catalog.has_tools_of(server, SHARED_PARTITION)
    }

    /// A caller-credential server's own protected-resource metadata (cached for a while), for
    /// the gateway to serve with itself as the resource.
    pub async fn upstream_resource_document(&self, server: &Server) -> Option<Value> {
        self.protected_resources
            .upstream_document(&self.upstreams, server)
            .await
    }

    /// The redirect URIs of a brokered sign-in client whose `client_id` is an https URL (its
    /// Client ID Metadata Document, fetched under the address policy and cached a few minutes).
    pub async fn client_redirect_uris(
        &self,
        client_id: &str,
    ) -> Result<Arc<Vec<String>>, ClientDocumentError> {
        self.client_documents
            .redirect_uris(&self.upstreams, client_id)
            .await
    }

    /// Redeems a brokered login's authorization code at the identity provider's token endpoint
    /// (with the gateway's PKCE verifier), as the confidential client the provider names.
    pub async fn redeem_login_code(
        &self,
        spec: &IdentityProviderSpec,
        tls: Option<&TlsMaterial>,
        token_url: &str,
        code: &str,
        redirect_uri: &str,
        verifier: &str,
    ) -> Result<ProviderGrant, TokenEndpointError> {
        let form = vec![
            ("grant_type", "authorization_code".to_string()),
            ("code", code.to_string()),
            ("redirect_uri", redirect_uri.to_string()),
            ("code_verifier", verifier.to_string()),
        ];
        token_request(&self.upstreams, spec, tls, token_url, form).await
    }

    /// Refreshes a person's brokered login at the identity provider with the refresh token it
    /// gave.
    pub async fn refresh_login(
        &self,
        spec: &IdentityProviderSpec,
        tls: Option<&TlsMaterial>,
        token_url: &str,
        refresh_token: &str,
    ) -> Result<ProviderGrant, TokenEndpointError> {
        let form = vec![
            ("grant_type", "refresh_token".to_string()),
            ("refresh_token", refresh_token.to_string()),
        ];
        token_request(&self.upstreams, spec, tls, token_url, form).await
    }

    /// An identity provider's signing keys (and login endpoints), fetched now as a gateway
    /// fetches them: discovery, then the key set, with the provider's TLS settings and under
    /// the address policy (the operator's probe; gateways keep theirs fetched by
    /// [`Self::serve_people`]).
    pub async fn fetch_identity_keys(
        &self,
        spec: &IdentityProviderSpec,
        tls: Option<&TlsMaterial>,
    ) -> Result<Fetched, KeysError> {
        crate::identity_keys::fetch(&self.upstreams, spec, tls).await
    }

    /// Runs `attempt` with the server's per-request credential; when the upstream refuses a
    /// token the gateway obtained itself (401), renews it and runs `attempt` once more. A 401
    /// on the caller's own credential is relayed as the caller's 401 (see [`Self::relay_auth`]).
    ///
    /// `attempt` takes the credential by value (a reference-counted header value) so that its
    /// future borrows nothing the loop holds: an async closure over a borrowed argument is not
    /// `Send` for every lifetime, which a spawned relay needs.
    async fn renewing<T, F>(
        &self,
        caller: &Caller,
        server: &Server,
        mut attempt: impl FnMut(Option<RequestCredential>) -> F,
    ) -> Result<T, UpstreamError>
    where
        F: Future<Output = Result<T, UpstreamError>>,
    {
        let mut rejected = None;
        loop {
            let credential = self.credential(caller, server, rejected.as_ref()).await?;
            match attempt(credential.clone()).await {
                Err(e) if renews(server, &e, &rejected, &credential) => {
                    rejected = credential.map(|c| c.value);
                }
                other => return other.map_err(|e| self.relay_auth(caller, server, e)),
            }
        }
    }

    /// A server's listing of one kind for the caller's credential partition, cached or
    /// walked afresh (with the same renew-once rule as [`Self::call`]).
    ///
    /// A `userOAuth` server's tools, for a caller who has not connected an account there, are
    /// one tool: [`CONNECT_TOOL`] (see there).
    pub async fn listing(
        &self,
        caller: &Caller,
        server: &Server,
        kind: ListKind,
    ) -> Result<Arc<Listing>, UpstreamError> {
        let ttl = caller.table.settings.listing_ttl;
        match self.listing_fresher_than(caller, server, kind, ttl).await {
            Err(UpstreamError::AccountNotConnected { .. }) if kind == ListKind::Tools => {
                Ok(Arc::new(connect_listing(server)))
            }
            Ok(listing) => {
                if let Some(review) = &listing.review {
                    note_review(server, review);
                }
                Ok(listing)
            }
            listed => listed,
        }
    }

    /// Takes the tools a server holds out of a listing relayed as the upstream gave it (the
    /// single-server endpoint's), and notes what the review flags on the request's record.
    pub fn review_relayed(&self, server: &Server, tools: &mut Vec<Value>) {
        trust::review_relayed(server, tools);
    }

    /// Refuses a call of a tool its server holds (`tools.pinning: hold`): a name with no
    /// approval at once, with no I/O; an approved name when the server's latest listing for
    /// this caller (walked now if this replica has none fresh) shows a definition that is not
    /// the approved one.
    async fn check_held(
        &self,
        caller: &Caller,
        server: &Server,
        tool: &str,
    ) -> Result<(), UpstreamError> {
        let held = |why: String| {
            let shown = switchboard_core::route::prefixed_name(server.prefix(), tool);
            switchboard_core::audit::note(|n| n.flag_tool(format!("{shown}: held: {why}")));
            Err(UpstreamError::ToolHeld {
                server: server.id().to_string(),
                name: tool.to_string(),
                why,
            })
        };
        // Nothing approved, or not this name: held without looking at its definition.
        let approved = &server.spec.tools.approved;
        let unseen = if approved.is_empty() {
            Some(switchboard_trust::Standing::Unpinned)
        } else {
            (!approved.contains_key(tool)).then_some(switchboard_trust::Standing::New)
        };
        if let Some(why) = unseen.as_ref().and_then(switchboard_trust::Standing::words) {
            return held(why);
        }
        let ttl = caller.table.settings.listing_ttl;
        let listing = self
            .listing_fresher_than(caller, server, ListKind::Tools, ttl)
            .await?;
        match listing.review.as_ref().and_then(|r| r.held(tool)) {
            Some(why) => held(why.to_string()),
            None => Ok(()),
        }
    }

    /// A call of [`CONNECT_TOOL`] on a `userOAuth` server: without an account, the error every
    /// tool of the server gives (the face makes it a URL elicitation); with one, a result
    /// saying so, unless the upstream lists a tool of that name itself (`None`: call it).
    async fn connect_tool(
        &self,
        caller: &Caller,
        server: &Server,
    ) -> Result<Option<RpcOutcome>, UpstreamError> {
        let ttl = caller.table.settings.listing_ttl;
        let listing = self
            .listing_fresher_than(caller, server, ListKind::Tools, ttl)
            .await?;
        if listing.items.iter().any(|t| t.id() == Some(CONNECT_TOOL)) {
            return Ok(None);
        }
        let text = format!(
            "Your account at {} is connected: list the tools again to see its tools.",
            server.prefix()
        );
        Ok(Some(RpcOutcome::Result(RpcResult::Parsed(
            serde_json::json!({
                "content": [{"type": "text", "text": text}],
            }),
        ))))
    }

    /// Lists a server's tools now with the gateway's own credential, as no caller: the
    /// readiness probe the operator runs. Servers whose catalog depends on the caller's
    /// credential cannot be probed this way (the caller has none to give).
    pub async fn probe(
        &self,
        table: Arc<RoutingTable>,
        server_id: &str,
    ) -> Result<Arc<Listing>, UpstreamError> {
        let server = table.server_by_id(server_id).cloned().ok_or_else(|| {
            UpstreamError::ServerNotFound {
                server: server_id.to_string(),
            }
        })?;
        let caller = Caller::probe(table, &server);
        self.listing_fresher_than(&caller, &server, ListKind::Tools, Duration::ZERO)
            .await
    }

    /// An OpenAPI server's selected operations that could not be served as tools, each with
    /// its document path and why: from its inline document, or the fetched one as the last
    /// listing left it (`None` for other servers, or before a fetched document was read).
    pub async fn openapi_problems(&self, server: &Server) -> Option<Vec<String>> {
        let compiled = match server.openapi.as_ref()? {
            switchboard_core::table::OpenApiTools::Compiled(compiled) => compiled.clone(),
            switchboard_core::table::OpenApiTools::Fetched(_) => {
                let state = self.upstreams.state(server);
                let cached = state.document.lock().await;
                cached.as_ref()?.1.clone()
            }
        };
        Some(compiled.problems.iter().map(ToString::to_string).collect())
    }

    /// Whether the caller's own listing of `server`'s tools says what it serves: its
    /// credential is the caller's, or its upstream keeps its listings per caller (private,
    /// with callers' headers forwarded). The ownership map speaks for the other servers.
    pub fn lists_tools_per_caller(&self, server: &Server) -> bool {
        server.spec.auth.uses_caller_credential()
            || self.catalog.lists_per_caller(server, ListKind::Tools)
    }

    /// The tools of `searched` that best match `query` (words: what the tool does, its name,
    /// its arguments), at most `limit`, among those the caller may call: listed as the caller
    /// would see them, with their input schemas, so a model can call one at once.
    pub async fn find_tools(
        &self,
        caller: &Caller,
        searched: crate::Searched<'_>,
        query: &str,
        limit: usize,
    ) -> crate::FoundTools {
        let sources = crate::tool_search::sources(caller, searched);
        let listings = futures_util::future::join_all(
            sources
                .iter()
                .map(|(_, server)| self.listing(caller, server, ListKind::Tools)),
        )
        .await;
        self.tool_indexes
            .find(caller, searched, sources, listings, query, limit)
    }

    async fn listing_fresher_than(
        &self,
        caller: &Caller,
        server: &Server,
        kind: ListKind,
        ttl: Duration,
    ) -> Result<Arc<Listing>, UpstreamError> {
        let page_cap = caller.table.settings.listing_page_cap;
        let result = self
            .renewing(caller, server, |credential| async move {
                let request = ListingRequest {
                    server,
                    caller_tag: caller.tag(),
                    caller_headers: &caller.headers,
                    credential: credential.as_ref(),
                    kind,
                };
                self.catalog
                    .listing(&self.upstreams, &request, ttl, page_cap, &self.metrics)
                    .await
            })
            .await;
        if let Err(e) = &result {
            self.metrics.listing_failed(&server.metric_name);
            // A caller's own authentication (or own account) is theirs to provide, not a fault.
            if !matches!(
                e,
                UpstreamError::AuthRequired { .. } | UpstreamError::AccountNotConnected { .. }
            ) {
                tracing::warn!(server = server.id(), kind = kind.method(), error = %e, "upstream listing failed");
            }
        }
        result
    }

    /// `tools/call` of `tool` (the upstream's own name) on `server`, answered whole: the
    /// result, or an error. `shown_name` is the name the caller used, for errors. (An upstream
    /// 403 is a tool result with `isError`, as on every call: [`Self::call`].)
    pub async fn call_tool(
        &self,
        caller: &Caller,
        server: &Server,
        tool: &str,
        arguments: Option<Value>,
        shown_name: &str,
    ) -> Result<Value, UpstreamError> {
        let mut params = serde_json::json!({ "name": tool });
        if let Some(arguments) = arguments {
            params["arguments"] = arguments;
        }
        match self
            .call(
                caller,
                server,
                &UpstreamCall::whole("tools/call", Some(params)),
            )
            .await
        {
            Ok(RpcOutcome::Result(result)) => Ok(result.into_value()),
            Ok(RpcOutcome::Error(error, _)) => Err(upstream_rpc_error(server, shown_name, error)),
            Ok(RpcOutcome::Stream(_)) => Err(UpstreamError::Unavailable {
                server: server.id().to_string(),
                detail: "answered a whole-answer request with a stream".into(),
            }),
            Err(e) => Err(e),
        }
    }

    /// One request to a server's upstream under its `timeout`, with the server's credential.
    ///
    /// A gateway-held token the upstream refuses (401) is renewed once and the request
    /// repeats; a 401 on a caller's own credential is relayed to the caller.
    pub async fn call(
        &self,
        caller: &Caller,
        server: &Server,
        request: &UpstreamCall<'_>,
    ) -> Result<RpcOutcome, UpstreamError> {
        // A tool call some configuration looks at (the connect tool, a held tool, argument
        // rules, a policy hook) takes the checked path, boxed; any other call goes straight on,
        // paying four field reads for the checks it does not need.
        if request.method == "tools/call" && checks_tool_calls(caller, server) {
            return Box::pin(self.call_checked(caller, server, request)).await;
        }
        self.call_upstream(caller, server, request).await
    }

    /// A tool call past the checks its server and caller configure: the connect tool answered,
    /// a held tool refused, the caller's argument rules and bindings, the policy hook.
    async fn call_checked(
        &self,
        caller: &Caller,
        server: &Server,
        request: &UpstreamCall<'_>,
    ) -> Result<RpcOutcome, UpstreamError> {
        if request.method == "tools/call"
            && server.spec.auth.is_user_account()
            && request
                .params
                .as_ref()
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                == Some(CONNECT_TOOL)
            && let Some(answer) = Box::pin(self.connect_tool(caller, server)).await?
        {
            return Ok(answer);
        }
        if request.method == "tools/call"
            && let Some(tool) = request
                .params
                .as_ref()
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
        {
            caller
                .check_scopes(server, tool)
                .map_err(UpstreamError::ScopeRequired)?;
        }
        if request.method == "tools/call"
            && server.spec.tools.pinning == Pinning::Hold
            && let Some(tool) = request
                .params
                .as_ref()
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
        {
            Box::pin(self.check_held(caller, server, tool)).await?;
        }
        // The caller's argument rules, before any I/O; bound arguments replace the call's.
        let rebound: UpstreamCall<'_>;
        let request = match request.method {
            "tools/call" => match bind_arguments(caller, server, request)? {
                Some(params) => {
                    rebound = UpstreamCall {
                        method: request.method,
                        params: Some(params.into()),
                        stream: request.stream,
                        session: request.session,
                        modern_client: request.modern_client,
                        log_level: request.log_level,
                    };
                    &rebound
                }
                None => request,
            },
            _ => request,
        };
        if request.method == "tools/call"
            && let Some(hook) = policy::policy_for(caller, server)
        {
            return Box::pin(self.call_with_policy(caller, server, request, hook)).await;
        }
        self.call_upstream(caller, server, request).await
    }

    /// A tool call checked by the policy service before the upstream is asked and after it
    /// answered (see [`crate::policy`]). A response check needs the whole result: the call is
    /// not streamed then.
    async fn call_with_policy(
        &self,
        caller: &Caller,
        server: &Server,
        request: &UpstreamCall<'_>,
        hook: &switchboard_snapshot::PolicyHook,
    ) -> Result<RpcOutcome, UpstreamError> {
        use switchboard_snapshot::PolicyPhase;
        let mut params = request
            .params
            .as_deref()
            .cloned()
            .unwrap_or_else(|| serde_json::json!({}));
        let tool = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if hook.checks(PolicyPhase::Request) {
            let decision = policy::check(
                &self.upstreams,
                hook,
                PolicyPhase::Request,
                policy::Checked {
                    caller,
                    server,
                    tool: &tool,
                    arguments: params.get("arguments"),
                    result: None,
                },
            )
            .await?;
            if let policy::Decision::Modify(arguments) = decision {
                params["arguments"] = arguments;
            }
        }
        let checks_result = hook.checks(PolicyPhase::Response);
        let checked = UpstreamCall {
            method: request.method,
            params: Some(params.into()),
            stream: request.stream && !checks_result,
            session: request.session,
            modern_client: request.modern_client,
            log_level: request.log_level,
        };
        let outcome = self.call_upstream(caller, server, &checked).await?;
        if !checks_result {
            return Ok(outcome);
        }
        match outcome {
            RpcOutcome::Result(result) => {
                let result = result.into_value();
                let arguments = checked.params.as_ref().and_then(|p| p.get("arguments"));
                let decision = policy::check(
                    &self.upstreams,
                    hook,
                    PolicyPhase::Response,
                    policy::Checked {
                        caller,
                        server,
                        tool: &tool,
                        arguments,
                        result: Some(&result),
                    },
                )
                .await?;
                Ok(RpcOutcome::Result(RpcResult::Parsed(match decision {
                    policy::Decision::Allow => result,
                    policy::Decision::Modify(replaced) => replaced,
                })))
            }
            // An upstream's error is no result to check; a stream cannot be (not asked for).
            other => Ok(other),
        }
    }

    /// One request to the upstream, past every check: the server's limits, its deadline, the
    /// credential (renewed once), the 403 rule.
    async fn call_upstream(
        &self,
        caller: &Caller,
        server: &Server,
        request: &UpstreamCall<'_>,
    ) -> Result<RpcOutcome, UpstreamError> {
        // The server's limits refuse before any I/O; a streamed answer holds the slot.
        let admission = caller
            .table
            .limiters
            .admit_server(server.id(), &self.metrics)?;
        let deadline = Instant::now() + server.spec.timeout;
        // The call's client span: its HTTP exchanges (token, handshake, retries) are children.
        let span = call_span::start(server, request.method, request.params.as_ref());
        use tracing::Instrument as _;
        // Boxed: the exchange's state (credential, era, session, HTTP) is most of a call's
        // future, and every async layer above would otherwise hold it inline and move it
        // again as it is built (a few KB copied per layer, per call). Boxed before it is
        // instrumented, so that the span's wrapper moves a pointer, not the state.
        let outcome = Box::pin(self.renewing(caller, server, |credential| async move {
            self.call_with_credential(caller, server, request, credential.as_ref(), deadline)
                .await
        }))
        .instrument(span.clone())
        .await;
        finish_call_span(&span, request.method, &outcome);
        match outcome {
            Ok(RpcOutcome::Stream(mut stream)) => {
                stream.hold(admission);
                stream.trace(span);
                Ok(RpcOutcome::Stream(stream))
            }
            // The one place of this rule: an upstream 403 on a tool call is the tool's answer,
            // a result with `isError` (the tool ran into a wall, not the gateway; only a 401
            // means re-authenticate, docs/architecture.md "Errors"), for MCP, REST and the LLM
            // loop alike. (The call's span still says the upstream refused.)
            Err(UpstreamError::Forbidden { server: id, .. }) if request.method == "tools/call" => {
                tracing::warn!(server = %id, "upstream refused a tool call (HTTP 403)");
                Ok(RpcOutcome::Result(RpcResult::Parsed(serde_json::json!({
                    "content": [{"type": "text", "text": format!("upstream {id:?} refused the request (HTTP 403)")}],
                    "isError": true,
                }))))
            }
            other => other,
        }
    }

    /// The per-request credential of a server whose credential is not static.
    async fn credential(
        &self,
        caller: &Caller,
        server: &Server,
        rejected: Option<&HeaderValue>,
    ) -> Result<Option<RequestCredential>, UpstreamError> {
        if !server.spec.auth.resolved_per_request() {
            // Nothing to resolve (the common case, on every call): no client fetched, and
            // the resolver's state stays out of the call's future.
            return Ok(None);
        }
        if server.spec.auth.is_user_account() {
            return Box::pin(self.account_credential(caller, server, rejected))
                .await
                .map(Some);
        }
        Box::pin(request_credential::resolve(
            &self.tokens,
            &self.upstreams.http_for(server)?,
            caller.credential_context(),
            server,
            rejected,
        ))
        .await
    }

    /// Sends a request with its credential. A legacy client's tool call gets the
    /// `Mcp-Param-*` headers the tool's schema calls for; if the upstream still answers
    /// HeaderMismatch (its schema changed, or this replica never listed it), the tools are
    /// listed afresh and the call repeats once.
    async fn call_with_credential(
        &self,
        caller: &Caller,
        server: &Server,
        request: &UpstreamCall<'_>,
        credential: Option<&RequestCredential>,
        deadline: Instant,
    ) -> Result<RpcOutcome, UpstreamError> {
        // Only a 2026-07-28 upstream reads Mcp-Param-* headers; a 2026-07-28 client sends its
        // own (or leaves them out and gets the upstream's answer to that).
        let derive = request.method == "tools/call"
            && !request.modern_client
            && self.upstreams.era_of(server) != Some(Era::Rev2025)
            && !param_headers::caller_sent_any(&caller.headers);
        if !derive {
            return self
                .send(caller, server, request, credential, None, deadline)
                .await;
        }
        let partition = credential.map_or(SHARED_PARTITION, |c| c.partition);
        // (Members read alone: the parameters go upstream from their text.)
        let params = request.params.as_ref();
        let tool = params
            .and_then(|p| p.str_member("name"))
            .unwrap_or_default();
        let derived = || {
            let schema = self.catalog.header_schema(server, partition, &tool)?;
            let arguments = params.and_then(|p| p.member("arguments"));
            Some(param_headers::derive(&schema, arguments.as_deref()))
        };
        let headers = derived();
        let outcome = self
            .send(
                caller,
                server,
                request,
                credential,
                headers.as_ref(),
                deadline,
            )
            .await;
        let mismatch = matches!(&outcome, Ok(RpcOutcome::Error(e, _))
            if e.get("code").and_then(Value::as_i64) == Some(HEADER_MISMATCH));
        if !mismatch {
            return outcome;
        }
        let settings = &caller.table.settings;
        // (Rare: boxed, so its state stays out of every call's future.)
        let relisted = Box::pin(self.catalog.listing(
            &self.upstreams,
            &ListingRequest {
                server,
                caller_tag: caller.tag(),
                caller_headers: &caller.headers,
                credential,
                kind: ListKind::Tools,
            },
            Duration::ZERO,
            settings.listing_page_cap,
            &self.metrics,
        ))
        .await;
        match relisted {
            Ok(_) => {
                let headers = derived();
                self.send(
                    caller,
                    server,
                    request,
                    credential,
                    headers.as_ref(),
                    deadline,
                )
                .await
            }
            Err(_) => outcome,
        }
    }

    async fn send(
        &self,
        caller: &Caller,
        server: &Server,
        request: &UpstreamCall<'_>,
        credential: Option<&RequestCredential>,
        param_headers: Option<&HeaderMap>,
        deadline: Instant,
    ) -> Result<RpcOutcome, UpstreamError> {
        let started = Instant::now();
        let outcome = self
            .upstreams
            .call(RpcCall {
                request,
                server,
                caller_headers: &caller.headers,
                param_headers,
                credential,
                deadline,
                budget: server.spec.timeout,
            })
            .await;
        let label = match &outcome {
            Ok(RpcOutcome::Result(_)) => "ok",
            Ok(RpcOutcome::Error(..)) => "rpc_error",
            Ok(RpcOutcome::Stream(_)) => "stream",
            Err(e) => e.outcome(),
        };
        self.metrics
            .upstream_call(&server.upstream_series, label, started.elapsed());
        outcome
    }

    /// The upstream's `initialize` result when it speaks a legacy revision (from the session
    /// this scope uses), `None` when it speaks 2026-07-28.
    pub async fn legacy_identity(
        &self,
        caller: &Caller,
        server: &Server,
        session: SessionScope,
    ) -> Result<Option<Value>, UpstreamError> {
        let credential = self.credential(caller, server, None).await?;
        let handshake = UpstreamCall::handshake(session);
        let call = RpcCall {
            request: &handshake,
            ..session_call(caller, server, credential.as_ref())
        };
        self.upstreams
            .legacy_identity(call)
            .await
            .map_err(|e| self.relay_auth(caller, server, e))
    }

    /// Delivers a client's reply to a server-to-client request to the upstream session that
    /// asked (named by the sealed reply route); returns the upstream's HTTP status.
    pub async fn deliver_reply(
        &self,
        caller: &Caller,
        server: &Server,
        session: Option<HeaderValue>,
        version: HeaderValue,
        body: Vec<u8>,
    ) -> Result<StatusCode, UpstreamError> {
        let credential = self.credential(caller, server, None).await?;
        self.upstreams
            .deliver_reply(
                session_call(caller, server, credential.as_ref()),
                session,
                version,
                body,
            )
            .await
    }

    /// A `userOAuth` server's credential: the caller's own access token, from the shared store
    /// (refreshed there when due, or when the upstream just `rejected` it). No account: the
    /// caller is asked to connect one; the store down: a refusal that names it, never another
    /// account.
    async fn account_credential(
        &self,
        caller: &Caller,
        server: &Server,
        rejected: Option<&HeaderValue>,
    ) -> Result<RequestCredential, UpstreamError> {
        use crate::accounts::AccountError;
        let tag = caller.tag();
        let rejected = rejected
            .and_then(|v| v.to_str().ok())
            .map(|v| switchboard_core::credentials::strip_scheme(v, "Bearer"));
        let refreshes = self.accounts.refreshes();
        let token = self
            .accounts
            .access_token(
                &caller.table.store,
                tag,
                server,
                rejected,
                caller.table.settings.store.account_cache,
            )
            .await;
        if self.accounts.refreshes() > refreshes {
            self.metrics.account_event(&server.metric_name, "refreshed");
        }
        match token {
            Ok(token) => {
                let value =
                    switchboard_core::credentials::credential_value(&format!("Bearer {token}"))
                        .ok_or_else(|| UpstreamError::Unavailable {
                            server: server.id().to_string(),
                            detail: "the account's token is not a header value".into(),
                        })?;
                Ok(RequestCredential {
                    value,
                    partition: request_credential::partition_of(tag),
                })
            }
            Err(AccountError::NotConnected) => {
                self.metrics
                    .account_event(&server.metric_name, "not_connected");
                let url =
                    switchboard_core::accounts::connect_url(caller, server, SystemTime::now())
                        .unwrap_or_default();
                Err(UpstreamError::AccountNotConnected {
                    server: server.id().to_string(),
                    url,
                })
            }
            Err(AccountError::Store(e)) => {
                tracing::warn!(server = server.id(), error = %e, "a call that needs a person's account was refused: the state store does not answer");
                self.metrics
                    .account_event(&server.metric_name, "store_unavailable");
                Err(UpstreamError::StoreUnavailable {
                    server: server.id().to_string(),
                })
            }
            Err(AccountError::Server(detail)) => Err(UpstreamError::Unavailable {
                server: server.id().to_string(),
                detail: format!("its authorization server: {detail}"),
            }),
        }
    }

    /// Where a browser connecting an account for `server` is sent: the upstream's
    /// authorization endpoint, with `state` and the PKCE `challenge`.
    pub async fn account_authorization_url(
        &self,
        server: &Server,
        redirect_uri: &str,
        state: &str,
        challenge: &str,
    ) -> Result<String, UpstreamError> {
        self.accounts
            .authorization_url(server, redirect_uri, state, challenge)
            .await
            .map_err(|e| account_failure(server, e))
    }

    /// Redeems the code the upstream's server sent back and keeps `tag`'s account in `store`.
    pub async fn connect_account(
        &self,
        store: &switchboard_store::Store,
        tag: &[u8; 32],
        server: &Server,
        code: &str,
        redirect_uri: &str,
        verifier: &str,
    ) -> Result<(), UpstreamError> {
        self.accounts
            .connect(store, tag, server, code, redirect_uri, verifier)
            .await
            .map_err(|e| account_failure(server, e))?;
        self.metrics.account_event(&server.metric_name, "connected");
        Ok(())
    }

    /// When `tag`'s account for `server` was connected (Unix seconds), if it is.
    pub async fn account_connected_at(
        &self,
        store: &switchboard_store::Store,
        tag: &[u8; 32],
        server: &Server,
    ) -> Result<Option<u64>, UpstreamError> {
        self.accounts
            .connected(store, tag, server)
            .await
            .map(|record| record.map(|r| r.connected_at))
            .map_err(|e| account_failure(server, e))
    }

    /// Deletes `tag`'s account for `server`, revoking it at the upstream where it can;
    /// `Ok(true)` when the upstream took the revocation.
    pub async fn disconnect_account(
        &self,
        store: &switchboard_store::Store,
        tag: &[u8; 32],
        server: &Server,
    ) -> Result<bool, UpstreamError> {
        let revoked = self
            .accounts
            .disconnect(store, tag, server)
            .await
            .map_err(|e| account_failure(server, e))?;
        self.metrics
            .account_event(&server.metric_name, "disconnected");
        Ok(revoked)
    }

    /// Closes the upstream sessions this replica opened for a legacy client session.
    pub async fn close_client_sessions(&self, caller: &Caller, client: u64) {
        for server in caller.table.servers.iter() {
            if !self.upstreams.has_client_sessions(server, client) {
                continue;
            }
            let Ok(credential) = self.credential(caller, server, None).await else {
                continue;
            };
            self.upstreams
                .close_client_sessions(session_call(caller, server, credential.as_ref()), client)
                .await;
        }
    }

    /// A 401 from an upstream that uses the caller's own credential becomes the caller's 401,
    /// with a challenge that points at the gateway's protected-resource metadata for the
    /// server (whose authorization servers are the upstream's). An expected re-auth, so it
    /// logs at info.
    fn relay_auth(&self, caller: &Caller, server: &Server, error: UpstreamError) -> UpstreamError {
        if let UpstreamError::Forbidden { challenge, .. } = &error {
            let challenge = challenge.clone();
            return self.relay_scope_challenge(caller, server, challenge.as_deref(), error);
        }
        let UpstreamError::Unauthorized { challenge, .. } = &error else {
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
        let resource_metadata = server_metadata_url(caller, server);
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
        UpstreamError::AuthRequired {
            server: server.id().to_string(),
            www_authenticate: www,
        }
    }

    /// A 403 `insufficient_scope` from an upstream that uses the caller's own credential
    /// (SEP-2350) becomes the caller's 403: the upstream's `scope` and description, and, as
    /// a relayed 401's, `resource_metadata` pointing at the gateway's metadata for the server.
    /// Any other 403 stays the upstream's refusal (a tool call's is its `isError` result).
    fn relay_scope_challenge(
        &self,
        caller: &Caller,
        server: &Server,
        challenge: Option<&str>,
        error: UpstreamError,
    ) -> UpstreamError {
        if !server.spec.auth.uses_caller_credential() {
            return error;
        }
        let upstream = challenge.map(auth_challenge::parse).unwrap_or_default();
        if upstream.get("error").map(String::as_str) != Some("insufficient_scope") {
            return error;
        }
        if let Some(url) = upstream.get("resource_metadata") {
            self.protected_resources.remember_source(server, url);
        }
        let metadata = server_metadata_url(caller, server);
        tracing::info!(
            server = server.id(),
            "upstream asked the caller for more scope (HTTP 403 relayed)"
        );
        self.metrics.auth_relayed(&server.metric_name);
        UpstreamError::ScopeRequired(ScopeChallenge::new(
            server.id(),
            upstream.get("scope").cloned().unwrap_or_default(),
            upstream
                .get("error_description")
                .cloned()
                .unwrap_or_else(|| format!("upstream {} asks for more scope", server.id())),
            &metadata,
        ))
    }
}

/// The gateway's protected-resource metadata for a server that uses the caller's own credential
/// (whose authorization servers are the upstream's): where a relayed challenge points.
fn server_metadata_url(caller: &Caller, server: &Server) -> String {
    let base = base_url(&caller.table.settings, &caller.headers);
    format!(
        "{base}/.well-known/oauth-protected-resource/mcp/{}",
        server.prefix()
    )
}

/// An exchange about an upstream session rather than a method call (its handshake, a reply to
/// the upstream's request, its end), under the server's timeout.
fn session_call<'a>(
    caller: &'a Caller,
    server: &'a Server,
    credential: Option<&'a RequestCredential>,
) -> RpcCall<'a> {
    RpcCall {
        request: &SESSION_EXCHANGE,
        server,
        caller_headers: &caller.headers,
        param_headers: None,
        credential,
        deadline: Instant::now() + server.spec.timeout,
        budget: server.spec.timeout,
    }
}

/// What a session exchange asks, when it asks anything: the handshake on the shared session.
static SESSION_EXCHANGE: UpstreamCall<'static> = UpstreamCall::handshake(SessionScope {
    client: 0,
    capabilities: 0,
});

/// An account operation's failure as the plane says it.
fn account_failure(server: &Server, e: crate::accounts::AccountError) -> UpstreamError {
    use crate::accounts::AccountError;
    let id = server.id().to_string();
    match e {
        AccountError::NotConnected => UpstreamError::AccountNotConnected {
            server: id,
            url: String::new(),
        },
        AccountError::Store(_) => UpstreamError::StoreUnavailable { server: id },
        AccountError::Server(detail) => UpstreamError::Unavailable {
            server: id,
            detail: format!("its authorization server: {detail}"),
        },
    }
}

/// Whether an attempt that failed with `error` is repeated with a renewed token: only a 401
/// on a token the gateway obtained itself, and only once.
fn renews(
    server: &Server,
    error: &UpstreamError,
    rejected: &Option<HeaderValue>,
    credential: &Option<RequestCredential>,
) -> bool {
    matches!(error, UpstreamError::Unauthorized { .. })
        && rejected.is_none()
        && credential.is_some()
        && mints_tokens(server)
}

/// Whether the gateway obtains this server's token itself (and may renew it on a 401).
fn mints_tokens(server: &Server) -> bool {
    matches!(
        server.spec.auth,
        UpstreamAuth::Oauth2ClientCredentials { .. }
            | UpstreamAuth::TokenExchange { .. }
            | UpstreamAuth::UserOauth { .. }
    )
}

/// An upstream JSON-RPC error of a tool call: an unknown tool is a 404 like ours; anything
/// else keeps the upstream's error object.
fn upstream_rpc_error(server: &Server, name: &str, error: Value) -> UpstreamError {
    let code = error.get("code").and_then(Value::as_i64);
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let lower = message.to_ascii_lowercase();
    if code == Some(-32602) && (lower.contains("unknown tool") || lower.contains("not found")) {
        return UpstreamError::ToolNotFound {
            name: name.to_string(),
        };
    }
    UpstreamError::Rpc {
        server: server.id().to_string(),
        code: code.unwrap_or(-32603),
        message: message.to_string(),
        error,
    }
}

/// What the call came to: a failure marks its span ([`call_span::start`]) (a stream's answer is told later, by
/// [`call_span::answered`]).
fn finish_call_span(
    span: &tracing::Span,
    method: &str,
    outcome: &Result<RpcOutcome, UpstreamError>,
) {
    if span.is_disabled() {
        return;
    }
    match outcome {
        Ok(RpcOutcome::Error(error, _)) => call_span::rpc_error(span, error),
        Ok(RpcOutcome::Result(result)) if method == "tools/call" => {
            let failed = match result {
                RpcResult::Raw(raw) => switchboard_protocol::jsonrpc::is_tool_error(raw.get()),
                RpcResult::Parsed(value) => value.get("isError") == Some(&Value::Bool(true)),
            };
            if failed {
                switchboard_telemetry::span::fail(span, "tool_error", None);
            }
        }
        Ok(_) => {}
        Err(e) => switchboard_telemetry::span::fail(span, e.outcome(), Some(e.to_string())),
    }
}

#[cfg(test)]
#[path = "plane_tests.rs"]
mod tests;

/// Notes on the request's audit record what a listing's review flagged and held (named as the
/// aggregate names them).
fn note_review(server: &Server, review: &crate::listing::ListingReview) {
    if review.held.is_empty() && review.flagged.is_empty() {
        return;
    }
    switchboard_core::audit::note(|n| {
        for held in &review.held {
            let shown = switchboard_core::route::prefixed_name(server.prefix(), &held.name);
            n.flag_tool(format!("{shown}: held: {}", held.why));
        }
        for flagged in &review.flagged {
            let shown = switchboard_core::route::prefixed_name(server.prefix(), &flagged.name);
            n.flag_tool(format!("{shown}: {}", flagged.what));
        }
    });
}

/// A tool call's params with the caller's bound arguments set (`None`: as they are), or the
/// refusal of its argument rules.
fn bind_arguments(
    caller: &Caller,
    server: &Server,
    request: &UpstreamCall<'_>,
) -> Result<Option<Value>, UpstreamError> {
    let params = request.params.as_deref();
    let Some(tool) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return Ok(None);
    };
    let bound = caller
        .bound_arguments(server, tool, params.and_then(|p| p.get("arguments")))
        .map_err(UpstreamError::ArgumentRefused)?;
    Ok(bound.map(|arguments| {
        let mut params = params.cloned().unwrap_or_else(|| serde_json::json!({}));
        params["arguments"] = arguments;
        params
    }))
}

/// Whether a tool call of `caller` on `server` has anything to be checked for.
fn checks_tool_calls(caller: &Caller, server: &Server) -> bool {
    server.spec.auth.is_user_account()
        || (caller.person.is_some() && !server.spec.tools.required_scopes.is_empty())
        || server.spec.tools.pinning == Pinning::Hold
        || caller.has_argument_rules()
        || policy::policy_for(caller, server).is_some()
}
