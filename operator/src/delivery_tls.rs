//! TLS on the snapshot stream: which certificate this replica serves, how it is kept current,
//! and the listener that serves it.
//!
//! Two ways to get a certificate (`TlsMode`):
//! - `Managed`: the operator's own CA (see [`crate::delivery_ca`]): the lease holder creates and
//!   rotates it in a Secret and publishes the trust bundle in a ConfigMap the gateways mount;
//!   every replica issues its own serving certificate from it, in memory.
//! - `Provided`: a `kubernetes.io/tls` Secret someone else keeps current (e.g. cert-manager);
//!   every replica serves it and picks up a renewed one.
//!
//! Certificates are swapped under a running listener: connections already open (gateways'
//! streams) keep the certificate they were made with, new ones get the new one.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use time::OffsetDateTime;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::delivery_ca::{self, CaCert, CaPolicy, CaState, Step};

/// Where the serving certificate comes from.
#[derive(Debug, Clone)]
pub enum TlsMode {
    Managed {
        ca_secret: String,
        trust_configmap: String,
        /// DNS names and addresses the serving certificates name.
        names: Vec<String>,
        leaf_validity: Duration,
        policy: CaPolicy,
    },
    Provided {
        secret: String,
    },
}

/// The trust bundle's key in the ConfigMap (and a provided Secret's CA key, by convention).
const TRUST_BUNDLE_KEY: &str = "ca.crt";
const NEXT_TRUSTED_SINCE: &str = "switchboard.dev/next-ca-trusted-since";

#[derive(Debug, thiserror::Error)]
enum TlsError {
    #[error("Kubernetes API: {0}")]
    Api(#[from] kube::Error),
    #[error(transparent)]
    Ca(#[from] delivery_ca::CaError),
    #[error("Secret {secret}: {message}")]
    Secret { secret: String, message: String },
    #[error("serving key: {0}")]
    Key(#[from] rustls::Error),
}

/// The certificate this replica presents; empty until the first one is loaded (handshakes
/// fail meanwhile, as with no listener).
#[derive(Debug, Default)]
pub struct ServingCert {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl ServingCert {
    fn set(&self, cert: CertifiedKey) {
        if let Ok(mut current) = self.current.write() {
            *current = Some(Arc::new(cert));
        }
    }

    /// Loads a certificate chain and key given as DER.
    fn load_der(&self, chain: Vec<Vec<u8>>, key: Vec<u8>) -> Result<(), TlsError> {
        let key = PrivateKeyDer::try_from(key).map_err(|e| rustls::Error::General(e.into()))?;
        let chain = chain.into_iter().map(CertificateDer::from).collect();
        self.set(CertifiedKey::from_der(chain, key, &provider())?);
        Ok(())
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().and_then(|c| c.clone())
    }
}

fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// Serves `router` over TLS with whatever `serving` holds at each handshake. A client that
/// does not speak TLS (plain HTTP) gets its connection closed and nothing else.
pub async fn serve_tls(
    listener: TcpListener,
    router: Router,
    serving: Arc<ServingCert>,
) -> std::io::Result<()> {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(provider()))
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_no_client_auth()
        .with_cert_resolver(serving);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    loop {
        let (tcp, remote) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (acceptor, router, builder) = (acceptor.clone(), router.clone(), builder.clone());
        tokio::spawn(async move {
            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await;
            let tls = match handshake {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%remote, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%remote, "TLS handshake timed out");
                    return;
                }
            };
            let service = TowerToHyperService::new(router);
            if let Err(e) = builder.serve_connection(TokioIo::new(tls), service).await {
                tracing::debug!(%remote, error = %e, "snapshot stream connection ended with an error");
            }
        });
    }
}

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Keeps `serving` current for the life of the process (and, on the lease holder in managed
/// mode, the CA Secret and the trust bundle). Errors are logged and retried next round.
pub async fn keep(
    client: kube::Client,
    namespace: String,
    mode: TlsMode,
    serving: Arc<ServingCert>,
    mut leader: watch::Receiver<bool>,
    refresh: Duration,
    metrics: Arc<crate::metrics::Metrics>,
) {
    let mut keeper = Keeper {
        metrics,
        secrets: Api::namespaced(client.clone(), &namespace),
        configmaps: Api::namespaced(client, &namespace),
        namespace,
        mode,
        serving,
        issued: None,
        provided: None,
    };
    loop {
        let leading = *leader.borrow_and_update();
        if let Err(e) = keeper.round(leading).await {
            tracing::warn!(error = %e, "snapshot stream certificate: will retry");
        }
        tokio::select! {
            () = tokio::time::sleep(refresh) => {}
            changed = leader.changed() => if changed.is_err() { return },
        }
    }
}

struct Keeper {
    secrets: Api<Secret>,
    configmaps: Api<ConfigMap>,
    namespace: String,
    mode: TlsMode,
    serving: Arc<ServingCert>,
    /// The CA that issued the serving certificate, and when to issue the next one.
    issued: Option<(String, OffsetDateTime)>,
    /// The provided Secret's content last loaded.
    provided: Option<(ByteString, ByteString)>,
    /// Where the certificates' expiry is reported.
    metrics: Arc<crate::metrics::Metrics>,
}

impl Keeper {
    async fn round(&mut self, leading: bool) -> Result<(), TlsError> {
        match self.mode.clone() {
            TlsMode::Provided { secret } => self.load_provided(&secret).await,
            TlsMode::Managed {
                ca_secret,
                trust_configmap,
                names,
                leaf_validity,
                policy,
            } => {
                let stored = self.secrets.get_opt(&ca_secret).await?;
                let mut state = read_state(stored.as_ref());
                if leading {
                    let version = stored.and_then(|s| s.metadata.resource_version);
                    state = self.rotate(&ca_secret, version, state, &policy).await?;
                    self.publish_trust(&trust_configmap, &state).await?;
                }
                self.issue(&state, &names, leaf_validity)
            }
        }
    }

    /// Takes the CA through every step due now, writing the Secret after each (a conflict with
    /// another writer ends the round; the next one starts from what was stored).
    async fn rotate(
        &self,
        name: &str,
        mut version: Option<String>,
        mut state: CaState,
        policy: &CaPolicy,
    ) -> Result<CaState, TlsError> {
        loop {
            let now = OffsetDateTime::now_utc();
            let step = delivery_ca::next_step(&state, now, policy);
            if step == Step::Keep {
                return Ok(state);
            }
            state = delivery_ca::apply(&state, step, now, policy)?;
            let secret = write_state(name, &self.namespace, &state, version.clone());
            let written = match version {
                None => self.secrets.create(&PostParams::default(), &secret).await?,
                Some(_) => {
                    self.secrets
                        .replace(name, &PostParams::default(), &secret)
                        .await?
                }
            };
            version = written.metadata.resource_version;
            tracing::info!(secret = name, ?step, "snapshot stream CA");
        }
    }

    async fn publish_trust(&self, name: &str, state: &CaState) -> Result<(), TlsError> {
        let bundle = delivery_ca::trust_bundle(state);
        let stored = self.configmaps.get_opt(name).await?;
        let current = stored
            .as_ref()
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(TRUST_BUNDLE_KEY));
        if current == Some(&bundle) {
            return Ok(());
        }
        let configmap = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(self.namespace.clone()),
                labels: Some(managed_labels()),
                resource_version: stored.and_then(|c| c.metadata.resource_version),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                TRUST_BUNDLE_KEY.to_string(),
                bundle.clone(),
            )])),
            ..ConfigMap::default()
        };
        if configmap.metadata.resource_version.is_some() {
            self.configmaps
                .replace(name, &PostParams::default(), &configmap)
                .await?;
        } else {
            self.configmaps
                .create(&PostParams::default(), &configmap)
                .await?;
        }
        tracing::info!(
            configmap = name,
            certificates = bundle.matches("BEGIN CERTIFICATE").count(),
            "snapshot stream trust bundle published"
        );
        Ok(())
    }

    /// A new serving certificate when the signing CA changed or the current one is half-way
    /// through its life.
    fn issue(
        &mut self,
        state: &CaState,
        names: &[String],
        validity: Duration,
    ) -> Result<(), TlsError> {
        let Some(ca) = &state.current else {
            return Ok(());
        };
        let now = OffsetDateTime::now_utc();
        let due = match &self.issued {
            Some((issuer, renew_at)) => issuer != &ca.cert_pem || now >= *renew_at,
            None => true,
        };
        if !due {
            return Ok(());
        }
        let leaf = delivery_ca::issue_leaf(ca, names, now, validity)?;
        self.serving.load_der(leaf.chain, leaf.key)?;
        self.metrics
            .certificate_expiry("delivery_ca", ca.not_after.unix_timestamp());
        self.metrics
            .certificate_expiry("delivery_serving", leaf.not_after.unix_timestamp());
        self.issued = Some((ca.cert_pem.clone(), now + validity / 2));
        tracing::info!(
            not_after = %leaf.not_after,
            ?names,
            "snapshot stream serving certificate issued"
        );
        Ok(())
    }

    async fn load_provided(&mut self, name: &str) -> Result<(), TlsError> {
        let invalid = |message: String| TlsError::Secret {
            secret: name.to_string(),
            message,
        };
        let secret = self
            .secrets
            .get_opt(name)
            .await?
            .ok_or_else(|| invalid("not found".into()))?;
        let data = secret.data.unwrap_or_default();
        let field = |key: &str| {
            data.get(key)
                .cloned()
                .ok_or_else(|| invalid(format!("has no {key}")))
        };
        let (cert, key) = (field("tls.crt")?, field("tls.key")?);
        if self.provided.as_ref() == Some(&(cert.clone(), key.clone())) {
            return Ok(());
        }
        let chain: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(&cert.0)
            .map(|c| c.map(|c| c.to_vec()))
            .collect::<Result<_, _>>()
            .map_err(|e| invalid(format!("tls.crt: {e}")))?;
        if chain.is_empty() {
            return Err(invalid("tls.crt holds no certificate".into()));
        }
        let key_der =
            PrivateKeyDer::from_pem_slice(&key.0).map_err(|e| invalid(format!("tls.key: {e}")))?;
        self.serving
            .load_der(chain, key_der.secret_der().to_vec())?;
        self.provided = Some((cert, key));
        tracing::info!(secret = name, "snapshot stream certificate loaded");
        Ok(())
    }
}

fn managed_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(
        "app.kubernetes.io/managed-by".to_string(),
        "switchboard-operator".to_string(),
    )])
}

/// The CA Secret's layout: `ca.crt`/`ca.key` sign, `next-ca.*` is trusted and waits,
/// `previous-ca.crt` is trusted until it expires. A part that cannot be read counts as
/// absent (and is made again), with a warning.
fn read_state(secret: Option<&Secret>) -> CaState {
    let Some(secret) = secret else {
        return CaState::default();
    };
    let data = secret.data.clone().unwrap_or_default();
    let text = |key: &str| {
        data.get(key)
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
    };
    let ca = |cert: &str, key: Option<&str>| -> Option<CaCert> {
        let cert_pem = text(cert)?;
        // A previous CA keeps no key: it signs nothing any more.
        let key_pem = match key {
            Some(key) => text(key)?,
            None => String::new(),
        };
        let parsed = match key {
            Some(_) => delivery_ca::parse_ca(&cert_pem, &key_pem),
            None => delivery_ca::parse_ca_cert(&cert_pem),
        };
        parsed
            .inspect_err(
                |e| tracing::warn!(field = cert, error = %e, "CA Secret: unreadable, replacing it"),
            )
            .ok()
    };
    let trusted_since = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NEXT_TRUSTED_SINCE))
        .and_then(|t| {
            OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
        });
    CaState {
        current: ca("ca.crt", Some("ca.key")),
        next: ca("next-ca.crt", Some("next-ca.key")).zip(trusted_since),
        previous: ca("previous-ca.crt", None),
    }
}

fn write_state(
    name: &str,
    namespace: &str,
    state: &CaState,
    resource_version: Option<String>,
) -> Secret {
    let mut data = BTreeMap::new();
    let mut put = |key: &str, value: &str| {
        data.insert(key.to_string(), ByteString(value.as_bytes().to_vec()));
    };
    if let Some(ca) = &state.current {
        put("ca.crt", &ca.cert_pem);
        put("ca.key", &ca.key_pem);
    }
    let mut annotations = BTreeMap::new();
    if let Some((ca, since)) = &state.next {
        put("next-ca.crt", &ca.cert_pem);
        put("next-ca.key", &ca.key_pem);
        if let Ok(since) = since.format(&time::format_description::well_known::Rfc3339) {
            annotations.insert(NEXT_TRUSTED_SINCE.to_string(), since);
        }
    }
    if let Some(ca) = &state.previous {
        put("previous-ca.crt", &ca.cert_pem);
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(managed_labels()),
            annotations: Some(annotations),
            resource_version,
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use switchboard_source::operator_source::root_cause;
    use switchboard_source::operator_tls::{OperatorTrust, TrustedClient};

    const SERVICE: &str = "switchboard-operator.ns.svc";
    const HOUR: Duration = Duration::from_secs(3600);

    fn policy() -> CaPolicy {
        CaPolicy {
            ca_validity: 300 * HOUR,
            propagation: HOUR,
        }
    }

    /// A stream that sends a line every 20 ms for as long as it is read, like the snapshot
    /// stream's keep-alives.
    fn router() -> Router {
        Router::new().route("/ok", get(|| async { "ok" })).route(
            "/stream",
            get(|| async {
                let lines = futures_util::stream::unfold(0u64, |n| async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Some((Ok::<_, std::io::Error>(format!("{n}\n")), n + 1))
                });
                Body::from_stream(lines)
            }),
        )
    }

    async fn start(serving: Arc<ServingCert>) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(serve_tls(listener, router(), serving));
        address
    }

    fn issue(serving: &ServingCert, state: &CaState) {
        let ca = state.current.as_ref().unwrap();
        let names = vec![SERVICE.to_string()];
        let leaf = delivery_ca::issue_leaf(ca, &names, OffsetDateTime::now_utc(), HOUR).unwrap();
        serving.load_der(leaf.chain, leaf.key).unwrap();
    }

    /// A gateway's client trusting `bundle`, as written to its mounted file.
    fn gateway_client(file: &std::path::Path, bundle: &str, name: &str) -> TrustedClient {
        std::fs::write(file, bundle).unwrap();
        OperatorTrust::new(file.to_path_buf(), name)
            .unwrap()
            .client(None)
            .unwrap()
    }

    async fn get_ok(
        client: &reqwest::Client,
        address: std::net::SocketAddr,
    ) -> Result<String, String> {
        let answer = client
            .get(format!("https://{address}/ok"))
            .send()
            .await
            .map_err(|e| root_cause(&e))?;
        answer.text().await.map_err(|e| e.to_string())
    }

    /// A file in the temp dir, removed when the test ends, passed or failed.
    struct TempFile(std::path::PathBuf);

    impl std::ops::Deref for TempFile {
        type Target = std::path::PathBuf;
        fn deref(&self) -> &std::path::PathBuf {
            &self.0
        }
    }

    impl AsRef<std::path::Path> for TempFile {
        fn as_ref(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn temp_file(name: &str) -> TempFile {
        TempFile(
            std::env::temp_dir().join(format!("switchboard-{name}-{}.pem", std::process::id())),
        )
    }

    #[tokio::test]
    async fn gateways_verify_the_service_name_and_refuse_plain_http_and_other_cas() {
        let now = OffsetDateTime::now_utc();
        let state = delivery_ca::apply(&CaState::default(), Step::Create, now, &policy()).unwrap();
        let serving = Arc::new(ServingCert::default());
        issue(&serving, &state);
        let address = start(serving).await;
        let file = temp_file("trust");

        // Dialed by IP (acks go to a pod IP), verified against the Service name.
        let trusted = gateway_client(&file, &delivery_ca::trust_bundle(&state), SERVICE);
        assert_eq!(get_ok(&trusted.http, address).await, Ok("ok".into()));

        // Plain HTTP: no HTTP answer at all.
        let plain = reqwest::Client::new();
        let answer = plain.get(format!("http://{address}/ok")).send().await;
        assert!(answer.is_err(), "plain HTTP got an answer: {answer:?}");
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut raw = tokio::net::TcpStream::connect(address).await.unwrap();
        raw.write_all(b"GET /ok HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut got)).await;
        assert!(
            !String::from_utf8_lossy(&got).contains("ok"),
            "plain HTTP read {got:?}"
        );

        // Another CA, or the right CA with another name: refused.
        let other = delivery_ca::apply(&CaState::default(), Step::Create, now, &policy()).unwrap();
        let wrong_ca = gateway_client(&file, &delivery_ca::trust_bundle(&other), SERVICE);
        let refused = get_ok(&wrong_ca.http, address).await.unwrap_err();
        assert!(refused.contains("UnknownIssuer"), "{refused}");
        let wrong_name = gateway_client(&file, &delivery_ca::trust_bundle(&state), "other.ns.svc");
        let refused = get_ok(&wrong_name.http, address).await.unwrap_err();
        assert!(refused.contains("not valid for name"), "{refused}");
    }

    #[tokio::test]
    async fn rotating_the_ca_breaks_neither_open_streams_nor_new_connections() {
        let now = OffsetDateTime::now_utc();
        let created =
            delivery_ca::apply(&CaState::default(), Step::Create, now, &policy()).unwrap();
        let serving = Arc::new(ServingCert::default());
        issue(&serving, &created);
        let address = start(serving.clone()).await;
        let file = temp_file("rotation");
        let before = gateway_client(&file, &delivery_ca::trust_bundle(&created), SERVICE);
        let mut stream = before
            .http
            .get(format!("https://{address}/stream"))
            .send()
            .await
            .unwrap();
        stream.chunk().await.unwrap().expect("a first line");

        // The successor is introduced: gateways get the two-CA bundle (the kubelet updates
        // their file), the old CA still signs.
        let introduced = delivery_ca::apply(&created, Step::Introduce, now, &policy()).unwrap();
        std::fs::write(&file, delivery_ca::trust_bundle(&introduced)).unwrap();
        let trust = OperatorTrust::new(file.clone(), SERVICE).unwrap();
        let during = trust.client(Some(before)).unwrap();
        assert_eq!(get_ok(&during.http, address).await, Ok("ok".into()));

        // Promoted: the replica serves a certificate from the new CA.
        let promoted = delivery_ca::apply(&introduced, Step::Promote, now, &policy()).unwrap();
        issue(&serving, &promoted);
        assert_eq!(
            get_ok(&during.http, address).await,
            Ok("ok".into()),
            "a gateway with the two-CA bundle"
        );
        let old = temp_file("old");
        let only_old = gateway_client(&old, &delivery_ca::trust_bundle(&created), SERVICE);
        assert!(
            get_ok(&only_old.http, address).await.is_err(),
            "control: without the introduction step, a gateway would be cut off"
        );
        for _ in 0..5 {
            assert!(
                stream.chunk().await.unwrap().is_some(),
                "the open stream goes on"
            );
        }
    }

    #[test]
    fn the_ca_secret_layout_reads_back_what_was_written() {
        let policy = CaPolicy {
            ca_validity: Duration::from_secs(3000),
            propagation: Duration::from_secs(60),
        };
        let now = OffsetDateTime::now_utc()
            .replace_nanosecond(0)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH);
        let created = delivery_ca::apply(&CaState::default(), Step::Create, now, &policy).unwrap();
        let introduced = delivery_ca::apply(&created, Step::Introduce, now, &policy).unwrap();
        let secret = write_state("ca", "ns", &introduced, None);
        assert_eq!(read_state(Some(&secret)), introduced);
        let promoted = delivery_ca::apply(&introduced, Step::Promote, now, &policy).unwrap();
        let read = read_state(Some(&write_state("ca", "ns", &promoted, None)));
        assert_eq!(read, promoted);
        let previous = read.previous.expect("the old CA stays trusted");
        assert_eq!(previous.cert_pem, created.current.unwrap().cert_pem);
        assert!(previous.key_pem.is_empty(), "and signs nothing");
    }
}
