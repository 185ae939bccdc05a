"""Issue 38 item 4: arguments bound to the caller. A key's `arguments` rules (CEL over `args`
and `caller`) are checked before any upstream I/O on every face (MCP in both eras, REST, the
LLM loop's gateway tools), refused with an error naming the rule; its bindings set arguments
from the caller (`${caller.subject}`), and a call that sets a bound argument otherwise is
refused. The upstream (`upstreams/definitions_upstream.py`) echoes the arguments it received,
so the test reads what reached it.

A key's bound arguments are left out of every schema its callers list (aggregate and
single-server endpoints in both eras, REST, virtual servers, the tools the LLM loop offers): the
model never sees them (SEP-3221's shape); a key without the binding still sees them.

A virtual server's `arguments` hold for every caller that calls through it (both eras and the
LLM loop), on top of the key's own; its bound arguments are left out of the schemas it lists
(the same tool listed on `/mcp` keeps them: the control).
"""

from __future__ import annotations

import json
import sys

import httpx
from harness import (
    E2E_DIR,
    INVALID_PARAMS,
    MODERN_VERSION,
    RawMcp,
    gateway_config,
    key,
    new_secret,
    server,
)
from llm_harness import ANTHROPIC_VERSION, model, start_provider, text, tool_use

DEFINITIONS_UPSTREAM = E2E_DIR / "upstreams" / "definitions_upstream.py"
TOOLS = [
    {"name": "create_issue", "description": "Open an issue in a repository.",
     "inputSchema": {"type": "object", "properties": {"repo": {"type": "string"}, "title": {"type": "string"}}, "required": ["repo"]}},
    {"name": "post", "description": "Post a message to a channel.",
     "inputSchema": {"type": "object", "properties": {"channel": {"type": "string"}, "text": {"type": "string"}, "user": {"type": "string"}}}},
]  # fmt: skip
RULES = [
    {"tools": ["gh__create_issue"], "rule": 'args.repo.startsWith("acme/")', "message": "only acme repositories"},
    {"tools": ["gh__post"], "bind": {"user": "${caller.subject}"}, "rule": 'args.channel != "general"'},
]


def start(procs, tmp_path, gateways):
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS), "utf-8")
    # (its listings say they may be shared: a bound key's must then say they may not)
    up = procs.start("definitions", [sys.executable, str(DEFINITIONS_UPSTREAM), "--tools", str(tools_file), "--port", "0",
                                     "--cache-scope", "public"])  # fmt: skip
    secret, free = new_secret("args-bound"), new_secret("args-free")
    provider = start_provider(procs)
    config = gateway_config(
        [server("gh", f"{up.url}/mcp", accessGroups=["g"])],
        [key("bound", secret, accessGroups=["g"], arguments=RULES), key("free", free, accessGroups=["g"])],
    )
    config["models"] = [
        model("claude", "anthropic", provider.url, provider.api_key, modelNames=["claude-test"], accessGroups=["g"],
              tools=[{"server": "gh", "tools": {"allow": ["create_issue", "post"]}}]),
    ]  # fmt: skip
    return gateways.start(config), up, provider, secret, free


def calls(up) -> list[dict]:
    return httpx.get(f"{up.url}/_calls", timeout=5).json()


def mcp_call(gw, secret, era, name, arguments) -> dict:
    with RawMcp(gw.mcp_url(), secret, era) as mcp:
        reply = mcp.call_tool(name, arguments)
        return reply.messages[-1]


def rest(gw, secret, name, arguments) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/mcp-rest/tools/call",
        json={"name": name, "arguments": arguments},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=15,
    )


def test_rules_and_bindings_on_mcp_and_rest(gateways, procs, tmp_path):
    gw, up, _, secret, free = start(procs, tmp_path, gateways)
    for era in ("legacy", MODERN_VERSION):
        # A rule that holds: the call goes up as it was.
        ok = mcp_call(gw, secret, era, "gh__create_issue", {"repo": "acme/api", "title": "t"})
        assert "result" in ok, ok
        assert calls(up)[-1] == {"name": "create_issue", "arguments": {"repo": "acme/api", "title": "t"}}
        # One that does not: refused before any I/O, naming the rule and its message.
        before = len(calls(up))
        refused = mcp_call(gw, secret, era, "gh__create_issue", {"repo": "evil/api"})
        error = refused.get("error") or {}
        assert error.get("code") == INVALID_PARAMS, refused
        assert "only acme repositories" in error["message"] and 'args.repo.startsWith("acme/")' in error["message"], error
        assert len(calls(up)) == before, "a refused call reached the upstream"
        # A binding: the upstream receives the caller's identity, which the call did not send.
        bound = mcp_call(gw, secret, era, "gh__post", {"channel": "ops", "text": "hi"})
        assert "result" in bound, bound
        assert calls(up)[-1]["arguments"] == {"channel": "ops", "text": "hi", "user": "default/bound"}
        # The model's attempt to set the bound argument is refused.
        before = len(calls(up))
        spoofed = mcp_call(gw, secret, era, "gh__post", {"channel": "ops", "text": "hi", "user": "default/admin"})
        assert "is set from the caller" in (spoofed.get("error") or {}).get("message", ""), spoofed
        assert len(calls(up)) == before
    # REST: the same rules, a 403 with its code.
    r = rest(gw, secret, "gh__create_issue", {"repo": "evil/api"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "argument_refused", r.text
    r = rest(gw, secret, "gh__post", {"channel": "general", "text": "x"})
    assert r.status_code == 403 and 'args.channel != "general"' in r.json()["error"]["message"], r.text
    r = rest(gw, secret, "gh__post", {"channel": "ops", "text": "x"})
    assert r.status_code == 200, r.text
    assert calls(up)[-1]["arguments"]["user"] == "default/bound"
    # Control: a key without rules calls freely (so the refusals above are the rules').
    r = rest(gw, free, "gh__create_issue", {"repo": "evil/api"})
    assert r.status_code == 200, r.text
    # The record of a refusal says what it was.
    record = next(
        json.loads(line)
        for line in reversed(gw.proc.stdout_path.read_text("utf-8").splitlines())
        if line.startswith("{") and '"outcome":"argument_refused"' in line
    )
    assert record["tool"] == "gh__post" or record["tool"] == "gh__create_issue", record


def loop_turn(gw, provider, secret, use: dict) -> tuple[dict, list[dict]]:
    """One /v1/messages turn whose scripted model makes the tool call `use`, then ends: the
    tools the model was offered (its first request) and the tool results it was sent back."""
    provider.reset()
    provider.script(
        {"when": {"last_tool_result_for": use["name"]}, "respond": {"content": [text("done")]}},
        {"when": {"has_tool": use["name"]}, "respond": {"content": [use]}},
    )
    ask = {"model": "claude-test", "max_tokens": 50, "messages": [{"role": "user", "content": "go"}]}
    headers = {"x-api-key": secret, "anthropic-version": ANTHROPIC_VERSION}
    r = httpx.post(f"{gw.url}/v1/messages", json=ask, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    offered = provider.model_calls()[0]["body"]["tools"]
    second = provider.model_calls()[-1]["body"]["messages"]
    results = [b for m in second for b in (m["content"] if isinstance(m["content"], list) else []) if b.get("type") == "tool_result"]
    return offered, results


def post_properties(listed: list[dict], name: str) -> set[str]:
    tool = next(t for t in listed if t["name"] == name)
    return set(tool["inputSchema"].get("properties", {}))


def test_a_keys_bound_arguments_are_left_out_of_every_listing(gateways, procs, tmp_path):
    gw, _, provider, secret, free = start(procs, tmp_path, gateways)
    for era in ("legacy", MODERN_VERSION):
        for url, name in ((gw.mcp_url(), "gh__post"), (gw.mcp_url("gh"), "post")):
            with RawMcp(url, secret, era) as mcp:
                bound = mcp.list_tools().messages[-1]["result"]
                assert post_properties(bound["tools"], name) == {"channel", "text"}, (url, era)
            with RawMcp(url, free, era) as mcp:
                unbound = mcp.list_tools().messages[-1]["result"]
                assert post_properties(unbound["tools"], name) == {"channel", "text", "user"}
            if era == MODERN_VERSION:
                # The bound key's listing differs from another caller's: it says it is its own.
                assert (bound["cacheScope"], unbound["cacheScope"]) == ("private", "public"), (url, bound, unbound)
    r = httpx.get(f"{gw.url}/mcp-rest/tools/list", headers={"Authorization": f"Bearer {secret}"}, timeout=15)
    assert r.status_code == 200, r.text
    assert post_properties(r.json()["tools"], "gh__post") == {"channel", "text"}
    offered, _ = loop_turn(gw, provider, secret, tool_use("gh__post", channel="ops", text="hi"))
    post = next(t for t in offered if t["name"] == "gh__post")
    assert set(post["input_schema"].get("properties", {})) == {"channel", "text"}, post


def test_rules_and_bindings_in_the_llm_loop(gateways, procs, tmp_path):
    gw, up, provider, secret, _ = start(procs, tmp_path, gateways)

    def run(use: dict) -> tuple[list[dict], list[dict]]:
        return loop_turn(gw, provider, secret, use)

    before = len(calls(up))
    _, results = run(tool_use("gh__create_issue", repo="evil/api"))
    assert results and results[-1].get("is_error"), results
    assert "only acme repositories" in json.dumps(results[-1]), results
    assert len(calls(up)) == before, "the loop's refused call reached the upstream"
    _, results = run(tool_use("gh__post", channel="ops", text="hi"))
    assert not results[-1].get("is_error"), results
    assert calls(up)[-1]["arguments"] == {"channel": "ops", "text": "hi", "user": "default/bound"}
    _, results = run(tool_use("gh__post", channel="ops", text="hi", user="default/admin"))
    assert results[-1].get("is_error") and "is set from the caller" in json.dumps(results[-1]), results


VS_RULES = [
    {"tools": ["create_issue"], "rule": "size(args.title) > 3", "message": "a real title, please"},
    {"tools": ["post"], "bind": {"user": "via-desk:${caller.key}"}},
]


def start_virtual(procs, tmp_path, gateways):
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS), "utf-8")
    up = procs.start("definitions", [sys.executable, str(DEFINITIONS_UPSTREAM), "--tools", str(tools_file), "--port", "0"])
    secret = new_secret("args-vs")
    provider = start_provider(procs)
    config = gateway_config([server("gh", f"{up.url}/mcp", accessGroups=["g"])], [key("free", secret, accessGroups=["g"])])
    config["virtualServers"] = [{"name": "desk", "accessGroups": ["g"], "arguments": VS_RULES,
                                 "sources": [{"server": "gh", "tools": {"allow": ["*"]}}]}]
    config["models"] = [model("claude", "anthropic", provider.url, provider.api_key, modelNames=["claude-test"],
                              accessGroups=["g"], tools=[{"server": "desk"}])]  # fmt: skip
    return gateways.start(config), up, provider, secret


def test_a_virtual_servers_rules_and_bindings_in_both_eras_and_the_llm_loop(gateways, procs, tmp_path):
    gw, up, provider, secret = start_virtual(procs, tmp_path, gateways)
    desk = gw.mcp_url("desk")
    for era in ("legacy", MODERN_VERSION):
        with RawMcp(desk, secret, era) as mcp:
            listed = {t["name"]: t for t in mcp.list_tools().messages[-1]["result"]["tools"]}
            assert "user" not in listed["post"]["inputSchema"]["properties"], listed["post"]
            assert set(listed["post"]["inputSchema"]["properties"]) == {"channel", "text"}
            before = len(calls(up))
            refused = mcp.call_tool("create_issue", {"repo": "any/repo", "title": "x"}).messages[-1]
            error = refused.get("error") or {}
            assert error.get("code") == INVALID_PARAMS and "a real title, please" in error["message"], refused
            assert "virtual server desk" in error["message"], error
            assert len(calls(up)) == before, "a refused call reached the upstream"
            ok = mcp.call_tool("create_issue", {"repo": "any/repo", "title": "a title"}).messages[-1]
            assert "result" in ok, ok
            bound = mcp.call_tool("post", {"channel": "ops", "text": "hi"}).messages[-1]
            assert "result" in bound, bound
            assert calls(up)[-1]["arguments"] == {"channel": "ops", "text": "hi", "user": "via-desk:default/free"}
            spoofed = mcp.call_tool("post", {"channel": "ops", "text": "hi", "user": "admin"}).messages[-1]
            assert "is set from the caller by virtual server desk" in (spoofed.get("error") or {}).get("message", ""), spoofed
    # Control: the same key on the aggregate endpoint, past no virtual server: the schema keeps
    # `user`, and the rules of the virtual server do not apply.
    with RawMcp(gw.mcp_url(), secret, MODERN_VERSION) as mcp:
        listed = {t["name"]: t for t in mcp.list_tools().messages[-1]["result"]["tools"]}
        assert "user" in listed["gh__post"]["inputSchema"]["properties"]
        assert "result" in mcp.call_tool("gh__create_issue", {"repo": "any/repo", "title": "x"}).messages[-1]
    # The LLM loop through a model route attaching the virtual server.
    def run(use: dict) -> list[dict]:
        offered, results = loop_turn(gw, provider, secret, use)
        post = next(t for t in offered if t["name"] == "post")
        assert "user" not in post["input_schema"].get("properties", {}), post
        return results

    before = len(calls(up))
    results = run(tool_use("create_issue", repo="any/repo", title="x"))
    assert results[-1].get("is_error") and "a real title, please" in json.dumps(results[-1]), results
    assert len(calls(up)) == before, "the loop's refused call reached the upstream"
    results = run(tool_use("post", channel="ops", text="hi"))
    assert not results[-1].get("is_error"), results
    assert calls(up)[-1]["arguments"] == {"channel": "ops", "text": "hi", "user": "via-desk:default/free"}


def test_a_signed_in_persons_claims_bound_from_a_real_keycloak_token(gateways, procs, tmp_path, keycloak):
    """A person signed in with Keycloak (its own token, claims as Keycloak writes them): a key
    binding `${caller.claims.email}` sends the person's e-mail upstream; a rule over `caller`
    sees the person; a binding to a claim the token does not carry refuses, naming the claim."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS), "utf-8")
    up = procs.start("definitions", [sys.executable, str(DEFINITIONS_UPSTREAM), "--tools", str(tools_file), "--port", "0"])
    rules = [
        {"tools": ["gh__post"], "bind": {"user": "${caller.claims.email}"},
         "rule": 'caller.kind == "person" && caller.claims.preferred_username == "alice"'},
        {"tools": ["gh__create_issue"], "bind": {"title": "by ${caller.claims.employee_number}"}},
    ]  # fmt: skip
    config = gateway_config(
        [server("gh", f"{up.url}/mcp")],
        [key("team-a", new_secret("team-a"), ["gh"], people=[{"provider": "corp", "groups": ["team-a"]}], arguments=rules)],
    )
    config["identityProviders"] = [{"name": "corp", "issuer": keycloak.issuer, "audiences": ["switchboard-gateway"],
                                    "scopes": ["openid", "profile", "email"]}]  # fmt: skip
    gw = gateways.start(config)
    alice = keycloak.token("alice")["access_token"]
    for era in ("legacy", MODERN_VERSION):
        bound = mcp_call(gw, alice, era, "gh__post", {"channel": "ops", "text": "hi"})
        assert "result" in bound, bound
        assert calls(up)[-1]["arguments"] == {"channel": "ops", "text": "hi", "user": "alice@example.test"}
        before = len(calls(up))
        missing = mcp_call(gw, alice, era, "gh__create_issue", {"repo": "acme/api"})
        message = (missing.get("error") or {}).get("message", "")
        assert "the claim \"employee_number\"" in message and "does not carry" in message, missing
        assert len(calls(up)) == before
    # REST, the same person and binding.
    r = rest(gw, alice, "gh__post", {"channel": "ops", "text": "rest"})
    assert r.status_code == 200, r.text
    assert calls(up)[-1]["arguments"]["user"] == "alice@example.test"
