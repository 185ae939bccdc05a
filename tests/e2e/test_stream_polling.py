"""Legacy upstreams that close a stream before the answer (SSE stream polling, SEP-1699).

A 2025-11-25 server may prime its SSE answer with an event id and `retry:`, close the connection
and expect its client to come back with a GET carrying `Last-Event-ID`. The gateway is that
client: it resumes the upstream stream itself, after the `retry:` it was given, as many times
as the server closes it, within the server's `timeout`, so its own client sees one stream with
every notification and the answer. The upstream here is the official Python SDK (mcp 2.3.0) with
an event store and `retry_interval`, whose tool `poll` calls the SDK's `close_sse_stream()`
(`upstreams/python_upstream.py --resumable`).

Every era pairing, across two gateway replicas behind a round-robin balancer (each replica
serves at least one of the calls; a legacy client's session spans both):
- legacy client, `upstreamEra: byClient` (a dual-era server): the client's own upstream session
  is polled and resumed;
- legacy client, `upstreamEra: auto` (a legacy-only server): the same on the legacy session the
  gateway opens for the client;
- 2026-07-28 client, `auto` (legacy-only server): the gateway's shared legacy session is polled;
- 2026-07-28 client, `byClient`: the request goes upstream in the 2026-07-28 form, which has no
  resumption (the SDK offers no `close_sse_stream()` there): one stream, no close, no resume.

Each call returns the server's answer; the progress notifications sent before and after each
close reach the client in order; every resuming GET carries the upstream session, its version
and the server's credential; the upstream never receives `notifications/cancelled`; the client
sees no event id or `retry:` (the gateway's streams are not resumable: docs/architecture.md,
"Streams"). REST's whole-answer path reads a polled stream the same way.

The control: a server that keeps closing and never answers ends in a timeout error naming the
server and its budget (not "the stream ended without an answer" at the first close), and only
then is the upstream told `notifications/cancelled`.
"""

from __future__ import annotations

import json

import pytest
from harness import (
    LEGACY_VERSION,
    MODERN_VERSION,
    RawMcp,
    balancer,
    gateway_config,
    key,
    new_secret,
    rest_call,
    run_async,
    sdk_client,
    server,
    start_python_upstream,
    wait_until,
    write_config,
)

# The server's `retry:` in milliseconds (short: the test waits it out at every close).
RETRY_MS = 100
ROUNDS = 2
PROGRESS = [f"{when} close {n}" for n in range(1, ROUNDS + 1) for when in ("before", "after")]


def polling_setup(gateways, procs, upstream_era: str, timeout: str = "30s"):
    """A resumable Python SDK upstream (legacy-only for `auto`, dual-era for `byClient`) behind
    two gateway replicas sharing one config; the server holds a credential of the gateway's."""
    up = start_python_upstream(
        procs, f"polling-{upstream_era}", legacy_only=upstream_era == "auto", resumable=RETRY_MS
    )
    secret = new_secret("poll-client")
    credential = new_secret("poll-upstream")
    config = gateway_config(
        [
            server(
                "poll",
                up.mcp_url,
                upstreamEra=upstream_era,
                timeout=timeout,
                auth={"type": "bearer", "secret": credential},
            )
        ],
        [key("c", secret, ["poll"])],
    )
    path = gateways.config_path("shared")
    write_config(path, config)
    gw1 = gateways.start(config_path=path, name="replica1")
    gw2 = gateways.start(config_path=path, name="replica2")
    return up, secret, credential, gw1, gw2


def sse_fields(bodies: list[bytes]) -> list[str]:
    """The `id:` and `retry:` lines of the SSE bodies the client received."""
    lines = []
    for body in bodies:
        for line in body.decode("utf-8", "replace").splitlines():
            if line.startswith(("id:", "retry:")):
                lines.append(line)
    return lines


@pytest.mark.parametrize("upstream_era", ["byClient", "auto"])
@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_a_stream_the_upstream_closes_is_resumed_by_the_gateway(gateways, procs, era, upstream_era):
    up, secret, credential, gw1, gw2 = polling_setup(gateways, procs, upstream_era)
    # The one pairing that goes upstream in the 2026-07-28 form, where nothing is closed.
    closes = 0 if (era, upstream_era) == (MODERN_VERSION, "byClient") else ROUNDS

    with balancer([gw1.url, gw2.url]) as lb:
        lb.record_bodies = True

        def replicas_that_called() -> set[int]:
            return {i for i, method, _, _, rpc in lb.served if method == "POST" and rpc == "tools/call"}

        async def scenario():
            calls = []
            async with sdk_client(f"{lb.url}/mcp/poll", secret, era) as c:
                # Until each replica has served a call (round robin per request: 2 or 3 calls).
                while replicas_that_called() != {0, 1} and len(calls) < 6:
                    seen: list[str] = []

                    async def on_progress(progress, total, message, seen=seen):
                        seen.append(message)

                    result = await c.call_tool("poll", {"rounds": ROUNDS}, progress_callback=on_progress)
                    calls.append((result, seen))
            return calls

        calls = run_async(scenario, timeout=120)
        assert replicas_that_called() == {0, 1}, f"a replica served no call: {lb.served}"
        if era == "legacy":
            sessions = {sid for _, method, _, sid, rpc in lb.served if method == "POST" and rpc == "tools/call"}
            assert len(sessions) == 1 and None not in sessions, f"one legacy session across replicas: {lb.served}"
        client_saw = sse_fields(lb.bodies)

    for result, seen in calls:
        assert not result.is_error, result
        assert result.content[0].text == f"answered after {closes} closes", result
        assert seen == PROGRESS, f"notifications before and after each close, in order: {seen}"
    stats = up.stats()
    print(f"{era} client, upstreamEra {upstream_era}: {len(calls)} calls over 2 replicas, {stats['resumes']} resumes")
    assert stats["finished"] == {"poll": len(calls)}, stats
    assert stats["cancelled"] == {}, f"a run was cancelled upstream: {stats}"
    assert "notifications/cancelled" not in stats["by_method"], f"the upstream was told to give up: {stats}"
    assert stats["resumes"] == closes * len(calls), stats
    for headers in stats["resume_headers"]:
        assert headers.get("authorization") == f"Bearer {credential}", "the resume carries the credential"
        assert headers.get("mcp-session-id"), f"the resume names the upstream session: {headers}"
        assert headers.get("mcp-protocol-version") == LEGACY_VERSION, headers
        assert "text/event-stream" in headers.get("accept", ""), headers
        assert headers.get("last-event-id"), headers
    # The upstream's ids name its own streams; the gateway cannot resume them for its client.
    assert client_saw == [], f"the client was given event ids / retry: it cannot use: {client_saw}"


def test_rest_reads_a_polled_stream_whole(gateways, procs):
    """`POST /mcp-rest/tools/call` (a whole answer, not a relayed stream) to a server that closes
    its stream twice: the gateway resumes it and answers with the result."""
    up, secret, _, gw1, _ = polling_setup(gateways, procs, "auto")
    response = rest_call(gw1, secret, "poll", {"rounds": ROUNDS}, server_id="poll")
    assert response.status_code == 200, response.text
    assert response.json()["content"][0]["text"] == f"answered after {ROUNDS} closes", response.text
    stats = up.stats()
    assert stats["resumes"] == ROUNDS, stats
    assert "notifications/cancelled" not in stats["by_method"], stats


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_a_server_that_keeps_closing_and_never_answers_times_out(gateways, procs, era):
    """The control: the server closes its stream every time the gateway resumes it and never
    answers. The call ends at the server's timeout with a timeout error naming the server and
    the budget; only then (the gateway gave up) is the upstream told notifications/cancelled."""
    up, secret, _, gw1, _ = polling_setup(gateways, procs, "auto", timeout="3s")
    with RawMcp(gw1.mcp_url("poll"), secret, era, timeout=30) as client:
        reply = client.call_tool("poll", {"rounds": 100000})
    assert reply.status == 200, reply.raw[:500]
    error = reply.error
    assert error["code"] == -32001, f"expected the timeout error, got {json.dumps(error)}"
    assert error["data"] == {"server": "poll", "timeoutMs": 3000}, error
    assert '"poll"' in error["message"] and "3s" in error["message"], error["message"]
    # It kept resuming until the deadline: more than the first close.
    stats = wait_until(
        lambda: (s := up.stats())["cancelled"].get("poll") == 1 and s,
        timeout=15,
        what="the upstream's run cancelled after the timeout",
    )
    assert stats["resumes"] >= 2, stats
    assert stats["by_method"].get("notifications/cancelled") == 1, stats
    assert stats["finished"] == {}, stats
