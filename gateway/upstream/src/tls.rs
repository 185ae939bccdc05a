//! The TLS client configuration of upstream connections, and what a failed handshake means in
//! words a platform team can act on.
//!
//! Trusted: the public roots (compiled in: the images are `FROM scratch`), the file
//! `SSL_CERT_FILE` names (read once, at the first client), `gateway.upstreamTls.caBundle`, and
//! the upstream's own `tls.caBundle`. Clients are built per distinct material, so a rotated
//! bundle or certificate (a new snapshot) gets a new client and the old pool goes. An
//! upstream's `tls.serverName` replaces the URL's host as the name sent in SNI and the name its
//! certificate must be valid for (`http_client.rs` sets it per client). There is no way to skip
//! verification.

use std::sync::{Arc, OnceLock};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use switchboard_core::table::UpstreamRoots;
use switchboard_snapshot::TlsMaterial;

/// The rustls configuration for connections under `roots` (gateway-wide) and `own` (one
/// upstream's settings).
pub fn client_config(
    roots: &UpstreamRoots,
    own: Option<&TlsMaterial>,
) -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut store = RootCertStore::empty();
    store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for cert in env_bundle()
        .iter()
        .chain(&roots.certificates)
        .chain(own.map(|o| o.roots.as_slice()).unwrap_or_default())
    {
        // One unusable certificate in a bundle does not take the others with it.
        if let Err(e) = store.add(cert.clone()) {
            tracing::warn!(error = %e, "a trusted certificate was refused by the TLS library");
        }
    }
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match own.and_then(|o| o.client.as_ref()) {
        Some(identity) => {
            builder.with_client_auth_cert(identity.chain.clone(), identity.key.clone_key())?
        }
        None => builder.with_no_client_auth(),
    };
    // ALPN (h2, then http/1.1) is the connector's to set: it offers what it can speak.
    Ok(config)
}

/// Certificates of the file `SSL_CERT_FILE` names, read once per process start and kept: the
/// variable is the convention of OpenSSL-based tools and of the Rust ecosystem alike.
fn env_bundle() -> &'static [CertificateDer<'static>] {
    static BUNDLE: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    BUNDLE.get_or_init(|| {
        let Some(path) = std::env::var_os("SSL_CERT_FILE") else {
            return Vec::new();
        };
        match CertificateDer::pem_file_iter(&path).map(|certs| certs.collect::<Result<Vec<_>, _>>())
        {
            Ok(Ok(certs)) => {
                tracing::info!(
                    certificates = certs.len(),
                    "trusting the certificates of SSL_CERT_FILE"
                );
                certs
            }
            Ok(Err(e)) | Err(e) => {
                tracing::warn!(error = %e, "SSL_CERT_FILE is set but unreadable; ignored");
                Vec::new()
            }
        }
    })
}

/// WebPKI verification for a configured name instead of the dialed one (an upstream's
/// `tls.serverName`; the operator Service's name, which the snapshot stream dials by address).
#[derive(Debug)]
pub struct NamedVerifier {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl NamedVerifier {
    pub fn new(inner: Arc<WebPkiServerVerifier>, name: ServerName<'static>) -> NamedVerifier {
        NamedVerifier { inner, name }
    }
}

impl ServerCertVerifier for NamedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// What a TLS failure means, without the URL (which may carry credentials in its query), for
/// the client's error and the server's condition.
pub fn describe(error: &rustls::Error) -> String {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    match error {
        E::InvalidCertificate(C::UnknownIssuer) => {
            "TLS: the upstream's certificate is signed by an unknown authority (trust its CA with tls.caBundle or gateway.upstreamTls.caBundle)".into()
        }
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            "TLS: the upstream's certificate is not valid for the expected name (tls.serverName, else the URL's host)".into()
        }
        E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            "TLS: the upstream's certificate has expired".into()
        }
        E::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => {
            "TLS: the upstream's certificate is not valid yet".into()
        }
        E::InvalidCertificate(other) => format!("TLS: the upstream's certificate is invalid ({other:?})"),
        E::AlertReceived(A::CertificateRequired) => {
            "TLS: the upstream requires a client certificate (tls.clientCertificate)".into()
        }
        E::AlertReceived(A::BadCertificate | A::UnknownCA | A::CertificateUnknown | A::AccessDenied) => {
            "TLS: the upstream refused the gateway's client certificate".into()
        }
        other => format!("TLS handshake failed: {other}"),
    }
}

type Cause<'a> = &'a (dyn std::error::Error + 'static);

/// An error and its causes, outermost first. An io::Error's `source` is its inner error's
/// source, skipping the inner error itself (where rustls puts its own, often inside another
/// io::Error): the walk steps into it instead.
fn causes(error: Cause<'_>) -> impl Iterator<Item = Cause<'_>> {
    std::iter::successors(Some(error), |cause| {
        match cause
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as Cause<'_>),
            None => cause.source(),
        }
    })
}

/// The TLS failure in an error's chain of causes, described.
pub fn failure_in(error: Cause<'_>) -> Option<String> {
    causes(error)
        .find_map(|cause| cause.downcast_ref::<rustls::Error>())
        .map(describe)
}

/// Whether an exchange ended because the peer hung up (end of stream or reset) without a TLS
/// close: on HTTPS, what a server that requires a client certificate (or refuses the one given)
/// does when it sends no alert (many do; TLS 1.3 lets the client finish its handshake first).
pub fn hung_up(error: Cause<'_>) -> bool {
    causes(error).any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
            )
        })
    })
}

/// What a hang-up on HTTPS likely means (said as the likely cause, not as fact).
pub fn hung_up_detail(presents_certificate: bool) -> String {
    if presents_certificate {
        "TLS: the upstream closed the connection without a TLS close; an upstream that refuses the client certificate it was given does this (tls.clientCertificate)".into()
    } else {
        "TLS: the upstream closed the connection without a TLS close; an upstream that requires a client certificate does this when none is given (tls.clientCertificate)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_named_by_cause() {
        use rustls::{AlertDescription, CertificateError, Error};
        let unknown = describe(&Error::InvalidCertificate(CertificateError::UnknownIssuer));
        assert!(unknown.contains("unknown authority") && unknown.contains("caBundle"));
        let name = describe(&Error::InvalidCertificate(
            CertificateError::NotValidForName,
        ));
        assert!(name.contains("not valid for the expected name"));
        let expired = describe(&Error::InvalidCertificate(CertificateError::Expired));
        assert!(expired.contains("expired"));
        let required = describe(&Error::AlertReceived(AlertDescription::CertificateRequired));
        assert!(required.contains("requires a client certificate"));
        // Found behind the layers an HTTP client wraps it in (hyper-util: io::Error in io::Error).
        let inner = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        let io = std::io::Error::other(inner);
        assert_eq!(failure_in(&io), Some(unknown));
        assert_eq!(failure_in(&std::io::Error::other("plain")), None);
    }

    #[test]
    fn the_default_config_leaves_alpn_to_the_connector() {
        // hyper-rustls refuses (panics on) a configuration with ALPN already set.
        let config = client_config(&UpstreamRoots::default(), None).unwrap();
        assert!(config.alpn_protocols.is_empty());
    }
}
