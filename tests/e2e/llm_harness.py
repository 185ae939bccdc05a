"""Building blocks of the LLM endpoint tests: the scripted provider, model configs, and a
gateway fronting a model with a hidden gateway tool (the Rust example upstream's `add`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from harness import (
    Gateway,
    GatewayFactory,
    ProcessGroup,
    Upstream,
    binary,
    gateway_config,
    key,
    new_secret,
    server,
)

PROVIDER_BIN = "switchboard-scripted-provider"
ANTHROPIC_VERSION = "2023-06-01"


@dataclass
class Provider:
    """The scripted provider (examples/provider): rules in, recorded requests out."""

    url: str
    api_key: str

    def script(self, *rules: dict) -> None:
        httpx.post(f"{self.url}/_script", json={"rules": list(rules)}, timeout=5).raise_for_status()

    def reset(self) -> None:
        httpx.post(f"{self.url}/_reset", timeout=5).raise_for_status()

    def requests(self, path: str | None = None) -> list[dict]:
        r = httpx.get(f"{self.url}/_requests", timeout=5)
        r.raise_for_status()
        return [q for q in r.json() if path is None or q["path"] == path]

    def model_calls(self) -> list[dict]:
        return [q for q in self.requests() if q["path"] in ("/v1/messages", "/v1/chat/completions")]


def start_provider(group: ProcessGroup, name: str = "provider") -> Provider:
    api_key = new_secret("provider-key")
    proc = group.start(name, [binary(PROVIDER_BIN), "--listen", "127.0.0.1:0", "--api-key", api_key])
    return Provider(proc.url, api_key)


def model(name: str, provider: str, base_url: str, api_key: str, **extra: Any) -> dict:
    """A `models[]` entry."""
    return {"name": name, "provider": provider, "baseUrl": base_url, "apiKey": api_key, **extra}


def hidden_add(server_name: str = "tools", **extra: Any) -> dict:
    """The example upstream's `add`, attached hidden and run by the gateway."""
    return {"server": server_name, "tools": {"allow": ["add"]}, **extra}


@dataclass
class LlmWorld:
    provider: Provider
    upstream: Upstream
    gateways: list[Gateway]
    key: str
    config: dict

    @property
    def gateway(self) -> Gateway:
        return self.gateways[0]


def llm_config(provider: Provider, upstream: Upstream, key_secret: str, **model_extra: Any) -> dict:
    """Two models (one per wire format), both with the hidden `tools__add`, and a key reaching
    both and the `tools` server."""
    config = gateway_config(
        [server("tools", upstream.mcp_url, accessGroups=["g"])],
        [key("caller", key_secret, accessGroups=["g"])],
    )
    tools = model_extra.pop("tools", [hidden_add()])
    config["models"] = [
        model(
            "claude",
            "anthropic",
            provider.url,
            provider.api_key,
            modelNames=["claude-test", "claude-sonnet-4-5", "claude-opus-5-5"],
            upstreamModel="scripted-claude",
            accessGroups=["g"],
            tools=tools,
            **model_extra,
        ),
        model(
            "gpt",
            "openai",
            f"{provider.url}/v1",
            provider.api_key,
            modelNames=["gpt-test"],
            accessGroups=["g"],
            tools=tools,
            **model_extra,
        ),
    ]
    return config


def start_llm_world(
    gateways: GatewayFactory, procs: ProcessGroup, upstream: Upstream, replicas: int = 1, **model_extra: Any
) -> LlmWorld:
    provider = start_provider(procs)
    secret = new_secret("llm-key")
    config = llm_config(provider, upstream, secret, **model_extra)
    first = gateways.start(config)
    started = [first]
    for _ in range(replicas - 1):
        started.append(gateways.start(config_path=first.config_path))
    return LlmWorld(provider, upstream, started, secret, config)


def tool_use(name: str, **input: Any) -> dict:
    return {"type": "tool_use", "name": name, "input": input}


def text(t: str) -> dict:
    return {"type": "text", "text": t}
