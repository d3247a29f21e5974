{{/*
Names, labels and images shared by every template of the kruntimes chart.
*/}}

{{/* The release-scoped base name of every object (63 characters at most). */}}
{{- define "kruntimes.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
The name of one of the release's objects: the fullname and a suffix, at most 63 characters
(a DNS-1123 label: Services and most objects need one). A long fullname is cut, the suffix
is kept, so every object stays distinct. Include with (dict "root" $ "suffix" "-gateway").
*/}}
{{- define "kruntimes.objectName" -}}
{{- $suffix := .suffix -}}
{{- $base := include "kruntimes.fullname" .root | trunc (int (sub 63 (len $suffix))) | trimSuffix "-" -}}
{{- printf "%s%s" $base $suffix -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "kruntimes.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kruntimes
{{- end -}}

{{/* Selector labels of one component: include with (dict "root" $ "component" "gateway"). */}}
{{- define "kruntimes.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels of one component's objects. */}}
{{- define "kruntimes.componentLabels" -}}
{{ include "kruntimes.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* An image reference: include with (dict "root" $ "image" .Values.images.gateway). */}}
{{- define "kruntimes.image" -}}
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

{{- define "kruntimes.controlplane.name" -}}
{{- include "kruntimes.objectName" (dict "root" . "suffix" "-controlplane") -}}
{{- end -}}

{{- define "kruntimes.gateway.name" -}}
{{- include "kruntimes.objectName" (dict "root" . "suffix" "-gateway") -}}
{{- end -}}

{{/* The control plane's leader-election Lease (release namespace): one per release. */}}
{{- define "kruntimes.controlplane.leaseName" -}}
{{- .Values.controlplane.leaderElection.leaseName | default (include "kruntimes.controlplane.name" .) -}}
{{- end -}}

{{/* The Service name is fixed by the spec: Run endpoints are https://runtime-gateway.<ns>.svc... */}}
{{- define "kruntimes.gateway.serviceName" -}}runtime-gateway{{- end -}}

{{/* Name of the Secret holding the gateway's serving certificate. */}}
{{- define "kruntimes.gateway.tlsSecretName" -}}
{{- $tls := .Values.gateway.tls -}}
{{- if $tls.certManager.enabled -}}
{{- $tls.secretName | default "runtime-gateway-tls" -}}
{{- else -}}
{{- required "gateway.tls.secretName is required: name an existing kubernetes.io/tls Secret with the gateway's serving certificate, or set gateway.tls.certManager.enabled=true" $tls.secretName -}}
{{- end -}}
{{- end -}}

{{/* DNS names the gateway's serving certificate must cover. */}}
{{- define "kruntimes.gateway.dnsNames" -}}
{{- $svc := include "kruntimes.gateway.serviceName" . -}}
- {{ $svc }}
- {{ $svc }}.{{ .Release.Namespace }}
- {{ $svc }}.{{ .Release.Namespace }}.svc
- {{ $svc }}.{{ .Release.Namespace }}.svc.cluster.local
{{- range .Values.gateway.tls.certManager.extraDnsNames }}
- {{ . }}
{{- end }}
{{- end -}}

{{/* The gateway base URL runtimed publishes: runtimed.gatewayURL, else this release's gateway Service (empty without a gateway). */}}
{{- define "kruntimes.runtimed.gatewayURL" -}}
{{- if .Values.runtimed.gatewayURL -}}
{{- .Values.runtimed.gatewayURL -}}
{{- else if .Values.gateway.enabled -}}
{{- printf "https://%s.%s.svc.cluster.local" (include "kruntimes.gateway.serviceName" .) .Release.Namespace -}}
{{- if ne (int .Values.gateway.service.port) 443 -}}:{{ .Values.gateway.service.port }}{{- end -}}
{{- end -}}
{{- end -}}

{{/* Fail early on value combinations that cannot work (single values: values.schema.json). */}}
{{- define "kruntimes.validate" -}}
{{- if and .Values.runtimed.peerTLS.enabled (not .Values.runtimed.peerTLS.secretName) -}}
{{- fail "runtimed.peerTLS.secretName is required when runtimed.peerTLS.enabled is true" -}}
{{- end -}}
{{- if and .Values.gateway.enabled (lt (int .Values.gateway.replicas) 1) -}}
{{- fail "gateway.replicas must be at least 1 when gateway.enabled is true" -}}
{{- end -}}
{{- end -}}
