//! The LLM endpoints: `POST /v1/messages` (also `?beta=true`), `POST
//! /v1/messages/count_tokens`, `POST /v1/chat/completions` and `GET /v1/models`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderName, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use switchboard_snapshot::ModelProvider;
use tokio::time::Instant;

use crate::context::LlmContext;
use crate::errors::LlmError;
use crate::format::Format;
use crate::model_span::ModelCall;
use crate::provider::{self, Provider};
use crate::record::{provider_outcome, record};
use crate::run::{self, Prepared, Tally, key_tag};
use crate::stream;
use crate::toolset::{self, prefix_of_gateway_url};
use switchboard_core::metrics::{LlmRequestFigures, ServerName};
use switchboard_core::scope::{Caller, KEY_HEADER, Resource, authenticate_key, no_credential};
use switchboard_core::table::Model;

pub async fn messages(
    State(cx): State<Arc<LlmContext>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(cx, Format::Anthropic, query, headers, body).await
}

pub async fn chat_completions(
    State(cx): State<Arc<LlmContext>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(cx, Format::OpenAi, query, headers, body).await
}

/// The gateway key: `x-api-key` (Anthropic clients), `Authorization: Bearer` (OpenAI clients,
/// and Anthropic ones given an auth token), or `X-Switchboard-Key`.
fn presented_key(headers: &HeaderMap) -> Option<&str> {
    for name in [KEY_HEADER, HeaderName::from_static("x-api-key")] {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            let v = v.trim();
            if !v.is_empty() {
                return Some(v);
            }
        }
    }
    switchboard_core::scope::presented_key(headers)
}

async fn caller(cx: &LlmContext, mut headers: HeaderMap) -> Result<Caller, LlmError> {
    let table = cx.table();
    let Some(presented) = presented_key(&headers).map(str::to_owned) else {
        let reason = "missing gateway key (x-api-key: <key>, or Authorization: Bearer <key>)";
        return Err(no_credential(&table, &headers, Resource::Llm, reason).into());
    };
    // The caller's headers go on to MCP servers (`headers.forward`) when gateway tools run:
    // the gateway key must not, whatever header it came in (`Authorization` and
    // `X-Switchboard-Key` are never forwarded; `x-api-key` could be).
    headers.remove("x-api-key");
    Ok(authenticate_key(table, headers, &presented, &cx.metrics, Resource::Llm).await?)
}

/// The model a body names, if the caller may use it, served in `format`.
fn model_for(
    caller: &Caller,
    body: &Map<String, Value>,
    format: Format,
) -> Result<Arc<Model>, LlmError> {
    let name = body
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| LlmError::invalid("model", "is required"))?;
    let model = caller
        .table
        .model_by_name(name)
        .ok_or_else(|| LlmError::ModelNotFound(name.to_string()))?;
    if !caller.reaches_model(&model.spec) {
        return Err(LlmError::ModelForbidden {
            name: name.to_string(),
            model: model.id().to_string(),
        });
    }
    let served = match model.spec.provider {
        ModelProvider::Anthropic => Format::Anthropic,
        ModelProvider::Openai => Format::OpenAi,
    };
    if served != format {
        let endpoint = match served {
            Format::Anthropic => "/v1/messages",
            Format::OpenAi => "/v1/chat/completions",
        };
        return Err(LlmError::invalid(
            "model",
            format!("{name:?} is served in the other wire format; call {endpoint}"),
        ));
    }
    Ok(model.clone())
}

fn parse_body(cx: &LlmContext, body: &Bytes) -> Result<Map<String, Value>, LlmError> {
    let limit = cx.table().settings.max_body_bytes;
    if body.len() > limit {
        return Err(LlmError::PayloadTooLarge { limit });
    }
    match serde_json::from_slice(body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(LlmError::invalid("body", "must be a JSON object")),
        Err(e) => Err(LlmError::invalid("body", format!("is not valid JSON: {e}"))),
    }
}

/// Everything before the first provider call: who, which model, what tools, what body.
async fn prepare(
    cx: &Arc<LlmContext>,
    format: Format,
    query: Option<String>,
    headers: HeaderMap,
    body: &Bytes,
) -> Result<Prepared, LlmError> {
    let mut body = parse_body(cx, body)?;
    let caller = caller(cx, headers.clone()).await?;
    let model = model_for(&caller, &body, format)?;
    let tag = key_tag(&caller);
    let sealer = &caller.table.sealer;
    format.expand(&mut body, &|token| {
        crate::carry::Carry::open(sealer, token, tag, model.id())
    });
    let references = toolset::take_references(&mut body, |url| {
        prefix_of_gateway_url(url).is_some_and(|p| caller.table.server_by_prefix(p).is_some())
    })?;
    let client_tools = format.client_tool_names(&body);
    let tools = toolset::resolve(cx, &caller, &model, &references, &client_tools).await?;
    if tools.has_gateway_run() && body.get("n").and_then(Value::as_u64).unwrap_or(1) > 1 {
        // Each choice would be a loop of its own, and the others would show the hidden calls.
        return Err(LlmError::invalid(
            "n",
            "must be 1 for a model with gateway tools",
        ));
    }
    format.inject(&mut body, &tools);
    if let Some(upstream) = &model.spec.upstream_model {
        body.insert("model".into(), Value::String(upstream.clone()));
    }
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    // The client's query (`?beta=true`) goes to the provider as it came.
    let mut endpoint = model.endpoint.clone();
    endpoint.set_query(query.as_deref());
    Ok(Prepared {
        endpoint,
        cx: cx.clone(),
        caller,
        model,
        format,
        tools,
        body,
        stream,
        client_headers: headers,
    })
}

async fn serve(
    cx: Arc<LlmContext>,
    format: Format,
    query: Option<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let prepared = match prepare(&cx, format, query, headers, &body).await {
        Ok(p) => p,
        Err(e) => {
            tracing::info!(endpoint = format.as_str(), error = %e, "LLM request refused");
            switchboard_core::audit::note(|n| e.note_in(n));
            cx.metrics.llm_request(
                &ServerName("-".into()),
                &LlmRequestFigures {
                    endpoint: format.as_str(),
                    outcome: e.kind(),
                    model_calls: 0,
                    input_tokens: 0,
                    output_tokens: 0,
                },
            );
            return e.into_response(format);
        }
    };
    let model = prepared.model.clone();
    let key = prepared.caller.who().into_owned();
    let gateway_tools = prepared.tools.tools.len();
    if prepared.stream && prepared.tools.has_gateway_run() {
        // The loop streams on its own task; it records its figures when it ends.
        return stream::start(prepared, started).await;
    }
    let mut tally = Tally::default();
    let result = if prepared.tools.has_gateway_run() {
        run::whole(prepared, &mut tally).await
    } else {
        pass_through(prepared, &mut tally).await
    };
    let (response, outcome) = match result {
        Ok(r) => {
            let outcome = if r.status().is_success() {
                "ok"
            } else {
                provider_outcome(r.status())
            };
            (r, outcome)
        }
        Err(e) => {
            let kind = e.kind();
            (e.into_response(format), kind)
        }
    };
    record(
        &cx,
        &model,
        format,
        outcome,
        &tally,
        started,
        &key,
        gateway_tools,
    );
    response
}

/// No gateway tool runs: one provider call, relayed as it comes (a stream stays a stream).
async fn pass_through(prepared: Prepared, tally: &mut Tally) -> Result<Response, LlmError> {
    let provider = prepared.provider();
    let mut call = prepared.model_call();
    let deadline = Instant::now() + prepared.model.spec.timeout;
    let body = serde_json::to_vec(&prepared.body).unwrap_or_default();
    let response = provider
        .post(&prepared.endpoint, body, deadline, &mut call)
        .await?;
    tally.model_calls += 1;
    if prepared.stream && response.status().is_success() {
        return Ok(provider::relay_streaming(
            response,
            deadline,
            prepared.model.id().to_string(),
            call,
        ));
    }
    // Relayed as sent (status, headers such as request-id and rate limits, body bytes); read
    // only for the usage the metrics count.
    let answer = provider.read_whole(response, deadline, &mut call).await?;
    if answer.status.is_success()
        && let Some(value) = answer.json()
    {
        call.answered(&value);
        tally.usage += prepared.format.usage(&value);
    }
    Ok(answer.into_response())
}

/// `POST /v1/messages/count_tokens`: counted by the provider on the body the model would
/// get (the gateway's tools and carried work included).
pub async fn count_tokens(
    State(cx): State<Arc<LlmContext>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let format = Format::Anthropic;
    let prepared = match prepare(&cx, format, query, headers, &body).await {
        Ok(p) => p,
        Err(e) => return e.into_response(format),
    };
    let mut url = prepared.endpoint.clone();
    url.set_path(&format!("{}/count_tokens", url.path()));
    let provider: Provider<'_> = prepared.provider();
    let deadline = Instant::now() + prepared.model.spec.timeout;
    let mut body = prepared.body.clone();
    body.remove("stream");
    // Counting tokens is no chat: its HTTP exchange is traced under the request alone.
    let mut call = ModelCall::none(format);
    let result = async {
        let response = provider
            .post(
                &url,
                serde_json::to_vec(&body).unwrap_or_default(),
                deadline,
                &mut call,
            )
            .await?;
        provider.read_whole(response, deadline, &mut call).await
    }
    .await;
    match result {
        // The count (or the refusal) as the provider sent it.
        Ok(answer) => answer.into_response(),
        Err(e) => e.into_response(format),
    }
}

/// `GET /v1/models`: the models the key reaches, in a shape both SDKs read (Anthropic's
/// `data[].id`/`type`/`display_name`/`created_at` and `has_more`, OpenAI's `object`/`created`/
/// `owned_by`).
pub async fn models(State(cx): State<Arc<LlmContext>>, headers: HeaderMap) -> Response {
    let format = if headers.contains_key("anthropic-version") {
        Format::Anthropic
    } else {
        Format::OpenAi
    };
    let caller = match caller(&cx, headers).await {
        Ok(c) => c,
        Err(e) => {
            switchboard_core::audit::note(|n| e.note_in(n));
            return e.into_response(format);
        }
    };
    let data: Vec<Value> = caller
        .table
        .models
        .iter()
        .filter(|m| caller.reaches_model(&m.spec))
        .flat_map(|m| m.spec.client_names().map(move |name| (m, name)))
        .map(|(m, name)| {
            json!({
                "id": name,
                "type": "model",
                "object": "model",
                "display_name": name,
                "created_at": "1970-01-01T00:00:00Z",
                "created": 0,
                "owned_by": m.spec.provider.as_str(),
            })
        })
        .collect();
    let first = data.first().map(|m| m["id"].clone()).unwrap_or(Value::Null);
    let last = data.last().map(|m| m["id"].clone()).unwrap_or(Value::Null);
    (
        [(header::CACHE_CONTROL, "no-store")],
        Json(json!({
            "object": "list",
            "data": data,
            "has_more": false,
            "first_id": first,
            "last_id": last,
        })),
    )
        .into_response()
}
