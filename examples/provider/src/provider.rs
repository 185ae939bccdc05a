//! The provider endpoints. Every request is recorded first, then checked (API key, JSON
//! body), then answered by the script in the wire format of its path.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::answer::{self, estimate_tokens};
use crate::app::App;
use crate::script::ScriptedError;
use crate::{anthropic, auth, openai};

/// The model listed by `GET /v1/models` and answered when a request names none.
pub const MODEL: &str = "scripted-model";

#[derive(Clone, Copy)]
enum Wire {
    Anthropic,
    OpenAi,
}

impl Wire {
    fn authorized(self, app: &App, headers: &HeaderMap) -> bool {
        app.api_key.as_deref().is_none_or(|key| match self {
            Wire::Anthropic => auth::anthropic_ok(headers, key),
            Wire::OpenAi => auth::openai_ok(headers, key),
        })
    }

    fn refuse(self) -> Response {
        let status = StatusCode::UNAUTHORIZED;
        match self {
            Wire::Anthropic => anthropic::error(status, "invalid x-api-key"),
            Wire::OpenAi => openai::error(
                status,
                "Incorrect API key provided",
                Some("invalid_api_key"),
            ),
        }
    }

    fn bad_request(self, message: &str) -> Response {
        let status = StatusCode::BAD_REQUEST;
        match self {
            Wire::Anthropic => anthropic::error(status, message),
            Wire::OpenAi => openai::error(status, message, None),
        }
    }

    fn scripted_error(self, e: &ScriptedError) -> Response {
        let body = e.body.clone().unwrap_or_else(|| match self {
            Wire::Anthropic => anthropic::error_body(e.status, "scripted error"),
            Wire::OpenAi => openai::error_body(e.status, "scripted error", None),
        });
        let mut response = (e.status, Json(body)).into_response();
        for (name, value) in &e.headers {
            response.headers_mut().insert(name.clone(), value.clone());
        }
        response
    }
}

/// Records the request and parses its body (`None` if it is not JSON).
fn record(app: &App, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Option<Value> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    app.recorder
        .record(uri.path(), uri.query(), headers, parsed.clone());
    parsed
}

/// The checks every POST shares: the key, then a JSON object body. A refusal is the
/// response to send.
fn checked(
    wire: Wire,
    app: &App,
    headers: &HeaderMap,
    parsed: Option<Value>,
) -> Result<Value, Box<Response>> {
    if !wire.authorized(app, headers) {
        return Err(Box::new(wire.refuse()));
    }
    match parsed {
        Some(body @ Value::Object(_)) => Ok(body),
        Some(_) => Err(Box::new(
            wire.bad_request("the request body must be a JSON object"),
        )),
        None => Err(Box::new(
            wire.bad_request("the request body is not valid JSON"),
        )),
    }
}

pub async fn messages(
    State(app): State<Arc<App>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    model_call(Wire::Anthropic, &app, &uri, &headers, &body).await
}

pub async fn chat_completions(
    State(app): State<Arc<App>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    model_call(Wire::OpenAi, &app, &uri, &headers, &body).await
}

async fn model_call(wire: Wire, app: &App, uri: &Uri, headers: &HeaderMap, raw: &[u8]) -> Response {
    let parsed = record(app, uri, headers, raw);
    let body = match checked(wire, app, headers, parsed) {
        Ok(body) => body,
        Err(refused) => return *refused,
    };
    let conversation = match wire {
        Wire::Anthropic => anthropic::conversation(&body, raw.len()),
        Wire::OpenAi => openai::conversation(&body, raw.len()),
    };
    let respond = app.script.pick(&conversation);
    if let Some(ms) = respond.delay_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if let Some(e) = &respond.error {
        return wire.scripted_error(e);
    }
    let model = conversation
        .model
        .clone()
        .unwrap_or_else(|| MODEL.to_owned());
    let stream = conversation.stream;
    let answer = answer::build(respond, &conversation);
    match wire {
        Wire::Anthropic => anthropic::render(&answer, &model, stream),
        Wire::OpenAi => {
            let include_usage = body
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            openai::render(&answer, &model, stream, include_usage)
        }
    }
}

pub async fn count_tokens(
    State(app): State<Arc<App>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = record(&app, &uri, &headers, &body);
    match checked(Wire::Anthropic, &app, &headers, parsed) {
        Ok(_) => Json(json!({"input_tokens": estimate_tokens(body.len())})).into_response(),
        Err(refused) => *refused,
    }
}

/// `GET /v1/models`: either client's key is accepted; a refusal takes the shape of the
/// client the headers suggest.
pub async fn models(State(app): State<Arc<App>>, uri: Uri, headers: HeaderMap) -> Response {
    app.recorder.record(uri.path(), uri.query(), &headers, None);
    if !Wire::Anthropic.authorized(&app, &headers) && !Wire::OpenAi.authorized(&app, &headers) {
        let wire = if auth::looks_anthropic(&headers) {
            Wire::Anthropic
        } else {
            Wire::OpenAi
        };
        return wire.refuse();
    }
    Json(json!({
        "object": "list",
        "data": [{
            "id": MODEL,
            "object": "model",
            "type": "model",
            "display_name": "Scripted model",
            "created": 0,
            "created_at": "2025-01-01T00:00:00Z",
            "owned_by": "switchboard",
        }],
        "has_more": false,
        "first_id": MODEL,
        "last_id": MODEL,
    }))
    .into_response()
}
