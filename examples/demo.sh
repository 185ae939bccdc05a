#!/usr/bin/env bash
# Runs the gateway on the bundled example config and upstream: no cluster, no network.
#   ./examples/demo.sh            gateway on 127.0.0.1:8080, upstream on 127.0.0.1:8931,
#                                 scripted LLM provider on 127.0.0.1:8932
# Then, for example:
#   curl -s localhost:8080/mcp-rest/tools/list -H 'Authorization: Bearer sk-demo'
set -euo pipefail
cd "$(dirname "$0")/.."
# The same build directory as tests/run-all.sh: outside the checkout, shared between clones.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/target}"
export SWITCHBOARD_DEMO_KEY="${SWITCHBOARD_DEMO_KEY:-sk-demo}"
export SWITCHBOARD_SESSION_KEY="${SWITCHBOARD_SESSION_KEY:-demo-session-key-change-me}"
export DEMO_UPSTREAM_TOKEN="${DEMO_UPSTREAM_TOKEN:-demo-upstream-token}"
export DEMO_PROVIDER_KEY="${DEMO_PROVIDER_KEY:-demo-provider-key}"
# The gateway's client at Example Accounts (the example upstream's convention: secret-<client_id>).
export DEMO_ACCOUNTS_CLIENT_SECRET="${DEMO_ACCOUNTS_CLIENT_SECRET:-secret-switchboard-demo}"
# SWITCHBOARD_DEMO_BIN_DIR=DIR runs the binaries already built in DIR instead of building
# (tests/e2e/test_demo.py runs the test command's own build: the three packages built alone
# resolve other features than the workspace build and would compile for minutes a second time).
if [ -n "${SWITCHBOARD_DEMO_BIN_DIR:-}" ]; then
  bin="$SWITCHBOARD_DEMO_BIN_DIR"
else
  cargo build --release -p switchboard-gateway -p switchboard-example-upstream -p switchboard-scripted-provider
  bin="$CARGO_TARGET_DIR/release"
fi
"$bin/switchboard-example-upstream" --listen 127.0.0.1:8931 &
upstream=$!
"$bin/switchboard-scripted-provider" --listen 127.0.0.1:8932 \
  --api-key "$DEMO_PROVIDER_KEY" --script examples/demo-provider-script.json >/dev/null &
provider=$!
trap 'kill $upstream $provider 2>/dev/null || true' EXIT
# The gateway lists its servers on the first request: wait (bounded) until both are listening,
# or a first `tools/list` right after start-up finds the upstream not there yet.
for port in 8931 8932; do
  for _ in $(seq 1 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    sleep 0.05
  done
done
echo "gateway key: $SWITCHBOARD_DEMO_KEY   try: curl -s localhost:8080/mcp-rest/tools/list -H 'Authorization: Bearer $SWITCHBOARD_DEMO_KEY'"
"$bin/switchboard-gateway" --config examples/standalone.yaml --listen "${SWITCHBOARD_LISTEN:-127.0.0.1:8080}"
