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

{{/* The Prometheus pod (prometheus.install): what its Deployment and Service select on. */}}
{{- define "wsload.prometheusSelectorLabels" -}}
app.kubernetes.io/name: {{ include "wsload.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: prometheus
{{- end }}

{{/*
The namespaces the Prometheus discovers pods in, as a JSON list: in a namespaced install the
watched one (servers, shards) and the release namespace (the operator); [] (every namespace)
in a cluster-wide install.
*/}}
{{- define "wsload.prometheusNamespaces" -}}
{{- with include "wsload.watchNamespace" . }}
{{- list . $.Release.Namespace | uniq | toJson }}
{{- else -}}
[]
{{- end }}
{{- end }}

{{/*
prometheus.yml of the chart's Prometheus: every pod annotated prometheus.io/scrape=true, on the
annotated port and path. Target labels: namespace, pod, node and the pod's labels
(wsload.dev/loadtest becomes wsload_dev_loadtest, ...); the shards' own series carry test and
shard, which the dashboards filter on.
*/}}
{{- define "wsload.prometheusConfig" -}}
{{- $p := .Values.prometheus }}
{{- $namespaces := include "wsload.prometheusNamespaces" . | fromJsonArray -}}
# Rendered by the wsload chart (prometheus.install); `helm upgrade` to change it.
global:
  scrape_interval: {{ $p.scrapeInterval }}
  evaluation_interval: {{ $p.scrapeInterval }}
  {{- with $p.scrapeTimeout }}
  scrape_timeout: {{ . }}
  {{- end }}
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: [localhost:9090]
  - job_name: kubernetes-pods
    kubernetes_sd_configs:
      - role: pod
        {{- with $namespaces }}
        namespaces:
          names:
            {{- toYaml . | nindent 12 }}
        {{- end }}
    relabel_configs:
      # Only pods that ask for it (the operator, managed servers and shards all do).
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
        regex: "true"
        action: keep
      # Pods not running serve nothing: no IP yet, or a finished shard.
      - source_labels: [__meta_kubernetes_pod_phase]
        regex: Pending|Succeeded|Failed|Unknown
        action: drop
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
        regex: (.+)
        target_label: __metrics_path__
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scheme]
        regex: (https?)
        target_label: __scheme__
      # The annotated port on the pod's IP (v4, then v6). One target per declared container
      # port is discovered; with equal labels after this they collapse into one.
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port, __meta_kubernetes_pod_ip]
        regex: (\d+);((([0-9]+?)(\.|$)){4})
        replacement: $2:$1
        target_label: __address__
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port, __meta_kubernetes_pod_ip]
        regex: (\d+);(([A-Fa-f0-9]{1,4}::?){1,7}[A-Fa-f0-9]{1,4})
        replacement: "[$2]:$1"
        target_label: __address__
      - action: labelmap
        regex: __meta_kubernetes_pod_label_(.+)
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
      - source_labels: [__meta_kubernetes_pod_node_name]
        target_label: node
{{- end }}
