#!/usr/bin/env bash
# Builds Switchboard's images: static binaries (cargo, x86_64 gnu target with +crt-static; release
# by default), then one image per binary from ./Containerfile, tagged with the chart's names
# and the crate version (the chart's appVersion), so `helm install` finds them:
#
#   ghcr.io/switchboard-dev/switchboard-gateway:<version>          (target gateway; holds the stdio bridge too)
#   ghcr.io/switchboard-dev/switchboard-operator:<version>         (target operator)
#   ghcr.io/switchboard-dev/switchboard-example-upstream:<version> (target example-upstream)
#   ghcr.io/switchboard-dev/switchboard-scripted-provider:<version> (target scripted-provider)
#
#   tests/images/build.sh [--engine buildah|podman|docker] [--archives DIR] [--profile NAME | --for-tests]
#
# --profile NAME: the cargo profile of the binaries (default `release`, what the release workflow
# ships), built into ${SWITCHBOARD_CACHE:-~/.cache/switchboard}/target-static. --for-tests: the
# test command's own build (tests/build-env.bash: the workspace's debug binaries, statically
# linked for the same target the unit tests run on), so the suites' images cost no compilation of
# their own; it builds them first if they are missing or stale (a no-op after the `build` step).
# SWITCHBOARD_IMAGE_PROFILE=release (or any profile) makes --for-tests build that profile instead.
# --archives DIR also writes each image as an OCI archive DIR/<name>.tar (for `ctr images
# import`). The engine defaults to the first of buildah, podman, docker found. The build context
# is a scratch directory holding only Containerfile and dist/.
#
# An image (or an archive) is built again only when what it is built from changed: the build
# context's digest (the stripped binaries, Containerfile, version, architecture) is kept beside
# the engine's image ID in ${SWITCHBOARD_CACHE:-~/.cache/switchboard}/images/, and beside each
# archive; and so that a check need not strip and hash the binaries again, the digest is kept
# beside a quick key of them (their size, inode and modification time). The images suite and the
# one-node suite both ask for the same images (tests/images/suite-images.sh), which
# tests/run-all.sh has built during the e2e step: their asking is then a check of a second or
# two. One build at a time (a lock there).
# Prints each image's size.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cache="${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}"
engine=""
archives=""
profile=release
while [[ $# -gt 0 ]]; do
  case "$1" in
    --engine) engine="$2"; shift 2 ;;
    --archives) archives="$2"; shift 2 ;;
    --profile) profile="$2"; shift 2 ;;
    --for-tests) profile="${SWITCHBOARD_IMAGE_PROFILE:-test-build}"; shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$engine" ]]; then
  for e in buildah podman docker; do
    if command -v "$e" >/dev/null; then engine="$e"; break; fi
  done
fi
[[ -n "$engine" ]] || { echo "build.sh: no image builder: install buildah (Debian: apt-get install buildah), podman or docker" >&2; exit 1; }

version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
[[ -n "$version" ]] || { echo "build.sh: no version in Cargo.toml" >&2; exit 1; }
arch=amd64
bins=(switchboard-gateway switchboard-stdio-bridge switchboard-operator switchboard-example-upstream switchboard-scripted-provider)
if [[ "$profile" == test-build ]]; then
  # shellcheck source=tests/build-env.bash
  source "$root/tests/build-env.bash"
  dist_dir="$SWITCHBOARD_BIN_DIR"
  echo "build.sh: the test command's static debug binaries ($dist_dir)" >&2
  # tests/run-all.sh sets SWITCHBOARD_TEST_BINARIES_BUILT after its build step: cargo need not
  # be asked again (its check of the feature sets and of the sources takes seconds on a busy machine)
  if [[ "${SWITCHBOARD_TEST_BINARIES_BUILT:-}" != 1 ]]; then
    (cd "$root" && build_test_binaries --locked >&2)
  fi
else
  target=x86_64-unknown-linux-gnu
  export CARGO_TARGET_DIR="$cache/target-static"
  packages=()
  for b in "${bins[@]}"; do packages+=(-p "$b"); done
  echo "build.sh: static binaries (profile $profile, $target, +crt-static) into $CARGO_TARGET_DIR" >&2
  (cd "$root" && RUSTFLAGS="-C target-feature=+crt-static" cargo build --profile "$profile" --locked --target "$target" "${packages[@]}" >&2)
  dist_dir="$CARGO_TARGET_DIR/$target/$profile"
fi

context=""
trap '[[ -z "$context" ]] || rm -rf "$context"' EXIT
make_context() { # the build context (Containerfile and the stripped binaries); sets $inputs, its digest
  context="$(mktemp -d "${TMPDIR:-/tmp}/switchboard-images.XXXXXX")"
  mkdir -p "$context/dist/$arch"
  cp "$root/Containerfile" "$context/"
  local b headers
  for b in "${bins[@]}"; do
    install -m 0755 "$dist_dir/$b" "$context/dist/$arch/$b"
    # The release profile keeps line tables for profiling, debug builds all of DWARF; images carry
    # the symbols, not the DWARF.
    strip --strip-debug "$context/dist/$arch/$b"
    # A dynamically linked binary names its loader (an INTERP program header): FROM scratch has none.
    headers="$(readelf --program-headers "$context/dist/$arch/$b")" ||
      { echo "build.sh: cannot read $b with readelf (binutils)" >&2; exit 1; }
    if grep -q INTERP <<<"$headers"; then
      echo "build.sh: $b is dynamically linked; the images need static binaries" >&2
      exit 1
    fi
  done
  # What every image is built from (the context holds nothing else) and under which arguments.
  inputs="$( (cd "$context" && find . -type f -print0 | sort -z | xargs -0 sha256sum; echo "$version $arch $engine") |
    sha256sum | cut -d' ' -f1)"
}

stamps="$cache/images"
mkdir -p "$stamps"
exec 9>"$stamps/.lock"
flock 9
# The digest needs the stripped binaries (16-19 s of stripping and hashing while the suites start,
# in each suite that asks). A quick key stands for it: the binaries' and Containerfile's paths,
# inodes and modification times (cargo writes a binary anew whenever it changes), the version,
# architecture and engine; when it is the one kept with the last digest, that digest is this
# one, and the context is made only if an image or archive must be built.
quick_key="$( (for f in "${bins[@]/#/$dist_dir/}" "$root/Containerfile"; do stat -c '%n %s %i %y' "$f"; done
  echo "$version $arch $engine") | sha256sum | cut -d' ' -f1)"
quick="$stamps/$engine.quick"  # one line: <quick key> <inputs>
inputs=""
if [[ -f "$quick" ]]; then
  read -r kept_key kept_inputs <"$quick" || true
  [[ "${kept_key:-}" == "$quick_key" ]] && inputs="${kept_inputs:-}"
fi
if [[ -z "$inputs" ]]; then
  make_context
  echo "$quick_key $inputs" >"$quick"
fi
build() { # <target> <image>
  case "$engine" in
    buildah) buildah bud --quiet --layers=false --target "$1" --build-arg "VERSION=$version" \
               --build-arg "TARGETARCH=$arch" -f "$context/Containerfile" -t "$2" "$context" >/dev/null ;;
    *) "$engine" build --quiet --target "$1" --build-arg "VERSION=$version" \
         --build-arg "TARGETARCH=$arch" -f "$context/Containerfile" -t "$2" "$context" >/dev/null ;;
  esac
}

image_id() { # <image>: the engine's ID of it, empty when it has none by that name
  case "$engine" in
    buildah) buildah inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null || true ;;
    *) "$engine" image inspect --format '{{.Id}}' "$1" 2>/dev/null || true ;;
  esac
}

stamp="$stamps/$engine.built"  # lines: <target> <inputs> <image id>
touch "$stamp"
for t in gateway operator example-upstream scripted-provider; do
  image="ghcr.io/switchboard-dev/switchboard-$t:$version"
  id="$(image_id "$image")"
  if [[ -n "$id" ]] && grep -qxF "$t $inputs $id" "$stamp"; then
    kept=" (unchanged: built before from the same binaries)"
  else
    kept=""
    [[ -n "$context" ]] || make_context
    build "$t" "$image"
    id="$(image_id "$image")"
    { grep -v "^$t " "$stamp" || true; echo "$t $inputs $id"; } >"$stamp.new"
    mv "$stamp.new" "$stamp"
  fi
  size="$("$engine" images --format '{{.Size}}' "$image" 2>/dev/null | head -1)"
  echo "$image  $size$kept"
  if [[ -n "$archives" ]]; then
    mkdir -p "$archives"
    tar_file="$archives/switchboard-$t.tar"
    if [[ -f "$tar_file" && "$(cat "$tar_file.built" 2>/dev/null)" == "$inputs $id" ]]; then
      continue
    fi
    rm -f "$tar_file.built"
    case "$engine" in
      docker) docker save -o "$tar_file" "$image" ;;
      *) rm -f "$tar_file"; "$engine" push --quiet "$image" "oci-archive:$tar_file:$image" ;;
    esac
    echo "$inputs $id" >"$tar_file.built"
  fi
done
