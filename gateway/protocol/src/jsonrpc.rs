//! The JSON-RPC wire towards an upstream: writing a request body straight from the caller's
//! parameters, and reading an upstream's HTTP answer (a JSON body or an SSE stream) into the
//! one JSON-RPC response that answers our request.

use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::capabilities;
use crate::params::{MemberView, Params, TextView};
use crate::scan::{self, ResponseRead};
use crate::trace_context::{self, TraceContext};
use crate::{
    META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL, META_PROTOCOL_VERSION,
    MODERN_VERSION, RawResult,
};

#[derive(Serialize)]
struct Envelope<'a, P> {
    jsonrpc: &'static str,
    id: &'a Value,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<P>,
}

/// A JSON-RPC request body with the parameters as given.
pub fn request_body(id: &Value, method: &str, params: Option<&Value>) -> Vec<u8> {
    let envelope = Envelope {
        jsonrpc: "2.0",
        id,
        method,
        params,
    };
    body_of(&envelope)
}

/// The `_meta` keys the 2026-07-28 revision reserves for what a legacy session says once (the
/// version, the client's capabilities and identity, its log level). A legacy server gets them
/// from the session instead: one that reads the era from the body first (as this gateway does)
/// would refuse a request that carries them.
pub const MODERN_SESSION_META: [&str; 4] = [
    META_PROTOCOL_VERSION,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
];

/// A request body for a legacy session: the parameters as given, less the 2026-07-28 reserved
/// `_meta` keys (a 2026-07-28 client's, or an outer gateway's), with `trace` (the gateway's
/// context for this request) in `_meta` in place of whatever trace context the client put
/// there, written in one pass without copying the parameters. A request with neither is
/// written as it is.
pub fn legacy_request_body(
    id: &Value,
    method: &str,
    params: Option<&Value>,
    trace: Option<&TraceContext>,
) -> Vec<u8> {
    let carries_modern = params
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object)
        .is_some_and(|m| MODERN_SESSION_META.iter().any(|k| m.contains_key(*k)));
    // Parameters that are not an object (the client's mistake) are passed on as they are.
    let object = match params {
        None => None,
        Some(Value::Object(p)) => Some(p),
        Some(_) => return request_body(id, method, params),
    };
    if !carries_modern && trace.is_none() {
        return request_body(id, method, params);
    }
    let envelope = Envelope {
        jsonrpc: "2.0",
        id,
        method,
        params: Some(LegacyParams {
            params: object,
            trace,
        }),
    };
    body_of(&envelope)
}

/// A notification body for a legacy session (`notifications/initialized`, a cancellation), with
/// `trace` in its `_meta` as [`legacy_request_body`] writes it.
pub fn legacy_notification_body(
    method: &str,
    params: Option<&Map<String, Value>>,
    trace: Option<&TraceContext>,
) -> Vec<u8> {
    #[derive(Serialize)]
    struct Notification<'a> {
        jsonrpc: &'static str,
        method: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        params: Option<LegacyParams<'a>>,
    }
    let params = (params.is_some() || trace.is_some()).then_some(LegacyParams { params, trace });
    let notification = Notification {
        jsonrpc: "2.0",
        method,
        params,
    };
    body_of(&notification)
}

struct LegacyParams<'a> {
    params: Option<&'a Map<String, Value>>,
    trace: Option<&'a TraceContext>,
}

impl Serialize for LegacyParams<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        let mut wrote_meta = false;
        for (name, value) in self.params.into_iter().flatten() {
            match (name.as_str(), value.as_object()) {
                ("_meta", Some(meta)) => {
                    let kept = LegacyMeta {
                        client: meta,
                        trace: self.trace,
                    };
                    if kept.is_empty() {
                        continue;
                    }
                    map.serialize_entry("_meta", &kept)?;
                    wrote_meta = true;
                }
                // A `_meta` that is not an object is the client's mistake, passed on for the
                // server to judge rather than silently replaced.
                ("_meta", None) => {
                    map.serialize_entry(name, value)?;
                    wrote_meta = true;
                }
                _ => map.serialize_entry(name, value)?,
            }
        }
        if !wrote_meta && let Some(trace) = self.trace {
            map.serialize_entry("_meta", &TraceMeta(trace))?;
        }
        map.end()
    }
}

/// A client's `_meta` as a legacy server gets it: less the 2026-07-28 reserved keys, and with
/// the gateway's trace context in place of the client's.
struct LegacyMeta<'a> {
    client: &'a Map<String, Value>,
    trace: Option<&'a TraceContext>,
}

impl LegacyMeta<'_> {
    fn keeps(&self, name: &str) -> bool {
        let replaced = self.trace.is_some() && is_trace_key(name);
        !MODERN_SESSION_META.contains(&name) && !replaced
    }

    fn is_empty(&self) -> bool {
        self.trace.is_none() && !self.client.keys().any(|k| self.keeps(k))
    }
}

impl Serialize for LegacyMeta<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (name, value) in self.client {
            if self.keeps(name) {
                map.serialize_entry(name, value)?;
            }
        }
        if let Some(trace) = self.trace {
            write_trace(&mut map, trace)?;
        }
        map.end()
    }
}

/// A `_meta` holding a trace context alone.
struct TraceMeta<'a>(&'a TraceContext);

impl Serialize for TraceMeta<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        write_trace(&mut map, self.0)?;
        map.end()
    }
}

fn is_trace_key(name: &str) -> bool {
    name == trace_context::TRACEPARENT || name == trace_context::TRACESTATE
}

fn write_trace<M: SerializeMap>(map: &mut M, trace: &TraceContext) -> Result<(), M::Error> {
    map.serialize_entry(trace_context::TRACEPARENT, trace.traceparent())?;
    if let Some(state) = trace.tracestate() {
        map.serialize_entry(trace_context::TRACESTATE, state)?;
    }
    Ok(())
}

/// What a 2026-07-28 server requires in every request's `_meta`, beyond what the client sent.
#[derive(Clone, Copy)]
pub struct ModernMeta<'a> {
    /// The gateway's `clientInfo`, unless the client sent its own.
    pub client_info: &'a RawValue,
    /// A legacy client's capabilities (from its session), unless the client sent its own.
    pub capabilities: u8,
    /// A legacy client's log level, unless `_meta` names one.
    pub log_level: Option<&'a str>,
    /// The gateway's trace context for this request, in place of the client's.
    pub trace: Option<&'a TraceContext>,
}

/// A 2026-07-28 request body: the client's parameters with the per-request `_meta` a modern
/// server requires, written in one pass. The parameters are read where they are, never copied
/// (they can be large: tool arguments). The client's `_meta` fields are kept (its own
/// capabilities, its progress token) except the protocol version, which is the gateway's, and
/// the trace context, which is the gateway's when it has one.
pub(crate) fn modern_request_body(
    id: &Value,
    method: &str,
    params: Option<&Value>,
    meta: ModernMeta<'_>,
) -> Vec<u8> {
    let envelope = Envelope {
        jsonrpc: "2.0",
        id,
        method,
        params: Some(ModernParams {
            params: params.and_then(Value::as_object),
            meta,
        }),
    };
    body_of(&envelope)
}

/// `modern_request_body` for a client's call: its parameters written from the text they came
/// in while nothing changed them but set members (no tree built, none written), else from the
/// tree. The two write the same members; the text keeps the client's order of them.
pub fn modern_call_body(
    id: &Value,
    method: &str,
    params: Option<&Params>,
    meta: ModernMeta<'_>,
) -> Vec<u8> {
    match params.and_then(Params::text_view) {
        Some(text) => text_body(id, method, |out| write_modern_params(out, &text, meta)),
        None => modern_request_body(id, method, params.map(|p| &**p), meta),
    }
}

/// [`legacy_request_body`] for a client's call, written from the text as [`modern_call_body`]
/// is.
pub fn legacy_call_body(
    id: &Value,
    method: &str,
    params: Option<&Params>,
    trace: Option<&TraceContext>,
) -> Vec<u8> {
    match params.and_then(Params::text_view) {
        Some(text) => text_body(id, method, |out| write_legacy_params(out, &text, trace)),
        None => legacy_request_body(id, method, params.map(|p| &**p), trace),
    }
}

/// The envelope `Envelope` serializes, with the parameters written by `params`.
fn text_body(id: &Value, method: &str, params: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut body = Vec::with_capacity(512);
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    let _ = serde_json::to_writer(&mut body, id);
    body.extend_from_slice(br#","method":"#);
    crate::write_json_str(&mut body, method);
    body.extend_from_slice(br#","params":"#);
    params(&mut body);
    body.push(b'}');
    body
}

/// `ModernParams` from the text: the members but `_meta` as they are, then `_meta` with the
/// 2026-07-28 members (`MetaWithModern`).
fn write_modern_params(out: &mut Vec<u8>, text: &TextView<'_>, meta: ModernMeta<'_>) {
    let mut object = Object::open(out);
    let mut client_meta = None;
    for member in text.params.members() {
        if member.key() == "_meta" {
            client_meta = Some(member);
        } else {
            object.member(&member);
        }
    }
    match client_meta {
        // A `_meta` that is not an object is the client's mistake, passed on for the server
        // to judge rather than silently replaced.
        Some(other) if !other.is_object() => object.member(&other),
        _ => {
            object.key("_meta");
            let client = text.meta;
            let has = |name: &str| client.is_some_and(|m| m.has(name));
            let replaced = |name: &str| {
                name == META_PROTOCOL_VERSION || (meta.trace.is_some() && is_trace_key(name))
            };
            let mut inner = Object::open(object.out);
            for member in client.iter().flat_map(|m| m.members()) {
                if !replaced(member.key()) {
                    inner.member(&member);
                }
            }
            inner.entry(META_PROTOCOL_VERSION, MODERN_VERSION);
            if let Some(trace) = meta.trace {
                inner.trace(trace);
            }
            if !has(META_CLIENT_CAPABILITIES) {
                inner.raw_entry(
                    META_CLIENT_CAPABILITIES,
                    capabilities::json_text(meta.capabilities),
                );
            }
            if !has(META_CLIENT_INFO) {
                inner.raw_entry(META_CLIENT_INFO, meta.client_info);
            }
            if let Some(level) = meta.log_level
                && !has(META_LOG_LEVEL)
            {
                inner.entry(META_LOG_LEVEL, level);
            }
            inner.close();
        }
    }
    object.close();
}

/// `legacy_request_body`'s parameters from the text: as they are, unless `_meta` carries a
/// 2026-07-28 reserved member or there is a trace context to put there (`LegacyParams`).
fn write_legacy_params(out: &mut Vec<u8>, text: &TextView<'_>, trace: Option<&TraceContext>) {
    let client = text.meta;
    let carries_modern =
        client.is_some_and(|m| m.members().any(|e| MODERN_SESSION_META.contains(&e.key())));
    let mut object = Object::open(out);
    if !carries_modern && trace.is_none() {
        for member in text.params.members() {
            object.member(&member);
        }
        object.close();
        return;
    }
    let keeps = |name: &str| {
        let replaced = trace.is_some() && is_trace_key(name);
        !MODERN_SESSION_META.contains(&name) && !replaced
    };
    let mut wrote_meta = false;
    for member in text.params.members() {
        if member.key() != "_meta" {
            object.member(&member);
            continue;
        }
        wrote_meta = true;
        match client {
            Some(client) if member.is_object() => {
                if trace.is_none() && !client.members().any(|e| keeps(e.key())) {
                    continue;
                }
                object.key("_meta");
                let mut inner = Object::open(object.out);
                for entry in client.members() {
                    if keeps(entry.key()) {
                        inner.member(&entry);
                    }
                }
                if let Some(trace) = trace {
                    inner.trace(trace);
                }
                inner.close();
            }
            // Not an object: the client's mistake, passed on for the server to judge.
            _ => object.member(&member),
        }
    }
    if !wrote_meta && let Some(trace) = trace {
        object.key("_meta");
        let mut inner = Object::open(object.out);
        inner.trace(trace);
        inner.close();
    }
    object.close();
}

/// A JSON object written member by member.
struct Object<'o> {
    out: &'o mut Vec<u8>,
    first: bool,
}

impl<'o> Object<'o> {
    fn open(out: &'o mut Vec<u8>) -> Object<'o> {
        out.push(b'{');
        Object { out, first: true }
    }

    /// A member's key and the colon: its value is written next.
    fn key(&mut self, key: &str) {
        if !std::mem::take(&mut self.first) {
            self.out.push(b',');
        }
        crate::write_json_str(self.out, key);
        self.out.push(b':');
    }

    /// A member whose value is JSON text already.
    fn raw_entry(&mut self, key: &str, value: &RawValue) {
        self.key(key);
        self.out.extend_from_slice(value.get().as_bytes());
    }

    fn entry(&mut self, key: &str, value: &(impl Serialize + ?Sized)) {
        self.key(key);
        let _ = serde_json::to_writer(&mut *self.out, value);
    }

    /// A member of the text, as it came (or as set).
    fn member(&mut self, member: &MemberView<'_>) {
        if !std::mem::take(&mut self.first) {
            self.out.push(b',');
        }
        member.write_key(self.out);
        self.out.push(b':');
        member.write_value(self.out);
    }

    fn trace(&mut self, trace: &TraceContext) {
        self.entry(trace_context::TRACEPARENT, trace.traceparent());
        if let Some(state) = trace.tracestate() {
            self.entry(trace_context::TRACESTATE, state);
        }
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

/// A message's body written into a buffer with room for a typical call at once (a `tools/call`
/// with its `_meta` is 300-500 bytes; serde_json's own buffer starts at 128 and doubles).
fn body_of(envelope: &impl Serialize) -> Vec<u8> {
    let mut body = Vec::with_capacity(512);
    match serde_json::to_writer(&mut body, envelope) {
        Ok(()) => body,
        Err(_) => Vec::new(),
    }
}

struct ModernParams<'a> {
    /// Parameters that are not an object are replaced, as a server could not read them.
    params: Option<&'a Map<String, Value>>,
    meta: ModernMeta<'a>,
}

impl Serialize for ModernParams<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        let mut client_meta = None;
        for (name, value) in self.params.into_iter().flatten() {
            if name == "_meta" {
                client_meta = Some(value);
            } else {
                map.serialize_entry(name, value)?;
            }
        }
        match client_meta {
            // A `_meta` that is not an object is the client's mistake, passed on for the
            // server to judge rather than silently replaced.
            Some(other) if !other.is_object() => map.serialize_entry("_meta", other)?,
            client => map.serialize_entry(
                "_meta",
                &MetaWithModern {
                    client: client.and_then(Value::as_object),
                    meta: self.meta,
                },
            )?,
        }
        map.end()
    }
}

struct MetaWithModern<'a> {
    client: Option<&'a Map<String, Value>>,
    meta: ModernMeta<'a>,
}

impl Serialize for MetaWithModern<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let has = |name: &str| self.client.is_some_and(|m| m.contains_key(name));
        let mut map = serializer.serialize_map(None)?;
        let replaced = |name: &str| {
            name == META_PROTOCOL_VERSION || (self.meta.trace.is_some() && is_trace_key(name))
        };
        for (name, value) in self.client.into_iter().flatten() {
            if !replaced(name) {
                map.serialize_entry(name, value)?;
            }
        }
        map.serialize_entry(META_PROTOCOL_VERSION, MODERN_VERSION)?;
        if let Some(trace) = self.meta.trace {
            write_trace(&mut map, trace)?;
        }
        if !has(META_CLIENT_CAPABILITIES) {
            map.serialize_entry(
                META_CLIENT_CAPABILITIES,
                capabilities::json_text(self.meta.capabilities),
            )?;
        }
        if !has(META_CLIENT_INFO) {
            map.serialize_entry(META_CLIENT_INFO, self.meta.client_info)?;
        }
        if let Some(level) = self.meta.log_level
            && !has(META_LOG_LEVEL)
        {
            map.serialize_entry(META_LOG_LEVEL, level)?;
        }
        map.end()
    }
}

/// A JSON-RPC response object with its `result` left as the JSON text it came in, indexed.
pub struct RawResponse {
    /// The request it answers; `None` when absent or `null`.
    pub id: Option<Value>,
    /// Present (even as `null`) when the response is a result.
    pub result: Option<RawResult>,
    pub error: Option<Value>,
}

impl RawResponse {
    /// Whether this is the response to request `id`: a result names that request; an error
    /// names it or none (`null`: the server could not read which request it was). A message
    /// with neither a result nor an error (a request, a notification) answers nothing.
    pub fn answers(&self, id: &Value) -> bool {
        answer_to(
            self.id.as_ref(),
            self.result.is_some(),
            self.error.is_some(),
            id,
        )
        .is_some()
    }
}

/// How a message answers request `id` (the one rule for a raw answer and one read into a tree):
/// a result or an error naming it is its response; an error naming no request (absent or `null`
/// id: the server could not read which request it was) answers it when nothing names it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Answer {
    Unnamed,
    Named,
}

fn answer_to(own: Option<&Value>, result: bool, error: bool, id: &Value) -> Option<Answer> {
    let own = own.filter(|v| !v.is_null());
    match (result, error, own) {
        (true, _, Some(own)) | (false, true, Some(own)) if own == id => Some(Answer::Named),
        (false, true, None) => Some(Answer::Unnamed),
        _ => None,
    }
}

/// The response of a plain JSON body holding one response object, without building a tree of
/// its result; `None` for any other body (SSE, a batch, not JSON), which
/// [`response_from_body`] reads.
pub fn raw_response(content_type: &str, body: &[u8]) -> Option<RawResponse> {
    if content_type.starts_with("text/event-stream")
        || body.trim_ascii_start().first() != Some(&b'{')
    {
        return None;
    }
    // UTF-8 checked once for the whole body rather than string by string by the parser. A
    // result that is not an object (nor `null`), or has a member name with an escape, is left
    // to `response_from_body` as well.
    let body = std::str::from_utf8(body).ok()?;
    // The walk of the common answer first, serde's reading of the rest (`crate::scan`).
    let read =
        scan::walk_result(body).or_else(|| serde_json::from_str::<ResponseRead>(body).ok())?;
    let result = match read.result {
        Some(result) => Some(RawResult::of_read(body, result)?),
        None => None,
    };
    Some(RawResponse {
        id: read.id,
        result,
        error: read.error,
    })
}

/// Whether a `tools/call` result (its JSON text) says `isError: true`: the tool failed. Read
/// without building the result (its content is skipped, never kept).
pub fn is_tool_error(result: &str) -> bool {
    #[derive(Deserialize)]
    struct Flag {
        #[serde(rename = "isError", default)]
        is_error: Option<Value>,
    }
    serde_json::from_str::<Flag>(result).is_ok_and(|flag| flag.is_error == Some(Value::Bool(true)))
}

/// The JSON-RPC response to request `id` in a body, whichever way the upstream framed it: the
/// message naming the request, else an error naming none (the same rule as
/// [`RawResponse::answers`]).
pub fn response_from_body(content_type: &str, body: &[u8], id: &Value) -> Option<Value> {
    let mut messages = if content_type.starts_with("text/event-stream") {
        sse_messages(body)
    } else {
        match serde_json::from_slice(body).ok()? {
            Value::Array(items) => items,
            v => vec![v],
        }
    };
    let answer = |m: &Value| {
        answer_to(
            m.get("id"),
            m.get("result").is_some(),
            m.get("error").is_some(),
            id,
        )
    };
    // The first message naming the request, else the first unnamed error.
    let (_, at) = messages
        .iter()
        .enumerate()
        .filter_map(|(at, m)| answer(m).map(|a| (std::cmp::Reverse(a), at)))
        .min()?;
    Some(messages.swap_remove(at))
}

/// Every `data:` payload of an SSE body that parses as JSON, in order. Multi-line data fields
/// are joined with `\n` as the SSE specification says; comments and other fields are skipped.
pub fn sse_messages(body: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(body);
    let mut out = Vec::new();
    let mut data = String::new();
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            flush(&mut data, &mut out);
        } else if let Some(rest) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
        }
    }
    flush(&mut data, &mut out);
    out
}

fn flush(data: &mut String, out: &mut Vec<Value>) {
    if !data.is_empty() {
        if let Ok(v) = serde_json::from_str(data) {
            out.push(v);
        }
        data.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_error_is_read_from_the_result_alone() {
        assert!(is_tool_error(
            r#"{"content":[{"type":"text","text":"isError: true"}],"isError":true}"#
        ));
        for ok in [
            r#"{"content":[{"type":"text","text":"\"isError\":true"}]}"#,
            r#"{"content":[],"isError":false}"#,
            r#"{"isError":"true"}"#,
            r#"{}"#,
            "not json",
        ] {
            assert!(!is_tool_error(ok), "{ok}");
        }
    }

    #[test]
    fn a_legacy_body_leaves_out_the_2026_reserved_meta_and_keeps_the_rest() {
        let params = json!({
            "name": "t",
            "arguments": {"x": 1},
            "_meta": {
                META_PROTOCOL_VERSION: MODERN_VERSION,
                META_CLIENT_CAPABILITIES: {"sampling": {}},
                META_CLIENT_INFO: {"name": "c", "version": "1"},
                META_LOG_LEVEL: "info",
                "progressToken": 7,
                "io.modelcontextprotocol/related-task": {"taskId": "t1"},
            },
        });
        let body: Value = serde_json::from_slice(&legacy_request_body(
            &json!(1),
            "tools/call",
            Some(&params),
            None,
        ))
        .unwrap();
        assert_eq!(
            body["params"],
            json!({"name": "t", "arguments": {"x": 1}, "_meta": {
                "progressToken": 7, "io.modelcontextprotocol/related-task": {"taskId": "t1"}}})
        );
        // Only reserved keys: no `_meta` at all (an empty one says nothing).
        let only = json!({"name": "t", "_meta": {META_PROTOCOL_VERSION: MODERN_VERSION}});
        let body: Value = serde_json::from_slice(&legacy_request_body(
            &json!(2),
            "tools/call",
            Some(&only),
            None,
        ))
        .unwrap();
        assert_eq!(body["params"], json!({"name": "t"}));
        // Nothing reserved: the same bytes as the plain writer.
        let plain = json!({"name": "t", "_meta": {"progressToken": 1}});
        assert_eq!(
            legacy_request_body(&json!(3), "tools/call", Some(&plain), None),
            request_body(&json!(3), "tools/call", Some(&plain))
        );
    }
    use serde_json::json;

    fn modern(params: Option<Value>, log_level: Option<&str>) -> Value {
        modern_traced(params, log_level, None)
    }

    fn modern_traced(
        params: Option<Value>,
        log_level: Option<&str>,
        trace: Option<&TraceContext>,
    ) -> Value {
        let meta = ModernMeta {
            client_info: &serde_json::value::to_raw_value(&json!({"name": "gw"}))
                .unwrap_or_default(),
            capabilities: 0,
            log_level,
            trace,
        };
        let body = modern_request_body(&json!(7), "tools/call", params.as_ref(), meta);
        serde_json::from_slice(&body).unwrap()
    }

    #[test]
    fn modern_meta_keeps_the_clients_fields() {
        let out = modern(
            Some(
                json!({"name": "add", "arguments": {"a": 1}, "_meta": {"progressToken": 5,
                META_PROTOCOL_VERSION: "2025-11-25", META_CLIENT_INFO: {"name": "client"}}}),
            ),
            Some("debug"),
        );
        assert_eq!(out["jsonrpc"], "2.0");
        assert_eq!(out["id"], 7);
        assert_eq!(out["method"], "tools/call");
        let params = &out["params"];
        assert_eq!(params["name"], "add");
        assert_eq!(params["arguments"], json!({"a": 1}));
        let meta = &params["_meta"];
        assert_eq!(meta["progressToken"], 5);
        assert_eq!(meta[META_PROTOCOL_VERSION], MODERN_VERSION);
        assert_eq!(meta[META_CLIENT_CAPABILITIES], json!({}));
        assert_eq!(meta[META_CLIENT_INFO], json!({"name": "client"}));
        assert_eq!(meta[META_LOG_LEVEL], "debug");
        assert_eq!(meta.as_object().unwrap().len(), 5);
    }

    #[test]
    fn modern_meta_is_added_where_the_client_sent_none() {
        for params in [None, Some(json!([1, 2])), Some(json!({"name": "add"}))] {
            let out = modern(params.clone(), None);
            let meta = &out["params"]["_meta"];
            assert_eq!(meta[META_PROTOCOL_VERSION], MODERN_VERSION, "{params:?}");
            assert_eq!(meta[META_CLIENT_INFO], json!({"name": "gw"}));
            assert!(meta.get(META_LOG_LEVEL).is_none());
        }
        // A `_meta` that is not an object is passed on as sent, for the server to judge.
        let out = modern(Some(json!({"name": "add", "_meta": "x"})), Some("debug"));
        assert_eq!(out["params"]["_meta"], "x");
        assert_eq!(out["params"]["name"], "add");
    }

    const CLIENTS: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const OURS: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01";

    #[test]
    fn the_gateways_trace_context_replaces_the_clients_in_either_era() {
        let ours = TraceContext::new(OURS, Some("gw=1")).unwrap();
        let sent = json!({"name": "add", "arguments": {"traceparent": "kept"}, "_meta": {
            "progressToken": 5, "traceparent": CLIENTS, "tracestate": "client=1", "baggage": "k=v"}});
        let expected_meta = json!({"progressToken": 5, "baggage": "k=v",
            "traceparent": OURS, "tracestate": "gw=1"});
        // Legacy: the client's other keys kept, its trace context replaced.
        let legacy: Value = serde_json::from_slice(&legacy_request_body(
            &json!(1),
            "tools/call",
            Some(&sent),
            Some(&ours),
        ))
        .unwrap();
        assert_eq!(legacy["params"]["_meta"], expected_meta);
        assert_eq!(
            legacy["params"]["arguments"],
            json!({"traceparent": "kept"})
        );
        // 2026-07-28: the same, beside the reserved keys.
        let modern = modern_traced(Some(sent.clone()), None, Some(&ours));
        let meta = modern["params"]["_meta"].as_object().unwrap();
        for (k, v) in expected_meta.as_object().unwrap() {
            assert_eq!(&meta[k], v, "{k}");
        }
        assert_eq!(meta[META_PROTOCOL_VERSION], MODERN_VERSION);
        // No trace of the gateway's: the client's passes as it came.
        let modern = modern_traced(Some(sent.clone()), None, None);
        assert_eq!(modern["params"]["_meta"]["traceparent"], CLIENTS);
        assert_eq!(
            legacy_request_body(&json!(1), "tools/call", Some(&sent), None),
            request_body(&json!(1), "tools/call", Some(&sent))
        );
        // Where the client sent no `_meta`, or no parameters at all, one is made; a tracestate
        // the gateway has none of is not written.
        let bare = TraceContext::new(OURS, None).unwrap();
        for params in [
            None,
            Some(json!({"cursor": "c"})),
            Some(json!({"_meta": {}})),
        ] {
            let legacy: Value = serde_json::from_slice(&legacy_request_body(
                &json!(2),
                "tools/list",
                params.as_ref(),
                Some(&bare),
            ))
            .unwrap();
            assert_eq!(
                legacy["params"]["_meta"],
                json!({"traceparent": OURS}),
                "{params:?}"
            );
        }
        // Parameters that are not an object, or a `_meta` that is not one, are passed as sent.
        for params in [json!([1]), json!({"_meta": "x"})] {
            assert_eq!(
                legacy_request_body(&json!(3), "tools/call", Some(&params), Some(&bare)),
                request_body(&json!(3), "tools/call", Some(&params)),
                "{params}"
            );
        }
    }

    #[test]
    fn a_notification_carries_the_trace_context_too() {
        let ours = TraceContext::new(OURS, None).unwrap();
        let read = |body: Vec<u8>| serde_json::from_slice::<Value>(&body).unwrap();
        assert_eq!(
            read(legacy_notification_body(
                "notifications/initialized",
                None,
                None
            )),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        );
        assert_eq!(
            read(legacy_notification_body(
                "notifications/initialized",
                None,
                Some(&ours)
            )),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized",
                   "params": {"_meta": {"traceparent": OURS}}})
        );
        let params = json!({"requestId": 7, "reason": "gone"});
        assert_eq!(
            read(legacy_notification_body(
                "notifications/cancelled",
                params.as_object(),
                Some(&ours)
            )),
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": {"requestId": 7, "reason": "gone", "_meta": {"traceparent": OURS}}})
        );
    }

    #[test]
    fn raw_responses_keep_the_result_text() {
        let body =
            br#" {"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"3"}]}}"#;
        let r = raw_response("application/json", body).unwrap();
        assert_eq!(
            r.result.unwrap().get(),
            r#"{"content":[{"type":"text","text":"3"}]}"#
        );
        let r = raw_response("application/json", br#"{"id":1,"result":null}"#).unwrap();
        assert_eq!(r.result.unwrap().get(), "null");
        let r = raw_response("application/json", br#"{"id":1,"error":{"code":-1}}"#).unwrap();
        assert!(r.result.is_none());
        assert_eq!(r.error.unwrap()["code"], -1);
        // Left to response_from_body: batches, SSE, broken JSON.
        assert!(raw_response("application/json", br#"[{"id":1,"result":{}}]"#).is_none());
        assert!(raw_response("text/event-stream", br#"{"id":1,"result":{}}"#).is_none());
        assert!(raw_response("application/json", br#"{"id":1,"result":"#).is_none());
    }

    #[test]
    fn a_response_answers_only_the_request_it_names() {
        let read = |body: &str| {
            raw_response("application/json", body.as_bytes()).expect("one JSON object")
        };
        let one = json!(1);
        assert!(read(r#"{"id":1,"result":{}}"#).answers(&one));
        assert!(read(r#"{"id":1,"result":null}"#).answers(&one));
        assert!(!read(r#"{"id":2,"result":{}}"#).answers(&one));
        assert!(!read(r#"{"id":"1","result":{}}"#).answers(&one));
        assert!(!read(r#"{"result":{}}"#).answers(&one));
        assert!(!read(r#"{"id":null,"result":{}}"#).answers(&one));
        // An error may name no request: the server could not read which it was.
        assert!(read(r#"{"id":1,"error":{"code":-32602}}"#).answers(&one));
        assert!(read(r#"{"id":null,"error":{"code":-32700}}"#).answers(&one));
        assert!(read(r#"{"error":{"code":-32700}}"#).answers(&one));
        assert!(!read(r#"{"id":2,"error":{"code":-32602}}"#).answers(&one));
        // A request or a notification answers nothing.
        assert!(!read(r#"{"id":1,"method":"ping"}"#).answers(&one));
        assert!(!read(r#"{"method":"notifications/progress","params":{}}"#).answers(&one));
        // The same rule where the body is read into a tree.
        let tree = |body: &[u8]| response_from_body("application/json", body, &one);
        assert_eq!(tree(br#"{"id":2,"result":{}}"#), None);
        assert_eq!(tree(br#"{"id":1,"method":"ping"}"#), None);
        // In a batch, the message naming the request comes before an error naming none.
        let batch = br#"[{"id":null,"error":{"code":-32600}},{"id":1,"result":{}}]"#;
        assert_eq!(tree(batch), Some(json!({"id":1,"result":{}})));
        assert_eq!(
            tree(br#"[{"id":null,"result":{}},{"error":{"code":-32600}}]"#),
            Some(json!({"error":{"code":-32600}}))
        );
        assert_eq!(
            tree(br#"{"id":1,"result":{}}"#),
            Some(json!({"id":1,"result":{}}))
        );
    }

    #[test]
    fn plain_request_bodies() {
        let body = request_body(&json!(3), "initialize", None);
        assert_eq!(body, br#"{"jsonrpc":"2.0","id":3,"method":"initialize"}"#);
        let params = json!({"cursor": "c"});
        let body: Value =
            serde_json::from_slice(&request_body(&json!(4), "tools/list", Some(&params))).unwrap();
        assert_eq!(body["params"], params);
    }

    #[test]
    fn finds_the_response_among_notifications() {
        let body = b"event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\r\n\r\n: keepalive\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"ok\":true}}\n\n";
        let r = response_from_body("text/event-stream", body, &json!(7)).unwrap();
        assert_eq!(r["result"]["ok"], true);
        assert!(response_from_body("text/event-stream", body, &json!(8)).is_none());
    }

    #[test]
    fn json_bodies() {
        let r = response_from_body(
            "application/json",
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            &json!(1),
        );
        assert!(r.is_some());
        assert!(response_from_body("application/json", b"<html>", &json!(1)).is_none());
    }
}
