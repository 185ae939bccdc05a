#!/usr/bin/env bash
# THE test command: everything CI runs, in order, stopping at the first failure.
#
#   tests/run-all.sh                 # all steps
#   tests/run-all.sh e2e             # only the named steps (fmt clippy doc unit fuzz build e2e, and suites)
#   PYTEST_ARGS="-k scope -x" tests/run-all.sh e2e
#
# Steps:
#   fmt     cargo fmt --all -- --check
#   layering tests/layering.py: no file-level import cycle inside a shipped crate (gateway/,
#           operator/, crds/), each printed with its edges; first a planted cycle must be
#           reported (--self-test)
#   clippy  cargo clippy --workspace --all-targets -- -D warnings
#   doc     cargo doc --workspace --no-deps --document-private-items, every intra-doc link checked
#           (a link to an item that does not exist fails the step, private modules' docs too)
#   unit    cargo test --workspace (without the fuzz targets)
#   fuzz    the gateway's property-based fuzz targets (gateway/src/fuzz.rs), printing how many
#           inputs each tried: SWITCHBOARD_FUZZ_CASES per target (default 3,000; raise it to run
#           longer)
#   build   cargo build --workspace --bins            (debug; the e2e tests run these binaries)
#   e2e     tests/setup-python.sh, tests/setup-node.sh, tests/setup-claude.sh (the Claude Code
#           CLI), tests/setup-keycloak.sh (Keycloak and its Java runtime), tests/setup-jaeger.sh
#           (the Jaeger v2 trace backend, from Go modules) and tests/setup-prometheus.sh
#           (Prometheus and promtool, from Go modules), tests/setup-stdio-servers.sh (real stdio
#           MCP servers from npm and PyPI), then pytest tests/e2e with the venv's
#           python
#   suites  every tests/suites.d/*.sh, in name order   (hook for later suites, e.g. Kubernetes e2e)
#
# On a cold machine most of the time is compiling tools from Go modules and static binaries. The
# full run builds them in the background at nice 19 while earlier steps run: Jaeger and
# Prometheus during the Rust steps, what the suites need (Kubernetes binaries, the oldest API
# server, the images' binaries, actionlint, glua, the node's images) during the e2e tests. A
# step that needs them waits for them first ("e2e-tools: ready in …", "suite-tools: …").
#
# Later suites: drop an executable script into tests/suites.d/ (e.g. 50-kubernetes.sh). It runs
# from the repository root after the e2e step, with SWITCHBOARD_VENV set to the test venv and the
# debug binaries built; a non-zero exit fails the run. Name one on the command line to run just
# it: tests/run-all.sh 50-kubernetes.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# Build outside the checkout so a fresh clone on a warm machine (CI) reuses earlier builds.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/target}"

die() { echo "run-all.sh: $*" >&2; exit 1; }
trap 'echo "run-all.sh: step ${current:-?} FAILED (exit $?)" >&2' ERR
need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found: $2"; }

# Nothing left behind: the temp dir's entries now, compared with its entries at the end
# (`left_in_tmp`), so a file, directory or log the run leaves there (a test's certificate and key,
# a tool's cache) fails the run, named, while what other programs had there before does not count.
# SWITCHBOARD_TMP_IGNORE: glob patterns (space-separated) of entries other programs on a shared
# machine may create meanwhile; none by default.
tmp_dir="${TMPDIR:-/tmp}"
tmp_before="$(ls -A "$tmp_dir" | LC_ALL=C sort)"
left_in_tmp() {
  local entry pattern patterns new=()
  read -ra patterns <<<"${SWITCHBOARD_TMP_IGNORE:-}"
  while IFS= read -r entry; do
    for pattern in "${patterns[@]}"; do
      # shellcheck disable=SC2053 # a glob on purpose
      [[ "$entry" == $pattern ]] && continue 2
    done
    [[ -n "$entry" ]] && new+=("$tmp_dir/$entry")
  done < <(LC_ALL=C comm -13 <(printf '%s\n' "$tmp_before") <(ls -A "$tmp_dir" | LC_ALL=C sort))
  ((${#new[@]} == 0)) || die "the run left these in $tmp_dir (tests remove what they create): ${new[*]}"
}

step() { # step NAME: prints a banner and the elapsed time of the previous step
  local now
  now=$(date +%s)
  if [[ -n "${current:-}" ]]; then
    echo "=== $current: ok ($((now - started))s)"
  fi
  current="$1"
  started=$now
  echo "=== $1"
}

# Background builds, for a cold machine (each is a quick no-op once cached): started at nice 19,
# so the foreground steps keep the CPUs whenever they want them, and the build fills the time
# they leave idle (test runs, waits on processes). `await NAME` waits for one and prints how long
# it took; the foreground steps that need its products come after the wait.
declare -A bg_pid=() bg_log=()
background() { # NAME CMD...: CMD (a command or a function) at nice 19, its output in a log
  local name=$1
  shift
  bg_log[$name]=$(mktemp "${TMPDIR:-/tmp}/switchboard-$name.XXXXXX")
  (
    renice -n 19 -p "$BASHPID" >/dev/null
    t0=$SECONDS
    "$@"
    echo "$name: ready in $((SECONDS - t0))s (built in the background)"
  ) >"${bg_log[$name]}" 2>&1 &
  bg_pid[$name]=$!
}
kill_tree() { # PID: it and its descendants
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
# A run that stops early (a failed step) leaves no build behind, nor their logs.
trap 'for pid in "${bg_pid[@]}"; do kill_tree "$pid"; done; rm -f "${bg_log[@]}"' EXIT
await() { # NAME: wait for a background build; fails with its log if it failed
  local name=$1
  [[ -n "${bg_pid[$name]:-}" ]] || return 0
  if wait "${bg_pid[$name]}"; then
    tail -n 1 "${bg_log[$name]}"
    rm -f "${bg_log[$name]}"
    unset "bg_log[$name]"
  else
    tail -n 60 "${bg_log[$name]}" >&2
    local log=${bg_log[$name]}
    unset "bg_log[$name]" # kept for reading
    die "the background build $name failed (its log: $log)"
  fi
  unset "bg_pid[$name]"
}
# What the e2e tests start besides the workspace's binaries: Go builds that take minutes cold.
e2e_tools() {
  set -e
  "$root/tests/setup-jaeger.sh" >/dev/null
  "$root/tests/setup-prometheus.sh" >/dev/null
}
# What the suites build (Kubernetes binaries with the node's and the oldest API server, the
# images' static binaries, actionlint, glua, the node's test images): most of an hour cold.
suite_tools() {
  set -e
  "$root/tests/k8s/build-binaries.sh" --node >/dev/null
  "$root/tests/k8s/build-binaries.sh" --oldest >/dev/null
  "$root/tests/setup-go-tool.sh" actionlint >/dev/null
  "$root/tests/setup-go-tool.sh" glua >/dev/null
  "$root/tests/node/setup-tools.sh" >/dev/null
  CONTAINERS_CONF="$("$root/tests/images/setup-tools.sh")" \
    "$root/tests/images/build.sh" --engine buildah --for-tests >/dev/null
  "$root/tests/node/test-images.sh" >/dev/null
  "$root/tests/node/stdio-images.sh" >/dev/null
}

all_steps=(fmt layering clippy doc unit fuzz build e2e suites)
if (($# > 0)); then
  wanted=("$@")
else
  wanted=("${all_steps[@]}")
fi
wants() {
  local s
  for s in "${wanted[@]}"; do [[ "$s" == "$1" ]] && return 0; done
  return 1
}
# Check the names first; a suite named on the command line needs the venv too.
suite_named=false
for s in "${wanted[@]}"; do
  [[ " ${all_steps[*]} " == *" $s "* ]] || suite_named=true
  [[ " ${all_steps[*]} " == *" $s "* || -f "$root/tests/suites.d/$s.sh" ]] \
    || die "unknown step '$s' (steps: ${all_steps[*]}; suites: tests/suites.d/*.sh)"
done

if wants fmt || wants layering || wants clippy || wants doc || wants unit || wants fuzz || wants build; then
  need cargo "install the Rust toolchain (https://rustup.rs; rust-toolchain per Cargo.toml rust-version)"
fi
if wants fmt; then
  cargo fmt --version >/dev/null 2>&1 || die "cargo fmt is missing: rustup component add rustfmt"
  step fmt
  cargo fmt --all -- --check || die "formatting differs: run cargo fmt --all"
fi
if wants layering; then
  need python3 "install Python 3.10 or newer (Debian: apt-get install python3)"
  step layering
  python3 tests/layering.py --self-test
fi
# The full run builds the e2e step's Go tools while the Rust steps compile and test.
if wants e2e && (wants clippy || wants unit || wants fuzz || wants build); then
  background e2e-tools e2e_tools
fi
if wants clippy; then
  cargo clippy --version >/dev/null 2>&1 || die "cargo clippy is missing: rustup component add clippy"
  step clippy
  cargo clippy --workspace --all-targets -- -D warnings
fi
if wants doc; then
  step doc
  RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links -D rustdoc::private_intra_doc_links" \
    cargo doc --workspace --no-deps --document-private-items
fi
if wants unit; then
  step unit
  cargo test --workspace -- --skip fuzz::
fi
if wants fuzz; then
  step fuzz
  # --workspace, not -p switchboard-gateway: the same features as the unit step, so its test
  # binaries are reused instead of the gateway's tree being compiled again (other crates have
  # no fuzz:: tests and run none).
  cargo test --workspace --lib fuzz:: -- --nocapture
fi
if wants build; then
  step build
  cargo build --workspace --bins
fi

venv=""
if wants e2e || wants suites || $suite_named; then
  need python3 "install Python 3.10 or newer (Debian: apt-get install python3 python3-venv)"
  step python-venv
  venv="$("$root/tests/setup-python.sh")"
  export SWITCHBOARD_VENV="$venv"
fi
if wants e2e; then
  need node "install Node.js 20 or newer with npm (Debian: apt-get install nodejs npm)"
  step node-client
  SWITCHBOARD_NODE="$("$root/tests/setup-node.sh")"
  export SWITCHBOARD_NODE
  need npm "install npm alongside Node.js (Debian: apt-get install npm); the Claude Code CLI comes from the npm registry"
  step claude-cli
  SWITCHBOARD_CLAUDE="$("$root/tests/setup-claude.sh")"
  export SWITCHBOARD_CLAUDE
  # The identity provider of the sign-in tests (tests/e2e/keycloak.py calls it again: a no-op).
  step keycloak
  "$root/tests/setup-keycloak.sh" >/dev/null
  # The trace backend of the tracing tests, built from Go modules once (tests/e2e/jaeger.py
  # starts it and calls this again: a no-op). Instant when cached.
  step jaeger
  await e2e-tools
  "$root/tests/setup-jaeger.sh" >/dev/null
  # Prometheus and promtool, built from Go modules once (tests/e2e/prometheus.py starts the
  # server; tests/suites.d/45-prometheus-rules.sh runs promtool). Instant when cached.
  step prometheus
  "$root/tests/setup-prometheus.sh" >/dev/null
  # The real stdio MCP servers the stdio-bridge tests run (npm and PyPI, pinned; the test
  # module calls this again: a no-op). Its own step, so a cold install shows in the timings.
  step stdio-servers
  "$root/tests/setup-stdio-servers.sh" >/dev/null
  step e2e
  # The full run builds what the suites need while the e2e tests run (they leave the CPUs idle
  # much of the time); the suites wait for it.
  if wants suites; then background suite-tools suite_tools; fi
  # --durations: the slowest tests of each run, for whoever next has to shorten the step.
  # shellcheck disable=SC2086 # PYTEST_ARGS is a list of words on purpose
  "$venv/bin/python" -m pytest "$root/tests/e2e" -q --durations=15 ${PYTEST_ARGS:-}
fi

# Later suites (hook). Run all of them with the `suites` step, or one by its name.
shopt -s nullglob
for suite in "$root"/tests/suites.d/*.sh; do
  name="$(basename "$suite" .sh)"
  if wants suites || wants "$name"; then
    if [[ -n "${bg_pid[suite-tools]:-}" ]]; then
      step "suite tools (the rest of the background build)"
      await suite-tools
    fi
    step "suite $name"
    bash "$suite"
  fi
done

left_in_tmp
step done
echo "run-all.sh: all requested steps passed"
