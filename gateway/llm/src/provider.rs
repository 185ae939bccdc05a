//! Calls to a model's provider: the provider's credential in place of the gateway key, the
//! client's provider headers (`anthropic-version`, `anthropic-beta`, `openai-*`) passed on
//! as sent (never invented), one deadline per call, and answers relayed faithfully.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::Value;
use tokio::time::Instant;

use crate::errors::LlmError;
use crate::model_span::ModelCall;
use switchboard_core::table::Model;
use switchboard_upstream::error::ClientBuildError;
use switchboard_upstream::http_client::{self, HttpClient, HttpError, HttpResponse};

/// Largest provider answer read whole (a refusal, a non-streamed answer); a streamed one is
/// relayed or read one event at a time.
const MAX_PROVIDER_ANSWER: usize = 64 * 1024 * 1024;

/// Client headers that belong to the provider's API and go with every call.
fn is_provider_header(name: &HeaderName) -> bool {
    let name = name.as_str();
    (name.starts_with("anthropic-") || name.starts_with("openai-"))
        // Never the gateway key, whatever header it came in.
        && name != "x-api-key"
}

/// Provider answer headers a client may rely on (ids, rate limits); hop-by-hop and framing
/// headers are the gateway's own.
fn is_relayed_answer_header(name: &HeaderName) -> bool {
    let name = name.as_str();
    name == "content-type"
        || name == "retry-after"
        || name == "request-id"
        || name == "x-request-id"
        || name.starts_with("anthropic-")
        || name.starts_with("openai-")
        || name.starts_with("x-ratelimit-")
}

pub struct Provider<'a> {
    /// The client with the model's TLS settings, or why none could be built.
    http: Result<HttpClient, ClientBuildError>,
    pub model: &'a Model,
    headers: HeaderMap,
}

impl<'a> Provider<'a> {
    pub fn new(
        http: Result<HttpClient, ClientBuildError>,
        model: &'a Model,
        client_headers: &HeaderMap,
    ) -> Self {
        let headers = client_headers
            .iter()
            .filter(|(name, _)| is_provider_header(name))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        Provider {
            http,
            model,
            headers,
        }
    }

    /// Posts `body` to `url` (one of the model's endpoints), bounded by `deadline`, as `call`
    /// (whose span is the HTTP exchange's parent, and fails with a refusal or no answer).
    pub async fn post(
        &self,
        url: &url::Url,
        body: Vec<u8>,
        deadline: Instant,
        call: &mut ModelCall,
    ) -> Result<HttpResponse, LlmError> {
        let sent = async {
            let http = self
                .http
                .as_ref()
                .map_err(|detail| LlmError::ProviderUnavailable {
                    model: self.model.id().to_string(),
                    detail: detail.to_string(),
                })?;
            let mut request = http
                .post(url)
                .headers(self.headers.clone())
                .body("application/json", body);
            if let Some((name, value)) = &self.model.credential {
                request = request.header(name.clone(), value.clone());
            }
            match tokio::time::timeout_at(deadline, request.send()).await {
                Err(_) => Err(self.timeout()),
                Ok(Err(e)) => Err(self.unavailable(e)),
                Ok(Ok(response)) => Ok(response),
            }
        };
        use tracing::Instrument as _;
        let sent = sent.instrument(call.span().clone()).await;
        match &sent {
            Err(e) => call.failed(e),
            Ok(response) if response.status().as_u16() >= 400 => call.refused(response.status()),
            Ok(_) => {}
        }
        sent
    }

    /// A failed exchange, named by cause (a refused certificate says why), never by URL.
    fn unavailable(&self, error: HttpError) -> LlmError {
        LlmError::ProviderUnavailable {
            model: self.model.id().to_string(),
            detail: error.detail(self.model.tls.as_ref().is_some_and(|t| t.client.is_some())),
        }
    }

    pub fn timeout(&self) -> LlmError {
        LlmError::ProviderTimeout {
            model: self.model.id().to_string(),
            budget: self.model.spec.timeout,
        }
    }

    /// Reads an answer whole, to relay it as it is (a refusal, or a pass-through answer); a
    /// body that cannot be read fails `call`.
    pub(crate) async fn read_whole(
        &self,
        response: HttpResponse,
        deadline: Instant,
        call: &mut ModelCall,
    ) -> Result<Answer, LlmError> {
        let status = response.status();
        // Read inside the call's span: a span ends when it was last entered.
        use tracing::Instrument as _;
        let (headers, body) = self
            .read(response, deadline)
            .instrument(call.span().clone())
            .await
            .inspect_err(|e| call.failed(e))?;
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    async fn read(
        &self,
        response: HttpResponse,
        deadline: Instant,
    ) -> Result<(HeaderMap, Bytes), LlmError> {
        let (parts, body) = response.into_parts();
        let read = http_client::read_limited(body, MAX_PROVIDER_ANSWER);
        match tokio::time::timeout_at(deadline, read).await {
            Err(_) => Err(self.timeout()),
            Ok(Err(e)) => Err(self.unavailable(e)),
            Ok(Ok(b)) => Ok((parts.headers, b)),
        }
    }
}

/// A provider's answer read whole (a refusal, or a pass-through answer), kept to relay as it
/// was sent.
pub struct Answer {
    pub status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    /// Puts the answer's relayable headers (ids, rate limits) on another response.
    pub(crate) fn copy_headers_to(&self, to: &mut HeaderMap) {
        copy_answer_headers(&self.headers, to);
    }

    pub fn into_response(self) -> Response {
        relay_bytes(self.status, &self.headers, self.body)
    }

    /// The body, when it is a JSON object (the providers' error shapes are).
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice::<Value>(&self.body)
            .ok()
            .filter(Value::is_object)
    }
}

/// A provider answer, relayed with its status, relayable headers and body bytes.
fn relay_bytes(status: StatusCode, headers: &HeaderMap, body: Bytes) -> Response {
    let mut response = (status, body).into_response();
    copy_answer_headers(headers, response.headers_mut());
    response
}

/// A provider answer relayed as it arrives (a pass-through stream), bounded by `deadline`;
/// `call` lasts as long as the stream (whose usage the gateway does not read).
pub(crate) fn relay_streaming(
    response: HttpResponse,
    deadline: Instant,
    model: String,
    call: ModelCall,
) -> Response {
    let status = response.status();
    let headers = response.headers().clone();
    let body = http_client::byte_stream(response).map(move |chunk| {
        if Instant::now() >= deadline {
            return Err(std::io::Error::other(format!(
                "model {model:?} did not finish within its timeout"
            )));
        }
        chunk.map_err(|_| std::io::Error::other("the provider's stream broke"))
    });
    let body = Body::from_stream(TimeBounded::new(body, deadline, call));
    let mut out = (status, body).into_response();
    copy_answer_headers(&headers, out.headers_mut());
    out
}

fn copy_answer_headers(from: &HeaderMap, to: &mut HeaderMap) {
    for (name, value) in from {
        if is_relayed_answer_header(name) {
            to.insert(name.clone(), value.clone());
        }
    }
}

/// Ends a relayed stream at its deadline even when the provider goes silent; a stream that
/// ends in an error fails the model call's span.
struct TimeBounded<S> {
    inner: S,
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
    call: ModelCall,
}

impl<S> TimeBounded<S> {
    fn new(inner: S, deadline: Instant, call: ModelCall) -> Self {
        TimeBounded {
            inner,
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            call,
        }
    }
}

impl<S> futures_util::Stream for TimeBounded<S>
where
    S: futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Unpin,
{
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        // Polled inside the call's span: a span ends when it was last entered.
        let span = self.call.span().clone();
        let _inside = span.enter();
        let polled = if self.sleep.as_mut().poll(cx).is_ready() {
            std::task::Poll::Ready(Some(Err(std::io::Error::other(
                "the model did not finish within its timeout",
            ))))
        } else {
            self.inner.poll_next_unpin(cx)
        };
        if let std::task::Poll::Ready(Some(Err(e))) = &polled {
            let detail = e.to_string();
            self.call
                .stream_failed("provider_stream_broken", Some(detail));
        }
        polled
    }
}

use std::future::Future;
