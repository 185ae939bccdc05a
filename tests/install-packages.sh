#!/usr/bin/env bash
# Installs Debian packages for the commands that are missing, with apt-get:
#
#   tests/install-packages.sh COMMAND=PACKAGE...     e.g. runc=runc ip=iproute2
#
# Does nothing when every command is on PATH; fails with the list when there is no apt-get.
# The setup scripts of the suites that need system tools call it (tests/images, tests/node).
set -euo pipefail
missing=()
for pair in "$@"; do
  command -v "${pair%%=*}" >/dev/null || missing+=("${pair#*=}")
done
((${#missing[@]})) || exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
command -v apt-get >/dev/null ||
  { echo "install-packages.sh: missing ${missing[*]} and no apt-get to install them" >&2; exit 1; }
sudo=""
[[ $(id -u) -eq 0 ]] || sudo=sudo
echo "install-packages.sh: installing ${missing[*]} (apt-get)" >&2
$sudo apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
