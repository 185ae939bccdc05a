#!/usr/bin/env bash
# Build a real Kubernetes control plane (kube-apiserver, kubectl, etcd) and
# helm from Go modules, cached outside the checkout; with --node also what a
# one-node cluster runs (tests/node/): kubelet, kube-controller-manager,
# kube-scheduler, kube-proxy, CoreDNS and the CNI plugins bridge, host-local,
# loopback and portmap.
#
#   tests/k8s/build-binaries.sh            build (or reuse) and print the bin dir last
#   tests/k8s/build-binaries.sh --node     the same, node components included
#   tests/k8s/build-binaries.sh --bin-dir  only print the bin dir (no build, no checks)
#   tests/k8s/build-binaries.sh --oldest   the oldest kube-apiserver the chart claims
#                                          (OLDEST_K8S_VERSION) in its own bin dir, with
#                                          this etcd, kubectl and helm linked beside it; prints
#                                          that dir (use it as SWITCHBOARD_K8S_BIN)
#   tests/k8s/build-binaries.sh --oldest-bin-dir   only print that dir
#
# Cache: ${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/k8s/v<K8S_VERSION>/bin
# Go state (GOPATH, GOMODCACHE, GOCACHE) lives in .../k8s/go so CI reuses it.
# When all four binaries are present and report the pinned versions, this
# exits at once. Only the Go module proxy is needed (no Docker, no kind).
set -euo pipefail

# ---- pinned versions (change together; see README.md) ----------------------
K8S_VERSION=1.35.8     # k8s.io/kubernetes v1.35.8, staging modules v0.35.8
ETCD_VERSION=3.6.6     # build/dependencies.yaml "etcd" of k8s v1.35.8
HELM_VERSION=3.20.2    # helm v3 built against client-go v0.35
COREDNS_VERSION=1.14.7 # cluster DNS for the one-node cluster (--node)
CNI_VERSION=1.9.1      # github.com/containernetworking/plugins (--node)
# The oldest API server the chart claims (charts/switchboard/Chart.yaml kubeVersion): the
# Kubernetes suite runs against it too (--oldest). Only kube-apiserver is built at this version;
# etcd 3.6 serves it (the etcd v3 API it uses is the same), kubectl and helm are the newest.
OLDEST_K8S_VERSION=1.31.14
# ----------------------------------------------------------------------------

K8S_MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
STAGING_VERSION="0.${K8S_VERSION#1.}"

CACHE_ROOT="${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/k8s"
VDIR="$CACHE_ROOT/v$K8S_VERSION"
BIN="$VDIR/bin"

CNI_BIN="$VDIR/cni/bin"       # where the kubelet's CNI looks for plugins
CORE=(kube-apiserver kubectl etcd helm)
NODE=(kubelet kube-controller-manager kube-scheduler kube-proxy coredns)
CNI_PLUGINS=(bridge host-local loopback portmap)
WANT=("${CORE[@]}")
NODE_WANTED=false
OLDEST=false
case "${1:-}" in
  --bin-dir) echo "$BIN"; exit 0 ;;
  --oldest-bin-dir) echo "$CACHE_ROOT/v$OLDEST_K8S_VERSION/bin"; exit 0 ;;
  --node) WANT+=("${NODE[@]}"); NODE_WANTED=true ;;
  --oldest)
    # The newest first: its etcd, kubectl and helm are linked into the oldest's bin dir.
    NEWEST_BIN=$("$0") || exit 1
    OLDEST=true
    K8S_VERSION=$OLDEST_K8S_VERSION
    K8S_MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
    STAGING_VERSION="0.${K8S_VERSION#1.}"
    VDIR="$CACHE_ROOT/v$K8S_VERSION"
    BIN="$VDIR/bin"
    WANT=(kube-apiserver)
    mkdir -p "$BIN"
    for b in etcd kubectl helm; do ln -sfn "$NEWEST_BIN/$b" "$BIN/$b"; done
    ;;
  "") ;;
  *) echo "usage: $0 [--node|--oldest|--bin-dir|--oldest-bin-dir]" >&2; exit 2 ;;
esac

log() { echo "[build-binaries $(date +%H:%M:%S)] $*"; }
die() { echo "[build-binaries] ERROR: $*" >&2; exit 1; }

# ---- fast path: everything cached and healthy ------------------------------
check_one() { # name -> 0 if $BIN/name exists and reports the pinned version
  local out
  [[ "$1" == cni || -x "$BIN/$1" ]] || return 1
  case "$1" in
    kube-apiserver|kubelet|kube-controller-manager|kube-scheduler|kube-proxy)
                    out=$("$BIN/$1" --version 2>&1) || return 1
                    [[ "$out" == "Kubernetes v$K8S_VERSION" ]] ;;
    coredns)        out=$("$BIN/$1" -version 2>&1) || return 1
                    [[ "$out" == *"CoreDNS-$COREDNS_VERSION"* ]] ;;
    cni)            local p; for p in "${CNI_PLUGINS[@]}"; do
                      out=$(env -u CNI_COMMAND "$CNI_BIN/$p" </dev/null 2>&1 || true)
                      [[ "$out" == *"v$CNI_VERSION"* ]] || return 1
                    done ;;
    kubectl)        out=$("$BIN/$1" version --client 2>&1) || return 1
                    [[ "$out" == *"Client Version: v$K8S_VERSION"* ]] ;;
    etcd)           out=$("$BIN/$1" --version 2>&1) || return 1
                    [[ "$out" == *"etcd Version: $ETCD_VERSION"* ]] ;;
    helm)           out=$("$BIN/$1" version --short 2>&1) || return 1
                    [[ "$out" == "v$HELM_VERSION"* ]] ;;
  esac
}
all_ok() {
  local b; for b in "${WANT[@]}"; do check_one "$b" || return 1; done
  ! $NODE_WANTED || check_one cni
}

if all_ok; then
  echo "$BIN"
  exit 0
fi

# ---- slow path -------------------------------------------------------------
command -v go >/dev/null || die "go not found on PATH (need Go >= 1.25)"
mkdir -p "$BIN" "$CACHE_ROOT/go"

# One builder at a time per cache (parallel test jobs would otherwise race).
# shellcheck source=tests/build-lock.bash
source "$(dirname "${BASH_SOURCE[0]}")/../build-lock.bash"
build_lock "$CACHE_ROOT/.build.lock" "Kubernetes binaries in $CACHE_ROOT"
if all_ok; then echo "$BIN"; exit 0; fi

export GOPATH="$CACHE_ROOT/go/path"
export GOMODCACHE="$GOPATH/pkg/mod"
export GOCACHE="$CACHE_ROOT/go/build-cache"
export GOTOOLCHAIN=local          # never try to download a toolchain
# -dwarf=false: the links strip debug info (-ldflags -w), so no package needs to generate it;
# skipping that takes about 6 % off a cold compile (measured on CoreDNS: 232 -> 217 CPU-s).
export GOFLAGS="-buildvcs=false -gcflags=all=-dwarf=false"
export CGO_ENABLED=0              # upstream builds these statically
export GO111MODULE=on
export GOWORK=off
NICE=(nice -n "${SWITCHBOARD_BUILD_NICE:-10}")

log "go: $(go version)"
log "Kubernetes v$K8S_VERSION, etcd v$ETCD_VERSION, helm v$HELM_VERSION"
log "cache: $VDIR (go state in $CACHE_ROOT/go)"
START=$(date +%s)

json_field() { # file field -> value of the first "field": "string" (indented or compact JSON)
  { grep -o "\"$2\": *\"[^\"]*\"" "$1" || true; } | head -n1 | sed 's/^[^:]*: *"\(.*\)"$/\1/'
}
mod_download() { # module@version outfile
  if ! go mod download -json "$1" >"$2" 2>&1; then
    cat "$2" >&2
    die "go mod download $1 failed (is the Go module proxy reachable and does it have this version?)"
  fi
  if grep -q '"Error"' "$2"; then cat "$2" >&2; die "go mod download $1 reported an error"; fi
}

# ---- kubernetes: kube-apiserver + kubectl ----------------------------------
build_kubernetes() {
  local src="$VDIR/src/kubernetes" info gomod dir commit date staging
  mkdir -p "$src"
  log "downloading k8s.io/kubernetes@v$K8S_VERSION"
  mod_download "k8s.io/kubernetes@v$K8S_VERSION" "$src/download.json"
  gomod=$(json_field "$src/download.json" GoMod)
  dir=$(json_field "$src/download.json" Dir)
  info=$(json_field "$src/download.json" Info)
  commit=$(json_field "$src/download.json" Hash)
  [[ -f "$gomod" && -d "$dir" ]] || die "go mod download gave no GoMod/Dir for kubernetes"

  # etcd pin sanity check: the server version this release is tested with.
  local pinned
  pinned=$(awk '/name: "etcd"$/{f=1;next} f&&/version:/{print $2; exit}' "$dir/build/dependencies.yaml")
  $OLDEST || [[ "$pinned" == "$ETCD_VERSION" ]] \
    || die "k8s v$K8S_VERSION pins etcd '$pinned' (build/dependencies.yaml) but ETCD_VERSION=$ETCD_VERSION; update the pin at the top of $0"

  staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$gomod")
  [[ -n "$staging" ]] || die "no ./staging replace lines found in $gomod"
  log "$(echo "$staging" | wc -l) staging modules -> v$STAGING_VERSION"

  {
    echo "// Generated by tests/k8s/build-binaries.sh; do not edit."
    echo "module switchboard.test/k8s-build"
    echo
    grep -E '^go [0-9]' "$gomod"
    grep -E '^godebug ' "$gomod" || true
    echo
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    echo
    echo "replace ("
    local m; for m in $staging; do echo "	$m => $m v$STAGING_VERSION"; done
    echo ")"
  } >"$src/go.mod"
  touch "$src/go.sum"   # -mod=mod fills it in (checked against the sum database)

  date=$(json_field "$info" Time 2>/dev/null || true)
  [[ -n "$date" ]] || date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  date="${date%%.*}"; date="${date%Z}Z"
  local ldflags="-s -w" p kv
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    for kv in "gitVersion=v$K8S_VERSION" "gitMajor=1" "gitMinor=$K8S_MINOR" \
              ${commit:+"gitCommit=$commit"} "gitTreeState=clean" "buildDate=$date"; do
      ldflags+=" -X $p.$kv"
    done
  done

  local cmd cmds=(kube-apiserver kubectl) missing=() pkgs=()
  $OLDEST && cmds=(kube-apiserver)
  ! $NODE_WANTED || cmds+=(kubelet kube-controller-manager kube-scheduler kube-proxy)
  for cmd in "${cmds[@]}"; do
    if check_one "$cmd"; then log "$cmd already built"; else missing+=("$cmd"); pkgs+=("k8s.io/kubernetes/cmd/$cmd"); fi
  done
  ((${#missing[@]} > 0)) || return 0
  # One `go build` for all of them: the packages they share compile once, and their links (most
  # of a warm build, one core each) run side by side instead of one after another.
  log "building ${missing[*]} (slow on first run: downloads + compiles ~2k packages)"
  local t0=$SECONDS out="$BIN/.build-out"
  rm -rf "$out"
  mkdir -p "$out"
  (cd "$src" && "${NICE[@]}" go build -mod=mod -trimpath -tags selinux,notest \
      -ldflags "$ldflags" -o "$out/" "${pkgs[@]}") \
    || die "go build ${pkgs[*]} failed (module dir: $src)"
  for cmd in "${missing[@]}"; do
    mv -f "$out/$cmd" "$BIN/$cmd"
    check_one "$cmd" || die "$BIN/$cmd built but does not report v$K8S_VERSION: $("$BIN/$cmd" --version 2>&1 | head -3)"
  done
  rmdir "$out"
  log "built ${missing[*]} in $((SECONDS - t0))s"
}

# ---- etcd ------------------------------------------------------------------
build_etcd() {
  check_one etcd && { log "etcd already built"; return; }
  local src="$VDIR/src/etcd" gomod sha
  mkdir -p "$src"
  log "downloading go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  mod_download "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" "$src/download.json"
  gomod=$(json_field "$src/download.json" GoMod)
  sha=$(json_field "$src/download.json" Hash)
  {
    echo "// Generated by tests/k8s/build-binaries.sh; do not edit."
    echo "module switchboard.test/etcd-build"
    echo
    grep -E '^go [0-9]' "$gomod"
    echo
    echo "require go.etcd.io/etcd/server/v3 v$ETCD_VERSION"
    echo
    # etcd's own go.mod replaces its sibling modules with ../paths; pin them
    # to the same release instead.
    echo "replace ("
    local m; for m in api/v3 client/pkg/v3 client/v3 pkg/v3; do
      echo "	go.etcd.io/etcd/$m => go.etcd.io/etcd/$m v$ETCD_VERSION"
    done
    echo ")"
  } >"$src/go.mod"
  touch "$src/go.sum"
  log "building etcd"
  local t0=$SECONDS
  local ld="-s -w"   # the proxy's .info usually has no Origin; keep etcd's default then
  [[ -z "$sha" ]] || ld+=" -X go.etcd.io/etcd/api/v3/version.GitSHA=${sha:0:8}"
  (cd "$src" && "${NICE[@]}" go build -mod=mod -trimpath -ldflags "$ld" \
      -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3) \
    || die "go build go.etcd.io/etcd/server/v3 failed (module dir: $src)"
  mv -f "$BIN/etcd.tmp" "$BIN/etcd"
  check_one etcd || die "$BIN/etcd does not report $ETCD_VERSION: $("$BIN/etcd" --version 2>&1 | head -3)"
  log "built etcd in $((SECONDS - t0))s"
}

# ---- helm ------------------------------------------------------------------
build_helm() {
  check_one helm && { log "helm already built"; return; }
  local tmp="$VDIR/src/helm" sha
  mkdir -p "$tmp"
  mod_download "helm.sh/helm/v3@v$HELM_VERSION" "$tmp/download.json"
  sha=$(json_field "$tmp/download.json" Hash)
  log "building helm v$HELM_VERSION"
  local t0=$SECONDS
  # chartutil/lint defaults describe the cluster as Kubernetes 1.20 unless set
  # (matters for `helm template`/kubeVersion checks); upstream's Makefile sets
  # them from client-go, which is v0.35 for helm 3.20.
  local ld="-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"
  [[ -z "$sha" ]] || ld+=" -X helm.sh/helm/v3/internal/version.gitCommit=$sha"
  ld+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  ld+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$K8S_MINOR"
  ld+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$K8S_MINOR"
  rm -f "$tmp/helm"
  GOBIN="$tmp" "${NICE[@]}" go install -trimpath -ldflags "$ld" "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION" \
    || die "go install helm.sh/helm/v3/cmd/helm@v$HELM_VERSION failed"
  mv -f "$tmp/helm" "$BIN/helm"
  check_one helm || die "$BIN/helm does not report v$HELM_VERSION: $("$BIN/helm" version 2>&1 | head -3)"
  log "built helm in $((SECONDS - t0))s"
}

# ---- node only: CoreDNS and the CNI plugins --------------------------------
requiring_module() { # NAME MODULE VERSION: a build module in $VDIR/src/NAME requiring MODULE@vVERSION
  local src="$VDIR/src/$1" gomod
  mkdir -p "$src"
  mod_download "$2@v$3" "$src/download.json"
  gomod=$(json_field "$src/download.json" GoMod)
  {
    echo "// Generated by tests/k8s/build-binaries.sh; do not edit."
    echo "module switchboard.test/$1-build"
    echo
    grep -E '^go [0-9]' "$gomod"
    echo
    echo "require $2 v$3"
  } >"$src/go.mod"
  touch "$src/go.sum"
}

build_coredns() {
  check_one coredns && { log "coredns already built"; return; }
  local src="$VDIR/src/coredns" t0=$SECONDS
  requiring_module coredns github.com/coredns/coredns "$COREDNS_VERSION"
  # CoreDNS with only the plugins tests/node/node.sh's Corefile uses, the way CoreDNS documents
  # for a build with a chosen set of plugins (its own main imports them all, core/plugin): the
  # whole set compiles about 1,150 packages (cloud providers' SDKs, tracing vendors), this about
  # 570, about 130 CPU-seconds less on a cold machine. The directives keep upstream's order (the
  # order plugins see a query in); add a plugin here when the Corefile starts using it.
  cat >"$src/main.go" <<'GO'
// Generated by tests/k8s/build-binaries.sh; do not edit.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
)

var plugins = map[string]bool{"bind": true, "cache": true, "errors": true, "kubernetes": true}

func init() {
	var kept []string
	for _, d := range dnsserver.Directives {
		if plugins[d] {
			kept = append(kept, d)
		}
	}
	dnsserver.Directives = kept
}

func main() { coremain.Run() }
GO
  log "building coredns v$COREDNS_VERSION (the plugins bind, cache, errors, kubernetes)"
  (cd "$src" && "${NICE[@]}" go build -mod=mod -trimpath -ldflags "-s -w" \
      -o "$BIN/coredns.tmp" .) \
    || die "go build of coredns failed (module dir: $src)"
  mv -f "$BIN/coredns.tmp" "$BIN/coredns"
  check_one coredns || die "$BIN/coredns does not report $COREDNS_VERSION: $("$BIN/coredns" -version 2>&1 | head -3)"
  log "built coredns in $((SECONDS - t0))s"
}

build_cni() {
  check_one cni && { log "CNI plugins already built"; return; }
  local src="$VDIR/src/cni" p t0=$SECONDS
  local ld="-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=v$CNI_VERSION"
  requiring_module cni github.com/containernetworking/plugins "$CNI_VERSION"
  mkdir -p "$CNI_BIN"
  log "building the CNI plugins v$CNI_VERSION"
  for p in main/bridge ipam/host-local main/loopback meta/portmap; do
    (cd "$src" && "${NICE[@]}" go build -mod=mod -trimpath -ldflags "$ld" \
        -o "$CNI_BIN/${p#*/}.tmp" "github.com/containernetworking/plugins/plugins/$p") \
      || die "go build of CNI plugin $p failed (module dir: $src)"
    mv -f "$CNI_BIN/${p#*/}.tmp" "$CNI_BIN/${p#*/}"
  done
  check_one cni || die "the CNI plugins in $CNI_BIN do not report v$CNI_VERSION"
  log "built the CNI plugins in $((SECONDS - t0))s"
}

build_kubernetes
build_etcd
build_helm
if $NODE_WANTED; then
  build_coredns
  build_cni
fi

all_ok || die "post-build check failed"
cat >"$VDIR/versions.env" <<EOF
K8S_VERSION=$K8S_VERSION
ETCD_VERSION=$ETCD_VERSION
HELM_VERSION=$HELM_VERSION
COREDNS_VERSION=$COREDNS_VERSION
CNI_VERSION=$CNI_VERSION
EOF
log "done in $(( $(date +%s) - START ))s; cache size: $(du -sh "$CACHE_ROOT" 2>/dev/null | cut -f1)"
for b in "${WANT[@]}"; do log "  $BIN/$b ($(du -h "$BIN/$b" | cut -f1))"; done
echo "$BIN"
