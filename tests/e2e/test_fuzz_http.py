"""A bounded random-bytes HTTP run against a live gateway (issue 11, fuzzing): raw garbage,
HTTP requests with random methods, paths, headers (`Authorization`, `Mcp-Session-Id`,
`Mcp-Protocol-Version`, `Content-Length` that lies, chunked bodies) and bodies (random bytes,
mutated JSON-RPC, deep nesting, oversized) on every route, from several connections at once.

What must hold: the gateway never answers 500 (an internal error is a bug, not an answer to bad
input), never hangs past its read timeouts, never panics, stays alive, keeps its memory bounded,
and serves a well-formed call afterwards. The run lasts `SWITCHBOARD_HTTP_FUZZ_SECONDS` (default
20), and on until `MIN_REQUESTS` inputs were sent (a slow machine runs longer rather than try
fewer), with a printed seed (`SWITCHBOARD_HTTP_FUZZ_SEED` replays one); an input that broke a rule
is written next to the logs and named in the failure."""

from __future__ import annotations

import json
import os
import random
import socket
import threading
import time
from pathlib import Path

from harness import MODERN_VERSION, RawMcp, gateway_config, key, new_secret, server

SECONDS = float(os.environ.get("SWITCHBOARD_HTTP_FUZZ_SECONDS", "20"))
WORKERS = 4
MIN_REQUESTS = 100
# Longer than the gateway's read timeouts (2 s here) plus the server timeout (2 s): a reply
# slower than this is a hang.
REPLY_BUDGET = 10.0

PATHS = [
    "/mcp",
    "/mcp/alpha",
    "/mcp/nope",
    "/mcp-rest/tools/list",
    "/mcp-rest/tools/call",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/chat/completions",
    "/v1/models",
    "/mcp-internal/exchange",
    "/healthz",
    "/readyz",
    "/metrics",
    "/.well-known/oauth-protected-resource/mcp/alpha",
    "/",
]
METHODS = ["GET", "POST", "DELETE", "PUT", "OPTIONS", "HEAD", "PATCH"]
JSONRPC_SEEDS = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": MODERN_VERSION}},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "alpha__add", "arguments": {"a": 1, "b": 2}}},
    {"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "example://readme"}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 5, "result": {}},
    {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
]


class Generator:
    def __init__(self, rng: random.Random, secret: str):
        self.rng = rng
        self.secret = secret

    def junk(self, n: int | None = None) -> bytes:
        n = self.rng.randint(0, 300) if n is None else n
        return bytes(self.rng.getrandbits(8) for _ in range(n))

    def token(self) -> str:
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-_.~%/:;,= \t\"'\\{}"
        return "".join(self.rng.choice(alphabet) for _ in range(self.rng.randint(0, 60)))

    def mutate(self, value):
        """A JSON value with random parts replaced, dropped or retyped."""
        r = self.rng.random()
        if isinstance(value, dict) and value and r < 0.5:
            value = dict(value)
            k = self.rng.choice(list(value))
            choice = self.rng.random()
            if choice < 0.3:
                del value[k]
            elif choice < 0.7:
                value[k] = self.mutate(value[k])
            else:
                value[k] = self.rng.choice([None, 0, -1, 2**63, 1.5e308, "", [], {}, True, self.token()])
            return value
        if isinstance(value, list) and r < 0.3:
            return [self.mutate(v) for v in value] * self.rng.randint(0, 3)
        if r < 0.1:
            return self.rng.choice([None, 0, "", [], {}, self.token()])
        return value

    def body(self) -> bytes:
        r = self.rng.random()
        if r < 0.25:
            return self.junk()
        if r < 0.75:
            text = json.dumps(self.mutate(self.rng.choice(JSONRPC_SEEDS))).encode()
            if self.rng.random() < 0.2:  # cut or spliced
                cut = self.rng.randint(0, len(text))
                text = text[:cut] + self.junk(self.rng.randint(0, 8))
            return text
        if r < 0.85:
            depth = self.rng.randint(100, 20_000)
            return b"[" * depth + b"]" * self.rng.choice([0, depth])
        if r < 0.92:
            return b'{"jsonrpc":"2.0","id":1,"method":"' + b"x" * self.rng.randint(1000, 300_000) + b'"}'
        return b""

    def request(self) -> bytes:
        rng = self.rng
        if rng.random() < 0.1:
            return self.junk()  # not HTTP at all
        method = rng.choice(METHODS) if rng.random() < 0.95 else self.token().replace(" ", "")
        path = rng.choice(PATHS)
        if rng.random() < 0.2:
            path += rng.choice(["/", "//", "?", "%00", "/../", "?sessionId="]) + self.token().replace(" ", "")
        version = rng.choice(["HTTP/1.1"] * 8 + ["HTTP/1.0", "HTTP/2.0", "HTTP/9"])
        body = self.body() if method != "GET" or rng.random() < 0.1 else b""
        headers = [("Host", "127.0.0.1"), ("Connection", "close")]
        auth = rng.random()
        if auth < 0.5:
            headers.append(("Authorization", f"Bearer {self.secret}"))
        elif auth < 0.7:
            headers.append(("Authorization", rng.choice(["Bearer ", "Basic ", "", "bearer  "]) + self.token()))
        elif auth < 0.8:
            headers.append(("x-api-key", rng.choice([self.secret, self.token()])))
        if rng.random() < 0.4:
            headers.append(("Mcp-Session-Id", self.token() if rng.random() < 0.7 else "A" * rng.randint(100, 9000)))
        if rng.random() < 0.4:
            headers.append(("Mcp-Protocol-Version", rng.choice([MODERN_VERSION, "2025-03-26", "2026-07-28", self.token()])))
        if rng.random() < 0.6:
            headers.append(("Content-Type", rng.choice(["application/json", "text/plain", self.token()])))
        if rng.random() < 0.5:
            headers.append(("Accept", rng.choice(["application/json, text/event-stream", "*/*", self.token()])))
        if rng.random() < 0.2:
            headers.append(("Mcp-Method", self.token()))
        for _ in range(rng.choice([0, 0, 0, 1, 3, 120])):  # many or odd headers
            headers.append((self.token().replace(" ", "").replace(":", "") or "x", self.token()))
        framing = rng.random()
        if framing < 0.1:
            headers.append(("Transfer-Encoding", "chunked"))
            payload = b""
            rest = body
            while rest:
                n = rng.randint(1, max(1, len(rest)))
                payload += f"{n:x}\r\n".encode() + rest[:n] + b"\r\n"
                rest = rest[n:]
            body = payload + (b"0\r\n\r\n" if rng.random() < 0.8 else self.junk(5))
        elif framing < 0.2:
            # A Content-Length that lies (short: the rest is a garbage second request; long: the
            # body read timeout ends it).
            headers.append(("Content-Length", str(max(0, len(body) + rng.choice([-5, -1, 1, 1000])))))
        elif framing < 0.25:
            headers.append(("Content-Length", self.token()))
        else:
            headers.append(("Content-Length", str(len(body))))
        head = f"{method} {path} {version}\r\n".encode("latin-1", "replace")
        for name, value in headers:
            head += name.encode("latin-1", "replace") + b": " + value.encode("latin-1", "replace") + b"\r\n"
        return head + b"\r\n" + body


def _exchange(addr: tuple[str, int], data: bytes) -> tuple[bytes | None, float]:
    """Sends `data`, half-closes, reads until the gateway closes. Returns the status line (None
    if the gateway closed without answering) and the seconds it took."""
    started = time.monotonic()
    with socket.create_connection(addr, timeout=REPLY_BUDGET) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the gateway refused early or closed (e.g. an oversized body, not HTTP/1); what it sent still counts (e.g. an oversized body); what it sent still counts
        received = b""
        try:
            while chunk := s.recv(65536):
                if len(received) < 256:
                    received += chunk
        except (TimeoutError, socket.timeout):
            return b"HANG", time.monotonic() - started
        except OSError:
            pass  # reset after an answer or instead of one
    line = received.split(b"\r\n", 1)[0] if received else None
    return line, time.monotonic() - started


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def test_random_http_never_breaks_the_gateway(gateways, rust_upstream, tmp_path):
    secret = new_secret("key")
    gw = gateways.start(
        gateway_config(
            [server("alpha", rust_upstream.mcp_url, timeout="2s")],
            [key("one", secret, ["alpha"])],
            maxBodyBytes=100_000,
        ),
        env={"SWITCHBOARD_HEADER_READ_TIMEOUT": "2s", "SWITCHBOARD_BODY_READ_TIMEOUT": "2s"},
    )
    host, port = gw.url.removeprefix("http://").rsplit(":", 1)
    addr = (host, int(port))
    pid = gw.proc.popen.pid
    seed = int(os.environ.get("SWITCHBOARD_HTTP_FUZZ_SEED", str(random.randrange(2**32))))
    rss_start = _rss_kib(pid)

    statuses: dict[str, int] = {}
    failures: list[tuple[str, bytes]] = []
    lock = threading.Lock()
    deadline = time.monotonic() + SECONDS
    cap = deadline + 3 * SECONDS  # (the bound of the "and on")

    def more() -> bool:
        now = time.monotonic()
        with lock:
            sent = sum(statuses.values())
        return now < deadline or (sent < MIN_REQUESTS and now < cap)

    def worker(index: int) -> None:
        gen = Generator(random.Random(seed * 31 + index), secret)
        while more():
            data = gen.request()
            try:
                line, took = _exchange(addr, data)
            except OSError as e:
                with lock:
                    failures.append((f"connection failed: {e!r}", data))
                return
            status = "closed" if line is None else line[9:12].decode("latin-1", "replace") if line.startswith(b"HTTP/1.") else "HANG" if line == b"HANG" else "other"
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
                if status == "500":
                    failures.append(("answered 500", data))
                elif status == "HANG" or took > REPLY_BUDGET:
                    failures.append((f"no end after {took:.1f} s", data))
                elif status == "other":
                    failures.append((f"not an HTTP status line: {line[:80]!r}", data))

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, cap - time.monotonic()) + 4 * REPLY_BUDGET)
    assert not any(t.is_alive() for t in threads), "a fuzz worker is still waiting on the gateway"

    rss_end = _rss_kib(pid)
    total = sum(statuses.values())
    print(
        f"\nhttp fuzz: seed {seed}, {total} requests in {time.monotonic() - deadline + SECONDS:.0f} s over {WORKERS} connections at a time;"
        f" answers {dict(sorted(statuses.items()))}; gateway RSS {rss_start / 1024:.1f} -> {rss_end / 1024:.1f} MiB"
    )
    for i, (why, data) in enumerate(failures[:5]):
        (tmp_path / f"fuzz-http-failure-{i}.bin").write_bytes(data)
    assert not failures, (
        f"seed {seed}: {len(failures)} inputs broke a rule (first kept in {tmp_path}): "
        + "; ".join(f"{why}: {data[:200]!r}" for why, data in failures[:3])
    )
    assert total >= MIN_REQUESTS, f"only {total} requests were sent in {4 * SECONDS:.0f} s: the run proves little"
    assert gw.proc.alive(), "the gateway exited during the run"
    assert "panicked" not in gw.logs(), "the gateway panicked:\n" + gw.logs()[-3000:]
    # Bounded: parsing garbage must not keep memory (generous: allocator pools stay).
    assert rss_end - rss_start < 200 * 1024, f"RSS grew from {rss_start} KiB to {rss_end} KiB"
    with RawMcp(gw.mcp_url(), secret, MODERN_VERSION) as mcp:
        reply = mcp.call_tool("alpha__add", {"a": 2, "b": 3})
        assert reply.status == 200 and "5" in json.dumps(reply.result), reply
