"""Acceptance 3 of the one-node cluster: a client pod calls the gateway in a loop (one kept-alive
connection, as an SDK's client) while the gateway pod that holds that connection is deleted,
while a gateway pod that does not hold it is deleted, while `helm upgrade` rolls the gateway
Deployment, and while the operator's leader pod is deleted. Each disruption must cost 0 failed
calls over at least 200 calls; the number of calls and the time each disruption took are printed.

The pod that holds the connection is found, not guessed (`connection_holder`): the caller names
its end of the connection of every call, the node's conntrack table names the gateway pod that
connection goes to, and the pods' own request counters must agree. Deleting that pod must make
the caller leave the connection and dial another; deleting the other pod must leave the caller's
connection alone (every call on it, none dialled anew), unless the caller's own transport let go
of it, which the caller's log tells apart from the gateway or the network ending it (`Ended`)."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from typing import NamedTuple

import httpx
import pytest
from node import (
    CHART, GATEWAY_URL, RELEASE_NS, Call, CallerLog, Ended, apply, caller_log, caller_pod, chart_values, get_json, helm,
    kubectl, pods, ready, run, wait,
)

MIN_CALLS = 200
GATEWAYS = "app.kubernetes.io/component=gateway"
# The gateway container's internal port (the chart's `--internal-listen 0.0.0.0:9091`), where
# /metrics is served (the client port, 8080, answers 404 there), reached at the pod address.
INTERNAL_PORT = 9091
# connection_holder: calls the caller makes on one connection between two reads of the pods'
# counters, how many samples it takes at most, and the slack (ms) of the timestamps.
SAMPLE_CALLS = 20
HOLDER_TRIES = 5
MARGIN_MS = 5
# The caller's bound on one call (its -timeout).
CALL_TIMEOUT_S = 60
# Bounds of the waits around a disruption: generous, since they only say the cluster settled
# (the figures printed are the measurement); on two busy CPUs a pod start takes tens of seconds.
SETTLE_S = 180
WINDOW_S = 180
STATUS_S = 120


def now_ms() -> int:
    return int(time.time() * 1000)


class CallLoop:
    """The caller's loop pod; its log has one line per call (`Call`)."""

    def __init__(self, namespace: str, key: str):
        self.name, self.namespace = "call-loop", namespace
        # A call may take as long as an SDK waits for one (the MCP TypeScript SDK: 60 s): on a
        # machine whose CPUs the other suites keep busy, calls of seconds are slow, not lost.
        pod = caller_pod(self.name, namespace, ["loop", "-url", f"{GATEWAY_URL}/mcp/demo", "-key", key,
                                                "-interval", "10ms", "-timeout", f"{CALL_TIMEOUT_S}s"],
                         restart="Never")
        kubectl("delete", "pod", self.name, "-n", namespace, "--ignore-not-found", "--wait=true")
        apply(pod)
        wait(lambda: len(self.calls()) >= 20, 60, "the call loop to make its first calls")

    def calls(self) -> list[Call]:
        return self.log().calls

    def log(self) -> CallerLog:
        """The caller's log so far, read once: its calls, its connections' ends, and the rest
        (Go's HTTP client writes there what it saw on an idle connection, e.g. an unsolicited
        response)."""
        return caller_log(kubectl("logs", self.name, "-n", self.namespace).stdout)

    def window(self, start_ms: int, end_ms: int | None = None) -> list[Call]:
        return [c for c in self.calls() if c.at_ms >= start_ms and (end_ms is None or c.at_ms <= end_ms)]

    def stop(self) -> None:
        kubectl("delete", "pod", self.name, "-n", self.namespace, "--wait=false")


@pytest.fixture(scope="module")
def loop(served):
    calls = CallLoop(served["namespace"], served["key"])
    yield calls
    everything = calls.calls()
    failed = [c for c in everything if not c.ok]
    connections = len({c.conn for c in everything if c.conn})
    print(f"\ncall loop: {len(everything)} calls in all, {len(failed)} failed, on {connections} connections")
    calls.stop()


def gateways_settled() -> bool:
    gws = pods(GATEWAYS)
    return len(gws) == 2 and all(ready(p) for p in gws)


def ready_gateways() -> dict[str, str]:
    """Ready gateway pods: name -> pod IP."""
    return {p["metadata"]["name"]: p["status"]["podIP"] for p in pods(GATEWAYS)
            if ready(p) and p["status"].get("podIP")}


def mcp_requests_counted(ip: str) -> float:
    """Requests to /mcp/{prefix} the gateway pod at `ip` has counted, read from its own /metrics:
    `switchboard_gateway_requests_total` series with endpoint="mcp_single", every method and
    outcome. The endpoint counts a request before its answer goes out (`handle` in
    gateway/mcp/src/endpoint/mod.rs), so a call the caller saw answered is counted already."""
    response = httpx.get(f"http://{ip}:{INTERNAL_PORT}/metrics", timeout=5)
    response.raise_for_status()
    total = 0.0
    for m in re.finditer(r"^switchboard_gateway_requests_total\{([^}]*)\}\s+(\S+)$", response.text, re.M):
        if dict(re.findall(r'(\w+)="([^"]*)"', m.group(1))).get("endpoint") == "mcp_single":
            total += float(m.group(2))
    return total


def conntrack() -> str:
    return shutil.which("conntrack") or "/usr/sbin/conntrack"  # tests/node/setup-tools.sh installs it


def conntrack_reply_sources(conn: str) -> set[str]:
    """Who answers the TCP connection whose client end is `conn` (`IP:port`), from the node's
    conntrack table. These tests run in the node's network namespace, where kube-proxy's DNAT
    rewrote the Service address the caller dialled to one gateway pod's; the entry's original
    direction is caller -> Service, its reply direction comes from that pod:
    `tcp 6 431999 ESTABLISHED src=CALLER dst=SERVICE sport=P dport=80 src=POD dst=CALLER
    sport=8080 dport=P [ASSURED] ...`. Only ESTABLISHED entries count."""
    ip, _, port = conn.rpartition(":")
    out = run(conntrack(), "-L", "-p", "tcp", "--orig-src", ip, "--orig-port-src", port, timeout=30).stdout
    sources = set()
    for line in out.splitlines():
        fields = line.split()
        srcs = [f.removeprefix("src=") for f in fields if f.startswith("src=")]
        if "ESTABLISHED" in fields and len(srcs) == 2:
            sources.add(srcs[1])
    return sources


class ConnWatch:
    """The node's conntrack events of one connection (`conntrack -E`, its client end `conn`) from
    construction to `stop`, printed when the connection changed: how its entry went on (after a
    FIN through FIN_WAIT, CLOSE_WAIT, LAST_ACK and TIME_WAIT; after a RST to CLOSE), or that it
    was deleted while ESTABLISHED (DESTROY: the node, not either end). Which end closed it is
    what the caller's own log says (`Ended`): conntrack's states do not name the sender."""

    def __init__(self, conn: str):
        ip, _, port = conn.rpartition(":")
        self.proc = subprocess.Popen([conntrack(), "-E", "-p", "tcp", "--orig-src", ip, "--orig-port-src", port,
                                      "-o", "timestamp"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stop(self) -> str:
        self.proc.terminate()
        try:
            out, _ = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate(timeout=10)
        return out.strip()


class Holder(NamedTuple):
    pod: str            # the gateway pod at the other end of the caller's connection
    conn: str           # the caller's end of that connection, IP:port
    others: list[str]   # the other Ready gateway pods, which served none of the sampled calls


def connection_holder(loop: CallLoop) -> Holder:
    """Finds the gateway pod that holds the caller's kept-alive connection, from two sides that
    must agree:

    - the network: the caller names its end of the connection each call went on; the node's
      conntrack table names the pod that connection was sent to (`conntrack_reply_sources`);
    - the pods: between two reads of every Ready gateway pod's counters, while the caller made
      at least SAMPLE_CALLS calls on that one connection, the holder counted at least the calls
      made wholly between the reads and every other pod counted no request at all.

    A sample in which the caller changed or dialled its connection, or a call failed, proves
    nothing and is taken again, at most HOLDER_TRIES times."""
    wait(gateways_settled, 60, "both gateway pods Ready")
    problems: list[str] = []
    for _ in range(HOLDER_TRIES):
        gateways = ready_gateways()
        if len(gateways) != 2:
            problems.append(f"Ready gateway pods with an address: {gateways}")
            wait(gateways_settled, 60, "both gateway pods Ready")
            continue
        first = now_ms()
        try:
            before = {name: mcp_requests_counted(ip) for name, ip in gateways.items()}
            counted_from = now_ms()
            wait(lambda: len(loop.window(counted_from + MARGIN_MS)) >= SAMPLE_CALLS, 30,
                 f"{SAMPLE_CALLS} calls of the caller to sample")
            counted_until = now_ms()
            after = {name: mcp_requests_counted(ip) for name, ip in gateways.items()}
        except httpx.HTTPError as exc:
            problems.append(f"reading a gateway pod's /metrics failed: {exc!r}")
            continue
        sample = loop.window(first, counted_until)
        conns = sorted({c.conn for c in sample})
        unsteady = [c for c in sample if not c.ok or c.how != "reused"]
        if not sample or unsteady or len(conns) != 1 or not conns[0]:
            problems.append(f"the caller did not keep one connection through the sample: connections {conns}, "
                            f"failed or dialled calls {unsteady[:3]}")
            continue
        conn = conns[0]
        sources = conntrack_reply_sources(conn)
        by_address = sorted(name for name, ip in gateways.items() if ip in sources)
        # calls that started after the first read and ended before the second: counted between them
        inside = [c for c in sample
                  if c.at_ms > counted_from + MARGIN_MS and c.at_ms + c.ms + MARGIN_MS < counted_until]
        rose = {name: after[name] - before[name] for name in gateways}
        counted = sorted(name for name, n in rose.items() if n > 0)
        if len(by_address) != 1:
            problems.append(f"conntrack: the connection from {conn} is answered by {sorted(sources)}, "
                            f"not by exactly one of the Ready gateway pods {gateways}")
        elif not inside or counted != by_address or rose[by_address[0]] < len(inside):
            problems.append(f"conntrack names {by_address[0]} for {conn}, but while the caller made {len(inside)} calls "
                            f"on it the pods counted {rose}")
        else:
            holder = by_address[0]
            others = sorted(name for name in gateways if name != holder)
            print(f"\n  the caller's connection {conn} goes to {holder} ({gateways[holder]}) by the node's conntrack; "
                  f"{holder} counted {rose[holder]:.0f} requests while the caller made {len(inside)} calls, "
                  f"{', '.join(others)} counted none")
            return Holder(holder, conn, others)
    raise AssertionError(f"the gateway pod holding the caller's connection not found in {HOLDER_TRIES} samples: "
                         + "; ".join(problems))


def measure(loop: CallLoop, what: str, disrupt, settled) -> list[Call]:
    """Runs `disrupt`, waits until `settled`, then until the window holds MIN_CALLS calls; asserts
    none failed, prints the figures and returns the window's calls."""
    start_ms = int(time.time() * 1000)
    t0 = time.monotonic()
    disrupt()
    wait(settled, SETTLE_S, f"the cluster to settle after: {what}", interval=0.2)
    took = time.monotonic() - t0
    wait(lambda: len(loop.window(start_ms)) >= MIN_CALLS, WINDOW_S, f"{MIN_CALLS} calls since: {what}")
    end_ms = int(time.time() * 1000)
    window = loop.window(start_ms, end_ms)
    failed = [c for c in window if not c.ok]
    latencies = sorted(c.ms for c in window if c.ok)
    p99 = latencies[int(len(latencies) * 0.99) - 1] if latencies else float("nan")
    print(f"\n{what}: took {took:.1f}s until settled; {len(window)} calls from its start "
          f"({(end_ms - start_ms) / 1000:.1f}s), {len(failed)} failed; call p99 {p99:.1f} ms")
    for c in failed[:10]:
        print(f"  failed at {c.at_ms}: {c.detail}")
    assert len(window) >= MIN_CALLS
    assert not failed, f"{what}: {len(failed)} of {len(window)} calls failed, e.g. {failed[0].detail}"
    # Status tells the truth afterwards: a replica that stopped gracefully said goodbye, so it
    # is not reported missing (only one that vanished would be, until --replica-expiry).
    status_settled(loop.namespace, what)
    return window


def status_settled(namespace: str, what: str) -> None:
    def both_replicas():
        key = get_json("mcpkey", "apps", "-n", namespace)["status"]["conditions"]
        server = get_json("mcpserver", "demo", "-n", namespace)["status"]["conditions"]
        ready = next(c for c in key if c["type"] == "Ready")
        programmed = next(c for c in server if c["type"] == "Programmed")
        return (ready["status"] == "True" and ready["message"].startswith("2/2 ")
                and programmed["status"] == "True" and programmed["message"].startswith("2/2 "))

    t0 = time.monotonic()
    wait(both_replicas, STATUS_S, f"McpKey Ready and McpServer Programmed to say 2/2 replicas after: {what}")
    print(f"  status back to 2/2 replicas {time.monotonic() - t0:.1f}s after the window")


def gone(victim: str):
    """`settled` of a pod deletion: the victim is gone and two gateway pods are Ready."""
    def settled():
        names = [p["metadata"]["name"] for p in pods(GATEWAYS)]
        return victim not in names and gateways_settled()
    return settled


def holder_story(pod: str) -> str:
    """What the pod went through: its containers' restarts and last state, its events, and the
    end of its log without the audit records (one per call: the chart writes them to stdout
    beside the log), and of its previous container's, if it restarted."""
    lines = []
    try:
        status = get_json("pod", pod, "-n", RELEASE_NS)["status"]
        for c in status.get("containerStatuses", []):
            lines.append(f"  {pod} container {c['name']}: restarts {c.get('restartCount')}, "
                         f"last state {c.get('lastState')}")
    except Exception as exc:  # (a pod that is gone says so)
        lines.append(f"  {pod}: {exc!r}")
    events = kubectl("get", "events", "-n", RELEASE_NS, "--field-selector", f"involvedObject.name={pod}",
                     check=False).stdout
    lines.append(f"  events of {pod}:\n{events}")
    for previous in ([], ["--previous"]):
        log = kubectl("logs", pod, "-n", RELEASE_NS, "--tail", "20000", *previous, check=False)
        kept = [line for line in log.stdout.splitlines() if '"schema":"switchboard.audit/' not in line]
        lines.append(f"  log of {pod} {' '.join(previous)} (audit records left out), its last 40 lines:\n"
                     + "\n".join(kept[-40:]) + f"\n{log.stderr}")
    return "\n".join(lines)


def connection_change_story(held: Holder, calls: list[Call]) -> str:
    """Why the caller left the held connection, from `calls`: how it ended (its last call;
    `closing`: the gateway said `Connection: close`, as a stopping one does), how the next one
    began (`new` or `retried`: the caller's transport found the old one closed), and what the pod
    that held it went through (holder_story)."""
    last = [c for c in calls if c.conn == held.conn][-1:]
    first = [c for c in calls if c.conn != held.conn][:1]
    return (f"\n  the last call on {held.conn}: {last}; the first on another connection: {first}\n"
            + holder_story(held.pod))


def test_deleting_the_gateway_pod_holding_the_connection_loses_no_call(loop):
    held = connection_holder(loop)
    victim = held.pod
    deleted_at: list[int] = []

    def delete():
        deleted_at.append(now_ms())
        kubectl("delete", "pod", victim, "-n", RELEASE_NS, "--wait=false")

    window = measure(loop, f"kubectl delete pod {victim} (holds the caller's connection {held.conn})",
                     delete, gone(victim))
    # The deletion hit the connection in use: the caller was still calling on it after the
    # delete, then (the stopping replica answers with `Connection: close`) left it for good and
    # dialled another, which is held by another pod.
    old = [c for c in window if c.conn == held.conn]
    moved = [c for c in window if c.conn != held.conn]
    assert old, f"no call went on {held.conn} after the delete of {victim}: it was not the connection in use"
    assert moved, f"the caller kept {held.conn} through the deletion of {victim}, which held it"
    assert moved[0].how in ("new", "retried"), \
        f"after {held.conn} the caller's next call was not on a dialled connection: {moved[0]}"
    assert old[-1].at_ms < moved[0].at_ms, \
        f"the caller went back to {held.conn} after leaving it: {old[-1]} after {moved[0]}"
    now = connection_holder(loop)
    assert now.pod != victim and now.conn != held.conn, (held, now)
    print(f"  {victim} held {held.conn}: the last call on it started {(old[-1].at_ms - deleted_at[0]) / 1000:.1f}s "
          f"after the delete; the next one dialled {moved[0].conn} ({moved[0].how}); "
          f"{len({c.conn for c in moved})} connection(s) since, now {now.conn} to {now.pod}")


def test_deleting_a_gateway_pod_not_holding_the_connection_disturbs_nothing(loop):
    held = connection_holder(loop)
    assert held.others, f"no other Ready gateway pod beside {held.pod}"
    victim = held.others[0]
    watch = ConnWatch(held.conn)
    try:
        window = measure(loop, f"kubectl delete pod {victim} (the caller's connection {held.conn} is held by {held.pod})",
                         lambda: kubectl("delete", "pod", victim, "-n", RELEASE_NS, "--wait=false"), gone(victim))
    finally:
        events = watch.stop()
    # No disruption at all: every call of the window went on the same kept-alive connection,
    # none was dialled or retried, and that connection still goes to the same pod. The one
    # change allowed is the caller's own: its transport letting go of a connection that neither
    # the gateway nor the network ended (Go's does when starved of CPU, trackedConn in
    # tests/node/caller/main.go); then every call is still answered, none retried, no answer
    # said `Connection: close`, and every connection that ended, ended by the caller.
    disturbed = [c for c in window if c.conn != held.conn or c.how != "reused"]
    log = loop.log()
    let_go = caller_let_go(window, log.ended, held)
    if disturbed:
        print(connection_change_story(held, window))
        print(f"  the node's conntrack events of {held.conn} during the window:\n{events}")
        print("  how the caller's connections ended in the window: "
              + (", ".join(f"{e.conn} by {e.by}" for e in log.ended if e.at_ms >= window[0].at_ms) or "none"))
        print("  what the caller wrote besides its calls and their ends:\n" + "\n".join(log.other[-20:]))
    assert not disturbed or let_go, (
        f"deleting {victim}, which did not hold the caller's connection {held.conn}, disturbed "
        f"{len(disturbed)} of {len(window)} calls, e.g. {disturbed[:3]}")
    if let_go:
        print(f"  the caller's own transport let go of {len(let_go)} connection(s) in the window "
              f"({', '.join(sorted(let_go))}); the gateway and the network ended none, no call failed or was retried")
        # The pod that held the connection still serves, and still holds the caller's.
        now = connection_holder(loop)
        assert held.pod in (now.pod, *now.others), (held, now)
        return
    now = connection_holder(loop)
    if (now.pod, now.conn) != (held.pod, held.conn):
        # (the window was undisturbed, yet the connection changed afterwards)
        print(connection_change_story(held, loop.window(window[-1].at_ms)))
    assert (now.pod, now.conn) == (held.pod, held.conn), (held, now)
    print(f"  all {len(window)} calls on {held.conn} to {held.pod}, none dialled anew")


def caller_let_go(window: list[Call], ended: list[Ended], held: Holder) -> set[str]:
    """The connections the caller's own transport let go of during `window` (`ended`: the
    caller's connection ends), when that is the only change the window saw: every call
    answered, none retried, no answer said `Connection: close`, and every connection that ended
    in it (the held one among them) ended by the caller. Empty otherwise (and when nothing
    ended)."""
    if not window or any(not c.ok or c.how not in ("reused", "new") or c.closing for c in window):
        return set()
    ends = [e for e in ended if window[0].at_ms <= e.at_ms <= window[-1].at_ms + 1000]
    if not ends or held.conn not in {e.conn for e in ends} or any(e.by != "caller" for e in ends):
        return set()
    return {e.conn for e in ends}


def test_rolling_helm_upgrade_loses_no_call(loop):
    before = {p["metadata"]["name"] for p in pods(GATEWAYS)}

    def upgrade():
        # A changed pod annotation rolls the Deployment, as a new image or setting would.
        helm("upgrade", "switchboard", str(CHART), "-n", RELEASE_NS, *chart_values(),
             "--set-string", f"gateway.podAnnotations.rolled={int(time.time())}")

    def settled():
        names = {p["metadata"]["name"] for p in pods(GATEWAYS)}
        return not (names & before) and gateways_settled()

    measure(loop, "helm upgrade rolling the gateway Deployment", upgrade, settled)


def lease_holder() -> str:
    return get_json("lease", "switchboard-operator", "-n", RELEASE_NS)["spec"].get("holderIdentity") or ""


def test_deleting_the_operator_leader_loses_no_call(loop):
    leader = lease_holder()
    operators = [p["metadata"]["name"] for p in pods("app.kubernetes.io/component=operator")]
    assert leader in operators, f"lease holder {leader!r} is not one of the operator pods {operators}"
    new_leader_after: list[float] = []
    t0 = time.monotonic()

    def settled():
        holder = lease_holder()
        if holder and holder != leader and not new_leader_after:
            new_leader_after.append(time.monotonic() - t0)
        ops = pods("app.kubernetes.io/component=operator")
        return (new_leader_after and leader not in [p["metadata"]["name"] for p in ops]
                and len(ops) == 2 and all(ready(p) for p in ops))

    measure(loop, f"kubectl delete pod {leader} (the operator leader)",
            lambda: kubectl("delete", "pod", leader, "-n", RELEASE_NS, "--wait=false"), settled)
    print(f"  a new operator held the lease {new_leader_after[0]:.1f}s after the delete")
