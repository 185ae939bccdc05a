"""The README's first command, run the way a user runs it: `examples/demo.sh` starts the example
upstream, the scripted provider and the gateway on examples/standalone.yaml, and the README's
examples work against it, the demo model with its hidden gateway tool included."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import anthropic
import httpx
from harness import REPO_ROOT, target_dir, wait_until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_demo_script_serves_mcp_and_a_model_with_a_hidden_tool(tmp_path):
    for port in (8931, 8932):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} (the demo's) is taken; free it to run this test"
    listen = f"127.0.0.1:{free_port()}"
    internal = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "CARGO_TARGET_DIR": str(target_dir()),
        "SWITCHBOARD_DEMO_PROFILE": "debug",
        "SWITCHBOARD_LISTEN": listen,
        "SWITCHBOARD_INTERNAL_LISTEN": internal,
    }
    # The script's own build first, untimed: it builds three packages alone, whose features
    # differ from the workspace build's, so on a fresh cache it compiles for minutes (a cold run
    # once timed out on it); the wait below is then for the demo to start, not for cargo.
    subprocess.run(["cargo", "build", "-p", "switchboard-gateway", "-p", "switchboard-example-upstream",
                    "-p", "switchboard-scripted-provider"], cwd=REPO_ROOT, env=env, check=True, timeout=1800,
                   stdout=subprocess.DEVNULL)
    log = (tmp_path / "demo.log").open("wb")
    demo = subprocess.Popen(
        [str(REPO_ROOT / "examples" / "demo.sh")], cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://{listen}"
    try:
        wait_until(lambda: httpx.get(f"http://{internal}/readyz", timeout=1).status_code == 200, 120, what="the demo gateway")
        auth = {"Authorization": "Bearer sk-demo"}
        tools = httpx.get(f"{base}/mcp-rest/tools/list", headers=auth, timeout=10).json()["tools"]
        assert "demo__add" in [t["name"] for t in tools]
        r = httpx.post(f"{base}/mcp-rest/tools/call", headers=auth, json={"name": "demo__add", "arguments": {"a": 2, "b": 3}}, timeout=10)
        assert "5" in r.text, r.text
        wait_until(lambda: httpx.get("http://127.0.0.1:8932/v1/models", timeout=1).status_code in (200, 401), 30, what="the demo provider")
        client = anthropic.Anthropic(base_url=base, api_key="sk-demo", max_retries=0)
        message = client.messages.create(model="demo-claude", max_tokens=100, messages=[{"role": "user", "content": "add 2 and 3"}])
        said = " ".join(b.text for b in message.content if b.type == "text")
        assert "2 + 3 = 5" in said, message
        assert "demo__add" not in message.model_dump_json()
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        try:
            demo.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
        log.close()
    wait_until(lambda: all(socket.socket().connect_ex(("127.0.0.1", p)) != 0 for p in (8931, 8932)), 10, what="the demo's processes to stop")
