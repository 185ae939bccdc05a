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
Host names the gateway accepts: its Service's DNS names, the publicUrl host, gateway.allowedHosts.
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
{{- $hosts | uniq | join "," }}
{{- end }}

{{/* Image reference: repository:tag, tag defaulting to the chart's appVersion. */}}
{{- define "switchboard.image" -}}
{{- printf "%s:%s" .image.repository (toString (.image.tag | default .chart.AppVersion)) }}
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
