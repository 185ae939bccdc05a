"""Readiness tells the truth on the real node: a gateway pod that has no snapshot yet (no
operator reachable, no stored snapshot Secret) runs but is not Ready, answers /readyz with 503
and gets no Service traffic, while the Ready replica keeps serving; once an operator is back it
is Ready. Also: the operator writes the snapshot Secret again."""

from __future__ import annotations

import time

import httpx
from node import (
    GATEWAY_URL, RELEASE_NS, caller_pod, get_json, kubectl, pods, ready, run_to_completion, wait,
)

SNAPSHOT_SECRET = "switchboard-snapshot"


def test_gateway_is_ready_only_with_a_snapshot(served):
    kubectl("scale", "deploy/switchboard-operator", "-n", RELEASE_NS, "--replicas=0")
    wait(lambda: not pods("app.kubernetes.io/component=operator"), 60, "the operator pods to go")
    try:
        kubectl("delete", "secret", SNAPSHOT_SECRET, "-n", RELEASE_NS)
        gateways = pods("app.kubernetes.io/component=gateway")
        victim, survivor = gateways[0]["metadata"]["name"], gateways[1]["metadata"]["name"]
        kubectl("delete", "pod", victim, "-n", RELEASE_NS, "--wait=false")

        def newcomer():
            for p in pods("app.kubernetes.io/component=gateway"):
                name = p["metadata"]["name"]
                if name not in (victim, survivor) and p["status"].get("podIP") and p["status"].get("phase") == "Running":
                    return p
            return None

        fresh = wait(newcomer, 60, "the replacement gateway pod to run")
        name, ip = fresh["metadata"]["name"], fresh["status"]["podIP"]
        # Its container is up (it answers /healthz, on the internal port 9091 like the kubelet's
        # probes) but it has nothing to serve.
        wait(lambda: httpx.get(f"http://{ip}:9091/healthz", timeout=2).status_code == 200, 30, f"{name} to listen")
        readyz = httpx.get(f"http://{ip}:9091/readyz", timeout=2)
        assert readyz.status_code == 503, (readyz.status_code, readyz.text)
        # Several readiness periods (5 s) later it is still not Ready...
        observed_until = time.monotonic() + 12
        while time.monotonic() < observed_until:
            pod = get_json("pod", name, "-n", RELEASE_NS)
            assert not ready(pod), f"{name} turned Ready with no snapshot"
            time.sleep(1)
        print(f"\n{name}: running, /readyz 503 ({readyz.text.strip()!r}), not Ready for 12 s without a snapshot")
        # ...and the Service sends callers only to the Ready replica: calls still succeed.
        phase, logs = run_to_completion(caller_pod(
            "call-during-outage", served["namespace"], ["once", "-url", f"{GATEWAY_URL}/mcp/demo", "-key", served["key"]]))
        assert phase == "Succeeded", logs
    finally:
        kubectl("scale", "deploy/switchboard-operator", "-n", RELEASE_NS, "--replicas=2")
    t0 = time.monotonic()
    wait(lambda: ready(get_json("pod", name, "-n", RELEASE_NS)), 120, f"{name} to be Ready once an operator is back")
    print(f"{name}: Ready {time.monotonic() - t0:.1f}s after the operator was scaled back up")
    wait(lambda: get_json("secret", SNAPSHOT_SECRET, "-n", RELEASE_NS)["data"].get("snapshot.yaml"), 60,
         "the operator to store the snapshot Secret again")
    wait(lambda: len(pods("app.kubernetes.io/component=operator")) == 2
         and all(ready(p) for p in pods("app.kubernetes.io/component=operator")), 120, "both operators Ready")
