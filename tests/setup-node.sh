#!/usr/bin/env bash
# Installs (or reuses) the Node packages the end-to-end tests need, and prints their directory.
#
#   tests/setup-node.sh              -> prints e.g. /root/.cache/switchboard/node
#
# The packages (the official TypeScript MCP client SDK, @modelcontextprotocol/client, which
# tests/node/mcp_client.mjs drives; and published OpenAPI 3.0 documents the OpenAPI schema tests
# compile: GitHub's REST description, @octokit/openapi, and ReadMe's collection with the classic
# Petstore, @readme/oas-examples) live in ${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/node,
# installed with `npm ci` from tests/node/package.json and tests/node/package-lock.json (exact
# pins, integrity hashes), and only when a stamp file says the lock (or Node's major version)
# changed, so a warm run is a couple of file reads. Everything except the final path goes to
# stderr. The e2e tests find the directory through $SWITCHBOARD_NODE (tests/run-all.sh exports it)
# or at the default cache path.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${SWITCHBOARD_CACHE:-${HOME:?set HOME or SWITCHBOARD_CACHE}/.cache/switchboard}"
dest="$cache/node"
stamp="$dest/.switchboard-stamp"
node="${SWITCHBOARD_NODE_BIN:-node}"
min_major=20

die() { echo "setup-node.sh: $*" >&2; exit 1; }

command -v "$node" >/dev/null 2>&1 \
  || die "$node not found: install Node.js $min_major or newer with npm (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 \
  || die "npm not found: install npm alongside Node.js (Debian: apt-get install npm)"
node_version="$("$node" --version 2>/dev/null)" || die "$node --version failed"
major="${node_version#v}"
major="${major%%.*}"
[[ "$major" =~ ^[0-9]+$ ]] || die "cannot read the Node.js version from '$node_version'"
((major >= min_major)) \
  || die "Node.js $node_version is too old: @modelcontextprotocol/client needs Node.js $min_major or newer"

# What the stamp records: the pinned set and the Node major version it was installed under.
want="$(
  {
    echo "node-major $major"
    cat "$here/node/package.json" "$here/node/package-lock.json"
  } | sha256sum | cut -d' ' -f1
)"

# Every pinned package (the documents are read as files: a missing one fails its test).
packages=(@modelcontextprotocol/client @modelcontextprotocol/ext-apps @octokit/openapi @readme/oas-examples)
installed() {
  local p
  for p in "${packages[@]}"; do
    [[ -f "$dest/node_modules/$p/package.json" ]] || return 1
  done
}

if installed && [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "$dest"
  exit 0
fi

echo "setup-node.sh: installing pinned Node packages into $dest" >&2
mkdir -p "$dest"
rm -f "$stamp"
cp "$here/node/package.json" "$here/node/package-lock.json" "$dest/"
# npm ci: exactly the lock, removing whatever node_modules held before.
npm ci --prefix "$dest" --no-audit --no-fund --loglevel=error >&2 \
  || die "npm ci failed (see above); the packages come from the npm registry"
installed || die "npm ci left one of ${packages[*]} out of $dest/node_modules"
(cd "$dest" && "$node" --input-type=module -e "await import('@modelcontextprotocol/client')") >&2 \
  || die "Node.js cannot import @modelcontextprotocol/client from $dest"
echo "$want" >"$stamp"
echo "$dest"
