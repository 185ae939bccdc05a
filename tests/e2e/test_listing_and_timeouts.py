"""Acceptance item 6: every wait has a bound (docs/architecture.md, invariant 7).

Uses the Rust example upstream's variants (`/v/{opts}/mcp`, documented in
examples/upstream/src/main.rs):
- `page=2,tools=10`: 5 pages of 2 -> the gateway lists all 10;
- `page=2,cursor=repeat,tools=10`: page 1 (tool_0, tool_1) hands out cursor C, page 2
  (tool_2, tool_3) hands out C again -> the walk ends with those 4 and a warning;
- `cursor=endless` (pages of 2: the 6 base tools, then generated tool_6, tool_7, ...) -> the walk
  stops at `gateway.listingPageCap` pages, or at the listing deadline
  `max(timeout, listingTimeout)` when pages are slow (`delay=MS`);
- `hang`: never answers -> with `timeout: 1s` a call fails with a timeout error naming the
  server and the 1 s budget, and the aggregate listing still has the other servers' tools, with
  the failure in `_meta["switchboard.dev/listingErrors"]`.

No assertion here is on wall-clock time (docs/architecture.md: timing is never asserted). A wait
is shown bounded by what the answer says (the budget the timeout error names, the pages a walk
fetched, which the upstream's per-page delay bounds from above) and by the fact that an answer
comes at all from an upstream that never answers or never ends its cursor (each client here has
its own timeout, far past the budgets); elapsed times are printed.
"""

from __future__ import annotations

import time
from urllib.parse import unquote

import pytest
from harness import (
    LISTING_ERRORS_META,
    LISTING_WARNINGS_META,
    MODERN_VERSION,
    UPSTREAM_TIMEOUT,
    RawMcp,
    call_result_value,
    gateway_config,
    key,
    listing_meta,
    new_secret,
    rest_call,
    server,
    tool_names,
)

ERAS = ["legacy", MODERN_VERSION]
BASE_TOOLS = ["add", "echo", "request_headers", "slow", "fail", "confirm"]


def _of(prefix: str, names: list[str]) -> list[str]:
    return sorted(n for n in names if n.startswith(f"{prefix}__"))


def _posts_to(upstream, variant: str) -> int:
    """How many POSTs reached the upstream's `/v/{variant}/mcp` (its /_stats by path)."""
    by_path = upstream.stats().get("by_path", {})
    return sum(int(n) for path, n in by_path.items() if unquote(path) == f"/v/{variant}/mcp")


@pytest.mark.parametrize("era", ERAS)
def test_paginated_upstream_is_listed_completely(gateways, rust_upstream, era):
    secret = new_secret("client-key")
    config = gateway_config(
        [server("paged", rust_upstream.variant_url("page=2,tools=10"))], [key("client", secret, ["paged"])]
    )
    gw = gateways.start(config)
    expected = [f"tool_{i}" for i in range(10)]

    with RawMcp(gw.mcp_url(), secret, era) as mcp:
        tools, metas = mcp.list_all_tools()
        names = tool_names(tools)
        assert sorted(names) == sorted(f"paged__{t}" for t in expected), names
        assert len(names) == len(set(names)) == 10
        assert listing_meta(metas, LISTING_WARNINGS_META) == []
        assert listing_meta(metas, LISTING_ERRORS_META) == []
        assert call_result_value(mcp.call_tool("paged__tool_7", {"x": "y"}).result)["tool"] == "tool_7"

    with RawMcp(gw.mcp_url("paged"), secret, era) as one:
        names = tool_names(one.list_all_tools()[0])
        assert sorted(names) == sorted(expected), names


@pytest.mark.parametrize("era", ERAS)
def test_repeated_cursor_ends_the_walk_with_a_warning(gateways, rust_upstream, era):
    secret = new_secret("client-key")
    config = gateway_config(
        [
            server("rep", rust_upstream.variant_url("page=2,cursor=repeat,tools=10")),
            server("ok", rust_upstream.mcp_url),
        ],
        [key("client", secret, ["rep", "ok"])],
    )
    gw = gateways.start(config)
    before = _posts_to(rust_upstream, "page=2,cursor=repeat,tools=10")
    with RawMcp(gw.mcp_url(), secret, era) as mcp:
        start = time.monotonic()
        tools, metas = mcp.list_all_tools()
        elapsed = time.monotonic() - start
    names = tool_names(tools)
    assert _of("rep", names) == sorted(f"rep__tool_{i}" for i in range(4)), names
    assert _of("ok", names) == sorted(f"ok__{t}" for t in BASE_TOOLS)
    warnings = listing_meta(metas, LISTING_WARNINGS_META)
    assert [w["server"] for w in warnings] == ["rep"], warnings
    assert warnings[0]["message"], warnings
    assert listing_meta(metas, LISTING_ERRORS_META) == []
    # A count, not a time: the walk stopped at the repeat (page 2), not at the page cap (100).
    asked = _posts_to(rust_upstream, "page=2,cursor=repeat,tools=10") - before
    print(f"a repeated cursor detected in {elapsed:.2f}s, {asked} requests to that upstream")
    assert 2 <= asked <= 6, f"{asked} requests to the repeating upstream: the walk did not stop at the repeat"


@pytest.mark.parametrize("era", ERAS)
def test_endless_cursor_stops_at_the_page_cap(gateways, rust_upstream, era):
    secret = new_secret("client-key")
    cap = 4
    config = gateway_config(
        [server("inf", rust_upstream.variant_url("cursor=endless")), server("ok", rust_upstream.mcp_url)],
        [key("client", secret, ["inf", "ok"])],
        listingPageCap=cap,
    )
    gw = gateways.start(config)
    with RawMcp(gw.mcp_url(), secret, era) as mcp:
        tools, metas = mcp.list_all_tools()
    names = tool_names(tools)
    # cap pages of 2: the 6 base tools, then tool_6 and tool_7.
    assert _of("inf", names) == sorted(f"inf__{t}" for t in BASE_TOOLS + ["tool_6", "tool_7"]), names
    assert _of("ok", names) == sorted(f"ok__{t}" for t in BASE_TOOLS)
    warnings = listing_meta(metas, LISTING_WARNINGS_META)
    assert [w["server"] for w in warnings] == ["inf"], warnings


@pytest.mark.parametrize(
    ("timeout", "listing_timeout", "budget"),
    [("1s", None, 1.0), ("1s", "3s", 3.0)],
    ids=["timeout-only", "listingTimeout-wins"],
)
def test_endless_slow_cursor_stops_at_the_listing_deadline(gateways, rust_upstream, timeout, listing_timeout, budget):
    """Pages take 0.4 s each (under the per-request timeout), the cursor never ends and the page
    cap is far away: the walk ends at max(timeout, listingTimeout), with what it collected. The
    upstream's delay bounds the pages any walk can fetch in `budget` from above, whatever the
    machine; a walk held to `timeout` alone (1 s) fetches at most 2, so more than that shows
    listingTimeout (3 s) is the deadline."""
    secret = new_secret("client-key")
    drip = server("drip", rust_upstream.variant_url("cursor=endless,delay=400"), timeout=timeout)
    if listing_timeout:
        drip["listingTimeout"] = listing_timeout
    config = gateway_config(
        [drip, server("ok", rust_upstream.mcp_url)], [key("client", secret, ["drip", "ok"])], listingPageCap=1000
    )
    gw = gateways.start(config)
    with RawMcp(gw.mcp_url(), secret, MODERN_VERSION, timeout=budget + 10) as mcp:
        start = time.monotonic()
        reply = mcp.list_tools()
        elapsed = time.monotonic() - start
    assert reply.status == 200, reply.raw
    result = reply.result
    names = tool_names(result["tools"])
    pages_possible = int(budget / 0.4)
    got = len(_of("drip", names))
    print(f"listing took {elapsed:.2f}s for a {budget}s deadline, {got // 2} pages of the endless cursor")
    assert 2 <= got <= 2 * pages_possible, (got, names)
    if listing_timeout:
        within_timeout = 2 * int(1.0 / 0.4)
        assert got > within_timeout, f"only {got} tools: the walk stopped at the 1 s timeout, not at listingTimeout"
    assert _of("ok", names) == sorted(f"ok__{t}" for t in BASE_TOOLS)
    meta = result.get("_meta") or {}
    reported = [w["server"] for w in meta.get(LISTING_WARNINGS_META, [])] + [
        e["server"] for e in meta.get(LISTING_ERRORS_META, [])
    ]
    assert reported == ["drip"], meta


@pytest.fixture
def hanging(gateways, rust_upstream):
    secret = new_secret("client-key")
    config = gateway_config(
        [server("slow", rust_upstream.variant_url("hang"), timeout="1s"), server("ok", rust_upstream.mcp_url)],
        [key("client", secret, ["slow", "ok"])],
    )
    return gateways.start(config), secret


@pytest.mark.parametrize("era", ERAS)
def test_hanging_upstream_times_out_naming_server_and_budget(hanging, era):
    gw, secret = hanging
    with RawMcp(gw.mcp_url(), secret, era, timeout=15) as mcp:
        if era == "legacy":
            mcp.initialize()

        # The upstream never answers: any answer is the gateway's bound, and it names the budget.
        reply = mcp.call_tool("slow__add", {"a": 1, "b": 2})
        print(f"timeout error after {reply.elapsed:.2f}s for a 1s budget")
        error = reply.error
        assert error["code"] == UPSTREAM_TIMEOUT, error
        assert "slow" in error["message"] and "1s" in error["message"], error
        assert error["data"] == {"server": "slow", "timeoutMs": 1000}, error

        # The aggregate listing answers too, with the other server's tools and the hung one's
        # timeout.
        listed = mcp.list_tools()
        print(f"listing took {listed.elapsed:.2f}s")
        result = listed.result
        names = tool_names(result["tools"])
        assert _of("ok", names) == sorted(f"ok__{t}" for t in BASE_TOOLS), names
        assert _of("slow", names) == []
        errors = (result.get("_meta") or {}).get(LISTING_ERRORS_META, [])
        assert [e["server"] for e in errors] == ["slow"], result.get("_meta")
        assert "timeout" in errors[0]["kind"].lower() or "timeout" in errors[0]["message"].lower(), errors

        # Other servers keep working while one hangs.
        assert call_result_value(mcp.call_tool("ok__add", {"a": 2, "b": 2}).result) == 4

    # The single-server endpoint, and REST, bound the wait the same way.
    with RawMcp(gw.mcp_url("slow"), secret, era, timeout=15) as one:
        start = time.monotonic()
        if era == "legacy":
            init = one.post(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "t", "version": "0"},
                    },
                }
            )
            if init.status == 200 and init.headers.get("mcp-session-id"):
                one.session_id = init.headers["mcp-session-id"]
                reply = one.call_tool("add", {"a": 1, "b": 2})
            else:
                reply = init
        else:
            reply = one.call_tool("add", {"a": 1, "b": 2})
        print(f"single endpoint took {time.monotonic() - start:.2f}s")
        assert reply.error["code"] == UPSTREAM_TIMEOUT, reply.message
        assert "slow" in reply.error["message"], reply.message
        assert reply.error["data"] == {"server": "slow", "timeoutMs": 1000}, reply.message

    r = rest_call(gw, secret, "slow__add", {"a": 1, "b": 2})
    print(f"REST timeout after {r.elapsed.total_seconds():.2f}s")
    assert r.status_code == 504, r.text
    assert r.json()["error"]["code"] == "upstream_timeout", r.text
    assert "slow" in r.json()["error"]["message"], r.text
    assert r.json()["error"]["timeoutMs"] == 1000, r.text
