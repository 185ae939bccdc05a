"""Workload identity against a real kube-apiserver: a ServiceAccount's token (issued by the API
server, audience `switchboard`) acts as the key of the McpKey that binds the ServiceAccount.

- the operator reads the issuer and its keys from the API server's OIDC discovery and puts them
  in the snapshot; both gateways verify tokens offline;
- a bound ServiceAccount's token is served with the key's scope (REST and MCP), by name and by a
  namespace-wide `*`; an unbound one is refused with 403; a token for another audience, a
  tampered token and a token signed by another issuer with 401, each with its reason logged;
- a ServiceAccount two McpKeys bind stays with the older one (the newer says why);
- the audit record names the workload whose token stood for the key: two ServiceAccounts one
  key binds (`*`) are told apart, field by field, and a token bound to a pod names the pod;
- the figures of the two ways to verify, offline (the gateway) and TokenReview (the API server),
  are printed: why the gateway verifies offline.
"""

from __future__ import annotations

import base64
import json
import statistics
import time
from collections.abc import Iterator

import httpx
import pytest
from harness import wait_until
from k8s_fixtures import module_world
from k8s_world import World, condition, demo_objects, mcp_key

NS = "default"


@pytest.fixture(scope="module")
def world(request, tmp_path_factory) -> Iterator[World]:
    with module_world(request, tmp_path_factory, "workload") as w:
        yield w


def token(world: World, sa: str, audience: str = "switchboard", namespace: str = NS) -> str:
    t = world.cluster.kubectl("create", "token", sa, "-n", namespace, "--audience", audience, "--duration", "1h").stdout.strip()
    world.remember(t)
    return t


def rest_list(gw, credential: str) -> httpx.Response:
    return httpx.get(f"{gw.url}/mcp-rest/tools/list", headers={"Authorization": f"Bearer {credential}"}, timeout=10)


@pytest.fixture(scope="module")
def bound(world: World) -> dict:
    """McpServer demo, McpKey `builders` binding ServiceAccount `builder`, McpKey `team` binding
    every ServiceAccount of namespace `team-b`; the ServiceAccounts exist."""
    world.cluster.kubectl("create", "namespace", "team-b")
    for ns, sa in ((NS, "builder"), (NS, "stranger"), ("team-b", "anyone")):
        world.cluster.kubectl("create", "serviceaccount", sa, "-n", ns)
    objs = demo_objects(world)
    objs += [
        mcp_key("builders", NS, secretName="builders-key", servers=["demo"], serviceAccounts=["builder"]),
        mcp_key("team", "team-b", secretName="team-key", serviceAccounts=["*"], servers=["default/demo"]),
    ]
    world.cluster.apply(objs)
    world.kubectl_wait_ready("demo", timeout=60)
    for gw in world.gateways.values():
        wait_until(
            lambda gw=gw: rest_list(gw, token(world, "builder")).status_code == 200,
            30,
            interval=0.5,
            what=f"{gw.proc.name} to accept the builder ServiceAccount's token",
        )
    return {"demo": "demo"}


def test_the_snapshot_carries_the_clusters_issuer_keys(world: World, bound):
    snapshot = world.stored_snapshot()
    tokens = snapshot["gateway"]["serviceAccountTokens"]
    assert tokens["audiences"] == ["switchboard"]
    assert tokens["jwks"]["keys"], tokens
    claims = json.loads(base64.urlsafe_b64decode(token(world, "builder").split(".")[1] + "=="))
    assert tokens["issuer"] == claims["iss"], (tokens["issuer"], claims["iss"])
    keys = {(k["namespace"], k["name"]): k for k in snapshot["keys"]}
    assert keys[(NS, "builders")]["serviceAccounts"] == [f"{NS}/builder"]
    assert keys[("team-b", "team")]["serviceAccounts"] == ["team-b/*"]


def test_a_bound_service_accounts_token_acts_as_the_key(world: World, bound):
    for gw in world.gateways.values():
        r = rest_list(gw, token(world, "builder"))
        assert r.status_code == 200, r.text
        assert [t["name"] for t in r.json()["tools"]] and all(t["name"].startswith("demo__") for t in r.json()["tools"])
        # Namespace-wide binding.
        r = rest_list(gw, token(world, "anyone", namespace="team-b"))
        assert r.status_code == 200, r.text
        # MCP too (2026-07-28 stateless tools/call).
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "demo__add", "arguments": {"a": 2, "b": 3},
                "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}  # fmt: skip
        headers = {"Authorization": f"Bearer {token(world, 'builder')}", "MCP-Protocol-Version": "2026-07-28",
                   "Mcp-Method": "tools/call", "Mcp-Name": "demo__add", "Accept": "application/json, text/event-stream"}  # fmt: skip
        r = httpx.post(gw.mcp_url(), json=body, headers=headers, timeout=10)
        assert r.status_code == 200 and "5" in r.text, r.text


def test_unbound_wrong_audience_tampered_and_foreign_tokens_are_refused(world: World, bound):
    gw = next(iter(world.gateways.values()))
    r = rest_list(gw, token(world, "stranger"))
    assert r.status_code == 403 and "default/stranger" in r.text, r.text
    r = rest_list(gw, token(world, "builder", audience="kubernetes"))
    assert r.status_code == 401 and "not for this audience" in r.text, r.text
    good = token(world, "builder")
    header, payload, signature = good.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["kubernetes.io"]["serviceaccount"]["name"] = "admin"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    r = rest_list(gw, f"{header}.{forged}.{signature}")
    assert r.status_code == 401 and "signature does not verify" in r.text, r.text
    logs = gw.proc.log_text()
    for reason in ("not for this audience", "signature does not verify", "no key binds"):
        assert reason in logs, f"the refusal reason {reason!r} is not in the gateway's log"
    assert good not in logs, "a token reached the log"


def _audit_record(gw, request_id: str) -> dict:
    def found():
        for line in gw.proc.stdout_path.read_text("utf-8", "replace").splitlines():
            if line.startswith("{") and request_id in line:
                rec = json.loads(line)
                if rec.get("request_id") == request_id:
                    return rec
        return None

    return wait_until(found, 10, what=f"the audit record of {request_id}")


def test_the_audit_record_names_the_workload_that_called(world: World, bound):
    """Issue 35: McpKey `team` binds every ServiceAccount of team-b. Two of them, and a token the
    API server bound to a pod (`kubernetes.io.pod.name`), call through it: each record says which
    workload it was, where the key alone would make them identical."""
    world.cluster.kubectl("create", "serviceaccount", "second", "-n", "team-b")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "worker-0", "namespace": "team-b"},
        "spec": {"serviceAccountName": "second", "containers": [{"name": "worker", "image": "registry.invalid/worker:1"}]},
    }
    world.cluster.apply([pod])
    uid = world.cluster.kubectl("get", "pod", "worker-0", "-n", "team-b", "-o", "jsonpath={.metadata.uid}").stdout.strip()
    bound_token = world.cluster.kubectl(
        "create", "token", "second", "-n", "team-b", "--audience", "switchboard", "--duration", "1h",
        "--bound-object-kind", "Pod", "--bound-object-name", "worker-0", "--bound-object-uid", uid,
    ).stdout.strip()  # fmt: skip
    world.remember(bound_token)
    claims = json.loads(base64.urlsafe_b64decode(bound_token.split(".")[1] + "=="))
    assert claims["kubernetes.io"]["pod"]["name"] == "worker-0", "the API server bound the token to the pod"
    callers = {
        "anyone": token(world, "anyone", namespace="team-b"),
        "second": token(world, "second", namespace="team-b"),
        "second@worker-0": bound_token,
    }
    for gw in world.gateways.values():
        records = {}
        for who, credential in callers.items():
            r = rest_list(gw, credential)
            assert r.status_code == 200, r.text
            records[who] = _audit_record(gw, r.headers["x-request-id"])
        common = {"kind": "serviceAccount", "key": "team-b/team", "namespace": "team-b"}
        assert records["anyone"]["caller"] == {**common, "service_account": {"namespace": "team-b", "name": "anyone"}}, records
        assert records["second"]["caller"] == {**common, "service_account": {"namespace": "team-b", "name": "second"}}, records
        assert records["second@worker-0"]["caller"] == {
            **common,
            "service_account": {"namespace": "team-b", "name": "second", "pod": "worker-0"},
        }, records
        for rec in records.values():
            assert rec["status"] == 200 and rec["outcome"] == "ok" and rec["endpoint"] == "rest", rec
        # The key's own secret names no workload.
        r = rest_list(gw, world.generated_key("team-key", namespace="team-b"))
        assert r.status_code == 200, r.text
        assert _audit_record(gw, r.headers["x-request-id"])["caller"] == {**common, "kind": "key"}
    world.cluster.kubectl("delete", "pod", "worker-0", "-n", "team-b", "--wait=false")


def test_a_service_account_two_keys_bind_stays_with_the_older(world: World, bound):
    world.cluster.apply(mcp_key("late", NS, secretName="late-key", serviceAccounts=["builder"]))

    def rejected():
        c = condition(world.cluster.key("late", NS), "Accepted")
        return c if c and c["status"] == "False" else None

    c = wait_until(rejected, 30, what="McpKey late to be rejected")
    assert c["reason"] == "ServiceAccountConflict" and "default/builders" in c["message"], c
    gw = next(iter(world.gateways.values()))
    assert rest_list(gw, token(world, "builder")).status_code == 200, "the older binding still serves"
    world.cluster.kubectl("delete", "mcpkey", "late", "-n", NS)


def test_offline_verification_against_token_review_figures(world: World, bound):
    """Both ways measured on this cluster: a REST call with a key, with a ServiceAccount token
    (verified offline by the gateway), and one TokenReview round trip to the API server."""
    gw = next(iter(world.gateways.values()))
    key = world.generated_key("builders-key")
    sa_token = token(world, "builder")
    client = httpx.Client(timeout=10)

    def timed(fn, n=200) -> float:
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1000)
        return statistics.median(samples)

    with_key = timed(lambda: client.get(f"{gw.url}/mcp-rest/tools/list", headers={"Authorization": f"Bearer {key}"}))
    with_token = timed(lambda: client.get(f"{gw.url}/mcp-rest/tools/list", headers={"Authorization": f"Bearer {sa_token}"}))
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": sa_token, "audiences": ["switchboard"]}}
    api = world.cluster._api
    assert api is not None
    answer = api.post("/apis/authentication.k8s.io/v1/tokenreviews", json=review).json()
    assert answer["status"]["authenticated"] is True, answer
    token_review = timed(lambda: api.post("/apis/authentication.k8s.io/v1/tokenreviews", json=review), n=100)
    print(
        f"\nREST tools/list, median of 200: with a key {with_key:.3f} ms, with a ServiceAccount token "
        f"{with_token:.3f} ms (verified offline: +{with_token - with_key:.3f} ms); one TokenReview round trip "
        f"to the API server: {token_review:.3f} ms (median of 100)"
    )
