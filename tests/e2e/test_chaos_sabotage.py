"""The chaos oracle's own checks (issue 20 item 7): it must be able to say "wrong".

- On paper: for every kind of fault, the errors it explains, and only on the server (its
  upstream process, its token endpoint, the replica a connection went to) it is on. An
  `upstream_auth_failed`, which is how a credential sent to the wrong server shows up, is
  explained by nothing but a credential fault on that very server.
- For real: a short soak with `--sabotage` (chaos.SABOTAGES: s0 is given s1's secret, s2 s6's
  OAuth client, s4 s3's secret behind an upstream that checks nothing), whose faults start with
  chaos.SABOTAGE_PLAN (a credential fault on s1, s0 made slow, s6's token endpoint down). The
  oracle must report wrong answers on exactly the sabotaged servers, including while faults
  are in force that do not explain them.
"""

from __future__ import annotations

import os
import re
import threading
import time
from types import SimpleNamespace

import httpx
import pytest
from chaos import FAULT_KINDS, PRODUCES, SABOTAGE_PLAN, SABOTAGES, SETTLE_S, Client, FaultWindow, FaultWindows, run

DURATION_S = float(os.environ.get("SWITCHBOARD_CHAOS_SABOTAGE_SECONDS", "30"))


class PaperWorld(FaultWindows):
    """What the oracle asks of a world, without processes: servers s0-s6 on upstreams
    upstream-0..2 (s{i} on upstream-{i % 3}), s6 on the token endpoint "idp", and a balancer
    that sent local port 1 to gw-a and port 2 to gw-b."""

    scope = {"all": {f"s{i}" for i in range(7)}}

    def __init__(self) -> None:
        super().__init__()
        routes = {1: "gw-a", 2: "gw-b"}
        self.balancer = SimpleNamespace(port=9, replica_of=lambda port, _at: routes.get(port))

    def upstream_of(self, server: str) -> int:
        return int(server[1:]) % 3


# (fault kind, its target, what the client saw, the server called, the verdict)
CASES = [
    # auth failures: only a credential fault on that very server
    ("credential_revoked", "s0", "auth", "s0", "documented"),
    ("credential_revoked", "s1", "auth", "s0", "wrong"),
    ("upstream_crash", "upstream-0", "auth", "s0", "wrong"),
    ("upstream_hang", "upstream-0", "auth", "s0", "wrong"),
    ("status_5xx", "s0", "auth", "s0", "wrong"),
    ("slow", "s0", "auth", "s0", "wrong"),
    ("token_endpoint_down", "idp", "auth", "s6", "wrong"),
    ("gateway_kill", "gw-b", "auth", "s0", "wrong"),
    # unavailable: the server's upstream process down, its 503/garbage/cut, s6's token endpoint
    ("upstream_crash", "upstream-0", "unavailable", "s3", "documented"),
    ("upstream_crash", "upstream-1", "unavailable", "s3", "wrong"),
    ("status_5xx", "s3", "unavailable", "s3", "documented"),
    ("status_5xx", "s4", "unavailable", "s3", "wrong"),
    ("garbage", "s3", "unavailable", "s3", "documented"),
    ("stream_cut", "s2", "unavailable", "s2", "documented"),
    ("stream_cut", "s5", "unavailable", "s2", "wrong"),
    ("token_endpoint_down", "idp", "unavailable", "s6", "documented"),
    ("token_endpoint_down", "idp", "unavailable", "s2", "wrong"),
    ("upstream_hang", "upstream-0", "unavailable", "s3", "wrong"),
    ("slow", "s3", "unavailable", "s3", "wrong"),
    ("credential_revoked", "s3", "unavailable", "s3", "wrong"),
    # timeouts: the server's upstream frozen, or the server slow
    ("upstream_hang", "upstream-2", "timeout", "s5", "documented"),
    ("upstream_hang", "upstream-1", "timeout", "s5", "wrong"),
    ("slow", "s5", "timeout", "s5", "documented"),
    ("upstream_crash", "upstream-2", "timeout", "s5", "wrong"),
    ("status_5xx", "s5", "timeout", "s5", "wrong"),
    # a failover of the cluster profile's operator explains nothing
    ("operator_kill", "operator", "unavailable", "s0", "wrong"),
    ("operator_kill", "operator", "timeout", "s0", "wrong"),
]


def _client(world: PaperWorld) -> Client:
    return Client(world, threading.Event(), [], seed=0)  # type: ignore[arg-type]


def test_the_table_covers_every_fault_the_soak_injects():
    # (invalid_config is refused by the gateway: it opens no window and explains nothing)
    assert set(PRODUCES) == set(FAULT_KINDS) - {"invalid_config"}, sorted(PRODUCES)


@pytest.mark.parametrize(("kind", "target", "symptom", "server", "verdict"), CASES)
def test_an_error_is_explained_only_by_a_fault_that_produces_it_on_that_server(kind, target, symptom, server, verdict):
    world = PaperWorld()
    client = _client(world)
    now = time.monotonic()
    world.faults.append(FaultWindow(kind, target, now - 1.0))
    got, detail = client.explain(symptom, server, now, f"a {symptom} error")
    assert got == verdict, f"{symptom} on {server} under {kind} on {target}: {got}, not {verdict} ({detail})"
    if verdict == "wrong":
        assert f"in force: {kind} on {target}" in detail, detail


def test_a_fault_over_for_longer_than_the_settling_time_explains_nothing():
    world = PaperWorld()
    client = _client(world)
    now = time.monotonic()
    world.faults.append(FaultWindow("upstream_crash", "upstream-0", now - 10, now - SETTLE_S - 1))
    assert client.explain("unavailable", "s0", now, "x")[0] == "wrong"
    world.faults.append(FaultWindow("upstream_crash", "upstream-0", now - 10, now - SETTLE_S / 2))
    assert client.explain("unavailable", "s0", now, "x")[0] == "documented"


def test_an_error_naming_another_server_is_wrong_even_under_its_fault():
    world = PaperWorld()
    client = _client(world)
    now = time.monotonic()
    world.faults.append(FaultWindow("upstream_crash", "upstream-0", now - 1.0))
    verdict, detail = client.explain_error("unavailable", "s0", now, "JSON-RPC -32002", "s3")
    assert verdict == "wrong" and "names server 's3'" in detail, detail
    assert client.explain_error("unavailable", "s0", now, "JSON-RPC -32002", "s0")[0] == "documented"
    # (from the operator, server ids are namespace/name)
    assert client.explain_error("unavailable", "s0", now, "JSON-RPC -32002", "default/s0")[0] == "documented"


def test_a_replica_kill_explains_connection_errors_only_on_connections_to_that_replica():
    world = PaperWorld()
    client = _client(world)
    now = time.monotonic()
    world.faults.append(FaultWindow("gateway_kill", "gw-b", now - 1.0))
    client.connections.opened[:] = [(2, now)]
    verdict, detail = client.explain_transport(httpx.ReadError("reset"), "s0", now)
    assert verdict == "documented" and "via gw-b" in detail, detail
    client.connections.opened[:] = [(2, now), (1, now)]  # (the last one failed: gw-a's)
    verdict, detail = client.explain_transport(httpx.ReadError("reset"), "s0", now)
    assert verdict == "wrong" and "via gw-a" in detail, detail
    client.connections.opened[:] = [(3, now)]  # a connection the balancer never routed
    assert client.explain_transport(httpx.ReadError("reset"), "s0", now)[0] == "wrong"
    world.faults.clear()
    client.connections.opened[:] = [(2, now)]
    assert client.explain_transport(httpx.ReadError("reset"), "s0", now)[0] == "wrong"


def _on(detail: str, server: str) -> bool:
    """Whether a wrong answer's detail ("<time> <kind> key=<key> server=<server>: <what>") is
    about `server`: a call to it, or a listing without it."""
    call, _, what = detail.partition(": ")
    if " listing " in call:
        return re.search(rf"\bwithout {server}\b", what) is not None
    return call.endswith(f" server={server}")


def test_a_sabotaged_soak_is_reported_wrong(tmp_path):
    report = run(DURATION_S, seed=20, workdir=tmp_path, sabotage=True)
    print("\n" + report.text())
    print("faults, in order:\n  " + "\n  ".join(report.fault_log))
    assert not report.harness_errors, report.harness_errors
    assert report.first_round_done, "the plan and every kind of fault were not all injected"
    assert not report.faults_without_calls, report.faults_without_calls
    wrong = report.wrong
    print(f"wrong: {len(wrong)} of {report.calls} calls")
    assert len(wrong) > 0, "the oracle found nothing wrong in a sabotaged run"

    victims = {victim for victim, _ in SABOTAGES.values()}
    elsewhere = [w for w in wrong if not any(_on(w, v) for v in victims)]
    assert not elsewhere, "wrong answers on servers nobody sabotaged:\n" + "\n".join(elsewhere[:20])
    auth = ("JSON-RPC -32003", "upstream_auth_failed")
    for kind, (victim, source) in SABOTAGES.items():
        mine = [w for w in wrong if _on(w, victim)]
        assert mine, f"sabotage {kind} ({victim} given {source}'s credential) was never reported wrong"
        if kind == "leak":
            assert any(f"saw the credential of ['{source}']" in w for w in mine), mine[:10]
        else:
            assert any(a in w for w in mine for a in auth), mine[:10]

    # Not excused by a fault in force that does not produce it: a credential fault on another
    # server, a fault on the server itself of another kind, another server's token endpoint.
    in_force = {
        "credential fault on s1": [w for w in wrong if _on(w, "s0") and "credential_revoked on s1" in w],
        "slow on s0 itself": [w for w in wrong if _on(w, "s0") and "slow on s0" in w],
        "s6's token endpoint down": [w for w in wrong if _on(w, "s2") and "token_endpoint_down on idp" in w],
    }
    for what, found in in_force.items():
        print(f"wrong while {what} was in force: {len(found)}" + (f", e.g. {found[0]}" if found else ""))
    assert [kind for kind, _ in SABOTAGE_PLAN] == ["credential_revoked", "slow", "token_endpoint_down"]
    assert all(in_force.values()), {k: len(v) for k, v in in_force.items()}
