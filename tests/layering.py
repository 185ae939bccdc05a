#!/usr/bin/env python3
"""Layering check: fails when a file-level import cycle exists inside a crate, and prints each.

A module is a file (`src/a/b.rs` or `src/a/b/mod.rs` is `a::b`). Module A depends on module B
when A names a path that starts at the crate root and reaches B: `use crate::b::...`,
`crate::b::x` in code, `super::`/`self::` paths resolved from A, and `use` lines of a module
that re-exports. A module does not depend on its own children or parent through `mod` lines
alone (a parent declaring `mod child;` is containment, not a use). Cycles are the strongly
connected components of more than one file; `#[cfg(test)]` modules inside a file count as the
file (a test that imports its way around the layers is still a cycle in the source).

    tests/layering.py                    # every shipped crate (gateway/, operator/, crds/)
    tests/layering.py gateway operator   # only these crate directories
    tests/layering.py --self-test ...    # first show on a planted cycle that the check can fail

Exit status 0 when no cycle exists, 1 otherwise.
"""

import json
import os
import re
import subprocess
import sys

PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_RE = re.compile(r"\buse\s+((?:crate|super|self)::[^;]*);", re.S)
COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING_RE = re.compile(r'"(?:\\.|[^"\\])*"')


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


def deps(mods, key, text):
    text = STRING_RE.sub('""', COMMENT_RE.sub("", text))
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


def self_test():
    """The check can fail: a made-up crate with a cycle is reported, the same without it is not."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "demo", "src")
        os.makedirs(os.path.join(src, "up"))
        files = {
            "lib.rs": "pub mod a;\npub mod up;\n",
            "a.rs": "use crate::up::{b::B, self};\npub struct A;\n",
            "up/mod.rs": "pub mod b;\n",
            "up/b.rs": "// use crate::a::A; (a comment is not a use)\npub struct B;\n",
        }
        for rel, text in files.items():
            with open(os.path.join(src, rel), "w", encoding="utf-8") as f:
                f.write(text)
        clean = check(tmp, [os.path.join(tmp, "demo")])
        with open(os.path.join(src, "up/b.rs"), "a", encoding="utf-8") as f:
            f.write("fn f() -> super::super::a::A { crate::a::A }\n")
        cyclic = check(tmp, [os.path.join(tmp, "demo")])
    assert clean == [], f"self-test: a tree without a cycle was reported: {clean}"
    assert [sorted(c) for c, _ in cyclic] == [["demo:a", "demo:up::b"]], (
        f"self-test: the cycle a <-> up::b was not reported as such: {cyclic}"
    )
    print("layering: self-test ok (a planted cycle is reported, the clean tree is not)")


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
