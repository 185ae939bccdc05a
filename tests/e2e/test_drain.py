"""A stopping gateway drains kept-alive connections (SWITCHBOARD_DRAIN; the chart sets 5s): after
SIGTERM it keeps answering for the drain period, each answer saying `Connection: close`, and
/readyz says 503 "stopping"; then it exits by itself. Found on the test cluster's node: closing
an idle kept-alive connection at SIGTERM raced with a client sending on it (EOF, a lost POST)."""

from __future__ import annotations

import http.client
import signal

from harness import gateway_config, wait_until


def test_sigterm_answers_with_connection_close_then_exits(gateways):
    gw = gateways.start(gateway_config([], [], maxBodyBytes=256), env={"SWITCHBOARD_DRAIN": "3s"})
    # (The internal listener's probes; the client listener's answers go through the same edge.)
    host, port = gw.proc.internal_addr.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.request("GET", "/healthz")
    before = conn.getresponse()
    assert before.read() == b"ok"
    assert (before.getheader("connection") or "").lower() != "close", before.getheaders()

    gw.proc.popen.send_signal(signal.SIGTERM)

    def draining():
        probe = http.client.HTTPConnection(host, int(port), timeout=5)
        try:
            probe.request("GET", "/readyz")
            r = probe.getresponse()
            return r.status == 503 and r.read() == b"stopping"
        finally:
            probe.close()

    wait_until(draining, 5, what="/readyz to say 503 stopping")
    # The kept-alive connection still gets its answer, told to close.
    conn.request("GET", "/healthz")
    during = conn.getresponse()
    assert during.status == 200 and during.read() == b"ok"
    assert (during.getheader("connection") or "").lower() == "close", during.getheaders()
    conn.close()
    # The edge's own refusals too: a body over maxBodyBytes (413, before any handler) and a
    # Host the gateway does not serve (403).
    for body, headers, status in [
        (b"{" + b" " * 1024 + b"}", {"Content-Type": "application/json"}, 413),
        (b"{}", {"Host": "evil.example", "Content-Type": "application/json"}, 403),
    ]:
        refused = http.client.HTTPConnection(host, int(port), timeout=5)
        refused.request("POST", "/mcp", body=body, headers=headers)
        answer = refused.getresponse()
        assert answer.status == status, answer.status
        answer.read()
        assert (answer.getheader("connection") or "").lower() == "close", (status, answer.getheaders())
        refused.close()
    # After the drain period the process ends by itself (bounded wait, not a timing check).
    wait_until(lambda: gw.proc.popen.poll() is not None, 20, what="the gateway to exit after draining")
    assert gw.proc.popen.returncode == 0, gw.logs()[-2000:]
