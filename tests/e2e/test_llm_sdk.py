"""LLM endpoints with the official `anthropic` and `openai` Python SDKs, against the scripted
provider, on models carrying a hidden gateway tool (`tools__add` of the Rust example upstream)."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
from llm_harness import start_llm_world, text, tool_use

ADD = "tools__add"


def anthropic_client(world, gateway=None) -> anthropic.Anthropic:
    gw = gateway or world.gateway
    return anthropic.Anthropic(base_url=gw.url, api_key=world.key, max_retries=0)


def openai_client(world, gateway=None) -> openai.OpenAI:
    gw = gateway or world.gateway
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=world.key, max_retries=0)


def script_hidden_round(world) -> None:
    """Turn 1: the model calls the hidden add; turn 2 it answers with what add returned."""
    world.provider.script(
        {"when": {"no_tool_results": True}, "respond": {"content": [text("Adding."), tool_use(ADD, a=2, b=3)]}},
        {"when": {"last_tool_result_for": ADD}, "respond": {"content": [text("The sum is {{tool_result:tools__add}}.")]}},
    )


def test_messages_create_runs_the_hidden_tool_and_never_shows_it(gateways, procs, rust_upstream):
    world = start_llm_world(gateways, procs, rust_upstream)
    script_hidden_round(world)
    client = anthropic_client(world)
    before = rust_upstream.stats()["by_method"].get("tools/call", 0)
    message = client.messages.create(
        model="claude-test", max_tokens=100, messages=[{"role": "user", "content": "add 2 and 3"}]
    )
    raw = message.model_dump_json()
    assert ADD not in raw, raw
    # (the carrier ahead of the last iteration's text, as thinking comes before text)
    assert [b.type for b in message.content] == ["text", "redacted_thinking", "text"], raw
    assert message.stop_reason == "end_turn"
    texts = [b.text for b in message.content if b.type == "text"]
    assert texts[0] == "Adding." and "5" in texts[1], texts
    assert rust_upstream.stats()["by_method"].get("tools/call", 0) == before + 1
    calls = world.provider.model_calls()
    assert len(calls) == 2
    assert calls[0]["body"]["model"] == "scripted-claude", "the upstream model id is sent"
    assert any(t["name"] == ADD for t in calls[0]["body"]["tools"])
    assert calls[0]["headers"]["x-api-key"] == world.provider.api_key
    assert world.key not in json.dumps(calls), "the gateway key never reaches the provider"
    # Usage is summed over both model calls (the provider counts 7 output tokens per item: 2 + 1).
    assert message.usage.output_tokens == 21
    metrics = httpx.get(f"{world.gateway.internal_url}/metrics").text
    for line in (
        'switchboard_gateway_llm_requests_total{model="claude",endpoint="messages",outcome="ok"} 1',
        'switchboard_gateway_llm_model_calls_total{model="claude"} 2',
        'switchboard_gateway_llm_gateway_tool_calls_total{model="claude",outcome="ok"} 1',
        'switchboard_gateway_llm_tokens_total{model="claude",kind="output"} 21',
        'switchboard_gateway_llm_iterations_count{model="claude"} 1',
    ):
        assert line in metrics, line


def test_messages_stream_runs_the_hidden_tool(gateways, procs, rust_upstream):
    world = start_llm_world(gateways, procs, rust_upstream)
    script_hidden_round(world)
    client = anthropic_client(world)
    with client.messages.stream(
        model="claude-test", max_tokens=100, messages=[{"role": "user", "content": "add 2 and 3"}]
    ) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_message()
    assert events.count("message_start") == 1 and events.count("message_stop") == 1, events
    raw = final.model_dump_json()
    assert ADD not in raw, raw
    assert [b.text for b in final.content if b.type == "text"] == ["Adding.", "The sum is 5."], final.content
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 21


def test_chat_completions_runs_the_hidden_tool(gateways, procs, rust_upstream):
    world = start_llm_world(gateways, procs, rust_upstream)
    script_hidden_round(world)
    client = openai_client(world)
    completion = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "add 2 and 3"}]
    )
    raw = completion.model_dump_json()
    assert ADD not in raw, raw
    assert completion.choices[0].finish_reason == "stop"
    assert "The sum is 5." in completion.choices[0].message.content
    assert completion.usage.total_tokens > 0


def test_chat_completions_stream_runs_the_hidden_tool(gateways, procs, rust_upstream):
    world = start_llm_world(gateways, procs, rust_upstream)
    script_hidden_round(world)
    client = openai_client(world)
    chunks = list(
        client.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "user", "content": "add 2 and 3"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    raw = "".join(c.model_dump_json() for c in chunks)
    assert ADD not in raw, raw
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "Adding.\n\nThe sum is 5.", content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
