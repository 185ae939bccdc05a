#!/usr/bin/env python3
"""Layering check: fails when a file-level import cycle exists inside a crate, and prints each.

A module is a file (`src/a/b.rs` or `src/a/b/mod.rs` is `a::b`). Module A depends on module B
when A names a path that starts at the crate root and reaches B: `use crate::b::...`,
`crate::b::x` in code, `super::`/`self::` paths resolved from A, and `use` lines of a module
that re-exports. A module does not depend on its own children or parent through `mod` lines
alone (a parent declaring `mod child;` is containment, not a use). Cycles are the strongly
connected components of more than one file; `#[cfg(test)]` modules inside a file count as the
file (a test that imports its way around the layers is still a cycle in the source).

Code is read by a small Rust lexer, not by regular expressions: comments (line, doc and nested
block comments) are not code, and neither is the inside of a literal (strings with escapes, raw
strings `r#"..."#`, byte and C strings, char literals, told apart from lifetimes and labels), so
a `crate::` in a doc comment or a log message is no use, and a `"{}://{}"` is no comment that
hides the rest of its line. One kind of string is code: a path an attribute hands to a derive,
`#[serde(default = "crate::model::f")]`, `with = "..."`, `deserialize_with = "..."` and the
like. The derive writes that path into this module, so it is a use as if written by hand; it
counts when the attribute's key names a function, module or type (`PATH_KEYS`), or when the
string is wholly a `crate::`/`self::`/`super::` path (not in `doc`, which is prose).

    tests/layering.py                    # every shipped crate (gateway/, operator/, crds/)
    tests/layering.py gateway operator   # only these crate directories
    tests/layering.py --self-test ...    # first show on planted cycles that the check can fail

Exit status 0 when no cycle exists, 1 otherwise.
"""

import json
import os
import re
import subprocess
import sys

PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_RE = re.compile(r"\buse\s+((?:crate|super|self)::[^;]*);", re.S)
# Attribute keys whose string value is a path to a function, module or type that a derive
# calls or names: serde's `default`, `with`, `deserialize_with`, `serialize_with`,
# `skip_serializing_if`, `from`/`try_from`/`into`/`remote`; schemars' `schema_with`; `getter`.
# Not `bound` (a where clause, not a path), not `rename`/`alias` (names on the wire).
PATH_KEYS = frozenset({
    "default", "with", "deserialize_with", "serialize_with", "skip_serializing_if",
    "from", "try_from", "into", "remote", "schema_with", "getter",
})
# The whole string must be a path: `"crate::a::f"`, not `"see crate::a::f"` (a message).
PATH_STR_RE = re.compile(r"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*")
ROOTED_RE = re.compile(r"(?:crate|super|self)(?:::[A-Za-z_]\w*)+")
# The `key =` just before an attribute's string, read back over code whose comments are blank.
ATTR_KEY_RE = re.compile(r"([A-Za-z_]\w*)\s*=\s*$")
# Literal prefixes: `b"..."`, `c"..."` escape like a string; `r`, `br`, `cr` are raw (hashes).
ESCAPED_PREFIXES = ("b", "c")
RAW_PREFIXES = ("r", "br", "cr")


SHIPPED = ("gateway", "operator", "crds")


def crate_dirs(root):
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1"],
        cwd=root, check=True, capture_output=True, text=True,
    ).stdout
    dirs = []
    for pkg in json.loads(out)["packages"]:
        d = os.path.dirname(pkg["manifest_path"])
        top = os.path.relpath(d, root).split(os.sep)[0]
        # The shipped crates; examples and benches are test fixtures with their own shapes.
        if top in SHIPPED and os.path.isdir(os.path.join(d, "src")):
            dirs.append(d)
    return sorted(dirs)


def module_files(src):
    """Map module path (tuple) -> file, for every .rs file under src."""
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts in (["lib"], ["main"]):
                parts = []
            # A binary's main.rs and the library's lib.rs are both roots: keep them apart.
            key = tuple(parts)
            if key in mods:
                key = ("<bin>",) if rel == "main.rs" else key
            mods[key] = os.path.join(dirpath, f)
    return mods


def resolve(mods, here, head, rest):
    """The longest module prefix a path names, as a module key, or None."""
    if head == "crate":
        base = []
    elif head == "self":
        base = list(here)
    else:  # super, possibly repeated
        base = list(here[:-1])
        while rest and rest[0] == "super":
            rest = rest[1:]
            base = base[:-1]
    parts = base + list(rest)
    for n in range(len(parts), len(base) - 1, -1):
        key = tuple(parts[:n])
        if key in mods:
            return key
    return None


def expand_use(tree):
    """`a::{b, c::{d, self}}` -> ["a::b", "a::c::d", "a::c"]."""
    i = tree.find("{")
    if i < 0:
        return [tree.removesuffix("::self").split(" as ")[0]]
    prefix, body = tree[:i], tree[i + 1 : tree.rfind("}")]
    items, depth, start = [], 0, 0
    for j, c in enumerate(body):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(body[start:j])
            start = j + 1
    items.append(body[start:])
    out = []
    for item in items:
        if item:
            out.extend(expand_use(prefix + item))
    return [p.removesuffix("::self").removesuffix("::") for p in out]


def _ident(c):
    return c.isalnum() or c == "_"


def _blank(s):
    # A comment or a literal's inside becomes spaces, newlines kept: offsets and lines stay.
    return "".join("\n" if c == "\n" else " " for c in s)


def _char_end(text, i):
    r"""Index of the closing quote when a char literal opens at text[i] (a `'`), else None.

    `'a'`, `'"'`, `'\''`, `'\\'`, `'\u{1F600}'` are chars; `'a`, `'static`, `'outer: loop` are a
    lifetime or a label, which Rust tells apart the same way: no closing quote right after one
    char (or after one escape), so the quote is not a literal and the name that follows is code.
    """
    n = len(text)
    if i + 1 < n and text[i + 1] == "\\":
        j = i + 3  # past the backslash and the char it escapes (`\u{...}` runs on to its `'`)
        while j < n and text[j] not in "'\n":
            j += 1
        return j if j < n and text[j] == "'" else None
    if i + 2 < n and text[i + 1] != "\n" and text[i + 2] == "'":
        return i + 2
    return None


def _string_end(text, j):
    """Index of the quote that closes an escaped string whose inside starts at j."""
    n = len(text)
    while j < n:
        if text[j] == "\\":
            j += 2  # `\"` and `\\` are one char each; neither ends the string
        elif text[j] == '"':
            return j
        else:
            j += 1
    return n  # unterminated: the rest of the file is the string (rustc would refuse it)


def lex(text):
    """(code, attribute strings) of Rust source, in one pass over its characters.

    code is text with comments blanked and each literal's inside blanked (quotes, prefixes and
    hashes kept), so a regular expression over it sees only code. The attribute strings are
    (key, value) for each string literal inside `#[...]` or `#![...]`, key being the name in
    `key = "value"` (None when the string is not such a value, as in `#[error("...")]`).
    """
    out, attr_strings = [], []
    n, i = len(text), 0
    attr = 0  # bracket depth inside an attribute; 0 outside one

    def literal(start, body, close, tail):
        # text[start:body] is the opening (prefix, hashes, quote), text[body:close] the inside,
        # and `tail` characters from close on the closing quote and hashes.
        if attr:
            code = "".join(out[-200:])  # enough back to see `key =`; comments are blank there
            m = ATTR_KEY_RE.search(code)
            attr_strings.append((m.group(1) if m else None, text[body:close]))
        out.append(text[start:body] + _blank(text[body:close]) + text[close : close + tail])
        return close + tail

    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":  # line comment, `///` and `//!` docs too
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and nxt == "*":  # block comment: they nest, `/* /* */ */` is one
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(_blank(text[i:j]))
            i = j
        elif c == '"':
            i = literal(i, i + 1, _string_end(text, i + 1), 1)
        elif c == "'":
            end = _char_end(text, i)
            if end is None:  # a lifetime or a label: the quote is code, and so is its name
                out.append(c)
                i += 1
            else:
                i = literal(i, i + 1, end, 1)
        elif _ident(c):
            # A whole word (identifier, keyword or number), so that only a word that is
            # exactly a prefix, right before its quote, opens a byte, C or raw literal.
            j = i
            while j < n and _ident(text[j]):
                j += 1
            word, after = text[i:j], text[j] if j < n else ""
            hashes = j
            while hashes < n and text[hashes] == "#":
                hashes += 1
            if word in ESCAPED_PREFIXES and after == '"':
                i = literal(i, j + 1, _string_end(text, j + 1), 1)
            elif word == "b" and after == "'" and _char_end(text, j) is not None:
                i = literal(i, j + 1, _char_end(text, j), 1)
            elif word in RAW_PREFIXES and hashes < n and text[hashes] == '"':
                # No escapes in a raw string: it ends at the first `"` with as many hashes.
                closing = '"' + "#" * (hashes - j)
                close = text.find(closing, hashes + 1)
                close = n if close < 0 else close
                i = literal(i, hashes + 1, close, len(closing))
            else:  # includes `r#type`, a raw identifier: `#` and the name go out as code
                out.append(word)
                i = j
        elif c == "#" and not attr:
            # `#[` or `#![`, blanks allowed between; anything else (`r#`, `$(#`...) is plain.
            j = i + 1
            while j < n and text[j].isspace():
                j += 1
            if j < n and text[j] == "!":
                j += 1
                while j < n and text[j].isspace():
                    j += 1
            if j < n and text[j] == "[":
                out.append(text[i : j + 1])
                attr, i = 1, j + 1
            else:
                out.append(c)
                i += 1
        else:
            if attr and c == "[":
                attr += 1
            elif attr and c == "]":
                attr -= 1
            out.append(c)
            i += 1
    return "".join(out), attr_strings


def attribute_paths(attr_strings):
    """The attribute strings that are paths a derive writes into code, as path strings.

    A key from PATH_KEYS makes its value a path: rooted values resolve as in code, and a bare
    one (`with = "wire"`) names something in this module's scope, read as `self::wire` (a child
    file is followed; an item or an import resolves to this file and drops out, its `use` line
    having counted). Under any other key, only a value that is wholly a `crate::`, `self::` or
    `super::` path counts.
    """
    paths = []
    for key, value in attr_strings:
        value = value.strip()
        if key == "doc" or not PATH_STR_RE.fullmatch(value):
            continue
        if ROOTED_RE.fullmatch(value):
            paths.append(value)
        elif key in PATH_KEYS:
            paths.append("self::" + value)
    return paths


def deps(mods, key, text):
    code, attr_strings = lex(text)
    # Each attribute path on a line of its own after the code, where PATH_RE reads it.
    text = code + "\n" + "\n".join(attribute_paths(attr_strings)) + "\n"
    found = set()
    # `use` trees: `use crate::llm::{anthropic, openai::{self, X}};` names llm::anthropic and
    # llm::openai (a path ending in a group names each member, not the group's parent).
    for m in USE_RE.finditer(text):
        for path in expand_use(re.sub(r"\s+", "", m.group(1))):
            parts = [p for p in path.split("::") if p]
            if not parts or parts[0] not in ("crate", "super", "self"):
                continue
            rest = [p for p in parts[1:] if re.match(r"^[A-Za-z_]\w*$", p)]
            r = resolve(mods, key, parts[0], rest)
            if r is not None:
                found.add(r)
    for m in PATH_RE.finditer(text):
        head = m.group(1)
        rest = m.group(2).split("::")[1:]
        r = resolve(mods, key, head, rest)
        if r is not None:
            found.add(r)
    # Containment is not use: drop self, ancestors and the crate root (lib.rs only declares).
    return {d for d in found if d != key and d != () and key[: len(d)] != d}


def sccs(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def name(crate, key):
    return f"{crate}:{'::'.join(key) or 'lib'}"


def check(root, dirs):
    cycles = []
    for d in dirs:
        src = os.path.join(d, "src")
        crate = os.path.relpath(d, root)
        mods = module_files(src)
        graph = {}
        for key, path in mods.items():
            with open(path, encoding="utf-8") as f:
                graph[key] = deps(mods, key, f.read())
        for comp in sccs(graph):
            edges = []
            members = set(comp)
            for k in comp:
                for w in sorted(graph[k] & members):
                    edges.append(f"{'::'.join(k)} -> {'::'.join(w)}")
            cycles.append((frozenset(name(crate, k) for k in comp), edges))
    return cycles


# Self-test cases for the lexer: (name, b.rs with a use of `a` only a right reading sees, b.rs
# with `a` named only where a wrong reading sees code). In each planted crate a.rs uses b, so
# the first text closes the cycle a <-> b and the second must leave the crate clean. Each case
# has a text that a regex stripping `//` before strings, or knowing no char, raw string, nested
# comment or attribute path, reads wrong (and each guards one rule of the lexer).
LEX_CASES = [
    # A URL format string: `//` inside a string is no comment hiding the rest of the line.
    ("url_string",
     'pub fn url(h: &str) -> String {\n'
     '    let _a = (format!("{}://{h}", "http"), crate::a::A);\n    h.into()\n}\n',
     'pub fn url() -> String { format!("{}://x", 1) }\npub const S: &str = "crate::a::A";\n'),
    # A raw string holds `//` (no comment) and, with hashes, `"` (not its end).
    ("raw_string",
     'pub const Q: &str = r"http://x"; pub fn g() -> crate::a::A { crate::a::A }\n',
     'pub const Q: &str = r#"say "crate::a::A" now"#;\n'),
    ("raw_hashes",
     'pub const J: &str = r#"a " b"#; pub fn g() -> crate::a::A { crate::a::A }\n'
     'pub const K: &str = "c";\n',
     'pub const J: &str = r##"x "# "crate::a::A" "# y"##;\n'),
    # Byte, raw byte and C strings: the same quotes, other prefixes.
    ("byte_string",
     'pub const P: &[u8] = b"http://"; pub fn g() -> crate::a::A { crate::a::A }\n',
     'pub const P: &[u8] = b"x";\npub const S: &[u8] = b"crate::a::A";\n'),
    ("raw_byte_string",
     'pub const W: &[u8] = br"C:\\"; pub fn g() -> crate::a::A { crate::a::A }\n'
     'pub const K: &[u8] = br#"c"#;\n',
     'pub const W: &[u8] = br"C:\\"; pub const S: &str = "crate::a::A";\n'),
    ("c_string",
     'pub const C: &core::ffi::CStr = c"a://b"; pub fn g() -> crate::a::A { crate::a::A }\n',
     'pub const C: &core::ffi::CStr = c"crate::a::A";\n'),
    # An escaped quote does not end a string, and an escaped backslash does not escape it.
    ("escaped_quote",
     'pub const E: &str = "say \\"//\\""; pub fn g() -> crate::a::A { crate::a::A }\n',
     'pub const E: &str = "a\\" crate::a::A \\"b";\n'),
    ("escaped_backslash",
     'pub const E: [&str; 2] = ["\\\\", "//"]; pub fn g() -> crate::a::A { crate::a::A }\n',
     'pub const E: &str = "\\\\"; pub const S: &str = "crate::a::A";\n'),
    # A char literal `'"'` is no string opening; escapes in chars as in strings.
    ("char_quote",
     'pub fn g(c: char) -> bool { if c == \'"\' { let _a = crate::a::A; } true }\n'
     'pub const K: &str = "c";\n',
     'pub const Q: char = \'"\'; pub const S: &str = "crate::a::A"; pub const R: char = \'"\';\n'),
    ("char_escapes",
     'pub fn g(c: char, b: u8) -> bool {\n'
     '    let _ = [\'\\\'\', \'\\\\\', \'\\u{1F600}\'].contains(&c);\n'
     '    (b == b\'"\').then(|| crate::a::A).is_some()\n'
     '}\npub const K: &str = "c";\n',
     'pub const Q: [u8; 2] = [b\'"\', b\'\\\\\'];\n'
     'pub const S: &str = "crate::a::A"; pub const R: u8 = b\'"\';\n'),
    # A lifetime or a label is no char literal: read as one, `'a>(s: &'` and `'a str { .. = '`
    # would pair up and leave the `"` of `'"'` opening a string over the use.
    ("lifetime",
     "pub fn g<'a>(s: &'a str) -> &'a str { let q = '\"'; let _a = crate::a::A; s.trim_matches(q) }"
     "\n"
     "pub const K: &str = \"c\";\n",
     "pub fn g<'a>(s: &'a str) -> &'static str { 'outer: loop { break 'outer \"\"; } }\n"
     "pub const S: &str = \"crate::a::A\";\n"),
    # Block comments nest: the code after the inner `*/` is still comment.
    ("nested_comment",
     "/* a /* b */ c */ pub fn g() -> crate::a::A { crate::a::A }\n",
     "/* outer /* inner */ crate::a::A */\npub struct C;\n"),
    # A derive's path in an attribute string is a use; a message or doc in one is not.
    ("serde_default",
     '#[derive(serde::Deserialize)]\npub struct D {\n'
     '    #[serde(default = "crate::a::default_x")]\n    pub x: u8,\n}\n',
     '#[derive(Debug, thiserror::Error)]\n#[error("crate::a::A failed")]\n#[doc = "crate::a::A"]\n'
     'pub struct D; // crate::a::A\npub const S: &str = "crate::a::default_x";\n'),
    ("serde_with",
     '#[derive(serde::Deserialize)]\npub struct D {\n'
     '    #[serde(default, with = "super::a::wire")]\n    pub x: u8,\n}\n',
     '#[derive(serde::Deserialize)]\npub struct D {\n'
     '    #[serde(default, with = "humantime_serde", rename = "a::wire")]\n    pub x: u8,\n}\n'),
]


def planted(tmp, name, files):
    """Write a crate named `name` under tmp and return what check() reports for it."""
    src = os.path.join(tmp, name, "src")
    for rel, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
        with open(os.path.join(src, rel), "w", encoding="utf-8") as f:
            f.write(text)
    return [sorted(c) for c, _ in check(tmp, [os.path.join(tmp, name)])]


def self_test():
    """The check can fail: planted cycles are reported, the same crates without them are not."""
    import tempfile

    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        # Paths: a use tree with `self` in its group, `super::super::` and `crate::` in code.
        base = {
            "lib.rs": "pub mod a;\npub mod up;\n",
            "a.rs": "use crate::up::{b::B, self};\npub struct A;\n",
            "up/mod.rs": "pub mod b;\n",
            "up/b.rs": "// use crate::a::A; (a comment is not a use)\npub struct B;\n",
        }
        if planted(tmp, "demo_clean", base) != []:
            failures.append("paths: a tree without a cycle was reported")
        base["up/b.rs"] += "fn f() -> super::super::a::A { crate::a::A }\n"
        if planted(tmp, "demo", base) != [["demo:a", "demo:up::b"]]:
            failures.append("paths: the cycle a <-> up::b was not reported")
        # The lexer: one crate per case and reading, a.rs -> b.rs always, b.rs -> a.rs or not.
        for case, cyclic, clean in LEX_CASES:
            for reading, b_rs, want in (("cyclic", cyclic, True), ("clean", clean, False)):
                name = f"{case}_{reading}"
                files = {
                    "lib.rs": "pub mod a;\npub mod b;\n",
                    "a.rs": "pub use crate::b::B;\npub struct A;\n"
                            "pub fn default_x() -> u8 { 0 }\npub mod wire {}\n",
                    "b.rs": "pub struct B;\n" + b_rs,
                }
                got = planted(tmp, name, files)
                if got != ([[f"{name}:a", f"{name}:b"]] if want else []):
                    failures.append(f"{case}: the {reading} crate was read as {got or 'clean'}")
    for f in failures:
        print(f"layering: self-test FAILED: {f}")
    assert not failures, f"self-test: {len(failures)} planted crates read wrong"
    print(f"layering: self-test ok ({1 + len(LEX_CASES)} planted cycles are reported, "
          "the clean crates are not)")


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if argv[:1] == ["--self-test"]:
        self_test()
        argv = argv[1:]
    dirs = [os.path.join(root, a) for a in argv] if argv else crate_dirs(root)
    cycles = check(root, dirs)
    for members, edges in cycles:
        print(f"layering: import cycle of {len(members)} files:")
        for m in sorted(members):
            print(f"  {m}")
        print("  edges inside it:")
        for e in edges:
            print(f"    {e}")
    print(f"layering: {len(dirs)} crates, {len(cycles)} cycles")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
