#!/usr/bin/env python3
"""Generates charts/switchboard/values.schema.json from charts/switchboard/values.yaml and
charts/values-schema-types.json, so Helm refuses a misspelled key (`gateway.replica: 3`) or a
wrong type (`gateway.replicas: three`) by name instead of ignoring it.

    python3 charts/values-schema.py            write the schema
    python3 charts/values-schema.py --check    fail if the committed schema differs

Rules: every mapping in values.yaml is an object that allows exactly its keys, except free-form
ones (a `{}` default: `httpRoute.timeouts`, `tracing.resourceAttributes` ...), which take any
keys; a key's type is its default's (`""` string, `0` integer, `true` boolean, `[]` a list of
anything); a `null` default takes any value. A key's `# -- ` comment in values.yaml is its
description. Numbers may also be given as strings where the default is a string, never the
reverse.

Values the chart renders as Kubernetes fields (resources, probes, security contexts, affinity,
tolerations, volumes, env, labels, annotations ...; KUBERNETES below) take the Kubernetes type's
schema instead, and `gateway.settings` the gateway settings' own (GatewaySettings, without the
fields the operator owns). Those come from values-schema-types.json, which the operator crate
generates from k8s-openapi and the settings type:
`cargo run -p switchboard-operator --bin chart-schema` (its `--check` is a Rust test too).
Kubernetes objects stay open, as in the Kubernetes OpenAPI document: a field a newer API server
knows passes here, and the API server has the last word on fields. The probes are the exception:
the chart writes their handler (`httpGet`), the values hold only its timings, so those are
closed to Probe's other fields.
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
TYPES = Path(__file__).resolve().parent / "values-schema-types.json"


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


def ref(name: str) -> dict:
    # draft-07 validators ignore a `$ref`'s siblings: the description beside it is for editors.
    return {"$ref": f"#/definitions/{name}"}


def list_of(name: str) -> dict:
    return {"type": "array", "items": {"$ref": f"#/definitions/{name}"}}


CORE = "io.k8s.api.core.v1."
NETWORKING = "io.k8s.api.networking.v1."
# Labels, annotations and node selectors: string to string, as ObjectMeta and PodSpec have them
# (a number there is refused by the API server too: `--set-string` it).
STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
# The probe handler fields of Probe, which the chart writes itself; the values hold the rest
# (definition ProbeTimings, made here from Probe).
PROBE_HANDLERS = ("exec", "grpc", "httpGet", "tcpSocket")
PROBE = ref("ProbeTimings")

KUBERNETES: dict[str, dict] = {
    "commonLabels": STRINGS,
    "imagePullSecrets": list_of(CORE + "LocalObjectReference"),
    "gateway.settings": ref("GatewaySettings"),
    "gateway.networkPolicy.httpFrom": list_of(NETWORKING + "NetworkPolicyPeer"),
    "gateway.ingress.annotations": STRINGS,
    "gateway.ingress.tls": list_of(NETWORKING + "IngressTLS"),
    "gateway.httpRoute.annotations": STRINGS,
    "gateway.autoscaling.behavior": ref("io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerBehavior"),
    "monitoring.labels": STRINGS,
    "monitoring.prometheusRule.labels": STRINGS,
    "monitoring.prometheusRule.additionalRuleLabels": STRINGS,
    "monitoring.dashboard.labels": STRINGS,
    "monitoring.dashboard.annotations": STRINGS,
}
for component in ("operator", "gateway"):
    KUBERNETES.update({
        f"{component}.{key}": shape for key, shape in {
            "resources": ref(CORE + "ResourceRequirements"),
            "podSecurityContext": ref(CORE + "PodSecurityContext"),
            "securityContext": ref(CORE + "SecurityContext"),
            "livenessProbe": PROBE,
            "readinessProbe": PROBE,
            "affinity": ref(CORE + "Affinity"),
            "tolerations": list_of(CORE + "Toleration"),
            "topologySpreadConstraints": list_of(CORE + "TopologySpreadConstraint"),
            "nodeSelector": STRINGS,
            "extraEnv": list_of(CORE + "EnvVar"),
            "extraVolumes": list_of(CORE + "Volume"),
            "extraVolumeMounts": list_of(CORE + "VolumeMount"),
            "strategy": ref("io.k8s.api.apps.v1.DeploymentStrategy"),
            "networkPolicy.metricsFrom": list_of(NETWORKING + "NetworkPolicyPeer"),
            "podAnnotations": STRINGS,
            "podLabels": STRINGS,
            "serviceAccount.annotations": STRINGS,
            "service.annotations": STRINGS,
        }.items()
    })


def probe_timings(definitions: dict) -> dict:
    """ProbeTimings: Probe's fields but its handlers, and nothing else."""
    probe = definitions[CORE + "Probe"]["properties"]
    missing = [h for h in PROBE_HANDLERS if h not in probe]
    if missing:
        raise SystemExit(f"Probe has no {missing}: update PROBE_HANDLERS in {__file__}")
    return {
        "type": "object",
        "properties": {k: v for k, v in probe.items() if k not in PROBE_HANDLERS},
        "additionalProperties": False,
    }


def schema_of(value, path: str, docs: dict[str, str]) -> dict:
    s: dict = {}
    if path in KUBERNETES:
        s = dict(KUBERNETES[path])
    elif path in EITHER:
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
            s["properties"] = {
                k: schema_of(v, f"{path}.{k}" if path else k, docs) for k, v in value.items()
            }
            s["additionalProperties"] = False
    s.update(SHAPES.get(path, {}))
    if path in docs:
        s["description"] = docs[path]
    return s


def paths(value, path: str = "") -> set[str]:
    out = {path} if path else set()
    if isinstance(value, dict):
        for k, v in value.items():
            out |= paths(v, f"{path}.{k}" if path else k)
    return out


def references(schema) -> set[str]:
    if isinstance(schema, dict):
        out = {schema["$ref"].removeprefix("#/definitions/")} if "$ref" in schema else set()
        return out.union(*(references(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(references(v) for v in schema))
    return set()


def generate() -> str:
    text = VALUES.read_text()
    values = yaml.safe_load(text)
    definitions = json.loads(TYPES.read_text())["definitions"]
    definitions["ProbeTimings"] = probe_timings(definitions)
    unknown = sorted(set(KUBERNETES) - paths(values))
    if unknown:
        raise SystemExit(f"KUBERNETES names values that values.yaml does not have: {unknown}")
    top = schema_of(values, "", descriptions(text))
    missing = sorted(references(top) - set(definitions))
    if missing:
        raise SystemExit(f"{TYPES.name} has no {missing}: run cargo run -p switchboard-operator --bin chart-schema")
    top = {"$schema": "https://json-schema.org/draft-07/schema#", "title": "switchboard chart values", **top}
    top["definitions"] = definitions
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
