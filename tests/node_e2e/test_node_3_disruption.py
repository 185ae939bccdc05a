"""Acceptance 3 of the one-node cluster: a client pod calls the gateway in a loop (kept-alive
connections, as an SDK's client) while a gateway pod is deleted, while `helm upgrade` rolls the
gateway Deployment, and while the operator's leader pod is deleted. Each disruption must cost 0
failed calls over at least 200 calls; the number of calls and the time each disruption took are
printed. Then the figures the chart's resource requests and limits come from are printed."""

from __future__ import annotations

import time

import pytest
from node import (
    CHART, GATEWAY_URL, RELEASE_NS, apply, caller_pod, chart_values, get_json, helm, kubectl, pods, ready, wait,
)

MIN_CALLS = 200


class CallLoop:
    """The caller's loop pod; its log has one line per call: `<unix ms> ok <ms>` or
    `<unix ms> FAIL <reason>`."""

    def __init__(self, namespace: str, key: str):
        self.name, self.namespace = "call-loop", namespace
        pod = caller_pod(self.name, namespace, ["loop", "-url", f"{GATEWAY_URL}/mcp/demo", "-key", key,
                                                "-interval", "10ms"], restart="Never")
        kubectl("delete", "pod", self.name, "-n", namespace, "--ignore-not-found", "--wait=true")
        apply(pod)
        wait(lambda: len(self.calls()) >= 20, 60, "the call loop to make its first calls")

    def calls(self) -> list[tuple[int, bool, str]]:
        out = kubectl("logs", self.name, "-n", self.namespace).stdout
        calls = []
        for line in out.splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[0].isdigit():
                calls.append((int(parts[0]), parts[1] == "ok", parts[2]))
        return calls

    def window(self, start_ms: int, end_ms: int | None = None) -> list[tuple[int, bool, str]]:
        return [c for c in self.calls() if c[0] >= start_ms and (end_ms is None or c[0] <= end_ms)]

    def stop(self) -> None:
        kubectl("delete", "pod", self.name, "-n", self.namespace, "--wait=false")


@pytest.fixture(scope="module")
def loop(served):
    calls = CallLoop(served["namespace"], served["key"])
    yield calls
    everything = calls.calls()
    failed = [c for c in everything if not c[1]]
    print(f"\ncall loop: {len(everything)} calls in all, {len(failed)} failed")
    calls.stop()


def gateways_settled() -> bool:
    gws = pods("app.kubernetes.io/component=gateway")
    return len(gws) == 2 and all(ready(p) for p in gws)


def measure(loop: CallLoop, what: str, disrupt, settled) -> None:
    """Runs `disrupt`, waits until `settled`, then until the window holds MIN_CALLS calls; asserts
    none failed and prints the figures."""
    start_ms = int(time.time() * 1000)
    t0 = time.monotonic()
    disrupt()
    wait(settled, 180, f"the cluster to settle after: {what}", interval=0.2)
    took = time.monotonic() - t0
    wait(lambda: len(loop.window(start_ms)) >= MIN_CALLS, 60, f"{MIN_CALLS} calls since: {what}")
    end_ms = int(time.time() * 1000)
    window = loop.window(start_ms, end_ms)
    failed = [c for c in window if not c[1]]
    latencies = sorted(float(c[2]) for c in window if c[1])
    p99 = latencies[int(len(latencies) * 0.99) - 1] if latencies else float("nan")
    print(f"\n{what}: took {took:.1f}s until settled; {len(window)} calls from its start "
          f"({(end_ms - start_ms) / 1000:.1f}s), {len(failed)} failed; call p99 {p99:.1f} ms")
    for c in failed[:10]:
        print(f"  failed at {c[0]}: {c[2]}")
    assert len(window) >= MIN_CALLS
    assert not failed, f"{what}: {len(failed)} of {len(window)} calls failed, e.g. {failed[0][2]}"
    # Status tells the truth afterwards: a replica that stopped gracefully said goodbye, so it
    # is not reported missing (only one that vanished would be, until --replica-expiry).
    status_settled(loop.namespace, what)


def status_settled(namespace: str, what: str) -> None:
    def both_replicas():
        key = get_json("mcpkey", "apps", "-n", namespace)["status"]["conditions"]
        server = get_json("mcpserver", "demo", "-n", namespace)["status"]["conditions"]
        ready = next(c for c in key if c["type"] == "Ready")
        programmed = next(c for c in server if c["type"] == "Programmed")
        return (ready["status"] == "True" and ready["message"].startswith("2/2 ")
                and programmed["status"] == "True" and programmed["message"].startswith("2/2 "))

    t0 = time.monotonic()
    wait(both_replicas, 30, f"McpKey Ready and McpServer Programmed to say 2/2 replicas after: {what}")
    print(f"  status back to 2/2 replicas {time.monotonic() - t0:.1f}s after the window")


def test_deleting_a_gateway_pod_loses_no_call(loop):
    victim = pods("app.kubernetes.io/component=gateway")[0]["metadata"]["name"]

    def settled():
        names = [p["metadata"]["name"] for p in pods("app.kubernetes.io/component=gateway")]
        return victim not in names and gateways_settled()

    measure(loop, f"kubectl delete pod {victim}",
            lambda: kubectl("delete", "pod", victim, "-n", RELEASE_NS, "--wait=false"), settled)


def test_rolling_helm_upgrade_loses_no_call(loop):
    before = {p["metadata"]["name"] for p in pods("app.kubernetes.io/component=gateway")}

    def upgrade():
        # A changed pod annotation rolls the Deployment, as a new image or setting would.
        helm("upgrade", "switchboard", str(CHART), "-n", RELEASE_NS, *chart_values(),
             "--set-string", f"gateway.podAnnotations.rolled={int(time.time())}")

    def settled():
        names = {p["metadata"]["name"] for p in pods("app.kubernetes.io/component=gateway")}
        return not (names & before) and gateways_settled()

    measure(loop, "helm upgrade rolling the gateway Deployment", upgrade, settled)


def lease_holder() -> str:
    return get_json("lease", "switchboard-operator", "-n", RELEASE_NS)["spec"].get("holderIdentity") or ""


def test_deleting_the_operator_leader_loses_no_call(loop):
    leader = lease_holder()
    operators = [p["metadata"]["name"] for p in pods("app.kubernetes.io/component=operator")]
    assert leader in operators, f"lease holder {leader!r} is not one of the operator pods {operators}"
    new_leader_after: list[float] = []
    t0 = time.monotonic()

    def settled():
        holder = lease_holder()
        if holder and holder != leader and not new_leader_after:
            new_leader_after.append(time.monotonic() - t0)
        ops = pods("app.kubernetes.io/component=operator")
        return (new_leader_after and leader not in [p["metadata"]["name"] for p in ops]
                and len(ops) == 2 and all(ready(p) for p in ops))

    measure(loop, f"kubectl delete pod {leader} (the operator leader)",
            lambda: kubectl("delete", "pod", leader, "-n", RELEASE_NS, "--wait=false"), settled)
    print(f"  a new operator held the lease {new_leader_after[0]:.1f}s after the delete")
