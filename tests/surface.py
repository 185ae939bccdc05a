#!/usr/bin/env python3
"""Counts two kinds of drift in the shipped crates (gateway/, operator/, crds/), printed so a
change can show them before and after (issue 36's acceptance):

- `Result<_, String>`: results whose error is a bare string (a boundary should have its enum);
  each occurrence in a signature or type, outside `#[cfg(test)]` files and `tests/`;
- `pub` items used only inside their crate: a `pub` (not `pub(crate)`) fn, struct, enum, trait,
  type, const, static or mod whose name no file of another crate mentions.

    python3 tests/surface.py [--list]      # --list names each item counted

Reads the source with the layering check's lexer (tests/layering.py: strings and comments are
not code), so a `Result<(), String>` in a comment or a string is not counted.
"""

import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import layering  # noqa: E402

SHIPPED = ["gateway", "operator", "crds"]
RESULT_STRING = re.compile(r"Result<[^<>;{}]*(?:<[^<>;{}]*>[^<>;{}]*)*,\s*String\s*>")
PUB_ITEM = re.compile(
    r"(?<![\w)])pub\s+(?:async\s+)?(?:unsafe\s+)?(fn|struct|enum|trait|type|const|static|mod)\s+([A-Za-z_]\w*)"
)
WORD = re.compile(r"[A-Za-z_]\w*")


def crates() -> dict[Path, list[Path]]:
    """Each shipped crate's directory and its Rust files (a nested crate is its own)."""
    roots = sorted(p.parent for d in SHIPPED for p in (ROOT / d).rglob("Cargo.toml") if "target" not in p.parts)
    out: dict[Path, list[Path]] = {r: [] for r in roots}
    for d in SHIPPED:
        for f in (ROOT / d).rglob("*.rs"):
            owner = max((r for r in roots if r in f.parents), key=lambda r: len(r.parts), default=None)
            if owner is not None:
                out[owner].append(f)
    return out


def code_of(path: Path) -> str:
    """The file with its comments and string contents blanked (layering's lexer)."""
    return layering.lex(path.read_text(encoding="utf-8"))[0]


def is_test_file(path: Path) -> bool:
    return path.name.endswith("_tests.rs") or path.name == "tests.rs" or "tests" in path.parts


def main() -> int:
    listing = "--list" in sys.argv
    by_crate = crates()
    code = {f: code_of(f) for files in by_crate.values() for f in files}
    results = []
    for f, text in code.items():
        if is_test_file(f):
            continue
        # Only what is not in a `#[cfg(test)] mod` (the rest of the file after it is tests by convention).
        body = text.split("#[cfg(test)]")[0]
        for m in RESULT_STRING.finditer(body):
            line = body.count("\n", 0, m.start()) + 1
            results.append(f"{f.relative_to(ROOT)}:{line}: {m.group(0)}")
    words_of = {c: set() for c in by_crate}
    for c, files in by_crate.items():
        for f in files:
            words_of[c].update(WORD.findall(code[f]))
    crate_only = []
    total_pub = 0
    for c, files in by_crate.items():
        elsewhere = set().union(*(w for other, w in words_of.items() if other != c))
        for f in files:
            if is_test_file(f):
                continue
            body = code[f].split("#[cfg(test)]")[0]
            for m in PUB_ITEM.finditer(body):
                total_pub += 1
                if m.group(2) not in elsewhere and m.group(2) != "main":
                    line = body.count("\n", 0, m.start()) + 1
                    crate_only.append(f"{f.relative_to(ROOT)}:{line}: pub {m.group(1)} {m.group(2)}")
    if listing:
        print("\n".join(["Result<_, String>:", *results, "", "pub used only in its crate:", *crate_only]))
    print(f"Result<_, String>: {len(results)}")
    print(f"pub items: {total_pub}, used only inside their crate: {len(crate_only)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
