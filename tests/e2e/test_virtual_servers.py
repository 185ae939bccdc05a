"""Virtual servers (`virtualServers`, served at `/mcp/<path>`): tools of a legacy upstream (the
Python SDK server, `--legacy-only`) and a 2026-07-28 one (the Rust example upstream) presented as
one server, one tool renamed with its description replaced and a parameter fixed, another
renamed with its description extended.

The official Python and TypeScript SDK clients list exactly the selected tools under their new
names and call them; the upstreams receive the original names and the fixed values (the
legacy upstream's `add` answers a + 10 only if `b: 10` reached it; the Rust upstream records the
tool name it was asked for). A key that does not reach one of the servers does not see that
server's tools through the virtual server, and a key that does not reach the virtual server
does not find its endpoint. Names two sources select are the first source's (the second is left
out with a listing warning), `list_changed` of a server behind it reaches a listening client,
a dangling source is refused naming its field, and a model with the virtual server attached
runs the renamed tool hidden in its loop.
"""

from __future__ import annotations

import copy
import json

import anthropic
import httpx
from harness import (
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
    wait_until,
)
from llm_harness import model, start_provider, text, tool_use
from ts_client import describe, ts_client, ts_ok

DESK = {
    "name": "desk",
    "description": "The support desk's tools",
    "sources": [
        {
            "server": "legacy",
            "tools": {"allow": ["add"]},
            "overrides": [
                {
                    "tool": "add",
                    "name": "plus_ten",
                    "title": "Plus ten",
                    "description": "Adds ten to a number.",
                    "parameters": {"b": {"fixed": 10}, "a": {"description": "The number"}},
                }
            ],
        },
        {
            "server": "modern",
            "tools": {"allow": ["echo", "request_headers"]},
            "overrides": [{"tool": "echo", "name": "say", "descriptionSuffix": "Say it back."}],
        },
    ],
}
SELECTED = ["plus_ten", "request_headers", "say"]


def world(gateways, procs, rust_upstream, **extra):
    legacy = start_python_upstream(procs, "legacy", legacy_only=True)
    keys = {name: new_secret(name) for name in ("full", "partial", "outside")}
    config = gateway_config(
        [server("legacy", legacy.mcp_url), server("modern", rust_upstream.mcp_url)],
        [
            key("full", keys["full"], ["legacy", "modern", "desk", *[v["name"] for v in extra.get("virtual", [])]]),
            # Reaches the virtual server but not the legacy server behind it.
            key("partial", keys["partial"], ["modern", "desk"]),
            # Reaches both servers, not the virtual server.
            key("outside", keys["outside"], ["legacy", "modern"]),
        ],
    )
    config["virtualServers"] = [copy.deepcopy(DESK), *extra.get("virtual", [])]
    return gateways.start(config), keys, legacy, config


def test_python_sdk_lists_the_presented_tools_and_calls_them_with_fixed_values(gateways, procs, rust_upstream):
    gw, keys, _, _ = world(gateways, procs, rust_upstream)
    rust_upstream.reset()

    async def scenario(era):
        async with sdk_client(gw.mcp_url("desk"), keys["full"], era) as c:
            listed = (await c.list_tools()).tools
            plus = await c.call_tool("plus_ten", {"a": 5})
            said = await c.call_tool("say", {"text": "hello"})
            return listed, plus, said

    for era in ("legacy", MODERN_VERSION):
        listed, plus, said = run_async(lambda: scenario(era))
        by_name = {t.name: t for t in listed}
        assert sorted(by_name) == SELECTED, f"{era}: {sorted(by_name)}"
        tool = by_name["plus_ten"]
        assert tool.title == "Plus ten" and tool.description == "Adds ten to a number."
        assert "b" not in tool.input_schema["properties"], tool.input_schema
        assert tool.input_schema["properties"]["a"]["description"] == "The number"
        assert by_name["say"].description.endswith("\n\nSay it back."), by_name["say"].description
        assert not plus.is_error and sdk_text(plus) == "15", f"{era}: b=10 must reach the upstream: {plus}"
        assert sdk_text(said) == "hello", said
    asked = [r["tool"] for r in rust_upstream.recent_requests() if r["method"] == "tools/call"]
    assert asked == ["echo", "echo"], f"the upstream gets the tool's own name: {asked}"


def test_typescript_sdk_in_both_eras(gateways, procs, rust_upstream):
    gw, keys, _, _ = world(gateways, procs, rust_upstream)
    for mode in ("legacy", MODERN_VERSION):
        listed = ts_client(gw.mcp_url("desk"), keys["full"], mode, list_tools=True)
        assert listed["exit"] == 0, describe(listed)
        names = sorted(listed["tools"])
        assert names == SELECTED, f"{mode}: {names}"
        result = ts_ok(ts_client(gw.mcp_url("desk"), keys["full"], mode, "plus_ten", {"a": 32}))
        assert result["content"][0]["text"] == "42", result


def test_scope_narrows_never_widens(gateways, procs, rust_upstream):
    gw, keys, legacy, _ = world(gateways, procs, rust_upstream)
    with RawMcp(gw.mcp_url("desk"), keys["partial"], MODERN_VERSION) as c:
        names = sorted(t["name"] for t in c.list_tools().result["tools"])
        assert names == ["request_headers", "say"], f"no tool of the unreachable server: {names}"
        refused = c.call_tool("plus_ten", {"a": 1})
        assert "plus_ten" in json.dumps(refused.message), refused.message
        assert "error" in refused.message or refused.result.get("isError"), refused.message
    # Control: the same call with the full key works, so the refusal above is the scope's.
    with RawMcp(gw.mcp_url("desk"), keys["full"], MODERN_VERSION) as c:
        assert c.call_tool("plus_ten", {"a": 1}).result["content"][0]["text"] == "11"
        # The renamed tool's own name is not another way in, and a fixed value cannot be chosen.
        own = c.call_tool("add", {"a": 1, "b": 2})
        assert "error" in own.message, own.message
        chosen = c.call_tool("plus_ten", {"a": 1, "b": 99})
        assert "fixed" in json.dumps(chosen.message), chosen.message
    for secret in (keys["outside"], new_secret("unknown")):
        r = httpx.post(
            gw.mcp_url("desk"),
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={"Authorization": f"Bearer {secret}", "Accept": "application/json, text/event-stream",
                     "MCP-Protocol-Version": MODERN_VERSION},
            timeout=10,
        )
        assert r.status_code in (401, 404), (r.status_code, r.text)
    assert legacy.stats()["by_method"].get("tools/call", 0) == 1, "only the control call reached the legacy upstream"


def test_a_name_two_sources_select_is_the_first_ones(gateways, procs, rust_upstream):
    clash = {"name": "clash", "sources": [
        {"server": "legacy", "tools": {"allow": ["echo"]}},
        {"server": "modern", "tools": {"allow": ["echo"]}},
    ]}
    gw, keys, legacy, config = world(gateways, procs, rust_upstream, virtual=[clash])
    config["keys"][0]["servers"].append("clash")
    gw.write_config_applied(config)
    rust_upstream.reset()
    with RawMcp(gw.mcp_url("clash"), keys["full"], MODERN_VERSION) as c:
        listed = c.list_tools().result
        assert [t["name"] for t in listed["tools"]] == ["echo"], listed
        warnings = listed["_meta"]["switchboard.dev/listingWarnings"]
        assert warnings[0]["server"] == "modern" and "already presented" in warnings[0]["message"], warnings
        assert c.call_tool("echo", {"text": "x"}).result["content"][0]["text"] == "x"
    assert legacy.stats()["by_method"].get("tools/call", 0) == 1
    assert not [r for r in rust_upstream.recent_requests() if r["method"] == "tools/call"], "the second source never runs it"


def test_bad_virtual_servers_are_refused_naming_the_field(gateways, procs, rust_upstream):
    gw, keys, _, config = world(gateways, procs, rust_upstream)
    for change, field in (
        (lambda c: c["virtualServers"][0]["sources"][0].update(server="gone"), "virtualServers[0].sources[0].server"),
        (lambda c: c["virtualServers"][0].update(path="legacy"), "virtualServers[0].path"),
        (lambda c: c["virtualServers"][0]["sources"][1]["overrides"][0].update(name="plus_ten"), "virtualServers[0].sources[1].overrides[0].name"),
        (lambda c: c["virtualServers"][0]["sources"][0]["overrides"][0].update(tool="sub"), "virtualServers[0].sources[0].overrides[0].tool"),
    ):
        broken = copy.deepcopy(config)
        change(broken)
        offset = len(gw.logs())
        gw.write_config(broken)
        wait_until(lambda: field in gw.logs()[offset:], 15, what=f"an error naming {field}")
        with RawMcp(gw.mcp_url("desk"), keys["full"], MODERN_VERSION) as c:
            assert sorted(t["name"] for t in c.list_tools().result["tools"]) == SELECTED, "the previous config serves"


def test_list_changed_behind_it_reaches_a_listening_client(gateways, procs, rust_upstream):
    gw, keys, _, _ = world(gateways, procs, rust_upstream)

    async def scenario():
        import anyio

        async with sdk_client(gw.mcp_url("desk"), keys["full"], MODERN_VERSION) as c:
            async with c.listen(tools_list_changed=True) as sub:
                honored = sub.honored.tools_list_changed
                wait_until(lambda: rust_upstream.stats()["listening"] >= 1, 10, what="the upstream listen stream")
                httpx.post(f"{rust_upstream.base}/_notify", json={"list": "tools"}, timeout=5).raise_for_status()
                with anyio.fail_after(10):
                    event = await sub.__anext__()
            return honored, event

    honored, event = run_async(scenario, timeout=40)
    assert honored is True
    assert "tools" in repr(event).lower(), event


def test_a_model_runs_the_renamed_tool_hidden(gateways, procs, rust_upstream):
    provider = start_provider(procs)
    legacy = start_python_upstream(procs, "legacy", legacy_only=True)
    secret = new_secret("llm")
    config = gateway_config(
        [server("legacy", legacy.mcp_url), server("modern", rust_upstream.mcp_url)],
        [key("caller", secret, ["legacy", "modern", "desk"], models=["claude"])],
    )
    config["virtualServers"] = [copy.deepcopy(DESK)]
    config["models"] = [model("claude", "anthropic", provider.url, provider.api_key, modelNames=["claude-test"],
                              tools=[{"server": "desk", "tools": {"allow": ["plus_ten"]}}])]
    gw = gateways.start(config)
    provider.script(
        {"when": {"last_tool_result_for": "plus_ten"}, "respond": {"content": [text("done")]}},
        {"respond": {"content": [tool_use("plus_ten", a=7)]}},
    )
    client = anthropic.Anthropic(base_url=gw.url, api_key=secret, max_retries=0)
    message = client.messages.create(model="claude-test", max_tokens=50, messages=[{"role": "user", "content": "go"}])
    assert [b.type for b in message.content if b.type != "redacted_thinking"] == ["text"], message
    assert "plus_ten" not in message.model_dump_json(), "hidden: the client never sees the call"
    calls = provider.model_calls()
    offered = [t["name"] for t in calls[0]["body"]["tools"]]
    assert offered == ["plus_ten"], offered
    assert "b" not in calls[0]["body"]["tools"][0]["input_schema"]["properties"]
    results = calls[1]["body"]["messages"][-1]["content"]
    assert results[0]["type"] == "tool_result" and "17" in json.dumps(results[0]["content"]), results


def test_server_to_client_requests_through_a_virtual_server_are_answered(gateways, procs, rust_upstream):
    """A legacy upstream's sampling and elicitation requests, made while it runs a tool the
    virtual server presents under another name, reach the client on the virtual server's
    endpoint, and the client's answers reach the upstream session that asked (the reply's id
    names the route; the path is the virtual server's, not the server's prefix)."""
    import mcp_types

    async def on_sampling(ctx, params):
        text = params.messages[0].content.text
        return mcp_types.CreateMessageResult(
            role="assistant", content=mcp_types.TextContent(type="text", text=f"sampled:{text}"),
            model="e2e-model", stop_reason="endTurn",
        )  # fmt: skip

    async def on_elicitation(ctx, params):
        return mcp_types.ElicitResult(action="accept", content={"answer": f"answer to {params.message}"})

    relay = {
        "name": "relay",
        "sources": [
            {
                "server": "legacy",
                "tools": {"allow": ["sample", "ask"]},
                "overrides": [{"tool": "sample", "name": "think"}, {"tool": "ask", "name": "question"}],
            }
        ],
    }
    gw, keys, _, _ = world(gateways, procs, rust_upstream, virtual=[relay])
    for era in ("legacy", MODERN_VERSION):

        async def scenario():
            callbacks = {"sampling_callback": on_sampling, "elicitation_callback": on_elicitation}
            async with sdk_client(gw.mcp_url("relay"), keys["full"], era, **callbacks) as c:
                thought = await c.call_tool("think", {"prompt": "capital of France?"})
                answered = await c.call_tool("question", {"question": "ready?"})
                return thought, answered

        thought, answered = run_async(scenario)
        assert not thought.is_error and sdk_text(thought) == "sampled:capital of France?", f"{era}: {thought}"
        assert not answered.is_error and "answer to ready?" in sdk_text(answered), f"{era}: {answered}"


LIBRARY = {
    "name": "library",
    "sources": [
        # The Python SDK server (legacy only): a prompt, a resource and a resource template.
        {"server": "legacy", "prompts": {"allow": ["summarize"]}, "resources": {"allow": ["e2e://*"]}},
        # The Rust example upstream (2026-07-28): the same kinds.
        {"server": "modern", "prompts": {"allow": ["greet"]}, "resources": {"allow": ["example://*"]}},
    ],
}


def test_prompts_and_resources_are_listed_with_their_names_and_reached(gateways, procs, rust_upstream):
    """Issue 35, item 5: the official Python SDK's list_prompts(), list_resources() and
    list_resource_templates() validate every item (a prompt needs its `name`, a resource its
    `uri`, a template its `uriTemplate`); through a virtual server they got items without them.
    Each comes back as the server lists it, and prompts/get and resources/read (a resource and
    a URI of each template) reach the server that has it, in both eras."""
    gw, keys, legacy, _ = world(gateways, procs, rust_upstream, virtual=[LIBRARY])

    async def scenario(era):
        async with sdk_client(gw.mcp_url("library"), keys["full"], era) as c:
            prompts = (await c.list_prompts()).prompts
            resources = (await c.list_resources()).resources
            templates = (await c.list_resource_templates()).resource_templates
            summary = await c.get_prompt("summarize", {"text": "a long story"})
            greeting = await c.get_prompt("greet", {"name": "Ada"})
            read = {uri: (await c.read_resource(uri)).contents
                    for uri in ("e2e://counter", "e2e://notes/alpha", "example://readme", "example://items/42")}
            return prompts, resources, templates, summary, greeting, read

    for era in ("legacy", MODERN_VERSION):
        prompts, resources, templates, summary, greeting, read = run_async(lambda: scenario(era))
        by_name = {p.name: p for p in prompts}
        assert sorted(by_name) == ["greet", "summarize"], f"{era}: {prompts}"
        assert [a.name for a in by_name["summarize"].arguments] == ["text"], by_name["summarize"]
        assert by_name["greet"].arguments[0].required is True, by_name["greet"]
        assert sorted(str(r.uri) for r in resources) == ["e2e://counter", "example://readme"], f"{era}: {resources}"
        assert {str(r.uri): r.name for r in resources}["example://readme"] == "readme"
        assert sorted(t.uri_template for t in templates) == ["e2e://notes/{name}", "example://items/{id}"], f"{era}: {templates}"
        assert summary.messages[0].content.text == "Summarize: a long story", f"{era}: {summary}"
        assert "Hello, Ada!" in greeting.messages[0].content.text, f"{era}: {greeting}"
        assert read["e2e://notes/alpha"][0].text == "note alpha", read
        assert read["example://items/42"][0].text == "Item 42", read
        assert read["e2e://counter"][0].text.isdigit() and "#" in read["example://readme"][0].text, read
    # Each request reached the server whose source selects it, by the name or URI as listed.
    stats = legacy.stats()["by_method"]
    assert stats.get("prompts/get") == 2 and stats.get("resources/read") == 4, stats
