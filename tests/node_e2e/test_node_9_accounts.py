"""Issue 37, acceptance 5 on the one-node cluster: the chart with its shared store (the demo Redis,
Debian's redis-server as an image), a person connecting their own account through the gateway
Service from a browser in the node's network, and the gateway pods deleted under calls: no
account lost.

- `helm upgrade` with `gateway.store.demoRedis` and the Service's name as the public URL;
- Keycloak (HTTPS, a CA of this test's own, on the node's address so pods and the browser reach
  the same issuer) is the company identity provider, brokered (`IdentityProvider`);
- the example upstream's "Example Accounts" (its own authorization server: authorization code +
  PKCE, rotating refresh tokens) is a pod behind a Service, an `McpServer` of type `userOAuth`;
- alice calls `whoami` with her Keycloak token over MCP (the official Python SDK, 2025-11-25)
  through the Service: a URL elicitation; headless Chromium in the node's network opens the link,
  signs in at Keycloak as alice, says yes, signs in at Example Accounts, comes back; her retried
  call answers as her account;
- both gateway pods are deleted one after the other while she calls in a loop through the Service:
  every call answers as her account, none elicits again, and the new pods (which never saw her
  connect) answer as her account: what they hold came from Redis, sealed (no account name in it).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
import time

import httpx
import pytest
from browser import Browser
from connect_flow import connect_in_browser, elicited_url
from harness import run_async, sdk_client, sdk_text
from keycloak import GATEWAY_AUDIENCE
from keycloak import start as start_keycloak
from node import (
    CHART, RELEASE_NS, RESTRICTED, UPSTREAM_IMAGE_REPO, apply, chart_values, get_json, helm, kubectl, pods, ready,
    later_images_imported, version, wait,
)
from private_ca import PrivateCa

NS = "people"
SERVICE_HOST = "switchboard-gateway.switchboard.svc"
PUBLIC_URL = f"http://{SERVICE_HOST}"
ACCOUNTS_HOST = f"accounts.{NS}.svc"
NODE_IP = "10.88.0.1"  # tests/node/node.sh: the node's address, which pods reach
REDIS_IMAGE = "switchboard.test/redis:7.0"  # tests/node/test-images.sh
GATEWAYS = "app.kubernetes.io/component=gateway"
# The loop through the deletions: at least this many calls, one every LOOP_PAUSE_S.
MIN_CALLS = 100
LOOP_PAUSE_S = 0.05


@contextlib.contextmanager
def resolving(names: dict[str, str]):
    """This process resolves the cluster's Service names as a pod does (the node's own resolver
    knows none of them): `names` maps each to its Service address."""
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        # anyio hands over the name IDNA-encoded, as bytes
        name = host.decode("ascii", "replace") if isinstance(host, bytes) else host
        return real(names.get(name, host) if isinstance(name, str) else host, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo
    try:
        yield
    finally:
        socket.getaddrinfo = real


def cluster_ip(name: str, namespace: str) -> str:
    return get_json("service", name, "-n", namespace)["spec"]["clusterIP"]


def gateway_pods() -> list[dict]:
    return [p for p in pods(GATEWAYS) if ready(p)]


def rolled_out() -> None:
    kubectl("rollout", "status", "deploy/switchboard-gateway", "-n", RELEASE_NS, "--timeout=180s", timeout=200)
    wait(lambda: len(pods(GATEWAYS)) == 2 and len(gateway_pods()) == 2, 120, "two Ready gateway pods, no other")


def objects(keycloak, ca_pem: str) -> list[dict]:
    labels = {"app": "accounts"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "corp-ca", "namespace": NS}, "data": {"ca.crt": ca_pem}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "corp-client", "namespace": NS},
         "stringData": {"secret": keycloak.client_secrets["switchboard-gateway"]}},
        {"apiVersion": "switchboard.dev/v1alpha1", "kind": "IdentityProvider", "metadata": {"name": "corp", "namespace": NS},
         "spec": {"issuer": keycloak.issuer, "audiences": [GATEWAY_AUDIENCE],
                  "tls": {"caBundle": {"configMapKeyRef": {"name": "corp-ca", "key": "ca.crt"}}},
                  "brokered": {"clientId": "switchboard-gateway", "clientSecretRef": {"name": "corp-client", "key": "secret"}}}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "accounts", "namespace": NS},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels},
             "spec": {"automountServiceAccountToken": False, "containers": [{
                 "name": "accounts", "image": f"{UPSTREAM_IMAGE_REPO}:{version()}", "imagePullPolicy": "Never",
                 "args": ["--listen", "0.0.0.0:8931"], "ports": [{"containerPort": 8931, "name": "http"}],
                 "readinessProbe": {"tcpSocket": {"port": 8931}, "periodSeconds": 2},
                 "securityContext": RESTRICTED,
                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "accounts", "namespace": NS},
         "spec": {"selector": labels, "ports": [{"name": "http", "port": 8931, "targetPort": "http"}]}},
        # Example Accounts' client of the gateway: `switchboard`, secret `secret-switchboard`
        # (the example's convention).
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "github-client", "namespace": NS},
         "stringData": {"secret": "secret-switchboard"}},
        {"apiVersion": "switchboard.dev/v1alpha1", "kind": "McpServer", "metadata": {"name": "github", "namespace": NS},
         "spec": {"url": f"http://{ACCOUNTS_HOST}:8931/accounts/mcp", "timeout": "10s", "accessGroups": ["people"],
                  "auth": {"type": "userOAuth", "userOAuth": {
                      "clientId": "switchboard", "clientSecretRef": {"name": "github-client", "key": "secret"},
                      "scopes": ["whoami"]}}}},
        {"apiVersion": "switchboard.dev/v1alpha1", "kind": "McpKey", "metadata": {"name": "team-a", "namespace": NS},
         "spec": {"secretName": "team-a-key", "accessGroups": ["people"],
                  "people": [{"provider": "corp", "groups": ["team-a"]}]}},
    ]  # fmt: skip


@pytest.fixture(scope="module")
def world(installed, tmp_path_factory):
    later_images_imported()
    tmp = tmp_path_factory.mktemp("accounts")
    ca = PrivateCa("corp")
    cert, key = ca.issue(NODE_IP, ips=(NODE_IP,)).write(tmp, "keycloak")
    bundle = ca.write(tmp)
    keycloak = start_keycloak(tmp / "keycloak", host=NODE_IP, tls=(cert, key, bundle))
    try:
        # The gateway's brokered client comes back to the gateway's public URL.
        client = keycloak.admin("GET", "/clients", params={"clientId": "switchboard-gateway"}).json()[0]
        client["redirectUris"] = [*client.get("redirectUris", []), f"{PUBLIC_URL}/*"]
        keycloak.admin("PUT", f"/clients/{client['id']}", json=client)

        helm("upgrade", "switchboard", str(CHART), "-n", RELEASE_NS, *chart_values(),
             "--set", "gateway.store.demoRedis.enabled=true", "--set", f"gateway.store.demoRedis.image={REDIS_IMAGE}",
             "--set", f"gateway.publicUrl={PUBLIC_URL}")  # fmt: skip
        wait(lambda: any(ready(p) for p in pods("app.kubernetes.io/component=demo-redis")), 120, "the demo Redis Ready")
        rolled_out()
        apply(*objects(keycloak, ca.cert_pem.decode()))
        kubectl("rollout", "status", "deploy/accounts", "-n", NS, "--timeout=120s", timeout=150)
        kubectl("wait", "--for=condition=Ready", "identityprovider/corp", "-n", NS, "--timeout=120s", timeout=150)
        kubectl("wait", "--for=condition=Accepted", "mcpserver/github", "-n", NS, "--timeout=120s", timeout=150)
        names = {SERVICE_HOST: cluster_ip("switchboard-gateway", RELEASE_NS), ACCOUNTS_HOST: cluster_ip("accounts", NS)}
        rules = ",".join(f"MAP {name} {ip}" for name, ip in names.items())
        browser = Browser(tmp / "browser-alice", f"--host-resolver-rules={rules}", "--ignore-certificate-errors")
        try:
            with resolving(names):
                yield {"keycloak": keycloak, "browser": browser}
        finally:
            browser.close()
    finally:
        keycloak.stop()


def whoami_mcp(token: str):
    async def go():
        async with sdk_client(f"{PUBLIC_URL}/mcp", token, "legacy") as client:
            return await client.call_tool("github__whoami", {})

    return run_async(go, timeout=120)


def whoami_rest(token: str) -> httpx.Response:
    return httpx.post(f"{PUBLIC_URL}/mcp-rest/tools/call", headers={"Authorization": f"Bearer {token}"},
                      json={"name": "github__whoami", "arguments": {}}, timeout=30)  # fmt: skip


def accounts_stats() -> dict:
    ip = pods("app=accounts", NS)[0]["status"]["podIP"]
    return httpx.get(f"http://{ip}:8931/accounts/_stats", timeout=10).json()


def redis_cli(*args: str) -> bytes:
    """redis-cli in the demo Redis pod; its answer as bytes (sealed values are binary)."""
    pod = pods("app.kubernetes.io/component=demo-redis")[0]["metadata"]["name"]
    argv = ["kubectl", "exec", "-n", RELEASE_NS, pod, "--", "redis-cli", "--raw", *args]
    done = subprocess.run(argv, capture_output=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr[-2000:]!r}"
    return done.stdout


def test_a_person_connects_through_the_service_and_keeps_the_account_across_gateway_pods(world):
    keycloak, browser = world["keycloak"], world["browser"]
    token = keycloak.token("alice")["access_token"]
    redeemed = accounts_stats()["codes_redeemed"]

    # Not connected yet: the call elicits, with a link on the gateway's public URL.
    try:
        answer = whoami_mcp(token)
    except Exception as e:  # the SDK raises the JSON-RPC error
        url = elicited_url(e)
    else:
        raise AssertionError(f"no elicitation: {sdk_text(answer)!r}")
    assert url.startswith(f"{PUBLIC_URL}/connect?ticket="), url

    # alice's browser, in the node's network, through the Service: Keycloak, yes, Example Accounts.
    connect_in_browser(browser, url, keycloak, "alice", "alice-ex")
    assert sdk_text(whoami_mcp(token)) == "account: alice-ex"
    assert accounts_stats()["codes_redeemed"] == redeemed + 1

    # Calls in a loop through the Service while each gateway pod is deleted in turn.
    before = {p["metadata"]["name"] for p in gateway_pods()}
    results: list[tuple[int, str]] = []
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            try:
                r = whoami_rest(token)
                body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
                results.append((r.status_code, json.dumps(body.get("structuredContent") or body.get("error"))))
            except httpx.HTTPError as e:
                results.append((0, repr(e)))
            time.sleep(LOOP_PAUSE_S)

    caller = threading.Thread(target=loop, daemon=True)
    caller.start()
    t0 = time.monotonic()
    try:
        for name in sorted(before):
            kubectl("delete", "pod", name, "-n", RELEASE_NS, "--wait=true", timeout=120)
            wait(lambda: len(gateway_pods()) == 2, 120, "a new gateway pod Ready")
        wait(lambda: len(results) >= MIN_CALLS, 60, f"{MIN_CALLS} calls")
    finally:
        stop.set()
        caller.join(timeout=60)
    took = time.monotonic() - t0
    after = {p["metadata"]["name"] for p in gateway_pods()}
    assert not before & after, f"not every gateway pod was replaced: {before & after}"
    failed = [r for r in results if r[0] != 200 or "alice-ex" not in r[1]]
    print(f"\n{len(results)} calls through the Service while both gateway pods were deleted ({took:.1f}s): "
          f"{len(failed)} not answered as alice's account")  # fmt: skip
    assert not failed, f"{len(failed)} of {len(results)} calls: {failed[:5]}"

    # The new pods never saw alice connect: each answers as her account (read from Redis), and
    # Example Accounts redeemed no second code.
    for pod in gateway_pods():
        r = httpx.post(f"http://{pod['status']['podIP']}:8080/mcp-rest/tools/call",
                       headers={"Authorization": f"Bearer {token}", "Host": SERVICE_HOST},
                       json={"name": "github__whoami", "arguments": {}}, timeout=30)  # fmt: skip
        assert r.status_code == 200 and r.json()["structuredContent"]["account"] == "alice-ex", r.text
    assert accounts_stats()["codes_redeemed"] == redeemed + 1

    # Redis holds sealed values under hashed names: no person, account or token in them.
    names = redis_cli("KEYS", "sb:*").decode().split()
    assert names and not any("alice" in n for n in names), names
    for name in names:
        value = redis_cli("GET", name)
        assert b"alice-ex" not in value and token.encode() not in value
    # Nor in what the gateway pods logged.
    for pod in pods(GATEWAYS):
        logs = kubectl("logs", "-n", RELEASE_NS, pod["metadata"]["name"]).stdout
        assert "alice-ex" not in logs and token not in logs and "sbx." not in logs, pod["metadata"]["name"]

