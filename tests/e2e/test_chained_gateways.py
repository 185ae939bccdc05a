"""Each era gets only its own reserved fields, and a gateway chained behind a gateway serves every
pairing (issue 20 item 11, acceptance 9).

- A 2026-07-28 client calling a legacy (2025-11-25) upstream: the request goes out on the
  upstream's legacy session, and its `_meta` carries none of the 2026-07-28 reserved keys
  (protocolVersion, clientCapabilities, clientInfo, logLevel): the session says those. A legacy
  server that reads the era from the body first (as this gateway does) would refuse them. The
  control: the same upstream speaking 2026-07-28 gets them, so the check sees the keys when
  they are sent.
- A legacy client of a 2026-07-28 upstream: results (a tool call, a listing, on the server's
  endpoint and the aggregate one) reach it without the 2026-07-28 result fields (`resultType`,
  `ttlMs`, `cacheScope`). The control: a 2026-07-28 client of the same upstream gets them.
- client -> gateway A -> gateway B -> the Python SDK upstream, in the four pairings of client era
  and upstream era, with sampling, elicitation and roots round trips: every answer right.
"""

from __future__ import annotations

import pytest
from harness import (
    LEGACY_VERSION,
    MODERN_VERSION,
    RawMcp,
    gateway_config,
    key,
    new_secret,
    run_async,
    sdk_client,
    server,
    start_python_upstream,
)
from test_relay import CALLBACKS, ROUND_TRIPS, tool_name

PAIRINGS = [("legacy", "legacy"), (MODERN_VERSION, "dual"), ("legacy", "dual"), (MODERN_VERSION, "legacy")]
IDS = ["legacy-client-legacy-upstream", "2026-client-2026-upstream", "legacy-client-2026-upstream", "2026-client-legacy-upstream"]


def _round_trips(url: str, secret: str, era: str, endpoint: str, prefix: str):
    async def scenario():
        out = []
        async with sdk_client(url, secret, era, **CALLBACKS) as c:
            assert c.protocol_version == (LEGACY_VERSION if era == "legacy" else MODERN_VERSION)
            out.append(await c.call_tool(tool_name(endpoint, prefix, "echo"), {"text": "hello"}))
            for tool, args, _ in ROUND_TRIPS:
                out.append(await c.call_tool(tool_name(endpoint, prefix, tool), args))
        return out

    results = run_async(scenario, timeout=120)
    assert not results[0].is_error, results[0]
    for (tool, _, expected), result in zip(ROUND_TRIPS, results[1:], strict=True):
        assert not result.is_error, f"{tool}: {result}"
        assert result.structured_content == {"result": expected}, f"{tool}: {result}"


@pytest.mark.parametrize("upstream_kind", ["legacy", "dual"])
def test_a_legacy_session_gets_no_2026_reserved_meta(gateways, procs, upstream_kind):
    upstream = start_python_upstream(procs, upstream_kind, legacy_only=upstream_kind == "legacy")
    secret = new_secret("client-key")
    gw = gateways.start(gateway_config([server("up", upstream.mcp_url)], [key("client", secret, ["up"])]))
    _round_trips(gw.mcp_url("up"), secret, MODERN_VERSION, "single", "up")
    stats = upstream.stats()
    assert stats["tools"].get("echo") == 1, stats
    if upstream_kind == "legacy":
        assert stats["foreign_meta"] == {}, f"2026-07-28 reserved keys reached a legacy session: {stats['foreign_meta']}"
    else:
        # Control: a 2026-07-28 upstream gets the modern form, which the check does not count;
        # the keys are there (the request is modern), so an empty count means nothing leaked.
        assert stats["refused_modern"] == 0 and stats["foreign_meta"] == {}, stats


MODERN_RESULT_FIELDS = {"resultType", "ttlMs", "cacheScope"}


def test_a_legacy_client_gets_no_2026_result_fields(gateways, procs):
    upstream = start_python_upstream(procs, "dual")
    secret = new_secret("client-key")
    gw = gateways.start(gateway_config([server("up", upstream.mcp_url)], [key("client", secret, ["up"])]))
    seen: dict[tuple[str, str, str], set[str]] = {}
    for era in ("legacy", MODERN_VERSION):
        for endpoint, url, tool in (("single", gw.mcp_url("up"), "echo"), ("aggregate", gw.mcp_url(), "up__echo")):
            with RawMcp(url, secret, era) as mcp:
                call = mcp.call_tool(tool, {"text": "hi"})
                listing = mcp.list_tools()
            for what, reply in (("tools/call", call), ("tools/list", listing)):
                assert reply.status == 200 and reply.result is not None, f"{era} {endpoint} {what}: {reply.raw[:500]!r}"
                seen[(era, endpoint, what)] = MODERN_RESULT_FIELDS & set(reply.result)
    leaked = {k: v for k, v in seen.items() if k[0] == "legacy" and v}
    assert not leaked, f"2026-07-28 result fields reached a legacy client: {leaked}"
    # Control: the same upstream's results carry them to a 2026-07-28 client.
    assert seen[(MODERN_VERSION, "single", "tools/call")] == {"resultType"}, seen
    for endpoint in ("single", "aggregate"):
        assert seen[(MODERN_VERSION, endpoint, "tools/list")] == MODERN_RESULT_FIELDS, seen


@pytest.mark.parametrize("endpoint", ["single", "aggregate"])
@pytest.mark.parametrize(("era", "upstream_kind"), PAIRINGS, ids=IDS)
def test_a_gateway_behind_a_gateway_serves_every_pairing(gateways, procs, era, upstream_kind, endpoint):
    upstream = start_python_upstream(procs, upstream_kind, legacy_only=upstream_kind == "legacy")
    inner_key = new_secret("inner-key")
    inner = gateways.start(
        gateway_config([server("up", upstream.mcp_url)], [key("outer", inner_key, ["up"])]), name="inner"
    )
    outer_key = new_secret("outer-key")
    outer = gateways.start(
        gateway_config(
            [server("chain", inner.mcp_url("up"), auth={"type": "bearer", "secret": inner_key})],
            [key("client", outer_key, ["chain"])],
        ),
        name="outer",
    )
    url = outer.mcp_url("chain") if endpoint == "single" else outer.mcp_url()
    _round_trips(url, outer_key, era, endpoint, "chain")
    stats = upstream.stats()
    for tool in ("sample", "ask", "roots"):
        assert stats["tools"].get(tool, 0) >= 2, f"{tool} did not reach the upstream through both gateways: {stats}"
    if upstream_kind == "legacy":
        assert stats["foreign_meta"] == {}, f"2026-07-28 reserved keys reached a legacy session: {stats['foreign_meta']}"
        # One reply per round trip, delivered to the session that asked, through both gateways.
        assert stats["replies"] == len(ROUND_TRIPS), stats
