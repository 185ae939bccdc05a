//! The streamed loop in Anthropic's Messages format: provider events relayed under renumbered
//! content-block indices, client tool calls held to the iteration's end, gateway calls never shown.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write as _;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::anthropic;
use crate::format::Format;
use crate::run::{Prepared, Tally};
use crate::turn::Usage;
use switchboard_protocol::sse::SseEvent;

use super::round::{Events, Out, TurnEnd, execute_with_pings, next_round};

/// What happens to a provider content block.
pub(super) enum Route {
    /// Relayed under the client's index.
    Relayed(u64),
    /// A client tool call, held until the iteration ends (index into `held`).
    Held(usize),
    /// A gateway tool call: never relayed.
    Gateway,
}

/// One provider iteration, as it was streamed.
#[derive(Default)]
pub(super) struct AnthropicTurn {
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
    /// The model that answered (`message_start`), for the call's span.
    model: Option<String>,
}

pub(super) async fn anthropic_loop(
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
    // Carrier blocks sent so far (not the model's: `carry.shown` does not count them).
    let mut carriers: u64 = 0;
    for iteration in 1..=max {
        // What the gateway did so far rides in a carrier block sent before the iteration's own
        // blocks, as thinking comes before text: a client that reads the message's last block
        // as its answer (the Claude Code CLI) finds the model's text there, not the carrier.
        let mut carried_ahead = false;
        if iteration > 1 && !carry.is_empty() {
            let mut so_far = carry.clone();
            so_far.shown = usize::try_from(next_index - carriers).unwrap_or(usize::MAX);
            if let Some(token) = prepared.seal(so_far) {
                emit_whole_block(out, next_index, anthropic::carrier_block(&token)).await;
                next_index += 1;
                carriers += 1;
                carried_ahead = true;
            }
        }
        let turn_start = next_index;
        let turn = match anthropic_turn(prepared, &mut events, out, &mut next_index, iteration == 1)
            .await
        {
            Ok(turn) => turn,
            Err(end) => {
                events.ended_early(&end);
                return end.finish(out, Format::Anthropic).await;
            }
        };
        events.turn_ended(turn.model.as_deref(), turn.stop_reason.as_ref(), turn.usage);
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
            carry.shown = usize::try_from(turn_start - carriers).unwrap_or(usize::MAX);
            let first_held = turn.held.first().map(|(i, _)| *i);
            carry.id = first_held
                .and_then(|i| turn.blocks.get(i as usize))
                .and_then(|b| b.get("id").and_then(Value::as_str))
                .map(str::to_owned);
            // (no gateway call in this iteration: the carrier sent ahead of it holds it all)
            let token = if carry.is_empty() || (carried_ahead && executed.is_empty()) {
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

/// A block sent whole: start (with its full content) and stop.
pub(super) async fn emit_whole_block(out: &mut Out, index: u64, block: Value) {
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
pub(super) async fn anthropic_turn(
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
                turn.model = data
                    .pointer("/message/model")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
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

pub(super) fn set_block(blocks: &mut Vec<Value>, index: u64, block: Value) {
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

pub(super) fn assemble_delta(turn: &mut AnthropicTurn, index: u64, delta: Option<&Value>) {
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

pub(super) fn push_input(turn: &mut AnthropicTurn, index: u64, piece: &str) {
    turn.inputs.entry(index).or_default().push_str(piece);
}

/// Appends a piece to a field of an assembled block, in place: a long answer arrives in
/// thousands of pieces.
pub(super) fn append_piece(turn: &mut AnthropicTurn, index: u64, field: &str, piece: Option<&str>) {
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
pub(super) struct TokenDelta<'a> {
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

pub(super) fn finish_block(turn: &mut AnthropicTurn, index: u64) {
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

#[cfg(test)]
mod tests {
    use super::super::round::encode;
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
