"""The one-node cluster as the tests see it: kubectl and helm against the node started by
tests/node/node.sh (KUBECONFIG and NODE_DIR come from its env), the chart installed with the
locally built images, and client pods running the caller image (tests/node/caller).

These tests run inside the node's network namespace, so Service and pod addresses are routable
from here as from any node; the checks that matter are still made from pods."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# wait_until lives in tests/e2e/harness.py (appended, so nothing there shadows a module here)
if str(ROOT / "tests" / "e2e") not in sys.path:
    sys.path.append(str(ROOT / "tests" / "e2e"))
from harness import wait_until  # noqa: E402

CHART = ROOT / "charts" / "switchboard"
RELEASE_NS = "switchboard"
GATEWAY_URL = "http://switchboard-gateway.switchboard.svc"
CALLER_IMAGE = "switchboard.test/caller:local"
UPSTREAM_IMAGE_REPO = "ghcr.io/switchboard-dev/switchboard-example-upstream"
# Pods of the tests run as this user, with nothing writable and no privileges.
RESTRICTED = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


class NodeMissing(RuntimeError):
    pass


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise NodeMissing(
            f"{name} is not set: these tests run on the one-node cluster; start them with "
            "tests/run-all.sh 60-node (or bash tests/suites.d/60-node.sh)"
        )
    return value


def version() -> str:
    for line in (ROOT / "Cargo.toml").read_text().splitlines():
        if line.startswith("version"):
            return line.split('"')[1]
    raise AssertionError("no version in Cargo.toml")


def run(*argv: str, check: bool = True, timeout: float = 120, input: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, input=input)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def kubectl(*args: str, check: bool = True, timeout: float = 120, input: str | None = None) -> subprocess.CompletedProcess:
    return run("kubectl", *args, check=check, timeout=timeout, input=input)


def get_json(*args: str) -> Any:
    return json.loads(kubectl("get", "-o", "json", *args).stdout)


def apply(*objs: dict) -> None:
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def helm(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run("helm", *args, timeout=timeout)


def chart_values() -> list[str]:
    """The chart's defaults with the local images: names and tags are the chart's own (the
    images were imported under them), only pulling is off."""
    return ["--set", "gateway.image.pullPolicy=Never", "--set", "operator.image.pullPolicy=Never"]


def pods(selector: str, namespace: str = RELEASE_NS) -> list[dict]:
    return get_json("pods", "-n", namespace, "-l", selector)["items"]


def ready(pod: dict) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def wait(predicate, timeout: float, what: str, interval: float = 0.25):
    return wait_until(predicate, timeout, interval=interval, what=what)


def later_images_imported(timeout: float = 300) -> None:
    """Waits for the images only the later modules run (the stdio servers', Redis): 60-node.sh
    imports them into the node while the first modules run and then writes `ok` or `failed`
    (its log beside it) to the file NODE_LATER_IMAGES names. Without NODE_LATER_IMAGES every
    image was imported before the tests."""
    marker = os.environ.get("NODE_LATER_IMAGES")
    if not marker:
        return
    path = Path(marker)
    status = wait(lambda: path.exists() and path.read_text().strip(), timeout,
                  f"the later images' import into the node ({path})")
    log = path.with_suffix(".log")
    assert status == "ok", f"importing the later images failed: {log.read_text() if log.exists() else '(no log)'}"


def secret_value(name: str, namespace: str, key: str) -> str:
    data = get_json("secret", name, "-n", namespace)["data"]
    return base64.b64decode(data[key]).decode()


def caller_pod(name: str, namespace: str, args: list[str], *, service_account: str | None = None,
               token_audience: str | None = None, restart: str = "Never") -> dict:
    """A pod running the caller; with `token_audience`, its ServiceAccount token for that
    audience is projected at /var/run/secrets/switchboard/token."""
    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 2,
        "containers": [{
            "name": "caller",
            "image": CALLER_IMAGE,
            "imagePullPolicy": "Never",
            "args": args,
            "securityContext": RESTRICTED,
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        }],
    }
    if service_account:
        spec["serviceAccountName"] = service_account
    if token_audience:
        spec["volumes"] = [{"name": "token", "projected": {"sources": [{"serviceAccountToken": {
            "audience": token_audience, "expirationSeconds": 3600, "path": "token"}}]}}]
        spec["containers"][0]["volumeMounts"] = [{"name": "token", "mountPath": "/var/run/secrets/switchboard", "readOnly": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace,
            "labels": {"app": "caller"}}, "spec": spec}


def run_to_completion(pod: dict, timeout: float = 60) -> tuple[str, str]:
    """Creates the pod, waits until it ends, returns (phase, logs) and deletes it."""
    name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
    kubectl("delete", "pod", name, "-n", ns, "--ignore-not-found", "--wait=true")
    apply(pod)
    phase = wait(lambda: (p := get_json("pod", name, "-n", ns)["status"].get("phase")) in ("Succeeded", "Failed") and p,
                 timeout, f"pod {ns}/{name} to finish")
    logs = kubectl("logs", name, "-n", ns).stdout
    kubectl("delete", "pod", name, "-n", ns, "--wait=false")
    return phase, logs
