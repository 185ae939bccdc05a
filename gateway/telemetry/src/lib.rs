//! Logs and traces of a Switchboard process, set up once at start by the gateway and the operator
//! alike: the log on stderr (text or JSON, filtered by `RUST_LOG`) and, when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, OpenTelemetry
//! traces exported over OTLP, configured by the standard variables:
//!
//! - `OTEL_EXPORTER_OTLP_PROTOCOL`: `grpc` (default) or `http/protobuf`;
//! - `OTEL_EXPORTER_OTLP_HEADERS`: `name=value,...` sent with every export (a collector's token);
//! - `OTEL_EXPORTER_OTLP_CERTIFICATE`, `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE`,
//!   `OTEL_EXPORTER_OTLP_CLIENT_KEY`: TLS to an `https://` collector (the private module `tls`);
//! - `OTEL_EXPORTER_OTLP_TIMEOUT`: milliseconds one export may take (default 10 000);
//! - `OTEL_TRACES_SAMPLER_ARG`: the ratio of traces kept, 0 to 1 (default 1); a client's
//!   `traceparent` that says sampled is followed whatever the ratio (parent-based);
//! - `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`: the resource.
//!
//! [`span`] names a span once its work is read and marks it failed, as the OpenTelemetry
//! conventions ask (docs/audit.md, "Traces").
//!
//! Only spans created under [`SPAN_TARGET`] become traces (requests and the stages that cost
//! time, never a library's own spans), and the log never shows them. With tracing off no layer
//! wants them, so creating one costs a check of a cached flag.
//!
//! Beside the log, [`start`]: how every binary binds its listeners (a port in use is named with
//! its flag and address) and ends a start that failed (one line, no backtrace).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub mod span;
pub mod start;
mod tls;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The target of every span exported as a trace (`tracing::info_span!(target: SPAN_TARGET, ..)`).
pub const SPAN_TARGET: &str = "switchboard_span";

static ON: AtomicBool = AtomicBool::new(false);
/// The ratio of new traces kept (`OTEL_TRACES_SAMPLER_ARG`), as f64 bits.
static RATIO: AtomicU64 = AtomicU64::new(0);

/// Whether a client request is traced: the client's `traceparent` decides when it has one (its
/// sampled flag), else the ratio. Decided before any span exists, so an unsampled request
/// creates none (the SDK's parent-based sampler decides the same, but only once the span,
/// its attributes and its context are already built: measured, half a proxied call's
/// instructions at ratio 0).
pub fn sampled(traceparent: Option<&[u8]>) -> bool {
    if !tracing_on() {
        return false;
    }
    // `00-<trace id>-<parent id>-<flags>`: the last two hex digits; bit 0 is "sampled".
    if let Some(tp) = traceparent
        && tp.len() >= 55
        && let Ok(flags) = std::str::from_utf8(&tp[53..55])
        && let Ok(flags) = u8::from_str_radix(flags, 16)
    {
        return flags & 1 == 1;
    }
    let ratio = f64::from_bits(RATIO.load(Ordering::Relaxed));
    ratio >= 1.0 || (ratio > 0.0 && rand_unit() < ratio)
}

/// A uniform number in [0, 1) from a per-thread xorshift (no lock, no syscall).
fn rand_unit() -> f64 {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new(
            (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0x9e37_79b9_7f4a_7c15, |d| d.as_nanos() as u64))
                | 1,
        );
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        (x >> 11) as f64 / (1u64 << 53) as f64
    })
}

/// Whether traces are exported (for the propagation of a client's `traceparent` when they are
/// not: it is then passed on as it came).
pub fn tracing_on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The process's exporter, flushed at [`Telemetry::shutdown`].
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports what is still buffered (bounded by the exporter's timeout).
    pub fn shutdown(self) {
        if let Some(provider) = self.provider {
            let _ = provider.shutdown();
        }
    }
}

/// Why the log or traces could not be set up: the binaries print it and stop.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// An `OTEL_*` variable, or a file one names, is not usable; the message names it.
    #[error("{0}")]
    Settings(String),
    /// The log's subscriber could not be installed (one is installed already).
    #[error("the log could not be set up: {0}")]
    Log(String),
    /// The exporter the variables describe could not be built.
    #[error("the OTLP exporter: {0}")]
    Exporter(String),
}

/// Sets up the log and, when configured, traces for `service`. Must run inside the Tokio
/// runtime (the exporter's batches are sent from it).
pub fn init(service: &'static str, json: bool) -> Result<Telemetry, TelemetryError> {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
        .add_directive(format!("{SPAN_TARGET}=off").parse().map_err(|e| {
            TelemetryError::Settings(format!("the log filter for {SPAN_TARGET}: {e}"))
        })?);
    let log = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let log = if json {
        log.json().with_filter(filter).boxed()
    } else {
        log.with_filter(filter).boxed()
    };
    let provider = provider(service)?;
    let traces = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(service))
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target(SPAN_TARGET, tracing::Level::TRACE),
            )
    });
    tracing_subscriber::registry()
        .with(log)
        .with(traces)
        .try_init()
        .map_err(|e| TelemetryError::Log(e.to_string()))?;
    if provider.is_some() {
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        ON.store(true, Ordering::Relaxed);
    }
    Ok(Telemetry { provider })
}

/// How long one export may take (`OTEL_EXPORTER_OTLP_TIMEOUT`, milliseconds; the specification's
/// default 10 s). The gRPC builder reads it itself; the HTTP client is ours, so it is read here.
fn export_timeout() -> Result<std::time::Duration, TelemetryError> {
    let Some((name, value)) = [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .into_iter()
    .find_map(|name| env(name).map(|v| (name, v))) else {
        return Ok(std::time::Duration::from_secs(10));
    };
    value
        .trim()
        .parse::<u64>()
        .map(std::time::Duration::from_millis)
        .map_err(|_| TelemetryError::Settings(format!("{name} {value:?}: expected milliseconds")))
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The tracer provider the `OTEL_*` variables describe, or none without an endpoint.
fn provider(service: &'static str) -> Result<Option<SdkTracerProvider>, TelemetryError> {
    if env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))
        .is_none()
    {
        return Ok(None);
    }
    let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|| "grpc".into());
    let endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))
        .unwrap_or_default();
    let tls = tls::Material::from_env(&endpoint)?;
    // The builders read the endpoint and headers from the same variables.
    let exporter = match protocol.as_str() {
        "grpc" => {
            let builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
            match &tls {
                Some(tls) => builder.with_tls_config(tls.grpc()),
                None => builder,
            }
            .build()
        }
        "http/protobuf" => {
            // Our own connector: the SDK's default hyper client speaks plain HTTP only.
            let connector = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls::http_config(tls.as_ref())?)
                .https_or_http()
                .enable_http1()
                .build();
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(opentelemetry_http::hyper::HyperClient::new(
                    connector,
                    export_timeout()?,
                    None,
                ))
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .build()
        }
        other => {
            return Err(TelemetryError::Settings(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL {other:?}: expected grpc or http/protobuf"
            )));
        }
    }
    .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let ratio = match env("OTEL_TRACES_SAMPLER_ARG") {
        None => 1.0,
        Some(arg) => arg
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|r| (0.0..=1.0).contains(r))
            .ok_or_else(|| {
                TelemetryError::Settings(format!(
                    "OTEL_TRACES_SAMPLER_ARG {arg:?}: expected a ratio from 0 to 1"
                ))
            })?,
    };
    RATIO.store(ratio.to_bits(), Ordering::Relaxed);
    let mut resource = opentelemetry_sdk::Resource::builder();
    if env("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(service);
    }
    let batches =
        opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
            exporter,
            opentelemetry_sdk::runtime::Tokio,
        )
        .build();
    Ok(Some(
        SdkTracerProvider::builder()
            .with_span_processor(batches)
            .with_sampler(opentelemetry_sdk::trace::Sampler::ParentBased(Box::new(
                opentelemetry_sdk::trace::Sampler::TraceIdRatioBased(ratio),
            )))
            .with_resource(resource.build())
            .build(),
    ))
}
