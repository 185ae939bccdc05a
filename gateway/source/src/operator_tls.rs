//! Trusting the operator's snapshot stream (it carries resolved upstream credentials and the
//! session key): TLS verified against a CA bundle file, with one server name for every
//! operator address.
//!
//! The stream goes through the operator Service, but acknowledgements go to the one operator
//! pod that serves it, by pod IP. A certificate a user brings (cert-manager) names the Service,
//! never pod IPs, so the name checked is always the Service's (`--operator-server-name`,
//! default the host of the first `--operator` URL), whichever address was dialed. Everything
//! else (chain, expiry, key usage, signatures) is rustls' ordinary WebPKI verification.
//!
//! The bundle file is read again before every connection attempt: the kubelet updates a
//! mounted ConfigMap in place when the operator adds a new CA (rotation), and a stream that is
//! already open keeps its connection.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use switchboard_upstream::NamedVerifier;

/// Why the operator's stream cannot be trusted as configured; the message names the flag or
/// the file.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("--operator-server-name {name:?}: {detail}")]
    ServerName { name: String, detail: String },
    #[error("cannot read the operator CA bundle {}: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("operator CA bundle {}: {detail}", file.display())]
    Bundle { file: PathBuf, detail: String },
    #[error("operator CA bundle {} holds no certificate", file.display())]
    Empty { file: PathBuf },
    /// The verifier or TLS settings built from a bundle that did load.
    #[error("operator CA bundle: {0}")]
    Tls(String),
    /// The stream's HTTP client could not be built.
    #[error("the operator stream's HTTP client: {0}")]
    Client(String),
}

/// Where the CA bundle is and which name the operator's certificate must carry.
#[derive(Debug, Clone)]
pub struct OperatorTrust {
    pub bundle_file: PathBuf,
    pub server_name: ServerName<'static>,
}

/// A client for the snapshot stream, and the bundle it was built from (to see changes).
pub struct TrustedClient {
    pub http: reqwest::Client,
    pub bundle: Vec<u8>,
}

impl OperatorTrust {
    pub fn new(bundle_file: PathBuf, server_name: &str) -> Result<OperatorTrust, TrustError> {
        let server_name =
            ServerName::try_from(server_name.to_string()).map_err(|e| TrustError::ServerName {
                name: server_name.to_string(),
                detail: e.to_string(),
            })?;
        Ok(OperatorTrust {
            bundle_file,
            server_name,
        })
    }

    /// The client to use now: `current` again when the bundle file has not changed.
    pub fn client(&self, current: Option<TrustedClient>) -> Result<TrustedClient, TrustError> {
        let bundle = std::fs::read(&self.bundle_file).map_err(|source| TrustError::Read {
            file: self.bundle_file.clone(),
            source,
        })?;
        if let Some(current) = current.filter(|c| c.bundle == bundle) {
            return Ok(current);
        }
        let roots = roots_from_pem(&bundle, &self.bundle_file)?;
        tracing::info!(
            file = %self.bundle_file.display(),
            certificates = roots.len(),
            server_name = ?self.server_name,
            "operator CA bundle loaded"
        );
        let http = stream_client(Some(self.tls_config(roots)?))?;
        Ok(TrustedClient { http, bundle })
    }

    fn tls_config(&self, roots: RootCertStore) -> Result<rustls::ClientConfig, TrustError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| TrustError::Tls(e.to_string()))?;
        let verifier = Arc::new(NamedVerifier::new(inner, self.server_name.clone()));
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TrustError::Tls(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// A URL's host as a certificate names it: an IPv6 address without the URL's brackets.
pub fn certificate_name(url: &url::Url) -> Option<String> {
    match url.host()? {
        url::Host::Ipv6(address) => Some(address.to_string()),
        host => Some(host.to_string()),
    }
}

/// The snapshot stream's HTTP client: a new connection per attempt (behind a Service each one
/// may reach another operator pod, and only the lease holder serves).
pub(crate) fn stream_client(
    tls: Option<rustls::ClientConfig>,
) -> Result<reqwest::Client, TrustError> {
    let builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .tcp_nodelay(true)
        .pool_max_idle_per_host(0);
    let builder = match tls {
        Some(config) => builder.use_preconfigured_tls(config),
        None => builder,
    };
    builder
        .build()
        .map_err(|e| TrustError::Client(e.to_string()))
}

/// Every certificate in a PEM bundle; a bundle with none is an error (it would trust nothing
/// and every connection would fail with a less helpful message).
fn roots_from_pem(pem: &[u8], file: &Path) -> Result<RootCertStore, TrustError> {
    let bundle = |detail: String| TrustError::Bundle {
        file: file.to_path_buf(),
        detail,
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| bundle(e.to_string()))?;
        roots.add(cert).map_err(|e| bundle(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(TrustError::Empty {
            file: file.to_path_buf(),
        });
    }
    Ok(roots)
}
