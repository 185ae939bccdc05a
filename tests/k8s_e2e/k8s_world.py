"""A loopback Kubernetes world for the operator end-to-end tests: a real etcd + kube-apiserver
(tests/k8s/cluster.sh), the CRDs, the operator and gateway replicas as local processes, the
Rust example upstream, and (for ModelRoutes) the scripted LLM provider. Used by the pytest modules here and by `propagation.py` (standalone).

Process plumbing (starting binaries, waiting for ready lines, log capture, the MCP clients, the
secret registry for the log grep) comes from tests/e2e/harness.py; this file only adds what is
specific to a cluster. Every wait has a bound; `World.stop()` stops everything it started.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
import yaml

HERE = Path(__file__).resolve().parent
# harness.py lives in tests/e2e; appended (not prepended) so that nothing there shadows a module
# here (tests/e2e/conftest.py vs ours).
if str(HERE.parent / "e2e") not in sys.path:
    sys.path.append(str(HERE.parent / "e2e"))

import harness  # noqa: E402
from harness import (  # noqa: E402
    reserve_port,
    EXAMPLE_UPSTREAM_BIN,
    GATEWAY_BIN,
    GATEWAY_LOGS,
    REPO_ROOT,
    SECRETS_USED,
    Gateway,
    Proc,
    ProcessGroup,
    Upstream,
    binary,
    wait_until,
)

OPERATOR_BIN = "switchboard-operator"
PROVIDER_BIN = "switchboard-scripted-provider"
CLUSTER_SH = REPO_ROOT / "tests" / "k8s" / "cluster.sh"
BUILD_SH = REPO_ROOT / "tests" / "k8s" / "build-binaries.sh"
CRDS_DIR = REPO_ROOT / "crds"
GROUP_VERSION = "switchboard.dev/v1alpha1"
OPERATOR_NS = "switchboard"
GATEWAY_SA = "switchboard-gateway"
LEASE_NAME = "switchboard-operator"
SNAPSHOT_SECRET = "switchboard-snapshot"

OPERATOR_READY_RE = re.compile(r"snapshot stream on https?://(\S+) metrics on http://(\S+)")
# The snapshot stream's TLS, managed by the operator as the chart sets it up by default.
DELIVERY_CA_SECRET = "switchboard-delivery-ca"
DELIVERY_TRUST_CONFIGMAP = "switchboard-delivery-trust"
# The name the operator's serving certificates carry here (the chart: the Service's names).
OPERATOR_SERVER_NAME = "localhost"


def k8s_bin_dir() -> Path:
    """The cached kube-apiserver/kubectl/etcd; missing ones fail with the command that builds them."""
    env_bin = os.environ.get("SWITCHBOARD_K8S_BIN")
    if env_bin:
        d = Path(env_bin)
    else:
        out = subprocess.run([str(BUILD_SH), "--bin-dir"], capture_output=True, text=True, timeout=30)
        d = Path(out.stdout.strip())
    missing = [b for b in ("etcd", "kube-apiserver", "kubectl") if not os.access(d / b, os.X_OK)]
    if missing:
        raise MissingBinary(
            f"Kubernetes binaries {missing} are missing in {d}: run tests/k8s/build-binaries.sh first "
            "(tests/suites.d/50-kubernetes.sh does it)"
        )
    return d


class MissingBinary(AssertionError):
    pass


def require_binaries() -> dict[str, Path]:
    """Every binary this world runs, or a clear failure naming the missing ones."""
    found = {}
    missing = []
    for name in (OPERATOR_BIN, GATEWAY_BIN, EXAMPLE_UPSTREAM_BIN, PROVIDER_BIN):
        path = harness.bin_dir() / name
        if path.is_file() and os.access(path, os.X_OK):
            found[name] = path
        else:
            missing.append(str(path))
    if missing:
        raise MissingBinary(
            f"missing {', '.join(missing)}: run `tests/run-all.sh build` first "
            "(it builds them into SWITCHBOARD_BIN_DIR, tests/build-env.bash)"
        )
    found["k8s"] = k8s_bin_dir()
    return found


# --------------------------------------------------------------------------------------------
# Manifests


def mcp_server(name: str, namespace: str = "default", **spec: Any) -> dict:
    return {"apiVersion": GROUP_VERSION, "kind": "McpServer", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def mcp_virtual_server(name: str, namespace: str = "default", **spec: Any) -> dict:
    return {"apiVersion": GROUP_VERSION, "kind": "McpVirtualServer", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def mcp_key(name: str, namespace: str = "default", **spec: Any) -> dict:
    return {"apiVersion": GROUP_VERSION, "kind": "McpKey", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def model_route(name: str, namespace: str = "default", **spec: Any) -> dict:
    return {"apiVersion": GROUP_VERSION, "kind": "ModelRoute", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def identity_provider(name: str, namespace: str = "default", **spec: Any) -> dict:
    return {"apiVersion": GROUP_VERSION, "kind": "IdentityProvider", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def secret(name: str, namespace: str, data: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "stringData": dict(data),
    }


def bearer(secret_name: str, key: str = "token") -> dict:
    return {"type": "bearer", "secretRef": {"name": secret_name, "key": key}}


def to_yaml(objs: dict | Iterable[dict]) -> str:
    if isinstance(objs, dict):
        objs = [objs]
    return "---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objs)


class ScriptedProvider:
    """The scripted LLM provider (examples/provider): what it received, and a reset."""

    def __init__(self, proc: Proc):
        self.proc = proc

    @property
    def url(self) -> str:
        return self.proc.url

    def requests(self) -> list[dict]:
        """`[{path, query, headers, body}]`, oldest first."""
        return httpx.get(f"{self.url}/_requests", timeout=5).json()

    def reset(self) -> None:
        r = httpx.post(f"{self.url}/_reset", timeout=5)
        assert r.status_code in (200, 204), f"POST /_reset: HTTP {r.status_code}"


# --------------------------------------------------------------------------------------------
# The cluster


class Cluster:
    """etcd + kube-apiserver on loopback via tests/k8s/cluster.sh; kubectl and a tiny API client."""

    def __init__(self, workdir: Path, *, audit: bool = False):
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        # audit: the API server logs every request's metadata to `audit_log` (cluster.sh)
        self.audit = audit
        self.env: dict[str, str] = {}
        self._api: httpx.Client | None = None
        self.started = False

    def start(self) -> None:
        last = ""
        # cluster.sh picks random free ports; one can be taken before etcd binds it: retry.
        for _attempt in range(3):
            p = subprocess.run(
                [str(CLUSTER_SH), "start", str(self.dir)],
                capture_output=True,
                text=True,
                timeout=180,
                cwd=REPO_ROOT,
                env=dict(os.environ, SWITCHBOARD_K8S_AUDIT="1" if self.audit else ""),
            )
            if p.returncode == 0:
                break
            last = p.stderr[-3000:]
            subprocess.run([str(CLUSTER_SH), "stop", str(self.dir)], capture_output=True, timeout=60)
            self.dir.mkdir(parents=True, exist_ok=True)
        else:
            raise AssertionError(f"the loopback cluster did not start (3 attempts):\n{last}")
        self.started = True
        for line in (self.dir / "cluster.env").read_text().splitlines():
            k, _, v = line.partition("=")
            self.env[k] = v
        self._api = self.api_client()

    @property
    def audit_log(self) -> Path:
        return self.dir / "audit.log"

    def install_crds(self) -> None:
        """Applies crds/*.yaml and waits until every one is Established."""
        crds = sorted(CRDS_DIR.glob("*.yaml"))
        assert crds, f"no CRD manifests in {CRDS_DIR}"
        self.kubectl("apply", *[a for p in crds for a in ("-f", str(p))])
        # switchboard.dev_<plural>.yaml holds crd/<plural>.switchboard.dev
        names = [f"crd/{p.stem.split('_', 1)[1]}.{p.stem.split('_', 1)[0]}" for p in crds]
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)

    def api_client(self, timeout: float = 10) -> httpx.Client:
        """A client of the API server as the cluster's admin (one per thread that needs one)."""
        return httpx.Client(
            base_url=self.env["SWITCHBOARD_K8S_API"],
            headers={"Authorization": f"Bearer {self.env['SWITCHBOARD_K8S_TOKEN']}"},
            verify=ssl.create_default_context(cafile=self.env["SWITCHBOARD_K8S_CA"]),
            timeout=timeout,
        )

    def stop(self, keep_logs: bool = False) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None
        if self.started:
            env = dict(os.environ, SWITCHBOARD_K8S_KEEP_LOGS="1" if keep_logs else "")
            subprocess.run([str(CLUSTER_SH), "stop", str(self.dir)], capture_output=True, timeout=60, env=env)
            self.started = False

    @property
    def proc_env(self) -> dict[str, str]:
        """Environment for kubectl and the operator (KUBECONFIG; kubectl on PATH)."""
        return {
            "KUBECONFIG": self.env["KUBECONFIG"],
            "PATH": f"{self.env['SWITCHBOARD_K8S_BIN']}:{os.environ.get('PATH', '')}",
        }

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        env = dict(os.environ, **self.proc_env)
        p = subprocess.run(
            ["kubectl", *args], input=input, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO_ROOT
        )
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({p.returncode}):\n{p.stderr}{p.stdout}")
        return p

    def kubectl_popen(self, *args: str) -> subprocess.Popen:
        env = dict(os.environ, **self.proc_env)
        return subprocess.Popen(
            ["kubectl", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO_ROOT,
        )

    def apply(self, objs: dict | Iterable[dict], check: bool = True) -> subprocess.CompletedProcess:
        return self.kubectl("apply", "-f", "-", input=to_yaml(objs), check=check)

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    # -- direct API reads (cheap enough to poll)

    def api_get(self, path: str) -> dict | None:
        assert self._api is not None
        r = self._api.get(path)
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.json()

    def api_apply(self, obj: dict, field_manager: str = "switchboard-e2e") -> dict:
        """Server-side apply of one namespaced switchboard.dev object straight through the API (no
        kubectl process): the cheapest possible write."""
        assert self._api is not None
        plural = {
            "McpServer": "mcpservers",
            "McpVirtualServer": "mcpvirtualservers",
            "McpKey": "mcpkeys",
            "ModelRoute": "modelroutes",
            "IdentityProvider": "identityproviders",
        }[obj["kind"]]
        meta = obj["metadata"]
        r = self._api.patch(
            f"/apis/{GROUP_VERSION}/namespaces/{meta['namespace']}/{plural}/{meta['name']}",
            params={"fieldManager": field_manager, "force": "true"},
            content=json.dumps(obj),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        assert r.status_code in (200, 201), f"server-side apply: HTTP {r.status_code} {r.text[:500]}"
        return r.json()

    def server(self, name: str, namespace: str = "default") -> dict | None:
        return self.api_get(f"/apis/{GROUP_VERSION}/namespaces/{namespace}/mcpservers/{name}")

    def virtual_server(self, name: str, namespace: str = "default") -> dict | None:
        return self.api_get(f"/apis/{GROUP_VERSION}/namespaces/{namespace}/mcpvirtualservers/{name}")

    def key(self, name: str, namespace: str = "default") -> dict | None:
        return self.api_get(f"/apis/{GROUP_VERSION}/namespaces/{namespace}/mcpkeys/{name}")

    def identity_provider(self, name: str, namespace: str = "default") -> dict | None:
        return self.api_get(f"/apis/{GROUP_VERSION}/namespaces/{namespace}/identityproviders/{name}")

    def model_route(self, name: str, namespace: str = "default") -> dict | None:
        return self.api_get(f"/apis/{GROUP_VERSION}/namespaces/{namespace}/modelroutes/{name}")

    def secret_data(self, name: str, namespace: str) -> dict[str, str] | None:
        s = self.api_get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
        if s is None:
            return None
        return {k: base64.b64decode(v).decode() for k, v in (s.get("data") or {}).items()}

    def lease_holder(self, name: str = LEASE_NAME, namespace: str = OPERATOR_NS) -> str | None:
        lease = self.api_get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")
        return (lease or {}).get("spec", {}).get("holderIdentity")


def condition(obj: dict | None, type_: str) -> dict | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def describe_conditions(obj: dict | None) -> str:
    if obj is None:
        return "<object not found>"
    status = obj.get("status") or {}
    conds = [f"{c['type']}={c['status']} ({c.get('reason')}: {c.get('message')})" for c in status.get("conditions") or []]
    extra = {k: v for k, v in status.items() if k != "conditions"}
    return f"{'; '.join(conds) or '<no conditions>'} {extra}"


# --------------------------------------------------------------------------------------------
# Processes


class TrustBundleSync:
    """Does what the kubelet does for the gateway's mounted trust ConfigMap: copies its `ca.crt`
    into a file, replacing the file whole when it changes (the kubelet swaps a symlink), every
    half second until stopped."""

    def __init__(self, cluster: Cluster, path: Path):
        self.cluster, self.path = cluster, path
        self.copies = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trust-bundle-sync", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with self.cluster.api_client(timeout=5) as api:
            while not self._stop.wait(0.5):
                with contextlib.suppress(httpx.HTTPError):
                    r = api.get(f"/api/v1/namespaces/{OPERATOR_NS}/configmaps/{DELIVERY_TRUST_CONFIGMAP}")
                    bundle = (r.json().get("data") or {}).get("ca.crt") if r.status_code == 200 else None
                    if bundle and (not self.path.exists() or self.path.read_text() != bundle):
                        tmp = self.path.with_suffix(".tmp")
                        tmp.write_text(bundle)
                        tmp.replace(self.path)
                        self.copies += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class OperatorProc(Proc):
    """The operator: its ready line is `... snapshot stream on https://A metrics on http://B`."""

    metrics_addr: str | None = None

    def _parse_ready(self, line: str) -> bool:
        m = OPERATOR_READY_RE.search(line)
        if m:
            self.addr, self.metrics_addr = m.group(1), m.group(2)
        return m is not None


def kill(proc: Proc, sig: int = signal.SIGKILL) -> None:
    """Kills a process (and its group) at once, like a crash; waits for it to be gone."""
    if proc.alive():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, sig)
        proc.popen.wait(10)
    proc.stop()  # joins the reader, closes the log files


class World:
    """A cluster with the CRDs, the operator namespace and gateway ServiceAccount, one example
    upstream, operator replicas and gateway replicas following them."""

    def __init__(
        self,
        workdir: Path,
        *,
        probe_interval: str = "2s",
        lease_duration: str = "4s",
        log_format: str = "text",
        operator_args: Iterable[str] = (),
        operator_env: dict[str, str] | None = None,
        gateway_env: dict[str, str] | None = None,
    ):
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.bins = require_binaries()
        self.cluster = Cluster(workdir / "cluster")
        self.group = ProcessGroup(workdir / "logs")
        self.probe_interval = probe_interval
        self.lease_duration = lease_duration
        self.log_format = log_format
        self.operator_args = list(operator_args)
        self.operator_env = dict(operator_env or {})  # e.g. OTEL_* for the tracing test
        self.gateway_env = dict(gateway_env or {})
        self.operators: dict[str, OperatorProc] = {}
        self.operator_ports: dict[str, tuple[int, int]] = {}
        self.gateways: dict[str, Gateway] = {}
        self.upstream: Upstream | None = None
        self.upstream_port: int | None = None
        self.token_file = workdir / "gateway-token"
        self.secrets: set[str] = set()  # secret values this world used (for the leak checks)
        self.gateway_keys: set[str] = set()  # McpKey keys among them
        self.log_files: list[Path] = []
        self.key = ""  # the test modules' client key (from the McpKey's generated Secret)
        self.startup_seconds = 0.0
        # The operator's CAs as a gateway's mounted ConfigMap holds them.
        self.trust_file = workdir / "operator-ca.crt"
        self.trust_sync: TrustBundleSync | None = None

    # -- lifecycle

    def start_cluster(self) -> None:
        t0 = time.monotonic()
        self.cluster.start()
        self.cluster.install_crds()
        self.cluster.kubectl("create", "namespace", OPERATOR_NS)
        self.cluster.kubectl("create", "serviceaccount", GATEWAY_SA, "-n", OPERATOR_NS)
        token = self.cluster.kubectl(
            "create", "token", GATEWAY_SA, "-n", OPERATOR_NS, "--audience", "switchboard-operator", "--duration", "2h"
        ).stdout.strip()
        assert token.count(".") == 2, f"not a JWT: {token[:40]}..."
        self.token_file.write_text(token + "\n")
        self.remember(token)
        self.trust_sync = TrustBundleSync(self.cluster, self.trust_file)
        self.startup_seconds = time.monotonic() - t0

    def stop(self, keep_logs: bool = False) -> None:
        if self.trust_sync is not None:
            self.trust_sync.stop()
        self.group.stop_all()
        self.cluster.stop(keep_logs=keep_logs)

    def remember(self, *values: str) -> None:
        for v in values:
            if v:
                self.secrets.add(v)
                SECRETS_USED.add(v)

    def new_secret(self, label: str) -> str:
        value = harness.new_secret(label)
        self.secrets.add(value)
        return value

    # -- upstream

    def start_upstream(self, port: int | None = None) -> Upstream:
        """The Rust example upstream; restarted on the same port when `port` is given."""
        self.upstream_port = port or self.upstream_port or reserve_port()
        argv = [binary(EXAMPLE_UPSTREAM_BIN), "--listen", f"127.0.0.1:{self.upstream_port}"]
        deadline = time.monotonic() + 10
        while True:  # a just-killed upstream's port can linger for a moment
            try:
                proc = self.group.start("upstream", argv)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.upstream = Upstream(proc, "rust")
        return self.upstream

    def stop_upstream(self) -> None:
        assert self.upstream is not None
        kill(self.upstream.proc)

    # -- operators

    def start_operator(self, identity: str = "op-a", *, extra: Iterable[str] = ()) -> OperatorProc:
        """Starts (or restarts, on the same ports) an operator replica."""
        if identity not in self.operator_ports:
            self.operator_ports[identity] = (reserve_port(), reserve_port())
        snap, metrics = self.operator_ports[identity]
        argv = [
            str(binary(OPERATOR_BIN)),
            "--namespace", OPERATOR_NS,
            "--identity", identity,
            "--snapshot-listen", f"127.0.0.1:{snap}",
            "--metrics-listen", f"127.0.0.1:{metrics}",
            "--probe-interval", self.probe_interval,
            "--lease-duration", self.lease_duration,
            "--log-format", self.log_format,
            "--delivery-ca-secret", DELIVERY_CA_SECRET,
            "--delivery-trust-configmap", DELIVERY_TRUST_CONFIGMAP,
            "--delivery-tls-names", f"{OPERATOR_SERVER_NAME},127.0.0.1",
            "--delivery-tls-refresh", "1s",
            *self.operator_args,
            *extra,
        ]  # fmt: skip
        env = {**self.cluster.proc_env, **self.operator_env}
        proc = OperatorProc(f"operator-{identity}", argv, self.group.logdir, env)
        self.group.procs.append(proc)
        proc.wait_ready(30)
        self.operators[identity] = proc
        self.log_files += [proc.stdout_path, proc.stderr_path]
        return proc

    def operator_url(self, identity: str) -> str:
        if identity not in self.operator_ports:
            self.operator_ports[identity] = (reserve_port(), reserve_port())
        return f"https://127.0.0.1:{self.operator_ports[identity][0]}"

    def operator_tls(self) -> ssl.SSLContext:
        """What a client of the snapshot stream verifies the operator with (httpx `verify=`)."""
        wait_until(self.trust_file.exists, 30, what="the operator's trust bundle to be published")
        return ssl.create_default_context(cafile=str(self.trust_file))

    def operator_role(self, identity: str) -> str:
        """`leader` or `standby` from the operator's /readyz."""
        metrics = self.operator_ports[identity][1]
        return httpx.get(f"http://127.0.0.1:{metrics}/readyz", timeout=5).text.strip()

    def operator_metrics(self, identity: str) -> str:
        metrics = self.operator_ports[identity][1]
        return httpx.get(f"http://127.0.0.1:{metrics}/metrics", timeout=5).text

    # -- gateways

    def start_gateway(
        self, replica: str, operators: Iterable[str] = ("op-a",), *, config: Path | None = None, operator_ca: Path | None = None
    ) -> Gateway:
        """A gateway replica following the operators (in turn); `config`: the snapshot file it
        starts from (the operator's Secret, mounted), as the chart does; `operator_ca`: another
        CA bundle than the operator's."""
        urls = ",".join(self.operator_url(i) for i in operators)
        argv = [
            binary(GATEWAY_BIN),
            "--operator", urls,
            "--operator-ca", operator_ca or self.trust_file,
            "--operator-server-name", OPERATOR_SERVER_NAME,
            "--token-file", self.token_file,
            "--replica", replica,
            "--listen", "127.0.0.1:0",
            "--log-format", self.log_format,
        ]  # fmt: skip
        if config is not None:
            argv += ["--config", config]
        proc = Proc(f"gateway-{replica}", argv, self.group.logdir, self.gateway_env or None)
        self.group.procs.append(proc)
        GATEWAY_LOGS.extend([proc.stdout_path, proc.stderr_path])
        self.log_files += [proc.stdout_path, proc.stderr_path]
        proc.wait_ready(30)
        gw = Gateway(proc, self.token_file)
        self.gateways[replica] = gw
        return gw

    def wait_gateways_ready(self, timeout: float = 30) -> None:
        for name, gw in self.gateways.items():
            if gw.proc.alive():
                wait_until(
                    lambda gw=gw: httpx.get(f"{gw.internal_url}/readyz", timeout=2).status_code == 200,
                    timeout,
                    what=f"gateway {name} to load a snapshot (/readyz 200)",
                )

    def gateway_generation(self, gw: Gateway) -> int | None:
        text = httpx.get(f"{gw.internal_url}/metrics", timeout=5).text
        m = re.search(r"^switchboard_gateway_snapshot_generation\S*\s+(\d+)", text, re.M)
        return int(m.group(1)) if m else None

    # -- resources

    def wait_condition(
        self,
        kind: str,
        name: str,
        namespace: str,
        type_: str,
        want: Callable[[dict], bool] | str,
        timeout: float,
        interval: float = 0.1,
    ) -> tuple[dict, float]:
        """Polls a resource until its condition matches; returns (condition, seconds waited)."""
        getter = {
            "mcpserver": self.cluster.server,
            "mcpvirtualserver": self.cluster.virtual_server,
            "mcpkey": self.cluster.key,
            "modelroute": self.cluster.model_route,
            "identityprovider": self.cluster.identity_provider,
        }[kind]
        pred = want if callable(want) else (lambda c, s=want: c.get("status") == s)
        t0 = time.monotonic()
        last: list[dict | None] = [None]

        def check() -> dict | None:
            obj = getter(name, namespace)
            last[0] = obj
            c = condition(obj, type_)
            return c if c and pred(c) else None

        try:
            c = wait_until(check, timeout, interval=interval, what=f"{kind} {namespace}/{name} {type_}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last status: {describe_conditions(last[0])}") from None
        return c, time.monotonic() - t0

    def kubectl_wait_ready(self, name: str, namespace: str = "default", timeout: int = 60, kind: str = "mcpserver") -> None:
        p = self.cluster.kubectl(
            "wait", "--for=condition=Ready", f"{kind}/{name}", "-n", namespace, f"--timeout={timeout}s",
            check=False, timeout=timeout + 15,
        )  # fmt: skip
        if p.returncode != 0:
            getter = {"modelroute": self.cluster.model_route, "mcpvirtualserver": self.cluster.virtual_server}
            obj = getter.get(kind, self.cluster.server)(name, namespace)
            raise AssertionError(
                f"kubectl wait --for=condition=Ready {kind}/{name} failed: {p.stderr.strip()}\n"
                f"status: {describe_conditions(obj)}"
            )

    def operator_rss_kib(self, identity: str = "op-a") -> int:
        status = Path(f"/proc/{self.operators[identity].popen.pid}/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])

    def generated_key(self, secret_name: str, namespace: str = "default", timeout: float = 30) -> str:
        """The key the operator wrote to the McpKey's Secret (field `key`)."""
        data = wait_until(
            lambda: (self.cluster.secret_data(secret_name, namespace) or {}).get("key"),
            timeout,
            what=f"Secret {namespace}/{secret_name} to hold a generated key",
        )
        self.remember(data)
        self.gateway_keys.add(data)
        return data

    def wait_key_served(self, key: str, timeout: float = 30) -> None:
        """Until every live gateway accepts the key (REST tools/list answers something but 401)."""
        for name, gw in self.gateways.items():
            if gw.proc.alive():
                wait_until(
                    lambda gw=gw: httpx.get(
                        f"{gw.url}/mcp-rest/tools/list", headers={"Authorization": f"Bearer {key}"}, timeout=5
                    ).status_code
                    != 401,
                    timeout,
                    interval=0.05,
                    what=f"gateway {name} to accept the key",
                )

    def session_key(self) -> str | None:
        return (self.cluster.secret_data(SNAPSHOT_SECRET, OPERATOR_NS) or {}).get("session-key")

    def stored_snapshot(self) -> dict:
        """The snapshot the operator last published, as it keeps it in its Secret (JSON)."""
        text = (self.cluster.secret_data(SNAPSHOT_SECRET, OPERATOR_NS) or {}).get("snapshot.yaml")
        assert text, f"Secret {OPERATOR_NS}/{SNAPSHOT_SECRET} holds no snapshot"
        return json.loads(text)

    # -- the scripted LLM provider

    def start_provider(self, name: str, api_key: str | None = None) -> ScriptedProvider:
        """A scripted provider (examples/provider) on a free port; `api_key`: the key it requires."""
        argv = [binary(PROVIDER_BIN), "--listen", "127.0.0.1:0"]
        if api_key:
            argv += ["--api-key", api_key]
        return ScriptedProvider(self.group.start(name, argv))

    # -- diagnostics

    def describe(self, tail: int = 4000) -> str:
        out = []
        for proc in self.group.procs:
            out.append(f"===== {proc.name} =====\n{proc.describe(tail=tail)}")
        return "\n".join(out)


def start_world(workdir: Path, *, operators: Iterable[str] = ("op-a",), gateways: Iterable[str] = ("gw1", "gw2"),
                gateway_operators: Iterable[str] | None = None, **kw: Any) -> World:  # fmt: skip
    """The usual world: cluster, upstream, operator(s), gateways following them, all ready."""
    world = World(workdir, **kw)
    try:
        world.start_cluster()
        world.start_upstream()
        ops = list(operators)
        for identity in ops:
            world.start_operator(identity)
        targets = list(gateway_operators) if gateway_operators is not None else ops
        for replica in gateways:
            world.start_gateway(replica, targets)
        world.wait_gateways_ready(60)
    except BaseException:
        world.stop(keep_logs=True)
        raise
    return world


# --------------------------------------------------------------------------------------------
# The example workload: one server, one key


def demo_objects(world: World, namespace: str = "default", name: str = "demo", token: str | None = None) -> list[dict]:
    assert world.upstream is not None
    token = token or world.new_secret("demo-upstream-token")
    return [
        secret(f"{name}-upstream", namespace, {"token": token}),
        mcp_server(
            name,
            namespace,
            url=world.upstream.mcp_url,
            timeout="2s",
            accessGroups=["ci"],
            auth=bearer(f"{name}-upstream"),
        ),
        mcp_key("ci", namespace, secretName="ci-key", accessGroups=["ci"]),
    ]


def leaked_in(text: str, secrets: Iterable[str]) -> list[str]:
    """Which secret values (or their random tails) appear in `text`; labels only, never values."""
    found = []
    for value in secrets:
        tail = value[-24:] if len(value) >= 24 else value
        if value in text or tail in text:
            found.append(value.rsplit("-", 1)[0] if value.startswith("sbx-") else f"<{len(value)}-char secret>")
    return sorted(set(found))


def assert_no_secret_leaks(world: World) -> dict[str, int]:
    """No secret value this world used (upstream tokens, generated keys, the gateways'
    ServiceAccount token, the session key) appears in an operator or gateway log, in any
    McpServer/McpKey/ModelRoute as stored (status included), or in any event. Returns what was searched."""
    world.remember(world.session_key() or "")
    secrets = set(world.secrets)
    assert secrets, "no secrets were recorded: the check would prove nothing"
    for proc in world.group.procs:
        if not proc.alive():
            proc.stop()  # closes the log files of processes already gone
    logs = [p for p in dict.fromkeys(world.log_files) if p.exists()]
    log_bytes = sum(p.stat().st_size for p in logs)
    assert log_bytes > 0, "the operator and gateways logged nothing at all: the grep proves nothing"
    problems = []
    for path in logs:
        text = path.read_text("utf-8", "replace")
        for label in leaked_in(text, secrets):
            problems.append(f"{path.name}: {label}")
    objects = {
        "kubectl get mcpservers -A -o yaml": world.cluster.kubectl("get", "mcpservers", "-A", "-o", "yaml").stdout,
        "kubectl get mcpkeys -A -o yaml": world.cluster.kubectl("get", "mcpkeys", "-A", "-o", "yaml").stdout,
        "kubectl get modelroutes -A -o yaml": world.cluster.kubectl("get", "modelroutes", "-A", "-o", "yaml").stdout,
        "kubectl get identityproviders -A -o yaml": world.cluster.kubectl("get", "identityproviders", "-A", "-o", "yaml").stdout,
        "kubectl get events -A -o yaml": world.cluster.kubectl("get", "events", "-A", "-o", "yaml").stdout,
    }
    for identity, proc in world.operators.items():
        if proc.alive():
            objects[f"operator {identity} /metrics"] = world.operator_metrics(identity)
    for replica, gw in world.gateways.items():
        if gw.proc.alive():
            objects[f"gateway {replica} /metrics"] = httpx.get(f"{gw.internal_url}/metrics", timeout=5).text
    for what, text in objects.items():
        for label in leaked_in(text, secrets):
            problems.append(f"{what}: {label}")
    # The snapshot the operator keeps holds upstream credentials by design, but never a gateway
    # key: only hashes of keys leave their Secrets.
    snapshot = (world.cluster.secret_data(SNAPSHOT_SECRET, OPERATOR_NS) or {}).get("snapshot.yaml", "")
    for k in world.gateway_keys:
        if k in snapshot:
            problems.append(f"Secret {OPERATOR_NS}/{SNAPSHOT_SECRET}: a gateway key (not its hash)")
    events = yaml.safe_load(objects["kubectl get events -A -o yaml"]).get("items") or []
    assert not problems, "secret values leaked:\n" + "\n".join(problems)
    return {"secrets": len(secrets), "log_files": len(logs), "log_bytes": log_bytes, "events": len(events)}
