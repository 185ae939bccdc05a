"""`--advertise-url` naming the client listener instead of the internal one (issue 35, item 8).

Two replicas share one config. Replica 1's `--advertise-url` reaches its *client* listener (through
a port forward, as a Service or port mapping pointing at the wrong container port would), where
the replica hand-off route (`/mcp-internal/exchange`) is not served; replica 2's reaches its
internal listener the same way. Then:

- at start, replica 1 warns that its advertised URL answers 404 for the hand-off route, naming
  the flag; replica 2 says its URL reaches the route;
- a legacy client whose call (a 2026-07-28 upstream asking for input) is held by replica 1 and
  whose reply lands on replica 2 gets a clear error at once, naming `--advertise-url`, instead
  of a bare 404 while its call waits for the server's timeout; replica 2 logs the holder's
  address and the flag;
- a 2026-07-28 client whose paused call (a legacy upstream asking for input) is held by replica
  1 and whose retry lands on replica 2 gets the same error;
- the control: an exchange held by replica 2 (rightly advertised) completes from replica 1.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator

import httpx
from harness import (
    Gateway,
    call_result_value,
    gateway_config,
    key,
    new_secret,
    parse_body,
    server,
    start_python_upstream,
    wait_until,
    write_config,
)
from test_relay import (
    ALL_CAPABILITIES,
    SseReader,
    is_response,
    legacy_headers,
    legacy_initialize,
    modern_meta,
    modern_request,
)

MISADVERTISED_WARNING = "--advertise-url names a listener that answers 404 for the replica hand-off route"
REACHES = "--advertise-url reaches a replica hand-off route"


class LateForward:
    """A loopback TCP port forwarded to a backend named after the port exists: a gateway is
    started with this port in its `--advertise-url` before its own listeners' ports are known.
    A connection that arrives before the backend is named waits for it (bounded)."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.address = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self._backend: tuple[str, int] | None = None
        self._named = threading.Event()
        threading.Thread(target=self._accept, name="late-forward", daemon=True).start()

    def forward_to(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self._backend = (host, int(port))
        self._named.set()

    def close(self) -> None:
        self._sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            if not self._named.wait(30) or self._backend is None:
                return
            try:
                upstream = socket.create_connection(self._backend, timeout=30)
            except OSError:
                return
            with upstream:
                upstream.settimeout(None)
                back = threading.Thread(target=self._pipe, args=(upstream, conn), daemon=True)
                back.start()
                self._pipe(conn, upstream)
                back.join(30)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def replicas(gateways, config: dict) -> Iterator[tuple[Gateway, Gateway, str]]:
    """Replica 1 advertises its client listener, replica 2 its internal listener; both through a
    forwarded port. Yields them and replica 1's advertised URL."""
    path = gateways.config_path("shared")
    write_config(path, config)
    wrong, right = LateForward(), LateForward()
    try:
        gw1 = gateways.start(config_path=path, name="advertises-client", env={"SWITCHBOARD_ADVERTISE_URL": f"http://{wrong.address}"})
        wrong.forward_to(gw1.proc.addr)  # the client listener: the mistake
        gw2 = gateways.start(config_path=path, name="advertises-internal", env={"SWITCHBOARD_ADVERTISE_URL": f"http://{right.address}"})
        right.forward_to(gw2.proc.internal_addr)
        yield gw1, gw2, f"http://{wrong.address}"
    finally:
        wrong.close()
        right.close()


def assert_start_up_checks(gw1: Gateway, gw2: Gateway) -> None:
    """Replica 1 warned at start that its --advertise-url has no hand-off route; replica 2 found
    its own."""
    wait_until(lambda: MISADVERTISED_WARNING in gw1.logs(), 30, what="replica 1's start-up warning about its --advertise-url")
    wait_until(lambda: REACHES in gw2.logs(), 30, what="replica 2's start-up check of its --advertise-url")
    assert MISADVERTISED_WARNING not in gw2.logs()
    assert REACHES not in gw1.logs()


def assert_names_the_flag(response: httpx.Response) -> None:
    assert response.status_code != 404, f"a bare 404 relayed from the holder: {response.text[:500]}"
    messages = parse_body(response.headers.get("content-type", ""), response.content)
    errors = [m["error"] for m in messages if isinstance(m, dict) and "error" in m]
    assert errors, f"HTTP {response.status_code}, no JSON-RPC error: {response.text[:500]}"
    assert "--advertise-url" in errors[0]["message"], errors[0]


def test_legacy_reply_to_a_replica_that_advertises_its_client_listener(gateways, procs):
    upstream = start_python_upstream(procs, "dual")  # 2026-07-28: the gateway relays its input requests
    secret = new_secret("client-key")
    config = gateway_config([server("up", upstream.mcp_url)], [key("client", secret, ["up"])])
    with replicas(gateways, config) as (gw1, gw2, advertised):
        def held_by(holder: Gateway, other: Gateway, rpc_id: int) -> tuple[httpx.Response, SseReader]:
            """A call held by `holder` whose elicitation reply is posted to `other`."""
            sid, _, _ = legacy_initialize(holder.mcp_url("up"), secret, ALL_CAPABILITIES)
            assert sid
            body = {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": {"name": "ask", "arguments": {"question": "q?"}}}
            reader = SseReader(holder.mcp_url("up"), body, legacy_headers(sid, secret))
            assert reader.status == 200, reader.body()[:1000]
            ask = reader.read_until(lambda m: m.get("method") == "elicitation/create", "the elicitation request")
            reply = {"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"answer": f"via {other.proc.name}"}}}
            posted = httpx.post(other.mcp_url("up"), content=json.dumps(reply), headers=legacy_headers(sid, secret), timeout=30)
            return posted, reader

        # Held by replica 1 (misadvertised): the reply on replica 2 is refused at once, by name.
        posted, reader = held_by(gw1, gw2, 7)
        reader.close()
        assert_names_the_flag(posted)
        line = wait_until(
            lambda: next((ln for ln in gw2.logs().splitlines() if "answers 404 for the hand-off route" in ln), None),
            15,
            what="replica 2's log naming the misadvertised holder",
        )
        assert "--advertise-url" in line and f"holder={advertised}" in line, line

        # The control: held by replica 2 (rightly advertised), the reply on replica 1 completes it.
        posted, reader = held_by(gw2, gw1, 8)
        try:
            assert posted.status_code == 202, f"HTTP {posted.status_code}: {posted.text[:500]}"
            answer = reader.read_until(lambda m: is_response(m, 8), "the answer")
        finally:
            reader.close()
        assert call_result_value(answer["result"]) == "via advertises-client", answer
        assert_start_up_checks(gw1, gw2)


def test_modern_retry_to_a_replica_that_advertises_its_client_listener(gateways, procs):
    upstream = start_python_upstream(procs, "legacy", legacy_only=True)  # its request pauses the call
    secret = new_secret("client-key")
    config = gateway_config([server("up", upstream.mcp_url)], [key("client", secret, ["up"])])
    with replicas(gateways, config) as (gw1, gw2, _):
        params = {"name": "ask", "arguments": {"question": "q?"}, "_meta": modern_meta(ALL_CAPABILITIES)}

        def retried(first_on: Gateway, retry_on: Gateway) -> httpx.Response:
            body, headers = modern_request("first", "tools/call", params, auth=secret)
            first = httpx.post(first_on.mcp_url("up"), content=json.dumps(body), headers=headers, timeout=30)
            assert first.status_code == 200, first.text[:1000]
            result = parse_body(first.headers.get("content-type", ""), first.content)[-1]["result"]
            assert result["resultType"] == "input_required", result
            (ask_key,) = result["inputRequests"]
            retry_params = {
                **params,
                "inputResponses": {ask_key: {"action": "accept", "content": {"answer": f"via {retry_on.proc.name}"}}},
                "requestState": result["requestState"],
            }
            body, headers = modern_request("retry", "tools/call", retry_params, auth=secret)
            return httpx.post(retry_on.mcp_url("up"), content=json.dumps(body), headers=headers, timeout=30)

        assert_names_the_flag(retried(gw1, gw2))

        # The control: paused on replica 2, the retry on replica 1 completes it.
        done = retried(gw2, gw1)
        assert done.status_code == 200, done.text[:1000]
        final = parse_body(done.headers.get("content-type", ""), done.content)[-1]
        assert final["result"].get("resultType") == "complete", final
        assert call_result_value(final["result"]) == "via advertises-client", final
        assert_start_up_checks(gw1, gw2)
