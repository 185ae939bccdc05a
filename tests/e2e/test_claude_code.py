"""The real Claude Code CLI through the gateway (acceptance 2): in one turn the scripted model
calls the CLI's own `Read` on a file in the work directory and the hidden gateway tool. Read runs
locally (its content reaches the provider), the gateway tool runs exactly once on its upstream,
nothing the CLI receives names the gateway tool, and the CLI exits 0 with the model's final text.
Also: a stream that breaks is retried by the CLI without streaming, and that works too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from claude_cli import claude_ok, describe, run_claude
from harness import balancer
from llm_harness import start_llm_world, text, tool_use

ADD = "tools__add"
FILE_TEXT = "the launch code is 4711"


def script(world, notes: Path, *, break_first_stream: bool = False) -> None:
    first_turn = {"content": [text("Reading the notes and adding."), tool_use("Read", file_path=str(notes)), tool_use(ADD, a=40, b=2)]}
    rules = [
        {
            "when": {"last_tool_result_for": "Read"},
            "respond": {"content": [text("Notes: {{tool_result:Read}} / sum: {{tool_result:tools__add}}")]},
        },
    ]
    if break_first_stream:
        rules.append({"when": {"no_tool_results": True, "stream": True}, "respond": {**first_turn, "break_stream_after": 3}})
    rules.append({"when": {"no_tool_results": True}, "respond": first_turn})
    world.provider.script(*rules)


@pytest.mark.parametrize("credential", ["api_key", "auth_token"])
def test_claude_code_reads_locally_while_the_gateway_runs_its_hidden_tool(gateways, procs, rust_upstream, tmp_path, credential):
    world = start_llm_world(gateways, procs, rust_upstream, replicas=2)
    work = tmp_path / "work"
    work.mkdir()
    notes = work / "notes.txt"
    notes.write_text(FILE_TEXT + "\n")
    script(world, notes)
    adds_before = rust_upstream.stats()["by_method"].get("tools/call", 0)
    home = tmp_path / "home"
    with balancer([g.url for g in world.gateways]) as lb:
        lb.record_bodies = True
        run = run_claude(
            lb.url,
            "Read notes.txt and add 40 and 2.",
            work,
            home=home,
            **{credential: world.key},
        )
        received = b"".join(lb.bodies).decode("utf-8", "replace")
        replicas = {i for i, *_ in lb.served}
    result = claude_ok(run)
    assert FILE_TEXT in result and "42" in result, describe(run)
    assert replicas == {0, 1}, "the CLI's requests went to both replicas"
    assert rust_upstream.stats()["by_method"].get("tools/call", 0) == adds_before + 1, "the gateway tool ran exactly once"
    calls = world.provider.model_calls()
    assert len(calls) == 2, [c["body"]["messages"][-1] for c in calls]
    assert all(c["query"] == "beta=true" for c in calls)
    first, second = (c["body"] for c in calls)
    assert len(first["tools"]) > 10 and ADD in [t["name"] for t in first["tools"]], "the CLI's own tools and the hidden one"
    assert any(m["role"] == "system" for m in first["messages"]), "role: system entries pass through"
    assert FILE_TEXT in json.dumps(second["messages"]), "Read ran locally and its content reached the provider"
    assert "42" in json.dumps(second["messages"]), "the gateway tool's result reached the provider"
    assert world.key not in json.dumps([c["headers"] for c in calls])
    # Nothing the CLI received, or kept, names the gateway tool.
    assert received and ADD not in received
    kept = "".join(p.read_text(errors="replace") for p in home.rglob("*") if p.is_file() and p.stat().st_size < 10_000_000)
    assert "Reading the notes" in kept, "the session transcript is where the CLI keeps what it received"
    assert ADD not in kept


def test_claude_code_retries_a_broken_stream_without_streaming(gateways, procs, rust_upstream, tmp_path):
    world = start_llm_world(gateways, procs, rust_upstream)
    work = tmp_path / "work"
    work.mkdir()
    notes = work / "notes.txt"
    notes.write_text(FILE_TEXT + "\n")
    script(world, notes, break_first_stream=True)
    run = run_claude(world.gateway.url, "Read notes.txt and add 40 and 2.", work, api_key=world.key)
    result = claude_ok(run)
    assert FILE_TEXT in result and "42" in result, describe(run)
    streams = [c["body"].get("stream") for c in world.provider.model_calls()]
    assert streams[0] is True and False in streams, streams
