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
//!
//! A server that requires a client certificate and gets none says so in TLS 1.3
//! (`certificate_required`), but TLS 1.2 has no such alert: the server ends the handshake with a
//! bare `handshake_failure` (or hangs up). So the client certificate is offered through
//! `ClientAuth`, which notes that the server asked for one; an exchange run under
//! [`noting_certificate_requests`] learns it, and a failed handshake after the server asked for
//! a certificate the gateway does not have is named for what it is.

use std::future::Future;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
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
    let key = match own.and_then(|o| o.client.as_ref()) {
        Some(identity) => Some(Arc::new(CertifiedKey::from_der(
            identity.chain.clone(),
            identity.key.clone_key(),
            &provider,
        )?)),
        None => None,
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_cert_resolver(Arc::new(ClientAuth { key }));
    // ALPN (h2, then http/1.1) is the connector's to set: it offers what it can speak.
    Ok(config)
}

/// What a TLS server asked of the gateway's client certificate during an exchange's handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertificateRequest {
    /// No handshake of the exchange asked for one (or no new connection was made).
    NotAsked,
    /// The server asked and the configured certificate was presented.
    Presented,
    /// The server asked and there is none configured (`tls.clientCertificate`).
    NoneConfigured,
}

tokio::task_local! {
    /// Where [`ClientAuth`] notes a server's request, while [`noting_certificate_requests`]
    /// runs an exchange: the handshake of a new connection runs inside the request's future
    /// (`http_client::connections` connects within it), so the note reaches the exchange that
    /// made the connection and no other.
    static REQUESTED: Arc<AtomicU8>;
}

/// Runs `exchange` (a request, which may open a connection) and says what a TLS server asked of
/// the client certificate while it ran.
pub async fn noting_certificate_requests<F: Future>(
    exchange: F,
) -> (F::Output, CertificateRequest) {
    let noted = Arc::new(AtomicU8::new(CertificateRequest::NotAsked as u8));
    let output = REQUESTED.scope(noted.clone(), exchange).await;
    let asked = match noted.load(Ordering::Relaxed) {
        n if n == CertificateRequest::Presented as u8 => CertificateRequest::Presented,
        n if n == CertificateRequest::NoneConfigured as u8 => CertificateRequest::NoneConfigured,
        _ => CertificateRequest::NotAsked,
    };
    (output, asked)
}

/// The client certificate of an upstream's connections (`tls.clientCertificate`, or none),
/// noting every server's request for one (see the module's docs).
#[derive(Debug)]
struct ClientAuth {
    key: Option<Arc<CertifiedKey>>,
}

impl ResolvesClientCert for ClientAuth {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        let asked = match self.key {
            Some(_) => CertificateRequest::Presented,
            None => CertificateRequest::NoneConfigured,
        };
        // Outside a noting exchange (a connection finished in the pool's background) there is
        // no one to tell.
        let _ = REQUESTED.try_with(|noted| noted.store(asked as u8, Ordering::Relaxed));
        self.key.clone()
    }

    fn has_certs(&self) -> bool {
        self.key.is_some()
    }
}

/// What a failed handshake means when the server asked for a client certificate and there was
/// none to give: the server refused to go on without (TLS 1.2's `handshake_failure`, or a
/// hang-up), whatever the alert says.
pub fn certificate_required_detail(what_happened: &str) -> String {
    format!(
        "TLS: the upstream requires a client certificate (tls.clientCertificate): it asked for one during the handshake, none is configured, and it ended the handshake ({what_happened})"
    )
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
pub(crate) fn causes(error: Cause<'_>) -> impl Iterator<Item = Cause<'_>> {
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

/// The TLS failure in an error's chain of causes, described; `asked`: what the server asked of
/// the client certificate before it (a server's alert after asking for a certificate the
/// gateway does not have is that certificate's absence).
pub fn failure_in(error: Cause<'_>, asked: CertificateRequest) -> Option<String> {
    let failure = causes(error).find_map(|cause| cause.downcast_ref::<rustls::Error>())?;
    Some(match failure {
        rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired) => {
            describe(failure)
        }
        rustls::Error::AlertReceived(_) if asked == CertificateRequest::NoneConfigured => {
            certificate_required_detail(&failure.to_string())
        }
        other => describe(other),
    })
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
        assert_eq!(failure_in(&io, CertificateRequest::NotAsked), Some(unknown));
        assert_eq!(
            failure_in(
                &std::io::Error::other("plain"),
                CertificateRequest::NoneConfigured
            ),
            None
        );
        // TLS 1.2's bare handshake_failure: named by what the server asked before it.
        let failure = Error::AlertReceived(AlertDescription::HandshakeFailure);
        let bare = std::io::Error::new(std::io::ErrorKind::InvalidData, failure.clone());
        let named = failure_in(&bare, CertificateRequest::NoneConfigured).unwrap();
        assert!(
            named.contains("requires a client certificate (tls.clientCertificate)")
                && named.contains("HandshakeFailure"),
            "{named}"
        );
        for asked in [CertificateRequest::NotAsked, CertificateRequest::Presented] {
            let plain = failure_in(&bare, asked).unwrap();
            assert!(!plain.contains("requires a client certificate"), "{plain}");
        }
    }

    #[test]
    fn the_default_config_leaves_alpn_to_the_connector() {
        // hyper-rustls refuses (panics on) a configuration with ALPN already set.
        let config = client_config(&UpstreamRoots::default(), None).unwrap();
        assert!(config.alpn_protocols.is_empty());
    }
}
