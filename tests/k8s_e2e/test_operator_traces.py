"""Issue 22 acceptance 1, the operator's part: its reconcile passes and snapshot pushes as
OpenTelemetry traces in a real Jaeger v2 (tests/setup-jaeger.sh), read back through the query
API, beside the gateways' request traces in the same backend.

- Applying an McpServer and its key makes the operator publish a new generation: a `reconcile`
  trace whose child `snapshot push` carries exactly the generation the gateways then serve, from
  the lease holder (`switchboard.leader`, `switchboard.stored`).
- The control: passes that change nothing (the loop looks again every few seconds) are
  `reconcile` traces without a push, so the push is not a span written on every pass; and the
  newest push in the backend is the generation the gateways serve.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness import MODERN_VERSION, RawMcp, wait_until
from jaeger import GATEWAY_SERVICE, OPERATOR_SERVICE
from jaeger import start as start_jaeger
from k8s_fixtures import module_world
from k8s_world import World, demo_objects


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory):
    j = start_jaeger(tmp_path_factory.mktemp("jaeger"))
    yield j
    j.stop()


@pytest.fixture(scope="module")
def world(request, tmp_path_factory, jaeger) -> Iterator[World]:
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_grpc, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    with module_world(request, tmp_path_factory, "traces", operator_env=otel, gateway_env=otel) as w:
        yield w


def pushes(traces, generation: int | None = None) -> list:
    found = []
    for t in traces:
        for s in t.spans:
            if s.name == "snapshot push" and (generation is None or s.attributes.get("switchboard.generation") == generation):
                found.append((t, s))
    return found


def test_a_reconcile_pass_that_publishes_is_traced_with_its_push(world: World, jaeger):
    world.cluster.apply(demo_objects(world))
    world.kubectl_wait_ready("demo", timeout=30)
    key = world.generated_key("ci-key")
    world.wait_key_served(key)
    generations = {name: world.gateway_generation(gw) for name, gw in world.gateways.items()}
    assert len(set(generations.values())) == 1 and None not in generations.values(), generations
    generation = next(iter(generations.values()))

    traces = jaeger.wait_for_traces(OPERATOR_SERVICE, lambda ts: pushes(ts, generation), operation="reconcile", limit=1000)
    [(trace, push)] = pushes(traces, generation)
    reconcile = trace.one("reconcile")
    assert reconcile.is_parent_of(push), trace.describe()
    assert reconcile.parent_id is None, f"a pass is a trace of its own: {trace.describe()}"
    assert reconcile.attributes.get("switchboard.leader") is True, reconcile.attributes
    assert push.attributes.get("switchboard.stored") is True, push.attributes
    assert reconcile.service == OPERATOR_SERVICE and reconcile.resource.get("service.name") == OPERATOR_SERVICE

    # The gateways export to the same backend: a call through one is a gateway trace.
    gw = next(iter(world.gateways.values()))
    trace_id = "5a" * 16
    reply = RawMcp(gw.mcp_url(), key, MODERN_VERSION, headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}).call_tool(
        "demo__add", {"a": 1, "b": 2}
    )
    assert reply.status == 200 and not reply.result.get("isError"), reply.raw[:300]
    call = jaeger.wait_for_trace(trace_id, lambda spans: any(s.kind == "client" for s in spans))
    assert {s.service for s in call.spans} == {GATEWAY_SERVICE}, call.describe()
    assert OPERATOR_SERVICE in jaeger.services() and GATEWAY_SERVICE in jaeger.services()


def test_control_passes_that_change_nothing_push_nothing(world: World, jaeger):
    # The loop looks again at least every 5 s; without a change those passes publish nothing.
    def idle_passes(traces):
        return [t for t in traces if t.named("reconcile") and not pushes([t])]

    traces = jaeger.wait_for_traces(
        OPERATOR_SERVICE, lambda ts: len(idle_passes(ts)) >= 2 and pushes(ts), operation="reconcile", timeout=30, limit=1000
    )
    published = [s.attributes.get("switchboard.generation") for _, s in pushes(traces)]
    assert all(isinstance(g, int) for g in published), published
    assert len(published) == len(set(published)), f"each generation is pushed once: {sorted(published)}"
    newest = max(published)
    wait_until(lambda: {world.gateway_generation(gw) for gw in world.gateways.values()} == {newest}, 10,
               what=f"the gateways to serve generation {newest}, the newest push traced")  # fmt: skip
