//! The loop, streamed: one well-formed stream for the whole loop, in the client's format.
//!
//! Text (and thinking) is relayed event by event as the provider sends it, with content-block
//! indices renumbered across iterations. Calls of gateway tools are never relayed; calls of
//! client tools are held until their iteration ends (only then is it known whether the turn
//! carries a record, which goes in the first client call's id). While gateway tools run the
//! client gets pings. Usage is summed into the final delta. A provider stream that breaks
//! becomes an error event, never a hang.
//!
//! Rooms: `round` (what every format shares), `messages` (Anthropic Messages) and
//! `chat_completions` (OpenAI Chat Completions), each format's loop.

mod chat_completions;
mod messages;
mod round;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::Stream;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::format::Format;
use crate::record::{provider_outcome, record};
use crate::run::{Prepared, Tally};

use chat_completions::openai_loop;
use messages::anthropic_loop;
use round::{Out, call};

/// Starts the streamed loop: the first provider call is made here, so that a provider that
/// refuses the request is answered with its own status and body, not a stream.
pub async fn start(mut prepared: Prepared, started: Instant) -> Response {
    let format = prepared.format;
    let client_wants_usage = prepared
        .body
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if format == Format::OpenAi {
        // Usage is summed over iterations: ask for it, and pass it on only if the client did.
        let options = prepared
            .body
            .entry("stream_options")
            .or_insert_with(|| json!({}));
        if let Value::Object(o) = options {
            o.insert("include_usage".into(), Value::Bool(true));
        }
    }
    let mut tally = Tally::default();
    let first = match call(&prepared, &mut tally).await {
        Ok(Ok(reader)) => reader,
        Ok(Err(refusal)) => {
            finish_record(&prepared, provider_outcome(refusal.status), &tally, started);
            return refusal.into_response();
        }
        Err(e) => {
            finish_record(&prepared, e.kind(), &tally, started);
            return e.into_response(format);
        }
    };
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    // The loop runs in a task of its own: in the request's audit slot, so what it notes (the
    // tokens, the providers' statuses) lands in the request's record, written when the stream
    // it feeds ends.
    let slot = switchboard_core::audit::current();
    let looped = async move {
        let mut out = Out::new(tx);
        let outcome = match format {
            Format::Anthropic => anthropic_loop(&mut prepared, first, &mut out, &mut tally).await,
            Format::OpenAi => {
                openai_loop(
                    &mut prepared,
                    first,
                    &mut out,
                    &mut tally,
                    client_wants_usage,
                )
                .await
            }
        };
        finish_record(&prepared, outcome, &tally, started);
    };
    use tracing::Instrument as _;
    let span = tracing::Span::current();
    tokio::spawn(
        async move {
            match slot {
                Some(slot) => slot.scope(looped).await,
                None => looped.await,
            }
        }
        .instrument(span),
    );
    let body = Body::from_stream(tokio_stream_of(rx));
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn finish_record(prepared: &Prepared, outcome: &'static str, tally: &Tally, started: Instant) {
    record(
        &prepared.cx,
        &prepared.model,
        prepared.format,
        outcome,
        tally,
        started,
        &prepared.caller.who(),
        prepared.tools.tools.len(),
    );
}

fn tokio_stream_of(
    mut rx: mpsc::Receiver<Bytes>,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|b| b.map(Ok)))
}
