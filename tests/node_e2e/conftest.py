"""Fixtures of the one-node cluster tests: the chart installed once per run (`installed`), and an
example upstream pod with an McpServer and McpKeys in front of it (`served`)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from node import (
    CHART, RELEASE_NS, RESTRICTED, UPSTREAM_IMAGE_REPO, NodeMissing, apply, chart_values, env, get_json,
    helm, kubectl, pods, ready, secret_value, version, wait,
)
from harness import share_client_tls

# tmp_path under a directory of the run's own, removed when every test passed (tests/e2e/temp_dirs.py;
# node.py put tests/e2e on the path).
from temp_dirs import pytest_configure, pytest_sessionfinish  # noqa: F401 - pytest hooks

# Every default-TLS HTTP client of a test process shares one context (harness.share_client_tls).
share_client_tls()

APP_NS = "apps"


def pytest_sessionstart(session: pytest.Session) -> None:
    # Outside the node these tests cannot run; that is a failure with directions, never a skip.
    try:
        env("KUBECONFIG")
        env("NODE_DIR")
    except NodeMissing as exc:
        pytest.exit(f"FAILED: {exc}", returncode=1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test keeps what the cluster looked like right then: the node is stopped at the
    end of the run, and the kept directory (tests/e2e/temp_dirs.py) is all that is left."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when in ("setup", "call"):
        where = keep_cluster_state(item)
        report.sections.append(("cluster state", f"the cluster at this failure: {where}"))


def keep_cluster_state(item: pytest.Item) -> str:
    """Writes the pods, the events and every pod's log (its previous container's too) of every
    namespace but kube-system into the run's temp directory, under `cluster-at-failures/<test>`;
    returns where, or why it could not."""
    try:
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", item.name)[:80]
        out = Path(item.config.option.basetemp) / "cluster-at-failures" / name
        out.mkdir(parents=True, exist_ok=True)
        (out / "pods.txt").write_text(kubectl("get", "pods", "-A", "-o", "wide", check=False, timeout=30).stdout)
        (out / "events.txt").write_text(kubectl("get", "events", "-A", "--sort-by=.lastTimestamp",
                                                check=False, timeout=30).stdout)
        for listed in get_json("pods", "-A")["items"]:
            namespace, pod = listed["metadata"]["namespace"], listed["metadata"]["name"]
            if namespace == "kube-system":
                continue
            for previous in ([], ["--previous"]):
                log = kubectl("logs", pod, "-n", namespace, "--all-containers", "--tail", "20000", *previous,
                              check=False, timeout=30)
                if log.stdout:
                    (out / f"{namespace}.{pod}{'.previous' if previous else ''}.log").write_text(log.stdout)
        return f"cluster-at-failures/{name} in the run's kept directory (named at the end of the run)"
    except Exception as exc:  # noqa: BLE001 - a test failed already; this only adds evidence
        return f"not kept: {exc!r}"


@pytest.fixture(scope="session")
def installed() -> dict:
    """`helm install` of the chart (CRDs included) with the images imported into the node;
    returns how long until all four pods were Ready."""
    t0 = time.monotonic()
    # upgrade --install: a node kept from an earlier run (SWITCHBOARD_NODE_KEEP=1) can run them again
    helm("upgrade", "--install", "switchboard", str(CHART), "-n", RELEASE_NS, "--create-namespace", *chart_values())

    def all_ready():
        gw = pods("app.kubernetes.io/component=gateway")
        op = pods("app.kubernetes.io/component=operator")
        return len(gw) == 2 and len(op) == 2 and all(ready(p) for p in gw + op)

    wait(all_ready, 180, "both operator and both gateway pods Ready")
    took = time.monotonic() - t0
    print(f"\nhelm install -> 4 pods Ready: {took:.1f}s")
    return {"ready_after_s": took}


def upstream_objects() -> list[dict]:
    labels = {"app": "upstream"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APP_NS}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "upstream", "namespace": APP_NS},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels},
             "spec": {"automountServiceAccountToken": False, "containers": [{
                 "name": "upstream", "image": f"{UPSTREAM_IMAGE_REPO}:{version()}", "imagePullPolicy": "Never",
                 "args": ["--listen", "0.0.0.0:8931"], "ports": [{"containerPort": 8931, "name": "mcp"}],
                 "readinessProbe": {"tcpSocket": {"port": 8931}, "periodSeconds": 2},
                 "securityContext": RESTRICTED,
                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "upstream", "namespace": APP_NS},
         "spec": {"selector": labels, "ports": [{"name": "mcp", "port": 8931, "targetPort": "mcp"}]}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "upstream-token", "namespace": APP_NS},
         "stringData": {"token": "node-e2e-upstream-token"}},
        {"apiVersion": "switchboard.dev/v1alpha1", "kind": "McpServer", "metadata": {"name": "demo", "namespace": APP_NS},
         "spec": {"url": f"http://upstream.{APP_NS}.svc:8931/mcp", "timeout": "5s", "accessGroups": ["apps"],
                  "auth": {"type": "bearer", "secretRef": {"name": "upstream-token", "key": "token"}}}},
        # The generated key, and the workloads whose ServiceAccount is bound to the same scope.
        {"apiVersion": "switchboard.dev/v1alpha1", "kind": "McpKey", "metadata": {"name": "apps", "namespace": APP_NS},
         "spec": {"secretName": "apps-key", "accessGroups": ["apps"], "serviceAccounts": ["caller"]}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "caller", "namespace": APP_NS}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "stranger", "namespace": APP_NS}},
    ]


@pytest.fixture(scope="session")
def served(installed) -> dict:
    """The example upstream as a pod behind a Service; McpServer `demo` and McpKey `apps` applied
    and Ready (kubectl wait); returns the generated key."""
    apply(*upstream_objects())
    kubectl("rollout", "status", "deploy/upstream", "-n", APP_NS, "--timeout=120s")
    kubectl("wait", "--for=condition=Ready", "mcpserver/demo", "-n", APP_NS, "--timeout=120s")
    kubectl("wait", "--for=condition=Ready", "mcpkey/apps", "-n", APP_NS, "--timeout=120s")
    key = wait(lambda: secret_value("apps-key", APP_NS, "key"), 30, "the generated key Secret")
    return {"key": key, "namespace": APP_NS}
