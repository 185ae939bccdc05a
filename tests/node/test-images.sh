#!/usr/bin/env bash
# Builds the images the one-node cluster needs besides Switchboard's own (tests/images/build.sh)
# and prints their archive paths, one per line, in this order:
#
#   registry.k8s.io/pause:3.10.1       every pod's sandbox: Kubernetes' build/pause/linux/pause.c,
#                                      linked statically (gcc), FROM scratch
#   switchboard.test/caller:local      the test pods' client (tests/node/caller, Go standard
#                                      library only, static), FROM scratch
#   switchboard.test/redis:7.0         the chart's demo Redis (gateway.store.demoRedis.image):
#                                      Debian 12's redis-server and redis-tools (7.0) on a
#                                      minbase root filesystem made by mmdebstrap
#
# No base image is pulled. Archives are cached in ${SWITCHBOARD_CACHE}/node-images, keyed by the
# content of their sources, so a warm run only checks them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}"
out="$cache/node-images"
die() { echo "node/test-images.sh: $*" >&2; exit 1; }
mkdir -p "$out"
# shellcheck source=tests/build-lock.bash
source "$root/tests/build-lock.bash"
build_lock "$out/.test-images.lock" "these images"

pause_src=$(ls -d "$cache"/k8s/go/path/pkg/mod/k8s.io/kubernetes@v*/build/pause/linux 2>/dev/null | sort | tail -1) || true
[[ -f "$pause_src/pause.c" ]] || die "pause.c not found: run tests/k8s/build-binaries.sh first (it downloads the Kubernetes module)"
command -v buildah >/dev/null || "$root/tests/images/setup-tools.sh" >/dev/null
command -v gcc >/dev/null || die "gcc not found (Debian: apt-get install gcc libc6-dev)"
command -v go >/dev/null || die "go not found on PATH"

# shellcheck source=tests/node/oci-archive.bash
source "$here/oci-archive.bash"

pause="$out/pause-$(sha256sum "$pause_src/pause.c" | cut -c1-12).tar"
if [[ ! -s "$pause" ]]; then
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  gcc -Os -static -DVERSION=v3.10.1 -o "$work/pause" "$pause_src/pause.c" || die "gcc could not build pause.c"
  strip "$work/pause"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$work/Containerfile"
  oci_archive registry.k8s.io/pause:3.10.1 "$pause" "$work"
  rm -rf "$work"; trap - EXIT  # (the next image's trap would replace this one)
fi

caller="$out/caller-$(cat "$here/caller/go.mod" "$here/caller"/*.go | sha256sum | cut -c1-12).tar"
if [[ ! -s "$caller" ]]; then
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  (cd "$here/caller" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false GOWORK=off \
    go build -trimpath -ldflags "-s -w" -o "$work/caller" .) || die "go build of tests/node/caller failed"
  printf 'FROM scratch\nCOPY caller /usr/local/bin/caller\nUSER 65532:65532\nENTRYPOINT ["/usr/local/bin/caller"]\n' >"$work/Containerfile"
  oci_archive switchboard.test/caller:local "$caller" "$work"
  rm -rf "$work"; trap - EXIT
fi
redis_suite=bookworm
redis_packages=redis-server,redis-tools
redis="$out/redis-$({ echo "$redis_suite $redis_packages"; sed -n '/^redis_suite=/,/^fi$/p' "$0"; } | sha256sum | cut -c1-12).tar"
if [[ ! -s "$redis" ]]; then
  "$root/tests/install-packages.sh" mmdebstrap=mmdebstrap >&2 || die "could not install mmdebstrap"
  work=$(mktemp -d "${TMPDIR:-/tmp}/switchboard-redis-image.XXXXXX"); trap 'rm -rf "$work"' EXIT
  echo "node/test-images.sh: building a Debian $redis_suite root filesystem with Redis (mmdebstrap)" >&2
  # /data: the chart mounts an emptyDir there and runs Redis in it (the official image's layout).
  mmdebstrap --variant=minbase --include="$redis_packages" --mode=root --quiet \
    --customize-hook='mkdir -p "$1/data"; rm -rf "$1/var/cache/apt/archives"/*.deb "$1/var/lib/apt/lists"/*' \
    "$redis_suite" "$work/rootfs.tar" http://deb.debian.org/debian >&2 || die "mmdebstrap failed (Debian's archive must be reachable)"
  printf 'FROM scratch\nADD rootfs.tar /\nUSER 999:999\nWORKDIR /data\nENTRYPOINT ["/usr/bin/redis-server"]\n' >"$work/Containerfile"
  oci_archive switchboard.test/redis:7.0 "$redis" "$work"
  rm -rf "$work"; trap - EXIT
fi
echo "$pause"
echo "$caller"
echo "$redis"
