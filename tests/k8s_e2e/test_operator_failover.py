"""Issue 5 acceptance 7: the operator can go away.

- Kill the operator (SIGKILL): both gateways keep serving every call (200 calls over ~5 s, no
  failure); a third replica started meanwhile serves from the snapshot file the operator keeps in
  its Secret; restart the operator with the same --identity: a change applied afterwards reaches
  every gateway.
- Two operator replicas (op-a, op-b; each gateway is given both URLs): kill the lease holder;
  the other takes the Lease (holderIdentity changes), calls keep succeeding throughout, and a
  change applied afterwards reaches both gateways (and its status is written by the new holder).

Lease duration 4 s (renewed every 4/3 s): a dead holder's lease is taken over within ~6 s.
Operators log JSON in this module (the other modules use text), so the leak grep covers both.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from k8s_fixtures import module_world
from harness import MODERN_VERSION, RawMcp, call_result_value, rest_call, wait_until
from k8s_world import (
    OPERATOR_NS,
    SNAPSHOT_SECRET,
    World,
    assert_no_secret_leaks,
    condition,
    demo_objects,
    kill,
    mcp_server,
)

LEASE_S = 4.0
TAKEOVER_BOUND_S = 2 * LEASE_S + 10  # expiry (second resolution) + a renew period + slack
CHANGE_BOUND_S = 15.0  # gateways reconnect with a backoff of at most 2 s


@pytest.fixture(scope="module")
def world(request, tmp_path_factory) -> Iterator[World]:
    with module_world(
        request,
        tmp_path_factory,
        "failover",
        operators=("op-a",),
        gateway_operators=("op-a", "op-b"),
        lease_duration=f"{LEASE_S:.0f}s",
        log_format="json",
    ) as w:
        w.cluster.apply(demo_objects(w))
        w.kubectl_wait_ready("demo", timeout=60)
        w.key = w.generated_key("ci-key")
        w.wait_key_served(w.key)
        # A legacy-era session opened before anything happens: it must survive the operator's
        # restart and the failover (the session key lives in the operator's Secret).
        with RawMcp(w.gateways["gw1"].mcp_url(), w.key, "legacy") as mcp:
            mcp.initialize()
            w.legacy_session = mcp.session_id
        yield w


def legacy_session_works(world: World) -> None:
    for name, gw in world.gateways.items():
        if not gw.proc.alive():
            continue
        with RawMcp(gw.mcp_url(), world.key, "legacy") as mcp:
            mcp.session_id = world.legacy_session
            r = mcp.call_tool("demo__add", {"a": 5, "b": 6})
            assert r.status == 200, f"{name}: the legacy session opened before was refused: HTTP {r.status} {r.raw[:300]!r}"
            assert call_result_value(r.result) == 11


class CallLoop:
    """Calls demo__add through both gateways, alternating (REST and MCP), until stopped."""

    def __init__(self, world: World, interval: float = 0.025):
        self.world = world
        self.interval = interval
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        gws = list(self.world.gateways.values())
        i = 0
        with httpx.Client(timeout=5) as http:
            while not self._stop.is_set():
                gw = gws[i % len(gws)]
                try:
                    if i % 2 == 0:
                        r = http.post(
                            f"{gw.url}/mcp-rest/tools/call",
                            json={"name": "demo__add", "arguments": {"a": i, "b": 1}},
                            headers={"Authorization": f"Bearer {self.world.key}"},
                        )
                        assert r.status_code == 200, f"HTTP {r.status_code} {r.text[:200]}"
                        assert call_result_value(r.json()) == i + 1
                    else:
                        with RawMcp(gw.mcp_url(), self.world.key, MODERN_VERSION, client=http) as mcp:
                            assert call_result_value(mcp.call_tool("demo__add", {"a": i, "b": 1}).result) == i + 1
                    self.ok += 1
                except Exception as exc:  # noqa: BLE001 - every failure is reported
                    self.failures.append(f"call {i} via {gw.url}: {exc!r}"[:300])
                i += 1
                time.sleep(self.interval)

    def __enter__(self) -> CallLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    @property
    def total(self) -> int:
        return self.ok + len(self.failures)


def served_everywhere(world: World, tool: str, bound: float) -> float:
    t0 = time.monotonic()
    for name, gw in world.gateways.items():
        wait_until(
            lambda gw=gw: rest_call(gw, world.key, tool, {"a": 1, "b": 2}).status_code == 200,
            bound,
            interval=0.05,
            what=f"gateway {name} to serve {tool}",
        )
    return time.monotonic() - t0


def test_gateways_serve_every_call_while_the_operator_is_down_and_changes_flow_after_restart(world: World):
    assert world.cluster.lease_holder() == "op-a"
    kill(world.operators["op-a"])
    time.sleep(0.2)
    calls = 0
    failures: list[str] = []
    t0 = time.monotonic()
    with CallLoop(world) as loop:
        while loop.total < 200 and time.monotonic() - t0 < 30:
            time.sleep(0.05)
    calls, failures = loop.total, loop.failures
    elapsed = time.monotonic() - t0
    print(f"\noperator down: {calls} calls in {elapsed:.1f}s through both gateways, {len(failures)} failed")
    assert calls >= 200, f"only {calls} calls in {elapsed:.0f}s"
    assert not failures, f"{len(failures)}/{calls} calls failed while the operator was down:\n" + "\n".join(failures[:10])
    for gw in world.gateways.values():
        assert httpx.get(f"{gw.internal_url}/readyz", timeout=5).status_code == 200, "a gateway stopped being ready"

    # A replica that starts while no operator answers serves from the snapshot the operator keeps
    # in its Secret (mounted as a file, as the chart does).
    snapshot = world.cluster.secret_data(SNAPSHOT_SECRET, OPERATOR_NS)
    assert snapshot and snapshot.get("snapshot.yaml"), f"Secret {OPERATOR_NS}/{SNAPSHOT_SECRET} has no snapshot.yaml"
    snapshot_file = world.workdir / "snapshot.yaml"
    snapshot_file.write_text(snapshot["snapshot.yaml"])
    gw3 = world.start_gateway("gw3", ["op-a", "op-b"], config=snapshot_file)
    wait_until(lambda: httpx.get(f"{gw3.internal_url}/readyz", timeout=2).status_code == 200, 10, what="gw3 ready from the file")
    r = rest_call(gw3, world.key, "demo__add", {"a": 40, "b": 2})
    assert r.status_code == 200 and call_result_value(r.json()) == 42, f"gw3 from the snapshot file: {r.status_code} {r.text[:300]}"

    # A change made while no operator runs waits for it...
    world.cluster.apply(mcp_server("after-restart", "default", url=world.upstream.mcp_url, timeout="2s", accessGroups=["ci"]))
    time.sleep(1.0)
    for gw in world.gateways.values():
        assert rest_call(gw, world.key, "after-restart__add", {"a": 1, "b": 2}).status_code == 404

    # ...and flows once the operator is back (same identity, same ports).
    t_restart = time.monotonic()
    world.start_operator("op-a")
    waited = served_everywhere(world, "after-restart__add", CHANGE_BOUND_S)
    print(f"after restart: the change reached both gateways {time.monotonic() - t_restart:.2f}s after op-a started")
    assert waited < CHANGE_BOUND_S
    world.kubectl_wait_ready("after-restart", timeout=30)
    # And a change applied now flows at the usual speed.
    t1 = time.monotonic()
    world.cluster.apply(mcp_server("after-restart-2", "default", url=world.upstream.mcp_url, timeout="2s", accessGroups=["ci"]))
    served_everywhere(world, "after-restart-2__add", CHANGE_BOUND_S)
    print(f"a later change: served {time.monotonic() - t1:.2f}s after kubectl apply was started")
    assert world.cluster.lease_holder() == "op-a"
    legacy_session_works(world)


def test_the_standby_takes_over_when_the_lease_holder_dies(world: World):
    world.start_operator("op-b")
    wait_until(lambda: world.operator_role("op-b") == "standby", 10, what="op-b to run as standby")
    assert world.operator_role("op-a") == "leader"
    assert world.cluster.lease_holder() == "op-a"
    # The standby refuses the stream (the gateways keep following op-a). Its serving
    # certificate may come a moment after its /readyz says standby (a TLS handshake it cannot
    # complete yet ends in access_denied): a bounded wait for the handshake, then the refusal.
    def stream_answer():
        return httpx.get(f"{world.operator_url('op-b')}/v1/snapshots/watch", timeout=5, verify=world.operator_tls())

    r = wait_until(stream_answer, 10, what="op-b to complete a TLS handshake")
    assert r.status_code == 503, r.status_code

    with CallLoop(world) as loop:
        kill(world.operators["op-a"])
        t0 = time.monotonic()
        holder = wait_until(
            lambda: (h := world.cluster.lease_holder()) != "op-a" and h, TAKEOVER_BOUND_S, interval=0.2,
            what="another replica to take the lease",
        )  # fmt: skip
        took = time.monotonic() - t0
        wait_until(lambda: world.operator_role("op-b") == "leader", 10, what="op-b to know it leads")
        print(f"\nlease: op-a -> {holder} {took:.1f}s after op-a was killed")
        assert holder == "op-b"

        # A change applied after the takeover reaches both gateways.
        t1 = time.monotonic()
        world.cluster.apply(mcp_server("after-failover", "default", url=world.upstream.mcp_url, timeout="2s", accessGroups=["ci"]))
        served_everywhere(world, "after-failover__add", CHANGE_BOUND_S)
        print(f"after failover: the change reached both gateways {time.monotonic() - t1:.2f}s after kubectl apply")
        time.sleep(0.5)
    print(f"calls during the failover: {loop.total}, failed {len(loop.failures)}")
    assert loop.total > 50
    assert not loop.failures, f"{len(loop.failures)} calls failed during failover:\n" + "\n".join(loop.failures[:10])

    # The new holder writes status: the new server becomes Ready and Programmed 2/2.
    world.kubectl_wait_ready("after-failover", timeout=30)
    n = sum(gw.proc.alive() for gw in world.gateways.values())
    wait_until(
        lambda: (c := condition(world.cluster.server("after-failover"), "Programmed")) and c["status"] == "True"
        and c["message"].startswith(f"{n}/{n} "),
        20,
        what=f"after-failover: Programmed {n}/{n} (written by op-b)",
    )  # fmt: skip
    # No config was lost: everything applied before the failover still routes.
    for tool in ("demo__add", "after-restart__add", "after-restart-2__add"):
        served_everywhere(world, tool, 5)
    legacy_session_works(world)


def test_zz_no_secret_in_logs_status_or_events(world: World):
    assert_no_secret_leaks(world)
