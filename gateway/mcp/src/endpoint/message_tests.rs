//! `parse_message` beyond the calls `mod.rs` tests: replies to relayed requests, and each
//! refusal naming what is wrong with the message.

use serde_json::{Value, json};

use super::message::{Incoming, parse_message};
use switchboard_core::errors::GatewayError;

fn refusal(body: &str) -> GatewayError {
    match parse_message(body.as_bytes()) {
        Err(e) => e,
        Ok(_) => panic!("{body} is refused"),
    }
}

/// A message without a method answers a request: its id (any JSON but `null`) and the whole
/// message are kept for routing; a result or an error both answer.
#[test]
fn a_response_is_a_reply_with_its_id_and_body() {
    for (body, id) in [
        (
            r#"{"jsonrpc":"2.0","id":"r-1","result":{"action":"accept"}}"#,
            json!("r-1"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":5,"error":{"code":-1,"message":"no"}}"#,
            json!(5),
        ),
    ] {
        match parse_message(body.as_bytes()) {
            Ok(Incoming::Reply {
                id: got,
                body: kept,
            }) => {
                assert_eq!(got, id, "{body}");
                assert_eq!(
                    Value::Object(kept),
                    serde_json::from_str::<Value>(body).unwrap()
                );
            }
            _ => panic!("{body} is a reply"),
        }
    }
}

/// A response must answer something: an id that is not `null`, and exactly one of result or
/// error.
#[test]
fn a_response_that_answers_nothing_is_refused() {
    for body in [
        r#"{"jsonrpc":"2.0","result":{}}"#,
        r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}"#,
    ] {
        let e = refusal(body);
        assert!(
            matches!(e, GatewayError::InvalidRequest(_)),
            "{body}: {e:?}"
        );
        assert!(
            e.to_string()
                .contains("needs an id and one of result or error"),
            "{body}: {e}"
        );
    }
}

/// Each refusal names what is wrong: not JSON (the parser's own words), not one message, the
/// wrong version, a method or params of the wrong type.
#[test]
fn each_refusal_names_what_is_wrong() {
    assert!(matches!(refusal("{\"jsonrpc\":"), GatewayError::Parse(_)));
    assert!(matches!(refusal(""), GatewayError::Parse(_)));
    for (body, says) in [
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            "batches are not supported",
        ),
        ("7", "batches are not supported"),
        (r#"{"id":1,"method":"ping"}"#, "jsonrpc must be \"2.0\""),
        (
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            "jsonrpc must be \"2.0\"",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":["ping"]}"#,
            "method must be a string",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":"x"}"#,
            "params must be an object",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":null}"#,
            "params must be an object",
        ),
    ] {
        let e = refusal(body);
        assert!(
            matches!(e, GatewayError::InvalidRequest(_)),
            "{body}: {e:?}"
        );
        assert!(e.to_string().contains(says), "{body}: {e}");
    }
}

/// The body's UTF-8 is checked once, before the parser reads it as text: a body that is not
/// UTF-8 is a parse error saying so, and text beyond ASCII in names and arguments reads as it came.
#[test]
fn a_body_is_utf8_or_a_parse_error() {
    let mut body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"#.to_vec();
    body.extend_from_slice(&[0xff, b'"', b'}', b'}']);
    match parse_message(&body) {
        Err(GatewayError::Parse(message)) => assert!(message.contains("utf-8"), "{message}"),
        _ => panic!("a body that is not UTF-8 is a parse error"),
    }
    let text = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ü","arguments":{"q":"日本"}}}"#;
    match parse_message(text.as_bytes()) {
        Ok(Incoming::Call(m)) => {
            let params = m.params.expect("params");
            assert_eq!(params["name"], "ü");
            assert_eq!(params["arguments"]["q"], "日本");
        }
        _ => panic!("a UTF-8 body beyond ASCII reads"),
    }
}
