{{/* Names, labels and the values derived from several keys. */}}

{{- define "wsload.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* <release>-wsload, or <release> when it already says wsload; 63 characters at most. */}}
{{- define "wsload.fullname" -}}
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

{{- define "wsload.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "wsload.labels" -}}
helm.sh/chart: {{ include "wsload.chart" . }}
app.kubernetes.io/name: {{ include "wsload.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: wsload
{{- end }}

{{/* The operator's pods: what its Deployment, Service and ServiceMonitor select on. */}}
{{- define "wsload.selectorLabels" -}}
app.kubernetes.io/name: {{ include "wsload.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "wsload.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "wsload.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The one namespace a namespaced install watches; empty for a cluster-wide one. */}}
{{- define "wsload.watchNamespace" -}}
{{- if .Values.rbac.namespaced }}
{{- default .Release.Namespace .Values.watchNamespace }}
{{- else if .Values.watchNamespace }}
{{- fail "watchNamespace is only used by a namespaced install: set rbac.namespaced=true as well, or leave watchNamespace empty to watch every namespace" }}
{{- end }}
{{- end }}

{{/* repository:tag, the tag defaulting to the chart's appVersion. Argument: an image dict and the root. */}}
{{- define "wsload.image" -}}
{{- $image := index . 0 }}
{{- $root := index . 1 }}
{{- printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) }}
{{- end }}

{{/*
A placement as the JSON the operator parses (WSLOAD_OPERATOR_*_PLACEMENT): only the parts that
are set, since an empty `affinity: {}` would count as a placement of its own; empty when
nothing is set (the variable is then left out).
*/}}
{{- define "wsload.placementJson" -}}
{{- $p := dict }}
{{- with .nodeSelector }}{{ $_ := set $p "nodeSelector" . }}{{ end }}
{{- with .tolerations }}{{ $_ := set $p "tolerations" . }}{{ end }}
{{- with .affinity }}{{ $_ := set $p "affinity" . }}{{ end }}
{{- if $p }}{{ toJson $p }}{{ end }}
{{- end }}

{{/* namespaceSelector of the server ServiceMonitor and the shard PodMonitor. */}}
{{- define "wsload.monitorNamespaceSelector" -}}
{{- $watch := include "wsload.watchNamespace" . }}
{{- if $watch }}
matchNames:
  - {{ $watch }}
{{- else }}
any: true
{{- end }}
{{- end }}

{{/* interval, scrapeTimeout, relabelings, metricRelabelings of a monitor endpoint. */}}
{{- define "wsload.monitorEndpoint" -}}
{{- with .interval }}
interval: {{ . }}
{{- end }}
{{- with .scrapeTimeout }}
scrapeTimeout: {{ . }}
{{- end }}
{{- with .relabelings }}
relabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
