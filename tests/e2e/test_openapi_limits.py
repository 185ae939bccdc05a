"""Issue 39, large descriptions: GitHub's published REST description (`@octokit/openapi`, pinned
in tests/node/package.json) as OpenAPI servers with the options that bound what it costs.

- `openapi.maxOutputSchemaBytes: 0` lists every tool without an output schema (control: the same
  document without it lists output schemas); a bound between keeps the small ones only, and a
  tool whose output schema was left out still answers with its structured content.
- `openapi.maxCompiledBytes` below what the document compiles to: an inline document refuses
  the config naming the field (the previous config keeps serving); a fetched one (served here
  over HTTP) fails that server's listing with `upstream_unavailable` (-32002) saying so, while
  the other servers of the aggregate listing keep serving.
"""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import MODERN_VERSION, RawMcp, gateway_config, key, new_secret, server, wait_until
from test_openapi_schemas import GITHUB, NOWHERE, package_file

# Bytes the largest output schema of the tools checked below takes is far above this; many are below.
BOUND = 2000


def serve_document(text: bytes):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def tools_of(gw, secret, prefix) -> list[dict]:
    with RawMcp(gw.mcp_url(prefix), secret, MODERN_VERSION) as c:
        return c.list_tools().result["tools"]


def test_output_schemas_bounded_and_a_document_over_its_limit_refused(gateways):
    document = package_file(*GITHUB)
    secret = new_secret("limits")
    config = gateway_config(
        [
            server("full", NOWHERE, openapi={"document": {"file": str(document)}}),
            server("lean", NOWHERE, openapi={"document": {"file": str(document)}, "maxOutputSchemaBytes": 0}),
            server("bounded", NOWHERE, openapi={"document": {"file": str(document)}, "maxOutputSchemaBytes": BOUND}),
        ],
        [key("limits", secret, ["full", "lean", "bounded"])],
    )
    gw = gateways.start(config, ready_timeout=120)
    full, lean, bounded = (tools_of(gw, secret, p) for p in ("full", "lean", "bounded"))
    assert len(full) == len(lean) == len(bounded) > 1000
    with_output = [t for t in full if "outputSchema" in t]
    assert len(with_output) > 500, "the control lists output schemas"
    assert not [t["name"] for t in lean if "outputSchema" in t], "maxOutputSchemaBytes: 0 leaves them all out"
    sizes = {t["name"]: len(json.dumps(t["outputSchema"], separators=(",", ":"))) for t in with_output}
    kept = {t["name"] for t in bounded if "outputSchema" in t}
    assert kept and kept < set(sizes), "a bound keeps some, not all"
    # (the gateway measures its own JSON; allow for key order and escapes)
    assert all(sizes[n] <= BOUND * 1.2 for n in kept), [(n, sizes[n]) for n in kept if sizes[n] > BOUND * 1.2]
    assert all(sizes[n] > BOUND * 0.8 for n in set(sizes) - kept)
    assert len(json.dumps(lean)) < len(json.dumps(full)) / 2

    # An inline document over maxCompiledBytes: refused, naming the field; the previous config serves.
    broken = copy.deepcopy(config)
    broken["servers"][0]["openapi"]["maxCompiledBytes"] = 1 << 20
    offset = len(gw.logs())
    gw.write_config(broken)
    wait_until(lambda: "maxCompiledBytes" in gw.logs()[offset:], 60, what="the refusal")
    refusal = gw.logs()[offset:]
    assert "servers[0].openapi.document" in refusal, refusal[-2000:]
    assert len(tools_of(gw, secret, "full")) == len(full), "the previous config keeps serving"


def test_a_fetched_document_over_its_limit_fails_that_server_only(gateways, rust_upstream):
    document = package_file(*GITHUB).read_bytes()
    httpd = serve_document(document)
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        secret = new_secret("fetched")
        gw = gateways.start(gateway_config(
            [
                server("gh", f"{url}/api", openapi={"documentUrl": "/openapi.json", "maxCompiledBytes": 1 << 20}),
                server("ghok", f"{url}/api", openapi={"documentUrl": "/openapi.json", "maxOutputSchemaBytes": 0}),
                server("ex", rust_upstream.mcp_url),
            ],
            [key("fetched", secret, ["gh", "ghok", "ex"])],
        ))  # fmt: skip
        with RawMcp(gw.mcp_url("gh"), secret, MODERN_VERSION) as c:
            error = c.list_tools().message.get("error") or {}
        assert error.get("code") == -32002 and "maxCompiledBytes" in error.get("message", ""), error
        names, errors, cursor = [], [], None
        with RawMcp(gw.mcp_url(), secret, MODERN_VERSION) as c:
            for _ in range(10):  # (the aggregate listing comes in pages)
                page = c.list_tools(cursor).result
                names += [t["name"] for t in page["tools"]]
                errors += page.get("_meta", {}).get("switchboard.dev/listingErrors", [])
                cursor = page.get("nextCursor")
                if not cursor:
                    break
        assert any(n.startswith("ex__") for n in names) and sum(n.startswith("ghok__") for n in names) > 1000, errors
        assert {e["server"] for e in errors} == {"gh"} and "maxCompiledBytes" in errors[0]["message"], errors
    finally:
        httpd.shutdown()
