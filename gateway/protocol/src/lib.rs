//! The MCP protocol rules the gateway applies, in one place: the two eras and how a request
//! says which, the methods each era has, the header codec, and the HTTP status that goes with
//! a JSON-RPC error.
//!
//! The 2026-07-28 revision is stateless: every request carries its version in
//! `params._meta["io.modelcontextprotocol/protocolVersion"]` and in the `MCP-Protocol-Version`
//! header, and the HTTP status is part of an error answer (404 with -32601, 400 with -32600,
//! -32602, -32700 and -32020..-32022). The legacy revisions open with `initialize`, carry an
//! `Mcp-Session-Id`, and put every JSON-RPC error on HTTP 200. Following the versioning page,
//! the body decides the era first (modern `_meta` present, or the method is `initialize`), then
//! the headers.
//!
//! The crate is the leaf of the gateway's layers: it knows JSON-RPC and MCP, nothing of routes,
//! callers or upstreams. Beside the rules here: [`capabilities`] (client capability bits),
//! [`params`] (a call's parameters kept as the text they came in), [`jsonrpc`] (request bodies
//! and answers on the wire), [`sse`] (event framing),
//! [`param_headers`] (`Mcp-Param-*` derived from a tool's schema), [`schema`] (the one
//! sanitizer of tool schemas handed to providers and built from OpenAPI documents),
//! [`trace_context`] (W3C trace context in `_meta`).

pub mod capabilities;
pub mod jsonrpc;
pub mod param_headers;
pub mod params;
pub mod scan;
pub mod schema;
pub mod sse;
pub mod trace_context;

pub use params::Params;

/// JSON-RPC codes from the JSON-RPC 2.0 specification.
pub mod codes {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// Gateway codes in the implementation-defined server error range.
    pub const UPSTREAM_TIMEOUT: i64 = -32001;
    pub const UPSTREAM_UNAVAILABLE: i64 = -32002;
    pub const UPSTREAM_AUTH: i64 = -32003;
    /// A key's or a server's request limit refused the request (HTTP 429, `Retry-After`).
    pub const LIMITED: i64 = -32004;
    /// MCP 2025-11-25 `URLElicitationRequiredError`: the request needs the user to open a URL
    /// first (here: to connect their account at a third-party server).
    pub const URL_ELICITATION_REQUIRED: i64 = -32042;
}

use std::ops::Range;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::StatusCode;
use serde_json::Value;
use serde_json::value::RawValue;

/// The MCP headers as header names: a `&str` name is parsed (checked and hashed as text) on
/// every lookup, a `HeaderName` constant is not (these are read on every call).
pub mod headers {
    use http::HeaderName;

    pub const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
    pub const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
    pub const METHOD: HeaderName = HeaderName::from_static("mcp-method");
    pub const NAME: HeaderName = HeaderName::from_static("mcp-name");
}

/// The `Accept` of a Streamable HTTP POST: a JSON answer or an event stream. (What the
/// official SDKs send, and what the gateway sends upstream.)
pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

pub const MODERN_VERSION: &str = "2026-07-28";
/// Legacy revisions served to clients, oldest first. A sealed session stores an index here.
pub const LEGACY_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
pub const LATEST_LEGACY_VERSION: &str = "2025-11-25";

pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// Sent by the gateway with a legacy `initialize` to a `byClient` upstream (the stdio bridge):
/// a digest naming the client session, the same from every gateway replica, so that every
/// replica's upstream session for that client session is the same one (one process).
pub const AFFINITY_HEADER: &str = "mcp-switchboard-affinity";
/// Sent with the affinity when the gateway replica had an upstream session for this client
/// session already (it got 404 on it): the upstream must hand back that same session or say it
/// is gone (HTTP 410), never open a new one, whose state would not be the client's.
pub const RESUME_HEADER: &str = "mcp-switchboard-resume";

/// Log levels, most verbose first (RFC 5424 names, as MCP uses them).
pub const LOG_LEVELS: &[&str] = &[
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// A list a server announces changed with `notifications/<list>/list_changed` (both eras:
/// on a legacy session's streams, on a 2026-07-28 `subscriptions/listen` stream). A client
/// that gets one lists again; whoever caches the list must not answer from before the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListChanged {
    Tools,
    Prompts,
    /// Resources and resource templates (one notification covers both).
    Resources,
}

impl ListChanged {
    pub const ALL: [ListChanged; 3] = [
        ListChanged::Tools,
        ListChanged::Prompts,
        ListChanged::Resources,
    ];

    pub fn from_method(method: &str) -> Option<ListChanged> {
        match method {
            "notifications/tools/list_changed" => Some(ListChanged::Tools),
            "notifications/prompts/list_changed" => Some(ListChanged::Prompts),
            "notifications/resources/list_changed" => Some(ListChanged::Resources),
            _ => None,
        }
    }

    /// The change a JSON-RPC message's text announces, if it is such a notification. Cheap on
    /// the messages a relay passes (most are not): only a text that names a list change is
    /// parsed, and only its `method` and `id` are read.
    pub fn announced_by(message: &str) -> Option<ListChanged> {
        if !message.contains("/list_changed") {
            return None;
        }
        #[derive(serde::Deserialize)]
        struct Probe<'a> {
            #[serde(borrow)]
            method: Option<std::borrow::Cow<'a, str>>,
            id: Option<serde::de::IgnoredAny>,
        }
        let probe: Probe = serde_json::from_str(message).ok()?;
        match (probe.method, probe.id) {
            (Some(method), None) => ListChanged::from_method(&method),
            _ => None,
        }
    }

    /// A small index (0..3), for per-list state.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// 2026-07-28 error codes (HTTP 400).
pub const HEADER_MISMATCH: i64 = -32020;
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// The 2026-07-28 revision: stateless, the version in every request. (A later revision
    /// that keeps its wire is served here too; one that changes it gets a variant of its own.)
    Rev2026,
    /// The revisions 2024-11-05 … 2025-11-25 ("legacy" in prose and logs): `initialize`,
    /// then a session.
    Rev2025,
}

/// Which era a POST speaks. `headers` reads its `MCP-Protocol-Version` and whether it has an
/// `Mcp-Session-Id`, only when the body does not say.
pub fn classify<'h>(
    method: &str,
    params: Option<&Params>,
    headers: impl FnOnce() -> (Option<&'h str>, bool),
) -> Era {
    // A 2026-07-28 `initialize` is the removed method it is, not a legacy handshake.
    if params.is_some_and(|p| p.meta_has(META_PROTOCOL_VERSION)) {
        return Era::Rev2026;
    }
    if method == "initialize" {
        return Era::Rev2025;
    }
    let (version_header, has_session) = headers();
    if has_session {
        return Era::Rev2025;
    }
    match version_header {
        Some(v) if !LEGACY_VERSIONS.contains(&v) => Era::Rev2026,
        _ => Era::Rev2025,
    }
}

pub fn legacy_version_index(version: &str) -> Option<u8> {
    LEGACY_VERSIONS
        .iter()
        .position(|v| *v == version)
        .map(|i| i as u8)
}

/// The version a legacy `initialize` negotiates: the client's if we serve it, else our latest.
pub fn negotiate_legacy(requested: Option<&str>) -> &'static str {
    requested
        .and_then(|r| LEGACY_VERSIONS.iter().find(|v| **v == r))
        .copied()
        .unwrap_or(LATEST_LEGACY_VERSION)
}

/// Methods of the legacy revisions that 2026-07-28 removed: a 2026-07-28 request for one is
/// answered 404 with -32601, like any method the server does not have.
pub const REMOVED_IN_MODERN: &[&str] = &[
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// Every version served, newest first: what `server/discover` and an "unsupported version"
/// error both list.
pub fn supported_versions() -> Vec<&'static str> {
    let mut all = vec![MODERN_VERSION];
    all.extend(LEGACY_VERSIONS.iter().rev());
    all
}

/// The parameter a method names its object by (and `Mcp-Name` repeats, 2026-07-28).
pub fn named_field(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// The methods whose answer may be an input-required result (multi round-trip requests).
pub fn may_require_input(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get" | "resources/read")
}

/// The methods whose 2026-07-28 results carry `ttlMs` and `cacheScope`.
pub fn has_cache_fields(method: &str) -> bool {
    matches!(
        method,
        "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
            | "server/discover"
    )
}

/// Completes a result for a 2026-07-28 client with what that revision requires and a legacy
/// upstream's answer lacks: `resultType` on every result, and the cache hints (`ttlMs`,
/// `cacheScope`) on listings, reads and discovery. Fields the upstream set stay as they are.
pub fn stamp_modern_result(result: &mut Value, method: &str) {
    let Value::Object(m) = result else { return };
    m.entry("resultType")
        .or_insert_with(|| Value::from("complete"));
    if has_cache_fields(method) {
        m.entry("ttlMs").or_insert_with(|| Value::from(0));
        m.entry("cacheScope")
            .or_insert_with(|| Value::from("private"));
    }
}

/// The reverse of [`stamp_modern_result`], for a legacy client of a 2026-07-28 upstream:
/// takes away what only 2026-07-28 results have (`resultType: "complete"`, which a legacy
/// result means by being one, and the cache hints). A `resultType` of another kind (an
/// input-required result, a task) is left to the code that translates it.
pub fn strip_modern_result(result: &mut Value) {
    let Value::Object(m) = result else { return };
    m.retain(|name, value| !only_modern(name, value.as_str() == Some("complete")));
}

/// Whether a result member is one only a 2026-07-28 result has (`complete`: its value is the
/// string "complete"). The one rule both strips follow.
fn only_modern(name: &str, complete: bool) -> bool {
    match name {
        "ttlMs" | "cacheScope" => true,
        "resultType" => complete,
        _ => false,
    }
}

/// A result as the JSON text it came in, with the index of its top-level members when the
/// reading that found it made one (an upstream's answer, [`jsonrpc::raw_response`]): how it is
/// passed on is decided from the index, without reading its text again (that scan cost a
/// `tools/call` about 2,500 instructions). Made from a raw value, it is scanned when asked.
pub struct RawResult {
    text: Box<str>,
    /// Each member's name and value, as ranges into `text`.
    index: Option<Vec<(Range<usize>, Range<usize>)>>,
}

impl RawResult {
    pub fn get(&self) -> &str {
        &self.text
    }

    /// The top-level members; `None` when the text is not an object of plain member names.
    pub fn members(&self) -> Option<ResultMembers<'_>> {
        let Some(index) = &self.index else {
            return Members::scan(&self.text).map(ResultMembers);
        };
        let members = index
            .iter()
            .map(|(name, value)| {
                Some((self.text.get(name.clone())?, self.text.get(value.clone())?))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(ResultMembers(Members(members)))
    }

    pub fn into_string(self) -> String {
        self.text.into_string()
    }

    /// The result a response's one reading found (`read`, borrowed from `body`, the whole
    /// response's text); `None` when its text is not where JSON puts it (it cannot happen:
    /// the body was read as JSON).
    pub(crate) fn of_read(body: &str, read: ObjectRead<'_>) -> Option<RawResult> {
        let members = match read {
            ObjectRead::Null => {
                return Some(RawResult {
                    text: "null".into(),
                    index: None,
                });
            }
            ObjectRead::Object(members) => members,
        };
        // (An empty object has no member to find its braces by: it is written `{}`, space
        // inside it dropped.)
        let Some((first, _)) = members.first() else {
            return Some(RawResult {
                text: "{}".into(),
                index: Some(Vec::new()),
            });
        };
        let b = body.as_bytes();
        let at = |part: &str| offset_in(body, part);
        let start = object_start(b, at(first))?;
        let last_end = members.last().map(|(_, v)| at(v) + v.len())?;
        let close = object_close(b, last_end)?;
        // Ranges into the result's own text (its parts all come after its `{`).
        let within = |part: &str| {
            let from = at(part).checked_sub(start)?;
            Some(from..from + part.len())
        };
        let index = members
            .iter()
            .map(|(name, value)| Some((within(name)?, within(value)?)))
            .collect::<Option<Vec<_>>>()?;
        Some(RawResult {
            text: body.get(start..close + 1)?.into(),
            index: Some(index),
        })
    }
}

impl From<Box<RawValue>> for RawResult {
    fn from(raw: Box<RawValue>) -> RawResult {
        RawResult {
            text: raw.into(),
            index: None,
        }
    }
}

impl std::fmt::Debug for RawResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // (A result is a tool's answer: its text is not printed.)
        f.debug_struct("RawResult")
            .field("bytes", &self.text.len())
            .field("indexed", &self.index.is_some())
            .finish()
    }
}

/// A result's top-level members, read once as text: what decides how the gateway answers
/// with it (`resultType`, `taskId`), and, for a legacy client, the result written again without
/// the 2026-07-28 members, from the same read.
pub struct ResultMembers<'a>(Members<'a>);

impl<'a> ResultMembers<'a> {
    fn get(&self, name: &str) -> Option<&'a str> {
        self.0.0.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    /// Whether `resultType` is the string `kind`; `None` when there is no `resultType` or it
    /// is not a string.
    pub fn result_type_is(&self, kind: &str) -> Option<bool> {
        let text = self.get("resultType")?;
        match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
            Some(plain) if !plain.contains('\\') => Some(plain == kind),
            // An escaped string: compared as the string it means.
            _ => serde_json::from_str::<std::borrow::Cow<'_, str>>(text)
                .ok()
                .map(|t| t == kind),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The result's text without the members only a 2026-07-28 result has; `None` when it has
    /// none (the text as it came is the answer then). Written from the members as they came,
    /// nothing below them parsed: JSON by construction, not validated again.
    pub fn without_modern(&self) -> Option<String> {
        let complete = |value: &str| value == "\"complete\"";
        if !self
            .0
            .0
            .iter()
            .any(|(name, value)| only_modern(name, complete(value)))
        {
            return None;
        }
        let total: usize = self.0.0.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        let mut out = String::with_capacity(total + 2);
        out.push('{');
        for (name, value) in &self.0.0 {
            if only_modern(name, complete(value)) {
                continue;
            }
            if out.len() > 1 {
                out.push(',');
            }
            out.push('"');
            out.push_str(name);
            out.push_str("\":");
            out.push_str(value);
        }
        out.push('}');
        Some(out)
    }
}

/// An object's top-level members in order, each value as its text. A member name must be
/// borrowable (no escapes), which is what makes writing it back as `"name"` exact.
pub(crate) struct Members<'a>(pub(crate) Vec<(&'a str, &'a str)>);

impl<'a> Members<'a> {
    /// The members of `text`, which is valid JSON (a `RawValue`'s: the parser that made it
    /// checked every byte), found by their delimiters alone: nothing checked again, no value
    /// read. `None` when the text is not an object or a member name has an escape. (Read with
    /// serde as a map of raw values, a `tools/call` result cost a call about 3,500
    /// instructions, a second pass over what the parser had just read.)
    pub(crate) fn scan(text: &'a str) -> Option<Members<'a>> {
        let b = text.as_bytes();
        let mut i = skip_space(b, 0);
        if b.get(i) != Some(&b'{') {
            return None;
        }
        i = skip_space(b, i + 1);
        let mut members = Vec::new();
        if b.get(i) == Some(&b'}') {
            return Some(Members(members));
        }
        loop {
            if b.get(i) != Some(&b'"') {
                return None;
            }
            let (name_end, escaped) = string_end(b, i)?;
            if escaped {
                return None;
            }
            let name = &text[i + 1..name_end - 1];
            i = skip_space(b, name_end);
            if b.get(i) != Some(&b':') {
                return None;
            }
            let value_start = skip_space(b, i + 1);
            let value_end = value_end(b, value_start)?;
            members.push((name, &text[value_start..value_end]));
            i = skip_space(b, value_end);
            match b.get(i) {
                Some(b',') => i = skip_space(b, i + 1),
                Some(b'}') => return Some(Members(members)),
                _ => return None,
            }
        }
    }
}

/// An object's members as one reading of a message finds them (each name borrowed, each value
/// as its text, in order, repeated names kept), or `null`: the index of `_meta` and of a result
/// made in the same pass as the message's. Any other value, or a name with an escape (only a
/// borrowed name is taken), refuses the reading.
pub(crate) enum ObjectRead<'a> {
    Object(Vec<(&'a str, &'a str)>),
    Null,
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for ObjectRead<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = ObjectRead<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object or null")
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(ObjectRead::Null)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut members = Vec::new();
                while let Some((name, value)) = map.next_entry::<&'de str, &'de RawValue>()? {
                    members.push((name, value.get()));
                }
                Ok(ObjectRead::Object(members))
            }
        }
        d.deserialize_any(Visit(std::marker::PhantomData))
    }
}

/// `value` as a JSON string, the bytes serde_json writes: a string with nothing to escape (most
/// are names) is copied as it is, else serde_json escapes it.
pub fn write_json_str(out: &mut Vec<u8>, value: &str) {
    if needs_escape(value.as_bytes()) {
        // Writing into a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut *out, value);
        return;
    }
    out.reserve(value.len() + 2);
    out.push(b'"');
    out.extend_from_slice(value.as_bytes());
    out.push(b'"');
}

/// Whether JSON needs an escape for any of `bytes`: a control character, `"` or `\` (serde_json
/// escapes those and nothing else). Looked at eight bytes at a time (the classic word tests for
/// "a byte less than n" and "a byte equal to c", exact for whether any byte is; looked at a byte
/// at a time, an audit record's strings cost about 250 instructions more).
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let flagged = |word: &[u8]| {
        let Ok(word) = <[u8; 8]>::try_from(word) else {
            return true;
        };
        let v = u64::from_ne_bytes(word);
        let control = v.wrapping_sub(ONES * 0x20) & !v & HIGH;
        let quote = zero_byte(v ^ (ONES * u64::from(b'"')));
        let backslash = zero_byte(v ^ (ONES * u64::from(b'\\')));
        control | quote | backslash != 0
    };
    let Some(last) = bytes.len().checked_sub(8) else {
        return bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
    };
    // The whole words, then the last eight bytes (the tail a word would not hold, and some
    // seen again): no byte loop for a string of eight or more.
    bytes.chunks_exact(8).any(flagged) || bytes.get(last..).is_none_or(flagged)
}

/// Where `part`, a slice of `body` (a reading borrowed it from there), begins in `body`.
pub(crate) fn offset_in(body: &str, part: &str) -> usize {
    (part.as_ptr() as usize).wrapping_sub(body.as_ptr() as usize)
}

/// Where an object begins whose first member's name begins at `first_name` (after its quote):
/// the `{` before that quote, space aside. `None` when it is not there.
pub(crate) fn object_start(b: &[u8], first_name: usize) -> Option<usize> {
    let quote = first_name.checked_sub(1)?;
    let open = b
        .get(..quote)?
        .iter()
        .rposition(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r'))?;
    (b[open] == b'{').then_some(open)
}

/// Where an object ends whose last member's value ends at `last_value_end`: its `}`, space
/// aside. `None` when it is not there.
pub(crate) fn object_close(b: &[u8], last_value_end: usize) -> Option<usize> {
    let close = skip_space(b, last_value_end);
    (b.get(close) == Some(&b'}')).then_some(close)
}

/// The first index from `i` that is not JSON white space.
pub(crate) fn skip_space(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// One past the closing quote of the string whose opening quote is at `start`, and whether
/// the string has an escape.
fn string_end(b: &[u8], start: usize) -> Option<(usize, bool)> {
    let mut i = start + 1;
    let mut escaped = false;
    loop {
        i += memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b[i] == b'\\' {
            escaped = true;
            i += 2; // the escaped character, whatever it is
        } else {
            return Some((i + 1, escaped));
        }
    }
}

/// One past the end of the valid JSON value that begins at `start`.
fn value_end(b: &[u8], start: usize) -> Option<usize> {
    match *b.get(start)? {
        b'"' => string_end(b, start).map(|(end, _)| end),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            loop {
                match *b.get(i)? {
                    b'"' => {
                        i = string_end(b, i)?.0;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        // A number, `true`, `false` or `null`: up to what ends it.
        _ => {
            let rest = &b[start..];
            let len = rest
                .iter()
                .position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .unwrap_or(rest.len());
            Some(start + len)
        }
    }
}

/// The HTTP status of a JSON-RPC error in the 2026-07-28 era (legacy: always 200).
pub fn modern_error_status(code: i64) -> StatusCode {
    match code {
        codes::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        codes::PARSE_ERROR | codes::INVALID_REQUEST | codes::INVALID_PARAMS => {
            StatusCode::BAD_REQUEST
        }
        HEADER_MISMATCH | MISSING_REQUIRED_CLIENT_CAPABILITY | UNSUPPORTED_PROTOCOL_VERSION => {
            StatusCode::BAD_REQUEST
        }
        _ => StatusCode::OK,
    }
}

/// Whether a 4xx answer with this code comes from a 2026-07-28 server (rather than a legacy
/// one refusing the modern request form).
pub fn is_modern_error_code(code: i64) -> bool {
    matches!(code, -32022..=-32020 | -32601 | -32602)
}

/// A header value as the 2026-07-28 transport sends it: plain when it is safe visible ASCII,
/// else `=?base64?...?=` (so is a plain value that looks like that sentinel).
pub fn encode_header_value(value: &str) -> String {
    let visible_ascii = value.bytes().all(|b| (0x20..0x7f).contains(&b));
    let padded = value.starts_with(' ') || value.ends_with(' ');
    let looks_encoded = value.starts_with("=?base64?") && value.ends_with("?=");
    if !value.is_empty() && visible_ascii && !padded && !looks_encoded {
        value.to_string()
    } else {
        format!("=?base64?{}?=", STANDARD.encode(value.as_bytes()))
    }
}

/// Decodes a 2026-07-28 header value (`=?base64?...?=` or plain).
pub fn decode_header_value(raw: &str) -> Option<String> {
    match raw
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .ok()
            .and_then(|b| String::from_utf8(b).ok()),
        None => Some(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word tests against the byte test: every byte value at every place of strings
    /// either side of a word's length, in a run of harmless bytes (including the neighbours
    /// of each escaped value, where a word test would go wrong first).
    #[test]
    fn needs_escape_is_the_byte_test() {
        let byte_test = |b: &[u8]| b.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
        for len in 1..=17 {
            for at in 0..len {
                for value in 0..=255u8 {
                    for filler in [b'a', 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xff] {
                        let mut bytes = vec![filler; len];
                        bytes[at] = value;
                        assert_eq!(needs_escape(&bytes), byte_test(&bytes), "{bytes:?}");
                    }
                }
            }
        }
        assert!(!needs_escape(b""));
    }

    #[test]
    fn a_json_str_is_what_serde_writes() {
        for text in [
            "",
            "name",
            "a\"b\\c\nd\u{1}e\u{7f}f\u{2028}g é 🦀 </script>",
            "0123456789abcdef\"",
        ] {
            let mut out = b"[".to_vec();
            write_json_str(&mut out, text);
            let mut expected = b"[".to_vec();
            serde_json::to_writer(&mut expected, text).unwrap_or_default();
            assert_eq!(out, expected, "{text:?}");
        }
    }

    #[test]
    fn list_changes_are_told_by_notifications_only() {
        for (method, change) in [
            ("notifications/tools/list_changed", ListChanged::Tools),
            ("notifications/prompts/list_changed", ListChanged::Prompts),
            (
                "notifications/resources/list_changed",
                ListChanged::Resources,
            ),
        ] {
            let message = format!(
                r#"{{"jsonrpc":"2.0","method":"{method}","params":{{"_meta":{{"io.modelcontextprotocol/subscriptionId":7}}}}}}"#
            );
            assert_eq!(ListChanged::announced_by(&message), Some(change));
        }
        for other in [
            r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"a/list_changed"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"notifications/tools/list_changed"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"text":"notifications/tools/list_changed"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#,
            "not json /list_changed",
        ] {
            assert_eq!(ListChanged::announced_by(other), None, "{other}");
        }
        let indices: Vec<usize> = ListChanged::ALL.iter().map(|c| c.index()).collect();
        assert_eq!(indices, [0, 1, 2]);
    }
    use serde_json::json;

    #[test]
    fn each_era_gets_only_its_own_result_fields() {
        let legacy = json!({"content": [], "isError": false});
        let mut modern = legacy.clone();
        stamp_modern_result(&mut modern, "tools/list");
        assert_eq!(modern["resultType"], "complete");
        assert_eq!(modern["cacheScope"], "private");
        let mut back = modern.clone();
        strip_modern_result(&mut back);
        assert_eq!(back, legacy, "stamp then strip is the legacy result again");
        // The same on the text, without a tree: member order and values as they came.
        let text = serde_json::value::to_raw_value(&modern).unwrap();
        let text = RawResult::from(text);
        let stripped = text
            .members()
            .and_then(|m| m.without_modern())
            .expect("plain member names, with 2026-07-28 members");
        assert_eq!(serde_json::from_str::<Value>(&stripped).unwrap(), legacy);
        let kept = RawValue::from_string(
            r#"{"content":[{"type":"text","text":"ttlMs"}],"resultType":"task","ttlMs":5}"#.into(),
        )
        .unwrap();
        assert_eq!(
            RawResult::from(kept)
                .members()
                .unwrap()
                .without_modern()
                .unwrap(),
            r#"{"content":[{"type":"text","text":"ttlMs"}],"resultType":"task"}"#
        );
        // An input-required result keeps its kind: the relay translates it, not this.
        let mut input = json!({"resultType": "input_required", "inputRequests": {}});
        strip_modern_result(&mut input);
        assert_eq!(input["resultType"], "input_required");
    }

    /// The scan of a result's members against serde_json's reading of the same text: names in
    /// order and each value's text meaning the value, on texts with what could fool a scan by
    /// delimiters (braces, brackets, commas, colons and escaped quotes inside strings, escapes
    /// at a string's end, white space everywhere, every kind of value, nesting); and `None`
    /// where serde's borrowed names would fail (an escaped name) or there is no object.
    #[test]
    fn a_results_members_are_found_as_serde_json_reads_them() {
        let texts = [
            r#"{}"#,
            r#" { } "#,
            r#"{"a":1}"#,
            r#"{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"example-upstream","version":"0.1.0"}},"content":[{"text":"3","type":"text"}],"resultType":"complete","structuredContent":{"result":3}}"#,
            r#"{ "a" : "}{][,:\"" , "b":[1,{"c":"]"},[]] ,"n":-1.5e+10,"t":true,"f":false,"z":null }"#,
            r#"{"s":"ends in a backslash \\","q":"\"quoted\"","u":"\u00e9 é \ud83d\ude00"}"#,
            "{\n\t\"a\"\r\n:\n[\n]\n,\n\"b\"\t:\t{\"x\":{\"y\":[[[\"{\"]]]}}\n}",
            r#"{"dup":1,"dup":2,"":3}"#,
            r#"{"n":0,"m":123}"#,
            // Escapes near the start and past 16 bytes, long and short strings.
            r#"{"k":"0123456789abcd\"f\"ghij","l":"0123456789abcdef\\","m":"0123456789abcdefghijklmnopqrstuvwxyz\"}{","n":"012345678901234\"","o":"0123456789012345"}"#,
        ];
        for text in texts {
            let raw = RawResult::from(RawValue::from_string(text.to_string()).expect("valid JSON"));
            let members = raw.members().unwrap_or_else(|| panic!("{text}"));
            let scanned: Vec<(String, Value)> = members
                .0
                .0
                .iter()
                .map(|(n, v)| (n.to_string(), serde_json::from_str(v).expect(v)))
                .collect();
            // serde_json's reading, duplicates kept: the object's members as a sequence.
            let mut read = Vec::new();
            let mut de = serde_json::Deserializer::from_str(text);
            struct Seq<'r>(&'r mut Vec<(String, Value)>);
            impl<'de> serde::de::Visitor<'de> for Seq<'_> {
                type Value = ();
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
                    while let Some(entry) = m.next_entry::<String, Value>()? {
                        self.0.push(entry);
                    }
                    Ok(())
                }
            }
            serde::Deserializer::deserialize_map(&mut de, Seq(&mut read)).expect(text);
            assert_eq!(scanned, read, "{text}");
            // Indexed in a response's one reading (space around it, members after it), the
            // same members, and the result's text as it came.
            let body = format!("{{\"id\":1,\n\"result\" :\t{text}\n,\"jsonrpc\":\"2.0\"}}");
            let result = jsonrpc::raw_response("application/json", body.as_bytes())
                .and_then(|r| r.result)
                .unwrap_or_else(|| panic!("{body}"));
            // (An empty object has no member to find its braces by: it is written `{}`.)
            let expected = if read.is_empty() { "{}" } else { text.trim() };
            assert_eq!(result.get(), expected, "{text}");
            let indexed: Vec<(String, Value)> = result
                .members()
                .unwrap_or_else(|| panic!("{text}"))
                .0
                .0
                .iter()
                .map(|(n, v)| (n.to_string(), serde_json::from_str(v).expect(v)))
                .collect();
            assert_eq!(indexed, read, "indexed: {text}");
        }
        for text in [
            r#"{"na\u006de":1}"#,
            r#"{"a_name_longer_than_sixteen\u0062":1}"#,
            r#"{"fifteen_chars_\"":1}"#,
            r#"[1,2]"#,
            r#""{}""#,
            "1",
            "null",
        ] {
            let raw = RawResult::from(RawValue::from_string(text.to_string()).expect("valid JSON"));
            assert!(raw.members().is_none(), "{text}");
        }
    }

    #[test]
    fn body_decides_before_headers() {
        let modern = Params::from(json!({"_meta": {META_PROTOCOL_VERSION: "2026-07-28"}}));
        assert_eq!(
            classify("tools/list", Some(&modern), || (None, false)),
            Era::Rev2026
        );
        assert_eq!(
            classify("initialize", Some(&modern), || (None, false)),
            Era::Rev2026
        );
        assert_eq!(classify("initialize", None, || (None, false)), Era::Rev2025);
        assert_eq!(
            classify("tools/list", None, || (Some("2025-06-18"), true)),
            Era::Rev2025
        );
        assert_eq!(
            classify("tools/list", None, || (Some("2026-07-28"), false)),
            Era::Rev2026
        );
        assert_eq!(classify("tools/list", None, || (None, false)), Era::Rev2025);
    }

    #[test]
    fn negotiation_and_header_decoding() {
        assert_eq!(negotiate_legacy(Some("2025-03-26")), "2025-03-26");
        assert_eq!(negotiate_legacy(Some("2026-07-28")), "2025-11-25");
        assert_eq!(
            decode_header_value("=?base64?aMOpbGxv?="),
            Some("héllo".into())
        );
        assert_eq!(decode_header_value("add"), Some("add".into()));
        assert_eq!(encode_header_value("add"), "add");
        assert_eq!(encode_header_value("héllo"), "=?base64?aMOpbGxv?=");
        assert_eq!(encode_header_value(" x"), "=?base64?IHg=?=");
        assert!(encode_header_value("=?base64?abc?=").starts_with("=?base64?PT9i"));
    }

    #[test]
    fn modern_statuses() {
        assert_eq!(modern_error_status(-32601), StatusCode::NOT_FOUND);
        assert_eq!(modern_error_status(-32602), StatusCode::BAD_REQUEST);
        assert_eq!(modern_error_status(-32021), StatusCode::BAD_REQUEST);
        assert_eq!(modern_error_status(-32001), StatusCode::OK);
        assert_eq!(supported_versions()[0], MODERN_VERSION);
        assert_eq!(named_field("tasks/get"), Some("taskId"));
    }
}
