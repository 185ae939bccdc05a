#!/usr/bin/env bash
# Installs what the one-node cluster (tests/node/node.sh) runs besides the Go-built Kubernetes
# binaries, when missing, from Debian's packages: containerd (1.6) and runc (its runtime; crun
# fails on this kind of machine), iptables (kube-proxy, kube-router), ipset (kube-router keeps the
# addresses a NetworkPolicy selects in ipsets), iproute2 (the node's bridge), conntrack
# (kube-proxy clears stale UDP entries with it) and util-linux's unshare/nsenter.
set -euo pipefail
"$(dirname "${BASH_SOURCE[0]}")/../install-packages.sh" containerd=containerd \
  containerd-shim-runc-v2=containerd ctr=containerd runc=runc iptables=iptables ipset=ipset ip=iproute2 \
  conntrack=conntrack unshare=util-linux nsenter=util-linux
# Debian starts containerd as a service where systemd runs; the node runs its own copy with its
# own socket and state, so a system one is neither needed nor touched.
containerd --version >&2
