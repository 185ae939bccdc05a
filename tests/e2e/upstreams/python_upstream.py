"""An upstream MCP server written with the official Python SDK (mcp 2.3.0), for the e2e tests.

    python python_upstream.py [--port N] [--host H] [--name NAME] [--stateless] [--json]

Port: --port, else $PORT, else 0 (the OS picks one). Once the socket is bound it prints one line
on stdout, the same shape the Rust example upstream prints:

    listening on http://127.0.0.1:PORT

MCP endpoint: POST /mcp (Streamable HTTP). One endpoint serves both protocol eras, as SDK 2.3.0
does out of the box:
- legacy revisions (2024-11-05 .. 2025-11-25): `initialize` handshake; stateful sessions with an
  `Mcp-Session-Id` (default) or, with --stateless, the legacy stateless mode (no session id);
- the 2026-07-28 stateless revision: any request whose `MCP-Protocol-Version` header is not a
  handshake-era version goes to the SDK's single-exchange entry (`server/discover`, per-request
  `_meta` envelope, no session).
Replies are SSE unless --json.

Tools: add(a, b) -> a + b; echo(text) -> text; request_headers() -> the HTTP headers this server
received for that call (lower-case names); progress(steps, delay) -> sends `steps` progress
notifications `delay` seconds apart, then returns "done" (shows SSE relaying event by event);
whoami() -> the --name of this process.

Test helpers (plain HTTP, not MCP):
- GET /_stats -> {"name", "requests", "by_method": {method: count}, "by_path": {path: count},
  "tools": {tool: count}}: every POST is counted, by JSON-RPC method, by path and, for
  tools/call, by tool name (the same keys as the Rust example upstream's /_stats, plus tools);
- POST /_reset -> zeroes the counters (204).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from collections import Counter

import uvicorn
from mcp.server.mcpserver import Context, MCPServer


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT", "0")))
    p.add_argument("--name", default=os.environ.get("UPSTREAM_NAME", "python-upstream"))
    p.add_argument("--stateless", action="store_true", help="legacy era without sessions")
    p.add_argument("--json", action="store_true", help="JSON replies instead of SSE")
    return p.parse_args(argv)


ARGS = parse_args(sys.argv[1:]) if __name__ == "__main__" else parse_args([])

server = MCPServer(name=ARGS.name, version="1.0.0", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def request_headers(ctx: Context) -> dict[str, str]:
    """Return the HTTP request headers this upstream received for this call."""
    headers = ctx.headers or {}
    return {k.lower(): v for k, v in headers.items()}


@server.tool()
async def progress(ctx: Context, steps: int = 3, delay: float = 0.3) -> str:
    """Send `steps` progress notifications `delay` seconds apart, then answer "done"."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
        await asyncio.sleep(delay)
    return "done"


@server.tool()
def whoami() -> str:
    """The name of this upstream process."""
    return ARGS.name


class Stats:
    """ASGI wrapper: counts MCP POSTs by JSON-RPC method and tool, serves /_stats."""

    def __init__(self, app, name: str):
        self.app = app
        self.name = name
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.methods: Counter[str] = Counter()
        self.paths: Counter[str] = Counter()
        self.tools: Counter[str] = Counter()

    def snapshot(self) -> dict:
        return {
            "name": self.name,
            "requests": self.requests,
            "by_method": dict(self.methods),
            "by_path": dict(self.paths),
            "tools": dict(self.tools),
        }

    async def _send_json(self, send, status: int, body: dict | None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": data})

    def _count(self, body: bytes) -> None:
        try:
            msg = json.loads(body)
        except ValueError:
            self.methods["<invalid>"] += 1
            return
        for m in msg if isinstance(msg, list) else [msg]:
            if not isinstance(m, dict) or "method" not in m:
                continue  # a response from the client
            self.methods[m["method"]] += 1
            if m["method"] == "tools/call":
                self.tools[str((m.get("params") or {}).get("name"))] += 1

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope["path"], scope["method"]
        if path == "/_stats" and method == "GET":
            return await self._send_json(send, 200, self.snapshot())
        if path == "/_reset" and method == "POST":
            self.reset()
            return await self._send_json(send, 204, None)
        if method != "POST":
            return await self.app(scope, receive, send)

        # Read the whole body, count it, then replay it to the SDK app.
        chunks: list[bytes] = []
        first_other = None
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                first_other = msg
                break
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body", False):
                break
        body = b"".join(chunks)
        self.requests += 1
        self.paths[path] += 1
        self._count(body)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                if first_other is not None:
                    return first_other
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


def build_app(args: argparse.Namespace):
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=args.stateless,
        json_response=args.json,
        host=args.host,
    )
    return Stats(app, args.name)


def main() -> None:
    args = ARGS
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on accepted sockets whose proto says TCP;
    # without it every response on a kept-alive connection waits ~40 ms for a delayed ACK.
    sock = socket.socket(
        socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP
    )
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(128)  # connections queue until uvicorn starts accepting
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(build_app(args), log_level="warning", access_log=False, lifespan="on")
    srv = uvicorn.Server(config)
    print(
        f"listening on http://{shown}:{port} name={args.name} stateless={args.stateless} json={args.json}",
        flush=True,
    )
    asyncio.run(srv.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
