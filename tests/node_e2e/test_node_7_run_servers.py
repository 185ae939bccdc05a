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
4. The PyPI server, and a streamableHttp container, run by the same field.
5. An image that does not exist, and a command that exits at once, show in the McpServer's
   conditions within 30 s with the reason; fixing the spec recovers.
6. Deleting an McpServer deletes its Deployment, Services, pods and Secret.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from node import (
    GATEWAY_URL, RELEASE_NS, apply, caller_pod, get_json, kubectl, pods, ready, run_to_completion,
    secret_value, version, wait,
)

NS = "runs"
EVERYTHING = "switchboard.test/stdio-everything:local"
TIME = "switchboard.test/stdio-time:local"
LABEL = re.compile(r'"SWITCHBOARD_BRIDGE_PROCESS"\s*:\s*"([^"]+)"')


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
          f"{sorted({line['text'][:80] for line in failed})}")
    kubectl("wait", "--for=condition=Ready", "mcpserver/everything", "-n", NS, "--timeout=120s", timeout=140)


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


def test_deleting_an_mcpserver_leaves_nothing_behind(everything):
    for name in ("noimage", "exits", "time", "http"):
        kubectl("delete", "mcpserver", name, "-n", NS, "--ignore-not-found", "--wait=true")

    def gone():
        left = []
        for kind in ("deployment", "service", "secret", "pod", "hpa"):
            items = get_json(kind, "-n", NS, "-l", "app.kubernetes.io/component=mcp-server")["items"]
            left += [f"{kind}/{i['metadata']['name']}" for i in items
                     if i["metadata"].get("labels", {}).get("switchboard.dev/mcpserver") in ("noimage", "exits", "time", "http")]
        return not left or (print(left) and False)

    wait(gone, 120, "the deleted servers' objects to go")
    assert ready(pods("switchboard.dev/mcpserver=everything", NS)[0])
