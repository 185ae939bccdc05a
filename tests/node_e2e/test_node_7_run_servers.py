"""Issue 23 on the one-node cluster: McpServers the operator runs (spec.run), from images of real
stdio servers built from Debian's packages (tests/node/stdio-images.sh): the npm
server-everything and the PyPI mcp-server-time, and the example upstream's image as a
streamableHttp server.

1. server-everything at 3 replicas reaches Ready; a client pod lists and calls its tools
   through the gateway Service in both eras, and the calls reach both gateway pods (their own
   audit records say so).
2. A legacy session's 50 calls (a new connection each, so the Service spreads them over both
   gateway pods) land on one process (server-everything's `get-env` shows the
   SWITCHBOARD_BRIDGE_PROCESS the bridge gives each process); 2026-07-28 calls spread over pods.
3. `kill -9` of the stdio process that just answered: the next calls work. Deleting the server
   pod that answered the last call while a client pod calls in a loop: 2026-07-28 calls fail
   0 times; a legacy session on the deleted pod gets answers (never a hang) and goes on.
   (Issue 35: the calls in between end with a clear 404, and the caller opens a new session.)
4. Issue 35: a stateful server (npm server-memory) at 1 replica, six legacy sessions through one
   gateway pod; `spec.run.replicas` 1 -> 3: every session still sees its own entities through
   both gateway pods (no second process); more sessions over the three; 3 -> 1: the sessions
   whose pod went end with a clear 404 through both gateway pods, the others keep their
   entities, and a new session works.
5. The PyPI server, and a streamableHttp container, run by the same field.
6. An image that does not exist, and a command that exits at once, show in the McpServer's
   conditions within 30 s with the reason; fixing the spec recovers.
7. Deleting an McpServer deletes its Deployment, Services, pods and Secret.
8. Issue 38: the fence, enforced by kube-router's network policy controller on the node. A pod
   in another namespace calling the server's Service directly (the bridge answers anyone who
   reaches it, without a key) is refused, while the same call through the gateway works; the
   server's pods reach the one address `network.egress` declares (a gateway pod's port) and
   not an undeclared one (the other gateway pod). Control: `network.policy: Unmanaged` (the
   policy deleted) lets the same outsider pod call the server and the server reach the
   undeclared pod; `Fenced` again closes both. (Every earlier test ran fenced: the gateway's
   calls, legacy sessions handed between the bridges and the operator's probe all passed
   through it.)
"""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest
from node import (
    GATEWAY_URL, RELEASE_NS, apply, caller_pod, get_json, kubectl, pods, ready, run_to_completion,
    later_images_imported, secret_value, version, wait,
)

NS = "runs"
EVERYTHING = "switchboard.test/stdio-everything:local"
TIME = "switchboard.test/stdio-time:local"
LABEL = re.compile(r'"SWITCHBOARD_BRIDGE_PROCESS"\s*:\s*"([^"]+)"')
GATEWAY_HOST = "switchboard-gateway.switchboard.svc"
GONE = "no longer has this session's state"
# server-memory keeps its knowledge graph in the file MEMORY_FILE_PATH names: one per process
# (named after the process's label), so what a session stored lives in its own process only.
MEMORY_SCRIPT = ('label=$(printf %s "$SWITCHBOARD_BRIDGE_PROCESS" | tr -c "A-Za-z0-9" _); '
                 'MEMORY_FILE_PATH="/tmp/memory-$label.jsonl" '
                 'exec node /memory/node_modules/@modelcontextprotocol/server-memory/dist/index.js')  # fmt: skip


def server(name: str, run: dict) -> dict:
    return {"apiVersion": "switchboard.dev/v1alpha1", "kind": "McpServer", "metadata": {"name": name, "namespace": NS},
            "spec": {"run": {"imagePullPolicy": "Never",
                             "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
                             **run},
                     "accessGroups": ["runs"], "timeout": "20s"}}  # fmt: skip


def everything_run(replicas: int = 3) -> dict:
    return {"image": EVERYTHING, "command": ["node", "/app/node_modules/.bin/mcp-server-everything"], "args": ["stdio"],
            "replicas": replicas}  # fmt: skip


def condition(name: str, type_: str) -> dict | None:
    obj = get_json("mcpserver", name, "-n", NS)
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == type_), None)


def results(logs: str) -> list[dict]:
    return [json.loads(line) for line in logs.splitlines() if line.startswith("{")]


def run_caller(name: str, mode: str, url: str, key: str, *flags: str, timeout: float = 120) -> tuple[str, list[dict]]:
    pod = caller_pod(name, NS, [mode, "-url", url, "-key", key, *flags])
    phase, logs = run_to_completion(pod, timeout=timeout)
    return phase, results(logs)


def labels_of(lines: list[dict]) -> list[str]:
    found = []
    for line in lines:
        if "n" in line:
            m = LABEL.search(line.get("text", ""))
            assert line["ok"] and m, f"call {line['n']} did not say which process answered: {line}"
            found.append(m.group(1))
    return found


def gateway_audit_counts(since: str, path_part: str) -> dict[str, int]:
    """How many audit records each gateway pod wrote since `since` (RFC 3339) for `path_part`."""
    counts = {}
    for pod in pods("app.kubernetes.io/component=gateway"):
        name = pod["metadata"]["name"]
        out = kubectl("logs", name, "-n", RELEASE_NS, "-c", "gateway", f"--since-time={since}").stdout
        counts[name] = sum(1 for line in out.splitlines() if line.startswith('{"schema":"switchboard.audit/') and path_part in line)
    return counts


@pytest.fixture(scope="module")
def everything(installed) -> dict:
    later_images_imported()
    apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
          {"apiVersion": "switchboard.dev/v1alpha1", "kind": "McpKey", "metadata": {"name": "runs", "namespace": NS},
           "spec": {"secretName": "runs-key", "accessGroups": ["runs"]}})  # fmt: skip
    key = wait(lambda: secret_value("runs-key", NS, "key"), 60, "the generated key")
    t0 = time.monotonic()
    apply(server("everything", everything_run()))
    kubectl("wait", "--for=condition=Ready", "mcpserver/everything", "-n", NS, "--timeout=240s", timeout=260)
    ready_s = time.monotonic() - t0
    phase, lines = run_caller("first-call", "session", f"{GATEWAY_URL}/mcp/everything", key,
                              "-era", "modern", "-tool", "get-sum", "-args", '{"a":1,"b":2}', "-n", "1")  # fmt: skip
    first_s = time.monotonic() - t0
    assert phase == "Succeeded", lines
    print(f"\nkubectl apply -> Ready (3 replicas): {ready_s:.1f}s; -> first call answered: {first_s:.1f}s")
    return {"key": key, "url": f"{GATEWAY_URL}/mcp/everything", "ready_s": ready_s, "first_call_s": first_s}


def test_three_replicas_are_ready_and_both_eras_list_and_call_through_both_gateways(everything):
    status = get_json("mcpserver", "everything", "-n", NS)["status"]
    assert status.get("readyReplicas") == 3 and status.get("toolCount", 0) >= 10, status
    running = condition("everything", "Running")
    assert (running["status"], running["message"]) == ("True", "3/3 pods ready"), running
    since = get_json("mcpserver", "everything", "-n", NS)["metadata"]["creationTimestamp"]
    for era in ("modern", "legacy"):
        phase, lines = run_caller(f"list-{era}", "list", everything["url"], everything["key"], "-era", era)
        assert phase == "Succeeded" and {"get-sum", "get-env", "echo"} <= set(lines[-1]["tools"]), lines
        phase, lines = run_caller(f"calls-{era}", "session", everything["url"], everything["key"], "-era", era,
                                  "-tool", "echo", "-args", '{"message":"through the bridge"}', "-n", "20", "-fresh")  # fmt: skip
        assert phase == "Succeeded" and lines[-1]["failed"] == 0, lines[-3:]
        assert all("through the bridge" in line["text"] for line in lines if "n" in line)
    counts = gateway_audit_counts(since, "/mcp/everything")
    assert len(counts) == 2 and all(n > 0 for n in counts.values()), f"both gateway pods served: {counts}"


def test_a_legacy_session_keeps_its_process_and_modern_calls_spread(everything):
    phase, lines = run_caller("legacy-50", "session", everything["url"], everything["key"], "-era", "legacy",
                              "-tool", "get-env", "-n", "50", "-fresh")  # fmt: skip
    assert phase == "Succeeded", lines[-3:]
    labels = labels_of(lines)
    assert len(labels) == 50 and len(set(labels)) == 1, f"one process for the session: {sorted(set(labels))}"
    # 2026-07-28 calls at once: a gateway pod keeps a connection to one server pod while it is
    # busy (the Service balances connections, not requests), so calls that overlap open more
    # connections and spread over the pods; any idle process on any pod may answer.
    phase, lines = run_caller("modern-parallel", "session", everything["url"], everything["key"], "-era", "modern",
                              "-tool", "get-env", "-n", "64", "-parallel", "8", "-fresh")  # fmt: skip
    assert phase == "Succeeded", lines[-3:]
    labels = labels_of(lines)
    replicas = {label.rsplit("/", 1)[0] for label in labels}
    assert len(labels) == 64 and len(replicas) >= 2, f"2026-07-28 calls spread over pods: {replicas}"


def server_pod_at(address: str) -> str:
    """The name of the server pod whose bridge advertises `address` (its pod IP:8080)."""
    ip = address.split(":")[0]
    for pod in pods("switchboard.dev/mcpserver=everything", NS):
        if pod["status"].get("podIP") == ip:
            return pod["metadata"]["name"]
    raise AssertionError(f"no server pod has IP {ip}")


def test_kill_9_of_the_process_that_answered_then_the_next_calls_work(everything):
    phase, lines = run_caller("whoami", "session", everything["url"], everything["key"], "-era", "modern", "-tool", "get-env", "-n", "1")
    label = labels_of(lines)[0]
    address, _ = label.rsplit("/", 1)
    pod = server_pod_at(address)
    # The stdio process is the one whose environment carries its label (node, as user 65532).
    script = (f"for d in /proc/[0-9]*; do grep -qz 'SWITCHBOARD_BRIDGE_PROCESS={label}$' $d/environ 2>/dev/null "
              f"&& kill -9 ${{d#/proc/}} && echo killed ${{d#/proc/}}; done; true")  # fmt: skip
    out = kubectl("exec", pod, "-n", NS, "-c", "server", "--", "bash", "-c", script).stdout
    assert "killed" in out, f"no process with {label} in {pod}: {out}"
    phase, lines = run_caller("after-kill", "session", everything["url"], everything["key"], "-era", "modern",
                              "-tool", "get-env", "-n", "10", "-fresh")  # fmt: skip
    assert phase == "Succeeded" and label not in labels_of(lines), lines[-3:]


def test_deleting_the_pod_that_answers_under_a_call_loop(everything):
    # A modern loop and a legacy session, both calling for ~20 s.
    flags = ["-tool", "get-env", "-n", "200", "-pause", "100ms", "-fresh", "-timeout", "30s"]
    for era in ("modern", "legacy"):
        kubectl("delete", "pod", f"loop-{era}", "-n", NS, "--ignore-not-found", "--wait=true")
        apply(caller_pod(f"loop-{era}", NS, ["session", "-url", everything["url"], "-key", everything["key"], "-era", era, *flags]))
    wait(lambda: all(get_json("pod", f"loop-{e}", "-n", NS)["status"].get("phase") == "Running" for e in ("modern", "legacy")),
         60, "the loops to run")  # fmt: skip

    def last_label(era: str) -> str | None:
        lines = results(kubectl("logs", f"loop-{era}", "-n", NS).stdout)
        labels = [m.group(1) for line in lines if (m := LABEL.search(line.get("text", "")))]
        return labels[-1] if len(labels) >= 10 else None

    # Disturb what the legacy session actually uses: the pod holding its process.
    label = wait(lambda: last_label("legacy"), 60, "the legacy session's first calls")
    victim = server_pod_at(label.rsplit("/", 1)[0])
    kubectl("delete", "pod", victim, "-n", NS, "--wait=false")
    outcome = {}
    for era in ("modern", "legacy"):
        phase = wait(lambda e=era: (p := get_json("pod", f"loop-{e}", "-n", NS)["status"].get("phase")) in ("Succeeded", "Failed") and p,
                     120, f"the {era} loop to finish")  # fmt: skip
        outcome[era] = (phase, results(kubectl("logs", f"loop-{era}", "-n", NS).stdout))
        kubectl("delete", "pod", f"loop-{era}", "-n", NS, "--wait=false")
    phase, lines = outcome["modern"]
    failed = [line for line in lines if "n" in line and not line["ok"]]
    assert phase == "Succeeded" and not failed, f"2026-07-28 calls failed while {victim} went: {failed[:5]}"
    _, lines = outcome["legacy"]
    calls = [line for line in lines if "n" in line]
    assert len(calls) == 200, "every legacy call was answered (no hang)"
    failed = [line for line in calls if not line["ok"]]
    after = [LABEL.search(line["text"]).group(1) for line in calls[-20:] if line["ok"] and LABEL.search(line["text"])]
    assert after and label not in after, f"the session goes on, on another process: {after[-3:]}"
    print(f"\nlegacy session on the deleted pod: {len(failed)} of 200 calls answered with an error: "
          f"{sorted({line['text'][:120] for line in failed})}")
    # Its process went with the pod: the session ended with a clear 404, and the caller opened a
    # new one (never a new process in its place without a word).
    assert any(line["status"] == 404 and GONE in line["text"] and line.get("reopened") is True for line in failed), failed[:5]
    kubectl("wait", "--for=condition=Ready", "mcpserver/everything", "-n", NS, "--timeout=120s", timeout=140)


def memory_server(replicas: int) -> dict:
    return server("memory", {"image": EVERYTHING, "command": ["bash"], "args": ["-c", MEMORY_SCRIPT], "replicas": replicas,
                             "stdio": {"poolSize": 1, "maxProcesses": 40},
                             "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "3Gi"}}})  # fmt: skip


class Legacy:
    """A legacy client session, by hand, on one gateway pod at a time (by its address)."""

    def __init__(self, key: str):
        self.key = key
        self.session: str | None = None

    def post(self, ip: str, body: dict) -> httpx.Response:
        headers = {"Host": GATEWAY_HOST, "Authorization": f"Bearer {self.key}", "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}  # fmt: skip
        if self.session:
            headers |= {"Mcp-Session-Id": self.session, "MCP-Protocol-Version": "2025-11-25"}
        return httpx.post(f"http://{ip}:8080/mcp/memory", json=body, headers=headers, timeout=60)

    def open(self, ip: str) -> None:
        self.session = None
        r = self.post(ip, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "node-e2e", "version": "0"}}})  # fmt: skip
        assert r.status_code == 200 and r.headers.get("mcp-session-id"), (r.status_code, r.text[:300])
        self.session = r.headers["mcp-session-id"]
        assert self.post(ip, {"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202

    def call(self, ip: str, tool: str, arguments: dict) -> tuple[int, dict]:
        r = self.post(ip, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            answers = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
            return r.status_code, next(a for a in reversed(answers) if "id" in a)
        return r.status_code, r.json()

    def remember(self, ip: str, name: str) -> None:
        status, answer = self.call(ip, "create_entities", {"entities": [{"name": name, "entityType": "note", "observations": [name]}]})
        assert status == 200 and "result" in answer and not answer["result"].get("isError"), answer

    def entities(self, ip: str) -> tuple[int, set[str] | None, str]:
        """(HTTP status, the entity names read_graph returned or None, the error message)."""
        status, answer = self.call(ip, "read_graph", {})
        if "result" in answer and not answer["result"].get("isError"):
            return status, {e["name"] for e in answer["result"]["structuredContent"]["entities"]}, ""
        return status, None, json.dumps(answer.get("error") or answer.get("result"))[:300]


def memory_pods() -> dict[str, str]:
    """The memory server's pods that run: pod IP -> name."""
    return {p["status"]["podIP"]: p["metadata"]["name"] for p in pods("switchboard.dev/mcpserver=memory", NS)
            if ready(p) and p["status"].get("podIP")}  # fmt: skip


def sessions_held(ip: str) -> int:
    """Legacy sessions the bridge on the pod at `ip` holds (its /readyz)."""
    text = httpx.get(f"http://{ip}:8080/readyz", timeout=5).text
    m = re.search(r"(\d+) sessions", text)
    assert m, text
    return int(m.group(1))


def scaled_to(replicas: int) -> bool:
    status = get_json("mcpserver", "memory", "-n", NS).get("status", {})
    running = condition("memory", "Running") or {}
    return (status.get("readyReplicas") == replicas and running.get("message") == f"{replicas}/{replicas} pods ready"
            and len(pods("switchboard.dev/mcpserver=memory", NS)) == replicas and len(memory_pods()) == replicas)  # fmt: skip


def test_legacy_sessions_keep_their_process_when_the_server_scales_1_3_1(everything):
    apply(memory_server(1))
    kubectl("wait", "--for=condition=Ready", "mcpserver/memory", "-n", NS, "--timeout=240s", timeout=260)
    wait(lambda: scaled_to(1), 120, "one memory pod")
    gateways = {p["status"]["podIP"]: p["metadata"]["name"] for p in pods("app.kubernetes.io/component=gateway") if ready(p)}
    assert len(gateways) == 2, gateways
    gw_a, gw_b = sorted(gateways)
    (first_pod,) = memory_pods()

    sessions: dict[str, Legacy] = {}
    for i in range(6):
        client = sessions[f"first-{i}"] = Legacy(everything["key"])
        client.open(gw_a)
        client.remember(gw_a, f"first-{i}")
    assert sessions_held(first_pod) == 6

    # 1 -> 3, what the autoscaler does.
    apply(memory_server(3))
    wait(lambda: scaled_to(3), 240, "three memory pods ready")
    for name, client in sessions.items():
        for gw in (gw_b, gw_a):
            status, seen, error = client.entities(gw)
            assert seen == {name}, f"{name} through {gateways[gw]}: HTTP {status} {seen} {error} (a second process, without its state)"
    held = {ip: sessions_held(ip) for ip in memory_pods()}
    assert held == {ip: (6 if ip == first_pod else 0) for ip in held}, f"no second process for any session: {held}"

    # New sessions, placed over the three pods (at least two on the new ones).
    for i in range(30):
        if i >= 6 and sum(n for ip, n in held.items() if ip != first_pod) >= 2:
            break
        client = sessions[f"later-{i}"] = Legacy(everything["key"])
        client.open(gw_b)
        client.remember(gw_b, f"later-{i}")
        held = {ip: sessions_held(ip) for ip in memory_pods()}
    assert sum(held.values()) == len(sessions) and sum(n for ip, n in held.items() if ip != first_pod) >= 2, held
    for name, client in sessions.items():
        assert client.entities(gw_a)[1] == {name}, name

    # 3 -> 1: the sessions on the pods that go end with them, the others go on.
    apply(memory_server(1))
    wait(lambda: scaled_to(1), 240, "one memory pod again")
    (survivor,) = memory_pods()
    kept, ended = [], []
    for name, client in sessions.items():
        outcomes = [client.entities(gw) for gw in (gw_a, gw_b)]
        if all(seen == {name} for _, seen, _ in outcomes):
            kept.append(name)
            continue
        for gw, (status, seen, error) in zip((gw_a, gw_b), outcomes):
            assert status == 404 and GONE in error, (
                f"{name} through {gateways[gw]}: HTTP {status} {seen} {error} (its process is gone: a clear 404, never another process)")
        ended.append(name)
    print(f"\n1 -> 3 -> 1 with {len(sessions)} sessions: {held} before 3 -> 1; {survivor} stayed; "
          f"{len(kept)} kept their entities, {len(ended)} ended with a 404 naming the lost state")
    assert len(kept) == held.get(survivor, 0) and len(ended) == len(sessions) - len(kept), (kept, ended, held, survivor)
    # The client starts over; the new session works through both gateway pods.
    client = sessions[ended[0]] if ended else Legacy(everything["key"])
    client.open(gw_a)
    client.remember(gw_a, "again")
    assert client.entities(gw_b)[1] == {"again"}
    kubectl("delete", "mcpserver", "memory", "-n", NS, "--wait=false")


def test_the_pypi_server_and_a_streamable_http_container(everything):
    apply(server("time", {"image": TIME, "command": ["/opt/time/bin/mcp-server-time"], "args": ["--local-timezone", "UTC"]}),
          server("http", {"image": f"ghcr.io/switchboard-dev/switchboard-example-upstream:{version()}", "transport": "streamableHttp",
                          "port": 8931, "args": ["--listen", "0.0.0.0:8931"]}))  # fmt: skip
    for name in ("time", "http"):
        kubectl("wait", "--for=condition=Ready", f"mcpserver/{name}", "-n", NS, "--timeout=180s", timeout=200)
    for era in ("modern", "legacy"):
        phase, lines = run_caller(f"time-{era}", "session", f"{GATEWAY_URL}/mcp/time", everything["key"], "-era", era,
                                  "-tool", "get_current_time", "-args", '{"timezone":"Asia/Tokyo"}', "-n", "3")  # fmt: skip
        assert phase == "Succeeded" and "Asia/Tokyo" in lines[0]["text"], lines
        phase, lines = run_caller(f"http-{era}", "session", f"{GATEWAY_URL}/mcp/http", everything["key"], "-era", era,
                                  "-tool", "add", "-args", '{"a":20,"b":22}', "-n", "3")  # fmt: skip
        assert phase == "Succeeded" and "42" in lines[0]["text"], lines


def test_a_missing_image_and_an_exiting_command_say_why_within_30s_and_recover(everything):
    t0 = time.monotonic()
    apply(server("noimage", {**everything_run(1), "image": "switchboard.test/does-not-exist:1"}),
          server("exits", {**everything_run(1), "command": ["node", "-e", "console.error('no config'); process.exit(3)"], "args": []}))

    def reason(name):
        c = condition(name, "Running")
        return c and c["status"] == "False" and c["reason"] not in ("Progressing", "Creating") and c

    c = wait(lambda: reason("noimage"), 30, "noimage's Running to say why")
    print(f"\nnoimage: {c['reason']} after {time.monotonic() - t0:.1f}s: {c['message'][:160]}")
    assert c["reason"] in ("ErrImageNeverPull", "ImagePullBackOff", "ErrImagePull"), c
    assert "does-not-exist" in c["message"], c
    ready = condition("noimage", "Ready")
    assert (ready["status"], ready["reason"]) == ("False", c["reason"]), ready
    c = wait(lambda: reason("exits"), 30, "exits's Running to say why")
    print(f"exits: {c['reason']} after {time.monotonic() - t0:.1f}s: {c['message'][:200]}")
    assert c["reason"] in ("CrashLoopBackOff", "Error"), c
    assert "code 1" in c["message"] and "exited with code 3" in c["message"], c
    # Fixing the spec recovers, nothing else touched.
    apply(server("noimage", everything_run(1)), server("exits", everything_run(1)))
    for name in ("noimage", "exits"):
        kubectl("wait", "--for=condition=Ready", f"mcpserver/{name}", "-n", NS, "--timeout=180s", timeout=200)


def dial(pod: str, ip: str, port: int) -> bool:
    """Whether a TCP connection from the server container of `pod` to ip:port opens (3 s)."""
    script = f"timeout 3 bash -c 'exec 3<>/dev/tcp/{ip}/{port}' 2>/dev/null && echo REACHED || echo BLOCKED"
    out = kubectl("exec", pod, "-n", NS, "-c", "server", "--", "bash", "-c", script, check=False).stdout
    assert out.strip() in ("REACHED", "BLOCKED"), f"the dial from {pod} did not run: {out!r}"
    return out.strip() == "REACHED"


def test_the_fence_keeps_out_other_pods_and_keeps_the_server_in(everything):
    outside = "outside"
    apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": outside}})
    wait(lambda: get_json("serviceaccount", "-n", outside)["items"], 30, "the outside namespace's default ServiceAccount")
    direct = f"http://everything-mcp.{NS}.svc:8080/mcp"
    fence = get_json("networkpolicy", "everything-mcp", "-n", NS)
    assert fence["spec"]["policyTypes"] == ["Ingress", "Egress"], fence["spec"]

    def outsider_calls(n: int) -> bool:
        """One echo straight to the server's Service from a pod in another namespace."""
        pod = caller_pod(f"outsider-{n}", outside, ["session", "-url", direct, "-key", "none", "-era", "modern",
                                                    "-tool", "echo", "-args", '{"message":"past the gateway"}',
                                                    "-n", "1", "-timeout", "3s"])  # fmt: skip
        phase, logs = run_to_completion(pod, timeout=60)
        return phase == "Succeeded" and "past the gateway" in logs

    gateways = sorted((p["metadata"]["name"], p["status"]["podIP"]) for p in pods("app.kubernetes.io/component=gateway"))
    assert len(gateways) == 2, gateways
    (_, declared_ip), (_, undeclared_ip) = gateways
    fenced = {**everything_run(), "network": {"egress": [
        {"to": [{"ipBlock": {"cidr": f"{declared_ip}/32"}}], "ports": [{"port": 8080, "protocol": "TCP"}]}]}}
    apply(server("everything", fenced))
    wait(lambda: len(get_json("networkpolicy", "everything-mcp", "-n", NS)["spec"]["egress"]) == 3, 30,
         "the declared egress rule in the fence")  # fmt: skip
    server_pod = next(p["metadata"]["name"] for p in pods("switchboard.dev/mcpserver=everything", NS) if ready(p))

    assert not outsider_calls(1), "a pod in another namespace called the fenced server past the gateway"
    phase, lines = run_caller("fenced-through-gateway", "session", everything["url"], everything["key"], "-era", "modern",
                              "-tool", "echo", "-args", '{"message":"through the gateway"}', "-n", "3")  # fmt: skip
    assert phase == "Succeeded" and all("through the gateway" in line["text"] for line in lines if "n" in line), lines
    wait(lambda: dial(server_pod, declared_ip, 8080), 30, "the server to reach its declared address")
    assert not dial(server_pod, undeclared_ip, 8080), "the fenced server reached an address it did not declare"

    # Control: the same pods without the fence.
    apply(server("everything", {**fenced, "network": {**fenced["network"], "policy": "Unmanaged"}}))
    wait(lambda: kubectl("get", "networkpolicy", "everything-mcp", "-n", NS, check=False).returncode != 0, 30,
         "the fence to be deleted")  # fmt: skip
    wait(lambda: dial(server_pod, undeclared_ip, 8080), 30, "the unfenced server to reach the other gateway pod")
    n = iter(range(2, 100))
    wait(lambda: outsider_calls(next(n)), 60, "the outsider to reach the unfenced server", interval=1)

    # Fenced again: closed again.
    apply(server("everything", fenced))
    wait(lambda: not dial(server_pod, undeclared_ip, 8080), 30, "the fence to close again")
    assert not outsider_calls(next(n)), "the outsider still reached the server once fenced again"
    kubectl("delete", "namespace", outside, "--wait=false")


def test_deleting_an_mcpserver_leaves_nothing_behind(everything):
    for name in ("noimage", "exits", "time", "http"):
        kubectl("delete", "mcpserver", name, "-n", NS, "--ignore-not-found", "--wait=true")

    def gone():
        left = []
        for kind in ("deployment", "service", "secret", "pod", "hpa", "networkpolicy"):
            items = get_json(kind, "-n", NS, "-l", "app.kubernetes.io/component=mcp-server")["items"]
            left += [f"{kind}/{i['metadata']['name']}" for i in items
                     if i["metadata"].get("labels", {}).get("switchboard.dev/mcpserver") in ("noimage", "exits", "time", "http")]
        return not left or (print(left) and False)

    wait(gone, 120, "the deleted servers' objects to go")
    assert ready(pods("switchboard.dev/mcpserver=everything", NS)[0])
