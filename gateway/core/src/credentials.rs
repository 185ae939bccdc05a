//! The headers a server's upstream requests carry, composed once per routing table (docs/architecture.md,
//! invariant 5): the resolved credential occupies exactly one header slot; static headers and
//! forwarded caller headers fill the rest but never that slot; schemes are normalized once.
//!
//! Precedence, lowest first: forwarded caller headers, then static headers, then the resolved
//! credential (static, minted by the gateway, or the per-request credential a caller is allowed
//! to send for one server). Each later source replaces an earlier one only in the header slot
//! it occupies.

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use switchboard_snapshot::{ServerSpec, UpstreamAuth, resolved_value};

/// Caller headers that are never forwarded, whatever a server's `headers.forward` says: the
/// gateway key travels in `Authorization` or `X-Switchboard-Key`, and hop-by-hop or MCP
/// transport headers belong to the gateway's own connection and session. Delegated
/// credentials (`X-MCP-<prefix>-Authorization`) are refused too: each belongs to one server
/// and only reaches it as that server's resolved credential.
const NEVER_FORWARDED: &[&str] = &[
    "authorization",
    "x-switchboard-key",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "upgrade",
    "host",
    "content-length",
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
];

/// Whether a caller header is a delegated credential for some server.
fn is_delegated_credential(name: &str) -> bool {
    name.starts_with("x-mcp-") && name.ends_with("-authorization")
}

#[derive(Debug, Clone)]
pub struct UpstreamHeaders {
    /// Static headers and a static credential, in that order of precedence (later wins).
    fixed: Vec<(HeaderName, HeaderValue)>,
    forward: Vec<HeaderName>,
    /// The header the credential occupies, static or resolved per request.
    credential_slot: Option<HeaderName>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {message}")]
pub(crate) struct CredentialError {
    pub field: &'static str,
    pub message: String,
}

impl UpstreamHeaders {
    pub(crate) fn for_server(spec: &ServerSpec) -> Result<UpstreamHeaders, CredentialError> {
        let credential = static_credential(&spec.auth)?;
        let credential_slot = match &credential {
            Some((name, _)) => Some(name.clone()),
            None => dynamic_slot(&spec.auth)?,
        };
        let mut fixed = Vec::new();
        for h in &spec.headers.static_headers {
            let name = header_name(&h.name, "headers.static.name")?;
            if credential_slot.as_ref() == Some(&name) {
                continue; // the credential owns this slot
            }
            let value = resolved_value(&h.value).unwrap_or_default();
            fixed.push((name, sensitive(value, "headers.static.value")?));
        }
        fixed.extend(credential);
        let forward = spec
            .headers
            .forward
            .iter()
            .map(|n| header_name(n, "headers.forward"))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .filter(|n| {
                !NEVER_FORWARDED.contains(&n.as_str()) && !is_delegated_credential(n.as_str())
            })
            .filter(|n| credential_slot.as_ref() != Some(n))
            .collect();
        Ok(UpstreamHeaders {
            fixed,
            forward,
            credential_slot,
        })
    }

    /// Writes this server's headers into an upstream request's header map; `resolved` is the
    /// credential resolved for this request (arms whose credential is not static).
    pub fn apply(&self, caller: &HeaderMap, resolved: Option<&HeaderValue>, out: &mut HeaderMap) {
        for name in &self.forward {
            for value in caller.get_all(name) {
                out.append(name.clone(), value.clone());
            }
        }
        for (name, value) in &self.fixed {
            out.insert(name.clone(), value.clone());
        }
        if let (Some(slot), Some(value)) = (&self.credential_slot, resolved) {
            out.insert(slot.clone(), value.clone());
        }
    }

    /// Every header this server's config adds (credential, static, forwarded): all dropped on
    /// a redirect to another origin, since any of them may be a secret.
    pub fn secret_slots(&self) -> impl Iterator<Item = &HeaderName> {
        self.fixed
            .iter()
            .map(|(n, _)| n)
            .chain(self.credential_slot.iter())
            .chain(self.forward.iter())
    }
}

fn header_name(name: &str, field: &'static str) -> Result<HeaderName, CredentialError> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|_| CredentialError {
        field,
        message: format!("{name:?} is not a valid header name"),
    })
}

fn sensitive(value: &str, field: &'static str) -> Result<HeaderValue, CredentialError> {
    let mut v = HeaderValue::from_str(value).map_err(|_| CredentialError {
        field,
        message: "is not a valid header value".into(),
    })?;
    v.set_sensitive(true);
    Ok(v)
}

/// Removes one leading `scheme ` (case-insensitive) when a credential follows it, so a secret
/// written as `Bearer abc` and one written as `abc` both become `Bearer abc`.
pub fn strip_scheme<'a>(value: &'a str, scheme: &str) -> &'a str {
    let trimmed = value.trim();
    if trimmed.len() > scheme.len()
        && trimmed.as_bytes()[..scheme.len()].eq_ignore_ascii_case(scheme.as_bytes())
        && trimmed.as_bytes()[scheme.len()] == b' '
    {
        let rest = trimmed[scheme.len()..].trim_start();
        if !rest.is_empty() {
            return rest;
        }
    }
    trimmed
}

/// `Basic` credentials: `user:pass` is encoded; an already encoded value is kept; anything else
/// is refused rather than forwarded as an invalid header.
fn basic_value(secret: &str) -> Result<String, CredentialError> {
    let bare = strip_scheme(secret, "Basic");
    let already_encoded = STANDARD
        .decode(bare)
        .ok()
        .and_then(|raw| String::from_utf8(raw).ok())
        .is_some_and(|decoded| decoded.contains(':'));
    if already_encoded {
        Ok(format!("Basic {bare}"))
    } else if bare.contains(':') {
        Ok(format!("Basic {}", STANDARD.encode(bare)))
    } else {
        Err(CredentialError {
            field: "auth.secret",
            message: "basic credentials must be user:password or its base64 encoding".into(),
        })
    }
}

/// The slot of a credential resolved per request: `upstreamTokenHeader`, else `Authorization`.
fn dynamic_slot(auth: &UpstreamAuth) -> Result<Option<HeaderName>, CredentialError> {
    if matches!(auth, UpstreamAuth::None) {
        return Ok(None);
    }
    match auth.upstream_token_header() {
        Some(name) => header_name(name, "auth.upstreamTokenHeader").map(Some),
        None => Ok(Some(header::AUTHORIZATION)),
    }
}

/// A value for a credential header: marked sensitive so it never shows in debug output.
pub fn credential_value(value: &str) -> Option<HeaderValue> {
    sensitive(value, "credential").ok()
}

fn static_credential(
    auth: &UpstreamAuth,
) -> Result<Option<(HeaderName, HeaderValue)>, CredentialError> {
    let secret = |s| resolved_value(s).unwrap_or_default();
    let slot = |custom: &Option<String>| match custom {
        Some(name) => header_name(name, "auth.upstreamTokenHeader"),
        None => Ok(header::AUTHORIZATION),
    };
    let (name, value) = match auth {
        UpstreamAuth::None
        | UpstreamAuth::Passthrough { .. }
        | UpstreamAuth::OauthDelegate { .. }
        | UpstreamAuth::Oauth2ClientCredentials { .. }
        | UpstreamAuth::TokenExchange { .. }
        | UpstreamAuth::UserOauth { .. } => return Ok(None),
        UpstreamAuth::ApiKey {
            secret: s,
            header: h,
            prefix,
        } => {
            let raw = secret(s);
            let value = match prefix.as_deref().filter(|p| !p.is_empty()) {
                Some(p) if !raw.starts_with(p) => format!("{p}{raw}"),
                _ => raw.to_string(),
            };
            (header_name(h, "auth.header")?, value)
        }
        UpstreamAuth::Bearer {
            secret: s,
            upstream_token_header,
        } => (
            slot(upstream_token_header)?,
            format!("Bearer {}", strip_scheme(secret(s), "Bearer")),
        ),
        UpstreamAuth::Token {
            secret: s,
            upstream_token_header,
        } => (
            slot(upstream_token_header)?,
            format!("Token {}", strip_scheme(secret(s), "Token")),
        ),
        UpstreamAuth::Basic { secret: s } => (header::AUTHORIZATION, basic_value(secret(s))?),
        UpstreamAuth::Authorization { secret: s } => (header::AUTHORIZATION, secret(s).to_string()),
    };
    Ok(Some((name, sensitive(&value, "auth.secret")?)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_snapshot::{SystemLookup, load};

    fn headers_for(yaml_server: &str) -> UpstreamHeaders {
        let text = format!("servers:\n- {yaml_server}\n");
        let snapshot = load(&text, &SystemLookup).expect("valid test config");
        UpstreamHeaders::for_server(&snapshot.servers[0]).expect("headers compose")
    }

    fn composed(h: &UpstreamHeaders, caller: &[(&str, &str)]) -> HeaderMap {
        let mut incoming = HeaderMap::new();
        for (n, v) in caller {
            incoming.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        let mut out = HeaderMap::new();
        h.apply(&incoming, None, &mut out);
        out
    }

    #[test]
    fn no_double_scheme() {
        for secret in ["abc", "Bearer abc", "bearer abc", "BEARER  abc"] {
            let h = headers_for(&format!(
                "{{name: a, url: 'http://x/mcp', auth: {{type: bearer, secret: '{secret}'}}}}"
            ));
            assert_eq!(composed(&h, &[])["authorization"], "Bearer abc", "{secret}");
        }
        let h =
            headers_for("{name: a, url: 'http://x/mcp', auth: {type: token, secret: 'Token t1'}}");
        assert_eq!(composed(&h, &[])["authorization"], "Token t1");
    }

    #[test]
    fn scheme_alone_is_not_stripped() {
        assert_eq!(strip_scheme("Bearer", "Bearer"), "Bearer");
        assert_eq!(strip_scheme("Bearerabc", "Bearer"), "Bearerabc");
    }

    #[test]
    fn basic_encodes_once() {
        let plain =
            headers_for("{name: a, url: 'http://x/mcp', auth: {type: basic, secret: 'u:p'}}");
        assert_eq!(composed(&plain, &[])["authorization"], "Basic dTpw");
        let encoded = headers_for(
            "{name: a, url: 'http://x/mcp', auth: {type: basic, secret: 'Basic dTpw'}}",
        );
        assert_eq!(composed(&encoded, &[])["authorization"], "Basic dTpw");
        let text =
            "servers:\n- {name: a, url: 'http://x/mcp', auth: {type: basic, secret: nocolon}}\n";
        let snapshot = load(text, &SystemLookup).unwrap();
        assert!(UpstreamHeaders::for_server(&snapshot.servers[0]).is_err());
    }

    #[test]
    fn credential_slot_wins_over_static_and_forwarded() {
        let h = headers_for(
            "{name: a, url: 'http://x/mcp', auth: {type: apiKey, secret: k1, header: X-Api-Key}, headers: {static: [{name: X-Api-Key, value: other}, {name: X-Static, value: s}], forward: [X-Api-Key, X-Tenant, Authorization]}}",
        );
        let out = composed(
            &h,
            &[
                ("x-api-key", "from-caller"),
                ("x-tenant", "t1"),
                ("authorization", "Bearer gateway-key"),
            ],
        );
        assert_eq!(out.get_all("x-api-key").iter().count(), 1);
        assert_eq!(out["x-api-key"], "k1");
        assert_eq!(out["x-static"], "s");
        assert_eq!(out["x-tenant"], "t1");
        assert!(
            out.get("authorization").is_none(),
            "the gateway key never goes upstream"
        );
    }

    #[test]
    fn upstream_token_header_leaves_static_authorization_alone() {
        let h = headers_for(
            "{name: a, url: 'http://x/mcp', auth: {type: bearer, secret: t, upstreamTokenHeader: X-Upstream-Token}, headers: {static: [{name: Authorization, value: 'Bearer api-gw'}]}}",
        );
        let out = composed(&h, &[]);
        assert_eq!(out["x-upstream-token"], "Bearer t");
        assert_eq!(out["authorization"], "Bearer api-gw");
    }

    #[test]
    fn resolved_credential_takes_its_slot_only() {
        let h = headers_for(
            "{name: a, url: 'http://x/mcp', auth: {type: oauth2ClientCredentials, tokenUrl: 'http://idp/t', clientId: c, clientSecret: s, upstreamTokenHeader: X-Upstream-Token}, headers: {static: [{name: Authorization, value: 'Bearer api-gw'}, {name: X-Upstream-Token, value: shadow}], forward: [X-MCP-b-Authorization]}}",
        );
        let mut incoming = HeaderMap::new();
        incoming.insert(
            "x-mcp-b-authorization",
            HeaderValue::from_static("Bearer for-b"),
        );
        let mut out = HeaderMap::new();
        h.apply(
            &incoming,
            Some(&HeaderValue::from_static("Bearer minted")),
            &mut out,
        );
        assert_eq!(out["x-upstream-token"], "Bearer minted");
        assert_eq!(out["authorization"], "Bearer api-gw");
        assert!(
            out.get("x-mcp-b-authorization").is_none(),
            "another server's credential never goes upstream"
        );
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn api_key_prefix_is_not_doubled() {
        let h = headers_for(
            "{name: a, url: 'http://x/mcp', auth: {type: apiKey, secret: 'Key k', prefix: 'Key '}}",
        );
        assert_eq!(composed(&h, &[])["x-api-key"], "Key k");
    }
}
