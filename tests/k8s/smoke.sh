#!/usr/bin/env bash
# Smoke test of the loopback control plane: builds (or reuses) the binaries,
# starts a cluster in a temp dir, exercises the APIs the operator and gateway
# rely on, and stops it. Exit status 0 means all checks passed.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

"$HERE/build-binaries.sh"
dir=$(mktemp -d "${TMPDIR:-/tmp}/switchboard-k8s-smoke.XXXXXX")
cleanup() { "$HERE/cluster.sh" stop "$dir" || true; rmdir "$dir" 2>/dev/null || true; }
trap cleanup EXIT

"$HERE/cluster.sh" start "$dir"
eval "$("$HERE/cluster.sh" env "$dir")"

passed=0 failed=0
check() { # name cmd...
  local name=$1; shift
  if out=$("$@" 2>&1); then
    passed=$((passed + 1)); echo "ok   - $name"
  else
    failed=$((failed + 1)); echo "FAIL - $name"; echo "$out" | sed 's/^/       /'
  fi
}

check "kubectl get ns"             kubectl get ns
check "server = client version"    bash -c 'kubectl version | awk "/^Client Version/{c=\$3} /^Server Version/{s=\$3} END{exit !(c != \"\" && c == s)}"'
check "create serviceaccount"      kubectl create serviceaccount smoke
check "TokenRequest + TokenReview" bash -c '
  tok=$(kubectl create token smoke --duration=10m)
  printf "%s\n" "apiVersion: authentication.k8s.io/v1" "kind: TokenReview" "spec:" "  token: $tok" \
    | kubectl create -f - -o jsonpath="{.status.authenticated} {.status.user.username}" \
    | grep -qx "true system:serviceaccount:default:smoke"'
check "create secret"              kubectl create secret generic smoke --from-literal=k=v
check "create deployment"          kubectl create deployment smoke --image=registry.invalid/none:1
check "create pod"                 kubectl run smoke --image=registry.invalid/none:1 --restart=Never
check "RBAC denies a bare SA"      bash -c '[ "$(kubectl auth can-i list secrets --as=system:serviceaccount:default:smoke)" = no ]'
check "CRD becomes Established"    bash -c '
  kubectl apply -f - <<EOF
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.smoke.switchboard.test}
spec:
  group: smoke.switchboard.test
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
EOF
  kubectl wait --for=condition=Established --timeout=30s crd/widgets.smoke.switchboard.test &&
  printf "%s\n" "apiVersion: smoke.switchboard.test/v1" "kind: Widget" "metadata: {name: w}" | kubectl create -f - &&
  kubectl get widgets w'
check "helm version"               helm version --short
check "helm install (no workloads)" bash -c '
  c=$(mktemp -d); mkdir -p "$c/chart/templates"
  printf "apiVersion: v2\nname: smoke\nversion: 0.1.0\n" >"$c/chart/Chart.yaml"
  printf "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: smoke-cm}\ndata: {k: v}\n" >"$c/chart/templates/cm.yaml"
  helm install smoke "$c/chart" --wait --timeout 30s && kubectl get configmap smoke-cm; rc=$?; rm -rf "$c"; exit $rc'

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
