"""docs/clients.md's snippets, run or parsed against a live gateway (issue 25, acceptance 5).

- Claude Code as an MCP client: the real CLI with the page's `--mcp-config` file (the gateway's
  `/mcp` and a key in a header), its model a scripted Anthropic endpoint, calls the gateway tool;
  the upstream runs it once and its result reaches the model's next request. Control: the same
  file with a wrong key gives the model no gateway tool at all.
- VS Code's `.vscode/mcp.json` and Cursor's `mcp.json`: parsed against the shapes those clients
  document (top-level keys, a server's `type`/`url`/`headers`, VS Code's `${input:...}` naming a
  declared input), and their URL and headers (inputs filled in) open an MCP session on the gateway.
- The MCP Python and TypeScript SDK snippets run as written (URL and key substituted) and print
  the tools and the call's result; the Anthropic and OpenAI SDK snippets reach their models through the
  gateway's LLM endpoints (a scripted provider behind them).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
from claude_cli import claude_ok, describe, run_claude
from harness import REPO_ROOT, gateway_config, key, new_secret, server
from llm_harness import model, start_provider, text, tool_use
from ts_client import require_node

DOC = REPO_ROOT / "docs" / "clients.md"
EXAMPLE_URL = "https://mcp.example.com"
EXAMPLE_KEY = "sk-your-key"
TOOL = "mcp__switchboard__demo__add"


def snippet(name: str) -> str:
    """The fenced block right after `<!-- tested: NAME -->` in docs/clients.md."""
    text = DOC.read_text()
    m = re.search(rf"<!-- tested: {re.escape(name)} -->\n```\w*\n(.*?)\n```", text, re.S)
    assert m, f"docs/clients.md has no tested snippet {name!r}"
    return m.group(1)


def live(block: str, base: str, secret: str) -> str:
    assert EXAMPLE_URL in block, "the snippet names the example URL the test replaces"
    return block.replace(EXAMPLE_URL, base).replace(EXAMPLE_KEY, secret)


def world(gateways, rust_upstream):
    secret = new_secret("client-doc-key")
    gw = gateways.start(gateway_config([server("demo", rust_upstream.mcp_url)], [key("docs", secret, ["demo"])]))
    return gw, secret, gw.url


def opens_a_session(url: str, headers: dict[str, str]) -> bool:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "doc", "version": "0"}}}  # fmt: skip
    r = httpx.post(url, json=body, headers={**headers, "Accept": "application/json, text/event-stream"}, timeout=10)
    return r.status_code == 200 and bool(r.headers.get("mcp-session-id"))


def test_claude_code_calls_a_gateway_tool_from_the_documented_mcp_config(gateways, procs, rust_upstream, tmp_path):
    gw, secret, base = world(gateways, rust_upstream)
    provider = start_provider(procs)
    provider.script(
        {"when": {"last_tool_result_for": TOOL}, "respond": {"content": [text("sum: {{tool_result:" + TOOL + "}}")]}},
        {"when": {"no_tool_results": True}, "respond": {"content": [text("Adding."), tool_use(TOOL, a=40, b=2)]}},
    )
    work = tmp_path / "work"
    work.mkdir()

    def run(config_text: str):
        config = tmp_path / "switchboard.json"
        config.write_text(config_text)
        return run_claude(
            provider.url, "Add 40 and 2.", work, api_key=provider.api_key,
            extra_args=("--mcp-config", str(config), "--allowedTools", "mcp__switchboard"),
        )  # fmt: skip

    calls_before = rust_upstream.stats()["by_method"].get("tools/call", 0)
    result = claude_ok(ran := run(live(snippet("claude-mcp-config"), base, secret)))
    assert "42" in result, describe(ran)
    assert rust_upstream.stats()["by_method"].get("tools/call", 0) == calls_before + 1, "the upstream ran the tool once"
    calls = provider.model_calls()
    first, second = (c["body"] for c in calls[-2:])
    # (Claude Code offers MCP tools through its tool search: named in the request, loaded on use)
    assert TOOL in json.dumps(first), "the CLI told the model about the gateway's tool"
    assert "42" in json.dumps(second["messages"]), "the tool's result reached the model"
    assert secret not in json.dumps([c["headers"] for c in provider.model_calls()]), "the gateway key stays with the gateway"

    # Control: a wrong key; the CLI gets no tools from the gateway, so the model sees none.
    provider.reset()
    provider.script({"when": {}, "respond": {"content": [text("no tools")]}})
    run(live(snippet("claude-mcp-config"), base, new_secret("wrong-key")))
    assert provider.model_calls(), "the CLI ran"
    assert TOOL not in json.dumps([c["body"] for c in provider.model_calls()]), "no gateway tool without the key"


def test_vscode_and_cursor_files_have_the_documented_shapes_and_open_a_session(gateways, rust_upstream):
    gw, secret, base = world(gateways, rust_upstream)
    vscode = json.loads(live(snippet("vscode-mcp-json"), base, secret))
    assert set(vscode) <= {"inputs", "servers"}, "VS Code's mcp.json has `servers` and `inputs`"
    inputs = {i["id"]: i for i in vscode["inputs"]}
    assert all(i["type"] == "promptString" for i in inputs.values())
    entry = vscode["servers"]["switchboard"]
    assert entry["type"] == "http" and entry["url"].startswith("http"), entry
    headers = {}
    for name, value in entry["headers"].items():
        for ref in re.findall(r"\$\{input:([^}]+)\}", value):
            assert ref in inputs, f"{value} names an undeclared input"
            value = value.replace(f"${{input:{ref}}}", secret)
        headers[name] = value
    assert opens_a_session(entry["url"], headers), "VS Code's server entry reaches the gateway"

    cursor = json.loads(live(snippet("cursor-mcp-json"), base, secret))
    assert set(cursor) == {"mcpServers"}, "Cursor's mcp.json has `mcpServers`"
    entry = cursor["mcpServers"]["switchboard"]
    assert set(entry) <= {"url", "headers", "type"} and "command" not in entry, entry
    assert opens_a_session(entry["url"], entry["headers"]), "Cursor's server entry reaches the gateway"
    # Control: the same entry without its header is refused.
    assert not opens_a_session(entry["url"], {})


def test_the_python_sdk_snippet_runs_as_written(gateways, rust_upstream, tmp_path):
    gw, secret, base = world(gateways, rust_upstream)
    script = tmp_path / "client.py"
    script.write_text(live(snippet("python-mcp-sdk"), base, secret))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-3000:]
    names, result = p.stdout.strip().splitlines()[-2:]
    assert "demo__add" in names, p.stdout
    assert "5" in result, p.stdout
    assert Path(script).read_text().count(secret) == 1


def test_the_typescript_sdk_snippet_runs_as_written(gateways, rust_upstream):
    node, modules = require_node()
    gw, secret, base = world(gateways, rust_upstream)
    # Beside the installed node_modules, so its bare import resolves the way a user's project does.
    script = modules / f"clients-doc-{os.getpid()}.mjs"
    script.write_text(live(snippet("typescript-mcp-sdk"), base, secret))
    try:
        p = subprocess.run([node, str(script)], capture_output=True, text=True, timeout=60)
    finally:
        script.unlink()
    assert p.returncode == 0, p.stderr[-3000:]
    # (console.log prints the name array over several lines; the result is the last line)
    names, result = p.stdout.strip().rsplit("\n", 1)
    assert "'demo__add'" in names, p.stdout
    assert json.loads(result)["result"] == 5, p.stdout


def test_the_llm_sdk_snippets_reach_their_models_through_the_gateway(gateways, procs, rust_upstream, tmp_path):
    provider = start_provider(procs)
    provider.script({"when": {}, "respond": {"content": [text("five, said the scripted model")]}})
    secret = new_secret("client-doc-llm-key")
    config = gateway_config([server("demo", rust_upstream.mcp_url)], [key("docs", secret, ["demo"], models=["demo-claude", "demo-gpt"])])
    config["models"] = [
        model("demo-claude", "anthropic", provider.url, provider.api_key),
        model("demo-gpt", "openai", f"{provider.url}/v1", provider.api_key),
    ]
    gw = gateways.start(config)
    printers = {"anthropic-sdk": "print(reply.content[0].text)", "openai-sdk": "print(reply.choices[0].message.content)"}
    for name, printer in printers.items():
        script = tmp_path / f"{name}.py"
        script.write_text(live(snippet(name), gw.url, secret) + "\n" + printer + "\n")
        p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (name, p.stderr[-3000:])
        assert "five, said the scripted model" in p.stdout, (name, p.stdout)
    assert len(provider.model_calls()) == 2, "one model call per snippet"
    assert secret not in json.dumps([c["headers"] for c in provider.model_calls()])
