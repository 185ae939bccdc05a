//! Who is calling and what they may reach. Every path asks here before any upstream I/O
//! (docs/architecture.md, invariant 4).

use std::sync::Arc;
use std::time::SystemTime;

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};

use crate::errors::{GatewayError, OutOfScope, ScopeChallenge};
use crate::limits::LimitPermit;
use crate::metrics::Metrics;
use crate::people::{Person, Signed, unverified_issuer};
use crate::route::{prefixed_name, split_prefixed_uri};
use crate::table::{Key, RoutingTable, Server};
use crate::workload_identity::{ServiceAccount, looks_like_jwt};

/// An authenticated request: the key, the routing table it started with, and its headers.
pub struct Caller {
    /// The key presented, or the one a ServiceAccount token stands for, or the first (by id)
    /// of the keys that grant a signed-in person their scope.
    pub key: Arc<Key>,
    /// A signed-in person: who, and the further keys that grant them scope (the union of what
    /// `key` and these reach is theirs; every one's limits apply).
    pub person: Option<Arc<Person>>,
    /// The workload whose ServiceAccount token stood for the key (the key was not presented
    /// itself).
    pub(crate) service_account: Option<Arc<ServiceAccount>>,
    also: Vec<Arc<Key>>,
    pub table: Arc<RoutingTable>,
    pub headers: HeaderMap,
    /// The caller's own `Authorization`, when the gateway key came in `X-Switchboard-Key`
    /// (only then can `Authorization` be the caller's credential for an upstream).
    pub own_authorization: Option<HeaderValue>,
    /// A signed-in person's credential for token exchanges on their behalf (`tokenExchange`
    /// only; `passthrough` never gets it).
    pub person_subject: Option<HeaderValue>,
    /// A person's: the path of the protected resource they called (`/mcp`, `/mcp/<prefix>`,
    /// `/mcp-rest`, `/v1`), where a scope challenge points them.
    resource: Option<String>,
    /// The key's concurrency slot, held as long as the caller is (a relayed stream holds it),
    /// and those of a person's further keys (apart: a caller with one key allocates nothing).
    _admission: Option<LimitPermit>,
    _also_admitted: Vec<LimitPermit>,
}

/// The header that carries the gateway key when `Authorization` carries the caller's own
/// credential (for `passthrough` and `tokenExchange` servers).
pub const KEY_HEADER: HeaderName = HeaderName::from_static("x-switchboard-key");

/// `X-MCP-Servers: a, b`: a caller narrowing its scope to these servers for one request. (A
/// constant: a name given as text is parsed on every lookup.)
const SERVERS_HEADER: HeaderName = HeaderName::from_static("x-mcp-servers");

/// The gateway key: `X-Switchboard-Key: <key>` if present, else `Authorization: Bearer <key>`.
pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(key) = headers.get(KEY_HEADER) {
        return key.to_str().ok().map(str::trim).filter(|k| !k.is_empty());
    }
    // Read as bytes (`to_str`'s check, `str`'s trimming and splitting cost a call about 300
    // instructions more): a header's text is visible ASCII, space and tab, where ASCII's
    // trimming is `str::trim`'s; the key is taken as `to_str` would take it or not at all.
    let value = headers.get(header::AUTHORIZATION)?.as_bytes().trim_ascii();
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, key) = (&value[..space], value[space + 1..].trim_ascii());
    if !scheme.eq_ignore_ascii_case(b"bearer") || key.is_empty() {
        return None;
    }
    std::str::from_utf8(key)
        .ok()
        .filter(|k| k.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)))
}

/// The endpoint a caller called, as a protected resource (RFC 9728): where people sign in, a
/// 401 points at its metadata.
#[derive(Debug, Clone, Copy)]
pub enum Resource<'a> {
    /// `/mcp`.
    Mcp,
    /// `/mcp/{prefix}`.
    McpServer(&'a str),
    /// `/mcp-rest/...`.
    Rest,
    /// `/v1/...` (the LLM endpoints).
    Llm,
}

impl Resource<'_> {
    /// The resource's path (built only for a challenge: never on a call that authenticates).
    pub fn path(self) -> String {
        match self {
            Resource::Mcp => "/mcp".into(),
            Resource::McpServer(prefix) => format!("/mcp/{prefix}"),
            Resource::Rest => "/mcp-rest".into(),
            Resource::Llm => "/v1".into(),
        }
    }
}

/// Authenticates the caller and admits the request under its key's limits (a refused request
/// is a 429 before anything else happens). Only a person's token whose signing key the gateway
/// does not hold yet waits (for its provider's keys to be fetched again: `people.rs`).
pub async fn authenticate(
    table: Arc<RoutingTable>,
    headers: HeaderMap,
    metrics: &Metrics,
    resource: Resource<'_>,
) -> Result<Caller, GatewayError> {
    let Some(presented) = presented_key(&headers).map(str::to_owned) else {
        let missing = GatewayError::Unauthenticated(MISSING_KEY);
        return Err(sign_in_challenge(&table, &headers, resource, missing));
    };
    caller_for_key(table, headers, &presented, Some(metrics), Some(resource))
        .await?
        .admitted(metrics)
        .await
}

const MISSING_KEY: &str =
    "missing gateway key (Authorization: Bearer <key>, or X-Switchboard-Key: <key>)";

/// Where people sign in (the snapshot has identity providers), the gateway's own 401 says where
/// to get a token (RFC 9728: `resource_metadata`), and a person without a grant gets 403
/// `insufficient_scope`; elsewhere the error stays as it is.
fn sign_in_challenge(
    table: &RoutingTable,
    headers: &HeaderMap,
    resource: Resource<'_>,
    error: GatewayError,
) -> GatewayError {
    if table.people.is_none() {
        return error;
    }
    let base = crate::table::base_url(&table.settings, headers);
    let metadata = format!(
        "{base}/.well-known/oauth-protected-resource{}",
        resource.path()
    );
    match error {
        GatewayError::Unauthenticated(reason) => {
            // RFC 6750: a request without credentials gets no error code.
            let presented =
                headers.contains_key(header::AUTHORIZATION) || headers.contains_key(KEY_HEADER);
            let www_authenticate = if presented {
                format!(
                    "Bearer resource_metadata=\"{metadata}\", error=\"invalid_token\", error_description=\"{reason}\""
                )
            } else {
                format!("Bearer resource_metadata=\"{metadata}\"")
            };
            GatewayError::SignInRequired {
                reason,
                www_authenticate,
            }
        }
        GatewayError::UnknownIssuer { issuer, .. } => {
            let www_authenticate = format!(
                "Bearer resource_metadata=\"{metadata}\", error=\"invalid_token\", error_description=\"token issuer {issuer} is not an identity provider of this gateway\""
            );
            GatewayError::UnknownIssuer {
                issuer,
                www_authenticate,
            }
        }
        GatewayError::PersonNotGranted { person, .. } => GatewayError::PersonNotGranted {
            person,
            www_authenticate: format!(
                "Bearer resource_metadata=\"{metadata}\", error=\"insufficient_scope\""
            ),
        },
        other => other,
    }
}

/// Authenticates a key the endpoint found in its own way (the LLM endpoints also take
/// `x-api-key`, where Anthropic clients put it), and admits the request under its limits. A
/// refusal on `resource` carries its sign-in challenge where people sign in.
pub async fn authenticate_key(
    table: Arc<RoutingTable>,
    headers: HeaderMap,
    presented: &str,
    metrics: &Metrics,
    resource: Resource<'_>,
) -> Result<Caller, GatewayError> {
    caller_for_key(table, headers, presented, Some(metrics), Some(resource))
        .await?
        .admitted(metrics)
        .await
}

/// The refusal of a request to `resource` that presented no credential (`reason` says where
/// one goes): with the sign-in challenge where people sign in.
pub fn no_credential(
    table: &RoutingTable,
    headers: &HeaderMap,
    resource: Resource<'_>,
    reason: &'static str,
) -> GatewayError {
    sign_in_challenge(
        table,
        headers,
        resource,
        GatewayError::Unauthenticated(reason),
    )
}

/// Authenticates the caller without counting the request against its limits: for a message
/// another replica handed over, which that replica admitted.
pub async fn identify(
    table: Arc<RoutingTable>,
    headers: HeaderMap,
) -> Result<Caller, GatewayError> {
    let presented = presented_key(&headers)
        .ok_or(GatewayError::Unauthenticated(MISSING_KEY))?
        .to_string();
    caller_for_key(table, headers, &presented, None, None).await
}

/// The caller a presented credential makes: a key, a person (sign-ins counted in `metrics`), or
/// a ServiceAccount. A refusal on a `resource` people sign in to carries its challenge.
async fn caller_for_key(
    table: Arc<RoutingTable>,
    headers: HeaderMap,
    presented: &str,
    metrics: Option<&Metrics>,
    resource: Option<Resource<'_>>,
) -> Result<Caller, GatewayError> {
    let (key, person, also, service_account) =
        match grants_of(&table, &headers, presented, metrics).await {
            Ok(found) => found,
            Err(e) => {
                return Err(match resource {
                    Some(resource) => sign_in_challenge(&table, &headers, resource, e),
                    None => e,
                });
            }
        };
    let own_authorization = headers
        .contains_key(KEY_HEADER)
        .then(|| headers.get(header::AUTHORIZATION).cloned())
        .flatten();
    // A person's one credential is the subject of token exchanges on their behalf (never
    // passed through): their token, or signed in through the gateway, the provider's token the
    // gateway holds for them (never the gateway's own).
    let person_subject = match person.as_deref() {
        Some(Person {
            provider_token: Some(held),
            ..
        }) => HeaderValue::from_str(&format!("Bearer {held}")).ok(),
        // Signed in with an identity assertion: no subject (`CredentialContext` then refuses
        // an exchange as such).
        Some(p) if p.holds_no_provider_token() => None,
        Some(_) => headers.get(header::AUTHORIZATION).cloned(),
        None => None,
    };
    let resource = person.as_ref().and(resource).map(Resource::path);
    let caller = Caller {
        key,
        person,
        service_account,
        also,
        table,
        headers,
        own_authorization,
        person_subject,
        resource,
        _admission: None,
        _also_admitted: Vec::new(),
    };
    crate::audit::note(|n| n.caller = Some(caller.record()));
    Ok(caller)
}

/// A credential's key, for a person who they are and their further grants, and the workload
/// whose ServiceAccount token stood for the key.
type Grants = (
    Arc<Key>,
    Option<Arc<Person>>,
    Vec<Arc<Key>>,
    Option<Arc<ServiceAccount>>,
);

async fn grants_of(
    table: &RoutingTable,
    headers: &HeaderMap,
    presented: &str,
    metrics: Option<&Metrics>,
) -> Result<Grants, GatewayError> {
    // A JWT is tried as a person's token first (where people sign in): hashing a 1 KB token to
    // look it up among the keys costs more than finding the person it proves. (A key is never a
    // JWT of a configured identity provider, which is what `signed_in` checks before anything.)
    let person = if table.people.is_some() && looks_like_jwt(presented) {
        signed_in(table, presented, metrics).await?
    } else if table.broker.is_some() && presented.starts_with(crate::broker::ACCESS_PREFIX) {
        Some(signed_in_here(table, headers, presented, metrics).await?)
    } else {
        None
    };
    let (key, person, also, service_account) = match person {
        Some(signed) => {
            let mut grants = signed.grants.into_iter();
            // `signed_in` keeps the unexpired grants and refuses a person left with none.
            let first = grants.next().ok_or_else(|| not_granted(&signed.person))?;
            (first, Some(signed.person), grants.collect(), None)
        }
        None => match table.authenticate(presented) {
            Some(key) => (key, None, Vec::new(), None),
            None => {
                let (key, account) = service_account_key(table, presented)?;
                (key, None, Vec::new(), Some(account))
            }
        },
    };
    if key.is_expired(SystemTime::now()) {
        return Err(GatewayError::Unauthenticated("the gateway key has expired"));
    }
    Ok((key, person, also, service_account))
}

/// A person's access token, when the snapshot has identity providers and the token is one of
/// theirs (`None`: not a person's token; a key or a ServiceAccount token is tried instead).
/// Grants whose key has expired are left out; a person left with none gets 403.
async fn signed_in(
    table: &RoutingTable,
    presented: &str,
    metrics: Option<&Metrics>,
) -> Result<Option<Signed>, GatewayError> {
    let Some(people) = &table.people else {
        return Ok(None);
    };
    let count = |issuer: &str, outcome| {
        if let Some(metrics) = metrics {
            metrics.sign_in(issuer, outcome);
        }
    };
    // A token verified lately: its person, without parsing it again.
    let signed = match people.remembered(presented) {
        Some(signed) => signed,
        None => {
            let Some(issuer) = people.issuer_of(presented) else {
                return Ok(None); // not a person's token: a key or a ServiceAccount's
            };
            // (Boxed: only a token's first use verifies, and only a key not held yet waits; the
            // future of every other request stays small.)
            match Box::pin(people.verify(&table.identity_keys, presented, &issuer)).await {
                Ok(signed) => signed,
                Err(refusal) => {
                    count(&issuer, refusal.label());
                    tracing::info!(%issuer, reason = refusal.reason(), "sign-in refused");
                    return Err(GatewayError::Unauthenticated(refusal.reason()));
                }
            }
        }
    };
    granted(signed, metrics).map(Some)
}

/// A verified person with the grants whose key has not expired, counted; refused with 403
/// when none is left (however they signed in).
fn granted(mut signed: Signed, metrics: Option<&Metrics>) -> Result<Signed, GatewayError> {
    let now = SystemTime::now();
    signed.grants.retain(|k| !k.is_expired(now));
    let outcome = if signed.grants.is_empty() {
        "no_grant"
    } else {
        "ok"
    };
    if let Some(metrics) = metrics {
        metrics.sign_in(&signed.person.issuer, outcome);
    }
    if signed.grants.is_empty() {
        return Err(not_granted(&signed.person));
    }
    Ok(signed)
}

/// A person signed in through the gateway (brokered mode): its own access token, opened, and
/// refused when the person signed out after that login (`sign_out.rs`).
async fn signed_in_here(
    table: &RoutingTable,
    headers: &HeaderMap,
    presented: &str,
    metrics: Option<&Metrics>,
) -> Result<Signed, GatewayError> {
    let (Some(people), Some(sealer)) = (&table.people, &table.broker) else {
        return Err(GatewayError::Unauthenticated("unknown gateway key"));
    };
    let signed = match people.remembered(presented) {
        Some(signed) => signed,
        None => {
            let base = crate::table::base_url(&table.settings, headers);
            people
                .verify_brokered(sealer, presented, &base)
                .map_err(|refusal| {
                    if let Some(metrics) = metrics {
                        metrics.sign_in("switchboard", refusal.label());
                    }
                    tracing::info!(reason = refusal.reason(), "brokered sign-in refused");
                    GatewayError::Unauthenticated(refusal.reason())
                })?
        }
    };
    if let Some(since) = signed.person.signed_in
        && table
            .sign_outs
            .ended(&table.store, &signed.person, since)
            .await
    {
        if let Some(metrics) = metrics {
            metrics.sign_in("switchboard", "signed_out");
        }
        tracing::info!("brokered sign-in refused: the person signed out since");
        return Err(GatewayError::Unauthenticated(
            "the person signed out since this token was issued",
        ));
    }
    granted(signed, metrics)
}

fn not_granted(person: &Person) -> GatewayError {
    tracing::info!(person = %person, "a signed-in person no unexpired key grants any scope");
    GatewayError::PersonNotGranted {
        person: person.to_string(),
        www_authenticate: String::new(),
    }
}

/// The key a ServiceAccount token stands for (docs/architecture.md, "Workload identity"), and
/// the workload it names. A token that does not verify is a 401 with the reason; a valid token
/// of a ServiceAccount no key binds is a 403. Both are logged with the reason, never with the
/// token.
///
/// Presented credentials that are no key end here. One that parses as a JWT naming an issuer
/// that is neither the cluster's (ServiceAccount tokens) nor an identity provider's (people,
/// tried before keys) is refused as what it is: a token from an issuer this gateway does not
/// know, named, so that whoever configured the client can tell what to fix. Anything else
/// that is no key (an opaque string, however it looks) stays an unknown gateway key.
fn service_account_key(
    table: &RoutingTable,
    presented: &str,
) -> Result<(Arc<Key>, Arc<ServiceAccount>), GatewayError> {
    let unknown = GatewayError::Unauthenticated("unknown gateway key");
    if !looks_like_jwt(presented) {
        return Err(unknown);
    }
    let auth = match (&table.service_accounts, unverified_issuer(presented)) {
        (Some(auth), Some(iss)) if iss == auth.verifier.issuer() => auth,
        (_, Some(iss)) => {
            let refused = GatewayError::unknown_issuer(&iss);
            if let GatewayError::UnknownIssuer { issuer, .. } = &refused {
                tracing::info!(%issuer, "token refused: its issuer is not an identity provider of this gateway");
            }
            return Err(refused);
        }
        (Some(auth), None) => auth,
        (None, None) => return Err(unknown),
    };
    let account = auth.verifier.verify(presented).map_err(|refusal| {
        tracing::info!(reason = refusal.reason(), "ServiceAccount token refused");
        GatewayError::Unauthenticated(refusal.reason())
    })?;
    let key = auth.bindings.lookup(&account).ok_or_else(|| {
        tracing::info!(account = %account, "ServiceAccount token of an account no key binds");
        GatewayError::ServiceAccountNotBound {
            account: account.to_string(),
        }
    })?;
    Ok((key, account))
}

impl Caller {
    /// Who this caller is, as an audit record names them (the audit module knows no callers:
    /// scope depends on it, not the other way round).
    pub fn record(&self) -> crate::audit::CallerRecord {
        use crate::audit::{CallerRecord, WorkloadRecord};
        let key = &self.key;
        match &self.person {
            Some(person) => CallerRecord {
                kind: "person",
                key: key.id.clone(),
                namespace: key.namespace.clone(),
                service_account: None,
                issuer: Some(person.issuer.clone()),
                subject: Some(person.subject.clone()),
                provider: Some(person.provider.clone()),
            },
            None => CallerRecord {
                kind: if self.service_account.is_some() {
                    "serviceAccount"
                } else {
                    "key"
                },
                key: key.id.clone(),
                namespace: key.namespace.clone(),
                service_account: self.service_account.as_ref().map(|a| WorkloadRecord {
                    namespace: a.namespace.clone(),
                    name: a.name.clone(),
                    pod: a.pod.clone(),
                }),
                issuer: None,
                subject: None,
                provider: None,
            },
        }
    }

    /// The caller, admitted under its key's limits.
    async fn admitted(mut self, metrics: &Metrics) -> Result<Caller, GatewayError> {
        let (limiters, store) = (&self.table.limiters, &self.table.store);
        self._admission = limiters.admit_key(&self.key.id, store, metrics).await?;
        for key in &self.also {
            let permit = limiters.admit_key(&key.id, store, metrics).await?;
            self._also_admitted.extend(permit);
        }
        Ok(self)
    }

    /// Every key whose scope this caller has (one, except for a person several keys grant).
    fn grants(&self) -> impl Iterator<Item = &Arc<Key>> {
        std::iter::once(&self.key).chain(&self.also)
    }

    /// Every key that grants this caller scope, in key order.
    pub(crate) fn all_grants(&self) -> impl Iterator<Item = &Arc<Key>> {
        self.grants()
    }

    /// Who is calling, for log lines: the key's name, or the signed-in person (issuer and
    /// subject; never their token).
    pub fn who(&self) -> std::borrow::Cow<'_, str> {
        match &self.person {
            Some(person) => std::borrow::Cow::Owned(person.to_string()),
            None => std::borrow::Cow::Borrowed(&self.key.name),
        }
    }

    /// What sessions and exchanges this caller opens are bound to: the person, else the key.
    pub fn tag(&self) -> &[u8; 32] {
        self.person.as_ref().map_or(&self.key.digest, |p| &p.tag)
    }

    /// The first 8 bytes of [`Self::tag`]: what a sealed route, a relay or an LLM record carries
    /// to name its caller (enough to tell callers apart, short enough to ride along).
    pub fn short_tag(&self) -> [u8; 8] {
        let mut short = [0u8; 8];
        short.copy_from_slice(&self.tag()[..8]);
        short
    }

    /// Whether this caller may use `model`.
    pub fn reaches_model(&self, model: &switchboard_snapshot::ModelSpec) -> bool {
        self.grants().any(|k| k.reaches_model(model))
    }

    /// The gateway itself, calling `server` with no caller headers (readiness probes).
    pub fn probe(table: Arc<RoutingTable>, server: &Server) -> Caller {
        let key = Key {
            id: "switchboard-probe".into(),
            name: "switchboard-probe".into(),
            namespace: server.spec.namespace.clone(),
            digest: [0; 32],
            fingerprint: "probe".into(),
            servers: vec![server.id().to_string()],
            access_groups: Vec::new(),
            models: Vec::new(),
            tools: Default::default(),
            arguments: Vec::new(),
            expires_at: None,
        };
        Caller {
            key: Arc::new(key),
            person: None,
            service_account: None,
            also: Vec::new(),
            table,
            headers: HeaderMap::new(),
            own_authorization: None,
            person_subject: None,
            resource: None,
            _admission: None,
            _also_admitted: Vec::new(),
        }
    }

    /// What the forwarding pipeline needs of this caller to resolve an upstream credential.
    pub fn credential_context(&self) -> CredentialContext<'_> {
        CredentialContext {
            tag: self.tag(),
            headers: &self.headers,
            own_authorization: self.own_authorization.as_ref(),
            person: self
                .person
                .as_ref()
                .zip(self.person_subject.as_ref())
                .map(|(p, subject)| (&p.tag, subject)),
            holds_no_provider_token: self
                .person
                .as_ref()
                .is_some_and(|p| p.holds_no_provider_token()),
        }
    }

    pub fn reaches(&self, server: &Server) -> bool {
        self.grants().any(|k| k.reaches(&server.spec))
    }

    /// Whether this caller reaches a virtual server (each of its tools then only where
    /// [`Self::sees_tool`] holds for the tool's own server).
    pub fn reaches_virtual(&self, vs: &crate::virtual_server::VirtualServer) -> bool {
        self.grants().any(|k| k.reaches_virtual(&vs.spec))
    }

    /// The virtual server at `/mcp/<path>`, if this caller reaches it.
    pub fn virtual_for_path(
        &self,
        path: &str,
    ) -> Option<Arc<crate::virtual_server::VirtualServer>> {
        self.table
            .virtual_by_path(path)
            .filter(|vs| self.reaches_virtual(vs))
            .cloned()
    }

    /// `tool` (the upstream's own name) of `server`, if this caller sees it (see
    /// [`Self::sees_tool`]); else `unknown`, the client's answer for a tool that does not exist,
    /// as a refusal for scope when the caller's keys are what refuse it (the server's own
    /// filter serves no such tool to anyone: that one is simply unknown).
    pub fn check_tool(
        &self,
        server: &Server,
        tool: &str,
        unknown: impl FnOnce() -> GatewayError,
    ) -> Result<(), GatewayError> {
        // (`unknown` made only for a refusal: it holds the name as text.)
        if self.sees_tool(server, tool) {
            Ok(())
        } else if !server.spec.tools.admits(tool) {
            Err(unknown())
        } else {
            Err(GatewayError::invisible(
                OutOfScope::Server(server.id().to_string()),
                unknown(),
            ))
        }
    }

    /// `unknown` (the answer for a name on `/mcp` that routes nowhere), as a refusal for scope
    /// when the name's prefix names a server that exists and this caller's keys do not reach.
    /// (A server `X-MCP-Servers` narrowed away is the client's own choice, not a refusal.)
    pub fn unreached_prefix(&self, name: &str, unknown: GatewayError) -> GatewayError {
        // (A resource URI's prefix is read as a tool name's, or a UI resource's after its scheme.)
        match split_prefixed_uri(name).and_then(|(prefix, _)| self.table.server_by_prefix(prefix)) {
            Some(server) if !self.reaches(server) => {
                GatewayError::invisible(OutOfScope::Server(server.id().to_string()), unknown)
            }
            _ => unknown,
        }
    }

    /// A call of `tool` (the upstream's own name) of `server` by a person whose token lacks a
    /// scope the tool requires (`tools.requiredScopes`): refused with a challenge naming every
    /// scope the call needs (SEP-2350: the provider's own `scopes`, which any token for the
    /// gateway is asked with, then the tool's) and the metadata of the endpoint called. Keys
    /// and workloads are not asked: their reach is the key's.
    pub fn check_scopes(&self, server: &Server, tool: &str) -> Result<(), ScopeChallenge> {
        let Some(person) = &self.person else {
            return Ok(());
        };
        let required = server.spec.tools.required_scopes(tool);
        let missing: Vec<&str> = required
            .iter()
            .copied()
            .filter(|s| !person.scopes.iter().any(|granted| granted == s))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut needed: Vec<&str> = self
            .table
            .people
            .as_ref()
            .and_then(|people| people.providers().find(|(id, ..)| *id == person.provider))
            .map(|(_, spec, _)| spec.scopes.iter().map(String::as_str).collect())
            .unwrap_or_default();
        for scope in required {
            if !needed.contains(&scope) {
                needed.push(scope);
            }
        }
        let base = crate::table::base_url(&self.table.settings, &self.headers);
        let metadata = format!(
            "{base}/.well-known/oauth-protected-resource{}",
            self.resource.as_deref().unwrap_or("/mcp")
        );
        Err(ScopeChallenge::new(
            server.id(),
            needed.join(" "),
            format!("tool {tool} needs scope {}", missing.join(" ")),
            &metadata,
        ))
    }

    /// Whether `tool` (the upstream's own name) of `server` is visible to this caller: the
    /// server's filter and the key's filter both admit it.
    pub fn sees_tool(&self, server: &Server, tool: &str) -> bool {
        // A tool is a person's when one of the keys that reach its server admits it (not when
        // a key that reaches another server does).
        server.spec.tools.admits(tool)
            && self
                .grants()
                .any(|k| k.reaches(&server.spec) && k.admits_tool(&server.spec, tool))
    }

    /// The servers this caller reaches on the aggregate endpoint, in snapshot order, narrowed
    /// (never widened) by `X-MCP-Servers: a,b` (prefixes or ids).
    pub fn servers_in_scope(&self) -> Vec<Arc<Server>> {
        let narrow = self.narrowing();
        self.table
            .servers
            .iter()
            .filter(|s| self.in_scope_narrowed(s, narrow.as_deref()))
            .cloned()
            .collect()
    }

    /// The server a prefix names, if it is in this caller's aggregate scope: a map lookup
    /// and two checks, whatever the number of servers.
    pub fn server_in_scope(&self, prefix: &str) -> Option<&Arc<Server>> {
        let server = self.table.server_by_prefix(prefix)?;
        self.in_scope_narrowed(server, self.narrowing().as_deref())
            .then_some(server)
    }

    /// `X-MCP-Servers: a,b` (prefixes or ids), when sent.
    fn narrowing(&self) -> Option<Vec<&str>> {
        let value = self.headers.get(SERVERS_HEADER)?.to_str().ok()?;
        Some(
            value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect(),
        )
    }

    fn in_scope_narrowed(&self, server: &Server, narrow: Option<&[&str]>) -> bool {
        self.reaches(server)
            && narrow.is_none_or(|n| n.iter().any(|x| *x == server.prefix() || *x == server.id()))
    }

    /// A server by id for REST: 404 when it does not exist, 403 when it is out of scope.
    pub fn server_for_rest(&self, id: &str) -> Result<Arc<Server>, GatewayError> {
        let server = self
            .table
            .server_by_id(id)
            .ok_or_else(|| GatewayError::ServerNotFound {
                server: id.to_string(),
            })?;
        if !self.reaches(server) {
            return Err(GatewayError::AccessDenied {
                server: id.to_string(),
            });
        }
        Ok(server.clone())
    }

    /// The single-server endpoint's server (a virtual server the caller reaches is asked for
    /// first: [`Self::virtual_for_path`]). One the caller cannot reach does not exist for it:
    /// the answer is the same as for a path that names nothing, and only the audit record says
    /// it was a refusal for scope, naming the server (or the virtual server) refused.
    pub fn server_for_path(&self, prefix: &str) -> Result<Arc<Server>, GatewayError> {
        let unknown = || GatewayError::NotFound {
            kind: "server",
            name: prefix.to_string(),
        };
        if let Some(vs) = self.table.virtual_by_path(prefix)
            && !self.reaches_virtual(vs)
        {
            // (Validation keeps virtual servers' paths apart from servers' prefixes.)
            let refused = OutOfScope::VirtualServer(vs.id().to_string());
            return Err(GatewayError::invisible(refused, unknown()));
        }
        let server = self.table.server_by_prefix(prefix).ok_or_else(unknown)?;
        if !self.reaches(server) {
            let refused = OutOfScope::Server(server.id().to_string());
            return Err(GatewayError::invisible(refused, unknown()));
        }
        Ok(server.clone())
    }
}

/// Decides an unprefixed name among the servers in scope that own it.
pub fn decide_owner(
    name: &str,
    owners: Vec<Arc<Server>>,
) -> Result<(Arc<Server>, String), GatewayError> {
    match owners.len() {
        0 => Err(GatewayError::ToolNotFound {
            name: name.to_string(),
        }),
        1 => Ok((owners[0].clone(), name.to_string())),
        _ => Err(GatewayError::AmbiguousTool {
            name: name.to_string(),
            candidates: owners
                .iter()
                .map(|s| prefixed_name(s.prefix(), name))
                .collect(),
        }),
    }
}

/// What of the client's request a credential can come from: its headers, and its own
/// `Authorization` when the gateway key came in `X-Switchboard-Key`. The pipeline needs no more
/// of the client than this.
#[derive(Clone, Copy)]
pub struct CredentialContext<'a> {
    /// Whose account a `userOAuth` server uses: the person's tag, else the key's
    /// ([`Caller::tag`]).
    pub tag: &'a [u8; 32],
    pub headers: &'a HeaderMap,
    pub own_authorization: Option<&'a HeaderValue>,
    /// A signed-in person's tag and their credential for token exchanges: what is exchanged
    /// on their behalf is kept per person, so a refreshed token of theirs does not start over
    /// (and two people never share).
    pub person: Option<(&'a [u8; 32], &'a HeaderValue)>,
    /// A person signed in through the gateway with an identity assertion: nothing of the
    /// provider's is held for them, so a token exchange on their behalf is refused as such
    /// (not sent on without a credential).
    pub holds_no_provider_token: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use switchboard_snapshot::{SystemLookup, load};

    fn caller(yaml: &str, key: &str, narrow: Option<&str>) -> Caller {
        let table = Arc::new(RoutingTable::build(&load(yaml, &SystemLookup).unwrap()).unwrap());
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {key}")).unwrap(),
        );
        if let Some(n) = narrow {
            headers.insert("x-mcp-servers", HeaderValue::from_str(n).unwrap());
        }
        authenticated(table, headers).expect("key authenticates")
    }

    /// `authenticate`, run to its end (a key's never waits).
    fn authenticated(table: Arc<RoutingTable>, headers: HeaderMap) -> Result<Caller, GatewayError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(authenticate(
            table,
            headers,
            &Metrics::default(),
            Resource::Mcp,
        ))
    }

    fn bearer(credential: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {credential}")).unwrap(),
        );
        headers
    }

    /// What the audit record of a request that failed with `e` says.
    fn noted(e: &GatewayError) -> crate::audit::Noted {
        let mut n = crate::audit::Noted::default();
        e.note_in(&mut n);
        n
    }

    const SCOPED: &str = r#"
servers:
- {name: alpha, url: 'http://x/mcp', tools: {deny: [hidden]}}
- {name: beta, url: 'http://x/mcp'}
virtualServers:
- {name: desk, sources: [{server: beta}]}
keys:
- {name: a, secret: s-a, servers: [alpha], tools: {allow: ['alpha__read*', 'alpha__hidden']}}
- {name: b, secret: s-b, servers: [beta, desk]}
"#;

    /// Issue 35: a refusal for scope answers the client exactly as absence does, and tells the
    /// audit record what it was: `access_denied`, naming the server or virtual server.
    #[test]
    fn a_refusal_for_scope_is_answered_as_absence_and_recorded_as_a_refusal() {
        let b = caller(SCOPED, "s-b", None);
        let refused = b.server_for_path("alpha").err().unwrap();
        let absent = b.server_for_path("nowhere").err().unwrap();
        let absent_like_alpha = GatewayError::NotFound {
            kind: "server",
            name: "alpha".into(),
        };
        // The client's answer: the same as for a server that does not exist, on every mapping.
        assert_eq!(refused.to_string(), "unknown server: alpha");
        assert_eq!(refused.http_status(), absent.http_status());
        assert_eq!(refused.mcp_http_status(), absent.mcp_http_status());
        assert_eq!(refused.jsonrpc_error(), absent_like_alpha.jsonrpc_error());
        assert_eq!(refused.rest_body(), absent_like_alpha.rest_body());
        assert_eq!(refused.rest_code(), "not_found");
        assert!(refused.www_authenticate().is_none() && refused.retry_after().is_none());
        // The record: a refusal, naming the server; absence stays absence.
        let record = noted(&refused);
        assert_eq!(
            (record.outcome, record.server.as_deref()),
            (Some("access_denied"), Some("alpha"))
        );
        let record = noted(&absent);
        assert_eq!((record.outcome, record.server), (Some("not_found"), None));
        // A virtual server the key does not reach: refused, named as a virtual server.
        let a = caller(SCOPED, "s-a", None);
        assert!(a.virtual_for_path("desk").is_none());
        let refused = a.server_for_path("desk").err().unwrap();
        assert_eq!(refused.to_string(), "unknown server: desk");
        let record = noted(&refused);
        assert_eq!(record.outcome, Some("access_denied"));
        assert_eq!(record.virtual_server.as_deref(), Some("desk"));
        assert!(b.virtual_for_path("desk").is_some(), "b reaches desk");
    }

    #[test]
    fn a_tool_the_keys_filter_refuses_is_a_refusal_and_one_the_server_filters_is_unknown() {
        let a = caller(SCOPED, "s-a", None);
        let table = a.table.clone();
        let alpha = table.server_by_prefix("alpha").unwrap();
        let beta = table.server_by_prefix("beta").unwrap();
        let unknown = |name: &str| GatewayError::ToolNotFound { name: name.into() };
        assert!(a.check_tool(alpha, "read_file", || unknown("x")).is_ok());
        // The key's filter refuses write_file: unknown to the client, a refusal on record.
        let e = a
            .check_tool(alpha, "write_file", || unknown("alpha__write_file"))
            .err()
            .unwrap();
        assert_eq!(
            e.jsonrpc_error(),
            unknown("alpha__write_file").jsonrpc_error()
        );
        assert_eq!(e.rest_code(), "tool_not_found");
        assert_eq!(noted(&e).outcome, Some("access_denied"));
        assert_eq!(noted(&e).server.as_deref(), Some("alpha"));
        // The server's own filter serves `hidden` to nobody: simply unknown.
        let e = a
            .check_tool(alpha, "hidden", || unknown("hidden"))
            .err()
            .unwrap();
        assert_eq!(noted(&e).outcome, Some("tool_not_found"));
        assert_eq!(noted(&e).server, None);
        // A server the key does not reach at all.
        let e = a
            .check_tool(beta, "anything", || unknown("x"))
            .err()
            .unwrap();
        assert_eq!(noted(&e).outcome, Some("access_denied"));
        assert_eq!(noted(&e).server.as_deref(), Some("beta"));
        // On /mcp, a name whose prefix names a server out of reach; not one out of existence,
        // and not one the client narrowed away itself.
        let e = a.unreached_prefix("beta__add", unknown("beta__add"));
        assert_eq!(noted(&e).server.as_deref(), Some("beta"));
        let e = a.unreached_prefix("gamma__add", unknown("gamma__add"));
        assert_eq!(noted(&e).outcome, Some("tool_not_found"));
        let narrowed = caller(SCOPED, "s-b", Some("desk"));
        let e = narrowed.unreached_prefix("beta__add", unknown("beta__add"));
        assert_eq!(noted(&e).outcome, Some("tool_not_found"));
    }

    const TWO: &str = "servers:\n- {name: a, url: 'http://x/mcp', allowAllKeys: true}\n- {name: b, url: 'http://x/mcp', allowAllKeys: true}\n- {name: c, url: 'http://x/mcp'}\nkeys:\n- {name: k, secret: s1}\n";

    #[test]
    fn narrowing_never_widens() {
        let c = caller(TWO, "s1", None);
        let ids: Vec<_> = c
            .servers_in_scope()
            .iter()
            .map(|s| s.id().to_string())
            .collect();
        assert_eq!(ids, ["a", "b"]);
        let c = caller(TWO, "s1", Some("a, c"));
        let ids: Vec<_> = c
            .servers_in_scope()
            .iter()
            .map(|s| s.id().to_string())
            .collect();
        assert_eq!(ids, ["a"], "c is out of scope and stays so");
    }

    #[test]
    fn prefixed_names_route_by_parse_and_unprefixed_by_owners() {
        let c = caller(TWO, "s1", None);
        let scope = c.servers_in_scope();
        assert_eq!(c.server_in_scope("b").map(|s| s.id()), Some("b"));
        assert!(
            c.server_in_scope("c").is_none(),
            "c exists but is out of scope"
        );
        assert!(c.server_in_scope("zz").is_none());
        let narrowed = caller(TWO, "s1", Some("a"));
        assert!(
            narrowed.server_in_scope("b").is_none(),
            "X-MCP-Servers narrows routing too"
        );
        let err = decide_owner("t", scope.clone()).err().unwrap();
        match err {
            GatewayError::AmbiguousTool { candidates, .. } => {
                assert_eq!(candidates, ["a__t", "b__t"])
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decide_owner("t", vec![]),
            Err(GatewayError::ToolNotFound { .. })
        ));
    }

    #[test]
    fn key_header_frees_authorization_for_the_callers_own_credential() {
        let table = Arc::new(RoutingTable::build(&load(TWO, &SystemLookup).unwrap()).unwrap());
        let mut headers = HeaderMap::new();
        headers.insert(KEY_HEADER, HeaderValue::from_static("s1"));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer user-token"),
        );
        let c = authenticated(table.clone(), headers).expect("key from X-Switchboard-Key");
        assert_eq!(c.own_authorization.unwrap(), "Bearer user-token");
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer s1"));
        let c = authenticated(table, headers).expect("key from Authorization");
        assert!(
            c.own_authorization.is_none(),
            "the gateway key is never the caller's credential"
        );
    }

    fn workload_table() -> Arc<RoutingTable> {
        use crate::jwks::test_keys::N;
        let yaml = format!(
            r#"
gateway:
  serviceAccountTokens:
    issuer: https://kubernetes.default.svc
    audiences: [switchboard]
    jwks: {{keys: [{{kty: RSA, use: sig, alg: RS256, kid: k1, n: "{N}", e: AQAB}}]}}
servers:
- {{name: alpha, url: 'http://x/mcp'}}
keys:
- {{name: builders, namespace: team-a, secret: s-builders, servers: [alpha], serviceAccounts: ['team-a/*']}}
"#
        );
        Arc::new(RoutingTable::build(&load(&yaml, &SystemLookup).unwrap()).unwrap())
    }

    fn workload_token(account: &str, pod: Option<&str>) -> String {
        use crate::jwks::test_keys::{KEY_PEM, token};
        let now = crate::remembered_tokens::unix_now();
        let mut k8s = serde_json::json!({"namespace": "team-a", "serviceaccount": {"name": account, "uid": "u"}});
        if let Some(pod) = pod {
            k8s["pod"] = serde_json::json!({"name": pod, "uid": "p"});
        }
        token(
            KEY_PEM,
            "k1",
            serde_json::json!({
                "iss": "https://kubernetes.default.svc", "aud": ["switchboard"],
                "exp": now + 600, "iat": now, "nbf": now,
                "sub": format!("system:serviceaccount:team-a:{account}"), "kubernetes.io": k8s,
            }),
        )
    }

    /// Issue 35: two ServiceAccounts one key binds (`team-a/*`) are told apart in the record:
    /// the account's namespace and name, and the pod a bound token names.
    #[test]
    fn the_record_names_the_workload_whose_token_stood_for_the_key() {
        use crate::audit::{CallerRecord, WorkloadRecord};
        let table = workload_table();
        let record = |token: &str| {
            authenticated(table.clone(), bearer(token))
                .unwrap()
                .record()
        };
        let builder = record(&workload_token("builder", Some("builder-7d9c-x2k4f")));
        let deployer = record(&workload_token("deployer", None));
        let expected = |name: &str, pod: Option<&str>| CallerRecord {
            kind: "serviceAccount",
            key: "team-a/builders".into(),
            namespace: "team-a".into(),
            service_account: Some(WorkloadRecord {
                namespace: "team-a".into(),
                name: name.into(),
                pod: pod.map(str::to_owned),
            }),
            issuer: None,
            subject: None,
            provider: None,
        };
        assert_eq!(builder, expected("builder", Some("builder-7d9c-x2k4f")));
        assert_eq!(deployer, expected("deployer", None));
        let json = serde_json::to_value(&builder).unwrap();
        assert_eq!(
            json["service_account"],
            serde_json::json!({"namespace": "team-a", "name": "builder", "pod": "builder-7d9c-x2k4f"})
        );
        // The key itself names no workload.
        let key = record("s-builders");
        assert_eq!((key.kind, key.service_account), ("key", None));
    }

    /// Issue 35: a JWT from an issuer the gateway does not know is refused as that, naming the
    /// issuer (shown safely), with an `invalid_token` challenge; anything else that is no key
    /// stays an unknown key, and a key that happens to look like a JWT is still a key.
    #[test]
    fn a_token_from_an_unknown_issuer_is_refused_naming_the_issuer() {
        use crate::jwks::test_keys::{KEY_PEM, token};
        let foreign = |iss: &str| {
            token(
                KEY_PEM,
                "k9",
                serde_json::json!({"iss": iss, "sub": "mallory", "exp": 4_000_000_000u64}),
            )
        };
        let jwt_key = foreign("https://not-a-provider.example");
        let yaml = format!(
            "servers:\n- {{name: alpha, url: 'http://x/mcp'}}\nkeys:\n- {{name: k, secret: s1, servers: [alpha]}}\n- {{name: jwt, secret: '{jwt_key}', servers: [alpha]}}\n"
        );
        let plain = Arc::new(RoutingTable::build(&load(&yaml, &SystemLookup).unwrap()).unwrap());
        for table in [plain, workload_table()] {
            let e = authenticated(
                table.clone(),
                bearer(&foreign("https://login.evil.example/realms/x")),
            )
            .err()
            .unwrap();
            assert_eq!(
                e.to_string(),
                "token issuer https://login.evil.example/realms/x is not an identity provider of this gateway"
            );
            assert_eq!(e.http_status().as_u16(), 401);
            assert_eq!(e.mcp_http_status().as_u16(), 401);
            assert_eq!(e.rest_code(), "unauthenticated");
            assert_eq!(
                e.www_authenticate().unwrap(),
                "Bearer realm=\"switchboard\", error=\"invalid_token\", error_description=\"token issuer https://login.evil.example/realms/x is not an identity provider of this gateway\""
            );
            let record = noted(&e);
            assert_eq!(record.outcome, Some("unknown_issuer"));
            assert_eq!(
                record.token_issuer.as_deref(),
                Some("https://login.evil.example/realms/x")
            );
            // What an issuer says cannot break out of the header or the log line.
            let e = authenticated(table.clone(), bearer(&foreign("x\"\r\nevil: é\\")))
                .err()
                .unwrap();
            assert_eq!(noted(&e).token_issuer.as_deref(), Some("x???evil: ??"));
            assert!(e.www_authenticate().is_some(), "a valid header value");
            // No iss, or not a JWT at all: an unknown key as before (no SA issuer: plain).
            let e = authenticated(table.clone(), bearer("sk-not-a-key"))
                .err()
                .unwrap();
            assert_eq!(e.to_string(), "unknown gateway key");
        }
        let plain = Arc::new(RoutingTable::build(&load(&yaml, &SystemLookup).unwrap()).unwrap());
        let key = authenticated(plain, bearer(&jwt_key)).expect("a key, whatever it looks like");
        assert_eq!(key.key.name, "jwt");
    }

    #[test]
    fn bearer_parsing() {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  k1 "),
        );
        assert_eq!(presented_key(&h), Some("k1"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(presented_key(&h), None);
        // The reading as bytes takes what the reading as text took (it is the oracle here),
        // on values around every rule: case, spaces, tabs, an empty key, bytes past ASCII.
        let as_text = |value: &HeaderValue| -> Option<String> {
            let (scheme, key) = value.to_str().ok()?.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| key.trim().to_string())
                .filter(|k| !k.is_empty())
        };
        let values: [&[u8]; 16] = [
            b"Bearer k1",
            b"BEARER k1",
            b"  bearer k1\t",
            b"Bearer",
            b"Bearer ",
            b"Bearer  ",
            b"Bearer\tk1",
            b"Bearer k1 k2",
            b"Bearerk1",
            b"Bearer k\xc3\xa9",
            b"Bearer \xffk1",
            b"B\xc3\xa9arer k1",
            b"Bearer k1\x7e",
            b"\tBearer\t k1",
            b"Bearer\t",
            b"bearer a.b-c_d~e+f/g=",
        ];
        for value in values {
            let value = HeaderValue::from_bytes(value).expect("a header value");
            h.insert(header::AUTHORIZATION, value.clone());
            assert_eq!(
                presented_key(&h).map(str::to_string),
                as_text(&value),
                "{value:?}"
            );
        }
    }
}
