#!/usr/bin/env bash
# Switchboard benchmarks (issue 3): one command for every scenario the current code supports.
#
#   bench/run.sh                      full run (about 12 minutes on 2 cores, plus a first build)
#   bench/run.sh --quick              short durations, 1 round (about 6 minutes)
#   bench/run.sh --scenarios 1,2,4    only some scenarios (1-2 always run together; 3 and 8 need them)
#   bench/run.sh --rev HEAD           build from a committed revision (git archive into the cache)
#                                     instead of the work tree, e.g. while others edit gateway/
#   bench/run.sh --rate 200 --conc 16 fixed rate of scenario 1, connections of scenario 2
#   bench/run.sh --scenarios 7 --merge  re-run some scenarios into the existing latest.json
#
# Scenarios: 1 overhead, 2 throughput, 3 memory, 4 config scale, 5 fan-out, 6 cold replica,
# 7 propagation (tests/k8s_e2e/propagation.py, when the Kubernetes binaries are cached), 8 LiteLLM
# peer. See BENCHMARKS.md.
#
# What it does: installs oha (cargo install --locked into $SWITCHBOARD_CACHE/tools) if missing,
# builds the release gateway, the example upstream and bench/scale, copies the binaries aside
# (so a concurrent rebuild cannot swap them mid-run), creates the Python venv of the e2e tests
# (tests/setup-python.sh) for the SDK upstream, and runs bench/bench.py. Everything listens on
# 127.0.0.1 only; every load run has a bounded duration or count. Prints the tables and writes
# bench/results/latest.{json,md} (a --quick run writes latest-quick.{json,md}, so it never
# replaces the full figures BENCHMARKS.md quotes). Process logs and configs of each run stay in
# $SWITCHBOARD_CACHE/bench/runs/<time>/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
cache="${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}"
export SWITCHBOARD_CACHE="$cache"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/target}"
tools="$cache/tools"
OHA_VERSION="${OHA_VERSION:-1.16.0}"

rev=""
pass=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rev) rev="$2"; shift 2 ;;
    --rev=*) rev="${1#--rev=}"; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) pass+=("$1"); shift ;;
  esac
done

say() { echo "bench/run.sh: $*" >&2; }

# ---- load generator ------------------------------------------------------------------------
oha="$tools/bin/oha"
if [[ ! -x "$oha" ]]; then
  say "installing oha $OHA_VERSION into $tools (cargo install --locked; ~10 min on 2 cores, once)"
  CARGO_TARGET_DIR="$tools/oha-target" nice -n 10 \
    cargo install oha --locked --version "$OHA_VERSION" --root "$tools" >&2
fi

# ---- source and binaries -------------------------------------------------------------------
if [[ -n "$rev" ]]; then
  sha="$(git -C "$repo" rev-parse --verify "$rev^{commit}")"
  src="$cache/bench/src/$sha"
  if [[ ! -f "$src/Cargo.toml" ]]; then
    say "exporting $rev ($sha) to $src"
    rm -rf "$src"; mkdir -p "$src"
    git -C "$repo" archive --format=tar "$sha" | tar -x -C "$src"
  fi
  # the harness's own crate comes from this checkout (it may not be committed at $rev)
  rm -rf "$src/bench/scale"; mkdir -p "$src/bench"
  cp -r "$here/scale" "$src/bench/scale"
  source_desc="git archive $sha"
  git_rev="$sha"
else
  src="$repo"
  git_rev="$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)"
  dirty="$(git -C "$repo" status --porcelain -- gateway examples Cargo.toml Cargo.lock 2>/dev/null | wc -l)"
  source_desc="work tree at $git_rev ($dirty changed files under gateway/ examples/ Cargo.*)"
  [[ "$dirty" != 0 ]] && git_rev="$git_rev+dirty"
fi

say "building release binaries from $source_desc (target dir $CARGO_TARGET_DIR)"
(cd "$src" && nice -n 5 cargo build --release -p switchboard-gateway -p switchboard-example-upstream >&2)
bindir="$cache/bench/bin/$(date +%Y%m%d-%H%M%S)-$$"
mkdir -p "$bindir"
cp "$CARGO_TARGET_DIR/release/switchboard-gateway" "$CARGO_TARGET_DIR/release/switchboard-example-upstream" "$bindir/"
scale=""
if (cd "$src/bench/scale" && nice -n 5 cargo build --release >&2); then
  cp "$CARGO_TARGET_DIR/release/switchboard-bench-scale" "$bindir/"
  scale="$bindir/switchboard-bench-scale"
else
  say "bench/scale did not build: scenario 4 reports the process measurements only"
fi
# the floor: a bare pass-through proxy on the gateway's stack (issue 12); every figure is a ratio to it
(cd "$here/floor" && nice -n 5 cargo build --release >&2)
cp "$CARGO_TARGET_DIR/release/switchboard-bench-floor" "$bindir/"
# keep only the last few binary sets
ls -1dt "$cache"/bench/bin/*/ 2>/dev/null | tail -n +4 | xargs -r rm -rf

# ---- scenario 7 (propagation) runs tests/k8s_e2e/propagation.py: debug binaries ------------
want_all=1; for a in "${pass[@]}"; do [[ "$a" == --scenarios* ]] && want_all=0; done
if [[ "$want_all" == 1 || " ${pass[*]} " =~ --scenarios[=\ ][^\ ]*7 ]]; then
  if [[ -x "$("$repo/tests/k8s/build-binaries.sh" --bin-dir)/kube-apiserver" ]]; then
    say "scenario 7: building the workspace's debug binaries (operator, gateway) for tests/k8s_e2e/propagation.py"
    (cd "$repo" && nice -n 5 cargo build --workspace --bins >&2) || say "debug build failed: scenario 7 reports it"
  else
    say "scenario 7: no Kubernetes binaries cached (tests/k8s/build-binaries.sh builds them, long): reported as not measured"
  fi
fi

# ---- Python SDK upstream -------------------------------------------------------------------
python=""
if venv="$("$repo/tests/setup-python.sh")"; then
  python="$venv/bin/python"
else
  say "no Python venv: the Python SDK upstream rows are skipped"
fi

# ---- versions ------------------------------------------------------------------------------
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
versions="$(python3 - "$git_rev" "$source_desc" "$("$oha" --version 2>&1 | head -1)" "$(rustc -V)" "$(cargo -V)" "$python" <<'EOF'
import json, subprocess, sys
rev, desc, oha, rustc, cargo, py = sys.argv[1:7]
v = {"gateway git rev": rev, "source": desc, "load generator": oha, "rustc": rustc, "cargo": cargo,
     "python (harness)": sys.version.split()[0]}
if py:
    v["mcp (Python SDK upstream)"] = subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
                                                    capture_output=True, text=True).stdout.strip()
try:
    v["cpu"] = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
except StopIteration:
    pass
print(json.dumps(v))
EOF
)"

cmd="bench/run.sh${rev:+ --rev $rev}${pass[*]:+ ${pass[*]}}"
exec python3 "$here/bench.py" --oha "$oha" --gateway "$bindir/switchboard-gateway" \
  --upstream "$bindir/switchboard-example-upstream" --scale "$scale" --python "$python" \
  --floor "$bindir/switchboard-bench-floor" \
  --versions "$versions" --command "$cmd" "${pass[@]}"
