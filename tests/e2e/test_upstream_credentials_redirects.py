"""Issue 4, acceptance item 4: redirects and credentials (docs/architecture.md, invariant 5).

The gateway follows 307/308 itself. A redirect to another origin (here: another upstream
process on another port) drops every credential slot (Authorization and the custom credential
header alike), the static headers and the forwarded caller headers; a same-origin redirect
keeps them. Checked against real redirecting upstreams for each way a credential is attached,
on what the redirect target actually received (its `/_requests` and the `request_headers`
tool), after checking that the redirecting upstream did receive the credential.
"""

from __future__ import annotations

import json

import pytest
from harness import (
    KEY_HEADER,
    MODERN_VERSION,
    SECRETS_USED,
    RawMcp,
    gateway_config,
    headers_seen,
    key,
    new_secret,
    oauth_server,
    pct,
    server,
    start_rust_upstream,
    token_exchange_auth,
)

MODES = [
    "bearer",
    "bearer-private",
    "apiKey",
    "passthrough",
    "oauthDelegate",
    "oauth2ClientCredentials",
    "tokenExchange",
]
PRIVATE = "X-Upstream-Token"


@pytest.fixture(scope="module")
def two_origins(session_procs):
    """Two example upstream processes: two origins (same host, different ports)."""
    return start_rust_upstream(session_procs, "redirect-a"), start_rust_upstream(session_procs, "redirect-b")


def _mode(mode: str, a, client_key: str):
    """(auth block, caller headers, {header: exact value the first hop must receive})."""
    uid = new_secret("u").split("-")[-1][:10]
    keyed = {"Authorization": f"Bearer {client_key}"}
    if mode == "bearer":
        s = new_secret("bearer")
        return {"type": "bearer", "secret": s}, keyed, {"authorization": f"Bearer {s}"}
    if mode == "bearer-private":
        s = new_secret("bearer")
        return (
            {"type": "bearer", "secret": s, "upstreamTokenHeader": PRIVATE},
            keyed,
            {"x-upstream-token": f"Bearer {s}"},
        )
    if mode == "apiKey":
        s = new_secret("apikey")
        return {"type": "apiKey", "secret": s, "header": "X-Team-Key"}, keyed, {"x-team-key": s}
    if mode == "passthrough":
        user = new_secret("user")
        SECRETS_USED.add(user)
        caller = {KEY_HEADER: client_key, "Authorization": f"Bearer {user}"}
        return {"type": "passthrough"}, caller, {"authorization": f"Bearer {user}"}
    if mode == "oauthDelegate":
        d = new_secret("deleg")
        caller = {**keyed, "X-MCP-hop-Authorization": d}
        return {"type": "oauthDelegate", "upstreamTokenHeader": PRIVATE}, caller, {"x-upstream-token": f"Bearer {d}"}
    if mode == "oauth2ClientCredentials":
        return (
            oauth_server(a, f"cc{uid}", upstreamTokenHeader=PRIVATE),
            keyed,
            {"x-upstream-token": f"Bearer at-cc{uid}-1"},
        )
    if mode == "tokenExchange":
        user = new_secret("user")
        caller = {KEY_HEADER: client_key, "Authorization": f"Bearer {user}"}
        return token_exchange_auth(a, f"tx{uid}"), caller, {"authorization": f"Bearer xt-{user}-1"}
    raise AssertionError(mode)


STATIC = {"name": "X-Team", "value": "blue-static"}
# Every header name the server's config puts on upstream requests, whatever the mode.
CONFIGURED = {"authorization", "x-upstream-token", "x-team-key", "x-team", "x-request-id"}


def _call(gw, caller: dict[str, str], era: str) -> dict[str, str]:
    with RawMcp(gw.mcp_url(), None, era, headers={**caller, "X-Request-Id": "rid-7"}) as mcp:
        reply = mcp.call_tool("hop__request_headers")
        assert reply.status == 200, f"HTTP {reply.status}: {reply.raw[:500]!r}"
        return headers_seen(reply.result)


def _first_hop_had(a, credential: dict[str, str]) -> None:
    """The redirecting upstream really received the credential (so dropping it means
    something), along with the static and forwarded headers."""
    hops = [r for r in a.recent_requests() if r["path"].startswith("/v/redirect=") and r["method"] == "tools/call"]
    assert hops, f"no tools/call reached the redirecting upstream: {a.recent_requests()[-5:]}"
    for r in hops:
        for name, value in credential.items():
            assert r["headers"].get(name) == value, (name, r["headers"])
        assert r["headers"].get("x-team") == "blue-static" and r["headers"].get("x-request-id") == "rid-7", r


@pytest.mark.parametrize("era", [MODERN_VERSION, "legacy"])
@pytest.mark.parametrize("mode", MODES)
def test_cross_origin_redirect_drops_every_credential_slot(gateways, two_origins, mode, era):
    a, b = two_origins
    a.reset()
    b.reset()
    client_key = new_secret("client-key")
    auth, caller, credential = _mode(mode, a, client_key)
    url = a.variant_url(f"redirect={pct(b.mcp_url)}")
    entry = server("hop", url, auth=auth, headers={"static": [STATIC], "forward": ["X-Request-Id"]})
    gw = gateways.start(gateway_config([entry], [key("client", client_key, ["hop"])]))

    seen = _call(gw, caller, era)
    _first_hop_had(a, credential)
    leaked = CONFIGURED & set(seen)
    assert not leaked, f"crossed origins with {sorted(leaked)}: {seen}"
    secrets = [*credential.values(), client_key, "blue-static"]
    # Every request the other origin got (handshakes included) is free of them.
    arrived = b.recent_requests()
    assert arrived, "nothing reached the redirect target"
    for r in arrived:
        blob = json.dumps(r["headers"])
        assert not (CONFIGURED & set(r["headers"])), f"{r['method']}: {r['headers']}"
        for s in secrets:
            assert s.split(" ")[-1] not in blob, f"{r['method']} carried a credential: {r['headers']}"


@pytest.mark.parametrize("target", ["path", "absolute"])
@pytest.mark.parametrize("mode", MODES)
def test_same_origin_redirect_keeps_credentials(gateways, two_origins, mode, target):
    a, b = two_origins
    a.reset()
    b.reset()
    client_key = new_secret("client-key")
    auth, caller, credential = _mode(mode, a, client_key)
    location = "/mcp" if target == "path" else a.mcp_url
    entry = server(
        "hop",
        a.variant_url(f"redirect={pct(location)}"),
        auth=auth,
        headers={"static": [STATIC], "forward": ["X-Request-Id"]},
    )
    gw = gateways.start(gateway_config([entry], [key("client", client_key, ["hop"])]))

    seen = _call(gw, caller, MODERN_VERSION)
    _first_hop_had(a, credential)
    for name, value in credential.items():
        assert seen.get(name) == value, f"{name} lost on a same-origin redirect: {seen}"
    assert seen.get("x-team") == "blue-static" and seen.get("x-request-id") == "rid-7", seen
    assert client_key not in json.dumps(seen)
    assert b.recent_requests() == [], "a same-origin redirect went to the other origin"
    landed = [r for r in a.recent_requests() if r["path"] == "/mcp" and r["method"] == "tools/call"]
    assert len(landed) == 1, landed
