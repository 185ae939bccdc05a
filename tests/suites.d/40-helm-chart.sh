#!/usr/bin/env bash
# The Helm chart (charts/switchboard) against a real kube-apiserver.
#
#   tests/run-all.sh 40-helm-chart        (or: bash tests/suites.d/40-helm-chart.sh)
#
# 1. The chart's crds/ holds exactly the files of the top-level crds/*.yaml, byte for byte.
# 2. `helm lint --strict` passes with no findings (default values and with autoscaling on);
#    rendering checks (names, overrides, image tags, the internal port, the PodMonitors,
#    PrometheusRule and dashboard ConfigMap, the NetworkPolicy, tracing and audit values, the
#    values that must fail). promtool's checks of the alerts are in 45-prometheus-rules.sh.
#    The values schema: the Kubernetes-typed values a production install sets
#    (tests/chart/kubernetes-values.yaml, and a --set list) pass it; misspellings and wrong types
#    of our keys, of Kubernetes-typed values and of gateway.settings are refused, naming them.
# 3. A loopback etcd + kube-apiserver (tests/k8s/cluster.sh, stopped on exit): `helm template
#    --include-crds` output is applied server-side, and the stored objects are checked field by
#    field: Deployments, Services, PDBs, HPA, ServiceAccounts, RBAC. RBAC is checked by
#    impersonating the ServiceAccounts (what the operator may and may not do, and that the gateway
#    may do nothing), including a real Lease and a real TokenReview of a gateway token.
#    The values that passed the schema in 2 are applied and stored as given; each Kubernetes-typed
#    value it refused is refused by the API server too, and each gateway.settings value makes the
#    operator's debug binary (SWITCHBOARD_BIN_DIR) exit at start naming it, when rendered without it.
# 4. `helm install`, `helm upgrade`, `helm uninstall` of a second release.
# There is no kubelet: pods never run; the objects only have to be accepted and be right.
#
# Ends with "N passed, N failed"; exits non-zero if anything failed.
# In the test command it runs beside the one-node suite, at nice 19 (tests/run-all.sh: it only
# slowed the Kubernetes suite, whose minutes are CPU-bound; the one-node suite leaves CPU idle).
# run-all: after 50-kubernetes
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
chart=charts/switchboard

source "$(dirname "${BASH_SOURCE[0]}")/../check-helpers.bash"
expect() { # name expected cmd...: the command's output equals expected
  local name=$1 want=$2 got; shift 2
  if got=$("$@" 2>&1) && [[ "$got" == "$want" ]]; then ok "$name"
  else bad "$name" "want: $want" "got:  $got"; fi
}

# ---- 1. CRDs in the chart == crds/*.yaml ------------------------------------------------------
crds_in_sync() {
  local f rc=0 want got
  want=$(cd crds && ls -1 -- *.yaml)
  got=$(cd "$chart/crds" && ls -1A)
  if [[ "$want" != "$got" ]]; then
    echo "files differ: crds/*.yaml = [$(echo $want)], $chart/crds/ = [$(echo $got)]"; rc=1
  fi
  for f in $want; do
    if ! cmp -s "crds/$f" "$chart/crds/$f"; then echo "$chart/crds/$f differs from crds/$f"; rc=1; fi
  done
  if ((rc)); then
    echo "sync them: rm -f $chart/crds/*.yaml && cp crds/*.yaml $chart/crds/"
  fi
  return $rc
}
check "chart crds/ == top-level crds/*.yaml" crds_in_sync

# ---- binaries --------------------------------------------------------------------------------
tests/k8s/build-binaries.sh >&2
bin="$(tests/k8s/build-binaries.sh --bin-dir)"
export PATH="$bin:$PATH"
echo "# helm $(helm version --short), kubectl from $bin"
# The operator's debug binary (tests/run-all.sh builds it before the suites): section 3 runs it
# on the gateway.settings the chart renders.
# shellcheck source=tests/build-env.bash
source tests/build-env.bash
operator_bin=$SWITCHBOARD_BIN_DIR/switchboard-operator
check "the operator's debug binary is built ($operator_bin; else tests/run-all.sh build)" test -x "$operator_bin"

# ---- 2. lint and rendering -------------------------------------------------------------------
lint_clean() { # helm lint --strict, and no [INFO]/[WARNING]/[ERROR] findings at all
  local out
  out=$(helm lint --strict "$chart" "$@" 2>&1) || { echo "$out"; return 1; }
  if grep -E '\[(INFO|WARNING|ERROR)\]' <<<"$out"; then return 1; fi
}
check "helm lint --strict (defaults)" lint_clean
check "helm lint --strict (autoscaling on)" lint_clean --set gateway.autoscaling.enabled=true
check "helm lint --strict (all optional knobs)" lint_clean \
  --set gateway.publicUrl=https://mcp.example.com --set 'gateway.allowedHosts={mcp.internal}' \
  --set gateway.podDisruptionBudget.maxUnavailable=1 --set operator.podDisruptionBudget.enabled=false \
  --set 'gateway.extraArgs={--foo}' --set 'imagePullSecrets[0].name=regcred' \
  --set gateway.autoscaling.enabled=true --set gateway.autoscaling.targetMemoryUtilizationPercentage=70 \
  --set gateway.networkPolicy.enabled=true --set 'gateway.networkPolicy.metricsFrom[0].podSelector.matchLabels.app=prometheus' \
  --set monitoring.enabled=true --set monitoring.prometheusRule.enabled=true --set monitoring.dashboard.enabled=true \
  --set tracing.enabled=true --set tracing.otlp.endpoint=https://otel-collector:4317 \
  --set tracing.otlp.headersSecret.name=otlp-headers --set tracing.otlp.caConfigMap.name=otlp-ca \
  --set tracing.otlp.clientCertificateSecret=otlp-client \
  --set gateway.audit.log=/var/log/sb/audit.jsonl --set 'gateway.extraVolumes[0].name=audit' \
  --set 'gateway.extraVolumes[0].emptyDir.sizeLimit=1Gi' --set 'gateway.extraVolumeMounts[0].name=audit' \
  --set 'gateway.extraVolumeMounts[0].mountPath=/var/log/sb'

render() { helm template "$@" "$chart"; }
names() { # kind/name of every rendered object, sorted
  render "$@" | awk '/^kind: /{k=$2} /^  name: /{if (k) {print k "/" $2; k=""}}' | sort
}
expect "release 'switchboard': object names" \
"ClusterRole/switchboard-operator
ClusterRoleBinding/switchboard-operator
Deployment/switchboard-gateway
Deployment/switchboard-operator
PodDisruptionBudget/switchboard-gateway
PodDisruptionBudget/switchboard-operator
Role/switchboard-operator
RoleBinding/switchboard-operator
Service/switchboard-gateway
Service/switchboard-operator
ServiceAccount/switchboard-gateway
ServiceAccount/switchboard-operator" \
  names switchboard -n sb
# Nothing outside the release namespace unless a value asks for it: the API server's
# EndpointSlices in `default` only with apiServerEndpointSlices (and not with allowApiServer).
in_release_namespace_only() { # every namespaced object of `helm template -n sb "$@"` is in sb
  helm template sb "$chart" -n sb "$@" | python3 -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
bad = ["%s/%s in %s" % (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) for d in docs
       if d["kind"] not in ("ClusterRole", "ClusterRoleBinding") and d["metadata"].get("namespace") != "sb"]
print("\n".join(bad)); sys.exit(1 if bad else 0)'
}
check "defaults: every namespaced object is in the release namespace" in_release_namespace_only
check "all optional knobs on: still only the release namespace" in_release_namespace_only \
  --set gateway.networkPolicy.enabled=true --set operator.networkPolicy.enabled=true \
  --set gateway.ingress.enabled=true --set 'gateway.ingress.hosts={mcp.example.com}' \
  --set monitoring.enabled=true --set monitoring.dashboard.enabled=true --set 'gateway.settings.maxBodyBytes=1024'
check_fails "control: the check sees an object elsewhere (apiServerEndpointSlices)" "Role/sb-switchboard-operator-api-server-endpoints in default" \
  in_release_namespace_only --set operator.upstreamNetworks.apiServerEndpointSlices=true
check "apiServerEndpointSlices: the Role in default and the flag; allowApiServer drops both" bash -c "
  out=\$(helm template sb $chart -n sb --set operator.upstreamNetworks.apiServerEndpointSlices=true) &&
  echo \"\$out\" | grep -A3 'name: sb-switchboard-operator-api-server-endpoints' | grep -q 'namespace: default' &&
  echo \"\$out\" | grep -q -- '- --api-server-endpoint-slices' &&
  ! helm template sb $chart -n sb | grep -q -- 'api-server-endpoint' &&
  ! helm template sb $chart -n sb --set operator.upstreamNetworks.allowApiServer=true --set operator.upstreamNetworks.apiServerEndpointSlices=true | grep -q 'api-server-endpoints' &&
  helm template sb $chart -n sb --set operator.upstreamNetworks.allowApiServer=true | grep -q -- '--allow-api-server-upstream'"
# Tenancy: watchNamespaces confines the operator's reads and its RBAC; instance and reserved
# names become flags.
check "watchNamespaces: the flag, RoleBindings in each, no cluster-wide Secrets or resources" bash -c "
  out=\$(helm template sb $chart -n sb --set 'operator.watchNamespaces={team-a,team-b}') &&
  echo \"\$out\" | grep -A1 -- '- --watch-namespaces' | grep -q '\"team-a,team-b\"' &&
  echo \"\$out\" | python3 -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
cluster = [d for d in docs if d[\"kind\"] == \"ClusterRole\" and d[\"metadata\"][\"name\"] == \"sb-switchboard-operator\"][0]
bound = {d[\"metadata\"][\"namespace\"] for d in docs if d[\"kind\"] == \"RoleBinding\" and d[\"roleRef\"][\"name\"] == \"sb-switchboard-operator-namespaced\"}
assert bound == {\"team-a\", \"team-b\"}, bound
for rule in cluster[\"rules\"]:
    assert not set(rule.get(\"resources\", [])) & {\"secrets\", \"mcpservers\", \"configmaps\", \"pods\", \"deployments\"}, rule
    if \"namespaces\" in rule.get(\"resources\", []):
        assert rule[\"resourceNames\"] == [\"team-a\", \"team-b\"], rule
role = [d for d in docs if d[\"kind\"] == \"Role\" and d[\"metadata\"][\"name\"] == \"sb-switchboard-operator\"][0]
assert any(\"secrets\" in r.get(\"resources\", []) for r in role[\"rules\"]), \"the snapshot Secret needs secrets in sb\"
' &&
  ! helm template sb $chart -n sb | grep -q -- '-namespaced'"
check "instance and reservedNames become flags (names sorted, one entry per namespace)" bash -c "
  out=\$(helm template sb $chart -n sb --set operator.instance=blue \
    --set-json 'operator.reservedNames={\"prefixes\":{\"jira\":[\"ops\"],\"github\":[\"platform\",\"ops\"]},\"models\":{\"claude-*\":[\"ml\"]}}') &&
  echo \"\$out\" | grep -A1 -- '- --instance' | grep -q '\"blue\"' &&
  echo \"\$out\" | grep -A1 -- '- --reserved-prefixes' | grep -q '\"github=platform,github=ops,jira=ops\"' &&
  echo \"\$out\" | grep -A1 -- '- --reserved-models' | grep -q '\"claude-\\*=ml\"' &&
  ! helm template sb $chart -n sb | grep -qE -- '--(instance|reserved-)'"
check_fails "a watched namespace that is not a namespace name is refused by the schema" "operator/watchNamespaces/0" \
  helm template sb "$chart" --set 'operator.watchNamespaces={Team_A}'
check_fails "a namespace watched twice is refused by the schema (it would render two RoleBindings of one name)" \
  "operator/watchNamespaces" helm template sb "$chart" --set 'operator.watchNamespaces={team-a,team-a}'
check_fails "a reserved name the operator's flag cannot parse is refused by the schema" 'git\*hub' \
  helm template sb "$chart" --set-json 'operator.reservedNames.prefixes={"git*hub":["ops"]}'
check "a reserved name and a start* pass the schema (control)" \
  helm template sb "$chart" --set-json 'operator.reservedNames.prefixes={"github":["ops"],"team-a-*":["team-a"]}'
check_fails "a negative bound is refused by the schema, naming it" "gateway/overload/maxInFlight" \
  helm template sb "$chart" --set gateway.overload.maxInFlight=-1
check_fails "a wildcard Ingress host is refused (the gateway allows hosts by equality)" "gateway/ingress/hosts/0" \
  helm template sb "$chart" --set gateway.ingress.enabled=true --set 'gateway.ingress.hosts={*.example.com}'
check_fails "a wildcard HTTPRoute hostname is refused likewise" "gateway/httpRoute/hostnames/0" \
  helm template sb "$chart" --set gateway.httpRoute.enabled=true --set 'gateway.httpRoute.hostnames={*.example.com}' \
    --set-json 'gateway.httpRoute.parentRefs=[{"name":"public"}]'
# Exposure: Ingress and HTTPRoute, their hosts allowed by the gateway; the operator's NetworkPolicy.
check "ingress: rules to the gateway Service, hosts join the allowed hosts" bash -c "
  out=\$(helm template sb $chart -n ns --set gateway.ingress.enabled=true --set 'gateway.ingress.hosts={mcp.example.com}' \
    --set gateway.ingress.className=nginx --set-json 'gateway.ingress.annotations={\"nginx.ingress.kubernetes.io/proxy-buffering\":\"off\"}') &&
  echo \"\$out\" | grep -q '^kind: Ingress' && echo \"\$out\" | grep -q 'ingressClassName: nginx' &&
  echo \"\$out\" | grep -A8 'host: \"mcp.example.com\"' | grep -q 'name: sb-switchboard-gateway' &&
  echo \"\$out\" | grep -q 'value: \"sb-switchboard-gateway,.*,mcp.example.com\"' &&
  ! helm template sb $chart -n ns | grep -qE '^kind: (Ingress|HTTPRoute)'"
check_fails "an Ingress without hosts is refused" "gateway.ingress.enabled needs gateway.ingress.hosts" \
  helm template sb "$chart" --set gateway.ingress.enabled=true
check "httpRoute: parentRefs, hostnames, timeouts; hostnames join the allowed hosts" bash -c "
  out=\$(helm template sb $chart -n ns --set gateway.httpRoute.enabled=true --set 'gateway.httpRoute.hostnames={mcp.example.com}' \
    --set-json 'gateway.httpRoute.parentRefs=[{\"name\":\"public\",\"namespace\":\"infra\"}]' --set gateway.httpRoute.timeouts.request=0s) &&
  echo \"\$out\" | grep -q '^kind: HTTPRoute' && echo \"\$out\" | grep -q 'request: 0s' &&
  echo \"\$out\" | grep -q 'value: \"sb-switchboard-gateway,.*,mcp.example.com\"'"
check_fails "an HTTPRoute without parentRefs is refused" "gateway.httpRoute.enabled needs gateway.httpRoute.parentRefs" \
  helm template sb "$chart" --set gateway.httpRoute.enabled=true --set 'gateway.httpRoute.hostnames={a.example}'
check "operator NetworkPolicy: the stream only from this release's gateway pods" bash -c "
  helm template sb $chart -n sb --set operator.networkPolicy.enabled=true | python3 -c '
import sys, yaml
np = [d for d in yaml.safe_load_all(sys.stdin) if d and d[\"kind\"] == \"NetworkPolicy\"][0]
assert np[\"metadata\"][\"name\"] == \"sb-switchboard-operator\", np
assert np[\"spec\"][\"podSelector\"][\"matchLabels\"][\"app.kubernetes.io/component\"] == \"operator\", np
(rule,) = np[\"spec\"][\"ingress\"]
assert rule[\"ports\"] == [{\"port\": \"snapshot\", \"protocol\": \"TCP\"}], rule
assert rule[\"from\"] == [{\"podSelector\": {\"matchLabels\": {\"app.kubernetes.io/name\": \"switchboard\", \"app.kubernetes.io/instance\": \"sb\", \"app.kubernetes.io/component\": \"gateway\"}}}], rule
'"
check "gateway.overload becomes the gateway's env (defaults are the binary's)" bash -c "
  out=\$(helm template sb $chart -n sb --set gateway.overload.maxInFlight=64 --set gateway.overload.maxQueueDelay=25ms --set gateway.overload.maxConnections=500) &&
  echo \"\$out\" | grep -A1 'name: SWITCHBOARD_MAX_IN_FLIGHT' | grep -q 'value: \"64\"' &&
  echo \"\$out\" | grep -A1 'name: SWITCHBOARD_MAX_QUEUE_DELAY' | grep -q 'value: \"25ms\"' &&
  echo \"\$out\" | grep -A1 'name: SWITCHBOARD_MAX_CONNECTIONS' | grep -q 'value: \"500\"' &&
  helm template sb $chart -n sb | grep -A1 'name: SWITCHBOARD_MAX_IN_FLIGHT' | grep -q 'value: \"0\"' &&
  grep -q 'default_value_t = 0)\]' <(grep -A1 'SWITCHBOARD_MAX_IN_FLIGHT' gateway/src/main.rs) &&
  grep -q 'default_value = \"10ms\"' <(grep 'SWITCHBOARD_MAX_QUEUE_DELAY' gateway/src/main.rs) &&
  grep -q 'default_value_t = 10_000' <(grep 'SWITCHBOARD_MAX_CONNECTIONS' gateway/src/main.rs)"
check "gateway.settings reach the operator whatever the stream's TLS mode" bash -c "
  for mode in managed off; do
    helm template sb $chart -n sb --set gateway.settings.maxBodyBytes=1024 --set operator.deliveryTls.mode=\$mode |
      grep -q -- '- --gateway-settings' || { echo \"mode \$mode: no --gateway-settings\"; exit 1; }
  done"
check "secretSelector becomes --secret-selector, and no flag without it" bash -c "
  helm template sb $chart -n sb --set operator.secretSelector=switchboard.dev/credential=true |
    grep -A1 -- '- --secret-selector' | grep -q '\"switchboard.dev/credential=true\"' &&
  ! helm template sb $chart -n sb | grep -q -- '--secret-selector'"
check "upstreamNetworks values become operator flags" bash -c "
  helm template sb $chart -n sb --set 'operator.upstreamNetworks.deny={10.0.0.0/8,169.254.0.0/16}' --set 'operator.upstreamNetworks.allow={10.1.0.0/16}' |
    grep -A1 -- '--upstream-deny-networks' | grep -q '10.0.0.0/8,169.254.0.0/16' &&
  helm template sb $chart -n sb --set 'operator.upstreamNetworks.allow={10.1.0.0/16}' | grep -A1 -- '--upstream-allow-networks' | grep -q '10.1.0.0/16' &&
  ! helm template sb $chart -n sb | grep -q -- '--upstream-deny-networks'"
# The snapshot stream's TLS: managed by default; a provided Secret (cert-manager) mounts only its
# CA into the gateways; off is plain HTTP everywhere; anything else is refused by name.
check "gateway.settings: a ConfigMap in the file's shape, the operator's flag and mount; none by default" bash -c "
  values=\$(mktemp) && trap 'rm -f \$values' EXIT &&
  printf 'gateway:\n  settings:\n    maxBodyBytes: 8388608\n    sessionTtl: 12h\n    allowedOrigins: [https://app.example]\n' >\$values &&
  out=\$(helm template sb $chart -n sb -f \$values) &&
  echo \"\$out\" | grep -A6 'gateway-settings.yaml: |' | grep -q '^      maxBodyBytes: 8388608$' &&
  echo \"\$out\" | grep -A6 'gateway-settings.yaml: |' | grep -q '^      sessionTtl: 12h$' &&
  echo \"\$out\" | grep -A1 -- '- --gateway-settings' | grep -q '/etc/switchboard/gateway-settings/gateway-settings.yaml' &&
  echo \"\$out\" | grep -q 'name: sb-switchboard-operator-gateway-settings' &&
  ! helm template sb $chart -n sb | grep -q -- '--gateway-settings'"
# gateway.store: an existing Redis (URL, ACL user, the password mounted into the operator, which
# hands it on in the snapshot) or the demo one (its own Deployment and Service, marked not for
# production); the settings beside it kept; nothing of it by default.
check "gateway.store: a Redis by URL and Secret, or the demo Redis; none by default" bash -c "
  out=\$(helm template sb $chart -n sb --set gateway.store.redisUrl=rediss://redis.data.svc:6380/2 \
      --set gateway.store.username=switchboard --set gateway.store.passwordSecret.name=redis-pw \
      --set gateway.settings.maxBodyBytes=1024) &&
  echo \"\$out\" | grep -A12 'gateway-settings.yaml: |' | grep -q '^          url: rediss://redis.data.svc:6380/2$' &&
  echo \"\$out\" | grep -A12 'gateway-settings.yaml: |' | grep -q '^          username: switchboard$' &&
  echo \"\$out\" | grep -A12 'gateway-settings.yaml: |' | grep -q '^            file: /etc/switchboard/redis/password$' &&
  echo \"\$out\" | grep -A12 'gateway-settings.yaml: |' | grep -q '^      maxBodyBytes: 1024$' &&
  echo \"\$out\" | grep -A2 -- '- name: redis-password' | grep -q 'secretName: redis-pw' &&
  ! echo \"\$out\" | grep -q 'demo-redis' &&
  demo=\$(helm template sb $chart -n sb --set gateway.store.demoRedis.enabled=true) &&
  echo \"\$demo\" | grep -q '^# NOT FOR PRODUCTION' &&
  echo \"\$demo\" | grep -A6 'gateway-settings.yaml: |' | grep -q 'url: redis://sb-switchboard-demo-redis.sb.svc:6379/0' &&
  [[ \$(echo \"\$demo\" | grep -c '^kind: Service$') -ge 3 ]] &&
  ! helm template sb $chart -n sb | grep -q 'redis'"
# values.schema.json: generated from values.yaml, refuses unknown keys and wrong types by name.
check "values.schema.json is what charts/values-schema.py makes of values.yaml" python3 charts/values-schema.py --check
check "docs/api-reference.md is what crds/api-reference.py makes of crds/*.yaml" python3 crds/api-reference.py --check
check "charts/argocd/argocd-cm.yaml is what charts/argocd/generate.py makes of health.lua" python3 charts/argocd/generate.py --check
check_fails "a misspelled key is refused, naming it" "additional properties 'replica' not allowed" \
  helm template sb $chart --set gateway.replica=3
check_fails "a wrong type is refused, naming the key" "/gateway/replicas': got string, want integer" \
  helm template sb $chart --set gateway.replicas=three
check_fails "a misspelled nested key is refused, naming it" "additional properties 'replicaz' not allowed" \
  helm template sb $chart --set operator.replicaz=1
check "free-form maps take any keys (tracing.resourceAttributes, httpRoute.timeouts)" \
  helm template sb $chart --set tracing.resourceAttributes.a=b --set gateway.httpRoute.timeouts.request=0s
check_fails "a misspelled key of a nested value of our own is refused, naming it" "at '/gateway/overload': additional properties 'maxInflight' not allowed" \
  helm template sb $chart --set gateway.overload.maxInflight=1

# Kubernetes-typed values (resources, probes, security contexts, scheduling, volumes, env,
# labels, annotations, ...) take the Kubernetes types' schemas (charts/values-schema-types.json,
# from k8s-openapi), gateway.settings the settings' own (GatewaySettings). What a platform
# team commonly sets passes, as a file and as --set; section 3 applies both to the API server.
kube_values=tests/chart/kubernetes-values.yaml
kube_sets=(--set operator.resources.limits.cpu=500m --set gateway.resources.limits.cpu=2
  --set gateway.resources.requests.ephemeral-storage=1Gi --set gateway.readinessProbe.initialDelaySeconds=3
  --set gateway.livenessProbe.successThreshold=1 --set operator.podSecurityContext.fsGroupChangePolicy=OnRootMismatch
  --set 'gateway.podSecurityContext.supplementalGroups={4000,4001}' --set 'operator.tolerations[0].operator=Exists'
  --set gateway.strategy.rollingUpdate.maxSurge=50% --set gateway.strategy.rollingUpdate.maxUnavailable=0
  --set-string gateway.podAnnotations.prometheus\\.io/port=9091 --set gateway.settings.maxBodyBytes=8388608
  --set gateway.settings.sessionTtl=12h --set gateway.settings.listingPageCap=50)
check "helm lint --strict: the Kubernetes-typed values of $kube_values" lint_clean -f "$kube_values"
check "helm lint --strict: resources, probes, security contexts, strategy, settings set with --set" lint_clean "${kube_sets[@]}"
# Refused by helm, naming the value; each also refused by the API server when rendered without
# the schema (section 3): `set|what helm says|what the API server says`.
kube_refusals=(
  "gateway.resources.limits.cpu=half|at '/gateway/resources/limits/cpu': 'anyOf' failed|quantities must match the regular expression"
  "operator.resources.requests.memory=lots|at '/operator/resources/requests/memory': 'anyOf' failed|quantities must match the regular expression"
  "gateway.readinessProbe.periodSeconds=five|at '/gateway/readinessProbe/periodSeconds': got string, want integer|cannot unmarshal string into Go struct field Probe.+periodSeconds"
  "gateway.livenessProbe.initialDelaySecond=5|at '/gateway/livenessProbe': additional properties 'initialDelaySecond' not allowed|unknown field .+livenessProbe.initialDelaySecond"
  "gateway.livenessProbe.exec.command={/bin/true}|at '/gateway/livenessProbe': additional properties 'exec' not allowed|may not specify more than 1 handler type"
  "operator.podSecurityContext.runAsUser=root|at '/operator/podSecurityContext/runAsUser': got string, want integer|cannot unmarshal string into Go struct field PodSecurityContext.+runAsUser"
  "gateway.securityContext.capabilities.add=NET_ADMIN|at '/gateway/securityContext/capabilities/add': got string, want array|cannot unmarshal string into Go struct field Capabilities.+add"
  "gateway.podAnnotations.prometheus\\.io/port=9091|at '/gateway/podAnnotations/prometheus.io~1port': got number, want string|cannot unmarshal number into Go struct field ObjectMeta.+annotations"
  "gateway.tolerations[0].tolerationSeconds=soon|at '/gateway/tolerations/0/tolerationSeconds': got string, want integer|cannot unmarshal string into Go struct field Toleration.+tolerationSeconds"
  "gateway.extraVolumeMounts[0].name=data|at '/gateway/extraVolumeMounts/0': missing property 'mountPath'|mountPath: Required value"
  "gateway.strategy.rollingUpdate.maxSurge=true|at '/gateway/strategy/rollingUpdate/maxSurge': got boolean, want integer|cannot unmarshal bool into Go struct field RollingUpdateDeployment.+maxSurge"
)
for refusal in "${kube_refusals[@]}"; do
  IFS='|' read -r set says _ <<<"$refusal"
  check_fails "schema refuses --set $set, naming it" "$says" helm template sb "$chart" --set "$set"
done
# gateway.settings: typed from the settings' own definition; the operator's settings refused.
# `set|what helm says|what the operator says when it reads them` (section 3 runs the operator).
settings_refusals=(
  "gateway.settings.maxBodyBytes=big|at '/gateway/settings/maxBodyBytes': got string, want integer|gateway.maxBodyBytes: invalid type"
  "gateway.settings.maxBodyBytes=0|at '/gateway/settings/maxBodyBytes': minimum: got 0, want 1|gateway.maxBodyBytes: must be greater than 0"
  "gateway.settings.listingPageCap=-3|at '/gateway/settings/listingPageCap': minimum: got -3, want 1|gateway.listingPageCap: invalid value: integer .-3."
  "gateway.settings.sessionTTL=12h|at '/gateway/settings': additional properties 'sessionTTL' not allowed|unknown field .sessionTTL."
  "gateway.settings.sessionTtl=soon|at '/gateway/settings/sessionTtl': 'soon' does not match pattern|gateway.sessionTtl: invalid value: string .+, expected a duration"
  "gateway.settings.sessionTtl=3600|at '/gateway/settings/sessionTtl': got number, want string|gateway.sessionTtl: invalid type: integer"
  "gateway.settings.publicUrl=mcp.example.com|at '/gateway/settings/publicUrl': 'mcp.example.com' does not match pattern|gateway.publicUrl: must be an http or https URL"
  "gateway.settings.allowedOrigins=https://app.example.com|at '/gateway/settings/allowedOrigins': got string, want array|gateway.allowedOrigins: invalid type: string"
  "gateway.settings.upstreamTls.caBundl=x|at '/gateway/settings/upstreamTls': additional properties 'caBundl' not allowed|unknown field .caBundl."
  "gateway.settings.sessionKey=0123456789abcdef0123|at '/gateway/settings': additional properties 'sessionKey' not allowed|gateway.sessionKey cannot be set here"
  "gateway.settings.serviceAccountTokens.issuer=https://kubernetes.default.svc|at '/gateway/settings': additional properties 'serviceAccountTokens' not allowed|gateway.serviceAccountTokens cannot be set here"
  "gateway.settings.upstreamNetworks.deny={10.0.0.0/8}|at '/gateway/settings': additional properties 'upstreamNetworks' not allowed|gateway.upstreamNetworks cannot be set here"
)
for refusal in "${settings_refusals[@]}"; do
  IFS='|' read -r set says _ <<<"$refusal"
  check_fails "schema refuses --set $set, naming it" "$says" helm template sb "$chart" --set "$set"
done
check_fails "schema refuses a values file's duration given as a number, naming it" \
  "at '/gateway/settings/listingTtl': got number, want string" \
  helm template sb "$chart" -f - <<<$'gateway:\n  settings:\n    listingTtl: 30\n'
check_fails "schema refuses a values file's misspelled setting, naming it" \
  "at '/gateway/settings': additional properties 'maxBodyByte' not allowed" \
  helm template sb "$chart" -f - <<<$'gateway:\n  settings:\n    maxBodyByte: 1\n'
check "image digests pin both images (and the bridge image the operator hands out)" bash -c "
  out=\$(helm template sb $chart -n sb --set gateway.image.digest=sha256:1111 --set operator.image.digest=sha256:2222) &&
  echo \"\$out\" | grep -q 'image: \"ghcr.io/switchboard-dev/switchboard-gateway@sha256:1111\"' &&
  echo \"\$out\" | grep -q 'image: \"ghcr.io/switchboard-dev/switchboard-operator@sha256:2222\"' &&
  echo \"\$out\" | grep -A1 -- '--stdio-bridge-image' | grep -q '@sha256:1111'"
check "strategy and extra volumes reach both Deployments" bash -c "
  out=\$(helm template sb $chart -n sb --set operator.strategy.type=Recreate --set gateway.strategy.rollingUpdate.maxUnavailable=0 \
    --set 'operator.extraVolumes[0].name=corp-ca' --set 'operator.extraVolumes[0].configMap.name=corp-ca' \
    --set 'operator.extraVolumeMounts[0].name=corp-ca' --set 'operator.extraVolumeMounts[0].mountPath=/etc/corp-ca') &&
  echo \"\$out\" | grep -A1 '^  strategy:' | grep -q 'type: Recreate' &&
  echo \"\$out\" | grep -A3 '^  strategy:' | grep -q 'maxUnavailable: 0' &&
  echo \"\$out\" | grep -q 'mountPath: /etc/corp-ca' && echo \"\$out\" | grep -B1 -A1 'name: corp-ca' | grep -q configMap"
# Documentation that once contradicted the chart (each check fails on the old text).
check "values.yaml names the delivery CA Secret, trust ConfigMap and Service as rendered" bash -c "
  helm template sb $chart -n sb | grep -A1 -- '--delivery-ca-secret' | grep -q 'sb-switchboard-operator-delivery-ca' &&
  helm template sb $chart -n sb | grep -A1 -- '--delivery-trust-configmap' | grep -q 'sb-switchboard-operator-delivery-trust' &&
  grep -q 'Secret \`<fullname>-operator-delivery-ca\`' $chart/values.yaml &&
  grep -q 'ConfigMap \`<fullname>-operator-delivery-trust\`' $chart/values.yaml &&
  grep -q 'Service \`<fullname>-operator.<namespace>.svc\`' $chart/values.yaml &&
  helm template sb $chart -n sb | grep -q '^  name: sb-switchboard-operator$'"
check "--delivery-tls-names follows clusterDomain" bash -c "
  helm template sb $chart -n sb --set clusterDomain=corp.example | grep -A1 -- '--delivery-tls-names' | grep -q 'svc.corp.example' &&
  ! helm template sb $chart -n sb --set clusterDomain=corp.example | grep -A1 -- '--delivery-tls-names' | grep -q 'cluster.local'"
check "Chart.yaml's description names every kind the chart installs" bash -c "
  for kind in \$(grep -h '^    kind: ' $chart/crds/*.yaml | awk '{print \$2}'); do
    grep -A4 '^description:' $chart/Chart.yaml | grep -q \"\$kind\" || { echo \"Chart.yaml omits \$kind\"; exit 1; }
  done"
check "no stale wording: standbys, advertise URL, sessions on reload, error tables" bash -c "
  ! grep -q 'take over$' $chart/values.yaml && ! grep -q '^  # when the lease expires' $chart/values.yaml &&
  ! grep -q 'ADVERTISE_URL=http://\$(POD_IP):9090\`), not' $chart/README.md &&
  ! grep -rq 'only continue on this process' gateway/ &&
  grep -q '403 \`forbidden\`' README.md && grep -q '403 \`forbidden\`' docs/architecture.md"
check "deliveryTls secret: operator serves the Secret, gateways mount only its ca.crt" bash -c "
  out=\$(helm template sb $chart -n sb --set operator.deliveryTls.mode=secret --set operator.deliveryTls.secretName=op-cert) &&
  grep -A1 -- '--delivery-tls-secret' <<<\"\$out\" | grep -q op-cert &&
  ! grep -q -- '--delivery-ca-secret' <<<\"\$out\" &&
  grep -A6 'name: operator-ca' <<<\"\$out\" | grep -q 'secretName: op-cert' &&
  [[ \$(grep -A8 'secretName: op-cert' <<<\"\$out\" | grep -c 'key:') == 1 ]] &&
  grep -A8 'secretName: op-cert' <<<\"\$out\" | grep -q 'key: ca.crt' &&
  ! grep -q 'kind: ConfigMap\|verbs: \[\"get\", \"create\", \"update\"\]' <<<\"\$out\""
check "deliveryTls off: plain http, no CA mounted" bash -c "
  out=\$(helm template sb $chart -n sb --set operator.deliveryTls.mode=off) &&
  grep -q -- '- \"http://sb-switchboard-operator.sb.svc:9090\"' <<<\"\$out\" &&
  ! grep -q 'operator-ca\|delivery-' <<<\"\$out\""
check_fails "deliveryTls: an unknown mode is refused by name" "operator.deliveryTls.mode" \
  helm template sb $chart -n sb --set operator.deliveryTls.mode=tls
check_fails "deliveryTls secret without secretName is refused by name" "operator.deliveryTls.secretName" \
  helm template sb $chart -n sb --set operator.deliveryTls.mode=secret
gateway_deploy() { names "$@" | grep '^Deployment/.*gateway'; }
expect "release 'edge': names get the chart name" "Deployment/edge-switchboard-gateway" gateway_deploy edge -n sb
expect "fullnameOverride" "Deployment/mcp-gateway" gateway_deploy edge -n sb --set fullnameOverride=mcp
expect "nameOverride" "Deployment/edge-sw-gateway" gateway_deploy edge -n sb --set nameOverride=sw
check "no HPA by default" bash -c "! helm template sb $chart | grep -q '^kind: HorizontalPodAutoscaler'"
check "monitoring: nothing without the Prometheus Operator's CRDs, even when enabled" bash -c "
  ! helm template sb $chart --set monitoring.enabled=true | grep -qE '^kind: (ServiceMonitor|PodMonitor)'"
# The gateway's /metrics is on its internal port (9091), which its Service does not carry: both
# components are scraped by PodMonitors on pod ports.
check "monitoring: a PodMonitor each (gateway port internal, operator port metrics) when enabled and present; no ServiceMonitor" bash -c "
  out=\$(helm template sb $chart -n sb --set monitoring.enabled=true --set monitoring.labels.release=prom \
    --api-versions monitoring.coreos.com/v1/ServiceMonitor --api-versions monitoring.coreos.com/v1/PodMonitor)
  [ \$(grep -c '^kind: PodMonitor' <<<\"\$out\") = 2 ] && ! grep -q '^kind: ServiceMonitor' <<<\"\$out\" &&
  grep -B30 '    - port: internal' <<<\"\$out\" | grep -q 'name: sb-switchboard-gateway' &&
  grep -B30 '    - port: metrics' <<<\"\$out\" | grep -q 'name: sb-switchboard-operator' &&
  [ \$(grep -c '    release: prom' <<<\"\$out\") = 2 ] &&
  ! helm template sb $chart -n sb --set monitoring.enabled=true --api-versions monitoring.coreos.com/v1/ServiceMonitor | grep -q '^kind: PodMonitor'"
# The alerts (files/prometheus-rules.yaml; promtool checks them in 45-prometheus-rules) as a
# PrometheusRule: only with the CRD (the capability), with extra labels, without disabled alerts.
check "prometheusRule: nothing without the CRD, even when enabled; nothing by default" bash -c "
  ! helm template sb $chart --set monitoring.prometheusRule.enabled=true | grep -q '^kind: PrometheusRule' &&
  ! helm template sb $chart --api-versions monitoring.coreos.com/v1/PrometheusRule | grep -q '^kind: PrometheusRule'"
check "prometheusRule: rendered with the CRD, every alert of the file, labels, additionalRuleLabels, disabledAlerts" bash -c "
  args='-n sb --set monitoring.prometheusRule.enabled=true --api-versions monitoring.coreos.com/v1/PrometheusRule'
  out=\$(helm template sb $chart \$args --set monitoring.labels.release=prom --set monitoring.prometheusRule.labels.role=alerts \
    -s templates/prometheusrule.yaml) &&
  grep -q '^kind: PrometheusRule' <<<\"\$out\" && grep -q '^apiVersion: monitoring.coreos.com/v1' <<<\"\$out\" &&
  grep -q '    release: prom' <<<\"\$out\" && grep -q '    role: alerts' <<<\"\$out\" &&
  [ \$(grep -c '^      - alert: ' <<<\"\$out\") = \$(grep -c '^      - alert: ' $chart/files/prometheus-rules.yaml) ] &&
  out=\$(helm template sb $chart \$args --set monitoring.prometheusRule.additionalRuleLabels.team=platform \
    --set 'monitoring.prometheusRule.disabledAlerts={SwitchboardRequestsRateLimited}' -s templates/prometheusrule.yaml) &&
  ! grep -q 'SwitchboardRequestsRateLimited' <<<\"\$out\" && grep -q 'SwitchboardOperatorNoLeader' <<<\"\$out\" &&
  [ \$(grep -c '          team: platform' <<<\"\$out\") = \$((\$(grep -c '^      - alert: ' $chart/files/prometheus-rules.yaml) - 1)) ]"
check "dashboard: a ConfigMap labelled grafana_dashboard=\"1\" (configurable) with files/dashboard.json, only when enabled" bash -c "
  ! helm template sb $chart | grep -q 'switchboard.json' &&
  out=\$(helm template sb $chart -n sb --set monitoring.dashboard.enabled=true -s templates/dashboard-configmap.yaml) &&
  grep -q '^kind: ConfigMap' <<<\"\$out\" && grep -q '    grafana_dashboard: \"1\"' <<<\"\$out\" &&
  grep -q '  switchboard.json: |-' <<<\"\$out\" && grep -q '\"uid\": \"switchboard\"' <<<\"\$out\" &&
  out=\$(helm template sb $chart -n sb --set monitoring.dashboard.enabled=true --set monitoring.dashboard.namespace=grafana \
    --set monitoring.dashboard.labels.grafana_dashboard=yes -s templates/dashboard-configmap.yaml) &&
  grep -q '  namespace: grafana' <<<\"\$out\" && grep -q '    grafana_dashboard: \"yes\"' <<<\"\$out\""
# The NetworkPolicy: off by default; on, 8080 from anywhere (or httpFrom), 9091 only from this
# release's gateway pods and metricsFrom.
check "networkPolicy: none by default" bash -c "! helm template sb $chart | grep -q '^kind: NetworkPolicy'"
check "networkPolicy: 8080 open, 9091 from the release's gateway pods and metricsFrom only" bash -c "
  out=\$(helm template sb $chart -n sb --set gateway.networkPolicy.enabled=true \
    --set 'gateway.networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\.io/metadata\.name=monitoring' \
    -s templates/gateway-networkpolicy.yaml) &&
  grep -q '^kind: NetworkPolicy' <<<\"\$out\" && grep -q 'policyTypes: \[Ingress\]' <<<\"\$out\" &&
  [ \"\$(grep -A3 '    - ports:' <<<\"\$out\" | grep -c 'from:')\" = 1 ] &&
  grep -A2 '        - port: http' <<<\"\$out\" | grep -qv 'from:' &&
  grep -A12 '        - port: internal' <<<\"\$out\" | grep -q 'app.kubernetes.io/component: gateway' &&
  grep -A12 '        - port: internal' <<<\"\$out\" | grep -q 'app.kubernetes.io/instance: sb' &&
  grep -A14 '        - port: internal' <<<\"\$out\" | grep -q 'kubernetes.io/metadata.name: monitoring' &&
  helm template sb $chart -n sb --set gateway.networkPolicy.enabled=true --set 'gateway.networkPolicy.httpFrom[0].ipBlock.cidr=10.0.0.0/8' \
    -s templates/gateway-networkpolicy.yaml | grep -A6 '        - port: http' | grep -q 'cidr: 10.0.0.0/8'"
# OpenTelemetry: the standard OTEL_* variables on both Deployments, only with tracing.enabled;
# the headers only from a Secret; the collector's CA mounted for OTEL_EXPORTER_OTLP_CERTIFICATE.
check "tracing: no OTEL_* by default" bash -c "! helm template sb $chart | grep -q 'OTEL_'"
check "tracing: OTEL_* on both Deployments, headers from a Secret key, CA mounted" bash -c "
  out=\$(helm template sb $chart -n sb --set tracing.enabled=true --set tracing.otlp.endpoint=https://otel.obs.svc:4317 \
    --set tracing.otlp.headersSecret.name=otlp-auth --set tracing.otlp.caSecret.name=otlp-ca --set tracing.sampleRatio=0.25 \
    --set 'tracing.resourceAttributes.deployment\.environment=prod') &&
  [ \$(grep -c -- '- name: OTEL_EXPORTER_OTLP_ENDPOINT' <<<\"\$out\") = 2 ] &&
  [ \$(grep -c 'value: \"https://otel.obs.svc:4317\"' <<<\"\$out\") = 2 ] &&
  [ \$(grep -A1 -- '- name: OTEL_EXPORTER_OTLP_PROTOCOL' <<<\"\$out\" | grep -c 'value: \"grpc\"') = 2 ] &&
  [ \$(grep -A4 -- '- name: OTEL_EXPORTER_OTLP_HEADERS' <<<\"\$out\" | grep -c 'name: \"otlp-auth\"') = 2 ] &&
  ! grep -A1 -- '- name: OTEL_EXPORTER_OTLP_HEADERS' <<<\"\$out\" | grep -q 'value:' &&
  [ \$(grep -A1 -- '- name: OTEL_EXPORTER_OTLP_CERTIFICATE' <<<\"\$out\" | grep -c 'value: /etc/switchboard/otlp-ca/ca.crt') = 2 ] &&
  [ \$(grep -c 'mountPath: /etc/switchboard/otlp-ca' <<<\"\$out\") = 2 ] &&
  [ \$(grep -c 'secretName: \"otlp-ca\"' <<<\"\$out\") = 2 ] &&
  [ \$(grep -A1 -- '- name: OTEL_TRACES_SAMPLER_ARG' <<<\"\$out\" | grep -c 'value: \"0.25\"') = 2 ] &&
  grep -A1 -- '- name: OTEL_SERVICE_NAME' <<<\"\$out\" | grep -q 'value: \"switchboard-gateway\"' &&
  grep -A1 -- '- name: OTEL_SERVICE_NAME' <<<\"\$out\" | grep -q 'value: \"switchboard-operator\"' &&
  [ \$(grep -c 'value: \"k8s.namespace.name=sb,k8s.pod.name=\$(POD_NAME),deployment.environment=prod\"' <<<\"\$out\") = 2 ]"
check_fails "tracing: enabled without an endpoint is refused by name" "tracing.otlp.endpoint" \
  helm template sb "$chart" --set tracing.enabled=true
check_fails "tracing: an unknown protocol is refused by name" "tracing.otlp.protocol" \
  helm template sb "$chart" --set tracing.enabled=true --set tracing.otlp.endpoint=http://c:4318 --set tracing.otlp.protocol=http/json
check_fails "tracing: a sample ratio above 1 is refused by name" "tracing.sampleRatio" \
  helm template sb "$chart" --set tracing.enabled=true --set tracing.otlp.endpoint=http://c:4317 --set tracing.sampleRatio=2
check_fails "tracing: a CA from both a ConfigMap and a Secret is refused" "caConfigMap or caSecret" \
  helm template sb "$chart" --set tracing.enabled=true --set tracing.otlp.endpoint=http://c:4317 \
  --set tracing.otlp.caConfigMap.name=a --set tracing.otlp.caSecret.name=b
check "tracing: a client certificate Secret is mounted and named by OTEL_EXPORTER_OTLP_CLIENT_*" bash -c "
  out=\$(helm template sb $chart -n sb --set tracing.enabled=true --set tracing.otlp.endpoint=https://otel.obs.svc:4317 \
    --set tracing.otlp.clientCertificateSecret=otlp-client) &&
  [ \$(grep -A1 -- '- name: OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE' <<<\"\$out\" | grep -c 'value: /etc/switchboard/otlp-client/tls.crt') = 2 ] &&
  [ \$(grep -A1 -- '- name: OTEL_EXPORTER_OTLP_CLIENT_KEY' <<<\"\$out\" | grep -c 'value: /etc/switchboard/otlp-client/tls.key') = 2 ] &&
  [ \$(grep -c 'mountPath: /etc/switchboard/otlp-client' <<<\"\$out\") = 2 ] &&
  [ \$(grep -c 'secretName: \"otlp-client\"' <<<\"\$out\") = 2 ] &&
  ! helm template sb $chart -n sb --set tracing.enabled=true --set tracing.otlp.endpoint=https://o:4317 | grep -q OTEL_EXPORTER_OTLP_CLIENT"
check_fails "tracing: a CA bundle beside an http:// endpoint is refused by name" "tracing.otlp.endpoint" \
  helm template sb "$chart" --set tracing.enabled=true --set tracing.otlp.endpoint=http://c:4317 --set tracing.otlp.caSecret.name=b
check_fails "tracing: a client certificate beside an http:// endpoint is refused by name" "is not https://" \
  helm template sb "$chart" --set tracing.enabled=true --set tracing.otlp.endpoint=http://c:4317 --set tracing.otlp.clientCertificateSecret=c
# The audit log's destination.
check "audit: SWITCHBOARD_AUDIT_LOG stdout by default, a path or off when set" bash -c "
  helm template sb $chart -s templates/gateway-deployment.yaml | grep -A1 -- '- name: SWITCHBOARD_AUDIT_LOG' | grep -q 'value: \"stdout\"' &&
  helm template sb $chart -s templates/gateway-deployment.yaml --set gateway.audit.log=off | grep -A1 -- '- name: SWITCHBOARD_AUDIT_LOG' | grep -q 'value: \"off\"' &&
  helm template sb $chart -s templates/gateway-deployment.yaml --set gateway.audit.log=/var/log/sb/audit.jsonl | grep -A1 -- '- name: SWITCHBOARD_AUDIT_LOG' | grep -q 'value: \"/var/log/sb/audit.jsonl\"'"
check_fails "audit: a relative path is refused by name" "gateway.audit.log" \
  helm template sb "$chart" --set gateway.audit.log=audit.jsonl
check "HPA on: Deployment leaves replicas to it" bash -c "
  out=\$(helm template sb $chart --set gateway.autoscaling.enabled=true)
  grep -q '^kind: HorizontalPodAutoscaler' <<<\"\$out\" &&
  ! helm template sb $chart --set gateway.autoscaling.enabled=true -s templates/gateway-deployment.yaml | grep -q '^  replicas:'"
app_version=$(awk '/^appVersion:/{gsub(/"/, "", $2); print $2}' "$chart/Chart.yaml")
check "image tag defaults to appVersion ($app_version)" bash -c "
  helm template sb $chart | grep -qx '          image: \"ghcr.io/switchboard-dev/switchboard-operator:$app_version\"' &&
  helm template sb $chart | grep -qx '          image: \"ghcr.io/switchboard-dev/switchboard-gateway:$app_version\"'"
check "image tag override (the operator's --stdio-bridge-image follows the gateway's)" bash -c "
  helm template sb $chart --set operator.image.tag=dev1 --set gateway.image.tag=dev2 | grep -c ':dev[12]\"' | grep -qx 3 &&
  helm template sb $chart --set gateway.image.tag=dev2 | grep -A1 -- '- --stdio-bridge-image' | grep -qF 'switchboard-gateway:dev2'"
check "publicUrl host and allowedHosts join the Service names" bash -c "
  helm template sb $chart -n ns --set gateway.publicUrl=https://mcp.example.com:8443/x --set 'gateway.allowedHosts={mcp.internal}' |
  grep -qF 'value: \"sb-switchboard-gateway,sb-switchboard-gateway.ns,sb-switchboard-gateway.ns.svc,sb-switchboard-gateway.ns.svc.cluster.local,mcp.example.com:8443,mcp.internal\"'"
check_fails "autoscaling without any target is refused" "needs targetCPUUtilizationPercentage" \
  helm template sb "$chart" --set gateway.autoscaling.enabled=true --set gateway.autoscaling.targetCPUUtilizationPercentage=0
check_fails "an existing gateway SA must be named" "gateway.serviceAccount.name is required" \
  helm template sb "$chart" --set gateway.serviceAccount.create=false
check_fails "kubeVersion < 1.31 is refused" "incompatible with Kubernetes" \
  helm template sb "$chart" --kube-version 1.30.14
check "kubeVersion 1.31 (the oldest the Kubernetes suite runs against) is accepted" \
  helm template sb "$chart" --kube-version 1.31.14

# ---- 3. a real kube-apiserver ----------------------------------------------------------------
dir=$(mktemp -d "${TMPDIR:-/tmp}/switchboard-helm.XXXXXX")
cleanup() { tests/k8s/cluster.sh stop "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
# cluster.sh picks random free ports; another process can take one before etcd binds it (the
# range overlaps the kernel's ephemeral ports), so a failed start is retried on new ports.
for attempt in 1 2 3; do
  if tests/k8s/cluster.sh start "$dir"; then break; fi
  tests/k8s/cluster.sh stop "$dir" >/dev/null 2>&1 || true
  if ((attempt == 3)); then bad "start the loopback cluster (3 attempts)"; echo "$passed passed, $failed failed"; exit 1; fi
  echo "# cluster start failed (attempt $attempt); retrying on new ports" >&2
  mkdir -p "$dir"
done
eval "$(tests/k8s/cluster.sh env "$dir")"
export PATH="$bin:$PATH"

ns=switchboard-system rel=switchboard
op=switchboard-operator gw=switchboard-gateway
check "create the release namespace" kubectl create namespace "$ns"
helm template "$rel" "$chart" --namespace "$ns" --include-crds >"$dir/rendered.yaml"
check "kubectl apply --server-side of helm template --include-crds" \
  kubectl apply --server-side --field-manager=helm-template -f "$dir/rendered.yaml"
check "re-apply is a no-op without conflicts" \
  kubectl apply --server-side --field-manager=helm-template -f "$dir/rendered.yaml"
check "CRDs Established" kubectl wait --for=condition=Established --timeout=30s \
  crd/mcpservers.switchboard.dev crd/mcpvirtualservers.switchboard.dev crd/mcpkeys.switchboard.dev crd/modelroutes.switchboard.dev
check "CRDs served (kubectl get mcpservers,mcpvirtualservers,mcpkeys,modelroutes -A)" kubectl get mcpservers,mcpvirtualservers,mcpkeys,modelroutes -A
# Acceptance 4 (issue 25): what `kubectl explain` shows, field by field, from the served schema.
check "kubectl explain: every kind and every field has a description" python3 tests/k8s/explain-check.py
check "control: a field whose description is removed is named by the explain check" tests/k8s/explain-control.sh
# The Ingress and the HTTPRoute against the API server's schemas (the Gateway API's own CRDs,
# standard channel, from its Go module).
gateway_api=$(tests/k8s/gateway-api-crds.sh) || bad "tests/k8s/gateway-api-crds.sh"
check "Gateway API CRDs applied (standard channel)" kubectl apply --server-side -f "$gateway_api"
check "Gateway API CRDs Established" kubectl wait --for=condition=Established --timeout=30s crd/httproutes.gateway.networking.k8s.io
exposure_values=(--set gateway.ingress.enabled=true --set 'gateway.ingress.hosts={mcp.example.com}'
  --set gateway.ingress.className=nginx --set 'gateway.ingress.tls[0].hosts={mcp.example.com}'
  --set 'gateway.ingress.tls[0].secretName=mcp-tls' --set gateway.httpRoute.enabled=true
  --set 'gateway.httpRoute.hostnames={mcp.example.com}' --set 'gateway.httpRoute.parentRefs[0].name=public'
  --set 'gateway.httpRoute.parentRefs[0].namespace=infra' --set gateway.httpRoute.timeouts.request=0s
  --set operator.networkPolicy.enabled=true --set gateway.networkPolicy.enabled=true)
check "Ingress, HTTPRoute and both NetworkPolicies pass the API server's validation (server dry-run)" bash -c "
  helm template $rel $chart --namespace $ns ${exposure_values[*]} --show-only templates/gateway-ingress.yaml \
    --show-only templates/gateway-httproute.yaml --show-only templates/operator-networkpolicy.yaml \
    --show-only templates/gateway-networkpolicy.yaml | kubectl apply --dry-run=server -f - | grep -c 'created (server dry run)' | grep -qx 4"
check_fails "control: an HTTPRoute the Gateway API schema refuses is refused" "Unsupported value" bash -c "
  helm template $rel $chart --namespace $ns ${exposure_values[*]} --show-only templates/gateway-httproute.yaml |
    sed 's/type: PathPrefix/type: Anywhere/' | kubectl apply --dry-run=server -f -"
check "objects exist" kubectl -n "$ns" get \
  "deploy/$op" "deploy/$gw" "svc/$op" "svc/$gw" "pdb/$op" "pdb/$gw" "sa/$op" "sa/$gw" \
  "role/$op" "rolebinding/$op" "clusterrole/$op" "clusterrolebinding/$op"

jp() { kubectl -n "$ns" get "$1" -o "jsonpath=$2"; }
# operator
expect "operator: 2 replicas" 2 jp "deploy/$op" '{.spec.replicas}'
expect "operator: command" switchboard-operator jp "deploy/$op" '{.spec.template.spec.containers[0].command[0]}'
expect "operator: args" \
  "--namespace \$(POD_NAMESPACE) --snapshot-listen 0.0.0.0:9090 --metrics-listen 0.0.0.0:9091 --gateway-service-account $ns:$gw --snapshot-secret $rel-snapshot --lease-name $op --stdio-bridge-image ghcr.io/switchboard-dev/switchboard-gateway:$app_version --gateway-pod-labels app.kubernetes.io/name=switchboard,app.kubernetes.io/instance=$rel,app.kubernetes.io/component=gateway --operator-pod-labels app.kubernetes.io/name=switchboard,app.kubernetes.io/instance=$rel,app.kubernetes.io/component=operator --delivery-ca-secret $op-delivery-ca --delivery-trust-configmap $op-delivery-trust --delivery-tls-names $op,$op.$ns,$op.$ns.svc,$op.$ns.svc.cluster.local --delivery-cert-validity 24h --delivery-ca-validity 8760h" \
  jp "deploy/$op" '{.spec.template.spec.containers[0].args[*]}'
# The fence of each spec.run server admits the pods by these: they must be the pods' own labels.
expect "operator: --gateway-pod-labels are the gateway pods' labels" \
  "app.kubernetes.io/component=gateway,app.kubernetes.io/instance=$rel,app.kubernetes.io/name=switchboard" \
  bash -c "kubectl -n $ns get deploy/$gw -o json | python3 -c 'import json,sys; l=json.load(sys.stdin)[\"spec\"][\"template\"][\"metadata\"][\"labels\"]; print(\",\".join(f\"{k}={v}\" for k,v in sorted(l.items()) if k.startswith(\"app.kubernetes.io/\")))'"
expect "operator: POD_NAME, POD_NAMESPACE, POD_IP from the downward API" "POD_NAME=metadata.name,POD_NAMESPACE=metadata.namespace,POD_IP=status.podIP," \
  jp "deploy/$op" '{range .spec.template.spec.containers[0].env[?(@.valueFrom.fieldRef)]}{.name}={.valueFrom.fieldRef.fieldPath},{end}'
expect "operator: probes on 9091" "/healthz metrics /readyz metrics 9091" \
  jp "deploy/$op" '{.spec.template.spec.containers[0].livenessProbe.httpGet.path} {.spec.template.spec.containers[0].livenessProbe.httpGet.port} {.spec.template.spec.containers[0].readinessProbe.httpGet.path} {.spec.template.spec.containers[0].readinessProbe.httpGet.port} {.spec.template.spec.containers[0].ports[?(@.name=="metrics")].containerPort}'
expect "operator: serviceAccountName" "$op" jp "deploy/$op" '{.spec.template.spec.serviceAccountName}'
expect "operator: acks come to the pod itself, over TLS" 'https://$(POD_IP):9090' \
  jp "deploy/$op" '{.spec.template.spec.containers[0].env[?(@.name=="SWITCHBOARD_ADVERTISE_URL")].value}'
expect "operator: resources set" "20m 32Mi 256Mi" \
  jp "deploy/$op" '{.spec.template.spec.containers[0].resources.requests.cpu} {.spec.template.spec.containers[0].resources.requests.memory} {.spec.template.spec.containers[0].resources.limits.memory}'
expect "operator Service: 9090 'snapshot'" "snapshot 9090 snapshot" \
  jp "svc/$op" '{.spec.ports[0].name} {.spec.ports[0].port} {.spec.ports[0].targetPort}'
expect "operator Service selects the operator pods" \
  "$(jp "deploy/$op" '{.spec.template.metadata.labels}')" jp "svc/$op" '{.spec.selector}'
# gateway
expect "gateway: 2 replicas" 2 jp "deploy/$gw" '{.spec.replicas}'
expect "gateway: drains kept-alive connections for 5s after SIGTERM" 5s \
  jp "deploy/$gw" '{.spec.template.spec.containers[0].env[?(@.name=="SWITCHBOARD_DRAIN")].value}'
expect "gateway: preStop sleeps 5s before SIGTERM" 5 \
  jp "deploy/$gw" '{.spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds}'
expect "gateway: command" switchboard-gateway jp "deploy/$gw" '{.spec.template.spec.containers[0].command[0]}'
expect "gateway: args" \
  "--listen 0.0.0.0:8080 --internal-listen 0.0.0.0:9091 --operator https://$op.$ns.svc:9090 --token-file /var/run/secrets/switchboard/token --config /etc/switchboard/snapshot/snapshot.yaml --operator-ca /etc/switchboard/operator-ca/ca.crt" \
  jp "deploy/$gw" '{.spec.template.spec.containers[0].args[*]}'
expect "gateway: the operator's trust bundle (ConfigMap, not optional) at /etc/switchboard/operator-ca/ca.crt" \
  "$op-delivery-trust  ca.crt /etc/switchboard/operator-ca" \
  jp "deploy/$gw" '{.spec.template.spec.volumes[?(@.name=="operator-ca")].configMap.name} {.spec.template.spec.volumes[?(@.name=="operator-ca")].configMap.optional} {.spec.template.spec.volumes[?(@.name=="operator-ca")].configMap.items[0].path} {.spec.template.spec.containers[0].volumeMounts[?(@.name=="operator-ca")].mountPath}'
expect "gateway: POD_NAME from the downward API" "metadata.name" \
  jp "deploy/$gw" '{.spec.template.spec.containers[0].env[?(@.name=="POD_NAME")].valueFrom.fieldRef.fieldPath}'
expect "gateway: own SA, automountServiceAccountToken false" "$gw false" \
  jp "deploy/$gw" '{.spec.template.spec.serviceAccountName} {.spec.template.spec.automountServiceAccountToken}'
expect "gateway: projected token (audience, expiry) at /var/run/secrets/switchboard" \
  "switchboard-operator 3600 token /var/run/secrets/switchboard" \
  jp "deploy/$gw" '{.spec.template.spec.volumes[?(@.name=="operator-token")].projected.sources[0].serviceAccountToken.audience} {.spec.template.spec.volumes[?(@.name=="operator-token")].projected.sources[0].serviceAccountToken.expirationSeconds} {.spec.template.spec.volumes[?(@.name=="operator-token")].projected.sources[0].serviceAccountToken.path} {.spec.template.spec.containers[0].volumeMounts[?(@.name=="operator-token")].mountPath}'
expect "gateway: snapshot Secret (optional) at /etc/switchboard/snapshot/snapshot.yaml" \
  "$rel-snapshot true snapshot.yaml /etc/switchboard/snapshot" \
  jp "deploy/$gw" '{.spec.template.spec.volumes[?(@.name=="snapshot")].secret.secretName} {.spec.template.spec.volumes[?(@.name=="snapshot")].secret.optional} {.spec.template.spec.volumes[?(@.name=="snapshot")].secret.items[0].path} {.spec.template.spec.containers[0].volumeMounts[?(@.name=="snapshot")].mountPath}'
expect "gateway: container ports http 8080 and internal 9091" "http=8080,internal=9091," \
  jp "deploy/$gw" '{range .spec.template.spec.containers[0].ports[*]}{.name}={.containerPort},{end}'
expect "gateway: probes on the internal port (9091)" "/healthz internal /readyz internal 9091" \
  jp "deploy/$gw" '{.spec.template.spec.containers[0].livenessProbe.httpGet.path} {.spec.template.spec.containers[0].livenessProbe.httpGet.port} {.spec.template.spec.containers[0].readinessProbe.httpGet.path} {.spec.template.spec.containers[0].readinessProbe.httpGet.port} {.spec.template.spec.containers[0].ports[?(@.name=="internal")].containerPort}'
expect "gateway: other replicas reach this one's internal listener (hand-off) at the pod IP" 'http://$(POD_IP):9091' \
  jp "deploy/$gw" '{.spec.template.spec.containers[0].env[?(@.name=="SWITCHBOARD_ADVERTISE_URL")].value}'
expect "gateway: audit log to stdout" stdout \
  jp "deploy/$gw" '{.spec.template.spec.containers[0].env[?(@.name=="SWITCHBOARD_AUDIT_LOG")].value}'
expect "gateway: allowed hosts include the Service DNS names" \
  "$gw,$gw.$ns,$gw.$ns.svc,$gw.$ns.svc.cluster.local" \
  jp "deploy/$gw" '{.spec.template.spec.containers[0].env[?(@.name=="SWITCHBOARD_ALLOWED_HOSTS")].value}'
expect "gateway Service: only 80 -> http(8080), never the internal port" "http 80 http;" \
  jp "svc/$gw" '{range .spec.ports[*]}{.name} {.port} {.targetPort};{end}'
expect "gateway Service selects the gateway pods" \
  "$(jp "deploy/$gw" '{.spec.template.metadata.labels}')" jp "svc/$gw" '{.spec.selector}'
expect "gateway PDB: minAvailable 1, selects the gateway pods" \
  "1 $(jp "deploy/$gw" '{.spec.template.metadata.labels}')" jp "pdb/$gw" '{.spec.minAvailable} {.spec.selector.matchLabels}'
check "gateway: no HPA by default" bash -c "[ -z \"\$(kubectl -n $ns get hpa -o name)\" ]"
# security context, both
for d in "$op" "$gw"; do
  expect "$d: securityContext (non-root, ro rootfs, no escalation, drop ALL, seccomp)" \
    "true true false ALL RuntimeDefault RuntimeDefault" \
    jp "deploy/$d" '{.spec.template.spec.securityContext.runAsNonRoot} {.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem} {.spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation} {.spec.template.spec.containers[0].securityContext.capabilities.drop[*]} {.spec.template.spec.securityContext.seccompProfile.type} {.spec.template.spec.containers[0].securityContext.seccompProfile.type}'
done

# RBAC, by impersonation
as_op="system:serviceaccount:$ns:$op" as_gw="system:serviceaccount:$ns:$gw"
can() { # yes|no SUBJECT can-i-args...
  local want=$1 who=$2 got; shift 2
  got=$(kubectl auth can-i "$@" --as="$who" 2>/dev/null) || true
  [[ "$got" == "$want" ]] || { echo "kubectl auth can-i $* --as=$who: $got (want $want)"; return 1; }
}
rbac_operator() {
  local rc=0
  can yes "$as_op" get mcpservers.switchboard.dev -A || rc=1
  can yes "$as_op" list mcpservers.switchboard.dev -A || rc=1
  can yes "$as_op" watch mcpkeys.switchboard.dev -A || rc=1
  can yes "$as_op" patch mcpservers.switchboard.dev --subresource=status -n default || rc=1
  can yes "$as_op" update mcpkeys.switchboard.dev --subresource=status -n default || rc=1
  can yes "$as_op" watch modelroutes.switchboard.dev -A || rc=1
  can yes "$as_op" patch modelroutes.switchboard.dev --subresource=status -n default || rc=1
  can yes "$as_op" watch mcpvirtualservers.switchboard.dev -A || rc=1
  can yes "$as_op" patch mcpvirtualservers.switchboard.dev --subresource=status -n default || rc=1
  can no "$as_op" update mcpvirtualservers.switchboard.dev -n default || rc=1
  can yes "$as_op" create secrets -n default || rc=1
  can yes "$as_op" patch secrets -n "$ns" || rc=1
  can yes "$as_op" watch secrets -A || rc=1
  can yes "$as_op" create events -n default || rc=1
  can yes "$as_op" patch events.events.k8s.io -n default || rc=1
  can yes "$as_op" create tokenreviews.authentication.k8s.io || rc=1
  can yes "$as_op" get /openid/v1/jwks || rc=1
  can yes "$as_op" get /.well-known/openid-configuration || rc=1
  can yes "$as_op" create leases.coordination.k8s.io -n "$ns" || rc=1
  can yes "$as_op" update leases.coordination.k8s.io -n "$ns" || rc=1
  can yes "$as_op" create configmaps -n "$ns" || rc=1
  can yes "$as_op" update configmaps -n "$ns" || rc=1
  can yes "$as_op" watch namespaces || rc=1
  can yes "$as_op" watch configmaps -A || rc=1
  # McpServer spec.run: its Deployment, Services and autoscaler, and its pods' status.
  can yes "$as_op" create deployments.apps -n default || rc=1
  can yes "$as_op" patch deployments.apps -n default || rc=1
  can yes "$as_op" delete deployments.apps -n default || rc=1
  can yes "$as_op" watch deployments.apps -A || rc=1
  can yes "$as_op" patch services -n default || rc=1
  can yes "$as_op" patch horizontalpodautoscalers.autoscaling -n default || rc=1
  can yes "$as_op" patch networkpolicies.networking.k8s.io -n default || rc=1
  can yes "$as_op" delete networkpolicies.networking.k8s.io -n default || rc=1
  can yes "$as_op" watch pods -A || rc=1
  return $rc
}
rbac_operator_not() {
  local rc=0
  can no "$as_op" create mcpservers.switchboard.dev -n default || rc=1
  can no "$as_op" update mcpservers.switchboard.dev -n default || rc=1
  can no "$as_op" delete mcpkeys.switchboard.dev -n default || rc=1
  can no "$as_op" update modelroutes.switchboard.dev -n default || rc=1
  can no "$as_op" delete secrets -n default || rc=1
  can no "$as_op" create leases.coordination.k8s.io -n default || rc=1
  can no "$as_op" create configmaps -n default || rc=1
  can no "$as_op" delete configmaps -n "$ns" || rc=1
  can no "$as_op" create pods -n default || rc=1
  can no "$as_op" delete pods -n default || rc=1
  can no "$as_op" create pods --subresource=exec -n default || rc=1
  can no "$as_op" get pods --subresource=log -n default || rc=1
  can no "$as_op" update deployments.apps -n default || rc=1
  can no "$as_op" list networkpolicies.networking.k8s.io -A || rc=1
  can no "$as_op" create statefulsets.apps -n default || rc=1
  can no "$as_op" update namespaces || rc=1
  can no "$as_op" create serviceaccounts/token -n "$ns" || rc=1
  can no "$as_op" create subjectaccessreviews.authorization.k8s.io || rc=1
  can no "$as_op" '*' '*' -A || rc=1
  can no "$as_op" get /metrics || rc=1
  return $rc
}
rbac_gateway_nothing() {
  local rc=0 verb res
  for res in secrets configmaps pods leases.coordination.k8s.io mcpservers.switchboard.dev mcpvirtualservers.switchboard.dev mcpkeys.switchboard.dev modelroutes.switchboard.dev; do
    for verb in get list watch; do can no "$as_gw" "$verb" "$res" -n "$ns" || rc=1; done
  done
  can no "$as_gw" create tokenreviews.authentication.k8s.io || rc=1
  can no "$as_gw" create events -n "$ns" || rc=1
  return $rc
}
check "RBAC: operator may do what it needs" rbac_operator
check "RBAC: operator may do nothing more" rbac_operator_not
check "RBAC: gateway may read and write nothing" rbac_gateway_nothing
check "RBAC: no binding names the gateway ServiceAccount" bash -c "
  ! kubectl get clusterrolebindings,rolebindings -A \
      -o jsonpath='{range .items[*]}{range .subjects[*]}{.namespace}/{.name}{\"\\n\"}{end}{end}' | grep -qx '$ns/$gw'"

# What the operator does at run time, done as the operator's ServiceAccount.
lease_as_operator() {
  kubectl --as="$as_op" -n "$ns" create -f - <<EOF >/dev/null || return 1
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: $op}
spec: {holderIdentity: $op-test-0, leaseDurationSeconds: 15}
EOF
  kubectl --as="$as_op" -n "$ns" patch lease "$op" --type=merge -p '{"spec":{"holderIdentity":"'"$op"'-test-1"}}' >/dev/null || return 1
  [[ "$(kubectl --as="$as_op" -n "$ns" get lease "$op" -o 'jsonpath={.spec.holderIdentity}')" == "$op-test-1" ]]
}
check "operator SA creates and takes over its Lease in $ns" lease_as_operator
check "Lease exists" kubectl -n "$ns" get "lease/$op"
tokenreview_as_operator() {
  local tok out
  tok=$(kubectl -n "$ns" create token "$gw" --audience switchboard-operator --duration 10m) || return 1
  out=$(kubectl --as="$as_op" create --validate=false -o 'jsonpath={.status.authenticated} {.status.user.username} {.status.audiences[*]}' -f - <<EOF
apiVersion: authentication.k8s.io/v1
kind: TokenReview
spec: {token: $tok, audiences: [switchboard-operator]}
EOF
  ) || return 1
  [[ "$out" == "true $as_gw switchboard-operator" ]] || { echo "TokenReview: $out"; return 1; }
}
check "operator SA reviews a gateway token (audience switchboard-operator)" tokenreview_as_operator
snapshot_secret_as_operator() {
  kubectl --as="$as_op" -n "$ns" create secret generic "$rel-snapshot" --from-literal=snapshot.yaml='version: 1' >/dev/null &&
  kubectl --as="$as_op" -n "$ns" get secret "$rel-snapshot" -o name >/dev/null &&
  ! kubectl --as="$as_op" -n "$ns" delete secret "$rel-snapshot" >/dev/null 2>&1
}
check "operator SA writes the snapshot Secret, cannot delete it" snapshot_secret_as_operator
check_fails "gateway SA cannot read the snapshot Secret" "forbidden" \
  kubectl --as="$as_gw" -n "$ns" get secret "$rel-snapshot"

# Autoscaling on, second release in its own namespace.
ns2=edge-system
check "create namespace $ns2" kubectl create namespace "$ns2"
# This release also has the NetworkPolicy, tracing (headers from a Secret, the CA from a
# ConfigMap) and an audit log file: the API server must accept them as rendered.
helm template edge "$chart" --namespace "$ns2" --include-crds --set gateway.autoscaling.enabled=true \
  --set gateway.autoscaling.targetMemoryUtilizationPercentage=75 \
  --set gateway.networkPolicy.enabled=true \
  --set 'gateway.networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\.io/metadata\.name=monitoring' \
  --set tracing.enabled=true --set tracing.otlp.endpoint=https://otel-collector.obs.svc:4318 \
  --set tracing.otlp.protocol=http/protobuf --set tracing.otlp.headersSecret.name=otlp-auth \
  --set tracing.otlp.caConfigMap.name=otlp-ca --set gateway.audit.log=/tmp/audit.jsonl >"$dir/rendered-hpa.yaml"
check "autoscaling on: kubectl apply --server-side accepted" \
  kubectl apply --server-side --field-manager=helm-template -f "$dir/rendered-hpa.yaml"
expect "NetworkPolicy (stored): selects the gateway pods; 8080 from anywhere; 9091 from gateway pods + monitoring namespace" \
  "edge-switchboard-gateway gateway Ingress http:;internal:gateway,monitoring,;" \
  kubectl -n "$ns2" get networkpolicy edge-switchboard-gateway -o 'jsonpath={.metadata.name} {.spec.podSelector.matchLabels.app\.kubernetes\.io/component} {.spec.policyTypes[*]} {range .spec.ingress[*]}{.ports[0].port}:{range .from[*]}{.podSelector.matchLabels.app\.kubernetes\.io/component}{.namespaceSelector.matchLabels.kubernetes\.io/metadata\.name},{end};{end}'
for d in edge-switchboard-gateway edge-switchboard-operator; do
  expect "$d (stored): OTLP over http/protobuf, headers from Secret otlp-auth, CA from ConfigMap otlp-ca" \
    "https://otel-collector.obs.svc:4318 http/protobuf otlp-auth/headers /etc/switchboard/otlp-ca/ca.crt otlp-ca /etc/switchboard/otlp-ca" \
    kubectl -n "$ns2" get deploy "$d" -o 'jsonpath={.spec.template.spec.containers[0].env[?(@.name=="OTEL_EXPORTER_OTLP_ENDPOINT")].value} {.spec.template.spec.containers[0].env[?(@.name=="OTEL_EXPORTER_OTLP_PROTOCOL")].value} {.spec.template.spec.containers[0].env[?(@.name=="OTEL_EXPORTER_OTLP_HEADERS")].valueFrom.secretKeyRef.name}/{.spec.template.spec.containers[0].env[?(@.name=="OTEL_EXPORTER_OTLP_HEADERS")].valueFrom.secretKeyRef.key} {.spec.template.spec.containers[0].env[?(@.name=="OTEL_EXPORTER_OTLP_CERTIFICATE")].value} {.spec.template.spec.volumes[?(@.name=="otlp-ca")].configMap.name} {.spec.template.spec.containers[0].volumeMounts[?(@.name=="otlp-ca")].mountPath}'
done
expect "HPA: autoscaling/v2, targets the gateway Deployment, 2..10, cpu 80% mem 75%" \
  "Deployment edge-switchboard-gateway 2 10 cpu=80,memory=75," \
  kubectl -n "$ns2" get hpa.v2.autoscaling edge-switchboard-gateway \
  -o 'jsonpath={.spec.scaleTargetRef.kind} {.spec.scaleTargetRef.name} {.spec.minReplicas} {.spec.maxReplicas} {range .spec.metrics[*]}{.resource.name}={.resource.target.averageUtilization},{end}'
check "autoscaling on: gateway Deployment/Service/PDB exist" \
  kubectl -n "$ns2" get deploy/edge-switchboard-gateway svc/edge-switchboard-gateway pdb/edge-switchboard-gateway
check "autoscaling on: operator args name this release" bash -c "
  kubectl -n $ns2 get deploy/edge-switchboard-operator -o 'jsonpath={.spec.template.spec.containers[0].args[*]}' |
  grep -qF -- '--gateway-service-account $ns2:edge-switchboard-gateway --snapshot-secret edge-switchboard-snapshot --lease-name edge-switchboard-operator'"

# The longest release name Helm allows (53 characters): every name is valid.
long=$(printf 'r%.0s' {1..53})
check "53-character release name: server dry-run accepts every object" bash -c "
  helm template $long $chart --namespace $ns | kubectl apply --server-side --dry-run=server --field-manager=helm-template -f -"

# Kubernetes-typed values against the API server: what the schema takes (a values file and the
# --set list of section 2), the API server takes and stores as given, with kubectl's strict
# field validation; what the schema refuses, the API server refuses too when the chart is
# rendered without it (helm --skip-schema-validation).
ns_file=values-file ns_set=values-set
check "create namespaces $ns_file and $ns_set" bash -c "kubectl create namespace $ns_file && kubectl create namespace $ns_set"
apply_rendered() { # release namespace values...: helm template | kubectl apply --server-side
  local release=$1 namespace=$2; shift 2
  helm template "$release" "$chart" -n "$namespace" "$@" | kubectl apply --server-side --field-manager=helm-template -f -
}
check "$kube_values: every object applied server-side" apply_rendered prod "$ns_file" -f "$kube_values"
kf() { kubectl -n "$ns_file" get "$1" -o "jsonpath=$2"; }
expect "stored (file): operator resources, pod security context, probes" \
  "100m 500m 100Mi 1Gi OnRootMismatch 4000 s0:c123,c456 1 15 2 RuntimeDefault" \
  kf deploy/prod-switchboard-operator '{.spec.template.spec.containers[0].resources.requests.cpu} {.spec.template.spec.containers[0].resources.limits.cpu} {.spec.template.spec.containers[0].resources.requests.ephemeral-storage} {.spec.template.spec.containers[0].resources.limits.ephemeral-storage} {.spec.template.spec.securityContext.fsGroupChangePolicy} {.spec.template.spec.securityContext.supplementalGroups[*]} {.spec.template.spec.securityContext.seLinuxOptions.level} {.spec.template.spec.containers[0].livenessProbe.successThreshold} {.spec.template.spec.containers[0].livenessProbe.terminationGracePeriodSeconds} {.spec.template.spec.containers[0].readinessProbe.successThreshold} {.spec.template.spec.containers[0].securityContext.appArmorProfile.type}'
expect "stored (file): operator strategy, env from the downward API, volume mode, scheduling" \
  "50% 25% spec.nodeName limits.memory 1Mi 292 linux Equal amd64 arm64 ScheduleAnyway platform-critical 45" \
  kf deploy/prod-switchboard-operator '{.spec.strategy.rollingUpdate.maxSurge} {.spec.strategy.rollingUpdate.maxUnavailable} {.spec.template.spec.containers[0].env[?(@.name=="NODE_NAME")].valueFrom.fieldRef.fieldPath} {.spec.template.spec.containers[0].env[?(@.name=="MEMORY_LIMIT_MIB")].valueFrom.resourceFieldRef.resource} {.spec.template.spec.containers[0].env[?(@.name=="MEMORY_LIMIT_MIB")].valueFrom.resourceFieldRef.divisor} {.spec.template.spec.volumes[?(@.name=="corporate-ca")].configMap.defaultMode} {.spec.template.spec.nodeSelector.kubernetes\.io/os} {.spec.template.spec.tolerations[0].operator} {.spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[*]} {.spec.template.spec.topologySpreadConstraints[0].whenUnsatisfiable} {.spec.template.spec.priorityClassName} {.spec.template.spec.terminationGracePeriodSeconds}'
expect "stored (file): gateway resources, security contexts (merged with the chart's), probes" \
  "250m 2 1Gi 2Gi Always 4000 4001 net.ipv4.ip_unprivileged_port_start NET_BIND_SERVICE ALL true 15 1 1" \
  kf deploy/prod-switchboard-gateway '{.spec.template.spec.containers[0].resources.requests.cpu} {.spec.template.spec.containers[0].resources.limits.cpu} {.spec.template.spec.containers[0].resources.requests.ephemeral-storage} {.spec.template.spec.containers[0].resources.limits.ephemeral-storage} {.spec.template.spec.securityContext.fsGroupChangePolicy} {.spec.template.spec.securityContext.supplementalGroups[*]} {.spec.template.spec.securityContext.sysctls[0].name} {.spec.template.spec.containers[0].securityContext.capabilities.add[*]} {.spec.template.spec.containers[0].securityContext.capabilities.drop[*]} {.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem} {.spec.template.spec.containers[0].livenessProbe.initialDelaySeconds} {.spec.template.spec.containers[0].readinessProbe.initialDelaySeconds} {.spec.template.spec.containers[0].readinessProbe.timeoutSeconds}'
expect "stored (file): gateway volumes and mounts, env from Secret and ConfigMap, scheduling" \
  "1Gi Memory 128Mi 288 vault 3600 gateway-cache gateway None upstream-credentials true cluster-info 30 2 DoNotSchedule Honor pod-template-hash kubernetes.io/hostname 50" \
  kf deploy/prod-switchboard-gateway '{.spec.template.spec.volumes[?(@.name=="audit")].emptyDir.sizeLimit} {.spec.template.spec.volumes[?(@.name=="spool")].emptyDir.medium} {.spec.template.spec.volumes[?(@.name=="spool")].emptyDir.sizeLimit} {.spec.template.spec.volumes[?(@.name=="corporate-ca")].secret.defaultMode} {.spec.template.spec.volumes[?(@.name=="vault-token")].projected.sources[0].serviceAccountToken.audience} {.spec.template.spec.volumes[?(@.name=="vault-token")].projected.sources[0].serviceAccountToken.expirationSeconds} {.spec.template.spec.volumes[?(@.name=="cache")].persistentVolumeClaim.claimName} {.spec.template.spec.containers[0].volumeMounts[?(@.name=="cache")].subPath} {.spec.template.spec.containers[0].volumeMounts[?(@.name=="cache")].mountPropagation} {.spec.template.spec.containers[0].env[?(@.name=="UPSTREAM_TOKEN")].valueFrom.secretKeyRef.name} {.spec.template.spec.containers[0].env[?(@.name=="UPSTREAM_TOKEN")].valueFrom.secretKeyRef.optional} {.spec.template.spec.containers[0].env[?(@.name=="REGION")].valueFrom.configMapKeyRef.name} {.spec.template.spec.tolerations[1].tolerationSeconds} {.spec.template.spec.topologySpreadConstraints[0].minDomains} {.spec.template.spec.topologySpreadConstraints[0].whenUnsatisfiable} {.spec.template.spec.topologySpreadConstraints[0].nodeAffinityPolicy} {.spec.template.spec.topologySpreadConstraints[0].matchLabelKeys[*]} {.spec.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey} {.spec.template.spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight}'
expect "stored (file): labels, annotations, pull secrets, HPA behavior, Ingress TLS, NetworkPolicy peers, settings" \
  "production 4711 true platform regcred 300 Max 2 mcp-example-com-tls 10.0.99.0/24 platform" \
  bash -c "echo \$(kubectl -n $ns_file get deploy/prod-switchboard-gateway -o 'jsonpath={.metadata.labels.environment} {.metadata.labels.cost-center} {.spec.template.metadata.annotations.cluster-autoscaler\.kubernetes\.io/safe-to-evict} {.spec.template.metadata.labels.team} {.spec.template.spec.imagePullSecrets[0].name}') \
    \$(kubectl -n $ns_file get hpa/prod-switchboard-gateway -o 'jsonpath={.spec.behavior.scaleDown.stabilizationWindowSeconds} {.spec.behavior.scaleDown.selectPolicy} {.spec.behavior.scaleDown.policies[1].value}') \
    \$(kubectl -n $ns_file get ingress/prod-switchboard-gateway -o 'jsonpath={.spec.tls[0].secretName}') \
    \$(kubectl -n $ns_file get networkpolicy/prod-switchboard-gateway -o 'jsonpath={.spec.ingress[0].from[0].ipBlock.except[0]}') \
    \$(kubectl -n $ns_file get configmap/prod-switchboard-dashboard -o 'jsonpath={.metadata.labels.team}')"
check "stored (file): gateway.settings in the operator's ConfigMap as written" bash -c "
  kubectl -n $ns_file get configmap/prod-switchboard-operator-gateway-settings -o 'jsonpath={.data.gateway-settings\.yaml}' | python3 -c '
import sys, yaml
got = yaml.safe_load(sys.stdin)[\"gateway\"]
want = yaml.safe_load(open(\"$kube_values\"))[\"gateway\"][\"settings\"]
assert got == want, (got, want)'"
check "the --set list of section 2: every object applied server-side" apply_rendered sets "$ns_set" "${kube_sets[@]}"
expect "stored (--set): operator limits.cpu, fsGroupChangePolicy, a toleration" "500m OnRootMismatch Exists" \
  kubectl -n "$ns_set" get deploy/sets-switchboard-operator -o 'jsonpath={.spec.template.spec.containers[0].resources.limits.cpu} {.spec.template.spec.securityContext.fsGroupChangePolicy} {.spec.template.spec.tolerations[0].operator}'
expect "stored (--set): gateway limits.cpu, ephemeral-storage, probes, supplementalGroups, strategy, annotation" \
  "2 1Gi 3 1 4000 4001 50% 0 9091" \
  kubectl -n "$ns_set" get deploy/sets-switchboard-gateway -o 'jsonpath={.spec.template.spec.containers[0].resources.limits.cpu} {.spec.template.spec.containers[0].resources.requests.ephemeral-storage} {.spec.template.spec.containers[0].readinessProbe.initialDelaySeconds} {.spec.template.spec.containers[0].livenessProbe.successThreshold} {.spec.template.spec.securityContext.supplementalGroups[*]} {.spec.strategy.rollingUpdate.maxSurge} {.spec.strategy.rollingUpdate.maxUnavailable} {.spec.template.metadata.annotations.prometheus\.io/port}'
refused_by_api_server() { # --set...: rendered without the schema, a server-side dry run
  helm template refused "$chart" -n "$ns_set" --skip-schema-validation "$@" | kubectl apply --dry-run=server -f -
}
for refusal in "${kube_refusals[@]}"; do
  IFS='|' read -r set _ api <<<"$refusal"
  check_fails "the API server refuses --set $set too (rendered without the schema)" "$api" \
    refused_by_api_server --set "$set"
done

# gateway.settings against the operator itself: rendered without the schema, each setting the
# schema refuses makes the operator exit at start naming it (what a user met after a
# successful `helm install`); the accepted ones it serves with.
check "create namespace settings-check" kubectl create namespace settings-check
operator_reads_settings() { # --set...: the operator reads gateway.settings as the chart renders them
  local file out pid
  file=$(mktemp "$dir/settings.XXXXXX") out=$(mktemp "$dir/operator.XXXXXX")
  helm template sb "$chart" -n settings-check --skip-schema-validation -s templates/gateway-settings-configmap.yaml "$@" |
    python3 -c 'import sys, yaml; sys.stdout.write(yaml.safe_load(sys.stdin)["data"]["gateway-settings.yaml"])' >"$file" || return 1
  "$operator_bin" --namespace settings-check --snapshot-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    --lease-name settings-check --snapshot-secret settings-check --gateway-settings "$file" >"$out" 2>&1 &
  pid=$!
  # Until it serves (its line on stdout) or fails (anyhow's "Error: ..."), whichever comes first.
  timeout 60 bash -c "until grep -qE '^(Error: |switchboard-operator snapshot stream on)' '$out'; do sleep 0.1; done" || true
  if grep -q '^switchboard-operator snapshot stream on' "$out"; then
    kill "$pid"; wait "$pid" || true; return 0
  fi
  kill "$pid" 2>/dev/null || true; wait "$pid" || true
  cat "$out"; return 1
}
check "the operator serves with settings the schema takes (the --set list's and the rest)" operator_reads_settings \
  "${kube_sets[@]}" --set 'gateway.settings.listingTtl=1m 30s' --set 'gateway.settings.allowedOrigins={https://app.example.com}' \
  --set gateway.settings.publicUrl=https://mcp.example.com
for refusal in "${settings_refusals[@]}"; do
  IFS='|' read -r set _ operator_says <<<"$refusal"
  check_fails "the operator exits on --set $set, naming it (rendered without the schema)" "$operator_says" \
    operator_reads_settings --set "$set"
done

# ---- 4. helm install / upgrade / uninstall ---------------------------------------------------
ns3=helm-install
check "helm install (CRDs already present; no --wait: nothing runs)" \
  helm install hi "$chart" --namespace "$ns3" --create-namespace --timeout 60s
release_status() { helm status "$@" | sed -n 's/^STATUS: //p'; }
expect "helm status: deployed" deployed release_status hi -n "$ns3"
check "helm upgrade (gateway.replicas=3)" helm upgrade hi "$chart" --namespace "$ns3" --set gateway.replicas=3 --timeout 60s
expect "upgrade applied" 3 kubectl -n "$ns3" get deploy/hi-switchboard-gateway -o 'jsonpath={.spec.replicas}'
check "helm upgrade to autoscaling (HPA created)" bash -c "
  helm upgrade hi $chart --namespace $ns3 --set gateway.autoscaling.enabled=true --timeout 60s >/dev/null &&
  kubectl -n $ns3 get hpa/hi-switchboard-gateway"
check "helm uninstall removes the objects, keeps the CRDs" bash -c "
  helm uninstall hi --namespace $ns3 --timeout 60s >/dev/null &&
  kubectl -n $ns3 wait --for=delete deploy/hi-switchboard-gateway deploy/hi-switchboard-operator --timeout=30s &&
  ! kubectl get clusterrole hi-switchboard-operator >/dev/null 2>&1 &&
  kubectl get crd mcpservers.switchboard.dev >/dev/null"

echo "$passed passed, $failed failed"
((failed == 0))
