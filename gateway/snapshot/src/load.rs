//! Reading a snapshot from text, resolving its secrets, and validating it. Every problem is
//! reported with the path of the field that holds it, e.g.
//! `servers[2].auth.header: "X Token" is not a valid header name`.

use std::collections::{HashMap, HashSet};

pub use crate::errors::{FieldError, SnapshotError};
use crate::key_hash::{hash_key, parse_hash};
use crate::model::{ModelSpec, RequestLimits, SCHEMA_VERSION, ServerSpec, Snapshot, UpstreamAuth};
use crate::names::{is_dns_label, is_header_name, is_header_value};
use crate::networks::{NetworkPolicy, ScopedPolicy};
pub use crate::secret::resolved_value;
use crate::secret::{SecretLookup, SecretSource};
use crate::tls::{TlsMaterial, UpstreamTls};
use sha2::Digest;

impl SnapshotError {
    fn one(path: impl Into<String>, message: impl Into<String>) -> Self {
        SnapshotError {
            errors: vec![FieldError {
                path: path.into(),
                message: message.into(),
            }],
        }
    }
}

/// Parses YAML (JSON is YAML too) into a snapshot, without resolving or validating it.
pub fn parse(text: &str) -> Result<Snapshot, SnapshotError> {
    let path_error = |e: serde_path_to_error::Error<serde_json::Error>| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        SnapshotError::one(path, redact_values(&e.into_inner().to_string()))
    };
    // JSON (what the operator writes, and what machines generate) skips the YAML parser,
    // which is most of the load time of a large snapshot.
    if text.trim_start().starts_with('{') {
        let mut json = serde_json::Deserializer::from_str(text);
        return serde_path_to_error::deserialize(&mut json).map_err(path_error);
    }
    // YAML goes through a generic tree so that serde_path_to_error can name the field that
    // failed.
    // The YAML error is reported without its source excerpt: the offending line may hold a
    // secret, and errors are logged.
    let tree: serde_json::Value = serde_saphyr::from_str(text)
        .map_err(|e| SnapshotError::one("", e.without_snippet().to_string()))?;
    let tree = if tree.is_null() {
        serde_json::Value::Object(Default::default())
    } else {
        tree
    };
    serde_path_to_error::deserialize(tree).map_err(path_error)
}

/// serde quotes the offending value in type errors (`invalid type: string "...", expected
/// u32`); a secret typed into the wrong field must not reach the logs, so quoted string values
/// are blanked. Field and variant names (in backticks) stay: they are what a person needs.
fn redact_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("string \"") {
        let (head, tail) = rest.split_at(at + "string \"".len());
        out.push_str(head);
        match tail.find('"') {
            Some(end) => {
                out.push_str("<redacted>\"");
                rest = &tail[end + 1..];
            }
            None => {
                out.push_str("<redacted>");
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Parses, resolves and validates: the whole path from a file's text to a snapshot a gateway
/// can apply.
pub fn load(text: &str, lookup: &dyn SecretLookup) -> Result<Snapshot, SnapshotError> {
    let mut snapshot = parse(text)?;
    resolve_secrets(&mut snapshot, lookup)?;
    validate(&snapshot)?;
    Ok(snapshot)
}

/// Replaces every `env`/`file` secret with its value, and every key secret with its hash, so
/// the result holds no indirection and no key material.
pub fn resolve_secrets(
    snapshot: &mut Snapshot,
    lookup: &dyn SecretLookup,
) -> Result<(), SnapshotError> {
    let mut errors = Vec::new();
    let mut resolve = |source: &mut SecretSource, path: String| match source.resolve(lookup) {
        Ok(value) => *source = SecretSource::Value { value },
        Err(message) => errors.push(FieldError { path, message }),
    };
    if let Some(key) = snapshot.gateway.session_key.as_mut() {
        resolve(key, "gateway.sessionKey".into());
    }
    if let Some(bundle) = snapshot
        .gateway
        .upstream_tls
        .as_mut()
        .and_then(|t| t.ca_bundle.as_mut())
    {
        resolve(bundle, "gateway.upstreamTls.caBundle".into());
    }
    let store = &mut snapshot.gateway.store;
    if let Some(key) = store.key.as_mut() {
        resolve(key, "gateway.store.key".into());
    }
    for (i, key) in store.previous_keys.iter_mut().enumerate() {
        resolve(key, format!("gateway.store.previousKeys[{i}]"));
    }
    if let Some(redis) = store.redis.as_mut() {
        if let Some(password) = redis.password.as_mut() {
            resolve(password, "gateway.store.redis.password".into());
        }
        if let Some(bundle) = redis.ca_bundle.as_mut() {
            resolve(bundle, "gateway.store.redis.caBundle".into());
        }
    }
    for (i, server) in snapshot.servers.iter_mut().enumerate() {
        if let Some(tls) = server.tls.as_mut() {
            for (field, secret) in tls_secrets_mut(tls) {
                resolve(secret, format!("servers[{i}].tls.{field}"));
            }
        }
        for (j, header) in server.headers.static_headers.iter_mut().enumerate() {
            resolve(
                &mut header.value,
                format!("servers[{i}].headers.static[{j}].value"),
            );
        }
        for (field, secret) in auth_secrets_mut(&mut server.auth) {
            resolve(secret, format!("servers[{i}].auth.{field}"));
        }
        if let Some(document) = server.openapi.as_mut().and_then(|o| o.document.as_mut()) {
            resolve(document, format!("servers[{i}].openapi.document"));
        }
    }
    for (i, model) in snapshot.models.iter_mut().enumerate() {
        if let Some(secret) = model.api_key.as_mut() {
            resolve(secret, format!("models[{i}].apiKey"));
        }
        if let Some(tls) = model.tls.as_mut() {
            for (field, secret) in tls_secrets_mut(tls) {
                resolve(secret, format!("models[{i}].tls.{field}"));
            }
        }
    }
    for (i, provider) in snapshot.identity_providers.iter_mut().enumerate() {
        if let Some(brokered) = provider.brokered.as_mut() {
            resolve(
                &mut brokered.client_secret,
                format!("identityProviders[{i}].brokered.clientSecret"),
            );
        }
        if let Some(tls) = provider.tls.as_mut() {
            for (field, secret) in tls_secrets_mut(tls) {
                resolve(secret, format!("identityProviders[{i}].tls.{field}"));
            }
        }
    }
    for (i, key) in snapshot.keys.iter_mut().enumerate() {
        if let Some(secret) = key.secret.take() {
            match (&key.hash, secret.resolve(lookup)) {
                (Some(_), _) => errors.push(FieldError {
                    path: format!("keys[{i}]"),
                    message: "give either hash or secret, not both".into(),
                }),
                (None, Ok(value)) if value.is_empty() => errors.push(FieldError {
                    path: format!("keys[{i}].secret"),
                    message: "is empty".into(),
                }),
                (None, Ok(value)) => key.hash = Some(hash_key(&value)),
                (None, Err(message)) => errors.push(FieldError {
                    path: format!("keys[{i}].secret"),
                    message,
                }),
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(SnapshotError { errors })
    }
}

/// Every secret of a TLS setting, with its field name.
fn tls_secrets_mut(tls: &mut UpstreamTls) -> Vec<(&'static str, &mut SecretSource)> {
    let mut out = Vec::new();
    if let Some(bundle) = tls.ca_bundle.as_mut() {
        out.push(("caBundle", bundle));
    }
    if let Some(c) = tls.client_certificate.as_mut() {
        out.push(("clientCertificate.certificate", &mut c.certificate));
        out.push(("clientCertificate.key", &mut c.key));
    }
    out
}

/// Every secret an auth arm holds, with its field name.
fn auth_secrets_mut(auth: &mut UpstreamAuth) -> Vec<(&'static str, &mut SecretSource)> {
    match auth {
        UpstreamAuth::None
        | UpstreamAuth::Passthrough { .. }
        | UpstreamAuth::OauthDelegate { .. } => Vec::new(),
        UpstreamAuth::ApiKey { secret, .. }
        | UpstreamAuth::Bearer { secret, .. }
        | UpstreamAuth::Basic { secret }
        | UpstreamAuth::Token { secret, .. }
        | UpstreamAuth::Authorization { secret } => vec![("secret", secret)],
        UpstreamAuth::Oauth2ClientCredentials {
            client_id,
            client_secret,
            ..
        } => vec![("clientId", client_id), ("clientSecret", client_secret)],
        UpstreamAuth::TokenExchange {
            client_id,
            client_secret,
            ..
        }
        | UpstreamAuth::UserOauth {
            client_id,
            client_secret,
            ..
        } => {
            let mut all = vec![("clientId", client_id)];
            if let Some(secret) = client_secret {
                all.push(("clientSecret", secret));
            }
            all
        }
    }
}

/// Checks a resolved snapshot. Collects every problem rather than stopping at the first, so a
/// person fixes a file in one pass.
/// A scope token (RFC 6749 section 3.3: `%x21 / %x23-5B / %x5D-7E`, at least one).
fn is_scope_token(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

pub fn validate(snapshot: &Snapshot) -> Result<(), SnapshotError> {
    let mut v = Validator::default();
    match NetworkPolicy::parse(&snapshot.gateway.upstream_networks) {
        Ok(policy) => v.networks = policy,
        Err(errors) => {
            for (field, message) in errors {
                v.err(format!("gateway.upstreamNetworks.{field}"), message);
            }
        }
    }
    if let Some(policy) = &snapshot.gateway.policy {
        v.policy("gateway.policy", policy);
    }
    if snapshot.version != SCHEMA_VERSION {
        v.err(
            "version",
            format!(
                "schema version {} is not supported (expected {SCHEMA_VERSION})",
                snapshot.version
            ),
        );
    }
    let g = &snapshot.gateway;
    if g.max_body_bytes == 0 {
        v.err("gateway.maxBodyBytes", "must be greater than 0");
    }
    if g.listing_page_cap == 0 {
        v.err("gateway.listingPageCap", "must be greater than 0");
    }
    if g.session_ttl.is_zero() {
        v.err("gateway.sessionTtl", "must be greater than 0");
    }
    if let Some(url) = &g.public_url {
        match url::Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => v.err(
                "gateway.publicUrl",
                "must be an http or https URL with a host",
            ),
        }
    }
    if let Some(key) = &g.session_key {
        match resolved_value(key) {
            Some(k) if k.len() < 16 => {
                v.err("gateway.sessionKey", "must be at least 16 characters")
            }
            Some(_) => {}
            None => v.err("gateway.sessionKey", "secret was not resolved"),
        }
    }

    validate_store(&g.store, g.session_key.is_some(), &mut v);

    if let Some(bundle) = g.upstream_tls.as_ref().and_then(|t| t.ca_bundle.as_ref()) {
        let mut hash = sha2::Sha256::new();
        if let Err(e) = crate::tls::certificates(bundle, "gateway.upstreamTls.caBundle", &mut hash)
        {
            v.errors.push(e);
        }
    }

    let mut ids: HashMap<&str, usize> = HashMap::new();
    let mut prefixes: HashMap<&str, usize> = HashMap::new();
    for (i, server) in snapshot.servers.iter().enumerate() {
        v.server(i, server);
        if let Some(tls) = &server.tls
            && let Err(errors) = TlsMaterial::parse(tls, &format!("servers[{i}].tls"))
        {
            v.errors.extend(errors);
        }
        if let Some(first) = ids.insert(server.id(), i) {
            v.err(
                format!("servers[{i}].id"),
                format!("{:?} is already used by servers[{first}]", server.id()),
            );
        }
        if let Some(first) = prefixes.insert(server.prefix(), i) {
            v.err(
                format!("servers[{i}].toolPrefix"),
                format!("{:?} is already used by servers[{first}]", server.prefix()),
            );
        }
    }

    let mut model_ids: HashMap<&str, usize> = HashMap::new();
    let mut model_names: HashMap<&str, usize> = HashMap::new();
    for (i, model) in snapshot.models.iter().enumerate() {
        v.model(i, model);
        if let Some(tls) = &model.tls
            && let Err(errors) = TlsMaterial::parse(tls, &format!("models[{i}].tls"))
        {
            v.errors.extend(errors);
        }
        if let Some(first) = model_ids.insert(model.id(), i) {
            v.err(
                format!("models[{i}].id"),
                format!("{:?} is already used by models[{first}]", model.id()),
            );
        }
        for (j, tools) in model.tools.iter().enumerate() {
            let known = snapshot
                .servers
                .iter()
                .any(|s| model.names_server(&tools.server, s))
                || snapshot
                    .virtual_servers
                    .iter()
                    .any(|vs| model.names_virtual_server(&tools.server, vs));
            if !tools.server.is_empty() && !known {
                v.err(
                    format!("models[{i}].tools[{j}].server"),
                    format!("no server {:?} in this config", tools.server),
                );
            }
        }
        for name in model.client_names() {
            if let Some(first) = model_names.insert(name, i)
                && first != i
            {
                v.err(
                    format!("models[{i}].modelNames"),
                    format!("{name:?} is already a name of models[{first}]"),
                );
            }
        }
    }

    v.virtual_servers(snapshot, &prefixes);

    if let Some(tokens) = &g.service_account_tokens {
        let path = "gateway.serviceAccountTokens";
        if tokens.issuer.is_empty() {
            v.err(format!("{path}.issuer"), "must not be empty");
        }
        if tokens.audiences.is_empty() || tokens.audiences.iter().any(String::is_empty) {
            v.err(
                format!("{path}.audiences"),
                "must name at least one audience",
            );
        }
        if tokens
            .jwks
            .get("keys")
            .and_then(serde_json::Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            v.err(
                format!("{path}.jwks"),
                "must be a JSON Web Key Set with at least one key ({\"keys\": [...]})",
            );
        }
    }
    v.identity(snapshot);
    let mut bound: HashMap<&str, usize> = HashMap::new();
    for (i, key) in snapshot.keys.iter().enumerate() {
        for (j, account) in key.service_accounts.iter().enumerate() {
            let path = format!("keys[{i}].serviceAccounts[{j}]");
            let well_formed = account.split_once('/').is_some_and(|(ns, name)| {
                is_dns_label(ns) && (name == "*" || crate::names::is_dns_subdomain(name))
            });
            if !well_formed {
                v.err(
                    path,
                    format!("{account:?} is not <namespace>/<name> or <namespace>/*"),
                );
            } else if let Some(first) = bound.insert(account, i) {
                v.err(
                    path,
                    format!("{account:?} is already bound by keys[{first}]"),
                );
            }
        }
    }

    let mut hashes: HashSet<&str> = HashSet::new();
    let mut key_names: HashSet<(&str, &str)> = HashSet::new();
    for (i, key) in snapshot.keys.iter().enumerate() {
        let path = format!("keys[{i}]");
        if key.name.is_empty() {
            v.err(format!("{path}.name"), "must not be empty");
        }
        if !key_names.insert((&key.namespace, &key.name)) {
            v.err(
                format!("{path}.name"),
                format!(
                    "{:?} appears twice in namespace {:?}",
                    key.name, key.namespace
                ),
            );
        }
        match &key.hash {
            None => v.err(format!("{path}.hash"), "a key needs a hash or a secret"),
            Some(h) if parse_hash(h).is_none() => v.err(
                format!("{path}.hash"),
                "must be sha256: followed by 64 hex digits",
            ),
            Some(h) => {
                if !hashes.insert(h) {
                    v.err(
                        format!("{path}.hash"),
                        "another key has the same secret; every key must be unique",
                    );
                }
            }
        }
        if let Some(Err(message)) = key.expiry() {
            v.err(format!("{path}.expiresAt"), message);
        }
        v.filter(&format!("{path}.tools"), &key.tools);
        v.argument_rules(&path, &key.arguments);
        v.limits(&format!("{path}.limits"), key.limits.as_ref());
    }
    v.finish()
}

/// A URL whose host is loopback (`localhost`, 127.0.0.0/8, ::1).
fn is_loopback_url(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

#[derive(Default)]
struct Validator {
    errors: Vec<FieldError>,
    /// Upstream URLs with a literal address are checked against it.
    networks: NetworkPolicy,
    /// The server being checked's own policy: its URLs' hosts are checked against it too.
    scoped: Option<ScopedPolicy>,
}

impl Validator {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }

    fn finish(self) -> Result<(), SnapshotError> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(SnapshotError {
                errors: self.errors,
            })
        }
    }

    fn header_name(&mut self, path: String, name: &str) {
        if !is_header_name(name) {
            self.err(path, format!("{name:?} is not a valid header name"));
        }
    }

    fn secret_value(&mut self, path: String, source: &SecretSource, header_bound: bool) {
        match resolved_value(source) {
            None => self.err(path, "secret was not resolved"),
            Some(value) if header_bound && !is_header_value(value) => {
                self.err(path, "must not contain CR, LF or NUL")
            }
            Some("") => self.err(path, "is empty"),
            Some(_) => {}
        }
    }

    /// A policy hook: an http(s) URL (the same rule as an upstream's, which gets the same
    /// arguments); a timeout above zero; at least one phase.
    fn policy(&mut self, path: &str, policy: &crate::model::PolicyHook) {
        match url::Url::parse(&policy.url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {}
            Ok(_) => self.err(format!("{path}.url"), "must be an http or https URL"),
            Err(e) => self.err(format!("{path}.url"), format!("not a URL: {e}")),
        }
        if policy.timeout.is_zero() {
            self.err(format!("{path}.timeout"), "must be above zero");
        }
        if policy.phases.is_empty() {
            self.err(
                format!("{path}.phases"),
                "names no check (request, response)",
            );
        }
    }

    fn filter(&mut self, path: &str, filter: &crate::model::ToolFilter) {
        for name in &filter.allow {
            if filter.deny.contains(name) {
                self.err(
                    format!("{path}.deny"),
                    format!("{name:?} is both allowed and denied"),
                );
            }
        }
    }

    /// `<path>.arguments`: argument rules (of a key or a virtual server), each for some tools,
    /// with a rule that compiles, bindings that parse, or both.
    fn argument_rules(&mut self, path: &str, rules: &[crate::ArgumentRule]) {
        for (j, rule) in rules.iter().enumerate() {
            let at = format!("{path}.arguments[{j}]");
            if rule.tools.is_empty() {
                self.err(
                    format!("{at}.tools"),
                    "must name at least one tool (globs with `*`)",
                );
            }
            if rule.rule.is_none() && rule.bind.is_empty() {
                self.err(at.clone(), "needs a rule, a bind, or both");
            }
            if let Some(Err(message)) = rule.rule.as_deref().map(crate::arguments::rule) {
                self.err(format!("{at}.rule"), message.0);
            }
            for (name, template) in &rule.bind {
                if let Err(message) = crate::arguments::binding(template) {
                    self.err(format!("{at}.bind.{name}"), message.0);
                }
            }
        }
    }

    /// Virtual servers: names and paths unique (paths also against servers' prefixes), every
    /// source a server of the snapshot, every override a tool its source selects, presented
    /// names valid and unique, narrowing consistent.
    fn virtual_servers(&mut self, snapshot: &Snapshot, prefixes: &HashMap<&str, usize>) {
        let mut ids: HashMap<&str, usize> = HashMap::new();
        let mut paths: HashMap<&str, usize> = HashMap::new();
        for (i, vs) in snapshot.virtual_servers.iter().enumerate() {
            let path = format!("virtualServers[{i}]");
            if !is_dns_label(&vs.name) {
                self.err(
                    format!("{path}.name"),
                    format!("{:?} is not a DNS-1123 label", vs.name),
                );
            }
            if !is_dns_label(vs.path()) {
                self.err(
                    format!("{path}.path"),
                    format!("{:?} is not a DNS-1123 label", vs.path()),
                );
            }
            if let Some(first) = ids.insert(vs.id(), i) {
                self.err(
                    format!("{path}.id"),
                    format!("{:?} is already used by virtualServers[{first}]", vs.id()),
                );
            }
            // Keys and models name both kinds the same way: one id, one thing.
            if let Some(server) = snapshot.servers.iter().position(|s| s.id() == vs.id()) {
                self.err(
                    format!("{path}.id"),
                    format!("{:?} is already the id of servers[{server}]", vs.id()),
                );
            }
            if let Some(first) = paths.insert(vs.path(), i) {
                self.err(
                    format!("{path}.path"),
                    format!("{:?} is already used by virtualServers[{first}]", vs.path()),
                );
            }
            if let Some(server) = prefixes.get(vs.path()) {
                self.err(
                    format!("{path}.path"),
                    format!("{:?} is already the toolPrefix of servers[{server}] (both would be /mcp/{})", vs.path(), vs.path()),
                );
            }
            if vs.sources.is_empty() {
                self.err(format!("{path}.sources"), "must name at least one server");
            }
            self.argument_rules(&path, &vs.arguments);
            if let Some(search) = &vs.search {
                self.tool_search(&format!("{path}.search"), search);
            }
            let mut presented: HashMap<&str, String> = HashMap::new();
            for (j, source) in vs.sources.iter().enumerate() {
                let at = format!("{path}.sources[{j}]");
                let found = snapshot
                    .servers
                    .iter()
                    .filter(|s| vs.names_server(&source.server, s))
                    .count();
                if found != 1 {
                    self.err(
                        format!("{at}.server"),
                        format!("no server {:?} in this config", source.server),
                    );
                }
                for (kind, filter) in [
                    ("tools", &source.tools),
                    ("prompts", &source.prompts),
                    ("resources", &source.resources),
                ] {
                    if let Some(filter) = filter {
                        self.filter(&format!("{at}.{kind}"), filter);
                    }
                }
                let mut overridden: HashMap<&str, usize> = HashMap::new();
                for (k, o) in source.overrides.iter().enumerate() {
                    let op = format!("{at}.overrides[{k}]");
                    if !source.selects(&source.tools, &o.tool) {
                        self.err(
                            format!("{op}.tool"),
                            format!("{:?} is not selected by {at}.tools", o.tool),
                        );
                    }
                    if let Some(first) = overridden.insert(&o.tool, k) {
                        self.err(
                            format!("{op}.tool"),
                            format!("{:?} is already overridden by overrides[{first}]", o.tool),
                        );
                    }
                    if let Some(name) = &o.name {
                        if !crate::names::is_tool_name(name) {
                            self.err(
                                format!("{op}.name"),
                                format!("{name:?} is not 1-64 of a-z A-Z 0-9 _ - ."),
                            );
                        }
                        if let Some(first) = presented.insert(name, op.clone()) {
                            self.err(
                                format!("{op}.name"),
                                format!("{name:?} is already the name of {first}"),
                            );
                        }
                    }
                    for (param, narrowed) in &o.parameters {
                        let pp = format!("{op}.parameters.{param}");
                        if let (Some(fixed), Some(allowed)) = (&narrowed.fixed, &narrowed.allowed)
                            && !allowed.contains(fixed)
                        {
                            self.err(format!("{pp}.fixed"), "is not one of the parameter's enum");
                        }
                        if narrowed.allowed.as_ref().is_some_and(Vec::is_empty) {
                            self.err(format!("{pp}.enum"), "must offer at least one value");
                        }
                    }
                }
            }
        }
    }

    /// A search-mode virtual server's settings: pinned names are tool names, each once, and
    /// not the search tools' own.
    fn tool_search(&mut self, path: &str, search: &crate::model::ToolSearch) {
        if !(1..=50).contains(&search.results) {
            self.err(format!("{path}.results"), "must be between 1 and 50");
        }
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (k, name) in search.pinned.iter().enumerate() {
            let at = format!("{path}.pinned[{k}]");
            if !crate::names::is_tool_name(name) {
                self.err(&at, format!("{name:?} is not 1-64 of a-z A-Z 0-9 _ - ."));
            } else if [crate::model::FIND_TOOLS, crate::model::CALL_TOOL].contains(&name.as_str()) {
                self.err(
                    &at,
                    format!("{name:?} is one of the search tools' own names"),
                );
            }
            if let Some(first) = seen.insert(name, k) {
                self.err(&at, format!("{name:?} is already pinned[{first}]"));
            }
        }
    }

    /// One document source; a URL one under the same address rules as the server's `url`.
    /// (The document itself is compiled where it is read: the gateway's table build for an
    /// inline one, the first listing for a fetched one.)
    fn openapi(&mut self, path: &str, base: &str, openapi: &crate::openapi::OpenApiSpec) {
        match (&openapi.document, &openapi.document_url) {
            (Some(_), Some(_)) => self.err(
                format!("{path}.documentUrl"),
                "give document or documentUrl, not both",
            ),
            (None, None) => self.err(format!("{path}.document"), "needs document or documentUrl"),
            (Some(document), None) => {
                self.secret_value(format!("{path}.document"), document, false)
            }
            (None, Some(url)) => match url::Url::parse(base).and_then(|b| b.join(url)) {
                Ok(joined) => self.upstream_url(format!("{path}.documentUrl"), joined.as_str()),
                Err(e) => self.err(
                    format!("{path}.documentUrl"),
                    format!("not a valid URL: {e}"),
                ),
            },
        }
        if openapi.max_compiled_bytes == Some(0) {
            self.err(format!("{path}.maxCompiledBytes"), "must be at least 1");
        }
        for (j, method) in openapi.operations.methods.iter().enumerate() {
            if !crate::openapi::HTTP_METHODS.contains(&method.as_str()) {
                self.err(
                    format!("{path}.operations.methods[{j}]"),
                    format!("{method:?} is not a lower-case HTTP method"),
                );
            }
        }
        for (j, o) in openapi.overrides.iter().enumerate() {
            if let Some(name) = &o.name
                && !crate::names::is_tool_name(name)
            {
                self.err(
                    format!("{path}.overrides[{j}].name"),
                    format!("{name:?} is not 1-64 of a-z A-Z 0-9 _ - ."),
                );
            }
        }
    }

    fn limits(&mut self, path: &str, limits: Option<&RequestLimits>) {
        let Some(limits) = limits else { return };
        if limits.concurrent_requests == Some(0) {
            self.err(
                format!("{path}.concurrentRequests"),
                "must be at least 1 (leave it out for no limit)",
            );
        }
        if let Some(Err(message)) = limits.parsed_rate() {
            self.err(format!("{path}.rate"), message);
        }
        match (limits.burst, &limits.rate) {
            (Some(0), _) => self.err(format!("{path}.burst"), "must be at least 1"),
            (Some(_), None) => self.err(format!("{path}.burst"), "needs a rate"),
            _ => {}
        }
    }

    fn server(&mut self, i: usize, server: &ServerSpec) {
        self.scoped = match server.upstream_policy.as_ref().map(ScopedPolicy::parse) {
            Some(Ok(policy)) => Some(policy),
            Some(Err(errors)) => {
                for (field, message) in errors {
                    self.err(format!("servers[{i}].upstreamPolicy.{field}"), message);
                }
                None
            }
            None => None,
        };
        self.server_fields(i, server);
        self.scoped = None;
    }

    fn server_fields(&mut self, i: usize, server: &ServerSpec) {
        let path = format!("servers[{i}]");
        self.limits(&format!("{path}.limits"), server.limits.as_ref());
        if !is_dns_label(&server.name) {
            self.err(
                format!("{path}.name"),
                format!(
                    "{:?} is not a DNS-1123 label (lower-case letters, digits, '-')",
                    server.name
                ),
            );
        }
        if let Some(prefix) = &server.tool_prefix
            && !is_dns_label(prefix)
        {
            self.err(
                format!("{path}.toolPrefix"),
                format!(
                    "{prefix:?} is not a DNS-1123 label (lower-case letters, digits, '-'; no '_')"
                ),
            );
        }
        self.upstream_url(format!("{path}.url"), &server.url);
        if server.timeout.is_zero() {
            self.err(format!("{path}.timeout"), "must be greater than 0");
        }
        for (j, header) in server.headers.static_headers.iter().enumerate() {
            self.header_name(format!("{path}.headers.static[{j}].name"), &header.name);
            self.secret_value(
                format!("{path}.headers.static[{j}].value"),
                &header.value,
                true,
            );
        }
        for (j, name) in server.headers.forward.iter().enumerate() {
            self.header_name(format!("{path}.headers.forward[{j}]"), name);
        }
        self.filter(&format!("{path}.tools"), &server.tools.filter());
        if let Some(policy) = &server.policy {
            self.policy(&format!("{path}.policy"), policy);
        }
        for (tool, approval) in &server.tools.approved {
            if let Err(e) = approval.parse::<switchboard_trust::Approval>() {
                self.err(format!("{path}.tools.approved.{tool}"), e.to_string());
            }
        }
        for (tool, scopes) in &server.tools.required_scopes {
            let at = format!("{path}.tools.requiredScopes.{tool}");
            if scopes.is_empty() {
                self.err(at.clone(), "names no scope (leave the tool out instead)");
            }
            for scope in scopes {
                if !is_scope_token(scope) {
                    self.err(
                        at.clone(),
                        format!(
                            "{scope:?} is not an OAuth scope (RFC 6749: printable ASCII without spaces, quotes or backslashes)"
                        ),
                    );
                }
            }
        }
        if let Some(openapi) = &server.openapi {
            self.openapi(&format!("{path}.openapi"), &server.url, openapi);
        }
        let auth = format!("{path}.auth");
        if let Some(h) = server.auth.upstream_token_header() {
            self.header_name(format!("{auth}.upstreamTokenHeader"), h);
        }
        match &server.auth {
            UpstreamAuth::None | UpstreamAuth::Passthrough { .. } => {}
            UpstreamAuth::ApiKey {
                secret,
                header,
                prefix,
            } => {
                self.header_name(format!("{auth}.header"), header);
                self.secret_value(format!("{auth}.secret"), secret, true);
                if let Some(p) = prefix
                    && !is_header_value(p)
                {
                    self.err(format!("{auth}.prefix"), "must not contain CR, LF or NUL");
                }
            }
            UpstreamAuth::Bearer { secret, .. }
            | UpstreamAuth::Token { secret, .. }
            | UpstreamAuth::Basic { secret }
            | UpstreamAuth::Authorization { secret } => {
                self.secret_value(format!("{auth}.secret"), secret, true);
            }
            UpstreamAuth::OauthDelegate { header, .. } => {
                if let Some(h) = header {
                    self.header_name(format!("{auth}.header"), h);
                }
            }
            UpstreamAuth::Oauth2ClientCredentials {
                token_url,
                client_id,
                client_secret,
                ..
            } => {
                self.upstream_url(format!("{auth}.tokenUrl"), token_url);
                self.secret_value(format!("{auth}.clientId"), client_id, false);
                self.secret_value(format!("{auth}.clientSecret"), client_secret, false);
            }
            UpstreamAuth::TokenExchange {
                token_url,
                client_id,
                client_secret,
                cache_size,
                ..
            } => {
                self.upstream_url(format!("{auth}.tokenUrl"), token_url);
                self.secret_value(format!("{auth}.clientId"), client_id, false);
                if let Some(secret) = client_secret {
                    self.secret_value(format!("{auth}.clientSecret"), secret, false);
                }
                if *cache_size == 0 {
                    self.err(format!("{auth}.cacheSize"), "must be greater than 0");
                }
            }
            UpstreamAuth::UserOauth {
                authorization_server,
                client_id,
                client_secret,
                resource,
                scopes,
                ..
            } => {
                if let Some(issuer) = authorization_server {
                    self.upstream_url(format!("{auth}.authorizationServer"), issuer);
                }
                self.secret_value(format!("{auth}.clientId"), client_id, false);
                if let Some(secret) = client_secret {
                    self.secret_value(format!("{auth}.clientSecret"), secret, false);
                }
                if let Some(resource) = resource
                    && url::Url::parse(resource).is_err()
                {
                    self.err(format!("{auth}.resource"), "must be an absolute URL");
                }
                if let Some(i) = scopes
                    .iter()
                    .position(|s| s.is_empty() || s.contains(char::is_whitespace))
                {
                    self.err(
                        format!("{auth}.scopes[{i}]"),
                        "must be one scope token (no blanks)",
                    );
                }
            }
        }
    }

    fn model(&mut self, i: usize, model: &ModelSpec) {
        let path = format!("models[{i}]");
        if !is_dns_label(&model.name) {
            self.err(
                format!("{path}.name"),
                format!(
                    "{:?} is not a DNS-1123 label (lower-case letters, digits, '-')",
                    model.name
                ),
            );
        }
        for (j, name) in model.model_names.iter().enumerate() {
            if name.is_empty() || name.len() > 256 || name.chars().any(char::is_control) {
                self.err(
                    format!("{path}.modelNames[{j}]"),
                    "must be 1 to 256 printable characters",
                );
            }
        }
        self.upstream_url(format!("{path}.baseUrl"), &model.base_url);
        if let Some(secret) = &model.api_key {
            self.secret_value(format!("{path}.apiKey"), secret, true);
        }
        if model.timeout.is_zero() {
            self.err(format!("{path}.timeout"), "must be greater than 0");
        }
        if model.max_iterations == 0 || model.max_iterations > 64 {
            self.err(format!("{path}.maxIterations"), "must be between 1 and 64");
        }
        for (j, tools) in model.tools.iter().enumerate() {
            if tools.server.is_empty() {
                self.err(format!("{path}.tools[{j}].server"), "must not be empty");
            }
            self.filter(&format!("{path}.tools[{j}].tools"), &tools.tools);
        }
    }

    /// `identityProviders` and the `keys[].people` that name them.
    fn identity(&mut self, snapshot: &Snapshot) {
        let mut providers: HashMap<(&str, &str), usize> = HashMap::new();
        let mut brokered_first = None;
        for (i, provider) in snapshot.identity_providers.iter().enumerate() {
            let path = format!("identityProviders[{i}]");
            if !crate::names::is_dns_subdomain(&provider.name) {
                self.err(format!("{path}.name"), "must be a DNS subdomain name");
            } else if let Some(first) = providers.insert((&provider.namespace, &provider.name), i) {
                self.err(
                    format!("{path}.name"),
                    format!("{:?} is already identityProviders[{first}]", provider.name),
                );
            }
            match url::Url::parse(&provider.issuer) {
                Ok(u) if u.scheme() == "https" || (u.scheme() == "http" && is_loopback_url(&u)) => {
                    if u.query().is_some() || u.fragment().is_some() {
                        self.err(
                            format!("{path}.issuer"),
                            "an issuer has no query or fragment",
                        );
                    }
                    self.upstream_url(format!("{path}.issuer"), &provider.issuer);
                }
                Ok(_) => self.err(
                    format!("{path}.issuer"),
                    "must be an https URL (http only on loopback, for tests)",
                ),
                Err(e) => self.err(format!("{path}.issuer"), format!("not a valid URL: {e}")),
            }
            if let Some(jwks) = &provider.jwks_url {
                self.upstream_url(format!("{path}.jwksUrl"), jwks);
            }
            if provider.audiences.is_empty() || provider.audiences.iter().any(String::is_empty) {
                self.err(
                    format!("{path}.audiences"),
                    "must name at least one audience",
                );
            }
            if provider.algorithms.is_empty() {
                self.err(
                    format!("{path}.algorithms"),
                    "must name at least one algorithm",
                );
            }
            for (j, alg) in provider.algorithms.iter().enumerate() {
                if !crate::identity::ALGORITHMS.contains(&alg.as_str()) {
                    self.err(
                        format!("{path}.algorithms[{j}]"),
                        format!(
                            "{alg:?} is not one of {} (no HMAC, no none)",
                            crate::identity::ALGORITHMS.join(", ")
                        ),
                    );
                }
            }
            for (field, claim) in [
                ("subject", &provider.claims.subject),
                ("groups", &provider.claims.groups),
            ] {
                if claim.is_empty() || claim.split('.').any(str::is_empty) {
                    self.err(
                        format!("{path}.claims.{field}"),
                        "must be a claim name or a dotted path (realm_access.roles)",
                    );
                }
            }
            if provider.clock_skew > std::time::Duration::from_secs(600) {
                self.err(format!("{path}.clockSkew"), "must be at most 10m");
            }
            if let Some(brokered) = &provider.brokered {
                let path = format!("{path}.brokered");
                if brokered.client_id.is_empty() {
                    self.err(format!("{path}.clientId"), "must not be empty");
                }
                if !brokered.scopes.iter().any(|s| s == "openid") {
                    self.err(format!("{path}.scopes"), "must include openid");
                }
                let ttl =
                    |d: std::time::Duration, max: u64| d.as_secs() >= 30 && d.as_secs() <= max;
                if !ttl(brokered.access_token_ttl, 3600) {
                    self.err(
                        format!("{path}.accessTokenTtl"),
                        "must be between 30s and 1h",
                    );
                }
                if !ttl(brokered.refresh_token_ttl, 24 * 3600) {
                    self.err(
                        format!("{path}.refreshTokenTtl"),
                        "must be between 30s and 24h",
                    );
                }
                if let Some(first) = brokered_first {
                    self.err(
                        path,
                        format!(
                            "only one identity provider is brokered (identityProviders[{first}] is)"
                        ),
                    );
                } else {
                    brokered_first = Some(i);
                }
            }
        }
        // The provider that signs identity assertions, named once every provider is known.
        for (i, provider) in snapshot.identity_providers.iter().enumerate() {
            let named = provider
                .brokered
                .as_ref()
                .and_then(|b| b.identity_assertions.as_ref())
                .and_then(|a| a.provider.as_deref());
            if let Some(name) = named
                && !providers.contains_key(&(provider.namespace.as_str(), name))
            {
                self.err(
                    format!("identityProviders[{i}].brokered.identityAssertions.provider"),
                    format!(
                        "{name:?} is not an identity provider in namespace {:?}",
                        provider.namespace
                    ),
                );
            }
        }
        for (i, key) in snapshot.keys.iter().enumerate() {
            for (j, people) in key.people.iter().enumerate() {
                let path = format!("keys[{i}].people[{j}]");
                if !providers.contains_key(&(key.namespace.as_str(), people.provider.as_str())) {
                    self.err(
                        format!("{path}.provider"),
                        format!(
                            "no identity provider {:?} in namespace {:?}",
                            people.provider, key.namespace
                        ),
                    );
                }
                if people.subjects.is_empty() && people.groups.is_empty() {
                    self.err(path.clone(), "must name subjects, groups or both");
                }
                if people
                    .subjects
                    .iter()
                    .chain(&people.groups)
                    .any(String::is_empty)
                {
                    self.err(path, "subjects and groups must not be empty strings");
                }
            }
        }
    }

    /// A URL the gateway connects to: http or https with a host, and not a literal address
    /// the network policy denies. The URL is not echoed: it may carry credentials (user:pass@
    /// or a query token).
    fn upstream_url(&mut self, path: String, url: &str) {
        match url::Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
                let scoped = self.scoped.as_ref().map_or(Ok(()), |p| p.check_url(&u));
                if let Err(denied) = self.networks.check_url(&u).and(scoped) {
                    self.err(path, denied.to_string());
                }
            }
            Ok(u) => self.err(
                path,
                format!(
                    "must be an http or https URL with a host (scheme {:?})",
                    u.scheme()
                ),
            ),
            Err(e) => self.err(path, format!("not a valid URL: {e}")),
        }
    }
}

/// `gateway.store`: one backend, a URL the client can use, and a sealing key wherever sealed
/// values outlive the process (a file, Redis).
fn validate_store(store: &crate::StoreSettings, has_session_key: bool, v: &mut Validator) {
    if store.memory.is_some() && store.redis.is_some() {
        v.err("gateway.store", "name one backend: memory or redis");
    }
    if let Some(redis) = &store.redis {
        match url::Url::parse(&redis.url) {
            Ok(u) if !matches!(u.scheme(), "redis" | "rediss" | "unix") => v.err(
                "gateway.store.redis.url",
                "must be a redis://, rediss:// or unix:// URL",
            ),
            Ok(u) if u.password().is_some() => v.err(
                "gateway.store.redis.url",
                "must not carry a password (give it as gateway.store.redis.password)",
            ),
            Ok(u) if u.scheme() != "unix" && u.host_str().is_none_or(str::is_empty) => {
                v.err("gateway.store.redis.url", "must name a host")
            }
            Ok(_) => {}
            Err(e) => v.err("gateway.store.redis.url", format!("is not a URL: {e}")),
        }
        if redis.timeout.is_zero() {
            v.err("gateway.store.redis.timeout", "must be greater than 0");
        }
        if let Some(bundle) = &redis.ca_bundle {
            if !redis.url.starts_with("rediss://") {
                v.err(
                    "gateway.store.redis.caBundle",
                    "applies to a rediss:// URL only",
                );
            }
            let mut hash = sha2::Sha256::new();
            if let Err(e) =
                crate::tls::certificates(bundle, "gateway.store.redis.caBundle", &mut hash)
            {
                v.errors.push(e);
            }
        }
    }
    let keys = store
        .key
        .iter()
        .map(|k| ("gateway.store.key".to_string(), k))
        .chain(
            store
                .previous_keys
                .iter()
                .enumerate()
                .map(|(i, k)| (format!("gateway.store.previousKeys[{i}]"), k)),
        );
    for (path, key) in keys {
        match resolved_value(key) {
            Some(k) if k.len() < 16 => v.err(path, "must be at least 16 characters"),
            Some(_) => {}
            None => v.err(path, "secret was not resolved"),
        }
    }
    let outlives_process =
        store.redis.is_some() || store.memory.as_ref().is_some_and(|m| m.file.is_some());
    if outlives_process && store.key.is_none() && !has_session_key {
        v.err(
            "gateway.store.key",
            "is needed (or gateway.sessionKey) when the store outlives the process: a file or redis",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoLookup;
    impl SecretLookup for NoLookup {
        fn env(&self, name: &str) -> Option<String> {
            (name == "TOKEN").then(|| "from-env".to_string())
        }
        fn file(&self, _: &str) -> std::io::Result<String> {
            Err(std::io::Error::other("no files in tests"))
        }
    }

    fn load_str(text: &str) -> Result<Snapshot, SnapshotError> {
        load(text, &NoLookup)
    }

    #[test]
    fn identity_providers_and_people_bindings_are_checked_by_field() {
        let good = "identityProviders:\n- name: corp\n  issuer: https://login.example/realms/r\n  audiences: [switchboard]\nkeys:\n- name: team-a\n  secret: s1\n  people: [{provider: corp, groups: [team-a]}]\n";
        let s = load_str(good).unwrap();
        assert_eq!(s.identity_providers[0].claims.subject, "sub");
        assert_eq!(s.identity_providers[0].algorithms, ["RS256", "ES256"]);
        assert_eq!(s.keys[0].people[0].groups, ["team-a"]);
        let bad = "identityProviders:\n- name: corp\n  issuer: http://login.example/realms/r\n  audiences: []\n  algorithms: [HS256]\n  claims: {groups: 'realm_access.'}\nkeys:\n- name: team-a\n  secret: s1\n  people: [{provider: other, groups: [team-a]}, {provider: corp}]\n";
        let err = load_str(bad).unwrap_err().to_string();
        for field in [
            "identityProviders[0].issuer",
            "identityProviders[0].audiences",
            "identityProviders[0].algorithms[0]",
            "identityProviders[0].claims.groups",
            "keys[0].people[0].provider",
            "keys[0].people[1]",
        ] {
            assert!(err.contains(field), "{field} missing in {err}");
        }
        // http is accepted on loopback (test identity providers).
        let local = good.replace("https://login.example", "http://127.0.0.1:8080");
        assert!(load_str(&local).is_ok());
    }

    /// Brokered mode: its client secret is resolved like every secret (and so is a provider's
    /// TLS bundle), one provider at most is brokered, it asks for `openid`, and its lifetimes
    /// are bounded.
    #[test]
    fn a_brokered_provider_is_resolved_and_checked_by_field() {
        let provider = |name: &str, brokered: &str| {
            format!(
                "- name: {name}
  issuer: https://login.example/realms/{name}
  audiences: [gw]
  brokered: {brokered}
"
            )
        };
        let good = format!(
            "identityProviders:\n{}",
            provider("corp", "{clientId: gw, clientSecret: {env: TOKEN}}")
        );
        let s = load_str(&good).unwrap();
        let brokered = s.identity_providers[0].brokered.as_ref().unwrap();
        assert_eq!(
            crate::resolved_value(&brokered.client_secret),
            Some("from-env")
        );
        assert_eq!(brokered.scopes, ["openid"]);
        assert_eq!(
            brokered.access_token_ttl,
            std::time::Duration::from_secs(300)
        );
        let bad = format!(
            "identityProviders:\n{}{}",
            provider(
                "a",
                "{clientId: '', clientSecret: x, scopes: [profile], accessTokenTtl: 2h, refreshTokenTtl: 2d}"
            ),
            provider("b", "{clientId: gw, clientSecret: x}"),
        );
        let err = load_str(&bad).unwrap_err().to_string();
        for field in [
            "identityProviders[0].brokered.clientId",
            "identityProviders[0].brokered.scopes",
            "identityProviders[0].brokered.accessTokenTtl",
            "identityProviders[0].brokered.refreshTokenTtl",
            "identityProviders[1].brokered: only one identity provider is brokered",
        ] {
            assert!(err.contains(field), "{field} missing in {err}");
        }
        let missing = good.replace("env: TOKEN", "env: UNSET");
        let err = load_str(&missing).unwrap_err().to_string();
        assert!(
            err.contains("identityProviders[0].brokered.clientSecret"),
            "{err}"
        );
        // Identity assertions: signed by this provider, or by another one named in its namespace.
        let asserted = |by: &str| {
            format!(
                "identityProviders:\n{}{}",
                provider(
                    "corp",
                    &format!("{{clientId: gw, clientSecret: x, identityAssertions: {by}}}")
                ),
                provider("org", "null"),
            )
        };
        assert!(load_str(&asserted("{}")).is_ok());
        assert!(load_str(&asserted("{provider: org}")).is_ok());
        let err = load_str(&asserted("{provider: elsewhere}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("identityProviders[0].brokered.identityAssertions.provider"),
            "{err}"
        );
        assert!(
            load_str(&asserted("{issuer: x}"))
                .unwrap_err()
                .to_string()
                .contains("issuer")
        );
        let tls = "identityProviders:\n- name: corp\n  issuer: https://login.example/r\n  audiences: [gw]\n  tls: {caBundle: {file: /nonexistent/ca.pem}}\n";
        let err = load_str(tls).unwrap_err().to_string();
        assert!(err.contains("identityProviders[0].tls.caBundle"), "{err}");
    }

    #[test]
    fn minimal_file_loads_with_defaults() {
        let s = load_str("servers:\n- name: a\n  url: http://127.0.0.1:1/mcp\n").unwrap();
        assert_eq!(s.servers[0].id(), "a");
        assert_eq!(s.servers[0].prefix(), "a");
        assert_eq!(s.servers[0].namespace, "default");
    }

    #[test]
    fn denied_upstream_addresses_name_their_field() {
        let text = "servers:\n- name: a\n  url: http://169.254.169.254/latest\n- name: b\n  url: http://x/mcp\n  auth: {type: oauth2ClientCredentials, tokenUrl: 'http://[fd00:ec2::254]/token', clientId: c, clientSecret: s}\n- name: c\n  url: http://10.0.0.1/mcp\nmodels:\n- name: m\n  provider: anthropic\n  baseUrl: http://100.100.100.200\n";
        let err = load_str(text).unwrap_err().to_string();
        for field in [
            "servers[0].url",
            "servers[1].auth.tokenUrl",
            "models[0].baseUrl",
        ] {
            assert!(err.contains(field), "{field} missing in {err}");
        }
        assert!(!err.contains("servers[2]"), "{err}");
        assert!(!err.contains("/latest"), "the URL is not echoed: {err}");
        let allowed = format!(
            "gateway:\n  upstreamNetworks: {{deny: [10.0.0.0/8], allow: [169.254.0.0/16]}}\n{}",
            "servers:\n- name: a\n  url: http://169.254.169.254/latest\n- name: c\n  url: http://10.0.0.1/mcp\n"
        );
        let err = load_str(&allowed).unwrap_err().to_string();
        assert!(
            err.contains("servers[1].url") && !err.contains("servers[0]"),
            "{err}"
        );
        let bad = "gateway:\n  upstreamNetworks: {deny: [nope]}\n";
        let err = load_str(bad).unwrap_err().to_string();
        assert!(err.contains("gateway.upstreamNetworks.deny[0]"), "{err}");
    }

    #[test]
    fn limits_load_and_bad_ones_name_their_field() {
        let s = load_str(
            "servers:\n- name: a\n  url: http://x/mcp\n  limits: {concurrentRequests: 4}\nkeys:\n- name: k\n  secret: s\n  limits: {rate: 600/m, burst: 20}\n",
        )
        .unwrap();
        assert_eq!(
            s.servers[0].limits.as_ref().unwrap().concurrent_requests,
            Some(4)
        );
        let rate = s.keys[0]
            .limits
            .as_ref()
            .unwrap()
            .parsed_rate()
            .unwrap()
            .unwrap();
        assert_eq!((rate.count, rate.period.as_secs()), (600, 60));

        let err = load_str(
            "servers:\n- name: a\n  url: http://x/mcp\n  limits: {concurrentRequests: 0}\nkeys:\n- name: k\n  secret: s\n  limits: {rate: 5/day, burst: 0}\n- name: j\n  secret: t\n  limits: {burst: 3}\n",
        )
        .unwrap_err()
        .to_string();
        for field in [
            "servers[0].limits.concurrentRequests",
            "keys[0].limits.rate",
            "keys[0].limits.burst",
            "keys[1].limits.burst",
        ] {
            assert!(err.contains(field), "{field} missing from: {err}");
        }
        assert!(crate::model::parse_rate("0/s").is_err());
        assert!(crate::model::parse_rate("ten/s").is_err());
    }

    #[test]
    fn bad_header_name_names_the_field() {
        let text = "servers:\n- name: a\n  url: http://x/mcp\n- name: b\n  url: http://x/mcp\n- name: c\n  url: http://x/mcp\n  auth: {type: apiKey, secret: s, header: \"X Token\"}\n";
        let err = load_str(text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "servers[2].auth.header: \"X Token\" is not a valid header name"
        );
    }

    #[test]
    fn unknown_field_names_its_path() {
        let err = load_str("servers:\n- name: a\n  url: http://x/mcp\n  timout: 3s\n").unwrap_err();
        assert!(err.to_string().starts_with("servers[0]"), "{err}");
        assert!(err.to_string().contains("timout"), "{err}");
    }

    #[test]
    fn json_files_name_the_field_too() {
        let err =
            load_str(r#"{"servers": [{"name": "a", "url": "http://x/mcp", "timeout": "soon"}]}"#)
                .unwrap_err()
                .to_string();
        assert!(err.starts_with("servers[0].timeout"), "{err}");
        let ok = load_str(r#"{"servers": [{"name": "a", "url": "http://x/mcp"}]}"#).unwrap();
        assert_eq!(ok.servers[0].id(), "a");
    }

    #[test]
    fn errors_do_not_echo_values() {
        let err = load_str("gateway:\n  maxBodyBytes: sk-secret-value\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("gateway.maxBodyBytes"), "{err}");
        assert!(!err.contains("sk-secret-value"), "{err}");
        let err =
            load_str("servers:\n- name: a\n  auth: {type: bearer, secret: \"sk-secret-value\"\n")
                .unwrap_err()
                .to_string();
        assert!(!err.contains("sk-secret-value"), "{err}");
    }

    #[test]
    fn bad_duration_names_its_path() {
        let err =
            load_str("servers:\n- name: a\n  url: http://x/mcp\n  timeout: soon\n").unwrap_err();
        assert!(err.to_string().starts_with("servers[0].timeout"), "{err}");
    }

    #[test]
    fn url_scheme_prefix_and_duplicates_are_checked() {
        let text = "servers:\n- name: a\n  url: ftp://x/mcp\n- name: b\n  url: http://x/mcp\n  toolPrefix: a\n- name: c\n  url: http://x\n  toolPrefix: a_b\n";
        let err = load_str(text).unwrap_err().to_string();
        assert!(err.contains("servers[0].url"), "{err}");
        assert!(
            err.contains("servers[1].toolPrefix: \"a\" is already used by servers[0]"),
            "{err}"
        );
        assert!(err.contains("servers[2].toolPrefix"), "{err}");
    }

    #[test]
    fn key_secrets_become_hashes_and_env_secrets_resolve() {
        let text = "servers:\n- name: a\n  url: http://x/mcp\n  auth: {type: bearer, secret: {env: TOKEN}}\nkeys:\n- name: k\n  secret: sk-1\n";
        let s = load_str(text).unwrap();
        assert_eq!(s.keys[0].secret, None);
        assert_eq!(s.keys[0].hash.as_deref(), Some(hash_key("sk-1").as_str()));
        match &s.servers[0].auth {
            UpstreamAuth::Bearer { secret, .. } => {
                assert_eq!(resolved_value(secret), Some("from-env"))
            }
            other => panic!("unexpected auth {other:?}"),
        }
    }

    #[test]
    fn missing_env_names_the_field() {
        let text = "servers:\n- name: a\n  url: http://x/mcp\n  auth: {type: bearer, secret: {env: NOPE}}\n";
        let err = load_str(text).unwrap_err().to_string();
        assert_eq!(
            err,
            "servers[0].auth.secret: environment variable NOPE is not set"
        );
    }

    #[test]
    fn header_values_reject_line_breaks() {
        let text = "servers:\n- name: a\n  url: http://x/mcp\n  headers:\n    static:\n    - name: X-A\n      value: \"a\\r\\nX-B: 1\"\n";
        let err = load_str(text).unwrap_err().to_string();
        assert!(
            err.contains("servers[0].headers.static[0].value: must not contain CR, LF or NUL"),
            "{err}"
        );
    }

    #[test]
    fn required_scopes_are_scope_tokens_and_union_over_the_patterns_a_tool_matches() {
        let text = "servers:\n- name: a\n  url: http://x/mcp\n  tools:\n    requiredScopes:\n      '*': [mcp:tools]\n      'create_*': [repo:write, mcp:tools]\n";
        let snapshot = load_str(text).unwrap();
        let tools = &snapshot.servers[0].tools;
        assert_eq!(
            tools.required_scopes("create_issue"),
            ["mcp:tools", "repo:write"]
        );
        assert_eq!(tools.required_scopes("list_issues"), ["mcp:tools"]);
        for (scopes, why) in [
            ("['a b']", "not an OAuth scope"),
            ("['a\"b']", "not an OAuth scope"),
            ("[]", "names no scope"),
        ] {
            let text = format!(
                "servers:\n- name: a\n  url: http://x/mcp\n  tools:\n    requiredScopes:\n      create: {scopes}\n"
            );
            let err = load_str(&text).unwrap_err().to_string();
            assert!(
                err.contains("servers[0].tools.requiredScopes.create"),
                "{err}"
            );
            assert!(err.contains(why), "{err}");
        }
    }

    #[test]
    fn allow_and_deny_of_one_name_is_rejected() {
        let text = "servers:\n- name: a\n  url: http://x/mcp\n  tools: {allow: [x], deny: [x]}\n";
        let err = load_str(text).unwrap_err().to_string();
        assert!(err.contains("servers[0].tools.deny"), "{err}");
    }

    #[test]
    fn service_account_bindings_and_issuer_keys_are_checked() {
        let err = load_str(
            "gateway: {serviceAccountTokens: {issuer: 'https://k', jwks: {keys: []}}}\nkeys:\n- {name: a, secret: s1, serviceAccounts: [ns/builder, bad]}\n- {name: b, secret: s2, serviceAccounts: [ns/builder, ns/*]}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("gateway.serviceAccountTokens.jwks"), "{err}");
        assert!(
            err.contains("keys[0].serviceAccounts[1]: \"bad\" is not"),
            "{err}"
        );
        assert!(
            err.contains("keys[1].serviceAccounts[0]: \"ns/builder\" is already bound by keys[0]"),
            "{err}"
        );
        assert!(!err.contains("serviceAccounts[1]: \"ns/*\""), "{err}");
    }

    #[test]
    fn duplicate_key_secret_is_rejected() {
        let text = "keys:\n- name: a\n  secret: same\n- name: b\n  secret: same\n";
        let err = load_str(text).unwrap_err().to_string();
        assert!(err.contains("keys[1].hash"), "{err}");
    }

    #[test]
    fn listing_budget_is_the_larger_bound() {
        let s = load_str("servers:\n- name: a\n  url: http://x/mcp\n  timeout: 2s\n  listingTimeout: 10s\n- name: b\n  url: http://x/mcp\n  timeout: 5s\n  listingTimeout: 1s\n").unwrap();
        assert_eq!(s.servers[0].listing_budget().as_secs(), 10);
        assert_eq!(s.servers[1].listing_budget().as_secs(), 5);
    }

    #[test]
    fn minted_token_arms_check_their_header_and_url() {
        let text = "servers:\n- name: a\n  url: http://x/mcp\n  auth: {type: oauth2ClientCredentials, tokenUrl: 'ftp://idp', clientId: c, clientSecret: s, upstreamTokenHeader: 'X Bad'}\n";
        let err = load_str(text).unwrap_err().to_string();
        assert!(
            err.contains(
                "servers[0].auth.upstreamTokenHeader: \"X Bad\" is not a valid header name"
            ),
            "{err}"
        );
        assert!(err.contains("servers[0].auth.tokenUrl"), "{err}");
        let ok = "servers:\n- name: a\n  url: http://x/mcp\n  auth: {type: tokenExchange, tokenUrl: 'http://idp/token', clientId: {env: TOKEN}}\n- name: b\n  url: http://x/mcp\n  auth: {type: passthrough}\n";
        let s = load_str(ok).unwrap();
        assert!(s.servers[0].auth.uses_caller_credential());
        assert!(s.servers[1].auth.uses_caller_credential());
    }

    #[test]
    fn expiry_accepts_any_utc_offset() {
        let ok = load_str(
            "keys:\n- {name: a, secret: s1, expiresAt: '2099-01-01T00:00:00+02:00'}\n- {name: b, secret: s2, expiresAt: '2099-01-01T00:00:00Z'}\n",
        );
        assert!(ok.is_ok(), "{ok:?}");
        let err = load_str("keys:\n- {name: a, secret: s1, expiresAt: 'tomorrow'}\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("keys[0].expiresAt"), "{err}");
    }

    #[test]
    fn glob_filter() {
        use crate::model::{ToolFilter, glob_match};
        assert!(glob_match("a*", "abc"));
        assert!(glob_match("*c", "abc"));
        assert!(glob_match("a*c", "abc"));
        assert!(!glob_match("a*d", "abc"));
        assert!(glob_match("*", ""));
        let f = ToolFilter {
            allow: vec!["get_*".into()],
            deny: vec!["get_secret".into()],
        };
        assert!(f.admits("get_weather"));
        assert!(!f.admits("get_secret"));
        assert!(!f.admits("set_x"));
    }
}
