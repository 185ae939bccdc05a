"""Issue 5 acceptance 5: status tells the truth.

- Ready turns False with a reason when the upstream stops answering, within the documented bound
  (README: "it turns False within the interval plus the server's timeout"; here probe interval
  2s + timeout 2s, plus a margin for the status write), and True again when it comes back on the
  same port.
- Programmed reports 2/2 gateway replicas, then 1/2 when one gateway process is killed (a replica
  that dropped its stream stays expected for --replica-expiry), and 2/2 again when it returns.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from k8s_fixtures import module_world
from harness import rest_call, wait_until
from k8s_world import (
    World,
    assert_no_secret_leaks,
    bearer,
    condition,
    demo_objects,
    describe_conditions,
    kill,
    mcp_server,
    secret,
)

PROBE_INTERVAL_S = 2.0
SERVER_TIMEOUT_S = 2.0  # demo_objects() sets timeout: 2s
MARGIN_S = 3.0
READY_BOUND_S = PROBE_INTERVAL_S + SERVER_TIMEOUT_S + MARGIN_S
# A killed gateway's stream is noticed when the operator next writes to it (at the latest the
# 15 s keep-alive); then the reconcile loop (woken, or every 5 s) rewrites Programmed.
PROGRAMMED_BOUND_S = 30.0
PROGRAMMED_RE = re.compile(r"^(\d+)/(\d+) gateway replicas serve generation (\d+)$")


@pytest.fixture(scope="module")
def world(request, tmp_path_factory) -> Iterator[World]:
    with module_world(request, tmp_path_factory, "status", probe_interval=f"{PROBE_INTERVAL_S:.0f}s") as w:
        w.cluster.apply(demo_objects(w))
        w.kubectl_wait_ready("demo", timeout=60)
        w.key = w.generated_key("ci-key")
        w.wait_key_served(w.key)
        yield w


def programmed(world: World, name: str, namespace: str = "default") -> tuple[str, int, int, int]:
    c = condition(world.cluster.server(name, namespace), "Programmed")
    assert c is not None
    m = PROGRAMMED_RE.match(c["message"])
    assert m, f"Programmed message {c['message']!r} is not 'N/M gateway replicas serve generation G'"
    return c["status"], int(m.group(1)), int(m.group(2)), int(m.group(3))


def _events(world: World, name: str) -> set[tuple[str, str]]:
    """(reason, type) of the events about one object in `default`, either events API."""
    items = world.cluster.get_json("events", "-n", "default", "--field-selector", f"involvedObject.name={name}")
    return {(e.get("reason", ""), e.get("type", "")) for e in items.get("items", [])}


def test_ready_turns_false_when_the_upstream_stops_and_true_when_it_returns(world: World):
    c, _ = world.wait_condition("mcpserver", "demo", "default", "Ready", "True", 10)
    assert c["reason"] == "UpstreamReady"

    world.stop_upstream()
    c, waited = world.wait_condition("mcpserver", "demo", "default", "Ready", "False", READY_BOUND_S + 2, interval=0.1)
    print(f"\nReady=False {waited:.2f}s after the upstream stopped (bound {READY_BOUND_S:.0f}s): {c['reason']}: {c['message']}")
    assert c["reason"] in ("UpstreamUnavailable", "UpstreamTimeout"), c
    assert c["message"], c
    assert waited <= READY_BOUND_S, f"Ready turned False after {waited:.1f}s, beyond the bound {READY_BOUND_S}s"
    row = world.cluster.kubectl("get", "mcpserver", "demo", "-n", "default", "--no-headers").stdout.split()
    assert row[1] == "False", row
    # The gateways say the same thing to callers.
    for gw in world.gateways.values():
        r = rest_call(gw, world.key, "demo__add", {"a": 1, "b": 1})
        assert r.status_code == 502 and "upstream_unavailable" in r.text, r.text
    # The event is named by the condition's reason (the cause), not by "Ready turned False".
    down_reason = c["reason"]
    wait_until(lambda: (down_reason, "Warning") in _events(world, "demo"), 10,
               what=f"a Warning event with reason {down_reason}")  # fmt: skip

    world.start_upstream()  # same port
    c, waited = world.wait_condition("mcpserver", "demo", "default", "Ready", "True", READY_BOUND_S + 2, interval=0.1)
    print(f"Ready=True {waited:.2f}s after the upstream came back")
    assert waited <= READY_BOUND_S, f"Ready turned True after {waited:.1f}s, beyond the bound {READY_BOUND_S}s"
    assert c["reason"] == "UpstreamReady"
    assert world.cluster.server("demo")["status"]["toolCount"] == 6
    wait_until(lambda: ("UpstreamReady", "Normal") in _events(world, "demo"), 10,
               what="a Normal event with reason UpstreamReady")  # fmt: skip
    for gw in world.gateways.values():
        wait_until(lambda gw=gw: rest_call(gw, world.key, "demo__add", {"a": 1, "b": 1}).status_code == 200, 10,
                   what="calls to succeed again")  # fmt: skip


def test_ready_reports_a_timeout_as_a_timeout(world: World):
    world.cluster.apply(
        mcp_server("stuck", "default", url=world.upstream.variant_url("hang=list"), timeout="1s", accessGroups=["ci"])
    )
    bound = PROBE_INTERVAL_S + 1.0 + MARGIN_S
    c, waited = world.wait_condition("mcpserver", "stuck", "default", "Ready", "False", bound + 5)
    print(f"\nstuck: Ready=False {waited:.2f}s after apply: {c['reason']}: {c['message']}")
    assert c["reason"] == "UpstreamTimeout", c
    assert "1s" in c["message"] or "1000" in c["message"], f"the message should name the budget: {c}"
    assert condition(world.cluster.server("stuck"), "Accepted")["status"] == "True"
    # Other servers unaffected.
    assert condition(world.cluster.server("demo"), "Ready")["status"] == "True"
    world.cluster.kubectl("delete", "mcpserver", "stuck", "-n", "default")


def test_ready_turns_false_when_the_upstream_refuses_the_credential(world: World):
    good, bad = world.new_secret("strict-good"), world.new_secret("strict-bad")
    url = world.upstream.variant_url(f"require=authorization:Bearer%20{good}")
    world.cluster.apply(
        [
            secret("strict-token", "default", {"token": good}),
            mcp_server("strict", "default", url=url, timeout="2s", accessGroups=["ci"], auth=bearer("strict-token")),
        ]
    )
    world.kubectl_wait_ready("strict", timeout=30)
    world.cluster.apply(secret("strict-token", "default", {"token": bad}))
    c, waited = world.wait_condition("mcpserver", "strict", "default", "Ready", "False", READY_BOUND_S + 2)
    print(f"\nstrict: Ready=False {waited:.2f}s after the Secret got a wrong token: {c['reason']}: {c['message']}")
    assert c["reason"] == "UpstreamAuthFailed", c
    assert good not in c["message"] and bad not in c["message"]
    world.cluster.apply(secret("strict-token", "default", {"token": good}))
    world.wait_condition("mcpserver", "strict", "default", "Ready", "True", READY_BOUND_S + 2)
    world.cluster.kubectl("delete", "mcpserver", "strict", "-n", "default")


def test_caller_credential_server_is_ready_unknown_depends_on_caller(world: World):
    world.cluster.apply(
        mcp_server("relay", "default", url=world.upstream.mcp_url, accessGroups=["ci"], auth={"type": "passthrough"})
    )
    # Unknown/Probing first, then Unknown/DependsOnCaller once the probe loop has looked at it.
    c, _ = world.wait_condition(
        "mcpserver", "relay", "default", "Ready", lambda c: c["reason"] == "DependsOnCaller", PROBE_INTERVAL_S + 10
    )
    assert c["status"] == "Unknown", c
    assert condition(world.cluster.server("relay"), "Accepted")["status"] == "True"
    world.cluster.kubectl("delete", "mcpserver", "relay", "-n", "default")


def test_steady_state_writes_no_status_and_no_events(world: World):
    """Probes run every 2 s; status is written and events published only when something changes
    (lastListed may move once a minute)."""
    world.wait_condition("mcpserver", "demo", "default", "Ready", "True", 10)
    time.sleep(PROBE_INTERVAL_S)

    def demo_events() -> int:
        out = world.cluster.get_json("events", "-n", "default", "--field-selector", "involvedObject.name=demo")
        return len(out["items"])

    events_before = demo_events()
    versions = set()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3 * PROBE_INTERVAL_S + 1:
        versions.add(world.cluster.server("demo")["metadata"]["resourceVersion"])
        time.sleep(0.25)
    assert len(versions) <= 2, f"McpServer demo was rewritten {len(versions) - 1} times in {3 * PROBE_INTERVAL_S + 1:.0f}s of steady state"
    assert demo_events() == events_before, "events were published without a transition"


def test_programmed_counts_replicas_and_a_killed_gateway(world: World):
    wait_until(lambda: programmed(world, "demo")[:3] == ("True", 2, 2), 15, what="Programmed 2/2")
    status, serving, known, generation = programmed(world, "demo")
    print(f"\nbefore: Programmed {status} {serving}/{known} generation {generation}")

    kill(world.gateways["gw2"].proc)
    t0 = time.monotonic()
    try:
        wait_until(lambda: programmed(world, "demo")[1:3] == (1, 2), PROGRAMMED_BOUND_S, interval=0.2,
                   what="Programmed to say 1/2")  # fmt: skip
    except AssertionError:
        raise AssertionError(
            f"Programmed still says {describe_conditions(world.cluster.server('demo'))} "
            f"{PROGRAMMED_BOUND_S}s after gateway gw2 was killed"
        ) from None
    waited = time.monotonic() - t0
    status, serving, known, _ = programmed(world, "demo")
    c = condition(world.cluster.server("demo"), "Programmed")
    print(f"after kill: Programmed {status} ({c['reason']}) {c['message']!r}, {waited:.1f}s after the kill")
    assert status == "False" and c["reason"] == "Pending", c
    key_ready = condition(world.cluster.key("ci"), "Ready")
    wait_until(lambda: condition(world.cluster.key("ci"), "Ready")["message"].startswith("1/2"), 10,
               what="the McpKey's Ready to count 1/2")  # fmt: skip
    key_ready = condition(world.cluster.key("ci"), "Ready")
    assert key_ready["status"] == "False", key_ready

    # A change made meanwhile is served by the one replica left, and status says so.
    world.cluster.apply(mcp_server("later", "default", url=world.upstream.mcp_url, timeout="2s", accessGroups=["ci"]))
    wait_until(lambda: programmed(world, "later")[1:3] == (1, 2), 15, what="later: Programmed 1/2")
    gw1 = world.gateways["gw1"]
    wait_until(lambda: rest_call(gw1, world.key, "later__add", {"a": 1, "b": 1}).status_code == 200, 10,
               what="gw1 to serve the new server")  # fmt: skip

    # The replica returns (same name): 2/2 again, for both servers.
    world.start_gateway("gw2", ["op-a"])
    for name in ("demo", "later"):
        wait_until(lambda name=name: programmed(world, name)[:3] == ("True", 2, 2), 15, what=f"{name}: Programmed 2/2 again")
    wait_until(lambda: condition(world.cluster.key("ci"), "Ready")["status"] == "True", 10, what="the key Ready again")


def test_zz_no_secret_in_logs_status_or_events(world: World):
    assert_no_secret_leaks(world)
