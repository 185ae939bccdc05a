//! A call's parameters as the client sent them: the JSON text of the object, with an index of
//! its top-level members (and of its `_meta`'s), read into a tree only when something needs
//! more than a member. The common tool call is checked from a few members (its name, its
//! `_meta` version) and goes upstream written from the text, so it never builds a tree of its
//! parameters nor writes one back out (the two were about 12k of a call's 125k instructions;
//! what reading members from the text costs instead, and the net, are in BENCHMARKS.md). The
//! upstream also gets the members as the client wrote them: its order, its escapes.
//!
//! The two readings cannot disagree: a text whose object (or `_meta`) names a member twice is
//! read into the tree at once, as it always was (the last one counts), and written from it, so
//! an upstream never sees a member the gateway did not judge; so is one with a member name
//! written with an escape (the index compares names as they are written).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut, Range};
use std::sync::OnceLock;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::ObjectRead;

/// A request's parameters. Reads as a [`Value`] (`Deref`, built on first use); a caller that
/// needs only a member asks for it ([`Params::str_member`], [`Params::meta_member`], …) and
/// leaves the text unread beyond its index. Changing the tree (`DerefMut`) makes the tree what
/// is sent; [`Params::set_member`] changes one member and keeps the text.
#[derive(Clone)]
pub struct Params {
    /// The text and its index while they say what the parameters are; `None` for parameters
    /// made as a tree, or once the tree was changed.
    text: Option<Text>,
    tree: OnceLock<Value>,
}

#[derive(Clone)]
struct Text {
    raw: Box<str>,
    members: Vec<Member>,
    /// `_meta`'s members, when `_meta` is an object (ranges into `raw` as well).
    meta: Option<Vec<Member>>,
}

#[derive(Clone)]
struct Member {
    key: Key,
    /// Where the value's text is in `raw` (empty for a member `set_member` added).
    value: Range<usize>,
    /// The value `set_member` put in place of the text's.
    replaced: Option<Value>,
}

#[derive(Clone)]
enum Key {
    /// The key's characters in `raw`, between its quotes (it has no escapes).
    At(Range<usize>),
    /// A member `set_member` added.
    Set(Box<str>),
}

impl Member {
    fn key<'a>(&'a self, raw: &'a str) -> &'a str {
        match &self.key {
            Key::At(at) => raw.get(at.clone()).unwrap_or_default(),
            Key::Set(key) => key,
        }
    }

    /// Whether the member is named `key`. Compared as bytes: the same answer as comparing
    /// `key()`, without the text's char-boundary checks on every member a lookup passes (a
    /// call looks up some ten members).
    fn is(&self, raw: &str, key: &str) -> bool {
        match &self.key {
            Key::At(at) => raw.as_bytes().get(at.clone()) == Some(key.as_bytes()),
            Key::Set(set) => **set == *key,
        }
    }

    /// The key as JSON text, quotes included, for writing it out again.
    fn write_key(&self, raw: &str, out: &mut Vec<u8>) {
        match &self.key {
            Key::At(at) => {
                out.push(b'"');
                out.extend_from_slice(raw.get(at.clone()).unwrap_or_default().as_bytes());
                out.push(b'"');
            }
            Key::Set(key) => {
                let _ = serde_json::to_writer(&mut *out, key);
            }
        }
    }

    /// The value as JSON text, as given or as set.
    fn write_value(&self, raw: &str, out: &mut Vec<u8>) {
        match &self.replaced {
            // (A routed name, the member most often set: the bytes serde_json writes, without
            // its formatter.)
            Some(Value::String(text)) => crate::write_json_str(out, text),
            Some(value) => {
                let _ = serde_json::to_writer(&mut *out, value);
            }
            None => {
                out.extend_from_slice(raw.get(self.value.clone()).unwrap_or_default().as_bytes())
            }
        }
    }

    fn text<'a>(&self, raw: &'a str) -> &'a str {
        raw.get(self.value.clone()).unwrap_or_default()
    }
}

/// The members of parameters still read from their text, for the request writers
/// (`crate::jsonrpc`): the parameters', and `_meta`'s when it is an object (`None`: no `_meta`,
/// or one that is not an object).
pub(crate) struct TextView<'a> {
    pub(crate) params: ObjectView<'a>,
    pub(crate) meta: Option<ObjectView<'a>>,
}

/// The members of one object of the text.
#[derive(Clone, Copy)]
pub(crate) struct ObjectView<'a> {
    raw: &'a str,
    members: &'a [Member],
}

impl<'a> ObjectView<'a> {
    pub(crate) fn members(&self) -> impl Iterator<Item = MemberView<'a>> + 'a {
        let raw = self.raw;
        self.members
            .iter()
            .map(move |member| MemberView { raw, member })
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.members.iter().any(|m| m.is(self.raw, key))
    }
}

#[derive(Clone, Copy)]
pub(crate) struct MemberView<'a> {
    raw: &'a str,
    member: &'a Member,
}

impl MemberView<'_> {
    pub(crate) fn key(&self) -> &str {
        self.member.key(self.raw)
    }

    pub(crate) fn write_key(&self, out: &mut Vec<u8>) {
        self.member.write_key(self.raw, out);
    }

    pub(crate) fn write_value(&self, out: &mut Vec<u8>) {
        self.member.write_value(self.raw, out);
    }

    /// Whether the value (as given or set) is a JSON object.
    pub(crate) fn is_object(&self) -> bool {
        match &self.member.replaced {
            Some(value) => value.is_object(),
            None => self.member.text(self.raw).starts_with('{'),
        }
    }
}

impl Params {
    /// The parameters a message's one reading found (`read`, borrowed from `body`, the whole
    /// message's text): indexed and kept as text. `None` when the index cannot hold them (a
    /// member, or a member of `_meta`, named twice): the caller reads the message whole.
    pub fn from_read(body: &str, read: ParamsRead<'_>) -> Option<Params> {
        Some(Params {
            text: Some(Text::of_read(body, read)?),
            tree: OnceLock::new(),
        })
    }

    /// Parameters from the text of an object alone, read as a message's are (anything the
    /// index does not hold, or that is not an object, becomes a tree).
    pub fn from_json(text: &str) -> Params {
        serde_json::from_str::<ParamsRead>(text)
            .ok()
            .and_then(|read| Params::from_read(text, read))
            .unwrap_or_else(|| Params::from(read_value(text)))
    }

    /// Whether the parameters are a JSON object (a message's are: anything else is refused).
    pub fn is_object(&self) -> bool {
        self.text.is_some() || self.tree.get().is_some_and(Value::is_object)
    }

    /// Whether the tree was built: for tests that hold the common call to its text.
    pub fn is_read_whole(&self) -> bool {
        self.tree.get().is_some()
    }

    /// A top-level member.
    pub fn member(&self, key: &str) -> Option<Cow<'_, Value>> {
        match self.unread() {
            Some(text) => {
                let member = text.member(key)?;
                Some(match &member.replaced {
                    Some(value) => Cow::Borrowed(value),
                    None => Cow::Owned(read_value(member.text(&text.raw))),
                })
            }
            None => self.get(key).map(Cow::Borrowed),
        }
    }

    /// A top-level member that is a string (`None` when absent or another type).
    pub fn str_member(&self, key: &str) -> Option<Cow<'_, str>> {
        match self.unread() {
            Some(text) => {
                let member = text.member(key)?;
                match &member.replaced {
                    Some(value) => value.as_str().map(Cow::Borrowed),
                    None => read_str(member.text(&text.raw)),
                }
            }
            None => self.get(key)?.as_str().map(Cow::Borrowed),
        }
    }

    /// A member of `_meta` (`None` when `_meta` is absent or not an object).
    pub fn meta_member(&self, key: &str) -> Option<Cow<'_, Value>> {
        match self.unread() {
            Some(text) => {
                if let Some(replaced) = &text.member("_meta")?.replaced {
                    return replaced.get(key).map(Cow::Borrowed);
                }
                let member = text.meta_member(key)?;
                Some(Cow::Owned(read_value(member.text(&text.raw))))
            }
            None => self.get("_meta")?.get(key).map(Cow::Borrowed),
        }
    }

    /// A member of `_meta` as its text, while the parameters are text and `_meta` was not set
    /// (`None` then, or when it is absent): for a reader that reads the text itself (a
    /// capabilities object's bits, `capabilities::text_bits`).
    pub fn meta_text(&self, key: &str) -> Option<&str> {
        let text = self.unread()?;
        if text.member("_meta")?.replaced.is_some() {
            return None;
        }
        Some(text.meta_member(key)?.text(&text.raw))
    }

    /// A member of `_meta` that is a string.
    pub fn meta_str(&self, key: &str) -> Option<Cow<'_, str>> {
        match self.unread() {
            Some(text) => {
                if let Some(replaced) = &text.member("_meta")?.replaced {
                    return replaced.get(key)?.as_str().map(Cow::Borrowed);
                }
                read_str(text.meta_member(key)?.text(&text.raw))
            }
            None => self.get("_meta")?.get(key)?.as_str().map(Cow::Borrowed),
        }
    }

    /// Whether `_meta` is an object holding `key`.
    pub(crate) fn meta_has(&self, key: &str) -> bool {
        match self.unread() {
            Some(text) => match text.member("_meta").map(|m| &m.replaced) {
                None => false,
                Some(Some(replaced)) => replaced.get(key).is_some(),
                Some(None) => text.meta_member(key).is_some(),
            },
            None => self.get("_meta").and_then(|m| m.get(key)).is_some(),
        }
    }

    /// Sets a top-level member, keeping the text for the others (a routed name, bound
    /// arguments). Parameters that are not an object stay as they are.
    pub fn set_member(&mut self, key: &str, value: Value) {
        if let Some(text) = self.unread_mut() {
            let raw = &text.raw;
            match text.members.iter().position(|m| m.is(raw, key)) {
                Some(at) => text.members[at].replaced = Some(value),
                None => text.members.push(Member {
                    key: Key::Set(key.into()),
                    value: 0..0,
                    replaced: Some(value),
                }),
            }
            return;
        }
        if let Value::Object(members) = &mut **self {
            members.insert(key.to_string(), value);
        }
    }

    /// The text and its index, while they say what the parameters are and the tree was not
    /// built (once built, the tree is read: it is what the text says, set members included).
    fn unread(&self) -> Option<&Text> {
        self.text.as_ref().filter(|_| self.tree.get().is_none())
    }

    fn unread_mut(&mut self) -> Option<&mut Text> {
        if self.tree.get().is_some() {
            return None;
        }
        self.text.as_mut()
    }

    /// The text and its index for writing, while the text says what the parameters are.
    /// (`None` too when `_meta` itself was set: the writers then merge into the tree.)
    pub(crate) fn text_view(&self) -> Option<TextView<'_>> {
        let text = self.text.as_ref()?;
        let raw = &text.raw;
        if text
            .members
            .iter()
            .any(|m| m.replaced.is_some() && m.is(raw, "_meta"))
        {
            return None;
        }
        Some(TextView {
            params: ObjectView {
                raw,
                members: &text.members,
            },
            meta: text
                .meta
                .as_deref()
                .map(|members| ObjectView { raw, members }),
        })
    }

    fn tree(&self) -> &Value {
        self.tree.get_or_init(|| match &self.text {
            Some(text) => text.read(),
            None => Value::Null,
        })
    }
}

impl Text {
    fn member(&self, key: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.is(&self.raw, key))
    }

    fn meta_member(&self, key: &str) -> Option<&Member> {
        self.meta.as_ref()?.iter().find(|m| m.is(&self.raw, key))
    }

    /// The index of what a message's reading found: ranges into the parameters' own text,
    /// copied out of `body` (which `read` borrows from). `None` when a member or a member of
    /// `_meta` is named twice, or (it cannot happen: the body was read as JSON) the text around
    /// the members is not where JSON puts it.
    fn of_read(body: &str, read: ParamsRead<'_>) -> Option<Text> {
        let b = body.as_bytes();
        let at = |part: &str| crate::offset_in(body, part);
        let end_of = |part: &str| at(part) + part.len();
        let Some((first, _)) = read.members.first() else {
            return Some(Text {
                raw: "{}".into(),
                members: Vec::new(),
                meta: None,
            });
        };
        let start = crate::object_start(b, at(first))?;
        let mut members = Vec::with_capacity(read.members.len());
        let mut meta = None;
        let mut last_end = start;
        for (i, (name, value)) in read.members.iter().enumerate() {
            if read.members[..i].iter().any(|(other, _)| other == name) {
                return None;
            }
            let value = match value {
                ReadValue::Text(text) => at(text)..end_of(text),
                ReadValue::Meta(read_meta) => {
                    // After the name's closing quote: `:` and the value, space aside.
                    let colon = crate::skip_space(b, end_of(name) + 1);
                    let from = crate::skip_space(b, colon + 1);
                    if b.get(colon) != Some(&b':') {
                        return None;
                    }
                    match read_meta {
                        ObjectRead::Null if b.get(from..from + 4) == Some(b"null") => {
                            from..from + 4
                        }
                        ObjectRead::Null => return None,
                        ObjectRead::Object(inner) => {
                            let mut indexed: Vec<Member> = Vec::with_capacity(inner.len());
                            for (j, (key, value)) in inner.iter().enumerate() {
                                if inner[..j].iter().any(|(other, _)| other == key) {
                                    return None;
                                }
                                indexed.push(Member {
                                    key: Key::At(at(key)..end_of(key)),
                                    value: at(value)..end_of(value),
                                    replaced: None,
                                });
                            }
                            if b.get(from) != Some(&b'{') {
                                return None;
                            }
                            let close = crate::object_close(
                                b,
                                indexed.last().map_or(from + 1, |m| m.value.end),
                            )?;
                            meta = Some(indexed);
                            from..close + 1
                        }
                    }
                }
            };
            last_end = value.end;
            members.push(Member {
                key: Key::At(at(name)..end_of(name)),
                value,
                replaced: None,
            });
        }
        let close = crate::object_close(b, last_end)?;
        // Ranges into the parameters' own text from here on (its parts all come after its `{`).
        let rebase = |r: &mut Range<usize>| -> Option<()> {
            *r = r.start.checked_sub(start)?..r.end.checked_sub(start)?;
            Some(())
        };
        for member in members.iter_mut().chain(meta.iter_mut().flatten()) {
            if let Key::At(key) = &mut member.key {
                rebase(key)?;
            }
            rebase(&mut member.value)?;
        }
        Some(Text {
            raw: body.get(start..close + 1)?.into(),
            members,
            meta,
        })
    }

    /// The tree the text says, set members in place.
    fn read(&self) -> Value {
        let mut tree = read_value(&self.raw);
        if let Value::Object(object) = &mut tree {
            for member in &self.members {
                if let Some(value) = &member.replaced {
                    object.insert(member.key(&self.raw).to_string(), value.clone());
                }
            }
        }
        tree
    }
}

/// A value's text (valid JSON) as a tree.
fn read_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// A string value's text as the string, borrowed when it has no escapes.
fn read_str(text: &str) -> Option<Cow<'_, str>> {
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    // (A byte loop: most strings read here are names, a few bytes long, where `contains`'s
    // search costs its setup, about forty instructions, on each of a call's four reads.)
    if !inner.bytes().any(|b| b == b'\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(text).ok().map(Cow::Owned)
}

/// A call's parameters as the message's one reading finds them (`scan::read_call`: the walk's,
/// or the `params` member of serde's `scan::CallMembers`, `#[serde(borrow)]`): each member's name and value text borrowed from the
/// body, and `_meta`'s members when it is an object. Indexing the parameters so cost nothing
/// beyond the reading; scanning their text again after it cost a `tools/call` about 4,400
/// instructions (BENCHMARKS.md). What the index cannot hold refuses the reading, and the
/// message is read whole into a tree, which reads it as it always did or says what is wrong:
/// parameters that are not an object, a member name with an escape (only a borrowed name is
/// taken), a `_meta` neither an object nor `null`.
pub struct ParamsRead<'a> {
    pub(crate) members: Vec<(&'a str, ReadValue<'a>)>,
}

impl<'a> ParamsRead<'a> {
    pub(crate) fn new(members: Vec<(&'a str, ReadValue<'a>)>) -> ParamsRead<'a> {
        ParamsRead { members }
    }
}

/// A member's value: its JSON text (borrowed from the message), or `_meta`'s members.
pub(crate) enum ReadValue<'a> {
    Text(&'a str),
    Meta(ObjectRead<'a>),
}

impl<'de: 'a, 'a> Deserialize<'de> for ParamsRead<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Visit<'a> {
            type Value = ParamsRead<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::new();
                while let Some(name) = map.next_key::<&'de str>()? {
                    let value = if name == "_meta" {
                        ReadValue::Meta(map.next_value()?)
                    } else {
                        ReadValue::Text(map.next_value::<&'de RawValue>()?.get())
                    };
                    members.push((name, value));
                }
                Ok(ParamsRead { members })
            }
        }
        d.deserialize_map(Visit(PhantomData))
    }
}

impl From<Value> for Params {
    fn from(tree: Value) -> Params {
        Params {
            text: None,
            tree: OnceLock::from(tree),
        }
    }
}

impl Deref for Params {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.tree()
    }
}

impl DerefMut for Params {
    /// The tree to change: from now on it is what the parameters are (the text is dropped).
    fn deref_mut(&mut self) -> &mut Value {
        let tree = match self.tree.take() {
            Some(tree) => tree,
            None => self.text.as_ref().map_or(Value::Null, Text::read),
        };
        self.text = None;
        self.tree = OnceLock::from(tree);
        match self.tree.get_mut() {
            Some(tree) => tree,
            None => unreachable!("set just above"),
        }
    }
}

impl fmt::Debug for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // (Parameters hold tool arguments: their text is not printed.)
        f.debug_struct("Params")
            .field("as_text", &self.text.is_some())
            .field("read_whole", &self.is_read_whole())
            .finish()
    }
}

impl Serialize for Params {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.tree().serialize(serializer)
    }
}

#[cfg(test)]
#[path = "params_tests.rs"]
mod tests;
