//! W3C trace context as MCP carries it: the `traceparent` and `tracestate` keys of a request's
//! `params._meta` (SEP-414, part of the 2026-07-28 revision; the keys are unprefixed, the one
//! exception to `_meta`'s naming rule, and their values follow W3C Trace Context). A server
//! without HTTP headers (a stdio process behind the bridge) can only receive a trace this
//! way; over HTTP it rides beside the `traceparent` header.
//!
//! One type for a context from whichever carrier (a header, a client's `_meta`, the
//! gateway's own span) so that reading, checking and writing it happen in one place: a value
//! of it is valid by construction, and writers never check it again.

use serde::Deserialize;

/// The `_meta` key of the W3C `traceparent` (as the HTTP header is named).
pub const TRACEPARENT: &str = "traceparent";
/// The `_meta` key of the W3C `tracestate`.
pub const TRACESTATE: &str = "tracestate";

/// The longest `tracestate` passed on: W3C asks every hop to pass at least 512 characters and
/// lets it drop what is beyond; a longer one is dropped whole rather than cut mid-member.
const TRACESTATE_CAP: usize = 512;

/// A valid W3C trace context as one hop hands it to the next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

impl TraceContext {
    /// The context of a `traceparent` and the `tracestate` beside it; `None` when the
    /// `traceparent` is not a valid one (W3C: the receiver then starts a trace of its own, and
    /// ignores the `tracestate`). A `tracestate` that could not be passed on as a header
    /// (control characters, over 512 bytes) is left out.
    pub fn new(traceparent: &str, tracestate: Option<&str>) -> Option<TraceContext> {
        let traceparent = traceparent.trim_matches([' ', '\t']);
        if !is_valid_traceparent(traceparent) {
            return None;
        }
        let tracestate = tracestate
            .map(|s| s.trim_matches([' ', '\t']))
            .filter(|s| {
                !s.is_empty()
                    && s.len() <= TRACESTATE_CAP
                    && s.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
            })
            .map(str::to_string);
        Some(TraceContext {
            traceparent: traceparent.to_string(),
            tracestate,
        })
    }

    /// The context a JSON-RPC message's `params._meta` carries. The body is parsed only when
    /// it names `traceparent` at all (most do not: the check is one substring search), and
    /// then into the two keys alone, everything else skipped.
    pub fn from_message(body: &[u8]) -> Option<TraceContext> {
        // One searcher for every request (`memmem::find` builds one per call: most of its
        // cost on a body of a few hundred bytes).
        static TRACEPARENT_KEY: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"traceparent\""));
        TRACEPARENT_KEY.find(body)?;
        #[derive(Deserialize)]
        struct Message {
            params: Option<Params>,
        }
        #[derive(Deserialize)]
        struct Params {
            #[serde(rename = "_meta")]
            meta: Option<Meta>,
        }
        #[derive(Deserialize)]
        struct Meta {
            // Any JSON value: a non-string is ignored, not a reason to refuse the message.
            traceparent: Option<serde_json::Value>,
            tracestate: Option<serde_json::Value>,
        }
        let message: Message = serde_json::from_slice(body).ok()?;
        let meta = message.params?.meta?;
        TraceContext::new(
            meta.traceparent.as_ref()?.as_str()?,
            meta.tracestate.as_ref().and_then(serde_json::Value::as_str),
        )
    }

    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace id (32 lowercase hex digits).
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// Whether the sender records this trace (the `sampled` flag).
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.traceparent[53..55], 16).is_ok_and(|flags| flags & 1 == 1)
    }
}

/// `<version>-<trace id>-<parent id>-<flags>`: lowercase hex of 2, 32, 16 and 2 digits, the
/// version not `ff`, neither id all zeros; version `00` is exactly that long, a later one may
/// add fields after a `-` (W3C: read it as version `00`).
fn is_valid_traceparent(value: &str) -> bool {
    let b = value.as_bytes();
    let hex = |range: std::ops::Range<usize>| {
        b.get(range)
            .is_some_and(|s| s.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
    };
    let nonzero = |range: std::ops::Range<usize>| b[range].iter().any(|&c| c != b'0');
    if b.len() < 55 || !hex(0..2) || &b[0..2] == b"ff" {
        return false;
    }
    let length_ok = if &b[0..2] == b"00" {
        b.len() == 55
    } else {
        b.len() == 55 || b[55] == b'-'
    };
    length_ok
        && b[2] == b'-'
        && b[35] == b'-'
        && b[52] == b'-'
        && hex(3..35)
        && hex(36..52)
        && hex(53..55)
        && nonzero(3..35)
        && nonzero(36..52)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_read_and_an_invalid_one_is_not() {
        let context = TraceContext::new(TP, Some("congo=t61rcWkgMzE")).expect("valid");
        assert_eq!(context.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(context.sampled());
        assert_eq!(context.tracestate(), Some("congo=t61rcWkgMzE"));
        let unsampled = TP.replace("-01", "-00");
        assert!(
            !TraceContext::new(&unsampled, None)
                .expect("valid")
                .sampled()
        );
        // A later version with a field more is read as version 00.
        let later = format!("cc{}-what-comes-next", &TP[2..]);
        assert!(TraceContext::new(&later, None).is_some());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceContext::new(bad, None), None, "{bad:?}");
        }
        // A tracestate that could not be a header, or is too long, is dropped; the context stays.
        for bad in ["a=\u{1}", "a=é", &"a".repeat(513)] {
            let context = TraceContext::new(TP, Some(bad)).expect("valid");
            assert_eq!(context.tracestate(), None, "{bad:?}");
        }
    }

    #[test]
    fn a_message_meta_is_read_only_where_it_names_a_valid_traceparent() {
        let read = |body: &str| TraceContext::from_message(body.as_bytes());
        let with = |meta: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{"a":"x"}},"_meta":{meta}}}}}"#
            )
        };
        let context = read(&with(&format!(
            r#"{{"progressToken":1,"traceparent":"{TP}","tracestate":"k=v"}}"#
        )))
        .expect("read");
        assert_eq!(context.traceparent(), TP);
        assert_eq!(context.tracestate(), Some("k=v"));
        // Anywhere else, of another type, or invalid: nothing.
        assert_eq!(
            read(&format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{"traceparent":"{TP}"}}}}}}"#
            )),
            None
        );
        assert_eq!(read(&with(r#"{"traceparent":7}"#)), None);
        assert_eq!(read(&with(r#"{"traceparent":"00-abc"}"#)), None);
        assert_eq!(read(&with(r#""traceparent""#)), None);
        assert_eq!(read(r#"{"traceparent": not json"#), None);
        // A non-string tracestate is left out, the context kept.
        let context = read(&with(&format!(
            r#"{{"traceparent":"{TP}","tracestate":{{}}}}"#
        )))
        .expect("read");
        assert_eq!(context.tracestate(), None);
    }
}
