#!/usr/bin/env bash
# Installs the LiteLLM proxy (the benchmark peer) into a venv under the project's cache dir.
# Pins: litellm[proxy]==1.108.7 and mcp==2.3.0 (the versions the peer comparison was planned with;
# later litellm versions pin companion packages the registry here does not have).
#
#   bench/peers/litellm/setup.sh        -> prints the venv path on stdout, progress on stderr
#
# Idempotent: a stamp file records the pins; a warm run is a file read. Exits non-zero (and says
# why) when the install fails, so the harness reports "not installed" instead of a figure.
set -euo pipefail
cache="${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}"
venv="$cache/litellm/venv"
LITELLM_VERSION="${LITELLM_VERSION:-1.108.7}"
MCP_VERSION="${MCP_VERSION:-2.3.0}"
want="litellm[proxy]==$LITELLM_VERSION mcp==$MCP_VERSION $(python3 -c 'import sys; print(sys.version.split()[0])')"
stamp="$venv/.bench-stamp"
if [[ -x "$venv/bin/litellm" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "$venv"; exit 0
fi
mkdir -p "$cache/litellm"
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv" >&2
rm -f "$stamp"
echo "litellm setup: installing litellm[proxy]==$LITELLM_VERSION mcp==$MCP_VERSION into $venv (a few minutes)" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "litellm[proxy]==$LITELLM_VERSION" "mcp==$MCP_VERSION" >&2
"$venv/bin/python" -m pip freeze > "$cache/litellm/pip-freeze.txt"
"$venv/bin/litellm" --version >/dev/null 2>&1 || { echo "litellm setup: installed, but 'litellm --version' fails" >&2; exit 1; }
echo "$want" > "$stamp"
echo "$venv"
