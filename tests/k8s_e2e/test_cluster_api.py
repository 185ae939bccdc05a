"""Issue 5 acceptance 2, 3, 4, 6 and 8 against a real kube-apiserver: one loopback cluster for this
module, the operator (op-a) and two gateway replicas (gw1, gw2) as local processes, the Rust
example upstream. Everything is driven with kubectl, as a user would.

2. apply an McpServer + McpKey, `kubectl wait --for=condition=Ready`, call through the gateway
   with the key from the generated Secret; `kubectl get mcpservers` columns.
3. invalid manifests are rejected by `kubectl apply`, naming the field (one test each).
4. propagation apply -> served on both gateways, timed (results/propagation-<pass>.json, one
   file per API-server pass of tests/suites.d/50-kubernetes.sh: SWITCHBOARD_K8S_PASS).
6. rotating a referenced Secret reaches the upstream without touching the CR.
8. prefix conflict, missing Secret, cross-namespace denial: the documented condition, and every
   other server keeps working.
Plus: McpKey status shows a fingerprint, never the key; no secret in logs, objects or events.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from k8s_fixtures import module_world
from harness import (
    ERAS,
    INVALID_PARAMS,
    MODERN_VERSION,
    RawMcp,
    call_result_value,
    headers_seen,
    rest_call,
    rest_list,
    rest_tool_names,
    tool_names,
    wait_until,
)
from k8s_world import (
    World,
    assert_no_secret_leaks,
    bearer,
    condition,
    demo_objects,
    describe_conditions,
    mcp_key,
    mcp_server,
    secret,
)

RESULTS = Path(__file__).resolve().parent / "results"
BASE_TOOLS = {"add", "echo", "request_headers", "slow", "fail", "confirm"}


@pytest.fixture(scope="module")
def world(request, tmp_path_factory) -> Iterator[World]:
    with module_world(request, tmp_path_factory, "api") as w:
        # The example workload of acceptance 2, applied the way a user would.
        w.demo_token = w.new_secret("demo-upstream-token")
        w.cluster.apply(demo_objects(w, token=w.demo_token))
        yield w


@pytest.fixture(scope="module")
def key(world: World) -> str:
    """The key from the generated Secret, read the way a workload's manifest would mount it."""
    world.kubectl_wait_ready("demo", timeout=60)
    encoded = wait_until(
        lambda: world.cluster.kubectl(
            "get", "secret", "ci-key", "-n", "default", "-o", "jsonpath={.data.key}", check=False
        ).stdout.strip(),
        30,
        what="the McpKey's Secret ci-key to hold a key",
    )
    k = base64.b64decode(encoded).decode()
    world.remember(k)
    world.gateway_keys.add(k)
    world.wait_key_served(k)
    return k


def control_call(world: World, key: str) -> None:
    """The control: the demo server still answers on every gateway, in both eras."""
    for name, gw in world.gateways.items():
        r = rest_call(gw, key, "demo__add", {"a": 20, "b": 22})
        assert r.status_code == 200, f"control call on {name}: HTTP {r.status_code} {r.text[:500]}"
        assert call_result_value(r.json()) == 42
        with RawMcp(gw.mcp_url(), key, MODERN_VERSION) as mcp:
            assert call_result_value(mcp.call_tool("demo__add", {"a": 1, "b": 1}).result) == 2


def get_table(world: World, *args: str) -> list[dict[str, str]]:
    """`kubectl get ...` as a list of rows keyed by column header."""
    lines = world.cluster.kubectl("get", *args).stdout.strip().splitlines()
    header = lines[0].split()
    return [dict(zip(header, line.split(), strict=False)) for line in lines[1:]]


# --------------------------------------------------------------------------------------------
# Acceptance 2


def test_ready_then_a_workload_lists_and_calls_through_every_gateway(world: World, key: str):
    # `kubectl wait` returned in the fixture; a second wait returns at once.
    world.kubectl_wait_ready("demo", timeout=10)
    for gw_name, gw in world.gateways.items():
        for era in ERAS:
            with RawMcp(gw.mcp_url(), key, era) as mcp:
                tools, _ = mcp.list_all_tools()
                names = set(tool_names(tools))
                assert {f"demo__{t}" for t in BASE_TOOLS} <= names, f"{gw_name} {era}: {sorted(names)}"
                assert call_result_value(mcp.call_tool("demo__add", {"a": 2, "b": 3}).result) == 5
                seen = headers_seen(mcp.call_tool("demo__request_headers").result)
                assert seen.get("authorization") == f"Bearer {world.demo_token}", (
                    f"{gw_name} {era}: the upstream credential from the referenced Secret did not arrive"
                )
                assert not any(key in v for v in seen.values()), "the gateway key went upstream"
            # The single-server endpoint: the upstream's own names.
            with RawMcp(gw.mcp_url("demo"), key, era) as mcp:
                tools, _ = mcp.list_all_tools()
                assert BASE_TOOLS <= set(tool_names(tools)), f"{gw_name} {era} /mcp/demo: {tool_names(tools)}"
                assert call_result_value(mcp.call_tool("echo", {"text": "hi"}).result) == "hi"
        assert {f"demo__{t}" for t in BASE_TOOLS} <= set(rest_tool_names(rest_list(gw, key)))
        assert rest_call(gw, None, "demo__add", {"a": 1, "b": 1}).status_code == 401


def test_kubectl_get_mcpservers_shows_ready_tools_and_prefix(world: World, key: str):
    rows = {r["NAME"]: r for r in get_table(world, "mcpservers", "-n", "default")}
    assert "demo" in rows, rows
    row = rows["demo"]
    assert row["READY"] == "True", row
    assert row["TOOLS"] == str(len(BASE_TOOLS)), row
    assert row["PREFIX"] == "demo", row
    obj = world.cluster.server("demo")
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    assert obj["status"]["lastListed"], obj["status"]
    accepted, programmed = condition(obj, "Accepted"), condition(obj, "Programmed")
    assert accepted["status"] == "True", describe_conditions(obj)
    assert programmed["status"] == "True" and programmed["message"].startswith("2/2 gateway replicas serve generation")
    # Short name and category work too.
    assert "demo" in world.cluster.kubectl("get", "mcps", "-n", "default").stdout
    assert "demo" in world.cluster.kubectl("get", "switchboard", "-n", "default").stdout


def test_mcpkey_status_shows_a_fingerprint_never_the_key(world: World, key: str):
    rows = {r["NAME"]: r for r in get_table(world, "mcpkeys", "-n", "default")}
    assert rows["ci"]["READY"] == "True" and rows["ci"]["SECRET"] == "ci-key", rows
    obj = world.cluster.key("ci")
    fingerprint = obj["status"]["fingerprint"]
    assert fingerprint == hashlib.sha256(key.encode()).hexdigest()[:12], fingerprint
    as_yaml = world.cluster.kubectl("get", "mcpkey", "ci", "-n", "default", "-o", "yaml").stdout
    assert key not in as_yaml and key[-24:] not in as_yaml
    assert fingerprint in as_yaml
    # The generated Secret belongs to the McpKey (it goes away with it).
    s = world.cluster.api_get("/api/v1/namespaces/default/secrets/ci-key")
    owners = s["metadata"].get("ownerReferences") or []
    assert [(o["kind"], o["name"]) for o in owners] == [("McpKey", "ci")], owners


# --------------------------------------------------------------------------------------------
# Acceptance 3: invalid manifests, each rejected with the field named


def _base(**spec):
    return {"url": "http://127.0.0.1:9/mcp", **spec}


INVALID = {
    "bad-header-name": (_base(headers={"static": [{"name": "X Bad Header", "value": "v"}]}), r"spec.headers.static[0].name"),
    "bad-forward-header-name": (_base(headers={"forward": ["X:Forward"]}), r"spec.headers.forward[0]"),
    "bad-auth-header-name": (
        _base(auth={"type": "apiKey", "header": "X Key", "secretRef": {"name": "s", "key": "k"}}),
        "spec.auth.header",
    ),
    "bad-url-scheme": ({"url": "ftp://127.0.0.1/mcp"}, "spec.url"),
    "bad-url-not-a-url": ({"url": "not a url"}, "spec.url"),
    "bad-duration": (_base(timeout="30 seconds"), "spec.timeout"),
    "bad-listing-duration": (_base(listingTimeout="1d"), "spec.listingTimeout"),
    "url-and-service": (_base(service={"name": "mcp", "port": 8080}), "exactly one of spec.url, spec.service and spec.run"),
    "neither-url-nor-service": ({"timeout": "5s"}, "exactly one of spec.url, spec.service and spec.run"),
    "url-and-run": (_base(run={"image": "registry.test/x:1", "command": ["x"]}), "exactly one of spec.url, spec.service and spec.run"),
    "stdio-run-without-command": ({"run": {"image": "registry.test/x:1"}}, "spec.run.command is required"),
    "bearer-without-secretref": (_base(auth={"type": "bearer"}), "spec.auth.secretRef"),
    "apikey-without-secretref": (_base(auth={"type": "apiKey", "header": "X-Key"}), "spec.auth.secretRef"),
    "oauth2-without-oauth2": (_base(auth={"type": "oauth2ClientCredentials"}), "spec.auth.oauth2"),
    "token-exchange-without-block": (_base(auth={"type": "tokenExchange"}), "spec.auth.tokenExchange"),
    "tools-allow-and-deny": (_base(tools={"allow": ["add", "echo"], "deny": ["echo"]}), "spec.tools"),
    "bad-tool-prefix": (_base(toolPrefix="Has_Underscore"), "spec.toolPrefix"),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_mcpserver_is_rejected_naming_the_field(world: World, case: str):
    spec, field = INVALID[case]
    name = f"invalid-{case}"[:63]
    p = world.cluster.apply(mcp_server(name, "default", **spec), check=False)
    out = p.stderr + p.stdout
    assert p.returncode != 0, f"kubectl apply accepted the invalid manifest {case}: {out}"
    assert field in out, f"the error does not name {field!r}:\n{out}"
    assert world.cluster.server(name) is None, "a rejected manifest was stored"


def test_invalid_mcpkey_is_rejected_naming_the_field(world: World):
    cases = {
        "allow-and-deny": ({"secretName": "k1", "tools": {"allow": ["a__b"], "deny": ["a__b"]}}, "spec.tools"),
        "bad-expiry": ({"secretName": "k2", "expiresAt": "tomorrow"}, "spec.expiresAt"),
        "bad-secret-name": ({"secretName": "Not_A_Name"}, "spec.secretName"),
    }
    for case, (spec, field) in cases.items():
        p = world.cluster.apply(mcp_key(f"invalid-{case}", "default", **spec), check=False)
        out = p.stderr + p.stdout
        assert p.returncode != 0 and field in out, f"McpKey {case}: exit {p.returncode}, want {field!r} in:\n{out}"


# --------------------------------------------------------------------------------------------
# Acceptance 4: propagation


def test_propagation_apply_to_served_on_both_gateways(world: World, key: str):
    from propagation import all_samples, measure

    result = measure(world, key, runs=12)
    result["command"] = "pytest tests/k8s_e2e/test_cluster_api.py -k propagation (standalone: tests/k8s_e2e/propagation.py)"
    RESULTS.mkdir(exist_ok=True)
    # One file per API-server pass: the suite runs its passes side by side.
    name = f"propagation-{os.environ.get('SWITCHBOARD_K8S_PASS', 'newest')}.json"
    (RESULTS / name).write_text(json.dumps(result, indent=2) + "\n")
    api = result["api"]
    print(
        f"\npropagation to {result['gateways']} gateways, {result['runs']} runs each:\n"
        f"  kubectl apply -> served: median {result['median_s'] * 1000:.0f} ms, max {result['max_s'] * 1000:.0f} ms "
        f"(kubectl itself: median {result['median_write_s'] * 1000:.0f} ms)\n"
        f"  API write     -> served: median {api['median_s'] * 1000:.0f} ms, max {api['max_s'] * 1000:.0f} ms "
        f"(the PATCH itself: median {api['median_write_s'] * 1000:.0f} ms)"
    )
    missed = [s for s in all_samples(result) if s["served_s"] is None]
    assert not missed, f"{len(missed)} change(s) never reached both gateways within 10 s: {missed}"
    control_call(world, key)


def test_a_limit_change_reaches_both_gateways(world: World, key: str):
    """Issue 37: a key's limits changed with `kubectl apply` are enforced by every gateway
    replica: the time from the apply to both refusing (429) is printed, and to both admitting
    again once the limits are removed; each must happen within the propagation bound (10 s)."""
    from propagation import _kubectl_writer, apply_and_time

    base = {"secretName": "limited-key", "accessGroups": ["ci"]}
    world.cluster.apply([mcp_key("limited", "default", **base)])
    limited = world.generated_key("limited-key")
    world.wait_key_served(limited)
    gateways = {n: g for n, g in world.gateways.items() if g.proc.alive()}
    assert len(gateways) >= 2, list(gateways)
    clients = {n: httpx.Client(timeout=2) for n in gateways}

    def answers(name: str, want: int):
        def check() -> bool:
            try:
                return clients[name].post(
                    f"{gateways[name].url}/mcp-rest/tools/call", headers={"Authorization": f"Bearer {limited}"},
                    json={"name": "demo__add", "arguments": {"a": 1, "b": 2}},
                ).status_code == want  # fmt: skip
            except httpx.HTTPError:
                return False

        return check

    try:
        # One call an hour: each gateway admits the first call after the change, refuses the next.
        on = apply_and_time(_kubectl_writer(world, mcp_key("limited", "default", **base, limits={"rate": "1/h", "burst": 1})),
                            {n: answers(n, 429) for n in gateways})  # fmt: skip
        off = apply_and_time(_kubectl_writer(world, mcp_key("limited", "default", **base)), {n: answers(n, 200) for n in gateways})
    finally:
        for c in clients.values():
            c.close()
    shown = {k: "NOT SERVED" if r["served_s"] is None else f"{r['served_s'] * 1000:.0f} ms (the write {r['write_s'] * 1000:.0f} ms)"
             for k, r in (("limited", on), ("unlimited", off))}  # fmt: skip
    print(f"\na key's limit change, kubectl apply -> enforced on {len(gateways)} gateways: {shown}")
    assert on["served_s"] is not None and off["served_s"] is not None, (on, off)


def test_a_spec_change_moves_observed_generation_and_programmed(world: World, key: str):
    world.cluster.apply(mcp_server("gen", "default", url=world.upstream.mcp_url, timeout="2s", accessGroups=["ci"]))
    world.kubectl_wait_ready("gen", timeout=30)
    wait_until(lambda: condition(world.cluster.server("gen"), "Programmed")["status"] == "True", 10, what="Programmed")
    first = condition(world.cluster.server("gen"), "Programmed")["message"]
    world.cluster.apply(
        mcp_server("gen", "default", url=world.upstream.mcp_url, timeout="3s", accessGroups=["ci"], tools={"deny": ["fail"]})
    )

    def moved() -> bool:
        obj = world.cluster.server("gen")
        c = condition(obj, "Programmed")
        return (
            obj["metadata"]["generation"] == 2
            and obj["status"]["observedGeneration"] == 2
            and all(x["observedGeneration"] == 2 for x in obj["status"]["conditions"])
            and c["status"] == "True"
            and c["message"] != first
            and obj["status"].get("toolCount") == len(BASE_TOOLS) - 1
        )

    try:
        wait_until(moved, 15, what="status to follow generation 2")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {describe_conditions(world.cluster.server('gen'))}") from None
    for gw in world.gateways.values():
        assert rest_call(gw, key, "gen__fail").status_code == 404
    world.cluster.kubectl("delete", "mcpserver", "gen", "-n", "default")
    for gw in world.gateways.values():
        wait_until(lambda gw=gw: rest_call(gw, key, "gen__add", {"a": 1, "b": 1}).status_code == 404, 10,
                   what="a deleted server to stop routing")  # fmt: skip


def test_only_the_gateway_service_account_reads_the_snapshot(world: World):
    op = world.operator_url("op-a")
    c = world.cluster
    c.kubectl("create", "serviceaccount", "intruder", "-n", "switchboard")
    tokens = {
        "no token": None,
        "garbage": "not-a-token",
        "another ServiceAccount": c.kubectl(
            "create", "token", "intruder", "-n", "switchboard", "--audience", "switchboard-operator"
        ).stdout.strip(),
        "the gateway's ServiceAccount, wrong audience": c.kubectl(
            "create", "token", "switchboard-gateway", "-n", "switchboard", "--audience", "https://kubernetes.default.svc"
        ).stdout.strip(),
        "the cluster admin's token": c.env["SWITCHBOARD_K8S_TOKEN"],
    }
    world.remember(*[t for t in tokens.values() if t])
    for what, token in tokens.items():
        headers = {"X-Switchboard-Replica": "intruder"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        r = httpx.get(f"{op}/v1/snapshots/watch", headers=headers, timeout=10, verify=world.operator_tls())
        assert r.status_code == 401, f"{what}: GET /v1/snapshots/watch answered HTTP {r.status_code}"
        ack = httpx.post(f"{op}/v1/snapshots/ack", headers=headers, json={"replica": "intruder", "serving": 1}, timeout=10, verify=world.operator_tls())
        assert ack.status_code == 401, f"{what}: POST /v1/snapshots/ack answered HTTP {ack.status_code}"
    # The refused readers never became replicas.
    msg = condition(world.cluster.server("demo"), "Programmed")["message"]
    assert msg.startswith("2/2 "), msg


# --------------------------------------------------------------------------------------------
# Acceptance 6: Secret rotation


def test_rotated_secret_reaches_the_upstream_without_touching_the_cr(world: World, key: str):
    old, new = world.new_secret("rotate-v1"), world.new_secret("rotate-v2")
    old_h, new_h = world.new_secret("rotate-header-v1"), world.new_secret("rotate-header-v2")
    world.cluster.apply(
        [
            secret("rot-token", "default", {"token": old, "header": old_h}),
            mcp_server(
                "rot", "default", url=world.upstream.mcp_url, timeout="2s", accessGroups=["ci"], auth=bearer("rot-token"),
                headers={"static": [{"name": "X-Team-Token", "secretKeyRef": {"name": "rot-token", "key": "header"}}]},
            ),
        ]
    )  # fmt: skip
    world.kubectl_wait_ready("rot", timeout=30)

    def seen_by_upstream(gw) -> tuple[str, str]:
        r = rest_call(gw, key, "rot__request_headers")
        assert r.status_code == 200, f"HTTP {r.status_code} {r.text[:300]}"
        seen = headers_seen(r.json())
        return seen.get("authorization", ""), seen.get("x-team-token", "")

    for gw in world.gateways.values():
        wait_until(lambda gw=gw: seen_by_upstream(gw) == (f"Bearer {old}", old_h), 10, interval=0.05,
                   what="the first credentials upstream")  # fmt: skip
    before = world.cluster.server("rot")

    # The usual rotation idiom; the CR is not touched.
    manifest = world.cluster.kubectl(
        "create", "secret", "generic", "rot-token", "-n", "default", f"--from-literal=token={new}",
        f"--from-literal=header={new_h}", "--dry-run=client", "-o", "yaml",
    ).stdout  # fmt: skip
    t0 = time.monotonic()
    world.cluster.kubectl("apply", "-f", "-", input=manifest)
    for name, gw in world.gateways.items():
        wait_until(
            lambda gw=gw: seen_by_upstream(gw) == (f"Bearer {new}", new_h), 10, interval=0.02,
            what=f"the rotated credentials via {name}",
        )  # fmt: skip
    elapsed = time.monotonic() - t0
    print(f"\nrotated Secret reached the upstream through both gateways {elapsed * 1000:.0f} ms after kubectl apply")
    # The upstream is the module's: other servers' requests (the operator's probes among them)
    # reach it too. Only this server's carry X-Team-Token; its last one had the new token.
    recent = [r["headers"] for r in world.upstream.recent_requests() if r["headers"].get("x-team-token")]
    assert recent, "no request of server rot among the upstream's recent ones"
    assert recent[-1].get("authorization") == f"Bearer {new}", [h.get("authorization") for h in recent[-5:]]
    after = world.cluster.server("rot")
    assert after["metadata"]["generation"] == before["metadata"]["generation"], "the CR's spec changed"
    assert after["spec"] == before["spec"]
    wait_until(lambda: condition(world.cluster.server("rot"), "Ready")["status"] == "True", 10, what="rot Ready")
    control_call(world, key)


# --------------------------------------------------------------------------------------------
# Acceptance 8: conflicts and tenancy


def test_prefix_conflict_older_keeps_it_newer_is_rejected(world: World, key: str):
    url = world.upstream.variant_url("name=older")
    world.cluster.kubectl("create", "namespace", "team-x")
    world.cluster.apply(mcp_server("weather", "team-x", url=url, timeout="2s", allowAllKeys=True, allowedNamespaces=["*"]))
    world.kubectl_wait_ready("weather", "team-x", timeout=30)
    time.sleep(1.1)  # creationTimestamp has one-second resolution: make "newer" unambiguous
    newer_url = world.upstream.variant_url("name=newer")
    world.cluster.apply(mcp_server("forecast", "default", url=newer_url, toolPrefix="weather", accessGroups=["ci"]))
    c, _ = world.wait_condition("mcpserver", "forecast", "default", "Accepted", "False", 15)
    assert c["reason"] == "PrefixConflict", c
    assert "team-x/weather" in c["message"], f"the condition does not name the other server: {c}"
    newer = world.cluster.server("forecast")
    assert condition(newer, "Ready")["status"] == "False", describe_conditions(newer)
    older = world.cluster.server("weather", "team-x")
    assert condition(older, "Accepted")["status"] == "True", describe_conditions(older)
    # weather__* still routes to the older server, on every gateway.
    for gw in world.gateways.values():
        with RawMcp(gw.mcp_url(), key, MODERN_VERSION) as mcp:
            r = mcp.call_tool("weather__add", {"a": 1, "b": 2})
            assert r.result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "older", r.result
    events = world.cluster.kubectl(
        "get", "events", "-n", "default", "--field-selector", "involvedObject.name=forecast", "-o", "json"
    ).stdout
    assert "PrefixConflict" in events or "team-x/weather" in events, "no event marks the rejection"
    control_call(world, key)

    # Removing the older one hands the prefix over.
    world.cluster.kubectl("delete", "mcpserver", "weather", "-n", "team-x")
    world.wait_condition("mcpserver", "forecast", "default", "Accepted", "True", 15)
    for gw in world.gateways.values():
        wait_until(
            lambda gw=gw: rest_call(gw, key, "weather__add", {"a": 1, "b": 2}).json()["_meta"][
                "io.modelcontextprotocol/serverInfo"
            ]["name"]
            == "newer",
            10,
            what="weather__ to route to the newer server",
        )
    world.cluster.kubectl("delete", "mcpserver", "forecast", "-n", "default")
    control_call(world, key)


def test_missing_secret_is_reported_and_fixed_by_creating_it(world: World, key: str):
    world.cluster.apply(
        mcp_server("locked", "default", url=world.upstream.mcp_url, accessGroups=["ci"], auth=bearer("locked-token"))
    )
    c, _ = world.wait_condition("mcpserver", "locked", "default", "Accepted", "False", 15)
    assert c["reason"] == "SecretNotFound", c
    assert "locked-token" in c["message"], c
    obj = world.cluster.server("locked")
    assert condition(obj, "Ready")["status"] == "False", describe_conditions(obj)
    # Left out of the snapshot: its tools are unknown; everything else works.
    for gw in world.gateways.values():
        assert rest_call(gw, key, "locked__add", {"a": 1, "b": 1}).status_code == 404
        with RawMcp(gw.mcp_url(), key, MODERN_VERSION) as mcp:
            err = mcp.call_tool("locked__add", {"a": 1, "b": 1}).error
            assert err["code"] == INVALID_PARAMS, err
    control_call(world, key)

    token = world.new_secret("locked-token")
    world.cluster.kubectl("create", "secret", "generic", "locked-token", "-n", "default", f"--from-literal=token={token}")
    world.wait_condition("mcpserver", "locked", "default", "Accepted", "True", 15)
    world.kubectl_wait_ready("locked", timeout=30)
    for gw in world.gateways.values():
        wait_until(lambda gw=gw: rest_call(gw, key, "locked__request_headers").status_code == 200, 10, what="locked served")
        assert headers_seen(rest_call(gw, key, "locked__request_headers").json())["authorization"] == f"Bearer {token}"
    control_call(world, key)

    # Deleting the Secret again takes the server out again.
    world.cluster.kubectl("delete", "secret", "locked-token", "-n", "default")
    c, _ = world.wait_condition("mcpserver", "locked", "default", "Accepted", "False", 15)
    assert c["reason"] == "SecretNotFound", c
    for gw in world.gateways.values():
        wait_until(lambda gw=gw: rest_call(gw, key, "locked__add", {"a": 1, "b": 1}).status_code == 404, 10,
                   what="a server whose Secret was deleted to stop routing")  # fmt: skip
    control_call(world, key)


def test_helm_release_secrets_are_not_watched(world: World, key: str):
    """The operator's Secret watch leaves out types no credential has (Helm releases, legacy
    ServiceAccount tokens): they are most of a real cluster's Secret bytes. 40 release-sized
    Secrets (256 KiB each, 10 MiB in all) must not grow the operator, and one of them named as a
    credential is not found."""
    before = world.operator_rss_kib()
    blob = world.workdir / "release"
    blob.write_bytes(base64.b64encode(os.urandom(192 * 1024)))
    for i in range(40):
        world.cluster.kubectl(
            "create", "secret", "generic", f"sh.helm.release.v1.app{i}.v1", "-n", "default",
            "--type", "helm.sh/release.v1", f"--from-file=release={blob}",
        )  # fmt: skip
    time.sleep(2)
    after = world.operator_rss_kib()
    print(f"\noperator RSS {before} KiB -> {after} KiB after 40 Helm release Secrets (10 MiB) were created")
    world.cluster.apply(
        mcp_server("released", "default", url=world.upstream.mcp_url, accessGroups=["ci"],
                   auth=bearer("sh.helm.release.v1.app0.v1", "release"))
    )  # fmt: skip
    c, _ = world.wait_condition("mcpserver", "released", "default", "Accepted", "False", 15)
    assert c["reason"] == "SecretNotFound", c
    world.cluster.kubectl("delete", "mcpserver", "released", "-n", "default")
    world.cluster.kubectl("delete", "secret", "-n", "default", *[f"sh.helm.release.v1.app{i}.v1" for i in range(40)])
    control_call(world, key)


def test_cross_namespace_key_is_denied_unless_admitted(world: World, key: str):
    for ns in ("ns-a", "ns-b"):
        world.cluster.kubectl("create", "namespace", ns)
    world.cluster.apply(
        [
            mcp_server("private", "ns-a", url=world.upstream.mcp_url, timeout="2s", accessGroups=["shared"]),
            mcp_key("b-key", "ns-b", secretName="b-key", accessGroups=["shared"], servers=["ns-a/private"]),
            mcp_server("local-b", "ns-b", url=world.upstream.mcp_url, timeout="2s", accessGroups=["shared"]),
        ]
    )
    world.kubectl_wait_ready("private", "ns-a", timeout=30)
    world.kubectl_wait_ready("local-b", "ns-b", timeout=30)
    b_key = world.generated_key("b-key", "ns-b")
    world.wait_key_served(b_key)
    for name, gw in world.gateways.items():
        # Its own namespace works...
        assert rest_call(gw, b_key, "local-b__add", {"a": 1, "b": 1}).status_code == 200
        # ...the other namespace's server is invisible on MCP and forbidden on REST.
        with RawMcp(gw.mcp_url(), b_key, MODERN_VERSION) as mcp:
            tools, _ = mcp.list_all_tools()
            assert not [t for t in tool_names(tools) if t.startswith("private__")], f"{name}: listed {tool_names(tools)}"
            err = mcp.call_tool("private__add", {"a": 1, "b": 1}).error
            assert err["code"] == INVALID_PARAMS and "private__add" in err["message"], err
        r = rest_call(gw, b_key, "add", {"a": 1, "b": 1}, server_id="ns-a/private")
        assert r.status_code == 403, f"{name}: REST call across namespaces: HTTP {r.status_code} {r.text[:300]}"
        assert "access_denied" in r.text, r.text
        r = rest_call(gw, b_key, "private__add", {"a": 1, "b": 1})
        assert r.status_code in (403, 404), r.text
    # allowAllKeys means every *admitted* key: it does not open the server to other namespaces.
    world.cluster.apply(mcp_server("open-a", "ns-a", url=world.upstream.mcp_url, timeout="2s", allowAllKeys=True))
    world.kubectl_wait_ready("open-a", "ns-a", timeout=30)
    for name, gw in world.gateways.items():
        for k, ns in ((b_key, "ns-b"), (key, "default")):
            r = rest_call(gw, k, "add", {"a": 1, "b": 1}, server_id="ns-a/open-a")
            assert r.status_code == 403, f"{name}: a key of {ns} reached ns-a/open-a (allowAllKeys, not admitted): {r.text[:300]}"
            with RawMcp(gw.mcp_url(), k, MODERN_VERSION) as mcp:
                tools, _ = mcp.list_all_tools()
                assert not [t for t in tool_names(tools) if t.startswith("open-a__")], f"{name}: {ns} key lists open-a"
    control_call(world, key)

    # The owner admits ns-b: now the key reaches it.
    world.cluster.apply(
        mcp_server(
            "private", "ns-a", url=world.upstream.mcp_url, timeout="2s", accessGroups=["shared"], allowedNamespaces=["ns-b"]
        )
    )
    for name, gw in world.gateways.items():
        wait_until(
            lambda gw=gw: rest_call(gw, b_key, "add", {"a": 1, "b": 1}, server_id="ns-a/private").status_code == 200,
            10,
            what=f"{name} to admit ns-b's key to ns-a/private",
        )
        with RawMcp(gw.mcp_url(), b_key, MODERN_VERSION) as mcp:
            assert call_result_value(mcp.call_tool("private__add", {"a": 2, "b": 2}).result) == 4
    control_call(world, key)


def test_unresolvable_references_are_rejected_alone(world: World, key: str):
    token = world.new_secret("basic-no-colon")
    world.cluster.apply(
        [
            mcp_server("nokey", "default", url=world.upstream.mcp_url, accessGroups=["ci"],
                       auth=bearer("demo-upstream", key="no-such-field")),
            secret("basic-token", "default", {"token": token}),
            mcp_server("badbasic", "default", url=world.upstream.mcp_url, accessGroups=["ci"],
                       auth={"type": "basic", "secretRef": {"name": "basic-token", "key": "token"}}),
        ]
    )  # fmt: skip
    c, _ = world.wait_condition("mcpserver", "nokey", "default", "Accepted", "False", 15)
    assert c["reason"] == "SecretNotFound" and "no-such-field" in c["message"], c
    c, _ = world.wait_condition("mcpserver", "badbasic", "default", "Accepted", "False", 15)
    assert c["reason"] == "InvalidSpec" and c["message"].startswith("spec.auth"), c
    assert token not in c["message"]
    control_call(world, key)
    world.cluster.kubectl("delete", "mcpserver", "nokey", "badbasic", "-n", "default")


def test_metadata_and_api_server_upstreams_are_refused_with_a_condition(world: World, key: str):
    api = world.cluster.env["SWITCHBOARD_K8S_API"].rstrip("/")
    names = ["meta-literal", "api-literal", "api-name", "api-service"]
    world.cluster.apply(
        [
            mcp_server("meta-literal", "default", url="http://169.254.169.254/latest/meta-data", accessGroups=["ci"]),
            mcp_server("api-literal", "default", url=f"{api}/api", accessGroups=["ci"]),
            mcp_server("api-name", "default", url="https://kubernetes.default.svc/api", accessGroups=["ci"]),
            mcp_server("api-service", "default", service={"name": "kubernetes", "port": 443, "scheme": "https"},
                       accessGroups=["ci"]),
        ]
    )  # fmt: skip
    for name in names:
        c, _ = world.wait_condition("mcpserver", name, "default", "Accepted", "False", 15)
        assert c["reason"] == "UpstreamAddressDenied" and c["message"].startswith("spec.url"), (name, c)
        assert "/latest/meta-data" not in c["message"], c
    for gw in world.gateways.values():
        for name in names:
            assert rest_call(gw, key, f"{name}__add").status_code == 404
    control_call(world, key)
    world.cluster.kubectl("delete", "mcpserver", *names, "-n", "default")


def test_a_namespace_policy_narrows_what_its_servers_may_reach(world: World, key: str):
    """Namespace annotations switchboard.dev/upstream-hosts and -networks: an McpServer naming a
    host outside them, or at an address outside the networks, is refused at admission
    (UpstreamAddressDenied naming the annotation) and leaves every gateway; within them it is
    served (the policy travels in its spec: tests/e2e/test_upstream_networks.py shows the
    gateway enforcing it at connect time and on redirects, which a name resolving to loopback
    cannot show here, where the API server also listens on 127.0.0.1); an annotation that does
    not parse refuses the namespace's servers (UpstreamPolicyInvalid); without annotations the
    server is served again."""
    ns, name = "team-pol", "polbox"
    world.cluster.kubectl("create", "namespace", ns)
    world.cluster.apply(mcp_server(name, ns, url=world.upstream.mcp_url, allowAllKeys=True, allowedNamespaces=["*"]))
    world.kubectl_wait_ready(name, ns, timeout=30)

    def annotate(**values: str | None) -> None:
        args = [f"switchboard.dev/upstream-{k}={v}" if v is not None else f"switchboard.dev/upstream-{k}-"
                for k, v in values.items()]  # fmt: skip
        world.cluster.kubectl("annotate", "--overwrite", "namespace", ns, *args)

    def served_on_every_gateway(status: int) -> bool:
        return all(rest_call(gw, key, f"{name}__add", {"a": 1, "b": 2}).status_code == status for gw in world.gateways.values())

    wait_until(lambda: served_on_every_gateway(200), 15, what="the server served before any policy")

    annotate(hosts="*.team-pol.svc.cluster.local")
    c, _ = world.wait_condition("mcpserver", name, ns, "Accepted", "False", 15)
    assert c["reason"] == "UpstreamAddressDenied", c
    assert "127.0.0.1 is not allowed in namespace team-pol (not one of its hosts" in c["message"], c
    assert "switchboard.dev/upstream-hosts" in c["message"], c
    wait_until(lambda: served_on_every_gateway(404), 15, what="the refused server gone from every gateway")

    annotate(hosts="127.0.0.1", networks="10.0.0.0/8")
    c, _ = world.wait_condition("mcpserver", name, ns, "Accepted", lambda c: "not in its networks" in c.get("message", ""), 15)
    assert c["status"] == "False" and c["reason"] == "UpstreamAddressDenied", c

    annotate(networks="127.0.0.0/8")
    world.kubectl_wait_ready(name, ns, timeout=30)
    wait_until(lambda: served_on_every_gateway(200), 15, what="the server served within its namespace's policy")

    annotate(networks="127.0.0.0/8,ten")
    c, _ = world.wait_condition("mcpserver", name, ns, "Accepted", lambda c: c.get("reason") == "UpstreamPolicyInvalid", 15)
    assert "switchboard.dev/upstream-networks, entry 1" in c["message"], c
    wait_until(lambda: served_on_every_gateway(404), 15, what="an unreadable policy refusing the server")

    annotate(hosts=None, networks=None)
    world.kubectl_wait_ready(name, ns, timeout=30)
    wait_until(lambda: served_on_every_gateway(200), 15, what="the server served again without the policy")
    control_call(world, key)
    world.cluster.kubectl("delete", "mcpserver", name, "-n", ns)


def test_header_values_with_cr_lf_are_refused_naming_the_field(world: World, key: str):
    # A literal value: refused at admission, or left out with InvalidSpec; never sent.
    p = world.cluster.apply(
        mcp_server("crlf-literal", "default", url=world.upstream.mcp_url, accessGroups=["ci"],
                   headers={"static": [{"name": "X-Team", "value": "blue\r\nX-Injected: 1"}]}),
        check=False,
    )  # fmt: skip
    if p.returncode == 0:
        c, _ = world.wait_condition("mcpserver", "crlf-literal", "default", "Accepted", "False", 15)
        assert c["reason"] == "InvalidSpec" and "spec.headers.static[0]" in c["message"], c
    else:
        assert "spec.headers.static[0].value" in p.stderr, p.stderr
    # A value from a Secret can only be judged by the operator.
    injected = world.new_secret("crlf-secret")
    world.cluster.apply(
        [
            secret("crlf", "default", {"value": f"{injected}\r\nX-Injected: 1"}),
            mcp_server("crlf-ref", "default", url=world.upstream.mcp_url, accessGroups=["ci"],
                       headers={"static": [{"name": "X-Team", "secretKeyRef": {"name": "crlf", "key": "value"}}]}),
        ]
    )  # fmt: skip
    c, _ = world.wait_condition("mcpserver", "crlf-ref", "default", "Accepted", "False", 15)
    assert c["reason"] == "InvalidSpec" and "spec.headers.static[0]" in c["message"], c
    assert injected not in c["message"]
    for gw in world.gateways.values():
        for prefix in ("crlf-literal", "crlf-ref"):
            assert rest_call(gw, key, f"{prefix}__request_headers").status_code == 404
    control_call(world, key)
    world.cluster.kubectl("delete", "mcpserver", "crlf-literal", "crlf-ref", "-n", "default", "--ignore-not-found")


def test_mcpkey_with_a_provided_key_rotates_and_is_revoked_on_delete(world: World, key: str):
    def status_on_all(k: str) -> set[int]:
        return {rest_list(gw, k).status_code for gw in world.gateways.values()}

    provided = world.new_secret("provided-key")
    world.cluster.apply(
        [secret("own-key", "default", {"key": provided}), mcp_key("own", "default", secretName="own-key", accessGroups=["ci"])]
    )
    world.wait_condition("mcpkey", "own", "default", "Ready", "True", 15)
    assert world.cluster.secret_data("own-key", "default")["key"] == provided, "the operator replaced a provided key"
    wait_until(lambda: status_on_all(provided) == {200}, 10, what="the provided key to be accepted")
    fingerprint = world.cluster.key("own")["status"]["fingerprint"]

    rotated = world.new_secret("provided-key-rotated")
    world.gateway_keys.update({provided, rotated})
    world.cluster.apply(secret("own-key", "default", {"key": rotated}))
    wait_until(lambda: status_on_all(rotated) == {200} and status_on_all(provided) == {401}, 10,
               what="the rotated key to replace the old one")  # fmt: skip
    wait_until(lambda: world.cluster.key("own")["status"]["fingerprint"] != fingerprint, 10, what="a new fingerprint")

    world.cluster.kubectl("delete", "mcpkey", "own", "-n", "default")
    wait_until(lambda: status_on_all(rotated) == {401}, 10, what="a deleted McpKey's key to be refused")
    control_call(world, key)


def test_an_expired_mcpkey_is_refused_and_its_status_says_so(world: World, key: str):
    world.cluster.apply(mcp_key("old", "default", secretName="old-key", accessGroups=["ci"], expiresAt="2020-01-01T00:00:00Z"))
    old = world.generated_key("old-key")
    world.cluster.apply(mcp_key("fresh", "default", secretName="fresh-key", accessGroups=["ci"], expiresAt="2099-01-01T00:00:00Z"))
    fresh = world.generated_key("fresh-key")
    world.wait_key_served(fresh)
    time.sleep(0.5)
    for name, gw in world.gateways.items():
        r = rest_list(gw, old)
        assert r.status_code == 401 and "expired" in r.text, f"{name}: an expired key got HTTP {r.status_code} {r.text[:200]}"
        assert rest_list(gw, fresh).status_code == 200
    world.wait_condition("mcpkey", "fresh", "default", "Ready", "True", 10)
    # Status must not claim the gateways accept a key they refuse.
    time.sleep(1.0)
    ready = condition(world.cluster.key("old"), "Ready")
    assert ready is not None and ready["status"] != "True", (
        f"McpKey default/old (expiresAt 2020-01-01) says Ready=True ({ready['reason']}: {ready['message']!r}) "
        "while every gateway answers 401 'the gateway key has expired'"
    )
    control_call(world, key)


def _a_later_change_still_flows(world: World, key: str, name: str) -> None:
    world.cluster.apply(mcp_server(name, "default", url=world.upstream.mcp_url, timeout="2s", accessGroups=["ci"]))
    for gw_name, gw in world.gateways.items():
        try:
            wait_until(lambda gw=gw: rest_call(gw, key, f"{name}__add", {"a": 1, "b": 1}).status_code == 200, 10,
                       interval=0.1, what=f"{gw_name} to serve McpServer {name}")  # fmt: skip
        except AssertionError as exc:
            logs = gw.logs()
            rejected = [ln for ln in logs.splitlines() if "snapshot rejected" in ln][-1:]
            raise AssertionError(f"{exc}; the gateway's last rejection: {rejected}") from None
    world.cluster.kubectl("delete", "mcpserver", name, "-n", "default")


def test_an_mcpkey_expiry_with_a_utc_offset_breaks_nothing(world: World, key: str):
    """expiresAt "2099-01-01T00:00:00+02:00" passes the CRD's pattern (RFC 3339 with an offset); it
    must either work or be rejected alone, and never stop the rest of the configuration."""
    world.cluster.apply(
        mcp_key("offset", "default", secretName="offset-key", accessGroups=["ci"], expiresAt="2099-01-01T00:00:00+02:00")
    )
    try:
        offset_key = world.generated_key("offset-key")
        world.gateway_keys.add(offset_key)
        _a_later_change_still_flows(world, key, "after-offset-key")
        control_call(world, key)
        obj = world.cluster.key("offset")
        if condition(obj, "Accepted")["status"] == "True":
            for gw in world.gateways.values():
                assert rest_list(gw, offset_key).status_code == 200, "an accepted key that no gateway accepts"
    finally:  # so that a failure here does not break the tests after it
        world.cluster.kubectl("delete", "mcpkey", "offset", "-n", "default")
        world.cluster.kubectl("delete", "mcpserver", "after-offset-key", "-n", "default", "--ignore-not-found")


def test_two_mcpkeys_sharing_one_secret_break_nothing(world: World, key: str):
    """Two McpKeys naming the same Secret resolve to the same key: the gateway snapshot refuses
    duplicate key hashes, so the operator must keep one of them out (with a condition) rather than
    publish a snapshot every replica rejects."""
    world.cluster.apply(mcp_key("twin-a", "default", secretName="twin-key", accessGroups=["ci"]))
    try:
        twin = world.generated_key("twin-key")
        world.gateway_keys.add(twin)
        world.wait_key_served(twin)
        time.sleep(1.1)  # creationTimestamp has one-second resolution: twin-b is the newer
        world.cluster.apply(mcp_key("twin-b", "default", secretName="twin-key", accessGroups=["ci"]))
        _a_later_change_still_flows(world, key, "after-twin-keys")
        control_call(world, key)
        for gw in world.gateways.values():
            assert rest_list(gw, twin).status_code == 200, "the shared key stopped working"
        # Its status is written in the pass that rendered it, after the snapshot went out: wait
        # for it (bounded) rather than read it the moment the next change was served.
        c = wait_until(
            lambda: condition(world.cluster.key("twin-b"), "Accepted"), 20, what="twin-b's Accepted condition"
        )
        assert c["status"] == "False", f"twin-b should be kept out with a reason: {c}"
    finally:  # so that a failure here does not break the tests after it
        world.cluster.kubectl("delete", "mcpkey", "twin-a", "twin-b", "-n", "default")
        world.cluster.kubectl("delete", "mcpserver", "after-twin-keys", "-n", "default", "--ignore-not-found")


# --------------------------------------------------------------------------------------------
# Secrets stay secret (runs last in this module)


def test_zz_no_secret_in_logs_status_or_events(world: World, key: str):
    seen = assert_no_secret_leaks(world)
    assert seen["events"] > 0, "the operator published no events at all: the event check proves nothing"
    print(f"\nsearched {seen}")
