#!/usr/bin/env bash
# The container images (./Containerfile, built by tests/images/build.sh) hold what they promise.
#
#   tests/run-all.sh 30-images        (or: bash tests/suites.d/30-images.sh)
#
# For each image (gateway, operator, example upstream, scripted provider): it is tagged with the
# chart's name and the crate version; its user is 65532:65532 (not root); it holds one file, the
# static binary (no shell, no libraries); it runs with a read-only root filesystem as that user
# (`podman run --read-only`). Then the gateway and example-upstream images serve for real: the
# upstream container behind the gateway container (by the name localhost: the static binary resolves
# names), a REST tools/call through them.
# Prints each image's size. Installs buildah, podman and runc if missing (tests/images/setup-tools.sh).
# run-all: chain clusters
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root" || exit 1
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }
finish() { echo "$passed passed, $failed failed"; [[ $failed -eq 0 ]]; exit $?; }

CONTAINERS_CONF="$(tests/images/setup-tools.sh)" || { bad "tests/images/setup-tools.sh failed"; finish; }
export CONTAINERS_CONF
version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -1)"
started=$(date +%s)
# (the one-node suite's archives too: tests/images/suite-images.sh, often built already by
# tests/run-all.sh during the e2e step)
if built="$(tests/images/suite-images.sh)"; then
  ok "images built in $(($(date +%s) - started)) s:"
  sed 's/^/       /' <<<"$built"
else
  bad "tests/images/suite-images.sh failed"; finish
fi

run_prefix="switchboard-images-test-$$"
# shellcheck disable=SC2317 # called by the trap
cleanup() {
  podman ps -aq --filter "name=$run_prefix" | xargs -r podman rm -f >/dev/null 2>&1
}
trap cleanup EXIT

for t in gateway operator example-upstream scripted-provider; do
  image="ghcr.io/switchboard-dev/switchboard-$t:$version"
  bin="switchboard-$t"
  user="$(buildah inspect --type image --format '{{.OCIv1.Config.User}}' "$image" 2>/dev/null)"
  if [[ "$user" == "65532:65532" ]]; then ok "$t: runs as 65532:65532"; else bad "$t: user is '$user', not 65532:65532"; fi
  entry="$(buildah inspect --type image --format '{{.OCIv1.Config.Entrypoint}}' "$image")"
  if [[ "$entry" == "[$bin]" ]]; then ok "$t: entrypoint $entry"; else bad "$t: entrypoint $entry"; fi
  ctr="$(buildah from --quiet "$image")"
  mnt="$(buildah mount "$ctr")"
  files="$(cd "$mnt" && find . -type f | sort | tr '\n' ' ')"
  buildah umount "$ctr" >/dev/null; buildah rm "$ctr" >/dev/null
  # The gateway's image also carries the stdio bridge (McpServer spec.run pods copy it out).
  want="./usr/local/bin/$bin "
  [[ "$t" == gateway ]] && want="./usr/local/bin/switchboard-gateway ./usr/local/bin/switchboard-stdio-bridge "
  if [[ "$files" == "$want" ]]; then
    ok "$t: holds only its binaries (no shell, no libraries): $files"
  else
    bad "$t: files are: $files"
  fi
  out="$(podman run --rm --name "$run_prefix-$t" --read-only --network none "$image" --version 2>&1)"
  if [[ "$out" == *"$version"* ]]; then ok "$t: runs read-only as non-root: $out"; else bad "$t: --version printed: $out"; fi
  size="$(podman images --format '{{.Size}}' "$image" | head -1)"
  echo "     $image: $size"
done

# What an McpServer spec.run pod's init container does: the bridge copies itself out of the
# gateway's image, and the copy runs (as the pod's server container runs it).
out_dir="$(mktemp -d)"; chmod 0777 "$out_dir"
gateway_image="ghcr.io/switchboard-dev/switchboard-gateway:$version"
if podman run --rm --read-only --network none -v "$out_dir:/switchboard" --entrypoint switchboard-stdio-bridge \
     "$gateway_image" install /switchboard >/dev/null 2>&1 &&
   [[ -x "$out_dir/switchboard-stdio-bridge" ]] &&
   [[ "$("$out_dir/switchboard-stdio-bridge" --version 2>&1)" == *"$version"* ]]; then
  ok "gateway: switchboard-stdio-bridge install DIR copies a bridge that runs"
else
  bad "gateway: switchboard-stdio-bridge install did not leave a working bridge in $out_dir"
fi
rm -rf "$out_dir"

# The gateway image serves, in front of the example-upstream image (host network, loopback).
# Both bind port 0; the test reads the ports they print (podman logs) instead of picking ports.
listening_on() { # CONTAINER PREFIX: the host:port after "PREFIXlistening on http://" in its log
  local addr="" i
  for i in $(seq 1 100); do
    addr=$(podman logs "$1" 2>/dev/null | sed -n "s#^$2listening on http://\([^ /]*\).*#\1#p" | head -n1)
    [[ -n "$addr" ]] && { echo "$addr"; return 0; }
    sleep 0.1
  done
  return 1
}
conf_dir="$(mktemp -d)"
podman run -d --name "$run_prefix-up" --read-only --network host \
  "ghcr.io/switchboard-dev/switchboard-example-upstream:$version" --listen "127.0.0.1:0" >/dev/null
up_addr=$(listening_on "$run_prefix-up" "") || up_addr="no-upstream-address"
up_port=${up_addr##*:}
cat > "$conf_dir/config.yaml" <<CONF
servers:
  - {name: demo, url: "http://localhost:$up_port/mcp", allowAllKeys: true}
keys:
  - {name: k, secret: sk-images-test}
CONF
chmod 0755 "$conf_dir"; chmod 0644 "$conf_dir/config.yaml"
podman run -d --name "$run_prefix-gw" --read-only --network host -v "$conf_dir:/config:ro" \
  "ghcr.io/switchboard-dev/switchboard-gateway:$version" --config /config/config.yaml --listen "127.0.0.1:0" \
  --internal-listen "127.0.0.1:0" >/dev/null
gw_addr=$(listening_on "$run_prefix-gw" "switchboard-gateway ") || gw_addr="no-gateway-address"
answer=""
for _ in $(seq 1 100); do
  answer="$(curl -s -m 2 "http://$gw_addr/mcp-rest/tools/call" -H 'Authorization: Bearer sk-images-test' \
    -d '{"name": "demo__add", "arguments": {"a": 2, "b": 3}}' 2>/dev/null)" && [[ "$answer" == *5* ]] && break
  sleep 0.1
done
if [[ "$answer" == *'"text":"5"'* || "$answer" == *'"result":5'* ]]; then
  ok "the gateway image serves the example-upstream image (by name): tools/call demo__add -> 5"
else
  bad "no answer through the containers: '$answer'"; podman logs "$run_prefix-gw" 2>&1 | tail -20
fi
rm -rf "$conf_dir"
finish
