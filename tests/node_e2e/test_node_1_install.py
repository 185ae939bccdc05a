"""Acceptance 1 and 4 of the one-node cluster: `helm install` with the locally built images brings
both operator pods and both gateway pods to Ready (Running, 0 restarts); the containers really run
as a non-root user on a read-only root filesystem (read from the processes, not the pod spec);
the images' sizes are printed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from node import RELEASE_NS, get_json, kubectl


def test_chart_pods_running_ready_without_restarts(installed):
    out = kubectl("get", "pods", "-n", RELEASE_NS, "-o", "wide").stdout
    print("\n" + out)
    items = get_json("pods", "-n", RELEASE_NS)["items"]
    by_component: dict[str, list[dict]] = {}
    for p in items:
        by_component.setdefault(p["metadata"]["labels"].get("app.kubernetes.io/component", "?"), []).append(p)
    assert sorted(by_component) == ["gateway", "operator"], by_component.keys()
    for component, ps in by_component.items():
        assert len(ps) == 2, f"{component}: {len(ps)} pods"
        for p in ps:
            name = p["metadata"]["name"]
            assert p["status"]["phase"] == "Running", f"{name}: {p['status']['phase']}"
            (cs,) = p["status"]["containerStatuses"]
            assert cs["ready"], f"{name} not ready"
            assert cs["restartCount"] == 0, f"{name} restarted {cs['restartCount']} times"
            image = cs["image"]
            assert image.startswith(f"ghcr.io/switchboard-dev/switchboard-{component}:"), image


def container_processes(binary: str) -> list[int]:
    """Host pids of the node's processes running `binary` (found by the node's cgroup)."""
    node_cgroup = (Path(os.environ["NODE_DIR"]) / "cgroup").read_text().strip()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            exe = os.readlink(proc / "exe")
            cgroup = (proc / "cgroup").read_text()
        except OSError:
            continue
        if exe.endswith("/" + binary) and f"/{node_cgroup}/" in cgroup:
            found.append(int(proc.name))
    return found


def test_containers_run_non_root_on_a_read_only_root(installed):
    for binary in ("switchboard-gateway", "switchboard-operator"):
        pids = container_processes(binary)
        assert len(pids) == 2, f"{binary}: expected 2 container processes on the node, found {pids}"
        for pid in pids:
            status = Path(f"/proc/{pid}/status").read_text()
            uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
            gids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Gid:"))
            assert set(uids) == {"65532"}, f"{binary} pid {pid} runs with uids {uids}"
            assert set(gids) == {"65532"}, f"{binary} pid {pid} runs with gids {gids}"
            caps = next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:"))
            assert int(caps, 16) == 0, f"{binary} pid {pid} has capabilities {caps}"
            root = [line.split() for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
                    if line.split()[4] == "/"]
            assert root, f"{binary} pid {pid}: no root mount in mountinfo"
            options = root[-1][5].split(",")
            assert "ro" in options, f"{binary} pid {pid}: root filesystem mounted {options}"
            print(f"{binary} pid {pid}: uid/gid 65532, no capabilities, root mounted {root[-1][5]}")


def test_image_sizes_are_printed(installed):
    sock = Path(os.environ["NODE_DIR"]) / "containerd" / "containerd.sock"
    out = subprocess.run(["ctr", "--address", str(sock), "-n", "k8s.io", "images", "ls"],
                         capture_output=True, text=True, check=True).stdout
    sizes = {}
    for line in out.splitlines()[1:]:
        cols = line.split()
        if cols and cols[0].startswith(("ghcr.io/switchboard-dev/", "switchboard.test/", "registry.k8s.io/")):
            sizes[cols[0]] = f"{cols[3]} {cols[4]}"
    print("\nimages on the node (compressed size as stored by containerd):")
    for name, size in sorted(sizes.items()):
        print(f"  {name:62} {size}")
    for component in ("gateway", "operator", "example-upstream"):
        assert any(f"switchboard-{component}:" in n for n in sizes), f"no {component} image on the node: {sizes}"
