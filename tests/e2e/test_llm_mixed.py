"""Partial execution: in one turn the model calls a client tool and the hidden gateway tool.
The gateway runs its own, hands the client's back untouched, and the conversation goes on for
three more turns through the other replica, with the provider seeing the gateway tool's result
every time. Both SDKs, both wire formats, streaming and not."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from llm_harness import start_llm_world, text, tool_use

ADD = "tools__add"
READ = "read_file"

ANTHROPIC_READ = {
    "name": READ,
    "description": "Reads a file",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}
OPENAI_READ = {
    "type": "function",
    "function": {
        "name": READ,
        "description": "Reads a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}


def script(world) -> None:
    world.provider.script(
        {
            "when": {"last_tool_result_for": READ},
            "respond": {"content": [text("file={{tool_result:read_file}} sum={{tool_result:tools__add}}")]},
        },
        {"when": {"last_user_text_contains": "more"}, "respond": {"content": [text("still sum={{tool_result:tools__add}}")]}},
        {
            "when": {"no_tool_results": True},
            "respond": {"content": [text("Reading and adding."), tool_use(READ, path="notes.txt"), tool_use(ADD, a=2, b=3)]},
        },
    )


def provider_saw_add_result(body: dict) -> bool:
    """The request holds the gateway's add call and its result (5), in either format."""
    raw = json.dumps(body["messages"])
    if "tool_result" in raw:  # Anthropic
        calls = [
            b["id"]
            for m in body["messages"]
            if m["role"] == "assistant" and isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_use" and b.get("name") == ADD
        ]
        results = [
            b
            for m in body["messages"]
            if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_result" and b.get("tool_use_id") in calls
        ]
        return len(calls) == 1 and len(results) == 1 and "5" in json.dumps(results[0]["content"])
    calls = [
        c["id"]
        for m in body["messages"]
        if m["role"] == "assistant"
        for c in m.get("tool_calls") or []
        if c["function"]["name"] == ADD
    ]
    results = [m for m in body["messages"] if m["role"] == "tool" and m["tool_call_id"] in calls]
    return len(calls) == 1 and len(results) == 1 and "5" in results[0]["content"]


def anthropic_turn(client, messages, stream: bool) -> dict:
    kwargs = dict(model="claude-test", max_tokens=100, messages=messages, tools=[ANTHROPIC_READ])
    if stream:
        with client.messages.stream(**kwargs) as s:
            message = s.get_final_message()
    else:
        message = client.messages.create(**kwargs)
    return message.model_dump(exclude_none=True)


def openai_turn(client, messages, stream: bool) -> dict:
    kwargs = dict(model="gpt-test", messages=messages, tools=[OPENAI_READ])
    if not stream:
        return client.chat.completions.create(**kwargs).choices[0].message.model_dump(exclude_none=True)
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for c in delta.tool_calls or []:
            entry = calls.setdefault(c.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
            entry["id"] = c.id or entry["id"]
            if c.function:
                entry["function"]["name"] += c.function.name or ""
                entry["function"]["arguments"] += c.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    message = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    message["finish_reason"] = finish
    return message


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("wire", ["anthropic", "openai"])
def test_mixed_turn_then_three_turns_on_the_other_replica(gateways, procs, rust_upstream, wire, stream):
    world = start_llm_world(gateways, procs, rust_upstream, replicas=2)
    script(world)
    adds_before = rust_upstream.stats()["by_method"].get("tools/call", 0)
    gw1, gw2 = world.gateways
    seen_by_client: list[str] = []

    if wire == "anthropic":
        clients = [anthropic.Anthropic(base_url=g.url, api_key=world.key, max_retries=0) for g in (gw1, gw2)]
        messages = [{"role": "user", "content": "read notes.txt and add 2 and 3"}]
        reply = anthropic_turn(clients[0], messages, stream)
        seen_by_client.append(json.dumps(reply))
        assert reply["stop_reason"] == "tool_use"
        uses = [b for b in reply["content"] if b["type"] == "tool_use"]
        assert [u["name"] for u in uses] == [READ], "only the client's call comes back"
        assert uses[0]["input"] == {"path": "notes.txt"}
        messages.append({"role": "assistant", "content": reply["content"]})
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0]["id"], "content": "hello from disk"}]})
        for n in range(4):
            reply = anthropic_turn(clients[(n + 1) % 2], messages, stream)
            seen_by_client.append(json.dumps(reply))
            assert reply["stop_reason"] == "end_turn"
            answer = "".join(b.get("text", "") for b in reply["content"])
            assert ("file=hello from disk sum=5" if n == 0 else "still sum=5") in answer, answer
            messages.append({"role": "assistant", "content": reply["content"]})
            messages.append({"role": "user", "content": f"more {n}"})
    else:
        clients = [openai.OpenAI(base_url=f"{g.url}/v1", api_key=world.key, max_retries=0) for g in (gw1, gw2)]
        messages = [{"role": "user", "content": "read notes.txt and add 2 and 3"}]
        reply = openai_turn(clients[0], messages, stream)
        seen_by_client.append(json.dumps(reply))
        calls = reply["tool_calls"]
        assert [c["function"]["name"] for c in calls] == [READ]
        assert json.loads(calls[0]["function"]["arguments"]) == {"path": "notes.txt"}
        reply.pop("finish_reason", None)
        messages.append(reply)
        messages.append({"role": "tool", "tool_call_id": calls[0]["id"], "content": "hello from disk"})
        for n in range(4):
            reply = openai_turn(clients[(n + 1) % 2], messages, stream)
            seen_by_client.append(json.dumps(reply))
            assert ("file=hello from disk sum=5" if n == 0 else "still sum=5") in (reply["content"] or ""), reply
            reply.pop("finish_reason", None)
            messages.append({"role": "assistant", "content": reply["content"]})
            messages.append({"role": "user", "content": f"more {n}"})

    for seen in seen_by_client:
        assert ADD not in seen, seen
    assert rust_upstream.stats()["by_method"].get("tools/call", 0) == adds_before + 1, "add ran exactly once"
    calls = world.provider.model_calls()
    assert len(calls) == 5
    assert not provider_saw_add_result(calls[0]["body"])
    for call in calls[1:]:
        assert provider_saw_add_result(call["body"]), json.dumps(call["body"]["messages"], indent=1)
    # The client's own call reached the provider with the provider's id, answered by the client.
    assert "hello from disk" in json.dumps(calls[1]["body"]["messages"])
    assert "_sbx_" not in json.dumps([c["body"] for c in calls]), "carried ids never reach the provider"
