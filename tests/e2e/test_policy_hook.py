"""Issue 38 item 3: the policy hook. A real HTTP policy service of the test's own (below) is
called before the upstream (it denies one call, rewrites another's arguments) and after (it
redacts a result); the upstream (`upstreams/definitions_upstream.py`, which echoes what it
received) sees the rewritten arguments, the client the redacted result; with the service down,
`failure: closed` refuses and `failure: open` serves. On MCP (both eras), REST and the LLM
loop's gateway tools.
"""

from __future__ import annotations

import copy
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
    {"name": "create_issue", "inputSchema": {"type": "object", "properties": {"repo": {"type": "string"}}}},
    {"name": "post", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
]


class PolicyService:
    """Denies issues in `evil/*` repositories, uppercases a post's text and marks it, and
    redacts any result that carries `SECRET-`. Records every check it was asked."""

    def __init__(self):
        self.checks: list[dict] = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                check = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                service.checks.append(check)
                answer = service.decide(check)
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/check"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @staticmethod
    def decide(check: dict) -> dict:
        args = check.get("arguments") or {}
        if check["phase"] == "request":
            if check["tool"] == "create_issue" and str(args.get("repo", "")).startswith("evil/"):
                return {"decision": "deny", "reason": "issues in evil/* are not allowed"}
            if check["tool"] == "post":
                return {"decision": "modify", "arguments": {**args, "text": str(args.get("text", "")).upper(), "audited": True}}
            return {"decision": "allow"}
        if "SECRET-" in json.dumps(check.get("result")):
            return {"decision": "modify", "result": {"content": [{"type": "text", "text": "[redacted by policy]"}]}}
        return {"decision": "allow"}

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def start(procs, tmp_path, gateways, policy: dict):
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS), "utf-8")
    up = procs.start("definitions", [sys.executable, str(DEFINITIONS_UPSTREAM), "--tools", str(tools_file), "--port", "0"])
    secret = new_secret("policy-key")
    provider = start_provider(procs)
    config = gateway_config(
        [server("gh", f"{up.url}/mcp", accessGroups=["g"], policy=policy)],
        [key("k", secret, accessGroups=["g"])],
    )
    config["models"] = [
        model("claude", "anthropic", provider.url, provider.api_key, modelNames=["claude-test"], accessGroups=["g"],
              tools=[{"server": "gh", "tools": {"allow": ["create_issue", "post"]}}]),
    ]  # fmt: skip
    return gateways.start(config), up, provider, secret, config


def received(up) -> list[dict]:
    return httpx.get(f"{up.url}/_calls", timeout=5).json()


def mcp_call(gw, secret, era, name, arguments) -> dict:
    with RawMcp(gw.mcp_url(), secret, era) as mcp:
        return mcp.call_tool(name, arguments).messages[-1]


def test_the_hook_denies_rewrites_and_redacts_on_every_face(gateways, procs, tmp_path):
    service = PolicyService()
    try:
        gw, up, provider, secret, _ = start(procs, tmp_path, gateways, {"url": service.url})
        for era in ("legacy", MODERN_VERSION):
            denied = mcp_call(gw, secret, era, "gh__create_issue", {"repo": "evil/x"})
            error = denied.get("error") or {}
            assert error.get("code") == INVALID_PARAMS and "issues in evil/* are not allowed" in error["message"], denied
            assert all(c["arguments"].get("repo") != "evil/x" for c in received(up)), "a denied call reached the upstream"
            rewritten = mcp_call(gw, secret, era, "gh__post", {"text": "hello"})
            assert "result" in rewritten, rewritten
            assert received(up)[-1] == {"name": "post", "arguments": {"text": "HELLO", "audited": True}}
            redacted = mcp_call(gw, secret, era, "gh__post", {"text": "the key is SECRET-123"})
            assert redacted["result"]["content"][0]["text"] == "[redacted by policy]", redacted
            assert "SECRET-123" in json.dumps(received(up)[-1]), "the upstream got the call; the client got the redaction"
        # What the service was told: the phase, the server, the tool, the caller, the result.
        request_check = next(c for c in service.checks if c["phase"] == "request" and c["tool"] == "post")
        assert request_check["server"] == "gh" and request_check["caller"]["key"] == "default/k", request_check
        response_check = next(c for c in service.checks if c["phase"] == "response")
        assert "result" in response_check and response_check["arguments"].get("audited") is True, response_check

        # REST: a refusal with its code, a redacted result.
        r = httpx.post(f"{gw.url}/mcp-rest/tools/call", json={"name": "gh__create_issue", "arguments": {"repo": "evil/y"}},
                       headers={"Authorization": f"Bearer {secret}"}, timeout=15)  # fmt: skip
        assert r.status_code == 403 and r.json()["error"]["code"] == "policy_denied", r.text
        r = httpx.post(f"{gw.url}/mcp-rest/tools/call", json={"name": "gh__post", "arguments": {"text": "SECRET-9"}},
                       headers={"Authorization": f"Bearer {secret}"}, timeout=15)  # fmt: skip
        assert r.status_code == 200 and "[redacted by policy]" in r.text and "SECRET-9" not in r.text, r.text

        # The LLM loop's gateway tools: the model gets the refusal and the redacted result.
        headers = {"x-api-key": secret, "anthropic-version": ANTHROPIC_VERSION}
        ask = {"model": "claude-test", "max_tokens": 50, "messages": [{"role": "user", "content": "go"}]}
        for use, expect in (
            (tool_use("gh__create_issue", repo="evil/z"), "issues in evil/* are not allowed"),
            (tool_use("gh__post", text="SECRET-7"), "[redacted by policy]"),
        ):
            provider.reset()
            provider.script(
                {"when": {"last_tool_result_for": use["name"]}, "respond": {"content": [text("done")]}},
                {"when": {"has_tool": use["name"]}, "respond": {"content": [use]}},
            )
            r = httpx.post(f"{gw.url}/v1/messages", json=ask, headers=headers, timeout=30)
            assert r.status_code == 200, r.text
            messages = provider.model_calls()[-1]["body"]["messages"]
            results = [b for m in messages if isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result"]
            seen = json.dumps(results)
            assert results and expect in seen and "SECRET-7" not in seen, seen
    finally:
        service.stop()


def test_a_hook_that_is_down_refuses_when_closed_and_serves_when_open(gateways, procs, tmp_path):
    service = PolicyService()
    gw, up, _, secret, config = start(procs, tmp_path, gateways, {"url": service.url, "timeout": "500ms"})
    assert "result" in mcp_call(gw, secret, MODERN_VERSION, "gh__create_issue", {"repo": "acme/a"})
    service.stop()
    before = len(received(up))
    refused = mcp_call(gw, secret, MODERN_VERSION, "gh__create_issue", {"repo": "acme/a"})
    assert "failure: closed" in (refused.get("error") or {}).get("message", ""), refused
    assert len(received(up)) == before, "a call the policy could not check reached the upstream"
    opened = copy.deepcopy(config)
    opened["servers"][0]["policy"]["failure"] = "open"
    gw.write_config_applied(opened)
    served = mcp_call(gw, secret, MODERN_VERSION, "gh__create_issue", {"repo": "acme/a"})
    assert "result" in served, served
    assert len(received(up)) == before + 1
