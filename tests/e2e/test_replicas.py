"""Acceptance item 3: any replica serves any request.

Two gateway processes share one config file behind a balancer that alternates per request:
a legacy session opened on one continues on the other, and freshly started processes answer
prefixed `tools/call`s with no `tools/list` before them, for every upstream auth mode, 100
times in a row with zero failures (both eras mixed).
"""

from __future__ import annotations

import base64
import json

import pytest
from harness import (
    MODERN_VERSION,
    SECRETS_USED,
    RawMcp,
    balancer,
    call_result_value,
    gateway_config,
    headers_seen,
    key,
    new_secret,
    run_async,
    sdk_client,
    server,
    write_config,
)


def _shared_config(gateways, config):
    """Writes the config once; returns its path for several gateways to share."""
    path = gateways.config_path("shared")
    write_config(path, config)
    return path


def test_legacy_session_continues_on_the_other_replica(gateways, rust_upstream, python_upstream):
    secret = new_secret("client-key")
    other = new_secret("other-key")
    config = gateway_config(
        [server("ex", rust_upstream.mcp_url), server("py", python_upstream.mcp_url)],
        [key("client", secret, ["ex", "py"]), key("other", other, ["ex", "py"])],
    )
    path = _shared_config(gateways, config)
    gw1 = gateways.start(config_path=path, name="replica1")
    gw2 = gateways.start(config_path=path, name="replica2")

    # Deterministic: initialize on replica 1, use the session id on replica 2.
    with RawMcp(gw1.mcp_url(), secret, "legacy") as first:
        first.initialize()
        sid = first.session_id
        assert sid is not None and len(sid.encode()) < 200, f"session id too large: {len(sid or '')} bytes"
        with RawMcp(gw2.mcp_url(), secret, "legacy") as second:
            second.session_id = sid
            listed = second.list_tools()
            assert listed.status == 200, listed.raw
            assert "ex__add" in [t["name"] for t in listed.result["tools"]]
            for upstream_prefix in ("ex", "py"):
                reply = second.call_tool(f"{upstream_prefix}__add", {"a": 20, "b": 22})
                assert reply.status == 200, reply.raw
                assert call_result_value(reply.result) == 42
            # and back on replica 1
            assert call_result_value(first.call_tool("py__add", {"a": 1, "b": 2}).result) == 3

        # Bound to the key that opened it: another valid key presenting it is refused.
        with RawMcp(gw2.mcp_url(), other, "legacy") as thief:
            thief.session_id = sid
            stolen = thief.call_tool("ex__add", {"a": 1, "b": 1})
            assert stolen.status in (403, 404), f"HTTP {stolen.status}: {stolen.raw[:500]!r}"

        # Tampered: 404, so the client re-initializes.
        tampered = sid[:-2] + ("A" if sid[-2] != "A" else "B") + sid[-1]
        with RawMcp(gw2.mcp_url(), secret, "legacy") as forged:
            forged.session_id = tampered
            reply = forged.call_tool("ex__add", {"a": 1, "b": 1})
            assert reply.status == 404, f"HTTP {reply.status}: {reply.raw[:500]!r}"

    # Through the balancer with the SDK client: every request of the session alternates.
    record: list = []
    with balancer([gw1.url, gw2.url]) as lb:

        async def scenario():
            async with sdk_client(f"{lb.url}/mcp", secret, "legacy", record=record) as c:
                results = [await c.call_tool("ex__add", {"a": i, "b": 1}) for i in range(6)]
                names = [t.name for t in (await c.list_tools()).tools]
                results += [await c.call_tool("py__add", {"a": i, "b": 2}) for i in range(4)]
                return results, names

        results, names = run_async(scenario)
        assert [r.structured_content for r in results] == [{"result": i + 1} for i in range(6)] + [
            {"result": i + 2} for i in range(4)
        ]
        assert "py__whoami" in names
        sids = {h["mcp-session-id"] for _, _, _, h in record if "mcp-session-id" in h}
        assert len(sids) == 1, sids
        session_posts = [(i, rpc) for i, method, _, s, rpc in lb.served if s in sids and method == "POST"]
        assert {i for i, _ in session_posts} == {0, 1}, f"session used only one replica: {lb.served}"
        calls_per_replica = {i: sum(1 for j, rpc in session_posts if j == i and rpc == "tools/call") for i in (0, 1)}
        assert min(calls_per_replica.values()) >= 3, calls_per_replica


def _auth_matrix(rust_upstream, python_upstream):
    """One server per upstream auth mode (all on real upstreams), and how to check each call."""
    s = {name: new_secret(name) for name in ("bearer", "apikey", "basic-pass", "token", "verbatim", "pybearer")}
    basic_user = "svc-user"
    servers = [
        server("none-py", python_upstream.mcp_url),
        server("bearer", rust_upstream.mcp_url, auth={"type": "bearer", "secret": s["bearer"]}),
        server("apikey", rust_upstream.mcp_url, auth={"type": "apiKey", "secret": s["apikey"], "header": "X-Team-Key"}),
        server("basic", rust_upstream.mcp_url, auth={"type": "basic", "secret": f"{basic_user}:{s['basic-pass']}"}),
        server("token", rust_upstream.mcp_url, auth={"type": "token", "secret": s["token"]}),
        server("verbatim", rust_upstream.mcp_url, auth={"type": "authorization", "secret": f"Custom {s['verbatim']}"}),
        server("bearer-py", python_upstream.mcp_url, auth={"type": "bearer", "secret": s["pybearer"]}),
    ]
    basic = base64.b64encode(f"{basic_user}:{s['basic-pass']}".encode()).decode()
    SECRETS_USED.add(basic)
    expected = {
        "none-py": None,
        "bearer": ("authorization", f"Bearer {s['bearer']}"),
        "apikey": ("x-team-key", s["apikey"]),
        "basic": ("authorization", f"Basic {basic}"),
        "token": ("authorization", f"Token {s['token']}"),
        "verbatim": ("authorization", f"Custom {s['verbatim']}"),
        "bearer-py": ("authorization", f"Bearer {s['pybearer']}"),
    }
    return servers, expected


def test_cold_replicas_answer_prefixed_calls_without_listing(gateways, rust_upstream, python_upstream):
    """10 rounds x (2 fresh gateway processes behind the balancer, 10 calls) = 100 calls, every
    one a prefixed tools/call with no tools/list ever sent, eras alternating, servers rotating
    through every auth mode. 0 failures allowed; each failure is reported with its details."""
    secret = new_secret("client-key")
    servers, expected = _auth_matrix(rust_upstream, python_upstream)
    config = gateway_config(servers, [key("client", secret, [s["name"] for s in servers])])
    path = _shared_config(gateways, config)
    names = [s["name"] for s in servers]

    failures: list[str] = []
    calls = 0
    with balancer(["http://127.0.0.1:9"]) as lb:  # backends set per round
        for rnd in range(10):
            gw_a = gateways.start(config_path=path, name=f"cold{rnd}a")
            gw_b = gateways.start(config_path=path, name=f"cold{rnd}b")
            lb.set_backends([gw_a.url, gw_b.url])
            legacy = RawMcp(f"{lb.url}/mcp", secret, "legacy")
            modern = RawMcp(f"{lb.url}/mcp", secret, MODERN_VERSION)
            try:
                for i in range(10):
                    n = rnd * 10 + i
                    client = modern if i % 2 == 0 else legacy
                    target = names[n % len(names)]
                    calls += 1
                    try:
                        check = expected[target]
                        if check is None:
                            reply = client.call_tool(f"{target}__add", {"a": n, "b": 1})
                            assert reply.status == 200, f"HTTP {reply.status}: {reply.raw[:300]!r}"
                            assert call_result_value(reply.result) == n + 1, reply.result
                        else:
                            reply = client.call_tool(f"{target}__request_headers")
                            assert reply.status == 200, f"HTTP {reply.status}: {reply.raw[:300]!r}"
                            seen = headers_seen(reply.result)
                            header, value = check
                            assert seen.get(header) == value, f"{header}: got {seen.get(header)!r}"
                            assert secret not in json.dumps(seen), "the gateway key went upstream"
                    except AssertionError as exc:
                        failures.append(f"call {n} ({client.era}, {target}): {exc}")
            finally:
                legacy.close()
                modern.close()
                gw_a.stop()
                gw_b.stop()
        assert {i for i, *_ in lb.served} == {0, 1}
        assert not any(rpc == "tools/list" for *_, rpc in lb.served), "a tools/list was sent"
    assert calls == 100
    assert failures == [], f"{len(failures)} of 100 calls failed:\n" + "\n".join(failures)


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_fresh_gateway_first_request_is_a_prefixed_call(gateways, rust_upstream, era):
    """The very first request a new process sees (after a legacy initialize) is tools/call."""
    secret = new_secret("client-key")
    s = new_secret("bearer")
    config = gateway_config(
        [server("first", rust_upstream.mcp_url, auth={"type": "bearer", "secret": s})],
        [key("client", secret, ["first"])],
    )
    gw = gateways.start(config)
    with RawMcp(gw.mcp_url(), secret, era) as mcp:
        reply = mcp.call_tool("first__request_headers")
        assert reply.status == 200, reply.raw
        assert headers_seen(reply.result)["authorization"] == f"Bearer {s}"
