"""The one-node cluster as the tests see it: kubectl and helm against the node started by
tests/node/node.sh (KUBECONFIG and NODE_DIR come from its env), the chart installed with the
locally built images, and client pods running the caller image (tests/node/caller).

These tests run inside the node's network namespace, so Service and pod addresses are routable
from here as from any node; the checks that matter are still made from pods."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import yaml

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


# What `get_json` reads, by the kind name the tests give (as kubectl takes it): the API path
# prefix and the resource's plural. The tests poll these every quarter second; a kubectl process
# per read was the largest CPU item of this suite (about a tenth of a CPU-second each).
RESOURCES = {
    "pod": ("api/v1", "pods"),
    "pods": ("api/v1", "pods"),
    "secret": ("api/v1", "secrets"),
    "service": ("api/v1", "services"),
    "serviceaccount": ("api/v1", "serviceaccounts"),
    "deployment": ("apis/apps/v1", "deployments"),
    "hpa": ("apis/autoscaling/v2", "horizontalpodautoscalers"),
    "networkpolicy": ("apis/networking.k8s.io/v1", "networkpolicies"),
    "lease": ("apis/coordination.k8s.io/v1", "leases"),
    "mcpserver": ("apis/switchboard.dev/v1alpha1", "mcpservers"),
    "mcpkey": ("apis/switchboard.dev/v1alpha1", "mcpkeys"),
}
_api: httpx.Client | None = None


def api() -> httpx.Client:
    """One client of the API server for the test process, from the kubeconfig kubectl uses (the
    admin's token and the cluster's CA, as tests/k8s/cluster.sh writes them)."""
    global _api
    if _api is None:
        config = yaml.safe_load(Path(env("KUBECONFIG")).read_text())
        cluster = config["clusters"][0]["cluster"]
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        _api = httpx.Client(
            base_url=cluster["server"],
            headers={"Authorization": f"Bearer {config['users'][0]['user']['token']}"},
            verify=ssl.create_default_context(cadata=ca),
            timeout=30,
        )
    return _api


def get_json(kind: str, *args: str) -> Any:
    """What `kubectl get -o json KIND [NAME] (-n NS | -A) [-l SELECTOR]` prints, read straight
    from the API (a list's items without kubectl's added kind and apiVersion). A missing object
    fails as kubectl's would, with an AssertionError naming it."""
    if kind not in RESOURCES:
        raise AssertionError(f"get_json: no API path for {kind!r}; add it to RESOURCES in {__file__}")
    prefix, plural = RESOURCES[kind]
    name = namespace = selector = None
    every_namespace = False
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "-n":
            namespace = rest.pop(0)
        elif arg == "-l":
            selector = rest.pop(0)
        elif arg == "-A":
            every_namespace = True
        elif arg.startswith("-") or name is not None:
            raise AssertionError(f"get_json: {arg!r} is not an argument it reads ({kind} {' '.join(args)})")
        else:
            name = arg
    if namespace is None and not every_namespace:
        raise AssertionError(f"get_json {kind} {' '.join(args)}: give -n NAMESPACE or -A")
    path = f"/{prefix}/" + (f"namespaces/{namespace}/" if namespace else "") + plural + (f"/{name}" if name else "")
    r = api().get(path, params={"labelSelector": selector} if selector else None)
    if r.status_code != 200:
        raise AssertionError(f"GET {path} (get {kind} {' '.join(args)}): HTTP {r.status_code} {r.text[:500]}")
    return r.json()


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


class Call(NamedTuple):
    """One line of the caller's loop (tests/node/caller/main.go): when the call started (unix
    ms), whether it was answered right, its latency in ms (`ok`) or why it failed, and the
    connection it went on: the caller's end, `IP:port` ("" when it had none), and `how`:
    `reused` (kept alive from an earlier call), `new` (dialled for this call), `retried` (the
    transport tried another connection first) or `none`; `closing`: the answer said
    `Connection: close`."""
    at_ms: int
    ok: bool
    detail: str
    conn: str
    how: str
    closing: bool = False

    @property
    def ms(self) -> float:
        return float(self.detail)


def parse_call(line: str) -> Call | None:
    """`<unix ms> ok <ms> conn=<conn>[ closing]` or `<unix ms> FAIL <reason> conn=<conn>[ closing]`,
    where <conn> is `<IP:port>/<how>` or `none`; None for any other line."""
    parts = line.split(" ", 2)
    if len(parts) != 3 or not parts[0].isdigit() or parts[1] not in ("ok", "FAIL"):
        return None
    rest = parts[2].removesuffix(" closing")
    closing = rest != parts[2]
    detail, sep, conn = rest.rpartition(" conn=")
    if not sep:
        return Call(int(parts[0]), parts[1] == "ok", rest, "", "none", closing)
    address, _, how = conn.rpartition("/")
    return Call(int(parts[0]), parts[1] == "ok", detail, address, how, closing)


class Ended(NamedTuple):
    """A connection of the caller ended (tests/node/caller/main.go, trackedConn): when (unix
    ms), its client end (IP:port) and which end ended it: "caller" (the caller's own transport
    let go of it) or "peer ..." with what the caller's read saw (EOF or an error)."""
    at_ms: int
    conn: str
    by: str


def parse_ended(line: str) -> Ended | None:
    """`<unix ms> ended conn=<IP:port> by=<who>`; None for any other line."""
    parts = line.split(" ", 3)
    if (len(parts) != 4 or not parts[0].isdigit() or parts[1] != "ended" or not parts[2].startswith("conn=")
            or not parts[3].startswith("by=")):
        return None
    return Ended(int(parts[0]), parts[2].removeprefix("conn="), parts[3].removeprefix("by="))


class CallerLog(NamedTuple):
    calls: list[Call]
    ended: list[Ended]
    other: list[str]


def caller_log(text: str) -> CallerLog:
    """A caller's log (tests/node/caller/main.go) read once: its calls, its connections' ends,
    and the rest (Go's HTTP client writes there what it saw on an idle connection, e.g. an
    unsolicited response)."""
    log = CallerLog([], [], [])
    for line in text.splitlines():
        if call := parse_call(line):
            log.calls.append(call)
        elif end := parse_ended(line):
            log.ended.append(end)
        elif line.strip():
            log.other.append(line)
    return log

