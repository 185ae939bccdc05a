"""Bad input still gets its answer at the edge (issue 20 item 9, acceptance 7).

Clients that write their whole body before they read (httpx, the official SDKs, a raw socket)
used to meet a closed socket when the gateway refused a body it had not read: the reset could
destroy the 413 before the client read it (1 run in 4 with httpx; always with a raw socket
past ~7 MB). The gateway now answers at once and keeps reading (discarding, bounded) while the
answer goes out.

- httpx, 20 times: a 10 MiB body to /mcp (limit 1 MiB) gets a readable 413 every time (with
  the old behaviour all 20 passing had a chance of about 0.3 %);
- a raw socket that writes all 10 MiB before reading anything reads the 413 (the old behaviour
  failed this every time: broken pipe);
- the official Python SDK calling a tool with an 8 MiB argument reads the 413 (its HTTP exchange
  records it) and raises its error for an error response, not a connection error.

(A client that announces far more than it sends still gets its answer without sending the
rest: tests/e2e/test_slow_clients.py.)
"""

from __future__ import annotations

import socket

import httpx
from harness import MODERN_VERSION, gateway_config, key, new_secret, run_async, sdk_client, server

LIMIT = 1024 * 1024
BIG = 10 * 1024 * 1024


def _gateway(gateways, upstream):
    k = new_secret("key")
    gw = gateways.start(gateway_config([server("alpha", upstream.mcp_url)], [key("one", k, ["alpha"])], maxBodyBytes=LIMIT))
    return gw, k


def test_httpx_reads_the_413_of_a_body_far_over_the_limit_every_time(gateways, rust_upstream):
    gw, k = _gateway(gateways, rust_upstream)
    body = b"{" + b" " * BIG + b"}"
    headers = {"Authorization": f"Bearer {k}", "Content-Type": "application/json"}
    outcomes = []
    for _ in range(20):
        try:
            r = httpx.post(f"{gw.url}/mcp", content=body, headers=headers, timeout=30)
            outcomes.append(r.status_code)
        except httpx.HTTPError as exc:
            outcomes.append(repr(exc))
    assert outcomes == [413] * 20, outcomes
    # The connection that carried a refused body serves the next request.
    with httpx.Client(timeout=30) as client:
        assert client.post(f"{gw.url}/mcp", content=body, headers=headers).status_code == 413
        ok = client.post(
            f"{gw.url}/mcp-rest/tools/call", json={"name": "alpha__add", "arguments": {"a": 1, "b": 2}}, headers=headers
        )
        assert ok.status_code == 200, ok.text


def test_a_raw_socket_that_writes_everything_first_reads_the_413(gateways, rust_upstream):
    gw, k = _gateway(gateways, rust_upstream)
    host, port = gw.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {k}\r\nContent-Length: {BIG}\r\n\r\n"
        ).encode()
        s.sendall(head + b" " * BIG)
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_the_official_sdk_sees_a_413_for_an_oversized_tool_call(gateways, rust_upstream):
    gw, k = _gateway(gateways, rust_upstream)
    record: list = []

    async def scenario():
        async with sdk_client(gw.mcp_url("alpha"), k, MODERN_VERSION, record=record) as client:
            try:
                await client.call_tool("echo", {"text": "x" * (8 * 1024 * 1024)})
            except BaseException as exc:  # noqa: BLE001 - the SDK's own error type is what is checked
                return exc
            return None

    error = run_async(scenario)
    assert error is not None, "an 8 MiB call over a 1 MiB limit must fail"
    text = repr(error) + str(error)
    # The SDK read the gateway's answer (it reports it as "Server returned an error response").
    assert [status for method, _, status, _ in record if method == "POST"][-1] == 413, record
    for lost in ("RemoteProtocolError", "ConnectError", "ReadError", "disconnected without"):
        assert lost not in text, f"the answer was lost: {text[:500]}"
