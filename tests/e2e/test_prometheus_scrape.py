"""A real Prometheus scrapes a gateway's internal listener (`--internal-listen`), and every gateway
metric the chart's alerts (charts/switchboard/files/prometheus-rules.yaml) and dashboard
(files/dashboard.json) use is one the gateway exposes, once the traffic here (a tool call, a
rate-limited call, a listing with a dead upstream) has labelled it; the few that need events this
test does not cause (EVENT_ONLY: shedding, model calls, folded labels) must at least be registered
in the sources (a labelled family with no sample is not in the exposition at all). The client
listener does not serve /metrics.

Prometheus is tests/setup-prometheus.sh's build (tests/e2e/prometheus.py starts it on a free
loopback port, scrape interval 1 s, its TSDB under the test's tmp dir). The operator's metrics
are not covered here (the operator needs a kube-apiserver: tests/k8s_e2e); 45-prometheus-rules
checks every name, the operator's included, against the Rust sources.
"""

from __future__ import annotations

import httpx
from harness import MODERN_VERSION, RawMcp, gateway_config, key, new_secret, server, wait_until
from prometheus import DASHBOARD, RULES, Prometheus, exposed_names, metric_names_in, registered_families

# What one tool call and one listing through the gateway must have put in series.
AFTER_TRAFFIC = [
    "switchboard_gateway_requests_total",
    "switchboard_gateway_tenant_requests_total",
    "switchboard_gateway_request_duration_seconds_bucket",
    "switchboard_gateway_upstream_requests_total",
    "switchboard_gateway_upstream_request_duration_seconds_bucket",
    "switchboard_gateway_limited_requests_total",
    "switchboard_gateway_listing_failures_total",
    # unlabelled: present from the start
    "switchboard_gateway_snapshot_generation",
    "switchboard_gateway_operator_stream_connected",
    "switchboard_gateway_audit_records_dropped_total",
]
# Used by the alerts or the dashboard, but only exposed after events this test does not cause.
EVENT_ONLY = {
    "switchboard_gateway_shed_requests_total",
    "switchboard_gateway_llm_requests_total",
    "switchboard_gateway_tenant_llm_tokens_total",
    "switchboard_gateway_usage_labels_folded_total",
}


def test_prometheus_scrapes_the_internal_listener(gateways, rust_upstream, tmp_path):
    secret = new_secret("prometheus-key")
    # `dead` listens nowhere: its listing fails (counted), the merged listing still answers.
    gw = gateways.start(gateway_config(
        [server("alpha", rust_upstream.mcp_url), server("dead", "http://127.0.0.1:1/mcp", timeout="2s")],
        [key("prom", secret, ["alpha", "dead"], limits={"rate": "1/h", "burst": 2})],
    ))
    with RawMcp(gw.mcp_url(), secret, MODERN_VERSION) as mcp:
        assert mcp.call_tool("alpha__add", {"a": 2, "b": 3}).status == 200
        assert mcp.list_tools().status == 200
        assert mcp.call_tool("alpha__add", {"a": 2, "b": 3}).status == 429  # over the burst of 2
    internal = gw.proc.internal_addr
    assert internal, "the gateway printed no internal listener line"
    # The client listener no longer serves the metrics.
    assert httpx.get(f"{gw.url}/metrics", timeout=5).status_code == 404

    with Prometheus([internal], tmp_path / "prometheus", labels={"namespace": "e2e"}) as prom:
        targets = prom.wait_targets_up(30, expected=1)
        assert [t["scrapeUrl"] for t in targets] == [f"http://{internal}/metrics"]
        wait_until(lambda: all(prom.series_exist(n) for n in AFTER_TRAFFIC), 15, interval=0.5,
                   what=f"series of {AFTER_TRAFFIC}")

        used = sorted(n for n in metric_names_in([RULES, DASHBOARD]) if n.startswith("switchboard_gateway_"))
        assert len(used) >= 10, used
        unknown = [n for n in used if n not in EVENT_ONLY and not prom.metric_known(n)]
        assert not unknown, f"the alerts or the dashboard use gateway metrics this gateway does not expose: {unknown}"
        unregistered = sorted(EVENT_ONLY - exposed_names(registered_families()))
        assert not unregistered, f"not registered in gateway/core/src/metrics.rs: {unregistered}"

        # The label shapes the rules rely on, on real series: the upstream call by server and outcome...
        by_server = prom.query('sum by (server) (switchboard_gateway_upstream_requests_total{outcome="ok"})')
        assert "alpha" in {r["metric"].get("server") for r in by_server}, by_server
        # ...the request duration by server...
        latency = prom.query(
            "histogram_quantile(0.5, sum by (server, le) (switchboard_gateway_request_duration_seconds_bucket))")
        assert "alpha" in {r["metric"].get("server") for r in latency}, latency
        # ...and a gateway without an operator is one the stream alert's expression finds.
        disconnected = prom.query("switchboard_gateway_operator_stream_connected == 0")
        assert [r["metric"]["instance"] for r in disconnected] == [internal], disconnected
