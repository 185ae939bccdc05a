"""Issue 11 acceptance 1, the chaos soak with the operator in it: the oracle and the load of
tests/e2e/chaos.py (two replicas behind a round-robin balancer; REST, both MCP eras with
streamed answers, listings; two keys of different scope; every answer classified) on a cluster,
where servers and keys are McpServers, McpKeys and Secrets, two operator replicas share the
lease and both gateways follow both. Faults, one at a time: the lease holder killed with
SIGKILL (and restarted; the fault lasts until a live replica holds the lease), McpServers
changed to a slow, 503, garbage or mid-stream-breaking variant and back (the fault lasts until
the change back has had time to reach the gateways), and the upstream frozen (SIGSTOP).

An operator failover must not cost a single call: no answer is explained by it. The gateways
keep serving the snapshot they have and follow whichever replica publishes next.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator

import chaos
import pytest
from chaos import Balancer, FaultWindows, count_panics, soak
from harness import wait_until
from k8s_fixtures import module_world
from k8s_world import World, assert_no_secret_leaks, bearer, kill, mcp_key, mcp_server, secret

DURATION_S = float(os.environ.get("SWITCHBOARD_K8S_CHAOS_SECONDS", "75"))
SERVERS = [f"s{i}" for i in range(6)]
LEASE_S = 4
# A change reaches the gateways through the API server, the operator and the stream: longer
# than a file reload, and a standby may be taking over.
K8S_SETTLE_S = 3.0
FAULTS = ("operator_kill", "slow", "status_5xx", "garbage", "stream_cut", "upstream_hang")


@pytest.fixture(scope="module")
def world(request, tmp_path_factory) -> Iterator[World]:
    with module_world(
        request, tmp_path_factory, "chaos", operators=("op-a", "op-b"), lease_duration=f"{LEASE_S}s"
    ) as w:
        yield w


class KubeChaosWorld(FaultWindows):
    """chaos.World's interface over a cluster: what the load and the oracle need."""

    def __init__(self, world: World, seed: int):
        self.world = world
        self.rng = random.Random(seed)
        self.tokens = {s: world.new_secret(f"chaos-{s}") for s in SERVERS}
        self.keys = {"all": world.new_secret("chaos-key-all"), "even": world.new_secret("chaos-key-even")}
        world.gateway_keys.update(self.keys.values())
        self.scope = {"all": set(SERVERS), "even": {s for s in SERVERS if int(s[1:]) % 2 == 0}}
        self.variants: dict[str, str] = {}
        super().__init__()
        world.cluster.apply(
            [secret(f"{s}-token", "default", {"token": t}) for s, t in self.tokens.items()]
            + [self.server(s) for s in SERVERS]
            + [secret(f"chaos-{k}", "default", {"key": v}) for k, v in self.keys.items()]
            + [mcp_key(k, "default", secretName=f"chaos-{k}", servers=sorted(self.scope[k])) for k in self.keys]
        )
        for s in SERVERS:
            world.kubectl_wait_ready(s, timeout=60)
        for k in self.keys.values():
            world.wait_key_served(k)
        ports = [int(gw.url.rsplit(":", 1)[1]) for gw in world.gateways.values()]
        self.balancer = Balancer(ports)

    def credential(self, server: str) -> str:
        return f"Bearer {self.tokens[server]}"

    def upstream_of(self, _server: str) -> int:
        return 0  # one upstream process serves every server here

    def server(self, name: str) -> dict:
        # The upstream checks the token's non-secret label only (a URL is not a secret and is
        # shown in the McpServer); the oracle checks the whole token in what the upstream saw.
        label = self.tokens[name].rsplit("-", 1)[0] + "-"
        options = f"name={name},require-prefix=authorization:Bearer%20{label}"
        if name in chaos.SSE_SERVERS:
            options += ",sse"
        if extra := self.variants.get(name):
            options += "," + extra
        url = f"{self.world.upstream.base}/v/{options}/mcp"
        return mcp_server(name, "default", url=url, timeout=f"{chaos.SERVER_TIMEOUT_S:.0f}s", auth=bearer(f"{name}-token"))

    def stop(self) -> None:
        self.balancer.stop()


class KubeInjector(chaos.Injector):
    """The faults of a cluster (chaos.Injector schedules them and keeps the log, the counts
    and the windows)."""

    KINDS = FAULTS
    PAUSE_S = (0.5, 1.5)
    HOLD_S = (1.0, 3.0)

    def inject(self, kind: str, hold: float) -> None:
        w, kube = self.world, self.world.world
        if kind == "operator_kill":
            holder = kube.cluster.lease_holder()
            assert holder in kube.operators, f"lease holder {holder!r}"
            window = self.open(kind, "operator")
            kill(kube.operators[holder])
            time.sleep(hold)
            kube.start_operator(holder)
            wait_until(
                lambda: kube.cluster.lease_holder() in kube.operators
                and kube.operators[kube.cluster.lease_holder()].alive(),
                4 * LEASE_S + 10,
                what="a live operator replica to hold the lease",
            )
            self.close(window)
        elif kind == "upstream_hang":
            window = self.open(kind, "upstream-0")
            pid = kube.upstream.proc.popen.pid
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(hold)
            finally:
                os.kill(pid, signal.SIGCONT)
            self.close(window)
        else:
            pool = sorted(chaos.SSE_SERVERS) if kind == "stream_cut" else SERVERS
            server = self.rng.choice(pool)
            variant = {"slow": "delay=1200", "status_5xx": "status=503", "garbage": "garbage", "stream_cut": "cut"}[kind]
            window = self.open(kind, server)
            w.variants[server] = variant
            kube.cluster.apply(w.server(server))
            time.sleep(hold)
            w.variants.pop(server, None)
            kube.cluster.apply(w.server(server))
            time.sleep(K8S_SETTLE_S)
            self.close(window)


def test_a_chaos_soak_with_operator_failovers_has_no_wrong_answer(world: World):
    seed = 12
    chaos_world = KubeChaosWorld(world, seed)
    stop = threading.Event()
    try:
        report = soak(
            chaos_world,
            lambda log: KubeInjector(chaos_world, stop, log),
            stop,
            DURATION_S,
            seed,
            clients=4,
            measured=(world.gateways["gw1"].proc.popen.pid, world.gateways["gw1"].url),
        )
    finally:
        chaos_world.stop()
    logs = [gw.proc.stderr_path for gw in world.gateways.values()]
    logs += [op.stderr_path for op in world.operators.values()]
    report.panics = count_panics(logs)
    print("\n" + report.text())
    print("faults, in order:\n  " + "\n  ".join(report.fault_log))
    assert not report.harness_errors, report.harness_errors
    assert report.faults.get("operator_kill", 0) >= 2, f"only {report.faults} faults injected"
    assert report.classes.get("correct", 0) > report.calls // 2, report.classes
    assert report.streamed > 10, f"only {report.streamed} streamed answers checked"
    # (no answer may be explained by a failover: the oracle never names the operator as a
    # call's target, so a call it broke is wrong)
    distinct = sorted({w.split(": ", 1)[-1][:160] for w in report.wrong})
    assert not report.wrong, f"{len(report.wrong)} wrong answers, {len(distinct)} kinds:\n" + "\n".join(distinct[:30])
    assert report.panics == 0
    assert_no_secret_leaks(world)
