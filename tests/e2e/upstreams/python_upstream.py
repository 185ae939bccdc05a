"""An upstream MCP server written with the official Python SDK (mcp 2.3.0), for the e2e tests.

    python python_upstream.py [--port N] [--host H] [--name NAME] [--stateless] [--json]
                              [--legacy-only] [--instructions TEXT] [--stdio] [--changing]
                              [--resumable RETRY_MS] [--traced] [--apps]

With --stdio it speaks MCP on stdin/stdout (for the stdio bridge's tests) and serves no HTTP;
runs() tells the long tools' counts there.

With --apps it serves an MCP App (the SDK's `io.modelcontextprotocol/ui` extension, mcp.server.apps):
show_weather(city), linked to the UI resource ui://weather/view.html (text/html;profile=mcp-app),
and refresh_weather(), which only the view calls (`_meta.ui.visibility: ["app"]`).

With --traced (and OTEL_EXPORTER_OTLP_ENDPOINT set) the SDK's own OpenTelemetry middleware (on in every mcp 2.3.0 server: a span per
request, the child of the trace context in the request's `_meta`) exports its spans with the
OpenTelemetry SDK's OTLP/HTTP exporter (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME), from a
background thread within a tenth of a second of their end; and the tool trace_context() answers the `traceparent`/`tracestate` its
request's `_meta` carried.

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
Replies are SSE unless --json. With --legacy-only the 2026-07-28 entry is switched off: a request
in the modern form (an `MCP-Protocol-Version` header that is not a handshake-era version) gets
what a legacy-only server answers a session-less request, HTTP 400 with a -32600 "Missing
session ID" error, so a dual-era client falls back to `initialize`. --instructions sets the
server's instructions (initialize / server/discover).

With --resumable RETRY_MS the server keeps an event store (in memory) and sends `retry: RETRY_MS`
with the priming event of every SSE stream of a 2025-11-25 session, as the SDK does for stream
polling (SEP-1699: a priming event with an id, then the server may close the stream and the
client resumes with a GET carrying `Last-Event-ID`). It then also serves the tool `poll` (below)
and counts the resuming GETs in /_stats.

Tools: add(a, b) -> a + b; echo(text) -> text; request_headers() -> the HTTP headers this server
received for that call (lower-case names); progress(steps, delay, gate, hold) -> sends `steps`
progress notifications `delay` seconds apart, then returns "done" (shows SSE relaying event by
event); with a `gate` name it answers only once the test opened that gate (POST /_release),
"not released" after `hold` seconds (default 10): a test that opens the gate when the
notifications have reached its client shows by ordering, not timing, that they were relayed while
the upstream still held its answer;
whoami() -> the --name of this process;
sample(prompt) -> asks the client's LLM (sampling/createMessage) with `prompt` and returns the
text it answered; ask(question) -> asks the user (form elicitation, one string field `answer`)
and returns the answer; roots() -> the URIs of the client's roots (roots/list). These three use
the SDK's resolvers, so the same tool works in both eras: a legacy session gets a
server-to-client request on the tools/call stream, a 2026-07-28 request gets an
`input_required` result (and the retry carries inputResponses/requestState). Without the
client capability they fail with -32021 (2026-07-28) or an error (legacy);
touch(uri) -> publishes notifications/resources/updated for `uri` to every open
subscriptions/listen stream that asked for it, returns "touched";
slow_stream(seconds, interval) -> sends a progress notification every `interval` seconds for
`seconds` seconds, then returns "finished"; a run that is cancelled (the client went away) is
counted in /_stats "cancelled".

poll(rounds, gate, hold) (only with --resumable) -> for each round: a progress notification
"before close N", then the SDK's `close_sse_stream()` (the connection ends without the answer),
then "after close N" (stored while no client is connected, replayed on its resume), then it waits
until the client has resumed the stream; then, with a `gate`, it waits for the gate (at most `hold`
seconds); answers "answered after N closes". A request in the 2026-07-28 form has no stream to
close (that revision removed resumption; the SDK offers no `close_sse_stream()` there): the
notifications and the answer come on the one stream, and the answer says "after 0 closes".

With --changing it also serves withdraw(name, kind="tool", notify=True): removes the tool (or,
with kind "prompt", the prompt) called `name` from this process and, with `notify`, announces it:
`notifications/tools/list_changed` (or prompts/) on the call's own stream for a legacy request
(request-scoped, as a legacy server tells a client while it serves a call), and to the open
`subscriptions/listen` streams that asked for it (2026-07-28). Answers "withdrawn <name>"
(a name it does not have: a tool error). Without the flag the tool list is the one above.

Resources: e2e://counter (text: how many times touch() ran); the template e2e://notes/{name}
(text: "note <name>").
Prompts: summarize(text) -> one user message "Summarize: <text>".

Test helpers (plain HTTP, not MCP):
- GET /_stats -> {"name", "requests", "by_method": {method: count}, "by_path": {path: count},
  "tools": {tool: count}, "replies": n, "refused_modern": n, "deletes": {path: count},
  "started": {tool: count}, "cancelled": {tool: count}, "finished": {tool: count}}: every POST
  the server handles is counted, by JSON-RPC method, by path and, for tools/call, by tool name
  (the same keys as the Rust example upstream's /_stats, plus tools); "replies" counts JSON-RPC
  responses clients POSTed (answers to server-to-client requests); "refused_modern" counts the
  2026-07-28-form POSTs a --legacy-only server refused (counted nowhere else); "deletes" counts
  HTTP DELETEs (session ends) by path;
  started/cancelled/finished count runs of the long tools (slow_stream, poll) that began, were
  cancelled (asyncio.CancelledError) and ran to the end; "resumes" counts GETs carrying
  `Last-Event-ID` (a client resuming a stream), "gets" every GET to the MCP path,
  "resume_headers" the Authorization, Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID and
  Accept headers of each resuming GET;
- POST /_reset -> zeroes the counters (204);
- POST /_release with {"gate": NAME} -> opens that gate of the `progress` tool, before or after
  the tool reaches it (200 {"released": NAME}).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from collections import Counter
from typing import Annotated

import uvicorn
from mcp.server.mcpserver import Context, Elicit, ListRoots, MCPServer, Resolve, Sample
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp_types import (
    CreateMessageResult,
    ListRootsResult,
    PromptListChangedNotification,
    SamplingMessage,
    TextContent,
    ToolListChangedNotification,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import BaseModel


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT", "0")))
    p.add_argument("--name", default=os.environ.get("UPSTREAM_NAME", "python-upstream"))
    p.add_argument("--stateless", action="store_true", help="legacy era without sessions")
    p.add_argument("--json", action="store_true", help="JSON replies instead of SSE")
    p.add_argument("--legacy-only", action="store_true", help="refuse the 2026-07-28 form like a legacy server")
    p.add_argument("--instructions", default=None, help="the server's instructions")
    p.add_argument("--stdio", action="store_true", help="speak MCP on stdin/stdout instead of HTTP (for the stdio bridge)")
    p.add_argument(
        "--resumable",
        type=int,
        default=None,
        metavar="RETRY_MS",
        help="keep an event store, send retry: RETRY_MS, serve the stream-closing tool `poll`",
    )
    p.add_argument("--changing", action="store_true", help="serve withdraw(), which removes a tool or prompt and announces it")
    p.add_argument("--traced", action="store_true", help="export the SDK's spans over OTLP/HTTP; serve trace_context()")
    p.add_argument("--apps", action="store_true", help="serve an MCP App: show_weather, refresh_weather, ui://weather/view.html")
    return p.parse_args(argv)


ARGS = parse_args(sys.argv[1:]) if __name__ == "__main__" else parse_args([])

APP_URI = "ui://weather/view.html"
# What the host renders: a view that asks the server (through the host) for fresh data.
APP_HTML = """<!doctype html><html><body><h1 id="title">Weather view</h1>
<script type="module">/* the view calls refresh_weather through the host (MCP Apps) */</script></body></html>"""


def apps_extension():
    """An MCP App as the SDK makes one: a tool linked to its UI resource, an app-only tool."""
    from mcp.server.apps import Apps

    apps = Apps()

    @apps.tool(resource_uri=APP_URI, description="Show the weather of a city in an interactive view.")
    def show_weather(city: str = "Lisbon") -> str:
        return f"sunny in {city}"

    @apps.tool(resource_uri=APP_URI, visibility=["app"], description="Fresh data for the weather view.")
    def refresh_weather() -> str:
        return "refreshed"

    apps.add_html_resource(APP_URI, APP_HTML, name="weather view")
    return apps


server = MCPServer(
    name=ARGS.name,
    version="1.0.0",
    instructions=ARGS.instructions,
    log_level="WARNING",
    **({"extensions": [apps_extension()]} if ARGS.apps else {}),
)


def export_spans() -> None:
    """The OpenTelemetry SDK as the process's tracer provider, exporting spans off the event
    loop (an export never holds a request) and soon after they end (the process may be killed,
    not stopped, when the test is done)."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()  # service.name from OTEL_SERVICE_NAME
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=100))
    trace.set_tracer_provider(provider)


if ARGS.traced:
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        export_spans()

    @server.tool()
    def trace_context(ctx: Context) -> dict[str, str]:
        """Return the trace context (traceparent, tracestate) this request's _meta carried."""
        meta = ctx.request_context.meta or {}
        get = meta.get if isinstance(meta, dict) else lambda k: getattr(meta, k, None)
        return {k: v for k in ("traceparent", "tracestate") if isinstance(v := get(k), str)}

# Runs of the long tools, shared with the Stats wrapper (/_stats).
RUNS: dict[str, Counter[str]] = {"started": Counter(), "cancelled": Counter(), "finished": Counter()}
TOUCHES = Counter()
# The gates `progress` holds its answer at, by name (opened by POST /_release).
GATES: dict[str, asyncio.Event] = {}


def gate_of(name: str) -> asyncio.Event:
    return GATES.setdefault(name, asyncio.Event())


async def released(gate: str, hold: float) -> bool:
    """Waits for `gate` to be released (POST /_release), at most `hold` seconds; the gate is
    forgotten either way."""
    try:
        await asyncio.wait_for(gate_of(gate).wait(), hold)
        return True
    except TimeoutError:
        return False
    finally:
        GATES.pop(gate, None)


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
async def progress(ctx: Context, steps: int = 3, delay: float = 0.3, gate: str = "", hold: float = 10.0) -> str:
    """Send `steps` progress notifications `delay` seconds apart, then answer "done"; with a
    `gate`, only once it is opened (POST /_release), else "not released" after `hold` seconds."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
        await asyncio.sleep(delay)
    if gate and not await released(gate, hold):
        return "not released"
    return "done"


@server.tool()
def whoami() -> str:
    """The name of this upstream process."""
    return ARGS.name


class Answer(BaseModel):
    answer: str


def ask_user(question: str) -> Elicit[Answer]:
    return Elicit(question, Answer)


def sample_llm(prompt: str) -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text=prompt))], max_tokens=64)


def client_roots() -> ListRoots:
    return ListRoots()


@server.tool()
async def sample(prompt: str, sampled: Annotated[CreateMessageResult, Resolve(sample_llm)]) -> str:
    """Ask the client's LLM (sampling/createMessage) and return the text it answered."""
    content = sampled.content
    return content.text if isinstance(content, TextContent) else str(content)


@server.tool()
async def ask(question: str, answered: Annotated[Answer, Resolve(ask_user)]) -> str:
    """Ask the user (form elicitation) and return the answer."""
    return answered.answer


@server.tool()
async def roots(listing: Annotated[ListRootsResult, Resolve(client_roots)]) -> list[str]:
    """The URIs of the client's roots (roots/list)."""
    return [str(r.uri) for r in listing.roots]


@server.resource("e2e://counter")
def counter() -> str:
    """How many times touch() ran."""
    return str(sum(TOUCHES.values()))


@server.resource("e2e://notes/{name}")
def note(name: str) -> str:
    """One note, by name."""
    return f"note {name}"


@server.prompt()
def summarize(text: str) -> str:
    """Ask for a summary of the text."""
    return f"Summarize: {text}"


@server.tool()
async def touch(ctx: Context, uri: str = "e2e://counter") -> str:
    """Publish notifications/resources/updated for `uri` to the open subscriptions/listen streams."""
    TOUCHES[uri] += 1
    await ctx.notify_resource_updated(uri)
    return "touched"


@server.tool()
async def slow_stream(ctx: Context, seconds: float = 30.0, interval: float = 0.2) -> str:
    """Send a progress notification every `interval` seconds for `seconds` seconds, then "finished"."""
    RUNS["started"]["slow_stream"] += 1
    steps = max(1, int(seconds / interval))
    try:
        for i in range(steps):
            await ctx.report_progress(i + 1, steps, f"tick {i + 1}")
            await asyncio.sleep(interval)
    except asyncio.CancelledError:
        RUNS["cancelled"]["slow_stream"] += 1
        raise
    RUNS["finished"]["slow_stream"] += 1
    return "finished"


def runs() -> str:
    """The long tools' runs in this process: started, cancelled, finished (JSON), as /_stats has
    them (a stdio process has no HTTP)."""
    return json.dumps({k: dict(v) for k, v in RUNS.items()})


# Only over stdio (where /_stats cannot be asked): the HTTP server's tool list stays as the
# tests of both eras expect it.
if ARGS.stdio:
    server.tool()(runs)


class MemoryEventStore(EventStore):
    """Every event of every stream in memory, in the order stored (a test server's streams are
    few and short). Event ids are one counter for the whole process, so they are unique across
    the streams of a session, as the transport asks."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, object]] = []  # (event id, stream id, message or None)
        self.by_id: dict[str, int] = {}

    async def store_event(self, stream_id, message):
        event_id = str(len(self.events) + 1)
        self.by_id[event_id] = len(self.events)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id, send_callback: EventCallback):
        index = self.by_id.get(last_event_id)
        if index is None:
            return None
        stream_id = self.events[index][1]
        for event_id, stream, message in self.events[index + 1 :]:
            if stream == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


async def resumed(ctx: Context, hold: float) -> None:
    """Waits until the client resumed this request's stream after `close_sse_stream()` (at most
    `hold` seconds). The SDK's transport loses a message sent between the replay of a resumed
    stream and the moment it serves the stream live (its replay-to-live window, a known gap): a
    tool that goes on only once the stream is live again makes the test about the client, not
    about that gap. The one private look at the SDK in this file (mcp 2.3.0)."""
    request = ctx.request_context.request
    session_id = request.headers.get("mcp-session-id") if request is not None else None
    transports = server.session_manager._server_instances  # noqa: SLF001 (see above)
    loop = asyncio.get_running_loop()
    until = loop.time() + hold
    while loop.time() < until:
        transport = transports.get(session_id)
        if transport is not None and ctx.request_id in transport._request_streams:  # noqa: SLF001
            return
        await asyncio.sleep(0.01)


async def poll(ctx: Context, rounds: int = 2, gate: str = "", hold: float = 30.0) -> str:
    """For each round: progress "before close N", close the SSE stream (the client must resume
    it with Last-Event-ID), progress "after close N" (replayed on the resume); then the gate, if
    any; answers "answered after N closes"."""
    RUNS["started"]["poll"] += 1
    closes = 0
    try:
        for i in range(rounds):
            await ctx.report_progress(2 * i + 1, 2 * rounds, f"before close {i + 1}")
            # None for a request in the 2026-07-28 form (and before 2025-11-25): nothing to close.
            closable = ctx.request_context.close_sse_stream is not None
            await ctx.close_sse_stream()
            await ctx.report_progress(2 * i + 2, 2 * rounds, f"after close {i + 1}")
            if closable:
                closes += 1
                await resumed(ctx, hold)
        if gate and not await released(gate, hold):
            return "not released"
    except asyncio.CancelledError:
        RUNS["cancelled"]["poll"] += 1
        raise
    RUNS["finished"]["poll"] += 1
    return f"answered after {closes} closes"


if ARGS.resumable is not None:
    server.tool()(poll)


async def withdraw(ctx: Context, name: str, kind: str = "tool", notify: bool = True) -> str:
    """Remove the tool (kind "tool") or prompt (kind "prompt") called `name`; with `notify`,
    announce that the list changed."""
    if kind == "tool":
        server.remove_tool(name)
        legacy, modern = ToolListChangedNotification(), ctx.notify_tools_changed
    elif kind == "prompt":
        server.remove_prompt(name)
        legacy, modern = PromptListChangedNotification(), ctx.notify_prompts_changed
    else:
        raise ValueError(f"kind {kind!r}: tool or prompt")
    if notify:
        if ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
            # On this call's stream, which a legacy client (and a gateway) reads now.
            await ctx.session.send_notification(legacy, related_request_id=ctx.request_context.request_id)
        else:
            await modern()
    return f"withdrawn {name}"


if ARGS.changing:
    server.tool()(withdraw)


# The `_meta` keys the 2026-07-28 revision reserves for what the legacy revisions say in
# `initialize` and the session.
MODERN_RESERVED_META = {
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
    "io.modelcontextprotocol/logLevel",
}


class Stats:
    """ASGI wrapper: counts MCP POSTs by JSON-RPC method and tool, serves /_stats."""

    def __init__(self, app, name: str, legacy_only: bool = False):
        self.app = app
        self.name = name
        self.legacy_only = legacy_only
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.methods: Counter[str] = Counter()
        self.paths: Counter[str] = Counter()
        self.tools: Counter[str] = Counter()
        self.replies = 0
        self.refused = 0
        self.deletes: Counter[str] = Counter()
        self.gets = 0
        self.resumes = 0
        self.resume_headers: list[dict[str, str]] = []
        # 2026-07-28 reserved `_meta` keys that arrived on legacy-form requests (where they do
        # not belong: a legacy session carries them; a body-first server would refuse them).
        self.foreign_meta: Counter[str] = Counter()
        for runs in RUNS.values():
            runs.clear()

    def snapshot(self) -> dict:
        return {
            "name": self.name,
            "requests": self.requests,
            "by_method": dict(self.methods),
            "by_path": dict(self.paths),
            "tools": dict(self.tools),
            "replies": self.replies,
            "refused_modern": self.refused,
            "deletes": dict(self.deletes),
            "gets": self.gets,
            "resumes": self.resumes,
            "resume_headers": self.resume_headers,
            "foreign_meta": dict(self.foreign_meta),
            **{kind: dict(runs) for kind, runs in RUNS.items()},
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

    def _count(self, body: bytes, modern_form: bool = False) -> None:
        try:
            msg = json.loads(body)
        except ValueError:
            self.methods["<invalid>"] += 1
            return
        for m in msg if isinstance(msg, list) else [msg]:
            if not isinstance(m, dict):
                continue
            if "method" not in m:
                if "result" in m or "error" in m:
                    self.replies += 1  # a client's answer to a server-to-client request
                continue
            self.methods[m["method"]] += 1
            meta = (m.get("params") or {}).get("_meta") if isinstance(m.get("params"), dict) else None
            if not modern_form and isinstance(meta, dict):
                for k in meta:
                    if k in MODERN_RESERVED_META:
                        self.foreign_meta[k] += 1
            if m["method"] == "tools/call":
                self.tools[str((m.get("params") or {}).get("name"))] += 1

    @staticmethod
    def _modern_form(scope) -> bool:
        """A request in the 2026-07-28 form, told by its `MCP-Protocol-Version` header as the SDK
        tells it (a legacy server ignores `_meta` keys it does not know)."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        version = headers.get("mcp-protocol-version")
        return version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope["path"], scope["method"]
        if path == "/_stats" and method == "GET":
            return await self._send_json(send, 200, self.snapshot())
        if path == "/_reset" and method == "POST":
            self.reset()
            return await self._send_json(send, 204, None)
        if path == "/_release" and method == "POST":
            body = b""
            while True:
                msg = await receive()
                body += msg.get("body", b"")
                if msg["type"] != "http.request" or not msg.get("more_body", False):
                    break
            try:
                name = json.loads(body)["gate"]
            except (ValueError, KeyError, TypeError):
                return await self._send_json(send, 400, {"error": 'expected {"gate": NAME}'})
            gate_of(str(name)).set()
            return await self._send_json(send, 200, {"released": name})
        if method == "DELETE":
            self.deletes[path] += 1
        if method == "GET" and path == "/mcp":
            self.gets += 1
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            if "last-event-id" in headers:
                self.resumes += 1
                kept = ("authorization", "mcp-session-id", "mcp-protocol-version", "last-event-id", "accept")
                self.resume_headers.append({k: headers[k] for k in kept if k in headers})
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
        if self.legacy_only and self._modern_form(scope):
            # Refused before the server sees it: counted apart, not as a request served.
            self.refused += 1
            error = {"code": -32600, "message": "Bad Request: Missing session ID"}
            return await self._send_json(send, 400, {"jsonrpc": "2.0", "id": "server-error", "error": error})
        self.requests += 1
        self.paths[path] += 1
        self._count(body, self._modern_form(scope))
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
    resumable = {}
    if args.resumable is not None:
        resumable = {"event_store": MemoryEventStore(), "retry_interval": args.resumable}
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=args.stateless,
        json_response=args.json,
        host=args.host,
        **resumable,
    )
    return Stats(app, args.name, legacy_only=args.legacy_only)


def main() -> None:
    args = ARGS
    if args.stdio:
        server.run("stdio")
        return
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
        f"listening on http://{shown}:{port} name={args.name} stateless={args.stateless} json={args.json}"
        f" legacy_only={args.legacy_only} resumable={args.resumable}",
        flush=True,
    )
    asyncio.run(srv.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
