"""Issue 25 acceptance 1 on the real node: a values file setting every gateway setting
(`gateway.settings`: maxBodyBytes, sessionTtl, listingTtl, listingPageCap, allowedHosts,
allowedOrigins, publicUrl; `gateway.overload`: maxInFlight, maxQueueDelay, maxConnections) is
`helm upgrade`d, and each one is seen in the gateway pods' behaviour, with a control beside each:

- maxBodyBytes: a body over it is refused with 413, one under it is served;
- sessionTtl: a legacy session ends (404) within a few ttls; a new one works;
- listingPageCap: an upstream whose listing never ends is walked that many pages;
- allowedHosts: a Host in it is served, another Host is refused with 403;
- allowedOrigins: an Origin in it is served, another Origin is refused with 403;
- publicUrl: the challenge of a relayed upstream 401 names the metadata URL on it;
- maxInFlight: with one slow call in flight on a pod, a second call to that pod is shed (503 +
  Retry-After); the same pair under the default (no bound) both succeed (control, before);
- listingTtl, maxQueueDelay and maxConnections: read back from what the pods run with (the
  snapshot the operator serves, the gateway container's environment), as their effects need
  minutes or a saturated CPU to show.

The defaults are restored at the end (helm upgrade without the file).
"""

from __future__ import annotations

import concurrent.futures
import json
import re

import httpx
import pytest
from harness import RawMcp, call_result_value
from node import CHART, RELEASE_NS, apply, chart_values, helm, kubectl, pods, ready, secret_value, wait

MAX_BODY = 8192
SESSION_TTL_S = 4
PAGE_CAP = 2
HOST = "mcp.internal.example"
ORIGIN = "https://app.example"
PUBLIC = "https://mcp.example.com"
SERVICE_HOST = "switchboard-gateway.switchboard.svc"

VALUES = f"""
gateway:
  settings:
    maxBodyBytes: {MAX_BODY}
    sessionTtl: {SESSION_TTL_S}s
    listingTtl: 7s
    listingPageCap: {PAGE_CAP}
    allowedHosts: [{HOST}]
    allowedOrigins: [{ORIGIN}]
    publicUrl: {PUBLIC}
  overload:
    maxInFlight: 1
    maxQueueDelay: 25ms
    maxConnections: 500
"""


def gateway_pods() -> list[dict]:
    return [p for p in pods("app.kubernetes.io/component=gateway") if ready(p)]


def rolled_out() -> None:
    for deploy in ("switchboard-operator", "switchboard-gateway"):
        kubectl("rollout", "status", f"deploy/{deploy}", "-n", RELEASE_NS, "--timeout=180s", timeout=200)
    wait(lambda: len(gateway_pods()) == 2, 120, "two Ready gateway pods")


def stored() -> dict:
    return json.loads(secret_value("switchboard-snapshot", RELEASE_NS, "snapshot.yaml"))


def served_generation(pod_ip: str) -> int:
    text = httpx.get(f"http://{pod_ip}:9091/metrics", timeout=5).text
    m = re.search(r"^switchboard_gateway_snapshot_generation\S*\s+(\d+)", text, re.M)
    return int(m.group(1)) if m else -1


def pod_urls() -> list[str]:
    """Each Ready gateway pod's own address: every setting is checked on every pod (the
    Service would pick one)."""
    return [f"http://{p['status']['podIP']}:8080" for p in gateway_pods()]


def one_pod() -> str:
    """One gateway pod (requests carry the Service's name as Host, as in-cluster clients do)."""
    return pod_urls()[0]


def call(url: str, key: str, name: str, arguments: dict, headers: dict | None = None, timeout: float = 20) -> httpx.Response:
    return httpx.post(
        f"{url}/mcp-rest/tools/call",
        json={"name": name, "arguments": arguments},
        headers={"Authorization": f"Bearer {key}", "Host": SERVICE_HOST, **(headers or {})},
        timeout=timeout,
    )


def upstream_calls() -> int:
    """tools/call requests the example upstream pod has received (counted on arrival)."""
    ip = pods("app=upstream", "apps")[0]["status"]["podIP"]
    return httpx.get(f"http://{ip}:8931/_stats", timeout=5).json()["by_method"].get("tools/call", 0)


def in_flight_pair(pod_ip: str, key: str) -> tuple[int, int]:
    """A slow call to one pod and, once the upstream has it (so it is in flight on the pod), a
    quick one to the same pod: their statuses."""
    url = f"http://{pod_ip}:8080"
    before = upstream_calls()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        slow = pool.submit(call, url, key, "demo__slow", {"ms": 3000})
        wait(lambda: upstream_calls() > before, 10, "the slow call to reach the upstream", interval=0.05)
        quick = call(url, key, "demo__add", {"a": 1, "b": 1})
        return slow.result().status_code, quick.status_code


def fault_servers(namespace: str) -> list[dict]:
    """Two McpServers on fault variants of the example upstream pod: a listing that never ends
    (`endless`) and an upstream that answers 401 with a challenge (`locked`)."""
    base = f"http://upstream.{namespace}.svc:8931/v"
    return [
        {"apiVersion": "switchboard.dev/v1alpha1", "kind": "McpServer", "metadata": {"name": name, "namespace": namespace},
         "spec": {"url": f"{base}/{variant}/mcp", "timeout": "5s", "accessGroups": ["apps"], "auth": {"type": auth}}}
        for name, variant, auth in (("endless", "cursor=endless", "none"), ("locked", "status=401", "passthrough"))
    ]  # fmt: skip


@pytest.fixture(scope="module")
def configured(served, tmp_path_factory):
    apply(*fault_servers(served["namespace"]))
    for name in ("endless", "locked"):
        kubectl("wait", "--for=condition=Accepted", f"mcpserver/{name}", "-n", served["namespace"], "--timeout=60s")
    # Control first, under the defaults: two calls in flight on one pod are both served.
    pod_ip = gateway_pods()[0]["status"]["podIP"]
    before = in_flight_pair(pod_ip, served["key"])
    values = tmp_path_factory.mktemp("settings") / "values-settings.yaml"
    values.write_text(VALUES)
    helm("upgrade", "switchboard", str(CHART), "-n", RELEASE_NS, *chart_values(), "-f", str(values))
    rolled_out()
    # The new pods follow the operator's snapshot with the settings.
    # New gateway pods start from the snapshot Secret, which may still be the one stored before
    # the operator read the settings: wait for the generation that carries them, then for every
    # pod to serve it (its own metric says which generation it serves).
    generation = wait(lambda: (snap := stored()).get("gateway", {}).get("listingTtl") == "7s" and snap["generation"],
                      120, "the operator to store a snapshot with the settings")  # fmt: skip
    wait(lambda: all(served_generation(p["status"]["podIP"]) >= generation for p in gateway_pods()), 120,
         f"every gateway pod to serve generation {generation}")  # fmt: skip
    yield {**served, "before": before}
    helm("upgrade", "switchboard", str(CHART), "-n", RELEASE_NS, *chart_values())
    rolled_out()


def test_max_body_bytes(configured):
    for url in pod_urls():
        ok = call(url, configured["key"], "demo__echo", {"text": "x" * (MAX_BODY // 2)})
        assert ok.status_code == 200, (url, ok.text[:300])
        big = call(url, configured["key"], "demo__echo", {"text": "x" * (MAX_BODY * 2)})
        assert big.status_code == 413, (url, big.status_code, big.text[:300])


def test_session_ttl(configured):
    mcp = RawMcp(f"{one_pod()}/mcp", configured["key"], "legacy", headers={"Host": SERVICE_HOST})
    assert call_result_value(mcp.call_tool("demo__add", {"a": 1, "b": 2}).result) == 3
    wait(lambda: mcp.call_tool("demo__add", {"a": 1, "b": 2}).status == 404, SESSION_TTL_S * 5,
         "the legacy session to end after sessionTtl", interval=0.5)  # fmt: skip
    fresh = RawMcp(f"{one_pod()}/mcp", configured["key"], "legacy", headers={"Host": SERVICE_HOST})
    assert call_result_value(fresh.call_tool("demo__add", {"a": 2, "b": 2}).result) == 4


def test_listing_page_cap(configured):
    # `endless` pages its listing 2 tools at a time and never ends: for the aggregate listing the
    # gateway walks listingPageCap pages of it (the default, 100, would give 200 tools).
    mcp = RawMcp(f"{one_pod()}/mcp", configured["key"], "2026-07-28", headers={"Host": SERVICE_HOST})
    tools, _ = mcp.list_all_tools()
    endless = [t["name"] for t in tools if t["name"].startswith("endless__")]
    assert len(endless) == PAGE_CAP * 2, endless
    assert any(t["name"] == "demo__add" for t in tools), "control: the other server is listed whole"


def test_allowed_hosts_and_origins(configured):
    key = configured["key"]
    for url in pod_urls():
        assert call(url, key, "demo__add", {"a": 1, "b": 1}, {"Host": HOST}).status_code == 200
        other = call(url, key, "demo__add", {"a": 1, "b": 1}, {"Host": "elsewhere.example"})
        assert other.status_code == 403, (url, other.text[:300])
        assert call(url, key, "demo__add", {"a": 1, "b": 1}, {"Origin": ORIGIN}).status_code == 200
        other = call(url, key, "demo__add", {"a": 1, "b": 1}, {"Origin": "https://evil.example"})
        assert other.status_code == 403, (url, other.text[:300])


def test_public_url_names_the_metadata_of_a_relayed_401(configured):
    # `locked` (auth passthrough: the caller's own token goes upstream) answers 401 with a
    # challenge; the gateway relays it naming its own metadata URL, on publicUrl (without it:
    # http://<Host>/...). The caller's key is then in X-Switchboard-Key.
    caller = {"Host": SERVICE_HOST, "X-Switchboard-Key": configured["key"], "Authorization": "Bearer not-for-this-upstream"}
    mcp = RawMcp(f"{one_pod()}/mcp/locked", None, "2026-07-28", headers=caller)
    reply = mcp.request("tools/list")
    assert reply.status == 401, reply.raw[:300]
    www = reply.headers.get("www-authenticate", "")
    assert www.startswith(f'Bearer resource_metadata="{PUBLIC}/.well-known/oauth-protected-resource/mcp/locked"'), www


def test_max_in_flight_sheds_the_second_call_on_a_pod(configured):
    assert configured["before"] == (200, 200), f"control (defaults): {configured['before']}"
    pod_ip = gateway_pods()[0]["status"]["podIP"]
    slow, quick = in_flight_pair(pod_ip, configured["key"])
    assert (slow, quick) == (200, 503), (slow, quick)


def test_the_rest_reach_the_pods(configured):
    for pod in gateway_pods():
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
        assert (env["SWITCHBOARD_MAX_QUEUE_DELAY"], env["SWITCHBOARD_MAX_CONNECTIONS"]) == ("25ms", "500"), env
    assert stored()["gateway"]["listingTtl"] == "7s", stored()["gateway"]
