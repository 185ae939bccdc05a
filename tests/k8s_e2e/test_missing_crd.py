"""Issue 25: an operator newer than the cluster's CRDs (a kind's CRD not applied yet, the usual
mistake of a `helm upgrade` that does not upgrade CRDs) serves the kinds that exist, and takes the
missing kind up once its CRD is applied.

- The McpVirtualServer CRD is deleted and the operator restarted: a new McpServer is accepted
  and served (before the fix, the operator waited forever for the missing kind's first listing
  and never reconciled anything: this test then fails at that step).
- The CRD applied again, an McpVirtualServer over that server is accepted and served.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness import rest_call
from k8s_fixtures import module_world
from k8s_world import CRDS_DIR, World, demo_objects, kill, mcp_server, mcp_virtual_server

CRD = "mcpvirtualservers.switchboard.dev"


@pytest.fixture(scope="module")
def world(request, tmp_path_factory) -> Iterator[World]:
    with module_world(request, tmp_path_factory, "missing-crd") as w:
        yield w


def test_a_missing_crd_leaves_the_other_kinds_served_until_it_is_applied(world: World):
    world.cluster.apply(demo_objects(world))
    world.kubectl_wait_ready("demo", timeout=30)
    key = world.generated_key("ci-key")
    world.wait_key_served(key)

    kill(world.operators["op-a"])
    world.cluster.kubectl("delete", "crd", CRD, "--wait=true", timeout=60)
    world.start_operator("op-a")
    # A change only a reconciling operator can act on.
    world.cluster.apply(mcp_server("late", "default", url=world.upstream.mcp_url, timeout="2s", accessGroups=["ci"]))
    world.wait_condition("mcpserver", "late", "default", "Accepted", "True", 40)
    # (the gateways reconnect to the restarted operator with their backoff). Both of them: this
    # world has no gateway pods for the operator to expect, so until the second reconnects,
    # Programmed truthfully says 1/1 of the replicas it knows.
    world.wait_condition(
        "mcpserver", "late", "default", "Programmed",
        lambda c: c.get("status") == "True" and c.get("message", "").startswith(f"{len(world.gateways)}/{len(world.gateways)} "),
        60,
    )  # fmt: skip
    for gw in world.gateways.values():
        r = rest_call(gw, key, "late__add", {"a": 1, "b": 2})
        assert r.status_code == 200, r.text
    log = world.operators["op-a"].stderr_path.read_text()
    assert f"{CRD}" in log and "CRD is not installed" in log, "the operator did not say which CRD is missing"

    world.cluster.kubectl("apply", "--server-side", "-f", str(CRDS_DIR / f"switchboard.dev_{CRD.split('.')[0]}.yaml"))
    world.cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{CRD}")
    world.cluster.apply(mcp_virtual_server("view", "default", accessGroups=["ci"], sources=[{"server": "late"}]))
    # (the watch of the kind retries with a backoff of up to about half a minute)
    world.wait_condition("mcpvirtualserver", "view", "default", "Accepted", "True", 60)
    world.wait_condition("mcpvirtualserver", "view", "default", "Programmed", "True", 30)
