"""Acceptance item 5: scope before I/O.

A key without access to server `vault` gets, on MCP, exactly the answer a nonexistent tool or
server gets (it cannot even tell `vault` exists); on REST it gets 403 `access_denied`; and the
vault upstream (its own process, so its counters see only this test) receives no request at
all, checked with its `GET /_stats` before and after. A key that may use the vault then moves
the counters, which proves the check could see a leak.
"""

from __future__ import annotations

import pytest
from harness import (
    INVALID_PARAMS,
    MODERN_VERSION,
    RawMcp,
    call_result_value,
    gateway_config,
    key,
    new_secret,
    rest_call,
    rest_list,
    rest_tool_names,
    server,
    start_rust_upstream,
)


@pytest.fixture
def scoped(procs, gateways, rust_upstream):
    vault_upstream = start_rust_upstream(procs, "vault")
    keys = {name: new_secret(name) for name in ("limited", "full", "no-echo")}
    config = gateway_config(
        [
            server("open", rust_upstream.mcp_url),
            server("vault", vault_upstream.mcp_url, auth={"type": "bearer", "secret": new_secret("vault-cred")}),
        ],
        [
            key("limited", keys["limited"], ["open"]),
            key("full", keys["full"], ["open", "vault"]),
            key("no-echo", keys["no-echo"], ["open", "vault"], tools={"deny": ["vault__echo"]}),
        ],
    )
    gw = gateways.start(config)
    return gw, keys, vault_upstream


def _shape(reply, name: str) -> tuple:
    """An answer with the tool/server name masked: what a caller could learn from it."""
    responses = [m for m in reply.messages if isinstance(m, dict) and ("result" in m or "error" in m)]
    if not responses:  # not a JSON-RPC body: compare the bytes
        return (reply.status, reply.raw.decode("utf-8", "replace").replace(name, "<NAME>"))
    m = responses[-1]
    err = m.get("error") or {}
    return (
        reply.status,
        "error" in m,
        err.get("code"),
        (err.get("message") or "").replace(name, "<NAME>"),
        repr(err.get("data")).replace(name, "<NAME>"),
    )


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_out_of_scope_server_is_invisible_on_mcp(scoped, era):
    gw, keys, vault = scoped
    before = vault.stats()

    with RawMcp(gw.mcp_url(), keys["limited"], era) as mcp:
        names = [t["name"] for t in mcp.list_all_tools()[0]]
        assert names and all(n.startswith("open__") for n in names), names

        hidden = mcp.call_tool("vault__add", {"a": 1, "b": 2})
        missing = mcp.call_tool("nosuch__add", {"a": 1, "b": 2})
        assert hidden.error["code"] == INVALID_PARAMS, hidden.message
        assert "vault__add" in hidden.error["message"], hidden.message
        assert _shape(hidden, "vault__add") == _shape(missing, "nosuch__add")

        # X-MCP-Servers narrows, never widens.
        widened = [t["name"] for t in mcp.list_all_tools(headers={"X-MCP-Servers": "vault"})[0]]
        assert not any(n.startswith("vault__") for n in widened), widened
        forced = mcp.call_tool("vault__add", {"a": 1, "b": 2}, headers={"X-MCP-Servers": "vault"})
        assert forced.error["code"] == INVALID_PARAMS, forced.message

        # An unprefixed name is judged within scope: only `open` serves `add` for this key.
        unprefixed = mcp.call_tool("add", {"a": 3, "b": 4})
        assert unprefixed.status == 200, unprefixed.raw
        assert call_result_value(unprefixed.result) == 7

    # The single-server endpoint of an out-of-scope server looks like one that does not exist.
    with (
        RawMcp(gw.mcp_url("vault"), keys["limited"], MODERN_VERSION) as hidden_one,
        RawMcp(gw.mcp_url("nosuch"), keys["limited"], MODERN_VERSION) as missing_one,
    ):
        assert _shape(hidden_one.call_tool("add", {"a": 1, "b": 1}), "vault") == _shape(
            missing_one.call_tool("add", {"a": 1, "b": 1}), "nosuch"
        )
        hidden_list, missing_list = hidden_one.list_tools(), missing_one.list_tools()
        assert _shape(hidden_list, "vault") == _shape(missing_list, "nosuch")
        assert b"vault__" not in hidden_list.raw and b'"add"' not in hidden_list.raw, hidden_list.raw

    assert vault.stats() == before, "a request reached the out-of-scope upstream"

    # Positive control: a key in scope reaches the vault, and the counters move.
    with RawMcp(gw.mcp_url(), keys["full"], era) as mcp:
        reply = mcp.call_tool("vault__add", {"a": 1, "b": 2})
        assert call_result_value(reply.result) == 3
    after = vault.stats()
    assert after["by_method"].get("tools/call", 0) == before["by_method"].get("tools/call", 0) + 1, after


def test_out_of_scope_server_is_403_on_rest(scoped):
    gw, keys, vault = scoped
    before = vault.stats()

    for response in (
        rest_call(gw, keys["limited"], "vault__add", {"a": 1, "b": 2}),
        rest_call(gw, keys["limited"], "add", {"a": 1, "b": 2}, server_id="vault"),
        rest_list(gw, keys["limited"], server_id="vault"),
    ):
        assert response.status_code == 403, f"{response.request.url}: {response.status_code} {response.text}"
        assert response.json()["error"]["code"] == "access_denied", response.text

    listed = rest_tool_names(rest_list(gw, keys["limited"]))
    assert listed and all(n.startswith("open__") for n in listed), listed

    # Unknown server / tool are 404s, distinct from the 403.
    unknown_server = rest_call(gw, keys["limited"], "add", server_id="nosuch")
    assert unknown_server.status_code == 404 and unknown_server.json()["error"]["code"] == "server_not_found", (
        unknown_server.text
    )
    unknown_tool = rest_call(gw, keys["limited"], "open__nosuch")
    assert unknown_tool.status_code == 404 and unknown_tool.json()["error"]["code"] == "tool_not_found", (
        unknown_tool.text
    )

    # Missing or wrong key: 401 with a challenge, on REST and MCP alike.
    for response in (
        rest_call(gw, None, "open__add"),
        rest_call(gw, new_secret("wrong-key"), "open__add"),
    ):
        assert response.status_code == 401, response.text
        assert response.headers.get("www-authenticate", "").lower().startswith("bearer"), response.headers
    with RawMcp(gw.mcp_url(), new_secret("wrong-key"), MODERN_VERSION) as stranger:
        denied = stranger.call_tool("open__add", {"a": 1, "b": 1})
        assert denied.status == 401 and "www-authenticate" in denied.headers, denied.raw

    assert vault.stats() == before, "a request reached the out-of-scope upstream"

    allowed = rest_call(gw, keys["full"], "vault__add", {"a": 2, "b": 2})
    assert allowed.status_code == 200, allowed.text
    assert call_result_value(allowed.json()) == 4
    assert vault.stats() != before


@pytest.mark.parametrize("era", ["legacy", MODERN_VERSION])
def test_key_tool_filter_hides_a_tool_before_io(scoped, era):
    gw, keys, vault = scoped
    with RawMcp(gw.mcp_url(), keys["no-echo"], era) as mcp:
        names = {t["name"] for t in mcp.list_all_tools()[0]}
        assert "vault__add" in names and "vault__echo" not in names, sorted(names)
        before = vault.stats()
        denied = mcp.call_tool("vault__echo", {"text": "x"})
        assert denied.error["code"] == INVALID_PARAMS, denied.message
        assert "vault__echo" in denied.error["message"]
        assert vault.stats() == before, "the denied tool call reached the upstream"
        assert call_result_value(mcp.call_tool("vault__add", {"a": 5, "b": 5}).result) == 10
