#!/usr/bin/env bash
# The Kubernetes end-to-end suite (issue 5, acceptance 2-8): a real kube-apiserver + etcd on
# loopback per test module (tests/k8s/cluster.sh), the CRDs, the operator and two gateway
# replicas as local processes, the Rust example upstream; everything driven with kubectl.
# It runs against the newest API server the chart claims (the pinned one,
# tests/k8s/build-binaries.sh), and the modules that exercise the API server itself (OLDEST below)
# once more against the oldest (OLDEST_K8S_VERSION there, the chart's kubeVersion floor).
#
#   tests/run-all.sh 50-kubernetes        (or: bash tests/suites.d/50-kubernetes.sh)
#   PYTEST_ARGS="-k failover -x" tests/run-all.sh 50-kubernetes
#   SWITCHBOARD_K8S_PASSES=newest tests/run-all.sh 50-kubernetes   (one pass: newest or oldest)
#
# Tests: tests/k8s_e2e/ (pytest). Propagation figures: tests/k8s_e2e/results/propagation-<pass>.json
# (standalone: tests/k8s_e2e/propagation.py). Ends with "N passed, N failed"; exits non-zero if
# anything failed (missing binaries fail, they never skip).
# In the test command it runs beside 60-node at a lower priority, taking what the node suite
# leaves idle (see tests/run-all.sh).
# run-all: nice 10
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
# shellcheck source=tests/build-env.bash
source tests/build-env.bash

fail() { echo "50-kubernetes: $*" >&2; echo "0 passed, 1 failed"; exit 1; }

# Kubernetes binaries (built once from Go modules, cached; instant when present).
tests/k8s/build-binaries.sh >&2 || fail "tests/k8s/build-binaries.sh failed"
# gopher-lua's glua, for the Argo CD health checks (test_argocd_health.py).
SWITCHBOARD_GLUA=$(tests/setup-go-tool.sh glua) || fail "tests/setup-go-tool.sh glua failed"
export SWITCHBOARD_GLUA
passes=${SWITCHBOARD_K8S_PASSES:-newest oldest}
# What can differ between API server versions is the API server's own behaviour: CRD schemas and
# their CEL rules, status subresources and server-side apply, TokenReview and projected tokens,
# RBAC and label-selected watches, discovery, the workload objects of spec.run. Those modules run
# against the oldest too; the ones about the gateway's and operator's own behaviour (failover,
# chaos, model routes, TLS, traces, identity providers, settings, virtual servers, Argo CD
# health) would only repeat themselves there. SWITCHBOARD_K8S_OLDEST_ALL=1 runs every module.
OLDEST=(test_cluster_api test_status_truth test_workload_identity test_tenancy test_missing_crd
        test_secret_selector test_run_servers)
# Modules side by side in each pass (pytest-xdist, one module per worker at a time: each has its
# own API server on its own reserved ports, and most of a module is waiting on it).
workers=${SWITCHBOARD_K8S_WORKERS:-2}

# The workspace's debug binaries (tests/run-all.sh builds them before the suites).
for b in switchboard-operator switchboard-gateway switchboard-example-upstream switchboard-scripted-provider; do
  [[ -x "$SWITCHBOARD_BIN_DIR/$b" ]] ||
    fail "$SWITCHBOARD_BIN_DIR/$b is missing: run \`tests/run-all.sh build\` (tests/build-env.bash names the directory)"
done

venv="${SWITCHBOARD_VENV:-$(tests/setup-python.sh)}"
[[ -x "$venv/bin/python" ]] || fail "no Python venv at $venv (tests/setup-python.sh)"

rc=0
started=$(date +%s)
passed=0
failed=0
summary=""
work=$(mktemp -d "${TMPDIR:-/tmp}/switchboard-k8s-e2e.XXXXXX")
trap 'rm -rf "$work"' EXIT
run_pass() { # PASS: pytest against that API server; output in $work/PASS.log, counts in $work/PASS.result
  local pass=$1 bin version prc=0 counts t0=$SECONDS waited=""
  case "$pass" in
    newest) bin=$(tests/k8s/build-binaries.sh --bin-dir) ;;
    oldest)
      # Built here, not before both passes: on a cold machine the test command is still building
      # it in the background when the suites start (tests/run-all.sh), and the newest pass need
      # not wait for it (build-binaries.sh's lock makes this wait for that build, not repeat it).
      if ! tests/k8s/build-binaries.sh --oldest >"$work/$pass.build" 2>&1; then
        { echo "=== 50-kubernetes: $pass API server: tests/k8s/build-binaries.sh --oldest failed:"
          tail -n 40 "$work/$pass.build"; } >"$work/$pass.log"
        echo "0 1 1 (not built)" >"$work/$pass.result"
        return
      fi
      ((SECONDS - t0 < 2)) || waited=" (its binaries ready after $((SECONDS - t0))s)"
      bin=$(tests/k8s/build-binaries.sh --oldest-bin-dir) ;;
  esac
  version=$("$bin/kube-apiserver" --version)
  local targets=(tests/k8s_e2e)
  if [[ "$pass" == oldest && "${SWITCHBOARD_K8S_OLDEST_ALL:-0}" != 1 ]]; then
    targets=()
    local m; for m in "${OLDEST[@]}"; do targets+=("tests/k8s_e2e/$m.py"); done
  fi
  {
    echo "=== 50-kubernetes: $pass API server ($version, $bin)$waited: ${targets[*]}"
    # shellcheck disable=SC2086 # PYTEST_ARGS is a list of words on purpose
    SWITCHBOARD_K8S_BIN="$bin" SWITCHBOARD_K8S_PASS="$pass" "$venv/bin/python" -m pytest "${targets[@]}" -q -p no:cacheprovider \
      -n "$workers" --dist loadfile --junitxml="$work/$pass.xml" ${PYTEST_ARGS:-} || prc=$?
    echo "time per module ($pass API server, $workers side by side):"
    "$venv/bin/python" tests/junit_counts.py --modules "$work/$pass.xml" || true
  } >"$work/$pass.log" 2>&1
  # "N passed, N failed" from the JUnit report (errors and failures both count as failed).
  counts=$("$venv/bin/python" tests/junit_counts.py "$work/$pass.xml" 2>/dev/null || true)
  echo "${counts:-0 0} $prc $version" >"$work/$pass.result"
}
for pass in $passes; do
  [[ "$pass" == newest || "$pass" == oldest ]] || fail "SWITCHBOARD_K8S_PASSES: unknown pass '$pass' (newest, oldest)"
done
# The passes run side by side by default (SWITCHBOARD_K8S_PARALLEL=0: one after the other): each
# test module has its own API server on its own ports, and most of a test is waiting on one.
if [[ "${SWITCHBOARD_K8S_PARALLEL:-1}" == 1 ]]; then
  pids=()
  for pass in $passes; do run_pass "$pass" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid"; done
else
  for pass in $passes; do run_pass "$pass"; done
fi
for pass in $passes; do
  cat "$work/$pass.log"
  read -r p f prc version <"$work/$pass.result"
  if ((prc != 0 && f == 0)); then f=1; fi  # pytest failed before/outside any test
  if ((prc != 0)); then rc=$prc; fi
  passed=$((passed + p))
  failed=$((failed + f))
  summary+="  $pass ($version): $p passed, $f failed"$'\n'
done
printf 'per API server:\n%s' "$summary"

# The propagation figures of this run (acceptance 4), one file per pass, if the test wrote them.
# With the passes side by side, each was timed while the other pass shared the CPUs.
for pass in $passes; do
  results=tests/k8s_e2e/results/propagation-$pass.json
  [[ -f "$results" ]] && (($(stat -c %Y "$results") >= started)) || continue
  "$venv/bin/python" - "$results" "$pass" <<'PY' || true
import json, sys
d = json.load(open(sys.argv[1]))
ms = lambda s: "n/a" if s is None else f"{s * 1000:.0f} ms"
print(f"propagation to {d['gateways']} gateways, {sys.argv[2]} API server ({sys.argv[1]}):")
print(f"  kubectl apply -> served: median {ms(d['median_s'])}, max {ms(d['max_s'])} over {d['runs']} runs "
      f"({d['propagated']} propagated; kubectl itself: median {ms(d['median_write_s'])})")
a = d.get("api")
if a:
    print(f"  API write     -> served: median {ms(a['median_s'])}, max {ms(a['max_s'])} over {a['runs']} runs "
          f"({a['propagated']} propagated)")
PY
done
echo "$passed passed, $failed failed"
exit $rc
