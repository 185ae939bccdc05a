#!/usr/bin/env python3
"""Generates charts/switchboard/values.schema.json from charts/switchboard/values.yaml, so Helm
refuses a misspelled key (`gateway.replica: 3`) or a wrong type (`gateway.replicas: three`) by
name instead of ignoring it.

    python3 charts/values-schema.py            write the schema
    python3 charts/values-schema.py --check    fail if the committed schema differs

Rules: every mapping in values.yaml is an object that allows exactly its keys, except free-form
ones (a `{}` default: labels, annotations, resources, selectors, `gateway.settings` ...), which
take any keys; a key's type is its default's (`""` string, `0` integer, `true` boolean, `[]` a
list of anything); a `null` default takes any value. A key's `# -- ` comment in values.yaml is
its description. Numbers may also be given as strings where the default is a string, never the
reverse.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parent / "switchboard"
VALUES = CHART / "values.yaml"
SCHEMA = CHART / "values.schema.json"


def descriptions(text: str) -> dict[str, str]:
    """`a.b.c` → the `# -- ` comment block just above that key."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    comment: list[str] = []
    in_doc = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            comment, in_doc = [stripped[4:].strip()], True
            continue
        if stripped.startswith("#"):
            if in_doc:
                comment.append(stripped[1:].strip())
            continue
        m = re.match(r"^(\s*)([A-Za-z0-9_.-]+):", line)
        if not m:
            comment, in_doc = [], False
            continue
        indent, key = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [key])
        if comment:
            out[path] = " ".join(c for c in comment if c)
        comment, in_doc = [], False
        stack.append((indent, key))
    return out


# Values that are numbers or strings by nature: a PodDisruptionBudget's count or percentage, an
# autoscaling target left empty to switch it off, a ratio (`helm --set x=0.25` gives a string).
EITHER = {
    "operator.podDisruptionBudget.minAvailable": ["integer", "string"],
    "operator.podDisruptionBudget.maxUnavailable": ["integer", "string"],
    "gateway.podDisruptionBudget.minAvailable": ["integer", "string"],
    "gateway.podDisruptionBudget.maxUnavailable": ["integer", "string"],
    "gateway.autoscaling.targetCPUUtilizationPercentage": ["integer", "string"],
    "gateway.autoscaling.targetMemoryUtilizationPercentage": ["integer", "string"],
    "tracing.sampleRatio": ["number", "string"],
}

DNS_LABEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
NAMES = {"type": "array", "items": {"type": "string", "pattern": DNS_LABEL}}
# A reserved name is a name or a start followed by one `*` (what the operator's
# --reserved-prefixes/--reserved-models parse; `,` and `=` would split its flag wrongly).
RESERVED = {
    "type": "object",
    "propertyNames": {"pattern": "^[^,=*\\s]+\\*?$"},
    "additionalProperties": NAMES,
}
# Exact host names: the gateway allows a Host only by equality, so a wildcard route
# (`*.example.com`) would pass the proxy and then be refused 403 by every replica.
HOSTS = {"type": "array", "items": {"type": "string", "pattern": "^[^*\\s]+$"}}
# Lists and maps whose items have a shape a `[]` or `{}` default cannot show.
SHAPES = {
    "operator.watchNamespaces": {**NAMES, "uniqueItems": True},
    "operator.instance": {"pattern": f"^$|{DNS_LABEL}"},
    "operator.reservedNames.prefixes": RESERVED,
    "operator.reservedNames.models": RESERVED,
    "gateway.ingress.hosts": HOSTS,
    "gateway.httpRoute.hostnames": HOSTS,
    "gateway.httpRoute.parentRefs": {"type": "array", "items": {"type": "object", "required": ["name"]}},
}


def schema_of(value, path: str, docs: dict[str, str]) -> dict:
    s: dict = {}
    if path in EITHER:
        s["type"] = EITHER[path]
    elif isinstance(value, bool):
        s["type"] = "boolean"
    elif isinstance(value, int):
        # Counts, sizes, ports and bounds: none of the chart's integers may be negative.
        s["type"] = "integer"
        s["minimum"] = 0
    elif isinstance(value, float):
        s["type"] = "number"
    elif isinstance(value, str):
        s["type"] = "string"
    elif isinstance(value, list):
        s["type"] = "array"
    elif isinstance(value, dict):
        s["type"] = "object"
        if value:
            s["properties"] = {k: schema_of(v, f"{path}.{k}" if path else k, docs) for k, v in value.items()}
            s["additionalProperties"] = False
    s.update(SHAPES.get(path, {}))
    if path in docs:
        s["description"] = docs[path]
    return s


def generate() -> str:
    text = VALUES.read_text()
    values = yaml.safe_load(text)
    top = schema_of(values, "", descriptions(text))
    top = {"$schema": "https://json-schema.org/draft-07/schema#", "title": "switchboard chart values", **top}
    return json.dumps(top, indent=2) + "\n"


def main() -> int:
    want = generate()
    if "--check" in sys.argv[1:]:
        if not SCHEMA.exists() or SCHEMA.read_text() != want:
            print(f"{SCHEMA} differs from values.yaml: run python3 charts/values-schema.py", file=sys.stderr)
            return 1
        return 0
    SCHEMA.write_text(want)
    print(f"wrote {SCHEMA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
