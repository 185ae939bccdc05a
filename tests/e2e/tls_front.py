"""A TLS-terminating reverse proxy (uvicorn, Python's OpenSSL) in front of one plain-HTTP
backend: how the tests make an HTTPS upstream, a token endpoint or an LLM provider out of the
example processes, with a certificate from a private CA (private_ca.py)."""

from __future__ import annotations

import ssl

from harness import RoundRobinBalancer, new_secret
from private_ca import PrivateCa


class TlsFront(RoundRobinBalancer):
    """A TLS-terminating reverse proxy in front of one backend."""

    def __init__(
        self,
        backend: str,
        tmp_path,
        cert,
        *,
        client_ca: PrivateCa | None = None,
        tls_maximum_version: ssl.TLSVersion | None = None,
    ):
        super().__init__([backend])
        cert_file, key_file = cert.write(tmp_path, f"front-{new_secret('c')[-8:]}")
        self.ssl = {"ssl_certfile": str(cert_file), "ssl_keyfile": str(key_file)}
        if client_ca is not None:
            self.ssl |= {"ssl_ca_certs": str(client_ca.write(tmp_path)), "ssl_cert_reqs": ssl.CERT_REQUIRED}
        self.tls_maximum_version = tls_maximum_version

    def tool_calls(self) -> int:
        return sum(1 for _, method, _, _, rpc in self.served if method == "POST" and rpc == "tools/call")
