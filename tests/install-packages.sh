#!/usr/bin/env bash
# Installs Debian packages for the commands that are missing, with apt-get:
#
#   tests/install-packages.sh COMMAND=PACKAGE...     e.g. runc=runc ip=iproute2
#
# Does nothing when every command is on PATH; fails with the list when there is no apt-get.
# The setup scripts of the suites that need system tools call it (tests/images, tests/node).
set -euo pipefail
missing_packages() {
  missing=()
  local pair
  for pair in "$@"; do
    command -v "${pair%%=*}" >/dev/null || missing+=("${pair#*=}")
  done
}
missing_packages "$@"
((${#missing[@]})) || exit 0
command -v apt-get >/dev/null ||
  { echo "install-packages.sh: missing ${missing[*]} and no apt-get to install them" >&2; exit 1; }
sudo=""
[[ $(id -u) -eq 0 ]] || sudo=sudo
# The test command's background builds install side by side (the e2e tools and the suites'
# tools), and apt takes one at a time: a second apt-get fails at once on apt's lock. So one
# install at a time, in turn, and what the other one installed meanwhile is not asked again.
cache="${SWITCHBOARD_CACHE:-${HOME:?set HOME or SWITCHBOARD_CACHE}/.cache/switchboard}"
mkdir -p "$cache"
exec 9>"$cache/install-packages.lock"
flock -w 1800 9 || { echo "install-packages.sh: another install held the lock for 30 minutes" >&2; exit 1; }
missing_packages "$@"
((${#missing[@]})) || exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
echo "install-packages.sh: installing ${missing[*]} (apt-get)" >&2
$sudo apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
