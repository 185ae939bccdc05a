#!/usr/bin/env bash
# Builds the images of real stdio MCP servers the one-node suite runs with McpServer spec.run,
# and prints their archive paths, one per line:
#
#   switchboard.test/stdio-everything:local   @modelcontextprotocol/server-everything (npm), run
#                                             as `node /app/node_modules/.bin/mcp-server-everything`;
#                                             also @modelcontextprotocol/server-memory (npm, a
#                                             stateful server), `node /memory/node_modules/
#                                             @modelcontextprotocol/server-memory/dist/index.js`
#   switchboard.test/stdio-time:local         mcp-server-time (PyPI), `/opt/time/bin/mcp-server-time`
#
# No base image can be pulled here: the base is a root filesystem built from Debian's packages
# with mmdebstrap (Debian 13 "trixie", minbase: its nodejs is 20, which the npm server needs;
# python3 with venv), and the servers go on top of it, pinned as tests/setup-stdio-servers.sh
# pins them (the npm lock; the PyPI freeze, installed by the base's own pip in a chroot hook).
# Both images run as the non-root user 65532, as the operator's restricted default asks.
# Archives are cached in ${SWITCHBOARD_CACHE}/node-images, keyed by the content of these
# inputs, so a warm run only checks them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}"
out="$cache/node-images"
die() { echo "node/stdio-images.sh: $*" >&2; exit 1; }
mkdir -p "$out"
# shellcheck source=tests/build-lock.bash
source "$root/tests/build-lock.bash"
build_lock "$out/.stdio-images.lock" "these images"
"$root/tests/install-packages.sh" mmdebstrap=mmdebstrap buildah=buildah >&2 || die "could not install mmdebstrap/buildah"
servers="$("$root/tests/setup-stdio-servers.sh")" || die "tests/setup-stdio-servers.sh failed"
npm_dir="$(dirname "$(dirname "$(dirname "$(awk -F'\t' '$1=="everything"{print $2}' <<<"$servers")")")")"
[[ -d "$npm_dir/node_modules/@modelcontextprotocol/server-everything" ]] || die "no server-everything in $npm_dir"
memory_dir="$(dirname "$(dirname "$(dirname "$(awk -F'\t' '$1=="memory"{print $2}' <<<"$servers")")")")"
[[ -d "$memory_dir/node_modules/@modelcontextprotocol/server-memory" ]] || die "no server-memory in $memory_dir"

suite=trixie
packages=nodejs,python3,python3-venv,ca-certificates,tzdata
key="$(
  {
    echo "$suite $packages"
    cat "$0" "$root/tests/stdio-servers/package-lock.json" "$root/tests/stdio-servers/memory/package-lock.json" \
      "$root/tests/stdio-servers/requirements-time.txt"
  } | sha256sum | cut -c1-12
)"
everything="$out/stdio-everything-$key.tar"
time_image="$out/stdio-time-$key.tar"
if [[ -s "$everything" && -s "$time_image" ]]; then
  echo "$everything"
  echo "$time_image"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/switchboard-stdio-images.XXXXXX")
trap 'rm -rf "$work"' EXIT
# The base root filesystem, and the PyPI server installed into it by its own python.
cp "$root/tests/stdio-servers/requirements-time.txt" "$work/requirements-time.txt"
# pip in the chroot downloads with the CAs this machine trusts (a proxy's CA, say), not only
# Debian's; the bundle is removed from the image afterwards.
host_ca="${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}"
[[ -s "$host_ca" ]] || die "no CA bundle at $host_ca (set SSL_CERT_FILE)"
cp "$host_ca" "$work/host-ca.crt"
echo "node/stdio-images.sh: building a Debian $suite root filesystem (mmdebstrap)" >&2
mmdebstrap --variant=minbase --include="$packages" --mode=root --quiet \
  --customize-hook="copy-in $work/requirements-time.txt $work/host-ca.crt /tmp" \
  --customize-hook='chroot "$1" python3 -m venv /opt/time' \
  --customize-hook='chroot "$1" env PIP_CERT=/tmp/host-ca.crt SSL_CERT_FILE=/tmp/host-ca.crt REQUESTS_CA_BUNDLE=/tmp/host-ca.crt PIP_FIND_LINKS= /opt/time/bin/pip install --quiet --no-cache-dir --disable-pip-version-check -r /tmp/requirements-time.txt' \
  --customize-hook='rm -f "$1/tmp/requirements-time.txt" "$1/tmp/host-ca.crt"; rm -rf "$1/var/cache/apt/archives"/*.deb "$1/var/lib/apt/lists"/*' \
  "$suite" "$work/rootfs.tar" http://deb.debian.org/debian >&2 || die "mmdebstrap failed (Debian's archive must be reachable)"

# shellcheck source=tests/node/oci-archive.bash
source "$here/oci-archive.bash"

ctx="$work/everything"
mkdir -p "$ctx/app"
cp "$work/rootfs.tar" "$ctx/"
cp -a "$npm_dir/node_modules" "$npm_dir/package.json" "$ctx/app/"
mkdir -p "$ctx/memory"
cp -a "$memory_dir/node_modules" "$memory_dir/package.json" "$ctx/memory/"
cat >"$ctx/Containerfile" <<'EOF'
FROM scratch
ADD rootfs.tar /
COPY app /app
COPY memory /memory
USER 65532:65532
WORKDIR /app
ENTRYPOINT ["node", "/app/node_modules/.bin/mcp-server-everything"]
EOF
oci_archive switchboard.test/stdio-everything:local "$everything" "$ctx"

ctx="$work/time"
mkdir -p "$ctx"
mv "$work/rootfs.tar" "$ctx/"
cat >"$ctx/Containerfile" <<'EOF'
FROM scratch
ADD rootfs.tar /
USER 65532:65532
ENTRYPOINT ["/opt/time/bin/mcp-server-time"]
EOF
oci_archive switchboard.test/stdio-time:local "$time_image" "$ctx"
echo "$everything"
echo "$time_image"
