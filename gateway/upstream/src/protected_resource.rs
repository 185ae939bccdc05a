//! OAuth protected-resource metadata (RFC 9728) the gateway serves for each server that uses
//! the caller's own credential: `resource` is the gateway's URL for that server and
//! `authorization_servers` are the upstream's, read from the upstream's own metadata. With it,
//! a standard MCP client that got a relayed 401 runs its OAuth flow for the gateway URL.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::client::Upstreams;
use crate::http_client::read_limited;
use switchboard_core::table::Server;

/// How long an upstream's metadata is reused.
/// Largest metadata document read (RFC 9728 documents are a few hundred bytes).
const MAX_METADATA: usize = 256 * 1024;
const METADATA_TTL: Duration = Duration::from_secs(300);

/// Parsing `WWW-Authenticate` challenges.
pub mod auth_challenge {
    use std::collections::HashMap;

    /// The `key="value"` (or `key=token`) parameters of a challenge such as
    /// `Bearer resource_metadata="https://...", error="invalid_token"`. Keys are lower-cased.
    pub fn parse(challenge: &str) -> HashMap<String, String> {
        let mut out = HashMap::new();
        let rest = challenge
            .trim()
            .split_once(' ')
            .map_or("", |(_, params)| params);
        let mut chars = rest.chars().peekable();
        loop {
            while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
                chars.next();
            }
            let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
            if key.is_empty() {
                break;
            }
            let value: String = if chars.peek() == Some(&'"') {
                chars.next();
                let mut v = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => v.extend(chars.next()),
                        '"' => break,
                        c => v.push(c),
                    }
                }
                v
            } else {
                chars
                    .by_ref()
                    .take_while(|c| *c != ',')
                    .collect::<String>()
                    .trim()
                    .to_string()
            };
            out.insert(key.trim().to_ascii_lowercase(), value);
        }
        out
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn parses_quoted_and_bare_parameters() {
            let p = super::parse(
                r#"Bearer resource_metadata="http://u/.well-known/x", error="invalid_token", scope=read"#,
            );
            assert_eq!(p["resource_metadata"], "http://u/.well-known/x");
            assert_eq!(p["error"], "invalid_token");
            assert_eq!(p["scope"], "read");
            assert!(super::parse("Bearer").is_empty());
        }
    }
}

struct Cached {
    fetched: Instant,
    document: Value,
}

#[derive(Default)]
pub struct ProtectedResources {
    /// Where each server's upstream said its metadata lives (from its 401 challenge).
    sources: Mutex<HashMap<(String, u64), String>>,
    documents: Mutex<HashMap<(String, u64), Arc<Cached>>>,
}

impl ProtectedResources {
    pub fn remember_source(&self, server: &Server, url: &str) {
        let mut sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        sources.insert((server.id().to_string(), server.revision), url.to_string());
    }

    pub fn retain(&self, live: impl Fn(&str, u64) -> bool) {
        self.sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(id, rev), _| live(id, *rev));
        self.documents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(id, rev), _| live(id, *rev));
    }

    /// The upstream's metadata document: from where its challenge pointed, else the
    /// well-known locations (path-suffixed first, then the root), cached for a while.
    /// Every candidate passes the address policies first: the challenge's URL is the upstream's
    /// to choose, so it may name any address (a literal one never meets the policy resolver).
    pub async fn upstream_document(&self, upstreams: &Upstreams, server: &Server) -> Option<Value> {
        let key = (server.id().to_string(), server.revision);
        let cached = self
            .documents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        if let Some(c) = cached.filter(|c| c.fetched.elapsed() < METADATA_TTL) {
            return Some(c.document.clone());
        }
        let remembered = self
            .sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        let origin = server.url.origin().ascii_serialization();
        let path = server.url.path().trim_end_matches('/');
        let candidates = remembered.into_iter().chain([
            format!("{origin}/.well-known/oauth-protected-resource{path}"),
            format!("{origin}/.well-known/oauth-protected-resource"),
        ]);
        let http = upstreams.http_for(server).ok()?;
        for url in candidates {
            let Ok(parsed) = url::Url::parse(&url) else {
                continue;
            };
            if let Err(denied) = upstreams.allows(server, &parsed) {
                tracing::warn!(server = server.id(), %denied, "protected-resource metadata not fetched");
                continue;
            }
            let fetch = async {
                let response = http.get(&parsed).send().await.ok()?;
                if !response.status().is_success() {
                    return None;
                }
                let body = read_limited(response.into_body(), MAX_METADATA)
                    .await
                    .ok()?;
                let document: Value = serde_json::from_slice(&body).ok()?;
                document.get("authorization_servers")?.as_array()?;
                Some(document)
            };
            if let Ok(Some(document)) = tokio::time::timeout(server.spec.timeout, fetch).await {
                let cached = Arc::new(Cached {
                    fetched: Instant::now(),
                    document: document.clone(),
                });
                self.documents
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, cached);
                return Some(document);
            }
        }
        None
    }
}
