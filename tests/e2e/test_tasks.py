"""Tasks (the 2026-07-28 tasks extension) are routed by task id on any replica: a task created
through `/mcp` comes back as `<prefix>__<taskId>`, so `tasks/get` and `tasks/cancel` on another
replica reach the server that created it; the upstream gets its own id, in the body and in
`Mcp-Name` as the extension requires. On `/mcp/{prefix}` task ids pass through unchanged.

The upstreams are purpose-built ASGI apps: `long` creates a task when the request declares the
extension; `tasks/get` and `tasks/cancel` refuse (400, -32020) an `Mcp-Name` that is not the
task id, and (-32602) a task id they did not create. Two of them hand out the same task ids, so
a task routed to the wrong server is caught.
"""

from __future__ import annotations

import json
import threading

import pytest

from harness import (
    MODERN_VERSION,
    AsgiServer,
    RawMcp,
    balancer,
    gateway_config,
    key,
    new_secret,
    read_asgi_request,
    server,
    write_config,
)

TASKS = "io.modelcontextprotocol/tasks"


class TaskUpstream:
    def __init__(self, name: str):
        self.name = name
        self.tasks: dict[str, str] = {}
        self.seen: list[tuple[str, str | None, str | None]] = []  # (method, Mcp-Name, taskId)
        self.lock = threading.Lock()

    async def app(self, scope, receive, send):
        if scope["type"] != "http":
            return
        request = await read_asgi_request(scope, receive)
        if request is None:
            return
        body, headers = request
        msg = json.loads(body)
        method, params = msg.get("method"), msg.get("params") or {}
        status, answer = 200, None
        with self.lock:
            self.seen.append((method, headers.get("mcp-name"), params.get("taskId")))
            if method == "tools/call" and params.get("name") == "long":
                caps = params.get("_meta", {}).get("io.modelcontextprotocol/clientCapabilities", {})
                if TASKS in (caps.get("extensions") or {}):
                    task_id = f"t{len(self.tasks) + 1}"
                    self.tasks[task_id] = "working"
                    answer = {"result": self.task(task_id, "task")}
                else:
                    answer = {"result": {"resultType": "complete", "content": [{"type": "text", "text": "sync"}]}}
            elif method in ("tasks/get", "tasks/cancel"):
                task_id = params.get("taskId")
                if headers.get("mcp-name") != task_id:
                    status, answer = 400, {"error": {"code": -32020, "message": "Header mismatch: Mcp-Name"}}
                elif task_id not in self.tasks:
                    status, answer = 400, {"error": {"code": -32602, "message": f"unknown task {task_id}"}}
                else:
                    if method == "tasks/cancel":
                        self.tasks[task_id] = "cancelled"
                    answer = {"result": self.task(task_id, "complete")}
            elif method == "server/discover":
                answer = {
                    "result": {
                        "resultType": "complete",
                        "supportedVersions": [MODERN_VERSION],
                        "capabilities": {"tools": {}, "extensions": {TASKS: {}}},
                        "ttlMs": 0,
                        "cacheScope": "private",
                    }
                }
            else:
                status, answer = 404, {"error": {"code": -32601, "message": "Method not found"}}
        data = json.dumps({"jsonrpc": "2.0", "id": msg.get("id"), **answer}).encode()
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})

    def task(self, task_id: str, result_type: str) -> dict:
        return {
            "resultType": result_type,
            "taskId": task_id,
            "status": self.tasks[task_id],
            "createdAt": "2026-11-30T00:00:00Z",
            "lastUpdatedAt": "2026-11-30T00:00:00Z",
            "ttlMs": 60000,
            "upstream": self.name,
        }


def with_tasks(params: dict) -> dict:
    return {
        **params,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
        },
    }


@pytest.fixture
def task_world(gateways):
    alpha, beta = TaskUpstream("alpha"), TaskUpstream("beta")
    servers = [AsgiServer(u.app, name=f"tasks-{u.name}").start() for u in (alpha, beta)]
    secret = new_secret("tasks-client")
    config = gateway_config(
        [server("alpha", f"{servers[0].url}/mcp"), server("beta", f"{servers[1].url}/mcp")],
        [key("client", secret, ["alpha", "beta"])],
    )
    path = gateways.config_path("tasks")
    write_config(path, config)
    replicas = [gateways.start(config_path=path, name=f"tasks-replica{i}") for i in (1, 2)]
    try:
        yield alpha, beta, replicas, secret
    finally:
        for s in servers:
            s.stop()


def test_a_task_created_on_mcp_is_polled_and_cancelled_through_the_other_replica(task_world):
    alpha, beta, (gw1, gw2), secret = task_world
    # Both servers hand out t1 first: only the prefix tells the two tasks apart.
    with RawMcp(gw1.mcp_url(), secret, MODERN_VERSION) as one:
        made_beta = one.request("tools/call", with_tasks({"name": "beta__long", "arguments": {}}))
        made = one.request("tools/call", with_tasks({"name": "alpha__long", "arguments": {}}))
    assert made.status == 200, made.raw[:500]
    task = made.result
    assert task["resultType"] == "task" and task["taskId"] == "alpha__t1", task
    assert made_beta.result["taskId"] == "beta__t1", made_beta.result

    with RawMcp(gw2.mcp_url(), secret, MODERN_VERSION) as two:
        polled = two.request("tasks/get", with_tasks({"taskId": task["taskId"]}))
        assert polled.status == 200, polled.raw[:500]
        assert polled.result["taskId"] == "alpha__t1" and polled.result["upstream"] == "alpha", polled.result
        assert polled.result["status"] == "working"
        cancelled = two.request("tasks/cancel", with_tasks({"taskId": task["taskId"]}))
        assert cancelled.status == 200, cancelled.raw[:500]
        assert cancelled.result["status"] == "cancelled" and cancelled.result["upstream"] == "alpha"
        unknown = two.request("tasks/get", with_tasks({"taskId": "gamma__t1"}))
        assert unknown.status == 400 and unknown.error["code"] == -32602, unknown.raw[:500]

    assert beta.tasks == {"t1": "working"}, "beta's task was touched"
    polls = [(m, n, t) for m, n, t in alpha.seen if m.startswith("tasks/")]
    assert polls == [("tasks/get", "t1", "t1"), ("tasks/cancel", "t1", "t1")], polls


def test_on_the_single_server_endpoint_task_ids_pass_through(task_world):
    alpha, _, (gw1, gw2), secret = task_world
    with RawMcp(gw1.mcp_url("alpha"), secret, MODERN_VERSION) as one:
        made = one.request("tools/call", with_tasks({"name": "long", "arguments": {}}))
    assert made.result["taskId"] == "t1", made.result
    with RawMcp(gw2.mcp_url("alpha"), secret, MODERN_VERSION) as two:
        polled = two.request("tasks/get", with_tasks({"taskId": "t1"}))
    assert polled.status == 200 and polled.result["status"] == "working", polled.raw[:500]
    assert ("tasks/get", "t1", "t1") in alpha.seen


def test_through_a_round_robin_balancer(task_world):
    alpha, _, replicas, secret = task_world
    with balancer([g.url for g in replicas]) as lb:
        with RawMcp(f"{lb.url}/mcp", secret, MODERN_VERSION) as mcp:
            made = mcp.request("tools/call", with_tasks({"name": "alpha__long", "arguments": {}}))
            for _ in range(3):
                polled = mcp.request("tasks/get", with_tasks({"taskId": made.result["taskId"]}))
                assert polled.status == 200 and polled.result["upstream"] == "alpha", polled.raw[:500]
        replicas_used = {i for i, *_ in lb.served}
    assert replicas_used == {0, 1}, lb.served
