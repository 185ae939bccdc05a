#!/usr/bin/env bash
# Installs (or reuses) the real stdio MCP servers the stdio-bridge tests run, and prints one
# line per server: NAME<TAB>COMMAND (the command starts the server on stdio).
#
#   tests/setup-stdio-servers.sh
#   everything  /root/.cache/switchboard/stdio-servers/npm/node_modules/.bin/mcp-server-everything
#   memory      /root/.cache/switchboard/stdio-servers/npm-memory/node_modules/.bin/mcp-server-memory
#   time        /root/.cache/switchboard/stdio-servers/time/bin/mcp-server-time
#
# - everything: @modelcontextprotocol/server-everything from npm (`npm ci` of
#   tests/stdio-servers/package-lock.json: exact pins and integrity hashes);
# - memory: @modelcontextprotocol/server-memory from npm, a stateful server (a knowledge graph in
#   the file MEMORY_FILE_PATH names), alike from tests/stdio-servers/memory/package-lock.json;
# - time: mcp-server-time from PyPI in a venv of its own (tests/stdio-servers/requirements-time.txt:
#   its whole pinned set).
# Both live under ${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/stdio-servers and are installed
# again only when a stamp says the pins changed. Everything but the two lines goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${SWITCHBOARD_CACHE:-${HOME:?set HOME or SWITCHBOARD_CACHE}/.cache/switchboard}"
dest="$cache/stdio-servers"
python="${SWITCHBOARD_PYTHON:-python3}"

die() { echo "setup-stdio-servers.sh: $*" >&2; exit 1; }
command -v node >/dev/null 2>&1 || die "node not found: install Node.js 20 or newer (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 || die "npm not found: install npm alongside Node.js"
command -v "$python" >/dev/null 2>&1 || die "$python not found: install Python 3.10 or newer"

stamp_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

npm_dir="$dest/npm"
want="$(stamp_of "$here/stdio-servers/package.json" "$here/stdio-servers/package-lock.json")"
everything="$npm_dir/node_modules/.bin/mcp-server-everything"
if [[ ! -x "$everything" || "$(cat "$npm_dir/.stamp" 2>/dev/null)" != "$want" ]]; then
  echo "setup-stdio-servers.sh: installing @modelcontextprotocol/server-everything into $npm_dir" >&2
  mkdir -p "$npm_dir"
  rm -f "$npm_dir/.stamp"
  cp "$here/stdio-servers/package.json" "$here/stdio-servers/package-lock.json" "$npm_dir/"
  npm ci --prefix "$npm_dir" --no-audit --no-fund --loglevel=error >&2 || die "npm ci failed (the npm registry must be reachable)"
  [[ -x "$everything" ]] || die "npm ci left no $everything"
  echo "$want" >"$npm_dir/.stamp"
fi

memory_dir="$dest/npm-memory"
want="$(stamp_of "$here/stdio-servers/memory/package.json" "$here/stdio-servers/memory/package-lock.json")"
memory="$memory_dir/node_modules/.bin/mcp-server-memory"
if [[ ! -x "$memory" || "$(cat "$memory_dir/.stamp" 2>/dev/null)" != "$want" ]]; then
  echo "setup-stdio-servers.sh: installing @modelcontextprotocol/server-memory into $memory_dir" >&2
  mkdir -p "$memory_dir"
  rm -f "$memory_dir/.stamp"
  cp "$here/stdio-servers/memory/package.json" "$here/stdio-servers/memory/package-lock.json" "$memory_dir/"
  npm ci --prefix "$memory_dir" --no-audit --no-fund --loglevel=error >&2 || die "npm ci failed (the npm registry must be reachable)"
  [[ -x "$memory" ]] || die "npm ci left no $memory"
  echo "$want" >"$memory_dir/.stamp"
fi

time_dir="$dest/time"
want="$(stamp_of "$here/stdio-servers/requirements-time.txt"; "$python" --version)"
time_bin="$time_dir/bin/mcp-server-time"
if [[ ! -x "$time_bin" || "$(cat "$time_dir/.stamp" 2>/dev/null)" != "$want" ]]; then
  echo "setup-stdio-servers.sh: installing mcp-server-time into $time_dir" >&2
  rm -rf "$time_dir"
  "$python" -m venv "$time_dir" >&2 || die "$python -m venv failed (Debian: apt-get install python3-venv)"
  "$time_dir/bin/pip" install --quiet --disable-pip-version-check -r "$here/stdio-servers/requirements-time.txt" >&2 \
    || die "pip install failed (PyPI must be reachable)"
  [[ -x "$time_bin" ]] || die "pip left no $time_bin"
  echo "$want" >"$time_dir/.stamp"
fi

printf 'everything\t%s\n' "$everything"
printf 'memory\t%s\n' "$memory"
printf 'time\t%s\n' "$time_bin"
