"""Issue 23 on the API server alone (no kubelet here: the one-node suite runs the pods): what the
operator makes of an McpServer with `spec.run`, and what it reports from its pods' status.

- A stdio server at 3 replicas: a Deployment (owned by the McpServer; an init container that
  installs the bridge from the bridge image; the server's image running the bridge in front of
  `spec.run.command`; a restricted security context), a Service, the headless peers Service
  and the bridges' key Secret; the snapshot routes the server to the Service with
  `upstreamEra: byClient`.
- Status: `Running` says how many pods are ready, and why the rest do not run: a pod whose
  status says ImagePullBackOff, then CrashLoopBackOff with its last exit code, shows within
  seconds in `Running` and `Ready`, with the pod's words; `status.replicas`/`readyReplicas`.
- Drift: the Deployment's replicas changed by hand are put back.
- A `spec.run` that the CRD refuses (stdio without a command), and one the API server refuses
  when the operator applies it (a volume without a source): named, nothing else lost.
- `spec.run` replaced by a URL: the Deployment and Services go.
- Issue 38: the fence, a NetworkPolicy `<name>-mcp` owned by the McpServer selecting exactly the
  server's pods: ingress on the server's port from the gateway's pods, the operator's pods and
  the server's own; egress to DNS, the peers and the declared rules. An egress rule the API
  server refuses stops the server's Deployment from being made at all (the fence goes first);
  `network.policy: Unmanaged` deletes the policy and keeps the workload.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml
from harness import wait_until
from k8s_fixtures import module_world
from k8s_world import OPERATOR_NS, SNAPSHOT_SECRET, World, condition, describe_conditions, mcp_key, mcp_server

BRIDGE_IMAGE = "registry.test/switchboard-gateway:test"
NS = "default"


@pytest.fixture(scope="module")
def world(request, tmp_path_factory) -> Iterator[World]:
    with module_world(request, tmp_path_factory, "run", operator_args=("--stdio-bridge-image", BRIDGE_IMAGE)) as w:
        yield w


def run_spec(**extra) -> dict:
    return {
        "image": "registry.test/everything:1",
        "command": ["node", "/app/node_modules/.bin/mcp-server-everything"],
        "args": ["stdio"],
        "replicas": 3,
        **extra,
    }


def get(world: World, kind: str, name: str) -> dict | None:
    p = world.cluster.kubectl("get", kind, name, "-n", NS, "-o", "json", check=False)
    return json.loads(p.stdout) if p.returncode == 0 else None


def snapshot_server(world: World, name: str) -> dict | None:
    data = world.cluster.secret_data(SNAPSHOT_SECRET, OPERATOR_NS) or {}
    snap = yaml.safe_load(data.get("snapshot.yaml", "") or "{}") or {}
    return next((s for s in snap.get("servers", []) if s.get("name") == name and s.get("namespace") == NS), None)


def test_a_stdio_server_becomes_a_deployment_services_and_a_route(world: World):
    world.cluster.apply([mcp_server("everything", NS, run=run_spec(), accessGroups=["ci"]),
                         mcp_key("ci", NS, secretName="ci-key", accessGroups=["ci"])])  # fmt: skip
    d = wait_until(lambda: get(world, "deployment", "everything-mcp"), 20, what="the Deployment")
    server = world.cluster.server("everything", NS)
    owner = d["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner.get("controller")) == (
        "McpServer", "everything", server["metadata"]["uid"], True,
    )  # fmt: skip
    assert d["spec"]["replicas"] == 3
    pod = d["spec"]["template"]["spec"]
    init = pod["initContainers"][0]
    assert init["image"] == BRIDGE_IMAGE and init["args"] == ["install", "/switchboard"], init
    c = pod["containers"][0]
    assert c["image"] == "registry.test/everything:1", "the server's image, unchanged"
    assert c["command"] == ["/switchboard/switchboard-stdio-bridge"]
    assert c["args"][c["args"].index("--") + 1:] == ["node", "/app/node_modules/.bin/mcp-server-everything", "stdio"]
    assert "--peers=everything-mcp-peers.default.svc:8080" in c["args"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False and c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    svc = wait_until(lambda: get(world, "service", "everything-mcp"), 10, what="the Service")
    assert svc["spec"]["ports"][0]["port"] == 8080 and svc["spec"]["selector"] == d["spec"]["selector"]["matchLabels"]
    peers = wait_until(lambda: get(world, "service", "everything-mcp-peers"), 10, what="the peers Service")
    assert peers["spec"]["clusterIP"] == "None"
    key = wait_until(lambda: world.cluster.secret_data("everything-mcp-bridge", NS), 10, what="the bridges' key")
    assert len(key.get("key", "")) == 64
    world.remember(key["key"])
    route = wait_until(lambda: snapshot_server(world, "everything"), 20, what="the server in the snapshot")
    assert route["url"] == "http://everything-mcp.default.svc:8080/mcp", route
    assert route.get("upstreamEra") == "byClient", route
    c, _ = world.wait_condition("mcpserver", "everything", NS, "Running", lambda c: c["reason"] == "Progressing", 20)
    assert c["message"].startswith("0/3 pods ready"), c

    fence = wait_until(lambda: get(world, "networkpolicy", "everything-mcp"), 10, what="the NetworkPolicy")
    owner = fence["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("McpServer", server["metadata"]["uid"]), owner
    spec = fence["spec"]
    own = d["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"] == {"matchLabels": own} and spec["policyTypes"] == ["Ingress", "Egress"], spec
    [ingress] = spec["ingress"]
    assert ingress["ports"] == [{"port": 8080, "protocol": "TCP"}], ingress
    sources = [(p.get("namespaceSelector", {}).get("matchLabels"), p["podSelector"]["matchLabels"]) for p in ingress["from"]]
    # k8s_world runs the operator with the defaults: the gateway ServiceAccount's namespace
    # (switchboard) and the operator's --namespace, with the chart's label names.
    assert sources == [
        ({"kubernetes.io/metadata.name": "switchboard"},
         {"app.kubernetes.io/name": "switchboard", "app.kubernetes.io/component": "gateway"}),
        ({"kubernetes.io/metadata.name": OPERATOR_NS},
         {"app.kubernetes.io/name": "switchboard", "app.kubernetes.io/component": "operator"}),
        (None, own),
    ], sources  # fmt: skip
    dns, peers_rule = spec["egress"]
    assert "to" not in dns and sorted((p["protocol"], p["port"]) for p in dns["ports"]) == [("TCP", 53), ("UDP", 53)], dns
    assert peers_rule == {"to": [{"podSelector": {"matchLabels": own}}], "ports": [{"port": 8080, "protocol": "TCP"}]}, peers_rule


def make_pod(world: World, name: str, status: dict) -> None:
    """A pod of the server's (by its labels), and the status a kubelet would write."""
    d = get(world, "deployment", "everything-mcp")
    labels = d["spec"]["template"]["metadata"]["labels"]
    world.cluster.apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"containers": [{"name": "server", "image": "registry.test/everything:1"}],
                 "automountServiceAccountToken": False},
    })  # fmt: skip
    world.cluster.kubectl("patch", "pod", name, "-n", NS, "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}))


def test_pod_failures_show_with_their_reason(world: World):
    world.cluster.kubectl("create", "serviceaccount", "default", "-n", NS, check=False)
    make_pod(world, "everything-mcp-a", {
        "phase": "Pending",
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [{"name": "server", "ready": False, "restartCount": 0, "image": "registry.test/everything:1", "imageID": "",
                               "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"registry.test/everything:1\""}}}],
    })  # fmt: skip
    c, waited = world.wait_condition("mcpserver", "everything", NS, "Running", lambda c: c["reason"] == "ImagePullBackOff", 15)
    assert "everything-mcp-a" in c["message"] and "registry.test/everything:1" in c["message"], c
    ready = condition(world.cluster.server("everything", NS), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ImagePullBackOff"), describe_conditions(world.cluster.server("everything", NS))
    print(f"\nImagePullBackOff in the McpServer's conditions {waited:.1f}s after the pod said so")

    world.cluster.kubectl("patch", "pod", "everything-mcp-a", "-n", NS, "--subresource=status", "--type=merge", "-p", json.dumps({"status": {
        "containerStatuses": [{"name": "server", "ready": False, "restartCount": 4, "image": "registry.test/everything:1", "imageID": "",
                               "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
                               "lastState": {"terminated": {"exitCode": 3, "reason": "Error"}}}]}}))  # fmt: skip
    c, _ = world.wait_condition("mcpserver", "everything", NS, "Running", lambda c: c["reason"] == "CrashLoopBackOff", 15)
    assert "exited with code 3" in c["message"], c
    status = world.cluster.server("everything", NS)["status"]
    assert (status.get("replicas"), status.get("readyReplicas")) == (1, 0), status

    # Ready pods: Running turns True once all three are.
    world.cluster.kubectl("delete", "pod", "everything-mcp-a", "-n", NS, "--wait=false")
    for p in ("a", "b", "c"):
        make_pod(world, f"everything-mcp-ok-{p}", {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})
    c, _ = world.wait_condition("mcpserver", "everything", NS, "Running", "True", 15)
    assert c["message"] == "3/3 pods ready", c


def test_replicas_changed_by_hand_are_put_back(world: World):
    world.cluster.kubectl("scale", "deployment", "everything-mcp", "-n", NS, "--replicas=1")
    wait_until(lambda: get(world, "deployment", "everything-mcp")["spec"]["replicas"] == 3, 15, what="the operator to restore 3 replicas")


def test_bad_run_specs_are_refused_by_name_and_nothing_else_is_lost(world: World):
    refused = world.cluster.apply(mcp_server("nocommand", NS, run={"image": "registry.test/x:1"}), check=False)
    assert refused.returncode != 0 and "spec.run.command is required" in refused.stderr, refused.stderr
    # Volumes are checked by the API server when the Deployment is applied, not by the CRD.
    bad_volume = run_spec(replicas=1, volumes=[{"name": "Not_A_Name", "emptyDir": {}}])
    world.cluster.apply(mcp_server("badvolume", NS, run=bad_volume, accessGroups=["ci"]))
    c, _ = world.wait_condition("mcpserver", "badvolume", NS, "Running", lambda c: c["reason"] == "WorkloadRefused", 20)
    assert "Not_A_Name" in c["message"] or "volumes" in c["message"], c
    # The other server's workload is untouched.
    assert get(world, "deployment", "everything-mcp")["spec"]["replicas"] == 3
    world.cluster.kubectl("delete", "mcpserver", "badvolume", "-n", NS)


def test_the_fence_goes_first_and_unmanaged_takes_it_away(world: World):
    declared = {"to": [{"ipBlock": {"cidr": "192.0.2.10/32"}}], "ports": [{"port": 443, "protocol": "TCP"}]}
    world.cluster.apply(mcp_server("fenced", NS, run=run_spec(replicas=1, network={"egress": [declared]}), accessGroups=["ci"]))
    fence = wait_until(lambda: get(world, "networkpolicy", "fenced-mcp"), 20, what="fenced's NetworkPolicy")
    assert fence["spec"]["egress"][-1] == declared, fence["spec"]["egress"]
    wait_until(lambda: get(world, "deployment", "fenced-mcp"), 20, what="fenced's Deployment")

    # An egress rule the API server refuses: named in Running, and no Deployment without its fence.
    bad = {"to": [{"ipBlock": {"cidr": "not-a-cidr"}}]}
    world.cluster.apply(mcp_server("badfence", NS, run=run_spec(replicas=1, network={"egress": [bad]}), accessGroups=["ci"]))
    c, _ = world.wait_condition("mcpserver", "badfence", NS, "Running", lambda c: c["reason"] == "WorkloadRefused", 20)
    assert "not-a-cidr" in c["message"] or "cidr" in c["message"], c
    assert get(world, "deployment", "badfence-mcp") is None, "a Deployment made without its fence"
    world.cluster.kubectl("delete", "mcpserver", "badfence", "-n", NS)

    # Unmanaged: the policy goes, the workload stays.
    world.cluster.apply(mcp_server("fenced", NS, run=run_spec(replicas=1, network={"policy": "Unmanaged"}), accessGroups=["ci"]))
    wait_until(lambda: get(world, "networkpolicy", "fenced-mcp") is None, 20, what="the NetworkPolicy to be deleted")
    assert get(world, "deployment", "fenced-mcp") is not None
    world.cluster.kubectl("delete", "mcpserver", "fenced", "-n", NS)


def test_a_run_replaced_by_a_url_takes_its_workload_away(world: World):
    world.cluster.apply(mcp_server("everything", NS, url=world.upstream.mcp_url, accessGroups=["ci"]))
    wait_until(lambda: get(world, "deployment", "everything-mcp") is None, 20, what="the Deployment to be deleted")
    wait_until(lambda: get(world, "service", "everything-mcp") is None and get(world, "service", "everything-mcp-peers") is None,
               10, what="the Services to be deleted")  # fmt: skip
    wait_until(lambda: get(world, "networkpolicy", "everything-mcp") is None, 10, what="the NetworkPolicy to be deleted")
    route = wait_until(lambda: (snapshot_server(world, "everything") or {}).get("url") == world.upstream.mcp_url and
                       snapshot_server(world, "everything"), 20, what="the route to the URL")  # fmt: skip
    assert "upstreamEra" not in route
