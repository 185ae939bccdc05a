"""Status that stays true across a leader change (issue 20, item 10), on the one-node cluster
with the chart's 2 operator replicas and 2 gateway replicas.

The operator's lease holder is deleted and an McpKey is created at once. What must hold:

- the warm standby takes the lease (not the holder's replacement pod, which starts cold);
- the key is reported Ready only when every running gateway pod accepts it: at the moment the
  condition turns True each gateway pod is called directly (its pod IP, not the Service) with
  the new key, and every one must answer the call, none "unknown gateway key";
- every gateway follows the new leader: the time from the new holder's `acquireTime` to each
  gateway's log line saying it follows the new leader's stream is printed (a figure, not an
  assertion: the machine is shared).

Before the fix every run failed the first two (the lease went to the replacement pod, and the
new leader counted 1/1 replicas while the other gateway still refused the key)."""

from __future__ import annotations

import datetime
import re
import time

import httpx
from node import RELEASE_NS, apply, get_json, kubectl, pods, ready, secret_value, wait

OPERATORS = "app.kubernetes.io/component=operator"
GATEWAYS = "app.kubernetes.io/component=gateway"
GATEWAY_PORT = 8080
# The Host a gateway accepts (its Service name; a pod IP is not on the allowed list).
GATEWAY_HOST = "switchboard-gateway.switchboard.svc"
FOLLOWING = re.compile(r"following the operator's snapshot stream.*?acks\W+(https?://[^\s\",]+)")


def lease() -> dict:
    return get_json("lease", "switchboard-operator", "-n", RELEASE_NS)["spec"]


def parse_time(text: str) -> float:
    # RFC 3339 with up to nanoseconds (kubectl --timestamps) or microseconds (MicroTime)
    text = text.replace("Z", "+00:00")
    head, _, rest = text.partition(".")
    if rest:
        digits = re.match(r"\d+", rest).group(0)
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest[len(digits):]}"
    return datetime.datetime.fromisoformat(text).timestamp()


def call_directly(ip: str, key: str) -> tuple[int, str]:
    """One 2026-07-28 `tools/call` of `demo`'s echo on one gateway pod, by its address."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "leader-change"},
                       "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                 "io.modelcontextprotocol/clientCapabilities": {},
                                 "io.modelcontextprotocol/clientInfo": {"name": "node-e2e", "version": "0"}}}}
    response = httpx.post(
        f"http://{ip}:{GATEWAY_PORT}/mcp/demo", json=body, timeout=10,
        headers={"Host": GATEWAY_HOST, "Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
                 "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"})
    return response.status_code, response.text


def followed_at(gateway: str, leader_ip: str, since: float) -> float | None:
    """When (unix seconds, the kubelet's log timestamp) `gateway` first logged that it follows
    the stream of the operator at `leader_ip` after `since`."""
    out = kubectl("logs", gateway, "-n", RELEASE_NS, "--timestamps").stdout
    for line in out.splitlines():
        stamp, _, text = line.partition(" ")
        match = FOLLOWING.search(text)
        if match and f"//{leader_ip}:" in match.group(1):
            at = parse_time(stamp)
            if at >= since:
                return at
    return None


def test_a_key_made_during_a_leader_change_is_ready_only_when_every_gateway_accepts_it(served):
    namespace = served["namespace"]

    def settled() -> bool:
        ops = pods(OPERATORS)
        gws = pods(GATEWAYS)
        return (len(ops) == 2 and all(ready(p) for p in ops) and len(gws) == 2 and all(ready(p) for p in gws)
                and lease().get("holderIdentity") in {p["metadata"]["name"] for p in ops})

    wait(settled, 120, "2 operator and 2 gateway pods Ready, one operator holding the lease")
    holder = lease()["holderIdentity"]
    operators = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods(OPERATORS)}
    standby = next(name for name in operators if name != holder)
    gateways = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods(GATEWAYS)}
    key_name = f"leader-change-{int(time.time())}"

    deleted_at = time.time()
    kubectl("delete", "pod", holder, "-n", RELEASE_NS, "--wait=false")
    apply({"apiVersion": "switchboard.dev/v1alpha1", "kind": "McpKey",
           "metadata": {"name": key_name, "namespace": namespace},
           "spec": {"secretName": f"{key_name}-key", "accessGroups": ["apps"]}})

    def key_ready() -> dict | None:
        status = get_json("mcpkey", key_name, "-n", namespace).get("status") or {}
        condition = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), None)
        return condition if condition and condition["status"] == "True" else None

    condition = wait(key_ready, 90, f"McpKey {key_name} Ready", interval=0.05)
    ready_at = time.time()
    key = secret_value(f"{key_name}-key", namespace, "key")
    # At once, before anything else: every gateway pod must already accept the key.
    answers = {name: call_directly(ip, key) for name, ip in gateways.items()}
    print(f"\n  the key was Ready {ready_at - deleted_at:.2f}s after the lease holder's deletion: "
          f"{condition['message']!r}")
    for name, (code, text) in answers.items():
        print(f"  {name} ({gateways[name]}) called directly right then: HTTP {code}")
    refused = {name: text[:200] for name, (code, text) in answers.items() if code != 200 or '"result"' not in text}
    assert not refused, f"Ready was reported while these gateway pods refused the key: {refused}"
    assert condition["message"].startswith(f"{len(gateways)}/{len(gateways)} "), condition["message"]

    spec = lease()
    assert spec.get("holderIdentity") == standby, (
        f"the lease went to {spec.get('holderIdentity')!r}, not to the warm standby {standby!r} "
        f"(the old holder was {holder!r})")
    acquired = parse_time(spec["acquireTime"])
    print(f"  the standby {standby} took the lease {acquired - deleted_at:.2f}s after the delete")
    followed = {}
    for name in gateways:
        at = wait(lambda: followed_at(name, operators[standby], deleted_at), 30,
                  f"{name} to log that it follows {standby}")
        followed[name] = at - acquired
    for name, after in sorted(followed.items()):
        print(f"  {name} followed the new leader {after:.3f}s after it took the lease")
    kubectl("delete", "mcpkey", key_name, "-n", namespace, "--wait=false")
