# shellcheck shell=bash
# The one Rust build of the test command, sourced by tests/run-all.sh, the suites and
# tests/images/build.sh so they all name the same binaries.
#
# Every cargo step of the run (clippy, unit, fuzz, build) builds for the host's target triple
# named explicitly, with the C runtime linked statically (+crt-static): the unit tests, the
# binaries the end-to-end tests run and the binaries in the test images are one compilation of
# every dependency instead of three (a host build, the same again with other features, and a
# separate static build for the images took 10 of a cold run's minutes). With the triple
# named, cargo applies the flag to the target only: build scripts and proc-macros stay ordinary
# host binaries.
#
#   CARGO_TARGET_DIR     the shared build directory (outside the checkout, reused by clones)
#   CARGO_BUILD_TARGET   the host triple
#   SWITCHBOARD_BIN_DIR  where the workspace's binaries are: $CARGO_TARGET_DIR/<triple>/debug
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/target}"
if [[ -z "${CARGO_BUILD_TARGET:-}" ]] && command -v rustc >/dev/null 2>&1; then
  CARGO_BUILD_TARGET="$(rustc -vV | sed -n 's/^host: //p')"
fi
export CARGO_BUILD_TARGET="${CARGO_BUILD_TARGET:-x86_64-unknown-linux-gnu}"
_sb_triple_var="CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$CARGO_BUILD_TARGET")_RUSTFLAGS"
export "$_sb_triple_var=${!_sb_triple_var:--C target-feature=+crt-static}"
unset _sb_triple_var
export SWITCHBOARD_BIN_DIR="${SWITCHBOARD_BIN_DIR:-$CARGO_TARGET_DIR/$CARGO_BUILD_TARGET/debug}"

# The workspace's debug binaries, built with the test targets (`--tests`): a build with test
# targets resolves features as `cargo test` does, so the binaries reuse the libraries the unit
# step compiled instead of compiling every workspace crate a second time with the shipped
# feature set (the build step took 39-42 s in whole runs after a change to the core crate; 3 s
# by hand after `cargo test`; run alone, it compiles the test targets as well). The binaries then
# carry what the dev-dependencies turn on (tokio's paused clock, PEM key readers, the in-process
# test upstream): tests/dev_features.py checks first that this is only features that add API
# the binaries never call, and names any other. (The images the release workflow ships are
# built apart, tests/images/build.sh --profile release, with the shipped features.)
build_test_binaries() {
  python3 "$(dirname "${BASH_SOURCE[0]}")/dev_features.py" --self-test &&
    cargo build --workspace --bins --tests "$@"
}
