"""`subscriptions/listen` on the aggregate endpoint: one subscription per server in scope,
fanned in. The client subscribes by the prefixed URIs `/mcp` lists and reads, gets one
acknowledgement for all servers, and each update names the resource by the URI it reads on
`/mcp`, with the client's own subscription id."""

from __future__ import annotations

import time

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

COUNTER = "e2e://counter"


def test_listen_on_mcp_fans_in_and_prefixes_uris(gateways, procs):
    docs = start_python_upstream(procs, "docs")
    wiki = start_python_upstream(procs, "wiki")
    secret = new_secret("listen-client")
    config = gateway_config(
        [server("docs", docs.mcp_url, timeout="1s"), server("wiki", wiki.mcp_url, timeout="1s")],
        [key("client", secret, ["docs", "wiki"])],
    )
    gw = gateways.start(config)
    wanted = [f"docs__{COUNTER}", f"wiki__{COUNTER}"]

    async def scenario():
        import anyio

        async with sdk_client(gw.mcp_url(), secret, MODERN_VERSION) as c:
            opened = time.monotonic()
            async with c.listen(resource_subscriptions=wanted, tools_list_changed=True) as sub:
                honored = sorted(sub.honored.resource_subscriptions or [])
                # Past the servers' 1 s timeout: the fanned-in stream stays open.
                await anyio.sleep(2.2)
                await c.call_tool("wiki__touch", {"uri": COUNTER})
                with anyio.fail_after(5):
                    event = await sub.__anext__()
                arrived = time.monotonic() - opened
            read = await c.read_resource(event.uri)
            return honored, event, arrived, read

    honored, event, arrived, read = run_async(scenario, timeout=40)
    assert honored == sorted(wanted), honored
    assert event.uri == f"wiki__{COUNTER}", f"the update must name the URI /mcp reads it by: {event}"
    # (the touch is sent only after 2.2 s, past the servers' 1 s timeout: a figure, not a check;
    # the check is that the stream was still open to deliver it)
    print(f"the update arrived {arrived:.2f}s after listen opened")
    texts = [getattr(c, "text", None) for c in read.contents]
    assert any(texts), f"reading {event.uri} on /mcp: {read}"
