#!/usr/bin/env bash
# The one-node cluster suite (issue 10): a real node (tests/node/node.sh: kubelet, containerd +
# runc, kube-proxy, CoreDNS, bridge CNI, control plane) in private namespaces; Switchboard's images
# built (tests/images/build.sh) and imported into the node's containerd under the chart's names;
# `helm install`; client pods calling the gateway by its Service name with a key and with their
# ServiceAccount token; a call loop through the deletion of the gateway pod holding its
# connection (and of one not holding it), a rolling `helm upgrade` and the operator leader's
# deletion; a person connecting their own account (the chart's demo Redis, Keycloak and a
# browser in the node's network) that outlives the gateway pods; resource figures; then the
# node is stopped and checked to have left nothing behind.
#
#   tests/run-all.sh 60-node             (or: bash tests/suites.d/60-node.sh)
#   PYTEST_ARGS="-k disruption -x" tests/run-all.sh 60-node
#   SWITCHBOARD_NODE_KEEP=1 ...          leave the node running afterwards (stop it with
#                                        tests/node/node.sh stop DIR; DIR is printed)
#
# Ends with "N passed, N failed"; exits non-zero if anything failed (missing tools are installed
# by the scripts, or fail with directions; nothing is skipped).
# run-all: chain clusters
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
fail() { echo "60-node: $*" >&2; echo "0 passed, 1 failed"; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "the node needs root (namespaces, cgroups, mounts); run as root"
tests/node/setup-tools.sh >/dev/null || fail "tests/node/setup-tools.sh failed"
tests/images/setup-tools.sh >/dev/null || fail "tests/images/setup-tools.sh failed"
t0=$(date +%s)
tests/k8s/build-binaries.sh --node >&2 || fail "tests/k8s/build-binaries.sh --node failed"
bin="$(tests/k8s/build-binaries.sh --bin-dir)"
mapfile -t test_images < <(tests/node/test-images.sh) || fail "tests/node/test-images.sh failed"
# Real stdio servers (npm, PyPI) on a Debian root filesystem, for McpServer spec.run.
mapfile -t stdio_images < <(tests/node/stdio-images.sh) || fail "tests/node/stdio-images.sh failed"
# (node.sh asks for it too; here, so that on a cold machine waiting for its build in the
# background counts as getting the tools ready, not as starting the node)
tests/setup-go-tool.sh kube-router >/dev/null || fail "tests/setup-go-tool.sh kube-router failed"
archives="$(tests/images/suite-images.sh --archives)"
tests/images/suite-images.sh >&2 || fail "tests/images/suite-images.sh failed"
echo "60-node: binaries and images ready in $(( $(date +%s) - t0 ))s" >&2

venv="${SWITCHBOARD_VENV:-$(tests/setup-python.sh)}"
[[ -x "$venv/bin/python" ]] || fail "no Python venv at $venv (tests/setup-python.sh)"
# A person connecting an account from a browser in the node's network (test_node_9_accounts.py):
# Keycloak and Debian's chromium, fetched here, outside the node, which reaches nothing outside.
tests/setup-keycloak.sh >/dev/null || fail "tests/setup-keycloak.sh failed"
tests/install-packages.sh chromium=chromium chromedriver=chromium-driver >/dev/null ||
  fail "installing chromium and chromium-driver failed"

dir=$(mktemp -d "${TMPDIR:-/tmp}/switchboard-node.XXXXXX")
stop_node() {
  if [[ "${SWITCHBOARD_NODE_KEEP:-}" == 1 ]]; then
    echo "60-node: node left running in $dir (stop: tests/node/node.sh stop $dir)" >&2
    return 0
  fi
  tests/node/node.sh stop "$dir" || return 1
  rmdir "$dir" 2>/dev/null || true   # kept logs (SWITCHBOARD_NODE_KEEP_LOGS=1) stay
}
trap 'stop_node || true' EXIT
t0=$(date +%s)
tests/node/node.sh start "$dir" ||
  fail "the node did not start (the failing part's log is above; SWITCHBOARD_NODE_KEEP=1 keeps the node's logs in $dir/logs)"
started=$(( $(date +%s) - t0 ))
t0=$(date +%s)
# What the first modules run (the chart's images, the caller) before the tests; the large images
# only later modules run (the stdio servers' for test_node_7, Redis for test_node_9: 330 of the
# 390 MB) while the first modules run, which mostly wait on pods. Those modules wait for the
# marker file (node.py, later_images_imported): `ok` or `failed`, the import's log beside it.
tests/node/node.sh import "$dir" "${test_images[1]}" "$archives"/switchboard-{gateway,operator,example-upstream}.tar \
  >/dev/null || fail "importing the images failed"
echo "60-node: node started in ${started}s; the first modules' images imported in $(( $(date +%s) - t0 ))s" >&2
later=$(mktemp -d "${TMPDIR:-/tmp}/switchboard-node-later.XXXXXX")
(
  t1=$(date +%s)
  if tests/node/node.sh import "$dir" "${test_images[2]}" "${stdio_images[@]}" >"$later/images.log" 2>&1; then
    echo "60-node: the later modules' images imported in $(( $(date +%s) - t1 ))s (beside the first modules)" >>"$later/images.log"
    echo ok >"$later/images.tmp"
  else
    echo failed >"$later/images.tmp"
  fi
  mv "$later/images.tmp" "$later/images.done"
) &
later_pid=$!
# (before the node stops: an import still running is stopped, its files removed)
stop_later() {
  kill "$later_pid" 2>/dev/null || true
  wait "$later_pid" 2>/dev/null || true
  rm -rf "$later"
}
trap 'stop_later; stop_node || true' EXIT

report=$(mktemp "${TMPDIR:-/tmp}/switchboard-node-e2e.XXXXXX.xml")
rc=0
# shellcheck disable=SC2086 # PYTEST_ARGS is a list of words on purpose
tests/node/node.sh exec "$dir" env KUBECONFIG="$dir/control-plane/kubeconfig" NODE_DIR="$dir" \
  NODE_LATER_IMAGES="$later/images.done" \
  PATH="$bin:$PATH" "$venv/bin/python" -m pytest tests/node_e2e -q --junitxml="$report" ${PYTEST_ARGS:-} || rc=$?
wait "$later_pid" || true
tail -n 1 "$later/images.log" >&2 || true

counts=$("$venv/bin/python" tests/junit_counts.py "$report" || true)
# Where the suite's time goes (the run's critical path is usually this suite).
echo "time per module:"
"$venv/bin/python" tests/junit_counts.py --modules "$report" || true
rm -f "$report"
read -r passed failed <<<"${counts:-0 0}"

# Acceptance 5: stopping checks that no process, mount, cgroup, network namespace or iptables rule
# the node made is left; a leftover fails the suite.
trap - EXIT
stop_later
if [[ "${SWITCHBOARD_NODE_KEEP:-}" == 1 ]]; then
  stop_node
elif stop_node; then
  passed=$((passed + 1))
  echo "60-node: node stopped; nothing left behind (checked)"
else
  failed=$((failed + 1)); rc=1
fi
if ((rc != 0 && failed == 0)); then failed=1; fi
echo "$passed passed, $failed failed"
exit $rc
