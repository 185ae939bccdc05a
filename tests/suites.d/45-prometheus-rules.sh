#!/usr/bin/env bash
# The chart's alerts and dashboard, checked with the real Prometheus tools (no cluster, no
# Switchboard binary needed).
#
#   tests/run-all.sh 45-prometheus-rules       (or: bash tests/suites.d/45-prometheus-rules.sh)
#
# 1. `promtool check rules` on charts/switchboard/files/prometheus-rules.yaml, and
#    `promtool test rules tests/prometheus/rules-test.yaml` (every alert fires in one case and
#    stays quiet in others).
# 2. The tests can fail: against sabotaged copies of the rules (an alert that never fires, an
#    alert without its `for`, a threshold moved) `promtool test rules` must fail, naming the alert.
# 3. The chart's PrometheusRule (helm template with the CRD's capability) holds exactly the
#    file's groups and passes promtool; the dashboard ConfigMap holds exactly files/dashboard.json.
# 4. Every dashboard query is valid PromQL (promtool, as recording rules), and every metric name
#    the rules and the dashboard use is one the gateway's or operator's sources register, with
#    the suffix its type gets (_total for counters, _bucket for histograms).
# 5. tests/e2e/prometheus.py's self-test: the real Prometheus server (built without the web UI's
#    assets) scrapes a loopback fixture, and its HTTP API answers.
#
# Prometheus and promtool come from tests/setup-prometheus.sh (built once from the Go module
# proxy, cached). Ends with "N passed, N failed"; exits non-zero if anything failed.
# In the test command it runs beside the one-node suite, at nice 19 (tests/run-all.sh: it only
# slowed the Kubernetes suite, whose minutes are CPU-bound; the one-node suite leaves CPU idle).
# run-all: after 50-kubernetes
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
chart=charts/switchboard
rules=$chart/files/prometheus-rules.yaml
dashboard=$chart/files/dashboard.json
unit=tests/prometheus/rules-test.yaml

source "$(dirname "${BASH_SOURCE[0]}")/../check-helpers.bash"

prom_bin="$(tests/setup-prometheus.sh)" || { bad "tests/setup-prometheus.sh"; echo "$passed passed, $failed failed"; exit 1; }
promtool="$prom_bin/promtool"
echo "# $("$promtool" --version 2>&1 | head -1)"
venv="${SWITCHBOARD_VENV:-$(tests/setup-python.sh)}"
py="$venv/bin/python"
[[ -x "$py" ]] || { bad "no Python venv at $venv (tests/setup-python.sh)"; echo "$passed passed, $failed failed"; exit 1; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/switchboard-rules.XXXXXX")
trap 'rm -rf "$dir"' EXIT

# ---- 1. check and unit-test the rules ---------------------------------------------------------
check "promtool check rules $rules" "$promtool" check rules "$rules"
check "promtool test rules $unit" "$promtool" test rules "$unit"
alerts_where() { # python condition on r: the names of the alerts it holds for
  "$py" -c 'import sys, yaml; print("\n".join(r["alert"] for g in yaml.safe_load(open(sys.argv[1]))["groups"] for r in g["rules"] if "alert" in r and eval(sys.argv[2])))' "$rules" "$1"
}
alerts=$(alerts_where True)
tested=$(sed -n 's/^ *alertname: *//p' "$unit" | sort -u)
check "every alert has a unit test ($(wc -l <<<"$alerts") alerts)" \
  bash -c '[[ -z "$(comm -23 <(sort -u <<<"$1") <(echo "$2"))" ]] || { echo "untested: $(comm -23 <(sort -u <<<"$1") <(echo "$2"))"; exit 1; }' _ "$alerts" "$tested"
check "every alert has severity, summary and description" "$py" -c '
import sys, yaml
bad = [r["alert"] for g in yaml.safe_load(open(sys.argv[1]))["groups"] for r in g["rules"] if "alert" in r
       and not (r.get("labels", {}).get("severity") in ("critical", "warning", "info")
                and r.get("annotations", {}).get("summary") and r.get("annotations", {}).get("description"))]
sys.exit(f"incomplete: {bad}" if bad else 0)' "$rules"

# ---- 2. the unit tests can fail ---------------------------------------------------------------
# sabotaged NAME 'python statement on r (the alert rule dict)': a copy of the rules with that
# alert changed, and a copy of the unit tests pointing at it; prints the unit-test file.
sabotaged() {
  local name=$1 change=$2 out="$dir/$1-$RANDOM"
  mkdir -p "$out"
  "$py" - "$rules" "$out/rules.yaml" "$name" "$change" <<'EOF' || return 1
import sys, yaml
src, dst, name, change = sys.argv[1:]
doc = yaml.safe_load(open(src))
hits = [r for g in doc["groups"] for r in g["rules"] if r.get("alert") == name]
assert len(hits) == 1, f"no alert {name}"
r = hits[0]
before = dict(r)
exec(change)
assert change == "pass" or r != before, f"the sabotage {change!r} changed nothing"
yaml.safe_dump(doc, open(dst, "w"), sort_keys=False)
EOF
  sed 's#^  - .*prometheus-rules.yaml$#  - rules.yaml#' "$unit" >"$out/test.yaml"
  grep -q '^  - rules.yaml$' "$out/test.yaml" || { echo "rule_files not rewritten in $out/test.yaml"; return 1; }
  echo "$out/test.yaml"
}
sabotage() { # name change description
  local test
  test=$(sabotaged "$1" "$2") || { bad "sabotage $1 ($3): could not make the copy" "$test"; return; }
  check_fails "the unit tests catch $1 $3" "alertname: $1" "$promtool" test rules "$test"
}
# Control: the copies themselves (rules re-dumped, rule_files rewritten) pass unchanged.
control=$(sabotaged SwitchboardOperatorNoLeader pass) && check "control: an unchanged copy of the rules passes the unit tests" \
  "$promtool" test rules "$control" || bad "control: could not make the copy"
while read -r alert; do
  sabotage "$alert" 'r["expr"] = "vector(1) < 0"' "never firing"
done <<<"$alerts"
# Without its `for`, an alert fires in the "not for long enough yet" case of its test.
while read -r alert; do
  sabotage "$alert" 'r.pop("for")' "firing without its 'for'"
done <<<"$(alerts_where '"for" in r')"
# Thresholds moved, each way.
sabotage SwitchboardUpstreamErrorRate 'r["expr"] = r["expr"].replace(") > 0.05", ") > 0.5")' "with its threshold at 50%"
sabotage SwitchboardUpstreamErrorRate 'r["expr"] = r["expr"].replace(") > 0.05", ") > 0.005")' "with its threshold at 0.5%"
sabotage SwitchboardUpstreamErrorRate 'r["expr"] = r["expr"].replace("[5m])) > 0.05", "[5m])) > 0")' "without its traffic floor"
sabotage SwitchboardGatewayShedding 'r["expr"] = r["expr"].replace("> 0.01", "> 0.001")' "with its threshold at 0.1%"
sabotage SwitchboardOperatorNoLeader 'r["expr"] = r["expr"].replace("< 1", "< 2")' "counting a standby as no leader"
sabotage SwitchboardGatewaySnapshotBehind 'r["expr"] = r["expr"].replace("on (namespace)", "on ()").replace("max by (namespace) (", "max (")' "matching across releases"
sabotage SwitchboardAuditRecordsDropped 'r["expr"] = r["expr"].replace("> 0", ">= 0")' "firing on no drop"
sabotage SwitchboardOperatorCACertificateExpiring 'r["expr"] = r["expr"].replace("30 * 86400", "120 * 86400")' "at 120 days"
sabotage SwitchboardOperatorServingCertificateExpiring 'r["expr"] = r["expr"].replace("{certificate=\"delivery_serving\"}", "")' "for the CA too"

# ---- 3. what the chart renders ----------------------------------------------------------------
tests/k8s/build-binaries.sh >&2   # helm (instant when cached; 40-helm-chart builds it first)
export PATH="$(tests/k8s/build-binaries.sh --bin-dir):$PATH"
helm template sb "$chart" -n sb --set monitoring.prometheusRule.enabled=true \
  --api-versions monitoring.coreos.com/v1/PrometheusRule -s templates/prometheusrule.yaml >"$dir/prometheusrule.yaml"
check "the PrometheusRule's groups are exactly the file's" "$py" -c '
import sys, yaml
rendered = yaml.safe_load(open(sys.argv[1]))
assert rendered["kind"] == "PrometheusRule", rendered["kind"]
want = yaml.safe_load(open(sys.argv[2]))["groups"]
assert rendered["spec"]["groups"] == want, "the rendered groups differ from the file"
yaml.safe_dump({"groups": rendered["spec"]["groups"]}, open(sys.argv[3], "w"))' \
  "$dir/prometheusrule.yaml" "$rules" "$dir/rendered-rules.yaml"
check "promtool check rules: the rendered PrometheusRule's groups" "$promtool" check rules "$dir/rendered-rules.yaml"
helm template sb "$chart" -n sb --set monitoring.prometheusRule.enabled=true --set monitoring.prometheusRule.additionalRuleLabels.team=platform \
  --set 'monitoring.prometheusRule.disabledAlerts={SwitchboardOperatorAbsent}' \
  --api-versions monitoring.coreos.com/v1/PrometheusRule -s templates/prometheusrule.yaml >"$dir/prometheusrule-custom.yaml"
check "additionalRuleLabels on every alert, disabledAlerts left out, the rest unchanged" "$py" -c '
import sys, yaml
groups = yaml.safe_load(open(sys.argv[1]))["spec"]["groups"]
want = yaml.safe_load(open(sys.argv[2]))["groups"]
got = {r["alert"]: r for g in groups for r in g["rules"]}
orig = {r["alert"]: r for g in want for r in g["rules"]}
assert set(got) == set(orig) - {"SwitchboardOperatorAbsent"}, set(orig) ^ set(got)
for name, r in got.items():
    assert r["labels"] == {**orig[name]["labels"], "team": "platform"}, (name, r["labels"])
    assert {k: v for k, v in r.items() if k != "labels"} == {k: v for k, v in orig[name].items() if k != "labels"}, name' \
  "$dir/prometheusrule-custom.yaml" "$rules"
helm template sb "$chart" -n sb --set monitoring.dashboard.enabled=true -s templates/dashboard-configmap.yaml >"$dir/dashboard-cm.yaml"
check "the dashboard ConfigMap holds exactly files/dashboard.json" "$py" -c '
import json, sys, yaml
cm = yaml.safe_load(open(sys.argv[1]))
assert cm["kind"] == "ConfigMap" and cm["metadata"]["labels"]["grafana_dashboard"] == "1", cm["metadata"]
assert json.loads(cm["data"]["switchboard.json"]) == json.load(open(sys.argv[2]))' "$dir/dashboard-cm.yaml" "$dashboard"

# ---- 4. the dashboard's queries and the metric names ------------------------------------------
check "the dashboard is JSON with a uid, panels and a datasource variable" "$py" -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["uid"] and d["panels"], "no uid or panels"
assert any(v["type"] == "datasource" for v in d["templating"]["list"]), "no datasource variable"
ids = [p["id"] for p in d["panels"]]
assert len(ids) == len(set(ids)), "duplicate panel ids"' "$dashboard"
"$py" tests/e2e/prometheus.py dashboard-rules "$dashboard" >"$dir/dashboard-rules.yaml"
check "every dashboard query is valid PromQL (promtool check rules, as recording rules)" "$promtool" check rules "$dir/dashboard-rules.yaml"
check "the metric names of the rules and the dashboard are registered by gateway/operator sources, suffixed by type" \
  "$py" tests/e2e/prometheus.py unregistered "$rules" "$dashboard"
names=$("$py" tests/e2e/prometheus.py names "$rules" "$dashboard")
check "the dashboard shows the new usage metrics (tenant requests, request duration, tenant tokens)" bash -c '
  for n in switchboard_gateway_tenant_requests_total switchboard_gateway_request_duration_seconds_bucket switchboard_gateway_tenant_llm_tokens_total; do
    grep -qx "$n" <<<"$1" || { echo "missing: $n"; exit 1; }; done' _ "$names"

# ---- 5. the real server ------------------------------------------------------------------------
selftest() {
  local out
  out=$(SWITCHBOARD_PROMETHEUS_BIN="$prom_bin" timeout 180 "$py" tests/e2e/prometheus.py self-test 2>&1) || { echo "$out"; return 1; }
  echo "$out" | sed 's/^/  /' >&2
}
check "tests/e2e/prometheus.py self-test: a real Prometheus scrapes a loopback fixture; the HTTP API answers" selftest

echo "$passed passed, $failed failed"
((failed == 0))
