#!/usr/bin/env bash
# Installs what the one-node cluster (tests/node/node.sh) runs besides the Go-built Kubernetes
# binaries, when missing, from Debian's packages: containerd (1.6) and runc (its runtime; crun
# fails on this kind of machine), iptables (kube-proxy), iproute2 (the node's bridge), conntrack
# (kube-proxy clears stale UDP entries with it) and util-linux's unshare/nsenter.
set -euo pipefail
declare -A package=(
  [containerd]=containerd [containerd-shim-runc-v2]=containerd [ctr]=containerd
  [runc]=runc [iptables]=iptables [ip]=iproute2 [conntrack]=conntrack
  [unshare]=util-linux [nsenter]=util-linux
)
missing=()
for tool in "${!package[@]}"; do
  command -v "$tool" >/dev/null || missing+=("${package[$tool]}")
done
if ((${#missing[@]})); then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  command -v apt-get >/dev/null ||
    { echo "node/setup-tools.sh: missing ${missing[*]} and no apt-get to install them" >&2; exit 1; }
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo=sudo
  echo "node/setup-tools.sh: installing ${missing[*]} (apt-get)" >&2
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
fi
# Debian starts containerd as a service where systemd runs; the node runs its own copy with its
# own socket and state, so a system one is neither needed nor touched.
containerd --version >&2
