//! The loop, answered whole: call the model; run the calls that are the gateway's; hand the
//! client's back; go round again while the model only called gateway tools.

use std::sync::Arc;

use axum::Json;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures_util::future::join_all;
use serde_json::{Map, Value};
use tokio::time::Instant;

use crate::carry::Carry;
use crate::context::LlmContext;
use crate::errors::LlmError;
use crate::format::Format;
use crate::model_span::ModelCall;
use crate::provider::Provider;
use crate::toolset::{GatewayTool, ToolSet};
use crate::turn::{Call, Executed, Outcome, Usage};
use crate::{anthropic, openai};
use switchboard_core::scope::Caller;
use switchboard_core::table::Model;
use switchboard_core::virtual_server::{SearchCall, Selected, VirtualServer};
use switchboard_upstream::Searched;
use switchboard_upstream::error::UpstreamError;

/// A request ready for the provider: authenticated, its model found, carried work restored,
/// gateway tools resolved and injected, the model id rewritten.
pub(crate) struct Prepared {
    pub cx: Arc<LlmContext>,
    pub caller: Caller,
    pub model: Arc<Model>,
    pub format: Format,
    /// The provider endpoint, with the client's query string.
    pub endpoint: url::Url,
    pub tools: ToolSet,
    /// The provider request body.
    pub body: Map<String, Value>,
    pub stream: bool,
    pub client_headers: HeaderMap,
}

impl Prepared {
    pub fn provider(&self) -> Provider<'_> {
        Provider::new(
            self.cx.upstream.http_for_model(&self.model),
            &self.model,
            &self.client_headers,
        )
    }

    /// The span of a chat call with the body as it now is ([`ModelCall`]).
    pub(crate) fn model_call(&self) -> ModelCall {
        ModelCall::chat(&self.model, self.format, &self.body)
    }

    /// Seals a record for this caller's key.
    pub fn seal(&self, carry: Carry) -> Option<String> {
        carry.seal(&self.caller.table.sealer)
    }

    pub(crate) fn new_carry(&self) -> Carry {
        Carry {
            key_tag: key_tag(&self.caller),
            model: self.model.id().to_string(),
            ..Carry::default()
        }
    }

    /// Appends an iteration (the model's message and the gateway's results, see
    /// [`Format::iteration_messages`]) to the body and to the record the client will carry.
    pub fn append(&mut self, carry: &mut Carry, messages: Vec<Value>) {
        if let Some(Value::Array(all)) = self.body.get_mut("messages") {
            all.extend_from_slice(&messages);
        }
        carry.prior.extend(messages);
        self.relax_forced_tool_choice();
    }

    /// A `tool_choice` that forces a tool call applies to the first model call only: forced on
    /// every iteration, the model could never answer. Later calls get `auto`.
    fn relax_forced_tool_choice(&mut self) {
        let Some(choice) = self.body.get_mut("tool_choice") else {
            return;
        };
        let forced = match self.format {
            Format::Anthropic => matches!(
                choice.get("type").and_then(Value::as_str),
                Some("any" | "tool")
            ),
            Format::OpenAi => {
                choice.as_str() == Some("required") || choice.get("function").is_some()
            }
        };
        if !forced {
            return;
        }
        *choice = match self.format {
            Format::Anthropic => {
                let mut auto = serde_json::json!({"type": "auto"});
                if let Some(p) = choice.get("disable_parallel_tool_use") {
                    auto["disable_parallel_tool_use"] = p.clone();
                }
                auto
            }
            Format::OpenAi => Value::String("auto".into()),
        };
    }

    /// Splits a turn's calls: the gateway's (to run) and how many are the client's.
    pub fn split<'c>(&self, calls: &'c [Call]) -> (Vec<&'c Call>, usize) {
        let ours: Vec<&Call> = calls
            .iter()
            .filter(|c| self.tools.gateway_run(&c.name).is_some())
            .collect();
        let theirs = calls.len() - ours.len();
        (ours, theirs)
    }
}

/// The caller's short tag as the number a record is bound to.
pub fn key_tag(caller: &Caller) -> u64 {
    u64::from_be_bytes(caller.short_tag())
}

/// What a request did, for metrics and its log line.
#[derive(Default)]
pub(crate) struct Tally {
    pub model_calls: u64,
    pub usage: Usage,
    pub tool_calls: u64,
    pub tool_errors: u64,
}

/// Most gateway calls of one turn that run at the same time.
const MAX_CONCURRENT_CALLS: usize = 8;

/// Runs the gateway's calls of one turn concurrently, each bounded by its server's timeout
/// (through the same scope, routing and credential path as an MCP call). A failure becomes a
/// result marked as an error, which the model reads; it never fails the request.
pub(crate) async fn execute<'t>(
    prepared: &'t Prepared,
    calls: Vec<&Call>,
    tally: &mut Tally,
) -> Vec<Executed<'t>> {
    let runs = calls.into_iter().filter_map(|call| {
        let tool = prepared.tools.gateway_run(&call.name)?;
        let call = call.clone();
        Some(async move {
            if let Some(vs) = &tool.search {
                let outcome = search_tool(prepared, vs, tool, &call).await;
                return Executed {
                    call,
                    tool,
                    outcome,
                };
            }
            // A virtual server's tool: its fixed values set, its narrowed enums checked, its
            // argument rules held.
            let input = call.input.clone().and_then(|input| match &tool.via {
                Some((vs, o)) => prepared
                    .caller
                    .virtual_arguments(vs, &tool.name, o.as_ref(), Some(input))
                    .map(Option::unwrap_or_default)
                    .map_err(|refused| refused.to_string()),
                None => Ok(input),
            });
            let outcome = match &input {
                Err(message) => Outcome::error(&call.id, message.clone()),
                Ok(input) => match prepared
                    .cx
                    .upstream
                    .call_tool(
                        &prepared.caller,
                        &tool.server,
                        &tool.tool,
                        Some(input.clone()),
                        &tool.name,
                    )
                    .await
                {
                    Ok(result) => outcome_of(&call.id, &result),
                    Err(e) => Outcome::error(&call.id, tool_failure(&tool.name, &e)),
                },
            };
            Executed {
                call,
                tool,
                outcome,
            }
        })
    });
    // In the model's order, a few at a time: one turn's calls share the upstreams with
    // everyone else's.
    let mut runs: Vec<_> = runs.collect();
    let mut executed = Vec::with_capacity(runs.len());
    while !runs.is_empty() {
        let batch: Vec<_> = runs.drain(..runs.len().min(MAX_CONCURRENT_CALLS)).collect();
        executed.extend(join_all(batch).await);
    }
    for e in &executed {
        let outcome = if e.outcome.is_error { "error" } else { "ok" };
        tally.tool_calls += 1;
        tally.tool_errors += u64::from(e.outcome.is_error);
        prepared
            .cx
            .metrics
            .llm_tool_call(&prepared.model.metric_name, outcome);
        tracing::info!(model = prepared.model.id(), tool = %e.tool.name, server = e.tool.server.id(), outcome, "gateway tool ran for a model");
    }
    executed
}

/// A search-mode virtual server's own tool, run: `find_tools` answered from its tools the
/// caller may call; `call_tool` calls a found tool under the same scope, presentation and
/// argument rules as a listed one, and the attachment's filter of presented names.
async fn search_tool(
    prepared: &Prepared,
    vs: &Arc<VirtualServer>,
    tool: &GatewayTool,
    call: &Call,
) -> Outcome {
    let caller = &prepared.caller;
    let upstream = &prepared.cx.upstream;
    let input = match &call.input {
        Ok(input) => input,
        Err(message) => return Outcome::error(&call.id, message.clone()),
    };
    match vs.search_call(&tool.tool, Some(input)) {
        None => Outcome::error(&call.id, format!("{} is not a search tool", tool.name)),
        Some(Err(refused)) => Outcome::error(&call.id, refused.to_string()),
        Some(Ok(SearchCall::Find { query, limit })) => {
            let found = upstream
                .find_tools(caller, Searched::Virtual(vs), &query, limit)
                .await;
            outcome_of(&call.id, &found.result())
        }
        Some(Ok(SearchCall::Call { name, arguments })) => {
            let not_found = || Outcome::error(&call.id, format!("there is no tool {name:?}"));
            let Some((source, own)) = vs.route(Selected::Tools, &name) else {
                return not_found();
            };
            let admitted = prepared
                .model
                .spec
                .tools
                .iter()
                .filter(|a| {
                    prepared
                        .model
                        .spec
                        .names_virtual_server(&a.server, &vs.spec)
                })
                .any(|a| a.tools.admits(&name));
            if !admitted || !caller.sees_tool(&source.server, own) {
                return not_found();
            }
            let arguments =
                match caller.virtual_arguments(vs, &name, source.override_of(own), arguments) {
                    Ok(arguments) => arguments,
                    Err(refused) => return Outcome::error(&call.id, refused.to_string()),
                };
            match upstream
                .call_tool(caller, &source.server, own, arguments, &name)
                .await
            {
                Ok(result) => outcome_of(&call.id, &result),
                Err(e) => Outcome::error(&call.id, tool_failure(&name, &e)),
            }
        }
    }
}

/// An MCP `CallToolResult` as an outcome: its content, or its structured content as text.
fn outcome_of(call_id: &str, result: &Value) -> Outcome {
    let mut content: Vec<Value> = result
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if content.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        content.push(serde_json::json!({"type": "text", "text": structured.to_string()}));
    }
    Outcome {
        call_id: call_id.to_string(),
        content,
        is_error: result
            .get("isError")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    }
}

/// The loop, for a client that asked for a whole answer.
pub async fn whole(mut prepared: Prepared, tally: &mut Tally) -> Result<Response, LlmError> {
    let format = prepared.format;
    let mut carry = prepared.new_carry();
    let mut merged_anthropic = anthropic::Merged::default();
    let mut merged_openai = openai::Merged::default();
    let max = prepared.model.spec.max_iterations;
    for iteration in 1..=max {
        let provider = prepared.provider();
        let mut call = prepared.model_call();
        let deadline = Instant::now() + prepared.model.spec.timeout;
        let body = serde_json::to_vec(&prepared.body).unwrap_or_default();
        let response = provider
            .post(&prepared.endpoint, body, deadline, &mut call)
            .await?;
        tally.model_calls += 1;
        let answer = provider.read_whole(response, deadline, &mut call).await?;
        if !answer.status.is_success() {
            return Ok(answer.into_response());
        }
        let response = answer.json().ok_or_else(|| {
            let e = LlmError::ProviderUnavailable {
                model: prepared.model.id().to_string(),
                detail: "answered with a body that is not a JSON object".into(),
            };
            call.failed(&e);
            e
        })?;
        call.answered(&response);
        tally.usage += format.usage(&response);
        let mut response = response;
        if !format.stopped_for_tools(&response) {
            format.drop_gateway_calls(&mut response, &prepared.tools);
        }
        let calls = format.runnable_calls(&response);
        let (ours, theirs) = prepared.split(&calls);
        let executed = execute(&prepared, ours, tally).await;
        let limit = iteration == max && !executed.is_empty() && theirs == 0;
        if executed.is_empty() || theirs > 0 || limit {
            let (c, r) = format.carried_calls(&response, &executed);
            carry.calls = c;
            carry.results = r;
            let seal = |c: Carry| prepared.seal(c);
            let out = match format {
                Format::Anthropic => {
                    merged_anthropic.finish(response, &executed, carry, &seal, tally.usage, limit)
                }
                Format::OpenAi => {
                    merged_openai.finish(response, &executed, carry, &seal, tally.usage)
                }
            };
            // The last model call's ids and rate limits go with the answer.
            let mut response = Json(out).into_response();
            answer.copy_headers_to(response.headers_mut());
            return Ok(response);
        }
        match format {
            Format::Anthropic => merged_anthropic.add_turn(&response, &executed),
            Format::OpenAi => merged_openai.add_turn(&response),
        }
        let messages = format.iteration_messages(&response, &executed);
        drop(executed);
        prepared.append(&mut carry, messages);
    }
    // `max` is at least 1, and the last iteration always answers.
    Err(LlmError::ProviderUnavailable {
        model: prepared.model.id().to_string(),
        detail: "the tool loop ended without an answer".into(),
    })
}

/// What the model reads when a gateway tool could not run. A caller's own account not connected
/// yet says where the user connects it, so that the model can tell them (the link works for
/// them alone).
fn tool_failure(tool: &str, e: &UpstreamError) -> String {
    match e {
        UpstreamError::AccountNotConnected { server, url } => format!(
            "the tool {tool} needs the user's own account at {server}: ask them to open {url} to connect it, then try again"
        ),
        other => format!("the tool {tool} failed: {other}"),
    }
}

#[cfg(test)]
mod tool_failure_tests {
    use super::*;

    #[test]
    fn a_tool_that_needs_the_users_account_tells_the_model_where_to_connect_it() {
        let needs = UpstreamError::AccountNotConnected {
            server: "github".into(),
            url: "https://gw.example/connect?ticket=sbx.t".into(),
        };
        let said = tool_failure("github__whoami", &needs);
        assert!(
            said.contains("https://gw.example/connect?ticket=sbx.t") && said.contains("github"),
            "{said}"
        );
        let down = UpstreamError::StoreUnavailable {
            server: "github".into(),
        };
        assert!(
            tool_failure("github__whoami", &down).starts_with("the tool github__whoami failed")
        );
    }
}
