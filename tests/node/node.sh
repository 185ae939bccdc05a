#!/usr/bin/env bash
# A real one-node Kubernetes cluster for the tests, inside private namespaces.
#
#   tests/node/node.sh start DIR    start it; state, logs and kubeconfig in DIR
#   tests/node/node.sh env DIR      print `export ...` lines (KUBECONFIG, NODE_NETNS, PATH)
#   tests/node/node.sh exec DIR CMD run CMD in the node's network namespace (kubectl, pytest...)
#   tests/node/node.sh import DIR ARCHIVE...   import image archives into the node's containerd
#   tests/node/node.sh stop DIR     stop everything, delete DIR's state, check nothing is left
#
# What runs: etcd + kube-apiserver (tests/k8s/cluster.sh), kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy (iptables), containerd + runc, the bridge CNI plugin,
# CoreDNS, and kube-router's network policy controller alone (iptables and ipsets: it enforces
# NetworkPolicies on the bridge's traffic; tests/setup-go-tool.sh kube-router). All of it runs
# in one new network, mount and PID namespace (unshare): the node's bridge, pod addresses,
# iptables rules and ipsets exist only there; every mount the kubelet and
# containerd make dies with the mount namespace; ending the PID namespace's first process ends
# every process of the node, containers included. The one thing namespaces do not hold is the
# cgroup tree: the node's cgroups live under /<id> in every hierarchy and `stop` removes them.
# `stop` then checks that no process, mount, cgroup, network namespace or iptables rule it made
# remains, and fails if one does.
#
# Addresses (inside the namespace only): node and bridge 10.88.0.1/16 (cni0), pods from
# 10.88.0.10, Services 10.96.0.0/16, API server https://10.88.0.1:6443, DNS 10.88.0.1:53.
# Images are never pulled: `import` puts locally built archives into containerd under their
# names; the pause image is built from the Kubernetes source (tests/node/test-images.sh).
#
# Environment (optional): SWITCHBOARD_NODE_START_TIMEOUT seconds for the node to be Ready
# (default 120); SWITCHBOARD_NODE_KEEP_LOGS=1 keeps DIR/logs after stop.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
NODE_IP=10.88.0.1
POD_CIDR=10.88.0.0/16
NODE_NAME=switchboard-node
PAUSE_IMAGE=registry.k8s.io/pause:3.10.1

log() { echo "[node $(date +%H:%M:%S)] $*" >&2; }
die() { echo "[node] ERROR: $*" >&2; exit 1; }
usage() { sed -n '2,9p' "$0" >&2; exit 2; }

[[ $# -ge 2 ]] || usage
CMD=$1
[[ "$CMD" == start ]] && mkdir -p "$2"
[[ -d "$2" ]] || die "DIR '$2' is not a directory"
DIR="$(cd "$2" && pwd)"
shift 2

# ---- the namespaces --------------------------------------------------------
# DIR/init.pid: host pid of the PID namespace's first process (a reaper: orphaned daemons and
# shims are re-parented to it). Entering its namespaces is how everything else gets in.
init_pid() {
  local pid
  [[ -f "$DIR/init.pid" ]] || return 1
  pid=$(cat "$DIR/init.pid")
  [[ -n "$pid" && -d /proc/$pid ]] || return 1
  grep -q "switchboard-node-init" "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}
in_node() { # CMD...: run in the node's network, mount and PID namespaces, in the node's cgroups
  local pid; pid=$(init_pid) || die "no node running in $DIR"
  nsenter --target "$pid" --net --mount --pid -- \
    env NODE_CGROUP="$(cat "$DIR/cgroup")" bash -c '
      for h in /sys/fs/cgroup/*/; do
        [[ -d "$h$NODE_CGROUP/daemons" ]] && echo $$ >"$h$NODE_CGROUP/daemons/cgroup.procs" 2>/dev/null
      done
      exec "$@"' in-node "$@"
}
daemon() { # NAME CMD...: start CMD in the node, in the background, logging to DIR/logs/NAME.log
  local name=$1; shift
  in_node bash -c 'setsid "$@" </dev/null >"'"$DIR/logs/$name.log"'" 2>&1 & echo $! >"'"$DIR/run/$name.pid"'"' \
    daemon "$@"
}
daemon_alive() { # NAME -> 0 when the daemon's (namespace) pid is running
  [[ -f "$DIR/run/$1.pid" ]] && in_node kill -0 "$(cat "$DIR/run/$1.pid")" 2>/dev/null
}
wait_for() { # WHAT SECONDS DAEMON CMD...: poll CMD (in the node) until it succeeds
  local what=$1 secs=$2 daemon=$3 t0=$SECONDS; shift 3
  until in_node "$@" >/dev/null 2>&1; do
    if [[ -n "$daemon" ]] && ! daemon_alive "$daemon"; then
      tail -n 30 "$DIR/logs/$daemon.log" >&2 || true
      die "$daemon exited while waiting for $what (log: $DIR/logs/$daemon.log)"
    fi
    (( SECONDS - t0 < secs )) || {
      [[ -z "$daemon" ]] || tail -n 30 "$DIR/logs/$daemon.log" >&2 || true
      die "$what not ready after ${secs}s"
    }
    sleep 0.5
  done
}

host_rules() { # the host's iptables rules, without comments and counters
  iptables-save | { grep -v '^#' || true; } | sed 's/\[[0-9]*:[0-9]*\]//'
}
# Paths containerd 1.6, libcni and the kubelet write to whatever their configuration says (shim
# sockets, CNI result cache, device-plugin socket, container log links). Inside the node each is
# a fresh tmpfs; a missing mount point is made for the node and removed by `stop`.
PRIVATE_DIRS=(/run/containerd /var/lib/cni /var/lib/kubelet /var/log/containers /var/log/pods)

cgroup_hierarchies() { # every mounted cgroup hierarchy (v1 controllers and the unified one)
  awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/self/mounts | sort -u
}

# ---- start -----------------------------------------------------------------
write_configs() {
  local cni_bin=$1 kubeconfig=$2
  mkdir -p "$DIR"/{containerd,cni/net.d,cni/state,kubelet,pod-logs,run,logs}
  cat >"$DIR/containerd/config.toml" <<EOF
version = 2
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$DIR/containerd/containerd.sock"
[ttrpc]
  address = "$DIR/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # root here lacks CAP_SYS_RESOURCE: it may not lower a process's oom_score_adj.
  restrict_oom_score_adj = true
  # Pod network namespaces are bind mounts in the state dir, not in /var/run/netns.
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$DIR/containerd/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$DIR/cni/net.d"
EOF
  cat >"$DIR/cni/net.d/10-switchboard.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "switchboard-node",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$DIR/cni/state",
              "ranges": [[{"subnet": "$POD_CIDR", "rangeStart": "10.88.0.10", "gateway": "$NODE_IP"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  # Pods resolve cluster names through CoreDNS; nothing outside the namespace is reachable.
  printf 'nameserver %s\n' "$NODE_IP" >"$DIR/resolv.conf"
  cat >"$DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine runs cgroup v1 and no systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$(cat "$DIR/cgroup")
failSwapOn: false
containerRuntimeEndpoint: unix://$DIR/containerd/containerd.sock
podLogsDir: $DIR/pod-logs
resolvConf: $DIR/resolv.conf
clusterDNS: [$NODE_IP]
clusterDomain: cluster.local
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
# Only reachable inside the private namespace; lets kubectl logs/exec work without a CA dance.
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
serializeImagePulls: false
# A shared disk: do not evict or collect images because other work filled it.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
shutdownGracePeriod: 0s
EOF
  cat >"$DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $kubeconfig}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
# Host-wide conntrack sysctls are not the namespace's to change.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
EOF
  # CoreDNS is built with only the plugins this uses (build_coredns in tests/k8s/build-binaries.sh):
  # a plugin added here goes there too (CoreDNS refuses a directive it was not built with).
  cat >"$DIR/Corefile" <<EOF
.:53 {
    bind $NODE_IP
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $kubeconfig switchboard-test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
EOF
}

cmd_start() {
  init_pid >/dev/null && die "a node is already running in $DIR (run: $0 stop $DIR)"
  "$HERE/setup-tools.sh" >/dev/null
  "$ROOT/tests/k8s/build-binaries.sh" --node >&2 || die "tests/k8s/build-binaries.sh --node failed"
  local bin cni_bin kube_router t0=$SECONDS
  bin=$("$ROOT/tests/k8s/build-binaries.sh" --bin-dir)
  kube_router=$("$ROOT/tests/setup-go-tool.sh" kube-router) || die "tests/setup-go-tool.sh kube-router failed"
  cni_bin="$(dirname "$bin")/cni/bin"
  # (not `| head -1`: head exits after the first line, and the script's second echo would die
  # of SIGPIPE now and then, failing the pipeline under pipefail)
  local images pause
  images=$("$HERE/test-images.sh") || die "tests/node/test-images.sh failed"
  pause=${images%%$'\n'*}

  # What "nothing left behind" is measured against.
  mkdir -p "$DIR/baseline"
  host_rules >"$DIR/baseline/iptables"
  ip netns list >"$DIR/baseline/netns" 2>/dev/null || true
  local d
  : >"$DIR/baseline/created"
  for d in "${PRIVATE_DIRS[@]}"; do
    [[ -d "$d" ]] && continue
    # record the topmost directory this makes, so stop removes exactly what start made
    local top=$d
    while [[ ! -d "$(dirname "$top")" ]]; do top=$(dirname "$top"); done
    echo "$top" >>"$DIR/baseline/created"
    mkdir -p "$d"
  done

  local id="switchboard-node-$$-$RANDOM" h
  echo "$id" >"$DIR/cgroup"
  for h in $(cgroup_hierarchies); do mkdir -p "$h/$id/daemons"; done
  local kubeconfig="$DIR/control-plane/kubeconfig"
  write_configs "$cni_bin" "$kubeconfig"

  log "namespaces (network, mount, PID); cgroups under /$id"
  # The first process of the PID namespace reaps what is re-parented to it and waits; its name
  # is what init_pid recognizes. Its mounts are private: nothing it mounts reaches the host.
  setsid unshare --net --mount --pid --fork --mount-proc --propagation private \
    bash -c 'exec -a switchboard-node-init bash -c "
      mount --make-rshared /
      trap \"exit 0\" TERM
      while :; do sleep 3600 & wait \$! || true; done"' </dev/null >"$DIR/logs/init.log" 2>&1 &
  local unshare_pid=$! pid="" i
  for i in $(seq 1 50); do
    pid=$(pgrep -P "$unshare_pid" 2>/dev/null | head -1) || true
    [[ -n "$pid" ]] && grep -q switchboard-node-init "/proc/$pid/cmdline" 2>/dev/null && break
    pid=""; sleep 0.1
  done
  [[ -n "$pid" ]] || die "the node's namespaces did not start (log: $DIR/logs/init.log)"
  echo "$pid" >"$DIR/init.pid"
  readlink "/proc/$pid/ns/net" >"$DIR/netns"

  in_node bash -c "
    set -e
    ip link set lo up
    ip link add cni0 type bridge
    ip addr add $NODE_IP/16 dev cni0
    ip link set cni0 up
    # Service addresses routed as a real node's default route does: kube-proxy's DNAT (its
    # OUTPUT rules) then sends what the node itself dials (a browser here) to a pod.
    ip route add 10.96.0.0/16 dev cni0
    sysctl -qw net.ipv4.ip_forward=1
    sysctl -qw net.bridge.bridge-nf-call-iptables=1
    for d in ${PRIVATE_DIRS[*]}; do mount -t tmpfs -o mode=755 tmpfs \$d; done" ||
    die "setting up the node's network and private directories failed"

  log "control plane"
  in_node env SWITCHBOARD_K8S_BIN="$bin" SWITCHBOARD_K8S_ADDRESS="$NODE_IP" SWITCHBOARD_K8S_API_PORT=6443 \
    SWITCHBOARD_K8S_ETCD_PORT=2379 SWITCHBOARD_K8S_ETCD_PEER_PORT=2380 SWITCHBOARD_K8S_SA_ADMISSION=1 \
    SWITCHBOARD_K8S_KEEP_LOGS=1 "$ROOT/tests/k8s/cluster.sh" start "$DIR/control-plane" ||
    die "the control plane did not start (logs: $DIR/control-plane/*.log)"
  local pki="$DIR/control-plane/pki"

  log "containerd"
  daemon containerd containerd --config "$DIR/containerd/config.toml"
  wait_for "containerd" 30 containerd ctr --address "$DIR/containerd/containerd.sock" version
  in_node ctr --address "$DIR/containerd/containerd.sock" -n k8s.io images import "$pause" >/dev/null ||
    die "importing the pause image failed"

  log "controller-manager, scheduler, kubelet, kube-proxy, CoreDNS"
  daemon kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$kubeconfig" \
    --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
    --root-ca-file "$pki/ca.crt" --service-account-private-key-file "$pki/sa.key" \
    --cluster-name switchboard-node --leader-elect=false --bind-address 127.0.0.1 \
    --use-service-account-credentials=false --controllers '*,-nodeipam,-cloud-node-lifecycle' \
    --v 1
  daemon kube-scheduler "$bin/kube-scheduler" --kubeconfig "$kubeconfig" \
    --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --v 1
  daemon kubelet "$bin/kubelet" --config "$DIR/kubelet.yaml" --kubeconfig "$kubeconfig" \
    --root-dir "$DIR/kubelet" --cert-dir "$DIR/kubelet/pki" --hostname-override "$NODE_NAME" \
    --node-ip "$NODE_IP" --v 1
  daemon kube-proxy "$bin/kube-proxy" --config "$DIR/kube-proxy.yaml" --v 1
  daemon coredns "$bin/coredns" -conf "$DIR/Corefile"

  local timeout=${SWITCHBOARD_NODE_START_TIMEOUT:-120}
  wait_for "node $NODE_NAME Ready" "$timeout" kubelet \
    "$bin/kubectl" --kubeconfig "$kubeconfig" wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s
  wait_for "the default ServiceAccount" 60 kube-controller-manager \
    "$bin/kubectl" --kubeconfig "$kubeconfig" get serviceaccount default
  wait_for "kube-proxy's rules" 60 kube-proxy bash -c "iptables-save -t nat | grep -q KUBE-SERVICES"
  wait_for "CoreDNS" 30 coredns bash -c "exec 3<>/dev/tcp/$NODE_IP/53"
  # NetworkPolicies: the firewall only (pod routes are the bridge's, Services
  # kube-proxy's), once the node is registered: it finds its pods by the node's name.
  daemon kube-router "$kube_router" --kubeconfig "$kubeconfig" --hostname-override "$NODE_NAME" \
    --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
    --service-cluster-ip-range 10.96.0.0/16 --health-port 0 --v 1
  wait_for "kube-router's rules" 60 kube-router iptables -S KUBE-ROUTER-FORWARD

  cat >"$DIR/node.env" <<EOF
KUBECONFIG=$kubeconfig
NODE_DIR=$DIR
NODE_NETNS=/proc/$pid/ns/net
NODE_IP=$NODE_IP
SWITCHBOARD_K8S_BIN=$bin
EOF
  log "node $NODE_NAME Ready in $((SECONDS - t0))s (kubeconfig: $kubeconfig; run commands with: $0 exec $DIR CMD)"
}

# ---- import ----------------------------------------------------------------
cmd_import() {
  [[ $# -gt 0 ]] || die "import: name one or more image archives"
  local a
  for a in "$@"; do
    [[ -f "$a" ]] || die "import: no archive $a"
    in_node ctr --address "$DIR/containerd/containerd.sock" -n k8s.io images import --no-unpack=false "$a" >&2 ||
      die "import of $a into the node's containerd failed"
  done
}

# ---- stop ------------------------------------------------------------------
cmd_stop() {
  local pid id="" netns="" problems=()
  [[ -f "$DIR/cgroup" ]] && id=$(cat "$DIR/cgroup")
  [[ -f "$DIR/netns" ]] && netns=$(cat "$DIR/netns")
  if pid=$(init_pid); then
    # Ending the PID namespace's first process makes the kernel kill every process in it,
    # containers (in namespaces below it) included; the mount and network namespaces go with
    # the last of them.
    kill -KILL "$pid"
    local i; for i in $(seq 1 100); do [[ -d /proc/$pid ]] || break; sleep 0.1; done
  fi
  # The processes are gone; remove their cgroups, deepest first.
  if [[ -n "$id" ]]; then
    local h i
    for h in $(cgroup_hierarchies); do
      [[ -d "$h/$id" ]] || continue
      for i in $(seq 1 50); do
        find "$h/$id" -depth -type d -exec rmdir {} + 2>/dev/null || true
        [[ -d "$h/$id" ]] || break
        sleep 0.1
      done
    done
  fi
  [[ "${SWITCHBOARD_NODE_KEEP_LOGS:-}" == 1 ]] && cp -r "$DIR/logs" "$DIR/control-plane/"*.log "${TMPDIR:-/tmp}/" 2>/dev/null || true

  # Check what is left.
  if [[ -n "$netns" ]]; then
    local p
    for p in /proc/[0-9]*; do
      [[ "$(readlink "$p/ns/net" 2>/dev/null)" == "$netns" ]] &&
        problems+=("process ${p#/proc/} ($(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-80)) is still in the node's network namespace")
    done
  fi
  if [[ -n "$id" ]]; then
    local h
    for h in $(cgroup_hierarchies); do
      [[ -d "$h/$id" ]] && problems+=("cgroup $h/$id remains")
    done
  fi
  if grep -q " $DIR" /proc/self/mountinfo; then
    problems+=("mounts under $DIR remain: $(grep " $DIR" /proc/self/mountinfo | awk '{print $5}' | tr '\n' ' ')")
  fi
  if [[ -f "$DIR/baseline/iptables" ]]; then
    local now; now=$(host_rules)
    [[ "$now" == "$(cat "$DIR/baseline/iptables")" ]] ||
      problems+=("the host's iptables rules changed: $(diff <(cat "$DIR/baseline/iptables") <(echo "$now") | head -5 | tr '\n' ' ')")
  fi
  if [[ -f "$DIR/baseline/netns" ]]; then
    [[ "$(ip netns list 2>/dev/null || true)" == "$(cat "$DIR/baseline/netns")" ]] ||
      problems+=("named network namespaces changed: $(ip netns list | tr '\n' ' ')")
  fi
  ip link show cni0 >/dev/null 2>&1 && problems+=("the host has a cni0 bridge")
  if [[ -f "$DIR/baseline/created" ]]; then
    local d
    while read -r d; do
      [[ -n "$d" ]] || continue
      find "$d" -depth -type d -empty -delete 2>/dev/null || true
      [[ -e "$d" ]] && problems+=("$d (made for the node) is not empty: $(find "$d" | head -3 | tr '\n' ' ')")
    done <"$DIR/baseline/created"
  fi

  rm -rf "${DIR:?}"/{containerd,cni,kubelet,pod-logs,run,control-plane,baseline} "$DIR"/{init.pid,netns,cgroup,node.env,resolv.conf,kubelet.yaml,kube-proxy.yaml,Corefile}
  [[ "${SWITCHBOARD_NODE_KEEP_LOGS:-}" == 1 ]] || rm -rf "$DIR/logs"
  if ((${#problems[@]})); then
    printf '[node] left behind: %s\n' "${problems[@]}" >&2
    die "stop left ${#problems[@]} thing(s) behind"
  fi
  log "stopped; checked: no process, mount, cgroup, network namespace or iptables rule left"
}

cmd_env() {
  [[ -f "$DIR/node.env" ]] && init_pid >/dev/null || die "no node running in $DIR"
  local line
  while IFS= read -r line; do printf 'export %s=%q\n' "${line%%=*}" "${line#*=}"; done <"$DIR/node.env"
  printf 'export PATH=%q:"$PATH"\n' "$(sed -n 's/^SWITCHBOARD_K8S_BIN=//p' "$DIR/node.env")"
}

cmd_exec() {
  [[ $# -gt 0 ]] || die "exec: name a command"
  local pid; pid=$(init_pid) || die "no node running in $DIR"
  # Only the network namespace: the caller keeps its own files, processes and environment.
  exec nsenter --net="/proc/$pid/ns/net" -- "$@"
}

case "$CMD" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  env) cmd_env ;;
  exec) cmd_exec "$@" ;;
  import) cmd_import "$@" ;;
  *) usage ;;
esac
