//! Readiness probes: the operator lists each server's tools the way a gateway replica would,
//! with the gateway's own credential, using the gateway's own upstream code (so "Ready" means
//! what the gateway will experience, not a TCP connect).
//!
//! Models are probed without spending tokens: the provider's model listing (`GET
//! <baseUrl>/v1/models` with `x-api-key` for anthropic, `GET <baseUrl>/models` with `Authorization:
//! Bearer` for openai), at the URL and with the credential header the gateway composes. A model
//! is probed when its rendered spec changes and then every `model_interval` (providers count
//! requests against rate limits, so less often than servers).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue};
use k8s_openapi::jiff::Timestamp;
use sha2::{Digest, Sha256};
use switchboard_core::metrics::Metrics;
use switchboard_core::table::{Model, RoutingTable, Server};
use switchboard_snapshot::{ModelProvider, Snapshot};
use switchboard_upstream::UpstreamPlane;
use switchboard_upstream::error::UpstreamError;
use switchboard_upstream::http_client::HttpError;
use switchboard_upstream::identity_keys;
use tokio::sync::{Notify, watch};

use crate::status::{KeysProbe, ModelProbe, Probe};
use switchboard_crds::server::ReviewedTool;
use switchboard_upstream::listing::Listing;

/// The Anthropic API version the model listing is asked for.
const ANTHROPIC_VERSION: &str = "2023-06-01";
/// A model listing gets at most this long (or the model's timeout, if shorter).
const MODEL_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct Probes {
    results: Mutex<HashMap<String, Probe>>,
    models: Mutex<HashMap<String, ModelProbe>>,
    identity_keys: Mutex<HashMap<String, KeysProbe>>,
}

impl Probes {
    pub fn get(&self, server_id: &str) -> Option<Probe> {
        self.results
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(server_id)
            .cloned()
    }

    /// Records a result; true when it changes what status says (not just the time).
    fn record(&self, server_id: &str, probe: Probe) -> bool {
        let mut results = self.results.lock().unwrap_or_else(|p| p.into_inner());
        let changed = match (results.get(server_id), &probe) {
            (
                Some(Probe::Listed {
                    tools: a,
                    left_out: x,
                    review: r,
                    ..
                }),
                Probe::Listed {
                    tools: b,
                    left_out: y,
                    review: q,
                    ..
                },
            ) => a != b || x != y || r != q,
            (Some(old), new) => old != new,
            (None, _) => true,
        };
        if changed || matches!(probe, Probe::Listed { .. }) {
            results.insert(server_id.to_string(), probe);
        }
        changed
    }

    pub(crate) fn model(&self, model_id: &str) -> Option<ModelProbe> {
        self.models
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(model_id)
            .cloned()
    }

    /// Records a model's result; true when it changes what status says.
    fn record_model(&self, model_id: &str, probe: ModelProbe) -> bool {
        let mut models = self.models.lock().unwrap_or_else(|p| p.into_inner());
        if models.get(model_id) == Some(&probe) {
            return false;
        }
        models.insert(model_id.to_string(), probe);
        true
    }

    /// What the last fetch of an identity provider's keys found (`<namespace>/<name>`).
    pub(crate) fn identity_keys(&self, provider_id: &str) -> Option<KeysProbe> {
        self.identity_keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(provider_id)
            .cloned()
    }

    /// Records a provider's keys (or why not); true when it changes what status says. Providers
    /// not in `live` are forgotten.
    fn record_identity_keys(
        &self,
        results: Vec<(String, KeysProbe)>,
        live: &HashSet<String>,
    ) -> bool {
        let mut held = self.identity_keys.lock().unwrap_or_else(|p| p.into_inner());
        held.retain(|id, _| live.contains(id));
        let mut changed = false;
        for (id, probe) in results {
            changed |= held.get(&id) != Some(&probe);
            held.insert(id, probe);
        }
        changed
    }

    /// Forgets models no longer in the snapshot (a model created again is probed afresh).
    fn retain_models(&self, ids: &HashSet<&str>) {
        let mut models = self.models.lock().unwrap_or_else(|p| p.into_inner());
        models.retain(|id, _| ids.contains(&id.as_str()));
    }
}

/// What a provider's answer to the model listing means for Ready; `keyed`: whether the
/// request carried an API key.
fn model_answer(status: u16, keyed: bool) -> ModelProbe {
    match status {
        200..=299 => ModelProbe::Answered { status },
        401 | 403 if keyed => ModelProbe::Failed {
            reason: "ProviderAuthFailed",
            message: format!(
                "the provider refused the API key (HTTP {status} on the model listing)"
            ),
        },
        401 | 403 => ModelProbe::Failed {
            reason: "ProviderAuthFailed",
            message: format!(
                "the provider wants an API key (HTTP {status} on the model listing): set spec.apiKeySecretRef"
            ),
        },
        300..=399 => ModelProbe::Failed {
            reason: "ProviderUnavailable",
            message: format!(
                "the provider answered the model listing with a redirect (HTTP {status}); redirects are not followed"
            ),
        },
        _ => ModelProbe::Failed {
            reason: "ProviderUnavailable",
            message: format!("the provider answered the model listing with HTTP {status}"),
        },
    }
}

/// A failed request, described by its cause, never its URL (a base URL may carry credentials).
fn model_failure(e: &HttpError) -> ModelProbe {
    let kind = match e {
        HttpError::Connect | HttpError::Denied(_) => "cannot connect to the provider",
        _ => "the model listing failed",
    };
    ModelProbe::Failed {
        reason: "ProviderUnavailable",
        message: format!("{kind}: {e}"),
    }
}

/// One listing request to the model's provider. Never a model call.
async fn probe_model(plane: &UpstreamPlane, model: &Model) -> ModelProbe {
    let budget = model.spec.timeout.min(MODEL_PROBE_TIMEOUT);
    // The gateway's own client for the model: its TLS settings, no redirects followed.
    let http = match plane.http_for_model(model) {
        Ok(http) => http,
        Err(e) => {
            return ModelProbe::Failed {
                reason: "ProviderUnavailable",
                message: e.to_string(),
            };
        }
    };
    let mut request = http.get(&model.models_url);
    if let Some((name, value)) = &model.credential {
        request = request.header(name.clone(), value.clone());
    }
    if model.spec.provider == ModelProvider::Anthropic {
        request = request.header(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
    }
    match tokio::time::timeout(budget, request.send()).await {
        Ok(Ok(response)) => model_answer(response.status().as_u16(), model.credential.is_some()),
        Ok(Err(e)) => model_failure(&e),
        Err(_) => ModelProbe::Failed {
            reason: "ProviderUnavailable",
            message: format!(
                "the provider did not answer the model listing within {}",
                humantime::format_duration(budget)
            ),
        },
    }
}

/// Whether a model is due: its spec changed since the last probe, or `interval` has passed.
fn model_due(
    last: Option<&([u8; 32], Instant)>,
    spec_hash: &[u8; 32],
    now: Instant,
    interval: Duration,
) -> bool {
    match last {
        None => true,
        Some((hash, at)) => hash != spec_hash || now.duration_since(*at) >= interval,
    }
}

/// Most tools a server's status names in `toolReview`.
const REVIEWED_TOOLS: usize = 500;

/// The listed tools not approved as they are, or flagged, as status names them (`None` under
/// `tools.pinning: off`).
fn reviewed_tools(server: &Server, listing: &Listing) -> Option<Vec<ReviewedTool>> {
    let mut entries = switchboard_upstream::review_entries(server, listing)?;
    entries.truncate(REVIEWED_TOOLS);
    Some(
        entries
            .into_iter()
            .map(crate::tools_review::reviewed_tool)
            .collect(),
    )
}

fn failure(e: &UpstreamError) -> Probe {
    let reason = match e {
        UpstreamError::Timeout { .. } => "UpstreamTimeout",
        UpstreamError::Unauthorized { .. }
        | UpstreamError::Forbidden { .. }
        | UpstreamError::ScopeRequired(_)
        | UpstreamError::AuthRequired { .. } => "UpstreamAuthFailed",
        UpstreamError::AddressDenied { .. } => "UpstreamAddressDenied",
        UpstreamError::Unavailable { .. }
        | UpstreamError::Rpc { .. }
        | UpstreamError::ToolNotFound { .. }
        | UpstreamError::ToolHeld { .. }
        | UpstreamError::ArgumentRefused(_)
        | UpstreamError::PolicyDenied { .. }
        | UpstreamError::PolicyUnavailable { .. }
        | UpstreamError::ServerNotFound { .. }
        | UpstreamError::SessionGone { .. }
        | UpstreamError::Limited(_)
        | UpstreamError::StoreUnavailable { .. } => "UpstreamUnavailable",
        UpstreamError::AccountNotConnected { .. } | UpstreamError::ProviderTokenNotHeld { .. } => {
            "UpstreamAuthFailed"
        }
    };
    Probe::Failed {
        reason,
        message: e.to_string(),
    }
}

/// Probes every server of the latest snapshot each `interval`, and each model when it changed
/// or every `model_interval`; wakes `changed` when a result changes what status says.
pub async fn run(
    snapshots: watch::Receiver<Arc<Snapshot>>,
    probes: Arc<Probes>,
    interval: Duration,
    model_interval: Duration,
    changed: Arc<Notify>,
) {
    // The gateway's own upstream plane (clients, tokens, listings), without its client faces.
    let plane = UpstreamPlane::new(Arc::new(Metrics::default()));
    let mut table = Arc::new(
        RoutingTable::build(&Default::default())
            .unwrap_or_else(|_| unreachable!("the empty snapshot is valid")),
    );
    let mut applied_generation = None;
    let mut model_probed: HashMap<String, ([u8; 32], Instant)> = HashMap::new();
    let mut keys_fetched: HashMap<String, ([u8; 32], Instant, bool)> = HashMap::new();
    loop {
        let snapshot = snapshots.borrow().clone();
        if applied_generation != Some(snapshot.generation) {
            match RoutingTable::build(&snapshot) {
                Ok(built) => {
                    plane.prepare(&built);
                    table = Arc::new(built);
                    plane.forget_all_but(&table);
                }
                Err(e) => tracing::warn!(error = %e, "probe: snapshot does not build"),
            }
            applied_generation = Some(snapshot.generation);
        }
        let rounds = table.servers.iter().map(|server| {
            let (plane, table) = (&plane, &table);
            async move {
                let id = server.id().to_string();
                // Each caller's own credential, or each person's own account: there is no
                // listing of the gateway's own to probe with.
                if server.spec.auth.uses_caller_credential() || server.spec.auth.is_user_account() {
                    return (id, Probe::DependsOnCaller);
                }
                let probe = match plane.probe(table.clone(), &id).await {
                    Ok(listing) => Probe::Listed {
                        tools: listing
                            .items
                            .iter()
                            .filter_map(|t| t.id())
                            .filter(|n| server.spec.tools.admits(n))
                            .map(str::to_owned)
                            .collect(),
                        left_out: plane.openapi_problems(server).await.unwrap_or_default(),
                        at: Timestamp::now(),
                        review: reviewed_tools(server, &listing),
                    },
                    Err(e) => failure(&e),
                };
                (id, probe)
            }
        });
        let now = Instant::now();
        let ids: HashSet<&str> = table.models.iter().map(|m| m.id()).collect();
        model_probed.retain(|id, _| ids.contains(&id.as_str()));
        probes.retain_models(&ids);
        let mut due = Vec::new();
        for model in &table.models {
            let spec_hash: [u8; 32] =
                Sha256::digest(serde_json::to_vec(&model.spec).unwrap_or_default()).into();
            if model_due(
                model_probed.get(model.id()),
                &spec_hash,
                now,
                model_interval,
            ) {
                model_probed.insert(model.id().to_string(), (spec_hash, now));
                due.push(model);
            }
        }
        let model_rounds = due.into_iter().map(|model| {
            let plane = &plane;
            async move { (model.id().to_string(), probe_model(plane, model).await) }
        });
        // Identity providers: fetched as a gateway fetches them (discovery, then the key set,
        // with the provider's TLS and the address policy) when new or changed, again each
        // probe interval while failing, and as often as gateways refresh them once loaded.
        let providers: Vec<_> = table.people.iter().flat_map(|p| p.providers()).collect();
        let live: HashSet<String> = providers.iter().map(|(id, ..)| id.to_string()).collect();
        keys_fetched.retain(|id, _| live.contains(id));
        let key_rounds = providers
            .into_iter()
            .filter(|(id, spec, _)| {
                let hash: [u8; 32] =
                    Sha256::digest(serde_json::to_vec(spec).unwrap_or_default()).into();
                let due = match keys_fetched.get(*id) {
                    None => true,
                    Some((h, at, ok)) => {
                        let wait = if *ok {
                            identity_keys::REFRESH
                        } else {
                            interval
                        };
                        *h != hash || now.duration_since(*at) >= wait
                    }
                };
                if due {
                    keys_fetched.insert(id.to_string(), (hash, now, false));
                }
                due
            })
            .map(|(id, spec, tls)| {
                let plane = &plane;
                async move {
                    let probe = match plane.fetch_identity_keys(spec, tls.map(|t| &**t)).await {
                        Ok(fetched) => KeysProbe::Loaded {
                            keys: fetched.keys.len(),
                        },
                        Err(e) => KeysProbe::Failed {
                            reason: if e.in_discovery() {
                                "DiscoveryFailed"
                            } else {
                                "KeysNotLoaded"
                            },
                            message: e.to_string(),
                        },
                    };
                    (id.to_string(), probe)
                }
            });
        let (results, model_results, key_results) = futures_util::future::join3(
            futures_util::future::join_all(rounds),
            futures_util::future::join_all(model_rounds),
            futures_util::future::join_all(key_rounds),
        )
        .await;
        for (id, probe) in &key_results {
            if let Some(entry) = keys_fetched.get_mut(id) {
                entry.2 = matches!(probe, KeysProbe::Loaded { .. });
            }
        }
        let mut any = probes.record_identity_keys(key_results, &live);
        for (id, probe) in results {
            any |= probes.record(&id, probe);
        }
        for (id, probe) in model_results {
            if let ModelProbe::Failed { reason, message } = &probe {
                tracing::debug!(model = %id, reason, message, "model probe failed");
            }
            any |= probes.record_model(&id, probe);
        }
        if any {
            changed.notify_one();
        }
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_2xx_listing_is_ready_and_auth_failures_are_named() {
        assert_eq!(
            model_answer(200, true),
            ModelProbe::Answered { status: 200 }
        );
        assert_eq!(
            model_answer(204, false),
            ModelProbe::Answered { status: 204 }
        );
        for (status, keyed) in [(401, true), (403, true), (401, false)] {
            let ModelProbe::Failed { reason, message } = model_answer(status, keyed) else {
                panic!("{status} is not ready");
            };
            assert_eq!(reason, "ProviderAuthFailed");
            assert!(message.contains(&status.to_string()), "{message}");
            assert_eq!(message.contains("apiKeySecretRef"), !keyed, "{message}");
        }
        for status in [302, 404, 429, 500, 503] {
            let ModelProbe::Failed { reason, .. } = model_answer(status, true) else {
                panic!("{status} is not ready");
            };
            assert_eq!(reason, "ProviderUnavailable", "{status}");
        }
    }

    #[test]
    fn a_model_is_probed_when_new_changed_or_due() {
        let now = Instant::now();
        let interval = Duration::from_secs(60);
        let hash = [1u8; 32];
        assert!(model_due(None, &hash, now, interval), "never probed");
        assert!(
            !model_due(Some(&(hash, now)), &hash, now, interval),
            "just probed, unchanged"
        );
        assert!(
            model_due(Some(&([2u8; 32], now)), &hash, now, interval),
            "the spec changed (e.g. a rotated key)"
        );
        assert!(
            model_due(Some(&(hash, now)), &hash, now + interval, interval),
            "the interval passed"
        );
    }

    #[tokio::test]
    async fn an_unreachable_provider_is_described_without_its_url() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener); // nothing listens there any more
        let http = switchboard_upstream::http_client::HttpClient::plain().unwrap();
        let url = url::Url::parse(&format!(
            "http://user:s3cr3t@127.0.0.1:{port}/v1/models?key=s3cr3t"
        ))
        .unwrap();
        let e = http.get(&url).send().await.expect_err("nothing listens");
        let ModelProbe::Failed { reason, message } = model_failure(&e) else {
            panic!("a failure");
        };
        assert_eq!(reason, "ProviderUnavailable");
        assert!(!message.contains("s3cr3t"), "{message}");
        assert!(!message.contains("127.0.0.1"), "{message}");
    }
}
