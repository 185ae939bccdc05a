//! The hot path's own reading of a JSON-RPC message: a call from a client, a result from an
//! upstream. One validating walk over the text that finds the few members the gateway reads,
//! for about three quarters of what serde_json's reading of the same members cost (serde's is
//! generic: a visitor per member, a raw value's capture; BENCHMARKS.md has the figures). What
//! is left is mostly the strings: a call and its result have some forty.
//!
//! It takes only the common shape and refuses the rest with `None`, which sends the text to
//! serde's reading as before: a name or a member the gateway reads with an escape, an id that
//! is neither a short integer nor a plain string, a `\u` escape of a surrogate, nesting deeper
//! than `MAX_DEPTH` (64), an error response. So it never accepts what serde would refuse (a test
//! holds it to that on generated texts) and where it accepts, it finds what serde finds.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Number, Value};

use crate::ObjectRead;
use crate::params::{ParamsRead, ReadValue};

/// Deeper than this is left to serde (which reads a raw value at any depth).
const MAX_DEPTH: usize = 64;

/// A call's members as its one reading finds them: the `jsonrpc` member was `"2.0"`.
pub struct CallRead<'a> {
    /// `Some` for a member that is there, `null` included.
    pub id: Option<Value>,
    /// Borrowed from the body but where serde read an escape.
    pub method: Cow<'a, str>,
    pub params: Option<ParamsRead<'a>>,
}

/// serde's reading of a call's members, without building a tree of the whole message: what the
/// walk leaves to serde. Anything this does not take either (a reply, a member of the wrong
/// type, a repeated member) goes to the caller's reading of the whole message, which says what
/// is wrong.
#[derive(Deserialize)]
pub(crate) struct CallMembers<'a> {
    #[serde(borrow)]
    pub(crate) jsonrpc: Cow<'a, str>,
    #[serde(borrow)]
    pub(crate) method: Cow<'a, str>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) id: Option<Value>,
    /// Indexed in this one reading and kept as text: most calls are checked from a few of its
    /// members and go upstream written from it (`Params`).
    #[serde(default, borrow, deserialize_with = "present_params")]
    pub(crate) params: Option<ParamsRead<'a>>,
}

/// `Some` for a member that is there, `null` included (`Option` alone reads `null` as absent,
/// and `"id": null` is not a notification).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// (`null` too is present, and refused: parameters are an object.)
fn present_params<'de: 'a, 'a, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<ParamsRead<'a>>, D::Error> {
    ParamsRead::deserialize(d).map(Some)
}

/// A response as its one reading finds it: the result's members borrowed from the body.
#[derive(Deserialize)]
pub(crate) struct ResponseRead<'a> {
    #[serde(default)]
    pub(crate) id: Option<Value>,
    #[serde(default, borrow, deserialize_with = "present_object")]
    pub(crate) result: Option<ObjectRead<'a>>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

/// `Some` for a member that is there, `null` included (an `Option` alone reads `null` as absent).
fn present_object<'de: 'a, 'a, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<ObjectRead<'a>>, D::Error> {
    ObjectRead::deserialize(d).map(Some)
}

/// Reads a client's message as a call, in one pass: the walk, else serde's reading of the same
/// members (`CallMembers`). `None` when it is not a call either reads: the caller reads the
/// message whole.
pub fn read_call(text: &str) -> Option<CallRead<'_>> {
    if let Some(call) = walk_call(text) {
        return Some(call);
    }
    // Only an object: serde would also read a struct from an array, by position.
    if !text.trim_ascii_start().starts_with('{') {
        return None;
    }
    let call = serde_json::from_str::<CallMembers>(text).ok()?;
    (call.jsonrpc == "2.0").then_some(CallRead {
        id: call.id,
        method: call.method,
        params: call.params,
    })
}

/// The walk of a call: `None` when it is anything else or anything the walk leaves to serde
/// (see the module's comment).
pub(crate) fn walk_call(text: &str) -> Option<CallRead<'_>> {
    let mut scan = Scan::new(text);
    let (mut jsonrpc, mut method, mut id, mut params) = (None, None, None, None);
    scan.members(|scan, name| match name {
        "jsonrpc" => once(&mut jsonrpc, scan.plain_string()?),
        "method" => once(&mut method, scan.plain_string()?),
        "id" => once(&mut id, scan.id()?),
        "params" => once(&mut params, scan.params()?),
        _ => scan.value(0),
    })?;
    scan.end()?;
    if jsonrpc? != "2.0" {
        return None;
    }
    Some(CallRead {
        id,
        method: Cow::Borrowed(method?),
        params,
    })
}

/// The walk of an upstream's answer, as serde's `ResponseRead` would read it: a response with
/// a result (`None`: anything else, an error response included, see the module's comment).
pub(crate) fn walk_result(text: &str) -> Option<ResponseRead<'_>> {
    let mut scan = Scan::new(text);
    let (mut id, mut result) = (None, None);
    scan.members(|scan, name| match name {
        "id" => once(&mut id, scan.id()?),
        "result" => once(&mut result, scan.object_read()?),
        "error" => None,
        _ => scan.value(0),
    })?;
    scan.end()?;
    // (serde reads an optional `null` as absent, and so does a response's id here.)
    Some(ResponseRead {
        id: id.filter(|id| !id.is_null()),
        result,
        error: None,
    })
}

/// An object's members as the walk reads them (`ObjectRead::Null` for `null`): `None` for
/// anything else, or what the walk leaves to serde.
pub(crate) fn read_object(text: &str) -> Option<ObjectRead<'_>> {
    let mut scan = Scan::new(text);
    let object = scan.object_read()?;
    scan.end()?;
    Some(object)
}

/// Sets a member read once; a member named twice is left to serde (which refuses it or keeps
/// the last, depending on the reading).
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    match slot {
        Some(_) => None,
        None => {
            *slot = Some(value);
            Some(())
        }
    }
}

struct Scan<'a> {
    text: &'a str,
    b: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    fn new(text: &'a str) -> Scan<'a> {
        Scan {
            text,
            b: text.as_bytes(),
            at: 0,
        }
    }

    /// The next byte that is not JSON's white space, not taken. (Looked at on every token:
    /// a byte above the space is the answer at once, the usual case in a compact message.)
    #[inline(always)]
    fn peek(&mut self) -> Option<u8> {
        let c = *self.b.get(self.at)?;
        if c > b' ' {
            return Some(c);
        }
        self.peek_past_space()
    }

    fn peek_past_space(&mut self) -> Option<u8> {
        while let Some(&c) = self.b.get(self.at) {
            if !matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                return Some(c);
            }
            self.at += 1;
        }
        None
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.at += 1)
    }

    /// Nothing but white space after the message.
    fn end(&mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }

    /// The members of an object, each handed to `member` with the walk at its value, which
    /// `member` takes.
    fn members(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.items(b'}', |scan| {
            let name = scan.plain_string()?;
            scan.eat(b':')?;
            scan.peek()?;
            member(scan, name)
        })
    }

    /// The items of an object or an array whose opening the walk has taken, up to `close`:
    /// none, or each taken by `item` and followed by `,` or `close`.
    #[inline(always)]
    fn items(&mut self, close: u8, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        if self.peek()? == close {
            self.at += 1;
            return Some(());
        }
        loop {
            item(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                c if c == close => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A string without escapes: its text between the quotes.
    fn plain_string(&mut self) -> Option<&'a str> {
        if self.peek()? != b'"' {
            return None;
        }
        let (text, escaped) = self.string()?;
        (!escaped).then_some(text)
    }

    /// The string the walk is at (its opening quote): the text between its quotes, and whether
    /// it has an escape. JSON refuses a control character in a string; `text` is UTF-8 already.
    // (Inlined into its callers: a call's messages have some forty strings, most short, and
    // the call itself was a fifth of each one's cost.)
    #[inline(always)]
    fn string(&mut self) -> Option<(&'a str, bool)> {
        let b = self.b;
        let start = self.at + 1;
        let mut i = start;
        let mut escaped = false;
        loop {
            i = special_byte(b, i)?;
            match *b.get(i)? {
                b'"' => {
                    self.at = i + 1;
                    return Some((self.text.get(start..i)?, escaped));
                }
                b'\\' => {
                    escaped = true;
                    i = escape_end(b, i)?;
                }
                // A control character.
                _ => return None,
            }
        }
    }

    /// Walks past any JSON value, checking it is one.
    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => {
                let depth = deeper(depth)?;
                self.at += 1;
                self.items(b'}', |scan| {
                    if scan.peek()? != b'"' {
                        return None;
                    }
                    scan.string()?;
                    scan.eat(b':')?;
                    scan.value(depth)
                })
            }
            b'[' => {
                let depth = deeper(depth)?;
                self.at += 1;
                self.items(b']', |scan| scan.value(depth))
            }
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            b'n' => self.word(b"null"),
            _ => self.number().map(drop),
        }
    }

    /// The value the walk is at, walked past: its text.
    fn value_text(&mut self) -> Option<&'a str> {
        self.peek()?;
        let start = self.at;
        self.value(0)?;
        self.text.get(start..self.at)
    }

    fn word(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.b.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// A number as JSON writes it (`-`, no leading zero, a fraction and an exponent each with
    /// digits): whether it has neither a fraction nor an exponent, and how many digits its
    /// integer part has.
    fn number(&mut self) -> Option<(bool, usize)> {
        let b = self.b;
        let digits = |i: &mut usize| {
            let from = *i;
            while b.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i - from
        };
        let mut i = self.at;
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        let integer = match b.get(i)? {
            b'0' => {
                i += 1;
                1
            }
            b'1'..=b'9' => digits(&mut i),
            _ => return None,
        };
        let mut whole = true;
        if b.get(i) == Some(&b'.') {
            i += 1;
            whole = false;
            if digits(&mut i) == 0 {
                return None;
            }
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            whole = false;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            if digits(&mut i) == 0 {
                return None;
            }
        }
        self.at = i;
        Some((whole, integer))
    }

    /// A request id the walk takes: `null`, a string without escapes, an integer of at most 18
    /// digits (any other is left to serde, whose reading of numbers this does not repeat).
    fn id(&mut self) -> Option<Value> {
        match self.peek()? {
            b'"' => self.plain_string().map(|s| Value::String(s.to_owned())),
            b'n' => self.word(b"null").map(|()| Value::Null),
            _ => {
                let start = self.at;
                let (whole, digits) = self.number()?;
                if !whole || digits > 18 {
                    return None;
                }
                let text = self.text.get(start..self.at)?;
                let number = match text.strip_prefix('-') {
                    // (serde reads `-0` as a float.)
                    Some(_) => Number::from(text.parse::<i64>().ok().filter(|&n| n != 0)?),
                    None => Number::from(text.parse::<u64>().ok()?),
                };
                Some(Value::Number(number))
            }
        }
    }

    /// A call's parameters: an object, `_meta` read as [`ObjectRead`], each other member's
    /// value as its text.
    fn params(&mut self) -> Option<ParamsRead<'a>> {
        // (Room for the members a call has without growing: `name`, `arguments`, `_meta`...)
        let mut members = Vec::with_capacity(4);
        self.members(|scan, name| {
            let value = if name == "_meta" {
                ReadValue::Meta(scan.object_read()?)
            } else {
                ReadValue::Text(scan.value_text()?)
            };
            members.push((name, value));
            Some(())
        })?;
        Some(ParamsRead::new(members))
    }

    /// An object (its members' names and values' texts) or `null`.
    fn object_read(&mut self) -> Option<ObjectRead<'a>> {
        if self.peek()? == b'n' {
            return self.word(b"null").map(|()| ObjectRead::Null);
        }
        let mut members = Vec::with_capacity(8);
        self.members(|scan, name| {
            members.push((name, scan.value_text()?));
            Some(())
        })?;
        Some(ObjectRead::Object(members))
    }
}

fn deeper(depth: usize) -> Option<usize> {
    (depth < MAX_DEPTH).then_some(depth + 1)
}

/// Where in `b`, from `from` on, the first byte a string's walk must look at is: `"`, `\` or a
/// control character. Eight bytes at a time, as `needs_escape` (the lowest flagged byte of each
/// word test is exact: a wrong flag only ever comes above a right one), the last few one by one.
#[inline(always)]
fn special_byte(b: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let mut at = from;
    while let Some(word) = b.get(at..at + 8) {
        let v = u64::from_le_bytes(word.try_into().ok()?);
        let control = v.wrapping_sub(ONES * 0x20) & !v & HIGH;
        let quote = zero_byte(v ^ (ONES * u64::from(b'"')));
        let backslash = zero_byte(v ^ (ONES * u64::from(b'\\')));
        let flags = control | quote | backslash;
        if flags != 0 {
            return Some(at + (flags.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let i = b
        .get(at..)?
        .iter()
        .position(|&c| c < 0x20 || c == b'"' || c == b'\\')?;
    Some(at + i)
}

/// One past the escape at `b[i]` (its backslash). A `\u` escape of a surrogate is left to
/// serde, which has its rules for pairs.
fn escape_end(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i + 1)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(i + 2),
        b'u' => {
            let hex = std::str::from_utf8(b.get(i + 2..i + 6)?).ok()?;
            if !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                return None;
            }
            let unit = u16::from_str_radix(hex, 16).ok()?;
            (!(0xD800..=0xDFFF).contains(&unit)).then_some(i + 6)
        }
        _ => None,
    }
}

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
