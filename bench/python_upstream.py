"""The e2e tests' Python SDK upstream (tests/e2e/upstreams/python_upstream.py), served for the
benchmarks with TCP_NODELAY on its connections.

    python bench/python_upstream.py [same arguments as the e2e upstream]

Why a wrapper: the e2e upstream binds its own socket as `socket.socket(AF_INET, SOCK_STREAM)`
(protocol 0) and hands it to uvicorn; asyncio only sets TCP_NODELAY on accepted sockets whose
`proto` is IPPROTO_TCP, so on a kept-alive connection every response waits for the client's
delayed ACK (about 40 ms per request; a fresh connection per request hides it). Benchmarks
reuse connections, so they would measure that stall instead of the SDK. This wrapper builds the
same app (same tools, same /_stats) and binds with IPPROTO_TCP. The fix for the e2e upstream
itself is proposed in bench/proposals/0004-python-upstream-tcp-nodelay.diff.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests/e2e/upstreams"))
import python_upstream as up  # noqa: E402  (parses sys.argv like the e2e upstream)
import uvicorn  # noqa: E402


def main() -> None:
    args = up.ARGS
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(1024)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(up.build_app(args), log_level="warning", access_log=False, lifespan="on")
    srv = uvicorn.Server(config)
    print(f"listening on http://{shown}:{port} name={args.name} stateless={args.stateless} json={args.json} nodelay=1",
          flush=True)
    asyncio.run(srv.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
