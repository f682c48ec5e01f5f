{{/* Chart name. */}}
{{- define "caplv.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: the release name, plus the chart name unless the release name contains it. */}}
{{- define "caplv.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* chart-version label value. */}}
{{- define "caplv.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Image tag: image.tag, else the chart's appVersion. */}}
{{- define "caplv.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{/* Selector labels (immutable in a Deployment: keep them few and stable). */}}
{{- define "caplv.selectorLabels" -}}
app.kubernetes.io/name: {{ include "caplv.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Standard labels for every object. */}}
{{- define "caplv.labels" -}}
helm.sh/chart: {{ include "caplv.chart" . }}
{{ include "caplv.selectorLabels" . }}
app.kubernetes.io/version: {{ include "caplv.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/component: manager
app.kubernetes.io/part-of: caplv
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The ServiceAccount the manager runs as (created by the chart or not). */}}
{{- define "caplv.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "caplv.fullname" .) -}}
{{- end -}}

{{/*
The enabled controller families, comma-separated, in a fixed order; fails rendering when none
is enabled (the manager would have nothing to do, and the ClusterRole would be incomplete).
*/}}
{{- define "caplv.controllers" -}}
{{- $enabled := list -}}
{{- range $family := list "caplv" "ignition" "fivespot" -}}
{{- if (index $.Values.controllers $family).enabled -}}
{{- $enabled = append $enabled $family -}}
{{- end -}}
{{- end -}}
{{- if not $enabled -}}
{{- fail "caplv: no controller family enabled: set at least one of controllers.caplv.enabled, controllers.ignition.enabled, controllers.fivespot.enabled to true" -}}
{{- end -}}
{{- join "," $enabled -}}
{{- end -}}

{{/* Checks of value combinations the schema cannot express. */}}
{{- define "caplv.validate" -}}
{{- $_ := include "caplv.controllers" . -}}
{{- if and .Values.controllers.caplv.enabled (eq .Values.workloadAccess.serviceAccountName (include "caplv.serviceAccountName" .)) -}}
{{- fail (printf "caplv: workloadAccess.serviceAccountName is %q, the manager's own ServiceAccount: Cluster API core's kubeconfig would carry the manager's permissions; choose another name" .Values.workloadAccess.serviceAccountName) -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) -}}
{{- fail (printf "caplv: replicaCount is %d but leaderElection.enabled is false: replicas would reconcile the same objects concurrently; enable leader election or use 1 replica" (int .Values.replicaCount)) -}}
{{- end -}}
{{- end -}}
