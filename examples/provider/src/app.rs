//! The shared state, the routes, the test control endpoints and the one-line request log.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::provider;
use crate::record::Recorder;
use crate::script::{self, Script};

/// Largest request body accepted (long agent conversations are big).
const BODY_LIMIT: usize = 64 * 1024 * 1024;

pub struct App {
    pub script: Script,
    pub recorder: Recorder,
    pub api_key: Option<String>,
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/messages", post(provider::messages))
        .route("/v1/messages/count_tokens", post(provider::count_tokens))
        .route("/v1/chat/completions", post(provider::chat_completions))
        .route("/v1/models", get(provider::models))
        .route("/_script", post(set_script))
        .route("/_reset", post(reset))
        .route("/_requests", get(requests))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn(log))
        .with_state(app)
}

/// `POST /_script`: replaces the rules (`{"rules": N}`), or 400 `{"error": ...}` naming what
/// is wrong (the old rules stay).
async fn set_script(State(app): State<Arc<App>>, body: Bytes) -> Response {
    match script::parse(&body) {
        Ok(rules) => {
            let n = rules.len();
            app.script.replace(rules);
            Json(json!({"rules": n})).into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, Json(json!({"error": e}))).into_response(),
    }
}

/// `POST /_reset`: no rules, no recordings (204).
async fn reset(State(app): State<Arc<App>>) -> StatusCode {
    app.script.replace(Vec::new());
    app.recorder.clear();
    StatusCode::NO_CONTENT
}

async fn requests(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    Json(app.recorder.all())
}

/// One line per request on stderr: method, path (no query) and status; never a body.
async fn log(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    tracing::info!("{method} {path} {}", response.status().as_u16());
    response
}
