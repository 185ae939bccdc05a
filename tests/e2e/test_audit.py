"""Issue 22: one audit record per client request (docs/audit.md, `switchboard.audit/v1`), field by
field for each kind of request, refusals included; the per-tenant usage metrics the same requests
count; the internal listener (the client listener answers 404 for `/metrics` and the hand-off).

Records go to stdout by default (the gateway's own log is on stderr); each is found by the
`X-Request-Id` the gateway answered with. Every argument, result text and prompt the tests send is
distinctive, and the last test greps every record for them (and for the secrets).
"""

from __future__ import annotations

import json
import re
import secrets as _secrets
from pathlib import Path

import httpx
from harness import (
    MODERN_VERSION,
    RawMcp,
    gateway_config,
    key,
    new_secret,
    rest_call,
    server,
    start_rust_upstream,
    wait_until,
)
from llm_harness import ANTHROPIC_VERSION, start_llm_world, text, tool_use

SCHEMA = "switchboard.audit/v1"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
REQUEST_ID_RE = re.compile(r"^[0-9a-f]{32}$")

# What the tests send that a record must never hold.
NEVER_LOGGED: set[str] = set()


def distinctive(label: str) -> str:
    value = f"sbx-payload-{label}-{_secrets.token_hex(8)}"
    NEVER_LOGGED.add(value)
    return value


def is_record(line: str) -> bool:
    """Whether a line of a gateway's output is an audit record (not its own log)."""
    return line.startswith("{") and SCHEMA in line


def records_of(gw) -> list[dict]:
    out = []
    for line in gw.proc.stdout_path.read_text("utf-8", "replace").splitlines():
        if is_record(line):
            out.append(json.loads(line))
    return out


def record(gw, request_id: str, timeout: float = 10) -> dict:
    """The record of the request answered with `request_id` (written by a thread: waited for)."""

    def found():
        matching = [r for r in records_of(gw) if r["request_id"] == request_id]
        assert len(matching) <= 1, f"more than one record for {request_id}: {matching}"
        return matching[0] if matching else None

    return wait_until(found, timeout, what=f"the audit record of request {request_id}")


def common(rec: dict, *, endpoint: str, status: int, outcome: str, path: str, http_method: str = "POST") -> None:
    assert rec["schema"] == SCHEMA
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", rec["time"]), rec["time"]
    assert rec["endpoint"] == endpoint, rec
    assert rec["status"] == status, rec
    assert rec["outcome"] == outcome, rec
    assert rec["path"] == path, rec
    assert rec["http_method"] == http_method, rec
    assert rec["duration_ms"] >= 0, rec
    assert rec["replica"], rec


def metric(gw, name: str, **labels: str) -> float:
    text = httpx.get(f"{gw.internal_url}/metrics", timeout=5).text
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_mcp_and_rest_records_field_by_field_with_refusals(gateways, rust_upstream):
    secret, other = new_secret("audit-key"), new_secret("audit-other")
    upstream_secret = new_secret("audit-upstream")
    gw = gateways.start(
        gateway_config(
            [
                server("alpha", rust_upstream.mcp_url, auth={"type": "bearer", "secret": upstream_secret}),
                server("beta", rust_upstream.mcp_url),
            ],
            [key("one", secret, ["alpha"]), key("two", other, ["beta"])],
            maxBodyBytes=4096,
        )
    )
    argument = distinctive("argument")
    calls_before = metric(gw, "switchboard_gateway_tenant_requests_total", server="alpha", outcome="ok")

    # A tools/call on /mcp, both eras, with the client's traceparent.
    for era in ("legacy", MODERN_VERSION):
        mcp = RawMcp(gw.mcp_url(), secret, era, headers={"traceparent": TRACEPARENT})
        reply = mcp.call_tool("alpha__echo", {"text": argument})
        assert reply.status == 200 and not reply.result.get("isError"), reply.raw[:300]
        rid = reply.headers["x-request-id"]
        assert REQUEST_ID_RE.match(rid), rid
        rec = record(gw, rid)
        common(rec, endpoint="mcp", status=200, outcome="ok", path="/mcp")
        assert rec["caller"] == {"kind": "key", "key": "default/one", "namespace": "default"}, rec
        assert rec["server"] == "alpha" and rec["rpc_method"] == "tools/call" and rec["tool"] == "alpha__echo", rec
        assert rec["trace_id"] == TRACE_ID, rec
        assert rec["upstream_status"] == 200, rec
        assert rec["bytes_in"] > len(argument) and rec["bytes_out"] == len(reply.raw), (rec, len(reply.raw))
        assert "rpc_error_code" not in rec, rec

    # A client's own X-Request-Id is kept; a prompt and a resource are named.
    mcp = RawMcp(gw.mcp_url("alpha"), secret, MODERN_VERSION, headers={"x-request-id": "client-chosen-1"})
    reply = mcp.request("prompts/get", {"name": "greet", "arguments": {"name": distinctive("prompt-arg")}})
    assert reply.status == 200 and reply.headers["x-request-id"] == "client-chosen-1", reply.raw[:300]
    rec = record(gw, "client-chosen-1")
    common(rec, endpoint="mcp_single", status=200, outcome="ok", path="/mcp/alpha")
    assert rec["prompt"] == "greet" and rec["server"] == "alpha" and "trace_id" not in rec, rec
    reply = RawMcp(gw.mcp_url("alpha"), secret, MODERN_VERSION).request("resources/read", {"uri": "example://readme"})
    rec = record(gw, reply.headers["x-request-id"])
    assert rec["resource"] == "example://readme" and rec["rpc_method"] == "resources/read", rec

    # REST.
    r = rest_call(gw, secret, "alpha__add", {"a": 2, "b": 40})
    assert r.status_code == 200, r.text
    rec = record(gw, r.headers["x-request-id"])
    common(rec, endpoint="rest", status=200, outcome="ok", path="/mcp-rest/tools/call")
    assert rec["tool"] == "alpha__add" and rec["server"] == "alpha" and rec["caller"]["key"] == "default/one", rec

    # Refusals: no key, a wrong key, a server out of scope, a body too large, a foreign Origin.
    r = httpx.post(gw.mcp_url(), json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=10)
    rec = record(gw, r.headers["x-request-id"])
    common(rec, endpoint="mcp", status=401, outcome="unauthenticated", path="/mcp")
    assert "caller" not in rec, rec
    r = rest_call(gw, "sbx-not-a-key", "alpha__add", {"a": 1, "b": 1})
    rec = record(gw, r.headers["x-request-id"])
    common(rec, endpoint="rest", status=401, outcome="unauthenticated", path="/mcp-rest/tools/call")
    reply = RawMcp(gw.mcp_url(), other, MODERN_VERSION).call_tool("alpha__echo", {"text": argument})
    rec = record(gw, reply.headers["x-request-id"])
    assert rec["caller"]["key"] == "default/two" and rec["tool"] == "alpha__echo", rec
    assert rec["outcome"] == "access_denied" and rec["rpc_error_code"] == reply.message["error"]["code"], rec
    assert rec["server"] == "alpha", f"the record names the server refused: {rec}"
    r = rest_call(gw, secret, "alpha__echo", {"text": "x" * 8000})
    assert r.status_code == 413, r.text
    rec = record(gw, r.headers["x-request-id"])
    common(rec, endpoint="rest", status=413, outcome="payload_too_large", path="/mcp-rest/tools/call")
    r = httpx.post(gw.mcp_url(), json={}, headers={"Origin": "https://evil.example", "Authorization": f"Bearer {secret}"}, timeout=10)
    assert r.status_code == 403, r.text
    rec = record(gw, r.headers["x-request-id"])
    common(rec, endpoint="mcp", status=403, outcome="forbidden_origin", path="/mcp")

    # Usage: the successful calls on alpha are counted for the key's namespace.
    calls = metric(gw, "switchboard_gateway_tenant_requests_total", tenant="default", server="alpha", outcome="ok")
    assert calls - calls_before == 5, f"{calls - calls_before} ok requests on alpha counted, 5 made"
    # (Two calls and one refusal for scope: a refusal counts under the server it refused.)
    assert metric(gw, "switchboard_gateway_request_duration_seconds_count", endpoint="mcp", server="alpha") == 3


def _mcp_post(gw, path_prefix: str | None, secret: str, method: str, params: dict) -> httpx.Response:
    """One 2026-07-28 request, its answer as it came."""
    mcp = RawMcp(gw.mcp_url(path_prefix) if path_prefix else gw.mcp_url(), secret, MODERN_VERSION)
    reply = mcp.request(method, params)
    mcp.close()
    return reply


def _same_answer(refused, absent, refused_name: str, absent_name: str) -> None:
    """The client's answer to a refusal for scope is the answer to a name that does not exist:
    status, content type and body, the name aside."""
    assert refused.status == absent.status, (refused.status, absent.status)
    assert refused.headers.get("content-type") == absent.headers.get("content-type")
    assert refused.headers.get("www-authenticate") == absent.headers.get("www-authenticate")
    assert refused.raw.replace(refused_name.encode(), absent_name.encode()) == absent.raw, (refused.raw, absent.raw)


def test_a_refusal_for_scope_is_recorded_as_one_on_every_face(gateways, procs, rust_upstream):
    """Issue 35: a key that may not reach a server (or a tool of it, or a virtual server) gets
    the answer a name that does not exist gets, on MCP (single server, aggregate prefixed, a
    prompt and a resource), REST and the virtual server's endpoint alike; its record says
    `access_denied` and names what was refused, field by field, where the record of a name that
    does not exist says `not_found`/`tool_not_found` and names nothing."""
    one, two, three, four = (new_secret(f"audit-scope-{n}") for n in ("one", "two", "three", "four"))
    config = gateway_config(
        [server("alpha", rust_upstream.mcp_url), server("beta", rust_upstream.mcp_url)],
        [
            key("one", one, ["alpha"]),
            key("two", two, ["beta", "desk"]),
            key("three", three, ["alpha"], tools={"allow": ["alpha__add"]}),
            key("four", four, ["desk"]),
        ],
    )
    config["virtualServers"] = [{"name": "desk", "sources": [{"server": "beta", "tools": {"allow": ["add", "echo"]}}]}]
    gw = gateways.start(config)

    def refusal(reply, *, endpoint, path, caller, status, tool=None, **named):
        rec = record(gw, reply.headers["x-request-id"])
        common(rec, endpoint=endpoint, status=status, outcome="access_denied", path=path)
        assert rec["caller"] == {"kind": "key", "key": f"default/{caller}", "namespace": "default"}, rec
        for field in ("server", "virtual_server"):
            assert rec.get(field) == named.get(field), (field, rec)
        assert rec.get("tool") == tool, rec
        assert "upstream_status" not in rec, f"nothing reached an upstream: {rec}"
        return rec

    def absence(reply, outcome, virtual_server=None):
        rec = record(gw, reply.headers["x-request-id"])
        assert rec["outcome"] == outcome and "server" not in rec and rec.get("virtual_server") == virtual_server, rec
        return rec

    # /mcp/{prefix}: alpha exists, two may not reach it: 404 as for a path that names nothing.
    refused = _mcp_post(gw, "alpha", two, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
    absent = _mcp_post(gw, "nosuch", two, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
    assert refused.status == 404 and refused.raw == b"unknown server: alpha", refused.raw
    _same_answer(refused, absent, "alpha", "nosuch")
    refusal(refused, endpoint="mcp_single", path="/mcp/alpha", caller="two", status=404, tool="echo", server="alpha")
    absence(absent, "not_found")
    # A legacy client's initialize, refused the same way.
    legacy = RawMcp(gw.mcp_url("alpha"), two, "legacy")
    initialize = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "audit", "version": "0"}}
    reply = legacy.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize})
    assert reply.status == 404 and reply.raw == b"unknown server: alpha", reply.raw
    rec = refusal(reply, endpoint="mcp_single", path="/mcp/alpha", caller="two", status=404, server="alpha")
    assert rec["rpc_method"] == "initialize", rec
    legacy.close()

    # /mcp, prefixed names: a tool, a prompt, a resource of alpha.
    for method, field, name, absent_name in (
        ("tools/call", "tool", "alpha__echo", "zzz__echo"),
        ("prompts/get", "prompt", "alpha__greet", "zzz__greet"),
        ("resources/read", "resource", "alpha__example://readme", "zzz__example://readme"),
    ):
        param = "uri" if field == "resource" else "name"
        refused = _mcp_post(gw, None, two, method, {param: name})
        absent = _mcp_post(gw, None, two, method, {param: absent_name})
        assert "error" in refused.message, refused.raw
        _same_answer(refused, absent, name, absent_name)
        rec = record(gw, refused.headers["x-request-id"])
        common(rec, endpoint="mcp", status=refused.status, outcome="access_denied", path="/mcp")
        assert rec["server"] == "alpha" and rec[field] == name and rec["rpc_method"] == method, rec
        assert rec["rpc_error_code"] == refused.message["error"]["code"] == -32602, rec
        absence(absent, "tool_not_found" if field == "tool" else "not_found")

    # A tool the key's own filter refuses (three reaches alpha, only its `add`): unknown to the
    # client on /mcp, /mcp/alpha and REST, a refusal on record.
    refused = _mcp_post(gw, None, three, "tools/call", {"name": "alpha__echo", "arguments": {"text": "x"}})
    absent = _mcp_post(gw, None, three, "tools/call", {"name": "alpha__nosuch", "arguments": {"text": "x"}})
    _same_answer(refused, absent, "alpha__echo", "alpha__nosuch")
    refusal(refused, endpoint="mcp", path="/mcp", caller="three", status=refused.status, tool="alpha__echo", server="alpha")
    refused = _mcp_post(gw, "alpha", three, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
    assert refused.message["error"]["code"] == -32602, refused.raw
    refusal(refused, endpoint="mcp_single", path="/mcp/alpha", caller="three", status=refused.status, tool="echo", server="alpha")
    assert _mcp_post(gw, "alpha", three, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}).status == 200
    r = rest_call(gw, three, "alpha__echo", {"text": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "tool_not_found", r.text
    rest = rest_call(gw, three, "alpha__nosuch", {"text": "x"})
    assert r.text.replace("alpha__echo", "alpha__nosuch") == rest.text, (r.text, rest.text)
    rec = record(gw, r.headers["x-request-id"])
    common(rec, endpoint="rest", status=404, outcome="access_denied", path="/mcp-rest/tools/call")
    assert rec["server"] == "alpha" and rec["tool"] == "alpha__echo", rec

    # REST tells the caller (403 access_denied); its record names the server too.
    for server_id in (None, "alpha"):
        r = rest_call(gw, two, "alpha__echo", {"text": "x"}, server_id=server_id)
        assert r.status_code == 403 and r.json()["error"]["code"] == "access_denied", r.text
        rec = record(gw, r.headers["x-request-id"])
        common(rec, endpoint="rest", status=403, outcome="access_denied", path="/mcp-rest/tools/call")
        assert rec["server"] == "alpha" and rec["tool"] == "alpha__echo", rec

    # A virtual server the key does not reach: its path does not exist for one.
    refused = _mcp_post(gw, "desk", one, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
    absent = _mcp_post(gw, "nosuch", one, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
    _same_answer(refused, absent, "desk", "nosuch")
    refusal(refused, endpoint="mcp_single", path="/mcp/desk", caller="one", status=404, tool="add", virtual_server="desk")
    # Through a virtual server four reaches, a tool of a server four does not: unknown tool, and
    # the record names both the virtual server and the server refused.
    refused = _mcp_post(gw, "desk", four, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
    absent = _mcp_post(gw, "desk", four, "tools/call", {"name": "nosuch", "arguments": {"a": 1, "b": 2}})
    _same_answer(refused, absent, "add", "nosuch")
    refusal(refused, endpoint="mcp_single", path="/mcp/desk", caller="four", status=refused.status, tool="add", server="beta", virtual_server="desk")
    absence(absent, "tool_not_found", virtual_server="desk")
    # The control: two reaches both; its call through desk goes to beta and says so.
    ok = _mcp_post(gw, "desk", two, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
    assert ok.status == 200 and "error" not in ok.message, ok.raw
    rec = record(gw, ok.headers["x-request-id"])
    assert rec["outcome"] == "ok" and rec["server"] == "beta" and rec["virtual_server"] == "desk", rec

    # The per-tenant metric counts them as refusals too, one for each record that says so.
    def counted_as_records():
        denied = len([r for r in records_of(gw) if r["outcome"] == "access_denied"])
        return denied >= 12 and metric(gw, "switchboard_gateway_tenant_requests_total", tenant="default", outcome="access_denied") == denied

    wait_until(counted_as_records, 10, what="every access_denied record counted in the tenant metric")


def test_a_stream_is_recorded_once_when_it_ends(gateways, procs):
    up = start_rust_upstream(procs, "audit-sse")
    secret = new_secret("audit-sse")
    gw = gateways.start(gateway_config([server("ex", up.variant_url("sse"))], [key("c", secret, ["ex"])]))
    mcp = RawMcp(gw.mcp_url("ex"), secret, MODERN_VERSION, headers={"accept": "application/json, text/event-stream"})
    reply = mcp.request("tools/call", {"name": "slow", "arguments": {"ms": 300}, "_meta": {"progressToken": "p1"}})
    assert reply.status == 200 and reply.headers["content-type"].startswith("text/event-stream"), reply.headers
    assert len(reply.messages) >= 2, f"expected a notification before the answer: {reply.messages}"
    rec = record(gw, reply.headers["x-request-id"])
    common(rec, endpoint="mcp_single", status=200, outcome="stream", path="/mcp/ex")
    assert rec["duration_ms"] >= 300, f"a stream's record is written when it ends: {rec}"
    assert rec["bytes_out"] == len(reply.raw), (rec, len(reply.raw))
    assert len([r for r in records_of(gw) if r["request_id"] == rec["request_id"]]) == 1


def test_an_llm_request_records_its_model_and_tokens(gateways, procs, rust_upstream):
    world = start_llm_world(gateways, procs, rust_upstream, tools=[{"server": "tools", "tools": {"allow": ["add"]}}])
    answer = distinctive("model-answer")
    world.provider.script(
        {"respond": {"content": [tool_use("tools__add", a=20, b=22)]}},
        {"respond": {"content": [text(answer)]}},
    )
    prompt = distinctive("prompt")
    for stream in (False, True):
        r = httpx.post(
            f"{world.gateway.url}/v1/messages",
            json={"model": "claude-test", "max_tokens": 50, "stream": stream, "messages": [{"role": "user", "content": prompt}]},
            headers={"x-api-key": world.key, "anthropic-version": ANTHROPIC_VERSION, "traceparent": TRACEPARENT},
            timeout=30,
        )
        assert r.status_code == 200, r.text[:300]
        rec = record(world.gateway, r.headers["x-request-id"])
        common(rec, endpoint="llm_messages", status=200, outcome="ok", path="/v1/messages")
        assert rec["model"] == "claude" and rec["trace_id"] == TRACE_ID, rec
        assert rec["caller"]["kind"] == "key", rec
        assert rec["tokens"]["input"] > 0 and rec["tokens"]["output"] > 0, rec
        if not stream:
            usage = r.json()["usage"]
            assert rec["tokens"] == {"input": usage["input_tokens"], "output": usage["output_tokens"]}, (rec, usage)
        assert "server" not in rec, f"an LLM record names its model, not its gateway tools' server: {rec}"
        world.provider.script(
            {"respond": {"content": [tool_use("tools__add", a=20, b=22)]}},
            {"respond": {"content": [text(answer)]}},
        )
    tokens = metric(world.gateway, "switchboard_gateway_tenant_llm_tokens_total", model="claude", kind="output")
    assert tokens > 0, "model tokens counted by tenant and model"
    # Refused: a model the key does not have.
    r = httpx.post(
        f"{world.gateway.url}/v1/messages",
        json={"model": "no-such-model", "max_tokens": 5, "messages": [{"role": "user", "content": prompt}]},
        headers={"x-api-key": world.key, "anthropic-version": ANTHROPIC_VERSION},
        timeout=30,
    )
    assert r.status_code >= 400
    rec = record(world.gateway, r.headers["x-request-id"])
    assert rec["status"] == r.status_code and rec["outcome"] not in ("ok", "stream"), rec


def test_an_llm_request_refused_for_scope_is_recorded_as_one(gateways, procs, rust_upstream):
    """Issue 35: the LLM endpoints tell the caller (403), and the record says `access_denied`
    naming the model or the MCP server the key may not use."""
    world = start_llm_world(gateways, procs, rust_upstream, tools=[])
    outsider = new_secret("audit-llm-outsider")
    world.config["servers"].append(server("closed", rust_upstream.mcp_url))
    world.config["keys"].append(key("outsider", outsider, accessGroups=["other"]))
    world.gateway.write_config(world.config)
    headers = {"x-api-key": outsider, "anthropic-version": ANTHROPIC_VERSION}
    body = {"model": "claude-test", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    r = wait_until(
        lambda: (r := httpx.post(f"{world.gateway.url}/v1/messages", json=body, headers=headers, timeout=30)).status_code == 403 and r,
        10,
        what="the outsider key to be served",
    )
    rec = record(world.gateway, r.headers["x-request-id"])
    common(rec, endpoint="llm_messages", status=403, outcome="access_denied", path="/v1/messages")
    assert rec["model"] == "claude" and rec["caller"]["key"] == "default/outsider" and "server" not in rec, rec
    ref = {"type": "mcp", "server_url": f"{world.gateway.url}/mcp/closed", "require_approval": "never"}
    headers["x-api-key"] = world.key
    r = httpx.post(f"{world.gateway.url}/v1/messages", json={**body, "tools": [ref]}, headers=headers, timeout=30)
    assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error", r.text
    rec = record(world.gateway, r.headers["x-request-id"])
    common(rec, endpoint="llm_messages", status=403, outcome="access_denied", path="/v1/messages")
    assert rec["server"] == "closed" and rec["caller"]["key"] == "default/caller", rec
    assert world.provider.model_calls() == [], "nothing reached the provider"


def test_internal_listener_and_audit_off(gateways, rust_upstream):
    secret = new_secret("audit-off")
    gw = gateways.start(
        gateway_config([server("alpha", rust_upstream.mcp_url)], [key("one", secret, ["alpha"])]),
        env={"SWITCHBOARD_AUDIT_LOG": "off"},
    )
    for path in ("/metrics", "/healthz", "/readyz"):
        assert httpx.get(f"{gw.url}{path}", timeout=5).status_code == 404, path
        assert httpx.get(f"{gw.internal_url}{path}", timeout=5).status_code == 200, path
    assert httpx.post(f"{gw.url}/mcp-internal/exchange", content=b"{}", timeout=5).status_code == 404
    assert httpx.post(f"{gw.internal_url}/mcp-internal/exchange", content=b"{}", timeout=5).status_code != 404
    # The control case: audit off writes no record (so the record checks above can fail).
    r = rest_call(gw, secret, "alpha__add", {"a": 1, "b": 2})
    assert r.status_code == 200 and r.headers["x-request-id"]
    assert wait_until(lambda: metric(gw, "switchboard_gateway_tenant_requests_total", server="alpha") >= 1, 5)
    assert records_of(gw) == [], "audit off, yet records were written"


def documented_fields() -> set[str]:
    """The fields docs/audit.md's schema table names (its first column's `names`)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "audit.md").read_text("utf-8")
    table = text.split("## Schema `switchboard.audit/v1`", 1)[1].split("\n### ", 1)[0]
    names: set[str] = set()
    for row in table.splitlines():
        cells = row.split("|")
        if row.startswith("| `") and len(cells) > 2:
            names.update(re.findall(r"`([a-z_]+)`", cells[1]))
    return names


def test_zz_no_record_holds_an_argument_a_result_a_prompt_or_a_secret(gateways):
    """Runs after the tests above in this module: every gateway's stdout and stderr of this run."""
    from harness import GATEWAY_LOGS, SECRETS_USED

    assert NEVER_LOGGED, "the tests above sent nothing distinctive"
    found = []
    for path in GATEWAY_LOGS:
        if not path.exists():
            continue
        body = path.read_text("utf-8", "replace")
        found += [(path.name, v) for v in NEVER_LOGGED | SECRETS_USED if v in body]
    assert found == [], f"in the logs: {found}"


def test_zz_every_record_member_is_a_field_the_schema_names(gateways):
    """Runs after the tests above in this module: every record of every gateway this worker ran
    names only fields docs/audit.md's schema table has."""
    from harness import GATEWAY_LOGS

    documented = documented_fields()
    # The reading of the table itself: its first field, its last, and one named beside another.
    assert {"schema", "bytes_out", "tool", "resource", "tools_flagged"} <= documented, documented
    undocumented, records = set(), 0
    for path in GATEWAY_LOGS:
        if not path.exists():
            continue
        lines = path.read_text("utf-8", "replace").splitlines()
        for n, line in enumerate(lines):
            if not is_record(line):
                continue
            try:
                members = json.loads(line).keys()
            except json.JSONDecodeError:
                # Only a process killed while writing leaves a record cut short, as its last line.
                assert n == len(lines) - 1, f"{path.name}: a record that is not JSON: {line[:300]}"
                continue
            records += 1
            undocumented |= members - documented
    assert records, "no audit record in this run's gateway logs"
    assert not undocumented, f"record members docs/audit.md's schema does not name: {sorted(undocumented)}"


def test_records_queued_at_exit_are_written(gateways, rust_upstream):
    """Records are written in batches (every 20 ms): the ones still queued when the gateway is
    told to stop go out before it exits."""
    import signal

    secret = new_secret("audit-exit")
    gw = gateways.start(gateway_config([server("alpha", rust_upstream.mcp_url)], [key("one", secret, ["alpha"])]))
    ids = [rest_call(gw, secret, "alpha__add", {"a": i, "b": 1}).headers["x-request-id"] for i in range(20)]
    gw.proc.signal(signal.SIGTERM)
    gw.proc.wait(20)  # the exit, and its stdout copied to the log to the last line
    written = {r["request_id"] for r in records_of(gw)}
    assert set(ids) <= written, f"{len(set(ids) - written)} of 20 records lost at exit"
