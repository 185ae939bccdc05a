//! The walk against serde's reading of the same members, the oracle (`CallMembers` and
//! `ResponseRead`: what the gateway read with before the walk, and reads what the walk leaves
//! with): what the walk accepts serde reads as the same
//! message (generated messages, and the same with a byte changed, where a walk goes wrong), what
//! the walk leaves to serde is each case its comment names, and the common call and result are
//! taken.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::{CallMembers, ResponseRead, walk_call, walk_result};
use crate::ObjectRead;
use crate::params::{ParamsRead, ReadValue};

/// A reading's members, comparable: each name, and each value's text (`_meta`'s members, or
/// `None` for a `null` one).
type Members = Vec<(String, Result<String, Option<Vec<(String, String)>>>)>;

fn members_of(read: ParamsRead<'_>) -> Members {
    read.members
        .into_iter()
        .map(|(name, value)| {
            let value = match value {
                ReadValue::Text(text) => Ok(text.to_string()),
                ReadValue::Meta(meta) => Err(object_members(meta)),
            };
            (name.to_string(), value)
        })
        .collect()
}

fn object_members(read: ObjectRead<'_>) -> Option<Vec<(String, String)>> {
    match read {
        ObjectRead::Null => None,
        ObjectRead::Object(members) => Some(
            members
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
    }
}

/// What serde makes of a message the walk read: the same id, method and parameters' members,
/// each value the same text.
fn assert_call_is_serdes(text: &str) {
    let Some(call) = walk_call(text) else {
        return;
    };
    let serde = serde_json::from_str::<CallMembers>(text)
        .unwrap_or_else(|e| panic!("the walk took what serde refuses ({e}): {text:?}"));
    assert_eq!(serde.jsonrpc, "2.0", "{text:?}");
    assert_eq!(serde.method, call.method, "{text:?}");
    assert_eq!(serde.id, call.id, "{text:?}");
    assert_eq!(
        serde.params.map(members_of),
        call.params.map(members_of),
        "{text:?}"
    );
}

fn assert_result_is_serdes(text: &str) {
    let Some(read) = walk_result(text) else {
        return;
    };
    let serde = serde_json::from_str::<ResponseRead>(text)
        .unwrap_or_else(|e| panic!("the walk took what serde refuses ({e}): {text:?}"));
    assert!(serde.error.is_none(), "{text:?}");
    assert_eq!(serde.id, read.id, "{text:?}");
    assert_eq!(
        serde.result.map(object_members),
        read.result.map(object_members),
        "{text:?}"
    );
}

#[test]
fn the_common_call_and_result_are_taken() {
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ex__add","arguments":{"a":1,"b":2},"_meta":{"progressToken":"p\u00e9\n"}}}"#;
    let read = walk_call(call).expect("the walk takes a plain call");
    assert_eq!((&*read.method, read.id), ("tools/call", Some(json!(1))));
    assert_call_is_serdes(call);
    let spaced = " \n{ \"id\" : \"a-1\" , \"method\" : \"ping\" , \"jsonrpc\" : \"2.0\" }\r\n\t";
    assert_eq!(walk_call(spaced).map(|c| c.id), Some(Some(json!("a-1"))));
    let notification = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(walk_call(notification).map(|c| c.id), Some(None));
    assert_eq!(
        walk_call(r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#).map(|c| c.id),
        Some(Some(Value::Null)),
        "a null id is there (not a notification)"
    );
    let result = r#"{"jsonrpc":"2.0","id":-7,"result":{"content":[{"type":"text","text":"3"}],"isError":false,"n":1.5e-3}}"#;
    let read = walk_result(result).expect("the walk takes a plain result");
    assert_eq!(read.id, Some(json!(-7)));
    assert_result_is_serdes(result);
    assert!(matches!(
        walk_result(r#"{"id":1,"result":null}"#).and_then(|r| r.result),
        Some(ObjectRead::Null)
    ));
}

/// Each thing the walk leaves to serde, and each thing JSON refuses, refused.
#[test]
fn what_the_walk_leaves_to_serde() {
    let call = |members: &str| format!(r#"{{"jsonrpc":"2.0","method":"m"{members}}}"#);
    let left = [
        // Escapes where the walk takes the text as it is.
        r#"{"jsonrpc":"2.0","method":"m\u0041"}"#.to_string(),
        r#"{"jsonrpc":"2\u002e0","method":"m"}"#.to_string(),
        r#"{"jsonr\u0070c":"2.0","method":"m"}"#.to_string(),
        call(r#","params":{"n\u0061me":"x"}"#),
        call(r#","params":{"_meta":{"k\u0065y":1}}"#),
        // Ids serde reads its own way.
        call(r#","id":1.0"#),
        call(r#","id":1e2"#),
        call(r#","id":-0"#),
        call(r#","id":1234567890123456789"#),
        call(r#","id":"a\"b""#),
        call(r#","id":[1]"#),
        call(r#","id":true"#),
        // Surrogates, which serde reads in pairs.
        call(r#","params":{"a":"\ud83d\ude00"}"#),
        call(r#","params":{"a":"\udc00"}"#),
        // Deeper than the walk goes.
        call(&format!(
            r#","params":{{"a":{}1{}}}"#,
            "[".repeat(70),
            "]".repeat(70)
        )),
        // A member named twice, a `_meta` neither an object nor null, parameters not an object.
        call(r#","id":1,"id":2"#),
        call(r#","params":{"_meta":[]}"#),
        call(r#","params":[1]"#),
        call(r#","params":null"#),
        // Not a call.
        r#"{"jsonrpc":"1.0","method":"m"}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_string(),
        r#"[{"jsonrpc":"2.0","method":"m"}]"#.to_string(),
        // Not JSON.
        call(",\"params\":{\"a\":\"x\ty\"}"),
        call(r#","params":{"a":"\x"}"#),
        call(r#","params":{"a":"\u12g4"}"#),
        call(r#","params":{"a":01}"#),
        call(r#","params":{"a":-}"#),
        call(r#","params":{"a":1.}"#),
        call(r#","params":{"a":1e}"#),
        call(r#","params":{"a":1e+-5}"#),
        call(r#","params":{"a":-a}"#),
        call(r#","params":{"a":.5}"#),
        call(r#","params":{"a":tru}"#),
        call(r#","params":{"a":[1,]}"#),
        call(r#","params":{"a":1,}"#),
        call(r#","params":{"a" 1}"#),
        call(r#","params":{"a":1 "b":2}"#),
        call(r#","params":{"a":"x}"#),
        call(r#","params":{'a':1}"#),
        format!("{} x", call("")),
        call("").replace('}', ""),
    ];
    for text in &left {
        assert!(walk_call(text).is_none(), "the walk took {text:?}");
    }
    let results = [
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"no"}}"#,
        r#"{"id":1,"result":{},"result":{}}"#,
        r#"{"id":1,"result":[]}"#,
        r#"{"id":1,"result":{"a\n":1}}"#,
        r#"{"id":1,"result":{"a":1}} {}"#,
    ];
    for text in results {
        assert!(walk_result(text).is_none(), "the walk took {text:?}");
    }
}

/// Where the walk looks for a string's end: every special byte found at every place of strings
/// either side of a word's length (a word test wrong at its edges would miss or move it).
#[test]
fn a_strings_end_is_found_at_every_place() {
    for len in 0..=17 {
        for at in 0..=len {
            for (special, taken) in [("\"", true), ("\\n", true), ("\u{1}", false)] {
                let mut s = "é".repeat(len / 2) + &"a".repeat(len % 2);
                let at = s.char_indices().nth(at).map_or(s.len(), |(i, _)| i);
                s.insert_str(at, special);
                let text = format!(r#"{{"jsonrpc":"2.0","method":"m","params":{{"a":"{s}"}}}}"#);
                let expect = taken && special != "\"";
                assert_eq!(walk_call(&text).is_some(), expect, "{text:?}");
                assert_call_is_serdes(&text);
            }
        }
    }
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "[a-z\"\\\\\n\u{1}\u{7f} é🦀}/]{0,10}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z_\"é]{0,5}", inner), 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn id() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(Value::Null)),
        any::<i64>().prop_map(|n| Some(json!(n))),
        any::<u64>().prop_map(|n| Some(json!(n))),
        "[a-z0-9\"-]{0,8}".prop_map(|s| Some(json!(s))),
    ]
}

/// A message as a client or an upstream writes it: members in any order, space or none.
fn message(members: Vec<(&str, Value)>, pretty: bool) -> String {
    let object = Value::Object(
        members
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    );
    if pretty {
        serde_json::to_string_pretty(&object).unwrap_or_default()
    } else {
        serde_json::to_string(&object).unwrap_or_default()
    }
}

/// Every one change at a place where a walk would go wrong: each byte JSON gives a meaning put
/// in place of the character there or before it, and the character taken out (at a character's
/// boundary: the text stays UTF-8, as the walk's input always is).
fn mutations(text: &str, at: usize) -> Vec<String> {
    const BYTES: &[u8] = b"\"\\{}[],:0-.eE+ \x01nutfx9/";
    let boundaries: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let Some(&at) = boundaries.get(at % boundaries.len().max(1)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut removed = text.to_string();
    removed.remove(at);
    for &byte in BYTES {
        let mut replaced = removed.clone();
        replaced.insert(at, char::from(byte));
        out.push(replaced);
        let mut inserted = text.to_string();
        inserted.insert(at, char::from(byte));
        out.push(inserted);
    }
    out.push(removed);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn a_call_the_walk_reads_is_what_serde_reads(
        id in id(),
        params in prop::option::of(prop::collection::vec(("[a-z_\"]{0,5}|_meta", value()), 0..5)),
        method in "[a-z/\"]{1,12}",
        extra in prop::option::of(value()),
        pretty in any::<bool>(),
        change in prop::option::of(any::<usize>()),
    ) {
        let mut members = vec![("jsonrpc", json!("2.0")), ("method", json!(method))];
        if let Some(id) = id.clone() {
            members.push(("id", id));
        }
        let params = params.map(|m| Value::Object(m.into_iter().collect()));
        if let Some(params) = params.clone() {
            members.push(("params", params));
        }
        if let Some(extra) = extra {
            members.push(("extra", extra));
        }
        let text = message(members, pretty);
        match change {
            None => {
                assert_call_is_serdes(&text);
                // Nothing it leaves to serde in it: the walk takes it.
                let plain_id = match &id {
                    Some(Value::String(s)) => !s.contains('"'),
                    Some(Value::Number(n)) => n.as_i64().is_some_and(|n| n.unsigned_abs() < 10u64.pow(18))
                        || n.as_u64().is_some_and(|n| n < 10u64.pow(18)),
                    _ => true,
                };
                let odd_meta = params.as_ref().and_then(|p| p.get("_meta")).is_some_and(|m| !m.is_object() && !m.is_null());
                let names_escaped = params.as_ref().and_then(Value::as_object).is_some_and(|p| {
                    p.keys().any(|k| k.contains('"'))
                        || p.get("_meta").and_then(Value::as_object).is_some_and(|m| m.keys().any(|k| k.contains('"')))
                });
                if plain_id && !odd_meta && !names_escaped && !method.contains('"') {
                    prop_assert!(walk_call(&text).is_some(), "left to serde: {}", text);
                }
            }
            Some(at) => mutations(&text, at).iter().for_each(|text| assert_call_is_serdes(text)),
        }
    }

    #[test]
    fn a_result_the_walk_reads_is_what_serde_reads(
        id in id(),
        result in prop::option::of(prop::collection::vec(("[a-z_\"]{0,5}", value()), 0..5)),
        pretty in any::<bool>(),
        change in prop::option::of(any::<usize>()),
    ) {
        let mut members = vec![("jsonrpc", json!("2.0"))];
        if let Some(id) = id {
            members.push(("id", id));
        }
        members.push((
            "result",
            result.map_or(Value::Null, |m| Value::Object(m.into_iter().collect())),
        ));
        let text = message(members, pretty);
        match change {
            None => assert_result_is_serdes(&text),
            Some(at) => mutations(&text, at).iter().for_each(|text| assert_result_is_serdes(text)),
        }
    }
}
