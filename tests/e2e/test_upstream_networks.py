"""Upstream address policy (`gateway.upstreamNetworks`, issue 11 item 7): the gateway never
connects to a denied address, however the address is reached.

- A URL with a denied literal address (the metadata service) is refused when the config loads,
  naming the field; the previous config keeps serving.
- A name that resolves only to denied addresses is refused at connect time (502,
  `upstream_address_denied`), and works once the policy allows it.
- A 307 redirect to a denied address is not followed: nothing arrives there. The control: with
  the default policy the same redirect is followed and arrives.

A server's own policy (`servers[].upstreamPolicy`, what the operator renders from a namespace's
annotations) narrows the gateway-wide one for that server only, at the same three points: a URL
naming a host outside its `hosts` is refused at load; a name resolving outside its `networks` is
refused when connecting, while another server on the same upstream without the policy connects;
a redirect to a host outside its `hosts` is not followed.
"""

from __future__ import annotations

from harness import (
    EXAMPLE_UPSTREAM_BIN,
    RawMcp,
    MODERN_VERSION,
    Upstream,
    binary,
    gateway_config,
    key,
    new_secret,
    pct,
    rest_call,
    server,
    wait_until,
)


def _config(servers: list[dict], k: str, **gateway) -> dict:
    return gateway_config(servers, [key("one", k, [s["name"] for s in servers])], **gateway)


def test_a_literal_metadata_address_is_refused_naming_the_field(gateways, rust_upstream):
    k = new_secret("key")
    gw = gateways.start(_config([server("alpha", rust_upstream.mcp_url)], k))
    offset = len(gw.logs())
    gw.write_config(
        _config(
            [server("alpha", rust_upstream.mcp_url), server("meta", "http://169.254.169.254/latest/meta-data")], k
        )
    )
    wait_until(
        lambda: "servers[1].url" in gw.logs()[offset:], 10, what="the reload error naming servers[1].url"
    )
    refusal = gw.logs()[offset:]
    assert "169.254.169.254 is denied by gateway.upstreamNetworks" in refusal, refusal[-2000:]
    assert "/latest/meta-data" not in refusal, "the URL itself is not echoed"
    assert rest_call(gw, k, "alpha__add", {"a": 1, "b": 2}).status_code == 200, "the previous config stopped serving"
    assert rest_call(gw, k, "meta__anything").status_code == 404


def test_a_name_resolving_to_a_denied_address_is_refused_when_connecting(gateways, rust_upstream):
    k = new_secret("key")
    port = rust_upstream.mcp_url.rsplit(":", 1)[1].split("/", 1)[0]
    by_name = server("local", f"http://localhost:{port}/mcp")
    denied = gateways.start(_config([by_name], k, upstreamNetworks={"deny": ["127.0.0.0/8", "::1/128"]}))
    r = rest_call(denied, k, "local__add", {"a": 1, "b": 2})
    assert r.status_code == 502, r.text
    body = r.json()["error"]
    assert body["code"] == "upstream_address_denied", body
    assert "denied by gateway.upstreamNetworks" in body["message"], body
    with RawMcp(denied.mcp_url(), k, MODERN_VERSION) as mcp:
        reply = mcp.call_tool("local__add", {"a": 1, "b": 2})
        error = reply.message["error"]  # a 2026-07-28 client: -32002 on HTTP 200 (the revision's table)
        assert error["code"] == -32002 and "denied by gateway.upstreamNetworks" in error["message"], reply
    # The control: the same name under the default policy connects.
    allowed = gateways.start(_config([by_name], k))
    assert rest_call(allowed, k, "local__add", {"a": 1, "b": 2}).status_code == 200


def test_a_redirect_to_a_denied_address_is_not_followed(gateways, rust_upstream, procs):
    # The redirect target listens on 127.0.0.2 (loopback, a different address than the first
    # hop's 127.0.0.1), so a policy can deny it alone.
    target = Upstream(procs.start("upstream-127-0-0-2", [binary(EXAMPLE_UPSTREAM_BIN), "--listen", "127.0.0.2:0"]), "rust")
    assert target.mcp_url.startswith("http://127.0.0.2:"), target.mcp_url
    redirecting = server("hop", rust_upstream.variant_url(f"redirect={pct(target.mcp_url)}"))
    k = new_secret("key")

    followed = gateways.start(_config([redirecting], k))
    r = rest_call(followed, k, "hop__add", {"a": 1, "b": 2})
    assert r.status_code == 200, r.text
    assert any(req["method"] == "tools/call" for req in target.recent_requests()), "the control redirect did not arrive"

    before = len(target.recent_requests())
    refused = gateways.start(_config([redirecting], k, upstreamNetworks={"deny": ["127.0.0.2/32"]}))
    r = rest_call(refused, k, "hop__add", {"a": 1, "b": 2})
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_address_denied", r.text
    assert "127.0.0.2" in r.json()["error"]["message"]
    assert len(target.recent_requests()) == before, "the gateway followed a redirect to a denied address"


def test_a_server_policy_refuses_hosts_outside_it_when_the_config_loads(gateways, rust_upstream):
    k = new_secret("key")
    gw = gateways.start(_config([server("alpha", rust_upstream.mcp_url)], k))
    offset = len(gw.logs())
    narrowed = server("beta", rust_upstream.mcp_url, upstreamPolicy={"hosts": ["*.team-a.svc"]})
    bad_entry = server("gamma", rust_upstream.mcp_url, upstreamPolicy={"networks": ["10.0.0.0/33"]})
    gw.write_config(_config([server("alpha", rust_upstream.mcp_url), narrowed, bad_entry], k))
    wait_until(lambda: "servers[1].url" in gw.logs()[offset:], 10, what="the reload error naming servers[1].url")
    refusal = gw.logs()[offset:]
    assert "127.0.0.1 is denied by the server's upstreamPolicy (not one of its hosts)" in refusal, refusal[-2000:]
    assert "servers[2].upstreamPolicy.networks[0]" in refusal, refusal[-2000:]
    assert rest_call(gw, k, "alpha__add", {"a": 1, "b": 2}).status_code == 200, "the previous config stopped serving"


def test_a_server_policy_refuses_names_resolving_outside_its_networks(gateways, rust_upstream):
    k = new_secret("key")
    port = rust_upstream.mcp_url.rsplit(":", 1)[1].split("/", 1)[0]
    url = f"http://localhost:{port}/mcp"
    narrowed = server("narrow", url, upstreamPolicy={"networks": ["10.0.0.0/8"]})
    gw = gateways.start(_config([narrowed, server("wide", url)], k))
    r = rest_call(gw, k, "narrow__add", {"a": 1, "b": 2})
    assert r.status_code == 502, r.text
    body = r.json()["error"]
    assert body["code"] == "upstream_address_denied", body
    assert "denied by the server's upstreamPolicy (not in its networks)" in body["message"], body
    # The same upstream, by the same name, for a server without the policy: connects.
    assert rest_call(gw, k, "wide__add", {"a": 1, "b": 2}).status_code == 200
    # And the narrowed server's own policy, widened to loopback, connects too.
    gw.write_config(_config([server("narrow", url, upstreamPolicy={"networks": ["127.0.0.0/8", "::1/128"]})], k))
    wait_until(lambda: rest_call(gw, k, "narrow__add", {"a": 1, "b": 2}).status_code == 200, 10, what="the widened policy")


def test_a_server_policy_does_not_follow_a_redirect_outside_its_hosts(gateways, rust_upstream, procs):
    target = Upstream(procs.start("upstream-127-0-0-2", [binary(EXAMPLE_UPSTREAM_BIN), "--listen", "127.0.0.2:0"]), "rust")
    hop_url = rust_upstream.variant_url(f"redirect={pct(target.mcp_url)}")
    k = new_secret("key")
    gw = gateways.start(
        _config(
            [
                server("kept", hop_url, upstreamPolicy={"hosts": ["127.0.0.1"]}),
                server("let", hop_url, upstreamPolicy={"hosts": ["127.0.0.1", "127.0.0.2"]}),
            ],
            k,
        )
    )
    r = rest_call(gw, k, "kept__add", {"a": 1, "b": 2})
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_address_denied", r.text
    assert "127.0.0.2 is denied by the server's upstreamPolicy" in r.json()["error"]["message"], r.text
    assert not any(req["method"] == "tools/call" for req in target.recent_requests()), "followed a redirect outside its hosts"
    assert rest_call(gw, k, "let__add", {"a": 1, "b": 2}).status_code == 200, "the control redirect"
    assert any(req["method"] == "tools/call" for req in target.recent_requests()), "the control redirect did not arrive"
