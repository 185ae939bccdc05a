"""Issue 37, acceptance 3: a key's rate and concurrency counted across replicas in the shared
store (a real Redis), and what each replica does while the store is down.

Three replicas share one Redis; one key is limited to N calls per minute. Calls spread over the
replicas: exactly N succeed in total, not 3N. Redis stopped: every replica still answers (keys
keep working), counts the key on its own (at most N each), says so on /readyz and in its
metrics; Redis back (empty, as after a restart without persistence): the replicas find it by
themselves and the budget is one again.

Another key allows C calls in flight: 3C slow calls at once over the three replicas, exactly C
run; their slots come back when they end (nothing left in Redis); Redis stopped, each replica
admits its own C.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
from harness import gateway_config, key, new_secret, server, wait_until, write_config

N = 5
C = 2
SLOW_MS = 1500


def _list(url: str, secret: str) -> int:
    return httpx.get(f"{url}/mcp-rest/tools/list", headers={"Authorization": f"Bearer {secret}"}, timeout=15).status_code


def _metric(gw, name: str) -> float | None:
    text = httpx.get(f"{gw.internal_url}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(name):
            return float(line.split()[-1])
    return None


def _spread(replicas, secret: str, calls: int) -> list[int]:
    """`calls` requests, one replica after the other."""
    return [_list(replicas[i % len(replicas)].url, secret) for i in range(calls)]


def test_a_keys_rate_is_one_budget_across_replicas_and_each_replicas_own_while_the_store_is_down(procs, gateways, rust_upstream, redis):
    limited = new_secret("limited")
    free = new_secret("free")
    config = gateway_config(
        [server("alpha", rust_upstream.mcp_url)],
        [
            # N per minute: refilled one every 12 s, far longer than the calls below take.
            key("limited", limited, ["alpha"], limits={"rate": f"{N}/m"}),
            # Limited far above what the test sends: each call asks the store, so a replica
            # notices the store leave and come back.
            key("free", free, ["alpha"], limits={"rate": "1000/m"}),
        ],
        store=redis.store_settings(timeout="300ms"),
    )
    path = gateways.config_path("shared")
    write_config(path, config)
    replicas = [gateways.start(config_path=path, name=f"replica-{i}") for i in range(3)]

    statuses = _spread(replicas, limited, 3 * N)
    assert statuses.count(200) == N and statuses.count(429) == 2 * N, statuses
    # The replicas counted against one budget in Redis: it holds the key's rate, under a hashed name.
    names = redis.cli("KEYS", "sb:rate:*").split()
    assert len(names) == 1, names
    for gw in replicas:
        assert _metric(gw, 'switchboard_gateway_store_up{backend="redis"}') == 1.0
        assert httpx.get(f"{gw.internal_url}/readyz", timeout=5).text == "ready"

    # Redis down: keys still work, each replica counts the limited key on its own.
    redis.stop()
    assert _list(replicas[0].url, free) == 200
    statuses = _spread(replicas, limited, 4 * N)
    assert all(s in (200, 429) for s in statuses), statuses
    assert statuses.count(200) == 3 * N, f"each replica its own {N}: {statuses}"
    for gw in replicas:
        assert _metric(gw, 'switchboard_gateway_store_up{backend="redis"}') == 0.0
        ready = httpx.get(f"{gw.internal_url}/readyz", timeout=5)
        assert ready.status_code == 200 and "state store does not answer" in ready.text, ready.text
        failed = _metric(gw, 'switchboard_gateway_store_operations_total{backend="redis",operation="admit",outcome="unavailable"}')
        assert failed and failed >= 1, failed
    for gw in replicas:
        assert limited not in gw.logs() and free not in gw.logs()

    # Redis back, empty: found again by every replica without a restart; one budget again.
    redis.start()

    def shared_again() -> bool:
        return all(httpx.get(f"{gw.internal_url}/readyz", timeout=5).text == "ready" for gw in replicas)

    wait_until(shared_again, 15, what="every replica to reach Redis again")
    statuses = _spread(replicas, limited, 3 * N)
    assert statuses.count(200) == N, statuses


def _slow(url: str, secret: str) -> int:
    return httpx.post(f"{url}/mcp-rest/tools/call", headers={"Authorization": f"Bearer {secret}"},
                      json={"name": "alpha__slow", "arguments": {"ms": SLOW_MS}}, timeout=30).status_code  # fmt: skip


def _at_once(replicas, secret: str, calls: int) -> list[int]:
    """`calls` slow calls at once, spread over the replicas."""
    with ThreadPoolExecutor(calls) as pool:
        return list(pool.map(lambda i: _slow(replicas[i % len(replicas)].url, secret), range(calls)))


def test_a_keys_concurrency_is_one_count_across_replicas_and_each_replicas_own_while_the_store_is_down(procs, gateways, rust_upstream, redis):
    busy = new_secret("busy")
    config = gateway_config(
        [server("alpha", rust_upstream.mcp_url)],
        [key("busy", busy, ["alpha"], limits={"concurrentRequests": C})],
        store=redis.store_settings(timeout="300ms"),
    )
    path = gateways.config_path("slots")
    write_config(path, config)
    replicas = [gateways.start(config_path=path, name=f"replica-{i}") for i in range(3)]

    statuses = _at_once(replicas, busy, 3 * C)
    assert statuses.count(200) == C and statuses.count(429) == 2 * C, statuses
    # Given back when the calls ended (off their path): nothing held in Redis, C run again.
    wait_until(lambda: not redis.cli("KEYS", "sb:in-flight:*").split(), 10, what="the slots given back")
    statuses = _at_once(replicas, busy, 3 * C)
    assert statuses.count(200) == C, statuses
    wait_until(lambda: not redis.cli("KEYS", "sb:in-flight:*").split(), 10, what="the slots given back")

    # Redis down: each replica counts its own C (C + 1 calls on each, C run).
    redis.stop()
    statuses = _at_once(replicas, busy, 3 * (C + 1))
    assert statuses.count(200) == 3 * C and statuses.count(429) == 3, f"each replica its own {C}: {statuses}"
    for gw in replicas:
        assert busy not in gw.logs()
