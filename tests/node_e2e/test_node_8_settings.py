"""Issue 25 acceptance 1 on the real node: a values file setting every gateway setting
(`gateway.settings`: maxBodyBytes, sessionTtl, listingTtl, listingPageCap, allowedHosts,
allowedOrigins, publicUrl; `gateway.overload`: maxInFlight, maxQueueDelay, maxConnections) is
`helm upgrade`d, and each one is seen in the gateway pods' behaviour, with a control beside each:

- maxBodyBytes: a body over it is refused with 413, one under it is served;
- sessionTtl: a legacy session ends (404) within a few ttls; a new one works;
- listingPageCap: tools/list pages hold at most that many tools, with a nextCursor;
- allowedHosts: a Host in it is served, another Host is refused with 403;
- allowedOrigins: an Origin in it is served, another Origin is refused with 403;
- publicUrl: the 401 challenge's resource_metadata URL is on it;
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
import time

import httpx
import pytest
from harness import RawMcp, call_result_value
from node import CHART, RELEASE_NS, chart_values, get_json, helm, kubectl, pods, ready, secret_value, wait

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


def service_url() -> str:
    ip = get_json("service", "switchboard-gateway", "-n", RELEASE_NS)["spec"]["clusterIP"]
    return f"http://{ip}"


def call(url: str, key: str, name: str, arguments: dict, headers: dict | None = None, timeout: float = 20) -> httpx.Response:
    return httpx.post(
        f"{url}/mcp-rest/tools/call",
        json={"name": name, "arguments": arguments},
        headers={"Authorization": f"Bearer {key}", "Host": SERVICE_HOST, **(headers or {})},
        timeout=timeout,
    )


def in_flight_pair(pod_ip: str, key: str) -> tuple[int, int]:
    """A slow call to one pod and, while it is in flight, a quick one: their statuses."""
    url = f"http://{pod_ip}:8080"
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        slow = pool.submit(call, url, key, "demo__slow", {"ms": 3000})
        time.sleep(0.5)  # (not synchronisation of the result: the slow call lasts 3 s)
        quick = call(url, key, "demo__add", {"a": 1, "b": 1})
        return slow.result().status_code, quick.status_code


@pytest.fixture(scope="module")
def configured(served, tmp_path_factory):
    # Control first, under the defaults: two calls in flight on one pod are both served.
    pod_ip = gateway_pods()[0]["status"]["podIP"]
    before = in_flight_pair(pod_ip, served["key"])
    values = tmp_path_factory.mktemp("settings") / "values-settings.yaml"
    values.write_text(VALUES)
    helm("upgrade", "switchboard", str(CHART), "-n", RELEASE_NS, *chart_values(), "-f", str(values))
    rolled_out()
    # The new pods follow the operator's snapshot with the settings.
    wait(lambda: call(service_url(), served["key"], "demo__add", {"a": 1, "b": 1}).status_code == 200, 60,
         "the gateway to serve after the upgrade")  # fmt: skip
    yield {**served, "before": before}
    helm("upgrade", "switchboard", str(CHART), "-n", RELEASE_NS, *chart_values())
    rolled_out()


def test_max_body_bytes(configured):
    url = service_url()
    ok = call(url, configured["key"], "demo__echo", {"text": "x" * (MAX_BODY // 2)})
    assert ok.status_code == 200, ok.text[:300]
    big = call(url, configured["key"], "demo__echo", {"text": "x" * (MAX_BODY * 2)})
    assert big.status_code == 413, (big.status_code, big.text[:300])


def test_session_ttl(configured):
    mcp = RawMcp(f"{service_url()}/mcp", configured["key"], "legacy", headers={"Host": SERVICE_HOST})
    assert call_result_value(mcp.call_tool("demo__add", {"a": 1, "b": 2}).result) == 3
    wait(lambda: mcp.call_tool("demo__add", {"a": 1, "b": 2}).status == 404, SESSION_TTL_S * 5,
         "the legacy session to end after sessionTtl", interval=0.5)  # fmt: skip
    fresh = RawMcp(f"{service_url()}/mcp", configured["key"], "legacy", headers={"Host": SERVICE_HOST})
    assert call_result_value(fresh.call_tool("demo__add", {"a": 2, "b": 2}).result) == 4


def test_listing_page_cap(configured):
    mcp = RawMcp(f"{service_url()}/mcp", configured["key"], "2026-07-28", headers={"Host": SERVICE_HOST})
    first = mcp.request("tools/list").result
    assert len(first["tools"]) == PAGE_CAP and first.get("nextCursor"), first
    second = mcp.request("tools/list", {"cursor": first["nextCursor"]}).result
    assert 0 < len(second["tools"]) <= PAGE_CAP, second


def test_allowed_hosts_and_origins(configured):
    url, key = service_url(), configured["key"]
    assert call(url, key, "demo__add", {"a": 1, "b": 1}, {"Host": HOST}).status_code == 200
    other = call(url, key, "demo__add", {"a": 1, "b": 1}, {"Host": "elsewhere.example"})
    assert other.status_code == 403, other.text[:300]
    assert call(url, key, "demo__add", {"a": 1, "b": 1}, {"Origin": ORIGIN}).status_code == 200
    other = call(url, key, "demo__add", {"a": 1, "b": 1}, {"Origin": "https://evil.example"})
    assert other.status_code == 403, other.text[:300]


def test_public_url_names_the_metadata(configured):
    r = httpx.post(f"{service_url()}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                   headers={"Host": SERVICE_HOST}, timeout=10)  # fmt: skip
    assert r.status_code == 401, r.text[:300]
    assert f'resource_metadata="{PUBLIC}/' in r.headers.get("www-authenticate", ""), r.headers


def test_max_in_flight_sheds_the_second_call_on_a_pod(configured):
    assert configured["before"] == (200, 200), f"control (defaults): {configured['before']}"
    pod_ip = gateway_pods()[0]["status"]["podIP"]
    slow, quick = in_flight_pair(pod_ip, configured["key"])
    assert (slow, quick) == (200, 503), (slow, quick)


def test_the_rest_reach_the_pods(configured):
    for pod in gateway_pods():
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
        assert (env["SWITCHBOARD_MAX_QUEUE_DELAY"], env["SWITCHBOARD_MAX_CONNECTIONS"]) == ("25ms", "500"), env
    stored = json.loads(secret_value("switchboard-snapshot", RELEASE_NS, "snapshot.yaml"))
    assert stored["gateway"]["listingTtl"] == "7s", stored["gateway"]
