#!/usr/bin/env bash
# Installs what building and running the images needs, when missing: buildah (build), podman
# (run), runc (their runtime; crun fails on this kind of machine), from Debian's packages. Prints
# the path of a containers.conf for podman (set CONTAINERS_CONF to it): rootful podman asks for
# nofile and nproc limits of 1048576, which root without CAP_SYS_RESOURCE cannot raise to (runc:
# "error setting rlimit ... operation not permitted"); these stay below the usual hard limits.
set -euo pipefail
cache="${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}"
"$(dirname "${BASH_SOURCE[0]}")/../install-packages.sh" buildah=buildah podman=podman runc=runc
conf="$cache/images/containers.conf"
mkdir -p "$(dirname "$conf")"
cat > "$conf" <<'CONF'
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=8192:8192"]
[engine]
runtime = "runc"
CONF
echo "$conf"
