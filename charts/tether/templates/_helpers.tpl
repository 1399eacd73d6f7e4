{{/*
The name of the release's objects, namespaced and cluster-scoped alike: the release's name,
followed by "-tether" unless it already holds "tether". The release `tether` gets exactly
deploy/'s names (tether, tether-leader-election, tether-stickybindings-view, ...), and a release
of another name never collides with them.
*/}}
{{- define "tether.fullname" -}}
{{- if contains "tether" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-tether" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
The label the selectors use, alone, as deploy/'s do (a Deployment's selector cannot change once
it exists). One release per namespace, then.
*/}}
{{- define "tether.selectorLabels" -}}
app.kubernetes.io/name: tether
{{- end -}}

{{/* The recommended labels, as deploy/'s kustomization sets them, on every pod. */}}
{{- define "tether.podLabels" -}}
{{ include "tether.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scheduler
app.kubernetes.io/part-of: tether
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The recommended labels and the chart's, on every object. */}}
{{- define "tether.labels" -}}
{{ include "tether.podLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The image: repository:tag (the chart's appVersion unless image.tag is set), or @digest. */}}
{{- define "tether.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}
