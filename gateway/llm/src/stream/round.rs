//! What every format's streamed loop shares: the client's stream (`Out`), a provider's events,
//! how an iteration ends, the provider call, pings while gateway tools run, the next round.

use std::time::Duration;
use switchboard_upstream::http_client::{self, ByteStream};

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::errors::LlmError;
use crate::format::Format;
use crate::model_span::ModelCall;
use crate::provider::Answer;
use crate::run::{Prepared, Tally, execute};
use crate::turn::{Executed, Usage};
use switchboard_protocol::sse::{SseDecoder, SseEvent};

/// Largest single provider event accepted.
pub(super) const MAX_EVENT: usize = 16 * 1024 * 1024;
/// How often the client hears from the gateway while its tools run.
pub(super) const PING_EVERY: Duration = Duration::from_secs(5);

/// The client's side of the stream; a client that went away stops the loop.
pub(super) struct Out {
    tx: mpsc::Sender<Bytes>,
    pub(super) closed: bool,
}

impl Out {
    pub(super) fn new(tx: mpsc::Sender<Bytes>) -> Out {
        Out { tx, closed: false }
    }

    pub(super) async fn send(&mut self, bytes: Bytes) {
        if !self.closed && self.tx.send(bytes).await.is_err() {
            self.closed = true;
        }
    }

    pub(super) async fn event(&mut self, name: &str, data: &Value) {
        self.send(encode(Some(name), data)).await;
    }

    pub(super) async fn data(&mut self, data: &Value) {
        self.send(encode(None, data)).await;
    }
}

/// One event on the wire, written once into a buffer of about its size. The data is compact
/// JSON, which holds no line end, so it is a single `data:` line.
pub(super) fn encode(name: Option<&str>, data: &Value) -> Bytes {
    let mut out = Vec::with_capacity(256);
    if let Some(name) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    // Writing a `Value` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut out, data);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// The provider's events, one at a time, within a deadline.
pub(super) struct Events {
    body: ByteStream,
    decoder: SseDecoder,
    deadline: Instant,
    /// The call's span, ended with the turn ([`Events::turn_ended`], [`Events::ended_early`]).
    call: ModelCall,
}

impl Events {
    /// The next event; `Ok(None)` at the end of the stream; `Err` when it broke or the client
    /// went away (then the provider call is dropped: no more tokens are spent on it).
    pub(super) async fn next(&mut self, client: &Out) -> Result<Option<SseEvent>, TurnEnd> {
        loop {
            match self.decoder.next_event() {
                Ok(Some(event)) => return Ok(Some(event)),
                Ok(None) => {}
                Err(e) => return Err(TurnEnd::Broken(format!("{e:?}"))),
            }
            // Read inside the call's span: a span ends when it was last entered.
            use tracing::Instrument as _;
            let read = tokio::time::timeout_at(self.deadline, self.body.next())
                .instrument(self.call.span().clone());
            let chunk = tokio::select! {
                chunk = read => chunk,
                () = client.tx.closed() => return Err(TurnEnd::ClientGone),
            };
            match chunk {
                Err(_) => {
                    return Err(TurnEnd::Broken(
                        "the model did not finish within its timeout".into(),
                    ));
                }
                Ok(None) => return Ok(None),
                Ok(Some(Err(e))) => return Err(TurnEnd::Broken(e.to_string())),
                Ok(Some(Ok(chunk))) => self.decoder.push(&chunk),
            }
        }
    }
}

impl Events {
    /// The turn's stream ended whole: what it said about itself (never its content).
    pub(super) fn turn_ended(
        &mut self,
        model: Option<&str>,
        finish_reason: Option<&Value>,
        usage: Usage,
    ) {
        self.call
            .streamed(model, finish_reason.and_then(Value::as_str), usage);
    }

    /// The turn's stream ended early: the provider's failure, not a client that went away.
    pub(super) fn ended_early(&mut self, end: &TurnEnd) {
        match end {
            TurnEnd::Broken(message) => self
                .call
                .stream_failed("provider_stream_broken", Some(message.clone())),
            TurnEnd::Provider(_) => self.call.stream_failed("provider_stream_error", None),
            TurnEnd::ClientGone => {}
        }
    }
}

/// Why an iteration's stream ended early.
pub(super) enum TurnEnd {
    /// The provider's stream broke (or timed out): the client gets an error of the gateway's.
    Broken(String),
    /// The provider sent an error event: the client gets it as it was sent.
    Provider(Value),
    /// The client went away.
    ClientGone,
}

impl TurnEnd {
    /// Tells the client (if it is still there) and returns the outcome to record.
    pub(super) async fn finish(self, out: &mut Out, format: Format) -> &'static str {
        match self {
            TurnEnd::Broken(message) => {
                stream_error(out, format, &message).await;
                "provider_stream_broken"
            }
            TurnEnd::Provider(data) => {
                match format {
                    Format::Anthropic => out.event("error", &data).await,
                    Format::OpenAi => out.data(&data).await,
                }
                "provider_stream_error"
            }
            TurnEnd::ClientGone => "client_gone",
        }
    }
}

/// One streamed provider call: its events, or the provider's refusal to relay.
pub(super) async fn call(
    prepared: &Prepared,
    tally: &mut Tally,
) -> Result<Result<Events, Answer>, LlmError> {
    let provider = prepared.provider();
    let mut call = prepared.model_call();
    let deadline = Instant::now() + prepared.model.spec.timeout;
    let body = serde_json::to_vec(&prepared.body).unwrap_or_default();
    let response = provider
        .post(&prepared.endpoint, body, deadline, &mut call)
        .await?;
    tally.model_calls += 1;
    if !response.status().is_success() {
        return Ok(Err(provider
            .read_whole(response, deadline, &mut call)
            .await?));
    }
    Ok(Ok(Events {
        body: http_client::byte_stream(response),
        decoder: SseDecoder::new(MAX_EVENT),
        deadline,
        call,
    }))
}

/// Runs the gateway's calls while pinging the client (`ping` is one encoded event).
pub(super) async fn execute_with_pings<'t>(
    prepared: &'t Prepared,
    calls: Vec<&crate::turn::Call>,
    tally: &mut Tally,
    out: &mut Out,
    ping: &'static [u8],
) -> Vec<Executed<'t>> {
    out.send(Bytes::from_static(ping)).await;
    let run = execute(prepared, calls, tally);
    tokio::pin!(run);
    let mut ticks = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
    loop {
        tokio::select! {
            executed = &mut run => return executed,
            _ = ticks.tick() => out.send(Bytes::from_static(ping)).await,
        }
    }
}

/// The stream's last word when the loop cannot go on: an `error` event (Anthropic) or an
/// error chunk (OpenAI), never a clean end that would pass for a whole answer.
pub(super) async fn stream_error(out: &mut Out, format: Format, message: &str) {
    match format {
        Format::Anthropic => {
            out.event(
                "error",
                &json!({"type": "error", "error": {"type": "api_error", "message": message}}),
            )
            .await
        }
        Format::OpenAi => {
            out.data(&json!({"error": {"message": message, "type": "server_error", "code": "provider_stream_broken"}}))
                .await
        }
    }
}

/// Appends an iteration that ended in gateway calls only and starts the next provider call;
/// an error is the outcome to record (the client was told).
pub(super) async fn next_round(
    prepared: &mut Prepared,
    carry: &mut crate::carry::Carry,
    messages: Vec<Value>,
    out: &mut Out,
    tally: &mut Tally,
) -> Result<Events, &'static str> {
    prepared.append(carry, messages);
    if out.closed {
        return Err("client_gone");
    }
    match next_iteration(prepared, tally).await {
        Ok(events) => Ok(events),
        Err(end) => Err(end.finish(out, prepared.format).await),
    }
}

/// The provider call of a later iteration; a refusal is passed on as the provider's own error
/// event when its body is one.
pub(super) async fn next_iteration(
    prepared: &Prepared,
    tally: &mut Tally,
) -> Result<Events, TurnEnd> {
    match call(prepared, tally).await {
        Ok(Ok(events)) => Ok(events),
        Ok(Err(refusal)) => Err(match refusal.json() {
            Some(body) if body.get("error").is_some() => TurnEnd::Provider(body),
            _ => TurnEnd::Broken(format!(
                "the model refused a later iteration (HTTP {})",
                refusal.status.as_u16()
            )),
        }),
        Err(e) => Err(TurnEnd::Broken(e.to_string())),
    }
}
