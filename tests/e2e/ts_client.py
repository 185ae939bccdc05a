"""Runs the official TypeScript MCP client SDK (tests/node/mcp_client.mjs) from the e2e tests.

tests/setup-node.sh installs the SDK (exact pins from tests/node/package-lock.json) into
${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/node and prints that directory; tests/run-all.sh
exports it as $SWITCHBOARD_NODE. A missing Node.js or a missing install fails the test with a
message naming tests/setup-node.sh (never a skip).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from harness import REPO_ROOT

NODE_CLIENT = REPO_ROOT / "tests" / "node" / "mcp_client.mjs"
SDK_PACKAGE = "@modelcontextprotocol/client"
SETUP_HINT = "run tests/setup-node.sh first (tests/run-all.sh e2e does it)"


def node_dir() -> Path:
    """Where tests/setup-node.sh installed the Node packages."""
    if os.environ.get("SWITCHBOARD_NODE"):
        return Path(os.environ["SWITCHBOARD_NODE"])
    cache = os.environ.get("SWITCHBOARD_CACHE") or str(Path.home() / ".cache" / "switchboard")
    return Path(cache) / "node"


def require_node() -> tuple[str, Path]:
    """(node executable, install directory); fails the test when either is missing."""
    node = shutil.which(os.environ.get("SWITCHBOARD_NODE_BIN", "node"))
    if node is None:
        pytest.fail(f"node is not on PATH: install Node.js 20 or newer, then {SETUP_HINT}", pytrace=False)
    directory = node_dir()
    package = directory / "node_modules" / "@modelcontextprotocol" / "client" / "package.json"
    if not package.is_file():
        pytest.fail(f"{SDK_PACKAGE} is not installed in {directory}: {SETUP_HINT}", pytrace=False)
    return node, directory


def sdk_version() -> str:
    _, directory = require_node()
    package = directory / "node_modules" / "@modelcontextprotocol" / "client" / "package.json"
    return json.loads(package.read_text())["version"]


def ts_client(
    url: str,
    key: str | None,
    mode: str,
    call: str | None = None,
    args: dict | None = None,
    *,
    list_tools: bool = False,
    sampling_reply: str | None = None,
    elicit_reply: dict | None = None,
    roots: list[dict] | None = None,
    progress: bool = False,
    headers: dict[str, str] | None = None,
    oauth: tuple[str, str, str] | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Runs the TypeScript client once and returns its JSON line, plus "exit" (its exit code) and
    "stderr". mode: "legacy", "auto" or a pinned revision ("2026-07-28"). `oauth` is (person,
    password, redirect URI): the SDK's OAuth client signs that person in (the password goes in
    the client's environment, never on its command line). The process is bounded by `timeout`
    (the client's own bound) plus a grace period."""
    node, directory = require_node()
    argv = [node, str(NODE_CLIENT), "--url", url, "--mode", mode, "--timeout", str(timeout), "--modules", str(directory)]
    if key is not None:
        argv += ["--header", f"Authorization: Bearer {key}"]
    for name, value in (headers or {}).items():
        argv += ["--header", f"{name}: {value}"]
    if call is not None:
        argv += ["--call", call, "--args", json.dumps(args or {})]
    if list_tools:
        argv.append("--list")
    if sampling_reply is not None:
        argv += ["--sampling-reply", sampling_reply]
    if elicit_reply is not None:
        argv += ["--elicit-reply", json.dumps(elicit_reply)]
    if roots is not None:
        argv += ["--roots", json.dumps(roots)]
    if progress:
        argv.append("--progress")
    env = None
    if oauth is not None:
        person, password, redirect = oauth
        argv += ["--oauth-user", person, "--oauth-redirect", redirect]
        env = {**os.environ, "MCP_OAUTH_PASSWORD": password}
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout + 20, cwd=REPO_ROOT, check=False,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"the TypeScript client did not exit within {timeout + 20}s\nstdout: {exc.stdout!r}\nstderr: {exc.stderr!r}"
        ) from None
    stdout = done.stdout.decode("utf-8", "replace")
    stderr = done.stderr.decode("utf-8", "replace")
    lines = [line for line in stdout.splitlines() if line.strip()]
    try:
        out = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise AssertionError(
            f"the TypeScript client printed no JSON line (exit {done.returncode})\nstdout: {stdout[-4000:]}\n"
            f"stderr: {stderr[-4000:]}"
        ) from None
    out["exit"] = done.returncode
    out["stderr"] = stderr
    error = out.get("error")
    if isinstance(error, dict) and "is not installed" in str(error.get("message")):
        pytest.fail(f"{error['message']}", pytrace=False)
    return out


def ts_ok(out: dict[str, Any]) -> dict[str, Any]:
    """The CallToolResult of a run that succeeded; otherwise fails with what went over the wire."""
    assert out["exit"] == 0 and "result" in out, f"the TypeScript client failed:\n{describe(out)}"
    return out["result"]


def describe(out: dict[str, Any]) -> str:
    """A run's error, HTTP exchanges and stderr, for assertion messages."""
    parts = []
    if "error" in out:
        parts.append(f"error: {json.dumps(out['error'])[:3000]}")
    if "result" in out:
        parts.append(f"result: {json.dumps(out['result'])[:3000]}")
    for h in out.get("http", []):
        parts.append(f"  http: {json.dumps(h)[:2500]}")
    if out.get("onerror"):
        parts.append(f"onerror: {out['onerror']}")
    if out.get("stderr"):
        parts.append(f"stderr: {out['stderr'][-3000:]}")
    parts.append(f"exit: {out.get('exit')}")
    return "\n".join(parts)
