#!/usr/bin/env bash
# Builds Switchboard's images: static release binaries (cargo, x86_64 gnu target with
# +crt-static), then one image per binary from ./Containerfile, tagged with the chart's names
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
# ships). --for-tests: the test suites' profile, SWITCHBOARD_IMAGE_PROFILE or else `ci-images`
# (Cargo.toml: opt-level 1, no LTO), a cold build in about 60% of the time;
# SWITCHBOARD_IMAGE_PROFILE=release makes the suites test release builds.
#
# --archives DIR also writes each image as an OCI archive DIR/<name>.tar (for `ctr images
# import`). The engine defaults to the first of buildah, podman, docker found. Cargo builds go to
# ${SWITCHBOARD_CACHE:-~/.cache/switchboard}/target-static (apart from the debug target: other
# RUSTFLAGS); the build context is a scratch directory holding only Containerfile and dist/.
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
    --for-tests) profile="${SWITCHBOARD_IMAGE_PROFILE:-ci-images}"; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
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
target=x86_64-unknown-linux-gnu
arch=amd64
export CARGO_TARGET_DIR="$cache/target-static"
bins=(switchboard-gateway switchboard-stdio-bridge switchboard-operator switchboard-example-upstream switchboard-scripted-provider)
packages=()
for b in "${bins[@]}"; do packages+=(-p "$b"); done
echo "build.sh: static binaries (profile $profile, $target, +crt-static) into $CARGO_TARGET_DIR" >&2
(cd "$root" && RUSTFLAGS="-C target-feature=+crt-static" cargo build --profile "$profile" --locked --target "$target" "${packages[@]}" >&2)

context="$(mktemp -d "${TMPDIR:-/tmp}/switchboard-images.XXXXXX")"
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/dist/$arch"
cp "$root/Containerfile" "$context/"
for b in "${bins[@]}"; do
  install -m 0755 "$CARGO_TARGET_DIR/$target/$profile/$b" "$context/dist/$arch/$b"
  # The release profile keeps line tables for profiling; images carry the symbols, not the DWARF.
  strip --strip-debug "$context/dist/$arch/$b"
  # A dynamically linked binary names its loader (an INTERP program header): FROM scratch has none.
  headers="$(readelf --program-headers "$context/dist/$arch/$b")" ||
    { echo "build.sh: cannot read $b with readelf (binutils)" >&2; exit 1; }
  if grep -q INTERP <<<"$headers"; then
    echo "build.sh: $b is dynamically linked; the images need static binaries" >&2
    exit 1
  fi
done

build() { # <target> <image>
  case "$engine" in
    buildah) buildah bud --quiet --layers=false --target "$1" --build-arg "VERSION=$version" \
               --build-arg "TARGETARCH=$arch" -f "$context/Containerfile" -t "$2" "$context" >/dev/null ;;
    *) "$engine" build --quiet --target "$1" --build-arg "VERSION=$version" \
         --build-arg "TARGETARCH=$arch" -f "$context/Containerfile" -t "$2" "$context" >/dev/null ;;
  esac
}

for t in gateway operator example-upstream scripted-provider; do
  image="ghcr.io/switchboard-dev/switchboard-$t:$version"
  build "$t" "$image"
  size="$("$engine" images --format '{{.Size}}' "$image" 2>/dev/null | head -1)"
  echo "$image  $size"
  if [[ -n "$archives" ]]; then
    mkdir -p "$archives"
    case "$engine" in
      docker) docker save -o "$archives/switchboard-$t.tar" "$image" ;;
      *) "$engine" push --quiet "$image" "oci-archive:$archives/switchboard-$t.tar:$image" ;;
    esac
  fi
done
