"""Issue 20 acceptance 3, on Kubernetes: an McpServer at an HTTPS upstream signed by a private CA.

- without the CA, Ready is False and its message says why (an unknown authority), never a URL;
- with the CA in a Secret that holds the wrong CA, still False; the Secret updated in place with
  the right CA is taken without restarting anything (operator and gateway PIDs unchanged): Ready
  turns True and calls go through the TLS front;
- the same CA from a ConfigMap serves as well; a ConfigMap that does not exist refuses the server
  (Accepted False, ConfigMapNotFound, naming spec.tls.caBundle).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import rest_call, wait_until
from k8s_fixtures import module_world
from k8s_world import World, assert_no_secret_leaks, mcp_key, mcp_server, secret

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from private_ca import PrivateCa  # noqa: E402
from tls_front import TlsFront  # noqa: E402


@pytest.fixture(scope="module")
def world(request, tmp_path_factory) -> Iterator[World]:
    with module_world(request, tmp_path_factory, "tls", probe_interval="2s") as w:
        yield w


def config_map(name: str, namespace: str, data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


def test_https_upstream_condition_names_the_cause_and_a_rotated_ca_is_taken(world: World, tmp_path):
    assert world.upstream is not None
    ca = PrivateCa("k8s-corp")
    front = TlsFront(world.upstream.base, tmp_path, ca.issue("localhost", dns=("localhost",), ips=("127.0.0.1",))).start()
    try:
        url = f"{front.url}/mcp"

        def server(**tls) -> dict:
            spec = {"url": url, "timeout": "2s", "accessGroups": ["tls"]}
            if tls:
                spec["tls"] = tls
            return mcp_server("corp", **spec)

        world.cluster.apply([server(), mcp_key("tls", secretName="tls-key", accessGroups=["tls"])])
        c, _ = world.wait_condition(
            "mcpserver", "corp", "default", "Ready",
            lambda c: c["status"] == "False" and "unknown authority" in c["message"], timeout=60,
        )  # fmt: skip
        assert url not in c["message"] and "127.0.0.1" not in c["message"], c
        assert front.tool_calls() == 0

        # The CA from a Secret that holds the wrong one: still refused.
        by_secret = {"caBundle": {"secretKeyRef": {"name": "corp-ca", "key": "ca.crt"}}}
        world.cluster.apply([secret("corp-ca", "default", {"ca.crt": PrivateCa("old").cert_pem.decode()}), server(**by_secret)])
        world.wait_condition(
            "mcpserver", "corp", "default", "Accepted", lambda c: c["status"] == "True", timeout=30
        )
        pids = {name: gw.proc.popen.pid for name, gw in world.gateways.items()}
        operator_pids = {name: op.popen.pid for name, op in world.operators.items()}
        world.wait_condition(
            "mcpserver", "corp", "default", "Ready",
            lambda c: c["status"] == "False" and "unknown authority" in c["message"], timeout=60,
        )  # fmt: skip

        # Rotated in place: the right CA into the same Secret.
        world.cluster.apply(secret("corp-ca", "default", {"ca.crt": ca.cert_pem.decode()}))
        world.kubectl_wait_ready("corp", timeout=60)
        key = world.generated_key("tls-key")
        world.wait_key_served(key)
        for gw in world.gateways.values():
            wait_until(
                lambda gw=gw: rest_call(gw, key, "corp__add", {"a": 2, "b": 3}).status_code == 200,
                30,
                what="a call through each gateway over TLS",
            )
        assert front.tool_calls() >= len(world.gateways)
        assert {name: gw.proc.popen.pid for name, gw in world.gateways.items()} == pids
        assert {name: op.popen.pid for name, op in world.operators.items()} == operator_pids

        # From a ConfigMap.
        by_config_map = {"caBundle": {"configMapKeyRef": {"name": "corp-bundle", "key": "ca.crt"}}}
        world.cluster.apply(server(**by_config_map))
        c, _ = world.wait_condition(
            "mcpserver", "corp", "default", "Accepted", lambda c: c["status"] == "False", timeout=30
        )
        assert c["reason"] == "ConfigMapNotFound" and "spec.tls.caBundle" in c["message"], c
        world.cluster.apply(config_map("corp-bundle", "default", {"ca.crt": ca.cert_pem.decode()}))
        world.wait_condition("mcpserver", "corp", "default", "Accepted", lambda c: c["status"] == "True", timeout=30)
        world.kubectl_wait_ready("corp", timeout=60)
        before = front.tool_calls()
        gw = next(iter(world.gateways.values()))
        wait_until(
            lambda: rest_call(gw, key, "corp__add", {"a": 2, "b": 3}).status_code == 200 and front.tool_calls() > before,
            30,
            what="a call with the CA from the ConfigMap",
        )
        assert_no_secret_leaks(world)
    finally:
        front.stop()
