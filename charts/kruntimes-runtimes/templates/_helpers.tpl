{{/*
Labels and images shared by the templates of the kruntimes-runtimes chart.
*/}}

{{- define "runtimes.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kruntimes
{{- end -}}

{{/*
The name of one of the release's objects: the release name and a suffix, at most 63
characters (the release name is cut, the suffix kept). Include with
(dict "root" $ "suffix" "-runtime-pods").
*/}}
{{- define "runtimes.objectName" -}}
{{- $suffix := .suffix -}}
{{- $base := .root.Release.Name | trunc (int (sub 63 (len $suffix))) | trimSuffix "-" -}}
{{- printf "%s%s" $base $suffix -}}
{{- end -}}

{{/* An image reference: include with (dict "root" $ "image" .Values.images.runtimed). */}}
{{- define "runtimes.image" -}}
{{- $images := .root.Values.images -}}
{{- $repo := .image.repository -}}
{{- if $images.registry -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" $images.registry) $repo -}}
{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repo .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.image.tag | default $images.tag | default .root.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}
