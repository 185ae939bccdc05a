"""`list_changed` means "list again now" (issue 35, item 6).

The gateway caches each server's listings for `gateway.listingTtl`. An upstream that withdraws
a tool says so with `notifications/tools/list_changed` (prompts: `.../prompts/list_changed`); a
client that reads it lists again at once, and must not get the withdrawn tool back from the
gateway's cache. The gateway notes each announcement as it reads it from the upstream, before
relaying it, and a listing walked before the last announcement is not answered from.

The upstreams are the official Python SDK server (`upstreams/python_upstream.py --changing`),
whose `withdraw` tool removes a tool or prompt from its process and announces it the way each
era does: a legacy server on the call's own stream, a 2026-07-28 server on the
`subscriptions/listen` streams that asked for it. The clients are the official Python SDK
client: a legacy one hears the notification on its call (its message handler), a 2026-07-28
one on `Client.listen`. The withdrawal is heard on `/mcp/<prefix>`, on `/mcp` (prefixed names)
and on a virtual server in turn; as soon as it has been heard, every one of them lists again and
the tool (or prompt) is gone. `/mcp` and the virtual server answer listings from the cache;
`/mcp/<prefix>` passes them through, so a change heard there must outdate the others' cache.

Control, in both eras: a withdrawal the upstream does not announce (`notify: false`) leaves the
tool in the cached listings of `/mcp` and the virtual server, and the upstream is not asked
again (its count of `tools/list` grows only by the pass-through): the cache is what the
announcement outdates.
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import pytest
from harness import (
    MODERN_VERSION,
    gateway_config,
    key,
    new_secret,
    run_async,
    sdk_client,
    server,
    start_python_upstream,
)

# Long enough that no listing in a test expires on its own.
LISTING_TTL = "10m"


class Heard:
    """A legacy client's message handler: the list changes it heard, and a wake-up."""

    def __init__(self):
        self.methods: list[str] = []
        self.changed = anyio.Event()

    async def handler(self, message: Any) -> None:
        method = getattr(message, "method", None)
        if isinstance(method, str) and method.endswith("/list_changed"):
            self.methods.append(method)
            self.changed.set()


def world(gateways, procs, era: str):
    """A `--changing` Python upstream the gateway speaks `era` to, as `up` on /mcp/up, on /mcp
    and behind the virtual server `shelf` (every tool and prompt of it)."""
    upstream = start_python_upstream(procs, "changing", legacy_only=era == "legacy", changing=True)
    secret = new_secret("list-changed")
    config = gateway_config([server("up", upstream.mcp_url)], [key("caller", secret, ["up", "shelf"])],
                            listingTtl=LISTING_TTL)
    config["virtualServers"] = [{"name": "shelf", "sources": [{"server": "up", "tools": {}, "prompts": {}}]}]
    return gateways.start(config), secret, upstream


async def names(c: Any, kind: str) -> list[str]:
    if kind == "prompt":
        return [p.name for p in (await c.list_prompts()).prompts]
    return [t.name for t in (await c.list_tools()).tools]


def lists(upstream, kind: str) -> int:
    return upstream.stats()["by_method"].get(f"{kind}s/list", 0)


class Endpoints:
    """The three ways to the upstream, each with the name a tool or prompt has there."""

    def __init__(self, gw):
        self.urls = {"/mcp/up": gw.mcp_url("up"), "/mcp": gw.mcp_url(), "/mcp/shelf": gw.mcp_url("shelf")}

    @staticmethod
    def shown(endpoint: str, name: str) -> str:
        return f"up__{name}" if endpoint == "/mcp" else name


async def listing_everywhere(clients: dict[str, Any], kind: str) -> dict[str, list[str]]:
    return {endpoint: await names(c, kind) for endpoint, c in clients.items()}


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_a_relayed_list_changed_outdates_the_cached_listings(gateways, procs, era: str):
    """The withdrawal is heard on each endpoint in turn; right after, every endpoint lists
    without it: `/mcp` and the virtual server answer from the cache unless it was outdated
    (`/mcp/up` passes listings through, and shows the upstream's own list)."""
    gw, secret, upstream = world(gateways, procs, era)
    endpoints = Endpoints(gw)
    # (where the withdrawal is heard, what is withdrawn)
    plan = [("/mcp/up", "add", "tool"), ("/mcp", "echo", "tool"), ("/mcp/shelf", "whoami", "tool"),
            ("/mcp/up", "summarize", "prompt")]

    async def scenario():
        done = []
        heard = {endpoint: Heard() for endpoint in endpoints.urls}
        async with contextlib.AsyncExitStack() as stack:
            clients = {endpoint: await stack.enter_async_context(
                sdk_client(url, secret, era, message_handler=heard[endpoint].handler))
                for endpoint, url in endpoints.urls.items()}
            subs = {}
            if era != "legacy":
                for endpoint, c in clients.items():
                    sub = await stack.enter_async_context(c.listen(tools_list_changed=True, prompts_list_changed=True))
                    assert sub.honored.tools_list_changed and sub.honored.prompts_list_changed, (endpoint, sub.honored)
                    subs[endpoint] = sub
            for endpoint, name, kind in plan:
                before = await listing_everywhere(clients, kind)
                c, shown = clients[endpoint], endpoints.shown(endpoint, "withdraw")
                result: dict[str, Any] = {}
                async with anyio.create_task_group() as tg:

                    async def call(c=c, shown=shown, name=name, kind=kind):
                        result["withdraw"] = await c.call_tool(shown, {"name": name, "kind": kind})

                    tg.start_soon(call)
                    with anyio.fail_after(15):
                        if era == "legacy":
                            # A legacy client hears it on the withdraw call's own stream.
                            await heard[endpoint].changed.wait()
                            heard[endpoint].changed = anyio.Event()
                        else:
                            # A 2026-07-28 client on its subscriptions/listen stream: every
                            # endpoint's subscription hears it.
                            for sub in subs.values():
                                event = await sub.__anext__()
                                assert kind in type(event).__name__.lower(), event
                    # At once: the withdraw call may not even have answered yet.
                    after = await listing_everywhere(clients, kind)
                assert not result["withdraw"].is_error, result["withdraw"]
                for where in endpoints.urls:
                    shown = endpoints.shown(where, name)
                    assert shown in before[where], f"{era}, heard on {endpoint}: {shown} before on {where}: {before[where]}"
                    assert shown not in after[where], (
                        f"{era}, heard on {endpoint}: {where} still lists {shown} right after list_changed: {after[where]}")
                    assert set(after[where]) == set(before[where]) - {shown}, (where, before[where], after[where])
                done.append((endpoint, name))
        return done, {endpoint: h.methods for endpoint, h in heard.items()}

    done, methods = run_async(scenario, timeout=180)
    assert done == [(endpoint, name) for endpoint, name, _ in plan], done
    if era == "legacy":
        assert methods == {"/mcp/up": ["notifications/tools/list_changed", "notifications/prompts/list_changed"],
                           "/mcp": ["notifications/tools/list_changed"],
                           "/mcp/shelf": ["notifications/tools/list_changed"]}, methods


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_without_the_announcement_the_cache_still_serves(gateways, procs, era: str):
    """Control: the same withdrawal unannounced. The cached listings of `/mcp` and the virtual
    server still show the tool and the upstream is not asked again; its own endpoint, which
    passes listings through, does not show it."""
    gw, secret, upstream = world(gateways, procs, era)
    endpoints = Endpoints(gw)

    async def scenario():
        async with contextlib.AsyncExitStack() as stack:
            clients = {endpoint: await stack.enter_async_context(sdk_client(url, secret, era))
                       for endpoint, url in endpoints.urls.items()}
            first = await listing_everywhere(clients, "tool")
            asked = lists(upstream, "tool")
            silent = await clients["/mcp"].call_tool("up__withdraw", {"name": "add", "notify": False})
            second = await listing_everywhere(clients, "tool")
            return first, asked, silent, second

    first, asked, silent, second = run_async(scenario)
    assert not silent.is_error, silent
    for where in ("/mcp", "/mcp/shelf"):
        shown = endpoints.shown(where, "add")
        assert shown in first[where] and shown in second[where], (where, first[where], second[where])
    assert "add" in first["/mcp/up"] and "add" not in second["/mcp/up"], second["/mcp/up"]
    assert lists(upstream, "tool") == asked + 1, "only /mcp/up asked the upstream (it passes listings through)"
