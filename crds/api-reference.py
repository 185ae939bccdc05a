#!/usr/bin/env python3
"""Generates docs/api-reference.md from the CRD manifests (crds/*.yaml, themselves generated from
crds/src by `cargo run -p switchboard-crds --bin crdgen`): for each kind its description, short
names, printer columns, and every spec and status field with its type, default, validation and
description. The manifests are the source of truth; this page is what `kubectl explain` shows,
in one place.

    python3 crds/api-reference.py            write docs/api-reference.md
    python3 crds/api-reference.py --check    fail if the committed page differs
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "api-reference.md"
ORDER = ["McpServer", "McpVirtualServer", "McpKey", "ModelRoute", "IdentityProvider"]

# Kubernetes' own types embedded whole (a pod's container settings): described by Kubernetes.
FOREIGN = ("conditions[].",)


def one_line(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def type_of(s: dict) -> str:
    if s.get("x-kubernetes-int-or-string"):
        return "int or string"
    t = s.get("type", "object" if "properties" in s else "any")
    if t == "array":
        return f"[]{type_of(s.get('items', {}))}"
    if t == "object" and "additionalProperties" in s and "properties" not in s:
        inner = s["additionalProperties"]
        return f"map[string]{type_of(inner) if isinstance(inner, dict) else 'any'}"
    if "enum" in s:
        return f"{t}: " + ", ".join(f"`{e}`" for e in s["enum"] if e is not None)
    return t


def constraints(s: dict) -> str:
    out = []
    for key, label in (("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"), ("maxLength", "length ≤"),
                       ("minItems", "items ≥"), ("maxItems", "items ≤")):  # fmt: skip
        if key in s:
            value = s[key]
            out.append(f"{label} {int(value) if float(value).is_integer() else value}")
    if "pattern" in s:
        out.append(f"pattern `{s['pattern']}`")
    for rule in s.get("x-kubernetes-validations", []):
        out.append(f"rule: {rule.get('message') or rule['rule']}")
    return "; ".join(out)


def rows(s: dict, path: str, required: set[str], out: list[str]) -> None:
    for name, sub in (s.get("properties") or {}).items():
        p = f"{path}.{name}" if path else name
        if any(f in p for f in FOREIGN):
            continue
        default = f"`{json.dumps(sub['default'])}`" if "default" in sub else ""
        req = "yes" if name in required else ""
        desc = one_line(sub.get("description"))
        extra = constraints(sub)
        if extra:
            desc = f"{desc} ({one_line(extra)})" if desc else one_line(extra)
        out.append(f"| `{p}` | {type_of(sub)} | {req} | {default} | {desc} |")
        children = sub
        if sub.get("type") == "array":
            children = sub.get("items", {})
            p = f"{p}[]"
        elif "additionalProperties" in sub and isinstance(sub["additionalProperties"], dict):
            children = sub["additionalProperties"]
            p = f"{p}{{}}"
        if "properties" in children:
            rows(children, p, set(children.get("required", [])), out)


def kind_section(crd: dict) -> str:
    names = crd["spec"]["names"]
    version = crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    group = crd["spec"]["group"]
    lines = [f"## {names['kind']}", ""]
    lines.append(f"`{group}/{version['name']}`, {crd['spec']['scope'].lower()}; "
                 f"`kubectl get {names['plural']}`" + (f" (short: {', '.join(f'`{n}`' for n in names.get('shortNames', []))})" if names.get("shortNames") else "") + ".")  # fmt: skip
    lines += ["", one_line(schema.get("description")), ""]
    columns = version.get("additionalPrinterColumns", [])
    if columns:
        lines += ["Columns of `kubectl get` (priority 1 with `-o wide`):", "",
                  "| Column | From | Wide only |", "|---|---|---|"]  # fmt: skip
        for c in columns:
            lines.append(f"| {c['name']} | `{c['jsonPath']}` | {'yes' if c.get('priority') else ''} |")
        lines.append("")
    for part in ("spec", "status"):
        sub = (schema.get("properties") or {}).get(part)
        if not sub:
            continue
        lines += [f"### {names['kind']}.{part}", "", one_line(sub.get("description")), "",
                  "| Field | Type | Required | Default | Description |", "|---|---|---|---|---|"]  # fmt: skip
        out: list[str] = []
        rows(sub, part, set(sub.get("required", [])), out)
        if part == "status" and "conditions" in (sub.get("properties") or {}):
            out.append("| `status.conditions[]` | | | | Kubernetes conditions (`type`, `status`, `reason`, `message`, "
                       "`lastTransitionTime`, `observedGeneration`), a map keyed by `type`: the operator owns "
                       "`Accepted`, `Programmed`, `Ready` (and `Running` for `spec.run`, `KeysLoaded` for an IdentityProvider); others' conditions are kept. |")  # fmt: skip
        lines += out + [""]
    return "\n".join(lines)


def generate() -> str:
    crds = {}
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        crds[crd["spec"]["names"]["kind"]] = crd
    kinds = [k for k in ORDER if k in crds] + sorted(k for k in crds if k not in ORDER)
    head = [
        "# API reference",
        "",
        "<!-- Generated by crds/api-reference.py from crds/*.yaml; do not edit. -->",
        "",
        "The Switchboard custom resources, as their CustomResourceDefinitions declare them "
        "(`kubectl explain <kind> --recursive` shows the same). Defaults are applied by the API "
        "server when a field is left out.",
        "",
    ]
    head += [f"- [{k}](#{k.lower()})" for k in kinds] + [""]
    return "\n".join(head + [kind_section(crds[k]) for k in kinds]).rstrip("\n") + "\n"


def main() -> int:
    want = generate()
    if "--check" in sys.argv[1:]:
        if not OUT.exists() or OUT.read_text() != want:
            print(f"{OUT} differs from crds/*.yaml: run python3 crds/api-reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(want)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
