#!/usr/bin/env bash
# Downloads (or reuses) the Gateway API module from the Go module proxy and prints the folder of
# its standard-channel CRDs, so the chart suite can check the chart's HTTPRoute against the real
# schema (kubectl apply --dry-run=server). Nothing is built. Go state is shared with
# tests/k8s/build-binaries.sh in ${SWITCHBOARD_CACHE}/k8s/go.
set -euo pipefail
GATEWAY_API_VERSION="${SWITCHBOARD_GATEWAY_API_VERSION:-1.4.1}"
cache="${SWITCHBOARD_CACHE:-${HOME:?set HOME or SWITCHBOARD_CACHE}/.cache/switchboard}"
go_state="$cache/k8s/go"
export GOPATH="$go_state/path" GOMODCACHE="$go_state/path/pkg/mod" GOFLAGS=-mod=mod GOTOOLCHAIN=local
dir="$GOMODCACHE/sigs.k8s.io/gateway-api@v$GATEWAY_API_VERSION/config/crd/standard"
if [[ ! -f "$dir/gateway.networking.k8s.io_httproutes.yaml" ]]; then
  command -v go >/dev/null 2>&1 || { echo "gateway-api-crds.sh: go not found (the Go module proxy must be reachable)" >&2; exit 1; }
  go mod download "sigs.k8s.io/gateway-api@v$GATEWAY_API_VERSION" >&2 ||
    { echo "gateway-api-crds.sh: go mod download sigs.k8s.io/gateway-api@v$GATEWAY_API_VERSION failed" >&2; exit 1; }
fi
[[ -f "$dir/gateway.networking.k8s.io_httproutes.yaml" ]] || { echo "gateway-api-crds.sh: no HTTPRoute CRD in $dir" >&2; exit 1; }
echo "$dir"
