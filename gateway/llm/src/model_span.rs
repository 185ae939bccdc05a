//! The GenAI client span of one call to a model's provider, as the OpenTelemetry GenAI
//! conventions describe an inference span: kind CLIENT, named `chat {gen_ai.request.model}`,
//! with `gen_ai.operation.name` `chat`, `gen_ai.provider.name` (`anthropic`, `openai`),
//! `gen_ai.request.model` (the id the provider gets), `gen_ai.request.max_tokens`, the server,
//! and once the answer is read `gen_ai.response.model`, `gen_ai.response.id`,
//! `gen_ai.response.finish_reasons` and the call's own token usage. A tool call the loop runs is
//! an MCP client span (`tools/call {tool}`, `gen_ai.operation.name` `execute_tool`) beside it,
//! so the two are told apart by their attributes, not their URLs. Its HTTP exchange is its
//! child.
//!
//! The span lasts from the request until the answer was read (a stream's last event); it
//! fails (status Error, `error.type`) on a refusal (the HTTP status), on no answer (the request
//! metric's outcome: `provider_timeout`, `provider_unavailable`), or on a stream that broke or
//! carried an error event (`provider_stream_broken`, `provider_stream_error`). Never a prompt,
//! a message or a completion: the conventions' opt-in `gen_ai.input.messages` and
//! `.output.messages` are never recorded.

use serde_json::{Map, Value};
use tracing::field::Empty;

use crate::errors::LlmError;
use crate::format::Format;
use crate::turn::Usage;
use switchboard_core::audit;
use switchboard_core::table::Model;

/// One model call's span; ended by [`ModelCall::answered`], [`ModelCall::streamed`] or
/// [`ModelCall::failed`] (or when dropped).
pub(crate) struct ModelCall {
    span: tracing::Span,
    format: Format,
}

impl ModelCall {
    /// A chat call of `model` with `body` (the provider's request) in `format`, a child of the
    /// current span; disabled when the request is not traced.
    pub(crate) fn chat(model: &Model, format: Format, body: &Map<String, Value>) -> ModelCall {
        if !switchboard_telemetry::tracing_on() || tracing::Span::current().is_disabled() {
            return ModelCall::none(format);
        }
        let requested = body.get("model").and_then(Value::as_str).map(audit::name);
        let name = match &requested {
            Some(model) => format!("chat {model}"),
            None => "chat".to_string(),
        };
        let max_tokens = body
            .get("max_tokens")
            .or_else(|| body.get("max_completion_tokens"))
            .and_then(Value::as_i64);
        let span = tracing::info_span!(
            target: switchboard_telemetry::SPAN_TARGET,
            "model call",
            otel.name = name,
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = model.spec.provider.as_str(),
            gen_ai.request.model = requested.as_deref(),
            gen_ai.request.max_tokens = max_tokens,
            switchboard.model = model.id(),
            server.address = model.endpoint.host_str().unwrap_or("-"),
            server.port = model.endpoint.port_or_known_default().map(i64::from),
            gen_ai.response.model = Empty,
            gen_ai.response.id = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.usage.cache_read.input_tokens = Empty,
            gen_ai.usage.cache_creation.input_tokens = Empty,
        );
        ModelCall { span, format }
    }

    /// No span (a call that is not a chat, such as counting tokens; its HTTP exchange is
    /// still traced, under the request).
    pub fn none(format: Format) -> ModelCall {
        ModelCall {
            span: tracing::Span::none(),
            format,
        }
    }

    /// The span the call's HTTP exchange runs in.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// A whole answer (a JSON object) was read: its model, id, finish reasons and usage.
    pub fn answered(&mut self, response: &Value) {
        if self.span.is_disabled() {
            return;
        }
        let text = |pointer: &str| response.pointer(pointer).and_then(Value::as_str);
        let (model, id) = (text("/model"), text("/id"));
        let reasons: Vec<String> = match self.format {
            Format::Anthropic => text("/stop_reason").map(audit::name).into_iter().collect(),
            Format::OpenAi => response
                .get("choices")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| c.get("finish_reason").and_then(Value::as_str))
                .map(audit::name)
                .collect(),
        };
        let usage = self.format.usage(response);
        self.end(model, id, reasons, usage);
    }

    /// A streamed answer ended whole: what its events said.
    pub(crate) fn streamed(
        &mut self,
        model: Option<&str>,
        finish_reason: Option<&str>,
        usage: Usage,
    ) {
        let reasons = finish_reason.map(audit::name).into_iter().collect();
        self.end(model, None, reasons, usage);
    }

    fn end(&mut self, model: Option<&str>, id: Option<&str>, reasons: Vec<String>, usage: Usage) {
        let span = std::mem::replace(&mut self.span, tracing::Span::none());
        if span.is_disabled() {
            return;
        }
        if let Some(model) = model {
            span.record("gen_ai.response.model", audit::name(model).as_str());
        }
        if let Some(id) = id {
            span.record("gen_ai.response.id", audit::name(id).as_str());
        }
        switchboard_telemetry::span::set_strings(&span, "gen_ai.response.finish_reasons", reasons);
        // Anthropic counts cached input apart from `input_tokens`; the conventions' input
        // count includes it (OpenAI's `prompt_tokens` already does).
        let input = match self.format {
            Format::Anthropic => usage.input + usage.cache_read + usage.cache_creation,
            Format::OpenAi => usage.input,
        };
        // (i64: unsigned values reach the exporter as strings)
        span.record("gen_ai.usage.input_tokens", input as i64);
        span.record("gen_ai.usage.output_tokens", usage.output as i64);
        if usage.cache_read > 0 {
            span.record(
                "gen_ai.usage.cache_read.input_tokens",
                usage.cache_read as i64,
            );
        }
        if usage.cache_creation > 0 {
            span.record(
                "gen_ai.usage.cache_creation.input_tokens",
                usage.cache_creation as i64,
            );
        }
    }

    /// The provider refused the call (`status`, 4xx or 5xx).
    pub fn refused(&mut self, status: axum::http::StatusCode) {
        self.fail(status.as_u16().to_string(), None);
    }

    /// The call got no answer, or none it could use.
    pub fn failed(&mut self, error: &LlmError) {
        self.fail(error.kind().to_string(), Some(error.to_string()));
    }

    /// A streamed answer ended early: `outcome` (`provider_stream_broken`,
    /// `provider_stream_error`) as its class, `detail` (the gateway's words) when it has one.
    pub(crate) fn stream_failed(&mut self, outcome: &'static str, detail: Option<String>) {
        self.fail(outcome.to_string(), detail);
    }

    fn fail(&mut self, error_type: String, description: Option<String>) {
        let span = std::mem::replace(&mut self.span, tracing::Span::none());
        switchboard_telemetry::span::fail(&span, error_type, description);
    }
}
