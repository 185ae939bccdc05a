"""Slow or greedy clients cannot pin a replica: headers must arrive within
`--header-read-timeout` (which also closes idle kept-alive connections), a whole body within
`--body-read-timeout` (else 408), bodies past `gateway.maxBodyBytes` are refused without being
read to the end, and at most `--max-connections` connections are served at once (more wait
until one closes). Meanwhile well-behaved callers are served."""

from __future__ import annotations

import socket
import threading
import time

import httpx
from harness import MODERN_VERSION, RawMcp, gateway_config, key, new_secret, server, wait_until


def _connect(gw) -> socket.socket:
    host, port = gw.url.removeprefix("http://").rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    return s


def _closed_by_peer(s: socket.socket, within: float) -> bool:
    """Reads until the gateway closes the connection (what it sent, if anything, is ignored)."""
    s.settimeout(within)
    try:
        while s.recv(4096):
            pass
        return True
    except (TimeoutError, socket.timeout):
        return False
    except ConnectionResetError:
        return True


def _works(gw, k) -> bool:
    with RawMcp(gw.mcp_url(), k, MODERN_VERSION) as mcp:
        return mcp.call_tool("alpha__add", {"a": 2, "b": 3}).status == 200


def test_trickled_headers_and_bodies_are_cut_off(gateways, rust_upstream):
    k = new_secret("key")
    gw = gateways.start(
        gateway_config([server("alpha", rust_upstream.mcp_url)], [key("one", k, ["alpha"])]),
        env={"SWITCHBOARD_HEADER_READ_TIMEOUT": "1s", "SWITCHBOARD_BODY_READ_TIMEOUT": "1s"},
    )
    # Headers that never finish: the connection is closed, and others are served meanwhile.
    slow_headers = _connect(gw)
    slow_headers.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    assert _works(gw, k)
    assert _closed_by_peer(slow_headers, within=10), "a connection with unfinished headers stayed open"

    # An idle kept-alive connection is closed after the same time.
    idle = _connect(gw)
    idle.sendall(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    first = idle.recv(4096)
    assert first.startswith(b"HTTP/1.1 405"), first
    assert _closed_by_peer(idle, within=10), "an idle kept-alive connection stayed open"

    # A body that trickles: 408 once the body timeout passes.
    slow_body = _connect(gw)
    slow_body.sendall(
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + k.encode() + b"\r\nContent-Length: 100\r\n\r\n{"
    )
    started = time.monotonic()
    slow_body.settimeout(10)
    answer = b""
    while b"\r\n\r\n" not in answer:
        sent = time.monotonic() - started
        if sent < 8:
            try:
                slow_body.sendall(b" ")  # one byte every 0.2 s: never done in time
            except OSError:
                break
        slow_body.settimeout(0.2)
        try:
            chunk = slow_body.recv(4096)
        except (TimeoutError, socket.timeout):
            continue
        if not chunk:
            break
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert _works(gw, k)


def test_oversized_body_is_refused_without_reading_it_all(gateways, rust_upstream):
    k = new_secret("key")
    gw = gateways.start(
        gateway_config([server("alpha", rust_upstream.mcp_url)], [key("one", k, ["alpha"])], maxBodyBytes=1000)
    )
    # Announces 50 MB and sends 10 KB: the answer comes without the rest.
    s = _connect(gw)
    s.sendall(
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + k.encode() + b"\r\nContent-Length: 50000000\r\n\r\n" + b" " * 10_000
    )
    s.settimeout(10)
    answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    # Exactly one byte over the limit: the MCP endpoint's own JSON-RPC error.
    r = httpx.post(f"{gw.url}/mcp", content=b" " * 1001,
                   headers={"Authorization": f"Bearer {k}", "Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 413 and r.json()["error"]["code"] == -32600, r.text


def test_connections_past_the_cap_wait_for_a_free_slot(gateways, rust_upstream):
    k = new_secret("key")
    gw = gateways.start(
        gateway_config([server("alpha", rust_upstream.mcp_url)], [key("one", k, ["alpha"])]),
        env={"SWITCHBOARD_MAX_CONNECTIONS": "3"},
    )
    held = []
    for _ in range(3):
        s = _connect(gw)
        s.sendall(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 405")
        held.append(s)
    done = threading.Event()
    result: dict = {}

    def fourth() -> None:
        try:
            result["status"] = httpx.get(f"{gw.url}/mcp", timeout=30).status_code
        finally:
            done.set()

    threading.Thread(target=fourth, daemon=True).start()
    assert not done.wait(1.0), f"a fourth connection was served while three were held: {result}"
    held.pop().close()
    wait_until(done.is_set, 10, what="the fourth connection to be served once a slot was free")
    assert result.get("status") == 405, result
    for s in held:
        s.close()
