"""Issue 25 item 4 / acceptance 3: several installs share one cluster.

Installs `a` and `b` each run as their own ServiceAccount with exactly the RBAC the chart renders
for `operator.watchNamespaces` (`helm template ... --show-only templates/operator-rbac.yaml`):
`a` watches team-a, `b` team-b; a third namespace (`outside`) is watched by neither. Install
`blue` (`--instance blue`) shares team-a with `a`: it takes only the resources labelled
`switchboard.dev/instance: blue`, `a` only the unlabelled ones.

- Each install's snapshot holds only its own servers; each writes only its own resources'
  status; nothing in `outside` gets a status.
- From the API server's audit log: every request an install's ServiceAccount made to a
  namespaced resource named a namespace it owns (its release namespace and its watched ones);
  none touched another install's namespace or `outside`, none listed cluster-wide. The same
  check run on the administrator's requests finds the namespaces it wrote (a control: the check
  can fail).
- A tool prefix reserved for another namespace (`--reserved-prefixes`) is refused with
  NameReserved, while the same spec under a free name is accepted (control).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness import ProcessGroup, binary, start_rust_upstream, wait_until
from k8s_world import (
    OPERATOR_BIN,
    REPO_ROOT,
    Cluster,
    OperatorProc,
    bearer,
    condition,
    describe_conditions,
    mcp_server,
    require_binaries,
    secret,
)

CHART = REPO_ROOT / "charts" / "switchboard"
INSTANCE_LABEL = "switchboard.dev/instance"


@dataclass
class Install:
    release: str
    namespace: str  # the release namespace
    watched: list[str]
    instance: str
    user: str  # the operator's ServiceAccount as the API server names it
    proc: OperatorProc | None = None

    @property
    def owned(self) -> set[str]:
        return {self.namespace, *self.watched}

    def snapshot_servers(self, cluster: Cluster) -> list[str]:
        data = cluster.secret_data(f"{self.release}-switchboard-snapshot", self.namespace) or {}
        text = data.get("snapshot.yaml")
        assert text, f"install {self.release} stored no snapshot in {self.namespace}"
        return sorted(s["id"] for s in json.loads(text).get("servers", []))


class Tenancy:
    def __init__(self, workdir: Path):
        require_binaries()
        self.workdir = workdir
        self.cluster = Cluster(workdir / "cluster", audit=True)
        self.group = ProcessGroup(workdir / "logs")
        self.installs: dict[str, Install] = {}
        self.upstream = None  # the example upstream every server points at

    def helm(self, *args: str) -> str:
        env = dict(os.environ, **self.cluster.proc_env)
        p = subprocess.run(["helm", *args], capture_output=True, text=True, timeout=60, env=env, cwd=REPO_ROOT)
        assert p.returncode == 0, f"helm {' '.join(args)}:\n{p.stderr}"
        return p.stdout

    def install(self, release: str, namespace: str, watched: list[str], instance: str = "", extra: tuple[str, ...] = ()) -> Install:
        """The chart's operator ServiceAccount and RBAC for these values, and the operator running
        as that ServiceAccount (a kubeconfig with its token), the way the chart starts it."""
        sets = ["--set", f"operator.watchNamespaces={{{','.join(watched)}}}"]
        if instance:
            sets += ["--set", f"operator.instance={instance}"]
        rbac = self.helm(
            "template", release, str(CHART), "-n", namespace, *sets,
            "--show-only", "templates/operator-serviceaccount.yaml",
            "--show-only", "templates/operator-rbac.yaml",
        )  # fmt: skip
        self.cluster.kubectl("apply", "-f", "-", input=rbac)
        sa = f"{release}-switchboard-operator"
        token = self.cluster.kubectl("create", "token", sa, "-n", namespace, "--duration", "2h").stdout.strip()
        kubeconfig = self.workdir / f"kubeconfig-{release}"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": self.cluster.env["SWITCHBOARD_K8S_API"],
                                                           "certificate-authority": self.cluster.env["SWITCHBOARD_K8S_CA"]}}],
                    "users": [{"name": "u", "user": {"token": token}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "c",
                }
            )
        )  # fmt: skip
        argv = [
            str(binary(OPERATOR_BIN)),
            "--namespace", namespace,
            "--identity", f"{release}-0",
            "--snapshot-listen", "127.0.0.1:0",
            "--metrics-listen", "127.0.0.1:0",
            "--gateway-service-account", f"{namespace}:{release}-switchboard-gateway",
            "--snapshot-secret", f"{release}-switchboard-snapshot",
            "--lease-name", f"{release}-switchboard-operator",
            "--lease-duration", "4s",
            "--probe-interval", "2s",
            "--delivery-ca-secret", f"{release}-switchboard-operator-delivery-ca",
            "--delivery-trust-configmap", f"{release}-switchboard-operator-delivery-trust",
            "--delivery-tls-names", "localhost",
            "--watch-namespaces", ",".join(watched),
            *(["--instance", instance] if instance else []),
            *extra,
        ]  # fmt: skip
        env = {"KUBECONFIG": str(kubeconfig), "PATH": os.environ.get("PATH", "")}
        proc = OperatorProc(f"operator-{release}", argv, self.group.logdir, env)
        self.group.procs.append(proc)
        proc.wait_ready(30)
        install = Install(release, namespace, watched, instance, f"system:serviceaccount:{namespace}:{sa}", proc)
        self.installs[release] = install
        return install

    def wait_accepted(self, name: str, namespace: str, status: str = "True", timeout: float = 30) -> dict:
        def check():
            obj = self.cluster.server(name, namespace)
            c = condition(obj, "Accepted")
            return c if c and c["status"] == status else None

        return wait_until(check, timeout, interval=0.2, what=f"McpServer {namespace}/{name} Accepted={status}")

    def audit_events(self) -> list[dict]:
        log = self.cluster.audit_log
        assert log.exists() and log.stat().st_size > 0, f"the API server wrote no audit log at {log}"
        return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]

    def stop(self) -> None:
        self.group.stop_all()
        self.cluster.stop()


def outside_its_namespaces(events: list[dict], user: str, owned: set[str]) -> list[str]:
    """The requests `user` made to a namespaced resource outside `owned`, or across all namespaces
    (a cluster-wide list or watch of a namespaced kind). Cluster-scoped reads it is allowed
    (namespaces by name, TokenReviews, discovery) are not namespaced and are not counted."""
    namespaced = {"mcpservers", "mcpvirtualservers", "mcpkeys", "modelroutes", "identityproviders", "secrets",
                  "configmaps", "pods", "deployments", "services", "events", "leases", "horizontalpodautoscalers",
                  "endpointslices", "networkpolicies"}  # fmt: skip
    bad = []
    for e in events:
        if e.get("user", {}).get("username") != user:
            continue
        ref = e.get("objectRef") or {}
        if ref.get("resource") not in namespaced:
            continue
        ns = ref.get("namespace")
        if ns is None or ns not in owned:
            bad.append(f"{e['verb']} {e['requestURI']} ({e.get('responseStatus', {}).get('code')})")
    return bad


@pytest.fixture(scope="module")
def tenancy(tmp_path_factory) -> Iterator[Tenancy]:
    t = Tenancy(tmp_path_factory.mktemp("tenancy"))
    try:
        t.cluster.start()
        t.cluster.install_crds()
        for ns in ("sb-a", "sb-b", "sb-blue", "team-a", "team-b", "outside"):
            t.cluster.kubectl("create", "namespace", ns)
        t.upstream = start_rust_upstream(t.group, "upstream")
        t.install("a", "sb-a", ["team-a"], extra=("--reserved-prefixes", "billing=finance"))
        t.install("b", "sb-b", ["team-b"])
        t.install("blue", "sb-blue", ["team-a"], instance="blue")
        yield t
    finally:
        t.stop()


def server_objects(t: Tenancy, namespace: str, name: str, labels: dict[str, str] | None = None, **spec) -> list[dict]:
    token = f"sbx-{name}-token-{os.urandom(6).hex()}"
    server = mcp_server(name, namespace, url=t.upstream.mcp_url, accessGroups=["ci"], auth=bearer(f"{name}-cred"), **spec)
    if labels:
        server["metadata"]["labels"] = labels
    return [secret(f"{name}-cred", namespace, {"token": token}), server]


def test_installs_program_and_write_only_their_own_namespaces_and_instance(tenancy: Tenancy):
    t = tenancy
    # `outside` first: by the time the installs have reconciled the later objects, they would
    # have seen it if they watched it.
    t.cluster.apply(server_objects(t, "outside", "gamma"))
    t.cluster.apply(server_objects(t, "team-a", "alpha"))
    t.cluster.apply(server_objects(t, "team-b", "beta"))
    # Same prefix as alpha: another install's gateways serve it, so it is no conflict.
    t.cluster.apply(server_objects(t, "team-a", "blue-alpha", labels={INSTANCE_LABEL: "blue"}, toolPrefix="alpha"))
    for ns, name in (("team-a", "alpha"), ("team-b", "beta"), ("team-a", "blue-alpha")):
        t.wait_accepted(name, ns)

    a, b, blue = t.installs["a"], t.installs["b"], t.installs["blue"]
    wait_until(lambda: a.snapshot_servers(t.cluster) == ["team-a/alpha"], 30, what="install a's snapshot")
    wait_until(lambda: b.snapshot_servers(t.cluster) == ["team-b/beta"], 30, what="install b's snapshot")
    wait_until(lambda: blue.snapshot_servers(t.cluster) == ["team-a/blue-alpha"], 30, what="install blue's snapshot")
    gamma = t.cluster.server("gamma", "outside")
    assert not (gamma or {}).get("status"), f"nobody watches `outside`, yet: {describe_conditions(gamma)}"

    events = t.audit_events()
    # Who wrote each server's status, from the audit log (status is written by server-side apply).
    writers: dict[str, set[str]] = {}
    for e in events:
        ref = e.get("objectRef") or {}
        if ref.get("resource") == "mcpservers" and ref.get("subresource") == "status" and e["verb"] in ("patch", "update"):
            writers.setdefault(f"{ref['namespace']}/{ref['name']}", set()).add(e["user"]["username"])
    assert writers.get("team-a/alpha") == {a.user}, writers
    assert writers.get("team-b/beta") == {b.user}, writers
    assert writers.get("team-a/blue-alpha") == {blue.user}, writers
    assert "outside/gamma" not in writers, writers

    for install in (a, b, blue):
        mine = [e for e in events if e.get("user", {}).get("username") == install.user]
        watched = [e for e in mine if (e.get("objectRef") or {}).get("resource") == "mcpservers" and e["verb"] in ("list", "watch")]
        assert watched, f"no list/watch of McpServers by {install.user} in the audit log: the check below would prove nothing"
        bad = outside_its_namespaces(events, install.user, install.owned)
        assert not bad, f"install {install.release} ({install.user}) reached outside {sorted(install.owned)}:\n" + "\n".join(bad[:20])
        touched_outside = [e["requestURI"] for e in mine if "/namespaces/outside/" in e["requestURI"]]
        assert not touched_outside, touched_outside
        forbidden = [e["requestURI"] for e in mine if e.get("responseStatus", {}).get("code") == 403]
        assert not forbidden, f"{install.release} was refused (its chart RBAC is not enough): {forbidden[:10]}"

    # Control: the same check on the administrator, who wrote into every namespace, finds them.
    admin_bad = outside_its_namespaces(events, "switchboard-admin", {"team-a"})
    assert any("/namespaces/outside/" in r for r in admin_bad), "the check cannot see requests outside the owned namespaces"


def test_a_reserved_prefix_is_refused_in_another_namespace(tenancy: Tenancy):
    t = tenancy
    t.cluster.apply(server_objects(t, "team-a", "billing"))
    c = t.wait_accepted("billing", "team-a", status="False")
    assert c["reason"] == "NameReserved", c
    assert 'tool prefix "billing" is reserved for namespace finance' in c["message"], c
    # Control: the same server under a prefix nobody reserved is accepted.
    t.cluster.apply(server_objects(t, "team-a", "billing2"))
    t.wait_accepted("billing2", "team-a")
