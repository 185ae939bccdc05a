"""LLM endpoints: request-level MCP references expanded with the caller's scope, the one schema
sanitizer, model access, provider errors and timeouts, the provider credential, count_tokens,
/v1/models, and logs that hold no prompt, argument or result."""

from __future__ import annotations

import json

import httpx
import pytest
from harness import key, new_secret, server
from llm_harness import ANTHROPIC_VERSION, hidden_add, start_llm_world, text, tool_use

ADD = "tools__add"


def post_messages(world, body: dict, key_secret: str | None = None, gateway=None, **headers) -> httpx.Response:
    gw = gateway or world.gateway
    h = {"x-api-key": key_secret or world.key, "anthropic-version": ANTHROPIC_VERSION, **headers}
    return httpx.post(f"{gw.url}/v1/messages?beta=true", json=body, headers=h, timeout=30)


def post_chat(world, body: dict, key_secret: str | None = None) -> httpx.Response:
    h = {"authorization": f"Bearer {key_secret or world.key}"}
    return httpx.post(f"{world.gateway.url}/v1/chat/completions", json=body, headers=h, timeout=30)


def hello(model="claude-test", **extra) -> dict:
    return {"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "hello"}], **extra}


def with_config(gateways, procs, upstream, mutate, **kw):
    """A world whose config `mutate(config)` changes, rewritten before the test goes on."""
    world = start_llm_world(gateways, procs, upstream, **kw)
    mutate(world.config)
    world.gateway.write_config(world.config)
    return world


def wait_applied(world, predicate) -> None:
    from harness import wait_until

    wait_until(predicate, 10, what="config applied")


def test_request_level_mcp_reference_is_expanded_with_the_callers_scope(gateways, procs, rust_upstream):
    world = start_llm_world(gateways, procs, rust_upstream, tools=[])
    world.provider.script(
        {"when": {"last_tool_result_for": ADD}, "respond": {"content": [text("sum {{tool_result:tools__add}}")]}},
        {"when": {"has_tool": ADD}, "respond": {"content": [tool_use(ADD, a=20, b=22)]}},
    )
    ref = {"type": "mcp", "server_url": f"{world.gateway.url}/mcp/tools", "require_approval": "never"}
    r = post_messages(world, hello(tools=[ref]))
    assert r.status_code == 200, r.text
    body = r.json()
    kinds = [b["type"] for b in body["content"]]
    # A server the client named itself is shown, as the provider's own MCP connector shows it;
    # the carrier block holds the real exchange for the next request.
    assert kinds == ["mcp_tool_use", "mcp_tool_result", "redacted_thinking", "text"], body
    assert body["content"][0]["name"] == "add" and body["content"][0]["server_name"] == "tools"
    assert body["content"][3]["text"] == "sum 42"
    first = world.provider.model_calls()[0]["body"]
    assert all(t.get("type") != "mcp" for t in first["tools"]), "the reference never reaches the provider"
    assert ADD in [t["name"] for t in first["tools"]]

    # Anthropic's mcp_servers parameter naming a server of this gateway works the same.
    world.provider.reset()
    world.provider.script(
        {"when": {"last_tool_result_for": ADD}, "respond": {"content": [text("sum {{tool_result:tools__add}}")]}},
        {"when": {"has_tool": ADD}, "respond": {"content": [tool_use(ADD, a=1, b=1)]}},
    )
    servers = [{"type": "url", "url": f"{world.gateway.url}/mcp/tools", "name": "tools"}]
    r = post_messages(world, hello(mcp_servers=servers))
    assert r.status_code == 200, r.text
    assert [b["text"] for b in r.json()["content"] if b["type"] == "text"] == ["sum 2"]
    assert "mcp_servers" not in world.provider.model_calls()[0]["body"]


def test_a_reference_outside_the_keys_scope_is_refused_before_the_provider(gateways, procs, rust_upstream):
    def add_closed_server(config):
        config["servers"].append(server("closed", rust_upstream.mcp_url))

    world = with_config(gateways, procs, rust_upstream, add_closed_server, tools=[])
    world.provider.script({"respond": {"content": [text("should not happen")]}})
    ref = {"type": "mcp", "server_url": f"{world.gateway.url}/mcp/closed", "require_approval": "never"}

    def refused():
        r = post_messages(world, hello(tools=[ref]))
        return r if r.status_code == 403 else None

    from harness import wait_until

    r = wait_until(refused, 10, what="the closed server to exist and be refused")
    error = r.json()["error"]
    assert error["type"] == "permission_error"
    assert "closed" in error["message"] and "tools[0]" in error["message"], error
    r = post_messages(world, hello(tools=[{"type": "mcp", "server_url": "https://elsewhere.example/mcp/x"}]))
    assert r.status_code == 400 and "tools[0]" in r.json()["error"]["message"], r.text
    r = post_chat(world, hello("gpt-test", tools=[ref]))
    assert r.status_code == 403 and r.json()["error"]["param"] == "tools[0]", r.text
    assert world.provider.model_calls() == [], "nothing reached the provider"


@pytest.mark.parametrize("wire", ["anthropic", "openai"])
def test_tool_schemas_reach_the_provider_sanitized(gateways, procs, rust_upstream, wire):
    def verbose(config):
        config["servers"][0]["url"] = rust_upstream.variant_url("schemas=verbose")

    world = with_config(gateways, procs, rust_upstream, verbose)
    world.provider.script({"respond": {"content": [text("ok")]}})

    def schema_seen():
        world.provider.reset()
        world.provider.script({"respond": {"content": [text("ok")]}})
        r = post_messages(world, hello()) if wire == "anthropic" else post_chat(world, hello("gpt-test"))
        assert r.status_code == 200, r.text
        tools = world.provider.model_calls()[0]["body"]["tools"]
        schemas = [t.get("input_schema") or t["function"]["parameters"] for t in tools]
        return schemas[0] if "mode" in json.dumps(schemas) else None

    from harness import wait_until

    schema = wait_until(schema_seen, 10, what="the verbose schema to be served")
    raw = json.dumps(schema)
    for refused in ("$schema", "definitions", "$ref", "oneOf"):
        assert refused not in raw, raw
    assert schema["type"] == "object"
    assert schema["properties"]["a"] == {"type": "integer", "description": "an addend"}
    assert schema["properties"]["mode"] == {"anyOf": [{"const": "exact"}, {"const": "fast"}]}
    assert schema["required"] == ["a", "b"]


def test_model_access_is_the_keys_and_errors_have_the_providers_shape(gateways, procs, rust_upstream):
    outsider = new_secret("outsider")

    def add_outsider(config):
        config["keys"].append(key("outsider", outsider, accessGroups=["other"]))

    world = with_config(gateways, procs, rust_upstream, add_outsider)
    world.provider.script({"respond": {"content": [text("hi")]}})
    from harness import wait_until

    r = wait_until(
        lambda: (lambda r: r if r.status_code == 403 else None)(post_messages(world, hello(), key_secret=outsider)),
        10,
        what="the outsider key",
    )
    assert r.json() == {
        "type": "error",
        "error": {"type": "permission_error", "message": 'the key may not use model "claude-test"'},
    }
    r = post_chat(world, hello("gpt-test"), key_secret=outsider)
    assert r.status_code == 403 and r.json()["error"]["code"] == "permission_denied", r.text
    r = post_messages(world, hello("no-such-model"))
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = post_messages(world, hello(), key_secret="sk-wrong")
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = post_messages(world, hello("gpt-test"))
    assert r.status_code == 400 and "/v1/chat/completions" in r.json()["error"]["message"]
    r = post_chat(world, hello("gpt-test", n=2))
    assert r.status_code == 400 and r.json()["error"]["param"] == "n", r.text
    # /v1/models lists what the key reaches, in a shape both SDKs read.
    listed = httpx.get(f"{world.gateway.url}/v1/models", headers={"x-api-key": world.key}).json()
    assert {m["id"] for m in listed["data"]} == {"claude-test", "claude-sonnet-4-5", "claude-opus-5-5", "gpt-test"}
    assert listed["has_more"] is False and listed["object"] == "list"
    listed = httpx.get(f"{world.gateway.url}/v1/models", headers={"authorization": f"Bearer {outsider}"}).json()
    assert listed["data"] == []
    assert world.provider.model_calls() == []


def test_provider_errors_are_relayed_and_timeouts_mapped(gateways, procs, rust_upstream):
    world = start_llm_world(gateways, procs, rust_upstream, timeout="1s")
    for status, kind in ((401, "authentication_error"), (429, "rate_limit_error"), (529, "overloaded_error"), (500, "api_error")):
        world.provider.reset()
        body = {"type": "error", "error": {"type": kind, "message": f"scripted {status}"}}
        world.provider.script({"respond": {"error": {"status": status, "body": body, "headers": {"retry-after": "7"}}}})
        for stream in (False, True):
            r = post_messages(world, hello(stream=stream))
            assert r.status_code == status and r.json() == body, (status, stream, r.text)
            assert r.headers.get("retry-after") == "7"
        r = post_chat(world, hello("gpt-test"))
        assert r.status_code == status and r.json() == body
    world.provider.reset()
    world.provider.script({"respond": {"delay_ms": 3000, "content": [text("late")]}})
    r = post_messages(world, hello())
    assert r.status_code == 504 and r.json()["error"]["type"] == "timeout_error", r.text
    r = post_chat(world, hello("gpt-test"))
    assert r.status_code == 504 and r.json()["error"]["code"] == "timeout", r.text


def test_pass_through_is_faithful_and_the_provider_never_gets_the_gateway_key(gateways, procs, rust_upstream):
    world = start_llm_world(gateways, procs, rust_upstream, tools=[])
    world.provider.script({"respond": {"content": [{"type": "thinking", "thinking": "hmm", "signature": "sig-1"}, text("hi")]}})
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 50,
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "system", "content": "inline system entry"},
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s0"}, {"type": "text", "text": "yo"}]},
            {"role": "user", "content": "again"},
        ],
        "metadata": {"user_id": "u-1"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "x_unknown_top_level": {"kept": True},
    }
    r = post_messages(world, body, **{"anthropic-beta": "interleaved-thinking-2025-05-14"})
    assert r.status_code == 200, r.text
    assert r.headers.get("request-id", "").startswith("req_"), "the provider's request-id is relayed"
    assert r.json()["content"][0] == {"type": "thinking", "thinking": "hmm", "signature": "sig-1"}
    seen = world.provider.model_calls()[0]
    expected = dict(body, model="scripted-claude")
    assert seen["body"] == expected
    assert seen["headers"]["anthropic-version"] == ANTHROPIC_VERSION
    assert seen["headers"]["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert seen["headers"]["x-api-key"] == world.provider.api_key
    assert world.key not in json.dumps(seen["headers"])
    # count_tokens is counted by the provider on what the model would get.
    r = httpx.post(
        f"{world.gateway.url}/v1/messages/count_tokens",
        json={"model": "claude-test", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {world.key}", "anthropic-version": ANTHROPIC_VERSION},
    )
    assert r.status_code == 200 and r.json()["input_tokens"] > 0, r.text
    counted = world.provider.requests("/v1/messages/count_tokens")[0]
    assert counted["body"]["model"] == "scripted-claude"
    assert world.key not in json.dumps(counted["headers"])


def test_logs_hold_no_prompt_argument_or_result(gateways, procs, rust_upstream):
    world = start_llm_world(gateways, procs, rust_upstream, tools=[hidden_add(), {"server": "tools", "tools": {"allow": ["echo"]}}])
    prompt, argument = "PROMPT-" + new_secret("p"), "ARGUMENT-" + new_secret("a")
    world.provider.script(
        {"when": {"last_tool_result_for": "tools__echo"}, "respond": {"content": [text("RESULT-TEXT {{tool_result:tools__echo}}")]}},
        {"respond": {"content": [tool_use("tools__echo", text=argument)]}},
    )
    for stream in (False, True):
        r = post_messages(world, {"model": "claude-test", "max_tokens": 50, "stream": stream, "messages": [{"role": "user", "content": prompt}]})
        assert r.status_code == 200 and argument in r.text, r.text
    logs = world.gateway.logs()
    assert "LLM request" in logs and "tools__echo" in logs
    for leaked in (prompt, argument, "RESULT-TEXT"):
        assert leaked not in logs, leaked
    assert world.provider.api_key not in logs


def test_the_gateway_key_never_reaches_an_mcp_server_that_forwards_x_api_key(gateways, procs, rust_upstream):
    """A server forwarding the caller's `X-Api-Key` (legitimate on the MCP path) must not get the
    gateway key an Anthropic client presents in that header."""

    def forwarding(config):
        config["servers"][0]["headers"] = {"forward": ["X-Api-Key", "X-Tenant"]}
        config["models"][0]["tools"] = [{"server": "tools", "tools": {"allow": ["request_headers"]}}]

    world = with_config(gateways, procs, rust_upstream, forwarding)
    world.provider.script(
        {"when": {"last_tool_result_for": "tools__request_headers"}, "respond": {"content": [text("{{tool_result:tools__request_headers}}")]}},
        {"when": {"has_tool": "tools__request_headers"}, "respond": {"content": [tool_use("tools__request_headers")]}},
    )
    from harness import wait_until

    def answered():
        world.provider.reset()
        world.provider.script(
            {"when": {"last_tool_result_for": "tools__request_headers"}, "respond": {"content": [text("{{tool_result:tools__request_headers}}")]}},
            {"when": {"has_tool": "tools__request_headers"}, "respond": {"content": [tool_use("tools__request_headers")]}},
        )
        r = post_messages(world, hello(), **{"x-tenant": "t-1"})
        return r if "x-tenant" in r.text else None

    r = wait_until(answered, 10, what="the forwarding config")
    assert "t-1" in r.text, "forwarding works"
    assert world.key not in r.text and "x-api-key" not in r.text.lower(), r.text
