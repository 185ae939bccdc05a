"""The gateway's tool loop: approval, the iteration bound, failing tools, name collisions, and
the streamed loop's shape (text as it arrives, consistent indices, pings while tools run, a
broken provider stream becoming an error event)."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest
from harness import sse_data
from llm_harness import ANTHROPIC_VERSION, start_llm_world, text, tool_use

ADD, SLOW, FAIL = "tools__add", "tools__slow", "tools__fail"
ALL = [{"server": "tools", "tools": {"allow": ["add", "slow", "fail"]}}]


def messages(world, body: dict, **kw) -> httpx.Response:
    headers = {"x-api-key": world.key, "anthropic-version": ANTHROPIC_VERSION}
    return httpx.post(f"{world.gateway.url}/v1/messages", json=body, headers=headers, timeout=30, **kw)


def ask(stream=False, **extra) -> dict:
    return {"model": "claude-test", "max_tokens": 50, "stream": stream, "messages": [{"role": "user", "content": "go"}], **extra}


def events_of(raw: str) -> list[tuple[str, dict]]:
    out = []
    for block in raw.split("\n\n"):
        name = next((line[7:] for line in block.splitlines() if line.startswith("event: ")), None)
        data = "\n".join(line[6:] for line in block.splitlines() if line.startswith("data: "))
        if name and data:
            out.append((name, json.loads(data)))
    return out


def test_require_approval_always_hands_the_call_to_the_client(gateways, procs, rust_upstream):
    world = start_llm_world(gateways, procs, rust_upstream, tools=[{"server": "tools", "tools": {"allow": ["add"]}, "requireApproval": "always"}])
    world.provider.script({"respond": {"content": [tool_use(ADD, a=1, b=2)]}})
    before = rust_upstream.stats()["by_method"].get("tools/call", 0)
    r = messages(world, ask())
    body = r.json()
    assert body["stop_reason"] == "tool_use"
    assert [b["name"] for b in body["content"] if b["type"] == "tool_use"] == [ADD]
    assert rust_upstream.stats()["by_method"].get("tools/call", 0) == before, "the gateway did not run it"
    assert len(world.provider.model_calls()) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_iterations_are_bounded_and_the_turn_pauses(gateways, procs, rust_upstream, stream):
    world = start_llm_world(gateways, procs, rust_upstream, maxIterations=2)
    world.provider.script({"respond": {"content": [text("again"), tool_use(ADD, a=1, b=1)]}})
    before = rust_upstream.stats()["by_method"].get("tools/call", 0)
    client = anthropic.Anthropic(base_url=world.gateway.url, api_key=world.key, max_retries=0)
    if stream:
        with client.messages.stream(**{k: v for k, v in ask().items() if k != "stream"}) as s:
            message = s.get_final_message()
    else:
        message = client.messages.create(**{k: v for k, v in ask().items() if k != "stream"})
    assert message.stop_reason == "pause_turn"
    assert ADD not in message.model_dump_json()
    assert len(world.provider.model_calls()) == 2
    assert rust_upstream.stats()["by_method"].get("tools/call", 0) == before + 2
    assert message.usage.output_tokens == 28, "usage summed over both model calls"


def test_a_failing_gateway_tool_becomes_an_error_result(gateways, procs, rust_upstream):
    config_tools = ALL
    world = start_llm_world(gateways, procs, rust_upstream, tools=config_tools)
    world.config["servers"][0]["timeout"] = "1s"
    world.gateway.write_config_applied(world.config)
    world.provider.script(
        {"when": {"last_tool_result_for": FAIL}, "respond": {"content": [text("done")]}},
        {"respond": {"content": [tool_use(FAIL), tool_use(SLOW, ms=3000), tool_use(ADD, a="x", b=1)]}},
    )
    r = messages(world, ask())
    assert r.status_code == 200, r.text
    # (the carrier of the hidden calls first, then the model's answer)
    assert [b["type"] for b in r.json()["content"]] == ["redacted_thinking", "text"], r.text
    results = world.provider.model_calls()[1]["body"]["messages"][-1]["content"]
    assert [b["type"] for b in results] == ["tool_result"] * 3
    assert all(b.get("is_error") is True for b in results), results
    joined = json.dumps(results)
    assert "did not answer within 1s" in joined, joined


def test_the_clients_tool_wins_a_name_collision(gateways, procs, rust_upstream):
    world = start_llm_world(gateways, procs, rust_upstream)
    world.provider.script({"respond": {"content": [tool_use(ADD, a=1, b=2)]}})
    own = {"name": ADD, "description": "the client's own", "input_schema": {"type": "object"}}
    before = rust_upstream.stats()["by_method"].get("tools/call", 0)
    r = messages(world, ask(tools=[own]))
    assert r.json()["stop_reason"] == "tool_use"
    assert rust_upstream.stats()["by_method"].get("tools/call", 0) == before
    sent = world.provider.model_calls()[0]["body"]["tools"]
    assert [t["description"] for t in sent if t["name"] == ADD] == ["the client's own"]
    assert "client defines a tool of the same name" in world.gateway.logs()


def test_streamed_loop_relays_text_as_it_arrives_with_pings_and_dense_indices(gateways, procs, rust_upstream):
    world = start_llm_world(gateways, procs, rust_upstream, tools=ALL)
    world.provider.script(
        {"when": {"last_tool_result_for": SLOW}, "respond": {"content": [text("after the wait")]}},
        {"respond": {"content": [text("before the wait"), tool_use(SLOW, ms=1500)]}},
    )
    headers = {"x-api-key": world.key, "anthropic-version": ANTHROPIC_VERSION}
    model_calls_at_first_text = None
    raw = ""
    with httpx.stream("POST", f"{world.gateway.url}/v1/messages", json=ask(stream=True), headers=headers, timeout=30) as r:
        assert r.status_code == 200
        for chunk in r.iter_text():
            raw += chunk
            if model_calls_at_first_text is None and "before the wait" in raw:
                model_calls_at_first_text = len(world.provider.model_calls())
    # Ordering, not timing: the first text reached the client while the turn was still at its
    # first model call; the second one only starts once the tool (1.5 s) has answered. A loop
    # that buffered its text until the turn ends would show two model calls here.
    assert model_calls_at_first_text == 1, f"model calls made when the first text arrived: {model_calls_at_first_text}"
    assert len(world.provider.model_calls()) == 2
    events = events_of(raw)
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-1] == "message_stop" and names.count("message_start") == 1
    # A ping from the gateway while the tool ran: between the first text's stop and the second start.
    first_stop = names.index("content_block_stop")
    second_start = names.index("content_block_start", first_stop)
    assert "ping" in names[first_stop:second_start], names
    starts = [d["index"] for n, d in events if n == "content_block_start"]
    stops = [d["index"] for n, d in events if n == "content_block_stop"]
    assert starts == list(range(len(starts))) and stops == starts, (starts, stops)
    assert SLOW not in raw


def test_a_broken_provider_stream_becomes_an_error_event(gateways, procs, rust_upstream):
    world = start_llm_world(gateways, procs, rust_upstream)
    world.provider.script(
        {"when": {"last_tool_result_for": ADD}, "respond": {"content": [text("a long answer " * 20)], "break_stream_after": 4}},
        {"respond": {"content": [tool_use(ADD, a=1, b=2)]}},
    )
    r = messages(world, ask(stream=True))
    events = events_of(r.text)
    assert events[-1][0] == "error", [n for n, _ in events]
    assert events[-1][1]["error"]["type"] == "api_error"
    world.provider.reset()
    world.provider.script({"respond": {"content": [text("x")], "break_stream_after": 2}})
    r = httpx.post(
        f"{world.gateway.url}/v1/chat/completions",
        json={"model": "gpt-test", "stream": True, "messages": [{"role": "user", "content": "go"}]},
        headers={"authorization": f"Bearer {world.key}"},
        timeout=30,
    )
    data = [json.loads(d) for d in sse_data(r.text) if d != "[DONE]"]
    assert "error" in data[-1], data


def test_a_forced_tool_choice_applies_to_the_first_model_call_only(gateways, procs, rust_upstream):
    world = start_llm_world(gateways, procs, rust_upstream)
    world.provider.script(
        {"when": {"last_tool_result_for": ADD}, "respond": {"content": [text("done")]}},
        {"respond": {"content": [tool_use(ADD, a=1, b=1)]}},
    )
    r = messages(world, ask(tool_choice={"type": "any", "disable_parallel_tool_use": True}))
    assert r.status_code == 200 and r.json()["content"][-1]["text"] == "done", r.text
    assert r.headers.get("request-id", "").startswith("req_"), "the last model call's request-id"
    first, second = (c["body"]["tool_choice"] for c in world.provider.model_calls())
    assert first == {"type": "any", "disable_parallel_tool_use": True}
    assert second == {"type": "auto", "disable_parallel_tool_use": True}
