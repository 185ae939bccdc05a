"""Issue 25 item 5: Argo CD health checks for the Switchboard kinds (charts/argocd/health.lua,
installed per kind by charts/argocd/argocd-cm.yaml), run in gopher-lua (the Lua Argo CD embeds,
built by `tests/setup-go-tool.sh glua`) against objects as the real operator left them:

- a ready McpServer, its McpKey and a ready ModelRoute are Healthy;
- an McpServer whose Secret is missing and a ModelRoute whose key Secret is missing are
  Degraded, with the operator's reason; an McpServer whose upstream refuses connections is
  Degraded once its probe fails;
- controls made from the healthy objects: with its generation ahead of what the operator saw,
  with no status yet, or a probe not answered yet, it is Progressing; the served key with its
  Ready as the operator writes it while a gateway replica has not caught up (False, Pending)
  is Progressing, not Degraded;
- argocd-cm.yaml holds health.lua for each of the five kinds and is what generate.py makes.
"""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from k8s_fixtures import module_world
from k8s_world import REPO_ROOT, World, bearer, demo_objects, mcp_server, model_route, secret

ARGOCD = REPO_ROOT / "charts" / "argocd"
KINDS = ["McpServer", "McpVirtualServer", "McpKey", "ModelRoute", "IdentityProvider"]


def glua() -> Path:
    path = os.environ.get("SWITCHBOARD_GLUA")
    if not path:
        p = subprocess.run([str(REPO_ROOT / "tests" / "setup-go-tool.sh"), "glua"], capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, f"tests/setup-go-tool.sh glua failed (it builds gopher-lua's glua from the Go module proxy):\n{p.stderr}"
        path = p.stdout.strip().splitlines()[-1]
    assert os.access(path, os.X_OK), f"no glua at {path}: run tests/setup-go-tool.sh glua"
    return Path(path)


def lua_value(v) -> str:
    """A JSON value as a Lua literal (what Argo CD hands the script as `obj`)."""
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + "".join(f"\\{ord(c)}" if c in '"\\' or ord(c) < 32 else c for c in v) + '"'
    if isinstance(v, list):
        return "{" + ", ".join(lua_value(x) for x in v) + "}"
    return "{" + ", ".join(f"[{lua_value(k)}] = {lua_value(x)}" for k, x in v.items()) + "}"


def health(tmp: Path, obj: dict) -> tuple[str, str]:
    script = (ARGOCD / "health.lua").read_text()
    program = tmp / "health-run.lua"
    program.write_text(
        f"obj = {lua_value(obj)}\n"
        f"local function check()\n{script}\nend\n"
        'local hs = check()\nprint(hs.status)\nprint(hs.message or "")\n'
    )
    p = subprocess.run([str(glua()), str(program)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, f"glua failed:\n{p.stderr}"
    status, _, message = p.stdout.partition("\n")
    return status, message.strip()


@pytest.fixture(scope="module")
def world(request, tmp_path_factory) -> Iterator[World]:
    with module_world(request, tmp_path_factory, "argocd") as w:
        yield w


def test_argocd_cm_installs_the_script_for_every_kind():
    p = subprocess.run(["python3", str(ARGOCD / "generate.py"), "--check"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    data = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())["data"]
    script = (ARGOCD / "health.lua").read_text()
    assert sorted(data) == sorted(f"resource.customizations.health.switchboard.dev_{k}" for k in KINDS)
    assert all(v == script for v in data.values())


def test_health_follows_what_the_operator_says(world: World, tmp_path: Path):
    provider = world.start_provider("argocd-provider", api_key="sbx-argocd-provider-key")
    world.remember("sbx-argocd-provider-key")
    world.cluster.apply(
        [
            *demo_objects(world),
            mcp_server("nosecret", "default", url=world.upstream.mcp_url, accessGroups=["ci"], auth=bearer("absent")),
            mcp_server("refused", "default", url="http://127.0.0.1:1/mcp", timeout="1s", accessGroups=["ci"]),
            secret("provider", "default", {"apiKey": "sbx-argocd-provider-key"}),
            model_route("scripted", "default", provider="anthropic", baseUrl=provider.url,
                        apiKeySecretRef={"name": "provider", "key": "apiKey"}, accessGroups=["ci"]),  # fmt: skip
            model_route("nokey", "default", provider="anthropic", baseUrl=provider.url,
                        apiKeySecretRef={"name": "absent", "key": "apiKey"}, accessGroups=["ci"]),  # fmt: skip
        ]
    )
    world.wait_condition("mcpserver", "demo", "default", "Ready", "True", 30)
    world.wait_condition("mcpserver", "demo", "default", "Programmed", "True", 30)
    world.wait_condition("mcpkey", "ci", "default", "Ready", "True", 30)
    world.wait_condition("modelroute", "scripted", "default", "Ready", "True", 30)
    world.wait_condition("mcpserver", "nosecret", "default", "Accepted", "False", 30)
    world.wait_condition("modelroute", "nokey", "default", "Accepted", "False", 30)
    world.wait_condition("mcpserver", "refused", "default", "Ready", "False", 30)

    demo = world.cluster.server("demo")
    assert health(tmp_path, demo)[0] == "Healthy", health(tmp_path, demo)
    assert health(tmp_path, world.cluster.key("ci"))[0] == "Healthy"
    assert health(tmp_path, world.cluster.model_route("scripted"))[0] == "Healthy"

    status, message = health(tmp_path, world.cluster.server("nosecret"))
    assert (status, message.split(":")[0]) == ("Degraded", "SecretNotFound"), message
    status, message = health(tmp_path, world.cluster.model_route("nokey"))
    assert (status, message.split(":")[0]) == ("Degraded", "SecretNotFound"), message
    status, message = health(tmp_path, world.cluster.server("refused"))
    assert status == "Degraded", (status, message)

    # Controls from the healthy object: a generation the operator has not seen, and no status.
    ahead = copy.deepcopy(demo)
    ahead["metadata"]["generation"] = demo["metadata"]["generation"] + 1
    assert health(tmp_path, ahead) == ("Progressing", f"Waiting for the operator to see generation {ahead['metadata']['generation']}")
    fresh = copy.deepcopy(demo)
    fresh.pop("status")
    assert health(tmp_path, fresh)[0] == "Progressing"
    probing = copy.deepcopy(demo)
    for c in probing["status"]["conditions"]:
        if c["type"] == "Ready":
            c.update(status="Unknown", reason="Probing")
    assert health(tmp_path, probing)[0] == "Progressing"
    key = world.cluster.key("ci")
    catching_up = copy.deepcopy(key)
    for c in catching_up["status"]["conditions"]:
        if c["type"] == "Ready":
            c.update(status="False", reason="Pending", message="1/2 gateway replicas accept this key")
    assert health(tmp_path, catching_up) == ("Progressing", "Pending: 1/2 gateway replicas accept this key")
    expired = copy.deepcopy(key)
    for c in expired["status"]["conditions"]:
        if c["type"] == "Ready":
            c.update(status="False", reason="Expired", message="the key expired")
    assert health(tmp_path, expired)[0] == "Degraded"
