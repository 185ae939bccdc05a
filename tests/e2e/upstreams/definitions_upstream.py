"""An upstream MCP server whose tool definitions are a file the test rewrites: a rug pull on
demand (a description, a schema, a new tool) for the pinning tests.

    python definitions_upstream.py --tools FILE [--port N] [--host H] [--cache-scope public]
        [--shuffle]

FILE holds a JSON array of tool definitions, read again on every `tools/list`; `tools/call`
answers any listed tool with a text naming it and echoing its arguments (so a test sees what
arguments reached the upstream), and a tool not in the file with -32602. With `--shuffle` every
`tools/list` answers the tools in a new random order (as a server listing from a map does). It speaks the
2026-07-28 stateless form (`server/discover`; one JSON answer per POST) and, for a legacy
client, `initialize` without sessions. No SDK: the test controls every byte of the listing.

Once bound it prints `listening on http://HOST:PORT`. GET /_calls returns the tools/call
requests it answered (name and arguments), GET /_lists how many tools/list it answered, POST
/_reset forgets the calls.
"""

import argparse
import json
import random
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tools", required=True, help="JSON file with the tool definitions")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--cache-scope", choices=["public", "private"],
                   help="the cacheScope its tools/list results say (default: none, which means private)")
    p.add_argument("--shuffle", action="store_true",
                   help="answer each tools/list in a new random order")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    calls = []
    lists = [0]  # tools/list requests answered
    lock = threading.Lock()

    def tools():
        with open(args.tools, encoding="utf-8") as f:
            return json.load(f)

    def listed():
        listed = tools()
        if args.shuffle:
            random.shuffle(listed)
        return listed

    def answer(method, params):
        if method == "server/discover":
            return {
                "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "definitions-upstream", "version": "1"},
            }
        if method == "initialize":
            return {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "definitions-upstream", "version": "1"},
            }
        if method == "tools/list":
            with lock:
                lists[0] += 1
            if args.cache_scope:
                return {"tools": listed(), "cacheScope": args.cache_scope}
            return {"tools": listed()}
        if method == "tools/call":
            name = params.get("name")
            if not any(t.get("name") == name for t in tools()):
                raise KeyError(name)
            arguments = params.get("arguments") or {}
            with lock:
                calls.append({"name": name, "arguments": arguments})
            text = f"{name} called with {json.dumps(arguments, sort_keys=True)}"
            return {"content": [{"type": "text", "text": text}]}
        if method == "ping":
            return {}
        raise LookupError(method)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def reply(self, status, body=None):
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            if body is not None:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/_calls":
                with lock:
                    return self.reply(200, list(calls))
            if self.path == "/_lists":
                with lock:
                    return self.reply(200, lists[0])
            self.reply(405 if self.path == "/mcp" else 404)

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path == "/_reset":
                with lock:
                    calls.clear()
                return self.reply(200, {})
            if self.path != "/mcp":
                return self.reply(404)
            try:
                msg = json.loads(raw)
            except ValueError:
                return self.reply(400, {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}})
            if "id" not in msg:  # a notification
                return self.reply(202)
            method, params = msg.get("method", ""), msg.get("params") or {}
            try:
                result = answer(method, params)
            except KeyError as e:
                return self.reply(200, {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32602, "message": f"unknown tool: {e.args[0]}"}})
            except LookupError:
                return self.reply(200, {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": f"method not found: {method}"}})
            self.reply(200, {"jsonrpc": "2.0", "id": msg["id"], "result": result})

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    host, port = server.server_address[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
