//! Who is calling and what they may reach. Every path asks here before any upstream I/O
//! (docs/architecture.md, invariant 4).

use std::sync::Arc;
use std::time::SystemTime;

use axum::http::{HeaderMap, HeaderValue, header};

use crate::errors::GatewayError;
use crate::limits::LimitPermit;
use crate::metrics::Metrics;
use crate::route::prefixed_name;
use crate::table::{Key, RoutingTable, Server};
use crate::workload_identity::looks_like_jwt;

/// An authenticated request: the key, the routing table it started with, and its headers.
pub struct Caller {
    pub key: Arc<Key>,
    pub table: Arc<RoutingTable>,
    pub headers: HeaderMap,
    /// The caller's own `Authorization`, when the gateway key came in `X-Switchboard-Key`
    /// (only then can `Authorization` be the caller's credential for an upstream).
    pub own_authorization: Option<HeaderValue>,
    /// The key's concurrency slot, held as long as the caller is (a relayed stream holds it).
    _admission: Option<LimitPermit>,
}

/// The header that carries the gateway key when `Authorization` carries the caller's own
/// credential (for `passthrough` and `tokenExchange` servers).
pub const KEY_HEADER: &str = "x-switchboard-key";

/// The gateway key: `X-Switchboard-Key: <key>` if present, else `Authorization: Bearer <key>`.
pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(key) = headers.get(KEY_HEADER) {
        return key.to_str().ok().map(str::trim).filter(|k| !k.is_empty());
    }
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| key.trim())
        .filter(|k| !k.is_empty())
}

/// Authenticates the caller and admits the request under its key's limits (a refused request
/// is a 429 before anything else happens).
pub fn authenticate(
    table: Arc<RoutingTable>,
    headers: HeaderMap,
    metrics: &Metrics,
) -> Result<Caller, GatewayError> {
    identify(table, headers)?.admitted(metrics)
}

/// Authenticates a key the endpoint found in its own way (the LLM endpoints also take
/// `x-api-key`, where Anthropic clients put it), and admits the request under its limits.
pub fn authenticate_key(
    table: Arc<RoutingTable>,
    headers: HeaderMap,
    presented: &str,
    metrics: &Metrics,
) -> Result<Caller, GatewayError> {
    caller_for_key(table, headers, presented)?.admitted(metrics)
}

/// Authenticates the caller without counting the request against its limits: for a message
/// another replica handed over, which that replica admitted.
pub fn identify(table: Arc<RoutingTable>, headers: HeaderMap) -> Result<Caller, GatewayError> {
    let presented = presented_key(&headers)
        .ok_or(GatewayError::Unauthenticated(
            "missing gateway key (Authorization: Bearer <key>, or X-Switchboard-Key: <key>)",
        ))?
        .to_string();
    caller_for_key(table, headers, &presented)
}

fn caller_for_key(
    table: Arc<RoutingTable>,
    headers: HeaderMap,
    presented: &str,
) -> Result<Caller, GatewayError> {
    let key = match table.authenticate(presented) {
        Some(key) => key.clone(),
        None => service_account_key(&table, presented)?,
    };
    if key.is_expired(SystemTime::now()) {
        return Err(GatewayError::Unauthenticated("the gateway key has expired"));
    }
    let own_authorization = headers
        .contains_key(KEY_HEADER)
        .then(|| headers.get(header::AUTHORIZATION).cloned())
        .flatten();
    Ok(Caller {
        key,
        table,
        headers,
        own_authorization,
        _admission: None,
    })
}

/// The key a ServiceAccount token stands for (docs/architecture.md, "Workload identity"). A
/// token that does not verify is a 401 with the reason; a valid token of a ServiceAccount no key
/// binds is a 403. Both are logged with the reason, never with the token.
fn service_account_key(table: &RoutingTable, presented: &str) -> Result<Arc<Key>, GatewayError> {
    let unknown = GatewayError::Unauthenticated("unknown gateway key");
    let Some(auth) = &table.service_accounts else {
        return Err(unknown);
    };
    if !looks_like_jwt(presented) {
        return Err(unknown);
    }
    let account = auth.verifier.verify(presented).map_err(|refusal| {
        tracing::info!(reason = refusal.reason(), "ServiceAccount token refused");
        GatewayError::Unauthenticated(refusal.reason())
    })?;
    auth.bindings.lookup(&account).ok_or_else(|| {
        tracing::info!(account = %account, "ServiceAccount token of an account no key binds");
        GatewayError::ServiceAccountNotBound {
            account: account.to_string(),
        }
    })
}

impl Caller {
    /// The caller, admitted under its key's limits.
    fn admitted(mut self, metrics: &Metrics) -> Result<Caller, GatewayError> {
        self._admission = self.table.limiters.admit_key(&self.key.id, metrics)?;
        Ok(self)
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
            expires_at: None,
        };
        Caller {
            key: Arc::new(key),
            table,
            headers: HeaderMap::new(),
            own_authorization: None,
            _admission: None,
        }
    }

    /// What the forwarding pipeline needs of this caller to resolve an upstream credential.
    pub fn credential_context(&self) -> CredentialContext<'_> {
        CredentialContext {
            headers: &self.headers,
            own_authorization: self.own_authorization.as_ref(),
        }
    }

    pub fn reaches(&self, server: &Server) -> bool {
        self.key.reaches(&server.spec)
    }

    /// Whether `tool` (the upstream's own name) of `server` is visible to this caller: the
    /// server's filter and the key's filter both admit it.
    pub fn sees_tool(&self, server: &Server, tool: &str) -> bool {
        server.spec.tools.admits(tool) && self.key.admits_tool(&server.spec, tool)
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
        let value = self.headers.get("x-mcp-servers")?.to_str().ok()?;
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

    /// The single-server endpoint's server; one the caller cannot reach does not exist for it.
    pub fn server_for_path(&self, prefix: &str) -> Result<Arc<Server>, GatewayError> {
        self.table
            .server_by_prefix(prefix)
            .filter(|s| self.reaches(s))
            .cloned()
            .ok_or_else(|| GatewayError::NotFound {
                kind: "server",
                name: prefix.to_string(),
            })
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
    pub headers: &'a HeaderMap,
    pub own_authorization: Option<&'a HeaderValue>,
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
        authenticate(table, headers, &Metrics::default()).expect("key authenticates")
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
        let c = authenticate(table.clone(), headers, &Metrics::default())
            .expect("key from X-Switchboard-Key");
        assert_eq!(c.own_authorization.unwrap(), "Bearer user-token");
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer s1"));
        let c = authenticate(table, headers, &Metrics::default()).expect("key from Authorization");
        assert!(
            c.own_authorization.is_none(),
            "the gateway key is never the caller's credential"
        );
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
    }
}
