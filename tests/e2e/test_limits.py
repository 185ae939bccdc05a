"""Per-key and per-server limits (`limits` on keys and servers): a request over a limit is
answered 429 with `Retry-After` before any upstream I/O, as a JSON-RPC error on MCP, a REST
error on REST and the provider's own error shape on the LLM endpoints; other keys are not
slowed down; a reload with unchanged limits keeps their state; refusals are counted per key."""

from __future__ import annotations

import statistics
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
from harness import (
    MODERN_VERSION,
    RawMcp,
    call_result_value,
    gateway_config,
    key,
    method_count,
    new_secret,
    rest_call,
    server,
    wait_until,
)
from llm_harness import llm_config, start_provider

LIMITED = -32004
# How long the calls that hold a limit's slots take upstream. They must outlast the call that is
# refused meanwhile; the tests check that they did (an ordering) rather than assume it.
SLOW_MS = 3000


def _add(mcp: RawMcp):
    return mcp.call_tool("alpha__add", {"a": 2, "b": 3})


def _wait_in_flight(upstream, before: int, n: int) -> None:
    """Waits until `n` more `tools/call`s than `before` reached the upstream (its /_stats counts a
    request when it arrives, before it sleeps), i.e. they hold their slots in the gateway, which
    takes them before any upstream I/O."""
    wait_until(
        lambda: method_count(upstream, "tools/call") >= before + n,
        15,
        interval=0.02,
        what=f"{n} slow call(s) to reach the upstream",
    )


def _assert_limited(reply, scope: str, name: str, limit: str) -> None:
    assert reply.status == 429, f"HTTP {reply.status} {reply.raw[:300]!r}"
    assert int(reply.headers["retry-after"]) >= 1, reply.headers
    error = reply.messages[-1]["error"]
    assert error["code"] == LIMITED, error
    assert error["data"][scope] == name and error["data"]["limit"] == limit, error
    assert "over its" in error["message"], error


def test_rate_limit_refuses_before_the_upstream_and_spares_other_keys(gateways, rust_upstream):
    limited, free = new_secret("limited"), new_secret("free")
    gw = gateways.start(
        gateway_config(
            [server("alpha", rust_upstream.mcp_url)],
            [
                key("limited", limited, ["alpha"], limits={"rate": "1/h", "burst": 3}),
                key("free", free, ["alpha"]),
            ],
        )
    )
    before = method_count(rust_upstream, "tools/call")
    with RawMcp(gw.mcp_url(), limited, MODERN_VERSION) as mcp, RawMcp(gw.mcp_url(), free, MODERN_VERSION) as other:
        for i in range(3):
            reply = _add(mcp)
            assert reply.status == 200 and call_result_value(reply.messages[-1]["result"]) == 5, f"call {i}"
        for _ in range(5):
            _assert_limited(_add(mcp), "key", "default/limited", "rate")
            reply = _add(other)
            assert reply.status == 200, "another key is not limited"
    assert method_count(rust_upstream, "tools/call") - before == 3 + 5, "a refused call reached the upstream"

    # REST: the same refusal with the REST error body.
    r = rest_call(gw, limited, "alpha__add", {"a": 1, "b": 1})
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1, r.text
    assert r.json()["error"]["code"] == "rate_limited" and r.json()["error"]["key"] == "default/limited", r.text

    # A reload with the key's limits unchanged keeps the spent rate spent.
    config = gateway_config(
        [server("alpha", rust_upstream.mcp_url), server("beta", rust_upstream.mcp_url)],
        [
            key("limited", limited, ["alpha"], limits={"rate": "1/h", "burst": 3}),
            key("free", free, ["alpha", "beta"]),
        ],
    )
    gw.write_config(config)
    with RawMcp(gw.mcp_url(), free, MODERN_VERSION) as other:
        wait_until(lambda: "beta__add" in str(other.list_tools().messages), 5.0, what="the reload to apply")
    with RawMcp(gw.mcp_url(), limited, MODERN_VERSION) as mcp:
        _assert_limited(_add(mcp), "key", "default/limited", "rate")

    metrics = httpx.get(f"{gw.internal_url}/metrics", timeout=5).text
    line = next(
        (m for m in metrics.splitlines()
         if m.startswith("switchboard_gateway_limited_requests_total{")
         and 'name="default/limited"' in m and 'limit="rate"' in m),
        None,
    )
    assert line is not None and float(line.split()[-1]) >= 7, metrics
    assert limited not in metrics and free not in metrics


def test_concurrency_limit_counts_calls_in_flight(gateways, rust_upstream):
    k = new_secret("busy")
    gw = gateways.start(
        gateway_config(
            [server("alpha", rust_upstream.mcp_url)],
            [key("busy", k, ["alpha"], limits={"concurrentRequests": 2})],
        )
    )

    def slow():
        with RawMcp(gw.mcp_url(), k, MODERN_VERSION, timeout=30) as mcp:
            return mcp.call_tool("alpha__slow", {"ms": SLOW_MS})

    before = method_count(rust_upstream, "tools/call")
    with ThreadPoolExecutor(2) as pool:
        running = [pool.submit(slow) for _ in range(2)]
        _wait_in_flight(rust_upstream, before, 2)
        with RawMcp(gw.mcp_url(), k, MODERN_VERSION) as mcp:
            third = _add(mcp)
        # (ordering: the refusal came back while both calls were still running)
        overlapped = not any(f.done() for f in running)
        _assert_limited(third, "key", "default/busy", "concurrency")
        assert overlapped, "the slow calls ended before the third call was answered: the refusal proves nothing"
        assert method_count(rust_upstream, "tools/call") == before + 2, "the refused call reached the upstream"
        assert all(f.result().status == 200 for f in running)
    print(f"a third call while two were in flight: refused in {third.elapsed * 1000:.1f} ms")
    with RawMcp(gw.mcp_url(), k, MODERN_VERSION) as mcp:
        assert _add(mcp).status == 200, "the slots came back when the calls ended"


def test_server_limit_applies_across_keys(gateways, rust_upstream):
    one, two = new_secret("one"), new_secret("two")
    gw = gateways.start(
        gateway_config(
            [server("alpha", rust_upstream.mcp_url, limits={"concurrentRequests": 1})],
            [key("one", one, ["alpha"]), key("two", two, ["alpha"])],
        )
    )
    before = method_count(rust_upstream, "tools/call")
    with ThreadPoolExecutor(1) as pool:
        with RawMcp(gw.mcp_url(), one, MODERN_VERSION, timeout=30) as mcp:
            running = pool.submit(mcp.call_tool, "alpha__slow", {"ms": SLOW_MS})
            _wait_in_flight(rust_upstream, before, 1)
            with RawMcp(gw.mcp_url(), two, MODERN_VERSION) as other:
                refused = _add(other)
            overlapped = not running.done()
            _assert_limited(refused, "server", "alpha", "concurrency")
            assert overlapped, "the slow call ended before the other key's call was answered: the refusal proves nothing"
            assert running.result().status == 200
    with RawMcp(gw.mcp_url(), two, MODERN_VERSION) as other:
        assert _add(other).status == 200


def test_llm_endpoints_answer_a_limited_key_in_their_own_shape(gateways, procs, rust_upstream):
    provider = start_provider(procs)
    secret = new_secret("llm-key")
    config = llm_config(provider, rust_upstream, secret)
    config["keys"][0]["limits"] = {"rate": "1/h"}
    gw = gateways.start(config)
    models = httpx.get(f"{gw.url}/v1/models", headers={"x-api-key": secret}, timeout=10)
    assert models.status_code == 200, models.text
    body = {"model": "claude-test", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(f"{gw.url}/v1/messages", json=body, headers={"x-api-key": secret}, timeout=10)
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1, r.text
    assert r.json()["error"]["type"] == "rate_limit_error", r.text
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=10)
    assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limit_exceeded", r.text
    assert not provider.model_calls(), "a refused request reached the provider"


def test_a_key_over_its_limit_does_not_slow_another_key(gateways, rust_upstream):
    """Side by side on one replica: the p50 of a well-behaved key's calls, alone and while
    another key hammers the gateway far over its limit. Figures are printed (no timed
    assertion: these machines are shared); every call of the well-behaved key must succeed."""
    hammer, calm = new_secret("hammer"), new_secret("calm")
    gw = gateways.start(
        gateway_config(
            [server("alpha", rust_upstream.mcp_url)],
            [
                key("hammer", hammer, ["alpha"], limits={"rate": "20/s", "concurrentRequests": 4}),
                key("calm", calm, ["alpha"]),
            ],
        )
    )

    def calm_latencies(n: int) -> list[float]:
        out = []
        with RawMcp(gw.mcp_url(), calm, MODERN_VERSION) as mcp:
            for _ in range(n):
                reply = _add(mcp)
                assert reply.status == 200, f"the calm key was refused: {reply.status} {reply.raw[:200]!r}"
                out.append(reply.elapsed)
        return out

    calm_latencies(20)  # warm-up
    alone = calm_latencies(200)
    stop = threading.Event()
    counts = {200: 0, 429: 0, "other": 0}

    def hammering() -> None:
        with RawMcp(gw.mcp_url(), hammer, MODERN_VERSION) as mcp:
            while not stop.is_set():
                status = _add(mcp).status
                counts[status if status in counts else "other"] += 1

    threads = [threading.Thread(target=hammering, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        # (measured while the other key is over its limit, i.e. once it has been refused)
        wait_until(lambda: counts[429] > 0, 15, interval=0.01, what="the hammering key to be refused")
        during = calm_latencies(200)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    p50_alone, p50_during = statistics.median(alone), statistics.median(during)
    print(
        f"calm key p50 alone {p50_alone * 1000:.2f} ms, while another key is over its limit "
        f"{p50_during * 1000:.2f} ms (x{p50_during / p50_alone:.2f}); the hammering key got "
        f"{counts[200]} answers and {counts[429]} refusals (429)"
    )
    assert counts[429] > 0, f"the hammering key was never refused: {counts}"
    assert counts["other"] == 0, counts
