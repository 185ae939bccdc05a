#!/usr/bin/env python3
"""What the test command's binaries gain from the dev-dependencies, checked against a short list.

The build step builds the workspace's debug binaries together with the test targets
(`cargo build --workspace --bins --tests`, tests/build-env.bash), so that they reuse the
libraries the unit step compiled instead of compiling every workspace crate a second time. A
build with test targets resolves features as `cargo test` does: what a dev-dependency turns on
in a crate the binaries link (tokio's paused clock for the unit tests) is on in the binaries
too. This check keeps that to features that only add API the shipped code never calls, listed
below with why; a dev-dependency that would change how a linked crate behaves (another TLS
provider, another allocator, a logging default) fails the build step, naming the crate and the
feature.

  python3 tests/dev_features.py              # the workspace (cargo tree, about a second)
  python3 tests/dev_features.py --self-test  # first show on planted input that the check can fail, then the workspace
"""

from __future__ import annotations

import re
import subprocess
import sys

# crate -> the features dev-dependencies may add to it, and why each changes nothing the
# binaries do.
ALLOWED: dict[str, set[str]] = {
    # `test-util`: tokio::time::pause/advance and the test clock, called by unit tests only.
    "tokio": {"test-util"},
    # PEM readers for keys the unit tests write as PEM; the binaries read JWKs.
    "jsonwebtoken": {"pem", "simple_asn1", "use_pem"},
    # `std` (std::error::Error for its error) and `sys_rng` (a rand_core adapter): types only.
    "getrandom": {"std", "sys_rng"},
    # The in-process test upstream module (gateway/upstream/src/test_upstream.rs), compiled
    # in and never called by the binaries.
    "switchboard-upstream": {"test-support"},
}

LINE = re.compile(r"^(?P<name>\S+) (?P<version>v\S+)(?: \([^)]*\))?(?: (?P<features>\S*))?$")


def features(tree: str) -> dict[tuple[str, str], set[str]]:
    """`cargo tree -f '{p} {f}' --prefix none` output -> (crate, version) -> features (the
    union over the crate's builds: one for the host, one for the target)."""
    out: dict[tuple[str, str], set[str]] = {}
    for line in tree.splitlines():
        line = line.removesuffix(" (*)").rstrip()
        m = LINE.match(line)
        if not m:
            continue
        feats = {f for f in (m["features"] or "").split(",") if f}
        out.setdefault((m["name"], m["version"]), set()).update(feats)
    return out


def added(shipped: dict, with_dev: dict) -> list[str]:
    """The features dev-dependencies add to crates the binaries link, beyond ALLOWED."""
    wrong = []
    for key, feats in sorted(with_dev.items()):
        if key not in shipped:
            continue  # a crate only dev-dependencies bring: the binaries do not link it
        extra = feats - shipped[key] - ALLOWED.get(key[0], set())
        if extra:
            wrong.append(f"{key[0]} {key[1]}: {', '.join(sorted(extra))}")
    return wrong


def tree(edges: str) -> str:
    return subprocess.run(
        ["cargo", "tree", "--workspace", "-e", edges, "-f", "{p} {f}", "--prefix", "none"],
        check=True, capture_output=True, text=True,
    ).stdout


def self_test() -> None:
    shipped = features("tokio v1.0.0 rt,time\nrustls v0.23.0 ring,std\nserde v1.0.0 std (*)\n"
                       "switchboard-upstream v0.1.0 (/src/gateway/upstream) \n")
    with_dev = features("tokio v1.0.0 rt,test-util,time\nrustls v0.23.0 aws-lc-rs,ring,std\n"
                        "serde v1.0.0 std\nproptest v1.0.0 std\n"
                        "switchboard-upstream v0.1.0 (/src/gateway/upstream) test-support\n")
    got = added(shipped, with_dev)
    assert got == ["rustls v0.23.0: aws-lc-rs"], f"self-test: expected only the planted rustls feature, got {got}"
    assert shipped[("switchboard-upstream", "v0.1.0")] == set(), shipped
    print("dev_features.py self-test: a planted feature is found; listed ones and dev-only crates pass")


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    shipped, with_dev = features(tree("normal,build")), features(tree("normal,build,dev"))
    if not shipped or not with_dev:
        print("dev_features.py: cargo tree printed no crates", file=sys.stderr)
        return 1
    wrong = added(shipped, with_dev)
    if wrong:
        print("dev_features.py: dev-dependencies turn on features in crates the test binaries link, "
              "and they are not in ALLOWED (tests/dev_features.py says why each listed one changes "
              "nothing):", file=sys.stderr)
        for w in wrong:
            print(f"  {w}", file=sys.stderr)
        return 1
    print(f"dev_features.py: dev-dependencies add only listed features to the {len(shipped)} crates the binaries link")
    return 0


if __name__ == "__main__":
    sys.exit(main())
