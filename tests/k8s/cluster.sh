#!/usr/bin/env bash
# A throwaway Kubernetes control plane (etcd + kube-apiserver) on loopback.
#
#   tests/k8s/cluster.sh start DIR   start it; state, logs and kubeconfig in DIR
#   tests/k8s/cluster.sh env DIR     print `export ...` lines for a started cluster
#   tests/k8s/cluster.sh stop DIR    stop both processes and delete the state
#
# No controller-manager, scheduler or kubelet: objects are stored and served
# (CRDs, RBAC, TokenRequest/TokenReview, Deployments, Pods, Secrets...) but
# nothing reconciles them. Binaries come from build-binaries.sh (cached).
#
# Environment (all optional):
#   SWITCHBOARD_K8S_BIN            use binaries from here instead of build-binaries.sh
#   SWITCHBOARD_K8S_API_PORT       kube-apiserver secure port   (default: a reserved port, see reserve_port)
#   SWITCHBOARD_K8S_ETCD_PORT      etcd client port             (default: a reserved port)
#   SWITCHBOARD_K8S_ETCD_PEER_PORT etcd peer port               (default: a reserved port)
#   SWITCHBOARD_K8S_START_TIMEOUT  seconds to wait for /readyz  (default: 60)
#   SWITCHBOARD_K8S_AUTHZ          --authorization-mode         (default: Node,RBAC)
#   SWITCHBOARD_K8S_KEEP_LOGS=1    `stop` keeps DIR/*.log
#   SWITCHBOARD_K8S_AUDIT=1        write the API server's audit log (every request, metadata
#                                  only: user, verb, URI, namespace) to DIR/audit.log
#   SWITCHBOARD_K8S_ADDRESS        also serve on this address and advertise it (the one-node
#                                  cluster: pods reach the API server there; tests/node/)
#   SWITCHBOARD_K8S_SA_ADMISSION=1 keep the ServiceAccount admission plugin (pods get their
#                                  token volume; needs a controller-manager making the accounts)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1           # first IP of SERVICE_CIDR: the "kubernetes" Service
ISSUER=https://kubernetes.default.svc.cluster.local

log() { echo "[cluster $(date +%H:%M:%S)] $*" >&2; }
die() { echo "[cluster] ERROR: $*" >&2; exit 1; }
usage() { echo "usage: $0 start|stop|env DIR" >&2; exit 2; }

[[ $# -eq 2 ]] || usage
CMD=$1
[[ "$CMD" == start ]] && mkdir -p "$2"
[[ -d "$2" ]] || die "DIR '$2' is not a directory"
DIR="$(cd "$2" && pwd)"
PKI="$DIR/pki"

# ---- helpers ---------------------------------------------------------------
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# reserve_port VAR: sets VAR to a loopback port reserved for this cluster. A reservation is an
# exclusive lock on ${SWITCHBOARD_CACHE:-~/.cache/switchboard}/ports/PORT.lock (the test harness
# reserves ports the same way: tests/e2e/harness.py reserve_port), so no test process on this
# machine is handed the same port; the lock's file descriptor stays open in this shell and is
# inherited by etcd and kube-apiserver, so it is held exactly as long as they serve the port.
# Ports come from below the kernel's ephemeral range (32768+): no outgoing connection holds one.
PORT_LOCKS="${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/ports"
reserve_port() {
  local p i fd
  mkdir -p "$PORT_LOCKS"
  for i in $(seq 1 500); do
    p=$(( 20000 + RANDOM % 12000 ))
    exec {fd}>"$PORT_LOCKS/$p.lock"
    if flock -n "$fd" && port_free "$p"; then
      printf -v "$1" %s "$p"
      return 0
    fi
    exec {fd}>&-
  done
  die "could not reserve a free loopback port"
}
# pid_alive PIDFILE BINARY-NAME: pid in file is running and is that binary
pid_alive() {
  local pid
  [[ -f "$1" ]] || return 1
  pid=$(cat "$1")
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2"
}
# wait_exec PIDFILE BINARY-NAME: a process just started with `&` is for a moment still the
# forked shell; wait (bounded) until it has become the binary, or fail if it is gone.
wait_exec() {
  local pid i; pid=$(cat "$1")
  for i in $(seq 1 100); do   # 10s
    pid_alive "$1" "$2" && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
stop_proc() { # PIDFILE NAME
  local pid i
  pid_alive "$1" "$2" || { rm -f "$1"; return 0; }
  pid=$(cat "$1")
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    log "$2 (pid $pid) ignored SIGTERM for 10s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$1"
}
tail_log() { echo "----- last 40 lines of $1 -----" >&2; tail -n 40 "$1" >&2 2>/dev/null || true; echo "-----" >&2; }

bin_dir() {
  if [[ -n "${SWITCHBOARD_K8S_BIN:-}" ]]; then
    echo "$SWITCHBOARD_K8S_BIN"
  else
    # Instant when cached; otherwise builds (progress to stderr).
    "$HERE/build-binaries.sh" >&2 || die "build-binaries.sh failed"
    "$HERE/build-binaries.sh" --bin-dir
  fi
}

gen_pki() {
  mkdir -p "$PKI"
  (
    cd "$PKI"
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 \
      -keyout ca.key -out ca.crt -subj "/CN=switchboard-test-ca" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
    cat >server.ext <<EOF
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:$SERVICE_IP,${SWITCHBOARD_K8S_ADDRESS:+IP:$SWITCHBOARD_K8S_ADDRESS,}DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
    openssl req -newkey rsa:2048 -nodes -sha256 -keyout apiserver.key -out apiserver.csr \
      -subj "/CN=kube-apiserver" 2>/dev/null
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
      -days 3650 -sha256 -extfile server.ext -out apiserver.crt 2>/dev/null
    # Service-account token signing key pair (TokenRequest / TokenReview).
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    # Static tokens: token,user,uid,"groups"
    printf '%s,switchboard-admin,switchboard-admin,"system:masters"\n' \
      "$(openssl rand -hex 24)" >tokens.csv
    chmod 600 ./*.key tokens.csv
  ) || die "openssl failed generating the test PKI in $PKI"
}

write_kubeconfig() { # API_URL TOKEN
  local ca; ca=$(base64 -w0 <"$PKI/ca.crt")
  cat >"$DIR/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: switchboard-test
  cluster:
    server: $1
    certificate-authority-data: $ca
users:
- name: switchboard-admin
  user:
    token: $2
contexts:
- name: switchboard-test
  context:
    cluster: switchboard-test
    user: switchboard-admin
    namespace: default
current-context: switchboard-test
EOF
  chmod 600 "$DIR/kubeconfig"
}

# ---- start -----------------------------------------------------------------
cmd_start() {
  if [[ -f "$DIR/cluster.env" ]] && pid_alive "$DIR/apiserver.pid" kube-apiserver; then
    die "a cluster is already running in $DIR (run: $0 stop $DIR)"
  fi
  # Leftovers of a failed or killed attempt are stopped by PID (an etcd holding its data-dir
  # lock would block this one), and a failure of this attempt stops what it started.
  cmd_stop_quiet
  trap cmd_stop_quiet EXIT
  command -v openssl >/dev/null || die "openssl not found"
  command -v curl >/dev/null || die "curl not found"
  local bin; bin=$(bin_dir)
  local b; for b in etcd kube-apiserver kubectl; do
    [[ -x "$bin/$b" ]] || die "$bin/$b missing (run tests/k8s/build-binaries.sh)"
  done

  local etcd_port peer_port api_port
  etcd_port=${SWITCHBOARD_K8S_ETCD_PORT:-}; [[ -n "$etcd_port" ]] || reserve_port etcd_port
  peer_port=${SWITCHBOARD_K8S_ETCD_PEER_PORT:-}; [[ -n "$peer_port" ]] || reserve_port peer_port
  api_port=${SWITCHBOARD_K8S_API_PORT:-}; [[ -n "$api_port" ]] || reserve_port api_port
  for p in "$etcd_port" "$peer_port" "$api_port"; do
    port_free "$p" || die "port 127.0.0.1:$p is already in use"
  done

  rm -rf "$DIR/etcd-data" "$PKI"
  gen_pki
  local token; token=$(cut -d, -f1 "$PKI/tokens.csv")
  local api="https://127.0.0.1:$api_port"

  log "starting etcd on 127.0.0.1:$etcd_port (peer $peer_port)"
  "$bin/etcd" \
    --name switchboard-test \
    --data-dir "$DIR/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "switchboard-test=http://127.0.0.1:$peer_port" \
    --unsafe-no-fsync \
    --log-level warn \
    </dev/null >"$DIR/etcd.log" 2>&1 &
  echo $! >"$DIR/etcd.pid"

  wait_exec "$DIR/etcd.pid" etcd || { tail_log "$DIR/etcd.log"; die "etcd exited during startup"; }
  local i ok=""
  for i in $(seq 1 150); do   # 30s
    pid_alive "$DIR/etcd.pid" etcd || { tail_log "$DIR/etcd.log"; die "etcd exited during startup"; }
    if curl -fsS --max-time 2 "http://127.0.0.1:$etcd_port/health" 2>/dev/null | grep -q '"health":"true"'; then ok=1; break; fi
    sleep 0.2
  done
  [[ -n "$ok" ]] || { tail_log "$DIR/etcd.log"; die "etcd not healthy after 30s"; }

  # Without a controller-manager nobody creates ServiceAccounts, and the plugin would refuse
  # every pod for want of "default"; the one-node cluster has one.
  local disabled_admission=ServiceAccount
  [[ "${SWITCHBOARD_K8S_SA_ADMISSION:-}" != 1 ]] || disabled_admission=""
  local bind=127.0.0.1
  [[ -z "${SWITCHBOARD_K8S_ADDRESS:-}" ]] || bind=0.0.0.0
  local audit=()
  if [[ "${SWITCHBOARD_K8S_AUDIT:-}" == 1 ]]; then
    printf '%s\n' 'apiVersion: audit.k8s.io/v1' 'kind: Policy' 'omitStages: [RequestReceived]' \
      'rules:' '  - level: Metadata' >"$DIR/audit-policy.yaml"
    audit=(--audit-policy-file "$DIR/audit-policy.yaml" --audit-log-path "$DIR/audit.log"
           --audit-log-mode blocking)
  fi
  log "starting kube-apiserver on $api"
  "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address "$bind" \
    --advertise-address "${SWITCHBOARD_K8S_ADDRESS:-127.0.0.1}" \
    --secure-port "$api_port" \
    --cert-dir "$PKI" \
    --tls-cert-file "$PKI/apiserver.crt" \
    --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --token-auth-file "$PKI/tokens.csv" \
    --authorization-mode "${SWITCHBOARD_K8S_AUTHZ:-Node,RBAC}" \
    --service-account-issuer "$ISSUER" \
    --service-account-key-file "$PKI/sa.pub" \
    --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --disable-admission-plugins "$disabled_admission" \
    --allow-privileged=true \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --profiling=false \
    --v "${SWITCHBOARD_K8S_APISERVER_V:-1}" \
    ${audit[@]+"${audit[@]}"} \
    </dev/null >"$DIR/apiserver.log" 2>&1 &
  echo $! >"$DIR/apiserver.pid"
  wait_exec "$DIR/apiserver.pid" kube-apiserver ||
    { tail_log "$DIR/apiserver.log"; die "kube-apiserver exited during startup"; }

  local timeout=${SWITCHBOARD_K8S_START_TIMEOUT:-60} t0=$SECONDS body=""
  ok=""
  while (( SECONDS - t0 < timeout )); do
    if ! pid_alive "$DIR/apiserver.pid" kube-apiserver; then
      tail_log "$DIR/apiserver.log"; die "kube-apiserver exited during startup"
    fi
    body=$(curl -sS --max-time 5 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $token" \
      "$api/readyz" 2>&1 || true)
    if [[ "$body" == "ok" ]]; then ok=1; break; fi
    sleep 0.5
  done
  if [[ -z "$ok" ]]; then
    echo "last /readyz answer (failing checks):" >&2
    grep -v '^\[+\]' <<<"$body" >&2 || true
    tail_log "$DIR/apiserver.log"
    die "kube-apiserver not ready after ${timeout}s"
  fi

  write_kubeconfig "$api" "$token"
  # The default namespace is created by an apiserver-internal controller
  # shortly after /readyz; wait for it so `kubectl -n default` works at once.
  ok=""
  for i in $(seq 1 50); do
    if "$bin/kubectl" --kubeconfig "$DIR/kubeconfig" get namespace default >/dev/null 2>&1; then ok=1; break; fi
    sleep 0.2
  done
  [[ -n "$ok" ]] || { tail_log "$DIR/apiserver.log"; die "namespace 'default' never appeared"; }

  cat >"$DIR/cluster.env" <<EOF
KUBECONFIG=$DIR/kubeconfig
SWITCHBOARD_K8S_BIN=$bin
SWITCHBOARD_K8S_API=$api
SWITCHBOARD_K8S_TOKEN=$token
SWITCHBOARD_K8S_CA=$PKI/ca.crt
SWITCHBOARD_K8S_ETCD=http://127.0.0.1:$etcd_port
EOF
  trap - EXIT
  log "ready in $((SECONDS - t0))s: $api (kubeconfig: $DIR/kubeconfig)"
}

# ---- stop ------------------------------------------------------------------
cmd_stop_quiet() {
  stop_proc "$DIR/apiserver.pid" kube-apiserver
  stop_proc "$DIR/etcd.pid" etcd
}
cmd_stop() {
  cmd_stop_quiet
  rm -rf "$DIR/etcd-data" "$PKI" "$DIR/kubeconfig" "$DIR/cluster.env"
  [[ "${SWITCHBOARD_K8S_KEEP_LOGS:-}" == 1 ]] || rm -f "$DIR/etcd.log" "$DIR/apiserver.log"
  log "stopped; state removed from $DIR"
}

# ---- env -------------------------------------------------------------------
cmd_env() {
  [[ -f "$DIR/cluster.env" ]] || die "no cluster started in $DIR"
  pid_alive "$DIR/apiserver.pid" kube-apiserver || die "kube-apiserver in $DIR is not running"
  local line
  while IFS= read -r line; do printf 'export %s=%q\n' "${line%%=*}" "${line#*=}"; done <"$DIR/cluster.env"
  printf 'export PATH=%q:"$PATH"\n' "$(sed -n 's/^SWITCHBOARD_K8S_BIN=//p' "$DIR/cluster.env")"
}

case "$CMD" in
  start) cmd_start ;;
  stop)  cmd_stop ;;
  env)   cmd_env ;;
  *)     usage ;;
esac
