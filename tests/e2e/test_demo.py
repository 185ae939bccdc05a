"""The README's first command, run the way a user runs it: `examples/demo.sh` starts the example
upstream, the scripted provider and the gateway on examples/standalone.yaml, and the README's
examples work against it, the demo model with its hidden gateway tool included."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess

import anthropic
import httpx
from harness import GATEWAY_BIN, REPO_ROOT, binary, wait_until

DEMO_LISTEN = re.compile(r"switchboard-gateway listening on http://(\S+)")
DEMO_INTERNAL = re.compile(r"switchboard-gateway internal on http://(\S+)")


def test_demo_script_serves_mcp_and_a_model_with_a_hidden_tool(tmp_path):
    for port in (8931, 8932):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} (the demo's) is taken; free it to run this test"
    # The gateway binds port 0 for both of its listeners and the test reads them from the log;
    # the script runs the test command's own debug binaries (SWITCHBOARD_DEMO_BIN_DIR) instead of
    # its release build (the one step of the script this test leaves out).
    env = {
        **os.environ,
        "SWITCHBOARD_DEMO_BIN_DIR": str(binary(GATEWAY_BIN).parent),
        "SWITCHBOARD_LISTEN": "127.0.0.1:0",
        "SWITCHBOARD_INTERNAL_LISTEN": "127.0.0.1:0",
    }
    log_path = tmp_path / "demo.log"
    log = log_path.open("wb")
    demo = subprocess.Popen(
        [str(REPO_ROOT / "examples" / "demo.sh")], cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        def addresses():
            text = log_path.read_text(errors="replace")
            listen, internal = DEMO_LISTEN.search(text), DEMO_INTERNAL.search(text)
            return (listen.group(1), internal.group(1)) if listen and internal else None

        listen, internal = wait_until(addresses, 120, what="the demo gateway's listening lines")
        base = f"http://{listen}"
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
        connect_the_demo_account(base, auth)
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        try:
            demo.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
        log.close()
    wait_until(lambda: all(socket.socket().connect_ex(("127.0.0.1", p)) != 0 for p in (8931, 8932)), 10, what="the demo's processes to stop")


def connect_the_demo_account(base: str, auth: dict) -> None:
    """The README's account example: the first call gives the connect URL; the key's holder
    connects an Example Accounts account in a browser (here httpx, keeping its cookies); the
    call then answers as that account, on the embedded store."""
    import html

    whoami = {"name": "accounts__whoami", "arguments": {}}
    first = httpx.post(f"{base}/mcp-rest/tools/call", headers=auth, json=whoami, timeout=10)
    assert first.status_code == 403 and first.json()["error"]["code"] == "account_not_connected", first.text
    url = first.json()["error"]["connectUrl"]
    with httpx.Client(follow_redirects=False, timeout=10) as browser:
        page = browser.get(url)
        proof = html.unescape(re.search(r'name="proof" value="([^"]+)"', page.text).group(1))
        page = browser.get(browser.post(f"{base}/connect/key", data={"proof": proof, "key": "sk-demo"}).headers["location"])
        consent = html.unescape(re.search(r'name="consent" value="([^"]+)"', page.text).group(1))
        to_accounts = browser.post(f"{base}/connect/approve", data={"consent": consent, "answer": "approve"}).headers["location"]
        form = browser.get(to_accounts)
        hidden = {html.unescape(k): html.unescape(v) for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.text)}
        back = browser.post(to_accounts.split("?")[0], data={**hidden, "username": "demo-user", "password": "demo"})
        done = browser.get(back.headers["location"])
        assert "is connected" in done.text, done.text
    second = httpx.post(f"{base}/mcp-rest/tools/call", headers=auth, json=whoami, timeout=10)
    assert second.status_code == 200 and "account: demo-user" in second.text, second.text
