"""The event-by-event relay and what rides on it (the gateway's forwarding pipeline):

1. progress notifications reach the client in order and *before* the result (SSE relayed as it
   arrives, not buffered), on `/mcp/{prefix}` and `/mcp`, in both client eras;
2. server-to-client requests: sampling, elicitation and roots. A legacy client of a legacy
   upstream gets them on the tools/call stream with a sealed id and may POST its reply to any
   replica; a 2026-07-28 client of a 2026-07-28 upstream gets `input_required` and its retry
   (inputResponses + requestState) may land on any replica;
3. `subscriptions/listen` outlives the server's `timeout` and carries the updates;
4. relayed JSON-RPC errors keep the upstream's HTTP status (2026-07-28), and the gateway's own
   answers for removed methods and unsupported versions follow the revision;
5. `server/discover` and legacy `initialize` on `/mcp/{prefix}` carry the upstream's identity;
6. DELETE ends a legacy session (404 afterwards) and closes the upstream sessions opened for it;
7. a client closing a relayed stream early cancels the upstream request.

Upstreams: tests/e2e/upstreams/python_upstream.py, dual-era (the gateway speaks 2026-07-28 to
it) or `--legacy-only` (the gateway falls back to a legacy session). Raw httpx is used where the
wire matters (statuses, SSE framing, ids); the official SDK client where a real client fits.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import threading
import time
from typing import Any

import httpx
import pytest

from harness import (
    LEGACY_VERSION,
    MODERN_VERSION,
    Gateway,
    RawMcp,
    Upstream,
    balancer,
    call_result_value,
    encode_header_value,
    gateway_config,
    key,
    new_secret,
    parse_body,
    run_async,
    sdk_client,
    server,
    start_python_upstream,
    wait_until,
    write_config,
)

LEGACY_VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_ID_META = "io.modelcontextprotocol/subscriptionId"
ACCEPT_BOTH = "application/json, text/event-stream"

# Client capabilities a client with all three callbacks declares.
ALL_CAPABILITIES = {"sampling": {}, "elicitation": {"form": {}}, "roots": {"listChanged": True}}

ENDPOINTS = ("single", "aggregate")


# --------------------------------------------------------------------------------------------
# Helpers


def tool_name(endpoint: str, prefix: str, tool: str) -> str:
    return f"{prefix}__{tool}" if endpoint == "aggregate" else tool


def endpoint_url(gw: Gateway, endpoint: str, prefix: str) -> str:
    return gw.mcp_url(prefix if endpoint == "single" else None)


def modern_meta(capabilities: dict | None = None, **extra: Any) -> dict:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities if capabilities is not None else {},
        "io.modelcontextprotocol/clientInfo": {"name": "switchboard-e2e", "version": "0"},
        **extra,
    }


def modern_request(
    rpc_id: Any, method: str, params: dict | None = None, *, version: str = MODERN_VERSION, auth: str | None = None
) -> tuple[dict, dict[str, str]]:
    """A 2026-07-28 request body (params must already carry `_meta`) and its headers."""
    params = params or {}
    headers = {
        "Accept": ACCEPT_BOTH,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": version,
        "Mcp-Method": method,
    }
    if method in ("tools/call", "prompts/get") and "name" in params:
        headers["Mcp-Name"] = encode_header_value(params["name"])
    elif method == "resources/read" and "uri" in params:
        headers["Mcp-Name"] = encode_header_value(params["uri"])
    if auth:
        headers["Authorization"] = f"Bearer {auth}"
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}, headers


def legacy_headers(session_id: str, auth: str | None) -> dict[str, str]:
    h = {
        "Accept": ACCEPT_BOTH,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": LEGACY_VERSION,
        "Mcp-Session-Id": session_id,
    }
    if auth:
        h["Authorization"] = f"Bearer {auth}"
    return h


def legacy_initialize(url: str, auth: str | None, capabilities: dict) -> tuple[str | None, dict, httpx.Response]:
    """A legacy initialize with the given client capabilities, then notifications/initialized.
    Returns (session id, initialize result, the initialize HTTP response)."""
    headers = {"Accept": ACCEPT_BOTH, "Content-Type": "application/json"}
    if auth:
        headers["Authorization"] = f"Bearer {auth}"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": capabilities,
            "clientInfo": {"name": "switchboard-e2e", "version": "0"},
        },
    }
    r = httpx.post(url, content=json.dumps(body), headers=headers, timeout=15)
    assert r.status_code == 200, f"initialize: HTTP {r.status_code} {r.text[:1000]}"
    messages = parse_body(r.headers.get("content-type", ""), r.content)
    result = next(m["result"] for m in messages if "result" in m)
    sid = r.headers.get("mcp-session-id")
    if sid:
        note = httpx.post(
            url,
            content=json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            headers=legacy_headers(sid, auth),
            timeout=15,
        )
        assert note.status_code in (200, 202), f"initialized: HTTP {note.status_code} {note.text[:500]}"
    return sid, result, r

def tool_call_with_progress(
    url: str, secret: str, era: str, rpc_id: str, name: str, arguments: dict, token: str
) -> tuple[dict, dict[str, str]]:
    """A `tools/call` asking for progress under `token`, as a client of `era` sends it (a legacy
    client initializes a session first): the body and headers."""
    if era == MODERN_VERSION:
        return modern_request(
            rpc_id,
            "tools/call",
            {"name": name, "arguments": arguments, "_meta": modern_meta(progressToken=token)},
            auth=secret,
        )
    sid, _, _ = legacy_initialize(url, secret, {})
    assert sid
    body = {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": {"progressToken": token}},
    }
    return body, legacy_headers(sid, secret)



class SseReader:
    """One POST whose answer is read event by event, each message with its arrival time
    (seconds since the request was sent). Every read is bounded by `read_timeout`."""

    def __init__(self, url: str, body: dict, headers: dict[str, str], *, read_timeout: float = 15.0):
        self.client = httpx.Client(timeout=httpx.Timeout(15.0, read=read_timeout))
        self.t0 = time.monotonic()
        self._cm = self.client.stream("POST", url, content=json.dumps(body).encode(), headers=headers)
        self.response = self._cm.__enter__()
        self.messages: list[tuple[float, dict]] = []
        self.raw_lines: list[str] = []
        self._lines = self.response.iter_lines()

    @property
    def status(self) -> int:
        return self.response.status_code

    @property
    def content_type(self) -> str:
        return self.response.headers.get("content-type", "")

    def next_message(self) -> dict | None:
        """The next JSON-RPC message of the stream, `None` at its end."""
        data: list[str] = []
        for line in self._lines:
            self.raw_lines.append(line)
            if line == "":
                if data:
                    message = json.loads("\n".join(data))
                    self.messages.append((time.monotonic() - self.t0, message))
                    return message
                continue
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            message = json.loads("\n".join(data))
            self.messages.append((time.monotonic() - self.t0, message))
            return message
        return None

    def read_until(self, predicate, what: str) -> dict:
        while True:
            message = self.next_message()
            assert message is not None, f"the stream ended before {what}: {self.messages!r}"
            if predicate(message):
                return message

    def read_all(self) -> list[dict]:
        while self.next_message() is not None:
            pass
        return [m for _, m in self.messages]

    def body(self) -> bytes:
        return self.response.read()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._cm.__exit__(None, None, None)
        self.client.close()


def is_response(message: dict, rpc_id: Any = None) -> bool:
    return (
        "method" not in message
        and ("result" in message or "error" in message)
        and (rpc_id is None or message.get("id") == rpc_id)
    )


def metric_value(gw: Gateway, **labels: str) -> float:
    """Sum of `switchboard_gateway_requests_total` series whose labels include `labels`."""
    text = httpx.get(f"{gw.internal_url}/metrics", timeout=5).text
    total = 0.0
    for m in re.finditer(r"^switchboard_gateway_requests_total\{([^}]*)\}\s+(\S+)$", text, re.M):
        series = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if all(series.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


def shared_gateways(gateways, config: dict, n: int = 2) -> list[Gateway]:
    """`n` gateway processes on one config file (one sessionKey): replicas."""
    path = gateways.config_path("shared")
    write_config(path, config)
    return [gateways.start(config_path=path, name=f"replica{i + 1}") for i in range(n)]


# SDK client callbacks: what the "LLM", the "user" and the client's roots answer.


def sdk_types():
    import mcp_types

    return mcp_types


async def on_sampling(ctx, params):
    t = sdk_types()
    text = params.messages[0].content.text
    return t.CreateMessageResult(
        role="assistant",
        content=t.TextContent(type="text", text=f"sampled:{text}"),
        model="e2e-model",
        stop_reason="endTurn",
    )


async def on_elicitation(ctx, params):
    t = sdk_types()
    return t.ElicitResult(action="accept", content={"answer": f"answer to {params.message}"})


ROOTS = ["file:///e2e/alpha", "file:///e2e/beta"]


async def on_roots(ctx):
    t = sdk_types()
    return t.ListRootsResult(roots=[t.Root(uri=u, name=u.rsplit("/", 1)[-1]) for u in ROOTS])


CALLBACKS = {"sampling_callback": on_sampling, "elicitation_callback": on_elicitation, "list_roots_callback": on_roots}


@pytest.fixture
def dual_upstream(procs) -> Upstream:
    """A fresh dual-era Python SDK upstream (fresh /_stats): the gateway speaks 2026-07-28 to it."""
    return start_python_upstream(procs, "dual")


@pytest.fixture
def legacy_upstream(procs) -> Upstream:
    """A fresh legacy-only Python SDK upstream: the gateway opens legacy sessions on it."""
    return start_python_upstream(procs, "legacy", legacy_only=True)


def one_gateway(gateways, upstream: Upstream, prefix: str = "up", **server_extra: Any) -> tuple[Gateway, str]:
    secret = new_secret("client-key")
    config = gateway_config([server(prefix, upstream.mcp_url, **server_extra)], [key("client", secret, [prefix])])
    return gateways.start(config), secret


# --------------------------------------------------------------------------------------------
# 1. Progress notifications arrive in order, before the result


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_progress_notifications_arrive_before_the_result(gateways, python_upstream, era, endpoint):
    """SDK client, `progress_callback`: the upstream sends 3 notifications, then holds its result
    at a gate until the client has all three; the callback opens the gate on the third. Relayed
    event by event, the result follows; a relay that buffered until the answer would deliver no
    notification while the upstream holds it, and the upstream would answer "not released"."""
    gw, secret = one_gateway(gateways, python_upstream)
    gate = f"sdk-{secrets.token_hex(4)}"
    arrivals: list[float] = []

    async def scenario():
        import asyncio

        async def on_progress(progress, total, message):
            arrivals.append(progress)
            if progress == 3:
                await asyncio.to_thread(python_upstream.release, gate)

        async with sdk_client(endpoint_url(gw, endpoint, "up"), secret, era) as c:
            return await c.call_tool(
                tool_name(endpoint, "up", "progress"),
                {"steps": 3, "delay": 0.05, "gate": gate},
                progress_callback=on_progress,
            )

    result = run_async(scenario)
    assert arrivals == [1, 2, 3], f"progress out of order or missing: {arrivals}"
    assert not result.is_error, result
    assert result.structured_content == {"result": "done"}, (
        f"{result.structured_content}: the notifications did not reach the client while the upstream held its answer"
    )


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_progress_relay_wire_is_sse_event_by_event(gateways, python_upstream, era, endpoint):
    """Raw wire: text/event-stream, the progress notifications carry the client's token, the
    last event is the answer with the client's id, and each event arrives when it is sent: all
    three are read while the upstream holds its answer at a gate, which the test opens after."""
    gw, secret = one_gateway(gateways, python_upstream)
    url = endpoint_url(gw, endpoint, "up")
    name = tool_name(endpoint, "up", "progress")
    token = f"tok-{secrets.token_hex(4)}"
    rpc_id = f"req-{secrets.token_hex(4)}"
    gate = f"wire-{secrets.token_hex(4)}"
    arguments = {"steps": 3, "delay": 0.05, "gate": gate}
    body, headers = tool_call_with_progress(url, secret, era, rpc_id, name, arguments, token)
    reader = SseReader(url, body, headers)
    try:
        assert reader.status == 200, f"HTTP {reader.status}: {reader.body()[:1000]!r}"
        assert reader.content_type.startswith("text/event-stream"), reader.content_type
        # (each read returns one event; the answer cannot come before the gate opens)
        reader.read_until(
            lambda m: m.get("method") == "notifications/progress" and m["params"]["progress"] == 3, "the third progress"
        )
        held = [m for _, m in reader.messages]
        python_upstream.release(gate)
        messages = reader.read_all()
    finally:
        reader.close()
    assert not any(is_response(m) for m in held), f"an answer came before the gate opened: {held}"
    progress = [(t, m) for t, m in reader.messages if m.get("method") == "notifications/progress"]
    assert [m["params"]["progress"] for _, m in progress] == [1, 2, 3], reader.messages
    assert all(m["params"]["progressToken"] == token for _, m in progress), progress
    _, last = reader.messages[-1]
    assert is_response(last, rpc_id), f"the stream must end with the answer to {rpc_id!r}: {messages[-1]}"
    assert call_result_value(last["result"]) == "done", last
    if era == MODERN_VERSION:
        assert last["result"].get("resultType") == "complete", last


# --------------------------------------------------------------------------------------------
# 2. Sampling, elicitation and roots round trips, across replicas


ROUND_TRIPS = [
    ("sample", {"prompt": "capital of France?"}, "sampled:capital of France?"),
    ("ask", {"question": "your name?"}, "answer to your name?"),
    ("roots", {}, ROOTS),
    ("sample", {"prompt": "second question"}, "sampled:second question"),
    ("ask", {"question": "favourite colour?"}, "answer to favourite colour?"),
    ("roots", {}, ROOTS),
]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize(
    "era,upstream_kind",
    [("legacy", "legacy"), (MODERN_VERSION, "dual"), ("legacy", "dual"), (MODERN_VERSION, "legacy")],
    ids=["legacy-client-legacy-upstream", "2026-client-2026-upstream", "legacy-client-2026-upstream", "2026-client-legacy-upstream"],
)
def test_server_to_client_round_trips_across_replicas(gateways, procs, era, upstream_kind, endpoint):
    """The SDK client with sampling, elicitation and roots callbacks, through two replicas
    behind the per-request round-robin balancer, in every pairing of eras:
    - legacy client, legacy-only upstream: server-to-client requests on the tools/call stream,
      replies POSTed back and delivered to the upstream session that asked;
    - 2026-07-28 client and upstream: input_required passes through, then the retry;
    - legacy client, 2026-07-28 upstream: the gateway turns input_required into requests on the
      client's stream and retries upstream with the replies (a reply may land on the other
      replica, which hands it to the one holding the stream);
    - 2026-07-28 client, legacy-only upstream: the gateway turns the upstream's request into
      input_required and holds the upstream stream until the client's retry (on any replica)."""
    legacy_upstream_only = upstream_kind == "legacy"
    upstream = start_python_upstream(procs, upstream_kind, legacy_only=legacy_upstream_only)
    secret = new_secret("client-key")
    config = gateway_config([server("up", upstream.mcp_url)], [key("client", secret, ["up"])])
    gw1, gw2 = shared_gateways(gateways, config)

    with balancer([gw1.url, gw2.url]) as lb:
        url = f"{lb.url}/mcp/up" if endpoint == "single" else f"{lb.url}/mcp"

        async def scenario():
            out = []
            async with sdk_client(url, secret, era, **CALLBACKS) as c:
                assert c.protocol_version == (LEGACY_VERSION if era == "legacy" else MODERN_VERSION)
                for tool, args, _ in ROUND_TRIPS:
                    out.append(await c.call_tool(tool_name(endpoint, "up", tool), args))
            return out

        results = run_async(scenario, timeout=90)
        served = list(lb.served)

    for (tool, _, expected), result in zip(ROUND_TRIPS, results, strict=True):
        assert not result.is_error, f"{tool}: {result}"
        assert result.structured_content == {"result": expected}, f"{tool}: {result}"

    stats = upstream.stats()
    # A 2026-07-28 upstream is asked twice per call (input_required, then the retry).
    calls_per_tool = 2 if legacy_upstream_only else 4
    assert stats["tools"].get("sample") == calls_per_tool, stats
    assert stats["tools"].get("ask") == calls_per_tool, stats
    assert stats["tools"].get("roots") == calls_per_tool, stats
    # A legacy upstream gets one reply per round trip, posted to the session that asked.
    expected_replies = len(ROUND_TRIPS) if legacy_upstream_only else 0
    assert stats["replies"] == expected_replies, f"the upstream got {stats['replies']} replies: {stats}"

    posts = [(i, rpc) for i, method, _, _, rpc in served if method == "POST"]
    if era == "legacy":
        # Each reply (a POST without a method) answers the tools/call before it.
        pairs = []
        last_call = None
        for i, rpc in posts:
            if rpc == "tools/call":
                last_call = i
            elif rpc is None:
                assert last_call is not None, posts
                pairs.append((last_call, i))
        assert len(pairs) == len(ROUND_TRIPS), f"expected {len(ROUND_TRIPS)} replies through the balancer: {posts}"
        crossed = [p for p in pairs if p[0] != p[1]]
        assert crossed, f"no reply landed on the other replica (tools/call replica, reply replica): {pairs}"
        # Each replica's /metrics counts the replies it received: the ones the balancer sent it.
        labels = {"endpoint": "mcp_single" if endpoint == "single" else "mcp", "method": "reply", "outcome": "ok"}
        per_replica = [metric_value(gw, **labels) for gw in (gw1, gw2)]
        routed = [sum(1 for _, r in pairs if r == i) for i in (0, 1)]
        assert per_replica == routed, f"replies received per replica: /metrics {per_replica}, balancer {routed}"
    else:
        calls = [i for i, rpc in posts if rpc == "tools/call"]
        assert len(calls) == 2 * len(ROUND_TRIPS), f"expected a first try and a retry per call: {posts}"
        pairs = list(zip(calls[::2], calls[1::2], strict=True))
        crossed = [p for p in pairs if p[0] != p[1]]
        assert crossed, f"no retry landed on the other replica (first try, retry): {pairs}"


def test_legacy_reply_posted_to_the_other_replica(gateways, legacy_upstream):
    """Deterministic wire check: the tools/call stream on replica 1 carries the upstream's
    sampling request with a sealed string id; the client's reply POSTed to replica 2 (202)
    reaches the upstream session that asked, and the answer arrives on replica 1's stream.
    A session that did not declare sampling gets an error instead (its own upstream session,
    opened with its own capabilities)."""
    secret = new_secret("client-key")
    config = gateway_config([server("up", legacy_upstream.mcp_url)], [key("client", secret, ["up"])])
    gw1, gw2 = shared_gateways(gateways, config)

    sid, _, _ = legacy_initialize(gw1.mcp_url("up"), secret, ALL_CAPABILITIES)
    assert sid
    body = {
        "jsonrpc": "2.0",
        "id": 41,
        "method": "tools/call",
        "params": {"name": "sample", "arguments": {"prompt": "hi"}},
    }
    reader = SseReader(gw1.mcp_url("up"), body, legacy_headers(sid, secret))
    try:
        assert reader.status == 200, f"HTTP {reader.status}: {reader.body()[:1000]!r}"
        assert reader.content_type.startswith("text/event-stream"), reader.content_type
        ask = reader.read_until(lambda m: m.get("method") == "sampling/createMessage", "the sampling request")
        sealed = ask.get("id")
        assert isinstance(sealed, str) and len(sealed) > 16, f"the relayed request id must be sealed: {ask}"
        assert ask["params"]["messages"][0]["content"]["text"] == "hi", ask

        # A forged id is refused and never reaches the upstream.
        forged = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
        reply = {
            "jsonrpc": "2.0",
            "result": {
                "role": "assistant",
                "content": {"type": "text", "text": "from replica 2"},
                "model": "e2e-model",
                "stopReason": "endTurn",
            },
        }
        bad = httpx.post(
            gw2.mcp_url("up"),
            content=json.dumps({**reply, "id": forged}),
            headers=legacy_headers(sid, secret),
            timeout=15,
        )
        assert bad.status_code >= 400, f"a forged reply id was accepted: HTTP {bad.status_code} {bad.text[:500]}"
        assert legacy_upstream.stats()["replies"] == 0

        good = httpx.post(
            gw2.mcp_url("up"),
            content=json.dumps({**reply, "id": sealed}),
            headers=legacy_headers(sid, secret),
            timeout=15,
        )
        assert good.status_code == 202, f"reply on replica 2: HTTP {good.status_code} {good.text[:500]}"
        answer = reader.read_until(lambda m: is_response(m), "the answer")
    finally:
        reader.close()
    assert answer["id"] == 41, answer
    assert call_result_value(answer["result"]) == "from replica 2", answer
    assert legacy_upstream.stats()["replies"] == 1
    assert metric_value(gw2, endpoint="mcp_single", method="reply", outcome="ok") == 1
    assert metric_value(gw1, endpoint="mcp_single", method="reply", outcome="ok") == 0

    # Another legacy client session without the sampling capability: its upstream session was
    # opened without it, so the upstream refuses rather than asking (and nothing hangs).
    plain = RawMcp(gw2.mcp_url("up"), secret, "legacy", timeout=15)
    try:
        refused = plain.call_tool("sample", {"prompt": "no capability"})
    finally:
        plain.close()
    assert refused.status == 200, refused.raw[:1000]
    message = refused.message
    assert "error" in message or message["result"].get("isError"), f"sample without the capability: {message}"
    if "error" in message:
        assert message["error"]["code"] == -32021, message


def test_modern_retry_on_the_other_replica(gateways, dual_upstream):
    """Deterministic wire check: input_required from replica 1 passes through unchanged (keys,
    requestState); the retry with inputResponses + requestState on replica 2 completes."""
    secret = new_secret("client-key")
    config = gateway_config([server("up", dual_upstream.mcp_url)], [key("client", secret, ["up"])])
    gw1, gw2 = shared_gateways(gateways, config)

    direct_body, direct_headers = modern_request(
        1, "tools/call", {"name": "ask", "arguments": {"question": "q?"}, "_meta": modern_meta(ALL_CAPABILITIES)}
    )
    direct = httpx.post(dual_upstream.mcp_url, content=json.dumps(direct_body), headers=direct_headers, timeout=15)
    direct_result = parse_body(direct.headers["content-type"], direct.content)[-1]["result"]

    params = {"name": "ask", "arguments": {"question": "q?"}, "_meta": modern_meta(ALL_CAPABILITIES)}
    body, headers = modern_request("first", "tools/call", params, auth=secret)
    first = httpx.post(gw1.mcp_url("up"), content=json.dumps(body), headers=headers, timeout=15)
    assert first.status_code == 200, f"HTTP {first.status_code} {first.text[:1000]}"
    first_message = parse_body(first.headers.get("content-type", ""), first.content)[-1]
    assert first_message["id"] == "first", first_message
    result = first_message["result"]
    assert result["resultType"] == "input_required", result
    assert result["inputRequests"] == direct_result["inputRequests"], (result, direct_result)
    assert isinstance(result.get("requestState"), str) and result["requestState"], result
    (ask_key,) = result["inputRequests"]
    assert result["inputRequests"][ask_key]["method"] == "elicitation/create"

    retry_params = {
        **params,
        "inputResponses": {ask_key: {"action": "accept", "content": {"answer": "from replica 2"}}},
        "requestState": result["requestState"],
    }
    body, headers = modern_request("retry", "tools/call", retry_params, auth=secret)
    retry = httpx.post(gw2.mcp_url("up"), content=json.dumps(body), headers=headers, timeout=15)
    assert retry.status_code == 200, f"HTTP {retry.status_code} {retry.text[:1000]}"
    final = parse_body(retry.headers.get("content-type", ""), retry.content)[-1]
    assert final["id"] == "retry", final
    assert final["result"].get("resultType") == "complete", final
    assert call_result_value(final["result"]) == "from replica 2", final
    assert dual_upstream.stats()["tools"].get("ask") == 3  # direct + first + retry


# --------------------------------------------------------------------------------------------
# 3. subscriptions/listen outlives the server's timeout


def test_listen_outlives_the_timeout_and_delivers_updates_sdk(gateways, dual_upstream):
    """2026-07-28 SDK client, `Client.listen` on /mcp/{prefix} with the server's timeout 1 s:
    acknowledged, still open after 2 s, and an update triggered after 2x the timeout arrives."""
    gw, secret = one_gateway(gateways, dual_upstream, timeout="1s")
    uri = "e2e://counter"

    async def scenario():
        import anyio
        from mcp.client.subscriptions import ResourceUpdated

        async with sdk_client(gw.mcp_url("up"), secret, MODERN_VERSION) as c:
            opened = time.monotonic()
            listen = c.listen(resource_subscriptions=[uri])
            try:
                with anyio.fail_after(10):
                    sub = await listen.__aenter__()
            except TimeoutError:
                raise AssertionError(
                    "subscriptions/listen was not acknowledged within 10 s (the SDK takes the ack whose "
                    f"_meta[{SUBSCRIPTION_ID_META!r}] is its listen request id)"
                ) from None
            try:
                honored = list(sub.honored.resource_subscriptions or [])
                await anyio.sleep(2.2)
                touched = await c.call_tool("touch", {"uri": uri})
                with anyio.fail_after(5):
                    event = await sub.__anext__()
                arrived = time.monotonic() - opened
            finally:
                await listen.__aexit__(None, None, None)
            return honored, touched, event, arrived, ResourceUpdated

    honored, touched, event, arrived, resource_updated = run_async(scenario, timeout=40)
    assert honored == [uri]
    assert touched.structured_content == {"result": "touched"}
    assert isinstance(event, resource_updated) and event.uri == uri, event
    # (the update is triggered only after 2.2 s, twice the timeout: a figure, not a check)
    print(f"the update arrived {arrived:.2f}s after listen opened")


def test_listen_wire_stays_open_and_keeps_the_clients_subscription_id(gateways, dual_upstream):
    """Raw wire of the same: SSE, the acknowledgment first, nothing ends the stream at the 1 s
    timeout, and the update triggered at ~2.2 s arrives; every notification names the
    subscription by the client's request id (the spec's subscriptionId)."""
    gw, secret = one_gateway(gateways, dual_upstream, timeout="1s")
    uri = "e2e://counter"
    listen_id = f"listen-{secrets.token_hex(4)}"
    body, headers = modern_request(
        listen_id,
        "subscriptions/listen",
        {"notifications": {"resourceSubscriptions": [uri]}, "_meta": modern_meta()},
        auth=secret,
    )
    reader = SseReader(gw.mcp_url("up"), body, headers, read_timeout=20)
    errors: list[BaseException] = []

    def read_in_background():
        try:
            while reader.next_message() is not None:
                pass
        except Exception as exc:  # noqa: BLE001 - closed by the test, or a real failure; reported below
            errors.append(exc)

    thread = threading.Thread(target=read_in_background, daemon=True)
    try:
        assert reader.status == 200, f"HTTP {reader.status}: {reader.body()[:1000]!r}"
        assert reader.content_type.startswith("text/event-stream"), reader.content_type
        thread.start()
        wait_until(lambda: reader.messages, timeout=10, what="the listen acknowledgment")
        time.sleep(2.2)
        assert thread.is_alive(), (
            f"the listen stream ended after {time.monotonic() - reader.t0:.2f}s: {reader.messages}"
        )
        with RawMcp(gw.mcp_url("up"), secret, MODERN_VERSION) as mcp:
            touched = mcp.call_tool("touch", {"uri": uri})
            assert touched.status == 200, touched.raw[:1000]
        wait_until(
            lambda: any(m.get("method") == "notifications/resources/updated" for _, m in reader.messages),
            timeout=5,
            what="notifications/resources/updated on the listen stream",
        )
        snapshot = list(reader.messages)
    finally:
        reader.close()
        thread.join(5)

    ack_t, ack = snapshot[0]
    assert ack.get("method") == "notifications/subscriptions/acknowledged", snapshot
    assert ack["params"]["notifications"].get("resourceSubscriptions") == [uri], ack
    assert not any(is_response(m) for _, m in snapshot), f"the stream answered (timeout?): {snapshot}"
    updated_t, updated = next((t, m) for t, m in snapshot if m.get("method") == "notifications/resources/updated")
    assert updated["params"]["uri"] == uri, updated
    # (triggered after the stream was seen open past twice the timeout: a figure, not a check)
    print(f"update at {updated_t:.2f}s")
    ids = {m["params"]["_meta"].get(SUBSCRIPTION_ID_META) for _, m in snapshot if m.get("method")}
    assert ids == {listen_id}, (
        f"notifications must carry the client's listen id {listen_id!r} as {SUBSCRIPTION_ID_META}; saw {ids}"
    )


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_relayed_call_stream_is_bounded_by_the_timeout(gateways, dual_upstream, era):
    """The contrast to listen: a tools/call whose answer takes longer than the server's
    timeout (1 s) gets its progress relayed, then a timeout error (-32001) for its own id that
    names the 1 s budget, and the stream ends while the upstream is still running (fewer
    progress events than its whole run sends); the upstream run is dropped."""
    gw, secret = one_gateway(gateways, dual_upstream, timeout="1s")
    url = gw.mcp_url("up")
    arguments = {"seconds": 6, "interval": 0.2}
    body, headers = tool_call_with_progress(url, secret, era, "bounded", "slow_stream", arguments, "b")
    reader = SseReader(url, body, headers)
    try:
        assert reader.status == 200, f"HTTP {reader.status}: {reader.body()[:1000]!r}"
        messages = reader.read_all()
    finally:
        reader.close()
    assert messages and is_response(messages[-1], "bounded"), f"no answer for the request: {reader.messages}"
    end_t, end = reader.messages[-1]
    assert end.get("error", {}).get("code") == -32001, f"expected the upstream timeout error: {end}"
    assert end["error"].get("data", {}).get("timeoutMs") == 1000, f"the error must name the 1 s budget: {end}"
    progress = [m for m in messages[:-1] if m.get("method") == "notifications/progress"]
    # The whole run would send seconds / interval = 30: the stream ended before the upstream did.
    assert 0 < len(progress) < 30, f"{len(progress)} progress events before the timeout error"
    print(f"timeout error after {end_t:.2f}s for a 1s budget, {len(progress)} progress events relayed first")
    stats = wait_until(
        lambda: (s := dual_upstream.stats())["cancelled"].get("slow_stream") and s,
        timeout=5,
        what="the timed-out upstream run to be cancelled",
    )
    assert stats["finished"] == {}, stats


# --------------------------------------------------------------------------------------------
# 4. Relayed error statuses (2026-07-28)


def _error_cases():
    # (id, method, params without _meta, capabilities, protocol version)
    return [
        ("unknown-method", "e2e/unknown", {}, {}, MODERN_VERSION),
        ("removed-ping", "ping", {}, {}, MODERN_VERSION),
        (
            "removed-initialize",
            "initialize",
            {"protocolVersion": MODERN_VERSION, "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}},
            {},
            MODERN_VERSION,
        ),
        ("removed-logging-setLevel", "logging/setLevel", {"level": "info"}, {}, MODERN_VERSION),
        ("removed-resources-subscribe", "resources/subscribe", {"uri": "e2e://counter"}, {}, MODERN_VERSION),
        ("unsupported-version", "tools/list", {}, {}, "2099-01-01"),
        ("missing-capability", "tools/call", {"name": "sample", "arguments": {"prompt": "x"}}, {}, MODERN_VERSION),
        ("invalid-params", "tools/list", {"cursor": 5}, {}, MODERN_VERSION),
    ]


EXPECTED_STATUS = {
    "unknown-method": (404, -32601),
    "removed-ping": (404, -32601),
    "removed-initialize": (404, -32601),
    "removed-logging-setLevel": (404, -32601),
    "removed-resources-subscribe": (404, -32601),
    "unsupported-version": (400, -32022),
    "missing-capability": (400, -32021),
    "invalid-params": (400, -32602),
}


def _error_params():
    for endpoint in ENDPOINTS:
        for case in _error_cases():
            # The aggregate merges listings itself: its cursors are the gateway's own.
            if not (endpoint == "aggregate" and case[0] == "invalid-params"):
                yield pytest.param(case, endpoint, id=f"{case[0]}-{endpoint}")


@pytest.mark.parametrize(("case", "endpoint"), list(_error_params()))
def test_error_status_matches_the_upstream(gateways, python_upstream, case, endpoint):
    """The same raw 2026-07-28 request to the upstream directly and through the gateway: the
    HTTP status and the JSON-RPC code are the same (and the revision's)."""
    name, method, params, capabilities, version = case
    gw, secret = one_gateway(gateways, python_upstream)

    def send(url: str, auth: str | None, p: dict) -> tuple[int, dict, str]:
        meta = modern_meta(capabilities)
        meta["io.modelcontextprotocol/protocolVersion"] = version
        body, headers = modern_request(7, method, {**p, "_meta": meta}, version=version, auth=auth)
        r = httpx.post(url, content=json.dumps(body), headers=headers, timeout=15)
        messages = parse_body(r.headers.get("content-type", ""), r.content) if r.content.strip() else []
        error = next((m["error"] for m in messages if isinstance(m, dict) and "error" in m), {})
        return r.status_code, error, r.text[:1000]

    direct_status, direct_error, direct_text = send(python_upstream.mcp_url, None, params)
    gw_params = dict(params)
    if "name" in gw_params:
        gw_params["name"] = tool_name(endpoint, "up", gw_params["name"])
    status, error, text = send(endpoint_url(gw, endpoint, "up"), secret, gw_params)

    assert (direct_status, direct_error.get("code")) == EXPECTED_STATUS[name], f"upstream directly: {direct_text}"
    assert (status, error.get("code")) == (direct_status, direct_error.get("code")), (
        f"gateway answered HTTP {status} {text}; the upstream directly HTTP {direct_status} {direct_text}"
    )
    if name == "missing-capability":
        assert error.get("data") == direct_error.get("data"), (error, direct_error)
    if name == "unsupported-version":
        assert error["data"]["requested"] == "2099-01-01", error
        assert MODERN_VERSION in error["data"]["supported"], error


@pytest.mark.parametrize(
    ("method", "params", "code"),
    [("e2e/unknown", {}, -32601), ("tools/list", {"cursor": 5}, -32602)],
    ids=["unknown-method", "invalid-params"],
)
def test_legacy_client_gets_relayed_errors_on_200(gateways, python_upstream, method, params, code):
    """The same upstream errors for a legacy client on /mcp/{prefix}: the legacy revisions put
    every JSON-RPC error on HTTP 200, whatever status the upstream answered with."""
    gw, secret = one_gateway(gateways, python_upstream)
    with RawMcp(gw.mcp_url("up"), secret, "legacy") as mcp:
        reply = mcp.request(method, params)
    assert reply.status == 200, f"HTTP {reply.status} {reply.raw[:1000]!r}"
    assert reply.error["code"] == code, reply.raw[:1000]


# --------------------------------------------------------------------------------------------
# 5. The upstream's identity on /mcp/{prefix}


@pytest.mark.parametrize("upstream_kind", ["dual", "legacy-only"])
@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_discover_and_initialize_carry_the_upstream_identity(gateways, procs, era, upstream_kind):
    name = f"ident-{upstream_kind}-{secrets.token_hex(3)}"
    instructions = f"Instructions of {name}: ask nicely."
    upstream = start_python_upstream(procs, name, legacy_only=upstream_kind == "legacy-only", instructions=instructions)
    gw, secret = one_gateway(gateways, upstream)
    url = gw.mcp_url("up")

    # What the upstream itself says, in the era it speaks.
    if upstream_kind == "dual":
        body, headers = modern_request(1, "server/discover", {"_meta": modern_meta()})
        r = httpx.post(upstream.mcp_url, content=json.dumps(body), headers=headers, timeout=15)
        own_capabilities = parse_body(r.headers["content-type"], r.content)[-1]["result"]["capabilities"]
    else:
        _, own, _ = legacy_initialize(upstream.mcp_url, None, {})
        own_capabilities = own["capabilities"]

    if era == MODERN_VERSION:
        body, headers = modern_request("d1", "server/discover", {"_meta": modern_meta()}, auth=secret)
        r = httpx.post(url, content=json.dumps(body), headers=headers, timeout=15)
        assert r.status_code == 200, f"HTTP {r.status_code} {r.text[:1000]}"
        result = parse_body(r.headers.get("content-type", ""), r.content)[-1]["result"]
        info = (result.get("_meta") or {}).get(SERVER_INFO_META) or {}
        assert info.get("name") == name, f"serverInfo in result._meta: {result}"
        assert result.get("instructions") == instructions, result
        assert result.get("capabilities") == own_capabilities, result
        versions = result.get("supportedVersions") or []
        assert MODERN_VERSION in versions and all(v in versions for v in LEGACY_VERSIONS), versions
        assert result.get("resultType") == "complete", result
    else:
        sid, result, _ = legacy_initialize(url, secret, {})
        assert sid
        assert result["serverInfo"]["name"] == name, result
        assert result.get("instructions") == instructions, result
        assert result.get("capabilities") == own_capabilities, result
        assert result.get("protocolVersion") == LEGACY_VERSION, result

    # The SDK client sees the same identity (auto: discover; legacy: initialize).
    async def scenario():
        async with sdk_client(url, secret, "auto" if era == MODERN_VERSION else "legacy") as c:
            return c.protocol_version, c.server_info, c.instructions

    version, info, sdk_instructions = run_async(scenario)
    assert version == (MODERN_VERSION if era == MODERN_VERSION else LEGACY_VERSION)
    assert info is not None and info.name == name, info
    assert sdk_instructions == instructions


# --------------------------------------------------------------------------------------------
# 6. DELETE ends a legacy session


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_delete_ends_the_session_and_its_upstream_session(gateways, legacy_upstream, endpoint):
    gw, secret = one_gateway(gateways, legacy_upstream)
    url = endpoint_url(gw, endpoint, "up")
    add = tool_name(endpoint, "up", "add")

    doomed = RawMcp(url, secret, "legacy")
    kept = RawMcp(url, secret, "legacy")
    try:
        for mcp, n in ((doomed, 1), (kept, 2)):
            reply = mcp.call_tool(add, {"a": n, "b": 40})
            assert reply.status == 200, reply.raw[:1000]
            assert call_result_value(reply.result) == n + 40
        opened = legacy_upstream.stats()["by_method"].get("initialize", 0)
        assert opened == 2, f"each legacy client session gets its own upstream session: {legacy_upstream.stats()}"
        assert legacy_upstream.stats()["deletes"] == {}

        auth = {"Authorization": f"Bearer {secret}"}
        r = httpx.delete(url, headers={**auth, "Mcp-Session-Id": doomed.session_id or ""}, timeout=15)
        assert r.status_code == 204, f"DELETE: HTTP {r.status_code} {r.text[:500]}"

        again = doomed.call_tool(add, {"a": 1, "b": 1})
        assert again.status == 404, (
            f"a deleted session id must be refused with 404: HTTP {again.status} {again.raw[:500]!r}"
        )
        r2 = httpx.delete(url, headers={**auth, "Mcp-Session-Id": doomed.session_id or ""}, timeout=15)
        assert r2.status_code == 404, f"second DELETE: HTTP {r2.status_code} {r2.text[:500]}"

        deletes = wait_until(
            lambda: legacy_upstream.stats()["deletes"], timeout=5, what="the upstream session's DELETE"
        )
        assert deletes == {"/mcp": 1}, f"exactly the deleted client's upstream session is closed: {deletes}"

        # The other session and its upstream session go on.
        still = kept.call_tool(add, {"a": 2, "b": 2})
        assert still.status == 200 and call_result_value(still.result) == 4, still.raw[:500]
        assert legacy_upstream.stats()["by_method"].get("initialize", 0) == 2, legacy_upstream.stats()
    finally:
        doomed.close()
        kept.close()


# --------------------------------------------------------------------------------------------
# 7. A client closing a relayed stream cancels the upstream request


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("upstream_kind", ["dual", "legacy-only"])
@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_closing_the_stream_cancels_the_upstream_request(gateways, procs, era, upstream_kind, endpoint):
    upstream = start_python_upstream(procs, upstream_kind, legacy_only=upstream_kind == "legacy-only")
    gw, secret = one_gateway(gateways, upstream)
    url = endpoint_url(gw, endpoint, "up")
    name = tool_name(endpoint, "up", "slow_stream")
    arguments = {"seconds": 20, "interval": 0.2}
    body, headers = tool_call_with_progress(url, secret, era, "slow", name, arguments, "t")

    reader = SseReader(url, body, headers)
    try:
        assert reader.status == 200, f"HTTP {reader.status}: {reader.body()[:1000]!r}"
        assert reader.content_type.startswith("text/event-stream"), reader.content_type
        first = reader.read_until(lambda m: m.get("method") == "notifications/progress", "the first progress")
        assert first["params"]["progressToken"] == "t", first
        assert upstream.stats()["started"] == {"slow_stream": 1}
    finally:
        reader.close()
    closed = time.monotonic()

    # (bounded wait; the run would take 20 s, so "cancelled, not finished" is the ordering that counts)
    stats = wait_until(
        lambda: (s := upstream.stats())["cancelled"].get("slow_stream") and s,
        timeout=10,
        what="the upstream tool run to be cancelled after the client closed its stream",
    )
    print(f"the upstream run was cancelled {time.monotonic() - closed:.2f}s after the client closed")
    assert stats["finished"] == {}, stats
    if upstream_kind == "legacy-only":
        assert stats["by_method"].get("notifications/cancelled", 0) >= 1, stats
