"""Issue 11 item 5: `--secret-selector` (chart `operator.secretSelector`) scopes the operator's
Secret watch to labelled Secrets, so a cluster's other Secrets cost it nothing.

- A credential Secret without the label is not seen: the McpServer says SecretNotFound and the
  message names the selector. Labelled, it is served.
- The operator's own Secrets (generated keys, the snapshot) are seen without the label.
- 40 unlabelled Secrets of 256 KiB (10 MiB) are not cached (one named as a credential is not
  found); the operator's RSS before and after is printed.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator

import pytest
from harness import rest_call
from k8s_fixtures import module_world
from k8s_world import World, bearer, demo_objects, mcp_server

LABEL = "switchboard.dev/credential"


@pytest.fixture(scope="module")
def world(request, tmp_path_factory) -> Iterator[World]:
    with module_world(request, tmp_path_factory, "selector", operator_args=("--secret-selector", f"{LABEL}=true")) as w:
        yield w


def test_only_labelled_secrets_are_seen_and_the_rest_cost_nothing(world: World):
    world.cluster.apply(demo_objects(world))
    c, _ = world.wait_condition("mcpserver", "demo", "default", "Accepted", "False", 30)
    assert c["reason"] == "SecretNotFound", c
    assert f"only sees Secrets labelled {LABEL}=true" in c["message"], c

    world.cluster.kubectl("label", "secret", "demo-upstream", "-n", "default", f"{LABEL}=true")
    world.kubectl_wait_ready("demo", timeout=30)
    # The generated key's Secret carries no such label: the operator's own are watched besides.
    key = world.generated_key("ci-key")
    world.wait_key_served(key)
    for gw in world.gateways.values():
        r = rest_call(gw, key, "demo__add", {"a": 2, "b": 3})
        assert r.status_code == 200, r.text

    before = world.operator_rss_kib()
    blob = world.workdir / "unlabelled"
    blob.write_bytes(base64.b64encode(os.urandom(192 * 1024)))
    for i in range(40):
        world.cluster.kubectl("create", "secret", "generic", f"unrelated-{i}", "-n", "default", f"--from-file=data={blob}")
    time.sleep(2)
    after = world.operator_rss_kib()
    print(f"\noperator RSS {before} KiB -> {after} KiB after 40 unlabelled Secrets (10 MiB) were created")
    # (the figure is printed, not asserted: memory is for benchmarks; what is asserted is that
    # an unlabelled Secret is not in the operator's cache at all)
    world.cluster.apply(
        mcp_server("unrelated", "default", url=world.upstream.mcp_url, accessGroups=["ci"], auth=bearer("unrelated-0", "data"))
    )
    c, _ = world.wait_condition("mcpserver", "unrelated", "default", "Accepted", "False", 15)
    assert c["reason"] == "SecretNotFound", c
    for gw in world.gateways.values():
        assert rest_call(gw, key, "demo__add", {"a": 2, "b": 3}).status_code == 200
