//! One upstream server as the routing table holds it (the table builds it; the virtual
//! servers and the upstream plane use it).

use std::sync::Arc;

use switchboard_snapshot::{ServerSpec, TlsMaterial};

use crate::address_policy::ServerScope;
use crate::credentials::UpstreamHeaders;
use crate::metrics::ServerName;

/// One upstream server as the gateway routes to it.
#[derive(Debug)]
pub struct Server {
    pub spec: ServerSpec,
    pub url: url::Url,
    /// Credential, static and forwarded headers, composed once.
    pub headers: UpstreamHeaders,
    /// The id as a metric label.
    pub metric_name: ServerName,
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

impl Server {
    pub fn id(&self) -> &str {
        self.spec.id()
    }
    pub fn prefix(&self) -> &str {
        self.spec.prefix()
    }
}
