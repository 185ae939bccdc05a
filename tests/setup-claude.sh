#!/usr/bin/env bash
# Installs (or reuses) the Claude Code CLI the end-to-end tests of /v1/messages drive, and prints
# the path of its `claude` executable.
#
#   tests/setup-claude.sh            -> prints e.g. ~/.cache/switchboard/claude/node_modules/.bin/claude
#
# The CLI (@anthropic-ai/claude-code, run by tests/e2e/claude_cli.py) lives in
# ${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/claude, installed with `npm ci` from
# tests/claude/package.json and tests/claude/package-lock.json (exact pins, integrity hashes).
# The npm package is a thin wrapper: its postinstall hard-links the platform's native binary
# (the optional dependency @anthropic-ai/claude-code-linux-x64 or a sibling: a 180 MB download,
# a 400 MB executable) over its bin/claude.exe stub. This script checks that npm installed the
# native package and that the postinstall placed it, and runs the postinstall itself when npm did
# not. It installs only when a stamp file says the lock (or the platform) changed, so a warm run
# is a couple of file reads and no network access; a reinstall of the same lock takes the
# tarballs from npm's own cache (--prefer-offline). Everything except the final path goes to
# stderr. The e2e tests find the executable through $SWITCHBOARD_CLAUDE (tests/run-all.sh
# exports it) or at the default cache path.
#
# The package declares engines.node >= 22, but only its postinstall runs on Node.js (the CLI is
# a native executable), so any Node.js that runs npm will do (npm ci gets --engine-strict=false).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${SWITCHBOARD_CACHE:-${HOME:?set HOME or SWITCHBOARD_CACHE}/.cache/switchboard}"
dest="$cache/claude"
stamp="$dest/.switchboard-stamp"
node="${SWITCHBOARD_NODE_BIN:-node}"
exe="$dest/node_modules/.bin/claude"
wrapper="$dest/node_modules/@anthropic-ai/claude-code"

die() { echo "setup-claude.sh: $*" >&2; exit 1; }

command -v "$node" >/dev/null 2>&1 \
  || die "$node not found: install Node.js 20 or newer with npm (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 \
  || die "npm not found: install npm alongside Node.js (Debian: apt-get install npm)"

# The native package npm must pick for this machine (the names install.cjs looks for).
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) platform=linux-x64 ;;
  Linux-aarch64 | Linux-arm64) platform=linux-arm64 ;;
  Darwin-x86_64) platform=darwin-x64 ;;
  Darwin-arm64) platform=darwin-arm64 ;;
  *) die "no Claude Code native package for $(uname -s) $(uname -m)" ;;
esac
# musl (Alpine) has its own build; install.cjs tells the two apart the same way.
glibc='process.exit(process.report.getReport().header.glibcVersionRuntime ? 0 : 1)'
if [[ "$platform" == linux-* ]] && ! "$node" -e "$glibc"; then
  platform="$platform-musl"
fi
native="$dest/node_modules/@anthropic-ai/claude-code-$platform"

version="$("$node" -e '
  const lock = require(process.argv[1]);
  process.stdout.write(lock.packages["node_modules/@anthropic-ai/claude-code"].version);
' "$here/claude/package-lock.json")" || die "cannot read the pinned version from tests/claude/package-lock.json"

# What the stamp records: the pinned set and the native package it resolved to.
want="$(
  {
    echo "platform $platform"
    cat "$here/claude/package.json" "$here/claude/package-lock.json"
  } | sha256sum | cut -d' ' -f1
)"

# Installed: the native binary is there and postinstall put it in place of the 500-byte stub.
installed() {
  [[ -x "$native/claude" && -x "$exe" ]] && (($(stat -L -c %s "$exe") > 1000000))
}

if installed && [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "$exe"
  exit 0
fi

echo "setup-claude.sh: installing @anthropic-ai/claude-code@$version ($platform) into $dest" >&2
mkdir -p "$dest"
rm -f "$stamp"
cp "$here/claude/package.json" "$here/claude/package-lock.json" "$dest/"
# npm ci: exactly the lock, removing whatever node_modules held before. Optional dependencies
# (the native packages) must not be omitted; --prefer-offline reuses npm's own cache when the
# same tarballs were fetched before.
npm ci --prefix "$dest" --include=optional --prefer-offline --engine-strict=false \
  --no-audit --no-fund --loglevel=error >&2 \
  || die "npm ci failed (see above); the packages come from the npm registry"
[[ -x "$native/claude" ]] \
  || die "npm ci did not install @anthropic-ai/claude-code-$platform (omit=optional in an npmrc?)"
if ! installed; then
  # npm skipped the postinstall (ignore-scripts, or scripts not allowed): run it ourselves.
  echo "setup-claude.sh: running the package's postinstall (npm did not)" >&2
  (cd "$wrapper" && "$node" install.cjs) >&2 || die "the postinstall of @anthropic-ai/claude-code failed"
  installed || die "postinstall left the stub at $wrapper/bin/claude.exe"
fi
# The binary runs and is the pinned version (no network: --version answers locally).
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
got="$(HOME="$scratch" DISABLE_AUTOUPDATER=1 "$exe" --version </dev/null 2>&1)" \
  || die "$exe --version failed: $got"
[[ "$got" == "$version"* ]] || die "$exe --version says '$got', the lock pins $version"
echo "$want" >"$stamp"
echo "$exe"
