#!/usr/bin/env bash
# Builds (or reuses) actionlint from the Go module proxy and prints its path.
#
#   tests/setup-actionlint.sh   -> /root/.cache/switchboard/tools/actionlint-1.7.12/actionlint
#
# `go install github.com/rhysd/actionlint/cmd/actionlint@v<ver>` into
# ${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/tools/actionlint-<ver>/, once (Go state shared
# with tests/k8s/build-binaries.sh in ${SWITCHBOARD_CACHE}/k8s/go). Instant when present and
# reporting the pinned version. Everything except the final path goes to stderr.
set -euo pipefail

ACTIONLINT_VERSION="${SWITCHBOARD_ACTIONLINT_VERSION:-1.7.12}"
cache="${SWITCHBOARD_CACHE:-${HOME:?set HOME or SWITCHBOARD_CACHE}/.cache/switchboard}"
dir="$cache/tools/actionlint-$ACTIONLINT_VERSION"
go_state="$cache/k8s/go"

die() { echo "setup-actionlint.sh: ERROR: $*" >&2; exit 1; }

if [[ -x "$dir/actionlint" ]] && "$dir/actionlint" -version 2>/dev/null | grep -q "^$ACTIONLINT_VERSION\$"; then
  echo "$dir/actionlint"
  exit 0
fi
command -v go >/dev/null 2>&1 || die "go not found: install Go 1.23 or newer (the module proxy must be reachable)"
mkdir -p "$dir" "$go_state"
echo "setup-actionlint.sh: building actionlint v$ACTIONLINT_VERSION from the Go module proxy" >&2
GOPATH="$go_state/path" GOMODCACHE="$go_state/path/pkg/mod" GOCACHE="$go_state/build-cache" \
  GOFLAGS=-mod=mod GOBIN="$dir" CGO_ENABLED=0 \
  go install -ldflags "-s -w -X github.com/rhysd/actionlint.version=$ACTIONLINT_VERSION" \
  "github.com/rhysd/actionlint/cmd/actionlint@v$ACTIONLINT_VERSION" >&2 \
  || die "go install github.com/rhysd/actionlint/cmd/actionlint@v$ACTIONLINT_VERSION failed"
"$dir/actionlint" -version >&2 || die "the built actionlint does not run"
echo "$dir/actionlint"
