"""Acceptance item 4: identity is the server id, not the URL.

Two servers, `a` and `b`, point at the same upstream URL with different static credentials.
Each prefixed call carries its own server's credential and nothing of the other's (nor the
gateway key); the unprefixed name both serve is ambiguous on `/mcp` (-32602 naming both
prefixed candidates, REST 409); `X-MCP-Servers` narrowed to one resolves it to that one.
"""

from __future__ import annotations

import json

import pytest
from harness import (
    INVALID_PARAMS,
    MODERN_VERSION,
    RawMcp,
    gateway_config,
    headers_seen,
    key,
    new_secret,
    rest_call,
    server,
)


@pytest.fixture(params=["python", "rust"])
def shared_upstream(request):
    return request.getfixturevalue({"python": "python_upstream", "rust": "rust_upstream"}[request.param])


@pytest.fixture
def two_routes(gateways, shared_upstream):
    client_key = new_secret("client-key")
    cred = {"a": new_secret("cred-a"), "b": new_secret("cred-b")}
    config = gateway_config(
        [
            server("a", shared_upstream.mcp_url, auth={"type": "bearer", "secret": cred["a"]}),
            server("b", shared_upstream.mcp_url, auth={"type": "bearer", "secret": cred["b"]}),
        ],
        [key("client", client_key, ["a", "b"])],
    )
    return gateways.start(config), client_key, cred


def _assert_only(seen: dict[str, str], mine: str, others: list[str]) -> None:
    assert seen.get("authorization") == f"Bearer {mine}", seen.get("authorization")
    blob = json.dumps(seen)
    for other in others:
        assert other not in blob, "a credential of another route reached the upstream"


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_each_route_carries_its_own_credential(two_routes, era):
    gw, client_key, cred = two_routes
    with RawMcp(gw.mcp_url(), client_key, era) as mcp:
        # Interleave so a pooled connection or cached upstream session cannot mask a mix-up.
        for route, other in (("a", "b"), ("b", "a"), ("a", "b"), ("b", "a")):
            reply = mcp.call_tool(f"{route}__request_headers")
            assert reply.status == 200, reply.raw
            _assert_only(headers_seen(reply.result), cred[route], [cred[other], client_key])
    # The single-server endpoint routes by its path.
    for route, other in (("a", "b"), ("b", "a")):
        with RawMcp(gw.mcp_url(route), client_key, era) as one:
            reply = one.call_tool("request_headers")
            assert reply.status == 200, reply.raw
            _assert_only(headers_seen(reply.result), cred[route], [cred[other], client_key])


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_unprefixed_shared_name_is_ambiguous_until_narrowed(two_routes, era):
    gw, client_key, cred = two_routes
    with RawMcp(gw.mcp_url(), client_key, era) as mcp:
        # The ownership map is built from listings; make sure both servers were listed.
        names = [t["name"] for t in mcp.list_all_tools()[0]]
        assert {"a__request_headers", "b__request_headers"} <= set(names)
        assert "request_headers" not in names

        reply = mcp.call_tool("request_headers")
        error = reply.error
        assert error["code"] == INVALID_PARAMS, error
        assert "request_headers" in error["message"], error
        assert sorted(error["data"]["candidates"]) == ["a__request_headers", "b__request_headers"], error

        for route, other in (("a", "b"), ("b", "a")):
            narrowed = mcp.call_tool("request_headers", headers={"X-MCP-Servers": route})
            assert narrowed.status == 200, narrowed.raw
            _assert_only(headers_seen(narrowed.result), cred[route], [cred[other], client_key])

        # Narrowing filters the listing too.
        only_a = [t["name"] for t in mcp.list_all_tools(headers={"X-MCP-Servers": "a"})[0]]
        assert only_a and all(n.startswith("a__") for n in only_a), only_a


def test_rest_ambiguity_and_resolution(two_routes):
    gw, client_key, cred = two_routes
    # Prime the ownership map the same way an MCP client would.
    with RawMcp(gw.mcp_url(), client_key, MODERN_VERSION) as mcp:
        mcp.list_all_tools()

    r = rest_call(gw, client_key, "request_headers")
    assert r.status_code == 409, r.text
    body = r.json()["error"]
    assert body["code"] == "ambiguous_tool", body
    assert sorted(body["candidates"]) == ["a__request_headers", "b__request_headers"], body

    for route, other in (("a", "b"), ("b", "a")):
        by_prefix = rest_call(gw, client_key, f"{route}__request_headers")
        assert by_prefix.status_code == 200, by_prefix.text
        _assert_only(headers_seen(by_prefix.json()), cred[route], [cred[other], client_key])
        by_id = rest_call(gw, client_key, "request_headers", server_id=route)
        assert by_id.status_code == 200, by_id.text
        _assert_only(headers_seen(by_id.json()), cred[route], [cred[other], client_key])
