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

{{/* Fail early on a Runtime entry that cannot work: include with (dict "key" "python" "rt" .Values.python). */}}
{{- define "runtimes.validate" -}}
{{- $rt := .rt -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" (toString $rt.name)) -}}
{{- fail (printf "%s.name %q must be a DNS-1123 label (lowercase letters, digits, '-')" .key (toString $rt.name)) -}}
{{- end -}}
{{- if gt (len (toString $rt.name)) 63 -}}
{{- fail (printf "%s.name must be at most 63 characters" .key) -}}
{{- end -}}
{{- if lt (int $rt.replicas) 0 -}}
{{- fail (printf "%s.replicas must be 0 or more, not %v" .key $rt.replicas) -}}
{{- end -}}
{{- range $resource, $amount := $rt.capacity -}}
{{- if not (kindIs "float64" $amount) | and (not (kindIs "int" $amount)) | and (not (kindIs "int64" $amount)) -}}
{{- fail (printf "%s.capacity.%s must be a whole number, not %v" $.key $resource $amount) -}}
{{- end -}}
{{- if or (lt (float64 $amount) 0.0) (ne (float64 (int64 $amount)) (float64 $amount)) -}}
{{- fail (printf "%s.capacity.%s must be a whole number >= 0, not %v" $.key $resource $amount) -}}
{{- end -}}
{{- end -}}
{{- end -}}
