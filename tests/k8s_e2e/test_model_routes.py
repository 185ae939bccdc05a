"""ModelRoute (an LLM model behind the gateway) against a real kube-apiserver: one loopback
cluster for this module, the operator (op-a) and two gateway replicas (gw1, gw2) as local
processes, the Rust example upstream (the McpServer the model's tools come from) and two scripted
LLM providers (examples/provider): one that requires a key, one that requires none.

- invalid ModelRoutes (and an McpKey naming a model badly) are rejected by `kubectl apply`,
  naming the field;
- a ModelRoute + McpServer + McpKey + Secret: `kubectl wait --for=condition=Ready modelroute/...`,
  the snapshot the operator publishes carries the model (server id resolved, key from the Secret),
  both gateways serve it (Programmed 2/2), and Ready cost no tokens: the provider saw only
  `GET /v1/models`, never a model call;
- Ready tells the truth: a refused key is ProviderAuthFailed (and True again once the Secret is
  fixed), an unreachable provider ProviderUnavailable, a provider that needs no key is Ready;
- Accepted tells why a model is left out: ServerNotFound, SecretNotFound (fixed by creating it),
  ModelNameConflict; the rest of the snapshot keeps working;
- no secret value in logs, objects, events or metrics.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import pytest
from harness import wait_until
from k8s_fixtures import module_world
from k8s_world import (
    ScriptedProvider,
    World,
    assert_no_secret_leaks,
    condition,
    describe_conditions,
    reserve_port,
    mcp_key,
    mcp_server,
    model_route,
    secret,
)

MODEL_CALL_PATHS = ("/v1/messages", "/v1/messages/count_tokens", "/v1/chat/completions")
PROGRAMMED_RE = re.compile(r"^(\d+)/(\d+) gateway replicas serve generation (\d+)$")


@pytest.fixture(scope="module")
def world(request, tmp_path_factory) -> Iterator[World]:
    with module_world(request, tmp_path_factory, "models") as w:
        w.provider_key = w.new_secret("provider-api-key")
        w.keyed = w.start_provider("provider-keyed", api_key=w.provider_key)
        w.open = w.start_provider("provider-open")
        yield w


def model_status(world: World, name: str, namespace: str = "default") -> dict:
    obj = world.cluster.model_route(name, namespace)
    assert obj is not None, f"ModelRoute {namespace}/{name} does not exist"
    return obj


def wait_model(world: World, name: str, type_: str, want, timeout: float = 20, namespace: str = "default") -> dict:
    c, _ = world.wait_condition("modelroute", name, namespace, type_, want, timeout)
    return c


def settled_false(reason: str):
    """A condition that is False for `reason`: a route applied a moment ago may first say
    `NotAccepted` (not in the snapshot yet) before its probe's verdict comes."""
    return lambda c: c.get("status") == "False" and c.get("reason") == reason


def assert_no_model_calls(provider: ScriptedProvider) -> list[dict]:
    """Everything the provider received was a GET of the model listing: no path that spends
    tokens, no body."""
    seen = provider.requests()
    calls = [r for r in seen if r["path"] != "/v1/models" or r.get("body") is not None]
    assert not calls, f"the provider received more than model listings: {[(r['path'], r.get('body')) for r in calls]}"
    assert not [r for r in seen if r["path"] in MODEL_CALL_PATHS]
    return seen


# --------------------------------------------------------------------------------------------
# Admission: invalid manifests are rejected, naming the field


def _model(**spec):
    return {"provider": "anthropic", "baseUrl": "https://api.anthropic.com", **spec}


INVALID = {
    "bad-provider": ({"provider": "gemini", "baseUrl": "https://x.example"}, "spec.provider"),
    "no-provider": ({"baseUrl": "https://x.example"}, "spec.provider"),
    "bad-base-url-scheme": (_model(baseUrl="ftp://x.example/v1"), "spec.baseUrl"),
    "bad-base-url-not-a-url": (_model(baseUrl="not a url"), "spec.baseUrl"),
    "max-iterations-zero": (_model(maxIterations=0), "spec.maxIterations"),
    "max-iterations-65": (_model(maxIterations=65), "spec.maxIterations"),
    "tools-allow-and-deny": (_model(tools=[{"server": "s", "tools": {"allow": ["a", "b"], "deny": ["b"]}}]), "spec.tools[0].tools"),
    "tools-empty-server": (_model(tools=[{"server": ""}]), "spec.tools[0].server"),
    "tools-bad-server": (_model(tools=[{"server": "a/b/c"}]), "spec.tools[0].server"),
    "bad-approval": (_model(tools=[{"server": "s", "requireApproval": "sometimes"}]), "spec.tools[0].requireApproval"),
    "bad-visibility": (_model(tools=[{"server": "s", "visibility": "secret"}]), "spec.tools[0].visibility"),
    "bad-duration": (_model(timeout="10 minutes"), "spec.timeout"),
    "control-character-in-name": (_model(modelNames=["claude\u0007"]), "spec.modelNames[0]"),
    "empty-model-name": (_model(modelNames=[""]), "spec.modelNames[0]"),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_modelroute_is_rejected_naming_the_field(world: World, case: str):
    spec, field = INVALID[case]
    name = f"invalid-{case}"[:63]
    p = world.cluster.apply(model_route(name, "default", **spec), check=False)
    out = p.stderr + p.stdout
    assert p.returncode != 0, f"kubectl apply accepted the invalid ModelRoute {case}: {out}"
    assert field in out, f"the error does not name {field!r}:\n{out}"
    assert world.cluster.model_route(name) is None, "a rejected manifest was stored"


def test_a_modelroute_name_must_be_a_dns_label(world: World):
    p = world.cluster.apply(model_route("dotted.name", "default", **_model()), check=False)
    out = p.stderr + p.stdout
    assert p.returncode != 0 and "metadata.name" in out, f"exit {p.returncode}:\n{out}"


def test_an_mcpkey_naming_a_model_badly_is_rejected(world: World):
    p = world.cluster.apply(mcp_key("invalid-models", "default", secretName="k", models=["Not_A_Name"]), check=False)
    out = p.stderr + p.stdout
    assert p.returncode != 0 and "spec.models[0]" in out, f"exit {p.returncode}:\n{out}"


# --------------------------------------------------------------------------------------------
# A model end to end: Ready without spending tokens


@pytest.fixture(scope="module")
def claude(world: World) -> str:
    """ModelRoute default/claude (anthropic, on the keyed provider, tools of McpServer search),
    McpServer search, McpKey llm naming the model, the key's Secret; Ready."""
    world.keyed.reset()
    world.cluster.apply(
        [
            secret("anthropic", "default", {"apiKey": world.provider_key}),
            mcp_server("search", "default", url=world.upstream.mcp_url, timeout="2s", accessGroups=["llm"]),
            model_route(
                "claude", "default", provider="anthropic", baseUrl=world.keyed.url, modelNames=["claude-test", "sonnet"],
                upstreamModel="scripted-model", apiKeySecretRef={"name": "anthropic", "key": "apiKey"}, timeout="30s",
                maxIterations=4, accessGroups=["llm"],
                tools=[{"server": "search", "tools": {"deny": ["fail"]}, "requireApproval": "always", "visibility": "visible"}],
            ),
            mcp_key("llm", "default", secretName="llm-key", models=["claude"]),
        ]
    )  # fmt: skip
    world.kubectl_wait_ready("claude", timeout=60, kind="modelroute")
    world.generated_key("llm-key")
    return "claude"


def test_a_modelroute_is_ready_programmed_and_in_the_snapshot_without_a_model_call(world: World, claude: str):
    obj = model_status(world, "claude")
    ready, accepted = condition(obj, "Ready"), condition(obj, "Accepted")
    assert ready["reason"] == "ProviderReady" and "HTTP 200" in ready["message"], ready
    assert accepted["status"] == "True" and "claude-test, sonnet" in accepted["message"], accepted
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    assert obj["status"]["modelNames"] == ["claude-test", "sonnet"], obj["status"]

    # Programmed: both gateways took the snapshot that carries it (they accepted the schema).
    def programmed() -> bool:
        c = condition(model_status(world, "claude"), "Programmed")
        m = PROGRAMMED_RE.match(c["message"]) if c else None
        return bool(c and c["status"] == "True" and m and m.group(1) == m.group(2) == "2")

    try:
        wait_until(programmed, 20, what="ModelRoute claude Programmed 2/2")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {describe_conditions(model_status(world, 'claude'))}") from None

    # The snapshot carries the model as the gateway needs it.
    snapshot = world.stored_snapshot()
    models = {m["id"]: m for m in snapshot.get("models", [])}
    assert set(models) >= {"default/claude"}, f"snapshot models: {sorted(models)}"
    m = models["default/claude"]
    assert (m["name"], m["namespace"], m["provider"], m["baseUrl"]) == ("claude", "default", "anthropic", world.keyed.url), m
    assert m["modelNames"] == ["claude-test", "sonnet"] and m["upstreamModel"] == "scripted-model", m
    assert m["apiKey"] == {"value": world.provider_key}, "the API key was not resolved from the Secret"
    assert (m["timeout"], m["maxIterations"], m["accessGroups"]) == ("30s", 4, ["llm"]), m
    assert m["tools"] == [
        {"server": "default/search", "tools": {"deny": ["fail"]}, "requireApproval": "always", "visibility": "visible"}
    ], m["tools"]
    keys = {(k["namespace"], k["name"]): k for k in snapshot["keys"]}
    assert keys[("default", "llm")]["models"] == ["claude"], keys[("default", "llm")]
    assert world.cluster.model_route("claude")["spec"].get("apiKeySecretRef"), "the spec keeps the reference only"

    # Ready spent no tokens: the provider saw model listings and nothing else.
    seen = assert_no_model_calls(world.keyed)
    # (Other tests' openai probes may share this provider: an anthropic probe says its version.)
    anthropic = [r for r in seen if "anthropic-version" in r["headers"] or "x-api-key" in r["headers"]]
    assert anthropic, f"the provider was never probed the anthropic way: {seen}"
    for r in anthropic:
        h = r["headers"]
        assert h.get("x-api-key") == world.provider_key, f"the probe did not carry the key as x-api-key: {sorted(h)}"
        assert h.get("anthropic-version") == "2023-06-01", h.get("anthropic-version")
        assert "authorization" not in h, "an anthropic probe sent an Authorization header"
    print(f"\nprovider requests while claude became Ready and Programmed: {[r['path'] for r in seen]}")


def test_kubectl_get_modelroutes_shows_provider_model_and_ready(world: World, claude: str):
    world.kubectl_wait_ready("claude", timeout=30, kind="modelroute")
    out = world.cluster.kubectl("get", "modelroutes", "-n", "default").stdout
    lines = out.strip().splitlines()
    assert lines[0].split() == ["NAME", "PROVIDER", "MODEL", "READY", "AGE"], lines[0]
    row = next(line for line in lines[1:] if line.split()[0] == "claude")
    assert "anthropic" in row and "claude-test" in row and "True" in row, row
    # Short name and category work too.
    assert "claude" in world.cluster.kubectl("get", "mr", "-n", "default").stdout
    assert "modelroute.switchboard.dev/claude" in world.cluster.kubectl("get", "switchboard", "-n", "default", "-o", "name").stdout


def test_an_openai_model_without_a_key_is_ready(world: World):
    world.open.reset()
    world.cluster.apply(model_route("local", "default", provider="openai", baseUrl=f"{world.open.url}/v1", accessGroups=["llm"]))
    world.kubectl_wait_ready("local", timeout=60, kind="modelroute")
    c = condition(model_status(world, "local"), "Ready")
    assert c["reason"] == "ProviderReady", c
    seen = assert_no_model_calls(world.open)
    assert seen and all("authorization" not in r["headers"] and "x-api-key" not in r["headers"] for r in seen), seen
    assert model_status(world, "local")["status"]["modelNames"] == ["local"]
    assert "default/local" in {m["id"] for m in world.stored_snapshot().get("models", [])}
    world.cluster.kubectl("delete", "modelroute", "local", "-n", "default")


def test_a_refused_key_is_provider_auth_failed_until_the_secret_is_fixed(world: World):
    wrong = world.new_secret("provider-wrong-key")
    world.cluster.apply(
        [
            secret("openai-key", "default", {"apiKey": wrong}),
            model_route("gpt", "default", provider="openai", baseUrl=f"{world.keyed.url}/v1", modelNames=["gpt-test"],
                        apiKeySecretRef={"name": "openai-key", "key": "apiKey"}, accessGroups=["llm"]),
        ]
    )  # fmt: skip
    c = wait_model(world, "gpt", "Ready", settled_false("ProviderAuthFailed"), 30)
    print(f"\ngpt with a wrong key: Ready=False {c['reason']}: {c['message']}")
    assert c["reason"] == "ProviderAuthFailed", c
    assert wrong not in c["message"] and world.provider_key not in c["message"], c
    assert condition(model_status(world, "gpt"), "Accepted")["status"] == "True"
    # An openai probe carries the key as a bearer token.
    bearer = [r for r in world.keyed.requests() if r["headers"].get("authorization") == f"Bearer {wrong}"]
    assert bearer, "the openai probe did not send Authorization: Bearer <key>"

    # Fixing the Secret re-probes at once (the rendered spec changed), without touching the CR.
    world.cluster.apply(secret("openai-key", "default", {"apiKey": world.provider_key}))
    c = wait_model(world, "gpt", "Ready", "True", 30)
    assert c["reason"] == "ProviderReady", c
    assert_no_model_calls(world.keyed)
    world.cluster.kubectl("delete", "modelroute", "gpt", "-n", "default")


def test_an_unreachable_provider_is_provider_unavailable(world: World):
    port = reserve_port()  # nothing listens there (and nothing will: it is reserved)
    world.cluster.apply(
        model_route("gone", "default", provider="anthropic", baseUrl=f"http://127.0.0.1:{port}", timeout="2s")
    )
    c = wait_model(world, "gone", "Ready", settled_false("ProviderUnavailable"), 30)
    print(f"\ngone: Ready=False {c['reason']}: {c['message']}")
    assert c["reason"] == "ProviderUnavailable", c
    assert str(port) not in c["message"], f"the message should not repeat the base URL: {c['message']}"
    assert condition(model_status(world, "gone"), "Accepted")["status"] == "True"
    world.cluster.kubectl("delete", "modelroute", "gone", "-n", "default")


def test_a_model_left_out_says_why_and_breaks_nothing(world: World, claude: str):
    world.cluster.apply(
        [
            model_route("no-server", "default", provider="openai", baseUrl=f"{world.open.url}/v1",
                        tools=[{"server": "nothing-here"}]),
            model_route("no-secret", "default", provider="openai", baseUrl=f"{world.keyed.url}/v1",
                        apiKeySecretRef={"name": "later-key", "key": "apiKey"}),
        ]
    )  # fmt: skip
    c = wait_model(world, "no-server", "Accepted", "False")
    assert c["reason"] == "ServerNotFound" and "spec.tools[0].server" in c["message"], c
    assert "default/nothing-here" in c["message"], c
    c = wait_model(world, "no-secret", "Accepted", "False")
    assert c["reason"] == "SecretNotFound" and "later-key" in c["message"], c
    for name in ("no-server", "no-secret"):
        obj = model_status(world, name)
        assert condition(obj, "Ready")["status"] == "False", describe_conditions(obj)
        assert condition(obj, "Programmed")["status"] == "False", describe_conditions(obj)
    ids = {m["id"] for m in world.stored_snapshot().get("models", [])}
    assert "default/claude" in ids and not ids & {"default/no-server", "default/no-secret"}, ids
    assert condition(model_status(world, "claude"), "Ready")["status"] == "True"

    # Creating the Secret brings the model in.
    world.cluster.apply(secret("later-key", "default", {"apiKey": world.provider_key}))
    wait_model(world, "no-secret", "Accepted", "True")
    world.kubectl_wait_ready("no-secret", timeout=30, kind="modelroute")
    assert "default/no-secret" in {m["id"] for m in world.stored_snapshot().get("models", [])}

    # A model name another (older) ModelRoute serves is refused, naming the owner.
    time.sleep(1.1)  # creationTimestamp has one-second resolution: make "newer" unambiguous
    world.cluster.kubectl("create", "namespace", "team-m")
    world.cluster.apply(
        model_route("copycat", "team-m", provider="openai", baseUrl=f"{world.open.url}/v1", modelNames=["sonnet"])
    )
    c = wait_model(world, "copycat", "Accepted", "False", namespace="team-m")
    assert c["reason"] == "ModelNameConflict" and "default/claude" in c["message"], c
    assert condition(model_status(world, "claude"), "Accepted")["status"] == "True"
    world.cluster.kubectl("delete", "modelroute", "no-server", "no-secret", "-n", "default")
    world.cluster.kubectl("delete", "modelroute", "copycat", "-n", "team-m")


def test_claude_code_through_gateways_the_operator_programs(world: World, tmp_path):
    """Acceptance 6: a ModelRoute with a hidden tool of an McpServer, an McpKey, applied on the
    real API server and Ready; the real Claude Code CLI, through both gateway replicas (fed by the
    operator), reads a file locally while the gateway runs the hidden tool once."""
    from claude_cli import claude_ok, describe, run_claude
    from harness import balancer

    # A provider of its own: the others must only ever see model listings.
    provider = world.start_provider("provider-cc", api_key=world.provider_key)
    world.cluster.apply(
        [
            secret("anthropic-cc", "default", {"apiKey": world.provider_key}),
            mcp_server("adder", "default", url=world.upstream.mcp_url, timeout="5s", accessGroups=["cc"]),
            model_route(
                "cc", "default", provider="anthropic", baseUrl=provider.url, modelNames=["claude-opus-5-5"],
                apiKeySecretRef={"name": "anthropic-cc", "key": "apiKey"}, accessGroups=["cc"],
                tools=[{"server": "adder", "tools": {"allow": ["add"]}, "requireApproval": "never", "visibility": "hidden"}],
            ),
            mcp_key("cc", "default", secretName="cc-key", accessGroups=["cc"]),
        ]
    )  # fmt: skip
    world.kubectl_wait_ready("adder", timeout=60)
    world.kubectl_wait_ready("cc", timeout=60, kind="modelroute")
    key = world.generated_key("cc-key")
    world.wait_key_served(key)
    servers = {s["id"]: s for s in world.stored_snapshot()["servers"]}
    hidden = f"{servers['default/adder'].get('toolPrefix') or 'adder'}__add"
    work = tmp_path / "work"
    work.mkdir()
    notes = work / "notes.txt"
    notes.write_text("the launch code is 4711\n")
    rules = [
        {"when": {"last_tool_result_for": "Read"}, "respond": {"content": [
            {"type": "text", "text": "Notes: {{tool_result:Read}} / sum: {{tool_result:%s}}" % hidden}]}},
        {"when": {"no_tool_results": True}, "respond": {"content": [
            {"type": "text", "text": "Reading and adding."},
            {"type": "tool_use", "name": "Read", "input": {"file_path": str(notes)}},
            {"type": "tool_use", "name": hidden, "input": {"a": 40, "b": 2}}]}},
    ]  # fmt: skip
    httpx.post(f"{provider.url}/_script", json={"rules": rules}, timeout=5).raise_for_status()
    calls_before = world.upstream.stats()["by_method"].get("tools/call", 0)
    gateways = [gw.url for gw in world.gateways.values() if gw.proc.alive()]
    assert len(gateways) == 2, gateways
    with balancer(gateways) as lb:
        lb.record_bodies = True
        run = run_claude(lb.url, "Read notes.txt and add 40 and 2.", work, api_key=key)
        received = b"".join(lb.bodies).decode("utf-8", "replace")
        used = {i for i, *_ in lb.served}
    result = claude_ok(run)
    assert "4711" in result and "42" in result, describe(run)
    assert used == {0, 1}, "the CLI's requests went to both replicas"
    assert world.upstream.stats()["by_method"].get("tools/call", 0) == calls_before + 1, "the hidden tool ran once"
    assert hidden not in received, "a response the CLI received names the hidden tool"
    model_calls = [r for r in provider.requests() if r["path"] == "/v1/messages"]
    assert len(model_calls) == 2 and "4711" in str(model_calls[1]["body"]["messages"])
    assert key not in str([r["headers"] for r in model_calls]), "the gateway key reached the provider"


def test_zz_no_secret_in_logs_status_or_events(world: World):
    assert_no_model_calls(world.keyed)
    assert_no_model_calls(world.open)
    assert_no_secret_leaks(world)
