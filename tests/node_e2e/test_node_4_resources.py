"""Where the chart's resource requests and limits come from: the gateway's and the operator's
memory (working set, as the kubelet counts it against a limit) and CPU, read from the kubelet's
stats at rest and while four client pods call the gateway as fast as they can. The figures are
printed; the test asserts only that they were measured, that no call failed, and that the peak
stays inside the chart's limits (memory, not time: these machines are shared). The kubelet's
stats summary cannot be used here: it needs the root filesystem's device, which the node's
private mount namespace does not show."""

from __future__ import annotations

import re
import time

from node import GATEWAY_URL, RELEASE_NS, apply, caller_log, caller_pod, get_json, kubectl, wait

LOAD_PODS = 4
LOAD_SECONDS = 20


def container_stats() -> dict[str, dict]:
    """pod name -> {component, memory working set bytes, CPU seconds so far} of the release's
    containers, from the kubelet's resource metrics (what metrics-server and `kubectl top` read)."""
    raw = kubectl("get", "--raw", "/api/v1/nodes/switchboard-node/proxy/metrics/resource").stdout
    stats: dict[str, dict] = {}
    for line in raw.splitlines():
        m = re.match(r'^(container_memory_working_set_bytes|container_cpu_usage_seconds_total)\{(.*)\} (\S+)', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if labels.get("namespace") != RELEASE_NS:
            continue
        entry = stats.setdefault(labels["pod"], {"component": labels["container"]})
        entry["memory" if m.group(1).startswith("container_memory") else "cpu_seconds"] = float(m.group(3))
    return {pod: s for pod, s in stats.items() if "memory" in s and "cpu_seconds" in s}


def limits() -> dict[str, dict]:
    out = {}
    for deploy in ("switchboard-gateway", "switchboard-operator"):
        spec = get_json("deployment", deploy, "-n", RELEASE_NS)["spec"]["template"]["spec"]["containers"][0]
        out[spec["name"]] = spec.get("resources", {})
    return out


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def test_resource_figures_under_load(served):
    idle = wait(lambda: (s := container_stats()) and len(s) == 4 and s, 60, "kubelet stats for the 4 release pods")
    names = [f"load-{i}" for i in range(LOAD_PODS)]
    for name in names:
        kubectl("delete", "pod", name, "-n", served["namespace"], "--ignore-not-found", "--wait=true")
        apply(caller_pod(name, served["namespace"], ["loop", "-url", f"{GATEWAY_URL}/mcp/demo", "-key", served["key"],
                                                     "-interval", "0s"]))
    try:
        wait(lambda: all(get_json("pod", n, "-n", served["namespace"])["status"].get("phase") == "Running" for n in names),
             60, "the load pods to run")
        peak: dict[str, dict] = {}
        start = time.time()
        before, at = container_stats(), time.monotonic()
        while time.time() - start < LOAD_SECONDS:
            time.sleep(2)
            now, now_at = container_stats(), time.monotonic()
            for pod, s in now.items():
                p = peak.setdefault(pod, {"component": s["component"], "memory": 0, "cpu": 0})
                p["memory"] = max(p["memory"], s["memory"])
                if pod in before:  # CPU over the last sample interval, in cores
                    p["cpu"] = max(p["cpu"], (s["cpu_seconds"] - before[pod]["cpu_seconds"]) / (now_at - at))
            before, at = now, now_at
        elapsed = time.time() - start
        logs = [caller_log(kubectl("logs", name, "-n", served["namespace"]).stdout) for name in names]
    finally:
        for name in names:
            kubectl("delete", "pod", name, "-n", served["namespace"], "--wait=false")
    # (A connection's end is no call: under this load the callers' own transports let go of
    # some, which their logs say as `ended ... by=caller`.)
    calls = [call for log in logs for call in log.calls]
    failed = [call for call in calls if not call.ok]
    ended = [end.by for log in logs for end in log.ended]
    chart = limits()
    print(f"\n{len(calls)} calls from {LOAD_PODS} pods in {elapsed:.0f}s ({len(calls) / elapsed:.0f}/s), {len(failed)} failed"
          f"; connections ended: {len(ended)} ({', '.join(sorted(set(ended))) or 'none'})")
    print(f"{'pod':42} {'idle memory':>12} {'peak memory':>12} {'peak CPU':>10}   chart requests / limits")
    for pod in sorted(peak):
        p, i = peak[pod], idle.get(pod, {"memory": 0})
        res = chart.get(p["component"], {})
        print(f"{pod:42} {mib(i['memory']):>12} {mib(p['memory']):>12} {p['cpu'] * 1000:>8.0f}m   "
              f"{res.get('requests', {})} / {res.get('limits', {})}")
    assert calls and not failed, f"{len(failed)} of {len(calls)} calls failed, e.g. {failed[:1]}"
    assert len(peak) == 4, f"stats for {sorted(peak)}"
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for pod, p in peak.items():
        limit = chart[p["component"]].get("limits", {}).get("memory")
        if limit:
            n = int(limit[:-2]) * units[limit[-2:]]
            assert p["memory"] < n, f"{pod}: peak {mib(p['memory'])} over the chart's limit {limit}"
