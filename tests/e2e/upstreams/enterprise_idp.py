"""An enterprise identity provider's identity assertion leg, for tests of enterprise-managed
authorization (the MCP extension `io.modelcontextprotocol/enterprise-managed-authorization`,
draft-ietf-oauth-identity-assertion-authz-grant): an MCP client trades a person's ID token (from
the company's sign-in, here a real Keycloak) at this provider for an ID-JAG, an identity
assertion for the MCP server's authorization server (RFC 8693 token exchange), which the client
then presents there (RFC 7523 JWT bearer grant).

Keycloak 26.7.3 (the newest on Maven Central) has only the receiving side of the grant, so this
stands in for the issuing side, written from the draft and the conformance suite's mock IdP
(`@modelcontextprotocol/conformance` 0.2.0-alpha.12, `auth/enterprise-managed-authorization`):
ES256, `typ: oauth-id-jag+jwt`, five minutes, a fresh `jti`, `token_type: N_A`.

    python enterprise_idp.py --trust <Keycloak issuer> --subject-audience <its client> \\
        --client <id>:<secret> [--port N]

- `GET /.well-known/openid-configuration`: issuer, jwks_uri, token_endpoint, the token types.
- `GET /jwks`: its one signing key.
- `POST /token`: the client authenticates (client_secret_basic or client_secret_post);
  `grant_type=urn:ietf:params:oauth:grant-type:token-exchange`,
  `requested_token_type=urn:ietf:params:oauth:token-type:id-jag`, `subject_token` an ID token
  of the trusted issuer for `--subject-audience` (signature, issuer, audience, expiry checked),
  `subject_token_type=urn:ietf:params:oauth:token-type:id_token`, `audience` (the authorization
  server's issuer), optional `resource` and `scope`. The ID-JAG names the person (`sub`, and
  `groups` and `preferred_username` as the ID token had them), the client's id at that
  authorization server, the resource and the scope asked.
- `POST /_clients` (what the IdP's admin configures): `{"<id>": "<its client_id at the
  authorization server>"}`, the `client_id` its ID-JAGs name.

It prints `listening on http://127.0.0.1:PORT` once bound (port 0: the OS picks).
"""

from __future__ import annotations

import argparse
import base64
import json
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote

import jwt
from cryptography.hazmat.primitives.asymmetric import ec

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"
LIFETIME = 300


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--trust", required=True, help="the issuer whose ID tokens are exchanged")
    p.add_argument("--subject-audience", required=True, help="the client those ID tokens are for")
    p.add_argument("--client", action="append", default=[], help="id:secret")
    args = p.parse_args()

    key = ec.generate_private_key(ec.SECP256R1())
    kid = uuid.uuid4().hex[:12]
    public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    public.update({"kid": kid, "alg": "ES256", "use": "sig"})
    clients = {}  # id -> [secret, its client_id at the authorization server]
    for spec in args.client:
        client, secret = spec.split(":", 1)
        clients[client] = [secret, None]
    trusted_keys = jwt.PyJWKClient(f"{args.trust}/protocol/openid-connect/certs")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_):
            pass

        def answer(self, status: int, body: dict, headers: dict | None = None) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", "no-store")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self):
            issuer = self.server.issuer
            if self.path == "/.well-known/openid-configuration":
                self.answer(200, {
                    "issuer": issuer, "jwks_uri": f"{issuer}/jwks", "token_endpoint": f"{issuer}/token",
                    "grant_types_supported": [TOKEN_EXCHANGE],
                    "identity_chaining_requested_token_types_supported": [ID_JAG],
                    "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
                })  # fmt: skip
            elif self.path == "/jwks":
                self.answer(200, {"keys": [public]})
            else:
                self.answer(404, {"error": "not_found"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode()
            if self.path == "/_clients":
                for client, at_server in json.loads(raw).items():
                    clients[client][1] = at_server
                return self.answer(200, {})
            if self.path != "/token":
                return self.answer(404, {"error": "not_found"})
            form = {k: v[0] for k, v in parse_qs(raw).items()}
            client, secret = form.get("client_id"), form.get("client_secret")
            basic = self.headers.get("Authorization", "")
            if basic.startswith("Basic "):
                pair = base64.b64decode(basic[6:]).decode()
                client, _, secret = pair.partition(":")
                client, secret = unquote(client), unquote(secret)
            if client not in clients or clients[client][0] != secret or clients[client][1] is None:
                return self.answer(401, {"error": "invalid_client"}, {"WWW-Authenticate": 'Basic realm="idp"'})
            if form.get("grant_type") != TOKEN_EXCHANGE:
                return self.answer(400, {"error": "unsupported_grant_type"})
            if form.get("requested_token_type") != ID_JAG or form.get("subject_token_type") != ID_TOKEN:
                return self.answer(400, {"error": "invalid_request", "error_description": "an ID token for an ID-JAG only"})
            if not form.get("audience"):
                return self.answer(400, {"error": "invalid_request", "error_description": "audience is required"})
            try:
                signing = trusted_keys.get_signing_key_from_jwt(form.get("subject_token", ""))
                person = jwt.decode(
                    form["subject_token"], signing.key, algorithms=["RS256", "ES256"],
                    audience=args.subject_audience, issuer=args.trust, options={"require": ["exp", "iss", "aud", "sub"]},
                )  # fmt: skip
            except (jwt.PyJWTError, KeyError) as refused:
                return self.answer(400, {"error": "invalid_grant", "error_description": f"the subject token: {refused}"})
            now = int(time.time())
            claims = {
                "iss": self.server.issuer, "sub": person["sub"], "aud": form["audience"],
                "client_id": clients[client][1], "jti": str(uuid.uuid4()), "iat": now, "exp": now + LIFETIME,
            }  # fmt: skip
            for name in ("groups", "preferred_username", "email", "auth_time"):
                if name in person:
                    claims[name] = person[name]
            if form.get("resource"):
                claims["resource"] = form["resource"]
            if form.get("scope"):
                claims["scope"] = form["scope"]
            assertion = jwt.encode(claims, key, algorithm="ES256", headers={"typ": "oauth-id-jag+jwt", "kid": kid})
            self.answer(200, {
                "issued_token_type": ID_JAG, "access_token": assertion, "token_type": "N_A", "expires_in": LIFETIME,
                **({"scope": form["scope"]} if form.get("scope") else {}),
            })  # fmt: skip

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.issuer = f"http://127.0.0.1:{server.server_address[1]}"
    print(f"listening on {server.issuer}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
