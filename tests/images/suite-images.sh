#!/usr/bin/env bash
# The images the test command's suites use, from its own debug binaries (tests/images/build.sh
# --for-tests): in buildah's store for the images suite (30-images, which runs them with podman)
# and as OCI archives in the cache for the one-node suite (60-node imports them into the node's
# containerd). One build for both, kept until the binaries change (build.sh's stamps).
#
#   tests/images/suite-images.sh            build (or check) them; prints each image and its size
#   tests/images/suite-images.sh --archives print the archives' directory
#
# tests/run-all.sh runs it in the background during the e2e step, where the CPUs have idle
# time, so that the suites step (whose first minutes are CPU-bound) finds them built.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
archives="${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/node-images/switchboard"
case "${1:-}" in
  --archives) echo "$archives"; exit 0 ;;
  "") ;;
  *) echo "suite-images.sh: unknown argument $1" >&2; exit 2 ;;
esac
CONTAINERS_CONF="$("$here/setup-tools.sh")"
export CONTAINERS_CONF
exec "$here/build.sh" --engine buildah --archives "$archives" --for-tests
