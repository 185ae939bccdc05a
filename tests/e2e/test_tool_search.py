"""Issue 39: many tools. A search-mode virtual server (`virtualServers[].search`) lists two tools,
`find_tools` and `call_tool`, plus the tools it pins, over every tool it presents; the model finds
a tool by what it does and calls it. What a search finds is what the caller could call: scope,
filters and argument rules hold for found tools exactly as for listed ones. The REST face
searches a caller's tools (`GET /mcp-rest/tools/search`).

Listings cost what they must: the same scope gets the same bytes whatever order the upstream
lists in (an upstream that shuffles its tools on every listing, `definitions_upstream.py
--shuffle`, with the listing cache off: every listing is walked again); a listing an upstream
says is `private` is walked per key, never handed to another key (control: a `public` one is
shared); each server's listing size and tool count are in /metrics.

Clients: the official Python SDK in both eras, raw JSON-RPC for the refusals, the Anthropic SDK
through `/v1/messages` with the scripted provider searching then calling, and the Claude Code
CLI through the same endpoint.
"""

from __future__ import annotations

import json
import sys

import anthropic
import httpx
from claude_cli import claude_ok, describe, run_claude
from harness import (
    E2E_DIR,
    INVALID_PARAMS,
    MODERN_VERSION,
    RawMcp,
    gateway_config,
    key,
    new_secret,
    run_async,
    sdk_client,
    sdk_text,
    server,
    start_python_upstream,
)
from llm_harness import model, start_provider, text, tool_use

DEFINITIONS_UPSTREAM = E2E_DIR / "upstreams" / "definitions_upstream.py"
# Python SDK upstream (legacy only) behind the first source, the Rust example upstream behind
# the second: a name the first selects is the first's.
WORK = {
    "name": "work",
    "sources": [
        {"server": "legacy", "tools": {"allow": ["add", "echo", "whoami"]}},
        {"server": "modern", "tools": {"allow": ["slow", "request_headers"]},
         "overrides": [{"tool": "request_headers", "name": "show_headers"}]},
    ],
    "search": {"pinned": ["echo"], "results": 3},
}  # fmt: skip


def world(gateways, procs, rust_upstream, **virtual):
    legacy = start_python_upstream(procs, "legacy", legacy_only=True)
    secrets = {name: new_secret(name) for name in ("wide", "modern-only")}
    provider = start_provider(procs)
    config = gateway_config(
        [server("legacy", legacy.mcp_url), server("modern", rust_upstream.mcp_url)],
        [
            key("wide", secrets["wide"], ["legacy", "modern", "work"]),
            # Reaches the virtual server but not the legacy server behind it.
            key("modern-only", secrets["modern-only"], ["modern", "work"]),
        ],
    )
    config["virtualServers"] = [{**WORK, **virtual}]
    config["models"] = [
        model("claude", "anthropic", provider.url, provider.api_key,
              modelNames=["claude-test", "claude-sonnet-4-5", "claude-opus-5-5"],
              upstreamModel="scripted-claude", accessGroups=["llm"], tools=[{"server": "work", "tools": {}}]),
    ]  # fmt: skip
    for k in config["keys"]:
        k["accessGroups"] = ["llm"]
    return gateways.start(config), secrets, provider


def call_found(name: str, arguments: dict) -> dict:
    """The model's `call_tool` of a found tool (`tool_use` takes `name` for itself)."""
    return {"type": "tool_use", "name": "call_tool", "input": {"name": name, "arguments": arguments}}


def found_names(result) -> list[str]:
    return [t["name"] for t in result["structuredContent"]["tools"]]


def test_sdk_lists_the_search_tools_finds_a_tool_and_calls_it_in_both_eras(gateways, procs, rust_upstream):
    gw, secrets, _ = world(gateways, procs, rust_upstream)

    async def scenario(era):
        async with sdk_client(gw.mcp_url("work"), secrets["wide"], era) as c:
            listed = (await c.list_tools()).tools
            found = await c.call_tool("find_tools", {"query": "add two integers"})
            called = await c.call_tool("call_tool", {"name": "add", "arguments": {"a": 2, "b": 3}})
            direct = await c.call_tool("add", {"a": 4, "b": 5})
            renamed = await c.call_tool("find_tools", {"query": "which HTTP headers were received", "limit": 1})
            return listed, found, called, direct, renamed

    for era in ("legacy", MODERN_VERSION):
        listed, found, called, direct, renamed = run_async(lambda: scenario(era))
        assert [t.name for t in listed] == ["find_tools", "call_tool", "echo"], f"{era}: the search tools and the pinned one"
        assert listed[0].input_schema["required"] == ["query"]
        assert not found.is_error, found
        tools = found.structured_content["tools"]
        assert tools[0]["name"] == "add", f"{era}: {[t['name'] for t in tools]}"
        assert len(tools) <= 3, "the virtual server's `results`"
        assert tools[0]["inputSchema"]["required"] == ["a", "b"], "a found tool carries its input schema"
        assert "outputSchema" not in tools[0], "and not its output schema (the listed one has it)"
        assert "outputSchema" in next(t for t in listed if t.name == "echo").model_dump(by_alias=True, exclude_none=True)
        assert json.loads(found.content[0].text)["tools"][0]["name"] == "add", "the same in the text a model reads"
        assert sdk_text(called) == "5", called
        assert sdk_text(direct) == "9", "a found tool is callable by its presented name too"
        assert [t["name"] for t in renamed.structured_content["tools"]] == ["show_headers"], "presented names are found"


def test_a_search_finds_only_what_the_caller_may_call(gateways, procs, rust_upstream):
    gw, secrets, _ = world(gateways, procs, rust_upstream)
    with RawMcp(gw.mcp_url("work"), secrets["modern-only"], MODERN_VERSION) as c:
        narrow = c.call_tool("find_tools", {"query": "add two integers", "limit": 50}).result
        assert "add" not in found_names(narrow) and "whoami" not in found_names(narrow), found_names(narrow)
        everything = c.call_tool("find_tools", {"query": "tool answer text headers add sleep process name", "limit": 50}).result
        assert set(found_names(everything)) <= {"slow", "show_headers"}, found_names(everything)
        refused = c.call_tool("call_tool", {"name": "add", "arguments": {"a": 1, "b": 2}})
        assert "add" in json.dumps(refused.message) and ("error" in refused.message or refused.result.get("isError")), refused.message
    # Control: the wide key finds and calls it, so the refusals above are the scope's.
    with RawMcp(gw.mcp_url("work"), secrets["wide"], MODERN_VERSION) as c:
        assert "add" in found_names(c.call_tool("find_tools", {"query": "add two integers"}).result)
        assert c.call_tool("call_tool", {"name": "add", "arguments": {"a": 1, "b": 2}}).result["content"][0]["text"] == "3"
        # Bad calls of the search tools are the client's mistake, named.
        for arguments, field in (({}, "query"), ({"query": "x", "limit": 0}, "limit"), ({"query": "x", "limit": "5"}, "limit")):
            error = c.call_tool("find_tools", arguments).message.get("error") or {}
            assert error.get("code") == INVALID_PARAMS and field in error.get("message", ""), (arguments, error)
        error = c.call_tool("call_tool", {"arguments": {}}).message.get("error") or {}
        assert error.get("code") == INVALID_PARAMS and "name" in error["message"], error
        error = c.call_tool("call_tool", {"name": "find_tools"}).message.get("error") or {}
        assert error.get("code") == INVALID_PARAMS, error


def test_argument_rules_and_bindings_hold_for_found_tools(gateways, procs, rust_upstream):
    rules = [{"tools": ["add"], "rule": "args.a < 100", "message": "small numbers only"},
             {"tools": ["echo"], "bind": {"text": "${caller.subject}"}}]  # fmt: skip
    gw, secrets, _ = world(gateways, procs, rust_upstream, arguments=rules)
    with RawMcp(gw.mcp_url("work"), secrets["wide"], MODERN_VERSION) as c:
        echo = next(t for t in c.call_tool("find_tools", {"query": "return the text unchanged"}).result["structuredContent"]["tools"]
                    if t["name"] == "echo")  # fmt: skip
        assert "text" not in echo["inputSchema"].get("properties", {}), "a bound argument is out of the found schema"
        refused = c.call_tool("call_tool", {"name": "add", "arguments": {"a": 500, "b": 1}}).message
        assert "small numbers only" in json.dumps(refused), refused
        bound = c.call_tool("call_tool", {"name": "echo"}).result
        assert bound["content"][0]["text"] == "default/wide", "the binding set the argument from the caller"


def test_rest_search(gateways, procs, rust_upstream):
    gw, secrets, _ = world(gateways, procs, rust_upstream)

    def search(secret, **query):
        return httpx.get(f"{gw.url}/mcp-rest/tools/search", params=query, headers={"Authorization": f"Bearer {secret}"}, timeout=30)

    r = search(secrets["wide"], q="add two integers", limit=2)
    assert r.status_code == 200, r.text
    names = [t["name"] for t in r.json()["tools"]]
    assert names[0] in ("legacy__add", "modern__add") and len(names) == 2, names
    assert r.json()["tools"][0]["inputSchema"]["required"] == ["a", "b"]
    # The narrower key never finds a tool of the server it does not reach (control: above).
    r = search(secrets["modern-only"], q="add two integers", limit=50)
    assert r.status_code == 200 and not any(n.startswith("legacy__") for n in (t["name"] for t in r.json()["tools"])), r.text
    r = search(secrets["wide"], q="add two integers", server_id="legacy")
    assert [t["name"] for t in r.json()["tools"]][:1] == ["legacy__add"], r.text
    for query, field in (({}, "q"), ({"q": "x", "limit": 0}, "limit")):
        r = search(secrets["wide"], **query)
        assert r.status_code == 400 and field in r.json()["error"]["message"], r.text
    assert search(new_secret("nobody"), q="add").status_code == 401


def test_anthropic_sdk_loop_searches_then_calls_the_found_tool(gateways, procs, rust_upstream):
    gw, secrets, provider = world(gateways, procs, rust_upstream)
    provider.script(
        {"when": {"last_tool_result_for": "call_tool"}, "respond": {"content": [text("sum: {{tool_result:call_tool}}")]}},
        {"when": {"last_tool_result_for": "find_tools"},
         "respond": {"content": [call_found("add", {"a": 20, "b": 22})]}},
        {"when": {"has_tool": "find_tools"}, "respond": {"content": [tool_use("find_tools", query="add two numbers")]}},
    )  # fmt: skip
    client = anthropic.Anthropic(base_url=gw.url, api_key=secrets["wide"])
    reply = client.messages.create(model="claude-test", max_tokens=100, messages=[{"role": "user", "content": "what is 20 + 22?"}])
    assert [b.text for b in reply.content if b.type == "text"] == ["sum: 42"], reply
    calls = provider.model_calls()
    assert len(calls) == 3, [c["body"]["messages"][-1] for c in calls]
    offered = [t["name"] for t in calls[0]["body"]["tools"]]
    assert offered == ["find_tools", "call_tool", "echo"], "the model is offered the search tools and the pinned one"
    found = json.dumps(calls[1]["body"]["messages"][-1])
    assert '\\"name\\":\\"add\\"' in found or '"name": "add"' in found, f"the search's result reached the model: {found[:500]}"
    # Control for the scope: the narrower key's loop finds no `add`.
    provider.reset()
    provider.script(
        {"when": {"last_tool_result_for": "find_tools"}, "respond": {"content": [text("found: {{tool_result:find_tools}}")]}},
        {"when": {"has_tool": "find_tools"}, "respond": {"content": [tool_use("find_tools", query="add two numbers")]}},
    )  # fmt: skip
    narrow = anthropic.Anthropic(base_url=gw.url, api_key=secrets["modern-only"])
    said = narrow.messages.create(model="claude-test", max_tokens=100, messages=[{"role": "user", "content": "add"}])
    said_text = "".join(b.text for b in said.content if b.type == "text")
    assert said_text.startswith("found: ") and '"name":"add"' not in said_text.replace(" ", ""), said_text


def test_claude_code_cli_searches_then_calls_through_the_gateway(gateways, procs, rust_upstream, tmp_path):
    gw, secrets, provider = world(gateways, procs, rust_upstream)
    provider.script(
        {"when": {"last_tool_result_for": "call_tool"}, "respond": {"content": [text("The sum is {{tool_result:call_tool}}.")]}},
        {"when": {"last_tool_result_for": "find_tools"},
         "respond": {"content": [call_found("add", {"a": 40, "b": 2})]}},
        {"when": {"no_tool_results": True}, "respond": {"content": [tool_use("find_tools", query="add two integers")]}},
    )  # fmt: skip
    work = tmp_path / "work"
    work.mkdir()
    run = run_claude(gw.url, "Add 40 and 2 with a tool.", work, api_key=secrets["wide"])
    result = claude_ok(run)
    assert "The sum is 42." in result, describe(run)
    first = provider.model_calls()[0]["body"]
    names = [t["name"] for t in first["tools"]]
    assert "find_tools" in names and "call_tool" in names and "add" not in names, names


# --------------------------------------------------------------------------------------------
# Listings that cost what they must

SHUFFLED = [
    {"name": f"tool_{c}", "description": f"Tool {c}.", "inputSchema": {"type": "object", "properties": {}}}
    for c in "qwertyuiopasdfghjklz"
]


def definitions(procs, tmp_path, name, *flags):
    tools_file = tmp_path / f"{name}.json"
    tools_file.write_text(json.dumps(SHUFFLED), "utf-8")
    return procs.start(name, [sys.executable, str(DEFINITIONS_UPSTREAM), "--tools", str(tools_file), "--port", "0", *flags])


def lists(up) -> int:
    return httpx.get(f"{up.url}/_lists", timeout=5).json()


def raw_listing(url, secret, era) -> bytes:
    with RawMcp(url, secret, era) as c:
        return json.dumps(c.list_tools().result["tools"]).encode()


def test_the_same_scope_gets_the_same_bytes_whatever_order_the_upstream_lists_in(gateways, procs, tmp_path):
    up = definitions(procs, tmp_path, "shuffling", "--shuffle", "--cache-scope", "public")
    secret = new_secret("order")
    gw = gateways.start(gateway_config([server("sh", f"{up.url}/mcp")], [key("order", secret, ["sh"])], listingTtl="1ms"))
    # Control: the upstream's own listings differ (so the check below can fail).
    own = set()
    for i in range(4):
        r = httpx.post(f"{up.url}/mcp", json={"jsonrpc": "2.0", "id": i, "method": "tools/list", "params": {}}, timeout=5)
        own.add(json.dumps([t["name"] for t in r.json()["result"]["tools"]]))
    assert len(own) > 1, "the upstream shuffles"
    for era in ("legacy", MODERN_VERSION):
        for url in (gw.mcp_url(), gw.mcp_url("sh")):
            before = lists(up)
            seen = {raw_listing(url, secret, era) for _ in range(4)}
            assert lists(up) >= before + 4, "every listing was walked again"
            assert len(seen) == 1, f"{era} {url}: {len(seen)} different listings"
            names = [t["name"] for t in json.loads(seen.pop())]
            assert names == sorted(names), names


def test_a_private_listing_is_never_handed_to_another_key(gateways, procs, tmp_path):
    private = definitions(procs, tmp_path, "private", "--cache-scope", "private")
    public = definitions(procs, tmp_path, "public", "--cache-scope", "public")
    shared = definitions(procs, tmp_path, "shared", "--cache-scope", "private")
    a, b = new_secret("key-a"), new_secret("key-b")
    forwards = {"headers": {"forward": ["X-Tenant"]}}
    gw = gateways.start(gateway_config(
        [server("priv", f"{private.url}/mcp", **forwards), server("pub", f"{public.url}/mcp", **forwards),
         server("shared", f"{shared.url}/mcp")],
        [key("a", a, ["priv", "pub", "shared"]), key("b", b, ["priv", "pub", "shared"])],
    ))  # fmt: skip
    # The aggregate answers from the listing cache. A listing its upstream says is private, of
    # a server that forwards callers' headers (which may change what it lists), is walked once
    # per key and never handed to the other; a public one is walked once for all (control); a
    # private one of a server that sees only the gateway's shared credential is one
    # authorization context, the gateway's, walked once for all. (`/mcp/<prefix>` relays every
    # listing to its upstream: nothing there is reused.)
    ups = {"priv": private, "pub": public, "shared": shared}
    start = {name: lists(up) for name, up in ups.items()}
    seen = []
    for secret in (a, a, b, b):
        with RawMcp(gw.mcp_url(), secret, MODERN_VERSION) as c:
            result = c.list_tools().result
            seen.append({name: lists(up) - start[name] for name, up in ups.items()})
            assert len(result["tools"]) == 3 * len(SHUFFLED), result
            assert result["cacheScope"] == "private", "some of its servers' listings are private"
    assert [s["priv"] for s in seen] == [1, 1, 2, 2], f"private, forwarding: walks after each of a, a, b, b: {seen}"
    assert [s["pub"] for s in seen] == [1, 1, 1, 1], f"public: {seen}"
    assert [s["shared"] for s in seen] == [1, 1, 1, 1], f"private, the gateway's credential only: {seen}"
    # Routing by an unprefixed name reads the caller's own listing of such a server.
    with RawMcp(gw.mcp_url(), b, MODERN_VERSION) as c:
        reply = c.call_tool("tool_q", {})
        candidates = ((reply.message.get("error") or {}).get("data") or {}).get("candidates")
        assert candidates == [f"{p}__tool_q" for p in ups], f"all three servers offer it: {reply.message}"
    # Each server's listing, in /metrics: its tool count and bytes.
    metrics = httpx.get(f"{gw.internal_url}/metrics", timeout=5).text
    for prefix in ("priv", "pub"):
        count = next(line for line in metrics.splitlines() if line.startswith("switchboard_gateway_listing_items{") and f'server="{prefix}"' in line)
        assert count.endswith(f" {len(SHUFFLED)}") and 'kind="tools"' in count, count
        size = next(line for line in metrics.splitlines() if line.startswith("switchboard_gateway_listing_bytes{") and f'server="{prefix}"' in line)
        assert int(size.rsplit(" ", 1)[1]) > 1000, size
