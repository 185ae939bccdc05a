"""Acceptance item 2: the official Python MCP SDK client lists and calls tools through the
gateway, on `/mcp` (prefixed names) and `/mcp/{prefix}` (the upstream's own names), in both
protocol eras, against upstreams written with the Python SDK and against the bundled Rust one.

SDK 2.3.0 speaks both eras as a client: `Client(transport, mode="legacy")` runs the initialize
handshake and keeps an `Mcp-Session-Id`; `mode="2026-07-28"` sends the stateless per-request
envelope with no handshake; `mode="auto"` probes `server/discover` and adopts 2026-07-28 when
the server offers it.
"""

from __future__ import annotations

import pytest
from harness import (
    LEGACY_VERSION,
    MODERN_VERSION,
    gateway_config,
    key,
    new_secret,
    run_async,
    sdk_client,
    sdk_list_all_tools,
    sdk_text,
    server,
)

UPSTREAM_TOOLS = {
    "python": {
        "add",
        "echo",
        "request_headers",
        "progress",
        "whoami",
        "sample",
        "ask",
        "roots",
        "touch",
        "slow_stream",
    },
    "rust": {"add", "echo", "request_headers", "slow", "fail", "confirm"},
}

# era given to the SDK client -> protocol version it must end up speaking with the gateway
ERA_VERSIONS = {"legacy": LEGACY_VERSION, MODERN_VERSION: MODERN_VERSION, "auto": MODERN_VERSION}


@pytest.mark.parametrize("era", list(ERA_VERSIONS))
def test_sdk_client_through_gateway(gateways, any_upstream, era):
    secret = new_secret("client-key")
    config = gateway_config([server("up", any_upstream.mcp_url)], [key("client", secret, ["up"])])
    gw = gateways.start(config)
    expected = UPSTREAM_TOOLS[any_upstream.kind]
    record: list = []

    async def scenario():
        out: dict = {}
        async with sdk_client(gw.mcp_url(), secret, era, record=record) as c:
            out["agg_version"] = c.protocol_version
            out["agg_tools"] = [t.name for t in await sdk_list_all_tools(c)]
            out["agg_add"] = await c.call_tool("up__add", {"a": 2, "b": 3})
            out["agg_echo"] = await c.call_tool("up__echo", {"text": "through the aggregate"})
            out["agg_headers"] = await c.call_tool("up__request_headers", {})
        out["agg_record"] = list(record)
        record.clear()
        async with sdk_client(gw.mcp_url("up"), secret, era, record=record) as c:
            out["one_version"] = c.protocol_version
            out["one_tools"] = [t.name for t in await sdk_list_all_tools(c)]
            out["one_add"] = await c.call_tool("add", {"a": 40, "b": 2})
            out["one_echo"] = await c.call_tool("echo", {"text": "through the single endpoint"})
        out["one_record"] = list(record)
        return out

    out = run_async(scenario)

    # /mcp: every tool once, prefixed with the server's prefix; calls route by the prefix.
    assert out["agg_version"] == ERA_VERSIONS[era]
    assert sorted(out["agg_tools"]) == sorted(f"up__{t}" for t in expected)
    assert not out["agg_add"].is_error
    assert out["agg_add"].structured_content == {"result": 5}
    assert sdk_text(out["agg_add"]) == "5"
    assert sdk_text(out["agg_echo"]) == "through the aggregate"
    # The gateway key never goes upstream (invariant 5): the upstream saw no trace of it.
    seen = out["agg_headers"].structured_content
    assert isinstance(seen, dict) and seen, out["agg_headers"]
    assert not any(secret in str(v) for v in seen.values()), seen

    # /mcp/up: the upstream's own names, unprefixed.
    assert out["one_version"] == ERA_VERSIONS[era]
    assert sorted(out["one_tools"]) == sorted(expected)
    assert out["one_add"].structured_content == {"result": 42}
    assert sdk_text(out["one_echo"]) == "through the single endpoint"

    # Sessions: a legacy client gets one sealed, small Mcp-Session-Id per connection; a
    # 2026-07-28 client gets none.
    for name in ("agg_record", "one_record"):
        assert out[name], "no HTTP exchange recorded"
        assert all(status < 500 for _, _, status, _ in out[name]), out[name]
        sids = {h["mcp-session-id"] for _, _, _, h in out[name] if "mcp-session-id" in h}
        if era == "legacy":
            assert len(sids) == 1, f"expected one session id, saw {sids}"
            assert len(next(iter(sids)).encode()) < 200, sids
        else:
            assert sids == set(), f"2026-07-28 responses must not carry Mcp-Session-Id: {sids}"


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_sdk_client_sees_both_upstream_kinds_in_one_aggregate(gateways, python_upstream, rust_upstream, era):
    """One aggregate over a Python SDK upstream and the Rust one: both sets, each under its own
    prefix; the shared names (add, echo, request_headers) route to the right upstream."""
    secret = new_secret("client-key")
    config = gateway_config(
        [server("py", python_upstream.mcp_url), server("rs", rust_upstream.mcp_url, toolPrefix="rust")],
        [key("client", secret, ["py", "rs"])],
    )
    gw = gateways.start(config)

    async def scenario():
        async with sdk_client(gw.mcp_url(), secret, era) as c:
            names = [t.name for t in await sdk_list_all_tools(c)]
            who = await c.call_tool("py__whoami", {})
            slow = await c.call_tool("rust__slow", {"ms": 1})
            py_add = await c.call_tool("py__add", {"a": 1, "b": 1})
            rs_add = await c.call_tool("rust__add", {"a": 2, "b": 2})
            return names, who, slow, py_add, rs_add

    names, who, slow, py_add, rs_add = run_async(scenario)
    assert sorted(names) == sorted(
        [f"py__{t}" for t in UPSTREAM_TOOLS["python"]] + [f"rust__{t}" for t in UPSTREAM_TOOLS["rust"]]
    )
    assert sdk_text(who) == "py"  # only the Python upstream has whoami
    assert not slow.is_error  # only the Rust upstream has slow
    assert py_add.structured_content == {"result": 2}
    assert rs_add.structured_content == {"result": 4}
