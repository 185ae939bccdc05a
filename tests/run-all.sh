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
#           operator/, crds/), each printed with its edges; first the planted cycles of its
#           self-test must be reported (--self-test)
#   clippy  cargo clippy --workspace --all-targets -- -D warnings
#   doc     cargo doc --workspace --no-deps --document-private-items, every intra-doc link checked
#           (a link to an item that does not exist fails the step, private modules' docs too);
#           with other steps, built in the background (its own build directory) and awaited
#           at the end of the run
#   unit    cargo test --workspace (without the fuzz targets)
#   fuzz    the gateway's property-based fuzz targets (gateway/src/fuzz.rs), printing how many
#           inputs each tried: SWITCHBOARD_FUZZ_CASES per target (default 3,000; raise it to run
#           longer)
#   build   cargo build --workspace --bins --tests: the debug binaries every later step runs, and
#           the images' binaries (tests/build-env.bash: one static build for all of them, with
#           the unit step's libraries; tests/dev_features.py checks what the test features add)
#   e2e     tests/setup-python.sh, tests/setup-node.sh, tests/setup-claude.sh (the Claude Code
#           CLI), tests/setup-keycloak.sh (Keycloak and its Java runtime), tests/setup-jaeger.sh
#           (the Jaeger v2 trace backend, from Go modules) and tests/setup-prometheus.sh
#           (Prometheus and promtool, from Go modules), tests/setup-stdio-servers.sh (real stdio
#           MCP servers from npm and PyPI), tests/setup-conformance.sh (the MCP conformance suite
#           and its Node.js, from npm), then pytest tests/e2e in parallel workers
#           (SWITCHBOARD_E2E_WORKERS, default 3), and last, in a pytest of its own, the tests
#           marked `last` (the grep of every gateway log of the run for secrets)
#   suites  every tests/suites.d/*.sh, in name order   (hook for later suites, e.g. Kubernetes e2e)
#
# At the end (also after a failure) it prints a table of every step's time, and checks that the
# run left nothing of its own in the temp directory.
#
# On a cold machine most of the time is compiling: the workspace once (tests/build-env.bash), and
# tools from Go modules. The full run builds the tools in the background at nice 19 from the start
# (Jaeger and Prometheus for the e2e step first; then the Kubernetes binaries, the oldest API
# server, actionlint, glua, the node's components and images for the suites, and the docs), so
# the foreground steps keep the CPUs whenever they want them and the builds fill what they leave
# idle. The e2e step waits for its tools ("e2e-tools: ready in …"); the suites start when the e2e
# step ends, each suite waiting only for the tools it asks for, while the rest go on building
# beside them ("suite-tools: ready in …", printed after the suites).
#
# Later suites: drop an executable script into tests/suites.d/ (e.g. 50-kubernetes.sh). It runs
# from the repository root after the e2e step, with SWITCHBOARD_VENV set to the test venv and the
# debug binaries built; a non-zero exit fails the run. Name one on the command line to run just
# it: tests/run-all.sh 50-kubernetes.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# The one build every step uses (CARGO_TARGET_DIR outside the checkout, so a fresh clone on a warm
# machine reuses earlier builds; the host triple with a static C runtime; SWITCHBOARD_BIN_DIR).
# shellcheck source=tests/build-env.bash
source "$root/tests/build-env.bash"

die() { echo "run-all.sh: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found: $2"; }

# ---- steps and their times ------------------------------------------------------------------
run_started=$(date +%s)
step_names=()
step_secs=()
current=""
started=$run_started
step_end() { # records the running step's time
  if [[ -n "$current" ]]; then
    local now
    now=$(date +%s)
    step_names+=("$current")
    step_secs+=($((now - started)))
    echo "=== $current: ${1:-ok} ($((now - started))s)"
    current=""
  fi
}
step() { # step NAME: ends the previous step, starts NAME
  step_end
  current="$1"
  started=$(date +%s)
  echo "=== $1"
}
print_times() {
  local i total=$(( $(date +%s) - run_started ))
  echo "=== step times"
  for i in "${!step_names[@]}"; do
    awk -v n="${step_names[$i]}" -v s="${step_secs[$i]}" 'BEGIN { printf "  %-48s %6ds %6.1f min\n", n, s, s / 60 }'
  done
  awk -v s="$total" 'BEGIN { printf "  %-48s %6ds %6.1f min\n", "whole run", s, s / 60 }' 
}
trap 'echo "run-all.sh: step ${current:-?} FAILED (exit $?)" >&2' ERR

# ---- what the run leaves in the temp directory ------------------------------------------------
tmp_root="${TMPDIR:-/tmp}"
tmp_before=$(mktemp "$tmp_root/switchboard-run-all.XXXXXX")
ls -A "$tmp_root" | sort >"$tmp_before"
# SWITCHBOARD_TMP_IGNORE: glob patterns (space-separated) of entries other programs on a shared
# machine may create meanwhile; none by default.
tmp_left() { # what is in the temp directory now and was not at the start (the run's leftovers)
  local entry pattern patterns
  read -ra patterns <<<"${SWITCHBOARD_TMP_IGNORE:-}"
  while IFS= read -r entry; do
    for pattern in "${patterns[@]}"; do
      # shellcheck disable=SC2053 # a glob on purpose
      [[ "$entry" == $pattern ]] && continue 2
    done
    [[ -n "$entry" ]] && echo "$entry"
  done < <(ls -A "$tmp_root" | sort | comm -13 "$tmp_before" - | grep -vx "$(basename "$tmp_before")")
  return 0
}

# ---- background builds ----------------------------------------------------------------------
# Each runs at nice 19: the foreground steps keep the CPUs whenever they want them, and the build
# fills the time they leave idle (test runs, waits on processes). `await NAME` waits for one and
# prints how long it took; the foreground steps that need its products come after the wait.
declare -A bg_pid=() bg_log=()
background() { # NAME CMD...: CMD (a command or a function) at nice 19, its output in a log
  local name=$1
  shift
  bg_log[$name]=$(mktemp "$tmp_root/switchboard-$name.XXXXXX")
  (
    # Its exit status goes to a file beside its log, which `await` reads: bash forgets the
    # status of a child that ended long ago once a later child gets its pid (the pids wrap
    # within a run on a machine whose pid_max is 32768), and `wait` then says "not a child".
    trap 'echo $? >"${bg_log[$name]}.rc"' EXIT
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
renice_tree() { # PID: it and its descendants at the foreground's priority
  local child
  renice -n 0 -p "$1" >/dev/null 2>&1 || true
  for child in $(pgrep -P "$1" 2>/dev/null); do renice_tree "$child"; done
}
unnice() { # NAME: a background build still running gets the foreground's priority (a step waits on it)
  [[ -n "${bg_pid[$1]:-}" ]] || return 0
  renice_tree "${bg_pid[$1]}"
}
await() { # NAME: wait for a background build; fails with its log if it failed
  local name=$1
  [[ -n "${bg_pid[$name]:-}" ]] || return 0
  wait "${bg_pid[$name]}" 2>/dev/null || true # (its status is read from its file, see background)
  if [[ "$(cat "${bg_log[$name]}.rc" 2>/dev/null)" == 0 ]]; then
    grep '^  tool ' "${bg_log[$name]}" || true
    tail -n 1 "${bg_log[$name]}"
    rm -f "${bg_log[$name]}" "${bg_log[$name]}.rc"
    unset "bg_log[$name]"
  else
    tail -n 60 "${bg_log[$name]}" >&2
    die "the background build $name failed (the end of its log is above)"
  fi
  unset "bg_pid[$name]"
}
finish() { # on exit: stop background builds, print the step table, check the temp directory
  local rc=$?
  trap - ERR
  ((rc == 0)) || step_end "FAILED"
  local name
  for name in "${!bg_pid[@]}"; do kill_tree "${bg_pid[$name]}"; done
  for name in "${!bg_log[@]}"; do rm -f "${bg_log[$name]}" "${bg_log[$name]}.rc"; done
  print_times
  local left
  left=$(tmp_left)
  rm -f "$tmp_before"
  if [[ -n "$left" ]]; then
    echo "run-all.sh: the run left these in $tmp_root (tests must remove what they create):" >&2
    sed 's/^/  /' <<<"$left" >&2
    rc=1
  fi
  exit $rc
}
trap finish EXIT

# One tool of a background build, and a line for `await` to print: how long it took (a wait for
# another process's build of it included) and when it was ready, in seconds since the run began.
tool() { # CMD...
  local t0=$SECONDS
  "$@" >/dev/null
  echo "  tool ${*#"$root/"}: $((SECONDS - t0))s, ready at ${SECONDS}s"
}
# What the e2e tests start besides the workspace's binaries: Go builds that take minutes cold.
e2e_tools() {
  set -e
  # The shared store's tests run Debian's redis-server 7; people connect accounts in Debian's
  # headless chromium (driven through chromium-driver).
  tool "$root/tests/install-packages.sh" redis-server=redis-server redis-cli=redis-tools \
    chromium=chromium chromedriver=chromium-driver
  tool "$root/tests/setup-jaeger.sh"
  tool "$root/tests/setup-prometheus.sh"
}
# What the suites build (Kubernetes binaries with the node's and the oldest API server,
# actionlint, glua, the node's packages, test images and kube-router): most of an hour cold. Debian packages
# first (network, little CPU), then in the order the suites need them: helm and the newest API
# server (every cluster suite), glua (50-kubernetes), the oldest API server (its second pass),
# actionlint (20-release), and what only the one-node suite, the last, needs. The suites do not
# wait for all of it: each asks for its own tools when it starts, and each tool's script waits for
# the build of it under way here (a lock) instead of building it again, so the rest goes on
# building beside the first suites, in the CPU time their waits on clusters leave idle.
suite_tools() {
  set -e
  tool "$root/tests/images/setup-tools.sh"
  tool "$root/tests/node/setup-tools.sh"
  # (--node: the control plane's binaries and the node's in one go build, see build-binaries.sh)
  tool "$root/tests/k8s/build-binaries.sh" --node
  tool "$root/tests/setup-go-tool.sh" glua
  tool "$root/tests/k8s/build-binaries.sh" --oldest
  tool "$root/tests/setup-go-tool.sh" actionlint
  tool "$root/tests/node/test-images.sh"
  tool "$root/tests/node/stdio-images.sh"
  tool "$root/tests/setup-go-tool.sh" kube-router
}
after() { # PID CMD...: CMD once the process PID has ended (a background job after another)
  local pid=$1
  shift
  while kill -0 "$pid" 2>/dev/null; do sleep 2; done
  "$@"
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
# The tools the later steps need, built while the earlier ones run. The e2e step's first: it
# cannot start before they are built, while the suites' builds can go on beside the e2e step and
# the first suites; both at nice 19, the one after the other, so the e2e step's tools get all the
# CPU time the foreground leaves. The documentation build (below) comes after the last of them.
last_tools=""
if wants e2e; then
  background e2e-tools e2e_tools
  last_tools=${bg_pid[e2e-tools]}
fi
if wants suites; then
  if [[ -n "$last_tools" ]]; then background suite-tools after "$last_tools" suite_tools
  else background suite-tools suite_tools; fi
  last_tools=${bg_pid[suite-tools]}
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
if wants clippy; then
  cargo clippy --version >/dev/null 2>&1 || die "cargo clippy is missing: rustup component add clippy"
  step clippy
  cargo clippy --workspace --all-targets -- -D warnings
fi
if wants doc; then
  # In the background, in a build directory of its own (a second cargo in the shared one would
  # wait for its lock), after the tool builds, and awaited at the end of the run (`doc` alone
  # runs it in the foreground): nothing waits for the docs, so on a cold machine they fill what
  # the last suite leaves idle (the one-node suite, waiting on pods, starts when the last tool is
  # built); on a warm one the tools are there and the docs build from the start, as before.
  doc_build() {
    RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links -D rustdoc::private_intra_doc_links" \
      CARGO_TARGET_DIR="$CARGO_TARGET_DIR-doc" cargo doc --workspace --no-deps --document-private-items
  }
  if ((${#wanted[@]} == 1)); then
    step doc
    doc_build
  elif [[ -n "$last_tools" ]]; then
    background doc after "$last_tools" doc_build
  else
    background doc doc_build
  fi
fi
if wants unit; then
  # The store's tests run a real Redis (Debian's redis-server 7) beside the embedded store.
  "$root/tests/install-packages.sh" redis-server=redis-server redis-cli=redis-tools
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
  build_test_binaries
  # (the suites' image builds take these binaries without asking cargo again: tests/images/build.sh)
  export SWITCHBOARD_TEST_BINARIES_BUILT=1
fi
# The suites' images (the images suite's and the one-node suite's, tests/images/suite-images.sh)
# from those binaries, in the background through the e2e step: building them takes ~15 s of CPU
# on an idle machine but 33-100 s at the start of the suites step, whose first minutes are
# CPU-bound, on the way to the one-node suite (the longest chain). At nice 19 it takes what the
# e2e step leaves idle (96 s of its first minutes, measured); the suites then find the images
# built, or wait for this build (build.sh's lock), which the suites step raises to the
# foreground's priority first.
if wants e2e && wants suites; then background suite-images "$root/tests/images/suite-images.sh"; fi

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
  # The real stdio MCP servers the stdio-bridge tests run (npm and PyPI, pinned; the test
  # module calls this again: a no-op). Its own step, so a cold install shows in the timings.
  step stdio-servers
  "$root/tests/setup-stdio-servers.sh" >/dev/null
  # The MCP conformance suite and the Node.js 22 it runs on (npm, pinned; the test module calls
  # this again: a no-op).
  step conformance-suite
  "$root/tests/setup-conformance.sh" >/dev/null
  # The trace backend and Prometheus, built from Go modules in the background since the start
  # (tests/e2e/jaeger.py and prometheus.py call their setup scripts again: a no-op).
  step "e2e tools (the rest of the background build)"
  await e2e-tools
  "$root/tests/setup-jaeger.sh" >/dev/null
  "$root/tests/setup-prometheus.sh" >/dev/null
  step e2e
  # Parallel workers (pytest-xdist), each test placed on whichever worker is free; then the
  # tests marked `last` in a pytest of their own, which read what every worker recorded
  # (SWITCHBOARD_E2E_RECORD: the secrets handed out and the gateway logs written).
  e2e_tmp=$(mktemp -d "$tmp_root/switchboard-e2e.XXXXXX")
  # --durations: the slowest tests of each run, for whoever next has to shorten the step.
  # shellcheck disable=SC2086 # PYTEST_ARGS is a list of words on purpose
  SWITCHBOARD_E2E_RECORD="$e2e_tmp/record" "$venv/bin/python" -m pytest "$root/tests/e2e" -q --durations=15 \
    -n "${SWITCHBOARD_E2E_WORKERS:-3}" --dist worksteal -m "not last" --basetemp "$e2e_tmp/workers" \
    ${PYTEST_ARGS:-} || { rm -rf "$e2e_tmp"; die "the e2e tests failed"; }
  # (exit 5: PYTEST_ARGS selected none of them)
  last_rc=0
  # (only the test_zz_* modules, where conftest.py requires them, are collected for it)
  # shellcheck disable=SC2086
  SWITCHBOARD_E2E_RECORD="$e2e_tmp/record" "$venv/bin/python" -m pytest "$root"/tests/e2e/test_zz_*.py -q -m last \
    --basetemp "$e2e_tmp/last" ${PYTEST_ARGS:-} || last_rc=$?
  rm -rf "$e2e_tmp"
  ((last_rc == 0 || last_rc == 5)) || die "the e2e tests marked last failed"
  rm -rf "$e2e_tmp"
fi

# Later suites (hook). Run all of them with the `suites` step, or one by its name. Most of a suite
# is waiting on what it started (API servers, a node, pods), so the suites run side by side:
# each in a chain of its own, unless its script says `# run-all: chain NAME` (the suites of one
# chain run one after the other, in name order). The chain `clusters` holds 30-images and
# 60-node: the node imports the images 30-images checks (built once). SWITCHBOARD_SUITES_PARALLEL=0
# runs every suite one after the other. A suite's output is printed whole when it ends; its time
# goes into the step table.
#
# A suite whose script says `# run-all: nice N` runs at that priority beside the others. The
# Kubernetes suite says `nice 10`: it runs beside the one-node suite, which keeps the CPU whenever
# it wants it. Side by side at the same priority the two starved each other (on a two-core CI
# machine a Keycloak start took 292 s instead of 70, and the node's call loop saw calls of 4 s
# through a disruption it must pass without a loss), so the node suite used to run after the
# Kubernetes one; but each leaves a third to a half of the two cores idle on its own (vmstat of a
# warm run: 33 % idle through the Kubernetes suite, 47 % through the node's), and the Kubernetes
# suite's tests bound their waits generously (they passed with the cores 0-1 % idle), so it takes
# what the node leaves.
#
# A suite whose script says `# run-all: after NAME` starts when the suite NAME has ended (at once
# when NAME is not part of the run), at nice 19. The Helm and rules suites say `after
# 50-kubernetes`: beside the Kubernetes suite they only slowed it; after it they take what the
# one-node suite leaves (waiting on pods), which keeps the CPU whenever it wants it, as it does
# beside the cold run's tool builds.
shopt -s nullglob
suites=()
for suite in "$root"/tests/suites.d/*.sh; do
  name="$(basename "$suite" .sh)"
  if wants suites || wants "$name"; then suites+=("$name"); fi
done
if ((${#suites[@]} > 0)); then
  # Not awaited here: each suite waits for the tools it needs when it asks for them (their
  # scripts' locks), and what the later suites need goes on building beside the first, at the
  # foreground's priority now, since a suite may be waiting on it.
  unnice suite-tools
  unnice suite-images
  step "suites (side by side, in all)"
  suites_dir=$(mktemp -d "$tmp_root/switchboard-suites.XXXXXX")
  declare -A chain_of=() chain_name=() after=() niceness_of=()
  chains=()
  says() { # SUITE WORD: the value of the suite script's `# run-all: WORD VALUE` line, if any
    sed -n "s/^# run-all: $2 \([a-z0-9-]*\)\$/\1/p" "$root/tests/suites.d/$1.sh" | head -n1
  }
  for name in "${suites[@]}"; do
    chain=$(says "$name" chain)
    chain=${chain:-$name}
    [[ "${SWITCHBOARD_SUITES_PARALLEL:-1}" == 1 ]] || chain=all
    [[ -n "${chain_of[$chain]:-}" ]] || chains+=("$chain")
    chain_of[$chain]+=" $name"
    chain_name[$name]=$chain
    # the suite this one waits for (`# run-all: after OTHER`), if it is part of this run
    other=$(says "$name" after)
    [[ -n "$other" && " ${suites[*]} " == *" $other "* && "${SWITCHBOARD_SUITES_PARALLEL:-1}" == 1 ]] && after[$name]=$other
    # its priority beside the others (`# run-all: nice N`), when they run side by side
    niceness=$(says "$name" nice)
    [[ "$niceness" =~ ^[0-9]*$ ]] || niceness=
    [[ -n "$niceness" && "${SWITCHBOARD_SUITES_PARALLEL:-1}" == 1 ]] && niceness_of[$name]=$niceness
  done
  for name in "${!after[@]}"; do # (a wait for a suite of one's own chain would never end)
    if [[ "${chain_name[${after[$name]}]}" == "${chain_name[$name]}" ]]; then
      rm -rf "$suites_dir"
      die "tests/suites.d/$name.sh: '# run-all: after ${after[$name]}' names a suite of its own chain"
    fi
  done
  run_chain() { # SUITES...: one after the other; each writes NAME.log, NAME.secs and NAME.rc
    local name t0 rc niceness
    for name in "$@"; do
      niceness=${niceness_of[$name]:-0}
      if [[ -n "${after[$name]:-}" ]]; then
        while [[ ! -f "$suites_dir/${after[$name]}.rc" ]]; do sleep 2; done
        niceness=19
      fi
      t0=$(date +%s)
      rc=0
      # (a failed suite does not end its chain: each suite builds what it needs itself, so the
      # ones after it still say what they found)
      nice -n "$niceness" bash "$root/tests/suites.d/$name.sh" >"$suites_dir/$name.log" 2>&1 || rc=$?
      echo $(( $(date +%s) - t0 )) >"$suites_dir/$name.secs"
      echo "$rc" >"$suites_dir/$name.rc"
    done
  }
  chain_pids=()
  for chain in "${chains[@]}"; do
    # shellcheck disable=SC2086 # the chain's suites, one word each
    run_chain ${chain_of[$chain]} &
    chain_pids+=($!)
  done
  # (each suite's result is in its .rc file; a chain that ended long ago may no longer be known
  # to `wait`, as with the background builds)
  for pid in "${chain_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  suites_failed=()
  for name in "${suites[@]}"; do
    [[ -f "$suites_dir/$name.rc" ]] || continue
    echo "=== suite $name ($(cat "$suites_dir/$name.secs")s)"
    cat "$suites_dir/$name.log"
    step_names+=("  suite $name")
    step_secs+=("$(cat "$suites_dir/$name.secs")")
    [[ "$(cat "$suites_dir/$name.rc")" == 0 ]] || suites_failed+=("$name")
  done
  rm -rf "$suites_dir"
  ((${#suites_failed[@]} == 0)) || die "suites failed: ${suites_failed[*]}"
  await suite-images  # long done (the suites waited for it): its time, and its failure if it failed
  await suite-tools   # likewise (the last suite waited for its last tools)
fi
if [[ -n "${bg_pid[doc]:-}" ]]; then
  step "doc (built in the background)"
  unnice doc
  await doc
fi

step_end
echo "run-all.sh: all requested steps passed"
