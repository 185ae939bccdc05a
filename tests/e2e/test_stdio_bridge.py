"""Issue 23, the bridge outside a cluster: switchboard-stdio-bridge in front of real stdio servers
from npm (@modelcontextprotocol/server-everything) and PyPI (mcp-server-time), installed by
tests/setup-stdio-servers.sh, behind gateways with `upstreamEra: byClient`.

- Two bridge replicas behind a per-request round-robin balancer, two gateways behind another:
  tools are listed and called in both eras.
- A legacy session's 50 calls, alternating gateways and bridges, all land on one process: the
  process itself says which (server-everything's `get-env` shows SWITCHBOARD_BRIDGE_PROCESS,
  which the bridge sets per process). 2026-07-28 calls spread over both replicas. The controls:
  without `--peers` (no affinity: each gateway's handshake opens a process where it lands) or
  without a shared key (no hand-off: a replica cannot open another's session id), the session
  splits over processes or its calls fail.
- `kill -9` of a process: the request in flight on it gets an error at once, the next call
  works (2026-07-28 on another pooled process); a legacy session ends with a clear 404 (its
  state is gone) and the client's new session works.
- Issue 35: with a stateful server (server-memory), sessions keep their process (and what they
  stored) through both gateways while replicas join; when replicas stop, the sessions they held
  end with a clear 404 through every gateway, never on a new process silently.
- A client that goes away cancels its request on the process, and the process serves the next.
- Readiness waits for an answered `initialize` (a command that exits at once never gets ready,
  and says why); stderr reaches the bridge's log labelled by process; SIGTERM drains: readiness
  fails at once, the call in flight completes, the processes are gone after.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from harness import (
    LEGACY_VERSION,
    MODERN_VERSION,
    REPO_ROOT,
    Proc,
    ProcessGroup,
    RawMcp,
    balancer,
    binary,
    reserve_port,
    gateway_config,
    key,
    new_secret,
    server,
    tool_names,
    wait_until,
    write_config,
)

BRIDGE_BIN = "switchboard-stdio-bridge"
SETUP = REPO_ROOT / "tests" / "setup-stdio-servers.sh"
LABEL = re.compile(r'"SWITCHBOARD_BRIDGE_PROCESS"\s*:\s*"([^"]+)"')


@pytest.fixture(scope="module")
def stdio_servers() -> dict[str, str]:
    """name -> command of the real stdio servers (installed once, cached)."""
    run = subprocess.run([str(SETUP)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"tests/setup-stdio-servers.sh failed (it needs npm and PyPI):\n{run.stderr[-3000:]}"
    found = dict(line.split("\t", 1) for line in run.stdout.strip().splitlines())
    assert {"everything", "time"} <= found.keys(), run.stdout
    return found


class Bridges:
    """Bridge replicas on loopback, each knowing the others (`--peers`) and sharing one session
    key, unless told otherwise (the controls). With `running`, only the first `running` start:
    the others are listed as peers already (as a headless Service lists pods as they come) and
    join with `start`."""

    def __init__(self, procs: ProcessGroup, tmp: Path, command: list[str], n: int = 2, *, peers: bool = True,
                 shared_key: bool = True, pool_size: int = 2, max_processes: int = 16, extra: tuple[str, ...] = (),
                 running: int | None = None):  # fmt: skip
        self.group = procs
        # Each replica names every other in --peers before any of them listens: reserved ports.
        self.ports = [reserve_port() for _ in range(n)]
        self.addrs = [f"127.0.0.1:{p}" for p in self.ports]
        self.procs: list[Proc] = []
        self.by_index: dict[int, Proc] = {}
        key_file = tmp / "bridge-session-key"
        key_file.write_text(new_secret("bridge-key"))
        self.argvs = []
        for port in self.ports:
            argv = [binary(BRIDGE_BIN), "--listen", f"127.0.0.1:{port}", "--pool-size", str(pool_size),
                    "--max-processes", str(max_processes), "--drain-delay", "1s", *extra]  # fmt: skip
            if shared_key:
                argv += ["--session-key-file", str(key_file)]
            if peers:
                argv += ["--peers", ",".join(self.addrs)]
            self.argvs.append([*argv, "--", *command])
        for i in range(n if running is None else running):
            self.start(i)

    def start(self, i: int) -> None:
        proc = self.group.start(f"bridge-{self.ports[i]}", self.argvs[i])
        self.procs.append(proc)
        self.by_index[i] = proc
        url = self.urls[i]
        wait_until(lambda: httpx.get(f"{url}/readyz", timeout=2).status_code == 200, 60,
                   what=f"{url} to be ready (a process answered initialize)")  # fmt: skip

    def stop(self, i: int) -> None:
        """SIGTERM: the replica drains and exits (its sessions end with it)."""
        proc = self.by_index[i]
        proc.signal(signal.SIGTERM)
        assert proc.popen.wait(60) == 0, proc.log_text()[-2000:]

    def sessions(self, i: int) -> int:
        """Legacy sessions the replica holds (its /readyz says)."""
        m = re.search(r"(\d+) sessions", httpx.get(f"{self.urls[i]}/readyz", timeout=5).text)
        assert m, f"{self.urls[i]}/readyz does not count sessions"
        return int(m.group(1))

    @property
    def urls(self) -> list[str]:
        return [f"http://{a}" for a in self.addrs]


def label_of(reply) -> str:
    """Which process answered a `get-env` call (it prints its environment)."""
    assert reply.status == 200 and not reply.result.get("isError"), reply.raw[:400]
    text = "".join(c.get("text", "") for c in reply.result.get("content", []))
    m = LABEL.search(text)
    assert m, f"no SWITCHBOARD_BRIDGE_PROCESS in get-env's answer: {text[:300]}"
    return m.group(1)


def pids_of(label: str) -> list[int]:
    """Processes whose environment names `label` (the bridge's child, and its children)."""
    found = []
    needle = f"SWITCHBOARD_BRIDGE_PROCESS={label}".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if needle in env:
                found.append(int(entry))
    return found


def two_gateways(gateways, url: str, secret: str):
    config = gateway_config([server("every", f"{url}/mcp", upstreamEra="byClient", timeout="20s")],
                            [key("client", secret, ["every"])])  # fmt: skip
    path = gateways.config_path("shared")
    write_config(path, config)
    return gateways.start(config_path=path, name="gw-a"), gateways.start(config_path=path, name="gw-b")


def test_both_eras_list_and_call_through_two_gateways_and_two_bridges(gateways, procs, tmp_path, stdio_servers):
    bridges = Bridges(procs, tmp_path, [stdio_servers["everything"]])
    secret = new_secret("bridge-client")
    with balancer(bridges.urls) as front:
        gws = two_gateways(gateways, front.url, secret)
        for gw in gws:
            modern = RawMcp(gw.mcp_url(), secret, MODERN_VERSION)
            names = tool_names(modern.list_tools().result["tools"])
            assert {"every__get-sum", "every__get-env", "every__echo"} <= set(names), names
            r = modern.call_tool("every__get-sum", {"a": 2, "b": 40})
            assert r.status == 200 and "42" in json.dumps(r.result), r.raw[:300]
            with RawMcp(gw.mcp_url(), secret, "legacy") as legacy:
                assert legacy.initialize().status == 200
                assert "every__get-sum" in tool_names(legacy.list_tools().result["tools"])
                r = legacy.call_tool("every__echo", {"message": "through the bridge"})
                assert r.status == 200 and "through the bridge" in json.dumps(r.result), r.raw[:300]
        assert {i for i, *_ in front.served} == {0, 1}, "both bridge replicas served"


def test_a_legacy_session_keeps_its_process_across_gateways_and_bridges(gateways, procs, tmp_path, stdio_servers):
    bridges = Bridges(procs, tmp_path, [stdio_servers["everything"]])
    secret = new_secret("bridge-client")
    with balancer(bridges.urls) as front:
        gws = two_gateways(gateways, front.url, secret)
        with balancer([g.url for g in gws]) as lb:
            with RawMcp(f"{lb.url}/mcp", secret, "legacy") as legacy:
                assert legacy.initialize().status == 200
                labels = [label_of(legacy.call_tool("every__get-env", {})) for _ in range(50)]
            assert len(set(labels)) == 1, f"one process for the session, got {sorted(set(labels))}"
            session_calls = [i for i, method, _, sid, rpc in lb.served if rpc == "tools/call"]
            assert set(session_calls) == {0, 1}, "the session's calls went through both gateways"
            assert {i for i, *_ in front.served} == {0, 1}, "and reached both bridge replicas"

            # 2026-07-28: any idle process, on either replica.
            modern = RawMcp(f"{lb.url}/mcp", secret, MODERN_VERSION)
            spread = {label_of(modern.call_tool("every__get-env", {})) for _ in range(20)}
            replicas = {label.rsplit("/", 1)[0] for label in spread}
            assert replicas == set(bridges.addrs), f"2026-07-28 calls spread over both replicas: {spread}"


@pytest.mark.parametrize("without", ["peers", "shared_key"])
def test_control_without_peers_or_a_shared_key_the_session_does_not_hold(gateways, procs, tmp_path, stdio_servers, without):
    bridges = Bridges(procs, tmp_path, [stdio_servers["everything"]], **{without: False})
    secret = new_secret("bridge-client")
    with balancer(bridges.urls) as front:
        gws = two_gateways(gateways, front.url, secret)
        with balancer([g.url for g in gws]) as lb:
            with RawMcp(f"{lb.url}/mcp", secret, "legacy") as legacy:
                assert legacy.initialize().status == 200
                labels, failed = [], 0
                for _ in range(50):
                    r = legacy.call_tool("every__get-env", {})
                    if r.status == 200 and not r.result.get("isError") and LABEL.search(json.dumps(r.result)):
                        labels.append(label_of(r))
                    else:
                        failed += 1
    assert len(set(labels)) > 1 or failed > 0, (
        f"without the hand-off and the affinity the session should not hold: {sorted(set(labels))}, {failed} failed"
    )


def memory_command(stdio_servers: dict[str, str], tmp: Path) -> list[str]:
    """server-memory (npm) with a knowledge graph per process: its file is named after the
    process's label (SWITCHBOARD_BRIDGE_PROCESS), so what a session created lives in its own
    process alone, as any per-session state of a stdio server does."""
    script = ('label=$(printf %s "$SWITCHBOARD_BRIDGE_PROCESS" | tr -c "A-Za-z0-9" _); '
              f'MEMORY_FILE_PATH="{tmp}/memory-$label.jsonl" exec "{stdio_servers["memory"]}"')  # fmt: skip
    return ["sh", "-c", script]


def entity_names(reply) -> set[str] | None:
    """The entities `read_graph` returned; None when the call failed."""
    if reply.status != 200 or reply.result is None or reply.result.get("isError"):
        return None
    return {e["name"] for e in reply.result["structuredContent"]["entities"]}


def on(gw, secret: str, session_id: str) -> RawMcp:
    """The same client session, through another gateway replica."""
    client = RawMcp(gw.mcp_url(), secret, "legacy")
    client.session_id = session_id
    return client


def test_sessions_keep_their_process_as_replicas_join_and_end_clearly_when_theirs_go(gateways, procs, tmp_path, stdio_servers):
    """Issue 35, item 11, with a stateful real server (server-memory) behind two gateways: six
    sessions opened on one bridge replica; two replicas join; every session still sees its own
    entities through both gateways (before, a gateway's first handshake for a session went to
    whichever replica the affinity ranked first now, and opened a second process there, without
    the entities). More sessions, spread over the three; two replicas stop: a session whose
    process went with them ends with a clear error through every gateway, a third gateway that
    never saw it included (never an empty graph), the client opens a new one; the rest go on."""
    bridges = Bridges(procs, tmp_path, memory_command(stdio_servers, tmp_path), n=3, running=1, pool_size=1)
    secret = new_secret("bridge-client")
    config = gateway_config([server("mem", "placeholder", upstreamEra="byClient", timeout="20s")], [key("c", secret, ["mem"])])
    with balancer(bridges.urls[:1]) as front:
        config["servers"][0]["url"] = f"{front.url}/mcp"
        path = gateways.config_path("memory")
        write_config(path, config)
        gw_a, gw_b, gw_c = (gateways.start(config_path=path, name=f"gw-{n}") for n in "abc")

        def open_session(gw, name: str) -> str:
            with RawMcp(gw.mcp_url(), secret, "legacy") as client:
                client.initialize()
                r = client.call_tool("mem__create_entities", {"entities": [
                    {"name": name, "entityType": "note", "observations": [f"made by {name}"]}]})  # fmt: skip
                assert r.status == 200 and not r.result.get("isError"), r.raw[:300]
                return client.session_id

        def graph(gw, sid: str):
            with on(gw, secret, sid) as client:
                return client.call_tool("mem__read_graph", {})

        sessions = {f"first-{i}": open_session(gw_a, f"first-{i}") for i in range(6)}
        assert bridges.sessions(0) == 6

        # Two replicas join (what an autoscaler does); the Service now spreads over three.
        bridges.start(1)
        bridges.start(2)
        front.set_backends(bridges.urls)
        for name, sid in sessions.items():
            for gw in (gw_b, gw_a):
                seen = entity_names(graph(gw, sid))
                assert seen == {name}, f"{name} through {gw.proc.name}: {seen} (a second process without its state)"
        assert [bridges.sessions(i) for i in range(3)] == [6, 0, 0], "no second process opened for any session"

        # New sessions, placed over the three replicas (at least two on the joiners).
        for i in range(30):
            if bridges.sessions(1) + bridges.sessions(2) >= 2 and i >= 6:
                break
            sessions[f"later-{i}"] = open_session(gw_b, f"later-{i}")
        held = [bridges.sessions(i) for i in range(3)]
        assert held[1] + held[2] >= 2 and sum(held) == len(sessions), held
        for name, sid in sessions.items():
            assert entity_names(graph(gw_a, sid)) == {name}, name

        # Two replicas stop; their sessions end with them.
        bridges.stop(1)
        bridges.stop(2)
        front.set_backends(bridges.urls[:1])
        kept, ended = [], []
        for name, sid in sessions.items():
            outcomes = [graph(gw, sid) for gw in (gw_a, gw_b, gw_c)]
            if all(entity_names(r) == {name} for r in outcomes):
                kept.append(name)
                continue
            for gw, r in zip((gw_a, gw_b, gw_c), outcomes):
                error = (r.messages[-1] if r.messages else {}).get("error", {})
                assert r.status == 404 and "no longer has this session's state" in error.get("message", ""), (
                    f"{name} through {gw.proc.name}: HTTP {r.status} {r.raw[:300]!r} (its process is gone: a clear 404, never another process)"
                )
            ended.append(name)
        assert len(ended) == held[1] + held[2] and len(kept) == held[0], (kept, ended, held)
        assert {f"first-{i}" for i in range(6)} <= set(kept), "the first six live on the replica that stayed"
        # The client starts over: a new session works, with nothing of the old one.
        fresh = open_session(gw_c, "fresh")
        assert entity_names(graph(gw_a, fresh)) == {"fresh"}


def test_a_killed_process_fails_its_call_at_once_and_the_next_call_works(gateways, procs, tmp_path, stdio_servers):
    bridges = Bridges(procs, tmp_path, [stdio_servers["everything"]], n=1, pool_size=1)
    secret = new_secret("bridge-client")
    gw, _ = two_gateways(gateways, bridges.urls[0], secret)
    modern = RawMcp(gw.mcp_url(), secret, MODERN_VERSION)
    victim = label_of(modern.call_tool("every__get-env", {}))

    # A long call in flight on that (only) pooled process, then kill -9.
    t, result = long_call(gw, secret, bridges.urls[0], seconds=15)
    for pid in pids_of(victim):
        os.kill(pid, signal.SIGKILL)
    t.join(10)
    assert not t.is_alive(), "the call in flight on a killed process hangs"
    reply = result["reply"]
    text = json.dumps(reply.messages[-1] if reply.messages else reply.raw[:300])
    assert "exited" in text or "killed" in text, f"the in-flight call's answer names the exit: {text[:400]}"
    bridge_saw_exit(bridges.procs[0], victim)
    after = label_of(modern.call_tool("every__get-env", {}))
    assert after != victim, "the next call is served by a new process"

    # Legacy: the session's process dies, with what it held; the next call ends the session
    # with a clear 404 (never a new process in its place, silently); the client opens a new
    # session, which works.
    with RawMcp(gw.mcp_url(), secret, "legacy") as legacy:
        assert legacy.initialize().status == 200
        first = label_of(legacy.call_tool("every__get-env", {}))
        for pid in pids_of(first):
            os.kill(pid, signal.SIGKILL)
        bridge_saw_exit(bridges.procs[0], first)
        gone = legacy.call_tool("every__get-env", {})
        assert gone.status == 404 and "no longer has this session's state" in gone.raw.decode(), gone.raw[:300]
        legacy.initialize()
        second = label_of(legacy.call_tool("every__get-env", {}))
        assert second != first
        assert len({label_of(legacy.call_tool("every__get-env", {})) for _ in range(5)}) == 1


def test_a_client_that_goes_away_frees_its_process(gateways, procs, tmp_path, stdio_servers):
    # One process at most: the next call can only be served once the abandoned one let go.
    bridges = Bridges(procs, tmp_path, [stdio_servers["everything"]], n=1, pool_size=1, max_processes=1,
                      extra=("--queue-timeout", "30s"))  # fmt: skip
    secret = new_secret("bridge-client")
    gw, _ = two_gateways(gateways, bridges.urls[0], secret)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "every__trigger-long-running-operation", "arguments": {"duration": 600, "steps": 600},
                       "_meta": {"progressToken": "t", "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
                                 "io.modelcontextprotocol/clientCapabilities": {}}}}  # fmt: skip
    headers = {"Authorization": f"Bearer {secret}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": MODERN_VERSION, "Mcp-Method": "tools/call",
               "Mcp-Name": "every__trigger-long-running-operation"}  # fmt: skip
    with httpx.stream("POST", gw.mcp_url(), json=body, headers=headers, timeout=30) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if "notifications/progress" in line:
                break  # the call is running on the process; now go away
    # The 600 s call was abandoned: the only process serves the next call.
    r = RawMcp(gw.mcp_url(), secret, MODERN_VERSION).call_tool("every__get-sum", {"a": 1, "b": 2})
    assert r.status == 200 and "3" in json.dumps(r.result), r.raw[:300]
    log = bridges.procs[0].log_text()
    assert "Starting default (STDIO) server" in log and re.search(r"127\.0\.0\.1:\d+/1 \| ", log), (
        "the process's stderr is in the bridge's log, labelled"
    )


def test_the_pypi_server_in_both_eras(gateways, procs, tmp_path, stdio_servers):
    bridges = Bridges(procs, tmp_path, [stdio_servers["time"], "--local-timezone", "UTC"], n=1)
    secret = new_secret("bridge-client")
    config = gateway_config([server("time", f"{bridges.urls[0]}/mcp", upstreamEra="byClient")], [key("c", secret, ["time"])])
    gw = gateways.start(config)
    modern = RawMcp(gw.mcp_url(), secret, MODERN_VERSION)
    assert {"time__get_current_time", "time__convert_time"} <= set(tool_names(modern.list_tools().result["tools"]))
    r = modern.call_tool("time__get_current_time", {"timezone": "Europe/Paris"})
    assert r.status == 200 and "Europe/Paris" in json.dumps(r.result), r.raw[:300]
    with RawMcp(gw.mcp_url(), secret, "legacy") as legacy:
        assert legacy.initialize(LEGACY_VERSION).status == 200
        r = legacy.call_tool("time__convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"})
        assert r.status == 200 and "21:00" in json.dumps(r.result), r.raw[:300]


def test_readiness_waits_for_an_answered_initialize(procs, tmp_path):
    # A server that starts but never answers: not ready, and says why.
    bridge = procs.start("bridge-silent", [binary(BRIDGE_BIN), "--listen", "127.0.0.1:0", "--init-timeout", "60s", "--", "sleep", "600"])
    r = httpx.get(f"{bridge.url}/readyz", timeout=5)
    assert r.status_code == 503 and "initialize" in r.text, (r.status_code, r.text)
    assert httpx.get(f"{bridge.url}/healthz", timeout=5).status_code == 200


def test_a_command_that_exits_at_once_makes_the_bridge_exit_with_the_reason(procs, tmp_path):
    # Three starts in a row that never answer initialize: the bridge gives up and exits, so a
    # pod shows the crash (CrashLoopBackOff with the exit code and this reason).
    script = tmp_path / "fails.sh"
    script.write_text("#!/bin/sh\necho 'cannot open the database' >&2\nexit 3\n")
    script.chmod(0o755)
    proc = procs.start("bridge-exits", [binary(BRIDGE_BIN), "--listen", "127.0.0.1:0", "--", str(script)])
    assert proc.popen.wait(30) == 1, proc.log_text()[-2000:]
    log = proc.log_text()
    assert "exited with code 3" in log and "none ever answered initialize" in log, log[-2000:]
    assert "cannot open the database" in log


def test_sigterm_drains_then_stops_every_process(gateways, procs, tmp_path, stdio_servers):
    bridges = Bridges(procs, tmp_path, [stdio_servers["everything"]], n=1, pool_size=2,
                      extra=("--shutdown-grace", "20s"))  # fmt: skip
    secret = new_secret("bridge-client")
    gw, _ = two_gateways(gateways, bridges.urls[0], secret)
    modern = RawMcp(gw.mcp_url(), secret, MODERN_VERSION)
    labels = {label_of(modern.call_tool("every__get-env", {})) for _ in range(4)}
    t, result = long_call(gw, secret, bridges.urls[0], seconds=3)
    bridge = bridges.procs[0]
    bridge.signal(signal.SIGTERM)
    wait_until(lambda: httpx.get(f"{bridges.urls[0]}/readyz", timeout=2).text.strip() == "draining", 5, what="readiness to fail")
    t.join(30)
    reply = result["reply"]
    assert reply.status == 200 and "completed" in json.dumps(reply.result), reply.raw[:300]
    bridge.popen.wait(30)
    assert bridge.popen.returncode == 0, bridge.log_text()[-2000:]
    assert not any(pids_of(label) for label in labels), "a server process outlived the bridge"


def long_call(gw, secret: str, bridge_url: str, seconds: int) -> tuple[threading.Thread, dict]:
    """A `seconds`-long 2026-07-28 call in a thread, returned once a process holds it; its
    reply lands in the dict under "reply"."""
    result: dict = {}

    def call():
        result["reply"] = RawMcp(gw.mcp_url(), secret, MODERN_VERSION).call_tool(
            "every__trigger-long-running-operation", {"duration": seconds, "steps": seconds}
        )

    t = threading.Thread(target=call)
    t.start()
    wait_until(lambda: bridge_busy(bridge_url), 10, what="the long call to lease a process")
    return t, result


def bridge_saw_exit(bridge: Proc, label: str) -> None:
    """Waits for the bridge's log to say the process ended (the OS may reap it a moment before
    the bridge hears of it; a request in that moment is one in flight, answered with an error)."""
    wait_until(lambda: re.search(rf"was killed .* process={re.escape(label)}\b", bridge.log_text()), 10,
               what=f"the bridge to see {label} exit")  # fmt: skip


def bridge_busy(url: str) -> bool:
    """A process is leased (fewer idle than alive), from /readyz."""
    m = re.search(r"(\d+) processes, (\d+) idle", httpx.get(f"{url}/readyz", timeout=2).text)
    return bool(m) and int(m.group(2)) < int(m.group(1))


def test_idle_sessions_and_surplus_pooled_processes_are_reaped(procs, tmp_path, stdio_servers):
    # One pooled process kept; a legacy session idle 2 s ends; extra pooled processes idle 1 s go.
    bridges = Bridges(procs, tmp_path, [stdio_servers["everything"]], n=1, pool_size=1,
                      extra=("--session-idle", "2s", "--process-idle", "1s"))  # fmt: skip
    url = f"{bridges.urls[0]}/mcp"
    headers = {"accept": "application/json, text/event-stream"}
    init = httpx.post(url, headers=headers, timeout=30, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})  # fmt: skip
    sid = init.headers["mcp-session-id"]
    session = {**headers, "mcp-session-id": sid, "mcp-protocol-version": LEGACY_VERSION}
    env = httpx.post(url, headers=session, timeout=30,
                     json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "get-env", "arguments": {}}})  # fmt: skip
    text = "".join(c.get("text", "") for c in env.json()["result"]["content"])
    label = LABEL.search(text).group(1)
    assert pids_of(label), "the session's process runs"
    # Three 2026-07-28 calls at once: the pool grows past its size.
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION, "io.modelcontextprotocol/clientCapabilities": {}}
    calls = [threading.Thread(target=lambda: httpx.post(url, headers=headers, timeout=30, json={
        "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "trigger-long-running-operation", "arguments": {"duration": 1, "steps": 1}, "_meta": meta}}))
        for _ in range(3)]  # fmt: skip
    def counts() -> tuple[int, int]:
        m = re.search(r"(\d+) processes, \d+ idle, (\d+) sessions", httpx.get(f"{bridges.urls[0]}/readyz", timeout=2).text)
        return (int(m.group(1)), int(m.group(2))) if m else (-1, -1)

    for t in calls:
        t.start()
    # The pool's size is read while the calls run: once they end, the surplus may already be
    # reaped (1 s idle) on a loaded machine, so reading it afterwards would race the reaper.
    peak = 0
    deadline = time.monotonic() + 30
    while any(t.is_alive() for t in calls) and time.monotonic() < deadline:
        peak = max(peak, counts()[0])
        time.sleep(0.05)
    for t in calls:
        t.join(30)
    assert peak >= 3, f"the pool never grew past its size: {peak} processes at most"
    wait_until(lambda: counts() == (1, 0), 15, what="the idle session and the surplus pooled processes to be reaped")
    assert not pids_of(label), "the idle session's process is gone"
    gone = httpx.post(url, headers=session, timeout=30,
                      json={"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "get-env", "arguments": {}}})  # fmt: skip
    assert gone.status_code == 404, (gone.status_code, gone.text[:200])


PY_UPSTREAM = REPO_ROOT / "tests" / "e2e" / "upstreams" / "python_upstream.py"


def sse_messages(response: httpx.Response):
    """The JSON-RPC messages of an SSE response, as they arrive."""
    for line in response.iter_lines():
        if line.startswith("data:"):
            yield json.loads(line[5:].strip())


def test_a_server_request_is_relayed_and_a_client_that_goes_away_cancels_on_the_process(procs, tmp_path):
    # The Python SDK's server over stdio: `sample` asks the client's LLM (a server-to-client
    # request on the call's stream), `slow_stream` counts its runs that were cancelled.
    bridges = Bridges(procs, tmp_path, [sys.executable, str(PY_UPSTREAM), "--stdio"], n=1, pool_size=1)
    url = f"{bridges.urls[0]}/mcp"
    accept = {"accept": "application/json, text/event-stream"}
    init = httpx.post(url, headers=accept, timeout=30, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": LEGACY_VERSION, "capabilities": {"sampling": {}}, "clientInfo": {"name": "t", "version": "0"}}})  # fmt: skip
    assert init.status_code == 200, init.text
    session = {**accept, "mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": LEGACY_VERSION}
    httpx.post(url, headers=session, timeout=30, json={"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(id_: int, name: str, arguments: dict, **params):
        return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name, "arguments": arguments, **params}}

    with httpx.stream("POST", url, headers=session, json=call(2, "sample", {"prompt": "hi"}), timeout=30) as r:
        messages = sse_messages(r)
        asked = next(messages)
        assert asked.get("method") == "sampling/createMessage" and "id" in asked, asked
        reply = {"jsonrpc": "2.0", "id": asked["id"], "result": {
            "role": "assistant", "content": {"type": "text", "text": "sampled by the test"}, "model": "test"}}  # fmt: skip
        assert httpx.post(url, headers=session, json=reply, timeout=30).status_code == 202
        answer = next(m for m in messages if m.get("id") == 2)
    assert "sampled by the test" in json.dumps(answer["result"]), answer

    def runs() -> dict:
        r = httpx.post(url, headers=session, json=call(9, "runs", {}), timeout=30)
        text = r.json()["result"]["content"][0]["text"] if "json" in r.headers["content-type"] else next(
            m for m in sse_messages(r) if m.get("id") == 9)["result"]["content"][0]["text"]  # fmt: skip
        return json.loads(text)

    # Control: a run left alone finishes, and is not counted as cancelled.
    with httpx.stream("POST", url, headers=session, json=call(3, "slow_stream", {"seconds": 0.4, "interval": 0.1},
                      _meta={"progressToken": "done"}), timeout=30) as r:  # fmt: skip
        assert any(m.get("id") == 3 for m in sse_messages(r))
    assert runs()["finished"].get("slow_stream") == 1 and not runs()["cancelled"], runs()
    # A client that goes away after the first progress: the process hears notifications/cancelled.
    with httpx.stream("POST", url, headers=session, json=call(4, "slow_stream", {"seconds": 30, "interval": 0.1},
                      _meta={"progressToken": "gone"}), timeout=30) as r:  # fmt: skip
        first = next(sse_messages(r))
        assert first.get("method") == "notifications/progress", first
    wait_until(lambda: runs()["cancelled"].get("slow_stream") == 1, 10, what="the process to count the run cancelled")
