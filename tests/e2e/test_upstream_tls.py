"""HTTPS upstreams (issue 20, acceptance 3): each test makes its own private CA, puts a TLS
front (uvicorn, Python's OpenSSL) before a real upstream, and checks what the gateway does.

- refused without the CA, with an error that says why (and never the URL); served with the CA
  given per server, and given gateway-wide;
- an mTLS upstream refuses a gateway without its client certificate and serves it with one; on
  TLS 1.2 too, where the refusal is a bare `handshake_failure` the gateway still names;
- a certificate valid for another name is refused; `tls.serverName` names the right one;
- a CA bundle rotated in its file is taken without a restart (same process);
- an OAuth token endpoint and an LLM provider behind HTTPS with a private CA;
- a redirect from HTTP to an HTTPS origin follows the credential rules (nothing crosses) and
  uses the server's TLS settings on the new hop.

Every success is checked on the TLS front (the request went through TLS, not around it), and
every refusal is checked to have reached no upstream.
"""

from __future__ import annotations

import json
import socket
import ssl

import httpx
import pytest
from harness import (
    SECRETS_USED,
    gateway_config,
    key,
    new_secret,
    oauth_server,
    pct,
    rest_call,
    server,
    start_rust_upstream,
    token_requests,
    wait_until,
    write_config,
)
from llm_harness import ANTHROPIC_VERSION, model, start_provider
from private_ca import PrivateCa
from tls_front import TlsFront


@pytest.fixture
def fronts(tmp_path):
    started: list[TlsFront] = []

    def start(backend: str, cert, **kw) -> TlsFront:
        front = TlsFront(backend, tmp_path, cert, **kw).start()
        started.append(front)
        return front

    yield start
    for f in started:
        f.stop()


@pytest.fixture(scope="module")
def upstream(session_procs):
    return start_rust_upstream(session_procs, "tls-backend")


def _localhost_cert(ca: PrivateCa):
    return ca.issue("localhost", dns=("localhost",), ips=("127.0.0.1",))


def _add(gw, key_secret, name="tls__add"):
    return rest_call(gw, key_secret, name, {"a": 2, "b": 3})


def _assert_added(response: httpx.Response) -> None:
    assert response.status_code == 200, f"HTTP {response.status_code}: {response.text[:400]}"
    assert "5" in json.dumps(response.json()), response.text[:400]


def _assert_refused(response: httpx.Response, words: str, url: str) -> None:
    assert response.status_code == 502, f"HTTP {response.status_code}: {response.text[:400]}"
    assert words in response.text, response.text[:400]
    # The URL may carry credentials in its query: never in an error.
    assert url not in response.text and "127.0.0.1:" not in response.text, response.text[:400]


def test_private_ca_refused_without_it_then_trusted_per_server_and_gateway_wide(gateways, fronts, upstream, tmp_path):
    ca = PrivateCa("corp")
    front = fronts(upstream.base, _localhost_cert(ca))
    url = f"{front.url}/mcp"
    secret = new_secret("tls-key")
    keys = [key("c", secret, ["tls", "wide"])]

    plain = gateways.start(gateway_config([server("tls", url)], [key("c", secret, ["tls"])]))
    _assert_refused(_add(plain, secret), "signed by an unknown authority", url)
    assert front.tool_calls() == 0, "a refused certificate must stop the call before any request"

    ca_file = ca.write(tmp_path)
    per_server = gateways.start(
        gateway_config([server("tls", url, tls={"caBundle": {"file": str(ca_file)}}), server("wide", url)], keys)
    )
    _assert_added(_add(per_server, secret))
    assert front.tool_calls() == 1
    # The CA given to one server is that server's alone: the other one still refuses.
    _assert_refused(_add(per_server, secret, "wide__add"), "signed by an unknown authority", url)
    assert front.tool_calls() == 1

    wide = gateways.start(
        gateway_config([server("tls", url), server("wide", url)], keys, upstreamTls={"caBundle": {"file": str(ca_file)}})
    )
    _assert_added(_add(wide, secret))
    _assert_added(_add(wide, secret, "wide__add"))
    assert front.tool_calls() == 3

    # SSL_CERT_FILE is honoured like the gateway-wide bundle.
    by_env = gateways.start(
        gateway_config([server("tls", url)], [key("c", secret, ["tls"])]), env={"SSL_CERT_FILE": str(ca_file)}
    )
    _assert_added(_add(by_env, secret))
    assert front.tool_calls() == 4


def test_mtls_upstream_needs_the_gateways_client_certificate(gateways, fronts, upstream, tmp_path):
    ca, clients = PrivateCa("srv"), PrivateCa("clients")
    front = fronts(upstream.base, _localhost_cert(ca), client_ca=clients)
    url = f"{front.url}/mcp"
    secret = new_secret("tls-key")
    ca_file = ca.write(tmp_path)
    cert_file, key_file = clients.issue("switchboard-gateway", client=True).write(tmp_path, "gw-client")
    SECRETS_USED.add(key_file.read_text().split("\n")[1])

    without = gateways.start(
        gateway_config([server("tls", url, tls={"caBundle": {"file": str(ca_file)}})], [key("c", secret, ["tls"])])
    )
    refused = _add(without, secret)
    assert refused.status_code == 502, refused.text[:400]
    assert "requires a client certificate" in refused.text, refused.text[:400]
    assert front.tool_calls() == 0

    def presenting(cert, key_path):
        tls = {
            "caBundle": {"file": str(ca_file)},
            "clientCertificate": {"certificate": {"file": str(cert)}, "key": {"file": str(key_path)}},
        }
        return gateways.start(gateway_config([server("tls", url, tls=tls)], [key("c", secret, ["tls"])]))

    # A certificate from another authority is refused by the upstream too.
    stranger_cert, stranger_key = PrivateCa("stranger").issue("x", client=True).write(tmp_path, "stranger")
    stranger = presenting(stranger_cert, stranger_key)
    refused = _add(stranger, secret)
    assert refused.status_code == 502 and "refuses the client certificate" in refused.text, refused.text[:400]
    assert front.tool_calls() == 0

    with_cert = presenting(cert_file, key_file)
    _assert_added(_add(with_cert, secret))
    assert front.tool_calls() == 1
    log = with_cert.proc.stderr_path.read_text() + with_cert.proc.stdout_path.read_text()
    assert "PRIVATE KEY" not in log


def test_tls12_mtls_upstream_without_a_client_certificate_is_named(gateways, fronts, upstream, tmp_path):
    """TLS 1.2 has no `certificate_required` alert: OpenSSL ends the handshake of a client that
    sent no certificate with a bare `handshake_failure`. The gateway noted that the upstream
    asked for a certificate it does not have, and says so (issue 35, item 8), as it does for
    TLS 1.3."""
    ca, clients = PrivateCa("srv12"), PrivateCa("clients12")
    front = fronts(upstream.base, _localhost_cert(ca), client_ca=clients, tls_maximum_version=ssl.TLSVersion.TLSv1_2)
    url = f"{front.url}/mcp"
    secret = new_secret("tls-key")
    ca_file = ca.write(tmp_path)
    cert_file, key_file = clients.issue("switchboard-gateway", client=True).write(tmp_path, "gw-client12")
    SECRETS_USED.add(key_file.read_text().split("\n")[1])

    # The front speaks TLS 1.2 and no newer: a client with the right certificate gets 1.2.
    context = ssl.create_default_context(cafile=str(ca_file))
    context.load_cert_chain(str(cert_file), str(key_file))
    host, port = front.url.removeprefix("https://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw, context.wrap_socket(raw, server_hostname="localhost") as tls:
        assert tls.version() == "TLSv1.2", tls.version()

    without = gateways.start(
        gateway_config([server("tls", url, tls={"caBundle": {"file": str(ca_file)}})], [key("c", secret, ["tls"])])
    )
    refused = _add(without, secret)
    _assert_refused(refused, "requires a client certificate (tls.clientCertificate)", url)
    assert "asked for one" in refused.text, refused.text[:400]
    assert front.tool_calls() == 0

    tls = {
        "caBundle": {"file": str(ca_file)},
        "clientCertificate": {"certificate": {"file": str(cert_file)}, "key": {"file": str(key_file)}},
    }
    with_cert = gateways.start(gateway_config([server("tls", url, tls=tls)], [key("c", secret, ["tls"])]))
    _assert_added(_add(with_cert, secret))
    assert front.tool_calls() == 1


def test_certificate_for_another_name_is_refused_and_server_name_fixes_it(gateways, fronts, upstream, tmp_path):
    ca = PrivateCa("names")
    front = fronts(upstream.base, ca.issue("mcp.corp.internal", dns=("mcp.corp.internal",)))
    url = f"{front.url}/mcp"
    ca_file = str(ca.write(tmp_path))
    secret = new_secret("tls-key")

    def start(**tls):
        return gateways.start(
            gateway_config([server("tls", url, tls={"caBundle": {"file": ca_file}, **tls})], [key("c", secret, ["tls"])])
        )

    _assert_refused(_add(start(), secret), "not valid for the expected name", url)
    _assert_refused(_add(start(serverName="other.corp.internal"), secret), "not valid for the expected name", url)
    assert front.tool_calls() == 0
    _assert_added(_add(start(serverName="mcp.corp.internal"), secret))
    assert front.tool_calls() == 1


def test_rotated_ca_bundle_file_is_taken_without_a_restart(gateways, fronts, upstream, tmp_path):
    ca = PrivateCa("rotated")
    front = fronts(upstream.base, _localhost_cert(ca))
    url = f"{front.url}/mcp"
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(PrivateCa("old").cert_pem)
    secret = new_secret("tls-key")
    gw = gateways.start(gateway_config([server("tls", url, tls={"caBundle": {"file": str(bundle)}})], [key("c", secret, ["tls"])]))
    pid = gw.proc.popen.pid
    _assert_refused(_add(gw, secret), "signed by an unknown authority", url)

    tmp = tmp_path / "bundle.pem.new"
    tmp.write_bytes(ca.cert_pem)
    tmp.replace(bundle)
    wait_until(lambda: _add(gw, secret).status_code == 200, timeout=15, what="the rotated CA bundle to be taken")
    _assert_added(_add(gw, secret))
    assert gw.proc.popen.pid == pid and gw.proc.popen.poll() is None, "the gateway restarted"
    assert front.tool_calls() >= 1


def test_token_endpoint_over_https_with_a_private_ca(gateways, fronts, upstream, tmp_path):
    ca = PrivateCa("idp")
    front = fronts(upstream.base, _localhost_cert(ca))
    secret = new_secret("tls-key")
    client_id = f"tls{new_secret('c')[-8:]}"
    auth = oauth_server(upstream, client_id)
    auth["tokenUrl"] = f"{front.url}/oauth/token"
    before = token_requests(upstream)

    # The server itself is plain HTTP: its token endpoint is the HTTPS one, and uses its TLS.
    refused = gateways.start(gateway_config([server("tls", upstream.mcp_url, auth=auth)], [key("c", secret, ["tls"])]))
    response = _add(refused, secret)
    assert response.status_code in (401, 502), response.text[:400]
    assert token_requests(upstream) == before, "a token request went out over an untrusted connection"

    served = gateways.start(
        gateway_config(
            [server("tls", upstream.mcp_url, auth=auth, tls={"caBundle": {"file": str(ca.write(tmp_path))}})],
            [key("c", secret, ["tls"])],
        )
    )
    _assert_added(_add(served, secret))
    assert token_requests(upstream) == before + 1
    assert any(path == "/oauth/token" for _, _, path, _, _ in front.served), front.served


def test_llm_provider_over_https_with_a_private_ca(gateways, procs, fronts, tmp_path):
    provider = start_provider(procs)
    ca = PrivateCa("llm")
    front = fronts(provider.url, _localhost_cert(ca))
    secret = new_secret("llm-key")

    def start(**extra):
        config = gateway_config([], [key("c", secret, accessGroups=["g"])])
        config["models"] = [model("claude", "anthropic", front.url, provider.api_key, accessGroups=["g"], **extra)]
        return gateways.start(config)

    def ask(gw):
        return httpx.post(
            f"{gw.url}/v1/messages",
            headers={"x-api-key": secret, "anthropic-version": ANTHROPIC_VERSION},
            json={"model": "claude", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
        )

    refused = ask(start())
    assert refused.status_code >= 500, refused.text[:400]
    assert "unknown authority" in refused.text, refused.text[:400]
    assert provider.model_calls() == []

    answered = ask(start(tls={"caBundle": {"file": str(ca.write(tmp_path))}}))
    assert answered.status_code == 200, answered.text[:400]
    assert "scripted default answer" in answered.text
    assert len(provider.model_calls()) == 1
    assert any(path == "/v1/messages" for _, _, path, _, _ in front.served)


def test_redirect_from_http_to_https_keeps_the_credential_rules(gateways, fronts, session_procs, tmp_path):
    a = start_rust_upstream(session_procs, "tls-redirect-a")
    b = start_rust_upstream(session_procs, "tls-redirect-b")
    a.reset()
    b.reset()
    ca = PrivateCa("redirect")
    front = fronts(b.base, _localhost_cert(ca))
    token = new_secret("bearer")
    secret = new_secret("tls-key")
    entry = server(
        "tls",
        a.variant_url(f"redirect={pct(front.url + '/mcp')}"),
        auth={"type": "bearer", "secret": token},
        tls={"caBundle": {"file": str(ca.write(tmp_path))}},
    )
    gw = gateways.start(gateway_config([entry], [key("c", secret, ["tls"])]))
    _assert_added(_add(gw, secret))
    first = [r for r in a.recent_requests() if r["method"] == "tools/call"]
    assert first and first[0]["headers"].get("authorization") == f"Bearer {token}", first
    landed = b.recent_requests()
    assert any(r["method"] == "tools/call" for r in landed), landed
    for r in landed:
        assert "authorization" not in r["headers"], f"the credential crossed to another origin: {r['headers']}"
        assert token not in json.dumps(r["headers"])
    assert front.tool_calls() == 1, "the redirect target was reached over TLS"


def test_bad_tls_settings_name_the_field_and_keep_serving(gateways, upstream, tmp_path):
    secret = new_secret("tls-key")
    good = gateway_config([server("tls", upstream.mcp_url)], [key("c", secret, ["tls"])])
    gw = gateways.start(good)
    _assert_added(_add(gw, secret))
    broken = gateway_config(
        [server("tls", upstream.mcp_url, tls={"caBundle": "not a certificate", "serverName": "bad name!"})],
        [key("c", secret, ["tls"])],
    )
    write_config(gw.config_path, broken)
    log = lambda: gw.proc.stderr_path.read_text() + gw.proc.stdout_path.read_text()  # noqa: E731
    wait_until(lambda: "servers[0].tls.caBundle" in log(), timeout=15, what="the refusal to be logged")
    assert "servers[0].tls.serverName" in log()
    _assert_added(_add(gw, secret))
