//! TLS towards upstreams (servers, their token endpoints and metadata, model providers): which
//! certificate authorities the gateway trusts besides the public roots, the client certificate
//! it presents (mTLS), and the name an upstream's certificate must be valid for.
//!
//! PEM material is parsed here, when a snapshot is validated and again when its table is built
//! (a few certificates; the parsed form stays with the table), so a bad bundle is refused with
//! the field that holds it (by the operator when it renders, by the gateway when it loads a file) and the
//! previous snapshot keeps serving. There is no switch to skip verification.

use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::errors::FieldError;
use crate::secret::{SecretSource, resolved_value};

/// `servers[].tls` and `models[].tls`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpstreamTls {
    /// PEM certificates of the authorities trusted for this upstream, besides the public roots
    /// and `gateway.upstreamTls.caBundle`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<SecretSource>,
    /// The certificate the gateway presents to this upstream (mTLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<ClientCertificate>,
    /// The name the upstream's certificate must be valid for; defaults to the URL's host (for
    /// an upstream reached by address, or under another name than its certificate's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

/// A client certificate: the PEM chain (leaf first) and its PEM private key.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientCertificate {
    pub certificate: SecretSource,
    pub key: SecretSource,
}

/// `gateway.upstreamTls`: what every upstream connection trusts.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GatewayTls {
    /// PEM certificates of authorities trusted for every upstream, besides the public roots
    /// (and the file `SSL_CERT_FILE` names, when set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<SecretSource>,
}

/// Parsed TLS settings of one upstream, ready for a TLS client. `key` identifies the material
/// (a hash of it): clients are shared by upstreams with the same material, and a rotated
/// certificate is a new key, hence a new client.
#[derive(Debug, Clone)]
pub struct TlsMaterial {
    pub roots: Vec<CertificateDer<'static>>,
    pub client: Option<Arc<ClientIdentity>>,
    pub server_name: Option<ServerName<'static>>,
    pub key: u64,
}

#[derive(Debug)]
pub struct ClientIdentity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl TlsMaterial {
    /// Parses `tls` (its secrets resolved); errors name fields under `path`.
    pub fn parse(tls: &UpstreamTls, path: &str) -> Result<TlsMaterial, Vec<FieldError>> {
        let mut errors = Vec::new();
        let mut hash = Sha256::new();
        let roots = match &tls.ca_bundle {
            Some(bundle) => certificates(bundle, &format!("{path}.caBundle"), &mut hash)
                .unwrap_or_else(|e| {
                    errors.push(e);
                    Vec::new()
                }),
            None => Vec::new(),
        };
        let client = tls.client_certificate.as_ref().and_then(|c| {
            let at = format!("{path}.clientCertificate");
            let chain = certificates(&c.certificate, &format!("{at}.certificate"), &mut hash)
                .map_err(|e| errors.push(e))
                .ok()?;
            let key = private_key(&c.key, &format!("{at}.key"), &mut hash)
                .map_err(|e| errors.push(e))
                .ok()?;
            Some(Arc::new(ClientIdentity { chain, key }))
        });
        let server_name = tls.server_name.as_deref().and_then(|name| {
            hash.update(b"\0name\0");
            hash.update(name.as_bytes());
            ServerName::try_from(name.to_string())
                .map_err(|_| {
                    errors.push(FieldError {
                        path: format!("{path}.serverName"),
                        message: format!("{name:?} is not a DNS name or an IP address"),
                    })
                })
                .ok()
        });
        if !errors.is_empty() {
            return Err(errors);
        }
        let digest = hash.finalize();
        Ok(TlsMaterial {
            roots,
            client,
            server_name,
            key: u64::from_le_bytes(digest[..8].try_into().unwrap_or([0; 8])),
        })
    }
}

/// The certificates of a PEM bundle (at least one).
pub fn certificates(
    source: &SecretSource,
    path: &str,
    hash: &mut Sha256,
) -> Result<Vec<CertificateDer<'static>>, FieldError> {
    let pem = pem_text(source, path)?;
    hash.update(b"\0cert\0");
    hash.update(pem.as_bytes());
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem.as_bytes()).collect();
    match certs {
        Ok(certs) if !certs.is_empty() => Ok(certs),
        Ok(_) => Err(FieldError {
            path: path.into(),
            message: "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        }),
        Err(e) => Err(FieldError {
            path: path.into(),
            message: format!("is not valid PEM: {e}"),
        }),
    }
}

fn private_key(
    source: &SecretSource,
    path: &str,
    hash: &mut Sha256,
) -> Result<PrivateKeyDer<'static>, FieldError> {
    let pem = pem_text(source, path)?;
    hash.update(b"\0key\0");
    hash.update(pem.as_bytes());
    // The error never quotes the key.
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|_| FieldError {
        path: path.into(),
        message: "holds no PEM private key (PKCS#8, PKCS#1 or SEC1)".into(),
    })
}

fn pem_text<'a>(source: &'a SecretSource, path: &str) -> Result<&'a str, FieldError> {
    resolved_value(source).ok_or_else(|| FieldError {
        path: path.into(),
        message: "secret was not resolved".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inline(v: &str) -> SecretSource {
        SecretSource::Value { value: v.into() }
    }

    #[test]
    fn bad_material_is_refused_with_its_field() {
        let tls = UpstreamTls {
            ca_bundle: Some(inline("not pem")),
            client_certificate: Some(ClientCertificate {
                certificate: inline("-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n"),
                key: inline("secret-looking text"),
            }),
            server_name: Some("bad name!".into()),
        };
        let errors = TlsMaterial::parse(&tls, "servers[0].tls").unwrap_err();
        let paths: Vec<_> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "servers[0].tls.caBundle",
                "servers[0].tls.clientCertificate.certificate",
                "servers[0].tls.serverName"
            ]
        );
        assert!(errors.iter().all(|e| !e.message.contains("secret-looking")));
    }

    #[test]
    fn no_settings_parse_to_nothing_and_names_are_keys() {
        let none = TlsMaterial::parse(&UpstreamTls::default(), "t").unwrap();
        assert!(none.roots.is_empty() && none.client.is_none() && none.server_name.is_none());
        let named = |n: &str| {
            let tls = UpstreamTls {
                server_name: Some(n.into()),
                ..Default::default()
            };
            TlsMaterial::parse(&tls, "t").unwrap().key
        };
        assert_eq!(named("a.example"), named("a.example"));
        assert_ne!(named("a.example"), named("b.example"));
        assert_ne!(named("a.example"), none.key);
    }
}
