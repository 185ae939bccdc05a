"""OpenAPI-backed servers (`servers[].openapi`, issue 24 acceptance 3): a real REST API whose
OpenAPI 3.1 document its framework generates, served by the gateway as MCP tools.

The API is a FastAPI app run as its own process (`upstreams/rest_api.py`): an order endpoint
whose JSON body is nested pydantic models (`$ref`s into `components/schemas`), Python enums in
the body and in a query parameter, path, query and header parameters, a declared 404. It
accepts only the bearer token a token endpoint run here issues (a minimal OAuth 2.0
client-credentials endpoint, `TokenEndpoint`) and records what reached it: method, raw path,
query, headers (the token as its sha256), the JSON body, and its answer.

Through the gateway, the official Python SDK client in both eras lists the selected operations
(derived names, input schemas with the nested body inlined and the enums' values) and calls
them; the API receives exactly the path, query, header and body values, with the token from
the token endpoint and never the gateway key; JSON answers come back as `structuredContent`
equal to what the API sent, a 404 as a tool error naming the status, an enum value outside the
enum as FastAPI's 422 (the gateway does not validate arguments against the schema; it only
refuses arguments the operation does not have or lacks a required one, before any request).

A body the document gives another JSON media type (`application/merge-patch+json`) is sent as
that type; a path argument that would leave its segment (`..`, `.`, empty: the URL parser would
take the request to another path) is refused before any request, as are missing and unknown
arguments. A token the API refuses ends, after one renewal and one retry, in an upstream-auth
error.

The document comes from `documentUrl` (fetched by the gateway with the server's credential, again
after `gateway.listingTtl`) or `document` (inline, `env`, `file`). A broken inline document refuses the config naming
`servers[i].openapi.document` while the previous config keeps serving; a fetched document that
does not parse is an error naming the problem on `tools/list` and `tools/call`; an operation
that cannot be expressed is left out with a warning naming its document path. Selection by
tags, operationIds, paths, methods and exclude lists exactly the expected tools (a new
selection applies with the config), and an operation left out is an unknown tool that never
reaches the API. Scope comes before any I/O (a key that does not reach the server causes no
fetch and no call), and a virtual server narrows an OpenAPI server like any other (a renamed
operation with its path parameter fixed).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
import yaml
from harness import (
    E2E_DIR,
    INVALID_PARAMS,
    LISTING_ERRORS_META,
    MODERN_VERSION,
    UPSTREAM_UNAVAILABLE,
    AsgiServer,
    ProcessGroup,
    RawMcp,
    gateway_config,
    inline_defs,
    key,
    new_secret,
    read_asgi_request,
    run_async,
    schema_refs,
    sdk_client,
    sdk_text,
    server,
    wait_until,
)

REST_API = E2E_DIR / "upstreams" / "rest_api.py"
ERAS = ("legacy", MODERN_VERSION)
UPSTREAM_AUTH_FAILED = -32003

INVENTORY_TOOL = "list_inventory_stores_store_id_inventory_get"  # FastAPI's generated operationId, cleaned
ORDER_TOOLS = ["createOrder", "getOrder", "updateOrder"]  # tag "orders"
ALL_TOOLS = sorted([*ORDER_TOOLS, "cancelOrder", INVENTORY_TOOL])
PRIORITIES = ["low", "normal", "urgent"]
SIZES = ["small", "medium", "large"]

ORDER = {
    "customer": {
        "name": "Ada Lovelace",
        "email": "ada@example.test",
        "address": {"street": "12 Analytical Row", "city": "London", "postcode": "N1 9GU"},
    },
    "items": [{"sku": "tee-1", "quantity": 2, "size": "large"}, {"sku": "mug-2", "quantity": 1, "size": "small"}],
    "gift": True,
}


# --------------------------------------------------------------------------------------------
# The world: a token endpoint, the REST API


class TokenEndpoint:
    """A minimal OAuth 2.0 token endpoint (RFC 6749 client credentials; client_secret_post or
    client_secret_basic). Each registered client gets one token of its own; `forms` records
    every request (the client secret redacted)."""

    def __init__(self):
        self.clients: dict[str, tuple[str, str]] = {}
        self.forms: list[dict] = []
        self.server = AsgiServer(self.app, name="token-endpoint")

    @property
    def url(self) -> str:
        return f"{self.server.url}/oauth/token"

    def register(self, label: str) -> dict:
        """A new client; returns its `auth` block for `oauth2ClientCredentials` and its token."""
        client_id = f"{label}-{new_secret('c').rsplit('-', 1)[1][:8]}"
        secret, token = new_secret(f"{label}-client-secret"), new_secret(f"{label}-token")
        self.clients[client_id] = (secret, token)
        auth = {"type": "oauth2ClientCredentials", "tokenUrl": self.url, "clientId": client_id, "clientSecret": secret}
        return {"auth": auth, "client_id": client_id, "token": token}

    def requests_by(self, client_id: str) -> list[dict]:
        return [f for f in self.forms if f.get("client_id") == client_id]

    async def app(self, scope, receive, send):
        if scope["type"] != "http":
            return
        request = await read_asgi_request(scope, receive)
        if request is None:
            return
        body, headers = request
        form = dict(parse_qsl(body.decode(), keep_blank_values=True))
        basic = headers.get("authorization", "")
        if basic.lower().startswith("basic "):
            cid, _, secret = base64.b64decode(basic[6:]).decode().partition(":")
            form.setdefault("client_id", cid)
        else:
            secret = form.get("client_secret", "")
        self.forms.append({**form, "client_secret": "<redacted>" if "client_secret" in form else None})
        known = self.clients.get(form.get("client_id", ""))
        if form.get("grant_type") != "client_credentials":
            status, answer = 400, {"error": "unsupported_grant_type"}
        elif known is None or known[0] != secret:
            status, answer = 401, {"error": "invalid_client"}
        else:
            status, answer = 200, {"access_token": known[1], "token_type": "Bearer", "expires_in": 3600}
        data = json.dumps(answer).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]})
        await send({"type": "http.response.body", "body": data})


class Shop:
    """The FastAPI app (a process) and the token endpoint whose token it accepts."""

    def __init__(self, group: ProcessGroup):
        self.tokens = TokenEndpoint()
        self.tokens.server.start()
        shop = self.tokens.register("shop")
        self.auth, self.client_id, self.token = shop["auth"], shop["client_id"], shop["token"]
        digest = hashlib.sha256(self.token.encode()).hexdigest()
        argv = [sys.executable, str(REST_API), "--port", "0", "--token-sha256", digest]
        self.proc = group.start("rest-api", argv, ready_timeout=30)
        self.url = self.proc.url
        self.expected_auth = f"Bearer sha256:{digest}"

    def reset(self) -> None:
        httpx.post(f"{self.url}/_reset", timeout=5).raise_for_status()
        self.tokens.forms.clear()

    def requests(self) -> list[dict]:
        r = httpx.get(f"{self.url}/_requests", timeout=5)
        r.raise_for_status()
        return r.json()

    def api_requests(self) -> list[dict]:
        """The API operations that reached it (not the document fetches)."""
        return [r for r in self.requests() if r["path"] != "/openapi.json" and not r["path"].startswith("/_doc/")]

    def document_text(self) -> str:
        return httpx.get(f"{self.url}/openapi.json", timeout=5).text


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    group = ProcessGroup(tmp_path_factory.mktemp("rest-api-logs"))
    world = None
    try:
        world = Shop(group)
        yield world
    finally:
        group.stop_all()
        if world is not None:
            world.tokens.server.stop()


@pytest.fixture(autouse=True)
def fresh(shop: Shop) -> None:
    shop.reset()


def shop_server(shop: Shop, name: str = "shop", **openapi) -> dict:
    """A server on the REST API with the shop's OAuth client; the document from /openapi.json
    unless `openapi` says otherwise."""
    spec = {"documentUrl": "/openapi.json", **openapi}
    if "document" in spec:
        del spec["documentUrl"]
    return server(name, shop.url, auth=copy.deepcopy(shop.auth), openapi=spec)


def start(gateways, shop: Shop, servers: list[dict], env: dict | None = None):
    secret = new_secret("openapi-caller")
    config = gateway_config(servers, [key("caller", secret, [s["name"] for s in servers])])
    return gateways.start(config, env=env), secret, config


def list_tools(url: str, secret: str, era: str) -> list:
    async def go():
        async with sdk_client(url, secret, era) as c:
            return (await c.list_tools()).tools

    return run_async(go)


def call(url: str, secret: str, era: str, name: str, arguments: dict):
    """Lists (so the SDK knows the output schema and validates structured content against it),
    then calls."""

    async def go():
        async with sdk_client(url, secret, era) as c:
            await c.list_tools()
            return await c.call_tool(name, arguments)

    return run_async(go)


def schema_text(schema: dict) -> str:
    return json.dumps(schema, sort_keys=True)


def no_key_reached(recorded: list[dict], secret: str) -> None:
    for r in recorded:
        assert secret not in json.dumps(r), f"the gateway key reached the API: {r}"
        assert r["auth_sha256"] != f"Bearer sha256:{hashlib.sha256(secret.encode()).hexdigest()}", r


# --------------------------------------------------------------------------------------------
# The API and its token endpoint, without the gateway (the checks the tests below rely on)


def test_the_api_accepts_only_the_token_its_endpoint_issued(shop: Shop):
    path = f"{shop.url}/stores/s1/inventory"
    assert httpx.get(path, timeout=5).status_code == 401
    assert httpx.get(path, headers={"Authorization": f"Bearer {new_secret('forged')}"}, timeout=5).status_code == 401
    form = {"grant_type": "client_credentials", "client_id": shop.client_id}
    refused = httpx.post(shop.tokens.url, data={**form, "client_secret": "wrong"}, timeout=5)
    assert refused.status_code == 401, refused.text
    issued = httpx.post(shop.tokens.url, data={**form, "client_secret": shop.auth["clientSecret"]}, timeout=5)
    assert issued.status_code == 200 and issued.json()["access_token"] == shop.token
    ok = httpx.get(path, headers={"Authorization": f"Bearer {shop.token}"}, timeout=5)
    assert ok.status_code == 200 and [i["sku"] for i in ok.json()] == ["tee-1", "tee-1", "mug-2"], ok.text
    # The PATCH takes only its own media type (what the gateway test of it relies on).
    patch = f"{shop.url}/stores/s1/orders/o1"
    auth = {"Authorization": f"Bearer {shop.token}"}
    as_json = httpx.patch(patch, json={"gift": True}, headers=auth, timeout=5)
    assert as_json.status_code == 415, as_json.text
    as_merge_patch = httpx.patch(patch, content=b'{"gift": true}', timeout=5,
                                 headers={**auth, "Content-Type": "application/merge-patch+json"})
    assert as_merge_patch.status_code == 404, as_merge_patch.text  # past the media type check: no order o1
    statuses = [(r["status"], r["auth_sha256"] == shop.expected_auth) for r in shop.api_requests()]
    assert statuses == [(401, False), (401, False), (200, True), (415, True), (404, True)], statuses
    assert shop.token not in json.dumps(shop.requests()) and shop.token not in shop.proc.log_text()
    document = json.loads(shop.document_text())
    assert document["openapi"].startswith("3.1"), document["openapi"]


# --------------------------------------------------------------------------------------------
# Listing


@pytest.mark.parametrize("era", ERAS)
def test_sdk_lists_the_selected_operations_with_resolved_schemas(gateways, shop: Shop, era: str):
    gw, secret, _ = start(gateways, shop, [shop_server(shop, operations={"tags": ["orders", "inventory"]})])
    tools = {t.name: t for t in list_tools(gw.mcp_url("shop"), secret, era)}
    assert sorted(tools) == sorted([*ORDER_TOOLS, INVENTORY_TOOL]), sorted(tools)

    create = tools["createOrder"]
    assert create.description == "Place an order"
    # Each referenced schema once, under the tool schema's own `$defs` (the body refers to
    # Customer and Item, Customer to Address: none is copied where used), every reference naming
    # one of them.
    listed = create.input_schema
    assert {"Customer", "Address", "Item"} <= set(listed.get("$defs", {})), sorted(listed.get("$defs", {}))
    assert all(r.startswith("#/$defs/") for r in schema_refs(listed)), schema_refs(listed)
    schema = inline_defs(listed)
    assert schema["type"] == "object"
    assert set(schema["required"]) == {"store_id", "body"}, schema["required"]
    assert set(schema["properties"]) == {"store_id", "priority", "x-request-id", "body"}, schema["properties"]
    priority = schema["properties"]["priority"]
    assert priority["enum"] == PRIORITIES, priority
    assert priority.get("default") == "normal", f"the default next to the $ref (OpenAPI 3.1) is kept: {priority}"
    body = schema["properties"]["body"]
    assert set(body["required"]) == {"customer", "items"}, body
    address = body["properties"]["customer"]["properties"]["address"]
    assert address["type"] == "object" and set(address["required"]) == {"street", "city"}, address
    assert {"street", "city", "postcode"} == set(address["properties"]), address
    item = body["properties"]["items"]["items"]
    assert item["properties"]["size"]["enum"] == SIZES, item
    assert item["properties"]["quantity"]["minimum"] == 1 and body["properties"]["items"]["minItems"] == 1
    output = inline_defs(create.output_schema)
    assert output["properties"]["priority"]["enum"] == PRIORITIES, create.output_schema

    inventory = inline_defs(tools[INVENTORY_TOOL].input_schema)
    assert set(inventory["properties"]) == {"store_id", "size", "limit"}, inventory
    assert SIZES in [branch.get("enum") for branch in inventory["properties"]["size"]["anyOf"]], inventory
    assert inventory["properties"]["limit"]["maximum"] == 100
    assert tools["getOrder"].annotations.read_only_hint is True
    assert tools["createOrder"].annotations.read_only_hint is False
    patch = inline_defs(tools["updateOrder"].input_schema)
    assert set(patch["required"]) == {"store_id", "order_id", "body"}, patch
    assert PRIORITIES in [b.get("enum") for b in patch["properties"]["body"]["properties"]["priority"]["anyOf"]], patch

    # The aggregate endpoint has the same tools under the server's prefix.
    aggregate = sorted(t.name for t in list_tools(gw.mcp_url(), secret, era))
    assert aggregate == sorted(f"shop__{n}" for n in tools), aggregate

    # The gateway fetched the document with the server's credential, and nothing else ran.
    fetched = [r for r in shop.requests() if r["path"] == "/openapi.json"]
    assert fetched and all(r["auth_sha256"] == shop.expected_auth for r in fetched), fetched
    assert shop.api_requests() == []
    no_key_reached(shop.requests(), secret)


# --------------------------------------------------------------------------------------------
# Calls


@pytest.mark.parametrize("era", ERAS)
def test_calls_reach_the_api_with_exact_values_and_the_issued_token(gateways, shop: Shop, era: str):
    gw, secret, _ = start(gateways, shop, [shop_server(shop)])
    url = gw.mcp_url("shop")
    request_id = f"req-{era}"
    made = call(url, secret, era, "createOrder",
                {"store_id": "Main St", "priority": "urgent", "x-request-id": request_id, "body": ORDER})
    assert not made.is_error, made
    (post,) = shop.api_requests()
    assert post["method"] == "POST"
    assert post["path"] == "/stores/Main%20St/orders", post["path"]
    assert post["query"] == [["priority", "urgent"]], post["query"]
    assert post["headers"]["x-request-id"] == request_id
    assert post["headers"]["content-type"] == "application/json", post["headers"]
    assert post["body"] == ORDER, f"the exact JSON body: {post['body']}"
    assert post["status"] == 201, post
    assert post["auth_sha256"] == shop.expected_auth, "the token the token endpoint issued"
    assert made.structured_content == post["response"], (made.structured_content, post["response"])
    order = made.structured_content
    assert order["store"] == "Main St" and order["priority"] == "urgent" and order["request_id"] == request_id
    assert order["customer"]["address"]["postcode"] == "N1 9GU" and order["items"][0]["size"] == "large"
    assert json.loads(sdk_text(made)) == order

    got = call(url, secret, era, "getOrder", {"store_id": "Main St", "order_id": order["id"]})
    assert not got.is_error and got.structured_content == order, got

    # A body of the media type the document gives it (a JSON merge patch, not application/json).
    patched = call(url, secret, era, "updateOrder",
                   {"store_id": "Main St", "order_id": order["id"], "body": {"priority": "low", "gift": False}})
    assert not patched.is_error, patched
    patch = shop.api_requests()[-1]
    assert patch["method"] == "PATCH" and patch["headers"]["content-type"] == "application/merge-patch+json", patch
    assert patch["body"] == {"priority": "low", "gift": False} and patch["status"] == 200, patch
    assert patched.structured_content == {**order, "priority": "low", "gift": False}
    order = patched.structured_content

    # The gateway's REST endpoint reaches the same operation.
    rest = httpx.post(f"{gw.url}/mcp-rest/tools/call", headers={"Authorization": f"Bearer {secret}"}, timeout=15,
                      json={"name": "getOrder", "server_id": "shop", "arguments": {"store_id": "Main St", "order_id": order["id"]}})
    assert rest.status_code == 200 and rest.json()["structuredContent"] == order, rest.text

    # A list answer is wrapped ({"result": [...]}: structured content is an object); an optional
    # enum query parameter and an integer one go as the API expects them.
    listed = call(gw.mcp_url(), secret, era, f"shop__{INVENTORY_TOOL}", {"store_id": "s1", "size": "large", "limit": 5})
    assert not listed.is_error, listed
    assert listed.structured_content == {"result": [{"sku": "tee-1", "quantity": 3, "size": "large"}]}
    assert shop.api_requests()[-1]["query"] == [["size", "large"], ["limit", "5"]]
    # Optional parameters left out are left out of the request.
    plain = call(url, secret, era, INVENTORY_TOOL, {"store_id": "s1"})
    assert len(plain.structured_content["result"]) == 3 and shop.api_requests()[-1]["query"] == []

    recorded = shop.requests()
    assert all(r["auth_sha256"] == shop.expected_auth for r in recorded), [r["auth_sha256"] for r in recorded]
    no_key_reached(recorded, secret)
    # Logs carry names, not payloads (invariant 8): no argument, result or token in the gateway's.
    logs = gw.proc.log_text()
    assert "tools/call" in logs, "the audit records the calls"
    for payload in ("Analytical Row", "ada@example.test", request_id, shop.token, shop.auth["clientSecret"]):
        assert payload not in logs, f"{payload!r} is in the gateway's logs"
    assert len(shop.tokens.requests_by(shop.client_id)) == 1, f"one token for every call: {shop.tokens.forms}"
    assert shop.tokens.forms[0]["client_secret"] == "<redacted>", "client_secret_post"


@pytest.mark.parametrize("era", ERAS)
def test_error_statuses_are_tool_errors_naming_the_status(gateways, shop: Shop, era: str):
    gw, secret, _ = start(gateways, shop, [shop_server(shop)])
    url = gw.mcp_url("shop")

    # A fresh gateway answers a call with no listing before it (the document is fetched for it).
    with RawMcp(gw.mcp_url(), secret, era) as mcp:
        cold = mcp.call_tool("shop__getOrder", {"store_id": "s1", "order_id": "o9"}).result
    assert cold["isError"] is True and cold["content"][0]["text"].startswith("HTTP 404 Not Found"), cold

    missing = call(url, secret, era, "getOrder", {"store_id": "s1", "order_id": "nope"})
    assert missing.is_error, missing
    text = sdk_text(missing)
    assert text.startswith("HTTP 404 Not Found") and "order nope not found in store s1" in text, text
    assert shop.api_requests()[-1]["status"] == 404

    # An enum value outside the enum: the gateway sends it (it does not validate arguments
    # against the input schema), FastAPI refuses it with 422, and that is the tool error.
    bad_query = call(url, secret, era, "createOrder", {"store_id": "s1", "priority": "whenever", "body": ORDER})
    assert bad_query.is_error, bad_query
    text = sdk_text(bad_query)
    assert text.startswith("HTTP 422") and "priority" in text and "whenever" in text, text
    assert shop.api_requests()[-1]["status"] == 422 and shop.api_requests()[-1]["query"] == [["priority", "whenever"]]
    bad_body = copy.deepcopy(ORDER)
    bad_body["items"][1]["size"] = "huge"
    bad_enum = call(url, secret, era, "createOrder", {"store_id": "s1", "body": bad_body})
    assert bad_enum.is_error and "HTTP 422" in sdk_text(bad_enum), bad_enum
    detail = json.loads(sdk_text(bad_enum).split(": ", 1)[1])["detail"]
    assert [d["loc"] for d in detail] == [["body", "items", 1, "size"]], detail
    assert shop.api_requests()[-1]["body"] == bad_body
    reached = len(shop.api_requests())

    # What the operation cannot take is refused by the gateway before any request: a missing
    # required argument, an argument the operation does not have, a path argument that would
    # leave its segment (`..` would make the URL /stores/s1/ and reach another operation's
    # path; an empty one /stores/s1/orders/, which FastAPI redirects to /stores/s1/orders).
    for tool, arguments, named in (
        ("createOrder", {"store_id": "s1"}, '"body"'),
        ("createOrder", {"store_id": "s1", "body": ORDER, "colour": "red"}, '"colour"'),
        ("getOrder", {"store_id": "s1", "order_id": ".."}, '"order_id" must not be empty, "." or ".."'),
        ("getOrder", {"store_id": ".", "order_id": "o1"}, '"store_id" must not be empty, "." or ".."'),
        ("getOrder", {"store_id": "s1", "order_id": ""}, '"order_id" must not be empty, "." or ".."'),
    ):
        refused = call(url, secret, era, tool, arguments)
        assert refused.is_error and named in sdk_text(refused), refused
    assert len(shop.api_requests()) == reached, f"refused arguments never reach the API: {shop.api_requests()[reached:]}"
    # Control: dots that are not a whole segment are data.
    dots = call(url, secret, era, "getOrder", {"store_id": "s1", "order_id": "..."})
    assert dots.is_error and "order ... not found in store s1" in sdk_text(dots), dots
    assert shop.api_requests()[-1]["path"] == "/stores/s1/orders/..."

    # Control: the same call with good values is no error.
    assert not call(url, secret, era, "createOrder", {"store_id": "s1", "body": ORDER}).is_error
    assert shop.api_requests()[-1]["status"] == 201


def test_a_token_the_api_refuses_ends_in_an_upstream_auth_error(gateways, shop: Shop):
    """Sabotage of the credential: a client the token endpoint knows, whose token the API does
    not accept. The gateway renews once and retries once, then reports the upstream's refusal;
    the caller is not asked to authenticate (the credential is the gateway's own)."""
    other = shop.tokens.register("other")
    gw, secret, _ = start(gateways, shop, [server("other", shop.url, auth=other["auth"],
                                                  openapi={"documentUrl": "/openapi.json"})])
    with RawMcp(gw.mcp_url("other"), secret, MODERN_VERSION) as mcp:
        assert "getOrder" in [t["name"] for t in mcp.list_tools().result["tools"]], "the document is public"
        reply = mcp.call_tool("getOrder", {"store_id": "s1", "order_id": "o1"})
    error = reply.error
    assert error["code"] == UPSTREAM_AUTH_FAILED and "other" in error["message"] and "401" in error["message"], error
    assert reply.status != 401 and "www-authenticate" not in reply.headers
    refused = shop.api_requests()
    assert [r["status"] for r in refused] == [401, 401], "one retry after one renewal"
    other_digest = hashlib.sha256(other["token"].encode()).hexdigest()
    assert all(r["auth_sha256"] == f"Bearer sha256:{other_digest}" for r in refused)
    assert len(shop.tokens.requests_by(other["client_id"])) == 2, shop.tokens.forms


# --------------------------------------------------------------------------------------------
# Document sources


def test_inline_env_and_file_documents(gateways, shop: Shop, tmp_path: Path):
    text = shop.document_text()
    as_yaml = yaml.safe_dump(json.loads(text), sort_keys=False)
    doc_file = tmp_path / "shop-openapi.yaml"
    doc_file.write_text(as_yaml)
    servers = [
        shop_server(shop, "inline", document=text, operations={"operationIds": ["getOrder", "createOrder"]}),
        shop_server(shop, "fromfile", document={"file": str(doc_file)}, operations={"paths": ["*/inventory"]}),
        shop_server(shop, "fromenv", document={"env": "SHOP_OPENAPI"}, operations={"methods": ["delete"]},
                    overrides=[{"operation": "cancelOrder", "name": "cancel", "description": "Cancel it."}]),
    ]
    shop.reset()
    gw, secret, _ = start(gateways, shop, servers, env={"SHOP_OPENAPI": text})
    for era in ERAS:
        names = sorted(t.name for t in list_tools(gw.mcp_url(), secret, era))
        assert names == sorted(["inline__createOrder", "inline__getOrder", f"fromfile__{INVENTORY_TOOL}",
                                "fromenv__cancel"]), names
    cancel = {t.name: t for t in list_tools(gw.mcp_url("fromenv"), secret, MODERN_VERSION)}["cancel"]
    assert cancel.description == "Cancel it." and cancel.annotations.destructive_hint is True

    made = call(gw.mcp_url(), secret, MODERN_VERSION, "inline__createOrder", {"store_id": "s2", "body": ORDER})
    assert not made.is_error and made.structured_content["priority"] == "normal", made
    order_id = made.structured_content["id"]
    got = call(gw.mcp_url("inline"), secret, "legacy", "getOrder", {"store_id": "s2", "order_id": order_id})
    assert got.structured_content == made.structured_content
    stock = call(gw.mcp_url("fromfile"), secret, "legacy", INVENTORY_TOOL, {"store_id": "s2", "size": "medium"})
    assert stock.structured_content == {"result": [{"sku": "mug-2", "quantity": 40, "size": "medium"}]}
    gone = call(gw.mcp_url("fromenv"), secret, MODERN_VERSION, "cancel", {"store_id": "s2", "order_id": order_id})
    assert not gone.is_error and sdk_text(gone) == "HTTP 204 No Content", gone
    again = call(gw.mcp_url("fromenv"), secret, MODERN_VERSION, "cancel", {"store_id": "s2", "order_id": order_id})
    assert again.is_error and "404" in sdk_text(again)
    assert [r["method"] for r in shop.api_requests()] == ["POST", "GET", "GET", "DELETE", "DELETE"]
    assert all(r["auth_sha256"] == shop.expected_auth for r in shop.api_requests())
    assert not [r for r in shop.requests() if r["path"] == "/openapi.json"], "no document was fetched"


def test_a_broken_inline_document_is_refused_naming_the_field(gateways, shop: Shop, tmp_path: Path):
    good = shop_server(shop, "shop", document=shop.document_text(), operations={"tags": ["orders"]})
    first = shop_server(shop, "first", operations={"tags": ["inventory"]})
    gw, secret, config = start(gateways, shop, [first, good])
    served = ORDER_TOOLS
    field = "servers[1].openapi.document"
    for broken_document, reason in (
        ("{this is not: json", "not valid JSON"),
        ("openapi: [3.1\n  paths: {", "not valid YAML"),
        (json.dumps({"swagger": "2.0", "info": {"title": "x", "version": "1"}, "paths": {}}), "Swagger 2.0"),
        (json.dumps({"info": {"title": "x", "version": "1"}, "paths": {}}), "openapi: is missing"),
        (json.dumps({"openapi": "2.5.0", "paths": {}}), "openapi: version \"2.5.0\" is not supported"),
        ("- just\n- a list\n", "not an OpenAPI document"),
    ):
        broken = copy.deepcopy(config)
        broken["servers"][1]["openapi"]["document"] = broken_document
        applied = gw.snapshot_applies()
        offset = len(gw.logs())
        gw.write_config(broken)
        line = wait_until(
            lambda: next((ln for ln in gw.logs()[offset:].splitlines() if field in ln), None),
            15, what=f"an error naming {field}",
        )
        assert reason in line, f"{reason!r} not in {line!r}"
        assert gw.snapshot_applies() == applied, "the broken config was not applied"
        names = sorted(t.name for t in list_tools(gw.mcp_url("shop"), secret, MODERN_VERSION))
        assert names == sorted(served), "the previous config serves"
    # The same from a file, and from a file that cannot be read.
    broken_file = tmp_path / "broken-openapi.yaml"
    broken_file.write_text("openapi: 3.1.0\npaths: [not, a, map\n")
    for source, reason in (({"file": str(broken_file)}, "not valid YAML"),
                           ({"file": str(tmp_path / "absent.yaml")}, "cannot read secret file")):
        broken = copy.deepcopy(config)
        broken["servers"][1]["openapi"]["document"] = source
        applied, offset = gw.snapshot_applies(), len(gw.logs())
        gw.write_config(broken)
        line = wait_until(lambda: next((ln for ln in gw.logs()[offset:].splitlines() if field in ln), None),
                          15, what=f"an error naming {field}")
        assert reason in line and gw.snapshot_applies() == applied, line
    got = call(gw.mcp_url("shop"), secret, "legacy", "getOrder", {"store_id": "s", "order_id": "x"})
    assert got.is_error and "404" in sdk_text(got), "and still calls the API"
    # A gateway does not start on such a config.
    with pytest.raises(AssertionError, match="exited before it was ready"):
        gateways.start(broken)
    log = gateways.group.procs[-1].log_text()
    assert f"error={field}: cannot read secret file" in log, log[-3000:]
    # Control: a good edit applies (the selection changes).
    fixed = copy.deepcopy(config)
    fixed["servers"][1]["openapi"]["operations"] = {"tags": ["admin"]}
    gw.write_config_applied(fixed)
    assert [t.name for t in list_tools(gw.mcp_url("shop"), secret, MODERN_VERSION)] == ["cancelOrder"]


def test_a_fetched_document_that_does_not_parse_is_an_error_naming_it(gateways, shop: Shop):
    servers = [
        shop_server(shop, "shop", operations={"operationIds": ["getOrder"]}),
        shop_server(shop, "garbage", documentUrl="/_doc/garbage"),
        shop_server(shop, "swagger", documentUrl="/_doc/swagger2"),
        shop_server(shop, "missing", documentUrl="/_doc/nothing-here"),
    ]
    gw, secret, _ = start(gateways, shop, servers)
    expect = {
        "garbage": f"the OpenAPI document {shop.url}/_doc/garbage: not valid JSON",
        "swagger": f"the OpenAPI document {shop.url}/_doc/swagger2: swagger: Swagger 2.0 is not supported",
        "missing": f"fetching the OpenAPI document {shop.url}/_doc/nothing-here: HTTP 404",
    }
    for era in ERAS:
        with RawMcp(gw.mcp_url(), secret, era) as mcp:
            tools, metas = mcp.list_all_tools()
            assert [t["name"] for t in tools] == ["shop__getOrder"], "the good server still lists"
            errors = {e["server"]: e["message"] for m in metas for e in m.get(LISTING_ERRORS_META) or []}
            assert set(errors) == set(expect), errors
            for name, message in expect.items():
                assert message in errors[name], (name, errors[name])
        for name, message in expect.items():
            with RawMcp(gw.mcp_url(name), secret, era) as mcp:
                listed = mcp.list_tools()
                assert listed.error["code"] == UPSTREAM_UNAVAILABLE and message in listed.error["message"], listed.message
                called = mcp.call_tool("getOrder", {"store_id": "s", "order_id": "o"})
                assert message in json.dumps(called.message), called.message

    # The SDK client sees the same error.
    async def sdk_list():
        from mcp.shared.exceptions import MCPError

        async with sdk_client(gw.mcp_url("garbage"), secret, MODERN_VERSION) as c:
            with pytest.raises(MCPError) as raised:
                await c.list_tools()
            return str(raised.value)

    assert expect["garbage"] in run_async(sdk_list)
    assert shop.api_requests() == [], "no operation was called for a document that does not parse"


def test_an_operation_that_cannot_be_expressed_is_left_out_with_a_warning(gateways, shop: Shop):
    undeclared = httpx.get(f"{shop.url}/_doc/undeclared", timeout=5).text
    problem = "paths./stores/{store_id}/things/{thing_id}.get.parameters: path parameter {thing_id} is not declared"
    servers = [
        shop_server(shop, "fetched", documentUrl="/_doc/undeclared", operations={"tags": ["orders"]}),
        shop_server(shop, "inline", document=undeclared, operations={"tags": ["orders"]}),
    ]
    gw, secret, _ = start(gateways, shop, servers)
    # The inline document is compiled with the config: the warning names the server's field.
    line = wait_until(lambda: next((ln for ln in gw.logs().splitlines() if problem in ln), None), 10,
                      what="the inline document's warning")
    assert " WARN " in line and "servers[1].openapi" in line, line
    for name in ("fetched", "inline"):
        tools = sorted(t.name for t in list_tools(gw.mcp_url(name), secret, MODERN_VERSION))
        assert tools == ORDER_TOOLS, (name, tools)
        with RawMcp(gw.mcp_url(name), secret, MODERN_VERSION) as mcp:
            unknown = mcp.call_tool("getThing", {"store_id": "s"})
            assert unknown.error["code"] == INVALID_PARAMS and "getThing" in unknown.error["message"], unknown.message
    # The fetched one when it is fetched: the warning names the server.
    fetched = [ln for ln in gw.logs().splitlines() if problem in ln and "fetched" in ln]
    assert fetched, gw.logs()[-3000:]
    assert shop.api_requests() == [], "the operation left out never reached the API"


# --------------------------------------------------------------------------------------------
# Selection


SELECTIONS = {
    "everything": ({}, ALL_TOOLS),
    "by-tag": ({"tags": ["orders"]}, ORDER_TOOLS),
    "by-id": ({"operationIds": ["*Order"], "exclude": ["create*"]}, ["cancelOrder", "getOrder", "updateOrder"]),
    "by-path": ({"paths": ["/stores/{store_id}/orders/*"], "methods": ["delete"]}, ["cancelOrder"]),
    "by-glob": ({"paths": ["*/inventory"], "tags": ["admin"]}, [INVENTORY_TOOL, "cancelOrder"]),
    "get-only": ({"methods": ["get"], "exclude": ["list_*"]}, ["getOrder"]),
}


def test_selection_lists_exactly_the_selected_operations(gateways, shop: Shop):
    servers = [shop_server(shop, name, operations=selector) for name, (selector, _) in SELECTIONS.items()]
    gw, secret, config = start(gateways, shop, servers)
    assert config["servers"][1]["name"] == "by-tag"
    for name, (_, expected) in SELECTIONS.items():
        names = sorted(t.name for t in list_tools(gw.mcp_url(name), secret, MODERN_VERSION))
        assert names == sorted(expected), (name, names)
    aggregate = sorted(t.name for t in list_tools(gw.mcp_url(), secret, "legacy"))
    assert aggregate == sorted(f"{n}__{t}" for n, (_, ts) in SELECTIONS.items() for t in ts), aggregate

    made = call(gw.mcp_url("by-tag"), secret, MODERN_VERSION, "createOrder", {"store_id": "s3", "body": ORDER})
    order_id = made.structured_content["id"]
    before = len(shop.api_requests())
    # Control: cancelOrder is not selected on by-tag, so it is an unknown tool there (both
    # endpoints, both eras) and never reaches the API ...
    for era in ERAS:
        for url, name in ((gw.mcp_url("by-tag"), "cancelOrder"), (gw.mcp_url(), "by-tag__cancelOrder")):
            with RawMcp(url, secret, era) as mcp:
                error = mcp.call_tool(name, {"store_id": "s3", "order_id": order_id}).error
            assert error["code"] == INVALID_PARAMS and "cancelOrder" in error["message"], (url, error)
    assert len(shop.api_requests()) == before
    # ... and where it is selected, the same call cancels the order.
    done = call(gw.mcp_url(), secret, "legacy", "by-path__cancelOrder", {"store_id": "s3", "order_id": order_id})
    assert not done.is_error, done
    assert [(r["method"], r["path"], r["status"]) for r in shop.api_requests()[before:]] == [
        ("DELETE", f"/stores/s3/orders/{order_id}", 204)
    ]
    # A new selection applies with the config, not when the fetched document next expires.
    changed = copy.deepcopy(config)
    changed["servers"][1]["openapi"]["operations"] = {"tags": ["admin"]}
    gw.write_config_applied(changed)
    assert [t.name for t in list_tools(gw.mcp_url("by-tag"), secret, MODERN_VERSION)] == ["cancelOrder"]




def test_a_fetched_document_is_fetched_again_after_the_listing_ttl(gateways, shop: Shop):
    """`gateway.listingTtl` bounds how long a fetched document is used: an operation the API
    stops describing stops being listed and routed (a listing replaces the server's tools)."""
    secret = new_secret("openapi-caller")
    config = gateway_config([shop_server(shop, documentUrl="/_doc/live", operations={"tags": ["orders"]})],
                            [key("caller", secret, ["shop"])], listingTtl="1s")
    gw = gateways.start(config)
    names = lambda: sorted(t.name for t in list_tools(gw.mcp_url("shop"), secret, MODERN_VERSION))  # noqa: E731
    assert names() == ORDER_TOOLS
    httpx.put(f"{shop.url}/_doc/live/fewer", timeout=5).raise_for_status()
    wait_until(lambda: names() == ["getOrder", "updateOrder"], 15, interval=0.25, what="createOrder to be withdrawn")
    with RawMcp(gw.mcp_url("shop"), secret, MODERN_VERSION) as mcp:
        error = mcp.call_tool("createOrder", {"store_id": "s1", "body": ORDER}).error
    assert error["code"] == INVALID_PARAMS and "createOrder" in error["message"], error
    assert shop.api_requests() == []
    httpx.put(f"{shop.url}/_doc/live/real", timeout=5).raise_for_status()
    wait_until(lambda: names() == ORDER_TOOLS, 15, interval=0.25, what="createOrder to be back")
    fetches = [r for r in shop.requests() if r["path"] == "/_doc/live"]
    assert len(fetches) >= 3 and all(r["auth_sha256"] == shop.expected_auth for r in fetches), len(fetches)


# --------------------------------------------------------------------------------------------
# Scope and presentation


def test_scope_and_a_virtual_server_narrow_an_openapi_server(gateways, shop: Shop):
    """Invariants 4 and 12: a key that does not reach the server neither sees nor calls its
    operations, and nothing is fetched or called for it; a virtual server presents an operation
    renamed with its path parameter fixed, and a key that reaches the virtual server but not the
    OpenAPI server behind it sees none of its tools."""
    keys = {n: new_secret(n) for n in ("full", "outsider", "desk-only")}
    config = gateway_config(
        [shop_server(shop, operations={"tags": ["orders"]})],
        [key("full", keys["full"], ["shop", "desk"]), key("outsider", keys["outsider"], []),
         key("desk-only", keys["desk-only"], ["desk"])],
    )
    config["virtualServers"] = [{"name": "desk", "sources": [{
        "server": "shop",
        "tools": {"allow": ["getOrder", "createOrder"]},
        "overrides": [{"tool": "getOrder", "name": "my_order", "description": "An order of store s1.",
                       "parameters": {"store_id": {"fixed": "s1"}}}],
    }]}]
    gw = gateways.start(config)
    for era in ERAS:
        with RawMcp(gw.mcp_url(), keys["outsider"], era) as mcp:
            assert mcp.list_tools().result["tools"] == []
            error = mcp.call_tool("shop__getOrder", {"store_id": "s1", "order_id": "o1"}).error
            assert error["code"] == INVALID_PARAMS, error
    with RawMcp(gw.mcp_url("desk"), keys["desk-only"], MODERN_VERSION) as mcp:
        assert mcp.list_tools().result["tools"] == []
        assert "error" in mcp.call_tool("my_order", {"order_id": "o1"}).message
    assert shop.requests() == [], "scope before I/O: not even the document was fetched"

    desk = {t.name: t for t in list_tools(gw.mcp_url("desk"), keys["full"], MODERN_VERSION)}
    assert sorted(desk) == ["createOrder", "my_order"], sorted(desk)
    assert set(desk["my_order"].input_schema["properties"]) == {"order_id"}, desk["my_order"].input_schema
    assert desk["my_order"].description == "An order of store s1."
    made = call(gw.mcp_url("desk"), keys["full"], "legacy", "createOrder", {"store_id": "s1", "body": ORDER})
    got = call(gw.mcp_url("desk"), keys["full"], "legacy", "my_order", {"order_id": made.structured_content["id"]})
    assert not got.is_error and got.structured_content == made.structured_content, got
    assert [r["path"] for r in shop.api_requests()] == ["/stores/s1/orders", f"/stores/s1/orders/{made.structured_content['id']}"]
    with RawMcp(gw.mcp_url("desk"), keys["full"], MODERN_VERSION) as mcp:
        chosen = mcp.call_tool("my_order", {"order_id": "o1", "store_id": "s2"})
    assert "fixed" in json.dumps(chosen.message), chosen.message
    assert len(shop.api_requests()) == 2, "a fixed value cannot be chosen"


# --------------------------------------------------------------------------------------------
# References into other documents


class DocumentHost:
    """Serves JSON documents by path on its own origin (an `AsgiServer`) and records who asked
    for which, and whether the request carried an Authorization header."""

    def __init__(self, name: str):
        self.documents: dict[str, Any] = {}
        self.seen: list[tuple[str, bool]] = []
        self.server = AsgiServer(self.app, name=name).start()

    async def app(self, scope, receive, send):
        if scope["type"] != "http":
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.seen.append((scope["path"], "authorization" in headers))
        document = self.documents.get(scope["path"])
        status, body = (200, json.dumps(document).encode()) if document is not None else (404, b"{}")
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


def _rewrite_refs(value: Any, rewrite) -> Any:
    if isinstance(value, dict):
        return {k: (rewrite(v) if k == "$ref" else _rewrite_refs(v, rewrite)) for k, v in value.items()}
    if isinstance(value, list):
        return [_rewrite_refs(v, rewrite) for v in value]
    return value


def test_references_into_other_documents_are_fetched_bounded_and_credentials_stay_on_their_origin(gateways, shop: Shop):
    """The shop's own document split in three: the operations on one host (with the server's
    credential), `components/schemas` in a second document beside it (same origin: the credential
    too), `Address` in a third on another origin (no credential). Listed through the gateway, the
    tools are exactly those of the whole document; a call with the nested body reaches the API.
    Control: with the third document gone, the listing differs and the problem is named."""
    whole = json.loads(shop.document_text())
    schemas = whole.pop("components")["schemas"]
    address = schemas.pop("Address")
    home, other = DocumentHost("doc-home"), DocumentHost("doc-other")
    try:
        elsewhere = f"{other.server.url}/shared/address.json#/Address"

        def to_schemas(ref: str) -> str:
            name = ref.rsplit("/", 1)[1]
            return elsewhere if name == "Address" else f"parts/schemas.json#/components/schemas/{name}"

        home.documents["/api/openapi.json"] = _rewrite_refs(whole, to_schemas)
        # Inside the schemas document its own references stay local, but Address is elsewhere.
        home.documents["/api/parts/schemas.json"] = {
            "components": {"schemas": _rewrite_refs(schemas, lambda r: elsewhere if r.endswith("/Address") else r)}
        }
        other.documents["/shared/address.json"] = {"Address": address}

        split = shop_server(shop, "split", documentUrl=f"{home.server.url}/api/openapi.json")
        reference = shop_server(shop, "whole")
        gw, secret, _ = start(gateways, shop, [split, reference])
        for era in ERAS:
            got = {t.name: t for t in list_tools(gw.mcp_url("split"), secret, era)}
            want = {t.name: t for t in list_tools(gw.mcp_url("whole"), secret, era)}
            assert sorted(got) == sorted(want) == ALL_TOOLS
            for name in ALL_TOOLS:
                # (the same schemas; their definitions' names under `$defs` are the bundle's)
                assert schema_text(inline_defs(got[name].input_schema)) == schema_text(inline_defs(want[name].input_schema)), name
                assert schema_text(inline_defs(got[name].output_schema or {})) == schema_text(inline_defs(want[name].output_schema or {})), name
        placed = call(gw.mcp_url("split"), secret, MODERN_VERSION, "createOrder", {"store_id": "s1", "body": ORDER})
        assert not placed.is_error, placed
        assert shop.api_requests()[-1]["body"] == ORDER
        # The credential went to the documents of the document's origin, never to the other.
        assert {p for p, auth in home.seen if auth} == {"/api/openapi.json", "/api/parts/schemas.json"}, home.seen
        assert other.seen and not any(auth for _, auth in other.seen), other.seen

        # Control: the third document gone. The gateway says which document it could not read,
        # and what needed Address no longer matches the whole document.
        other.documents.clear()
        gw2, secret2, _ = start(gateways, shop, [shop_server(shop, "split", documentUrl=f"{home.server.url}/api/openapi.json")])
        tools = {t.name: t for t in list_tools(gw2.mcp_url("split"), secret2, MODERN_VERSION)}
        body = inline_defs(tools["createOrder"].input_schema)["properties"]["body"]
        assert "street" not in schema_text(body), "Address cannot be known without its document"
        wait_until(
            lambda: "a referenced document could not be read" in gw2.logs() and "/shared/address.json" in gw2.logs(),
            10,
            what="the gateway to name the document it could not read",
        )
    finally:
        home.server.stop()
        other.server.stop()


# --------------------------------------------------------------------------------------------
# Token exchange on the caller's behalf


def test_token_exchange_gives_each_caller_their_own_token_at_the_api(gateways, procs, rust_upstream):
    """`tokenExchange` (RFC 8693, the example upstream's token endpoint): the REST call carries
    the token exchanged for the caller's own, not a shared one. A second app instance accepts
    only alice's exchanged token (`xt-<token>-1`): alice's call reaches it with that token; bob's
    exchanged token is refused there (the app saw his, not alice's), and his call fails."""
    from harness import KEY_HEADER, SECRETS_USED, token_exchange_auth

    alice, bob = new_secret("alice"), new_secret("bob")
    SECRETS_USED.update({alice, bob})
    exchanged = f"xt-{alice}-1"
    digest = hashlib.sha256(exchanged.encode()).hexdigest()
    api = procs.start("rest-api-tx", [sys.executable, str(REST_API), "--port", "0", "--token-sha256", digest], ready_timeout=30)
    client_key = new_secret("tx-client")
    auth = token_exchange_auth(rust_upstream, f"openapi-tx-{new_secret('c')[-6:]}", audience="https://shop.example")
    config = gateway_config(
        [server("tx", api.url, auth=auth, openapi={"documentUrl": "/openapi.json", "operations": {"tags": ["inventory"]}})],
        [key("client", client_key, ["tx"])],
    )
    gw = gateways.start(config)

    def as_user(user: str) -> RawMcp:
        return RawMcp(gw.mcp_url("tx"), None, MODERN_VERSION, headers={KEY_HEADER: client_key, "Authorization": f"Bearer {user}"})

    with as_user(alice) as mcp:
        stock = mcp.call_tool(INVENTORY_TOOL, {"store_id": "s1"}).result
    assert not stock.get("isError"), stock
    seen = httpx.get(f"{api.url}/_requests", timeout=5).json()
    calls = [r for r in seen if r["path"] == "/stores/s1/inventory"]
    assert calls and calls[-1]["auth_sha256"] == f"Bearer sha256:{digest}", calls

    with as_user(bob) as mcp:
        refused = mcp.call_tool(INVENTORY_TOOL, {"store_id": "s2"})
    assert "error" in refused.message or refused.message.get("result", {}).get("isError"), refused.message
    bobs = f"Bearer sha256:{hashlib.sha256(f'xt-{bob}-1'.encode()).hexdigest()}"
    seen = httpx.get(f"{api.url}/_requests", timeout=5).json()
    assert any(r["path"] == "/stores/s2/inventory" and r["auth_sha256"] == bobs for r in seen), seen
    assert all(alice not in json.dumps(r) and bob not in json.dumps(r) for r in seen), "the callers' own tokens never reach the API"
