//! What a span says beyond the fields it was created with, per the OpenTelemetry conventions
//! (docs/audit.md, "Traces", lists every span and attribute): a name known only once the work
//! is read, and a failure.
//!
//! Both act on the OpenTelemetry span behind a `tracing` span directly: `tracing-opentelemetry`
//! reads `otel.name` only until the span starts (its first entry), and a request's name (its
//! MCP method and tool) is known later than that. On a disabled span (tracing off, or a request
//! not sampled) both do nothing.

use std::borrow::Cow;

use opentelemetry::trace::{Status, TraceContextExt as _};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The attribute that says which class of failure an operation ended with (the conventions'
/// `error.type`).
const ERROR_TYPE: &str = "error.type";

/// Renames `span`.
pub fn rename(span: &tracing::Span, name: impl Into<Cow<'static, str>>) {
    if span.is_disabled() {
        return;
    }
    span.context().span().update_name(name.into());
}

/// Marks `span` failed: status Error (with `description`, empty when `None`) and `error.type`
/// set to `error_type`, a low-cardinality class (a status code, a JSON-RPC error code, a
/// failure's kind). The conventions' "Recording errors" asks for exactly this, and no span
/// event. Call it once per span: attributes are appended, never replaced.
pub fn fail(
    span: &tracing::Span,
    error_type: impl Into<Cow<'static, str>>,
    description: Option<String>,
) {
    if span.is_disabled() {
        return;
    }
    let error_type: Cow<'static, str> = error_type.into();
    span.set_attribute(ERROR_TYPE, error_type.into_owned());
    span.set_status(Status::error(description.unwrap_or_default()));
}

/// Sets an attribute whose value is a list of strings (`gen_ai.response.finish_reasons`), which
/// a `tracing` field cannot hold.
pub fn set_strings(span: &tracing::Span, key: &'static str, values: Vec<String>) {
    if span.is_disabled() || values.is_empty() {
        return;
    }
    let values = values.into_iter().map(Into::into).collect();
    span.set_attribute(
        key,
        opentelemetry::Value::Array(opentelemetry::Array::String(values)),
    );
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// The spans a test ended, as the exporter gets them.
    #[derive(Debug, Clone, Default)]
    struct Collected(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Collected {
        fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
            self.0.lock().unwrap().extend(batch);
            std::future::ready(Ok(()))
        }
    }

    fn exported(work: impl FnOnce()) -> Vec<SpanData> {
        let collected = Collected::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(collected.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), work);
        let _ = provider.force_flush();
        collected.0.lock().unwrap().clone()
    }

    fn attribute(span: &SpanData, key: &str) -> Option<opentelemetry::Value> {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.clone())
    }

    #[test]
    fn a_span_named_after_it_started_keeps_the_name_and_its_failure() {
        let spans = exported(|| {
            let span = tracing::info_span!("request", otel.name = "POST /mcp/{prefix}");
            // Entered: the span has started, and `otel.name` is read no more.
            span.in_scope(|| {});
            rename(&span, "tools/call add");
            fail(&span, "-32602", None);
        });
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].name, "tools/call add");
        assert_eq!(spans[0].status, Status::error(""));
        assert_eq!(attribute(&spans[0], ERROR_TYPE), Some("-32602".into()));
    }

    #[test]
    fn a_span_that_did_not_fail_has_no_error_type() {
        let spans = exported(|| {
            let span = tracing::info_span!("upstream request");
            span.in_scope(|| {});
            set_strings(
                &span,
                "gen_ai.response.finish_reasons",
                vec!["end_turn".into()],
            );
        });
        assert_eq!(spans[0].status, Status::Unset);
        assert_eq!(attribute(&spans[0], ERROR_TYPE), None);
        assert_eq!(
            attribute(&spans[0], "gen_ai.response.finish_reasons"),
            Some(opentelemetry::Value::Array(opentelemetry::Array::String(
                vec!["end_turn".into()]
            )))
        );
    }

    #[test]
    fn a_failure_keeps_its_description() {
        let spans = exported(|| {
            let span = tracing::info_span!("upstream request");
            fail(
                &span,
                "connection_refused",
                Some("connection refused".into()),
            );
        });
        assert_eq!(spans[0].status, Status::error("connection refused"));
    }
}
