//! Prometheus metrics. Labels are bounded and never carry a payload or a secret: endpoint and
//! method come from fixed lists, servers by id.

use std::time::Duration;

use std::fmt::Write;
use std::sync::{Arc, OnceLock};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    endpoint: &'static str,
    method: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server: ServerName,
}

/// A server id as a label value: shared, so recording a call allocates nothing.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct ServerName(pub Arc<str>);

impl EncodeLabelValue for ServerName {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(&self.0)
    }
}

/// One server's series that every call to it counts into (`upstream_requests` of an answered
/// call, `upstream_request_duration_seconds`), each handle made on its first use and kept with
/// the server in the routing table (built again with each snapshot, and so these). A call then
/// counts without hashing the server's label sets into the families' maps: prometheus-client's
/// `Family` is a SipHash map behind a lock, about 0.7k instructions a lookup. A handle shares its
/// value with the registry's series (it is a clone of the series' `Arc`), so what is exported is
/// the same; that holds while no family drops a series (none does: one that did would leave its
/// handles counting into a detached one). A table serves one gateway, whose [`Metrics`] made them.
#[derive(Debug)]
pub struct UpstreamSeries {
    server: ServerName,
    // Each made on its first use, so that what is exported is what happened (no series at 0
    // for an outcome the server never had).
    ok: OnceLock<Counter>,
    rpc_error: OnceLock<Counter>,
    stream: OnceLock<Counter>,
    latency: OnceLock<Histogram>,
}

impl UpstreamSeries {
    pub fn new(server: ServerName) -> UpstreamSeries {
        UpstreamSeries {
            server,
            ok: OnceLock::new(),
            rpc_error: OnceLock::new(),
            stream: OnceLock::new(),
            latency: OnceLock::new(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    server: ServerName,
    outcome: &'static str,
}

/// A request a limit refused: `scope` is `key` or `server`, `name` the key's
/// `<namespace>/<name>` or the server's id, `limit` `concurrency` or `rate`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitedLabels {
    scope: &'static str,
    name: String,
    limit: &'static str,
}

/// An operation of the shared store: `backend` `memory` or `redis`, `operation` as the store
/// names it (`get`, `put`, `take`, `rate`...), `outcome` `ok`, `unavailable`, `sealed` or `file`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    backend: &'static str,
    operation: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    backend: &'static str,
}

/// People's own accounts at a `userOAuth` server: `event` is `connected`, `refreshed`,
/// `disconnected`, `not_connected` (a call asked to connect) or `store_unavailable`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AccountLabels {
    server: ServerName,
    event: &'static str,
}

/// A server's tools as its last listing's review left them (`tools.pinning` `warn` or
/// `hold`): `state` is `held` (not served: not approved under `hold`), `changed` or `new`
/// (against the approvals), or a finding's kind (`hidden-characters`, `shadowing`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolReviewLabels {
    server: ServerName,
    state: &'static str,
}

/// One server's listing of one kind (`tools`, `prompts`, `resources`, `resourceTemplates`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListingLabels {
    server: ServerName,
    kind: &'static str,
}

/// A person's token checked (`people`): `issuer` is one of the snapshot's identity providers'
/// (only a token naming one is checked as a person's), `outcome` `ok`, `no_grant` or a refusal.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SignInLabels {
    issuer: String,
    outcome: &'static str,
}

/// A token request at the brokered authorization server: `grant` is `authorization_code`,
/// `refresh_token`, `identity_assertion` (the JWT bearer grant) or `other`; `outcome` `ok` or
/// the OAuth error answered (`invalid_grant`, `invalid_client`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BrokeredTokenLabels {
    grant: &'static str,
    outcome: &'static str,
}

/// A request the replica shed (`admission`): `reason` is `in_flight` or `queue_delay`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShedLabels {
    reason: &'static str,
}

/// A cache of the upstream plane: `listings_shared`, `listings_callers`, `tokens`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    cache: &'static str,
}

type HistogramFamily = Family<ServerLabels, Histogram, fn() -> Histogram>;

/// A request by tenant (the caller's namespace) and server (`-`: none, e.g. a merged listing).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: ServerName,
    server: ServerName,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointServerLabels {
    endpoint: &'static str,
    server: ServerName,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantTokenLabels {
    tenant: ServerName,
    model: ServerName,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FoldedLabels {
    label: &'static str,
}

/// A family the request path counts into on every request, reached through handles its
/// label sets find in a foldhash map: the family's own map hashes a label set with SipHash
/// behind its lock (about 0.5k instructions a lookup, three per request), this one with foldhash
/// (measured: 0.3-1.1k a request saved, the label sets still built; BENCHMARKS.md). A handle shares its value with the family's series (see [`UpstreamSeries`]),
/// and the map holds the label sets the family has, no others: it is bounded as the family is.
struct Handles<S, M, C = fn() -> M> {
    family: Family<S, M, C>,
    handles: std::sync::RwLock<foldhash::HashMap<S, M>>,
}

impl<S, M, C> Handles<S, M, C>
where
    S: Clone + std::hash::Hash + Eq,
    M: Clone,
    C: MetricConstructor<M>,
{
    fn new(family: Family<S, M, C>) -> Self {
        Handles {
            family,
            handles: std::sync::RwLock::default(),
        }
    }

    /// Applies `f` to the series of `labels` (made in the family on first use).
    fn with(&self, labels: &S, f: impl FnOnce(&M)) {
        if let Ok(handles) = self.handles.read()
            && let Some(series) = handles.get(labels)
        {
            return f(series);
        }
        let series = self.family.get_or_create(labels).clone();
        f(&series);
        if let Ok(mut handles) = self.handles.write() {
            handles.entry(labels.clone()).or_insert(series);
        }
    }
}

/// Distinct values a usage label (tenant, server, model) takes before further ones are folded
/// into `other`: the values come from the snapshot, so this only bounds a pathological one.
const USAGE_LABEL_VALUES: usize = 256;

/// The values a usage label has taken: bounded by [`USAGE_LABEL_VALUES`].
#[derive(Default)]
struct LabelValues(std::sync::RwLock<foldhash::HashSet<Arc<str>>>);

impl LabelValues {
    /// `value` as a label value, or `other` once the bound is reached (`true`: folded).
    fn admit(&self, value: &str) -> (ServerName, bool) {
        if let Ok(seen) = self.0.read()
            && let Some(v) = seen.get(value)
        {
            return (ServerName(v.clone()), false);
        }
        let Ok(mut seen) = self.0.write() else {
            return (ServerName(Arc::from("other")), true);
        };
        if let Some(v) = seen.get(value) {
            return (ServerName(v.clone()), false);
        }
        if seen.len() >= USAGE_LABEL_VALUES {
            return (ServerName(Arc::from("other")), true);
        }
        let v: Arc<str> = Arc::from(value);
        seen.insert(v.clone());
        (ServerName(v), false)
    }
}

/// Per-tenant usage: requests, durations and model tokens, labels bounded.
struct Usage {
    requests: Family<TenantLabels, Counter>,
    duration: Family<EndpointServerLabels, Histogram>,
    /// The two series above a request counts into, by its label values as they come.
    series: UsageSeries,
    tokens: Family<TenantTokenLabels, Counter>,
    folded: Family<FoldedLabels, Counter>,
    tenants: LabelValues,
    servers: LabelValues,
    models: LabelValues,
}

/// The two series (duration, requests) a finished request counts into, found in one lookup by
/// its label values as they come: found through the label sets, they cost each request two
/// bounded-value lookups, two label sets built and hashed and two more maps (about 800
/// instructions). Holds only values that were not folded into `other`, so it is bounded as the
/// families are.
#[derive(Default)]
struct UsageSeries(std::sync::RwLock<foldhash::HashMap<u64, Vec<UsageEntry>>>);

struct UsageEntry {
    endpoint: &'static str,
    tenant: Arc<str>,
    server: Arc<str>,
    outcome: &'static str,
    duration: Histogram,
    requests: Counter,
}

impl UsageEntry {
    fn is(&self, figures: &UsageFigures<'_>) -> bool {
        self.endpoint == figures.endpoint
            && self.outcome == figures.outcome
            && *self.tenant == *figures.tenant
            && *self.server == *figures.server
    }
}

impl UsageSeries {
    fn key(map: &foldhash::HashMap<u64, Vec<UsageEntry>>, figures: &UsageFigures<'_>) -> u64 {
        use std::hash::BuildHasher as _;
        map.hasher().hash_one((
            figures.endpoint,
            figures.tenant,
            figures.server,
            figures.outcome,
        ))
    }

    /// Counts the request into its series when they are known here (`false`: not yet).
    fn count(&self, figures: &UsageFigures<'_>, seconds: f64) -> bool {
        let Ok(map) = self.0.read() else {
            return false;
        };
        let found = map
            .get(&Self::key(&map, figures))
            .and_then(|entries| entries.iter().find(|e| e.is(figures)));
        match found {
            Some(entry) => {
                entry.duration.observe(seconds);
                entry.requests.inc();
                true
            }
            None => false,
        }
    }

    fn insert(&self, figures: &UsageFigures<'_>, entry: UsageEntry) {
        if let Ok(mut map) = self.0.write() {
            let key = Self::key(&map, figures);
            let entries = map.entry(key).or_default();
            if !entries.iter().any(|e| e.is(figures)) {
                entries.push(entry);
            }
        }
    }
}

/// What one finished client request was, for [`Metrics::usage`].
pub(crate) struct UsageFigures<'a> {
    pub endpoint: &'static str,
    /// The caller's namespace (`-`: no caller, a refusal before authentication).
    pub tenant: &'a str,
    pub server: &'a str,
    pub model: Option<&'a str>,
    pub outcome: &'static str,
    pub elapsed: Duration,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelRequestLabels {
    model: ServerName,
    endpoint: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: ServerName,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelOutcomeLabels {
    model: ServerName,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelTokenLabels {
    model: ServerName,
    kind: &'static str,
}

/// Per-model figures of the LLM endpoints: labels are model ids, fixed lists and outcomes.
struct ModelMetrics {
    requests: Family<ModelRequestLabels, Counter>,
    model_calls: Family<ModelLabels, Counter>,
    gateway_tool_calls: Family<ModelOutcomeLabels, Counter>,
    iterations: Family<ModelLabels, Histogram, fn() -> Histogram>,
    tokens: Family<ModelTokenLabels, Counter>,
}

impl Default for ModelMetrics {
    fn default() -> Self {
        ModelMetrics {
            requests: Family::default(),
            model_calls: Family::default(),
            gateway_tool_calls: Family::default(),
            // 1, 2, 4, ... 64 model calls per request (`maxIterations` is at most 64).
            iterations: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1.0, 2.0, 7))
            }),
            tokens: Family::default(),
        }
    }
}

/// What one LLM request did, for [`Metrics::llm_request`].
pub struct LlmRequestFigures {
    pub endpoint: &'static str,
    pub outcome: &'static str,
    /// Model calls of the request, which are also the iterations of its tool loop.
    pub model_calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

pub struct Metrics {
    registry: Registry,
    requests: Handles<RequestLabels, Counter>,
    upstream_requests: Family<UpstreamLabels, Counter>,
    upstream_latency: HistogramFamily,
    listing_failures: Family<ServerLabels, Counter>,
    auth_relayed: Family<ServerLabels, Counter>,
    limited: Family<LimitedLabels, Counter>,
    shed: Family<ShedLabels, Counter>,
    sign_ins: Family<SignInLabels, Counter>,
    brokered_tokens: Family<BrokeredTokenLabels, Counter>,
    /// Set when scraped, like `runtime_tasks`.
    cache_entries: Family<CacheLabels, Gauge>,
    queue_delay: Histogram,
    in_flight_cap: Gauge,
    snapshot_generation: Gauge,
    /// Set when scraped: tasks alive in the runtime serving the scrape.
    runtime_tasks: Gauge,
    snapshot_applies: Counter,
    snapshot_rejections: Counter,
    servers: Gauge,
    keys: Gauge,
    models: ModelMetrics,
    usage: Usage,
    operator_stream_connected: Gauge,
    audit_dropped: Counter,
    store_operations: Family<StoreLabels, Counter>,
    store_up: Family<BackendLabels, Gauge>,
    accounts: Family<AccountLabels, Counter>,
    tools_reviewed: Family<ToolReviewLabels, Gauge>,
    listing_items: Family<ListingLabels, Gauge>,
    listing_bytes: Family<ListingLabels, Gauge>,
}

fn latency_histogram() -> Histogram {
    // 100 µs .. ~52 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 20))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("switchboard_gateway");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Client requests by endpoint, method and outcome",
            requests.clone(),
        );
        let upstream_requests = Family::<UpstreamLabels, Counter>::default();
        registry.register(
            "upstream_requests",
            "Upstream requests by server and outcome",
            upstream_requests.clone(),
        );
        let upstream_latency: HistogramFamily = Family::new_with_constructor(latency_histogram);
        registry.register(
            "upstream_request_duration_seconds",
            "Upstream request latency by server",
            upstream_latency.clone(),
        );
        let listing_failures = Family::<ServerLabels, Counter>::default();
        registry.register(
            "listing_failures",
            "Upstream listings that failed, by server",
            listing_failures.clone(),
        );
        let auth_relayed = Family::<ServerLabels, Counter>::default();
        registry.register(
            "upstream_auth_relayed",
            "Upstream 401s relayed to callers (caller-credential servers), by server",
            auth_relayed.clone(),
        );
        let limited = Family::<LimitedLabels, Counter>::default();
        registry.register(
            "limited_requests",
            "Requests refused by a key's or a server's limits (429), by scope, name and limit",
            limited.clone(),
        );
        let cache_entries = Family::<CacheLabels, Gauge>::default();
        registry.register(
            "cache_entries",
            "Entries held by each cache of the upstream plane (listings_shared, listings_callers, \
             tokens); bounded, so flat under any number of distinct callers",
            cache_entries.clone(),
        );
        let sign_ins = Family::<SignInLabels, Counter>::default();
        registry.register(
            "sign_ins",
            "People's access tokens checked, by issuer and outcome (ok, no_grant, or why refused)",
            sign_ins.clone(),
        );
        let brokered_tokens = Family::<BrokeredTokenLabels, Counter>::default();
        registry.register(
            "brokered_tokens",
            "Token requests at the gateway's own authorization server (brokered mode), by grant \
             (authorization_code, refresh_token, identity_assertion, other) and outcome (ok, or \
             the OAuth error answered)",
            brokered_tokens.clone(),
        );
        let shed = Family::<ShedLabels, Counter>::default();
        registry.register(
            "shed_requests",
            "Requests the replica shed (503) before reading them, by reason (in_flight, queue_delay)",
            shed.clone(),
        );
        // 100 µs .. ~6.5 s
        let queue_delay = Histogram::new(exponential_buckets(0.0001, 2.0, 17));
        registry.register(
            "queue_delay_seconds",
            "How long a task handed to the runtime waited to run (the admission probe, every 10 ms \
             while --max-queue-delay is on): the queueing delay of ready work",
            queue_delay.clone(),
        );
        let in_flight_cap = Gauge::default();
        registry.register(
            "in_flight_cap",
            "The cap on requests in flight the queueing delay has set (0: none; see \
             --max-queue-delay)",
            in_flight_cap.clone(),
        );
        let snapshot_generation = Gauge::default();
        registry.register(
            "snapshot_generation",
            "Generation of the snapshot being served",
            snapshot_generation.clone(),
        );
        let runtime_tasks = Gauge::default();
        registry.register(
            "runtime_tasks",
            "Tasks alive in the gateway's runtime (connections, streams, background work); one \
             that only grows under a steady load is a leak",
            runtime_tasks.clone(),
        );
        let snapshot_applies = Counter::default();
        registry.register(
            "snapshot_applies",
            "Snapshots applied",
            snapshot_applies.clone(),
        );
        let snapshot_rejections = Counter::default();
        registry.register(
            "snapshot_rejections",
            "Snapshots rejected as invalid",
            snapshot_rejections.clone(),
        );
        let servers = Gauge::default();
        registry.register(
            "servers",
            "Servers in the snapshot being served",
            servers.clone(),
        );
        let keys = Gauge::default();
        registry.register("keys", "Keys in the snapshot being served", keys.clone());
        let models = ModelMetrics::default();
        registry.register(
            "llm_requests",
            "LLM endpoint requests by model, endpoint and outcome",
            models.requests.clone(),
        );
        registry.register(
            "llm_model_calls",
            "Calls to model providers, by model",
            models.model_calls.clone(),
        );
        registry.register(
            "llm_gateway_tool_calls",
            "Gateway tool calls run for models, by model and outcome",
            models.gateway_tool_calls.clone(),
        );
        registry.register(
            "llm_iterations",
            "Model calls per request (iterations of the gateway's tool loop), by model",
            models.iterations.clone(),
        );
        registry.register(
            "llm_tokens",
            "Tokens the providers reported, by model and kind (input, output)",
            models.tokens.clone(),
        );
        let usage = Usage {
            requests: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
            series: UsageSeries::default(),
            tokens: Family::default(),
            folded: Family::default(),
            tenants: LabelValues::default(),
            servers: LabelValues::default(),
            models: LabelValues::default(),
        };
        registry.register(
            "tenant_requests",
            "Client requests by tenant (the caller's namespace), server and outcome",
            usage.requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Client request duration (to the answer's end; a stream's when it closes), by \
             endpoint and server",
            usage.duration.clone(),
        );
        registry.register(
            "tenant_llm_tokens",
            "Model tokens the providers reported, by tenant, model and kind (input, output)",
            usage.tokens.clone(),
        );
        registry.register(
            "usage_labels_folded",
            "Requests whose tenant, server or model label was counted as `other`, past the \
             bound on distinct values, by label",
            usage.folded.clone(),
        );
        let operator_stream_connected = Gauge::default();
        registry.register(
            "operator_stream_connected",
            "1 while this replica follows the operator's snapshot stream, else 0",
            operator_stream_connected.clone(),
        );
        let audit_dropped = Counter::default();
        registry.register(
            "audit_records_dropped",
            "Audit records dropped because the audit log's writer fell behind",
            audit_dropped.clone(),
        );
        let store_operations = Family::<StoreLabels, Counter>::default();
        registry.register(
            "store_operations",
            "Operations of the shared store (gateway.store), by backend, operation and outcome",
            store_operations.clone(),
        );
        let store_up = Family::<BackendLabels, Gauge>::default();
        registry.register(
            "store_up",
            "1 while the shared store's last operation succeeded, else 0",
            store_up.clone(),
        );
        let accounts = Family::<AccountLabels, Counter>::default();
        registry.register(
            "user_accounts",
            "People's own upstream accounts (userOAuth), by server and event",
            accounts.clone(),
        );
        let tools_reviewed = Family::<ToolReviewLabels, Gauge>::default();
        registry.register(
            "tools_flagged",
            "Tools of a server, as its last listing's review found them: held, changed, new, or with a finding of a kind",
            tools_reviewed.clone(),
        );
        let listing_items = Family::<ListingLabels, Gauge>::default();
        registry.register(
            "listing_items",
            "Items in a server's last listing walked, by server and kind (tools, prompts, resources, resourceTemplates)",
            listing_items.clone(),
        );
        let listing_bytes = Family::<ListingLabels, Gauge>::default();
        registry.register(
            "listing_bytes",
            "Bytes of a server's last listing walked as the gateway holds it (its items' JSON), by server and kind",
            listing_bytes.clone(),
        );
        Metrics {
            listing_items,
            listing_bytes,
            tools_reviewed,
            accounts,
            store_operations,
            store_up,
            usage,
            operator_stream_connected,
            audit_dropped,
            registry,
            requests: Handles::new(requests),
            upstream_requests,
            upstream_latency,
            listing_failures,
            auth_relayed,
            limited,
            shed,
            sign_ins,
            brokered_tokens,
            cache_entries,
            queue_delay,
            in_flight_cap,
            snapshot_generation,
            runtime_tasks,
            snapshot_applies,
            snapshot_rejections,
            servers,
            keys,
            models,
        }
    }
}

impl Metrics {
    pub fn limited(&self, scope: &'static str, name: &str, limit: &'static str) {
        self.limited
            .get_or_create(&LimitedLabels {
                scope,
                name: name.to_string(),
                limit,
            })
            .inc();
    }

    pub fn cache_entries(&self, cache: &'static str, entries: u64) {
        self.cache_entries
            .get_or_create(&CacheLabels { cache })
            .set(i64::try_from(entries).unwrap_or(i64::MAX));
    }

    pub fn sign_in(&self, issuer: &str, outcome: &'static str) {
        self.sign_ins
            .get_or_create(&SignInLabels {
                issuer: issuer.to_string(),
                outcome,
            })
            .inc();
    }

    pub fn brokered_token(&self, grant: &'static str, outcome: &'static str) {
        self.brokered_tokens
            .get_or_create(&BrokeredTokenLabels { grant, outcome })
            .inc();
    }

    pub fn shed(&self, reason: &'static str) {
        self.shed.get_or_create(&ShedLabels { reason }).inc();
    }

    pub fn queue_delay(&self, delay: Duration) {
        self.queue_delay.observe(delay.as_secs_f64());
    }

    pub fn in_flight_cap(&self, cap: Option<usize>) {
        self.in_flight_cap
            .set(cap.map_or(0, |c| i64::try_from(c).unwrap_or(i64::MAX)));
    }

    pub fn request(&self, endpoint: &'static str, method: &'static str, outcome: &'static str) {
        let labels = RequestLabels {
            endpoint,
            method,
            outcome,
        };
        self.requests.with(&labels, |requests| {
            requests.inc();
        });
    }

    /// A call to `server` ended with `outcome` (`ok`, `rpc_error`, `stream` for an answered
    /// one; an error's outcome otherwise) after `elapsed`.
    pub fn upstream_call(&self, server: &UpstreamSeries, outcome: &'static str, elapsed: Duration) {
        let answered = match outcome {
            "ok" => Some(&server.ok),
            "rpc_error" => Some(&server.rpc_error),
            "stream" => Some(&server.stream),
            _ => None,
        };
        match answered {
            Some(counter) => counter
                .get_or_init(|| self.upstream_requests_of(&server.server, outcome))
                .inc(),
            // An error: rarer, and its outcomes many.
            None => self.upstream_requests_of(&server.server, outcome).inc(),
        };
        self.upstream_latency_of(server)
            .observe(elapsed.as_secs_f64());
    }

    fn upstream_latency_of<'a>(&self, server: &'a UpstreamSeries) -> &'a Histogram {
        server.latency.get_or_init(|| {
            self.upstream_latency
                .get_or_create(&ServerLabels {
                    server: server.server.clone(),
                })
                .clone()
        })
    }

    fn upstream_requests_of(&self, server: &ServerName, outcome: &'static str) -> Counter {
        self.upstream_requests
            .get_or_create(&UpstreamLabels {
                server: server.clone(),
                outcome,
            })
            .clone()
    }

    pub fn listing_failed(&self, server: &ServerName) {
        self.listing_failures
            .get_or_create(&ServerLabels {
                server: server.clone(),
            })
            .inc();
    }

    pub fn auth_relayed(&self, server: &ServerName) {
        self.auth_relayed
            .get_or_create(&ServerLabels {
                server: server.clone(),
            })
            .inc();
    }

    pub fn snapshot_applied(&self, generation: u64, servers: usize, keys: usize) {
        self.snapshot_generation.set(generation as i64);
        self.snapshot_applies.inc();
        self.servers.set(servers as i64);
        self.keys.set(keys as i64);
    }

    pub fn llm_request(&self, model: &ServerName, figures: &LlmRequestFigures) {
        let m = &self.models;
        m.requests
            .get_or_create(&ModelRequestLabels {
                model: model.clone(),
                endpoint: figures.endpoint,
                outcome: figures.outcome,
            })
            .inc();
        let labels = ModelLabels {
            model: model.clone(),
        };
        m.model_calls
            .get_or_create(&labels)
            .inc_by(figures.model_calls);
        if figures.model_calls > 0 {
            m.iterations
                .get_or_create(&labels)
                .observe(figures.model_calls as f64);
        }
        for (kind, n) in [
            ("input", figures.input_tokens),
            ("output", figures.output_tokens),
        ] {
            m.tokens
                .get_or_create(&ModelTokenLabels {
                    model: model.clone(),
                    kind,
                })
                .inc_by(n);
        }
    }

    pub fn llm_tool_call(&self, model: &ServerName, outcome: &'static str) {
        self.models
            .gateway_tool_calls
            .get_or_create(&ModelOutcomeLabels {
                model: model.clone(),
                outcome,
            })
            .inc();
    }

    /// A finished client request, by tenant, server and model (labels bounded).
    pub(crate) fn usage(&self, figures: &UsageFigures<'_>) {
        let u = &self.usage;
        let label = |values: &LabelValues, name: &'static str, value: &str| {
            let (v, folded) = values.admit(value);
            if folded {
                u.folded.get_or_create(&FoldedLabels { label: name }).inc();
            }
            (v, folded)
        };
        let seconds = figures.elapsed.as_secs_f64();
        // (Admitted once a request: a folded value counts once.)
        let mut tenant_label = None;
        if !u.series.count(figures, seconds) {
            // The first request with these values (or one with a folded value).
            let (tenant, tenant_folded) = label(&u.tenants, "tenant", figures.tenant);
            tenant_label = Some(tenant.clone());
            let (server, server_folded) = label(&u.servers, "server", figures.server);
            let duration = u
                .duration
                .get_or_create(&EndpointServerLabels {
                    endpoint: figures.endpoint,
                    server: server.clone(),
                })
                .clone();
            let requests = u
                .requests
                .get_or_create(&TenantLabels {
                    tenant: tenant.clone(),
                    server: server.clone(),
                    outcome: figures.outcome,
                })
                .clone();
            duration.observe(seconds);
            requests.inc();
            if !tenant_folded && !server_folded {
                let entry = UsageEntry {
                    endpoint: figures.endpoint,
                    tenant: tenant.0,
                    server: server.0,
                    outcome: figures.outcome,
                    duration,
                    requests,
                };
                u.series.insert(figures, entry);
            }
        }
        if let Some(model) = figures.model {
            let tenant =
                tenant_label.unwrap_or_else(|| label(&u.tenants, "tenant", figures.tenant).0);
            let (model, _) = label(&u.models, "model", model);
            for (kind, n) in [
                ("input", figures.input_tokens),
                ("output", figures.output_tokens),
            ] {
                u.tokens
                    .get_or_create(&TenantTokenLabels {
                        tenant: tenant.clone(),
                        model: model.clone(),
                        kind,
                    })
                    .inc_by(n);
            }
        }
    }

    pub fn operator_stream(&self, connected: bool) {
        self.operator_stream_connected.set(i64::from(connected));
    }

    pub(crate) fn audit_record_dropped(&self) {
        self.audit_dropped.inc();
    }

    /// A store `backend` in use, up until an operation says otherwise (so the gauge exists
    /// before the first operation).
    pub fn store_in_use(&self, backend: &'static str) {
        self.store_up
            .get_or_create(&BackendLabels { backend })
            .set(1);
    }

    /// How many of `server`'s tools its last listing's review found in `state` (see
    /// `ToolReviewLabels`); every state of the server is set on each review, zeros included,
    /// so a state that cleared reads 0.
    pub fn tools_reviewed(&self, server: &ServerName, state: &'static str, tools: usize) {
        self.tools_reviewed
            .get_or_create(&ToolReviewLabels {
                server: server.clone(),
                state,
            })
            .set(i64::try_from(tools).unwrap_or(i64::MAX));
    }

    /// What one walk of `server`'s listing of `kind` found: how many items, how many bytes.
    pub fn listing_walked(
        &self,
        server: &ServerName,
        kind: &'static str,
        items: usize,
        bytes: usize,
    ) {
        let labels = ListingLabels {
            server: server.clone(),
            kind,
        };
        self.listing_items
            .get_or_create(&labels)
            .set(i64::try_from(items).unwrap_or(i64::MAX));
        self.listing_bytes
            .get_or_create(&labels)
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// An event of a person's own account at `server` (its metric name).
    pub fn account_event(&self, server: &ServerName, event: &'static str) {
        self.accounts
            .get_or_create(&AccountLabels {
                server: server.clone(),
                event,
            })
            .inc();
    }

    pub fn snapshot_rejected(&self) {
        self.snapshot_rejections.inc();
    }

    pub fn encode(&self) -> String {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let tasks = runtime.metrics().num_alive_tasks();
            self.runtime_tasks
                .set(i64::try_from(tasks).unwrap_or(i64::MAX));
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl switchboard_store::StoreObserver for Metrics {
    fn operation(
        &self,
        backend: &'static str,
        operation: &'static str,
        error: Option<&switchboard_store::StoreError>,
    ) {
        use switchboard_store::StoreError;
        let outcome = match error {
            None => "ok",
            Some(StoreError::Unavailable { .. }) => "unavailable",
            Some(StoreError::Sealed) => "sealed",
            Some(StoreError::File { .. } | StoreError::Settings(_)) => "file",
        };
        self.store_operations
            .get_or_create(&StoreLabels {
                backend,
                operation,
                outcome,
            })
            .inc();
        let up = !matches!(error, Some(StoreError::Unavailable { .. }));
        self.store_up
            .get_or_create(&BackendLabels { backend })
            .set(i64::from(up));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exported lines of one family whose labels include `server="<server>"`.
    fn lines(text: &str, family: &str, server: &str) -> Vec<String> {
        let label = format!("server=\"{server}\"");
        text.lines()
            .filter(|l| l.starts_with(family) && l.contains(&label))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn requests_and_usage_count_through_their_handles_into_what_is_exported() {
        let metrics = Metrics::default();
        for method in ["tools/call", "tools/call", "tools/list", "tools/call"] {
            metrics.request("mcp", method, "ok");
        }
        metrics.request("mcp", "tools/call", "forbidden");
        let usage = |tenant, server, outcome, ms| UsageFigures {
            endpoint: "mcp",
            tenant,
            server,
            model: None,
            outcome,
            elapsed: Duration::from_millis(ms),
            input_tokens: 0,
            output_tokens: 0,
        };
        for figures in [
            usage("t1", "a", "ok", 2),
            usage("t1", "a", "ok", 3),
            usage("t2", "a", "ok", 4),
            usage("t1", "a", "forbidden", 5),
            usage("t1", "b", "ok", 6),
        ] {
            metrics.usage(&figures);
        }
        let text = metrics.encode();
        let mut requests: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("switchboard_gateway_requests_total{"))
            .collect();
        requests.sort();
        assert_eq!(
            requests,
            [
                "switchboard_gateway_requests_total{endpoint=\"mcp\",method=\"tools/call\",outcome=\"forbidden\"} 1",
                "switchboard_gateway_requests_total{endpoint=\"mcp\",method=\"tools/call\",outcome=\"ok\"} 3",
                "switchboard_gateway_requests_total{endpoint=\"mcp\",method=\"tools/list\",outcome=\"ok\"} 1",
            ],
            "{text}"
        );
        let mut tenants = lines(&text, "switchboard_gateway_tenant_requests_total", "a");
        tenants.sort();
        assert_eq!(
            tenants,
            [
                "switchboard_gateway_tenant_requests_total{tenant=\"t1\",server=\"a\",outcome=\"forbidden\"} 1",
                "switchboard_gateway_tenant_requests_total{tenant=\"t1\",server=\"a\",outcome=\"ok\"} 2",
                "switchboard_gateway_tenant_requests_total{tenant=\"t2\",server=\"a\",outcome=\"ok\"} 1",
            ],
            "{text}"
        );
        let count = |server| {
            lines(
                &text,
                "switchboard_gateway_request_duration_seconds_count",
                server,
            )
        };
        assert_eq!(
            count("a"),
            ["switchboard_gateway_request_duration_seconds_count{endpoint=\"mcp\",server=\"a\"} 4"],
            "{text}"
        );
        assert_eq!(
            count("b"),
            ["switchboard_gateway_request_duration_seconds_count{endpoint=\"mcp\",server=\"b\"} 1"],
            "{text}"
        );
    }

    /// Past the bound, tenants count as `other`, each folded request once (a model's tokens
    /// too: the tenant is admitted once a request), and the series found by label values hold
    /// no folded value: they stay bounded as the families are.
    #[test]
    fn usage_past_the_label_bound_counts_as_other_and_stays_bounded() {
        let metrics = Metrics::default();
        let tenants: Vec<String> = (0..USAGE_LABEL_VALUES + 40)
            .map(|n| format!("t{n}"))
            .collect();
        for round in 0..2 {
            for tenant in &tenants {
                metrics.usage(&UsageFigures {
                    endpoint: "llm_messages",
                    tenant,
                    server: "a",
                    model: (round == 1).then_some("m"),
                    outcome: "ok",
                    elapsed: Duration::from_millis(1),
                    input_tokens: 2,
                    output_tokens: 3,
                });
            }
        }
        let text = metrics.encode();
        let has = |line: &str| text.lines().any(|l| l == line);
        assert!(
            has(
                "switchboard_gateway_tenant_requests_total{tenant=\"other\",server=\"a\",outcome=\"ok\"} 80"
            ),
            "{text}"
        );
        assert!(
            has(
                "switchboard_gateway_tenant_requests_total{tenant=\"t0\",server=\"a\",outcome=\"ok\"} 2"
            ),
            "{text}"
        );
        assert!(
            has("switchboard_gateway_usage_labels_folded_total{label=\"tenant\"} 80"),
            "{text}"
        );
        assert!(
            has(
                "switchboard_gateway_request_duration_seconds_count{endpoint=\"llm_messages\",server=\"a\"} 592"
            ),
            "{text}"
        );
        let held: usize = metrics
            .usage
            .series
            .0
            .read()
            .map(|map| map.values().map(Vec::len).sum())
            .unwrap_or_default();
        assert_eq!(held, USAGE_LABEL_VALUES);
    }

    #[test]
    fn a_servers_series_count_into_what_is_exported() {
        let metrics = Metrics::default();
        let a = UpstreamSeries::new(ServerName("a".into()));
        let b = UpstreamSeries::new(ServerName("b".into()));
        let ms = |n| Duration::from_millis(n);
        for (series, outcome, elapsed) in [
            (&a, "ok", ms(2)),
            (&a, "ok", ms(3)),
            (&a, "rpc_error", ms(4)),
            (&a, "stream", ms(5)),
            (&a, "timeout", ms(900)),
            (&a, "timeout", ms(800)),
            (&b, "ok", ms(7)),
        ] {
            metrics.upstream_call(series, outcome, elapsed);
        }
        // Another table's series of the same server (the next snapshot's) count into the same.
        let a_again = UpstreamSeries::new(ServerName("a".into()));
        metrics.upstream_call(&a_again, "ok", ms(1));
        metrics.upstream_call(&a_again, "unavailable", ms(1));

        let text = metrics.encode();
        let mut requests = lines(&text, "switchboard_gateway_upstream_requests_total", "a");
        requests.sort();
        assert_eq!(
            requests,
            [
                "switchboard_gateway_upstream_requests_total{server=\"a\",outcome=\"ok\"} 3",
                "switchboard_gateway_upstream_requests_total{server=\"a\",outcome=\"rpc_error\"} 1",
                "switchboard_gateway_upstream_requests_total{server=\"a\",outcome=\"stream\"} 1",
                "switchboard_gateway_upstream_requests_total{server=\"a\",outcome=\"timeout\"} 2",
                "switchboard_gateway_upstream_requests_total{server=\"a\",outcome=\"unavailable\"} 1",
            ],
            "{text}"
        );
        assert_eq!(
            lines(&text, "switchboard_gateway_upstream_requests_total", "b"),
            ["switchboard_gateway_upstream_requests_total{server=\"b\",outcome=\"ok\"} 1"]
        );
        let count = |server| {
            lines(
                &text,
                "switchboard_gateway_upstream_request_duration_seconds_count",
                server,
            )
        };
        assert_eq!(
            count("a"),
            ["switchboard_gateway_upstream_request_duration_seconds_count{server=\"a\"} 8"]
        );
        assert_eq!(
            count("b"),
            ["switchboard_gateway_upstream_request_duration_seconds_count{server=\"b\"} 1"]
        );
        let sum = lines(
            &text,
            "switchboard_gateway_upstream_request_duration_seconds_sum",
            "a",
        );
        assert_eq!(sum.len(), 1, "{text}");
        let seconds: f64 = sum[0]
            .rsplit(' ')
            .next()
            .unwrap_or("")
            .parse()
            .unwrap_or(-1.0);
        assert!((seconds - 1.716).abs() < 1e-9, "{}", sum[0]);
    }
}
