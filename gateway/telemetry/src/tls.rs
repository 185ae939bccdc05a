//! TLS of the OTLP export, from the variables the OpenTelemetry specification names:
//!
//! - `OTEL_EXPORTER_OTLP_CERTIFICATE`: a PEM bundle trusted besides the public roots (a
//!   collector behind a private CA);
//! - `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE` and `OTEL_EXPORTER_OTLP_CLIENT_KEY`: the chain and
//!   key presented to a collector that asks for one (mTLS);
//!
//! each also as `OTEL_EXPORTER_OTLP_TRACES_*`, which wins. An `https://` endpoint is verified
//! against the public roots (compiled in, as the upstream client's are: the images are `FROM
//! scratch`) plus that bundle; there is no way to skip verification. The files are read once,
//! at start; a file that is missing or holds no certificate (or key) stops the process with an
//! error that names the variable and the path, as does a TLS variable beside an `http://`
//! endpoint (the user meant TLS; a plaintext export would not be it).

use std::sync::Arc;

use crate::TelemetryError;

use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig, Identity};
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The TLS material the variables name, read and checked.
pub(crate) struct Material {
    /// PEM of the extra trusted certificates, and the same parsed.
    roots: Option<(Vec<u8>, Vec<CertificateDer<'static>>)>,
    /// PEM of the client chain and key, and the same parsed.
    client: Option<ClientIdentity>,
}

struct ClientIdentity {
    chain_pem: Vec<u8>,
    key_pem: Vec<u8>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

/// The value of `OTEL_EXPORTER_OTLP_TRACES_<suffix>`, else `OTEL_EXPORTER_OTLP_<suffix>`, with
/// the name it came from.
fn variable(vars: &dyn Fn(&str) -> Option<String>, suffix: &str) -> Option<(String, String)> {
    [
        format!("OTEL_EXPORTER_OTLP_TRACES_{suffix}"),
        format!("OTEL_EXPORTER_OTLP_{suffix}"),
    ]
    .into_iter()
    .find_map(|name| vars(&name).map(|value| (name, value)))
}

fn read(name: &str, path: &str) -> Result<Vec<u8>, TelemetryError> {
    std::fs::read(path.trim())
        .map_err(|e| TelemetryError::Settings(format!("{name}: cannot read {path:?}: {e}")))
}

fn certificates(
    name: &str,
    path: &str,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TelemetryError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            TelemetryError::Settings(format!(
                "{name}: {path:?} is not a PEM certificate bundle: {e}"
            ))
        })?;
    if certs.is_empty() {
        return Err(TelemetryError::Settings(format!(
            "{name}: {path:?} holds no PEM certificate"
        )));
    }
    Ok(certs)
}

impl Material {
    /// The TLS of an export to `endpoint`: `None` for `http://` (then no TLS variable may be
    /// set), else the public roots plus what the variables name.
    pub(crate) fn from_env(endpoint: &str) -> Result<Option<Material>, TelemetryError> {
        Material::from_vars(endpoint, &crate::env)
    }

    fn from_vars(
        endpoint: &str,
        vars: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Material>, TelemetryError> {
        let roots = match variable(vars, "CERTIFICATE") {
            None => None,
            Some((name, path)) => {
                let pem = read(&name, &path)?;
                let certs = certificates(&name, &path, &pem)?;
                Some((pem, certs))
            }
        };
        let client = match (
            variable(vars, "CLIENT_CERTIFICATE"),
            variable(vars, "CLIENT_KEY"),
        ) {
            (None, None) => None,
            (Some((name, _)), None) | (None, Some((name, _))) => {
                return Err(TelemetryError::Settings(format!(
                    "{name} is set without its pair: a client certificate needs \
                     OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY"
                )));
            }
            (Some((cert_name, cert_path)), Some((key_name, key_path))) => {
                let chain_pem = read(&cert_name, &cert_path)?;
                let chain = certificates(&cert_name, &cert_path, &chain_pem)?;
                let key_pem = read(&key_name, &key_path)?;
                let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
                    TelemetryError::Settings(format!(
                        "{key_name}: {key_path:?} holds no PEM private key: {e}"
                    ))
                })?;
                Some(ClientIdentity {
                    chain_pem,
                    key_pem,
                    chain,
                    key,
                })
            }
        };
        let https = endpoint.trim().to_ascii_lowercase().starts_with("https://");
        if !https && (roots.is_some() || client.is_some()) {
            return Err(TelemetryError::Settings(format!(
                "the OTLP endpoint {endpoint:?} is not https:// but TLS variables are set \
                 (OTEL_EXPORTER_OTLP_CERTIFICATE / _CLIENT_CERTIFICATE / _CLIENT_KEY): use an \
                 https:// endpoint or unset them"
            )));
        }
        if !https {
            return Ok(None);
        }
        Ok(Some(Material { roots, client }))
    }

    /// The gRPC (tonic) channel's TLS.
    pub(crate) fn grpc(&self) -> ClientTlsConfig {
        let mut config = ClientTlsConfig::new().with_webpki_roots();
        if let Some((pem, _)) = &self.roots {
            config = config.ca_certificate(Certificate::from_pem(pem));
        }
        if let Some(client) = &self.client {
            config = config.identity(Identity::from_pem(&client.chain_pem, &client.key_pem));
        }
        config
    }
}

/// rustls for the HTTP exporter: the public roots plus `material`'s bundle and client identity
/// (the public roots alone without material: an `https://` endpoint with a public certificate).
pub(crate) fn http_config(
    material: Option<&Material>,
) -> Result<rustls::ClientConfig, TelemetryError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut store = RootCertStore::empty();
    store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for cert in material
        .and_then(|m| m.roots.as_ref())
        .map(|(_, certs)| certs.as_slice())
        .unwrap_or_default()
    {
        store.add(cert.clone()).map_err(|e| {
            TelemetryError::Settings(format!(
                "OTEL_EXPORTER_OTLP_CERTIFICATE: a certificate was refused: {e}"
            ))
        })?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TelemetryError::Settings(format!("the OTLP exporter's TLS: {e}")))?
        .with_root_certificates(store);
    match material.and_then(|m| m.client.as_ref()) {
        Some(client) => builder
            .with_client_auth_cert(client.chain.clone(), client.key.clone_key())
            .map_err(|e| TelemetryError::Settings(format!("OTEL_EXPORTER_OTLP_CLIENT_KEY: {e}"))),
        None => Ok(builder.with_no_client_auth()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem_files(dir: &std::path::Path) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["collector.test".into()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let cert_path = dir.join("cert.pem");
        let key_path = dir.join("key.pem");
        std::fs::write(&cert_path, cert.pem()).expect("write");
        std::fs::write(&key_path, key.serialize_pem()).expect("write");
        (
            cert_path.display().to_string(),
            key_path.display().to_string(),
        )
    }

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    /// A directory of its own in the temp dir, removed with what it holds (private keys) when
    /// the test ends, passed or failed.
    struct TempDir(std::path::PathBuf);

    impl std::ops::Deref for TempDir {
        type Target = std::path::Path;
        fn deref(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir() -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "switchboard-telemetry-tls-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        TempDir(dir)
    }

    fn rand_suffix() -> u64 {
        crate::rand_unit().to_bits()
    }

    #[test]
    fn plaintext_endpoint_without_variables_has_no_tls() {
        let m = Material::from_vars("http://collector:4317", &vars(&[])).expect("ok");
        assert!(m.is_none());
    }

    #[test]
    fn https_endpoint_without_variables_trusts_the_public_roots() {
        let m = Material::from_vars("https://collector:4317", &vars(&[]))
            .expect("ok")
            .expect("tls");
        assert!(m.roots.is_none() && m.client.is_none());
        http_config(Some(&m)).expect("rustls config");
    }

    #[test]
    fn a_bundle_and_a_client_identity_are_read() {
        let d = dir();
        let (cert, key) = pem_files(&d);
        let m = Material::from_vars(
            "HTTPS://collector:4318",
            &vars(&[
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", &cert),
                ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", &cert),
                ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &key),
            ]),
        )
        .expect("ok")
        .expect("tls");
        assert_eq!(m.roots.as_ref().map(|(_, c)| c.len()), Some(1));
        assert!(m.client.is_some());
        let config = http_config(Some(&m)).expect("rustls config");
        assert!(config.client_auth_cert_resolver.has_certs());
        let _ = m.grpc();
    }

    #[test]
    fn tls_variables_beside_a_plaintext_endpoint_are_refused() {
        let d = dir();
        let (cert, _) = pem_files(&d);
        let err = Material::from_vars(
            "http://collector:4317",
            &vars(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", &cert)]),
        )
        .err()
        .expect("refused")
        .to_string();
        assert!(err.contains("not https://"), "{err}");
    }

    #[test]
    fn errors_name_the_variable_and_the_path() {
        let err = Material::from_vars(
            "https://c",
            &vars(&[(
                "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
                "/nonexistent/ca.pem",
            )]),
        )
        .err()
        .expect("refused")
        .to_string();
        assert!(
            err.contains("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE")
                && err.contains("/nonexistent/ca.pem"),
            "{err}"
        );
        let d = dir();
        let (_, key) = pem_files(&d);
        // A key where a certificate belongs: no certificate in it.
        let err = Material::from_vars(
            "https://c",
            &vars(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", &key)]),
        )
        .err()
        .expect("refused")
        .to_string();
        assert!(
            err.contains("OTEL_EXPORTER_OTLP_CERTIFICATE") && err.contains("no PEM certificate"),
            "{err}"
        );
        let (cert, _) = pem_files(&d);
        let err = Material::from_vars(
            "https://c",
            &vars(&[("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert)]),
        )
        .err()
        .expect("refused")
        .to_string();
        assert!(err.contains("without its pair"), "{err}");
    }
}
