"""Gateway settings on Kubernetes (`switchboard-operator --gateway-settings FILE`, chart
`gateway.settings`): the standalone file's `gateway:` section, read by the operator and carried
to every gateway replica in the snapshot.

- `maxBodyBytes` in force on both replicas: a body over it is refused with 413 before it reaches
  anything, one under it is served (control);
- `sessionTtl` in force: a legacy session works, then is refused (404) once the short ttl has
  passed, while a new session works (control);
- a file with an unknown field, a bad value, or a field the operator owns (`sessionKey`) stops
  the operator at start with the field named.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
from harness import RawMcp, call_result_value, wait_until
from k8s_fixtures import module_world
from k8s_world import OPERATOR_BIN, World, binary, demo_objects

MAX_BODY = 4096
SESSION_TTL_S = 3


@pytest.fixture(scope="module")
def world(request, tmp_path_factory) -> Iterator[World]:
    settings = tmp_path_factory.mktemp("settings") / "gateway-settings.yaml"
    settings.write_text(f"gateway:\n  maxBodyBytes: {MAX_BODY}\n  sessionTtl: {SESSION_TTL_S}s\n  listingPageCap: 9\n")
    with module_world(request, tmp_path_factory, "settings", operator_args=["--gateway-settings", str(settings)]) as w:
        w.cluster.apply(demo_objects(w))
        w.kubectl_wait_ready("demo", timeout=60)
        w.key = w.generated_key("ci-key")
        w.wait_key_served(w.key)
        yield w


def test_max_body_bytes_reaches_every_replica(world: World):
    for name, gw in world.gateways.items():
        ok = httpx.post(
            f"{gw.url}/mcp-rest/tools/call",
            json={"name": "demo__echo", "arguments": {"text": "x" * (MAX_BODY // 2)}},
            headers={"Authorization": f"Bearer {world.key}"},
            timeout=10,
        )
        assert ok.status_code == 200, (name, ok.status_code, ok.text[:300])
        big = httpx.post(
            f"{gw.url}/mcp-rest/tools/call",
            json={"name": "demo__echo", "arguments": {"text": "x" * (MAX_BODY * 2)}},
            headers={"Authorization": f"Bearer {world.key}"},
            timeout=10,
        )
        assert big.status_code == 413, (name, big.status_code, big.text[:300])
    assert world.stored_snapshot()["gateway"]["maxBodyBytes"] == MAX_BODY


def test_session_ttl_is_in_force(world: World):
    gw = next(iter(world.gateways.values()))
    mcp = RawMcp(gw.mcp_url(), world.key, "legacy")
    opened = time.monotonic()
    assert call_result_value(mcp.call_tool("demo__add", {"a": 1, "b": 2}).result) == 3
    # Bounded: the session must end within a few ttls (the default ttl would be hours).
    wait_until(lambda: mcp.call_tool("demo__add", {"a": 1, "b": 2}).status == 404, SESSION_TTL_S * 5,
               interval=0.5, what="the legacy session to expire after sessionTtl")  # fmt: skip
    # (a lower bound only, so a slow machine cannot fail it; sealed instants are whole
    # seconds, so a session may end up to one second before the ttl from its first request)
    assert time.monotonic() - opened >= SESSION_TTL_S - 1, "expired before its ttl"
    fresh = RawMcp(gw.mcp_url(), world.key, "legacy")
    assert call_result_value(fresh.call_tool("demo__add", {"a": 2, "b": 2}).result) == 4


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("gateway:\n  maxBodyByte: 10\n", "maxBodyByte"),
        ("gateway:\n  sessionTtl: soon\n", "gateway.sessionTtl"),
        ("gateway:\n  sessionKey: hunter2\n", "gateway.sessionKey cannot be set here"),
        ("servers: []\n", "only the gateway section"),
    ],
)
def test_a_bad_settings_file_stops_the_operator_naming_the_field(world: World, tmp_path, text: str, named: str):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    p = subprocess.run(
        [str(binary(OPERATOR_BIN)), "--namespace", "switchboard-system", "--gateway-settings", str(bad)],
        capture_output=True, text=True, timeout=60, env={**world.cluster.proc_env},
    )  # fmt: skip
    assert p.returncode != 0, p.stderr[-2000:]
    assert named in p.stderr and "--gateway-settings" in p.stderr, p.stderr[-2000:]
    assert "hunter2" not in p.stderr + p.stdout
