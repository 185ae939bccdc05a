#!/usr/bin/env python3
"""Walks `kubectl explain` for every Switchboard kind on a live API server (the CRDs applied) and
fails naming each field shown without a description: what a user reading `kubectl explain
--recursive` and then `kubectl explain <kind>.<field>` would find empty.

    python3 tests/k8s/explain-check.py [KIND...]     (default: the five kinds; kubectl on PATH,
                                                       KUBECONFIG set)

Prints one line per kind with the number of fields it read; exits 1 listing the undescribed ones.
`metadata` (Kubernetes' own ObjectMeta) is not walked.
"""

from __future__ import annotations

import atexit
import re
import shutil
import subprocess
import sys
import tempfile

KINDS = ["mcpserver", "mcpvirtualserver", "mcpkey", "modelroute", "identityprovider"]
FIELD = re.compile(r"^  (\S+)\t<(.+)>")
# kubectl's placeholder for an empty description
NONE = "<no description>"
# A cache of this run's own: kubectl keeps the OpenAPI it explains from for hours otherwise.
CACHE = tempfile.mkdtemp(prefix="explain-check-")
atexit.register(shutil.rmtree, CACHE, True)


def explain(path: str) -> str:
    p = subprocess.run(["kubectl", "explain", path, "--cache-dir", CACHE], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise SystemExit(f"kubectl explain {path} failed: {p.stderr.strip()}")
    return p.stdout


def fields(text: str) -> tuple[str, list[tuple[str, str, str]]]:
    """(the node's own DESCRIPTION, [(field, type, description)...]) of one explain page."""
    description, listed, section, current = [], [], None, None
    for line in text.splitlines():
        if line in ("DESCRIPTION:", "FIELDS:"):
            section = line
            continue
        if section == "DESCRIPTION:":
            if line.strip() and line.strip() != NONE:
                description.append(line.strip())
        elif section == "FIELDS:":
            m = FIELD.match(line)
            if m:
                current = [m.group(1), m.group(2), ""]
                listed.append(current)
            elif current is not None and line.startswith("    ") and line.strip() and line.strip() != NONE:
                current[2] += line.strip() + " "
    return " ".join(description), [(n, t, d.strip()) for n, t, d in listed]


def walk(path: str, missing: list[str], counted: list[int]) -> None:
    _, listed = fields(explain(path))
    for name, type_, description in listed:
        child = f"{path}.{name}"
        counted[0] += 1
        if not description:
            missing.append(child)
        if name != "metadata" and "Object" in type_:
            walk(child, missing, counted)


def main() -> int:
    kinds = sys.argv[1:] or KINDS
    missing: list[str] = []
    for kind in kinds:
        own, _ = fields(explain(kind))
        if not own or "Auto-generated derived type" in own:
            missing.append(f"{kind} (the kind itself: {own!r})")
        counted = [0]
        walk(kind, missing, counted)
        print(f"{kind}: {counted[0]} fields read")
    if missing:
        print(f"{len(missing)} fields without a description in kubectl explain:")
        print("\n".join(f"  {m}" for m in missing))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
