"""A small REST API built with FastAPI, for the OpenAPI-backed server tests
(tests/e2e/test_openapi_servers.py). Its OpenAPI 3.1 document is the one FastAPI generates
(`GET /openapi.json`), so the gateway compiles what a real framework writes: request bodies of
nested pydantic models (`$ref`s into `components/schemas`), Python enums (a body field and a
query parameter), path, query and header parameters, a declared 404, and a PATCH whose body is
`application/merge-patch+json` (answered 415 when sent as another media type).

Run as a process; it prints one line when it accepts connections:

    listening on http://127.0.0.1:PORT

Every API operation requires `Authorization: Bearer <token>` where sha256(token) is the
`--token-sha256` argument (the test computes it from the token its token endpoint issues), and
answers 401 without it. The token itself never reaches this process's arguments or output.

What it received is recorded for the test (`GET /_requests`, `POST /_reset`): method, raw path,
query pairs, headers (the `Authorization` value replaced by its sha256), the JSON body, and the
status and JSON body of the answer. Nothing is printed per request.

Test-only routes (outside the document, no token needed):

| route | what |
|---|---|
| `GET /_requests` | the recorded requests, oldest first |
| `POST /_reset` | forget the recorded requests and the orders |
| `GET /_doc/{variant}` | other documents: `garbage` (not JSON), `swagger2` (a Swagger 2.0 document), `undeclared` (the real document plus an operation whose path parameter is not declared), `fewer` (the real document without `createOrder`), `live` (the variant last `PUT`, at first the real document) |
| `PUT /_doc/live/{variant}` | which variant `GET /_doc/live` serves |
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import socket
import sys
from enum import Enum
from typing import Any
from urllib.parse import parse_qsl

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field, ValidationError

# --------------------------------------------------------------------------------------------
# The API's models


class Size(str, Enum):
    small = "small"
    medium = "medium"
    large = "large"


class Priority(str, Enum):
    low = "low"
    normal = "normal"
    urgent = "urgent"


class Address(BaseModel):
    street: str
    city: str
    postcode: str | None = None


class Customer(BaseModel):
    name: str
    email: str
    address: Address


class Item(BaseModel):
    sku: str
    quantity: int = Field(ge=1, description="How many")
    size: Size


class OrderIn(BaseModel):
    customer: Customer
    items: list[Item] = Field(min_length=1)
    gift: bool = False


class Order(BaseModel):
    id: str
    store: str
    priority: Priority
    request_id: str | None
    customer: Customer
    items: list[Item]
    gift: bool


class OrderPatch(BaseModel):
    """A JSON merge patch (RFC 7396) of an order: the fields given replace the order's."""

    priority: Priority | None = None
    gift: bool | None = None


# The patch's schema as the document's request body (FastAPI only writes the models its
# parameters use); its reference to Priority points into components/schemas like the others.
ORDER_PATCH_SCHEMA = {
    k: v for k, v in OrderPatch.model_json_schema(ref_template="#/components/schemas/{model}").items() if k != "$defs"
}


class NotFound(BaseModel):
    detail: str


INVENTORY = [
    Item(sku="tee-1", quantity=12, size=Size.small),
    Item(sku="tee-1", quantity=3, size=Size.large),
    Item(sku="mug-2", quantity=40, size=Size.medium),
]

# --------------------------------------------------------------------------------------------
# The app


def build_app(token_sha256: str) -> FastAPI:
    orders: dict[tuple[str, str], Order] = {}
    bearer = HTTPBearer(auto_error=False)

    def require_token(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if creds is None:
            raise HTTPException(401, "a bearer token is required", headers={"WWW-Authenticate": "Bearer"})
        if hashlib.sha256(creds.credentials.encode()).hexdigest() != token_sha256:
            raise HTTPException(
                401, "the bearer token is not one this API accepts",
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )

    api = APIRouter(dependencies=[Depends(require_token)])

    @api.post(
        "/stores/{store_id}/orders",
        operation_id="createOrder",
        tags=["orders"],
        status_code=201,
        response_model=Order,
        summary="Place an order",
    )
    def create_order(
        store_id: str,
        order: OrderIn,
        priority: Priority = Priority.normal,
        x_request_id: str | None = Header(default=None, description="Echoed in the order"),
    ) -> Order:
        made = Order(
            id=f"o{len(orders) + 1}",
            store=store_id,
            priority=priority,
            request_id=x_request_id,
            customer=order.customer,
            items=order.items,
            gift=order.gift,
        )
        orders[(store_id, made.id)] = made
        return made

    @api.get(
        "/stores/{store_id}/orders/{order_id}",
        operation_id="getOrder",
        tags=["orders"],
        response_model=Order,
        responses={404: {"model": NotFound, "description": "No such order"}},
        summary="One order",
    )
    def get_order(store_id: str, order_id: str) -> Order:
        found = orders.get((store_id, order_id))
        if found is None:
            raise HTTPException(404, f"order {order_id} not found in store {store_id}")
        return found

    @api.patch(
        "/stores/{store_id}/orders/{order_id}",
        operation_id="updateOrder",
        tags=["orders"],
        response_model=Order,
        responses={404: {"model": NotFound, "description": "No such order"}},
        summary="Change an order",
        # A body of another JSON media type than application/json, as Kubernetes' PATCH has.
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/merge-patch+json": {"schema": ORDER_PATCH_SCHEMA}},
            }
        },
    )
    async def update_order(store_id: str, order_id: str, request: Request) -> Order:
        if request.headers.get("content-type") != "application/merge-patch+json":
            raise HTTPException(415, "the body must be application/merge-patch+json")
        try:
            patch = OrderPatch.model_validate_json(await request.body())
        except ValidationError as e:
            raise HTTPException(422, json.loads(e.json(include_url=False))) from None
        found = orders.get((store_id, order_id))
        if found is None:
            raise HTTPException(404, f"order {order_id} not found in store {store_id}")
        changed = found.model_copy(update=patch.model_dump(exclude_none=True))
        orders[(store_id, order_id)] = changed
        return changed

    @api.delete(
        "/stores/{store_id}/orders/{order_id}",
        operation_id="cancelOrder",
        tags=["admin"],
        status_code=204,
        summary="Cancel an order",
    )
    def cancel_order(store_id: str, order_id: str) -> Response:
        if orders.pop((store_id, order_id), None) is None:
            raise HTTPException(404, f"order {order_id} not found in store {store_id}")
        return Response(status_code=204)

    # No operation_id: FastAPI derives one (list_inventory_stores__store_id__inventory_get).
    @api.get("/stores/{store_id}/inventory", tags=["inventory"], response_model=list[Item])
    def list_inventory(
        store_id: str,
        size: Size | None = None,
        limit: int = Query(default=10, ge=1, le=100),
    ) -> list[Item]:
        return [i for i in INVENTORY if size is None or i.size == size][:limit]

    app = FastAPI(title="Shop", version="1.0.0")
    app.include_router(api)

    live = {"variant": "real"}

    @app.put("/_doc/live/{variant}", include_in_schema=False)
    def set_live_document(variant: str) -> dict:
        live["variant"] = variant
        return live

    @app.get("/_doc/{variant}", include_in_schema=False)
    def other_document(variant: str) -> Response:
        if variant == "live":
            variant = live["variant"]
        if variant == "real":
            return Response(json.dumps(app.openapi()), media_type="application/json")
        if variant == "fewer":
            document = json.loads(json.dumps(app.openapi()))
            del document["paths"]["/stores/{store_id}/orders"]["post"]
            return Response(json.dumps(document), media_type="application/json")
        if variant == "garbage":
            return Response("{this is not: json", media_type="application/json")
        if variant == "swagger2":
            body = {"swagger": "2.0", "info": {"title": "old", "version": "1"}, "paths": {}}
            return Response(json.dumps(body), media_type="application/json")
        if variant == "undeclared":
            document = json.loads(json.dumps(app.openapi()))
            document["paths"]["/stores/{store_id}/things/{thing_id}"] = {
                "get": {
                    "operationId": "getThing",
                    "tags": ["orders"],
                    "parameters": [{"name": "store_id", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "ok"}},
                }
            }
            return Response(json.dumps(document), media_type="application/json")
        raise HTTPException(404, f"no document variant {variant}")

    return app


class Recorder:
    """ASGI middleware: records every request but the test routes `/_requests` and `/_reset`
    (what came in, and the status and body that went out). The bearer token is kept as its
    sha256 only."""

    def __init__(self, app: Any):
        self.app = app
        self.seen: list[dict] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        if path == "/_requests":
            return await self._reply(send, 200, self.seen)
        if path == "/_reset":
            self.seen.clear()
            self.app_state_reset()
            return await self._reply(send, 200, {"reset": True})

        headers: dict[str, str] = {}
        auth_sha256 = None
        for k, v in scope["headers"]:
            name, value = k.decode("latin-1").lower(), v.decode("latin-1")
            if name == "authorization":
                scheme, _, credential = value.partition(" ")
                auth_sha256 = f"{scheme} sha256:{hashlib.sha256(credential.encode()).hexdigest()}"
                value = "<recorded as auth_sha256>"
            headers[name] = value
        entry: dict[str, Any] = {
            "method": scope["method"],
            "path": scope.get("raw_path", path.encode()).decode("latin-1"),
            "query": parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True),
            "headers": headers,
            "auth_sha256": auth_sha256,
            "body": None,
            "status": None,
            "response": None,
        }
        self.seen.append(entry)
        body = bytearray()
        out = bytearray()

        async def recv():
            msg = await receive()
            if msg["type"] == "http.request":
                body.extend(msg.get("body", b""))
                if not msg.get("more_body"):
                    entry["body"] = _json_or_text(bytes(body))
            return msg

        async def snd(msg):
            if msg["type"] == "http.response.start":
                entry["status"] = msg["status"]
            elif msg["type"] == "http.response.body":
                out.extend(msg.get("body", b""))
                if not msg.get("more_body") and path != "/openapi.json" and not path.startswith("/_doc/"):
                    entry["response"] = _json_or_text(bytes(out))
            await send(msg)

        await self.app(scope, recv, snd)

    def app_state_reset(self) -> None:
        pass  # replaced in main(): the orders live in the app

    @staticmethod
    async def _reply(send, status: int, value: Any) -> None:
        data = json.dumps(value).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})


def _json_or_text(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--token-sha256", required=True, help="sha256 (hex) of the one bearer token accepted")
    args = p.parse_args()

    holder: dict[str, FastAPI] = {}

    def fresh() -> None:
        holder["app"] = build_app(args.token_sha256)
        recorder.app = holder["app"]

    recorder = Recorder(None)
    recorder.app_state_reset = fresh
    fresh()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(128)
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(recorder, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    print(f"listening on http://{host}:{port} rest-api", flush=True)
    sys.stdout.flush()
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
