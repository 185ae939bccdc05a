#!/usr/bin/env bash
# Creates (or reuses) the Python venv the end-to-end tests run in, and prints its path.
#
#   tests/setup-python.sh            -> prints e.g. /root/.cache/switchboard/venv
#
# The venv lives at ${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/venv. Packages are installed
# from tests/requirements.txt (exact pins) under tests/constraints.txt (the whole pinned set), and
# only when a stamp file says that set (or the Python interpreter) changed, so a warm run is a
# couple of file reads. Everything except the final path goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${SWITCHBOARD_CACHE:-${HOME:?set HOME or SWITCHBOARD_CACHE}/.cache/switchboard}"
venv="$cache/venv"
stamp="$venv/.switchboard-stamp"
python="${SWITCHBOARD_PYTHON:-python3}"

die() { echo "setup-python.sh: $*" >&2; exit 1; }

command -v "$python" >/dev/null 2>&1 || die "$python not found: install Python 3.10 or newer (Debian: apt-get install python3 python3-venv)"
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
  || die "$("$python" --version 2>&1) is too old: the mcp SDK needs Python 3.10 or newer"

# What the stamp records: the pinned set and the interpreter the venv was built from.
want="$(
  {
    "$python" -c 'import sys; print(sys.version)'
    cat "$here/requirements.txt" "$here/constraints.txt"
  } | sha256sum | cut -d' ' -f1
)"

if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "$venv"
  exit 0
fi

mkdir -p "$cache"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
  echo "setup-python.sh: creating venv at $venv" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv" >&2 \
    || die "could not create a venv with $python (Debian: apt-get install python3-venv)"
fi
# Interpreter changed since the venv was made: start over rather than mix site-packages.
if [[ "$("$venv/bin/python" -c 'import sys; print(sys.version)')" != "$("$python" -c 'import sys; print(sys.version)')" ]]; then
  echo "setup-python.sh: interpreter changed, recreating $venv" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv" >&2
fi

echo "setup-python.sh: installing pinned test packages into $venv" >&2
rm -f "$stamp"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  -r "$here/requirements.txt" -c "$here/constraints.txt" >&2 \
  || die "pip install failed (see above); the packages come from PyPI"
"$venv/bin/python" -c 'import mcp, pytest, httpx, uvicorn, yaml, anthropic, openai, selenium' >&2 \
  || die "the venv at $venv cannot import the test packages"
echo "$want" >"$stamp"
echo "$venv"
