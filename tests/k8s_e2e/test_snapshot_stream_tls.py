"""Issue 11 acceptance 4: the snapshot stream (which carries upstream credentials and the session
key) is TLS, verified by the gateways against the operator's own CA, and the CA rotates under
running gateways without interrupting them.

The operator runs as the chart runs it (`--delivery-ca-secret`, `--delivery-trust-configmap`),
with lives shortened so that rotations happen within the test: serving certificates live 4 s
(a new one every 2 s), the CA 24 s (a successor is trusted with 8 s left and signs 3 s later).
The world copies the trust ConfigMap into the gateways' CA file as the kubelet would.
"""

from __future__ import annotations

import contextlib
import copy
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from harness import rest_call, wait_until
from k8s_fixtures import module_world
from k8s_world import (
    DELIVERY_CA_SECRET,
    OPERATOR_NS,
    World,
    assert_no_secret_leaks,
    demo_objects,
)

CA_LIFE_S = 24
ROTATION_ARGS = (
    "--delivery-cert-validity", "4s",
    "--delivery-ca-validity", f"{CA_LIFE_S}s",
    "--delivery-ca-propagation", "3s",
)  # fmt: skip
CHANGE_BOUND_S = 10.0


@pytest.fixture(scope="module")
def world(request, tmp_path_factory) -> Iterator[World]:
    with module_world(request, tmp_path_factory, "tls", operator_args=ROTATION_ARGS) as w:
        w.demo = demo_objects(w)
        w.cluster.apply(w.demo)
        w.kubectl_wait_ready("demo", timeout=60)
        w.key = w.generated_key("ci-key")
        w.wait_key_served(w.key)
        yield w


def operator_address(world: World) -> tuple[str, int]:
    host, _, port = world.operator_url("op-a").removeprefix("https://").rpartition(":")
    return host, int(port)


def stream_unavailable_lines(world: World) -> int:
    return sum(
        gw.proc.stderr_path.read_text(errors="replace").count("snapshot stream unavailable")
        for gw in world.gateways.values()
    )


def test_plain_http_and_other_cas_get_nothing(world: World):
    host, port = operator_address(world)
    # Plain HTTP: the connection closes without an HTTP answer.
    with socket.create_connection((host, port), timeout=5) as raw:
        raw.sendall(b"GET /v1/snapshots/watch HTTP/1.1\r\nhost: x\r\n\r\n")
        got = b""
        with contextlib.suppress(OSError):
            while chunk := raw.recv(4096):
                got += chunk
    assert b"HTTP/" not in got, f"plain HTTP got an answer: {got[:200]!r}"
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://{host}:{port}/v1/snapshots/watch", timeout=5)

    # A real CA, but not the operator's (the cluster's): the handshake fails.
    other_ca = ssl.create_default_context(cafile=world.cluster.env["SWITCHBOARD_K8S_CA"])
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"https://{host}:{port}/v1/snapshots/watch", timeout=5, verify=other_ca)

    # Control: with the operator's CA the TLS works and the stream still wants a gateway's token.
    r = httpx.get(f"https://{host}:{port}/v1/snapshots/watch", timeout=5, verify=world.operator_tls())
    assert r.status_code == 401, r.status_code

    # A gateway given the wrong CA never loads a snapshot, and says why.
    gw = world.start_gateway("gw-wrong-ca", config=None, operator_ca=Path(world.cluster.env["SWITCHBOARD_K8S_CA"]))
    try:
        time.sleep(4)
        assert httpx.get(f"{gw.internal_url}/readyz", timeout=2).status_code == 503
        log = gw.proc.stderr_path.read_text(errors="replace")
        assert "UnknownIssuer" in log, log[-2000:]
    finally:
        gw.proc.stop()
        del world.gateways["gw-wrong-ca"]


def test_ca_rotation_interrupts_no_gateway(world: World):
    unavailable_before = stream_unavailable_lines(world)
    server = copy.deepcopy(world.demo[1])
    cas: list[str] = []
    changes = 0
    calls = 0
    t0 = time.monotonic()
    # Two CA lives: at least two rotations (introduce + promote) while changes keep flowing.
    while time.monotonic() - t0 < 2.5 * CA_LIFE_S:
        data = world.cluster.secret_data(DELIVERY_CA_SECRET, OPERATOR_NS) or {}
        world.remember(data.get("ca.key", ""), data.get("next-ca.key", ""))
        if data.get("ca.crt") and (not cas or cas[-1] != data["ca.crt"]):
            cas.append(data["ca.crt"])
        generations = {name: world.gateway_generation(gw) or 0 for name, gw in world.gateways.items()}
        changes += 1
        server["spec"]["timeout"] = f"{2 + changes % 7}s"
        world.cluster.api_apply(server)
        for name, gw in world.gateways.items():
            wait_until(
                lambda gw=gw, name=name: (world.gateway_generation(gw) or 0) > generations[name],
                CHANGE_BOUND_S,
                interval=0.05,
                what=f"gateway {name} to apply change {changes} (CA rotations so far: {len(cas) - 1})",
            )
            r = rest_call(gw, world.key, "demo__add", {"a": changes, "b": 1})
            assert r.status_code == 200, f"{name}: HTTP {r.status_code} {r.text[:200]}"
            calls += 1
        time.sleep(1)
    elapsed = time.monotonic() - t0
    rotations = len(cas) - 1
    unavailable = stream_unavailable_lines(world) - unavailable_before
    print(
        f"\nCA rotation: {rotations} rotations in {elapsed:.0f}s; {changes} changes reached both gateways "
        f"(bound {CHANGE_BOUND_S:.0f}s each), {calls} calls answered, gateway stream interruptions: {unavailable}; "
        f"trust bundle copied to the gateways' file {world.trust_sync.copies if world.trust_sync else 0} times"
    )
    assert rotations >= 2, f"only {rotations} CA rotations in {elapsed:.0f}s"
    assert unavailable == 0, "a gateway lost its snapshot stream during a rotation"

    # A gateway that connects now (a certificate from the newest CA) loads at once.
    t1 = time.monotonic()
    world.start_gateway("gw-late")
    world.wait_gateways_ready(30)
    print(f"a gateway started after the rotations was Ready in {time.monotonic() - t1:.1f}s")


def test_no_secret_or_key_in_logs(world: World):
    data = world.cluster.secret_data(DELIVERY_CA_SECRET, OPERATOR_NS) or {}
    assert data.get("ca.key"), "the CA Secret holds the CA key"
    world.remember(data["ca.key"])
    assert_no_secret_leaks(world)
