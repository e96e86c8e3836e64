{{/* The chart's name. */}}
{{- define "xds-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Resource names: the release name when it holds the chart's name. */}}
{{- define "xds-gateway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "xds-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "xds-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "xds-gateway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "xds-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: xds-gateway
{{- end }}

{{/* Whether the --config file is rendered (upstream tables or settings). */}}
{{- define "xds-gateway.hasConfig" -}}
{{- if or .Values.upstreams .Values.config }}true{{ end }}
{{- end }}

{{/* The --config file: top-level settings, then [[upstream]] tables. A value
     is written as JSON, which TOML reads alike for strings, numbers,
     booleans and arrays of them. */}}
{{- define "xds-gateway.configFile" -}}
# Rendered by the xds-gateway Helm chart (values `config` and `upstreams`).
{{- range $key, $value := .Values.config }}
{{ $key }} = {{ toJson $value }}
{{- end }}
{{- range .Values.upstreams }}

[[upstream]]
{{- range $key, $value := . }}
{{ $key }} = {{ toJson $value }}
{{- end }}
{{- end }}
{{ end }}

{{/* Fails on values that cannot make a working gateway. */}}
{{- define "xds-gateway.validate" -}}
{{- $sources := 0 }}
{{- if .Values.upstream }}{{ $sources = add1 $sources }}{{ end }}
{{- if .Values.upstreams }}{{ $sources = add1 $sources }}{{ end }}
{{- if .Values.snapshot.files }}{{ $sources = add1 $sources }}{{ end }}
{{- if gt $sources 1 }}
{{- fail "set at most one of upstream, upstreams and snapshot.files" }}
{{- end }}
{{- if and (.Values.config | default dict).upstream (or .Values.upstream .Values.upstreams) }}
{{- fail "config.upstream: use upstream or upstreams instead" }}
{{- end }}
{{- if and .Values.upstreamTLS.secretName (not .Values.upstream) (not .Values.upstreams) }}
{{- fail "upstreamTLS needs upstream or upstreams" }}
{{- end }}
{{- if and .Values.authPolicy.policy .Values.authPolicy.existingSecret }}
{{- fail "authPolicy: set policy or existingSecret, not both" }}
{{- end }}
{{- range list .Values.tls .Values.adminTLS }}
{{- if and .clientCA.secretName .clientCA.configMapName }}
{{- fail "clientCA: set secretName or configMapName, not both" }}
{{- end }}
{{- if and (or .clientCA.secretName .clientCA.configMapName) (not .secretName) }}
{{- fail "clientCA (mTLS) needs the listener's TLS secretName" }}
{{- end }}
{{- end }}
{{- if and (or .Values.adminTLS.clientCA.secretName .Values.adminTLS.clientCA.configMapName) (ne .Values.adminTLS.clientAuth "optional") }}
{{- fail "adminTLS.clientCA needs adminTLS.clientAuth: optional (the kubelet's probes present no client certificate)" }}
{{- end }}
{{- $adminCredential := or .Values.adminTLS.clientCA.secretName .Values.adminTLS.clientCA.configMapName .Values.authPolicy.policy .Values.authPolicy.existingSecret }}
{{- if and (not .Values.networkPolicy.enabled) (not $adminCredential) (not .Values.allowInsecureAdmin) }}
{{- fail "the admin port (/debug/config, CSDS: every node's config) would be open to every pod that reaches it, with no credential: keep networkPolicy.enabled (it admits only pods labelled networkPolicy.adminLabels), give the admin listener a credential (an auth policy with an [admin] token, or adminTLS.clientCA), or set allowInsecureAdmin: true if the network in front of it is trusted" }}
{{- end }}
{{- end }}

{{/* The auth policy's Secret name, if any. */}}
{{- define "xds-gateway.authPolicySecret" -}}
{{- if .Values.authPolicy.existingSecret }}
{{- .Values.authPolicy.existingSecret }}
{{- else if .Values.authPolicy.policy }}
{{- include "xds-gateway.fullname" . }}-auth-policy
{{- end }}
{{- end }}
