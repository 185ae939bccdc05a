#!/usr/bin/env bash
# Builds (or reuses) a test tool from the Go module proxy and prints its path.
#
#   tests/setup-go-tool.sh actionlint  -> .../tools/actionlint-1.7.12/actionlint  (the release
#                                         workflows' linter, suite 20-release)
#   tests/setup-go-tool.sh glua        -> .../tools/glua-1.1.1/glua  (gopher-lua's interpreter, at
#                                         the version Argo CD builds with: the Argo CD health
#                                         checks of charts/argocd, suite 50-kubernetes)
#   tests/setup-go-tool.sh kube-router -> .../tools/kube-router-2.1.0/kube-router  (its network
#                                         policy controller alone enforces NetworkPolicies on the
#                                         one-node cluster, suite 60-node; 2.1.0 is the one
#                                         version the module proxy serves; its reported flaw,
#                                         GHSA-phqm-jgc3-qf8g, is in the service proxy, which
#                                         the node does not run)
#
# `go install <package>@v<version>` into ${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/tools/
# <tool>-<version>/, once (Go state shared with tests/k8s/build-binaries.sh in
# ${SWITCHBOARD_CACHE}/k8s/go). Instant when present and working. Everything except the final
# path goes to stderr.
set -euo pipefail

die() { echo "setup-go-tool.sh: ERROR: $*" >&2; exit 1; }

tool="${1:-}"
case "$tool" in
  actionlint)
    version="${SWITCHBOARD_ACTIONLINT_VERSION:-1.7.12}"
    package=github.com/rhysd/actionlint/cmd/actionlint
    ldflags="-s -w -X github.com/rhysd/actionlint.version=$version"
    works() { "$1" -version 2>/dev/null | grep -q "^$version\$"; } ;;
  glua)
    version="${SWITCHBOARD_GLUA_VERSION:-1.1.1}"
    package=github.com/yuin/gopher-lua/cmd/glua
    ldflags="-s -w"
    works() { echo 'print("ok")' | "$1" /dev/stdin 2>/dev/null | grep -qx ok; } ;;
  kube-router)
    version="${SWITCHBOARD_KUBE_ROUTER_VERSION:-2.1.0}"
    package=github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
    ldflags="-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=v$version"
    works() { "$1" --version 2>&1 | grep -q "version v$version,"; } ;;
  *) die "usage: $0 actionlint|glua|kube-router" ;;
esac

cache="${SWITCHBOARD_CACHE:-${HOME:?set HOME or SWITCHBOARD_CACHE}/.cache/switchboard}"
dir="$cache/tools/$tool-$version"
go_state="$cache/k8s/go"
if [[ -x "$dir/$tool" ]] && works "$dir/$tool"; then
  echo "$dir/$tool"
  exit 0
fi
command -v go >/dev/null 2>&1 || die "go not found: install Go 1.23 or newer (the module proxy must be reachable)"
mkdir -p "$dir" "$go_state"
# shellcheck source=tests/build-lock.bash
source "$(dirname "${BASH_SOURCE[0]}")/build-lock.bash"
build_lock "$cache/tools/.$tool-$version.lock" "$tool v$version"
if [[ -x "$dir/$tool" ]] && works "$dir/$tool"; then
  echo "$dir/$tool"
  exit 0
fi
echo "setup-go-tool.sh: building $tool v$version from the Go module proxy" >&2
# (-dwarf=false: the link strips debug info, -s -w, so no package needs to generate it; see
# tests/k8s/build-binaries.sh)
GOPATH="$go_state/path" GOMODCACHE="$go_state/path/pkg/mod" GOCACHE="$go_state/build-cache" \
  GOFLAGS="-mod=mod -gcflags=all=-dwarf=false" GOBIN="$dir" CGO_ENABLED=0 \
  go install -ldflags "$ldflags" "$package@v$version" >&2 \
  || die "go install $package@v$version failed"
works "$dir/$tool" || die "the built $tool does not run"
echo "$dir/$tool"
