//! The reconcile loop. Every change to an McpServer, McpKey, ModelRoute or Secret (and every probe result
//! or replica acknowledgement) marks the world dirty; the loop then renders the whole snapshot
//! (cheap: it is a pure function over the caches), publishes it when it changed, and brings
//! each resource's status up to date. Every operator replica renders (so a new lease holder
//! is warm); only the holder writes Secrets and status.

use crate::error::Error;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use sha2::{Digest, Sha256};
use switchboard_crds::{IdentityProvider, McpKey, McpServer, McpVirtualServer, ModelRoute};
use switchboard_snapshot::ServiceAccountTokens;
use switchboard_snapshot::{GatewaySettings, SecretSource, Snapshot};
use tokio::sync::{Notify, watch};

use crate::delivery::{Hub, Published};
use crate::gateways;
use crate::keys::{ensure_key_secrets, generate_key};
use crate::labels::MANAGED_BY;
use crate::metrics::Metrics;
use crate::probe::Probes;
use crate::render::{
    KeyOutcome, NamespacePolicies, ObjectRef, RenderInput, Rendered, SecretData, model_names,
    object_ref, render,
};
use crate::status::{self, Rollout};
use crate::status_write;
use crate::upstream_policy::namespace_policy;

pub struct Config {
    pub namespace: String,
    pub snapshot_secret: String,
    pub identity: String,
    pub settings: GatewaySettings,
    /// Admission of upstream addresses (the same networks as `settings.upstream_networks`).
    pub upstreams: crate::upstream_policy::UpstreamPolicy,
    /// `--secret-selector`: only Secrets with these labels (and the operator's own) are seen.
    pub secret_selector: Option<String>,
    /// `--watch-namespaces` and `--instance`: the part of the cluster this install owns.
    pub scope: crate::scope::Scope,
    /// `--reserved-prefixes` and `--reserved-models`.
    pub reservations: crate::reservations::Reservations,
    /// The gateway's ServiceAccount (namespace, name): its pods are the replicas status
    /// expects (see `crate::gateways`).
    pub gateway_service_account: (String, String),
    /// `spec.run`: what the servers' pods are made with.
    pub workload: crate::workload::Settings,
}

pub struct Controller {
    pub client: kube::Client,
    pub config: Config,
    pub hub: Arc<Hub>,
    pub probes: Arc<Probes>,
    pub metrics: Arc<Metrics>,
    pub leader: watch::Receiver<bool>,
    pub dirty: Arc<Notify>,
    pub snapshots: watch::Sender<Arc<Snapshot>>,
    /// The cluster's ServiceAccount issuer keys, for workload tokens (see [`crate::issuer`]).
    pub issuer: watch::Receiver<Option<ServiceAccountTokens>>,
    /// Turned true after the first render: only a warm replica contends for the lease.
    pub warm: watch::Sender<bool>,
}

/// Per server (or model): the hash of its rendered spec and the snapshot generation that first
/// carried it, so `Programmed` can say which replicas serve this version of it.
type Included = HashMap<ObjectRef, ([u8; 32], u64)>;

/// Notes the generation that first carried each spec's current version.
fn include<'a>(
    included: &mut Included,
    generation: u64,
    specs: impl Iterator<Item = (ObjectRef, Vec<u8>)> + 'a,
) {
    for (key, bytes) in specs {
        let spec_hash = hash(&bytes);
        let entry = included.entry(key).or_insert((spec_hash, generation));
        if entry.0 != spec_hash {
            *entry = (spec_hash, generation);
        }
    }
}

/// How long the first listing of the gateway's pods is waited for.
const GATEWAY_PODS_SYNC: Duration = Duration::from_secs(30);

/// For kinds cached as they are.
fn whole<K>(_: &mut K) {}

/// Drops what no cached object is read for: the managed fields, and the `kubectl apply`
/// annotation, which repeats the whole object.
fn trim_metadata(metadata: &mut kube::api::ObjectMeta) {
    metadata.managed_fields = None;
    if let Some(annotations) = metadata.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// A Namespace is kept for its annotations only.
fn trim_namespace(namespace: &mut Namespace) {
    trim_metadata(&mut namespace.metadata);
    namespace.spec = None;
    namespace.status = None;
}

/// What the operator keeps of a ConfigMap (a CA bundle's home): its data and name.
fn trim_config_map(config_map: &mut ConfigMap) {
    trim_metadata(&mut config_map.metadata);
}

/// Secret types the operator never reads (no McpServer, McpKey or ModelRoute credential is a
/// Helm release or a legacy ServiceAccount token), left out of the watch: in most clusters they
/// are the bulk of all Secret bytes.
const IGNORED_SECRET_TYPES: &str =
    "type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token";

/// What the operator keeps of a Deployment it made: its metadata (labels, owners, the applied
/// digest) and spec (replicas, for drift); not the managed fields.
fn trim_deployment(deployment: &mut Deployment) {
    deployment.metadata.managed_fields = None;
}

/// What the operator keeps of a run server's pod: its labels and status (readiness and why
/// containers wait), not its spec.
fn trim_server_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    pod.spec = None;
}

/// What the operator keeps of a Secret: its data, name, namespace, labels and owners; not the
/// managed fields or a `kubectl apply` annotation, which repeats the whole Secret.
fn trim_secret(secret: &mut Secret) {
    trim_metadata(&mut secret.metadata);
}

/// The cache of one kind: one store per watch. An install that watches a list of namespaces
/// has one watch per namespace, each with its own store: a watch that restarts replaces its
/// store's whole content, which must not drop another namespace's objects.
pub(crate) struct Cache<K: kube::Resource<DynamicType = ()> + 'static>(Vec<Store<K>>);

impl<K: kube::Resource<DynamicType = ()> + Clone + 'static> Cache<K> {
    fn state(&self) -> Vec<Arc<K>> {
        self.0.iter().flat_map(|store| store.state()).collect()
    }

    async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        for store in &self.0 {
            store.wait_until_ready().await?;
        }
        Ok(())
    }
}

/// How long a kind's first listing is waited for before asking whether its CRD is installed.
const CRD_CHECK_AFTER: Duration = Duration::from_secs(5);

/// Waits for a custom kind's first listing; when its CRD is not installed (the API answers 404),
/// goes on without it, so that an operator newer than the cluster's CRDs still serves the kinds
/// that exist. Its watch keeps retrying: once the CRD is applied, its resources arrive like any
/// change. A kind whose listing is slow for any other reason is waited for (rendering without
/// it would drop its resources from the snapshot). `probe` is one API the operator may list
/// through (a missing CRD answers 404 in every namespace alike).
async fn ready_or_absent<K>(
    cache: &Cache<K>,
    probe: Api<K>,
) -> Result<(), reflector::store::WriterDropped>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + 'static,
{
    loop {
        if let Ok(ready) = tokio::time::timeout(CRD_CHECK_AFTER, cache.wait_until_ready()).await {
            return ready;
        }
        match probe
            .list_metadata(&kube::api::ListParams::default().limit(1))
            .await
        {
            Err(kube::Error::Api(status)) if status.code == 404 => {
                tracing::warn!(
                    crd = %format!("{}.{}", K::plural(&()), K::group(&())),
                    "this kind's CRD is not installed: serving without it until it is \
                     (kubectl apply --server-side -f the chart's crds/)"
                );
                return Ok(());
            }
            // Listable (the watch is about to be ready), or another error the watch retries.
            _ => continue,
        }
    }
}

/// One API a namespaced kind is listed through: the whole cluster, or the first watched
/// namespace (cluster-wide listing is refused where RBAC covers only the watched ones).
fn probe_api<K>(client: &kube::Client, namespaces: Option<&BTreeSet<String>>) -> Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespaces.and_then(|listed| listed.first()) {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

/// The APIs a namespaced kind is watched through: the whole cluster, or each listed namespace.
fn apis<K>(client: &kube::Client, namespaces: Option<&BTreeSet<String>>) -> Vec<Api<K>>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespaces {
        None => vec![Api::all(client.clone())],
        Some(listed) => listed
            .iter()
            .map(|namespace| Api::namespaced(client.clone(), namespace))
            .collect(),
    }
}

/// What a watched kind is: an API object the reflector can decode, keep and share.
trait Watched:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// Caches a kind (the objects `config` selects through each of `apis`, each after `trim`) and
/// wakes `dirty` on every change.
fn watch_into<K: Watched>(
    apis: Vec<Api<K>>,
    config: watcher::Config,
    trim: fn(&mut K),
    dirty: Arc<Notify>,
) -> Cache<K> {
    Cache(
        apis.into_iter()
            .map(|api| watch_one(api, config.clone(), trim, dirty.clone()))
            .collect(),
    )
}

/// Caches the objects `config` selects through one API (see [`watch_into`]).
fn watch_one<K: Watched>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
    dirty: Arc<Notify>,
) -> Store<K> {
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config).modify(trim))
        .default_backoff()
        .touched_objects();
    tokio::spawn(async move {
        futures_util::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                tracing::warn!(error = %e, "watch error (retrying)");
            }
            dirty.notify_one();
        }
    });
    store
}

impl Controller {
    pub async fn run(self) {
        let all = watcher::Config::default;
        let client = &self.client;
        let scope = &self.config.scope;
        let watched = scope.namespaces();
        // The resources users write: of this install's instance only (a label selector the
        // API server applies), in the watched namespaces.
        let mine = || all().labels(&scope.resource_selector());
        let servers = watch_into(apis(client, watched), mine(), whole, self.dirty.clone());
        let virtual_servers = watch_into(apis(client, watched), mine(), whole, self.dirty.clone());
        let keys = watch_into(apis(client, watched), mine(), whole, self.dirty.clone());
        let models = watch_into(apis(client, watched), mine(), whole, self.dirty.clone());
        let identity_providers =
            watch_into(apis(client, watched), mine(), whole, self.dirty.clone());
        // With a selector, two watches: the selected Secrets, and the operator's own (the
        // snapshot Secret, generated keys), which a label selector cannot OR in. Both in the
        // watched namespaces and the operator's own (the snapshot Secret's).
        let own = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
        let secret_selectors = match &self.config.secret_selector {
            None => vec![None],
            Some(selector) => vec![Some(selector.as_str()), Some(own.as_str())],
        };
        let with_own = scope.with_own(&self.config.namespace);
        let secrets: Cache<Secret> = Cache(
            secret_selectors
                .into_iter()
                .flat_map(|selector| {
                    let config = all().fields(IGNORED_SECRET_TYPES);
                    let config = selector.map_or(config.clone(), |s| config.labels(s));
                    watch_into(
                        apis(client, with_own.as_ref()),
                        config,
                        trim_secret,
                        self.dirty.clone(),
                    )
                    .0
                })
                .collect(),
        );
        // CA bundles (`tls.caBundle.configMapKeyRef`); under `--secret-selector`, the selected
        // ones alone, like Secrets.
        let config_maps = watch_into(
            apis(client, watched),
            self.config
                .secret_selector
                .as_deref()
                .map_or(all(), |s| all().labels(s)),
            trim_config_map,
            self.dirty.clone(),
        );
        // For their upstream-policy annotations: each watched Namespace by its name (what a
        // ClusterRole limited to those `resourceNames` allows), or all of them.
        let namespaces = match watched {
            None => watch_into(
                vec![Api::all(client.clone())],
                all(),
                trim_namespace,
                self.dirty.clone(),
            ),
            Some(listed) => Cache(
                listed
                    .iter()
                    .map(|name| {
                        watch_one(
                            Api::all(client.clone()),
                            all().fields(&format!("metadata.name={name}")),
                            trim_namespace,
                            self.dirty.clone(),
                        )
                    })
                    .collect(),
            ),
        };
        let (gateway_namespace, gateway_account) = &self.config.gateway_service_account;
        let gateway_pods = watch_into(
            vec![Api::<Pod>::namespaced(client.clone(), gateway_namespace)],
            all().fields(&gateways::selector(gateway_account)),
            gateways::trim,
            self.dirty.clone(),
        );
        // `spec.run`: the Deployments and pods the operator made (its labels), for status and
        // drift.
        let deployments = watch_into(
            apis(client, watched),
            all().labels(&crate::workload::pod_selector()),
            trim_deployment,
            self.dirty.clone(),
        );
        let server_pods = watch_into(
            apis(client, watched),
            all().labels(&crate::workload::pod_selector()),
            trim_server_pod,
            self.dirty.clone(),
        );
        // Bounded: without the permission to list pods (a chart older than the operator), the
        // operator still serves, and status counts the replicas connected to it, as it used to.
        if tokio::time::timeout(GATEWAY_PODS_SYNC, gateway_pods.wait_until_ready())
            .await
            .is_err()
        {
            tracing::warn!(
                namespace = %gateway_namespace,
                "cannot list the gateway's pods (RBAC: pods get/list/watch in that namespace?); \
                 until it can, status counts only the gateway replicas that follow this operator"
            );
        }
        // Bounded like the gateway pods: without the permissions (RBAC: deployments and pods
        // list/watch), servers with `spec.run` cannot be run, the rest is served.
        let synced = async {
            let _ = deployments.wait_until_ready().await;
            let _ = server_pods.wait_until_ready().await;
        };
        if tokio::time::timeout(GATEWAY_PODS_SYNC, synced)
            .await
            .is_err()
        {
            tracing::warn!(
                "cannot list Deployments or Pods (RBAC: apps/deployments and pods get/list/watch \
                 cluster-wide?); servers with spec.run will not report their pods until it can"
            );
        }
        let ready = vec![
            ready_or_absent(&servers, probe_api(client, watched)).await,
            ready_or_absent(&virtual_servers, probe_api(client, watched)).await,
            ready_or_absent(&keys, probe_api(client, watched)).await,
            ready_or_absent(&models, probe_api(client, watched)).await,
            ready_or_absent(&identity_providers, probe_api(client, watched)).await,
            config_maps.wait_until_ready().await,
            namespaces.wait_until_ready().await,
            secrets.wait_until_ready().await,
        ];
        for ready in ready {
            if let Err(e) = ready {
                tracing::error!(error = %e, "a watch never became ready");
                return;
            }
        }
        let recorder = Recorder::new(
            self.client.clone(),
            Reporter {
                controller: "switchboard-operator".into(),
                instance: Some(self.config.identity.clone()),
            },
        );
        let mut state = LoopState::default();
        let mut leader = self.leader.clone();
        let replica_changes = self.hub.clone();
        loop {
            let started = Instant::now();
            let stores = Stores {
                servers: &servers,
                virtual_servers: &virtual_servers,
                keys: &keys,
                models: &models,
                identity_providers: &identity_providers,
                secrets: &secrets,
                config_maps: &config_maps,
                namespaces: &namespaces,
                gateway_pods: &gateway_pods,
                deployments: &deployments,
                server_pods: &server_pods,
            };
            let pass = tracing::info_span!(
                target: switchboard_telemetry::SPAN_TARGET,
                "reconcile",
                otel.name = "reconcile",
                switchboard.leader = *self.leader.borrow(),
                error.type = tracing::field::Empty,
            );
            use tracing::Instrument as _;
            let result = self
                .reconcile(stores, &recorder, &mut state)
                .instrument(pass.clone())
                .await;
            let failed = result.as_ref().err().map(Error::metric_label);
            if let Some(label) = failed {
                pass.record("error.type", label);
            }
            drop(pass);
            self.metrics.reconciled(started.elapsed(), failed);
            if result.is_ok() {
                self.warm
                    .send_if_modified(|warm| !std::mem::replace(warm, true));
            }
            if let Err(e) = result {
                tracing::warn!(error = %e, "reconcile failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            tokio::select! {
                _ = self.dirty.notified() => {}
                _ = replica_changes.changed.notified() => {}
                _ = leader.changed() => {}
                // Status also depends on time (replicas expiring): look again now and then.
                _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
            // Coalesce a burst of events into one render.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// One pass: gather the world from the caches, render it, publish the snapshot when it
    /// changed, then (the lease holder only) plan and write every resource's status.
    async fn reconcile(
        &self,
        stores: Stores<'_>,
        recorder: &Recorder,
        state: &mut LoopState,
    ) -> Result<(), Error> {
        let is_leader = *self.leader.borrow();
        let world = gather(stores);
        if is_leader && ensure_key_secrets(&self.client, &world.keys, &world.secret_data).await > 0
        {
            return Ok(()); // the Secret watch brings us back with the new keys
        }
        if is_leader && !state.was_leader {
            // A new holder continues the generation sequence gateways already saw.
            state.generation = state.generation.max(self.stored_generation(&world.secrets));
            state.published_hash = None;
            // Generations numbered while standing by meant nothing to any replica.
            state.included.clear();
            state.included_models.clear();
            state.included_virtual.clear();
        }
        state.was_leader = is_leader;
        let session_key = self.session_key(&world.secrets, is_leader, &mut state.new_session_key);
        let mut rendered = self.render(&world, session_key.clone());
        let snapshot = std::mem::take(&mut rendered.snapshot);
        // (status reads the virtual servers back: small, unlike servers with their documents)
        rendered.snapshot.virtual_servers = snapshot.virtual_servers.clone();
        self.publish(snapshot, session_key.as_deref(), is_leader, state)
            .await?;
        let replicas = gateways::expected(self.hub.replicas(), &world.gateway_pods);
        self.metrics.replicas(
            replicas.iter().filter(|(_, r)| r.connected).count(),
            replicas.len(),
        );
        if !is_leader {
            return Ok(());
        }
        let live: std::collections::HashSet<crate::retries::ObjectKey> = world
            .servers
            .iter()
            .map(|s| ("McpServer", object_ref(s)))
            .chain(
                world
                    .virtual_servers
                    .iter()
                    .map(|v| ("McpVirtualServer", object_ref(v))),
            )
            .chain(world.models.iter().map(|m| ("ModelRoute", object_ref(m))))
            .chain(world.keys.iter().map(|k| ("McpKey", object_ref(k))))
            .chain(
                world
                    .identity_providers
                    .iter()
                    .map(|p| ("IdentityProvider", object_ref(p))),
            )
            .map(|(kind, (namespace, name))| (kind, namespace, name))
            .collect();
        state.retries.retain(|k| live.contains(k));
        crate::workload_apply::apply(
            &self.client,
            &self.config.workload,
            &world.servers,
            &world.deployments,
            &world.secret_data,
            &mut state.applied,
        )
        .await;
        let planned = plan_statuses(&world, &rendered, state, &replicas, &self.probes);
        for status in planned {
            self.write_planned(state, recorder, status).await;
        }
        Ok(())
    }

    /// The snapshot of a world (pure but for reading the issuer keys and settings).
    fn render(&self, world: &World, session_key: Option<String>) -> Rendered {
        let mut settings = self.config.settings.clone();
        settings.service_account_tokens = self.issuer.borrow().clone();
        settings.session_key = session_key.map(|value| SecretSource::Value { value });
        let mut rendered = render(RenderInput {
            servers: &world.servers,
            virtual_servers: &world.virtual_servers,
            keys: &world.keys,
            models: &world.models,
            identity_providers: &world.identity_providers,
            secrets: &world.secret_data,
            config_maps: &world.config_map_data,
            settings,
            upstreams: &self.config.upstreams,
            namespace_policies: &world.namespace_policies,
            reservations: &self.config.reservations,
        });
        if let Some(selector) = &self.config.secret_selector {
            rendered.note_secret_selector(selector);
        }
        rendered
    }

    /// Publishes a snapshot whose content changed under the next generation (to the hub, the
    /// probes, and on the lease holder the snapshot Secret), and notes which generation first
    /// carried each server's and model's current spec.
    async fn publish(
        &self,
        mut snapshot: Snapshot,
        session_key: Option<&str>,
        is_leader: bool,
        state: &mut LoopState,
    ) -> Result<(), Error> {
        let content_hash = hash(&serde_json::to_vec(&snapshot).unwrap_or_default());
        if state.published_hash != Some(content_hash) {
            state.generation += 1;
            // The snapshot push: a child of the reconcile pass that rendered it.
            let push = tracing::info_span!(
                target: switchboard_telemetry::SPAN_TARGET,
                "snapshot push",
                otel.name = "snapshot push",
                // (as i64: tracing-opentelemetry records a u64 as its text, an i64 as an integer)
                switchboard.generation = state.generation as i64,
                switchboard.stored = is_leader,
            );
            let entered = push.enter();
            snapshot.generation = state.generation;
            let frame = serde_json::to_vec(&snapshot).unwrap_or_default();
            self.hub.publish(Published {
                frame: frame.clone().into(),
            });
            self.snapshots.send_replace(Arc::new(snapshot.clone()));
            self.metrics.snapshot_published(state.generation);
            tracing::info!(
                generation = state.generation,
                servers = snapshot.servers.len(),
                keys = snapshot.keys.len(),
                models = snapshot.models.len(),
                "snapshot published"
            );
            drop(entered);
            if is_leader {
                use tracing::Instrument as _;
                self.store_snapshot(&frame, session_key)
                    .instrument(push)
                    .await
                    .map_err(|source| Error::StoreSnapshot {
                        secret: self.config.snapshot_secret.clone(),
                        source,
                    })?;
            }
            state.published_hash = Some(content_hash);
        }
        include(
            &mut state.included,
            state.generation,
            snapshot.servers.iter().map(|spec| {
                let key = (spec.namespace.clone(), spec.name.clone());
                (key, serde_json::to_vec(spec).unwrap_or_default())
            }),
        );
        include(
            &mut state.included_models,
            state.generation,
            snapshot.models.iter().map(|spec| {
                let key = (spec.namespace.clone(), spec.name.clone());
                (key, serde_json::to_vec(spec).unwrap_or_default())
            }),
        );
        include(
            &mut state.included_virtual,
            state.generation,
            snapshot.virtual_servers.iter().map(|spec| {
                let key = (spec.namespace.clone(), spec.name.clone());
                (key, serde_json::to_vec(spec).unwrap_or_default())
            }),
        );
        Ok(())
    }

    /// Writes one planned status (see [`Self::write_alone`]).
    async fn write_planned(
        &self,
        state: &mut LoopState,
        recorder: &Recorder,
        status: PlannedStatus<'_>,
    ) {
        let (kind, object) = status.object();
        let client = &self.client;
        let written = async move {
            match status {
                PlannedStatus::Server {
                    object,
                    desired,
                    fields,
                } => {
                    let status = object.status.as_ref();
                    status_write::write(client, recorder, object, status, &desired, fields).await
                }
                PlannedStatus::Model {
                    object,
                    desired,
                    fields,
                } => {
                    let status = object.status.as_ref();
                    status_write::write(client, recorder, object, status, &desired, fields).await
                }
                PlannedStatus::VirtualServer {
                    object,
                    desired,
                    fields,
                } => {
                    let status = object.status.as_ref();
                    status_write::write(client, recorder, object, status, &desired, fields).await
                }
                PlannedStatus::Key {
                    object,
                    outcome,
                    desired,
                } => status_write::write_key(client, recorder, object, outcome, &desired).await,
                PlannedStatus::IdentityProvider {
                    object,
                    desired,
                    fields,
                } => {
                    let status = object.status.as_ref();
                    status_write::write(client, recorder, object, status, &desired, fields).await
                }
            }
        };
        self.write_alone(state, kind, &object, written).await;
    }

    /// Runs one object's status write unless that object is backing off; a failure is logged,
    /// counted and retried on the object's own backoff, and never stops the other writes.
    async fn write_alone(
        &self,
        state: &mut LoopState,
        kind: &'static str,
        object: &ObjectRef,
        write: impl std::future::Future<Output = Result<bool, kube::Error>>,
    ) {
        let key = (kind, object.0.clone(), object.1.clone());
        if !state.retries.due(&key, tokio::time::Instant::now()) {
            return;
        }
        match write.await {
            Ok(_) => state.retries.succeeded(&key),
            Err(e) => {
                let retry_in = state.retries.failed(key, tokio::time::Instant::now());
                self.metrics.status_write_failed(kind);
                tracing::warn!(
                    kind,
                    namespace = %object.0,
                    name = %object.1,
                    error = %e,
                    ?retry_in,
                    "status write failed; the other objects' status is written regardless"
                );
            }
        }
    }

    fn stored_generation(&self, secrets: &[Arc<Secret>]) -> u64 {
        self.own_secret(secrets)
            .and_then(|s| s.data.as_ref()?.get(SNAPSHOT_FIELD).cloned())
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b.0).ok())
            .and_then(|v| v.get("generation")?.as_u64())
            .unwrap_or(0)
    }

    fn own_secret<'a>(&self, secrets: &'a [Arc<Secret>]) -> Option<&'a Arc<Secret>> {
        secrets.iter().find(|s| {
            s.namespace().as_deref() == Some(self.config.namespace.as_str())
                && s.name_any() == self.config.snapshot_secret
        })
    }

    /// The session-sealing key every replica shares: kept in the snapshot Secret; the first
    /// lease holder makes one (written with the first snapshot it stores).
    fn session_key(
        &self,
        secrets: &[Arc<Secret>],
        is_leader: bool,
        made: &mut Option<String>,
    ) -> Option<String> {
        let stored = self
            .own_secret(secrets)
            .and_then(|s| s.data.as_ref()?.get(SESSION_KEY_FIELD).cloned())
            .and_then(|b| String::from_utf8(b.0).ok());
        if stored.is_some() || !is_leader {
            return stored;
        }
        Some(made.get_or_insert_with(generate_key).clone())
    }

    /// Keeps the current snapshot (and the session key) in a Secret, so replicas can start
    /// from it while the operator is away. One apply carries both fields: server-side apply
    /// would drop a field this manager stopped sending.
    async fn store_snapshot(
        &self,
        frame: &[u8],
        session_key: Option<&str>,
    ) -> Result<(), kube::Error> {
        let mut data = BTreeMap::from([(SNAPSHOT_FIELD.to_string(), ByteString(frame.to_vec()))]);
        if let Some(key) = session_key {
            data.insert(
                SESSION_KEY_FIELD.to_string(),
                ByteString(key.as_bytes().to_vec()),
            );
        }
        self.apply_secret(data).await
    }

    async fn apply_secret(&self, data: BTreeMap<String, ByteString>) -> Result<(), kube::Error> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let patch = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": { "name": self.config.snapshot_secret, "labels": { MANAGED_BY.0: MANAGED_BY.1 } },
            "type": "Opaque",
            "data": data,
        });
        api.patch(
            &self.config.snapshot_secret,
            &PatchParams::apply(status_write::FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map(|_| ())
    }
}

const SNAPSHOT_FIELD: &str = "snapshot.yaml";
const SESSION_KEY_FIELD: &str = "session-key";

/// The watched resources.
#[derive(Clone, Copy)]
struct Stores<'a> {
    servers: &'a Cache<McpServer>,
    virtual_servers: &'a Cache<McpVirtualServer>,
    keys: &'a Cache<McpKey>,
    models: &'a Cache<ModelRoute>,
    identity_providers: &'a Cache<IdentityProvider>,
    secrets: &'a Cache<Secret>,
    config_maps: &'a Cache<ConfigMap>,
    namespaces: &'a Cache<Namespace>,
    gateway_pods: &'a Cache<Pod>,
    deployments: &'a Cache<Deployment>,
    server_pods: &'a Cache<Pod>,
}

#[derive(Default)]
struct LoopState {
    generation: u64,
    published_hash: Option<[u8; 32]>,
    included: Included,
    included_models: Included,
    included_virtual: Included,
    retries: crate::retries::StatusRetries,
    was_leader: bool,
    new_session_key: Option<String>,
    applied: crate::workload_apply::Applied,
}

/// Everything one pass reads, copied out of the caches once.
struct World {
    servers: Vec<McpServer>,
    virtual_servers: Vec<McpVirtualServer>,
    keys: Vec<McpKey>,
    models: Vec<ModelRoute>,
    identity_providers: Vec<IdentityProvider>,
    /// Every watched Secret (the operator's own among them), each once.
    secrets: Vec<Arc<Secret>>,
    secret_data: SecretData,
    config_map_data: SecretData,
    namespace_policies: NamespacePolicies,
    gateway_pods: Vec<Arc<Pod>>,
    /// `spec.run`: the Deployments and pods the operator made.
    deployments: Vec<Arc<Deployment>>,
    server_pods: Vec<Arc<Pod>>,
}

impl World {
    /// What the pods of a server the operator runs say.
    fn health(&self, server: &McpServer) -> crate::workload::Health {
        let namespace = server.namespace();
        let name = server.name_any();
        let mine = |labels: &BTreeMap<String, String>, ns: Option<String>| {
            ns == namespace && labels.get(crate::workload::SERVER_LABEL) == Some(&name)
        };
        let deployment = self
            .deployments
            .iter()
            .find(|d| mine(d.labels(), d.namespace()));
        let pods: Vec<Arc<Pod>> = self
            .server_pods
            .iter()
            .filter(|p| mine(p.labels(), p.namespace()))
            .cloned()
            .collect();
        crate::workload::health(deployment.map(|d| d.as_ref()), &pods)
    }
}

fn copied<K: Clone + kube::Resource<DynamicType = ()> + 'static>(cache: &Cache<K>) -> Vec<K> {
    cache.state().iter().map(|o| (**o).clone()).collect()
}

fn gather(stores: Stores<'_>) -> World {
    let servers = copied(stores.servers);
    let virtual_servers = copied(stores.virtual_servers);
    let keys = copied(stores.keys);
    let models = copied(stores.models);
    let identity_providers = copied(stores.identity_providers);
    // (a Secret both watches see is kept once)
    let secrets: Vec<Arc<Secret>> = stores
        .secrets
        .state()
        .into_iter()
        .map(|s| (object_ref(s.as_ref()), s))
        .collect::<BTreeMap<_, _>>()
        .into_values()
        .collect();
    let secret_data: SecretData = secrets
        .iter()
        .map(|s| {
            let data = s.data.clone().unwrap_or_default();
            let data = data.into_iter().map(|(k, v)| (k, v.0)).collect();
            (object_ref(s.as_ref()), data)
        })
        .collect();
    let config_map_data: SecretData = stores
        .config_maps
        .state()
        .iter()
        .map(|c| {
            let text = c.data.clone().unwrap_or_default().into_iter();
            let binary = c.binary_data.clone().unwrap_or_default().into_iter();
            let data = text
                .map(|(k, v)| (k, v.into_bytes()))
                .chain(binary.map(|(k, v)| (k, v.0)))
                .collect();
            (object_ref(c.as_ref()), data)
        })
        .collect();
    let namespace_policies: NamespacePolicies = stores
        .namespaces
        .state()
        .iter()
        .filter_map(|ns| {
            let policy = namespace_policy(ns.metadata.annotations.as_ref()?).transpose()?;
            Some((ns.name_any(), policy))
        })
        .collect();
    World {
        servers,
        virtual_servers,
        keys,
        models,
        identity_providers,
        secrets,
        secret_data,
        config_map_data,
        namespace_policies,
        gateway_pods: stores.gateway_pods.state(),
        deployments: stores.deployments.state(),
        server_pods: stores.server_pods.state(),
    }
}

/// The status one resource should have, before it is written.
enum PlannedStatus<'a> {
    Server {
        object: &'a McpServer,
        desired: Vec<status::Desired>,
        fields: BTreeMap<&'static str, serde_json::Value>,
    },
    Model {
        object: &'a ModelRoute,
        desired: [status::Desired; 3],
        fields: BTreeMap<&'static str, serde_json::Value>,
    },
    VirtualServer {
        object: &'a McpVirtualServer,
        desired: [status::Desired; 3],
        fields: BTreeMap<&'static str, serde_json::Value>,
    },
    Key {
        object: &'a McpKey,
        outcome: &'a KeyOutcome,
        desired: [status::Desired; 2],
    },
    IdentityProvider {
        object: &'a IdentityProvider,
        desired: [status::Desired; 3],
        fields: BTreeMap<&'static str, serde_json::Value>,
    },
}

impl PlannedStatus<'_> {
    /// The resource's kind and reference (what its status-write backoff is kept under).
    fn object(&self) -> (&'static str, ObjectRef) {
        match self {
            PlannedStatus::Server { object, .. } => ("McpServer", object_ref(*object)),
            PlannedStatus::Model { object, .. } => ("ModelRoute", object_ref(*object)),
            PlannedStatus::VirtualServer { object, .. } => {
                ("McpVirtualServer", object_ref(*object))
            }
            PlannedStatus::Key { object, .. } => ("McpKey", object_ref(*object)),
            PlannedStatus::IdentityProvider { object, .. } => {
                ("IdentityProvider", object_ref(*object))
            }
        }
    }
}

/// Every resource's status from the world, its rendering, the replicas status expects and the
/// latest probes: no I/O, so a world can be checked without an API server.
fn plan_statuses<'a>(
    world: &'a World,
    rendered: &'a Rendered,
    state: &LoopState,
    replicas: &[(String, crate::delivery::Replica)],
    probes: &Probes,
) -> Vec<PlannedStatus<'a>> {
    let rollout = |needed: u64| Rollout {
        // A replica that dropped its stream may be gone: it counts as expected, not serving.
        serving: replicas
            .iter()
            .filter(|(_, r)| r.connected && r.serving >= needed)
            .count(),
        known: replicas.len(),
        needed,
    };
    let mut planned = Vec::new();
    for server in &world.servers {
        let key = object_ref(server);
        let Some(verdict) = rendered.servers.get(&key) else {
            continue;
        };
        let id = format!("{}/{}", key.0, key.1);
        let needed = state.included.get(&key).map(|(_, g)| *g);
        let probe = probes.get(&id);
        let probe = probe.as_ref().filter(|_| verdict.accepted);
        let health = server.spec.run.as_ref().map(|_| {
            let mut health = world.health(server);
            if let Some(refused) = state.applied.refused.get(&key) {
                health.failure = Some(crate::workload::Failure {
                    reason: "WorkloadRefused".into(),
                    message: format!("the API server refused the server's Deployment: {refused}"),
                });
            }
            health
        });
        let mut desired = vec![
            status::accepted(verdict),
            status::programmed(verdict, needed.map(rollout)),
            match &health {
                Some(h) => status::ready_running(verdict, probe, h),
                None => status::ready(verdict, probe),
            },
        ];
        if let Some(h) = &health {
            desired.push(status::running(h));
        }
        desired.push(status::tools_changed(verdict, probe));
        let prefix = server
            .spec
            .tool_prefix
            .clone()
            .unwrap_or_else(|| server.name_any());
        let mut fields = BTreeMap::from([("prefix", serde_json::json!(prefix))]);
        if let Some(h) = &health {
            fields.insert("replicas", serde_json::json!(h.replicas));
            fields.insert("readyReplicas", serde_json::json!(h.ready));
        }
        if let Some(status::Probe::Listed {
            tools, at, review, ..
        }) = probe
        {
            // Only when there is something to say: status stores no empty list (it is left
            // out), and a field compared against one it never stores would rewrite the status
            // on every pass. Left out, server-side apply removes what this manager wrote before.
            if let Some(review) = review.as_deref().filter(|r| !r.is_empty()) {
                fields.insert("toolReview", serde_json::json!(review));
            }
            fields.insert("toolCount", serde_json::json!(tools.len()));
            fields.insert(
                "lastListed",
                serde_json::json!(last_listed(server, tools.len(), *at)),
            );
        }
        planned.push(PlannedStatus::Server {
            object: server,
            desired,
            fields,
        });
    }
    for vs in &world.virtual_servers {
        let key = object_ref(vs);
        let Some(verdict) = rendered.virtual_servers.get(&key) else {
            continue;
        };
        let needed = state.included_virtual.get(&key).map(|(_, g)| *g);
        let spec =
            rendered.snapshot.virtual_servers.iter().find(|v| {
                (v.namespace.as_str(), v.name.as_str()) == (key.0.as_str(), key.1.as_str())
            });
        let presented = spec.map(|spec| status::presented(spec, |id| probes.get(id)));
        let ready = status::virtual_ready(verdict, presented.as_ref());
        let path = vs.spec.path.clone().unwrap_or_else(|| vs.name_any());
        let mut fields = BTreeMap::from([("path", serde_json::json!(format!("/mcp/{path}")))]);
        if let Some(p) = presented.as_ref().filter(|p| p.complete()) {
            fields.insert("toolCount", serde_json::json!(p.tools));
        }
        planned.push(PlannedStatus::VirtualServer {
            object: vs,
            desired: [
                status::accepted(verdict),
                status::programmed(verdict, needed.map(rollout)),
                ready,
            ],
            fields,
        });
    }
    for route in &world.models {
        let key = object_ref(route);
        let Some(verdict) = rendered.models.get(&key) else {
            continue;
        };
        let id = format!("{}/{}", key.0, key.1);
        let needed = state.included_models.get(&key).map(|(_, g)| *g);
        let probe = probes.model(&id);
        let desired = [
            status::accepted(verdict),
            status::programmed(verdict, needed.map(rollout)),
            status::model_ready(verdict, probe.as_ref().filter(|_| verdict.accepted)),
        ];
        let fields = BTreeMap::from([("modelNames", serde_json::json!(model_names(route)))]);
        planned.push(PlannedStatus::Model {
            object: route,
            desired,
            fields,
        });
    }
    for key in &world.keys {
        let Some(outcome) = rendered.keys.get(&object_ref(key)) else {
            continue;
        };
        let expired_at = key.spec.expires_at.as_deref().filter(|t| {
            switchboard_snapshot::parse_instant(t)
                .is_ok_and(|at| at <= std::time::SystemTime::now())
        });
        let ready = status::key_ready(&outcome.verdict, expired_at, rollout(state.generation));
        planned.push(PlannedStatus::Key {
            object: key,
            outcome,
            desired: [status::accepted(&outcome.verdict), ready],
        });
    }
    for provider in &world.identity_providers {
        let key = object_ref(provider);
        let Some(verdict) = rendered.identity_providers.get(&key) else {
            continue;
        };
        let probe = probes.identity_keys(&format!("{}/{}", key.0, key.1));
        let keys = status::keys_loaded(verdict, probe.as_ref().filter(|_| verdict.accepted));
        // Served once every replica has a generation at least as new as this pass's.
        let served = verdict.accepted.then(|| rollout(state.generation));
        let ready = status::identity_provider_ready(verdict, &keys, served);
        let mut fields = BTreeMap::new();
        if let Some(status::KeysProbe::Loaded { keys }) = &probe {
            fields.insert("signingKeys", serde_json::json!(keys));
        }
        planned.push(PlannedStatus::IdentityProvider {
            object: provider,
            desired: [status::accepted(verdict), keys, ready],
            fields,
        });
    }
    planned
}

/// `lastListed` moves on only when the count changed or the recorded time is a minute old:
/// a probe every few seconds must not turn into a status write every few seconds.
fn last_listed(server: &McpServer, tools: usize, at: k8s_openapi::jiff::Timestamp) -> String {
    let status = server.status.as_ref();
    let recorded = status.and_then(|s| s.last_listed.clone());
    let same_count = status.and_then(|s| s.tool_count) == Some(tools as i64);
    let fresh = recorded
        .as_deref()
        .and_then(|r| r.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .is_some_and(|r| at.as_second() - r.as_second() < 60);
    match recorded {
        Some(r) if same_count && fresh => r,
        _ => at.to_string(),
    }
}

fn hash(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use switchboard_crds::{McpKeySpec, McpServerSpec};

    use super::*;
    use crate::delivery::Replica;
    use crate::upstream_policy::UpstreamPolicy;

    fn world() -> World {
        let mut server = McpServer::new(
            "tools",
            serde_json::from_value::<McpServerSpec>(serde_json::json!({
                "url": "http://tools.apps.svc/mcp", "accessGroups": ["apps"]
            }))
            .expect("valid server"),
        );
        server.metadata.namespace = Some("apps".into());
        let mut key = McpKey::new(
            "apps",
            serde_json::from_value::<McpKeySpec>(serde_json::json!({
                "secretName": "apps-key", "accessGroups": ["apps"]
            }))
            .expect("valid key"),
        );
        key.metadata.namespace = Some("apps".into());
        let secret_data = SecretData::from([(
            ("apps".to_string(), "apps-key".to_string()),
            BTreeMap::from([(crate::render::KEY_FIELD.to_string(), b"sk-apps".to_vec())]),
        )]);
        let mut pod = Pod::default();
        pod.metadata.name = Some("gw-b".into());
        pod.status = Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        World {
            servers: vec![server],
            virtual_servers: Vec::new(),
            keys: vec![key],
            models: Vec::new(),
            identity_providers: Vec::new(),
            secrets: Vec::new(),
            secret_data,
            config_map_data: SecretData::new(),
            namespace_policies: NamespacePolicies::new(),
            gateway_pods: vec![Arc::new(pod)],
            deployments: Vec::new(),
            server_pods: Vec::new(),
        }
    }

    fn rendered(world: &World) -> Rendered {
        render(RenderInput {
            servers: &world.servers,
            virtual_servers: &world.virtual_servers,
            keys: &world.keys,
            models: &world.models,
            identity_providers: &world.identity_providers,
            secrets: &world.secret_data,
            config_maps: &world.config_map_data,
            settings: GatewaySettings::default(),
            upstreams: &UpstreamPolicy::new(&Default::default(), true).expect("default policy"),
            namespace_policies: &world.namespace_policies,
            reservations: &Default::default(),
        })
    }

    fn replica(connected: bool, serving: u64) -> Replica {
        Replica {
            serving,
            connected,
            last_seen: Instant::now(),
            rejected: None,
        }
    }

    /// (type, status, message) of every planned condition, by resource kind.
    fn conditions(planned: &[PlannedStatus<'_>]) -> Vec<(&'static str, &'static str, String)> {
        planned
            .iter()
            .flat_map(|p| {
                let (kind, desired): (&'static str, &[status::Desired]) = match p {
                    PlannedStatus::Server { desired, .. } => ("McpServer", desired),
                    PlannedStatus::Model { desired, .. } => ("ModelRoute", desired),
                    PlannedStatus::VirtualServer { desired, .. } => ("McpVirtualServer", desired),
                    PlannedStatus::Key { desired, .. } => ("McpKey", desired),
                    PlannedStatus::IdentityProvider { desired, .. } => {
                        ("IdentityProvider", desired)
                    }
                };
                desired
                    .iter()
                    .filter(|d| d.type_ != "Accepted")
                    .map(move |d| (kind, d.status, format!("{} {}", d.type_, d.message)))
            })
            .filter(|(kind, _, text)| *kind == "McpKey" || text.starts_with("Programmed"))
            .collect()
    }

    /// The pass a new lease holder makes: one gateway follows it and serves the generation that
    /// carries the key and the server; the other runs (its pod is Ready) but follows no one
    /// yet. Neither the key nor the server may be reported as served by every replica.
    #[test]
    fn a_gateway_pod_that_follows_no_one_keeps_status_pending() {
        let world = world();
        let rendered = rendered(&world);
        assert!(
            rendered.keys.values().all(|k| k.verdict.accepted),
            "{rendered:?}"
        );
        let mut state = LoopState {
            generation: 3,
            ..LoopState::default()
        };
        state
            .included
            .insert(("apps".into(), "tools".into()), ([0; 32], 3));
        let probes = Probes::default();

        let known = vec![("gw-a".to_string(), replica(true, 3))];
        let replicas = gateways::expected(known.clone(), &world.gateway_pods);
        let planned = plan_statuses(&world, &rendered, &state, &replicas, &probes);
        assert_eq!(
            conditions(&planned),
            [
                (
                    "McpServer",
                    "False",
                    "Programmed 1/2 gateway replicas serve generation 3".to_string()
                ),
                (
                    "McpKey",
                    "False",
                    "Ready 1/2 gateway replicas accept this key".to_string()
                ),
            ]
        );

        // The control: the hub's view alone would have said every replica serves.
        let hub_only = plan_statuses(&world, &rendered, &state, &known, &probes);
        assert!(conditions(&hub_only).iter().all(|(_, s, _)| *s == "True"));

        // Once the other gateway follows and acknowledges, both are True.
        let both = vec![
            ("gw-a".to_string(), replica(true, 3)),
            ("gw-b".to_string(), replica(true, 3)),
        ];
        let replicas = gateways::expected(both, &world.gateway_pods);
        let planned = plan_statuses(&world, &rendered, &state, &replicas, &probes);
        assert!(
            conditions(&planned)
                .iter()
                .all(|(_, s, m)| *s == "True" && m.contains("2/2")),
            "{:?}",
            conditions(&planned)
        );
    }
}
