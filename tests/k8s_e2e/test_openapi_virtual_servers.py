"""Issue 24 on Kubernetes: OpenAPI-backed McpServers and McpVirtualServers against a real
kube-apiserver, with the operator and two gateway replicas as local processes.

- A REST API no one here wrote: the kube-apiserver's own OpenAPI v3 document
  (`/openapi/v3/api/v1`, a few MB of `$ref`s) fetched by each gateway over HTTPS with the cluster's
  private CA (from a ConfigMap) and a ServiceAccount token (from a Secret); a handful of selected
  operations answer `tools/call` with the API server's own data (compared with what the admin
  reads directly), and an operation the token may not perform comes back as a tool error with
  403 (control: the same token read directly is refused too, and the admin's read works).
- An OpenAPI document from a ConfigMap that does not parse refuses the McpServer naming
  `spec.openapi.document` and the document path; fixed in place, it is served. An operation that
  cannot be expressed is named in Ready (OperationsLeftOut) with its document path.
- An McpVirtualServer over the example MCP upstream and the kube-apiserver tools: a renamed tool
  with a fixed parameter and a renamed REST operation at `/mcp/<path>` (both eras), Ready and
  Programmed on both replicas; a key that cannot reach the kube-apiserver server does not see its
  tool through the virtual server; a tool its server stops listing is named in Ready
  (ToolsNotListed) and left out; a dangling source (ServerNotFound) and a path that is a server's
  prefix (PathConflict) are refused by name.
- The CRD refuses `openapi` beside `run`, and both document sources at once.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from harness import RawMcp, wait_until
from k8s_fixtures import module_world
from k8s_world import World, assert_no_secret_leaks, bearer, mcp_key, mcp_server, mcp_virtual_server, secret

MODERN = "2026-07-28"


@pytest.fixture(scope="module")
def world(request, tmp_path_factory) -> Iterator[World]:
    # The kube-apiserver is itself the upstream here: allowed explicitly (denied by default).
    with module_world(
        request, tmp_path_factory, "openapi", probe_interval="2s", operator_args=["--allow-api-server-upstream"]
    ) as w:
        yield w


def config_map(name: str, namespace: str, data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


def api_get(world: World, path: str, token: str) -> httpx.Response:
    """A direct read of the API server with `token` (the control beside each gateway call)."""
    return httpx.get(
        world.cluster.env["SWITCHBOARD_K8S_API"] + path,
        headers={"Authorization": f"Bearer {token}"},
        verify=ssl.create_default_context(cafile=world.cluster.env["SWITCHBOARD_K8S_CA"]),
        timeout=10,
    )


@pytest.fixture(scope="module")
def reader(world: World) -> str:
    """A ServiceAccount that may list namespaces and read ConfigMaps in `default`, nothing else;
    its token (TokenRequest) once RBAC lets it do both."""
    k = world.cluster.kubectl
    k("create", "serviceaccount", "reader", "-n", "default")
    k("create", "clusterrole", "ns-lister", "--verb=list", "--resource=namespaces")
    k("create", "clusterrolebinding", "reader-ns", "--clusterrole=ns-lister", "--serviceaccount=default:reader")
    k("create", "role", "cm-reader", "--verb=get", "--resource=configmaps", "-n", "default")
    k("create", "rolebinding", "reader-cm", "--role=cm-reader", "--serviceaccount=default:reader", "-n", "default")
    token = k("create", "token", "reader", "-n", "default", "--duration=2h").stdout.strip()
    world.remember(token)
    wait_until(
        lambda: api_get(world, "/api/v1/namespaces", token).status_code == 200
        and api_get(world, "/api/v1/namespaces/default/configmaps/kube-root-ca.crt", token).status_code in (200, 404),
        30,
        what="RBAC to let the reader list namespaces and read ConfigMaps",
    )
    return token


def kube_server(world: World, name: str = "kube", **extra) -> dict:
    """The kube-apiserver as an OpenAPI-backed McpServer: its own document, its own CA."""
    spec = {
        "url": world.cluster.env["SWITCHBOARD_K8S_API"],
        "timeout": "10s",
        "listingTimeout": "30s",
        "accessGroups": ["kube"],
        "auth": bearer("reader-token"),
        "tls": {"caBundle": {"configMapKeyRef": {"name": "cluster-ca", "key": "ca.crt"}}},
        "openapi": {
            "documentUrl": "/openapi/v3/api/v1",
            "operations": {
                "operationIds": ["listCoreV1Namespace", "readCoreV1NamespacedConfigMap", "readCoreV1NamespacedSecret"]
            },
        },
    }
    spec.update(extra)
    return mcp_server(name, **spec)


@pytest.fixture(scope="module")
def kube(world: World, reader: str) -> str:
    """The kube McpServer Ready, and a key that reaches it (returned)."""
    ca = Path(world.cluster.env["SWITCHBOARD_K8S_CA"]).read_text()
    world.cluster.apply(
        [
            config_map("cluster-ca", "default", {"ca.crt": ca}),
            secret("reader-token", "default", {"token": reader}),
            kube_server(world),
            mcp_key("kube-user", secretName="kube-user-key", accessGroups=["kube"]),
        ]
    )
    world.kubectl_wait_ready("kube", timeout=90)
    key = world.generated_key("kube-user-key")
    world.wait_key_served(key)
    return key


def tool_names(reply_result: dict) -> list[str]:
    return sorted(t["name"] for t in reply_result["tools"])


def test_the_kube_apiserver_document_serves_its_operations_with_the_service_account(world: World, reader: str, kube: str):
    server = world.cluster.server("kube")
    assert server is not None
    assert server["status"]["toolCount"] == 3, server["status"]
    ready = next(c for c in server["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "UpstreamReady", ready
    admin = world.cluster.env["SWITCHBOARD_K8S_TOKEN"]
    world.cluster.apply(config_map("greeting", "default", {"text": "hello from the API server", "lang": "en"}))
    for era in ("legacy", MODERN):
        for gw_name, gw in world.gateways.items():
            mcp = RawMcp(f"{gw.url}/mcp/kube", kube, era)
            listed = mcp.list_tools().result
            assert tool_names(listed) == [
                "listCoreV1Namespace", "readCoreV1NamespacedConfigMap", "readCoreV1NamespacedSecret",
            ], (gw_name, era)  # fmt: skip
            schema = next(t for t in listed["tools"] if t["name"] == "readCoreV1NamespacedConfigMap")["inputSchema"]
            assert {"name", "namespace"} <= set(schema["required"]), schema
            out = next(t for t in listed["tools"] if t["name"] == "listCoreV1Namespace").get("outputSchema")
            assert out and out.get("type") == "object" and "items" in out.get("properties", {}), out

            # The namespaces the gateway reads are exactly those the admin reads.
            listed_ns = mcp.call_tool("listCoreV1Namespace", {}).result
            assert not listed_ns.get("isError"), listed_ns
            direct = api_get(world, "/api/v1/namespaces", admin).json()
            got = sorted(i["metadata"]["name"] for i in listed_ns["structuredContent"]["items"])
            assert got == sorted(i["metadata"]["name"] for i in direct["items"]), (got, gw_name, era)
            assert "kube-system" in got

            cm = mcp.call_tool("readCoreV1NamespacedConfigMap", {"namespace": "default", "name": "greeting"}).result
            assert not cm.get("isError"), cm
            assert cm["structuredContent"]["data"] == {"text": "hello from the API server", "lang": "en"}
            assert json.loads(cm["content"][0]["text"])["metadata"]["name"] == "greeting"

            # Not allowed for this token: a tool error with the API server's 403, not a protocol error.
            denied = mcp.call_tool("readCoreV1NamespacedSecret", {"namespace": "default", "name": "reader-token"}).result
            assert denied.get("isError") is True, denied
            text = denied["content"][0]["text"]
            # The API server's own words: it saw the ServiceAccount's token, not the gateway key.
            assert "403" in text and "system:serviceaccount:default:reader" in text, text
            assert reader not in text
    # Control: the token itself is refused the Secret directly, and the admin is not.
    assert api_get(world, "/api/v1/namespaces/default/secrets/reader-token", reader).status_code == 403
    assert api_get(world, "/api/v1/namespaces/default/secrets/reader-token", admin).status_code == 200
    assert_no_secret_leaks(world)


BROKEN = '{"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": ["not", "an", "object"]}'
PARTLY = json.dumps(
    {
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/things": {"get": {"operationId": "listThings"}},
            "/things/{id}": {"get": {"operationId": "getThing"}},  # {id} is never declared
        },
    }
)


def test_a_document_from_a_config_map_that_does_not_parse_is_named_and_a_fixed_one_served(world: World):
    doc = {"openapi": {"document": {"configMapKeyRef": {"name": "things-api", "key": "openapi.json"}}}}
    world.cluster.apply(
        [config_map("things-api", "default", {"openapi.json": BROKEN}), mcp_server("things", url="http://127.0.0.1:9", **doc)]
    )
    c, _ = world.wait_condition("mcpserver", "things", "default", "Accepted", "False", timeout=30)
    assert c["reason"] == "InvalidSpec", c
    assert "spec.openapi.document" in c["message"] and "paths" in c["message"], c
    assert "things" not in json.dumps(world.stored_snapshot()["servers"]), "a refused server is not in the snapshot"

    world.cluster.apply(config_map("things-api", "default", {"openapi.json": PARTLY}))
    world.wait_condition("mcpserver", "things", "default", "Accepted", "True", timeout=30)
    c, _ = world.wait_condition("mcpserver", "things", "default", "Ready", lambda c: c["reason"] == "OperationsLeftOut", 30)
    assert c["status"] == "True" and "1 tools are served" in c["message"], c
    assert "paths./things/{id}.get" in c["message"] and "{id}" in c["message"], c


def test_a_virtual_server_presents_renamed_narrowed_tools_within_each_callers_reach(world: World, kube: str):
    assert world.upstream is not None
    world.cluster.apply(
        [
            secret("demo-upstream", "default", {"token": world.new_secret("demo-upstream-token")}),
            mcp_server("demo", url=world.upstream.mcp_url, timeout="5s", auth=bearer("demo-upstream"), accessGroups=["demo"]),
            mcp_virtual_server(
                "ops",
                path="ops-tools",
                accessGroups=["ops"],
                sources=[
                    {
                        "server": "demo",
                        "tools": {"allow": ["add"]},
                        "overrides": [
                            {
                                "tool": "add",
                                "name": "plus_ten",
                                "description": "Adds ten.",
                                "parameters": {"b": {"fixed": 10}},
                            }
                        ],
                    },
                    {
                        "server": "kube",
                        "tools": {"allow": ["listCoreV1Namespace"]},
                        "overrides": [{"tool": "listCoreV1Namespace", "name": "namespaces"}],
                    },
                ],
            ),
            mcp_key("ops-all", secretName="ops-all-key", accessGroups=["ops", "demo", "kube"]),
            mcp_key("ops-demo", secretName="ops-demo-key", accessGroups=["ops", "demo"]),
        ]
    )
    world.kubectl_wait_ready("demo", timeout=60)
    world.kubectl_wait_ready("ops", timeout=60, kind="mcpvirtualserver")
    vs = world.cluster.virtual_server("ops")
    assert vs is not None and vs["status"]["path"] == "/mcp/ops-tools" and vs["status"]["toolCount"] == 2, vs["status"]
    world.wait_condition("mcpvirtualserver", "ops", "default", "Programmed", "True", timeout=30)

    full = world.generated_key("ops-all-key")
    narrow = world.generated_key("ops-demo-key")
    world.wait_key_served(full)
    world.wait_key_served(narrow)
    for era in ("legacy", MODERN):
        for gw in world.gateways.values():
            mcp = RawMcp(f"{gw.url}/mcp/ops-tools", full, era)
            listed = mcp.list_tools().result
            assert tool_names(listed) == ["namespaces", "plus_ten"], listed
            plus = next(t for t in listed["tools"] if t["name"] == "plus_ten")
            assert plus["description"] == "Adds ten." and "b" not in plus["inputSchema"].get("properties", {}), plus
            summed = mcp.call_tool("plus_ten", {"a": 5}).result
            assert summed["structuredContent"] == {"result": 15}, f"b=10 must reach the upstream: {summed}"
            namespaces = mcp.call_tool("namespaces", {}).result
            assert "kube-system" in json.dumps(namespaces["structuredContent"]), namespaces
            # A client may not choose the fixed value.
            chosen = mcp.call_tool("plus_ten", {"a": 5, "b": 1})
            assert "b" in json.dumps(chosen.message), chosen.message

            # A key without the kube server: the same virtual server shows only the other tool.
            limited = RawMcp(f"{gw.url}/mcp/ops-tools", narrow, era)
            assert tool_names(limited.list_tools().result) == ["plus_ten"]
            invisible = limited.call_tool("namespaces", {})
            assert "error" in invisible.message and invisible.error["code"] == -32602, invisible.message
    asked = {r["tool"] for r in world.upstream.recent_requests() if r["method"] == "tools/call"}
    assert asked == {"add"}, f"the upstream gets the tool's own name: {asked}"

    # Its server stops listing a tool it names: said in Ready, left out of the listing.
    world.cluster.apply(
        mcp_virtual_server(
            "ops",
            path="ops-tools",
            accessGroups=["ops"],
            sources=[{"server": "demo", "tools": {"allow": ["add", "retired_tool"]}}],
        )
    )
    c, _ = world.wait_condition("mcpvirtualserver", "ops", "default", "Ready", "False", timeout=30)
    assert c["reason"] == "ToolsNotListed" and '"retired_tool" of default/demo' in c["message"], c
    gw = next(iter(world.gateways.values()))
    wait_until(
        lambda: tool_names(RawMcp(f"{gw.url}/mcp/ops-tools", full, MODERN).list_tools().result) == ["add"],
        30,
        what="the changed virtual server to be served",
    )

    # Refused by name, the rest keeps serving.
    world.cluster.apply(
        [
            mcp_virtual_server("dangling", sources=[{"server": "ghost", "tools": {}}]),
            mcp_virtual_server("taken", path="demo", sources=[{"server": "demo", "tools": {}}]),
        ]
    )
    c, _ = world.wait_condition("mcpvirtualserver", "dangling", "default", "Accepted", "False", timeout=30)
    assert c["reason"] == "ServerNotFound" and "spec.sources[0].server" in c["message"], c
    c, _ = world.wait_condition("mcpvirtualserver", "taken", "default", "Accepted", "False", timeout=30)
    assert c["reason"] == "PathConflict" and "McpServer default/demo" in c["message"], c
    assert tool_names(RawMcp(f"{gw.url}/mcp/ops-tools", full, MODERN).list_tools().result) == ["add"]

    # Issue 38: a virtual server's argument rules hold for every caller through it, and one that
    # does not compile is refused by its field.
    world.cluster.apply([
        mcp_virtual_server("ruled", accessGroups=["ops"], sources=[{"server": "demo", "tools": {"allow": ["add"]}}],
                           arguments=[{"tools": ["add"], "rule": "args.a < 100", "message": "small numbers only"}]),
        mcp_virtual_server("badrule", accessGroups=["ops"], sources=[{"server": "demo", "tools": {"allow": ["add"]}}],
                           arguments=[{"tools": ["add"], "rule": "args.a <"}]),
    ])  # fmt: skip
    c, _ = world.wait_condition("mcpvirtualserver", "badrule", "default", "Accepted", "False", timeout=30)
    assert "spec.arguments[0].rule" in c["message"], c
    world.kubectl_wait_ready("ruled", timeout=60, kind="mcpvirtualserver")
    for era in ("legacy", MODERN):
        ruled = RawMcp(f"{gw.url}/mcp/ruled", full, era)
        refused = wait_until(lambda: (r := ruled.call_tool("add", {"a": 500, "b": 1})).error and r, 30,
                             what="the rule to be served")  # fmt: skip
        assert "small numbers only" in refused.error["message"], refused.message
        assert ruled.call_tool("add", {"a": 5, "b": 1}).result["structuredContent"] == {"result": 6}
    assert_no_secret_leaks(world)


def test_the_crd_refuses_openapi_beside_run_and_two_document_sources(world: World):
    run = mcp_server(
        "runs-rest",
        run={"image": "example.invalid/api:1", "command": ["api"]},
        openapi={"documentUrl": "/openapi.json"},
    )
    p = world.cluster.apply(run, check=False)
    assert p.returncode != 0 and "spec.openapi" in p.stderr and "spec.run" in p.stderr, p.stderr
    both = mcp_server(
        "two-docs",
        url="http://127.0.0.1:9",
        openapi={"documentUrl": "/openapi.json", "document": {"configMapKeyRef": {"name": "x", "key": "doc.json"}}},
    )
    p = world.cluster.apply(both, check=False)
    assert p.returncode != 0 and "exactly one of document and documentUrl" in p.stderr, p.stderr
    assert world.cluster.server("runs-rest") is None and world.cluster.server("two-docs") is None


def test_a_condition_another_writer_adds_survives_the_operators_writes(world: World):
    """Conditions are a map keyed by type: a condition another field manager applies to an
    McpServer's status stays while the operator rewrites its own (here: Accepted flips to
    False and back). Control: when its own writer withdraws it, it goes (what the test reads is
    the merged status, not a stale copy)."""
    world.cluster.apply(mcp_server("audited", url="http://127.0.0.1:9/mcp", timeout="1s"))
    world.wait_condition("mcpserver", "audited", "default", "Accepted", "True", timeout=30)
    foreign = {
        "type": "example.com/Audited",
        "status": "True",
        "reason": "Reviewed",
        "message": "reviewed by the platform team",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    patch = {"apiVersion": "switchboard.dev/v1alpha1", "kind": "McpServer",
             "metadata": {"name": "audited", "namespace": "default"}, "status": {"conditions": [foreign]}}  # fmt: skip
    api = world.cluster.api_client()
    r = api.patch(
        "/apis/switchboard.dev/v1alpha1/namespaces/default/mcpservers/audited/status",
        params={"fieldManager": "platform-audit", "force": "true"},
        content=json.dumps(patch),
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert r.status_code == 200, r.text

    def types() -> set[str]:
        obj = world.cluster.server("audited")
        return {c["type"] for c in (obj or {}).get("status", {}).get("conditions", [])}

    assert {"example.com/Audited", "Accepted", "Ready"} <= types()
    # The operator writes: a spec it refuses (Accepted False), then one it accepts again.
    world.cluster.apply(mcp_server("audited", url="http://127.0.0.1:9/mcp", timeout="1s", tools={"allow": ["a"]},
                                   headers={"static": [{"name": "X-A", "secretKeyRef": {"name": "nope", "key": "k"}}]}))  # fmt: skip
    world.wait_condition("mcpserver", "audited", "default", "Accepted", "False", timeout=30)
    assert "example.com/Audited" in types(), "the operator's write removed another writer's condition"
    # `kubectl get -o wide` says why it is not Ready (the Reason and Message columns).
    wide = world.cluster.kubectl("get", "mcpserver", "audited", "-o", "wide").stdout.splitlines()
    assert "REASON" in wide[0] and "MESSAGE" in wide[0] and "NotAccepted" in wide[1], wide
    assert "REASON" not in world.cluster.kubectl("get", "mcpserver", "audited").stdout, "priority 1: -o wide only"
    world.cluster.apply(mcp_server("audited", url="http://127.0.0.1:9/mcp", timeout="1s"))
    world.wait_condition("mcpserver", "audited", "default", "Accepted", "True", timeout=30)
    assert "example.com/Audited" in types()
    # Control: its writer withdraws it; it goes, and the operator's stay.
    r = api.patch(
        "/apis/switchboard.dev/v1alpha1/namespaces/default/mcpservers/audited/status",
        params={"fieldManager": "platform-audit", "force": "true"},
        content=json.dumps({**patch, "status": {"conditions": []}}),
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert r.status_code == 200, r.text
    assert "example.com/Audited" not in types() and {"Accepted", "Ready"} <= types(), types()
    api.close()
