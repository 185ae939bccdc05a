{{/*
Chart name, or nameOverride.
*/}}
{{- define "switchboard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Prefix of every object name: fullnameOverride, else the release name when it already contains
the chart name, else "<release>-<name>". Cut to 54 characters so that "<fullname>-<component>"
(longest suffix: "-operator", "-snapshot") stays within 63.
*/}}
{{- define "switchboard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 54 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "switchboard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Component object names. */}}
{{- define "switchboard.operator.fullname" -}}
{{- printf "%s-operator" (include "switchboard.fullname" .) }}
{{- end }}
{{- define "switchboard.gateway.fullname" -}}
{{- printf "%s-gateway" (include "switchboard.fullname" .) }}
{{- end }}

{{- define "switchboard.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "switchboard.operator.fullname" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "switchboard.gateway.serviceAccountName" -}}
{{- if .Values.gateway.serviceAccount.create }}
{{- default (include "switchboard.gateway.fullname" .) .Values.gateway.serviceAccount.name }}
{{- else }}
{{- required "gateway.serviceAccount.name is required when gateway.serviceAccount.create is false" .Values.gateway.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "switchboard.leaseName" -}}
{{- default (include "switchboard.operator.fullname" .) .Values.operator.leaseName }}
{{- end }}

{{- define "switchboard.snapshotSecretName" -}}
{{- default (printf "%s-snapshot" (include "switchboard.fullname" .)) .Values.operator.snapshotSecretName }}
{{- end }}

{{/* In-cluster URL of the operator's snapshot stream. */}}
{{- define "switchboard.operator.url" -}}
{{- printf "%s://%s.%s.svc:%v" (include "switchboard.operator.scheme" .) (include "switchboard.operator.fullname" .) .Release.Namespace .Values.operator.service.port }}
{{- end }}

{{/*
The snapshot stream's scheme: https unless operator.deliveryTls.mode is off.
*/}}
{{- define "switchboard.operator.scheme" -}}
{{- $mode := .Values.operator.deliveryTls.mode }}
{{- if not (has $mode (list "managed" "secret" "off")) }}
{{- fail (printf "operator.deliveryTls.mode: %q is not one of managed, secret, off" $mode) }}
{{- end }}
{{- if and (eq $mode "secret") (not .Values.operator.deliveryTls.secretName) }}
{{- fail "operator.deliveryTls.secretName: required with mode secret" }}
{{- end }}
{{- if eq $mode "off" }}http{{ else }}https{{ end }}
{{- end }}

{{/*
The operator's CA Secret and trust bundle ConfigMap (operator.deliveryTls.mode managed).
*/}}
{{- define "switchboard.deliveryCaName" -}}
{{- printf "%s-delivery-ca" (include "switchboard.operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "switchboard.deliveryTrustName" -}}
{{- printf "%s-delivery-trust" (include "switchboard.operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Host names the gateway accepts: its Service's DNS names, the publicUrl host, gateway.allowedHosts,
and the Ingress hosts and HTTPRoute hostnames when those are enabled.
*/}}
{{- define "switchboard.gateway.allowedHosts" -}}
{{- $svc := include "switchboard.gateway.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $hosts := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) }}
{{- with .Values.gateway.publicUrl }}
{{- $host := (urlParse .).host }}
{{- if $host }}
{{- $hosts = append $hosts $host }}
{{- end }}
{{- end }}
{{- range .Values.gateway.allowedHosts }}
{{- $hosts = append $hosts . }}
{{- end }}
{{- if .Values.gateway.ingress.enabled }}
{{- range .Values.gateway.ingress.hosts }}
{{- $hosts = append $hosts . }}
{{- end }}
{{- end }}
{{- if .Values.gateway.httpRoute.enabled }}
{{- range .Values.gateway.httpRoute.hostnames }}
{{- $hosts = append $hosts . }}
{{- end }}
{{- end }}
{{- $hosts | uniq | join "," }}
{{- end }}

{{/* Image reference: repository:tag, tag defaulting to the chart's appVersion. */}}
{{- define "switchboard.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (toString (.image.tag | default .chart.AppVersion)) }}
{{- end }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "switchboard.labels" -}}
helm.sh/chart: {{ include "switchboard.chart" . }}
app.kubernetes.io/name: {{ include "switchboard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- with .Chart.AppVersion }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: switchboard
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: include with (dict "ctx" $ "component" "operator"). */}}
{{- define "switchboard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchboard.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "switchboard.componentLabels" -}}
{{ include "switchboard.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Default soft anti-affinity: spread one component's replicas over nodes. */}}
{{- define "switchboard.defaultAffinity" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "switchboard.selectorLabels" . | nindent 12 }}
{{- end }}

{{/*
OpenTelemetry export (tracing.*), the same for both components: include with
(dict "ctx" $ "service" "switchboard-gateway"). The env entries need POD_NAME defined before them.
*/}}
{{- define "switchboard.tracing.validate" -}}
{{- $t := .Values.tracing }}
{{- if $t.enabled }}
{{- if not $t.otlp.endpoint }}
{{- fail "tracing.otlp.endpoint: required with tracing.enabled (e.g. http://otel-collector.observability.svc:4317)" }}
{{- end }}
{{- if not (has $t.otlp.protocol (list "grpc" "http/protobuf")) }}
{{- fail (printf "tracing.otlp.protocol: %q is not one of grpc, http/protobuf" $t.otlp.protocol) }}
{{- end }}
{{- if or (lt (float64 $t.sampleRatio) 0.0) (gt (float64 $t.sampleRatio) 1.0) }}
{{- fail (printf "tracing.sampleRatio: %v is not between 0 and 1" $t.sampleRatio) }}
{{- end }}
{{- if and $t.otlp.caConfigMap.name $t.otlp.caSecret.name }}
{{- fail "tracing.otlp: set caConfigMap or caSecret, not both" }}
{{- end }}
{{- if and (or $t.otlp.caConfigMap.name $t.otlp.caSecret.name $t.otlp.clientCertificateSecret) (not (hasPrefix "https://" (lower $t.otlp.endpoint))) }}
{{- fail (printf "tracing.otlp.endpoint: %q is not https:// but a CA bundle or client certificate is set (the processes refuse TLS settings beside a plaintext endpoint)" $t.otlp.endpoint) }}
{{- end }}
{{- end }}
{{- end }}

{{- define "switchboard.tracing.env" -}}
{{- $t := .ctx.Values.tracing }}
{{- include "switchboard.tracing.validate" .ctx }}
{{- if $t.enabled }}
- name: OTEL_SERVICE_NAME
  value: {{ .service | quote }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $t.otlp.endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ $t.otlp.protocol | quote }}
{{- with $t.otlp.headersSecret.name }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ required "tracing.otlp.headersSecret.key: required with headersSecret.name" $t.otlp.headersSecret.key | quote }}
{{- end }}
{{- if or $t.otlp.caConfigMap.name $t.otlp.caSecret.name }}
- name: OTEL_EXPORTER_OTLP_CERTIFICATE
  value: /etc/switchboard/otlp-ca/ca.crt
{{- end }}
{{- if $t.otlp.clientCertificateSecret }}
- name: OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE
  value: /etc/switchboard/otlp-client/tls.crt
- name: OTEL_EXPORTER_OTLP_CLIENT_KEY
  value: /etc/switchboard/otlp-client/tls.key
{{- end }}
- name: OTEL_TRACES_SAMPLER
  value: parentbased_traceidratio
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ $t.sampleRatio | toString | quote }}
{{- $attrs := list (printf "k8s.namespace.name=%s" .ctx.Release.Namespace) "k8s.pod.name=$(POD_NAME)" }}
{{- range $k, $v := $t.resourceAttributes }}
{{- $attrs = append $attrs (printf "%s=%v" $k $v) }}
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $attrs | quote }}
{{- end }}
{{- end }}

{{/* The collector's CA bundle and the client certificate: mounts and volumes (empty without). */}}
{{- define "switchboard.tracing.volumeMounts" -}}
{{- $t := .Values.tracing }}
{{- if and $t.enabled (or $t.otlp.caConfigMap.name $t.otlp.caSecret.name) }}
- name: otlp-ca
  mountPath: /etc/switchboard/otlp-ca
  readOnly: true
{{- end }}
{{- if and $t.enabled $t.otlp.clientCertificateSecret }}
- name: otlp-client
  mountPath: /etc/switchboard/otlp-client
  readOnly: true
{{- end }}
{{- end }}
{{- define "switchboard.tracing.volumes" -}}
{{- $t := .Values.tracing }}
{{- if $t.enabled }}
{{- with $t.otlp.caConfigMap }}
{{- if .name }}
# The CA bundle the OTLP collector's certificate is verified with.
- name: otlp-ca
  configMap:
    name: {{ .name | quote }}
    items:
      - key: {{ .key | default "ca.crt" | quote }}
        path: ca.crt
{{- end }}
{{- end }}
{{- with $t.otlp.caSecret }}
{{- if .name }}
# The CA bundle the OTLP collector's certificate is verified with (only that key is mounted).
- name: otlp-ca
  secret:
    secretName: {{ .name | quote }}
    items:
      - key: {{ .key | default "ca.crt" | quote }}
        path: ca.crt
{{- end }}
{{- end }}
{{- with $t.otlp.clientCertificateSecret }}
# The client certificate presented to a collector that asks for one (mTLS): a
# kubernetes.io/tls Secret (e.g. cert-manager's); only tls.crt and tls.key are mounted.
- name: otlp-client
  secret:
    secretName: {{ . | quote }}
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end }}
{{- end }}
{{- end }}

{{/* The gateway's audit log destination: stdout, off, or an absolute file path. */}}
{{- define "switchboard.gateway.auditLog" -}}
{{- $log := toString .Values.gateway.audit.log }}
{{- if not (or (has $log (list "stdout" "off")) (hasPrefix "/" $log)) }}
{{- fail (printf "gateway.audit.log: %q is not stdout, off or an absolute file path" $log) }}
{{- end }}
{{- $log }}
{{- end }}

{{/*
Reserved names (operator.reservedNames.prefixes / .models: name -> list of namespaces) as the
operator's `<name>=<namespace>,...` flag value; names in sorted order.
*/}}
{{- define "switchboard.reservations" -}}
{{- $entries := list }}
{{- range $name := keys . | sortAlpha }}
{{- range $namespace := index $ $name }}
{{- $entries = append $entries (printf "%s=%s" $name $namespace) }}
{{- end }}
{{- end }}
{{- join "," $entries }}
{{- end }}

{{/*
The operator's RBAC rules (operator-rbac.yaml): what it needs in each namespace it watches, and
what has no namespace.
*/}}
{{- define "switchboard.operator.namespacedRules" }}
  # Read the resources users write.
  - apiGroups: ["switchboard.dev"]
    resources: ["mcpservers", "mcpvirtualservers", "mcpkeys", "modelroutes", "identityproviders"]
    verbs: ["get", "list", "watch"]
  # Write their status (server-side apply is a patch).
  - apiGroups: ["switchboard.dev"]
    resources: ["mcpservers/status", "mcpvirtualservers/status", "mcpkeys/status", "modelroutes/status", "identityproviders/status"]
    verbs: ["get", "patch", "update"]
  # Referenced credentials, generated key Secrets, and the snapshot Secret. No delete: key
  # Secrets are owned by their McpKey and go away by garbage collection.
  - apiGroups: [""]
    resources: ["secrets"]
    verbs: ["get", "list", "watch", "create", "update", "patch"]
  # ConfigMaps holding CA bundles (McpServer/ModelRoute spec.tls.caBundle.configMapKeyRef) and
  # OpenAPI documents (McpServer spec.openapi.document.configMapKeyRef).
  # Read only.
  - apiGroups: [""]
    resources: ["configmaps"]
    verbs: ["get", "list", "watch"]
  # McpServer spec.run: the Deployment, Services and autoscaler of each server the operator
  # runs (all owned by their McpServer, deleted with it), and its pods' status (read only,
  # selected by the operator's labels).
  - apiGroups: ["apps"]
    resources: ["deployments"]
    verbs: ["get", "list", "watch", "create", "patch", "delete"]
  - apiGroups: [""]
    resources: ["services"]
    verbs: ["get", "create", "patch", "delete"]
  - apiGroups: ["autoscaling"]
    resources: ["horizontalpodautoscalers"]
    verbs: ["get", "create", "patch", "delete"]
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get", "list", "watch"]
  # ... and the NetworkPolicy fencing each of those servers (owned by its McpServer too).
  - apiGroups: ["networking.k8s.io"]
    resources: ["networkpolicies"]
    verbs: ["get", "create", "patch", "delete"]
  # Events on transitions.
  - apiGroups: ["", "events.k8s.io"]
    resources: ["events"]
    verbs: ["create", "patch"]
{{- end }}
{{- define "switchboard.operator.clusterRules" }}
  # Authenticate gateway replicas by their ServiceAccount tokens.
  - apiGroups: ["authentication.k8s.io"]
    resources: ["tokenreviews"]
    verbs: ["create"]
  # Read the ServiceAccount issuer's public keys, which the gateways verify workload tokens with.
  - nonResourceURLs: ["/.well-known/openid-configuration", "/openid/v1/jwks"]
    verbs: ["get"]
{{- end }}

{{/*
The gateway settings the operator reads (--gateway-settings): gateway.settings, with `store` from
gateway.store (an existing Redis, or the demo one) when that is set. Empty when there are none.
*/}}
{{- define "switchboard.gatewaySettings" -}}
{{- $settings := deepCopy (.Values.gateway.settings | default dict) -}}
{{- $store := .Values.gateway.store -}}
{{- $url := $store.redisUrl -}}
{{- if and (not $url) $store.demoRedis.enabled -}}
{{- $url = printf "redis://%s.%s.svc:6379/0" (include "switchboard.demoRedis.fullname" .) .Release.Namespace -}}
{{- end -}}
{{- if $url -}}
{{- $redis := dict "url" $url -}}
{{- with $store.username }}{{ $_ := set $redis "username" . }}{{ end -}}
{{- if $store.passwordSecret.name -}}
{{- $_ := set $redis "password" (dict "file" (printf "/etc/switchboard/redis/%s" $store.passwordSecret.key)) -}}
{{- end -}}
{{- $_ := set $settings "store" (dict "redis" $redis) -}}
{{- end -}}
{{- if $settings }}{{ toYaml $settings }}{{ end -}}
{{- end }}

{{- define "switchboard.demoRedis.fullname" -}}
{{- printf "%s-demo-redis" (include "switchboard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
