//! `Params` against the tree it stands for: every member read, and every request body written
//! from the text, is what the tree gives (the oracle is serde's reading and the tree writers,
//! which are what the gateway used before).

use std::borrow::Cow;

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::Params;
use crate::jsonrpc::{
    ModernMeta, legacy_call_body, legacy_request_body, modern_call_body, modern_request_body,
};
use crate::trace_context::TraceContext;
use crate::{META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL, META_PROTOCOL_VERSION};

/// The parameters as a message's one reading finds them: inside a body, after other members,
/// space around them (the index's ranges are found in the body and moved to the parameters'
/// own text). What the reading refuses is read whole, as `parse_message` does.
fn text(json: &str) -> Params {
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        params: super::ParamsRead<'a>,
    }
    let body = format!(
        "{{ \"id\" : 1 ,\n \"params\" :\n {json} \t, \"method\":\"x\", \"jsonrpc\": \"2.0\" }}"
    );
    let from_body = serde_json::from_str::<Message>(&body)
        .ok()
        .and_then(|m| Params::from_read(&body, m.params));
    // The protocol's walk, where it takes the message, indexes the same parameters.
    if let Some(call) = crate::scan::walk_call(&body) {
        let walked = call.params.and_then(|read| Params::from_read(&body, read));
        assert_eq!(walked.is_some(), from_body.is_some(), "{json}");
        let written = |p: &Params| modern_call_body(&json!(1), "m", Some(p), meta(None, None));
        assert_eq!(
            walked.as_ref().map(written),
            from_body.as_ref().map(written),
            "{json}"
        );
    }
    // The text alone reads the same way.
    let alone = Params::from_json(json);
    assert_eq!(
        from_body.is_some(),
        !alone.is_read_whole(),
        "read in a body and alone: {json}"
    );
    from_body.unwrap_or_else(|| Params::from(tree(json)))
}

fn tree(json: &str) -> Value {
    serde_json::from_str(json).expect("valid JSON")
}

const TEXTS: &[&str] = &[
    r#"{}"#,
    r#"{"name":"add","arguments":{"a":1,"b":2}}"#,
    r#"{ "name" : "we\"ird\\name\u00e9" , "arguments" : [1, {"x": "}"}] }"#,
    r#"{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"progressToken":7}}"#,
    r#"{"name":"t","_meta":"not an object"}"#,
    r#"{"name":5,"_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"a=b"}}"#,
    r#"{"_meta":{},"requestState":"connect:x","inputResponses":{"k":{"ok":true}}}"#,
    r#"{"name":null,"arguments":null,"_meta":null}"#,
];

#[test]
fn members_read_from_the_text_are_the_trees() {
    for json in TEXTS {
        let params = text(json);
        let whole = tree(json);
        for key in ["name", "arguments", "_meta", "requestState", "missing"] {
            assert_eq!(
                params.member(key).as_deref(),
                whole.get(key),
                "{json} {key}"
            );
            assert_eq!(
                params.str_member(key).as_deref(),
                whole.get(key).and_then(Value::as_str),
                "{json} {key}"
            );
        }
        for key in [
            META_PROTOCOL_VERSION,
            META_CLIENT_CAPABILITIES,
            "progressToken",
            "traceparent",
        ] {
            let meta = whole.get("_meta").and_then(|m| m.get(key));
            assert_eq!(params.meta_member(key).as_deref(), meta, "{json} {key}");
            assert_eq!(
                params.meta_str(key).as_deref(),
                meta.and_then(Value::as_str),
                "{json} {key}"
            );
            assert_eq!(params.meta_has(key), meta.is_some(), "{json} {key}");
        }
        // A `_meta` neither an object nor `null` is not what a client sends: such parameters
        // are read whole at once (the reading's index has no place for it).
        let meta_indexed = whole
            .get("_meta")
            .is_none_or(|m| m.is_object() || m.is_null());
        assert_eq!(
            params.is_read_whole(),
            !meta_indexed,
            "members alone build no tree: {json}"
        );
        assert_eq!(*params, whole, "{json}");
        assert!(params.is_read_whole());
    }
}

#[test]
fn a_member_named_twice_or_with_an_escape_is_read_whole_at_once_and_the_last_counts() {
    for json in [
        r#"{"name":"allowed","name":"other"}"#,
        r#"{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"a","io.modelcontextprotocol/protocolVersion":"b"}}"#,
        r#"{"na\u006de":"escaped","x":1}"#,
    ] {
        let params = text(json);
        assert!(params.is_read_whole(), "{json}");
        assert!(
            params.text_view().is_none(),
            "written from the tree: {json}"
        );
        assert_eq!(*params, tree(json), "{json}");
    }
    assert_eq!(
        text(r#"{"name":"allowed","name":"other"}"#).str_member("name"),
        Some(Cow::Borrowed("other"))
    );
    assert_eq!(
        text(r#"{"na\u006de":"escaped"}"#).str_member("name"),
        Some(Cow::Borrowed("escaped"))
    );
}

#[test]
fn a_set_member_keeps_the_text_and_is_what_is_read_and_written() {
    let mut params = text(r#"{"name":"pfx__add","arguments":{"a":1}}"#);
    params.set_member("name", json!("add"));
    params.set_member("extra", json!({"k": [1]}));
    assert!(!params.is_read_whole());
    assert!(params.text_view().is_some());
    assert_eq!(params.str_member("name"), Some(Cow::Borrowed("add")));
    assert_eq!(params.member("extra").as_deref(), Some(&json!({"k": [1]})));
    let expected = json!({"name": "add", "arguments": {"a": 1}, "extra": {"k": [1]}});
    assert_eq!(*params, expected);
    // Set after the tree was read: the tree changes, the text goes.
    params.set_member("name", json!("again"));
    assert!(params.text_view().is_none());
    assert_eq!(params["name"], "again");
}

#[test]
fn a_changed_tree_is_what_goes_upstream() {
    let mut params = text(r#"{"name":"t","requestState":"s"}"#);
    if let Value::Object(members) = &mut *params {
        members.remove("requestState");
    }
    assert!(params.text_view().is_none());
    let body = modern_call_body(&json!(1), "tools/call", Some(&params), meta(None, None));
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert!(body["params"].get("requestState").is_none(), "{body}");
    // A clone of text parameters is text parameters, and reads the same.
    let kept = text(r#"{"name":"t","_meta":{"progressToken":1}}"#);
    let copy = kept.clone();
    assert!(!copy.is_read_whole() && copy.text_view().is_some());
    assert_eq!(*copy, *kept);
}

const INFO: &str = r#"{"name":"switchboard","version":"1"}"#;

fn meta<'a>(log_level: Option<&'a str>, trace: Option<&'a TraceContext>) -> ModernMeta<'a> {
    static CLIENT_INFO: std::sync::OnceLock<Box<serde_json::value::RawValue>> =
        std::sync::OnceLock::new();
    ModernMeta {
        client_info: CLIENT_INFO.get_or_init(|| {
            serde_json::value::RawValue::from_string(INFO.into()).unwrap_or_default()
        }),
        capabilities: 0b101,
        log_level,
        trace,
    }
}

fn trace() -> TraceContext {
    TraceContext::new(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        Some("gw=1"),
    )
    .expect("a valid traceparent")
}

/// A body read back, refused when an object in it names a member twice: read into a `Value`,
/// a repeated member would hide (the last one counts), and a body that says a member twice is
/// one the gateway must not write.
fn read_body(body: &[u8]) -> Value {
    use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
    struct Once;
    impl<'de> Visitor<'de> for Once {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                if !seen.insert(key.clone()) {
                    return Err(serde::de::Error::custom(format!("{key:?} twice")));
                }
                map.next_value_seed(OnceSeed)?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(OnceSeed)?.is_some() {}
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    }
    struct OnceSeed;
    impl<'de> serde::de::DeserializeSeed<'de> for OnceSeed {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(Once)
        }
    }
    let text = String::from_utf8_lossy(body);
    let mut de = serde_json::Deserializer::from_str(&text);
    if let Err(e) = de.deserialize_any(Once) {
        panic!("{e}: {text}");
    }
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// What the text writers write, read back, against what the tree writers write for the same
/// parameters (as JSON values: the text keeps the client's order of members).
fn assert_bodies_agree(json: &str) {
    let params = text(json);
    let whole = tree(json);
    let trace = trace();
    for trace in [None, Some(&trace)] {
        for level in [None, Some("debug")] {
            let read = |body: Vec<u8>| read_body(&body);
            let written = read(modern_call_body(
                &json!(7),
                "tools/call",
                Some(&params),
                meta(level, trace),
            ));
            let expected = read(modern_request_body(
                &json!(7),
                "tools/call",
                Some(&whole),
                meta(level, trace),
            ));
            assert_eq!(written, expected, "modern {json} {trace:?}");
        }
        let written = read_body(&legacy_call_body(
            &json!("a"),
            "tools/call",
            Some(&params),
            trace,
        ));
        let expected = read_body(&legacy_request_body(
            &json!("a"),
            "tools/call",
            Some(&whole),
            trace,
        ));
        assert_eq!(written, expected, "legacy {json} {trace:?}");
    }
    assert!(!params.is_read_whole(), "written from the text: {json}");
}

#[test]
fn bodies_written_from_the_text_are_the_trees() {
    for json in TEXTS {
        if text(json).text_view().is_some() {
            assert_bodies_agree(json);
        }
    }
    for json in [
        // 2026-07-28 reserved members a legacy server must not get, and the client's own.
        r#"{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"c"},"io.modelcontextprotocol/logLevel":"info","progressToken":"p"}}"#,
        r#"{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#,
        r#"{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"sampling":{}},"traceparent":"x"}}"#,
    ] {
        assert_bodies_agree(json);
    }
}

fn member_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("name".to_string()),
        Just("arguments".to_string()),
        Just("_meta".to_string()),
        Just(META_PROTOCOL_VERSION.to_string()),
        Just(META_CLIENT_CAPABILITIES.to_string()),
        Just(META_CLIENT_INFO.to_string()),
        Just(META_LOG_LEVEL.to_string()),
        Just("traceparent".to_string()),
        Just("tracestate".to_string()),
        "[a-z\"\\\\ é]{0,6}",
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z\"\\\\\n é}]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((member_name(), inner), 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn any_parameters_read_and_written_from_the_text_are_the_trees(
        members in prop::collection::vec((member_name(), value()), 0..6),
        pretty in any::<bool>(),
    ) {
        let object = Value::Object(members.into_iter().collect::<Map<_, _>>());
        let json = if pretty {
            serde_json::to_string_pretty(&object).unwrap()
        } else {
            serde_json::to_string(&object).unwrap()
        };
        let params = text(&json);
        for key in ["name", "arguments", "_meta"] {
            let member = params.member(key);
            prop_assert_eq!(member.as_deref(), object.get(key));
        }
        let version = params.meta_str(META_PROTOCOL_VERSION);
        prop_assert_eq!(
            version.as_deref(),
            object.get("_meta").and_then(|m| m.get(META_PROTOCOL_VERSION)).and_then(Value::as_str)
        );
        if params.text_view().is_some() {
            assert_bodies_agree(&json);
        } else {
            // Only a member name with an escape, or a `_meta` neither an object nor `null`,
            // sends the parameters to the tree here.
            let odd_meta = object.get("_meta").is_some_and(|m| !m.is_object() && !m.is_null());
            prop_assert!(json.contains('\\') || odd_meta);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A member set to a string (a routed name) is written by the text writer as the tree
    /// writer writes it, escapes included.
    #[test]
    fn a_member_set_to_a_string_is_written_as_the_trees(
        name in prop_oneof![any::<String>(), "[a-z_\"\\\\\\x00-\\x1f\u{7f}\u{e9}]{0,20}"],
    ) {
        const SENT: &str = r#"{"name":"pfx__add","arguments":{"a":1},"_meta":{"k":"v"}}"#;
        let mut params = text(SENT);
        params.set_member("name", Value::from(name.clone()));
        prop_assert!(params.text_view().is_some());
        let mut whole = tree(SENT);
        whole["name"] = Value::from(name);
        let written = modern_call_body(&json!(7), "tools/call", Some(&params), meta(None, None));
        let expected = modern_request_body(&json!(7), "tools/call", Some(&whole), meta(None, None));
        prop_assert_eq!(read_body(&written), read_body(&expected));
    }
}
