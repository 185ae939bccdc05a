//! The evidence of one LLM request: its metrics and its one log line (names and counts, never a
//! prompt, an argument or a result), written by the whole answer and the stream alike.

use tokio::time::Instant;

use crate::context::LlmContext;
use crate::format::Format;
use crate::run::Tally;
use switchboard_core::metrics::LlmRequestFigures;
use switchboard_core::table::Model;

/// A bounded label for a provider's error status.
pub(crate) fn provider_outcome(status: axum::http::StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "provider_400",
        401 | 403 => "provider_auth",
        404 => "provider_404",
        429 => "provider_429",
        500..=599 => "provider_5xx",
        _ => "provider_other",
    }
}

/// Metrics and the one log line of a request: ids, names, counts and the outcome; never a
/// prompt, an argument or a result.
#[allow(clippy::too_many_arguments)]
pub fn record(
    cx: &LlmContext,
    model: &Model,
    format: Format,
    outcome: &'static str,
    tally: &Tally,
    started: Instant,
    caller: &str,
    gateway_tools: usize,
) {
    switchboard_core::audit::note(|n| {
        n.model = Some(model.id().to_string());
        n.outcome = Some(outcome);
        n.tokens = Some(switchboard_core::audit::Tokens {
            input: tally.usage.input,
            output: tally.usage.output,
        });
    });
    cx.metrics.llm_request(
        &model.metric_name,
        &LlmRequestFigures {
            endpoint: format.as_str(),
            outcome,
            model_calls: tally.model_calls,
            input_tokens: tally.usage.input,
            output_tokens: tally.usage.output,
        },
    );
    tracing::info!(
        model = model.id(),
        endpoint = format.as_str(),
        caller,
        outcome,
        model_calls = tally.model_calls,
        gateway_tools,
        gateway_tool_calls = tally.tool_calls,
        gateway_tool_errors = tally.tool_errors,
        input_tokens = tally.usage.input,
        output_tokens = tally.usage.output,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "LLM request"
    );
}
