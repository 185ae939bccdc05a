//! One upstream server as the routing table holds it (the table builds it; the virtual
//! servers and the upstream plane use it).

use std::sync::Arc;

use switchboard_snapshot::{ServerSpec, TlsMaterial};

use crate::address_policy::ServerScope;
use crate::credentials::UpstreamHeaders;
use crate::metrics::{ServerName, UpstreamSeries};

/// One upstream server as the gateway routes to it.
#[derive(Debug)]
pub struct Server {
    pub spec: ServerSpec,
    pub url: url::Url,
    /// `url` as requests to it are sent, made once (`None` for a URL with a user or password).
    pub endpoint: Option<Endpoint>,
    /// Credential, static and forwarded headers, composed once.
    pub headers: UpstreamHeaders,
    /// The id as a metric label.
    pub metric_name: ServerName,
    /// The series every call to it counts into, their handles made on its first call.
    pub upstream_series: UpstreamSeries,
    /// Changes whenever anything about how we talk to the upstream changes (URL, auth,
    /// headers); caches keyed by it forget a server's old incarnation by themselves.
    pub revision: u64,
    /// Its own `upstreamPolicy`, checked besides `gateway.upstreamNetworks`.
    pub scope: Option<ServerScope>,
    /// Its `tls`, parsed: what its connections (and its token endpoint's) trust and present.
    pub tls: Option<Arc<TlsMaterial>>,
    /// An OpenAPI-backed server: where its tools come from.
    pub openapi: Option<OpenApiTools>,
}

/// The tools of an OpenAPI-backed server: compiled from the inline document when the table
/// was built, or from the document the upstream plane fetches (and caches) from this URL.
#[derive(Debug, Clone)]
pub enum OpenApiTools {
    Compiled(Arc<switchboard_openapi::Compiled>),
    Fetched(url::Url),
}

/// A server's URL as the HTTP client sends requests to it, made once when the table is built:
/// the request's target and its `Host` header (sent over HTTP/1.1; an HTTP/2 request carries
/// the authority in the target). Made per request from the URL, they cost a proxied call about
/// 3,000 instructions (the URL parsed again, the header formatted and validated: BENCHMARKS.md,
/// issue 36 item 7). A redirect's target is made per request as before.
#[derive(Debug)]
pub struct Endpoint {
    pub uri: http::Uri,
    /// As hyper-util writes it: the host, and the port unless it is the scheme's default.
    pub host: http::HeaderValue,
}

impl Endpoint {
    /// `None` for a URL with a user or password (they become a Basic header, made per request)
    /// or one the HTTP client could not send to.
    pub fn of(url: &url::Url) -> Option<Endpoint> {
        if !url.username().is_empty() || url.password().is_some() {
            return None;
        }
        let uri: http::Uri = url[..url::Position::AfterQuery].parse().ok()?;
        let host = uri.host()?;
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let host = match uri.port_u16() {
            Some(443) if https => http::HeaderValue::from_str(host),
            Some(80) if !https => http::HeaderValue::from_str(host),
            Some(port) => http::HeaderValue::from_str(&format!("{host}:{port}")),
            None => http::HeaderValue::from_str(host),
        }
        .ok()?;
        Some(Endpoint { uri, host })
    }
}

impl Server {
    pub fn id(&self) -> &str {
        self.spec.id()
    }
    pub fn prefix(&self) -> &str {
        self.spec.prefix()
    }
}

#[cfg(test)]
mod tests {
    use super::Endpoint;

    fn endpoint(url: &str) -> Option<(String, String)> {
        let url = url::Url::parse(url).expect("a URL");
        Endpoint::of(&url).map(|e| {
            let host = e.host.to_str().expect("ASCII").to_string();
            (e.uri.to_string(), host)
        })
    }

    /// The target and `Host` are what the HTTP client made of the URL per request: the port
    /// only when it is not the scheme's, IPv6 in brackets, the query kept, the fragment not.
    #[test]
    fn an_endpoint_is_the_request_target_and_host_of_its_url() {
        let cases = [
            (
                "http://127.0.0.1:8080/mcp",
                "http://127.0.0.1:8080/mcp",
                "127.0.0.1:8080",
            ),
            (
                "https://api.example.com/mcp?x=1#frag",
                "https://api.example.com/mcp?x=1",
                "api.example.com",
            ),
            (
                "https://api.example.com:8443/",
                "https://api.example.com:8443/",
                "api.example.com:8443",
            ),
            (
                "http://api.example.com:443/",
                "http://api.example.com:443/",
                "api.example.com:443",
            ),
            (
                "http://[::1]:9000/mcp",
                "http://[::1]:9000/mcp",
                "[::1]:9000",
            ),
            (
                "http://Example.COM/a%20b",
                "http://example.com/a%20b",
                "example.com",
            ),
        ];
        for (url, uri, host) in cases {
            assert_eq!(
                endpoint(url),
                Some((uri.to_string(), host.to_string())),
                "{url}"
            );
        }
        assert_eq!(endpoint("https://user:secret@api.example.com/mcp"), None);
        assert_eq!(endpoint("https://user@api.example.com/mcp"), None);
    }
}
