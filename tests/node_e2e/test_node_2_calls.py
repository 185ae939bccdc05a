"""Acceptance 2 of the one-node cluster: an example upstream runs as a pod behind a Service;
McpServer and McpKey are applied and Ready (kubectl wait); a client pod calls the gateway through
its Service DNS name with the generated key, another with its own ServiceAccount token; a pod of
an unbound ServiceAccount is refused."""

from __future__ import annotations

import json

from node import GATEWAY_URL, caller_pod, run_to_completion


def outcome(logs: str) -> dict:
    lines = [line for line in logs.splitlines() if line.startswith("{")]
    assert lines, f"the caller printed no result: {logs!r}"
    return json.loads(lines[-1])


def test_pod_calls_with_the_generated_key(served):
    pod = caller_pod("call-with-key", served["namespace"],
                     ["once", "-url", f"{GATEWAY_URL}/mcp/demo", "-key", served["key"]])
    phase, logs = run_to_completion(pod)
    result = outcome(logs)
    assert phase == "Succeeded" and result["ok"], f"{phase}: {result}"
    assert result["status"] == 200


def test_pod_calls_with_its_service_account_token(served):
    pod = caller_pod("call-with-token", served["namespace"],
                     ["once", "-url", f"{GATEWAY_URL}/mcp/demo", "-token-file", "/var/run/secrets/switchboard/token"],
                     service_account="caller", token_audience="switchboard")
    phase, logs = run_to_completion(pod)
    result = outcome(logs)
    assert phase == "Succeeded" and result["ok"], f"{phase}: {result}"


def test_unbound_service_account_is_refused(served):
    pod = caller_pod("call-as-stranger", served["namespace"],
                     ["once", "-url", f"{GATEWAY_URL}/mcp/demo", "-token-file", "/var/run/secrets/switchboard/token"],
                     service_account="stranger", token_audience="switchboard")
    phase, logs = run_to_completion(pod)
    result = outcome(logs)
    assert phase == "Failed" and not result["ok"], f"{phase}: {result}"
    assert result["status"] == 403, result
    assert "apps/stranger is bound to no key" in result["body"], result["body"]
