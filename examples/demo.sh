#!/usr/bin/env bash
# Runs the gateway on the bundled example config and upstream: no cluster, no network.
#   ./examples/demo.sh            gateway on 127.0.0.1:8080, upstream on 127.0.0.1:8931
# Then, for example:
#   curl -s localhost:8080/mcp-rest/tools/list -H 'Authorization: Bearer sk-demo'
set -euo pipefail
cd "$(dirname "$0")/.."
# The same build directory as tests/run-all.sh: outside the checkout, shared between clones.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/target}"
export SWITCHBOARD_DEMO_KEY="${SWITCHBOARD_DEMO_KEY:-sk-demo}"
export SWITCHBOARD_SESSION_KEY="${SWITCHBOARD_SESSION_KEY:-demo-session-key-change-me}"
export DEMO_UPSTREAM_TOKEN="${DEMO_UPSTREAM_TOKEN:-demo-upstream-token}"
cargo build --release -p switchboard-gateway -p switchboard-example-upstream
"$CARGO_TARGET_DIR/release/switchboard-example-upstream" --listen 127.0.0.1:8931 &
upstream=$!
trap 'kill $upstream 2>/dev/null || true' EXIT
echo "gateway key: $SWITCHBOARD_DEMO_KEY   try: curl -s localhost:8080/mcp-rest/tools/list -H 'Authorization: Bearer $SWITCHBOARD_DEMO_KEY'"
"$CARGO_TARGET_DIR/release/switchboard-gateway" --config examples/standalone.yaml --listen "${SWITCHBOARD_LISTEN:-127.0.0.1:8080}"
