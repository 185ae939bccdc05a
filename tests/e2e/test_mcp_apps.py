"""Issue 40, item 3: MCP Apps (`io.modelcontextprotocol/ui`) through the gateway, with fixtures the
gateway did not shape: the server is the official Python SDK's MCP App (mcp 2.3.0,
`mcp.server.apps`: a tool linked to its `ui://` resource, an app-only tool), and the host is built
on the extension's reference SDK (@modelcontextprotocol/ext-apps 2.0.4: `getToolUiResourceUri`,
`AppBridge`, the view's `App`; tests/node/apps_host.mjs) over the official TypeScript client.

Through `/mcp` (both eras), `/mcp/weather` and a virtual server, the host finds the tool's UI
resource (the SDK refuses any URI that is not `ui://`), reads it (the mimeType
`text/html;profile=mcp-app`, its contents naming the URI it read), renders it in a view, and the
view calls the app-only tool by the name its server gave it and reads its resource again, both
through the host and the gateway.

The controls: the aggregate names the resource `ui://weather__...` (a `weather__ui://...` form
would fail the host's check); a virtual server whose `resources` filter leaves the UI resource
out lists the tool but its resource cannot be read.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from harness import MODERN_VERSION, REPO_ROOT, gateway_config, key, new_secret, server, start_python_upstream
from ts_client import require_node

APPS_HOST = REPO_ROOT / "tests" / "node" / "apps_host.mjs"
MIME = "text/html;profile=mcp-app"


def apps_host(url: str, secret: str, tool: str, view_calls: str, mode: str = "legacy") -> dict:
    node, directory = require_node()
    argv = [node, str(APPS_HOST), "--url", url, "--key", secret, "--tool", tool, "--view-calls", view_calls,
            "--mode", mode, "--modules", str(directory)]  # fmt: skip
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=90, cwd=REPO_ROOT, check=False)
    stdout = done.stdout.decode("utf-8", "replace")
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert lines, f"the host printed nothing (exit {done.returncode}): {done.stderr.decode('utf-8', 'replace')[-3000:]}"
    out = json.loads(lines[-1])
    out["exit"] = done.returncode
    return out


@pytest.fixture
def world(procs, gateways):
    up = start_python_upstream(procs, "weather", apps=True)
    secret = new_secret("apps")
    config = gateway_config([server("weather", up.mcp_url)], [key("k", secret, ["weather", "desk", "bare"])])
    config["virtualServers"] = [
        {"name": "desk", "sources": [{"server": "weather", "tools": {"allow": ["show_weather", "refresh_weather"]}}]},
        # The control: a resources filter that leaves the UI resource out.
        {"name": "bare", "sources": [{"server": "weather", "tools": {"allow": ["show_weather"]},
                                      "resources": {"allow": ["e2e://*"]}}]},  # fmt: skip
    ]
    return gateways.start(config), secret


def rendered(out: dict, uri: str) -> None:
    assert out["exit"] == 0 and "error" not in out, out
    assert out["uri"] == uri, out
    assert out["mimeType"] == MIME and out["contentUri"] == uri, out
    assert "Weather view" in (out["html"] or ""), out
    assert not out["viewCalled"].get("isError"), out["viewCalled"]
    assert out["viewCalled"]["content"][0]["text"] == "refreshed", out["viewCalled"]
    assert out["viewRead"]["contents"][0]["uri"] == uri, out["viewRead"]
    assert out["hostInfo"]["name"] == "switchboard-e2e-apps-host", out


@pytest.mark.parametrize("mode", ["legacy", MODERN_VERSION])
def test_a_host_renders_a_tools_ui_resource_through_the_aggregate(world, mode):
    gw, secret = world
    out = apps_host(gw.mcp_url(), secret, "weather__show_weather", "refresh_weather", mode)
    rendered(out, "ui://weather__weather/view.html")
    assert out["appOnly"] == ["weather__refresh_weather"], out


def test_a_host_renders_it_through_the_servers_own_endpoint_and_a_virtual_server(world):
    gw, secret = world
    own = apps_host(gw.mcp_url("weather"), secret, "show_weather", "refresh_weather")
    rendered(own, "ui://weather/view.html")
    assert own["appOnly"] == ["refresh_weather"], own
    desk = apps_host(gw.mcp_url("desk"), secret, "show_weather", "refresh_weather")
    rendered(desk, "ui://weather/view.html")
    # The control: the tool is listed, but its resource is not the virtual server's to read.
    bare = apps_host(gw.mcp_url("bare"), secret, "show_weather", "refresh_weather")
    assert bare["exit"] == 1 and "ui://weather/view.html" in bare["error"]["message"], bare
