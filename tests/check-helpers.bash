# The pass/fail helpers of the check-list suites (tests/suites.d/40-helm-chart.sh,
# 45-prometheus-rules.sh), sourced: ok, bad, check (a command succeeds), check_fails (it fails
# and its output matches). Each suite prints "$passed passed, $failed failed" at its end.
# shellcheck shell=bash
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   - $1"; }
bad() { # name [detail...]
  failed=$((failed + 1)); echo "FAIL - $1"
  shift; if (($# > 0)); then printf '%s\n' "$@" | sed 's/^/       /'; fi
}
check() { # name cmd...: the command succeeds
  local name=$1 out; shift
  if out=$("$@" 2>&1); then ok "$name"; else bad "$name" "$out"; fi
}
check_fails() { # name pattern cmd...: the command fails and its output matches pattern
  local name=$1 pattern=$2 out; shift 2
  if out=$("$@" 2>&1); then
    bad "$name" "expected a failure, got success" "$out"
  elif grep -qE -- "$pattern" <<<"$out"; then ok "$name"
  else bad "$name" "failed, but the output lacks /$pattern/:" "$out"; fi
}
