"""Tool schemas from published OpenAPI 3.0 documents are JSON Schema 2020-12 (issue 35, item 4).

An MCP tool's `inputSchema` and `outputSchema` are JSON Schema 2020-12; an OpenAPI 3.0 Schema
Object is not: `nullable: true` means "or null" where 2020-12 ignores it, a boolean
`exclusiveMinimum` is not a 2020-12 schema at all, `example` is not 2020-12's `examples`. The
documents here were written by others, not for these tests, and come pinned from npm
(tests/node/package.json, installed by tests/setup-node.sh):

- GitHub's REST description (`@octokit/openapi`, `generated/api.github.com.json`, OpenAPI
  3.0.3): about a thousand operations, `nullable` on thousands of schemas, beside `type`,
  `enum`, `oneOf`, `anyOf` and `allOf`, `readOnly` properties, `example`s everywhere;
- ReadMe's collection of example documents (`@readme/oas-examples`): every OpenAPI 3.0 JSON
  document of it, the classic Swagger Petstore among them, and `schema-validation.json` with
  boolean `exclusiveMinimum`/`exclusiveMaximum`, `schema-types.json`, `discriminators.json`,
  `schema-visibility.json` (readOnly/writeOnly); and its 3.1 documents, some written the 3.0
  way (ReadMe's own API description uses `nullable`, two use boolean bounds).

Each document is a server of one gateway (`openapi.document: {file: ...}`); the official Python
SDK client of each era lists every tool (the SDK validates each tool it lists; both eras list
the same), and the `jsonschema` package's Draft 2020-12 validator checks every input and output
schema (`check_schema`). Then field by field: every schema node the document marks
`nullable: true` (a parameter, the body, a property at any depth, an array's items, a branch of
a `oneOf`) is found in the compiled schema and must accept `null`; as a control that the check
can fail, every node with a `type` and no `nullable` must refuse it. No 3.0-only keyword
(`nullable`, `example`, `discriminator`, `xml`, `externalDocs`) and no `x-*` extension is left in
a keyword position; `readOnly` properties are not required in an input, `writeOnly` ones not in
an output. A schema the document refers to is written once in the tool schema's own `$defs`
(issue 39): every `$ref` must name one of them (counted: a check that sees none proves
nothing), and the field checks read each schema with its references followed, as a client does.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from harness import (
    MODERN_VERSION,
    gateway_config,
    inline_defs,
    key,
    new_secret,
    run_async,
    schema_refs,
    sdk_client,
    sdk_list_all_tools,
    server,
)
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from ts_client import SETUP_HINT, node_dir

GITHUB = ("@octokit/openapi", "generated/api.github.com.json")
EXAMPLES = "@readme/oas-examples"
# A REST API nobody calls: the tests only list.
NOWHERE = "http://127.0.0.1:9/api"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
KEYWORDS_OF_3_0 = {"nullable", "example", "discriminator", "xml", "externalDocs"}
# Keywords whose value is data, not a schema: never searched for keywords.
DATA = {"enum", "const", "default", "examples"}


def package_file(package: str, relative: str) -> Path:
    path = node_dir() / "node_modules" / package / relative
    if not path.is_file():
        pytest.fail(f"{path} is missing: {SETUP_HINT}", pytrace=False)
    return path


def documents() -> list[tuple[str, Path]]:
    """(server name, document path): GitHub's, then every OpenAPI 3.0 and 3.1 JSON document of
    ReadMe's collection."""
    out = [("github", package_file(*GITHUB))]
    root = package_file(EXAMPLES, "package.json").parent
    for version in ("3.0", "3.1"):
        for path in sorted((root / version / "json").glob("*.json")):
            name = re.sub(r"[^a-z0-9]+", "-", f"oas{version}-{path.stem}".lower()).strip("-")[:63]
            out.append((name, path))
    return out


# --------------------------------------------------------------------------------------------
# The document side: operations, their tool names and schemas, as docs/openapi.md says


def derived_name(operation_id: str | None, method: str, path: str) -> str:
    raw = operation_id if operation_id is not None else f"{method}_{path}"
    name = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9.\-]", "_", raw)).strip("_")[:64]
    return name or method


class Document:
    def __init__(self, path: Path):
        self.doc = json.loads(path.read_text())
        self.version = self.doc["openapi"]

    def resolve(self, node: Any, depth: int = 0) -> Any:
        """A local `$ref` followed (3.0: the keywords beside it do not count)."""
        while isinstance(node, dict) and isinstance(node.get("$ref"), str) and depth < 16:
            ref = node["$ref"]
            if not ref.startswith("#/"):
                return {}
            target: Any = self.doc
            for token in ref[2:].split("/"):
                token = token.replace("~1", "/").replace("~0", "~")
                target = target[int(token)] if isinstance(target, list) else target.get(token, {})
            node, depth = target, depth + 1
        return node

    def operations(self) -> dict[str, dict]:
        """Tool name -> {"params": {name: schema}, "body": schema | None, "response": schema | None}."""
        out: dict[str, dict] = {}
        for path, item in sorted(self.doc.get("paths", {}).items()):
            item = self.resolve(item)
            for method in METHODS:
                op = item.get(method)
                if not isinstance(op, dict):
                    continue
                name = derived_name(op.get("operationId"), method, path)
                if name in out:
                    continue
                params = {}
                for p in [*item.get("parameters", []), *op.get("parameters", [])]:
                    p = self.resolve(p)
                    schema = p.get("schema") or (p.get("content") or {}).get("application/json", {}).get("schema")
                    if schema is not None:
                        params[p["name"]] = schema
                out[name] = {"params": params, "body": self.json_schema_of(self.resolve(op.get("requestBody", {}))),
                             "response": self.response_schema(op)}
        return out

    def json_schema_of(self, holder: dict) -> Any:
        for media, content in (holder.get("content") or {}).items():
            essence = media.split(";")[0].strip()
            if essence == "application/json" or essence.endswith("+json") or essence == "*/*":
                return content.get("schema")
        return None

    def response_schema(self, op: dict) -> Any:
        responses = op.get("responses") or {}
        for code in sorted(c for c in responses if str(c).startswith("2")):
            schema = self.json_schema_of(self.resolve(responses[code]))
            if schema is not None:
                return schema
        return None

    def nullable(self, node: Any) -> bool:
        return isinstance(node, dict) and (node.get("nullable") is True or self.resolve(node).get("nullable") is True)


# --------------------------------------------------------------------------------------------
# The compiled side


def unwrap_null(compiled: dict) -> dict:
    """The schema inside `anyOf: [<schema>, {"type": "null"}]` (how a nullable composed schema
    comes out), else the schema itself."""
    branches = compiled.get("anyOf")
    if isinstance(branches, list) and len(branches) == 2 and branches[1] == {"type": "null"}:
        return branches[0]
    return compiled


class FieldCheck:
    """Walks a document's schema and its compiled form side by side, checking `null` at every
    node: accepted where the document says `nullable`, refused where it gives a type without."""

    def __init__(self, document: Document, where: str):
        self.document = document
        self.where = where
        self.nullable_checked = 0
        self.typed_checked = 0
        self.failures: dict[str, list[str]] = {}

    def walk(self, node: Any, compiled: Any, path: str, visit: bool = True) -> None:
        if not isinstance(compiled, dict) or not compiled or len(path) > 2000:
            return  # a reference cycle the gateway cut ("any value"), or past the sanitizer's bound
        resolved = self.document.resolve(node)
        if not isinstance(resolved, dict):
            return
        if visit:
            self.visit(node, resolved, compiled, path)
        inner = unwrap_null(compiled)
        for name, sub in (resolved.get("properties") or {}).items():
            if isinstance(inner.get("properties"), dict) and name in inner["properties"]:
                self.walk(sub, inner["properties"][name], f"{path}.{name}")
        if isinstance(resolved.get("items"), dict) and isinstance(inner.get("items"), dict):
            self.walk(resolved["items"], inner["items"], f"{path}[]")
        if isinstance(resolved.get("additionalProperties"), dict) and isinstance(inner.get("additionalProperties"), dict):
            self.walk(resolved["additionalProperties"], inner["additionalProperties"], f"{path}{{*}}")
        for keyword in ("oneOf", "anyOf"):
            branches = resolved.get(keyword)
            compiled_branches = inner.get("anyOf")
            if isinstance(branches, list) and isinstance(compiled_branches, list) and len(branches) == len(compiled_branches):
                for i, (b, c) in enumerate(zip(branches, compiled_branches, strict=True)):
                    self.walk(b, c, f"{path}.{keyword}[{i}]")
        branches = resolved.get("allOf")
        if isinstance(branches, list):
            compiled_branches = inner.get("allOf")
            if isinstance(compiled_branches, list) and len(compiled_branches) == len(branches):
                pairs = list(zip(branches, compiled_branches, strict=True))
            elif len(branches) == 1:
                pairs = [(branches[0], inner)]  # a one-branch allOf is merged into its parent
            else:
                pairs = []
            for i, (b, c) in enumerate(pairs):
                # An allOf branch's own nullability is not the whole's: only what is inside it.
                self.walk(b, c, f"{path}.allOf[{i}]", visit=False)

    def visit(self, node: Any, resolved: dict, compiled: dict, path: str) -> None:
        accepts_null = Draft202012Validator(compiled).is_valid(None)
        if self.document.nullable(node):
            self.nullable_checked += 1
            if not accepts_null:
                self.failures.setdefault("nullable in the document, refuses null", []).append(
                    f"{self.where}{path}: {json.dumps(compiled)[:200]}")
        elif (
            isinstance(resolved.get("type"), str)
            and resolved["type"] != "null"
            and not any(k in resolved for k in ("oneOf", "anyOf", "allOf", "not"))
            and "type" in compiled
        ):
            self.typed_checked += 1
            if accepts_null:
                self.failures.setdefault("typed and not nullable in the document, accepts null", []).append(
                    f"{self.where}{path}: {json.dumps(compiled)[:200]}")


def keyword_problems(schema: Any, where: str) -> list[str]:
    """3.0-only keywords and extensions left in keyword positions (names of properties and data
    values are not keywords)."""
    problems: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, list):
            for i, n in enumerate(node):
                walk(n, f"{path}[{i}]")
            return
        if not isinstance(node, dict):
            return
        for k, v in node.items():
            if k in KEYWORDS_OF_3_0 or k.startswith("x-"):
                problems.append(f"{where}{path}: keyword {k!r}")
            if k in DATA:
                continue
            if k in ("properties", "patternProperties", "$defs"):
                for name, sub in (v or {}).items():
                    walk(sub, f"{path}.{name}")
            else:
                walk(v, f"{path}/{k}")

    walk(schema, "")
    return problems


def required_problems(schema: Any, hidden: str, where: str) -> list[str]:
    """Properties marked `hidden` (readOnly in an input, writeOnly in an output) that are required."""
    problems: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, list):
            for n in node:
                walk(n, path)
            return
        if not isinstance(node, dict):
            return
        props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        for name in node.get("required") or []:
            if isinstance(props.get(name), dict) and props[name].get(hidden) is True:
                problems.append(f"{where}{path}: {name!r} is {hidden} and required")
        for k, v in node.items():
            if k not in DATA:
                walk(v, f"{path}/{k}")

    walk(schema, "")
    return problems


# --------------------------------------------------------------------------------------------
# The test


def serve_every_document(gateways) -> tuple[Any, str, dict[str, Path]]:
    """One gateway serving every document as a server: (gateway, key, {server name: document})."""
    docs = documents()
    secret = new_secret("schemas")
    servers = [server(name, NOWHERE, openapi={"document": {"file": str(path)}}) for name, path in docs]
    config = gateway_config(servers, [key("reader", secret, [name for name, _ in docs])])
    return gateways.start(config, ready_timeout=120), secret, dict(docs)


def listed(url: str, secret: str, era: str) -> list[Any]:
    async def go():
        async with sdk_client(url, secret, era) as c:
            return await sdk_list_all_tools(c, max_pages=200)

    return run_async(go, timeout=300)


def test_published_documents_compile_to_json_schema_2020_12(gateways):
    gw, secret, docs = serve_every_document(gateways)
    problems: dict[str, list[str]] = {}
    counts = {"tools": 0, "schemas": 0, "distinct": 0, "references": 0, "nullable": 0, "typed": 0}
    checked: dict[str, FieldCheck] = {}
    valid: dict[str, str | None] = {}  # a schema's text -> why it is not a 2020-12 schema (None: it is)
    timing = {"list": 0.0, "check_schema": 0.0, "fields": 0.0}
    for name, path in docs.items():
        started = time.monotonic()
        # The official SDK client of each era lists (and validates each tool it lists); both
        # eras get the same tools.
        tools = listed(gw.mcp_url(name), secret, "legacy")
        modern = listed(gw.mcp_url(name), secret, MODERN_VERSION)
        assert [t.model_dump() for t in modern] == [t.model_dump() for t in tools], f"{name}: the eras list alike"
        timing["list"] += time.monotonic() - started
        document = Document(path)
        operations = document.operations()
        check = checked[name] = FieldCheck(document, name)
        for tool in tools:
            where = f"{name}/{tool.name}"
            counts["tools"] += 1
            started = time.monotonic()
            for kind, schema in (("inputSchema", tool.input_schema), ("outputSchema", tool.output_schema)):
                if schema is None:
                    continue
                counts["schemas"] += 1
                text = json.dumps(schema, sort_keys=True)
                if text not in valid:
                    counts["distinct"] += 1
                    try:
                        Draft202012Validator.check_schema(schema)
                        valid[text] = None
                    except SchemaError as e:
                        valid[text] = f"{e.message} at {'/'.join(map(str, e.absolute_path))}"
                if valid[text] is not None:
                    problems.setdefault("not a JSON Schema 2020-12 schema", []).append(f"{where} {kind}: {valid[text]}")
                problems.setdefault("a 3.0 keyword or an extension left", []).extend(keyword_problems(schema, f"{where} {kind}"))
                refs = schema_refs(schema)
                counts["references"] += len(refs)
                dangling = [r for r in refs if not r.startswith("#/$defs/") or r[len("#/$defs/"):] not in schema.get("$defs", {})]
                problems.setdefault("a $ref naming nothing in the schema's own $defs", []).extend(
                    f"{where} {kind}: {r}" for r in dangling)
            # The checks below read each schema as a client that follows its references does.
            input_schema = inline_defs(tool.input_schema)
            output_schema = inline_defs(tool.output_schema) if tool.output_schema is not None else None
            hidden = required_problems(input_schema, "readOnly", f"{where} inputSchema")
            if output_schema is not None:
                hidden += required_problems(output_schema, "writeOnly", f"{where} outputSchema")
            problems.setdefault("readOnly required in an input, writeOnly in an output", []).extend(hidden)
            timing["check_schema"] += time.monotonic() - started
            started = time.monotonic()
            op = operations.get(tool.name)
            assert op is not None, f"{where}: no operation of {path.name} has this tool's name"
            arguments = input_schema.get("properties", {})
            for param, schema in op["params"].items():
                if param in arguments:
                    check.where = f"{where} input {param}"
                    check.walk(schema, arguments[param], "")
            if op["body"] is not None:
                body = arguments.get("requestBody" if "body" in op["params"] else "body")
                assert body is not None, f"{where}: the operation's JSON body is not an argument"
                check.where = f"{where} input body"
                check.walk(op["body"], body, "")
            if op["response"] is not None and output_schema is not None:
                out = output_schema
                props = out.get("properties") or {}
                wrapped = set(props) == {"result"} and "result" not in (document.resolve(op["response"]).get("properties") or {})
                check.where = f"{where} output"
                check.walk(op["response"], props["result"] if wrapped else out, "")
            timing["fields"] += time.monotonic() - started
        counts["nullable"] += check.nullable_checked
        counts["typed"] += check.typed_checked
        for kind, found in check.failures.items():
            problems.setdefault(kind, []).extend(found)
    print(f"{counts}, seconds: { {k: round(v, 1) for k, v in timing.items()} }")
    github = checked["github"]
    # The walk reached what it is about (a check that finds nothing proves nothing).
    assert counts["tools"] > 1000 and github.nullable_checked > 1000 and github.typed_checked > 1000, counts
    assert counts["references"] > 1000, f"definitions are shared by reference: {counts}"
    assert checked["oas3-0-schema-validation"].typed_checked > 0, counts
    found = {kind: items for kind, items in problems.items() if items}
    report = "\n".join(f"{kind}: {len(items)}, e.g.\n  " + "\n  ".join(items[:6]) for kind, items in found.items())
    assert not found, f"{sum(map(len, found.values()))} problems:\n{report}"
