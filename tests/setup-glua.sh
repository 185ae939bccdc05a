#!/usr/bin/env bash
# Builds (or reuses) glua, the command-line interpreter of gopher-lua, the Lua that Argo CD runs
# resource health checks in, from the Go module proxy; prints its path.
#
#   tests/setup-glua.sh   -> /root/.cache/switchboard/tools/glua-1.1.1/glua
#
# Pinned to the gopher-lua version Argo CD builds with (its go.mod). Go state shared with
# tests/k8s/build-binaries.sh in ${SWITCHBOARD_CACHE}/k8s/go. Instant when present. Everything
# except the final path goes to stderr.
set -euo pipefail

GLUA_VERSION="${SWITCHBOARD_GLUA_VERSION:-1.1.1}"
cache="${SWITCHBOARD_CACHE:-${HOME:?set HOME or SWITCHBOARD_CACHE}/.cache/switchboard}"
dir="$cache/tools/glua-$GLUA_VERSION"
go_state="$cache/k8s/go"

die() { echo "setup-glua.sh: ERROR: $*" >&2; exit 1; }

if [[ -x "$dir/glua" ]] && echo 'print("ok")' | "$dir/glua" /dev/stdin 2>/dev/null | grep -qx ok; then
  echo "$dir/glua"
  exit 0
fi
command -v go >/dev/null 2>&1 || die "go not found: install Go 1.23 or newer (the module proxy must be reachable)"
mkdir -p "$dir" "$go_state"
echo "setup-glua.sh: building glua (gopher-lua v$GLUA_VERSION) from the Go module proxy" >&2
GOPATH="$go_state/path" GOMODCACHE="$go_state/path/pkg/mod" GOCACHE="$go_state/build-cache" \
  GOFLAGS=-mod=mod GOBIN="$dir" CGO_ENABLED=0 \
  go install -ldflags "-s -w" "github.com/yuin/gopher-lua/cmd/glua@v$GLUA_VERSION" >&2 \
  || die "go install github.com/yuin/gopher-lua/cmd/glua@v$GLUA_VERSION failed"
echo 'print("ok")' | "$dir/glua" /dev/stdin | grep -qx ok || die "the built glua does not run"
echo "$dir/glua"
