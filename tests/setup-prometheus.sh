#!/usr/bin/env bash
# Builds (or reuses) Prometheus and promtool from the Go module proxy, and prints the directory
# holding both binaries.
#
#   tests/setup-prometheus.sh   -> /root/.cache/switchboard/tools/prometheus-0.316.0
#
# What it builds, into ${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/tools/prometheus-<ver>/, once:
# `github.com/prometheus/prometheus/cmd/prometheus` and `.../cmd/promtool` at module version
# v<ver> (Prometheus's Go module is tagged v0.3MM.P for Prometheus 3.MM.P, so v0.316.0 is
# Prometheus 3.16.0). When both are present and report the pinned version, it exits at once.
#
# - Without `-tags builtinassets`: the web UI's compiled assets come from npm and are not part of
#   the Go module, so the UI pages are absent; the HTTP API (/api/v1/*), /metrics and the
#   /-/ready, /-/healthy endpoints are all there, which is all the tests use.
# - With `-tags remove_all_sd`: only the file and http service discoveries (plus static_configs)
#   are compiled in, not the cloud SDKs (AWS, Azure, GCE, Kubernetes, ...); the tests only scrape
#   static loopback targets, and this roughly halves the cold build.
# - Go state (GOPATH, GOMODCACHE, GOCACHE) is shared with tests/k8s/build-binaries.sh, in
#   ${SWITCHBOARD_CACHE}/k8s/go: the two builds have many modules in common (client-go,
#   apimachinery, grpc, OpenTelemetry), and the Go caches are safe for concurrent use.
#
# Only the Go module proxy is needed. Everything except the final path goes to stderr.
set -euo pipefail

# ---- pinned version ----------------------------------------------------------
PROMETHEUS_MODULE_VERSION="${SWITCHBOARD_PROMETHEUS_VERSION:-0.316.0}"   # = Prometheus 3.16.0
# ------------------------------------------------------------------------------

cache="${SWITCHBOARD_CACHE:-${HOME:?set HOME or SWITCHBOARD_CACHE}/.cache/switchboard}"
dir="$cache/tools/prometheus-$PROMETHEUS_MODULE_VERSION"
go_state="$cache/k8s/go"
minor="${PROMETHEUS_MODULE_VERSION#0.}"   # 316.0
# Prometheus's own version: 3.16.0 for module 0.316.0.
prom_version="${minor:0:1}.$((10#${minor:1:2})).${minor#*.}"

log() { echo "[setup-prometheus $(date +%H:%M:%S)] $*" >&2; }
die() { echo "setup-prometheus.sh: ERROR: $*" >&2; exit 1; }

healthy() { # both binaries present and reporting the pinned version
  local b out
  for b in prometheus promtool; do
    [[ -x "$dir/$b" ]] || return 1
    out=$("$dir/$b" --version 2>&1) || return 1
    [[ "$out" == *"version $prom_version "* ]] || return 1
  done
}

if healthy; then echo "$dir"; exit 0; fi

command -v go >/dev/null || die "go not found on PATH (need Go >= 1.26: Prometheus $prom_version's go.mod says so)"
mkdir -p "$dir" "$go_state"

# One builder at a time (parallel test jobs would otherwise race on the same output).
# shellcheck source=tests/build-lock.bash
source "$(dirname "${BASH_SOURCE[0]}")/build-lock.bash"
build_lock "$cache/tools/.prometheus-build.lock" "Prometheus $prom_version"
if healthy; then echo "$dir"; exit 0; fi

export GOPATH="$go_state/path"
export GOMODCACHE="$GOPATH/pkg/mod"
export GOCACHE="$go_state/build-cache"
export GOTOOLCHAIN=local          # never try to download a toolchain
export GOFLAGS="-buildvcs=false -gcflags=all=-dwarf=false"   # the link strips it (-w); see build-binaries.sh
export CGO_ENABLED=0              # upstream's release binaries are static too (netgo)
export GO111MODULE=on
export GOWORK=off
NICE=(nice -n "${SWITCHBOARD_BUILD_NICE:-10}")

log "go: $(go version)"
log "building Prometheus $prom_version (github.com/prometheus/prometheus@v$PROMETHEUS_MODULE_VERSION) into $dir"
t0=$SECONDS

module="github.com/prometheus/prometheus"
info=$(go mod download -json "$module@v$PROMETHEUS_MODULE_VERSION" 2>&1) \
  || die "go mod download $module@v$PROMETHEUS_MODULE_VERSION failed (is the Go module proxy reachable and does it have this version? try: go list -m -versions $module): $info"
revision=$(sed -n 's/^[[:space:]]*"Hash": *"\([^"]*\)".*/\1/p' <<<"$info" | head -n1)
build_date=$(date -u +%Y%m%d-%H:%M:%S)

ld="-s -w"
ld+=" -X github.com/prometheus/common/version.Version=$prom_version"
ld+=" -X github.com/prometheus/common/version.Revision=${revision:-v$PROMETHEUS_MODULE_VERSION}"
ld+=" -X github.com/prometheus/common/version.Branch=HEAD"
ld+=" -X github.com/prometheus/common/version.BuildUser=switchboard-tests"
ld+=" -X github.com/prometheus/common/version.BuildDate=$build_date"

tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
GOBIN="$tmp" "${NICE[@]}" go install -trimpath -tags remove_all_sd -ldflags "$ld" \
    "$module/cmd/prometheus@v$PROMETHEUS_MODULE_VERSION" \
    "$module/cmd/promtool@v$PROMETHEUS_MODULE_VERSION" \
  || die "go install $module/cmd/{prometheus,promtool}@v$PROMETHEUS_MODULE_VERSION failed"
mv -f "$tmp/prometheus" "$dir/prometheus"
mv -f "$tmp/promtool" "$dir/promtool"

healthy || die "built, but the binaries do not report version $prom_version: $("$dir/promtool" --version 2>&1 | head -2)"
log "built prometheus and promtool in $((SECONDS - t0))s ($(du -h "$dir/prometheus" | cut -f1), $(du -h "$dir/promtool" | cut -f1))"
echo "$dir"
