# shellcheck shell=bash
# One builder at a time for a cached tool or image, sourced by the scripts that build them.
# The test command builds the suites' tools in the background while the suites start
# (tests/run-all.sh); a suite asking for one under way waits here for that build instead of
# starting a second one beside it. The lock is held on fd 9 until the script exits; check the
# cache again after taking it.
#
#   build_lock LOCKFILE WHAT    (WHAT names the build in the waiting message)
#
# Used by setup-go-tool.sh, setup-jaeger.sh, setup-prometheus.sh, k8s/build-binaries.sh and the
# node's two image scripts.
build_lock() {
  exec 9>"$1"
  if ! flock -n 9; then
    echo "$(basename "$0"): another process is building $2; waiting for it" >&2
    flock 9
  fi
}
