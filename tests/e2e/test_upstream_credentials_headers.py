"""Issue 4, acceptance items 2 and 3, and credential isolation (docs/architecture.md, invariant 5).

Item 2: `upstreamTokenHeader` on every arm that mints or holds a token. The upstream stands
behind an "API gateway": it insists on its own token in a private header (`X-Upstream-Token`)
*and* on a different static bearer in `Authorization`; both arrive, each exactly once. A
malformed header name fails config load naming the field: at start (the process exits non-zero)
and on reload (the edit is rejected and the previous config keeps serving).

Item 3: no `Bearer Bearer`: bare and already-schemed tokens from each source (static bearer and
token secrets, the delegated header, passthrough, minted and exchanged tokens) arrive with
exactly one scheme.

Isolation: a delegated header for server b never reaches server a, even when a's config lists
it in `headers.forward`; the gateway key and the caller's own Authorization never reach a
server that does not pass them through by design.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import time

import httpx
import pytest
from harness import (
    GATEWAY_BIN,
    KEY_HEADER,
    MODERN_VERSION,
    SECRETS_USED,
    TOKEN_GRANT_EXCHANGE,
    RawMcp,
    binary,
    call_result_value,
    gateway_config,
    headers_seen,
    key,
    new_secret,
    oauth_server,
    pct,
    server,
    start_rust_upstream,
    token_exchange_auth,
    wait_until,
    write_config,
)

DOUBLE_SCHEME = re.compile(r"(?i)\b(bearer|token|basic)\s+(bearer|token|basic)\b")
TOKEN_ARMS = ["bearer", "token", "passthrough", "oauthDelegate", "oauth2ClientCredentials", "tokenExchange"]
PRIVATE = "X-Upstream-Token"


def _uid() -> str:
    return new_secret("u").split("-")[-1][:10]


def _arm(arm: str, up, client_key: str, prefix: str, **auth_extra) -> tuple[dict, dict[str, str], str]:
    """(auth block, caller headers, the exact credential value the upstream must receive)."""
    uid = _uid()
    if arm == "bearer":
        s = new_secret("bearer")
        return {"type": "bearer", "secret": s, **auth_extra}, {"Authorization": f"Bearer {client_key}"}, f"Bearer {s}"
    if arm == "token":
        s = new_secret("token")
        return {"type": "token", "secret": s, **auth_extra}, {"Authorization": f"Bearer {client_key}"}, f"Token {s}"
    if arm == "passthrough":
        user = new_secret("user")
        caller = {KEY_HEADER: client_key, "Authorization": f"Bearer {user}"}
        return {"type": "passthrough", **auth_extra}, caller, f"Bearer {user}"
    if arm == "oauthDelegate":
        delegated = new_secret("deleg")
        caller = {"Authorization": f"Bearer {client_key}", f"X-MCP-{prefix}-Authorization": delegated}
        return {"type": "oauthDelegate", **auth_extra}, caller, f"Bearer {delegated}"
    if arm == "oauth2ClientCredentials":
        return (
            oauth_server(up, f"cc{uid}", **auth_extra),
            {"Authorization": f"Bearer {client_key}"},
            f"Bearer at-cc{uid}-1",
        )
    if arm == "tokenExchange":
        user = new_secret("user")
        caller = {KEY_HEADER: client_key, "Authorization": f"Bearer {user}"}
        return token_exchange_auth(up, f"tx{uid}", **auth_extra), caller, f"Bearer xt-{user}-1"
    raise AssertionError(arm)


def _no_key(seen: dict[str, str], client_key: str) -> None:
    blob = json.dumps(seen)
    assert client_key not in blob, "the gateway key went upstream"
    assert KEY_HEADER.lower() not in seen, "X-Switchboard-Key went upstream"


# --------------------------------------------------------------------------------------------
# Item 2


@pytest.mark.parametrize("arm", TOKEN_ARMS)
def test_upstream_token_header_and_static_authorization_both_arrive(gateways, procs, arm):
    up = start_rust_upstream(procs, f"apigw-{arm}")
    client_key = new_secret("client-key")
    auth, caller, expected = _arm(arm, up, client_key, "api", upstreamTokenHeader=PRIVATE)
    scheme = expected.split(" ", 1)[0]
    # The "API gateway" in front of the upstream: its own bearer in Authorization, the
    # upstream's token (with the expected scheme) in the private header.
    url = up.variant_url(
        f"require=authorization:{pct('Bearer api-gw')},require-prefix=x-upstream-token:{pct(scheme + ' ')}"
    )
    # Other sources also try the credential's slot (a static header, a forwarded caller
    # header): the resolved credential wins it; static beats forwarded elsewhere.
    static = [
        {"name": "Authorization", "value": "Bearer api-gw"},
        {"name": "X-Team", "value": "blue"},
        {"name": PRIVATE, "value": "Bearer shadow-static"},
    ]
    entry = server("api", url, auth=auth, headers={"static": static, "forward": [PRIVATE, "X-Team", "X-Request-Id"]})
    gw = gateways.start(gateway_config([entry], [key("client", client_key, ["api"])]))
    caller = {**caller, PRIVATE: "Bearer shadow-caller", "X-Team": "red", "X-Request-Id": "rid-2"}

    for era in (MODERN_VERSION, "legacy"):
        with RawMcp(gw.mcp_url(), None, era, headers=caller) as mcp:
            reply = mcp.call_tool("api__request_headers")
            assert reply.status == 200, f"HTTP {reply.status}: {reply.raw[:500]!r}"
            seen = headers_seen(reply.result)
            assert seen.get("x-upstream-token") == expected, seen
            assert seen.get("authorization") == "Bearer api-gw", seen
            assert seen.get("x-team") == "blue", seen
            assert seen.get("x-request-id") == "rid-2", seen
            assert "shadow" not in json.dumps(seen), seen
            _no_key(seen, client_key)
    r = httpx.post(
        f"{gw.url}/mcp-rest/tools/call",
        json={"name": "request_headers", "server_id": "api", "arguments": {}},
        headers=caller,
        timeout=15,
    )
    assert r.status_code == 200, r.text
    seen = headers_seen(r.json())
    assert (seen.get("x-upstream-token"), seen.get("authorization")) == (expected, "Bearer api-gw"), seen


BAD_HEADER_NAMES = ["X Upstream Token", "X-Token:", "X-Tökén", "(token)"]


def _start_fails(tmp_path, config: dict, name: str) -> subprocess.CompletedProcess:
    path = tmp_path / f"{name}.yaml"
    write_config(path, config)
    try:
        return subprocess.run(
            [binary(GATEWAY_BIN), "--config", str(path), "--listen", "127.0.0.1:0"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the gateway kept running on a config with a malformed header name: {exc.stdout!r}")


@pytest.mark.parametrize("arm", TOKEN_ARMS)
def test_malformed_upstream_token_header_fails_start_naming_the_field(tmp_path, arm):
    client_key = new_secret("client-key")
    fake = type("U", (), {"base": "http://127.0.0.1:9"})()
    auth, _, _ = _arm(arm, fake, client_key, "api", upstreamTokenHeader="X Upstream Token")
    config = gateway_config(
        [server("good", "http://127.0.0.1:9/mcp"), server("api", "http://127.0.0.1:9/mcp", auth=auth)],
        [key("client", client_key, ["good", "api"])],
    )
    done = _start_fails(tmp_path, config, f"bad-{arm}")
    out = done.stdout + done.stderr
    assert done.returncode != 0, f"the gateway started with a malformed header name:\n{out[-2000:]}"
    assert "listening on" not in done.stdout, out[-2000:]
    assert "servers[1].auth.upstreamTokenHeader" in out, out[-2000:]


@pytest.mark.parametrize("bad", BAD_HEADER_NAMES)
def test_each_malformed_header_name_is_refused(tmp_path, bad):
    client_key = new_secret("client-key")
    config = gateway_config(
        [server("api", "http://127.0.0.1:9/mcp", auth={"type": "passthrough", "upstreamTokenHeader": bad})],
        [key("client", client_key, ["api"])],
    )
    done = _start_fails(tmp_path, config, "bad-name")
    out = done.stdout + done.stderr
    assert done.returncode != 0, f"{bad!r} was accepted:\n{out[-2000:]}"
    assert "servers[0].auth.upstreamTokenHeader" in out, out[-2000:]


def test_malformed_upstream_token_header_is_rejected_on_reload(gateways, procs):
    up = start_rust_upstream(procs, "reload")
    client_key = new_secret("client-key")
    uid = _uid()
    good = gateway_config(
        [
            server("plain", up.mcp_url),
            server("cc", up.mcp_url, auth=oauth_server(up, f"cc{uid}", upstreamTokenHeader=PRIVATE)),
        ],
        [key("client", client_key, ["plain", "cc"])],
    )
    gw = gateways.start(good)

    def private_header() -> str | None:
        with RawMcp(gw.mcp_url(), client_key, MODERN_VERSION) as mcp:
            reply = mcp.call_tool("cc__request_headers")
            assert reply.status == 200, reply.raw
            return headers_seen(reply.result).get("x-upstream-token")

    assert private_header() == f"Bearer at-cc{uid}-1"
    broken = copy.deepcopy(good)
    broken["servers"][1]["auth"]["upstreamTokenHeader"] = "X Upstream Token"
    broken["servers"].append(server("newcomer", up.mcp_url))
    broken["keys"] = [key("client", client_key, ["plain", "cc", "newcomer"])]
    offset = len(gw.logs())
    gw.write_config(broken)
    wait_until(
        lambda: "servers[1].auth.upstreamTokenHeader" in gw.logs()[offset:],
        5.0,
        what="a reload error naming servers[1].auth.upstreamTokenHeader",
    )
    time.sleep(1.0)  # a late partial apply would show by now
    assert gw.proc.alive()
    assert private_header() == f"Bearer at-cc{uid}-1", "the previous config stopped serving"
    with RawMcp(gw.mcp_url(), client_key, MODERN_VERSION) as mcp:
        assert call_result_value(mcp.call_tool("plain__add", {"a": 1, "b": 2}).result) == 3
        err = mcp.call_tool("newcomer__add", {"a": 1, "b": 2}).error
        assert err["code"] == -32602, "part of the rejected edit was applied"


# --------------------------------------------------------------------------------------------
# Item 3


def test_no_double_scheme_from_any_source(gateways, procs):
    up = start_rust_upstream(procs, "schemes")
    client_key = new_secret("client-key")
    raw = {n: new_secret(n) for n in ("b", "t", "d", "p", "x")}
    uid = _uid()
    # (prefix, auth, extra caller headers, header checked upstream, exact value expected)
    cases: list[tuple[str, dict, dict[str, str], str, str]] = []
    for i, written in enumerate([raw["b"], f"Bearer {raw['b']}", f"bearer {raw['b']}", f"BEARER   {raw['b']}"]):
        cases.append((f"bearer{i}", {"type": "bearer", "secret": written}, {}, "authorization", f"Bearer {raw['b']}"))
    cases.append(
        (
            "bearerhdr",
            {"type": "bearer", "secret": f"Bearer {raw['b']}", "upstreamTokenHeader": PRIVATE},
            {},
            "x-upstream-token",
            f"Bearer {raw['b']}",
        )
    )
    for i, written in enumerate([raw["t"], f"Token {raw['t']}", f"token {raw['t']}"]):
        cases.append((f"token{i}", {"type": "token", "secret": written}, {}, "authorization", f"Token {raw['t']}"))
    for i, sent in enumerate([raw["d"], f"Bearer {raw['d']}", f"bearer {raw['d']}"]):
        cases.append(
            (
                f"deleg{i}",
                {"type": "oauthDelegate"},
                {f"X-MCP-deleg{i}-Authorization": sent},
                "authorization",
                f"Bearer {raw['d']}",
            )
        )
    cases.append(
        (
            "delegate-hdr",
            {"type": "oauthDelegate", "upstreamTokenHeader": PRIVATE},
            {"X-MCP-delegate-hdr-Authorization": f"Bearer {raw['d']}"},
            "x-upstream-token",
            f"Bearer {raw['d']}",
        )
    )
    cases.append(("cc", oauth_server(up, f"cc{uid}"), {}, "authorization", f"Bearer at-cc{uid}-1"))
    cases.append(
        (
            "cchdr",
            oauth_server(up, f"cd{uid}", upstreamTokenHeader=PRIVATE),
            {},
            "x-upstream-token",
            f"Bearer at-cd{uid}-1",
        )
    )
    servers = [server(p, up.mcp_url, auth=a) for p, a, *_ in cases]
    # Passthrough and token exchange read the caller's Authorization (key in X-Switchboard-Key).
    servers.append(server("pass", up.mcp_url, auth={"type": "passthrough"}))
    servers.append(server("passhdr", up.mcp_url, auth={"type": "passthrough", "upstreamTokenHeader": PRIVATE}))
    servers.append(server("tx", up.mcp_url, auth=token_exchange_auth(up, f"tx{uid}")))
    config = gateway_config(servers, [key("client", client_key, [s["name"] for s in servers])])
    gw = gateways.start(config)

    def seen_by(prefix: str, headers: dict[str, str]) -> dict[str, str]:
        with RawMcp(gw.mcp_url(), None, MODERN_VERSION, headers=headers) as mcp:
            reply = mcp.call_tool(f"{prefix}__request_headers")
            assert reply.status == 200, f"{prefix}: HTTP {reply.status} {reply.raw[:400]!r}"
            return headers_seen(reply.result)

    problems: list[str] = []
    for prefix, _, extra, header, expected in cases:
        seen = seen_by(prefix, {"Authorization": f"Bearer {client_key}", **extra})
        if seen.get(header) != expected or DOUBLE_SCHEME.search(json.dumps(seen)):
            problems.append(f"{prefix}: {header}={seen.get(header)!r}, expected {expected!r}")
    # Passthrough is verbatim: whatever scheme the caller wrote, exactly once.
    for sent in (f"Bearer {raw['p']}", f"bearer {raw['p']}"):
        for prefix, header in (("pass", "authorization"), ("passhdr", "x-upstream-token")):
            seen = seen_by(prefix, {KEY_HEADER: client_key, "Authorization": sent})
            if seen.get(header) != sent or DOUBLE_SCHEME.search(json.dumps(seen)):
                problems.append(f"{prefix}: {header}={seen.get(header)!r}, expected {sent!r}")
    # Token exchange: the scheme is stripped from the subject token before the exchange, and
    # the exchanged token goes up with one scheme.
    for sent in (f"Bearer {raw['x']}", f"bearer {raw['x']}-1"):
        subject = sent.split(" ", 1)[1]
        seen = seen_by("tx", {KEY_HEADER: client_key, "Authorization": sent})
        if seen.get("authorization") != f"Bearer xt-{subject}-1":
            problems.append(f"tx: authorization={seen.get('authorization')!r}, expected 'Bearer xt-{subject}-1'")
    subjects = [
        r["form"].get("subject_token")
        for r in up.recent_requests()
        if r.get("path") == "/oauth/token" and (r.get("form") or {}).get("grant_type") == TOKEN_GRANT_EXCHANGE
    ]
    assert subjects == [raw["x"], f"{raw['x']}-1"], f"subject tokens sent for exchange: {subjects}"
    assert problems == [], "\n".join(problems)


# --------------------------------------------------------------------------------------------
# Isolation


def test_delegated_header_and_keys_reach_only_their_server(gateways, procs):
    up = start_rust_upstream(procs, "isolation")
    client_key = new_secret("client-key")
    a_secret, deleg_b, own = new_secret("a-cred"), new_secret("deleg-b"), new_secret("own")
    SECRETS_USED.update({deleg_b, own})
    forward_everything = ["X-MCP-b-Authorization", "X-Request-Id", KEY_HEADER, "Authorization"]
    config = gateway_config(
        [
            server(
                "a", up.mcp_url, auth={"type": "bearer", "secret": a_secret}, headers={"forward": forward_everything}
            ),
            server("b", up.mcp_url, auth={"type": "oauthDelegate"}),
            server("open", up.mcp_url, headers={"forward": forward_everything}),
            server("pass", up.mcp_url, auth={"type": "passthrough"}),
        ],
        [key("client", client_key, ["a", "b", "open", "pass"])],
    )
    gw = gateways.start(config)

    def seen(url: str, tool: str, headers: dict[str, str]) -> dict[str, str]:
        with RawMcp(url, None, MODERN_VERSION, headers=headers) as mcp:
            reply = mcp.call_tool(tool)
            assert reply.status == 200, f"HTTP {reply.status}: {reply.raw[:400]!r}"
            return headers_seen(reply.result)

    delegating = {"Authorization": f"Bearer {client_key}", "X-MCP-b-Authorization": deleg_b, "X-Request-Id": "rid-1"}
    for url, tool in ((gw.mcp_url(), "a__request_headers"), (gw.mcp_url("a"), "request_headers")):
        got = seen(url, tool, delegating)
        assert deleg_b not in json.dumps(got), f"b's delegated credential reached a: {got}"
        assert "x-mcp-b-authorization" not in got, got
        assert got.get("authorization") == f"Bearer {a_secret}", got
        assert got.get("x-request-id") == "rid-1", "headers.forward stopped working altogether"
        _no_key(got, client_key)
    for url, tool in ((gw.mcp_url(), "b__request_headers"), (gw.mcp_url("b"), "request_headers")):
        got = seen(url, tool, delegating)
        assert got.get("authorization") == f"Bearer {deleg_b}", got
        assert "x-mcp-b-authorization" not in got, "the delegated header itself went upstream"
        _no_key(got, client_key)

    # Key in X-Switchboard-Key, the caller's own token in Authorization: a server without a
    # credential and with both names in headers.forward still gets neither.
    own_headers = {KEY_HEADER: client_key, "Authorization": f"Bearer {own}", "X-MCP-b-Authorization": deleg_b}
    got = seen(gw.mcp_url(), "open__request_headers", own_headers)
    assert "authorization" not in got and own not in json.dumps(got), got
    assert deleg_b not in json.dumps(got), got
    _no_key(got, client_key)
    # Only the passthrough server receives the caller's own token ...
    got = seen(gw.mcp_url(), "pass__request_headers", own_headers)
    assert got.get("authorization") == f"Bearer {own}", got
    assert deleg_b not in json.dumps(got), got
    _no_key(got, client_key)
    # ... and when the key came in Authorization, nothing is passed through.
    got = seen(gw.mcp_url(), "pass__request_headers", {"Authorization": f"Bearer {client_key}"})
    assert "authorization" not in got, f"the gateway key was passed through: {got}"
    _no_key(got, client_key)
