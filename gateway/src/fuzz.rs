//! Property-based fuzzing of everything that parses outside input (cargo-fuzz needs a nightly
//! compiler; proptest runs on stable). Each target generates inputs, checks that parsing never
//! panics, and checks a property that can fail: a round trip, an invariant of the answer.
//!
//! `tests/run-all.sh` runs them in a step of their own (`fuzz`) with `SWITCHBOARD_FUZZ_CASES`
//! inputs per target (default below) and prints how many each tried; set it higher to run longer:
//!
//! ```text
//! SWITCHBOARD_FUZZ_CASES=200000 cargo test -p switchboard-gateway --lib fuzz:: -- --nocapture
//! ```
//!
//! A failing input is shrunk and saved under `gateway/fuzz-regressions/<target>.txt`; saved
//! inputs run first on every later run (commit them).

use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};

use crate::state::Gateway;
use switchboard_core::session::{SessionSealer, TokenKind, UnsealError};
use switchboard_mcp::endpoint::{Incoming, parse_message};
use switchboard_protocol::param_headers;
use switchboard_protocol::sse::{SseDecoder, SseEvent};
use switchboard_protocol::{decode_header_value, encode_header_value};
use switchboard_source::config_file::load_table;
use switchboard_source::operator_source::apply_frame;
use switchboard_upstream::auth_challenge;

const DEFAULT_CASES: u32 = 3_000;

/// Runs one target: `cases` inputs (plus the saved regressions), then prints the count.
fn fuzz<S: Strategy>(
    target: &str,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let cases = std::env::var("SWITCHBOARD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let saved = format!(
        "{}/fuzz-regressions/{target}.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    let config = Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(Box::leak(
            saved.into_boxed_str(),
        )))),
        ..Config::default()
    };
    let started = std::time::Instant::now();
    let mut runner = TestRunner::new(config);
    if let Err(e) = runner.run(&strategy, test) {
        panic!("fuzz target {target} failed: {e}");
    }
    println!(
        "fuzz {target}: {cases} inputs in {:.1}s, no failure",
        started.elapsed().as_secs_f64()
    );
}

/// JSON values whose objects use the field names the parsers look at, so generated inputs
/// reach deep branches instead of failing at the first lookup.
fn json_value() -> impl Strategy<Value = Value> {
    let names = prop::sample::select(vec![
        "jsonrpc",
        "id",
        "method",
        "params",
        "result",
        "error",
        "_meta",
        "name",
        "arguments",
        "code",
        "message",
        "data",
        "cursor",
        "taskId",
        "uri",
        "requestState",
        "2.0",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        "[a-z/_.0-9-]{0,12}".prop_map(Value::String),
        Just(json!("2.0")),
        Just(json!("tools/call")),
        Just(json!("tools/list")),
        ".{0,24}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((names.clone(), inner), 0..6).prop_map(|fields| {
                Value::Object(
                    fields
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

#[test]
fn jsonrpc_bodies() {
    let bodies = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
    ];
    fuzz("jsonrpc_bodies", bodies, |body| {
        let parsed = parse_message(&body);
        // Anything accepted is one JSON-RPC 2.0 object: a call with a string method, or a
        // reply with a non-null id and exactly one of result and error.
        if parsed.is_ok() {
            let value: Value = serde_json::from_slice(&body)
                .map_err(|e| TestCaseError::fail(format!("accepted non-JSON: {e}")))?;
            prop_assert_eq!(value.get("jsonrpc"), Some(&json!("2.0")));
        }
        match parsed {
            Ok(Incoming::Call(message)) => {
                prop_assert!(message.params.as_ref().is_none_or(|p| p.is_object()));
                // Kept as text, the parameters read as the body says they are.
                let sent: Value = serde_json::from_slice(&body)
                    .map_err(|e| TestCaseError::fail(format!("accepted non-JSON: {e}")))?;
                prop_assert_eq!(message.params.as_deref(), sent.get("params"));
            }
            Ok(Incoming::Reply { id, body }) => {
                prop_assert!(!id.is_null());
                prop_assert!(body.contains_key("result") != body.contains_key("error"));
            }
            Err(_) => {}
        }
        Ok(())
    });
}

/// An upstream's answer read without a tree (`raw_response`: the walk of `scan.rs`, else
/// serde's reading of its members): whatever it takes is JSON, and the result it keeps as text
/// is the tree's result, for the id the tree has.
#[test]
fn upstream_answers() {
    let bodies = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        (json_value(), json_value()).prop_map(|(id, result)| {
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
                .unwrap_or_default()
        }),
    ];
    fuzz("upstream_answers", bodies, |body| {
        let Some(read) = switchboard_protocol::jsonrpc::raw_response("application/json", &body)
        else {
            return Ok(());
        };
        serde_json::from_slice::<serde::de::IgnoredAny>(&body)
            .map_err(|e| TestCaseError::fail(format!("accepted non-JSON: {e}")))?;
        // (JSON with a number beyond a float's range has no tree; the raw reading keeps it.)
        let Ok(tree) = serde_json::from_slice::<Value>(&body) else {
            return Ok(());
        };
        prop_assert_eq!(read.id.as_ref(), tree.get("id").filter(|id| !id.is_null()));
        let result = match &read.result {
            Some(raw) => Some(
                serde_json::from_str::<Value>(raw.get())
                    .map_err(|e| TestCaseError::fail(format!("a result not JSON: {e}")))?,
            ),
            None => None,
        };
        prop_assert_eq!(result.as_ref(), tree.get("result"));
        Ok(())
    });
}

#[test]
fn mcp_header_values() {
    fuzz("mcp_header_values", ".{0,64}", |value: String| {
        let encoded = encode_header_value(&value);
        prop_assert!(
            axum::http::HeaderValue::from_str(&encoded).is_ok(),
            "the encoding is a valid header value: {encoded:?}"
        );
        prop_assert_eq!(decode_header_value(&encoded), Some(value.clone()));
        let _ = decode_header_value(&value);
        Ok(())
    });
}

#[test]
fn www_authenticate_challenges() {
    let params = prop::collection::vec(("[a-z_]{1,12}", "[A-Za-z0-9:/._ -]{0,24}"), 0..5);
    let inputs = prop_oneof![
        params.prop_map(|ps| {
            let rendered: Vec<String> = ps.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
            (format!("Bearer {}", rendered.join(", ")), ps)
        }),
        ".{0,120}".prop_map(|s| (s, Vec::new())),
    ];
    fuzz("www_authenticate", inputs, |(challenge, params)| {
        let parsed = auth_challenge::parse(&challenge);
        // Well-formed parameters come back (the last of a repeated name wins).
        for (k, v) in params.iter().rev() {
            if params
                .iter()
                .rev()
                .find(|(k2, _)| k2 == k)
                .map(|(_, v2)| v2)
                == Some(v)
            {
                prop_assert_eq!(parsed.get(k.as_str()), Some(v), "in {}", challenge);
            }
        }
        Ok(())
    });
}

#[test]
fn sealed_session_ids() {
    let sealer = SessionSealer::new(
        Some("fuzzing session key, 32 chars.."),
        Duration::from_secs(60),
    );
    let other = SessionSealer::new(
        Some("another session key, 32 chars.."),
        Duration::from_secs(60),
    );
    let now = SystemTime::now();
    let digest = [7u8; 32];
    let (genuine, _) = sealer.seal(&digest, 1, 0, now);
    let inputs = prop_oneof![
        "[A-Za-z0-9_-]{0,140}".prop_map(|s| (s, false)),
        ".{0,140}".prop_map(|s| (s, false)),
        // The genuine id with one character changed.
        (0..genuine.len(), "[A-Za-z0-9_-]").prop_map({
            let genuine = genuine.clone();
            move |(at, c)| {
                let mut tampered = genuine.clone();
                tampered.replace_range(at..at + 1, &c);
                let unchanged = tampered == genuine;
                (tampered, unchanged)
            }
        }),
    ];
    fuzz("sealed_session_ids", inputs, |(id, genuine)| {
        let opened = sealer.unseal(&id, &digest, now);
        if genuine {
            prop_assert!(opened.is_ok());
        } else {
            prop_assert_eq!(opened.err(), Some(UnsealError::Invalid), "{} opened", id);
        }
        prop_assert!(
            other.unseal(&id, &digest, now).is_err(),
            "another key opened {}",
            id
        );
        prop_assert!(sealer.open_token(TokenKind::ReplyRoute, &id).is_none());
        Ok(())
    });
}

fn sse_event() -> impl Strategy<Value = SseEvent> {
    // Field values without line ends (they end a line on the wire); data may hold `\n`.
    (
        prop::option::of("[a-z]{1,8}"),
        "[^\r\n]{0,30}(\n[^\r\n]{0,30}){0,3}",
        prop::option::of("[a-z0-9]{1,8}"),
        prop::option::of(0u64..100_000),
    )
        .prop_map(|(event, data, id, retry)| SseEvent {
            event,
            data,
            id,
            retry,
        })
}

#[test]
fn sse_framing() {
    let inputs = (
        prop::collection::vec(
            (sse_event(), prop::sample::select(vec!["\n", "\r\n", "\r"])),
            0..6,
        ),
        prop::collection::vec(1usize..64, 1..40),
        prop::collection::vec(any::<u8>(), 0..512),
    );
    fuzz("sse_framing", inputs, |(events, cuts, noise)| {
        // The same stream, with any of the three line ends, cut anywhere (a CRLF split between
        // two chunks included) decodes to the same events.
        let wire: Vec<u8> = events
            .iter()
            .flat_map(|(e, eol)| {
                let text = String::from_utf8_lossy(&e.encode()).replace('\n', eol);
                text.into_bytes()
            })
            .collect();
        let events: Vec<SseEvent> = events.into_iter().map(|(e, _)| e).collect();
        let mut decoder = SseDecoder::new(1 << 20);
        let mut decoded = Vec::new();
        let (mut at, mut cut) = (0, cuts.iter().cycle());
        while at < wire.len() {
            let end = (at + cut.next().copied().unwrap_or(1)).min(wire.len());
            decoder.push(&wire[at..end]);
            at = end;
            while let Ok(Some(event)) = decoder.next_event() {
                decoded.push(event);
            }
        }
        prop_assert_eq!(&decoded, &events);

        // Arbitrary bytes: no panic, and no event larger than the bound ever comes out.
        let mut bounded = SseDecoder::new(64);
        for chunk in noise.chunks(cuts[0]) {
            bounded.push(chunk);
            loop {
                match bounded.next_event() {
                    Ok(Some(event)) => prop_assert!(event.data.len() <= 64),
                    Ok(None) => break,
                    Err(_) => return Ok(()),
                }
            }
        }
        Ok(())
    });
}

#[test]
fn snapshot_frames() {
    let gw = Gateway::new();
    let good =
        json!({"generation": 7, "servers": [{"name": "a", "url": "http://127.0.0.1:9/mcp"}]});
    let first = apply_frame(&gw, good.to_string().as_bytes(), "fuzz");
    assert!(
        first.rejected.is_none(),
        "the good frame applies: {:?}",
        first.rejected
    );
    let frames = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        json_value().prop_map(|v| {
            serde_json::to_vec(&json!({"generation": 8, "servers": v, "keys": [v]}))
                .unwrap_or_default()
        }),
    ];
    fuzz("snapshot_frames", frames, |frame| {
        let ack = apply_frame(&gw, &frame, "fuzz");
        if ack.rejected.is_some() || ack.serving == 7 {
            // A refused frame keeps the table that served.
            prop_assert_eq!(gw.table().generation, 7);
            prop_assert_eq!(ack.serving, 7);
        } else {
            // Rarely, a generated frame is a valid snapshot; go back to the good one.
            apply_frame(&gw, good.to_string().as_bytes(), "fuzz");
        }
        Ok(())
    });
}

#[test]
fn config_files() {
    // YAML-ish text built from the config's own words, and raw bytes.
    let words = prop::sample::select(vec![
        "servers:",
        "keys:",
        "gateway:",
        "- name: a",
        "  url: http://x/mcp",
        "  secret: s",
        "  limits: {rate: 5/s}",
        "  auth: {type: bearer, secret: t}",
        "sessionKey: 0123456789abcdefg",
        "{",
        "}",
        "[",
        "]",
        ":",
        "- ",
        "  ",
        "\t",
        "'",
        "\"",
        "&a",
        "*a",
        "!!binary",
        "---",
        "#",
        "tools: {allow: [x]}",
        "expiresAt: 2027-01-01T00:00:00Z",
        "timeout: 5s",
        "maxBodyBytes: 0",
    ]);
    let files = prop_oneof![
        prop::collection::vec(words, 0..40).prop_map(|w| w.join("\n").into_bytes()),
        prop::collection::vec(any::<u8>(), 0..256),
    ];
    fuzz("config_files", files, |content| {
        if let Ok(table) = load_table(&content) {
            // Whatever loads is a table that can serve: its servers have ids and URLs.
            for server in &table.servers {
                prop_assert!(!server.id().is_empty());
            }
        }
        Ok(())
    });
}

#[test]
fn param_header_derivation() {
    fuzz(
        "param_header_derivation",
        (json_value(), json_value()),
        |(schema, arguments)| {
            let headers = param_headers::derive(&schema, Some(&arguments));
            for (name, _) in &headers {
                prop_assert!(name.as_str().starts_with("mcp-param-"), "{}", name);
            }
            Ok(())
        },
    );
}
