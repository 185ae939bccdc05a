"""The official TypeScript MCP client SDK (@modelcontextprotocol/client, v2, pinned in
tests/node/package-lock.json and installed by tests/setup-node.sh) through the gateway, run as a
subprocess (tests/node/mcp_client.mjs, helpers in ts_client.py):

1. it lists and calls `add` on `/mcp/{prefix}` (the upstream's own names) and `/mcp` (prefixed
   names), in the legacy era (`initialize` handshake, sealed `Mcp-Session-Id`), pinned to
   2026-07-28 (`server/discover`, per-request envelope, no session) and in `auto` mode (probes
   `server/discover`, must land on 2026-07-28);
2. progress notifications reach it one by one, before the result, in both eras;
3. server-to-client requests (sampling, elicitation, roots) round-trip in all four pairings of
   client and upstream eras, through two replicas behind a round-robin balancer (a legacy
   client POSTs its replies; a 2026-07-28 client retries with `inputResponses` +
   `requestState`, the SDK's auto-fulfilment through the same handlers; the gateway bridges
   the mixed pairings).

Upstream: tests/e2e/upstreams/python_upstream.py (the official Python SDK), dual-era (the gateway
speaks 2026-07-28 to it) or `--legacy-only` (the gateway falls back to a legacy session).
"""

from __future__ import annotations

import secrets
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from harness import (
    LEGACY_VERSION,
    MODERN_VERSION,
    balancer,
    gateway_config,
    key,
    new_secret,
    server,
    start_python_upstream,
    wait_until,
    write_config,
)
from ts_client import describe, sdk_version, ts_client, ts_ok

# mode given to the TS client -> the protocol version it must end up speaking with the gateway
MODE_VERSIONS = {"legacy": LEGACY_VERSION, MODERN_VERSION: MODERN_VERSION, "auto": MODERN_VERSION}
ENDPOINTS = ("single", "aggregate")


def tool_name(endpoint: str, tool: str, prefix: str = "up") -> str:
    return f"{prefix}__{tool}" if endpoint == "aggregate" else tool


def endpoint_url(gw, endpoint: str, prefix: str = "up") -> str:
    return gw.mcp_url(prefix if endpoint == "single" else None)


def assert_sessions(out: dict, mode: str) -> None:
    """legacy: one sealed, small Mcp-Session-Id; 2026-07-28: none. No 5xx anywhere."""
    http = out["http"]
    assert http, f"no HTTP exchange recorded\n{describe(out)}"
    assert all(h.get("status", 0) < 500 for h in http), describe(out)
    sids = {h["sessionId"] for h in http if "sessionId" in h}
    if MODE_VERSIONS[mode] == LEGACY_VERSION:
        assert len(sids) == 1, f"expected one session id, saw {sids}\n{describe(out)}"
        assert len(next(iter(sids)).encode()) < 200, sids
        assert http[0]["rpc"] == "initialize", describe(out)
    else:
        assert sids == set(), f"2026-07-28 responses must not carry Mcp-Session-Id: {sids}\n{describe(out)}"
        assert http[0]["rpc"] == "server/discover", describe(out)
        assert not any(h["rpc"] == "initialize" for h in http), f"fell back to initialize\n{describe(out)}"


def test_sdk_is_the_pinned_v2_client():
    """The install tests/setup-node.sh made is the pinned v2 SDK (a missing one fails here)."""
    assert sdk_version().startswith("2."), sdk_version()


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("mode", list(MODE_VERSIONS))
def test_ts_client_lists_and_calls_add(gateways, python_upstream, mode, endpoint):
    secret = new_secret("client-key")
    gw = gateways.start(gateway_config([server("up", python_upstream.mcp_url)], [key("client", secret, ["up"])]))

    out = ts_client(
        endpoint_url(gw, endpoint), secret, mode, tool_name(endpoint, "add"), {"a": 2, "b": 40}, list_tools=True
    )

    result = ts_ok(out)
    assert out["protocolVersion"] == MODE_VERSIONS[mode], describe(out)
    assert out["era"] == ("legacy" if mode == "legacy" else "modern"), describe(out)
    assert not result.get("isError"), describe(out)
    assert result["structuredContent"] == {"result": 42}, describe(out)
    assert [c["text"] for c in result["content"] if c["type"] == "text"] == ["42"], describe(out)
    assert tool_name(endpoint, "add") in out["tools"], describe(out)
    if endpoint == "aggregate":
        assert all(t.startswith("up__") for t in out["tools"]), out["tools"]
    else:
        assert not any(t.startswith("up__") for t in out["tools"]), out["tools"]
    assert_sessions(out, mode)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("mode", ["legacy", MODERN_VERSION])
def test_ts_client_gets_progress_before_the_result(gateways, python_upstream, mode, endpoint):
    """The upstream sends `steps` progress notifications, then holds its answer at a gate. The
    TS client talks to the gateway through a pass-through proxy (the harness balancer, one
    backend) that sees each response chunk as it hands it to the client; the test opens the gate
    only once every notification has gone by. So they reached the client while the upstream
    still held the result (an ordering, not a timing), and the client got them all before it."""
    secret = new_secret("client-key")
    gw = gateways.start(gateway_config([server("up", python_upstream.mcp_url)], [key("client", secret, ["up"])]))
    steps = 4
    gate = f"ts-{secrets.token_hex(4)}"
    passed = bytearray()
    lock = threading.Lock()

    def watch(chunk: bytes) -> None:
        with lock:
            passed.extend(chunk)

    def notifications_passed() -> int:
        with lock:
            return bytes(passed).count(b'"notifications/progress"')

    with balancer([gw.url]) as lb, ThreadPoolExecutor(1) as pool:
        lb.on_chunk = watch
        url = f"{lb.url}/mcp/up" if endpoint == "single" else f"{lb.url}/mcp"
        running = pool.submit(
            ts_client, url, secret, mode, tool_name(endpoint, "progress"), {"steps": steps, "delay": 0.05, "gate": gate},
            progress=True,
        )
        try:
            wait_until(
                lambda: notifications_passed() >= steps or running.done(),
                30,
                interval=0.02,
                what=f"{steps} progress notifications to pass to the client while the upstream holds its answer",
            )
            held = notifications_passed()
        finally:
            python_upstream.release(gate)
        out = running.result(timeout=60)

    assert held >= steps, f"only {held} notifications reached the client before the answer was released\n{describe(out)}"
    result = ts_ok(out)
    assert result["structuredContent"] == {"result": "done"}, describe(out)
    progress = [n for n in out["notifications"] if n["method"] == "notifications/progress"]
    assert [n["params"]["progress"] for n in progress] == list(range(1, steps + 1)), describe(out)
    assert all(n["params"].get("total") == steps for n in progress), progress
    times = [n["t"] for n in progress]
    assert times == sorted(times), progress
    assert all(t <= out["resultAt"] for t in times), (progress, out["resultAt"])
    print(f"first notification {out['resultAt'] - times[0]:.0f} ms before the result")
    assert_sessions(out, mode)


ROOTS = [{"uri": "file:///work/project", "name": "project"}, {"uri": "file:///tmp/scratch"}]


def server_request_cases():
    # (tool, args, TS client options, expected value, handler that must run)
    return [
        ("sample", {"prompt": "what is 6 x 7?"}, {"sampling_reply": "forty-two"}, "forty-two", "sampling"),
        ("ask", {"question": "favourite colour?"}, {"elicit_reply": {"answer": "blue"}}, "blue", "elicitation"),
        ("roots", {}, {"roots": ROOTS}, [r["uri"] for r in ROOTS], "roots"),
    ]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize(
    "mode,upstream_kind",
    [("legacy", "legacy"), (MODERN_VERSION, "dual"), ("legacy", "dual"), (MODERN_VERSION, "legacy")],
    ids=["legacy-client-legacy-upstream", "2026-client-2026-upstream", "legacy-client-2026-upstream", "2026-client-legacy-upstream"],
)
def test_ts_client_answers_server_requests(gateways, procs, mode, upstream_kind, endpoint):
    """Every pairing of eras, through two replicas behind the per-request round-robin balancer:
    - legacy TS client, legacy-only upstream: sampling/createMessage, elicitation/create and
      roots/list on the tools/call stream; the client POSTs its replies to the gateway;
    - pinned 2026-07-28 TS client, dual-era upstream: `input_required`, fulfilled by the SDK and
      retried;
    - legacy TS client, dual-era upstream: the gateway turns `input_required` into requests on
      the client's stream and retries upstream with the replies;
    - 2026-07-28 TS client, legacy-only upstream: the gateway turns the upstream's request into
      `input_required` and resumes the held upstream stream on the retry."""
    legacy_upstream = upstream_kind == "legacy"
    upstream = start_python_upstream(procs, upstream_kind, legacy_only=legacy_upstream)
    secret = new_secret("client-key")
    config = gateway_config([server("up", upstream.mcp_url)], [key("client", secret, ["up"])])
    path = gateways.config_path("ts-replicas")
    write_config(path, config)
    replicas = [gateways.start(config_path=path, name=f"ts-replica{i}") for i in (1, 2)]

    failures = []
    with balancer([g.url for g in replicas]) as lb:
        url = f"{lb.url}/mcp/up" if endpoint == "single" else f"{lb.url}/mcp"
        for tool, args, options, expected, handler in server_request_cases():
            out = ts_client(url, secret, mode, tool_name(endpoint, tool), args, **options)
            if out["exit"] != 0 or "result" not in out:
                failures.append(f"--- {tool}: the TypeScript client failed\n{describe(out)}")
                continue
            result = out["result"]
            problems = []
            if out["protocolVersion"] != MODE_VERSIONS[mode]:
                problems.append(f"spoke {out['protocolVersion']}")
            if result.get("isError") or result.get("structuredContent") != {"result": expected}:
                problems.append(f"expected {expected!r}")
            if out["handled"][handler] != 1 or sum(out["handled"].values()) != 1:
                problems.append(f"handlers ran {out['handled']}, expected one {handler}")
            if problems:
                failures.append(f"--- {tool}: {'; '.join(problems)}\n{describe(out)}")
                continue
            assert_sessions(out, mode)
        served = list(lb.served)
    assert not failures, "\n".join(failures)
    assert {i for i, *_ in served} == {0, 1}, f"both replicas must have served: {served}"

    stats = upstream.stats()
    per_tool = 1 if legacy_upstream else 2  # a 2026-07-28 upstream: a first try and its retry
    for tool, *_ in server_request_cases():
        assert stats["tools"].get(tool) == per_tool, stats
    expected_replies = len(server_request_cases()) if legacy_upstream else 0
    assert stats["replies"] == expected_replies, f"the upstream got {stats['replies']} replies: {stats}"
