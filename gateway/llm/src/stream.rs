//! The loop, streamed: one well-formed stream for the whole loop, in the client's format.
//!
//! Text (and thinking) is relayed event by event as the provider sends it, with content-block
//! indices renumbered across iterations. Calls of gateway tools are never relayed; calls of
//! client tools are held until their iteration ends (only then is it known whether the turn
//! carries a record, which goes in the first client call's id). While gateway tools run the
//! client gets pings. Usage is summed into the final delta. A provider stream that breaks
//! becomes an error event, never a hang.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write as _;
use std::pin::Pin;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::anthropic;
use crate::errors::LlmError;
use crate::format::Format;
use crate::openai;
use crate::provider::Answer;
use crate::record::{provider_outcome, record};
use crate::run::{Prepared, Tally, execute};
use crate::turn::{Executed, Usage};
use switchboard_protocol::sse::{SseDecoder, SseEvent};

/// Largest single provider event accepted.
const MAX_EVENT: usize = 16 * 1024 * 1024;
/// How often the client hears from the gateway while its tools run.
const PING_EVERY: Duration = Duration::from_secs(5);

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
    tokio::spawn(async move {
        let mut out = Out { tx, closed: false };
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
    });
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
        &prepared.caller.key.name,
        prepared.tools.tools.len(),
    );
}

fn tokio_stream_of(
    mut rx: mpsc::Receiver<Bytes>,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|b| b.map(Ok)))
}

/// The client's side of the stream; a client that went away stops the loop.
struct Out {
    tx: mpsc::Sender<Bytes>,
    closed: bool,
}

impl Out {
    async fn send(&mut self, bytes: Bytes) {
        if !self.closed && self.tx.send(bytes).await.is_err() {
            self.closed = true;
        }
    }

    async fn event(&mut self, name: &str, data: &Value) {
        self.send(encode(Some(name), data)).await;
    }

    async fn data(&mut self, data: &Value) {
        self.send(encode(None, data)).await;
    }
}

/// One event on the wire, written once into a buffer of about its size. The data is compact
/// JSON, which holds no line end, so it is a single `data:` line.
fn encode(name: Option<&str>, data: &Value) -> Bytes {
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
struct Events {
    body: Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>,
    decoder: SseDecoder,
    deadline: Instant,
}

impl Events {
    /// The next event; `Ok(None)` at the end of the stream; `Err` when it broke or the client
    /// went away (then the provider call is dropped: no more tokens are spent on it).
    async fn next(&mut self, client: &Out) -> Result<Option<SseEvent>, TurnEnd> {
        loop {
            match self.decoder.next_event() {
                Ok(Some(event)) => return Ok(Some(event)),
                Ok(None) => {}
                Err(e) => return Err(TurnEnd::Broken(format!("{e:?}"))),
            }
            let chunk = tokio::select! {
                chunk = tokio::time::timeout_at(self.deadline, self.body.next()) => chunk,
                () = client.tx.closed() => return Err(TurnEnd::ClientGone),
            };
            match chunk {
                Err(_) => {
                    return Err(TurnEnd::Broken(
                        "the model did not finish within its timeout".into(),
                    ));
                }
                Ok(None) => return Ok(None),
                Ok(Some(Err(e))) => return Err(TurnEnd::Broken(e.without_url().to_string())),
                Ok(Some(Ok(chunk))) => self.decoder.push(&chunk),
            }
        }
    }
}

/// Why an iteration's stream ended early.
enum TurnEnd {
    /// The provider's stream broke (or timed out): the client gets an error of the gateway's.
    Broken(String),
    /// The provider sent an error event: the client gets it as it was sent.
    Provider(Value),
    /// The client went away.
    ClientGone,
}

impl TurnEnd {
    /// Tells the client (if it is still there) and returns the outcome to record.
    async fn finish(self, out: &mut Out, format: Format) -> &'static str {
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
async fn call(prepared: &Prepared, tally: &mut Tally) -> Result<Result<Events, Answer>, LlmError> {
    let provider = prepared.provider();
    let deadline = Instant::now() + prepared.model.spec.timeout;
    let body = serde_json::to_vec(&prepared.body).unwrap_or_default();
    let response = provider.post(&prepared.endpoint, body, deadline).await?;
    tally.model_calls += 1;
    if !response.status().is_success() {
        return Ok(Err(provider.read_whole(response, deadline).await?));
    }
    Ok(Ok(Events {
        body: Box::pin(response.bytes_stream()),
        decoder: SseDecoder::new(MAX_EVENT),
        deadline,
    }))
}

/// Runs the gateway's calls while pinging the client (`ping` is one encoded event).
async fn execute_with_pings<'t>(
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

// ---------------------------------------------------------------------------------------------
// Anthropic

/// What happens to a provider content block.
enum Route {
    /// Relayed under the client's index.
    Relayed(u64),
    /// A client tool call, held until the iteration ends (index into `held`).
    Held(usize),
    /// A gateway tool call: never relayed.
    Gateway,
}

/// One provider iteration, as it was streamed.
#[derive(Default)]
struct AnthropicTurn {
    /// The assembled content blocks, by provider index.
    blocks: Vec<Value>,
    /// Partial JSON of tool inputs, by provider index.
    inputs: HashMap<u64, String>,
    routes: HashMap<u64, Route>,
    /// Events of held client calls: (provider index, events).
    held: Vec<(u64, Vec<(String, Value)>)>,
    stop_reason: Option<Value>,
    stop_sequence: Value,
    usage: Usage,
}

async fn anthropic_loop(
    prepared: &mut Prepared,
    first: Events,
    out: &mut Out,
    tally: &mut Tally,
) -> &'static str {
    let mut events = first;
    let mut next_index: u64 = 0;
    let mut carry = prepared.new_carry();
    let max = prepared.model.spec.max_iterations;
    let ping: &'static [u8] = b"event: ping\ndata: {\"type\": \"ping\"}\n\n";
    for iteration in 1..=max {
        let turn_start = next_index;
        let turn = match anthropic_turn(prepared, &mut events, out, &mut next_index, iteration == 1)
            .await
        {
            Ok(turn) => turn,
            Err(end) => return end.finish(out, Format::Anthropic).await,
        };
        tally.usage += turn.usage;
        let response = json!({"content": turn.blocks, "stop_reason": turn.stop_reason});
        // Gateway calls were never relayed; cut off by max_tokens they are not run either.
        let calls = Format::Anthropic.runnable_calls(&response);
        let (ours, theirs) = prepared.split(&calls);
        let executed = if ours.is_empty() {
            Vec::new()
        } else {
            execute_with_pings(prepared, ours, tally, out, ping).await
        };
        for e in &executed {
            for block in anthropic::display_blocks(e) {
                emit_whole_block(out, next_index, block).await;
                next_index += 1;
            }
        }
        let limit = iteration == max && !executed.is_empty() && theirs == 0;
        if executed.is_empty() || theirs > 0 || limit {
            let (c, r) = Format::Anthropic.carried_calls(&response, &executed);
            carry.calls = c;
            carry.results = r;
            carry.shown = turn_start as usize;
            let first_held = turn.held.first().map(|(i, _)| *i);
            carry.id = first_held
                .and_then(|i| turn.blocks.get(i as usize))
                .and_then(|b| b.get("id").and_then(Value::as_str))
                .map(str::to_owned);
            let token = if carry.is_empty() {
                None
            } else {
                prepared.seal(carry)
            };
            for (n, (_, held)) in turn.held.iter().enumerate() {
                for (name, mut data) in held.iter().cloned() {
                    data["index"] = json!(next_index);
                    if n == 0
                        && name == "content_block_start"
                        && let Some(token) = &token
                        && let Some(block) =
                            data.get_mut("content_block").and_then(Value::as_object_mut)
                    {
                        block.insert("id".into(), json!(anthropic::carried_id(token)));
                    }
                    out.event(&name, &data).await;
                }
                next_index += 1;
            }
            if let (Some(token), None) = (&token, first_held) {
                emit_whole_block(out, next_index, anthropic::carrier_block(token)).await;
            }
            let stop_reason = if limit {
                json!("pause_turn")
            } else {
                turn.stop_reason.unwrap_or(Value::Null)
            };
            out.event(
                "message_delta",
                &json!({
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": turn.stop_sequence},
                    "usage": anthropic::usage_json(tally.usage),
                }),
            )
            .await;
            out.event("message_stop", &json!({"type": "message_stop"}))
                .await;
            return "ok";
        }
        let messages = Format::Anthropic.iteration_messages(&response, &executed);
        drop(executed);
        events = match next_round(prepared, &mut carry, messages, out, tally).await {
            Ok(events) => events,
            Err(outcome) => return outcome,
        };
    }
    "ok"
}

/// The stream's last word when the loop cannot go on: an `error` event (Anthropic) or an
/// error chunk (OpenAI), never a clean end that would pass for a whole answer.
async fn stream_error(out: &mut Out, format: Format, message: &str) {
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
async fn next_round(
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
async fn next_iteration(prepared: &Prepared, tally: &mut Tally) -> Result<Events, TurnEnd> {
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

/// A block sent whole: start (with its full content) and stop.
async fn emit_whole_block(out: &mut Out, index: u64, block: Value) {
    out.event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": block}),
    )
    .await;
    out.event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": index}),
    )
    .await;
}

/// Relays one provider iteration and assembles it.
async fn anthropic_turn(
    prepared: &Prepared,
    events: &mut Events,
    out: &mut Out,
    next_index: &mut u64,
    first_iteration: bool,
) -> Result<AnthropicTurn, TurnEnd> {
    let mut turn = AnthropicTurn::default();
    loop {
        let Some(event) = events.next(out).await? else {
            return Err(TurnEnd::Broken(
                "the model's stream ended before message_stop".into(),
            ));
        };
        // Nearly every event is a text, thinking or tool-input piece: read through a borrowed
        // view, assembled, and relayed with the provider's own `delta` bytes (no `Value` built
        // and written again). A held client call's pieces go the general way.
        if let Some(piece) = TokenDelta::of(&event)
            && !matches!(turn.routes.get(&piece.index), Some(Route::Held(_)))
        {
            piece.assemble(&mut turn);
            if let Some(Route::Relayed(ours)) = turn.routes.get(&piece.index) {
                out.send(piece.encode(*ours)).await;
            }
            if out.closed {
                return Err(TurnEnd::ClientGone);
            }
            continue;
        }
        // Only objects are events of the Messages stream; anything else is passed over.
        let Ok(mut data @ Value::Object(_)) = serde_json::from_str::<Value>(&event.data) else {
            continue;
        };
        let name = event
            .event
            .clone()
            .or_else(|| data.get("type").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_default();
        let index = data.get("index").and_then(Value::as_u64);
        match name.as_str() {
            "message_start" => {
                turn.usage += anthropic::usage(data.pointer("/message/usage"));
                if first_iteration {
                    out.event(&name, &data).await;
                }
            }
            "content_block_start" => {
                let Some(index) = index else { continue };
                let block = data
                    .get("content_block")
                    .filter(|b| b.is_object())
                    .cloned()
                    .unwrap_or(json!({}));
                let is_tool = block.get("type").and_then(Value::as_str) == Some("tool_use");
                let tool_name = block.get("name").and_then(Value::as_str).unwrap_or("");
                let route = if is_tool && prepared.tools.gateway_run(tool_name).is_some() {
                    Route::Gateway
                } else if is_tool {
                    turn.held.push((index, vec![(name.clone(), data.clone())]));
                    Route::Held(turn.held.len() - 1)
                } else {
                    data["index"] = json!(*next_index);
                    out.event(&name, &data).await;
                    *next_index += 1;
                    Route::Relayed(*next_index - 1)
                };
                turn.routes.insert(index, route);
                set_block(&mut turn.blocks, index, block);
            }
            "content_block_delta" | "content_block_stop" => {
                let Some(index) = index else { continue };
                if name == "content_block_delta" {
                    assemble_delta(&mut turn, index, data.get("delta"));
                } else {
                    finish_block(&mut turn, index);
                }
                match turn.routes.get(&index) {
                    Some(Route::Relayed(ours)) => {
                        data["index"] = json!(*ours);
                        out.event(&name, &data).await;
                    }
                    Some(Route::Held(i)) => turn.held[*i].1.push((name.clone(), data)),
                    Some(Route::Gateway) | None => {}
                }
            }
            "message_delta" => {
                turn.stop_reason = data.pointer("/delta/stop_reason").cloned();
                turn.stop_sequence = data
                    .pointer("/delta/stop_sequence")
                    .cloned()
                    .unwrap_or(Value::Null);
                let delta = anthropic::usage(data.get("usage"));
                // `output_tokens` here is the iteration's total so far, not an increment.
                turn.usage.output = delta.output;
            }
            "message_stop" => return Ok(turn),
            "ping" => out.event(&name, &data).await,
            "error" => return Err(TurnEnd::Provider(data)),
            _ => {}
        }
        if out.closed {
            return Err(TurnEnd::ClientGone);
        }
    }
}

fn set_block(blocks: &mut Vec<Value>, index: u64, block: Value) {
    let i = index as usize;
    // Indices are small and dense; a hostile index cannot make this grow without bound.
    if i > 4096 {
        return;
    }
    if blocks.len() <= i {
        blocks.resize(i + 1, Value::Null);
    }
    blocks[i] = block;
}

fn assemble_delta(turn: &mut AnthropicTurn, index: u64, delta: Option<&Value>) {
    let Some(delta) = delta else { return };
    let piece = |field: &str| delta.get(field).and_then(Value::as_str);
    match delta.get("type").and_then(Value::as_str) {
        Some("input_json_delta") => {
            if let Some(p) = piece("partial_json") {
                push_input(turn, index, p);
            }
        }
        Some("text_delta") => append_piece(turn, index, "text", piece("text")),
        Some("thinking_delta") => append_piece(turn, index, "thinking", piece("thinking")),
        Some("signature_delta") => append_piece(turn, index, "signature", piece("signature")),
        Some("citations_delta") => {
            let Some(Value::Object(block)) = turn.blocks.get_mut(index as usize) else {
                return;
            };
            if let Some(citation) = delta.get("citation") {
                match block.get_mut("citations") {
                    Some(Value::Array(c)) => c.push(citation.clone()),
                    _ => {
                        block.insert("citations".into(), json!([citation]));
                    }
                }
            }
        }
        _ => {}
    }
}

fn push_input(turn: &mut AnthropicTurn, index: u64, piece: &str) {
    turn.inputs.entry(index).or_default().push_str(piece);
}

/// Appends a piece to a field of an assembled block, in place: a long answer arrives in
/// thousands of pieces.
fn append_piece(turn: &mut AnthropicTurn, index: u64, field: &str, piece: Option<&str>) {
    let Some(piece) = piece else { return };
    let Some(Value::Object(block)) = turn.blocks.get_mut(index as usize) else {
        return;
    };
    match block.get_mut(field) {
        Some(Value::String(text)) => text.push_str(piece),
        _ => {
            block.insert(field.into(), Value::String(piece.to_string()));
        }
    }
}

/// A `content_block_delta` event holding a text, thinking or tool-input piece, exactly as the
/// Messages API streams them: `{"type", "index", "delta": {"type", <piece>}}`. Anything else
/// (another top-level field, a duplicate, a piece that is not a string, data on several lines)
/// is not one, and goes the general way.
struct TokenDelta<'a> {
    index: u64,
    field: &'static str,
    piece: Cow<'a, str>,
    /// The provider's `delta` object, relayed as it came.
    delta: &'a RawValue,
}

impl<'a> TokenDelta<'a> {
    fn of(event: &'a SseEvent) -> Option<TokenDelta<'a>> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Event<'a> {
            #[serde(rename = "type")]
            kind: &'a str,
            index: u64,
            #[serde(borrow)]
            delta: &'a RawValue,
        }
        /// A string, borrowed unless it has escapes.
        #[derive(Deserialize)]
        struct Str<'a>(#[serde(borrow)] Cow<'a, str>);
        #[derive(Deserialize)]
        struct Piece<'a> {
            #[serde(rename = "type")]
            kind: &'a str,
            #[serde(borrow, default)]
            text: Option<Str<'a>>,
            #[serde(borrow, default)]
            thinking: Option<Str<'a>>,
            #[serde(borrow, default)]
            partial_json: Option<Str<'a>>,
        }
        if event
            .event
            .as_deref()
            .is_some_and(|name| name != "content_block_delta")
            || event.data.contains(['\n', '\r'])
        {
            return None;
        }
        let e: Event<'a> = serde_json::from_str(&event.data).ok()?;
        if e.kind != "content_block_delta" {
            return None;
        }
        let p: Piece<'a> = serde_json::from_str(e.delta.get()).ok()?;
        let (field, piece) = match p.kind {
            "text_delta" => ("text", p.text?),
            "thinking_delta" => ("thinking", p.thinking?),
            "input_json_delta" => ("partial_json", p.partial_json?),
            _ => return None,
        };
        Some(TokenDelta {
            index: e.index,
            field,
            piece: piece.0,
            delta: e.delta,
        })
    }

    /// What [`assemble_delta`] does with the same event.
    fn assemble(&self, turn: &mut AnthropicTurn) {
        match self.field {
            "partial_json" => push_input(turn, self.index, &self.piece),
            field => append_piece(turn, self.index, field, Some(&self.piece)),
        }
    }

    /// The event under the client's block index.
    fn encode(&self, index: u64) -> Bytes {
        let delta = self.delta.get();
        let mut out = Vec::with_capacity(delta.len() + 96);
        out.extend_from_slice(
            b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":",
        );
        let _ = write!(out, "{index}");
        out.extend_from_slice(b",\"delta\":");
        out.extend_from_slice(delta.as_bytes());
        out.extend_from_slice(b"}\n\n");
        Bytes::from(out)
    }
}

fn finish_block(turn: &mut AnthropicTurn, index: u64) {
    let Some(partial) = turn.inputs.remove(&index) else {
        return;
    };
    if let Some(Value::Object(block)) = turn.blocks.get_mut(index as usize) {
        let input = if partial.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str(&partial).unwrap_or(Value::String(partial))
        };
        block.insert("input".into(), input);
    }
}

// ---------------------------------------------------------------------------------------------
// OpenAI

/// One provider iteration of chunks, assembled.
#[derive(Default)]
struct OpenAiTurn {
    text: String,
    /// Tool calls by the provider's index: id, name, arguments.
    calls: Vec<(u64, String, String, String)>,
    finish_reason: Option<Value>,
    usage: Usage,
}

async fn openai_loop(
    prepared: &mut Prepared,
    first: Events,
    out: &mut Out,
    tally: &mut Tally,
    client_wants_usage: bool,
) -> &'static str {
    let mut events = first;
    let mut carry = prepared.new_carry();
    let mut merged = openai::Merged::default();
    let mut template: Option<Value> = None;
    let max = prepared.model.spec.max_iterations;
    // OpenAI streams have no ping event; an SSE comment keeps the connection alive.
    let ping: &'static [u8] = b": ping\n\n";
    for iteration in 1..=max {
        let turn = match openai_turn(&mut events, out, &merged, &mut template, iteration == 1).await
        {
            Ok(turn) => turn,
            Err(end) => return end.finish(out, Format::OpenAi).await,
        };
        tally.usage += turn.usage;
        let tool_calls: Vec<Value> = turn
            .calls
            .iter()
            .map(|(_, id, name, arguments)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
            })
            .collect();
        let mut message = json!({"role": "assistant", "content": if turn.text.is_empty() { Value::Null } else { json!(turn.text) }});
        if !tool_calls.is_empty() {
            message["tool_calls"] = Value::Array(tool_calls);
        }
        let response =
            json!({"choices": [{"message": message, "finish_reason": turn.finish_reason}]});
        let calls = Format::OpenAi.runnable_calls(&response);
        let (ours, theirs) = prepared.split(&calls);
        let executed = if ours.is_empty() {
            Vec::new()
        } else {
            execute_with_pings(prepared, ours, tally, out, ping).await
        };
        let limit = iteration == max && !executed.is_empty() && theirs == 0;
        if executed.is_empty() || theirs > 0 || limit {
            // The gateway's own chunks look like the provider's first one.
            let chunk_template = template
                .clone()
                .unwrap_or_else(|| json!({"object": "chat.completion.chunk"}));
            let (c, r) = Format::OpenAi.carried_calls(&response, &executed);
            carry.calls = c;
            carry.results = r;
            let client_calls: Vec<&(u64, String, String, String)> = turn
                .calls
                .iter()
                .filter(|(_, _, name, _)| prepared.tools.gateway_run(name).is_none())
                .collect();
            carry.id = client_calls.first().map(|c| c.1.clone());
            let token = if carry.is_empty() || carry.id.is_none() {
                None
            } else {
                prepared.seal(carry)
            };
            if !client_calls.is_empty() {
                let entries: Vec<Value> = client_calls
                    .iter()
                    .enumerate()
                    .map(|(i, (_, id, name, arguments))| {
                        let id = match (&token, i) {
                            (Some(t), 0) => openai::carried_id(t),
                            _ => id.clone(),
                        };
                        json!({"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
                    })
                    .collect();
                out.data(&chunk(
                    &chunk_template,
                    json!({"tool_calls": entries}),
                    Value::Null,
                ))
                .await;
            }
            let finish = if client_calls.is_empty() {
                if turn.finish_reason.as_ref().and_then(Value::as_str) == Some("tool_calls") {
                    json!("stop")
                } else {
                    turn.finish_reason.unwrap_or(json!("stop"))
                }
            } else {
                json!("tool_calls")
            };
            out.data(&chunk(&chunk_template, json!({}), finish)).await;
            if client_wants_usage {
                let mut usage = chunk_template.clone();
                usage["choices"] = json!([]);
                usage["usage"] = openai::usage_json(tally.usage);
                out.data(&usage).await;
            }
            out.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
            return "ok";
        }
        merged.push_text(&turn.text);
        let messages = Format::OpenAi.iteration_messages(&response, &executed);
        drop(executed);
        events = match next_round(prepared, &mut carry, messages, out, tally).await {
            Ok(events) => events,
            Err(outcome) => return outcome,
        };
    }
    "ok"
}

/// Adds one streamed tool-call delta to the calls assembled so far. The slot is the delta's
/// `index`, or its `id`, or the last call; the name is taken once (some compatible servers
/// repeat it in every delta), the arguments are appended. A bounded number of calls is kept.
fn merge_call_delta(calls: &mut Vec<(u64, String, String, String)>, call: &Value) {
    let id = call
        .get("id")
        .and_then(Value::as_str)
        .filter(|i| !i.is_empty());
    let slot = match call.get("index").and_then(Value::as_u64) {
        Some(index) => calls.iter().position(|c| c.0 == index).or_else(|| {
            (calls.len() < MAX_CALLS).then(|| {
                calls.push((index, String::new(), String::new(), String::new()));
                calls.len() - 1
            })
        }),
        None => match id.and_then(|id| calls.iter().position(|c| c.1 == id)) {
            Some(p) => Some(p),
            None if id.is_some() || calls.is_empty() => (calls.len() < MAX_CALLS).then(|| {
                calls.push((
                    calls.len() as u64,
                    String::new(),
                    String::new(),
                    String::new(),
                ));
                calls.len() - 1
            }),
            None => Some(calls.len() - 1),
        },
    };
    let Some(entry) = slot.and_then(|p| calls.get_mut(p)) else {
        return;
    };
    if let Some(id) = id {
        entry.1 = id.to_string();
    }
    if let Some(name) = call.pointer("/function/name").and_then(Value::as_str)
        && entry.2.is_empty()
    {
        entry.2 = name.to_string();
    }
    if let Some(arguments) = call.pointer("/function/arguments").and_then(Value::as_str) {
        entry.3.push_str(arguments);
    }
}

/// Most tool calls one streamed iteration may make.
const MAX_CALLS: usize = 128;

/// A chunk of the gateway's own, shaped like the provider's.
fn chunk(template: &Value, delta: Value, finish_reason: Value) -> Value {
    let mut c = template.clone();
    c["choices"] =
        json!([{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": null}]);
    if let Some(o) = c.as_object_mut() {
        o.remove("usage");
    }
    c
}

/// Relays one provider iteration's text and assembles its calls.
async fn openai_turn(
    events: &mut Events,
    out: &mut Out,
    merged: &openai::Merged,
    template: &mut Option<Value>,
    first_iteration: bool,
) -> Result<OpenAiTurn, TurnEnd> {
    let mut role_sent = !first_iteration;
    let mut turn = OpenAiTurn::default();
    let mut separated = merged.text.is_empty();
    loop {
        let Some(event) = events.next(out).await? else {
            return Err(TurnEnd::Broken(
                "the model's stream ended before [DONE]".into(),
            ));
        };
        if event.data.trim() == "[DONE]" {
            return Ok(turn);
        }
        // Only objects are chunks; anything else is passed over.
        let Ok(mut data @ Value::Object(_)) = serde_json::from_str::<Value>(&event.data) else {
            continue;
        };
        if data.get("error").is_some() {
            return Err(TurnEnd::Provider(data));
        }
        if let Some(usage) = data.get("usage").filter(|u| !u.is_null()) {
            turn.usage = openai::usage(Some(usage));
        }
        if template.is_none() {
            let mut t = data.clone();
            if let Some(o) = t.as_object_mut() {
                o.remove("choices");
                o.remove("usage");
            }
            *template = Some(t);
        }
        // (Not `pointer_mut`, which allocates for every step of the path, on every chunk.)
        let Some(choice) = data
            .get_mut("choices")
            .and_then(|c| c.get_mut(0))
            .filter(|c| c.is_object())
        else {
            continue;
        };
        // One choice is asked for (`n` > 1 is refused with gateway tools); another index is not
        // this conversation's.
        if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
            continue;
        }
        if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
            turn.finish_reason = Some(reason.clone());
        }
        let Some(delta) = choice.get_mut("delta").and_then(Value::as_object_mut) else {
            continue;
        };
        if let Some(Value::Array(calls)) = delta.remove("tool_calls") {
            for call in calls {
                merge_call_delta(&mut turn.calls, &call);
            }
        }
        if let Some(Value::String(text)) = delta.get_mut("content")
            && !text.is_empty()
        {
            turn.text.push_str(text);
            if !separated {
                text.insert_str(0, openai::TEXT_SEPARATOR);
                separated = true;
            }
        } else if role_sent || !delta.contains_key("role") {
            // Nothing for the client in this chunk (calls are held, finish comes at the end).
            continue;
        } else {
            // The opening chunk carries the role alone.
            delta.retain(|k, _| k == "role" || k == "content");
        }
        role_sent = true;
        choice["finish_reason"] = Value::Null;
        if let Some(t) = template.as_ref() {
            for key in ["id", "created", "model"] {
                if let Some(v) = t.get(key)
                    && data.get(key) != Some(v)
                {
                    data[key] = v.clone();
                }
            }
        }
        if let Some(o) = data.as_object_mut() {
            o.remove("usage");
        }
        out.data(&data).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: name.map(str::to_owned),
            data: data.to_owned(),
            ..SseEvent::default()
        }
    }

    fn turn_with_text_block() -> AnthropicTurn {
        let mut turn = AnthropicTurn::default();
        set_block(&mut turn.blocks, 0, json!({"type": "text", "text": "a"}));
        set_block(
            &mut turn.blocks,
            1,
            json!({"type": "thinking", "thinking": ""}),
        );
        turn
    }

    #[test]
    fn token_deltas_take_the_short_way_and_assemble_as_the_general_way_does() {
        let cases = [
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"b c "}}"#,
            // Escapes: the piece is unescaped, the relayed delta keeps the provider's bytes.
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"line\n\"q\" \u00e9"}}"#,
            r#"{"index":1,"type":"content_block_delta","delta":{"thinking":"hm","type":"thinking_delta"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
        ];
        for data in cases {
            for name in [Some("content_block_delta"), None] {
                let e = event(name, data);
                let piece = TokenDelta::of(&e).expect(data);
                let mut fast = turn_with_text_block();
                piece.assemble(&mut fast);
                let mut general = turn_with_text_block();
                let value: Value = serde_json::from_str(data).unwrap();
                assemble_delta(&mut general, piece.index, value.get("delta"));
                assert_eq!(fast.blocks, general.blocks, "{data}");
                assert_eq!(fast.inputs, general.inputs, "{data}");
                // Relayed under another index: the same event but for the index.
                let wire = piece.encode(7);
                let text = std::str::from_utf8(&wire).unwrap();
                let line = text
                    .strip_prefix("event: content_block_delta\ndata: ")
                    .and_then(|t| t.strip_suffix("\n\n"))
                    .expect(text);
                let mut expected = value.clone();
                expected["index"] = json!(7);
                assert_eq!(serde_json::from_str::<Value>(line).unwrap(), expected);
            }
        }
        let mut turn = turn_with_text_block();
        let e = event(None, cases[0]);
        let piece = TokenDelta::of(&e).unwrap();
        assert!(
            matches!(piece.piece, Cow::Borrowed(_)),
            "no copy without escapes"
        );
        piece.assemble(&mut turn);
        assert_eq!(turn.blocks[0]["text"], "ab c ");
    }

    #[test]
    fn other_events_go_the_general_way() {
        let text = r#"{"type":"text_delta","text":"x"}"#;
        let delta = |d: &str| format!(r#"{{"type":"content_block_delta","index":0,"delta":{d}}}"#);
        let cases = [
            // Another event name, another type, another top-level field, a duplicate.
            (Some("message_delta"), delta(text)),
            (
                None,
                delta(text).replace("content_block_delta", "content_block_start"),
            ),
            (
                None,
                delta(text).replace(r#""index":0"#, r#""index":0,"extra":1"#),
            ),
            (
                None,
                delta(text).replace(r#""index":0"#, r#""index":0,"index":1"#),
            ),
            // A negative index; data on several lines; not an object.
            (None, delta(text).replace(r#""index":0"#, r#""index":-1"#)),
            (None, delta(text).replace(r#""index":0,"#, "\"index\":0,\n")),
            (None, "[1]".into()),
            // Pieces the general way handles (or skips): signature, citations, a missing or
            // non-string piece, an unknown delta.
            (None, delta(r#"{"type":"signature_delta","signature":"s"}"#)),
            (None, delta(r#"{"type":"citations_delta","citation":{}}"#)),
            (None, delta(r#"{"type":"text_delta"}"#)),
            (None, delta(r#"{"type":"text_delta","text":5}"#)),
            (None, delta(r#"{"type":"later_delta","text":"x"}"#)),
        ];
        assert!(TokenDelta::of(&event(None, &delta(text))).is_some());
        for (name, data) in cases {
            assert!(TokenDelta::of(&event(name, &data)).is_none(), "{data}");
        }
    }

    #[test]
    fn encoded_events_are_one_data_line() {
        let data = json!({"type": "x", "text": "two\nlines\r"});
        assert_eq!(
            &encode(Some("ping"), &data)[..],
            format!("event: ping\ndata: {data}\n\n").as_bytes()
        );
        assert_eq!(
            &encode(None, &data)[..],
            SseEvent::message(data.to_string()).encode()
        );
    }
}
